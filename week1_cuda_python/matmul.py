"""The fp32 matmul ladder: C = A @ B, from one thread per output to warp tiling.

This is week 1's assignment: a GPU matmul in Numba, then in CUDA C, each step measured
against torch.matmul (cuBLAS) in fp32 with TF32 turned off, so both sides do the same
arithmetic on the same CUDA cores.

What it teaches: memory coalescing (which thread gets which output), data reuse through
shared memory (tiles) and registers (each thread computing a block of outputs), vectorized
128-bit accesses, and the warp as a unit of tiling.

Cost model for A (M x K) @ B (K x N): 2*M*N*K FLOPs; at least 4*(M*K + K*N + M*N) bytes.
At 4096^3 that is 137 GFLOP on 201 MB: arithmetic intensity ~680 FLOP/byte, far right of
the H100's ridge (~50 TFLOP/s / 3 TB/s ~ 17 FLOP/byte), so a good matmul is compute-bound.
A naive one is not: reading A and B from global memory for every FMA is 8 bytes per 2
FLOPs, 0.25 FLOP/byte, and only the caches save it. Each rung raises the reuse:

  rung                      global loads per FMA   where the reuse comes from
  naive / coalesced         2                      (L1/L2 caches only)
  shared tiles (T=16, 32)   2/T                    a T x T tile shared by the block
  1-D register blocking     as 2-D tiling below    one B value from shared feeds TM FMAs
  2-D register blocking     1/64 (128x128 tiles)   a TM x TN outer product per thread
  vectorized, warp tiling   same                   fewer, wider instructions; warp-local reads

Numba rungs (any M, N, K): `matmul_numba_naive`, `matmul_numba_tiled`,
`matmul_numba_regblock`. CUDA C rungs (`kernels/matmul.cu`, through PyCUDA):
`matmul_cuda_naive` ... `matmul_cuda_warptiling`; the last four assume sizes that are
multiples of their tiles, so their launcher pads the inputs with zeros when needed
(zeros add nothing to a dot product) and copies the result out.
"""
from __future__ import annotations

import functools
import math
from pathlib import Path

import torch

from course import interop, validate
from course.gpu import cuda, float32, DEVICE

CUDA_SOURCE = Path(__file__).parent / "kernels" / "matmul.cu"
DTYPES = (torch.float32,)
TILE = 16  # Numba shared-memory tile: 16 x 16 threads, 256 per block
MAX_ELEMENTS = 2**31 - 1  # the CUDA C kernels index with 32-bit ints inside a matrix
MAX_GRID_Y = 65535

# EXERCISE NOTE: The launchers' input checks (_checked: a is M x K, b is K x N, float32, contiguous),
#   the output allocation and the empty cases (_trivial: M or N = 0, zeros when K = 0) are given.
#   Handle sizes that are not a multiple of your tile: bounds checks (Numba, CUDA C rungs 1-3), or
#   inputs padded with zeros (CUDA C rungs 4-7, whose kernels assume whole tiles).


# --- Numba kernels -----------------------------------------------------------------------

@cuda.jit
def matmul_numba_naive_kernel(a, b, c):
    """One thread per output. x (the fastest-varying thread index) is the column, so the
    threads of a warp read consecutive elements of B's row and write a contiguous piece of C."""
    # BEGIN EXERCISE: col, row = cuda.grid(2) (x is the column: why?); guard both; acc = float32(0)
    #   summed over k of a[row, k] * b[k, col]; c[row, col] = acc
    # HINT: each thread computes one dot product, row of A times column of B; with x on the column the 32
    #   threads of a warp read 32 consecutive elements of B's row k (coalesced) and all read the same A
    #   element (a broadcast).
    # HINT: 2-D grid index (x first), guard both against C's shape, a float32 accumulator, a loop over k, one
    #   store.
    # HINT: `acc += a[row, k] * b[k, col]` with `acc = float32(0.0)` (a Python 0.0 would make it float64).
    col, row = cuda.grid(2)
    m, k_total = a.shape
    n = b.shape[1]
    if row < m and col < n:
        acc = float32(0.0)
        for k in range(k_total):
            acc += a[row, k] * b[k, col]
        c[row, col] = acc
    # END EXERCISE


