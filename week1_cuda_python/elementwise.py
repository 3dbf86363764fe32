"""Element-wise kernels in Numba: scalar multiply, ReLU, SAXPY, and a 2-D matrix add.

What it teaches: the same one-thread-per-element pattern as vector add, with a scalar
argument (typed to the array's dtype so float32 stays float32), a data-dependent select
(ReLU, written so NaN passes through as torch does), a grid-stride SAXPY, and a 2-D grid
whose x index walks a row so each warp touches 128 contiguous bytes.

Cost model (n elements of b bytes each): scale and ReLU read n and write n: 2nb bytes,
n FLOPs. SAXPY (out = alpha * x + y) reads 2n and writes n: 3nb bytes, 2n FLOPs. Matrix add
of two R x C matrices: 3RCb bytes, RC FLOPs. All well under 1 FLOP per byte: memory-bound,
judged in GB/s against a device-to-device copy measured in the same run.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from course import interop, runtime, validate
from course.bench import Benchmark, pow2_label
from course.check import random_tensor
from course.gpu import cuda

# EXERCISE NOTE: The launchers' input checks (course.validate), the output allocation and the
#   skipped launch on empty input are given: you write the kernels (one thread per element, the
#   bounds check, NaN through ReLU), the scalar's type and the grid sizes.

THREADS_PER_BLOCK = 256
BLOCK_2D = (32, 8)  # 32 threads along a row (one warp, 128 contiguous bytes), 8 rows
DTYPES = (torch.float32, torch.float64)
_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}


# --- kernels -----------------------------------------------------------------------------

@cuda.jit
def scale_kernel(x, alpha, out):
    # BEGIN EXERCISE: one thread per element: i = cuda.grid(1), guard i < out.size, out[i] = alpha * x[i]
    # HINT: the vector-add pattern again with one input: each thread scales its own element, and the last
    #   block's extra threads do nothing.
    # HINT: global index, bounds guard, one store of alpha times the input.
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * x[i]
    # END EXERCISE


@cuda.jit
def relu_kernel(x, out):
    # BEGIN EXERCISE: one thread per element, guarded; keep NaN (careful: NaN > 0 is False, so
    #   `v if v > 0 else 0` turns NaN into 0 where torch.relu keeps it)
    # HINT: ReLU is a select, not arithmetic, and comparisons with NaN are always False: pick the comparison
    #   whose False branch keeps v.
    # HINT: guarded global index, load into a local, then one conditional expression that returns 0 only when
    #   v is known to be negative.
    # HINT: `0 if v < 0 else v` (not `v if v > 0 else 0`).
    i = cuda.grid(1)
    if i < out.size:
        v = x[i]
        # `v if v > 0 else 0` would turn NaN into 0 (NaN > 0 is False); torch.relu keeps NaN.
        out[i] = 0 if v < 0 else v
    # END EXERCISE


ELEMENTS_PER_THREAD = 4


@cuda.jit(device=True)
def _relu(v):
    # BEGIN EXERCISE: ReLU of one value, NaN kept (the select of relu_kernel)
    # HINT: a device function is an ordinary function the kernels inline; it holds the same NaN-keeping
    #   select as relu_kernel.
    # HINT: a single return of the conditional expression, testing `v < 0` so NaN falls through to v.
    return 0 if v < 0 else v
    # END EXERCISE


@cuda.jit
def relu_x4_kernel(x, out):
    """Four elements per thread, all four loads issued before any store: four independent
    memory requests in flight per thread instead of one, which is what keeps HBM busy
    (Little's law: bytes in flight = bandwidth x latency). Accesses stay coalesced: the
    k-th element of each thread is THREADS_PER_BLOCK apart, so a warp reads 128 contiguous bytes."""
    # BEGIN EXERCISE: thread t of block b owns base = b * 256 * 4 + t and base + 256, + 512, + 768;
    #   when the last of them is < n: four loads into registers first, then four stores of _relu; else
    #   (the last block) element by element with the bounds check
    # HINT: four independent loads issued before any store keep four memory requests in flight per thread;
    #   keeping the four elements 256 apart keeps every warp's accesses contiguous (coalesced).
    # HINT: compute base from the block and thread index (each block covers 256 * 4 elements) and the last of
    #   the four offsets; if the last is in range do 4 loads then 4 stores, otherwise loop k over 4 with
    #   a bounds check.
    # HINT: `base = cuda.blockIdx.x * (THREADS_PER_BLOCK * ELEMENTS_PER_THREAD) + cuda.threadIdx.x`; offsets
    #   are base + k * THREADS_PER_BLOCK.
    n = out.size
    base = cuda.blockIdx.x * (THREADS_PER_BLOCK * ELEMENTS_PER_THREAD) + cuda.threadIdx.x
    last = base + (ELEMENTS_PER_THREAD - 1) * THREADS_PER_BLOCK
    if last < n:
        v0 = x[base]
        v1 = x[base + THREADS_PER_BLOCK]
        v2 = x[base + 2 * THREADS_PER_BLOCK]
        v3 = x[last]
        out[base] = _relu(v0)
        out[base + THREADS_PER_BLOCK] = _relu(v1)
        out[base + 2 * THREADS_PER_BLOCK] = _relu(v2)
        out[last] = _relu(v3)
    else:  # the last block: element by element, with the bounds check
        for k in range(ELEMENTS_PER_THREAD):
            i = base + k * THREADS_PER_BLOCK
            if i < n:
                out[i] = _relu(x[i])
    # END EXERCISE


@cuda.jit
def scale_x4_kernel(x, alpha, out):
    """scale_kernel with four independent loads per thread (see relu_x4_kernel)."""
    # BEGIN EXERCISE: as relu_x4_kernel with alpha * v: the four elements base + k * 256, all four
    #   loads before any store when they are all in range, element by element in the last block
    # HINT: the same four-loads-in-flight layout as relu_x4_kernel; only the per-element operation changes.
    # HINT: copy the structure: base, last, a fast path with four loads then four stores of alpha * v, and a
    #   guarded loop for the final block.
    n = out.size
    base = cuda.blockIdx.x * (THREADS_PER_BLOCK * ELEMENTS_PER_THREAD) + cuda.threadIdx.x
    last = base + (ELEMENTS_PER_THREAD - 1) * THREADS_PER_BLOCK
    if last < n:
        v0 = x[base]
        v1 = x[base + THREADS_PER_BLOCK]
        v2 = x[base + 2 * THREADS_PER_BLOCK]
        v3 = x[last]
        out[base] = alpha * v0
        out[base + THREADS_PER_BLOCK] = alpha * v1
        out[base + 2 * THREADS_PER_BLOCK] = alpha * v2
        out[last] = alpha * v3
    else:
        for k in range(ELEMENTS_PER_THREAD):
            i = base + k * THREADS_PER_BLOCK
            if i < n:
                out[i] = alpha * x[i]
    # END EXERCISE


@cuda.jit
def saxpy_kernel(alpha, x, y, out):
    # BEGIN EXERCISE: one thread per element, guarded: out[i] = alpha * x[i] + y[i]
    # HINT: saxpy is memory-bound (two loads, one store, two flops): one guarded thread per element is all it
    #   needs.
    # HINT: global index, guard against out.size, then one fused expression.
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * x[i] + y[i]
    # END EXERCISE


@cuda.jit
def saxpy_grid_stride_kernel(alpha, x, y, out):
    # BEGIN EXERCISE: the grid-stride loop: i from cuda.grid(1) to out.size in steps of cuda.gridsize(1)
    # HINT: a grid smaller than n walks the array in steps of the whole grid's thread count; range() stops at
    #   the end, so no extra guard is needed.
    # HINT: start from the global index, step by cuda.gridsize(1), one store per trip.
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, out.size, stride):
        out[i] = alpha * x[i] + y[i]
    # END EXERCISE


@cuda.jit
def matrix_add_kernel(a, b, out):
    # BEGIN EXERCISE: col, row = cuda.grid(2) (x over columns: why?); guard both against out.shape
    # HINT: x is the fastest-moving thread index inside a warp, so putting x on the column makes 32
    #   neighbouring threads read 32 neighbouring elements of one row (one coalesced transaction).
    # HINT: unpack the 2-D grid index with x first, guard row and column, then one add-and-store.
    # HINT: `col, row = cuda.grid(2)`
    # x walks columns: the 32 threads of a warp share a row and read 32 neighbouring
    # elements. With x over rows instead, each thread of a warp would hit a different row.
    col, row = cuda.grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = a[row, col] + b[row, col]
    # END EXERCISE


# --- launchers -----------------------------------------------------------------------------

def _blocks(n: int) -> int:
    # BEGIN EXERCISE: blocks of THREADS_PER_BLOCK threads that cover n elements (a partial last block counts)
    # HINT: round up, in integers: a partial last block still needs launching.
    # HINT: `(n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK`
    return (n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
    # END EXERCISE


def _scalar(alpha, name: str, dtype: torch.dtype):
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"{name} must be a Python int or float, got {type(alpha).__name__}")
    # BEGIN EXERCISE: the scalar in the array's NumPy dtype (_NUMPY[dtype]): a Python float is a
    #   float64 and would make every float32 multiply float64
    # HINT: NumPy promotes float32 * Python float to float64 inside a Numba kernel, doubling the work and
    #   changing the rounding; convert alpha to the array's own dtype first.
    # HINT: look the NumPy scalar type up in _NUMPY by the torch dtype and call it on alpha.
    return _NUMPY[dtype](alpha)  # a float64 scalar would promote every float32 multiply
    # END EXERCISE


def _flat(*tensors):
    return [interop.to_numba(t.view(-1)) for t in tensors]


def scale(x: torch.Tensor, alpha: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = alpha * x, one thread per element."""
    validate.tensor(x, "x", dtypes=DTYPES)
    alpha = _scalar(alpha, "alpha", x.dtype)
    out = validate.output(out, x)
    if out.numel():
        x_flat, out_flat = _flat(x, out)
        scale_kernel[_blocks(out.numel()), THREADS_PER_BLOCK](x_flat, alpha, out_flat)
    return out


def relu(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = max(x, 0), NaN kept, one thread per element."""
    validate.tensor(x, "x", dtypes=DTYPES)
    out = validate.output(out, x)
    if out.numel():
        relu_kernel[_blocks(out.numel()), THREADS_PER_BLOCK](*_flat(x, out))
    return out


def _blocks_x4(n: int) -> int:
    # BEGIN EXERCISE: blocks for the x4 kernels: each block covers THREADS_PER_BLOCK * ELEMENTS_PER_THREAD elements
    # HINT: a block of the x4 kernels covers threads-per-block times elements-per-thread elements, so the
    #   ceiling division uses that product.
    # HINT: a name for the per-block count, then the usual `(n + per_block - 1) // per_block`.
    per_block = THREADS_PER_BLOCK * ELEMENTS_PER_THREAD
    return (n + per_block - 1) // per_block
    # END EXERCISE


def scale_x4(x: torch.Tensor, alpha: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = alpha * x, four elements per thread."""
    validate.tensor(x, "x", dtypes=DTYPES)
    alpha = _scalar(alpha, "alpha", x.dtype)
    out = validate.output(out, x)
    if out.numel():
        x_flat, out_flat = _flat(x, out)
        scale_x4_kernel[_blocks_x4(out.numel()), THREADS_PER_BLOCK](x_flat, alpha, out_flat)
    return out


def relu_x4(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = max(x, 0), NaN kept, four elements per thread."""
    validate.tensor(x, "x", dtypes=DTYPES)
    out = validate.output(out, x)
    if out.numel():
        relu_x4_kernel[_blocks_x4(out.numel()), THREADS_PER_BLOCK](*_flat(x, out))
    return out


def _saxpy_checked(alpha, x, y, out):
    validate.tensor(x, "x", dtypes=DTYPES)
    validate.tensor(y, "y", dtypes=DTYPES)
    validate.same_dtype(x=x, y=y)
    validate.same_shape(x=x, y=y)
    return _scalar(alpha, "alpha", x.dtype), validate.output(out, x)


def saxpy(alpha: float, x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = alpha * x + y ("single-precision a x plus y", BLAS level 1), one thread per element."""
    alpha, out = _saxpy_checked(alpha, x, y, out)
    if out.numel():
        saxpy_kernel[_blocks(out.numel()), THREADS_PER_BLOCK](alpha, *_flat(x, y, out))
    return out


def saxpy_grid_stride(alpha: float, x: torch.Tensor, y: torch.Tensor,
                      out: torch.Tensor | None = None) -> torch.Tensor:
    """out = alpha * x + y on a grid of at most 32 blocks per SM, each thread looping."""
    alpha, out = _saxpy_checked(alpha, x, y, out)
    if out.numel():
        # BEGIN EXERCISE: enough blocks for n, but at most 32 per SM (runtime.sm_count()): the loop covers the rest
        # HINT: more resident blocks than the SMs can hold only adds scheduling; cap the grid and let each
        #   thread loop over the rest.
        # HINT: `min(` blocks for n `, 32 * runtime.sm_count())`
        blocks = min(_blocks(out.numel()), 32 * runtime.sm_count())
        # END EXERCISE
        saxpy_grid_stride_kernel[blocks, THREADS_PER_BLOCK](alpha, *_flat(x, y, out))
    return out


def matrix_add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = a + b for 2-D tensors, on a 2-D grid of 32 x 8 blocks."""
    validate.tensor(a, "a", dtypes=DTYPES, ndim=2)
    validate.tensor(b, "b", dtypes=DTYPES, ndim=2)
    validate.same_dtype(a=a, b=b)
    validate.same_shape(a=a, b=b)
    out = validate.output(out, a)
    rows, cols = out.shape
    if out.numel():
        # BEGIN EXERCISE: the 2-D grid (blocks along x, blocks along y): x covers the columns, y the rows
        # HINT: each grid axis is a ceiling division of its own extent by the block's extent along it; x is
        #   the column axis.
        # HINT: a tuple: ceil(cols / BLOCK_2D[0]) first, then ceil(rows / BLOCK_2D[1]).
        grid = (math.ceil(cols / BLOCK_2D[0]), math.ceil(rows / BLOCK_2D[1]))
        # END EXERCISE
        if grid[1] > 65535:
            raise ValueError(f"a has {rows} rows: more than 65535 blocks of {BLOCK_2D[1]} rows in y")
        matrix_add_kernel[grid, BLOCK_2D](*(interop.to_numba(t) for t in (a, b, out)))
    return out


# --- benchmark -------------------------------------------------------------------------------

# BEGIN SOLUTION ONLY: the benchmarks (they measure the solution's kernels)
def _vectors(count: int):
    def make(n: int):
        device = runtime.DEVICE
        return tuple(random_tensor(n, torch.float32, device) for _ in range(count)) + (torch.empty(n, device=device),)
    return make


def _matrices(n: int):
    device = runtime.DEVICE
    return (random_tensor((n, n), torch.float32, device), random_tensor((n, n), torch.float32, device),
            torch.empty((n, n), device=device))


BENCHMARKS = [
    Benchmark(
        name="elementwise_unary_week1", title="Scale (2x) and ReLU, float32 (Numba)",
        sizes=[1 << 24, 1 << 26, 1 << 28], sim_sizes=[1 << 10], size_label=pow2_label,
        make_inputs=_vectors(1),
        variants={"torch": lambda x, out: torch.mul(x, 2.0, out=out),
                  "scale": lambda x, out: scale(x, 2.0, out=out),
                  "torch_relu": lambda x, out: torch.clamp_min(x, 0.0, out=out),
                  "relu": relu,
                  "scale_x4": lambda x, out: scale_x4(x, 2.0, out=out),
                  "relu_x4": relu_x4},
        headline=("scale", "relu", "scale_x4", "relu_x4"),
        bytes=lambda n: 2 * 4 * n, flops=lambda n: n,
        notes="bytes = 2 x 4 x n (read x, write out); 'torch' is torch.mul(x, 2.0)",
    ),
    Benchmark(
        name="saxpy_week1", title="SAXPY out = a x + y, float32 (Numba)",
        sizes=[1 << 24, 1 << 26, 1 << 28], sim_sizes=[1 << 10], size_label=pow2_label,
        make_inputs=_vectors(2),
        variants={"torch": lambda x, y, out: torch.add(y, x, alpha=2.0, out=out),
                  "saxpy": lambda x, y, out: saxpy(2.0, x, y, out=out),
                  "saxpy_grid_stride": lambda x, y, out: saxpy_grid_stride(2.0, x, y, out=out)},
        headline=("saxpy", "saxpy_grid_stride"),
        bytes=lambda n: 3 * 4 * n, flops=lambda n: 2 * n,
        notes="bytes = 3 x 4 x n (read x, y; write out); FLOPs = 2n",
    ),
    Benchmark(
        name="matrix_add_week1", title="2-D matrix add, float32 (Numba, 2-D grid)",
        sizes=[4096, 8192, 16384], sim_sizes=[32], size_label=lambda n: f"{n}x{n}",
        make_inputs=_matrices,
        variants={"torch": lambda a, b, out: torch.add(a, b, out=out), "matrix_add": matrix_add},
        headline=("matrix_add",),
        bytes=lambda n: 3 * 4 * n * n, flops=lambda n: n * n,
        notes="bytes = 3 x 4 x n^2 (read a, b; write out)",
    ),
]
# END SOLUTION ONLY
