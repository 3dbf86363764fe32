"""Known-wrong copies the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("column_edge_unmasked",
          "the tiled copy masks the row edge only: the last column tile reads and writes past each row",
          old="    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)\n    # When stride_r == 1",
          new="    mask = (rows[:, None] < n_rows) & (cols[None, :] >= 0)\n    # When stride_r == 1",
          expect="out-of-bounds|elements differ|past the end", tests=("-k", "copy2d_follows_any_strides")),
    Wrong("gather_ignores_the_column_stride",
          "the gather assumes unit column stride: a transposed or sliced view is read wrong",
          old="    x = tl.load(x_ptr + rows * stride_r + cols * stride_c, mask=mask)\n",
          new="    x = tl.load(x_ptr + rows * stride_r + cols, mask=mask)\n",
          expect="elements differ|out-of-bounds|equal", tests=("-k", "copy2d_follows_any_strides and gather")),
]
