"""Known-wrong LayerNorm backward kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
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
    Wrong("atomic_backward_stores",
          "the atomic backward stores its row's dw instead of adding it: the last program to write wins",
          old="        tl.atomic_add(dw_ptr + cols, tl.sum(dy * xhat, axis=0), mask=col_mask)\n",
          new="        tl.store(dw_ptr + cols, tl.sum(dy * xhat, axis=0), mask=col_mask)\n",
          expect="dw", tests=("-k", "test_atomic_backward_matches_float64")),
]
