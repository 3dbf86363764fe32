"""Known-wrong fused linear cross-entropy kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("ignored_rows_not_zeroed",
          "the fused kernel scales every row's gradient by the mean's 1 / N, ignored rows too: their gradient is "
          "softmax / N where torch's is 0 (and a target outside [0, V) is read as a class instead of giving NaN)",
          old='    g = tl.where(in_range, tl.load(scale_ptr).to(row_max.dtype), float("nan"))\n'
              "    g = tl.where(valid, g, 0.0)\n",
          new="    g = tl.load(scale_ptr).to(row_max.dtype)\n",
          expect="dlogits|differ", tests=("-k", "test_fwd_grad_kernel_matches_torch")),
    Wrong("gradient_from_rounded_lse",
          "the gradient's softmax is exp(x - lse) with lse = m + log d rounded to fp32 first: near 1e4 that "
          "rounding (up to half of fp32's spacing there, ~5e-4) lands in every softmax value's exponent",
          old="    write_row_grad(x_row, dlogits_ptr + row * dlogits_row_stride, target, row_max, log_sum, g, n_cols,\n",
          new="    write_row_grad(x_row, dlogits_ptr + row * dlogits_row_stride, target, row_max + log_sum, 0.0, g, n_cols,\n",
          expect="dlogits|differ", tests=("-k", "test_fwd_grad_kernel_at_logits_near_1e4")),
]
