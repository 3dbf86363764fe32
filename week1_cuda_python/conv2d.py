"""2-D convolution of an image with a small filter: global, constant and shared memory.

What it teaches: data reuse across threads. Each input pixel is needed by K^2 neighbouring
outputs and each filter tap by every output, so where those values are read from decides the
speed: global memory through the caches (naive), the filter from constant memory, whose
cache broadcasts one value to a whole warp reading the same address (const), and the
block's input window plus its halo staged once in shared memory (tiled).

The operation is what deep learning calls convolution and mathematicians cross-correlation,
on one float32 channel, zero padding, output the size of the input:

    out[r, c] = sum_{dy, dx < K} x[r + dy - K//2, c + dx - K//2] * w[dy, dx]    (x = 0 outside)

= torch.nn.functional.conv2d(x[None, None], w[None, None], padding=K // 2)[0, 0], K odd.

Cost model for an H x W image and a K x K filter: 2 K^2 H W FLOPs; at least 8 H W bytes
(the image read once, the output written once; the filter is negligible). Arithmetic
intensity K^2 / 4 FLOP/byte: 2.25 at K = 3, 12 at K = 7, 56 at K = 15. The H100's fp32
ridge is ~52 TFLOP/s / 3.0 TB/s ~ 17 FLOP/byte (both measured), so a perfect kernel is
memory-bound up to K = 7 and compute-bound from K = 9. These kernels are not perfect: each
FMA also reads its input from L1 (naive) or shared memory (tiled), and an SM delivers 32
such 4-byte words per clock against 128 FMAs, which caps them near a quarter of fp32 peak
for large K. The last two CUDA C rungs attack that: `unrolled` compiles one kernel per K
(the tap loops unroll, filter offsets become constants), `regblock` also gives each thread
4 consecutive output rows, so one row of inputs loaded from shared memory into registers
feeds up to 4 outputs: (K + 3) K shared loads per 4 K^2 FMAs (0.3 per FMA at K = 15).

Rungs: `conv2d_numba_naive`, `conv2d_numba_const`, `conv2d_numba_tiled` (Numba),
`conv2d_cuda_naive`, `conv2d_cuda_const`, `conv2d_cuda_tiled`, `conv2d_cuda_unrolled`,
`conv2d_cuda_regblock` (`kernels/conv2d.cu`, PyCUDA).

Constant memory from Numba: `cuda.const.array_like(arr)` copies an array that exists when
the kernel is *compiled* into the module's constant bank. A filter known only at run time
therefore needs a kernel compiled for it: `_numba_kernel(...)` builds one per distinct
filter (cached, ~0.5 s of compilation for each new filter on a GPU) and reads the filter
back to the host on every call to find it, a synchronisation. CUDA C has no such limit: a
`__constant__` array is a symbol of the loaded module, and the launcher copies the filter
into it (`module.get_global` + an async device-to-device copy) before each launch.
"""
from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from course import interop, runtime, validate
from course.bench import Benchmark
from course.check import random_tensor
from course.gpu import cuda, float32

CUDA_SOURCE = Path(__file__).parent / "kernels" / "conv2d.cu"
DTYPES = (torch.float32,)
MAX_K = 15          # must match MAX_K in kernels/conv2d.cu (the constant-memory filter)
TILE_W = 32         # outputs per block along a row (a warp: 128 contiguous bytes)
TILE_H = 32         # outputs per block down a column, for the tiled rungs
BLOCK = (32, 8)     # threads per block (x, y); the tiled rungs give each thread 4 rows
ROWS_PER_THREAD = TILE_H // BLOCK[1]
MAX_GRID_Y = 65535

# EXERCISE NOTE: out[r, c] = sum_{dy, dx < K} x[r + dy - K//2, c + dx - K//2] * w[dy, dx] (x = 0 outside
#   the image): F.conv2d(x[None, None], w[None, None], padding=K // 2)[0, 0]. Sum the taps dy outer,
#   dx inner in every kernel. The launchers' checks (_checked: odd square K, K <= MAX_K for the
#   constant-memory rungs), the per-filter kernel cache and the PyCUDA plumbing are given.


