"""Known-wrong element-wise kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("relu_turns_nan_into_zero",
          "ReLU written as `v if v > 0 else 0`: NaN > 0 is False, so NaN comes out as 0 (torch.relu keeps NaN)",
          old="        out[i] = 0 if v < 0 else v\n",
          new="        out[i] = v if v > 0 else 0\n",
          expect="nan|elements differ", tests=("-k", "test_nan_and_inf_propagate_like_torch and relu and not x4")),
    Wrong("matrix_add_row_col_swapped",
          "row, col = cuda.grid(2): x (the fastest index) taken as the row; on a non-square matrix most "
          "elements are never written",
          old="    col, row = cuda.grid(2)\n    if row < out.shape[0] and col < out.shape[1]:\n"
              "        out[row, col] = a[row, col] + b[row, col]\n",
          new="    row, col = cuda.grid(2)\n    if row < out.shape[0] and col < out.shape[1]:\n"
              "        out[row, col] = a[row, col] + b[row, col]\n",
          expect="elements differ", tests=("-k", "test_matrix_add_matches_torch")),
]
