"""Exercise: prefix sums (scans). Same names as week1_cuda_python/scan.py.

Check your work with `pytest tests/week1/test_scan.py --impl=exercises`. Each launcher takes a
1-D float32 or int32 `x`, an optional `out` (same shape and dtype) and `exclusive=False`, and
returns out with out[i] = x[0] + ... + x[i] (or + x[i-1] when exclusive; out[0] = 0). Validate
first (course.validate has the sentences; `exclusive` must be a bool; the one-block rungs refuse
n > their limit with a ValueError that says "at most"), return early when n == 0. int32 sums wrap
modulo 2^32. Delete the `raise NotImplementedError` line of each launcher when you write it.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import torch

from course import runtime  # noqa: F401  before numba: GPU or CUDA simulator
from course import interop, validate  # noqa: F401
from course.check import random_tensor

from numba import cuda, float32, int32  # noqa: E402,F401

CUDA_SOURCE = Path(__file__).parent / "kernels" / "scan.cu"  # your CUDA C file
DTYPES = (torch.float32, torch.int32)
HILLIS_STEELE_MAX = 1024
BLELLOCH_MAX = 2048
LOG_BANKS = 5
# The padded tree's size, a plain int: Numba on a GPU needs a literal shared-array shape (an
# expression like BLELLOCH_MAX + BLELLOCH_MAX // 32 inside the kernel is refused there).
BLELLOCH_SHARED = 2112
MULTIBLOCK_THREADS = runtime.pick(gpu=512, sim=16)  # tiles of 2 x threads elements
CUDA_MULTIBLOCK_THREADS = 512
LOOKBACK_THREADS = 256  # keep equal to the #defines in kernels/scan.cu
LOOKBACK_VECTORS = 4
LOOKBACK_TILE = LOOKBACK_THREADS * LOOKBACK_VECTORS * 4
NUMBA_LAUNCHERS = ("scan_numba_hillis_steele", "scan_numba_blelloch", "scan_numba_multiblock")
CUDA_C_LAUNCHERS = ("scan_cuda_hillis_steele", "scan_cuda_blelloch", "scan_cuda_multiblock", "scan_cuda_lookback")
MAX_ELEMENTS = {"scan_numba_hillis_steele": HILLIS_STEELE_MAX, "scan_numba_blelloch": BLELLOCH_MAX,
                "scan_numba_multiblock": None, "scan_cuda_hillis_steele": HILLIS_STEELE_MAX,
                "scan_cuda_blelloch": BLELLOCH_MAX, "scan_cuda_multiblock": None, "scan_cuda_lookback": None}


def _hillis_steele_kernel(dtype):
    @cuda.jit
    def kernel(x, out, exclusive):
        # TODO: a (2, HILLIS_STEELE_MAX) shared array of `dtype` as a double buffer; thread t
        # loads x[t] (x[t - 1] when exclusive, 0 outside); for offset = 1, 2, 4, ... < n: read
        # one buffer, add the element `offset` to the left, write the other, cuda.syncthreads().
        pass

    return kernel


scan_hillis_steele_kernel_f32 = _hillis_steele_kernel(float32)
scan_hillis_steele_kernel_i32 = _hillis_steele_kernel(int32)


def _blelloch_kernel(dtype):
    @cuda.jit
    def kernel(x, out, block_sums, exclusive):
        # TODO: a tile of m = 2 * blockDim.x elements from blockIdx.x * m (0 past the end) in
        # cuda.shared.array(BLELLOCH_SHARED, dtype), padded by one word every 32; up-sweep (tree
        # of partial sums), write the root to block_sums[blockIdx.x], set it to 0, down-sweep;
        # out = tree (+ x if inclusive).
        pass

    return kernel


scan_blelloch_kernel_f32 = _blelloch_kernel(float32)
scan_blelloch_kernel_i32 = _blelloch_kernel(int32)


@cuda.jit
def scan_add_offsets_kernel(out, offsets, tile):
    """out[i] += offsets[i // tile] (skip tile 0)."""
    # TODO


def scan_numba_hillis_steele(x, out=None, *, exclusive=False):
    """One block of n threads (n <= HILLIS_STEELE_MAX)."""
    raise NotImplementedError("not implemented yet: scan_numba_hillis_steele (week1 exercise)")


def scan_numba_blelloch(x, out=None, *, exclusive=False):
    """One block of next_power_of_two(n) / 2 threads (n <= BLELLOCH_MAX)."""
    raise NotImplementedError("not implemented yet: scan_numba_blelloch (week1 exercise)")


def scan_numba_multiblock(x, out=None, *, exclusive=False, threads=None):
    """Blelloch per tile writing tile totals, an exclusive scan of the totals (recursion),
    then scan_add_offsets_kernel. `threads` per block (None: MULTIBLOCK_THREADS; else a power of
    two from 1 to 1024, a ValueError otherwise), tiles of 2 x threads: the tests pass small values
    to make the recursion several levels deep at small n."""
    raise NotImplementedError("not implemented yet: scan_numba_multiblock (week1 exercise)")


def scan_cuda_hillis_steele(x, out=None, *, exclusive=False):
    """Launch `scan_hillis_steele_f32` / `_i32` from kernels/scan.cu (GPU only)."""
    raise NotImplementedError("not implemented yet: scan_cuda_hillis_steele (week1 exercise)")


def scan_cuda_blelloch(x, out=None, *, exclusive=False):
    """Launch `scan_blelloch_f32` / `_i32` with block_sums = 0 (NULL)."""
    raise NotImplementedError("not implemented yet: scan_cuda_blelloch (week1 exercise)")


def scan_cuda_multiblock(x, out=None, *, exclusive=False, threads=None):
    """`scan_blelloch_*` per tile, recursion over the totals, `scan_add_offsets_*`; `threads` as
    in scan_numba_multiblock (None: CUDA_MULTIBLOCK_THREADS)."""
    raise NotImplementedError("not implemented yet: scan_cuda_multiblock (week1 exercise)")


def scan_cuda_lookback(x, out=None, *, exclusive=False):
    """`scan_lookback_*`: one pass. Zero a work buffer (a tile counter + one status word per
    tile) before every launch; use 16-byte vectors only when x and out are 16-byte aligned."""
    raise NotImplementedError("not implemented yet: scan_cuda_lookback (week1 exercise)")


def torch_scan(x: torch.Tensor, exclusive: bool = False) -> torch.Tensor:
    """The reference: torch.cumsum in x's dtype (int32 wraps), shifted right for exclusive."""
    inclusive = torch.cumsum(x, 0, dtype=x.dtype)
    if not exclusive:
        return inclusive
    return torch.cat([torch.zeros(min(1, x.numel()), dtype=x.dtype, device=x.device), inclusive[:-1]])


def _sanitizer_case(launcher: str, dtype: torch.dtype, n: int, exclusive: bool = False) -> None:
    globals()[launcher](random_tensor(n, dtype, runtime.DEVICE), exclusive=exclusive)
    torch.cuda.synchronize()


SANITIZER_CASES: dict[str, Callable[[], None]] = {
    f"{launcher}[{str(dtype)[6:]}]": functools.partial(_sanitizer_case, launcher, dtype,
                                                       MAX_ELEMENTS[launcher] or 5 * LOOKBACK_TILE + 37)
    for launcher in NUMBA_LAUNCHERS + CUDA_C_LAUNCHERS for dtype in DTYPES
}
