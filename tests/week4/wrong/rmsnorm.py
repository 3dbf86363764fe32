"""Known-wrong RMSNorm kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("backward_forgets_rstd",
          "dx = g - xhat * mean(g * xhat): the last factor rstd of the chain rule is dropped",
          old="        dx = (g - xhat * c1[:, None]) * rstd[:, None]\n",
          new="        dx = g - xhat * c1[:, None]\n",
          expect="dx", tests=("-k", "test_backward_matches_float64")),
    Wrong("dw_sums_x_not_xhat",
          "the weight gradient sums dy * x over the rows: each row's rstd is forgotten",
          old="            dw_acc += dy * xhat\n",
          new="            dw_acc += dy * x\n",
          expect="dw", tests=("-k", "test_backward_matches_float64")),
    Wrong("looped_mean_over_the_block",
          "the looped forward divides the sum of squares by the chunk width BLOCK_N instead of the row's N",
          old="    rstd = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / N + eps)\n",
          new="    rstd = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / BLOCK_N + eps)\n",
          expect="elements differ", tests=("-k", "test_looped_kernels_match_float64")),
    Wrong("persistent_rows_unmasked",
          "the persistent forward stores y with the column mask only: the last block's rows past M are written",
          old="        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)\n        tl.store(rstd_ptr + rows, rstd, mask=row_mask)\n",
          new="        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=col_mask[None, :] & (rows >= 0)[:, None])\n"
              "        tl.store(rstd_ptr + rows, rstd, mask=row_mask)\n",
          expect="rows past the last one were written|out-of-bounds store", tests=("-k", "test_persistent_forward_any_split_of_rows")),
]
