"""The top of the matmul ladder: tensor cores, programmed through WMMA in CUDA C (PyCUDA).

Over 500 lines: the host side of two families of rungs, each a lesson of its own: the WMMA
launchers (tile configurations, padding, launch geometry, input checks), and the Hopper rung's,
which the kit cannot do for it (an sm_90a build, TMA tensor maps encoded and the kernel launched
through the CUDA driver API with ctypes). Its benchmark, tile sweep and SASS dump are in
matmul_tensor_cores_bench.py.

The fp32 ladder (`matmul.py`) ends close to cuBLAS fp32: the CUDA cores' roof. The tensor cores
are a different unit: one warp-wide instruction multiplies a 16x16 tile of fp16 (or bf16) values
by another and adds the product into an fp32 tile, 4096 multiply-adds at once. The H100 SXM
datasheet gives 989 dense fp16 TFLOP/s on them against 67 fp32 TFLOP/s on the CUDA cores, ~15x.
This lesson reaches for them with `nvcuda::wmma`, CUDA C++'s portable tensor-core API:

  rung            kernel (kernels/matmul_tc.cu)   what it adds
  wmma_naive      wmma_naive_<in>_<out>           a warp per 16x16 tile of C, fragments from global memory
  wmma_shared     wmma_shared_<in>_<out>          128x128 block tiles in skewed shared memory; 64x64 warp tiles
  wmma_cp_async   wmma_cp_async_<in>_<out>        a 2-stage cp.async pipeline: next tile copied during the mmas
  wgmma_tma       wgmma_tma_<in>_<out>            Hopper only (sm_90a, kernels/matmul_wgmma.cu): asynchronous
                                                  warpgroup mmas (wgmma) fed by the TMA copy engine through a
                                                  4-stage mbarrier ring; a producer warpgroup and two consumers

What it teaches: fragments and warp-wide operations; that the tensor cores make the *same*
data-reuse problem as the fp32 ladder ~15x harder (every byte must feed ~15x more FLOPs to keep
up); shared-memory bank conflicts and the skew that removes them; asynchronous copies and
software pipelining; and reading SASS (matmul_tensor_cores_bench.py `--sass`) to see what the
compiler really emitted.

Cost model for A (M x K) @ B (K x N): 2*M*N*K FLOPs; at least 2*(M*K + K*N) + s*M*N bytes
(s = 2 for an fp16/bf16 C, 4 for fp32). At 4096^3 with an fp16 C: 137 GFLOP on 101 MB,
~1360 FLOP/byte: compute-bound on any GPU. What limits the rungs is on-chip traffic:

  wmma_naive     each mma_sync (8192 FLOPs) loads two fresh 512-byte fragments through L1/L2:
                 8 FLOP/byte of cache traffic. At the L2's few TB/s: tens of TFLOP/s at best.
  wmma_shared    a 128x128x32 block tile moves 16 KB from L2 for 1 MFLOP (64 FLOP/byte); each
                 fragment read from shared memory feeds 4 mma_syncs (64x64 warp tiles).
                 Copies and mmas alternate, so the tensor cores idle during every copy.
  wmma_cp_async  same traffic, but the copy of tile t+1 overlaps the mmas on tile t.
  wgmma_tma      a 128x256x64 tile moves 48 KB for 4 MFLOP (85 FLOP/byte from L2); one wgmma
                 instruction multiplies 64x256x16, reading A and B from shared memory itself
                 (no ldmatrix, no fragments in registers), while the copy engine fills the next
                 stages: issue slots go to the tensor cores, not to address arithmetic.

Numerics (week 3's precision lesson has the whole story): inputs are exact fp16/bf16 values,
their products are exact in fp32 (11 + 11 significant bits < 24), and the K-term sum is
accumulated in fp32 (relative rounding u = 2^-24 per addition); the result is rounded once to
the output type (u = 2^-11 for fp16, 2^-8 for bf16), or kept in fp32 (`out_dtype=torch.float32`).

Shapes: the kernels never bounds-check their loads, so the launcher pads A and B with zeros to
multiples of the block tile (exact: padded k add 0 * 0, padded rows and columns of C are never
stored); the stores are bounds-checked, so C is written in place. At 4096^3 nothing is padded.
Colab's T4 (sm_75) has fp16 tensor cores but no bf16 ones and no cp.async: bf16 is refused
there, and the cp.async rung falls back to synchronous copies (the speed of wmma_shared).
The wgmma_tma rung runs on compute capability 9.0 only (H100/H200: wgmma is an sm_90a feature);
elsewhere `matmul_wgmma_tma` raises a RuntimeError naming the fallback, wmma_cp_async. It needs no
padding to tile multiples (the TMA reads past the edges as zeros), only K and N rounded up to 8.

The benchmark, the tile sweep and the SASS dump live in matmul_tensor_cores_bench.py: `python -m
week1_cuda_python.matmul_tensor_cores_bench --sweep` (GPU) times block / warp tile shapes and
pipeline depths at 4096^3; `--sass` prints the instruction mix of every kernel (HMMA = tensor-core
mma, LDSM = ldmatrix, LDGSTS = cp.async, HGMMA = wgmma, UTMALDG = TMA load) from `cuobjdump -sass`;
on sm_90 it also disassembles the sm_90a build of kernels/matmul_wgmma.cu.
"""
from __future__ import annotations

