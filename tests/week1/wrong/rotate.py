"""Known-wrong rotations the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("clockwise_is_a_transpose",
          "the clockwise naive kernel forgets the reversal: out[col, row] = x[row, col] is a transpose, "
          "not a rotation",
          old="        out[col, rows - 1 - row] = x[row, col]\n",
          new="        out[col, row] = x[row, col]\n",
          expect="elements differ", tests=("-k", "test_matches_torch_rot90 and rotate90_naive-float32-clockwise-40x1")),
    Wrong("tiled_row_not_mirrored",
          "clockwise, each thread reads tile row tx instead of the mirror-image row TILE - 1 - tx: every "
          "row of out comes out reversed within its tile",
          old="                    out[out_row, out_col] = tile[TILE - 1 - tx, c]\n",
          new="                    out[out_row, out_col] = tile[tx, c]\n",
          expect="elements differ", tests=("-k", "test_matches_torch_rot90 and rotate90_shared and float32")),
]
