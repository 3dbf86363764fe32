"""Rotating a matrix by 90 degrees in Numba: naive, shared-memory tiled, padded tile.

What it teaches: a rotation is a transpose plus a reversal. Clockwise, element (i, j) of an
R x C matrix lands at (j, R - 1 - i) of the C x R result: transpose, then reverse each row.
Counter-clockwise it lands at (C - 1 - j, i): transpose, then reverse the order of the rows.
So it has the transpose's problem (a naive kernel reads rows and writes columns: one side is
uncoalesced) and the transpose's cure (stage a 32 x 32 tile in shared memory, write it back
along rows of the output, pad the tile to 33 columns against bank conflicts). The reversal
costs nothing: it only changes which tile a block writes and which tile row a thread reads.

Cost model for an R x C matrix of b-byte elements: 2bRC bytes (8RC for float32), read once
and written once, no FLOPs: the ceiling is a device-to-device copy of the same bytes.
torch.rot90 returns a view of a flipped copy, and making it contiguous copies again, so torch
moves the bytes twice (16RC): a one-pass kernel can beat it by up to 2x.
"""
from __future__ import annotations

import math

import torch

from course import interop, validate
from course.bench import Benchmark
from course.check import random_tensor
from course.gpu import cuda, float32, float64, DEVICE

TILE = 32       # a warp's width: a tile row is 128 contiguous bytes of float32
BLOCK_ROWS = 8  # 32 x 8 = 256 threads per block; each moves TILE / BLOCK_ROWS = 4 elements
DTYPES = (torch.float32, torch.float64)
MAX_GRID = 65535  # blocks along y

# EXERCISE NOTE: For an R x C matrix x the result is C x R (contiguous): clockwise
#   out[j, R - 1 - i] = x[i, j] (torch.rot90(x, -1)), counter-clockwise out[C - 1 - j, i] = x[i, j]
#   (torch.rot90(x, 1)). The input checks (_checked) and the launch on a non-empty x are given.
#   The tiled kernels are the tiled transpose (lesson transpose) where each block writes the
#   mirror-image tile of out and each thread reads the mirror-image row of the tile.


# --- kernels -----------------------------------------------------------------------------

@cuda.jit
def rotate_cw_naive_kernel(x, out):
    """Reads coalesced (x walks a row of x); writes down a column of out: each thread of a
    warp hits a different row, one 32-byte sector for 4 useful bytes."""
    # BEGIN EXERCISE: one thread per element of x: col, row = cuda.grid(2) (x walks a row of x); guard
    #   both; out[col, rows - 1 - row] = x[row, col]
    # HINT: a clockwise rotation is a transpose followed by a mirror: row i of x becomes column R - 1 - i of
    #   out, element j of that row lands in row j.
    # HINT: 2-D grid index with x on the column (coalesced reads), guard against x's shape, one store at the
    #   rotated position.
    # HINT: the destination: `out[col, rows - 1 - row]`.
    col, row = cuda.grid(2)
    rows, cols = x.shape
    if row < rows and col < cols:
        out[col, rows - 1 - row] = x[row, col]
    # END EXERCISE


@cuda.jit
def rotate_ccw_naive_kernel(x, out):
    """Same access pattern, element (i, j) to (C - 1 - j, i)."""
    # BEGIN EXERCISE: as rotate_cw_naive_kernel, element (row, col) to out[cols - 1 - col, row]
    # HINT: counter-clockwise mirrors the other axis: column j of x becomes row C - 1 - j of out, row i
    #   becomes the column.
    # HINT: same three lines as the clockwise kernel; only the destination indices change.
    col, row = cuda.grid(2)
    rows, cols = x.shape
    if row < rows and col < cols:
        out[cols - 1 - col, row] = x[row, col]
    # END EXERCISE