# --- Numba kernels ---------------------------------------------------------------------------

@cuda.jit
def conv2d_naive_kernel(x, w, out):
    """One thread per output, image and filter read from global memory (through L1/L2)."""
    # BEGIN EXERCISE: one thread per output: col, row = cuda.grid(2); guard; acc = float32(0) over the K x
    #   K taps (dy outer, dx inner), skipping taps outside the image (zero padding); out[row, col] = acc
    # HINT: each output pixel is a weighted sum of the K x K pixels centred on it; taps that fall outside the
    #   image contribute 0 (zero padding), so skipping them is the same as adding zeros.
    # HINT: 2-D grid index with x on columns (coalesced); guard; r = K // 2; a float32 accumulator; two
    #   nested loops over dy and dx, each skipping out-of-image coordinates; one store.
    # HINT: the tap's image coordinates: `y = row + dy - r`, `xx = col + dx - r`.
    col, row = cuda.grid(2)  # x over columns: a warp reads 32 neighbouring pixels
    h, wd = x.shape
    if row < h and col < wd:
        k = w.shape[0]
        r = k // 2
        acc = float32(0.0)
        for dy in range(k):
            y = row + dy - r
            if 0 <= y < h:  # zero padding: taps outside the image add nothing
                for dx in range(k):
                    xx = col + dx - r
                    if 0 <= xx < wd:
                        acc += x[y, xx] * w[dy, dx]
        out[row, col] = acc
    # END EXERCISE


def _const_kernel(weights: np.ndarray):
    """conv2d_naive_kernel with the filter compiled into constant memory."""
    k = weights.shape[0]  # a closure constant: the loops below have fixed trip counts
    r = k // 2

    @cuda.jit
    def conv2d_const_kernel(x, out):
        # BEGIN EXERCISE: the filter from constant memory: w = cuda.const.array_like(weights) (the array
        #   the factory closed over, compiled into the kernel); then conv2d_naive_kernel's loop, k and r
        #   closure constants
        # HINT: all threads of a warp read the same filter tap at the same moment, which the constant cache
        #   serves with a single broadcast; Numba's const array copies the closed-over NumPy filter into
        #   the kernel.
        # HINT: first line: the constant array from `weights`; then the naive kernel's body unchanged, with k
        #   and r taken from the factory's closure.
        # HINT: `w = cuda.const.array_like(weights)`
        # All 32 threads of a warp read the same tap at the same moment: the constant
        # cache answers with one broadcast.
        w = cuda.const.array_like(weights)
        col, row = cuda.grid(2)
        h, wd = x.shape
        if row < h and col < wd:
            acc = float32(0.0)
            for dy in range(k):
                y = row + dy - r
                if 0 <= y < h:
                    for dx in range(k):
                        xx = col + dx - r
                        if 0 <= xx < wd:
                            acc += x[y, xx] * w[dy, dx]
            out[row, col] = acc
        # END EXERCISE

    return conv2d_const_kernel


