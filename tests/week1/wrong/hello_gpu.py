"""Known-wrong hello-GPU kernels the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("no_guard_past_n",
          "hello_1d_kernel without `if i < out.shape[0]`: the idle threads of the last block write rows "
          "that are not theirs",
          old="    if i < out.shape[0]:\n        t = cuda.threadIdx.x\n",
          new="    if True:\n        t = cuda.threadIdx.x\n",
          expect="out of bounds|index|a thread past n wrote", tests=("-k", "test_1d_guard")),
    Wrong("warp_from_row_major_swapped",
          "the 2-D linear thread id taken y-fastest (tx * blockDim.y + ty): warps are cut with x "
          "varying fastest, so warp and lane come out wrong",
          old="        linear = ty * cuda.blockDim.x + tx\n",
          new="        linear = tx * cuda.blockDim.y + ty\n",
          expect="elements differ", tests=("-k", "test_2d_every_thread and 19-20")),
]
