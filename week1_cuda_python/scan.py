"""Prefix sum (scan): Hillis-Steele, Blelloch, multi-block, and a single pass with look-back.

Over 500 lines: five scan rungs (two block trees, multi-block, decoupled look-back) share one
launcher and one set of checks here, and each of the lesson's 15 holes carries its graded hints.

What it teaches: an operation where every output depends on every input before it, done by
thousands of threads at once. Within one block, two classic trees: Hillis-Steele (log2 n steps,
each adding the element 2^d to the left: O(n log n) additions, simple) and Blelloch
(an up-sweep that builds partial sums and a down-sweep that distributes them: O(n) additions,
with padding against shared-memory bank conflicts). Across blocks, the question is how each
block learns the sum of everything before it, and that decides the memory traffic:

  approach                          bytes moved (float32)     predicted % of copy
  scan-then-propagate (rung 3)      4n + 4n + 8n = 16n        ~50%  (out written twice)
  reduce-then-scan (not built)      4n + 4n + 4n = 12n        ~67%  (x read twice)
  single pass, decoupled look-back  4n + 4n = 8n              ~90%+ (each byte once)

The single pass (`scan_cuda_lookback`, after Merrill and Garland, "Single-pass Parallel Prefix
Scan with Decoupled Look-back", NVIDIA NVR-2016-002, 2016) lets each block publish its own total
as soon as it has it, and look back over its predecessors' totals until it meets one that has
published its full prefix: x is read once and out written once.

Cost model: n elements of 4 bytes: 8n bytes (read x once, write out once), n - 1 additions
(1/8 FLOP per byte: memory-bound). The ceiling is a device-to-device copy of the same bytes.

Semantics: 1-D float32 or int32 x; out[i] = x[0] + ... + x[i] (inclusive, as torch.cumsum) or,
with exclusive=True, x[0] + ... + x[i-1] (out[0] = 0). int32 sums wrap modulo 2^32, as
torch.cumsum(x, 0, dtype=torch.int32) does. float32 sums are added in a different order than a
sequential loop, so they differ from torch.cumsum by rounding (see tests/week1/test_scan.py).
Launchers: Numba `scan_numba_hillis_steele`, `scan_numba_blelloch` (one block: n <= 1024 and
2048), `scan_numba_multiblock` (any n); CUDA C (`kernels/scan.cu`, PyCUDA) the same three as
`scan_cuda_*`, and `scan_cuda_lookback` (any n, the fast one).
Benchmarks, and the sweep of the look-back kernel's block shapes: scan_bench.py
(`python -m week1_cuda_python.scan_bench --sweep`, GPU).
"""
from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Callable

import torch

from course import interop, runtime, validate
from course.check import random_tensor
from course.gpu import cuda, float32, int32

