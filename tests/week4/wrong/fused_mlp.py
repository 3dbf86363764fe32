"""Known-wrong fused-MLP kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("gelu_grad_missing_pdf_term",
          "gelu's derivative taken as Phi(z) alone: the product rule's z phi(z) is forgotten",
          old="        grad = cdf + z * pdf\n",
          new="        grad = cdf\n",
          expect="elements differ", tests=("-k", "act_backward_kernel")),
    Wrong("k_tail_unmasked",
          "the dual GEMM loads whole BLOCK_K tiles of x: past K it reads the next row",
          old="        x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)\n"
              "        wg = tl.load(wg_ptrs,",
          new="        x = tl.load(x_ptrs)\n"
              "        wg = tl.load(wg_ptrs,",
          expect="out-of-bounds|elements differ", tests=("-k", "gate_up_kernel_matches")),
    Wrong("up_gradient_over_gate",
          "du is written over dg (the same half of dgu): the gate's gradient is lost",
          old="    tl.store(out + n_cols, (dh * silu).to(dgu_ptr.dtype.element_ty), mask=mask)\n",
          new="    tl.store(out, (dh * silu).to(dgu_ptr.dtype.element_ty), mask=mask)\n",
          expect="elements differ|nan", tests=("-k", "swiglu_backward_kernel")),
]