def _tiled_kernel(weights: np.ndarray):
    """Shared-memory input tile with its halo, filter in constant memory."""
    k = weights.shape[0]
    r = k // 2
    tile_h = TILE_H + k - 1  # the outputs' window plus K//2 pixels of halo on each side
    tile_w = TILE_W + k - 1

    @cuda.jit
    def conv2d_tiled_kernel(x, out):
        # BEGIN EXERCISE: w in constant memory; tile = cuda.shared.array((tile_h, tile_w), float32): the
        #   block's outputs window plus the K//2 halo on each side, starting at image (by * TILE_H - r,
        #   bx * TILE_W - r); all the block's threads load it (consecutive threads, consecutive pixels),
        #   0 outside the image; cuda.syncthreads()
        # HINT: each input pixel is needed by up to K^2 outputs; loading the block's window (outputs plus an
        #   r-pixel halo on every side) into shared memory once makes those re-reads cheap; storing zeros
        #   outside the image removes bounds checks from the inner loop.
        # HINT: constant w; shared (tile_h, tile_w) float32 tile; the window's top-left in image coordinates
        #   (block origin minus r); a loop over the flattened tile by the block's linear thread id in
        #   steps of the block size, storing the pixel or 0; then a barrier.
        # HINT: flattened index i -> `ty = i // tile_w`, `tc = i - ty * tile_w`: consecutive threads load
        #   consecutive pixels (coalesced).
        w = cuda.const.array_like(weights)
        # One cuda.shared.array per line: the simulator merges allocations sharing a line.
        tile = cuda.shared.array((tile_h, tile_w), float32)
        h, wd = x.shape
        y0 = cuda.blockIdx.y * TILE_H - r  # image coordinates of tile[0, 0]
        x0 = cuda.blockIdx.x * TILE_W - r
        tx = cuda.threadIdx.x
        tid = cuda.threadIdx.y * cuda.blockDim.x + tx
        threads = cuda.blockDim.x * cuda.blockDim.y
        # Consecutive threads load consecutive pixels of a tile row (coalesced); each pixel
        # of the window is read from global memory once per block instead of K^2 times.
        for i in range(tid, tile_h * tile_w, threads):
            ty = i // tile_w
            tc = i - ty * tile_w
            y = y0 + ty
            xx = x0 + tc
            if 0 <= y < h and 0 <= xx < wd:
                tile[ty, tc] = x[y, xx]
            else:
                tile[ty, tc] = 0.0  # padding stored as 0: no bounds checks in the FMA loop
        cuda.syncthreads()  # the whole window is in place before anyone reads it
        # END EXERCISE
        # BEGIN EXERCISE: each thread computes ROWS_PER_THREAD outputs of column bx * TILE_W + tx, rows
        #   threadIdx.y + j * BLOCK[1] of the block's tile, from the shared tile (no bounds checks
        #   inside: the halo holds the zeros); bounds-check the store
        # HINT: each thread now computes several outputs of one column from the shared tile; the halo already
        #   holds the zeros, so the tap loop needs no bounds checks, only the final store does.
        # HINT: col from blockIdx.x and tx; loop j over ROWS_PER_THREAD with local row ly = threadIdx.y + j *
        #   BLOCK[1]; guard the image row/col; a float32 accumulator over dy, dx; store.
        # HINT: the shared read: `tile[ly + dy, tx + dx]` (tile coordinate = output's local coordinate + tap
        #   offset).
        col = cuda.blockIdx.x * TILE_W + tx
        for j in range(ROWS_PER_THREAD):
            ly = cuda.threadIdx.y + j * BLOCK[1]
            row = cuda.blockIdx.y * TILE_H + ly
            if row < h and col < wd:
                acc = float32(0.0)
                for dy in range(k):
                    for dx in range(k):
                        # A warp reads 32 consecutive words of one tile row: no bank conflicts.
                        acc += tile[ly + dy, tx + dx] * w[dy, dx]
                out[row, col] = acc
        # END EXERCISE

    return conv2d_tiled_kernel


_FACTORIES = {"const": _const_kernel, "tiled": _tiled_kernel}


@functools.lru_cache(maxsize=64)
def _numba_kernel(kind: str, filter_bytes: bytes, k: int):
    """The `kind` kernel compiled for one filter, keyed by its bytes (NaN-safe, unlike ==)."""
    weights = np.frombuffer(filter_bytes, dtype=np.float32).reshape(k, k).copy()
    return _FACTORIES[kind](weights)


# --- launchers -----------------------------------------------------------------------------