CUDA_SOURCE = Path(__file__).parent / "kernels" / "scan.cu"
DTYPES = (torch.float32, torch.int32)
HILLIS_STEELE_MAX = 1024  # one block, one element per thread (HILLIS_STEELE_MAX in scan.cu)
BLELLOCH_MAX = 2048       # one block of 1024 threads, two elements each (BLELLOCH_MAX in scan.cu)
LOG_BANKS = 5             # 32 shared-memory banks
# The Blelloch tree's shared array: BLELLOCH_MAX words plus one padding word every 32
# (padded(BLELLOCH_MAX - 1) = 2110 is the last index used). It must be a plain module-level int:
# Numba's CUDA target needs a shared-array shape it can read as a literal at compile time, and an
# expression such as `BLELLOCH_MAX + BLELLOCH_MAX // 32` written inside the kernel is an int64
# computed at run time ("No implementation of function shared.array found for signature
# array(int64, ...)"). The CUDA simulator accepts either, so only a GPU shows the difference.
BLELLOCH_SHARED = 2112
assert BLELLOCH_SHARED >= BLELLOCH_MAX + ((BLELLOCH_MAX - 1) >> LOG_BANKS)
# Multi-block tiles: 2 x threads elements per block. In simulation every thread is a Python
# thread, so the blocks are tiny there: the tests then cross many tile boundaries (and recurse
# over the tile totals) at sizes the simulator runs in seconds.
MULTIBLOCK_THREADS = runtime.pick(gpu=512, sim=16)
CUDA_MULTIBLOCK_THREADS = 512
# Must match LOOKBACK_THREADS and LOOKBACK_VECTORS in kernels/scan.cu (tests check they do).
LOOKBACK_THREADS = 256
LOOKBACK_VECTORS = 4  # 16-byte vectors per thread
LOOKBACK_TILE = LOOKBACK_THREADS * LOOKBACK_VECTORS * 4
NUMBA_LAUNCHERS = ("scan_numba_hillis_steele", "scan_numba_blelloch", "scan_numba_multiblock")
CUDA_C_LAUNCHERS = ("scan_cuda_hillis_steele", "scan_cuda_blelloch", "scan_cuda_multiblock", "scan_cuda_lookback")
# Largest n each launcher takes (None: any n).
MAX_ELEMENTS = {"scan_numba_hillis_steele": HILLIS_STEELE_MAX, "scan_numba_blelloch": BLELLOCH_MAX,
                "scan_numba_multiblock": None, "scan_cuda_hillis_steele": HILLIS_STEELE_MAX,
                "scan_cuda_blelloch": BLELLOCH_MAX, "scan_cuda_multiblock": None, "scan_cuda_lookback": None}
# Each dtype's suffix in the kernels' names (scan_lookback_f32, ...) and in the benchmark's size labels.
DTYPE_SUFFIX = {torch.float32: "f32", torch.int32: "i32"}

# EXERCISE NOTE: out[i] = x[0] + ... + x[i] (inclusive), or + x[i-1] with exclusive=True (out[0] = 0);
#   int32 sums wrap modulo 2^32. The launchers' checks (_checked: dtype, `exclusive` a bool, the
#   one-block rungs' limits), the output allocation, the empty case and the PyCUDA plumbing are
#   given: you write the kernels, the multi-block recursion and the launches.


# --- Numba kernels -------------------------------------------------------------------------------

def _hillis_steele_kernel(dtype):
    """One block, one element per thread; a (2, MAX) shared array is the double buffer."""

    @cuda.jit
    def kernel(x, out, exclusive):
        # BEGIN EXERCISE: the load into a double buffer: buffer = cuda.shared.array((2, HILLIS_STEELE_MAX),
        #   dtype); thread t loads x[t] (x[t - 1] when exclusive, 0 outside) into buffer[0, t];
        #   cuda.syncthreads()
        # HINT: an exclusive scan is the inclusive scan of x shifted right by one with 0 shifted in, so only
        #   the load differs; threads past n (the block is rounded up) load the identity 0 so they add
        #   nothing.
        # HINT: allocate the (2, HILLIS_STEELE_MAX) shared buffer, pick the source index (t - 1 or t), store
        #   x[src] or 0 into row 0 at t, then a barrier before anyone reads a neighbour.
        # HINT: the guard for the real load: `t < n and src >= 0`.
        buffer = cuda.shared.array((2, HILLIS_STEELE_MAX), dtype)
        t = cuda.threadIdx.x
        n = x.size
        # Exclusive = inclusive scan of x shifted right by one place, with 0 shifted in.
        src = t - 1 if exclusive else t
        if t < n and src >= 0:
            buffer[0, t] = x[src]
        else:
            buffer[0, t] = 0
        cuda.syncthreads()
        # END EXERCISE
        # BEGIN EXERCISE: for offset = 1, 2, 4, ... < n: read one buffer, add the element `offset` to the
        #   left (t >= offset), write the other buffer, swap, cuda.syncthreads(); then out[t] (t < n)
        # HINT: each step adds the element `offset` to the left, doubling the span every thread has summed;
        #   reading and writing the same buffer would let a thread read a neighbour that has already been
        #   updated in this step, hence two buffers.
        # HINT: track which buffer is current (0/1); while offset < n: read own value, add the left neighbour
        #   if t >= offset, write into the other buffer, flip, barrier, double offset; finally store row
        #   `current` if t < n.
        # HINT: the barrier sits inside the loop after the flip: no thread may overwrite a buffer a slower
        #   warp still reads.
        current = 0
        offset = 1
        while offset < n:
            # Read the old buffer, write the other one: in place, thread t would read
            # element t - offset after its owner had already updated it in this step.
            value = buffer[current, t]
            if t >= offset:
                value = buffer[current, t - offset] + value
            buffer[1 - current, t] = value
            current = 1 - current
            cuda.syncthreads()  # nobody overwrites a buffer that a slower warp still reads
            offset *= 2
        if t < n:
            out[t] = buffer[current, t]
        # END EXERCISE

    return kernel