def _tiled_kernel(clockwise: bool, pad: int, dtype):
    """Shared-memory rotation through a (TILE, TILE + pad) tile of `dtype`."""
    width = TILE + pad  # a closure constant: shared-array shapes must be known at compile time

    @cuda.jit
    def kernel(x, out):
        # BEGIN EXERCISE: tile = cuda.shared.array((TILE, width), dtype); block (bx, by) reads the tile of
        #   x at rows by * TILE.., cols bx * TILE.. with threadIdx.x along a row (coalesced), BLOCK_ROWS
        #   rows at a time (bounds-checked); then cuda.syncthreads()
        # HINT: staging through shared memory lets both the read of x and the write of out walk rows
        #   (coalesced); the read is exactly the tiled transpose's load phase.
        # HINT: shared tile (padded width given), this block's column from blockIdx.x * TILE + tx, loop j
        #   over range(0, TILE, BLOCK_ROWS) with a bounds check, then a barrier.
        # HINT: `tile[ty + j, tx] = x[row, col]` for in-range elements, then `cuda.syncthreads()`.
        tile = cuda.shared.array((TILE, width), dtype)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        rows, cols = x.shape
        # Block (bx, by) reads the tile of x at rows by*TILE.., cols bx*TILE.. along rows.
        col = cuda.blockIdx.x * TILE + tx
        for j in range(0, TILE, BLOCK_ROWS):
            row = cuda.blockIdx.y * TILE + ty + j
            if row < rows and col < cols:
                tile[ty + j, tx] = x[row, col]
        cuda.syncthreads()
        # END EXERCISE
        # Column c of the tile becomes one row of out. Thread tx writes the tx-th element of
        # that row, so a warp writes 32 consecutive elements (coalesced) and reads a column
        # of the tile: with 32 floats per tile row that is one bank, 32 times; with 33, 32
        # different banks.
        # BEGIN EXERCISE: write column c = ty + j of the tile as one row of out, thread tx writing its tx-th
        #   element (coalesced): the block writes the mirror-image tile of out (which one depends on the
        #   direction), and clockwise each thread reads the mirror-image row of the tile (TILE - 1 - tx);
        #   bounds-check both coordinates (a partial tile's mirror starts below 0)
        # HINT: tile column c becomes one row of out; thread tx writes element tx of that row, so the warp
        #   writes contiguously; which out tile the block writes, and whether the tile is read reversed,
        #   follow from the rotation formulas.
        # HINT: loop j in steps of BLOCK_ROWS with c = ty + j; branch on `clockwise`: compute out_row and
        #   out_col for the block (clockwise: row from bx, column counted back from rows; ccw: row
        #   counted back from cols, column from by), bounds-check (>= 0 on the mirrored side), store from
        #   the tile.
        # HINT: clockwise: `out_col = rows - (cuda.blockIdx.y + 1) * TILE + tx` reading `tile[TILE - 1 - tx,
        #   c]`.
        for j in range(0, TILE, BLOCK_ROWS):
            c = ty + j
            if clockwise:
                # out[j', R-1-i]: out row bx*TILE + c; out column R - (by+1)*TILE + tx holds
                # tile row TILE-1-tx (the reversal), which exists when the column is >= 0.
                out_row = cuda.blockIdx.x * TILE + c
                out_col = rows - (cuda.blockIdx.y + 1) * TILE + tx
                if out_row < cols and out_col >= 0:
                    out[out_row, out_col] = tile[TILE - 1 - tx, c]
            else:
                # out[C-1-j', i]: tile column c goes to out row C-1-(bx*TILE + c).
                out_row = cols - 1 - (cuda.blockIdx.x * TILE + c)
                out_col = cuda.blockIdx.y * TILE + tx
                if out_row >= 0 and out_col < rows:
                    out[out_row, out_col] = tile[tx, c]
        # END EXERCISE

    return kernel


# Built for each direction, padding and dtype (Numba compiles each on first use).
_TILED = {(kind, cw, dtype): _tiled_kernel(cw, 1 if kind == "padded" else 0, nb_type)
          for kind in ("shared", "padded") for cw in (True, False)
          for dtype, nb_type in ((torch.float32, float32), (torch.float64, float64))}


# --- launchers -----------------------------------------------------------------------------

def _checked(x, clockwise, out):
    validate.tensor(x, "x", dtypes=DTYPES, ndim=2)
    if not isinstance(clockwise, bool):
        raise TypeError(f"clockwise must be True or False, got {clockwise!r}")
    rows, cols = x.shape
    if out is None:
        out = torch.empty((cols, rows), dtype=x.dtype, device=x.device)
    else:
        validate.tensor(out, "out", dtypes=(x.dtype,), ndim=2)
        if tuple(out.shape) != (cols, rows):
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {(cols, rows)} (x rotated)")
    if math.ceil(rows / BLOCK_ROWS) > MAX_GRID:
        raise ValueError(f"x has {rows} rows: more than {MAX_GRID} blocks of {BLOCK_ROWS} rows in y")
    return out