import ctypes
import functools
import math
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from course import runtime  # first: chooses the GPU or simulation
from course import interop, validate
from course.check import poisoned, random_tensor
from week1_cuda_python.hopper_ptx import HOPPER_PTX_INCLUDE  # the PTX wrappers' header: one place

CUDA_SOURCE = Path(__file__).parent / "kernels" / "matmul_tc.cu"
DTYPES = (torch.float16, torch.bfloat16)
FRAGMENT = 16  # WMMA's m16n16k16: every tile size is a multiple of it
ALIGNMENT = 32  # bytes: wmma::load_matrix_sync needs 256-bit aligned pointers
MAX_GRID_Y = 65535
INT32_MAX = 2**31 - 1
TYPE_SUFFIX = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}

# EXERCISE NOTE: The launchers' input checks (_checked: fp16 or bf16, bf16 refused below compute
#   capability 8.0, `out` in the inputs' dtype or fp32), the empty cases and the PyCUDA plumbing are
#   given: you write the padding and launch geometry (they run on the CPU too) and the WMMA kernels in
#   kernels/matmul_tc.cu (their tests need an NVIDIA GPU).


@dataclass(frozen=True)
class TileConfig:
    """Block tile BM x BN x BK, warp tile WM x WN, cp.async pipeline depth (kernels/matmul_tc.cu)."""
    bm: int = 128
    bn: int = 128
    bk: int = 32
    wm: int = 64
    wn: int = 64
    stages: int = 2

    @property
    def warps(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn)

    @property
    def threads(self) -> int:
        return 32 * self.warps

    def stage_bytes(self, itemsize: int = 2) -> int:
        """One stage of shared memory: A and B tiles with rows skewed by 8 elements."""
        skew = 8
        return (self.bm * (self.bk + skew) + self.bk * (self.bn + skew)) * itemsize

    def shared_bytes(self, rung: str) -> int:
        return self.stage_bytes() * (self.stages if rung == "cp_async" else 1)

    def problems(self) -> list[str]:
        """Why the kernels cannot be built with these tiles (empty when they can)."""
        found = []
        if any(v % FRAGMENT for v in (self.bm, self.bn, self.bk, self.wm, self.wn)):
            found.append("every tile size must be a multiple of 16")
        elif self.bm % self.wm or self.bn % self.wn:
            found.append("the warp tile must divide the block tile")
        elif (self.bm * self.bk // 8) % self.threads or (self.bk * self.bn // 8) % self.threads:
            found.append("the 16-byte copies of a tile must split evenly over the threads")
        if self.stages < 2:
            found.append("the cp.async pipeline needs at least 2 stages")
        if self.threads > 1024:
            found.append("more than 1024 threads per block")
        if self.shared_bytes("cp_async") > 48 * 1024:
            found.append(f"{self.shared_bytes('cp_async')} bytes of static shared memory (max 48 KB)")
        return found

    def defines(self) -> list[str]:
        return [f"-DTC_{name.upper()}={getattr(self, name)}" for name in ("bm", "bn", "bk", "wm", "wn", "stages")]

    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk} warp {self.wm}x{self.wn} ({self.warps} warps) stages {self.stages}"


# Must match the TC_* defaults at the top of kernels/matmul_tc.cu.
DEFAULT_TILES = TileConfig()
NAIVE_BLOCK = (32, 32)  # the naive rung: 2 x 2 warps, one 16x16 tile of C each
NAIVE_THREADS = 128


