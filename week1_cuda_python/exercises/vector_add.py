"""Exercise: vector add in Numba and in CUDA C. Same names as week1_cuda_python/vector_add.py.

Check your work with `pytest tests/week1/test_vector_add.py --impl=exercises`. Each launcher
raises NotImplementedError until you write it; delete that line when you do.
Rules of the house: validate inputs first (course.validate does the sentences for you),
return early on empty input (a zero-block grid is an invalid launch), write into `out`.
"""
from __future__ import annotations

from pathlib import Path

import torch

from course import runtime  # noqa: F401  before numba: GPU or CUDA simulator
from course import interop, validate  # noqa: F401

from numba import cuda  # noqa: E402

THREADS_PER_BLOCK = 256
CUDA_SOURCE = Path(__file__).parent / "kernels" / "vector_add.cu"  # your CUDA C file
NUMBA_DTYPES = (torch.float16, torch.float32, torch.float64, torch.int32, torch.int64)
CUDA_C_DTYPES = (torch.float32,)


@cuda.jit
def add_kernel(a, b, out):
    """One thread per element: out[i] = a[i] + b[i]."""
    # TODO: i = this thread's global index (cuda.grid(1)); skip threads past out.size.


@cuda.jit
def add_grid_stride_kernel(a, b, out):
    """A fixed-size grid: each thread handles elements start, start + stride, ..."""
    # TODO: start = cuda.grid(1), stride = cuda.gridsize(1), loop over range(start, out.size, stride).


def vector_add_numba(a, b, out=None):
    """out = a + b with add_kernel: validate, allocate `out`, flatten, launch ceil(n / 256) blocks."""
    raise NotImplementedError("not implemented yet: vector_add_numba (week1 exercise)")


def vector_add_numba_grid_stride(a, b, out=None):
    """out = a + b with add_grid_stride_kernel, on at most 32 blocks per SM (runtime.sm_count())."""
    raise NotImplementedError("not implemented yet: vector_add_numba_grid_stride (week1 exercise)")


def vector_add_cuda(a, b, out=None):
    """out = a + b with `vector_add_f32` from kernels/vector_add.cu (float32 only).

    interop.cuda_module(CUDA_SOURCE).get_function(...) compiles and loads it (GPU only).
    """
    raise NotImplementedError("not implemented yet: vector_add_cuda (week1 exercise)")


def vector_add_cuda_vec4(a, b, out=None):
    """out = a + b with `vector_add_f32x4` (float4 accesses); unaligned views need a fallback."""
    raise NotImplementedError("not implemented yet: vector_add_cuda_vec4 (week1 exercise)")
