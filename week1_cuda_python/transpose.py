"""Matrix transpose: naive, shared-memory, padded (Numba), then CUDA C with 64 x 64 tiles.

What it teaches: a transpose reads rows and writes columns, so one side of a naive kernel
is always uncoalesced. Staging a 32x32 tile in shared memory lets both the global read and
the global write walk rows; padding the tile to 33 columns moves each column of the tile
into 32 different banks, so the column reads from shared memory stop serialising. The last
rung (`transpose_cuda_tile64`, CUDA C) makes each thread move 16 elements instead of 4 (more
loads in flight per thread, a quarter of the blocks and barriers per byte) and reads rows as
8-byte vectors, with the tile split by column parity so that the wider stores into shared
memory stay free of bank conflicts.

Cost model for an R x C matrix: 2 R C itemsize bytes (read once, write once), no FLOPs. The
ceiling is a device-to-device copy of the same bytes.

Launchers: Numba `transpose_naive`, `transpose_shared`, `transpose_padded`; CUDA C
(`kernels/transpose.cu`, PyCUDA) `transpose_cuda_padded`, `transpose_cuda_tile64`; float32
and float64. `python -m week1_cuda_python.transpose --sweep` (GPU) times the tile64 block shapes.
"""
from __future__ import annotations

import functools
import math
import sys
from pathlib import Path
from typing import Callable

import torch

from course import interop, validate
from course.bench import Benchmark
from course.check import random_tensor
from course.gpu import cuda, float32, float64, DEVICE

TILE = 32       # a warp's width: one tile row is 128 contiguous bytes
BLOCK_ROWS = 8  # 32 x 8 = 256 threads per block; each thread moves TILE / BLOCK_ROWS = 4 elements
MAX_GRID_Y = 65535
DTYPES = (torch.float32, torch.float64)
CUDA_SOURCE = Path(__file__).parent / "kernels" / "transpose.cu"
TILE64 = 64
TILE64_ROWS = 8  # threads per block 32 x 8; must match TILE64_ROWS in kernels/transpose.cu
NUMBA_LAUNCHERS = ("transpose_naive", "transpose_shared", "transpose_padded")
CUDA_C_LAUNCHERS = ("transpose_cuda_padded", "transpose_cuda_tile64")
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}

# EXERCISE NOTE: out = x.T as a new contiguous (C x R) tensor. The input checks (_checked), the launch
#   on a non-empty x and the PyCUDA plumbing (module, kernel lookup, argument formats) are given: you
#   write the kernels and their grids.


@cuda.jit
def transpose_naive_kernel(x, out):
    """Reads coalesced (x walks a row of x), writes strided: neighbouring threads write
    elements R floats apart, one 32-byte sector each for 4 useful bytes."""
    # BEGIN EXERCISE: one thread per element: col, row = cuda.grid(2) (x walks a row of x); guard both;
    #   out[col, row] = x[row, col]
    # HINT: the simplest transpose: each thread copies one element to the mirrored position; reads are
    #   coalesced because x is the column of x, writes are strided (that is the lesson's baseline).
    # HINT: unpack the 2-D grid index with x first, guard against x's shape (rows, cols), then one store with
    #   the indices swapped.
    # HINT: `out[col, row] = x[row, col]`
    col, row = cuda.grid(2)
    if row < x.shape[0] and col < x.shape[1]:
        out[col, row] = x[row, col]
    # END EXERCISE


