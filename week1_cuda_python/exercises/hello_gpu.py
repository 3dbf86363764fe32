"""Exercise: hello GPU. Same names as week1_cuda_python/hello_gpu.py.

Check your work with `pytest tests/week1/test_hello_gpu.py --impl=exercises`.
Each kernel writes, for the element its thread owns, the thread's own coordinates; the tests
know exactly which thread must own which element, so every index has to be right.
Launchers: check arguments first (TypeError for a non-int or bool count, ValueError for a
value out of range, naming the argument), allocate an int32 `out` on runtime.DEVICE when
none is given (or check the one given), return early when there is nothing to launch.
"""
from __future__ import annotations

import torch  # noqa: F401

from course import runtime  # noqa: F401  before numba: GPU or CUDA simulator
from course import interop  # noqa: F401

from numba import cuda  # noqa: E402

THREADS_PER_BLOCK = 256
BLOCK_2D = (16, 16)
MAX_THREADS_PER_BLOCK = 1024
MAX_GRID_Y = 65535
WHO_1D = ("block", "thread", "global", "warp", "lane")
WHO_2D = ("block_x", "block_y", "thread_x", "thread_y", "col", "row", "warp", "lane")
WHO_GRID_STRIDE = ("thread", "step")


@cuda.jit
def hello_1d_kernel(out):
    """Row i of out (n x 5): blockIdx.x, threadIdx.x, global index, warp id, lane id."""
    # TODO: i = cuda.grid(1); guard i < out.shape[0]; warp = threadIdx.x // cuda.warpsize,
    # lane = cuda.laneid.


@cuda.jit
def hello_2d_kernel(out):
    """out[row, col] = (block x, block y, thread x, thread y, col, row, warp, lane)."""
    # TODO: col, row = cuda.grid(2); warps are cut from the linear id ty * blockDim.x + tx.


@cuda.jit
def hello_grid_stride_kernel(out):
    """out[i] = (global id of the thread that handled element i, loop trip number)."""
    # TODO: loop i over range(cuda.grid(1), out.shape[0], cuda.gridsize(1)), counting trips.


@cuda.jit
def hello_print_kernel():
    """Each thread prints its block and thread index (print() works in Numba kernels)."""
    # TODO


def who_am_i_1d(n, threads_per_block=THREADS_PER_BLOCK, out=None):
    """(n, 5) int32 table from hello_1d_kernel on ceil(n / threads_per_block) blocks."""
    raise NotImplementedError("not implemented yet: who_am_i_1d (week1 exercise)")


def who_am_i_2d(rows, cols, block=BLOCK_2D, out=None):
    """(rows, cols, 8) int32 table from hello_2d_kernel; block = (threads in x, threads in y)."""
    raise NotImplementedError("not implemented yet: who_am_i_2d (week1 exercise)")


def who_am_i_grid_stride(n, blocks, threads_per_block=THREADS_PER_BLOCK, out=None):
    """(n, 2) int32 table from hello_grid_stride_kernel on exactly `blocks` blocks."""
    raise NotImplementedError("not implemented yet: who_am_i_grid_stride (week1 exercise)")


def hello_print(blocks=2, threads_per_block=4):
    """Launch hello_print_kernel and synchronise (device printf is flushed at a sync)."""
    raise NotImplementedError("not implemented yet: hello_print (week1 exercise)")


def device_facts(measure=True):
    """A dict of what the GPU has: torch.cuda.get_device_properties and the attributes of
    numba.cuda.get_current_device() (MAX_THREADS_PER_BLOCK, WARP_SIZE, ...), plus
    course.bench.copy_bandwidth_gbps() when `measure`. In simulation: {"simulated": True, ...}."""
    raise NotImplementedError("not implemented yet: device_facts (week1 exercise)")


def facts_table(facts):
    """The facts as a markdown table: '| warp size | 32 |', a SIMULATION banner in simulation."""
    raise NotImplementedError("not implemented yet: facts_table (week1 exercise)")


SANITIZER_CASES = {
    "hello_1d_kernel": lambda: (who_am_i_1d(1000, 256), cuda.synchronize()),
    "hello_2d_kernel": lambda: (who_am_i_2d(37, 45, (16, 8)), cuda.synchronize()),
    "hello_grid_stride_kernel": lambda: (who_am_i_grid_stride(5000, 3, 128), cuda.synchronize()),
    "hello_print_kernel": lambda: hello_print(1, 2),
}