@cuda.jit
def matmul_numba_tiled_kernel(a, b, c):
    """A TILE x TILE block stages tiles of A and B in shared memory: each global load then
    feeds TILE FMAs instead of one. Out-of-range elements load as 0."""
    # BEGIN EXERCISE: TILE x TILE shared tiles of a and b (one cuda.shared.array per line: the simulator
    #   merges two on one line); for each k0 step of TILE: load one element of each tile per thread (0
    #   outside the matrices), cuda.syncthreads(), accumulate TILE products, cuda.syncthreads() again;
    #   then write c with a bounds check
    # HINT: each element loaded into a shared tile is reused by TILE threads, cutting global traffic by a
    #   factor TILE; padding tiles with zeros past the matrix edges lets the inner loop run unguarded.
    # HINT: two shared arrays on two lines; row/col from block and thread indices; loop k0 over K in steps of
    #   TILE: guarded loads (else 0) of a[row, k0 + tx] and b[k0 + ty, col], barrier, TILE FMAs, barrier;
    #   bounds-checked store at the end.
    # HINT: the second `cuda.syncthreads()` after the FMAs: otherwise a fast warp overwrites the tile a slow
    #   warp is still reading.
    # One cuda.shared.array per line: the simulator merges two allocations written on one.
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    col = cuda.blockIdx.x * TILE + tx
    row = cuda.blockIdx.y * TILE + ty
    m, k_total = a.shape
    n = b.shape[1]
    acc = float32(0.0)
    for k0 in range(0, k_total, TILE):
        # tx walks along a row of each tile: coalesced global loads, conflict-free stores.
        if row < m and k0 + tx < k_total:
            a_tile[ty, tx] = a[row, k0 + tx]
        else:
            a_tile[ty, tx] = 0.0
        if k0 + ty < k_total and col < n:
            b_tile[ty, tx] = b[k0 + ty, col]
        else:
            b_tile[ty, tx] = 0.0
        cuda.syncthreads()  # the whole tile is loaded before anyone reads it
        for k in range(TILE):
            acc += a_tile[ty, k] * b_tile[k, tx]
        cuda.syncthreads()  # nobody overwrites the tile while a slower warp still reads it
    if row < m and col < n:
        c[row, col] = acc
    # END EXERCISE