def _tiled_kernel(pad: int, dtype):
    """Shared-memory transpose with a (TILE, TILE + pad) tile of `dtype` (pad 0 or 1)."""
    width = TILE + pad  # a closure constant: Numba needs shared-array shapes known at compile time

    @cuda.jit
    def kernel(x, out):
        # BEGIN EXERCISE: tile = cuda.shared.array((TILE, width), dtype); read the block's TILE x TILE tile
        #   of x with threadIdx.x along x's rows (coalesced), BLOCK_ROWS rows at a time, bounds-checked;
        #   cuda.syncthreads()
        # HINT: stage the tile in shared memory so that both the global read and the later global write are
        #   row-wise (coalesced); the block has only BLOCK_ROWS rows of threads, so each thread loads
        #   several rows of the tile.
        # HINT: allocate the shared tile (its width is the padded one you were given), compute this block's
        #   column from blockIdx.x, loop j over range(0, TILE, BLOCK_ROWS) with a bounds check, then a
        #   barrier.
        # HINT: `cuda.syncthreads()` after the loop: the write phase reads elements other threads loaded.
        tile = cuda.shared.array((TILE, width), dtype)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        rows, cols = x.shape
        # Read a tile of x with threadIdx.x along x's rows: coalesced.
        col = cuda.blockIdx.x * TILE + tx
        for j in range(0, TILE, BLOCK_ROWS):
            row = cuda.blockIdx.y * TILE + ty + j
            if row < rows and col < cols:
                tile[ty + j, tx] = x[row, col]
        cuda.syncthreads()
        # END EXERCISE
        # Write the transposed tile with threadIdx.x along out's rows: coalesced again. The
        # shared reads tile[tx, ty + j] walk a column: with 32 floats per row, all 32 lie in
        # one bank (32-way conflict); with 33, in 32 different banks.
        # BEGIN EXERCISE: write the transposed tile with threadIdx.x along out's rows (coalesced again): the
        #   block's tile of out sits at the swapped block coordinates, and each thread reads a column of
        #   the shared tile; bounds-check against out's shape (C x R)
        # HINT: the tile is written to the block at the swapped block coordinates (blockIdx.y becomes the
        #   column block); threadIdx.x again walks a row of out, so the write coalesces, while the read
        #   walks a column of the shared tile (the padding avoids bank conflicts there).
        # HINT: out's column comes from blockIdx.y and tx, out's row from blockIdx.x, ty and j; loop j in
        #   steps of BLOCK_ROWS, bounds-check against out's shape (cols x rows).
        # HINT: the store reads the tile transposed: `tile[tx, ty + j]`.
        out_col = cuda.blockIdx.y * TILE + tx
        for j in range(0, TILE, BLOCK_ROWS):
            out_row = cuda.blockIdx.x * TILE + ty + j
            if out_row < cols and out_col < rows:
                out[out_row, out_col] = tile[tx, ty + j]
        # END EXERCISE

    return kernel


transpose_shared_kernel_f32 = _tiled_kernel(0, float32)
transpose_padded_kernel_f32 = _tiled_kernel(1, float32)
transpose_shared_kernel_f64 = _tiled_kernel(0, float64)
transpose_padded_kernel_f64 = _tiled_kernel(1, float64)
_TILED = {("shared", torch.float32): transpose_shared_kernel_f32,
          ("padded", torch.float32): transpose_padded_kernel_f32,
          ("shared", torch.float64): transpose_shared_kernel_f64,
          ("padded", torch.float64): transpose_padded_kernel_f64}


def _checked(x, out):
    validate.tensor(x, "x", dtypes=DTYPES, ndim=2)
    rows, cols = x.shape
    if out is None:
        out = torch.empty((cols, rows), dtype=x.dtype, device=x.device)
    else:
        validate.tensor(out, "out", dtypes=(x.dtype,), ndim=2)
        if tuple(out.shape) != (cols, rows):
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {(cols, rows)} (x transposed)")
    # The naive kernel's grid has rows / BLOCK_ROWS blocks in y, at most 65535 in CUDA; the
    # CUDA C kernels take the sizes as 32-bit ints.
    if math.ceil(rows / BLOCK_ROWS) > MAX_GRID_Y or cols > 2**31 - 1:
        raise ValueError(f"x has shape {(rows, cols)}: at most {MAX_GRID_Y * BLOCK_ROWS} rows "
                         f"(65535 blocks of {BLOCK_ROWS} rows in the grid's y) and 2^31 - 1 columns")
    return out


