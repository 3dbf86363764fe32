"""Known-wrong residual add + RMSNorm kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("residual_gradient_dropped",
          "the backward returns the norm's gradient alone: dh, the gradient reaching h from the residual "
          "stream (h is also the block's output), is never added",
          old="        if HAS_DH:  # the residual stream's own gradient: h is also the block's output\n"
              "            dh_total += tl.load(dh_ptr + offsets, mask=mask, other=0.0).to(ACC)\n",
          new="",
          expect="dx", tests=("-k", "test_gradients_match_float64")),
    Wrong("backward_forgets_rstd",
          "dh_total = g - hhat * mean(g * hhat): the last factor rstd of the chain rule is dropped",
          old="        dh_total = (g - hhat * c1[:, None]) * rstd[:, None]\n",
          new="        dh_total = g - hhat * c1[:, None]\n",
          expect="dx", tests=("-k", "test_gradients_match_float64")),
    Wrong("inf_row_not_nan",
          "rstd from sum(h * h) alone: a row holding an Inf gets rstd = 0 and finite zeros beside the Inf, "
          "where torch's CUDA kernel (Welford: inf - inf) gives a row of NaN",
          old="    rstd = 1.0 / tl.sqrt(tl.sum(h * h + (h - h), axis=0) / N + eps)\n",
          new="    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)\n",
          expect="nan|elements differ", tests=("-k", "test_nan_and_inf_like_torch")),
    Wrong("dw_sums_h_not_hhat",
          "the weight gradient sums dy * h over the rows: each row's rstd is forgotten",
          old="            dw_acc += dy * hhat\n",
          new="            dw_acc += dy * h\n",
          expect="dw", tests=("-k", "test_gradients_match_float64 and True")),
]
