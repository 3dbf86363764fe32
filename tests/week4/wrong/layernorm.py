"""Known-wrong LayerNorm kernels the tests must reject (`python -m course exercises --must-fail`)."""
from course.exercises import Wrong

WRONG = [
    Wrong("padding_lanes_in_the_variance",
          "the row kernel centres x without the mask: every padding lane of the power-of-two block adds "
          "(0 - mean)^2 to the variance (any width that is not a power of two)",
          old="    xc = tl.where(mask, x - mean, 0.0)\n",
          new="    xc = x - mean\n",
          expect="elements differ", tests=("-k", "test_forward_matches_float64 and row")),
    Wrong("backward_forgets_rstd",
          "dx = g - xhat * mean(g * xhat) - mean(g): the last factor rstd of the chain rule is dropped",
          old="    dx = (g - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]\n",
          new="    dx = g - xhat * c1[:, None] - c2[:, None]\n",
          expect="dx", tests=("-k", "test_backward_matches_float64")),
    Wrong("dw_sums_x_not_xhat",
          "the weight gradient sums dy * x over the rows: the mean and rstd of each row are forgotten",
          old="            dw_acc += dy * xhat\n",
          new="            dw_acc += dy * x\n",
          expect="dw", tests=("-k", "test_backward_matches_float64")),
    Wrong("partial_rows_unmasked",
          "stage 2 masks the columns but not the partial rows: the last BLOCK_P tile reads rows past P",
          old="        mask = (rows < P)[:, None] & col_mask[None, :]\n",
          new="        mask = col_mask[None, :]\n",
          expect="out-of-bounds|elements differ", tests=("-k", "test_column_sums")),
    Wrong("atomic_backward_stores",
          "the atomic backward stores its row's dw instead of adding it: the last program to write wins",
          old="        tl.atomic_add(dw_ptr + cols, tl.sum(dy * xhat, axis=0), mask=col_mask)\n",
          new="        tl.store(dw_ptr + cols, tl.sum(dy * xhat, axis=0), mask=col_mask)\n",
          expect="dw", tests=("-k", "test_atomic_backward_matches_float64")),
]