@dataclass(frozen=True)
class Rung:
    kernel: str  # prefix of the extern "C" names: <kernel>_<in>_<out>
    what: str

    def tiles(self, config: TileConfig = DEFAULT_TILES) -> tuple[int, int, int]:
        """Multiples (M, N, K) the operands are padded to."""
        if self.kernel == "wmma_naive":
            return FRAGMENT, FRAGMENT, FRAGMENT
        return config.bm, config.bn, config.bk


RUNGS = {
    "naive": Rung("wmma_naive", "one warp per 16x16 tile of C, fragments loaded from global memory"),
    "shared": Rung("wmma_shared", "block tiles in skewed shared memory, 64x64 warp tiles of 4x4 fragments"),
    "cp_async": Rung("wmma_cp_async", "as wmma_shared, with a cp.async pipeline (double buffering)"),
}
WMMA_LAUNCHERS = tuple(f"matmul_wmma_{rung}" for rung in RUNGS)


# --- shapes, padding and launch geometry (plain torch: these run on the CPU too) ------------

def _round_up(x: int, multiple: int) -> int:
    return (x + multiple - 1) // multiple * multiple


def kernel_name(rung: str, in_dtype: torch.dtype, out_dtype: torch.dtype) -> str:
    """The extern "C" kernel for a rung and a pair of types, e.g. wmma_shared_f16_f32."""
    return f"{RUNGS[rung].kernel}_{TYPE_SUFFIX[in_dtype]}_{TYPE_SUFFIX[out_dtype]}"


def padded_shape(rung: str, m: int, n: int, k: int, tiles: TileConfig = DEFAULT_TILES) -> tuple[int, int, int]:
    """(Mp, Np, Kp): M, N, K rounded up to the multiples the rung's kernel assumes."""
    # BEGIN EXERCISE: M, N, K each rounded up to the multiple RUNGS[rung].tiles(tiles) gives (_round_up)
    # HINT: the tensor-core kernels have no bounds checks, so each dimension must be a whole number of the
    #   rung's tiles; zero padding does not change the product.
    # HINT: ask the rung for its (tm, tn, tk) multiples given `tiles`, then round each of m, n, k up with
    #   _round_up.
    tm, tn, tk = RUNGS[rung].tiles(tiles)
    return _round_up(m, tm), _round_up(n, tn), _round_up(k, tk)
    # END EXERCISE


