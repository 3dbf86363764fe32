"""Known-wrong fused-linear kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

LESSON = "fused_linear/kernel.py"  # the lesson folder's module these bugs are planted in

WRONG = [
    Wrong("swiglu_up_reads_the_gate_rows",
          "the up accumulator loads the same W^T tile as the gate (no N-row offset): h = silu(g) * g",
          old="            w_u = tl.load(w_ptrs + N * stride_wn, mask=k_mask[:, None], other=0.0)\n",
          new="            w_u = tl.load(w_ptrs, mask=k_mask[:, None], other=0.0)\n",
          expect="elements differ", tests=("-k", "test_forward_matches_float64 and swiglu")),
    Wrong("norm_weight_of_the_first_columns",
          "the norm's column weights are indexed by the tile's offsets, not the K columns of this step",
          old="            a = normed_a_tile(a, rstd, nw_ptr, k * BLOCK_K + offs_k, k_mask, w_ptr.dtype.element_ty)\n",
          new="            a = normed_a_tile(a, rstd, nw_ptr, offs_k, k_mask, w_ptr.dtype.element_ty)\n",
          expect="elements differ", tests=("-k", "test_forward_matches_float64 and norm")),
    Wrong("weight_pointer_not_advanced",
          "W's pointer tile stays at the first BLOCK_K rows of W^T: every K step multiplies by the same slice",
          old="        w_ptrs += BLOCK_K * stride_wk\n",
          new="",
          expect="elements differ", tests=("-k", "test_forward_matches_float64")),
]