def _regblock_kernel(bm: int, bn: int, bk: int, tm: int, tn: int):
    """Build the 2-D register-blocked Numba kernel for one set of tile sizes.

    The sizes are closure constants, which Numba compiles in as literals: every loop over
    them unrolls, and the accumulator array `acc` becomes tm*tn registers.
    """
    rows_of_threads = bm // tm
    cols_of_threads = bn // tn
    threads = rows_of_threads * cols_of_threads
    a_loads = (bm * bk) // threads
    b_loads = (bk * bn) // threads
    a_pitch = bm + 4  # padding: the transposed stores below would hit one bank 8 times

    @cuda.jit
    def kernel(a, b, c):
        # A is stored transposed (k-major) so that the inner loop reads both tiles by k.
        a_tile = cuda.shared.array((bk, a_pitch), float32)
        b_tile = cuda.shared.array((bk, bn), float32)
        acc = cuda.local.array((tm, tn), float32)
        reg_m = cuda.local.array(tm, float32)
        reg_n = cuda.local.array(tn, float32)
        m, k_total = a.shape
        n = b.shape[1]
        tid = cuda.threadIdx.x
        block_row = cuda.blockIdx.y * bm
        block_col = cuda.blockIdx.x * bn
        # A thread's outputs are strided by rows_of_threads / cols_of_threads rather than
        # adjacent: for each (i, j) the 16 threads of a half-warp then read 16 consecutive
        # shared-memory words (no bank conflicts) and write 16 consecutive floats of C.
        thread_row = tid // cols_of_threads
        thread_col = tid % cols_of_threads
        for i in range(tm):
            for j in range(tn):
                acc[i, j] = 0.0
        for k0 in range(0, k_total, bk):
            # BEGIN EXERCISE: load the bm x bk tile of A TRANSPOSED (a_tile[kk, r]) and the bk x bn tile of B
            #   (a_loads and b_loads elements per thread: idx = tid + load * threads), 0 outside the
            #   matrices; then cuda.syncthreads()
            # HINT: all the block's threads cooperate on the copy: element idx = tid + load * threads of the
            #   flattened tile, so consecutive threads read consecutive addresses; A is stored transposed
            #   (k-major) so the compute loop reads both tiles along k.
            # HINT: for each of a_loads: idx -> (r, kk) with // and % by bk, a guarded load into a_tile[kk,
            #   r] (0 outside); for each of b_loads: idx -> (kk, cc) with // and % by bn, into b_tile[kk,
            #   cc]; then one barrier.
            # HINT: the transpose happens in the store: `a_tile[kk, r] = a[block_row + r, k0 + kk]`.
            for load in range(a_loads):
                idx = tid + load * threads
                r = idx // bk
                kk = idx % bk
                if block_row + r < m and k0 + kk < k_total:
                    a_tile[kk, r] = a[block_row + r, k0 + kk]
                else:
                    a_tile[kk, r] = 0.0
            for load in range(b_loads):
                idx = tid + load * threads
                kk = idx // bn
                cc = idx % bn
                if k0 + kk < k_total and block_col + cc < n:
                    b_tile[kk, cc] = b[k0 + kk, block_col + cc]
                else:
                    b_tile[kk, cc] = 0.0
            cuda.syncthreads()
            # END EXERCISE
            # BEGIN EXERCISE: for each kk of the tile: tm values of A (rows thread_row + i * rows_of_threads)
            #   and tn of B (columns thread_col + j * cols_of_threads) into reg_m, reg_n, then their outer
            #   product into acc; cuda.syncthreads() before the next tile overwrites these
            # HINT: register blocking: for each k, a thread loads tm values of A and tn of B from shared
            #   memory once and forms all tm * tn products, so each shared read feeds several FMAs.
            # HINT: loop kk over bk: fill reg_m (A at the thread's strided rows) and reg_n (B at its strided
            #   columns), then a double loop adding their outer product into acc; one barrier after the
            #   kk loop.
            # HINT: the thread's i-th row is `thread_row + i * rows_of_threads` (strided, so a half-warp
            #   reads consecutive words).
            for kk in range(bk):
                for i in range(tm):
                    reg_m[i] = a_tile[kk, thread_row + i * rows_of_threads]
                for j in range(tn):
                    reg_n[j] = b_tile[kk, thread_col + j * cols_of_threads]
                for i in range(tm):
                    for j in range(tn):
                        acc[i, j] += reg_m[i] * reg_n[j]
            cuda.syncthreads()
            # END EXERCISE
        # BEGIN EXERCISE: store acc[i, j] at row block_row + thread_row + i * rows_of_threads, column
        #   block_col + thread_col + j * cols_of_threads, bounds-checked
        # HINT: the thread's outputs sit at the same strided positions it read: tile origin + thread offset +
        #   i (or j) times the thread grid's extent; edges of C need a check.
        # HINT: double loop over i, j; compute row and col; check row < m (outside the j loop) and col < n;
        #   store acc[i, j].
        for i in range(tm):
            row = block_row + thread_row + i * rows_of_threads
            if row < m:
                for j in range(tn):
                    col = block_col + thread_col + j * cols_of_threads
                    if col < n:
                        c[row, col] = acc[i, j]
        # END EXERCISE

    kernel.tiles = (bm, bn, bk, tm, tn, threads)
    return kernel


# 128x64 outputs per block of 256 threads, 8x4 per thread: 32 FMAs per 12 shared loads.
# Chosen by measurement on the H100 at 4096^3 (TFLOP/s, one sweep): 8x4 per thread on
# 128x64 tiles 18.9; 8x4 on 128x128 (512 threads) 16.8; 4x4 on 64x64 15.2; 8x8 on 128x128 8.0.
matmul_numba_regblock_kernel = _regblock_kernel(bm=128, bn=64, bk=8, tm=8, tn=4)


# --- launchers -----------------------------------------------------------------------------

def _checked(a, b, out):
    """Validate A (M x K), B (K x N) and `out` (M x N); return (out, M, N, K)."""
    validate.tensor(a, "a", dtypes=DTYPES, ndim=2)
    validate.tensor(b, "b", dtypes=DTYPES, ndim=2)
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b:
        raise ValueError(f"inner dimensions must match: a is {m} x {k}, b is {k_b} x {n} "
                         f"(a.shape[1] = {k} != b.shape[0] = {k_b})")
    for name, count in (("a", m * k), ("b", k * n), ("out", m * n)):
        if count > MAX_ELEMENTS:
            raise ValueError(f"{name} would have {count} elements; these kernels index with "
                             f"32-bit integers (at most {MAX_ELEMENTS})")
    if out is None:
        out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    else:
        validate.tensor(out, "out", dtypes=DTYPES, ndim=2)
        if tuple(out.shape) != (m, n):
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {(m, n)}")
    if math.ceil(m / TILE) > MAX_GRID_Y:
        raise ValueError(f"a has {m} rows: the grid would need more than {MAX_GRID_Y} blocks in y")
    return out, m, n, k


