"""Matrix transpose in Numba: naive, shared-memory coalesced, and padded against bank conflicts.

What it teaches: a transpose reads rows and writes columns, so one side of a naive kernel
is always uncoalesced. Staging a 32x32 tile in shared memory lets both the global read and
the global write walk rows; padding the tile to 33 columns moves each column of the tile
into 32 different banks, so the column reads from shared memory stop serialising.

Cost model for an R x C float32 matrix: 8RC bytes (read once, write once), no FLOPs. The
ceiling is a device-to-device copy of the same bytes.
"""
from __future__ import annotations

import math

import torch

from course import runtime  # before numba: chooses the GPU or the CUDA simulator
from course import interop, validate
from course.bench import Benchmark
from course.check import random_tensor

from numba import cuda, float32, float64  # noqa: E402  (after course.runtime on purpose)

TILE = 32       # a warp's width: one tile row is 128 contiguous bytes
BLOCK_ROWS = 8  # 32 x 8 = 256 threads per block; each thread moves TILE / BLOCK_ROWS = 4 elements
DTYPES = (torch.float32, torch.float64)


@cuda.jit
def transpose_naive_kernel(x, out):
    """Reads coalesced (x walks a row of x), writes strided: neighbouring threads write
    elements R floats apart, one 32-byte sector each for 4 useful bytes."""
    col, row = cuda.grid(2)
    if row < x.shape[0] and col < x.shape[1]:
        out[col, row] = x[row, col]


def _tiled_kernel(pad: int, dtype):
    """Shared-memory transpose with a (TILE, TILE + pad) tile of `dtype` (pad 0 or 1)."""
    width = TILE + pad  # a closure constant: Numba needs shared-array shapes known at compile time

    @cuda.jit
    def kernel(x, out):
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
        # Write the transposed tile with threadIdx.x along out's rows: coalesced again. The
        # shared reads tile[tx, ty + j] walk a column: with 32 floats per row, all 32 lie in
        # one bank (32-way conflict); with 33, in 32 different banks.
        out_col = cuda.blockIdx.y * TILE + tx
        for j in range(0, TILE, BLOCK_ROWS):
            out_row = cuda.blockIdx.x * TILE + ty + j
            if out_row < cols and out_col < rows:
                out[out_row, out_col] = tile[tx, ty + j]

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
    if math.ceil(max(rows, cols) / TILE) > 65535:
        raise ValueError(f"x has shape {(rows, cols)}: more than 65535 tiles along one grid axis")
    return out


def transpose_naive(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x.T (a new contiguous C x R tensor), one thread per element."""
    out = _checked(x, out)
    if x.numel():
        rows, cols = x.shape
        grid = (math.ceil(cols / TILE), math.ceil(rows / BLOCK_ROWS))
        transpose_naive_kernel[grid, (TILE, BLOCK_ROWS)](interop.to_numba(x), interop.to_numba(out))
    return out


def _tiled(kind, x, out):
    out = _checked(x, out)
    if x.numel():
        rows, cols = x.shape
        grid = (math.ceil(cols / TILE), math.ceil(rows / TILE))
        _TILED[kind, x.dtype][grid, (TILE, BLOCK_ROWS)](interop.to_numba(x), interop.to_numba(out))
    return out


def transpose_shared(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x.T through a 32x32 shared-memory tile: both global accesses coalesced."""
    return _tiled("shared", x, out)


def transpose_padded(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """As transpose_shared, with the tile padded to 33 columns: no shared-memory bank conflicts."""
    return _tiled("padded", x, out)


def _inputs(n: int):
    device = runtime.DEVICE
    return random_tensor((n, n), torch.float32, device), torch.empty((n, n), device=device)


BENCHMARKS = [
    Benchmark(
        name="transpose_week1", title="Transpose, float32 (Numba): naive, shared, padded",
        sizes=[4096, 8192, 16384], sim_sizes=[64], size_label=lambda n: f"{n}x{n}",
        make_inputs=_inputs,
        variants={"torch": lambda x, out: out.copy_(x.t()), "naive": transpose_naive,
                  "shared": transpose_shared, "padded": transpose_padded},
        headline=("naive", "shared", "padded"),
        bytes=lambda n: 2 * 4 * n * n,
        notes="bytes = 2 x 4 x n^2 (read x, write out); 'torch' is out.copy_(x.t())",
    ),
]