scan_hillis_steele_kernel_f32 = _hillis_steele_kernel(float32)
scan_hillis_steele_kernel_i32 = _hillis_steele_kernel(int32)


@cuda.jit(device=True)
def padded(i):
    """Index i after inserting one padding word every 32: spreads strided accesses over banks."""
    # BEGIN EXERCISE: i plus one padding word per 32 words before it (i >> LOG_BANKS)
    # HINT: with strides of 32 words, all addresses of a warp fall into one bank; inserting one spare word
    #   after every 32 shifts each run into the next bank.
    # HINT: one return: i plus the number of complete 32-word runs before it, a shift by LOG_BANKS.
    return i + (i >> LOG_BANKS)
    # END EXERCISE


def _blelloch_kernel(dtype):
    """Each block scans a tile of m = 2 * blockDim.x elements (m a power of two) in O(m) work."""

    @cuda.jit
    def kernel(x, out, block_sums, exclusive):
        # BEGIN EXERCISE: the tile into shared memory: tree = cuda.shared.array(BLELLOCH_SHARED, dtype); the
        #   tile of m = 2 * blockDim.x elements from blockIdx.x * m: thread t loads elements t and t + m/2
        #   (0 past the end) into tree[padded(...)], and keeps them (xa, xb) for the inclusive result
        # HINT: each block scans a tile of twice its thread count; thread t owns elements t and t + m/2 so
        #   both loads coalesce across a warp; past the end it stores the identity.
        # HINT: shared array, t, m = 2 * blockDim.x, base = blockIdx.x * m; two guarded loads into tree at
        #   padded indices (else 0); then read both back into xa and xb.
        # HINT: reading xa/xb back from shared memory keeps them in the tile's dtype (a Python 0 next to
        #   float32 would turn the adds into float64).
        tree = cuda.shared.array(BLELLOCH_SHARED, dtype)
        t = cuda.threadIdx.x
        m = 2 * cuda.blockDim.x
        base = cuda.blockIdx.x * m
        n = x.size
        # Thread t owns elements t and t + m/2: both loads coalesce across a warp.
        a = t
        b = t + m // 2
        # Past the end, 0. Reading the values back from shared memory types them as the
        # tile's dtype (a Python 0 beside a float32 would make Numba add in float64).
        if base + a < n:
            tree[padded(a)] = x[base + a]
        else:
            tree[padded(a)] = 0
        if base + b < n:
            tree[padded(b)] = x[base + b]
        else:
            tree[padded(b)] = 0
        xa = tree[padded(a)]
        xb = tree[padded(b)]
        # END EXERCISE
        # BEGIN EXERCISE: the up-sweep: partial sums of 2, 4, 8, ... elements, m/2, m/4, ... active threads,
        #   cuda.syncthreads() before each level; thread t adds node left = stride * (2t + 1) - 1 into
        #   right = stride * (2t + 2) - 1
        # HINT: the up-sweep builds a tree of partial sums in place: at level with stride s, each active
        #   thread adds the left child's sum into the right child, and the number of active threads
        #   halves each level.
        # HINT: stride = 1, active = m // 2; while active > 0: barrier, if t < active compute left/right from
        #   stride and t and add, then double stride and halve active.
        # HINT: `left = stride * (2 * t + 1) - 1`, `right = stride * (2 * t + 2) - 1`, each through padded().
        stride = 1
        active = m // 2
        while active > 0:  # up-sweep: partial sums of 2, 4, 8, ... elements
            cuda.syncthreads()
            if t < active:
                left = stride * (2 * t + 1) - 1
                right = stride * (2 * t + 2) - 1
                tree[padded(right)] = tree[padded(left)] + tree[padded(right)]
            stride *= 2
            active //= 2
        # END EXERCISE
        cuda.syncthreads()
        # BEGIN EXERCISE: thread 0 writes the root (the tile's total) to block_sums[blockIdx.x] and sets it to
        #   0; the down-sweep (1, 2, 4, ... active threads, cuda.syncthreads() before each level): each
        #   node passes its prefix to its left child and prefix + left to its right child
        # HINT: after the up-sweep the last node holds the whole tile's sum: save it for the multi-block
        #   pass, replace it with 0 (the identity), and walk the tree down; each node hands its prefix to
        #   the left child and prefix + left's old sum to the right.
        # HINT: thread 0 writes block_sums and zeroes the root; active = 1; while active < m: halve stride,
        #   barrier, if t < active swap-and-add left/right, double active.
        # HINT: the swap: save tree[left], set tree[left] = tree[right], then tree[right] += the saved value.
        if t == 0:
            block_sums[cuda.blockIdx.x] = tree[padded(m - 1)]  # the root: this tile's total
            tree[padded(m - 1)] = 0  # the identity at the root starts the exclusive scan
        active = 1
        while active < m:  # down-sweep: each node passes its prefix to both children
            stride //= 2
            cuda.syncthreads()
            if t < active:
                left = stride * (2 * t + 1) - 1
                right = stride * (2 * t + 2) - 1
                from_left = tree[padded(left)]
                tree[padded(left)] = tree[padded(right)]
                tree[padded(right)] = tree[padded(right)] + from_left
            active *= 2
        # END EXERCISE
        cuda.syncthreads()
        # The tree holds the exclusive scan; the inclusive one adds each element once more.
        # BEGIN EXERCISE: write the two elements of this thread (bounds-checked): the tree's value when
        #   exclusive, plus the element itself (xa, xb) when inclusive
        # HINT: the tree now holds the exclusive scan; the inclusive scan of an element is its exclusive
        #   prefix plus itself, which is why xa and xb were kept.
        # HINT: two bounds-checked stores (base + a, base + b), each choosing the tree value alone or the
        #   tree value plus xa/xb.
        if base + a < n:
            out[base + a] = tree[padded(a)] if exclusive else tree[padded(a)] + xa
        if base + b < n:
            out[base + b] = tree[padded(b)] if exclusive else tree[padded(b)] + xb
        # END EXERCISE

    return kernel


