"""Known-wrong transposes the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("naive_copies_instead_of_transposing",
          "the naive kernel writes out[row, col] = x[row, col]: a copy into a C x R buffer, not x.T",
          old="        out[col, row] = x[row, col]\n",
          new="        out[row, col] = x[row, col]\n",
          expect="elements differ|out of bounds", tests=("-k", "test_matches_torch and transpose_naive and float32")),
    Wrong("tiled_reads_a_row_of_the_tile",
          "the tiled kernel's write reads tile[ty + j, tx] (a row of the tile) instead of tile[tx, ty + j] "
          "(a column): the tile is put back untransposed",
          old="                out[out_row, out_col] = tile[tx, ty + j]\n",
          new="                out[out_row, out_col] = tile[ty + j, tx]\n",
          expect="elements differ", tests=("-k", "test_matches_torch and transpose_padded and float32")),
]