def _checked(x, w, out, *, max_k: int | None):
    """Validate image, filter and `out`; return `out` (allocated if None)."""
    validate.tensor(x, "x", dtypes=DTYPES, ndim=2)
    validate.tensor(w, "w", dtypes=DTYPES, ndim=2)
    k, k_cols = w.shape
    if k != k_cols:
        raise ValueError(f"w must be a square K x K filter, got shape {tuple(w.shape)}")
    if k % 2 == 0:
        raise ValueError(f"K must be odd (a filter centred on its pixel), got K = {k}")
    if max_k is not None and k > max_k:
        raise ValueError(f"w is {k} x {k}; this kernel takes filters up to {max_k} x {max_k} "
                         "(its constant-memory buffer and shared tile are sized for that)")
    h, wd = x.shape
    if max(h, wd) >= 2**31:
        raise ValueError(f"x has shape {(h, wd)}: rows and columns are indexed with 32-bit ints")
    if math.ceil(h / BLOCK[1]) > MAX_GRID_Y:
        raise ValueError(f"x has {h} rows: more than {MAX_GRID_Y} blocks of {BLOCK[1]} rows in y")
    return validate.output(out, x)


def _naive_grid(x) -> tuple:
    h, wd = x.shape
    # BEGIN EXERCISE: one thread per output in BLOCK = (32, 8) blocks: the grid (x over columns, y over rows)
    # HINT: one thread per output: blocks along x cover the columns with BLOCK[0] threads each, blocks along
    #   y the rows with BLOCK[1].
    # HINT: a tuple of two ceiling divisions: width by BLOCK[0] first, height by BLOCK[1].
    return (math.ceil(wd / BLOCK[0]), math.ceil(h / BLOCK[1]))
    # END EXERCISE


def _tiled_grid(x) -> tuple:
    h, wd = x.shape
    # BEGIN EXERCISE: one block per TILE_H x TILE_W tile of outputs: the grid
    # HINT: a tiled block produces a whole TILE_H x TILE_W tile of outputs (its threads loop over rows), so
    #   each axis divides by the tile, not the block.
    # HINT: `(math.ceil(wd / TILE_W), math.ceil(h / TILE_H))`
    return (math.ceil(wd / TILE_W), math.ceil(h / TILE_H))
    # END EXERCISE


