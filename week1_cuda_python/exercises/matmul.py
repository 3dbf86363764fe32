"""Exercise: the fp32 matmul ladder. Same names as week1_cuda_python/matmul.py.

Check your work with `pytest tests/week1/test_matmul.py --impl=exercises`. Each launcher
raises NotImplementedError until you write it; delete that line when you do.
Rules of the house: validate a (M x K) and b (K x N) first (2-D, float32, contiguous, inner
dimensions equal; course.validate has the sentences), allocate or check `out` (M x N),
return early when M or N is 0, write zeros when K is 0, and handle sizes that are not a
multiple of your tile (bounds checks, or pad the inputs with zeros).
"""
from __future__ import annotations

from pathlib import Path

import torch

from course import runtime  # noqa: F401  before numba: GPU or CUDA simulator
from course import interop, validate  # noqa: F401

from numba import cuda, float32  # noqa: E402,F401

CUDA_SOURCE = Path(__file__).parent / "kernels" / "matmul.cu"  # your CUDA C file
DTYPES = (torch.float32,)
TILE = 16
CUDA_RUNGS = ("naive", "coalesced", "shared", "blocktile_1d", "blocktile_2d", "vectorized", "warptiling")
NUMBA_LAUNCHERS = ("matmul_numba_naive", "matmul_numba_tiled", "matmul_numba_regblock")
CUDA_C_LAUNCHERS = tuple(f"matmul_cuda_{rung}" for rung in CUDA_RUNGS)


@cuda.jit
def matmul_numba_naive_kernel(a, b, c):
    """One thread per output C[row, col]; make x (cuda.grid(2)[0]) the column: why?"""
    # TODO: col, row = cuda.grid(2); guard; acc = float32(0) summed over k; c[row, col] = acc


@cuda.jit
def matmul_numba_tiled_kernel(a, b, c):
    """TILE x TILE shared-memory tiles of a and b (one cuda.shared.array per line!)."""
    # TODO: load a tile of each (0 outside the matrices), cuda.syncthreads(), accumulate
    # TILE products, cuda.syncthreads() again, then write c with a bounds check.


def matmul_numba_naive(a, b, out=None):
    raise NotImplementedError("not implemented yet: matmul_numba_naive (week1 exercise)")


def matmul_numba_tiled(a, b, out=None):
    raise NotImplementedError("not implemented yet: matmul_numba_tiled (week1 exercise)")


def matmul_numba_regblock(a, b, out=None):
    """Each thread computes a TM x TN block of C from registers (cuda.local.array)."""
    raise NotImplementedError("not implemented yet: matmul_numba_regblock (week1 exercise)")


def matmul_cuda_naive(a, b, out=None):
    """Launch `sgemm_naive` from kernels/matmul.cu: interop.cuda_module(CUDA_SOURCE).get_function(...)."""
    raise NotImplementedError("not implemented yet: matmul_cuda_naive (week1 exercise)")


def matmul_cuda_coalesced(a, b, out=None):
    raise NotImplementedError("not implemented yet: matmul_cuda_coalesced (week1 exercise)")


def matmul_cuda_shared(a, b, out=None):
    raise NotImplementedError("not implemented yet: matmul_cuda_shared (week1 exercise)")


def matmul_cuda_blocktile_1d(a, b, out=None):
    raise NotImplementedError("not implemented yet: matmul_cuda_blocktile_1d (week1 exercise)")


def matmul_cuda_blocktile_2d(a, b, out=None):
    raise NotImplementedError("not implemented yet: matmul_cuda_blocktile_2d (week1 exercise)")


def matmul_cuda_vectorized(a, b, out=None):
    raise NotImplementedError("not implemented yet: matmul_cuda_vectorized (week1 exercise)")


def matmul_cuda_warptiling(a, b, out=None):
    raise NotImplementedError("not implemented yet: matmul_cuda_warptiling (week1 exercise)")


def torch_matmul_fp32(a, b, out=None):
    """The reference (given): torch.matmul with TF32 off for the call, the setting restored."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return torch.matmul(a, b, out=out)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
