"""Known-wrong matmuls the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("naive_reads_b_transposed",
          "the naive kernel multiplies a[row, k] by b[col, k]: B indexed as if transposed (row and column "
          "swapped)",
          old="            acc += a[row, k] * b[k, col]\n",
          new="            acc += a[row, k] * b[col, k]\n",
          expect="elements differ|out of bounds", tests=("-k", "test_matches_float64_reference and matmul_numba_naive")),
    Wrong("tiled_tail_not_zeroed",
          "the tiled kernel stores no zeros past the matrices' edges: in the last k step both tiles keep "
          "the previous step's values and their products are added in again",
          old="        else:\n            a_tile[ty, tx] = 0.0\n"
              "        if k0 + ty < k_total and col < n:\n            b_tile[ty, tx] = b[k0 + ty, col]\n"
              "        else:\n            b_tile[ty, tx] = 0.0\n",
          new="        if k0 + ty < k_total and col < n:\n            b_tile[ty, tx] = b[k0 + ty, col]\n",
          expect="elements differ", tests=("-k", "test_matches_float64_reference and matmul_numba_tiled")),
]
