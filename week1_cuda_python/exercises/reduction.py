"""Exercise: sum reductions. Same names as week1_cuda_python/reduction.py.

Check your work with `pytest tests/week1/test_reduction.py --impl=exercises`. Each returns
a 0-d float32 tensor on the input's device (start from torch.zeros(()) and add into it).
"""
from __future__ import annotations

from pathlib import Path

import torch

from course import runtime  # noqa: F401  before numba: GPU or CUDA simulator
from course import interop, validate  # noqa: F401

from numba import cuda  # noqa: E402,F401

THREADS_PER_BLOCK = 256
CUDA_SOURCE = Path(__file__).parent / "kernels" / "reduction.cu"
DTYPES = (torch.float32,)


def sum_atomic(x):
    """One cuda.atomic.add per element."""
    raise NotImplementedError("not implemented yet: sum_atomic (week1 exercise)")


def sum_shared_tree(x):
    """Grid-stride partial sums, a shared-memory tree per block, one atomic per block."""
    raise NotImplementedError("not implemented yet: sum_shared_tree (week1 exercise)")


def sum_warp_shuffle(x):
    """Launch `sum_warp_shuffle` from kernels/reduction.cu (GPU only)."""
    raise NotImplementedError("not implemented yet: sum_warp_shuffle (week1 exercise)")