scan_blelloch_kernel_f32 = _blelloch_kernel(float32)
scan_blelloch_kernel_i32 = _blelloch_kernel(int32)


@cuda.jit
def scan_add_offsets_kernel(out, offsets, tile):
    """out[i] += offsets[i // tile]: the sum of all tiles before element i's tile."""
    # BEGIN EXERCISE: one thread per element: out[i] += offsets[i // tile], tile 0 adding nothing
    # HINT: tile k needs the total of tiles 0..k-1 added to each of its elements; the offsets array is that
    #   exclusive scan, and tile 0 gets nothing.
    # HINT: global index, its tile number by integer division, a guard on both i < out.size and tile > 0,
    #   then an in-place add.
    i = cuda.grid(1)
    block = i // tile
    if i < out.size and block > 0:
        out[i] = offsets[block] + out[i]
    # END EXERCISE


_NUMBA = {("hillis_steele", torch.float32): scan_hillis_steele_kernel_f32,
          ("hillis_steele", torch.int32): scan_hillis_steele_kernel_i32,
          ("blelloch", torch.float32): scan_blelloch_kernel_f32,
          ("blelloch", torch.int32): scan_blelloch_kernel_i32}


# --- launchers ---------------------------------------------------------------------------------

def _checked(x, out, exclusive, launcher: str) -> torch.Tensor:
    """Validate x (1-D, float32 or int32), `out` and the element limit; return out."""
    validate.tensor(x, "x", dtypes=DTYPES, ndim=1)
    if not isinstance(exclusive, bool):
        raise TypeError(f"exclusive must be True or False, got {exclusive!r}")
    limit = MAX_ELEMENTS[launcher]
    if limit is not None and x.numel() > limit:
        raise ValueError(f"x has {x.numel()} elements; {launcher} scans within one block, at most "
                         f"{limit}: use scan_numba_multiblock or scan_cuda_lookback for longer inputs")
    return validate.output(out, x)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def scan_numba_hillis_steele(x: torch.Tensor, out: torch.Tensor | None = None, *,
                             exclusive: bool = False) -> torch.Tensor:
    """Scan of x (n <= 1024) in one Numba block: log2(n) steps, a shared double buffer."""
    out = _checked(x, out, exclusive, "scan_numba_hillis_steele")
    n = x.numel()
    if n:
        kernel = _NUMBA["hillis_steele", x.dtype]
        # BEGIN EXERCISE: one block of n threads, one element each (exclusive passed as an int)
        # HINT: the single-block Hillis-Steele kernel gives each thread one element, so the block has exactly
        #   n threads (n <= the block limit, checked before).
        # HINT: Numba launch kernel[1, n] with the two tensors through interop.to_numba and exclusive as an
        #   int.
        kernel[1, n](interop.to_numba(x), interop.to_numba(out), int(exclusive))
        # END EXERCISE
    return out


