"""Exercise: transposes in Numba. Same names as week1_cuda_python/transpose.py.

Check your work with `pytest tests/week1/test_transpose.py --impl=exercises`.
out = x.T as a new contiguous (C x R) tensor; validate x (2-D, contiguous) and `out`.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before numba: GPU or CUDA simulator
from course import interop, validate  # noqa: F401

from numba import cuda  # noqa: E402,F401

TILE = 32
BLOCK_ROWS = 8
DTYPES = (torch.float32, torch.float64)


def transpose_naive(x, out=None):
    raise NotImplementedError("not implemented yet: transpose_naive (week1 exercise)")


def transpose_shared(x, out=None):
    """Stage a TILE x TILE tile in cuda.shared.array so reads and writes both walk rows."""
    raise NotImplementedError("not implemented yet: transpose_shared (week1 exercise)")


def transpose_padded(x, out=None):
    """As transpose_shared with a (TILE, TILE + 1) tile: why does one extra column help?"""
    raise NotImplementedError("not implemented yet: transpose_padded (week1 exercise)")
