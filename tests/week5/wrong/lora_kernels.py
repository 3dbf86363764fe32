"""Known-wrong LoRA kernels and gradients the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("adapter_scale_dropped",
          "the fused kernel forgets to scale x A^T by s = alpha / r before the second dot",
          old="    xa = tl.where(r_mask[None, :], xa * scale, 0.0)\n",
          new="    xa = tl.where(r_mask[None, :], xa, 0.0)\n",
          expect="elements differ", tests=("-k", "fused_forward_matches")),
    Wrong("d_b_from_the_input",
          "dB computed from the layer's input instead of xa = s x A^T (the adapter's own activation)",
          old="    d_b = dy.t() @ xa\n",
          new="    d_b = dy.t() @ (x_in @ lora_a.t())\n",
          expect="elements differ", tests=("-k", "gradients_match")),
    Wrong("k_tail_unmasked",
          "the epilogue kernel's K loop loads whole BLOCK_K tiles of x, past the end of each row",
          old="        x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)\n"
              "        w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)\n"
              "        acc = dot(x, w, acc, INPUT_PRECISION)\n"
              "        x_ptrs += BLOCK_K * stride_xk\n"
              "        w_ptrs += BLOCK_K * stride_wk\n"
              "    # Epilogue",
          new="        x = tl.load(x_ptrs)\n"
              "        w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)\n"
              "        acc = dot(x, w, acc, INPUT_PRECISION)\n"
              "        x_ptrs += BLOCK_K * stride_xk\n"
              "        w_ptrs += BLOCK_K * stride_wk\n"
              "    # Epilogue",
          expect="out-of-bounds|elements differ", tests=("-k", "two_pass_kernel_matches")),
]