def _trivial(out, m, n, k) -> bool:
    """Empty output: nothing to launch. K == 0: every dot product is empty, C = 0 (as torch)."""
    if m == 0 or n == 0:
        return True
    if k == 0:
        out.zero_()
        return True
    return False


def matmul_numba_naive(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """C = A @ B (float32), one Numba thread per output, 16x16 blocks."""
    out, m, n, k = _checked(a, b, out)
    if _trivial(out, m, n, k):
        return out
    # BEGIN EXERCISE: TILE x TILE threads per block, one per output: the grid (x over C's columns, y over its rows)
    # HINT: one thread per output of C and TILE x TILE blocks: x covers the columns, y the rows.
    # HINT: `(math.ceil(n / TILE), math.ceil(m / TILE))`
    grid = (math.ceil(n / TILE), math.ceil(m / TILE))
    # END EXERCISE
    matmul_numba_naive_kernel[grid, (TILE, TILE)](*(interop.to_numba(t) for t in (a, b, out)))
    return out


def matmul_numba_tiled(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """C = A @ B (float32) with TILE x TILE shared-memory tiles (Numba)."""
    out, m, n, k = _checked(a, b, out)
    if _trivial(out, m, n, k):
        return out
    # BEGIN EXERCISE: one TILE x TILE block per TILE x TILE tile of C: the grid
    # HINT: the tiled kernel also gives each block one TILE x TILE tile of C, so the grid is the same as the
    #   naive one.
    # HINT: a tuple of ceiling divisions: columns by TILE along x, rows by TILE along y.
    grid = (math.ceil(n / TILE), math.ceil(m / TILE))  # x over the tiles of a row of C
    # END EXERCISE
    matmul_numba_tiled_kernel[grid, (TILE, TILE)](*(interop.to_numba(t) for t in (a, b, out)))
    return out


def matmul_numba_regblock(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """C = A @ B (float32): 128x64 block tiles, 8x4 outputs per thread in registers (Numba)."""
    out, m, n, k = _checked(a, b, out)
    if _trivial(out, m, n, k):
        return out
    kernel = matmul_numba_regblock_kernel
    bm, bn, _, _, _, threads = kernel.tiles
    # BEGIN EXERCISE: one block of `threads` threads per bm x bn tile of C: the grid
    # HINT: a register-blocked block computes a bm x bn tile of C with `threads` threads, so the grid counts
    #   tiles, not threads.
    # HINT: `(math.ceil(n / bn), math.ceil(m / bm))`: x over C's columns.
    grid = (math.ceil(n / bn), math.ceil(m / bm))
    # END EXERCISE
    kernel[grid, threads](*(interop.to_numba(t) for t in (a, b, out)))
    return out


# CUDA C rungs: (kernel, block shape, how the grid is laid out, tile multiple (M, N, K) the
# kernel assumes or None when it checks bounds itself, whether it uses float4 accesses).
# The warp-tiling sizes must match WT_* in kernels/matmul.cu.
WT_BM, WT_BN, WT_BK, WT_THREADS = 128, 128, 8, 128
CUDA_RUNGS = {
    "naive": ("sgemm_naive", (32, 32, 1), "rows_in_x", None, False),
    "coalesced": ("sgemm_coalesced", (32, 32, 1), "cols_in_x", None, False),
    "shared": ("sgemm_shared", (32, 32, 1), "cols_in_x", None, False),
    "blocktile_1d": ("sgemm_blocktile_1d", (512, 1, 1), "cols_in_x", (64, 64, 8), False),
    "blocktile_2d": ("sgemm_blocktile_2d", (256, 1, 1), "cols_in_x", (128, 128, 8), False),
    "vectorized": ("sgemm_vectorized", (256, 1, 1), "cols_in_x", (128, 128, 8), True),
    "warptiling": ("sgemm_warptiling", (WT_THREADS, 1, 1), "cols_in_x", (WT_BM, WT_BN, WT_BK), True),
}


@functools.cache
def _cuda_c_kernel(name: str):
    return interop.cuda_kernel(CUDA_SOURCE, name, "PPPiii")  # three pointers, M, N, K as 32-bit ints


def _padded(t: torch.Tensor, rows: int, cols: int, aligned: bool) -> torch.Tensor:
    """`t`, or a zero-padded copy of it of shape (rows, cols) (also when float4 needs alignment)."""
    if tuple(t.shape) == (rows, cols) and not (aligned and t.data_ptr() % 16):
        return t
    padded = torch.zeros((rows, cols), dtype=t.dtype, device=t.device)
    padded[: t.shape[0], : t.shape[1]] = t
    return padded


def _round_up(x: int, multiple: int) -> int:
    return (x + multiple - 1) // multiple * multiple


def _launch_cuda_c(rung: str, a, b, out) -> torch.Tensor:
    out, m, n, k = _checked(a, b, out)
    if _trivial(out, m, n, k):
        return out
    name, block, layout, multiple, vector = CUDA_RUNGS[rung]
    # BEGIN EXERCISE: rungs with a tile multiple: pad A to (Mp, Kp) and B to (Kp, Np), the sizes rounded
    #   up to it (_padded, _round_up; float4 rungs also need 16-byte aligned pointers), compute into a
    #   padded C when needed, grid = (Np / bn, Mp / bm); the bounds-checked rungs: c = out, a grid
    #   covering M x N with `block` threads, threadIdx.x over rows or over columns as `layout` says
    # HINT: the fast rungs have no bounds checks, so they need sizes that are multiples of their tile: pad
    #   the operands with zeros (zeros add nothing to the dot products) and compute into a padded C when
    #   the shape or alignment differs; the simple rungs check bounds and only need a grid over M x N.
    # HINT: if `multiple`: unpack (bm, bn, bk), round m, n, k up, pad a and b with _padded, pick c (out or a
    #   fresh padded tensor), grid in tiles; else: grid from `block`, oriented by `layout` (rows_in_x
    #   puts M along x).
    # HINT: the padded grid: `(np_ // bn, mp // bm)`; allocate a new c when `(mp, np_) != (m, n)` or the
    #   float4 rung sees an unaligned out.
    c = out
    if multiple is not None:
        bm, bn, bk = multiple
        mp, np_, kp = _round_up(m, bm), _round_up(n, bn), _round_up(k, bk)
        a = _padded(a, mp, kp, vector)
        b = _padded(b, kp, np_, vector)
        if (mp, np_) != (m, n) or (vector and out.data_ptr() % 16):
            c = torch.empty((mp, np_), dtype=out.dtype, device=out.device)
        grid = (np_ // bn, mp // bm)
    else:
        mp, np_, kp = m, n, k
        rows, cols = math.ceil(m / block[1]), math.ceil(n / block[0])
        grid = (math.ceil(m / block[0]), math.ceil(n / block[1])) if layout == "rows_in_x" else (cols, rows)
    # END EXERCISE
    if grid[1] > MAX_GRID_Y:
        raise ValueError(f"grid of {grid} blocks exceeds CUDA's {MAX_GRID_Y} blocks in y")
    # Stream None: the legacy default stream that torch queues on, so ordering holds.
    _cuda_c_kernel(name).prepared_async_call(grid, block, None, a.data_ptr(), b.data_ptr(), c.data_ptr(),
                                             mp, np_, kp)
    if c is not out:
        out.copy_(c[:m, :n])
    return out


def matmul_cuda_naive(a, b, out=None):
    """`sgemm_naive`: one thread per output, threadIdx.x over rows (uncoalesced)."""
    return _launch_cuda_c("naive", a, b, out)


def matmul_cuda_coalesced(a, b, out=None):
    """`sgemm_coalesced`: one thread per output, threadIdx.x over columns."""
    return _launch_cuda_c("coalesced", a, b, out)


def matmul_cuda_shared(a, b, out=None):
    """`sgemm_shared`: 32x32 shared-memory tiles."""
    return _launch_cuda_c("shared", a, b, out)


def matmul_cuda_blocktile_1d(a, b, out=None):
    """`sgemm_blocktile_1d`: 64x64 block tiles, 8 outputs of a column per thread."""
    return _launch_cuda_c("blocktile_1d", a, b, out)


def matmul_cuda_blocktile_2d(a, b, out=None):
    """`sgemm_blocktile_2d`: 128x128 block tiles, 8x8 outputs per thread."""
    return _launch_cuda_c("blocktile_2d", a, b, out)


def matmul_cuda_vectorized(a, b, out=None):
    """`sgemm_vectorized`: rung 5 with float4 global accesses and A transposed in shared memory."""
    return _launch_cuda_c("vectorized", a, b, out)


def matmul_cuda_warptiling(a, b, out=None):
    """`sgemm_warptiling`: block, warp and thread tiles; register prefetch of the next tile."""
    return _launch_cuda_c("warptiling", a, b, out)


NUMBA_LAUNCHERS = ("matmul_numba_naive", "matmul_numba_tiled", "matmul_numba_regblock")
CUDA_C_LAUNCHERS = tuple(f"matmul_cuda_{rung}" for rung in CUDA_RUNGS)


# --- benchmark -------------------------------------------------------------------------------

def torch_matmul_fp32(a, b, out=None):
    """torch.matmul in true fp32: TF32 tensor cores off for the call, the setting restored."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return torch.matmul(a, b, out=out)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


# BEGIN SOLUTION ONLY: the benchmarks (they measure the solution's kernels)
# Imported here, not at the top: only the benchmarks use them, and the exercise stub leaves this
# region out (it imports the benchmarks from this module instead).
from course.bench import Benchmark  # noqa: E402
from course.check import random_tensor  # noqa: E402
from course.rungs import Ladder, Rung as LadderRung  # noqa: E402  the variants as numbered rungs
def _inputs(n: int):
    device = DEVICE
    return (random_tensor((n, n), torch.float32, device), random_tensor((n, n), torch.float32, device),
            torch.empty((n, n), device=device))


BENCHMARKS = [
    Benchmark(
        name="matmul_week1",
        title="Matmul ladder, float32 (Numba and CUDA C) vs torch.matmul fp32 (TF32 off)",
        sizes=[4096],
        sim_sizes=[32],
        size_label=lambda n: f"{n}^3",
        make_inputs=_inputs,
        variants={
            "torch": torch_matmul_fp32,
            "numba_naive": matmul_numba_naive,
            "numba_tiled": matmul_numba_tiled,
            "numba_regblock": matmul_numba_regblock,
            **{f"cuda_{rung}": globals()[f"matmul_cuda_{rung}"] for rung in CUDA_RUNGS},
        },
        gpu_only=tuple(f"cuda_{rung}" for rung in CUDA_RUNGS),
        headline=("numba_tiled", "numba_regblock", "cuda_warptiling"),
        bytes=lambda n: 3 * 4 * n * n,
        flops=lambda n: 2 * n**3,
        compute_dtype=torch.float32,
        notes="FLOPs = 2 M N K; bytes = 4 (MK + KN + MN), each matrix once (the minimum)",
    ),
]

# The ladder, runnable by number: `python -m course rung matmul_cuda 5` (course/rungs.py). Every rung
# sums K = 4096 fp32 products per element, as torch does in fp32 (TF32 off) but in another order:
# the norm-wise difference is a few fp32 roundings times sqrt(K), ~1e-6; 1e-4 leaves room for that
# and catches any wrong tile, index or tail.
MATMUL_STORIES = {
    "numba_naive": "Numba, one thread per element of C, operands straight from global memory",
    "numba_tiled": "Numba, 16x16 tiles of A and B staged in shared memory",
    "numba_regblock": "Numba, each thread computes an 8x4 block of C in registers (128x64 block tiles)",
    "cuda_naive": "CUDA C, one thread per element, threadIdx.x along rows: uncoalesced loads",
    "cuda_coalesced": "threadIdx.x along columns: a warp reads consecutive addresses",
    "cuda_shared": "32x32 tiles in shared memory",
    "cuda_blocktile_1d": "each thread computes 8 elements of a column: fewer shared-memory loads per FMA",
    "cuda_blocktile_2d": "each thread computes an 8x8 block: outer products from registers",
    "cuda_vectorized": "float4 loads and a transposed A tile: 16-byte accesses",
    "cuda_warptiling": "warp tiles: each warp owns a sub-block, threads a block inside it",
}
LADDERS = [Ladder("matmul_cuda", BENCHMARKS[0], [LadderRung(v, story) for v, story in MATMUL_STORIES.items()],
                  rel_tol=1e-4)]
# END SOLUTION ONLY
