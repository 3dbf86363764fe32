"""Exercise: rotate a matrix by 90 degrees in Numba. Same names as week1_cuda_python/rotate.py.

Check your work with `pytest tests/week1/test_rotate.py --impl=exercises`.
For an R x C matrix x the result is C x R (contiguous):
  clockwise          out[j, R - 1 - i] = x[i, j]     (torch.rot90(x, -1))
  counter-clockwise  out[C - 1 - j, i] = x[i, j]     (torch.rot90(x, 1))
Validate x (2-D, float32/float64, contiguous), `clockwise` (a bool: TypeError otherwise) and
`out` (shape (C, R), x's dtype) before launching; an empty x launches nothing.
Hint for the tiled kernels: it is the tiled transpose (lesson 04) where each block writes the
mirror-image tile of out and each thread reads the mirror-image row of the tile.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before numba: GPU or CUDA simulator
from course import interop, validate  # noqa: F401
from course.check import random_tensor

from numba import cuda, float32, float64  # noqa: E402,F401

TILE = 32
BLOCK_ROWS = 8
DTYPES = (torch.float32, torch.float64)
MAX_GRID = 65535


@cuda.jit
def rotate_cw_naive_kernel(x, out):
    """One thread per element of x: out[col, rows - 1 - row] = x[row, col]."""
    # TODO


@cuda.jit
def rotate_ccw_naive_kernel(x, out):
    """One thread per element of x: out[cols - 1 - col, row] = x[row, col]."""
    # TODO


def rotate90_naive(x, clockwise=True, out=None):
    raise NotImplementedError("not implemented yet: rotate90_naive (week1 exercise)")


def rotate90_shared(x, clockwise=True, out=None):
    """Through a (TILE, TILE) cuda.shared.array: both global accesses walk rows."""
    raise NotImplementedError("not implemented yet: rotate90_shared (week1 exercise)")


def rotate90_padded(x, clockwise=True, out=None):
    """As rotate90_shared with a (TILE, TILE + 1) tile."""
    raise NotImplementedError("not implemented yet: rotate90_padded (week1 exercise)")


def rotate90_torch(x, clockwise=True, out=None):
    """The reference (given): torch.rot90, k = -1 for clockwise."""
    rotated = torch.rot90(x, -1 if clockwise else 1, dims=(0, 1))
    return rotated.contiguous() if out is None else out.copy_(rotated)


LAUNCHERS = ("rotate90_naive", "rotate90_shared", "rotate90_padded")


def _sanitizer_case(launcher, clockwise):
    def run():
        launcher(random_tensor((45, 70), torch.float32, runtime.DEVICE), clockwise)
        torch.cuda.synchronize()
    return run


SANITIZER_CASES = {
    f"{kernel} ({direction})": _sanitizer_case(launcher, direction == "clockwise")
    for kernel, launcher in (("rotate_naive_kernel", rotate90_naive), ("rotate_shared_kernel", rotate90_shared),
                             ("rotate_padded_kernel", rotate90_padded))
    for direction in ("clockwise", "counter-clockwise")
}