def padded(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """`t` itself if it already is rows x cols and 32-byte aligned, else a zero-padded copy."""
    # BEGIN EXERCISE: no copy when t already is rows x cols and ALIGNMENT-byte aligned (t.data_ptr());
    #   else a zeros((rows, cols)) tensor (fresh, so aligned) with t in its top-left corner
    # HINT: copying is only needed when the kernel's assumptions fail: the shape is not the padded one, or
    #   the base address is not aligned for the vector/wmma loads; a fresh allocation is always aligned.
    # HINT: an early return of t when both hold; else a zeros tensor of the padded shape (t's dtype and
    #   device) with t copied into its top-left slice.
    # HINT: the test: `tuple(t.shape) == (rows, cols) and t.data_ptr() % ALIGNMENT == 0`.
    if tuple(t.shape) == (rows, cols) and t.data_ptr() % ALIGNMENT == 0:
        return t
    out = torch.zeros((rows, cols), dtype=t.dtype, device=t.device)
    out[: t.shape[0], : t.shape[1]] = t
    return out
    # END EXERCISE


def launch_geometry(rung: str, m: int, n: int, tiles: TileConfig = DEFAULT_TILES):
    """(grid, block) covering an M x N output: blockIdx.x walks N, blockIdx.y walks M."""
    # BEGIN EXERCISE: the C tile one block covers (NAIVE_BLOCK for the naive rung, else tiles.bm x tiles.bn)
    #   and its threads (NAIVE_THREADS, else tiles.threads); grid = (blocks along N, blocks along M),
    #   block = (threads, 1, 1)
    # HINT: a block covers one tile of C, whose size and thread count depend on the rung: a fixed small tile
    #   for the naive rung, the tile configuration for the others; blockIdx.x walks N so that the grid's
    #   x matches C's columns.
    # HINT: an if/else choosing (block_m, block_n, threads), then return the pair (grid, block): grid by
    #   ceiling division along N then M, block as a 3-tuple.
    # HINT: `return (math.ceil(n / block_n), math.ceil(m / block_m)), (threads, 1, 1)`
    if rung == "naive":
        block_m, block_n = NAIVE_BLOCK
        threads = NAIVE_THREADS
    else:
        block_m, block_n = tiles.bm, tiles.bn
        threads = tiles.threads
    return (math.ceil(n / block_n), math.ceil(m / block_m)), (threads, 1, 1)
    # END EXERCISE


# --- launchers ---------------------------------------------------------------------------------

def _checked(a, b, out, out_dtype):
    """Validate A (M x K), B (K x N) and the output; return (out, M, N, K)."""
    validate.tensor(a, "a", dtypes=DTYPES, ndim=2)
    validate.tensor(b, "b", dtypes=DTYPES, ndim=2)
    validate.same_dtype(a=a, b=b)
    if a.device != b.device:
        raise ValueError(f"a is on {a.device} but b is on {b.device}: put both on the same GPU")
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b:
        raise ValueError(f"inner dimensions must match: a is {m} x {k}, b is {k_b} x {n} "
                         f"(a.shape[1] = {k} != b.shape[0] = {k_b})")
    capability = runtime.capability()  # None in simulation (nothing is launched there)
    if a.dtype == torch.bfloat16 and capability is not None and capability < (8, 0):
        raise TypeError(f"a has dtype bfloat16, but bf16 tensor cores need compute capability 8.0 "
                        f"(Ampere) or newer; this GPU is {capability[0]}.{capability[1]}: use float16")
    allowed = (a.dtype, torch.float32)
    if out is None:
        out_dtype = a.dtype if out_dtype is None else out_dtype
        if out_dtype not in allowed:
            raise TypeError(f"out_dtype is {out_dtype}; expected {a.dtype} (like the inputs) or torch.float32")
        out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    else:
        validate.tensor(out, "out", dtypes=allowed, ndim=2)
        if out_dtype is not None and out_dtype != out.dtype:
            raise TypeError(f"out has dtype {out.dtype} but out_dtype is {out_dtype}: give one of them")
        if tuple(out.shape) != (m, n):
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {(m, n)}")
        if out.device != a.device:
            raise ValueError(f"out is on {out.device} but a is on {a.device}")
    for name, size in (("M", m), ("N", n), ("K", k)):
        if size > INT32_MAX - 256:
            raise ValueError(f"{name} = {size} is too large: the kernels take sizes as 32-bit ints")
    if math.ceil(m / min(NAIVE_BLOCK[0], DEFAULT_TILES.bm)) > MAX_GRID_Y:
        raise ValueError(f"a has {m} rows: the grid would need more than {MAX_GRID_Y} blocks in y")
    return out, m, n, k


@functools.cache
def _kernel(name: str, defines: tuple[str, ...] = ()):
    """Kernel `name` of kernels/matmul_tc.cu; `defines` (-DTC_BM=...) for the sweep."""
    # A, B, C, then M, N, K (padded), lda, ldb as 32-bit ints
    return interop.cuda_kernel(CUDA_SOURCE, name, "PPPiiiii", defines)


def launch_wmma(rung: str, a, b, out, out_dtype, tiles: TileConfig = DEFAULT_TILES):
    """C = A @ B with the WMMA rung `rung` (a key of RUNGS) built with `tiles`: what the
    matmul_wmma_* launchers call, and the benchmark and the tile sweep (matmul_tensor_cores_bench.py)."""
    out, m, n, k = _checked(a, b, out, out_dtype)
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()  # every dot product is empty: C = 0, as torch gives
    mp, np_, kp = padded_shape(rung, m, n, k, tiles)
    a_p, b_p = padded(a, mp, kp), padded(b, kp, np_)
    grid, block = launch_geometry(rung, m, n, tiles)
    defines = () if tiles == DEFAULT_TILES else tuple(tiles.defines())
    # Stream None: the legacy default stream that torch queues on, so ordering holds.
    _kernel(kernel_name(rung, a.dtype, out.dtype), defines).prepared_async_call(
        grid, block, None, a_p.data_ptr(), b_p.data_ptr(), out.data_ptr(), m, n, kp, kp, np_)
    return out


def matmul_wmma_naive(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *,
                      out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """C = A @ B on the tensor cores, one warp per 16x16 tile of C (`wmma_naive_*`).

    a, b: fp16 (or bf16 on sm_80+), 2-D, contiguous, same device. C is written in the inputs'
    type, or in fp32 with `out_dtype=torch.float32` (or an fp32 `out`).
    """
    return launch_wmma("naive", a, b, out, out_dtype)


def matmul_wmma_shared(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *,
                       out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """C = A @ B with 128x128x32 shared-memory block tiles and 64x64 warp tiles (`wmma_shared_*`)."""
    return launch_wmma("shared", a, b, out, out_dtype)


def matmul_wmma_cp_async(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *,
                         out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """C = A @ B as `matmul_wmma_shared`, tiles copied by a cp.async pipeline (`wmma_cp_async_*`)."""
    return launch_wmma("cp_async", a, b, out, out_dtype)


def matmul_reference(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The exact product (float64) rounded once to `out_dtype` (default: the inputs' dtype)."""
    return (a.double() @ b.double()).to(out_dtype or a.dtype)


# BEGIN SOLUTION ONLY: the Hopper rung's host side is given (imported); its exercise is kernels/matmul_wgmma.cu
# --- the Hopper rung: wgmma + TMA (kernels/matmul_wgmma.cu) ------------------------------------
# The kernel's comment block is the lesson; this is its host side. What is new on the host:
# 1. the module is built for sm_90a, not for "this GPU's" sm_XY: wgmma and setmaxnreg are
#    architecture-specific features of compute capability 9.0, so the rung runs on an H100/H200 only (a
#    Blackwell GPU, sm_100, has no wgmma either) and is refused elsewhere;
# 2. the operands reach the kernel as two TMA tensor maps, built here with the driver's
#    cuTensorMapEncodeTiled and passed by value (128 bytes each);
# 3. the module is loaded and launched through the CUDA driver API directly (ctypes on libcuda.so.1), not PyCUDA.
#
# Why the driver API through ctypes. cuTensorMapEncodeTiled only fills in 128 bytes on the host. PyCUDA
# (2026.1) does not wrap it, and an extern "C" host helper compiled into the module cannot help: PyCUDA
# loads a cubin, device code only. ctypes on libcuda.so.1 (the driver library that torch and PyCUDA have
# already loaded; the function has had one signature since CUDA 12.0) is the least machinery. The launch
# goes the same way for a reason seen on the H100: PyCUDA's prepared calls pack the arguments back to back
# into one buffer, but a CUtensorMap parameter is 128-byte aligned, and the kernel's parameters start at
# byte 0x210 of constant bank 0 on sm_90 (not a multiple of 128), so the compiler put the first tensor map
# at parameter offset 112 (SASS: `c[0x0][0x198] + 0x70`). The packed buffer had it at offset 0: the copy
# engine read a garbage tensor map and the kernel died with "illegal instruction". cuLaunchKernel's
# kernelParams (one pointer per argument) lets the driver put each argument where the kernel expects it.

from os import environ  # under `pytest --impl=exercises`, the learner's copy (as attention/hopper.py does)
from course import holes
WGMMA_SOURCE = Path(__file__).parent / ("exercises/kernels" if environ.get(runtime.IMPL_ENV) == "exercises"
                                        else "kernels") / "matmul_wgmma.cu"
WGMMA_CAPABILITY = (9, 0)
WGMMA_FALLBACK = "wmma_cp_async"  # the rung below, for every GPU that is not compute capability 9.0
# Not -arch=sm_90a: with nvcc 13.0 that also ran a plain sm_90 pass, which rejects wgmma; -gencode builds sm_90a alone.
WGMMA_GENCODE = "-gencode=arch=compute_90a,code=sm_90a"
WGMMA_ROW_ALIGN = 8  # elements: TMA row strides must be multiples of 16 bytes (8 halves)


@dataclass(frozen=True)
class WgmmaTiles:
    """The wgmma rung's fixed tiles (the WG_* #defines of kernels/matmul_wgmma.cu must match)."""
    bm: int = 128       # rows of C per block: 2 consumer warpgroups x wgmma's M = 64
    bn: int = 256       # columns of C per block: wgmma's largest N
    bk: int = 64        # k per pipeline stage: 64 halves = the 128-byte swizzle span
    stages: int = 4
    consumers: int = 2  # consumer warpgroups; one more warpgroup produces (issues the TMA copies)
    b_slab: int = 64    # columns of B per TMA box
    group_m: int = 16   # rows of tiles per group of the block order (wgmma_block_tile)

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    @property
    def stage_bytes(self) -> int:
        return (self.bm * self.bk + self.bk * self.bn) * 2

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory per block: the stages + 1 KB to align them to 1024 bytes."""
        return self.stages * self.stage_bytes + 1024

    def defines(self) -> tuple[str, ...]:
        """nvcc -D flags for what may differ from the source's defaults: only the block order (group_m = 1 is
        plain row-major order, the A/B variant `wgmma_tma_row_major`)."""
        return () if self.group_m == WgmmaTiles.group_m else (f"-DWG_GROUP_M={self.group_m}",)


WGMMA_TILES = WgmmaTiles()


def wgmma_padded_shape(m: int, n: int, k: int) -> tuple[int, int, int]:
    """(M, Np, Kp): the TMA reads past the edges as zeros, so only the tensor maps' row strides need padding:
    N (B's rows) and K (A's rows) to multiples of 8 elements (16 bytes)."""
    return m, _round_up(n, WGMMA_ROW_ALIGN), _round_up(k, WGMMA_ROW_ALIGN)


def wgmma_launch_geometry(m: int, n: int, tiles: WgmmaTiles = WGMMA_TILES):
    """(grid, block): one block of 3 warpgroups per 128 x 256 tile of C; x walks N, y walks M."""
    return (math.ceil(n / tiles.bn), math.ceil(m / tiles.bm)), (tiles.threads, 1, 1)


def wgmma_block_tile(block: int, tiles_m: int, tiles_n: int, group_m: int = WGMMA_TILES.group_m) -> tuple[int, int]:
    """(row tile, column tile) of C that block number `block` (launch order, x fastest) computes: the kernel's
    grouped order (grouped_tile in kernels/matmul_wgmma.cu, same arithmetic). Groups of `group_m` rows of
    tiles, each walked column by column, so the blocks resident at once cover a near-square patch of C and
    share their panels of A and B in the L2 (the kernel's header says why and what it should save)."""
    per_group = group_m * tiles_n
    first_m = block // per_group * group_m
    rows = min(tiles_m - first_m, group_m)
    in_group = block % per_group
    return first_m + in_group % rows, in_group // rows


def wgmma_unsupported(capability: tuple[int, int] | None) -> str | None:
    """Why the wgmma rung cannot run on a GPU of this compute capability (None: it can, or no GPU)."""
    if capability is None or tuple(capability) == WGMMA_CAPABILITY:
        return None
    major, minor = capability
    return (f"the wgmma_tma rung needs an sm_90a GPU (compute capability 9.0: H100, H200), because "
            f"wgmma and setmaxnreg exist only there; this GPU is compute capability {major}.{minor}: "
            f"use the previous rung, {WGMMA_FALLBACK} (matmul_{WGMMA_FALLBACK}), which runs on "
            f"every GPU from sm_75 on")


def wgmma_nvcc_command(output: Path, nvcc: str = "nvcc", defines: tuple[str, ...] = (), source=None) -> list[str]:
    """The nvcc command that builds kernels/matmul_wgmma.cu, or `source` (the CPU tests run the same one)."""
    return [nvcc, "-cubin", WGMMA_GENCODE, "-O3", "-lineinfo", "-Werror", "all-warnings", *defines,
            *HOPPER_PTX_INCLUDE, "-o", str(output), str(source or WGMMA_SOURCE)]


# cuda.h's enums, for the calls below.
# CU_TENSOR_MAP_DATA_TYPE_FLOAT16, _BFLOAT16, _FLOAT32 (the split-K rung's fp32 workspace)
_TMA_DTYPE = {torch.float16: 6, torch.bfloat16: 9, torch.float32: 7}
_TMA_SWIZZLE_128B = 3
_TMA_L2_PROMOTION_256B = 3
_TMA_INTERLEAVE_NONE = _TMA_OOB_FILL_ZEROS = 0
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


@functools.cache
def cuda_driver():
    """libcuda.so.1 with the signatures of the few driver calls this rung makes (cuda.h)."""
    lib = ctypes.CDLL("libcuda.so.1")
    p, u32, u64, i32 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int
    signatures = {
        "cuTensorMapEncodeTiled": [p, i32, u32, p, ctypes.POINTER(u64), ctypes.POINTER(u64),
                                   ctypes.POINTER(u32), ctypes.POINTER(u32), i32, i32, i32, i32],
        "cuModuleLoadData": [ctypes.POINTER(p), ctypes.c_char_p],
        "cuModuleGetFunction": [ctypes.POINTER(p), p, ctypes.c_char_p],
        "cuFuncSetAttribute": [p, i32, i32],
        "cuLaunchKernel": [p, u32, u32, u32, u32, u32, u32, u32, p, ctypes.POINTER(p), ctypes.POINTER(p)],
        "cuGetErrorString": [i32, ctypes.POINTER(ctypes.c_char_p)],
    }
    for name, argtypes in signatures.items():
        getattr(lib, name).argtypes = argtypes
        getattr(lib, name).restype = i32
    return lib


def driver_check(result: int, what: str) -> None:
    if result != 0:
        text = ctypes.c_char_p()
        cuda_driver().cuGetErrorString(result, ctypes.byref(text))
        raise RuntimeError(f"{what} failed: {(text.value or b'?').decode()} (CUresult {result})")


@functools.cache
def _wgmma_module(defines: tuple[str, ...] = ()):
    """kernels/matmul_wgmma.cu compiled for sm_90a (with `defines`, WgmmaTiles.defines) and loaded into
    torch's (primary) context."""
    holes.refuse_open_hole(WGMMA_SOURCE)  # the stub with a hole open would hang the GPU: refused before nvcc
    nvcc = runtime.nvcc_path()
    if nvcc is None:
        raise RuntimeError("nvcc is not on PATH: the wgmma rung is compiled for sm_90a at first use")
    with tempfile.TemporaryDirectory(prefix="matmul_wgmma_") as tmp:
        cubin = Path(tmp) / "matmul_wgmma.sm_90a.cubin"
        built = subprocess.run(wgmma_nvcc_command(cubin, nvcc, defines), capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"nvcc failed on {WGMMA_SOURCE.name}:\n{built.stderr}")
        image = cubin.read_bytes()
    runtime.pycuda_driver()  # makes the primary context, torch's, current in this thread
    module = ctypes.c_void_p()
    driver_check(cuda_driver().cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
    return module


@functools.cache
def _wgmma_kernel(name: str, shared_bytes: int, defines: tuple[str, ...] = ()):
    kernel = ctypes.c_void_p()
    driver_check(cuda_driver().cuModuleGetFunction(ctypes.byref(kernel), _wgmma_module(defines), name.encode()),
                  f"cuModuleGetFunction({name})")
    # More than 48 KB of dynamic shared memory must be asked for, once per kernel.
    driver_check(cuda_driver().cuFuncSetAttribute(kernel, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               shared_bytes), "cuFuncSetAttribute")
    return kernel


def tensor_map(t: torch.Tensor, box_rows: int, box_cols: int) -> bytes:
    """The 128-byte TMA descriptor of a row-major 2-D fp16/bf16 (or fp32) tensor, copied in boxes of box_rows x
    box_cols elements (box_cols x the element size at most 128 bytes), 128-byte swizzled, zeros read outside it.

    Encoded once per distinct (address, dtype, rows, cols, row stride, box) and then served from a cache
    (`encoded_tensor_map`): the benchmark calls the launcher thousands of times on the same tensors, and at
    2048^3 the kernel is short enough that the host's per-call work shows."""
    rows, cols = t.shape
    row_bytes = t.stride(0) * t.element_size()
    if t.data_ptr() % 16 or row_bytes % 16 or t.stride(1) != 1:
        raise ValueError(f"a TMA tensor needs a 16-byte aligned base and 16-byte multiple row strides "
                         f"(got address % 16 = {t.data_ptr() % 16}, row stride {row_bytes} bytes)")
    return encoded_tensor_map(t.data_ptr(), t.dtype, rows, cols, row_bytes, box_rows, box_cols)


@functools.lru_cache(maxsize=256)
def encoded_tensor_map(address: int, dtype: torch.dtype, rows: int, cols: int, row_bytes: int,
                       box_rows: int, box_cols: int) -> bytes:
    """cuTensorMapEncodeTiled's 128 bytes for exactly these arguments, cached.

    Why a cache keyed on an address is safe here: the map is a pure function of its arguments (it holds the
    address, sizes, stride and box, nothing read from the memory itself), and every one of them is in the key.
    A new tensor that reuses a freed tensor's address with another shape, stride or dtype is a different key;
    one with the same address, shape, stride and dtype gets a map that is byte for byte what encoding it again
    would give."""
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    storage = ctypes.create_string_buffer(128 + 128)  # the driver wants the map 64-byte aligned
    aligned = (ctypes.addressof(storage) + 127) // 128 * 128
    result = cuda_driver().cuTensorMapEncodeTiled(
        aligned, _TMA_DTYPE[dtype], 2, address,
        (u64 * 2)(cols, rows),         # sizes, innermost (contiguous) first
        (u64 * 1)(row_bytes),          # strides of the outer dimensions, in bytes
        (u32 * 2)(box_cols, box_rows),
        (u32 * 2)(1, 1),               # element strides: every element of the box
        _TMA_INTERLEAVE_NONE, _TMA_SWIZZLE_128B, _TMA_L2_PROMOTION_256B, _TMA_OOB_FILL_ZEROS)
    driver_check(result, f"cuTensorMapEncodeTiled ({rows} x {cols} {dtype}, {box_rows} x {box_cols} boxes)")
    return ctypes.string_at(aligned, 128)


def launch_wgmma(a, b, out, out_dtype, tiles: WgmmaTiles = WGMMA_TILES):
    """C = A @ B with the wgmma + TMA kernel built with `tiles` (its block order): what matmul_wgmma_tma
    calls, and the benchmark's A/B row `wgmma_tma_row_major`."""
    out, m, n, k = _checked(a, b, out, out_dtype)
    why = wgmma_unsupported(runtime.capability())
    if why is not None:
        raise RuntimeError(why)
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    _, np_, kp = wgmma_padded_shape(m, n, k)
    # Only where a row stride is not a multiple of 16 bytes (or the base is misaligned): a
    # zero-padded copy. The rows of B past K and of A past M are never copied: the TMA reads zeros.
    a_p, b_p = padded(a, m, kp), padded(b, k, np_)
    # Cached per (address, shape, stride, dtype, box): encoded by the driver on the first call only.
    map_a = tensor_map(a_p, tiles.bm, tiles.bk)       # A boxes: 128 rows x 64 k
    map_b = tensor_map(b_p, tiles.bk, tiles.b_slab)   # B boxes: 64 k x 64 columns
    grid, block = wgmma_launch_geometry(m, n, tiles)
    kernel = _wgmma_kernel(f"wgmma_tma_{TYPE_SUFFIX[a.dtype]}_{TYPE_SUFFIX[out.dtype]}", tiles.shared_bytes,
                           tiles.defines())
    # One pointer per kernel argument; the driver copies each to its offset in parameter space.
    args = [ctypes.create_string_buffer(map_a, 128), ctypes.create_string_buffer(map_b, 128),
            ctypes.c_uint64(out.data_ptr()), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(kp)]
    params = (ctypes.c_void_p * len(args))(*(ctypes.addressof(arg) for arg in args))
    # torch's current stream (the legacy default stream, as the other rungs use, unless the caller
    # picked another): ordered after the copies above and before whatever torch does next.
    stream = ctypes.c_void_p(torch.cuda.current_stream(a.device).cuda_stream)
    driver_check(cuda_driver().cuLaunchKernel(kernel, grid[0], grid[1], 1, *block, tiles.shared_bytes,
                                           stream, params, None), "cuLaunchKernel")
    return out


def matmul_wgmma_tma(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *,
                     out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """C = A @ B on Hopper's asynchronous tensor cores (`wgmma_tma_*`, kernels/matmul_wgmma.cu).

    Same contract as the WMMA launchers. 128x256x64 block tiles in a 4-stage ring that a producer warpgroup
    fills with TMA copies and two consumer warpgroups drain with wgmma. Needs compute capability 9.0 (H100,
    H200): on any other GPU it raises RuntimeError naming the fallback, `matmul_wmma_cp_async`.
    """
    return launch_wgmma(a, b, out, out_dtype)


TC_LAUNCHERS = (*WMMA_LAUNCHERS, "matmul_wgmma_tma")
# END SOLUTION ONLY


# --- compute-sanitizer cases ------------------------------------------------------------------

def _sanitizer_case(rung: str, in_dtype: torch.dtype, out_dtype: torch.dtype) -> None:
    # Sizes that are not multiples of any tile: the padding and the bounds-checked stores run.
    a = random_tensor((70, 40), in_dtype, runtime.DEVICE)
    b = random_tensor((40, 50), in_dtype, runtime.DEVICE)
    launch = launch_wgmma if rung == "wgmma_tma" else functools.partial(launch_wmma, rung)
    launch(a, b, poisoned((70, 50), out_dtype, runtime.DEVICE), None)
    torch.cuda.synchronize()


# One small synchronized launch per kernel, for `compute-sanitizer` (memcheck, racecheck,
# synccheck). The bf16 cases need sm_80 or newer; the wgmma_tma ones compute capability 9.0.
_SANITIZED = (*RUNGS, "wgmma_tma") if wgmma_unsupported(runtime.capability()) is None else tuple(RUNGS)
SANITIZER_CASES: dict[str, Callable[[], None]] = {f"{RUNGS[r].kernel if r in RUNGS else r}_{TYPE_SUFFIX[d]}_{TYPE_SUFFIX[o]}":
                                                   functools.partial(_sanitizer_case, r, d, o)
                                                   for r in _SANITIZED for d in DTYPES for o in (d, torch.float32)}

