"""Exercise: element-wise kernels in Numba. Same names as week1_cuda_python/elementwise.py.

Check your work with `pytest tests/week1/test_elementwise.py --impl=exercises`.
Validate inputs first (course.validate), convert the scalar to the array's NumPy dtype
(np.float32(alpha): a Python float would make every multiply float64), skip the launch on
empty input, write into `out`.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before numba: GPU or CUDA simulator
from course import interop, validate  # noqa: F401

from numba import cuda  # noqa: E402

THREADS_PER_BLOCK = 256
BLOCK_2D = (32, 8)
DTYPES = (torch.float32, torch.float64)


@cuda.jit
def relu_kernel(x, out):
    # TODO: one thread per element; keep NaN (careful: NaN > 0 is False).
    pass


def scale(x, alpha, out=None):
    raise NotImplementedError("not implemented yet: scale (week1 exercise)")


def relu(x, out=None):
    raise NotImplementedError("not implemented yet: relu (week1 exercise)")


def scale_x4(x, alpha, out=None):
    """Four elements per thread, loads before stores."""
    raise NotImplementedError("not implemented yet: scale_x4 (week1 exercise)")


def relu_x4(x, out=None):
    raise NotImplementedError("not implemented yet: relu_x4 (week1 exercise)")


def saxpy(alpha, x, y, out=None):
    raise NotImplementedError("not implemented yet: saxpy (week1 exercise)")


def saxpy_grid_stride(alpha, x, y, out=None):
    raise NotImplementedError("not implemented yet: saxpy_grid_stride (week1 exercise)")


def matrix_add(a, b, out=None):
    """2-D grid of BLOCK_2D blocks; x over columns."""
    raise NotImplementedError("not implemented yet: matrix_add (week1 exercise)")