def transpose_naive(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x.T (a new contiguous C x R tensor), one thread per element."""
    out = _checked(x, out)
    if x.numel():
        rows, cols = x.shape
        # BEGIN EXERCISE: one thread per element in TILE x BLOCK_ROWS blocks: the grid (x over x's
        #   columns, y over its rows)
        # HINT: with one thread per element, each block covers TILE columns and BLOCK_ROWS rows, so each axis
        #   divides by a different extent.
        # HINT: a tuple: ceil(cols / TILE) along x, ceil(rows / BLOCK_ROWS) along y.
        grid = (math.ceil(cols / TILE), math.ceil(rows / BLOCK_ROWS))
        # END EXERCISE
        transpose_naive_kernel[grid, (TILE, BLOCK_ROWS)](interop.to_numba(x), interop.to_numba(out))
    return out


def _tiled(kind, x, out):
    out = _checked(x, out)
    if x.numel():
        rows, cols = x.shape
        # BEGIN EXERCISE: one block of TILE x BLOCK_ROWS threads per TILE x TILE tile of x: the grid
        # HINT: now a block covers a whole TILE x TILE tile (its threads loop over the rows), so both axes
        #   divide by TILE; a partial tile at the edge still gets a block.
        # HINT: `(math.ceil(cols / TILE), math.ceil(rows / TILE))`
        grid = (math.ceil(cols / TILE), math.ceil(rows / TILE))  # a partial tile gets a block too
        # END EXERCISE
        _TILED[kind, x.dtype][grid, (TILE, BLOCK_ROWS)](interop.to_numba(x), interop.to_numba(out))
    return out


def transpose_shared(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x.T through a 32x32 shared-memory tile: both global accesses coalesced."""
    return _tiled("shared", x, out)


def transpose_padded(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """As transpose_shared, with the tile padded to 33 columns: no shared-memory bank conflicts."""
    return _tiled("padded", x, out)


@functools.cache
def _cuda_c_kernel(rung: str, dtype: torch.dtype, defines: tuple[str, ...] = ()):
    """`transpose_<rung>_<dtype>`; `defines` (-DTILE64_ROWS=...) for the sweep."""
    signature = "PPii" if rung == "padded" else "PPiii"  # x, out, rows, cols (, vectorize)
    return interop.cuda_kernel(CUDA_SOURCE, f"transpose_{rung}_{_SUFFIX[dtype]}", signature, defines)


def transpose_cuda_padded(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x.T with `transpose_padded_*` (CUDA C): the padded 32x33 tile, 32x8 threads."""
    out = _checked(x, out)
    if x.numel():
        rows, cols = x.shape
        # BEGIN EXERCISE: as the Numba padded rung: one block of TILE x BLOCK_ROWS threads per tile, the
        #   grid in PyCUDA's (x, y) form
        # HINT: the CUDA C padded kernel has the same block-per-tile layout as the Numba one, so the grid is
        #   the same.
        # HINT: a PyCUDA grid is an (x, y) tuple: ceil over columns first, then over rows, both by TILE.
        grid = (math.ceil(cols / TILE), math.ceil(rows / TILE))
        # END EXERCISE
        # Stream None: the legacy default stream that torch queues on, so ordering holds.
        _cuda_c_kernel("padded", x.dtype).prepared_async_call(
            grid, (TILE, BLOCK_ROWS, 1), None, x.data_ptr(), out.data_ptr(), rows, cols)
    return out


def _tile64(x, out, rows_per_block: int = TILE64_ROWS, defines: tuple[str, ...] = ()) -> torch.Tensor:
    rows, cols = x.shape
    # BEGIN EXERCISE: one block per TILE64 x TILE64 tile: the grid; vectorize (1 or 0) only when every
    #   row of x starts aligned to a pair of elements: an even width and a base aligned to two
    #   elements (x.data_ptr()), else the kernel reads element by element
    # HINT: reading two elements at once needs every row start to sit on a two-element boundary: that holds
    #   only when the width is even and the base pointer is aligned to 2 * element size.
    # HINT: the grid divides both extents by TILE64; then one boolean expression (cols even and data_ptr
    #   aligned) turned into 0/1 with int().
    # HINT: the alignment test: `x.data_ptr() % (2 * x.element_size()) == 0`
    grid = (math.ceil(cols / TILE64), math.ceil(rows / TILE64))
    # Reading a row as pairs needs every row start aligned to a pair (2 elements): an even
    # width and an aligned base. Otherwise the kernel reads element by element.
    vectorize = int(cols % 2 == 0 and x.data_ptr() % (2 * x.element_size()) == 0)
    # END EXERCISE
    _cuda_c_kernel("tile64", x.dtype, defines).prepared_async_call(
        grid, (32, rows_per_block, 1), None, x.data_ptr(), out.data_ptr(), rows, cols, vectorize)
    return out


def transpose_cuda_tile64(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x.T with `transpose_tile64_*` (CUDA C): 64x64 tiles, 16 elements per thread,
    rows read as 2-element vectors into two padded half-tiles (even and odd columns)."""
    out = _checked(x, out)
    if x.numel():
        _tile64(x, out)
    return out


# --- compute-sanitizer cases ----------------------------------------------------------------------

def _sanitizer_case(launcher: str, dtype: torch.dtype, shape=(193, 130), offset: int = 0) -> None:
    # 193 x 130: full 64-tiles (the vector path) and partial tiles on both edges; 32-tiles too.
    rows, cols = shape
    x = random_tensor(rows * cols + offset, dtype, DEVICE)[offset:].view(rows, cols)
    globals()[launcher](x)
    torch.cuda.synchronize()


def _sanitizer_cases() -> dict[str, Callable[[], None]]:
    cases = {"transpose_naive_kernel": functools.partial(_sanitizer_case, "transpose_naive", torch.float32)}
    for dtype, suffix in _SUFFIX.items():
        for kind in ("shared", "padded"):
            cases[f"transpose_{kind}_kernel_{suffix}"] = functools.partial(_sanitizer_case, f"transpose_{kind}", dtype)
        cases[f"transpose_padded_{suffix}"] = functools.partial(_sanitizer_case, "transpose_cuda_padded", dtype)
        cases[f"transpose_tile64_{suffix}"] = functools.partial(_sanitizer_case, "transpose_cuda_tile64", dtype)
        cases[f"transpose_tile64_{suffix}[odd width, unaligned]"] = functools.partial(
            _sanitizer_case, "transpose_cuda_tile64", dtype, (130, 67), 1)
    return cases


# One small synchronized launch per kernel (and per dtype), for compute-sanitizer.
SANITIZER_CASES: dict[str, Callable[[], None]] = _sanitizer_cases()


# --- benchmark ---------------------------------------------------------------------------------------

# BEGIN SOLUTION ONLY: the benchmarks, sweep and command line (they measure the solution's kernels)
def _inputs(n: int):
    device = DEVICE
    return random_tensor((n, n), torch.float32, device), torch.empty((n, n), device=device)


BENCHMARKS = [
    Benchmark(
        name="transpose_week1", title="Transpose, float32: naive, shared, padded (Numba); padded, 64x64 tiles (CUDA C)",
        sizes=[4096, 8192, 16384], sim_sizes=[64], size_label=lambda n: f"{n}x{n}",
        make_inputs=_inputs,
        variants={"torch": lambda x, out: out.copy_(x.t()), "naive": transpose_naive,
                  "shared": transpose_shared, "padded": transpose_padded,
                  "cuda_padded": transpose_cuda_padded, "cuda_tile64": transpose_cuda_tile64},
        gpu_only=("cuda_padded", "cuda_tile64"),
        headline=("naive", "shared", "padded", "cuda_tile64"),
        bytes=lambda n: 2 * 4 * n * n,
        notes="bytes = 2 x 4 x n^2 (read x, write out); 'torch' is out.copy_(x.t())",
    ),
]


# --- command line: --sweep (GPU) -----------------------------------------------------------------------

def sweep(sizes=(8192, 16384), rows_options=(4, 8, 16, 32)) -> list[dict]:
    """Time every rung and transpose_tile64 with 32 x rows threads per block (float32, GPU only)."""
    from course import bench

    copy_gbps = bench.copy_bandwidth_gbps()
    print(f"copy ceiling {copy_gbps:.0f} GB/s; bytes = 8 n^2")
    print(f"{'n':>6} {'variant':<28} {'ms':>8} {'GB/s':>6} {'% copy':>7} exact")
    rows = []
    for n in sizes:
        x, out = _inputs(n)
        expected = x.t().contiguous()
        candidates = {"torch out.copy_(x.t())": lambda: out.copy_(x.t()),
                      "numba padded": lambda: transpose_padded(x, out),
                      "cuda padded": lambda: transpose_cuda_padded(x, out)}
        for block_rows in rows_options:
            defines = () if block_rows == TILE64_ROWS else (f"-DTILE64_ROWS={block_rows}",)
            candidates[f"cuda tile64, 32x{block_rows} threads"] = functools.partial(
                _tile64, x, out, block_rows, defines)
        for label, call in candidates.items():
            try:
                call()
                exact = bool(torch.equal(out, expected))
                timing = bench.time_gpu(call, [()])
            except Exception as error:  # a shape that fails to compile or launch: report, go on
                print(f"{n:>6} {label:<28} failed: {str(error).splitlines()[0][:60]}")
                continue
            gbps = 8 * n * n / (timing.median_ms * 1e-3) / 1e9
            rows.append({"n": n, "variant": label, **bench.timing_fields(timing), "gbps": gbps})
            print(f"{n:>6} {label:<28} {bench.ms_cell(rows[-1], '8.3f')} {gbps:6.0f} {100 * gbps / copy_gbps:6.1f}% {exact}")
        del x, out, expected
    print(bench.footnote(rows), end="")
    return rows


def main(argv=None) -> int:
    from course.sweep import sweep_main

    return sweep_main(sweep, argv, doc=__doc__, help="time the transposes' block shapes", gpu_only=True)


if __name__ == "__main__":
    sys.exit(main())
# END SOLUTION ONLY