def conv2d_numba_naive(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """'same' 2-D convolution (cross-correlation, zero padding), any odd K, filter in global memory."""
    out = _checked(x, w, out, max_k=None)
    if out.numel():
        conv2d_naive_kernel[_naive_grid(x), BLOCK](*(interop.to_numba(t) for t in (x, w, out)))
    return out


def _compiled_for(kind: str, w: torch.Tensor):
    # The filter's values are part of the compiled kernel, so the host must see them: a
    # device-to-host copy, which waits for the GPU (see the module docstring).
    host = w.detach().cpu().contiguous().numpy()
    return _numba_kernel(kind, host.tobytes(), host.shape[0])


def conv2d_numba_const(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """As conv2d_numba_naive, K <= 15, the filter compiled into constant memory."""
    out = _checked(x, w, out, max_k=MAX_K)
    if out.numel():
        _compiled_for("const", w)[_naive_grid(x), BLOCK](interop.to_numba(x), interop.to_numba(out))
    return out


def conv2d_numba_tiled(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """32 x 32 output tiles, input window + halo in shared memory, filter in constant memory."""
    out = _checked(x, w, out, max_k=MAX_K)
    if out.numel():
        _compiled_for("tiled", w)[_tiled_grid(x), BLOCK](interop.to_numba(x), interop.to_numba(out))
    return out


@functools.cache
def _cuda_c_kernel(name: str):
    if name == "conv2d_naive":
        signature = "PPPiii"  # x, w, out, H, W, K
    elif name in ("conv2d_const", "conv2d_tiled"):
        signature = "PPiii"   # x, out, H, W, K (the filter is in constant memory)
    else:
        signature = "PPii"    # conv2d_{tiled,regblock}_k<K>: K is in the kernel's name
    return interop.cuda_kernel(CUDA_SOURCE, name, signature)


def _upload_filter(w: torch.Tensor) -> None:
    """Copy the filter into the module's `__constant__ float c_filter[]`, in stream order."""
    # BEGIN EXERCISE: the address and size of c_filter: interop.cuda_module(CUDA_SOURCE).get_global(...);
    #   copy w's K * K floats there with drv.memcpy_dtod_async(address, w.data_ptr(), nbytes, None)
    #   (drv = runtime.pycuda_driver(); stream None: in order with torch's work and the launches)
    # HINT: a __constant__ array is a module global: ask the compiled module for its device address and size,
    #   then copy the filter there device-to-device, on the same stream as torch so the copy is ordered
    #   after whoever wrote w and before the launch.
    # HINT: get the driver, call get_global('c_filter') on the cached module, check the filter fits, then one
    #   memcpy_dtod_async with stream None.
    # HINT: get_global returns (device address, size in bytes): the copy is w.numel() * 4 bytes, and that
    #   must not exceed the size.
    drv = runtime.pycuda_driver()
    address, size = interop.cuda_module(CUDA_SOURCE).get_global("c_filter")
    assert w.numel() * 4 <= size, "the launcher's K check keeps the filter inside c_filter"
    # Stream None = the legacy default stream torch uses: the copy waits for the kernel that
    # produced w and for earlier launches still reading the old filter, and the launch that
    # follows waits for the copy.
    drv.memcpy_dtod_async(address, w.data_ptr(), w.numel() * 4, None)
    # END EXERCISE


def _launch_cuda_c(name: str, grid: tuple, x, w, out) -> None:
    (h, wd), k = x.shape, w.shape[0]
    if name == "conv2d_naive":
        args = (x.data_ptr(), w.data_ptr(), out.data_ptr(), h, wd, k)
    elif name in ("conv2d_const", "conv2d_tiled"):
        args = (x.data_ptr(), out.data_ptr(), h, wd, k)
    else:
        args = (x.data_ptr(), out.data_ptr(), h, wd)
    _cuda_c_kernel(name).prepared_async_call(grid, (BLOCK[0], BLOCK[1], 1), None, *args)


def conv2d_cuda_naive(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """CUDA C `conv2d_naive`: filter in global memory, any odd K."""
    out = _checked(x, w, out, max_k=None)
    if out.numel():
        _launch_cuda_c("conv2d_naive", _naive_grid(x), x, w, out)
    return out


def conv2d_cuda_const(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """CUDA C `conv2d_const`: the filter copied into `__constant__` memory first, K <= 15."""
    out = _checked(x, w, out, max_k=MAX_K)
    if out.numel():
        _upload_filter(w)
        _launch_cuda_c("conv2d_const", _naive_grid(x), x, w, out)
    return out


def conv2d_cuda_tiled(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """CUDA C `conv2d_tiled`: shared-memory window with halo + constant-memory filter, K <= 15."""
    out = _checked(x, w, out, max_k=MAX_K)
    if out.numel():
        _upload_filter(w)
        _launch_cuda_c("conv2d_tiled", _tiled_grid(x), x, w, out)
    return out


def conv2d_cuda_unrolled(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """CUDA C `conv2d_tiled_k<K>`: conv2d_tiled compiled for this K, loops fully unrolled."""
    out = _checked(x, w, out, max_k=MAX_K)
    if out.numel():
        _upload_filter(w)
        _launch_cuda_c(f"conv2d_tiled_k{w.shape[0]}", _tiled_grid(x), x, w, out)
    return out


def conv2d_cuda_regblock(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """CUDA C `conv2d_regblock_k<K>`: unrolled, 4 consecutive output rows per thread in registers."""
    out = _checked(x, w, out, max_k=MAX_K)
    if out.numel():
        _upload_filter(w)
        _launch_cuda_c(f"conv2d_regblock_k{w.shape[0]}", _tiled_grid(x), x, w, out)
    return out


def conv2d_torch(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """F.conv2d (cuDNN on a GPU) in true fp32: TF32 off for the call, as for the kernels here."""
    out = _checked(x, w, out, max_k=None)
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        out.copy_(F.conv2d(x[None, None], w[None, None], padding=w.shape[0] // 2)[0, 0])
    finally:
        torch.backends.cudnn.allow_tf32 = previous
    return out


NUMBA_LAUNCHERS = ("conv2d_numba_naive", "conv2d_numba_const", "conv2d_numba_tiled")
CUDA_C_LAUNCHERS = ("conv2d_cuda_naive", "conv2d_cuda_const", "conv2d_cuda_tiled", "conv2d_cuda_unrolled",
                    "conv2d_cuda_regblock")
ANY_K_LAUNCHERS = ("conv2d_numba_naive", "conv2d_cuda_naive")  # no MAX_K limit


# --- compute-sanitizer cases ------------------------------------------------------------------

def _sanitizer_case(launcher):
    def run():
        # 37 x 45 with K = 5: partial tiles on both axes, halo reads at every border.
        x = random_tensor((37, 45), torch.float32, runtime.DEVICE)
        w = random_tensor((5, 5), torch.float32, runtime.DEVICE)
        launcher(x, w)
        torch.cuda.synchronize()
    return run


SANITIZER_CASES = {
    "conv2d_naive_kernel (Numba)": _sanitizer_case(conv2d_numba_naive),
    "conv2d_const_kernel (Numba)": _sanitizer_case(conv2d_numba_const),
    "conv2d_tiled_kernel (Numba)": _sanitizer_case(conv2d_numba_tiled),
    "conv2d_naive (CUDA C)": _sanitizer_case(conv2d_cuda_naive),
    "conv2d_const (CUDA C)": _sanitizer_case(conv2d_cuda_const),
    "conv2d_tiled (CUDA C)": _sanitizer_case(conv2d_cuda_tiled),
    "conv2d_tiled_k5 (CUDA C)": _sanitizer_case(conv2d_cuda_unrolled),
    "conv2d_regblock_k5 (CUDA C)": _sanitizer_case(conv2d_cuda_regblock),
}


# --- benchmark -------------------------------------------------------------------------------

# BEGIN SOLUTION ONLY: the benchmarks (they measure the solution's kernels)
def _inputs(size):
    n, k = size
    device = runtime.DEVICE
    # The same filter for every input set of a size: the Numba constant-memory rungs compile
    # one kernel per filter, and the benchmark should time the kernel, not the compiler.
    w = torch.randn((k, k), generator=torch.Generator().manual_seed(k)).to(device)
    return random_tensor((n, n), torch.float32, device), w, torch.empty((n, n), device=device)


BENCHMARKS = [
    Benchmark(
        name="conv2d_week1",
        title="2-D convolution, float32, one channel, K x K filter (Numba, CUDA C) vs F.conv2d",
        sizes=[(8192, k) for k in (3, 5, 7, 9, 11, 15)],
        sim_sizes=[(16, 3)],
        size_label=lambda s: f"{s[0]}^2 K={s[1]}",
        make_inputs=_inputs,
        variants={
            "torch": conv2d_torch,
            "numba_naive": conv2d_numba_naive,
            "numba_const": conv2d_numba_const,
            "numba_tiled": conv2d_numba_tiled,
            "cuda_naive": conv2d_cuda_naive,
            "cuda_const": conv2d_cuda_const,
            "cuda_tiled": conv2d_cuda_tiled,
            "cuda_unrolled": conv2d_cuda_unrolled,
            "cuda_regblock": conv2d_cuda_regblock,
        },
        gpu_only=("cuda_naive", "cuda_const", "cuda_tiled", "cuda_unrolled", "cuda_regblock"),
        headline=("numba_naive", "numba_tiled", "cuda_naive", "cuda_tiled", "cuda_regblock"),
        bytes=lambda s: 2 * 4 * s[0] ** 2,
        flops=lambda s: 2 * s[1] ** 2 * s[0] ** 2,
        compute_dtype=torch.float32,
        notes="bytes = 8 H W (image read once, output written once); FLOPs = 2 K^2 H W; "
              "'torch' is F.conv2d with TF32 off (cuDNN)",
    ),
]
# END SOLUTION ONLY
