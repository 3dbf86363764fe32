"""Known-wrong vector adds the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("no_bounds_check",
          "the kernel forgets `if i < out.size`: the threads of the last, partial block index past the end",
          old="    if i < out.size:  # the last block is partly past the end unless n divides evenly\n"
              "        out[i] = a[i] + b[i]\n",
          new="    out[i] = a[i] + b[i]\n",
          expect="out of bounds|index", tests=("-k", "test_matches_torch and numba-float32")),
    Wrong("grid_stride_start_per_block",
          "the grid-stride loop starts at threadIdx.x instead of the global index: every block redoes "
          "the first elements and the rest are never written",
          old="    start = cuda.grid(1)\n    stride = cuda.gridsize(1)  # threads in the whole grid\n",
          new="    start = cuda.threadIdx.x\n    stride = cuda.gridsize(1)  # threads in the whole grid\n",
          expect="elements differ", tests=("-k", "test_matches_torch and grid_stride-float32-257")),
]
