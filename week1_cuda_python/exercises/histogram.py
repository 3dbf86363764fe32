"""Exercise: histograms. Same names as week1_cuda_python/histogram.py.

Check your work with `pytest tests/week1/test_histogram.py --impl=exercises`. Each launcher
takes a 1-D uint8 or int32 `x`, `bins` (an int >= 1) and an optional int32 `out` of length
bins, and returns out with out[b] = number of x[i] == b; values outside [0, bins) are not
counted. Validate first (TypeError for a non-int bins, ValueError for bins < 1, and for the
shared-memory rungs bins > MAX_SHARED_BINS with a message that says "at most"), then ZERO `out`
(the kernels add into it), return early when x is empty. Delete each `raise` when you write it.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import torch

from course import runtime  # noqa: F401  before numba: GPU or CUDA simulator
from course import interop, validate  # noqa: F401

from numba import cuda, int32  # noqa: E402,F401

CUDA_SOURCE = Path(__file__).parent / "kernels" / "histogram.cu"  # your CUDA C file
DTYPES = (torch.uint8, torch.int32)
THREADS = 256
BLOCKS_PER_SM = 4
MAX_SHARED_BINS = 12288  # 48 KiB of int32 counters
MAX_ELEMENTS = 2**31 - 1
NUMBA_LAUNCHERS = ("histogram_numba_global", "histogram_numba_shared")
CUDA_C_LAUNCHERS = ("histogram_cuda_global", "histogram_cuda_shared", "histogram_cuda_per_warp",
                    "histogram_cuda_per_lane")
SHARED_MEMORY_LAUNCHERS = ("histogram_numba_shared", "histogram_cuda_shared", "histogram_cuda_per_warp",
                           "histogram_cuda_per_lane")


@cuda.jit
def histogram_global_kernel(x, counts):
    """One thread per element: cuda.atomic.add(counts, value, 1) when 0 <= value < counts.size."""
    # TODO


@cuda.jit
def histogram_shared_kernel(x, counts):
    """A per-block histogram in cuda.shared.array(0, int32) (dynamic: sized by the launch)."""
    # TODO: zero it, cuda.syncthreads(), grid-stride over x with shared atomics,
    # cuda.syncthreads(), add each nonzero counter to `counts` with one global atomic.


def histogram_numba_global(x, bins, out=None):
    raise NotImplementedError("not implemented yet: histogram_numba_global (week1 exercise)")


def histogram_numba_shared(x, bins, out=None):
    """Launch with kernel[blocks, THREADS, 0, 4 * bins]: the last number is the dynamic shared size."""
    raise NotImplementedError("not implemented yet: histogram_numba_shared (week1 exercise)")


def histogram_cuda_global(x, bins, out=None):
    """Launch `histogram_global_u8` / `_i32` from kernels/histogram.cu (GPU only)."""
    raise NotImplementedError("not implemented yet: histogram_cuda_global (week1 exercise)")


def histogram_cuda_shared(x, bins, out=None):
    """Launch `histogram_shared_*` with shared_size=4 * bins."""
    raise NotImplementedError("not implemented yet: histogram_cuda_shared (week1 exercise)")


def histogram_cuda_per_warp(x, bins, out=None):
    """Launch `histogram_per_warp_*`: one sub-histogram per warp, 16-byte vector loads."""
    raise NotImplementedError("not implemented yet: histogram_cuda_per_warp (week1 exercise)")


def histogram_cuda_per_lane(x, bins, out=None):
    """Launch `histogram_per_lane_*`: 32 copies interleaved so that lane l always hits bank l."""
    raise NotImplementedError("not implemented yet: histogram_cuda_per_lane (week1 exercise)")


def torch_histogram(x: torch.Tensor, bins: int) -> torch.Tensor:
    """The reference: torch.bincount of the values in [0, bins), as int32."""
    wide = x.long()
    return torch.bincount(wide[(wide >= 0) & (wide < bins)], minlength=bins).to(torch.int32)


def _sanitizer_case(launcher: str, dtype: torch.dtype) -> None:
    x = torch.randint(0, 256, (10007,), device=runtime.DEVICE).to(dtype)
    globals()[launcher](x, 100)
    torch.cuda.synchronize()


SANITIZER_CASES: dict[str, Callable[[], None]] = {
    f"{launcher}[{str(dtype)[6:]}]": functools.partial(_sanitizer_case, launcher, dtype)
    for launcher in NUMBA_LAUNCHERS + CUDA_C_LAUNCHERS for dtype in DTYPES
}
