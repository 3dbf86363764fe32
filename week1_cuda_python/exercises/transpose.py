"""Exercise: transposes in Numba and CUDA C. Same names as week1_cuda_python/transpose.py.

Check your work with `pytest tests/week1/test_transpose.py --impl=exercises`.
out = x.T as a new contiguous (C x R) tensor; validate x (2-D, contiguous, float32 or float64,
at most MAX_GRID_Y * BLOCK_ROWS rows: the message says "at most") and `out`.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import torch

from course import runtime  # noqa: F401  before numba: GPU or CUDA simulator
from course import interop, validate  # noqa: F401
from course.check import random_tensor

from numba import cuda  # noqa: E402,F401

TILE = 32
BLOCK_ROWS = 8
MAX_GRID_Y = 65535
DTYPES = (torch.float32, torch.float64)
CUDA_SOURCE = Path(__file__).parent / "kernels" / "transpose.cu"  # your CUDA C file
TILE64 = 64
TILE64_ROWS = 8  # keep equal to TILE64_ROWS in kernels/transpose.cu
NUMBA_LAUNCHERS = ("transpose_naive", "transpose_shared", "transpose_padded")
CUDA_C_LAUNCHERS = ("transpose_cuda_padded", "transpose_cuda_tile64")


def transpose_naive(x, out=None):
    raise NotImplementedError("not implemented yet: transpose_naive (week1 exercise)")


def transpose_shared(x, out=None):
    """Stage a TILE x TILE tile in cuda.shared.array so reads and writes both walk rows."""
    raise NotImplementedError("not implemented yet: transpose_shared (week1 exercise)")


def transpose_padded(x, out=None):
    """As transpose_shared with a (TILE, TILE + 1) tile: why does one extra column help?"""
    raise NotImplementedError("not implemented yet: transpose_padded (week1 exercise)")


def transpose_cuda_padded(x, out=None):
    """Launch `transpose_padded_f32` / `_f64` from kernels/transpose.cu: 32 x 8 threads per block."""
    raise NotImplementedError("not implemented yet: transpose_cuda_padded (week1 exercise)")


def transpose_cuda_tile64(x, out=None):
    """Launch `transpose_tile64_*`: 64x64 tiles, 32 x TILE64_ROWS threads; vectorize only when the
    width is even and x is aligned to two elements."""
    raise NotImplementedError("not implemented yet: transpose_cuda_tile64 (week1 exercise)")


def _sanitizer_case(launcher: str, dtype: torch.dtype) -> None:
    globals()[launcher](random_tensor((193, 130), dtype, runtime.DEVICE))
    torch.cuda.synchronize()


SANITIZER_CASES: dict[str, Callable[[], None]] = {
    f"{launcher}[{str(dtype)[6:]}]": functools.partial(_sanitizer_case, launcher, dtype)
    for launcher in NUMBA_LAUNCHERS + CUDA_C_LAUNCHERS for dtype in DTYPES
}