def scan_numba_blelloch(x: torch.Tensor, out: torch.Tensor | None = None, *,
                        exclusive: bool = False) -> torch.Tensor:
    """Scan of x (n <= 2048) in one Numba block: Blelloch up-sweep and down-sweep."""
    out = _checked(x, out, exclusive, "scan_numba_blelloch")
    n = x.numel()
    if n:
        scratch = torch.empty(1, dtype=x.dtype, device=x.device)  # the block total, unused here
        # BEGIN EXERCISE: one block of next_power_of_two(n) / 2 threads (at least 1): two elements each
        # HINT: Blelloch's tree needs a power-of-two tile, and each thread handles two elements, so the
        #   thread count is half the next power of two.
        # HINT: `max(1, _next_pow2(n) // 2)`: n = 1 still needs one thread.
        threads = max(1, _next_pow2(n) // 2)
        # END EXERCISE
        _NUMBA["blelloch", x.dtype][1, threads](interop.to_numba(x), interop.to_numba(out),
                                                interop.to_numba(scratch), int(exclusive))
    return out


def _multiblock_threads(threads, default: int) -> int:
    """Threads per block of a multi-block scan: a power of two (the Blelloch tree), 1 to 1024."""
    if threads is None:
        return default
    if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= BLELLOCH_MAX // 2 \
            or threads & (threads - 1):
        raise ValueError(f"threads must be a power of two from 1 to {BLELLOCH_MAX // 2}, got {threads!r}")
    return threads


def _numba_multiblock(x: torch.Tensor, out: torch.Tensor, exclusive: bool, threads: int) -> None:
    # BEGIN EXERCISE: tiles of 2 * threads elements: the Blelloch kernel on every tile at once, writing each
    #   tile's total; when there is more than one tile, the exclusive scan of the totals (this function,
    #   recursively) and scan_add_offsets_kernel to add them back (one thread per element)
    # HINT: scan every tile independently, collect each tile's total, scan those totals (exclusive) to get
    #   each tile's offset, and add the offsets back; the totals are a tile-times-shorter scan, so the
    #   same function recurses.
    # HINT: tile = 2 * threads; blocks = ceil(n / tile); a totals tensor; launch the blelloch kernel on
    #   [blocks, threads]; if blocks > 1: offsets = empty_like(totals), recurse with exclusive=True, then
    #   scan_add_offsets_kernel on one thread per element.
    # HINT: the recursion is always exclusive: `_numba_multiblock(totals, offsets, True, threads)`.
    tile = 2 * threads
    blocks = math.ceil(x.numel() / tile)
    totals = torch.empty(blocks, dtype=x.dtype, device=x.device)
    _NUMBA["blelloch", x.dtype][blocks, threads](
        interop.to_numba(x), interop.to_numba(out), interop.to_numba(totals), int(exclusive))
    if blocks > 1:
        # Each tile needs the sum of the tiles before it: an exclusive scan of the tile totals,
        # itself a (1/tile times shorter) scan, hence the recursion.
        offsets = torch.empty_like(totals)
        _numba_multiblock(totals, offsets, True, threads)
        scan_add_offsets_kernel[math.ceil(x.numel() / threads), threads](
            interop.to_numba(out), interop.to_numba(offsets), tile)
    # END EXERCISE


def scan_numba_multiblock(x: torch.Tensor, out: torch.Tensor | None = None, *,
                          exclusive: bool = False, threads: int | None = None) -> torch.Tensor:
    """Scan of any length (Numba): Blelloch per tile, scan of tile totals, add them back.

    `threads` per block (default MULTIBLOCK_THREADS; tiles of 2 x threads): small values make
    the recursion over the tile totals several levels deep at small n (the tests use that).
    """
    out = _checked(x, out, exclusive, "scan_numba_multiblock")
    threads = _multiblock_threads(threads, MULTIBLOCK_THREADS)
    if x.numel():
        _numba_multiblock(x, out, exclusive, threads)
    return out


# CUDA C: argument formats for PyCUDA's prepared calls (P pointer, i int32, q int64).
_FORMATS = {"hillis_steele": "PPii", "blelloch": "PPPqi", "add_offsets": "PPqi", "lookback": "PPqPPii"}


@functools.cache
def _cuda_c_kernel(rung: str, dtype: torch.dtype, defines: tuple[str, ...] = ()):
    """`scan_<rung>_<dtype>`; `defines` (-DLOOKBACK_THREADS=...) for the sweep."""
    return interop.cuda_kernel(CUDA_SOURCE, f"scan_{rung}_{DTYPE_SUFFIX[dtype]}", _FORMATS[rung], defines)


def scan_cuda_hillis_steele(x: torch.Tensor, out: torch.Tensor | None = None, *,
                            exclusive: bool = False) -> torch.Tensor:
    """Scan of x (n <= 1024) with `scan_hillis_steele_*` (CUDA C), one block."""
    out = _checked(x, out, exclusive, "scan_cuda_hillis_steele")
    n = x.numel()
    if n:
        # Stream None: the legacy default stream that torch queues on, so ordering holds.
        # BEGIN EXERCISE: `scan_hillis_steele_*` on one block of n threads: prepared_async_call(grid, block,
        #   None, x, out pointers, n, exclusive)
        # HINT: a PyCUDA launch needs a grid tuple, a 3-D block tuple, a stream (None: torch's legacy default
        #   stream, so ordering with torch holds) and the raw arguments in the prepared order.
        # HINT: one prepared_async_call on the hillis_steele kernel for x.dtype: grid (1, 1), block (n, 1,
        #   1), then pointers, n and int(exclusive).
        _cuda_c_kernel("hillis_steele", x.dtype).prepared_async_call(
            (1, 1), (n, 1, 1), None, x.data_ptr(), out.data_ptr(), n, int(exclusive))
        # END EXERCISE
    return out


def scan_cuda_blelloch(x: torch.Tensor, out: torch.Tensor | None = None, *,
                       exclusive: bool = False) -> torch.Tensor:
    """Scan of x (n <= 2048) with `scan_blelloch_*` (CUDA C), one block."""
    out = _checked(x, out, exclusive, "scan_cuda_blelloch")
    n = x.numel()
    if n:
        # BEGIN EXERCISE: `scan_blelloch_*` on one block of next_power_of_two(n) / 2 threads, block_sums = 0
        #   (NULL: no tile total wanted)
        # HINT: same single-tile Blelloch shape as the Numba launcher: half the next power of two threads;
        #   block_sums is a pointer argument, and 0 is the NULL the kernel checks for.
        # HINT: threads from _next_pow2, then prepared_async_call with grid (1, 1), block (threads, 1, 1),
        #   None, x and out pointers, 0, n, int(exclusive).
        threads = max(1, _next_pow2(n) // 2)
        _cuda_c_kernel("blelloch", x.dtype).prepared_async_call(
            (1, 1), (threads, 1, 1), None, x.data_ptr(), out.data_ptr(), 0, n, int(exclusive))
        # END EXERCISE
    return out


def _cuda_multiblock(x: torch.Tensor, out: torch.Tensor, exclusive: bool, threads: int) -> None:
    # BEGIN EXERCISE: as _numba_multiblock with the CUDA C kernels: `scan_blelloch_*` on every tile (writing
    #   the totals), the recursion over the totals, `scan_add_offsets_*`
    # HINT: the CUDA C kernels follow the same three-phase plan as _numba_multiblock: tile scans with totals,
    #   a recursive exclusive scan of the totals, then an offsets pass.
    # HINT: translate each Numba launch into a prepared_async_call: grid (blocks, 1) and block (threads, 1,
    #   1); pointers via data_ptr(); the add_offsets kernel takes out, offsets, n and tile.
    # HINT: recurse on `_cuda_multiblock(totals, offsets, True, threads)` between the two launches.
    tile = 2 * threads
    n = x.numel()
    blocks = math.ceil(n / tile)
    totals = torch.empty(blocks, dtype=x.dtype, device=x.device)
    _cuda_c_kernel("blelloch", x.dtype).prepared_async_call(
        (blocks, 1), (threads, 1, 1), None, x.data_ptr(), out.data_ptr(), totals.data_ptr(), n, int(exclusive))
    if blocks > 1:
        offsets = torch.empty_like(totals)
        _cuda_multiblock(totals, offsets, True, threads)
        _cuda_c_kernel("add_offsets", x.dtype).prepared_async_call(
            (math.ceil(n / threads), 1), (threads, 1, 1), None, out.data_ptr(), offsets.data_ptr(), n, tile)
    # END EXERCISE


def scan_cuda_multiblock(x: torch.Tensor, out: torch.Tensor | None = None, *,
                         exclusive: bool = False, threads: int | None = None) -> torch.Tensor:
    """Scan of any length (CUDA C): `scan_blelloch_*` per tile, recursion, `scan_add_offsets_*`.

    `threads` per block as in scan_numba_multiblock (default CUDA_MULTIBLOCK_THREADS)."""
    out = _checked(x, out, exclusive, "scan_cuda_multiblock")
    threads = _multiblock_threads(threads, CUDA_MULTIBLOCK_THREADS)
    if x.numel():
        _cuda_multiblock(x, out, exclusive, threads)
    return out


def lookback_launch(x, out, exclusive: bool, threads: int = LOOKBACK_THREADS, vectors: int = LOOKBACK_VECTORS,
                    defines: tuple[str, ...] = ()) -> torch.Tensor:
    """`scan_lookback_*` on checked x and out with a chosen block shape: `scan_cuda_lookback`'s
    launch, and the sweep's (`defines` such as -DLOOKBACK_THREADS=512 recompile kernels/scan.cu)."""
    n = x.numel()
    if n == 0:
        return out
    # BEGIN EXERCISE: one block per tile of threads * vectors * 4 elements; the work buffer, ZEROED on every
    #   call (all flags NOT_READY): word 0 the counter that hands out tile numbers, words 1..tiles each
    #   tile's status; 16-byte vectors only when x and out are both 16-byte aligned
    # HINT: decoupled look-back tiles publish a status word that later tiles poll; a stale flag from the
    #   previous call would be read as READY, so the buffer must be zero (NOT_READY) every call, plus one
    #   word the blocks use to take tile numbers in launch order.
    # HINT: tile = threads * vectors * 4 elements; tiles by ceiling division; an int64 zeros tensor of tiles
    #   + 1 words; vectorize as 0/1 from both pointers' alignment.
    # HINT: `torch.zeros(tiles + 1, dtype=torch.int64, ...)`: zeros, never empty.
    tile = threads * vectors * 4
    tiles = math.ceil(n / tile)
    # Word 0: the counter that hands out tile numbers; words 1..tiles: each tile's status
    # (flag and value in one 64-bit word). Zeroed on every call: all flags NOT_READY.
    work = torch.zeros(tiles + 1, dtype=torch.int64, device=x.device)
    # 16-byte vector loads need 16-byte aligned addresses; views such as x[1:] are not.
    vectorize = int(x.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0)
    # END EXERCISE
    _cuda_c_kernel("lookback", x.dtype, defines).prepared_async_call(
        (tiles, 1), (threads, 1, 1), None, x.data_ptr(), out.data_ptr(), n,
        work.data_ptr() + 8, work.data_ptr(), int(exclusive), vectorize)
    return out


def scan_cuda_lookback(x: torch.Tensor, out: torch.Tensor | None = None, *,
                       exclusive: bool = False) -> torch.Tensor:
    """Scan of any length in ONE pass (`scan_lookback_*`, CUDA C): 16 elements per thread
    in 16-byte vectors, warp-shuffle scans, decoupled look-back between tiles."""
    out = _checked(x, out, exclusive, "scan_cuda_lookback")
    return lookback_launch(x, out, exclusive)


def torch_scan(x: torch.Tensor, exclusive: bool = False) -> torch.Tensor:
    """The reference: torch.cumsum in x's dtype (int32 wraps), shifted right for exclusive."""
    inclusive = torch.cumsum(x, 0, dtype=x.dtype)
    if not exclusive:
        return inclusive
    return torch.cat([torch.zeros(min(1, x.numel()), dtype=x.dtype, device=x.device), inclusive[:-1]])


# --- compute-sanitizer cases ----------------------------------------------------------------------

def _sanitizer_case(launcher: str, dtype: torch.dtype, n: int, exclusive: bool = False,
                    offset: int = 0) -> None:
    x = random_tensor(n + offset, dtype, runtime.DEVICE)[offset:]
    globals()[launcher](x, exclusive=exclusive)
    torch.cuda.synchronize()


def _sanitizer_cases() -> dict[str, Callable[[], None]]:
    # Sizes that leave partial blocks and tiles; the multi-block sizes recurse over tile totals.
    cases = {}
    for dtype, suffix in DTYPE_SUFFIX.items():
        case = functools.partial
        cases[f"scan_hillis_steele_kernel_{suffix}"] = case(_sanitizer_case, "scan_numba_hillis_steele", dtype, 1000)
        cases[f"scan_blelloch_kernel_{suffix}"] = case(_sanitizer_case, "scan_numba_blelloch", dtype, 2000, True)
        cases[f"scan_add_offsets_kernel[{suffix}]"] = case(_sanitizer_case, "scan_numba_multiblock", dtype,
                                                            3 * 2 * MULTIBLOCK_THREADS + 17)
        cases[f"scan_hillis_steele_{suffix}"] = case(_sanitizer_case, "scan_cuda_hillis_steele", dtype, 1000)
        cases[f"scan_blelloch_{suffix}"] = case(_sanitizer_case, "scan_cuda_blelloch", dtype, 2000, True)
        cases[f"scan_add_offsets_{suffix}"] = case(_sanitizer_case, "scan_cuda_multiblock", dtype,
                                                   2 * CUDA_MULTIBLOCK_THREADS * 1100 + 17)
        cases[f"scan_lookback_{suffix}"] = case(_sanitizer_case, "scan_cuda_lookback", dtype, 5 * LOOKBACK_TILE + 37)
        cases[f"scan_lookback_{suffix}[unaligned, exclusive]"] = case(
            _sanitizer_case, "scan_cuda_lookback", dtype, 3 * LOOKBACK_TILE + 5, True, 1)
    return cases


# One small synchronized launch per kernel (and per dtype), for compute-sanitizer.
SANITIZER_CASES: dict[str, Callable[[], None]] = _sanitizer_cases()
