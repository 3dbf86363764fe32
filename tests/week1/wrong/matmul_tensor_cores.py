"""Known-wrong tensor-core matmul pieces the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("grid_rows_and_columns_swapped",
          "launch_geometry puts the blocks along M in x and along N in y: the kernels read blockIdx.x as "
          "the column of C, so a non-square C is covered wrongly",
          old="    return (math.ceil(n / block_n), math.ceil(m / block_m)), (threads, 1, 1)\n",
          new="    return (math.ceil(m / block_m), math.ceil(n / block_n)), (threads, 1, 1)\n",
          expect="assert", tests=("-k", "test_padded_shape_covers_the_tiles")),
    Wrong("padding_rounds_down",
          "padded_shape rounds M, N, K down to the tile instead of up: the padded operands lose their last "
          "rows and columns",
          old="    return _round_up(m, tm), _round_up(n, tn), _round_up(k, tk)\n",
          new="    return m // tm * tm, n // tn * tn, k // tk * tk\n",
          expect="assert", tests=("-k", "test_padded_shape_covers_the_tiles")),
]