def rotate90_naive(x: torch.Tensor, clockwise: bool = True, out: torch.Tensor | None = None) -> torch.Tensor:
    """x rotated by 90 degrees (a new contiguous C x R tensor), one thread per element."""
    out = _checked(x, clockwise, out)
    if x.numel():
        rows, cols = x.shape
        kernel = rotate_cw_naive_kernel if clockwise else rotate_ccw_naive_kernel
        # BEGIN EXERCISE: one thread per element in blocks of TILE x BLOCK_ROWS threads: the grid (blocks
        #   along x over the columns of x, blocks along y over its rows)
        # HINT: one thread per element with blocks of TILE x BLOCK_ROWS threads: each axis is its own ceiling
        #   division.
        # HINT: `(math.ceil(cols / TILE), math.ceil(rows / BLOCK_ROWS))`: x over columns.
        grid = (math.ceil(cols / TILE), math.ceil(rows / BLOCK_ROWS))
        # END EXERCISE
        kernel[grid, (TILE, BLOCK_ROWS)](interop.to_numba(x), interop.to_numba(out))
    return out


def _tiled(kind, x, clockwise, out):
    out = _checked(x, clockwise, out)
    if x.numel():
        rows, cols = x.shape
        # BEGIN EXERCISE: one block of TILE x BLOCK_ROWS threads per TILE x TILE tile of x: the grid (x
        #   over the tiles of a row, y over the tiles of a column)
        # HINT: the tiled kernel maps one block to a whole TILE x TILE tile (its threads loop over the tile's
        #   rows), so both axes divide by TILE.
        # HINT: a tuple of ceil(cols / TILE) and ceil(rows / TILE); a partial edge tile still gets its block.
        grid = (math.ceil(cols / TILE), math.ceil(rows / TILE))
        # END EXERCISE
        _TILED[kind, clockwise, x.dtype][grid, (TILE, BLOCK_ROWS)](interop.to_numba(x), interop.to_numba(out))
    return out


def rotate90_shared(x: torch.Tensor, clockwise: bool = True, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rotation through a 32 x 32 shared-memory tile: reads and writes both coalesced."""
    return _tiled("shared", x, clockwise, out)


def rotate90_padded(x: torch.Tensor, clockwise: bool = True, out: torch.Tensor | None = None) -> torch.Tensor:
    """As rotate90_shared with a 32 x 33 tile: no shared-memory bank conflicts."""
    return _tiled("padded", x, clockwise, out)


def rotate90_torch(x: torch.Tensor, clockwise: bool = True, out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.rot90 made contiguous (k = -1 is clockwise): the reference."""
    rotated = torch.rot90(x, -1 if clockwise else 1, dims=(0, 1))
    return rotated.contiguous() if out is None else out.copy_(rotated)


LAUNCHERS = ("rotate90_naive", "rotate90_shared", "rotate90_padded")


def _sanitizer_case(launcher, clockwise):
    def run():
        x = random_tensor((45, 70), torch.float32, DEVICE)  # partial tiles on both axes
        launcher(x, clockwise)
        torch.cuda.synchronize()
    return run


SANITIZER_CASES = {
    f"{kernel} ({direction})": _sanitizer_case(launcher, direction == "clockwise")
    for kernel, launcher in (("rotate_naive_kernel", rotate90_naive), ("rotate_shared_kernel", rotate90_shared),
                             ("rotate_padded_kernel", rotate90_padded))
    for direction in ("clockwise", "counter-clockwise")
}


# --- benchmark -------------------------------------------------------------------------------

# BEGIN SOLUTION ONLY: the benchmarks (they measure the solution's kernels)
def _inputs(n: int):
    device = DEVICE
    return random_tensor((n, n), torch.float32, device), torch.empty((n, n), device=device)


BENCHMARKS = [
    Benchmark(
        name="rotate_week1", title="Rotate 90 degrees clockwise, float32 (Numba): naive, shared, padded",
        sizes=[4096, 8192, 16384], sim_sizes=[32], size_label=lambda n: f"{n}x{n}",
        make_inputs=_inputs,
        variants={"torch": lambda x, out: rotate90_torch(x, True, out),
                  "naive": lambda x, out: rotate90_naive(x, True, out),
                  "shared": lambda x, out: rotate90_shared(x, True, out),
                  "padded": lambda x, out: rotate90_padded(x, True, out)},
        headline=("naive", "shared", "padded"),
        bytes=lambda n: 2 * 4 * n * n,
        notes="bytes = 2 x 4 x n^2 (read x, write out once); 'torch' is out.copy_(torch.rot90(x, -1)), "
              "which moves them twice",
    ),
]
# END SOLUTION ONLY
