"""The Hopper GEMM, one rung up: persistent, warp-specialised wgmma + TMA, epilogue by TMA store.

The kernel is kernels/matmul_wgmma_persistent.cu; its header is the lesson (what the rung below,
wgmma_tma in matmul_tensor_cores.py, leaves on the table and what this one does about it). This
module is its host side, the same mechanism as the rung below (an sm_90a cubin built by nvcc,
TMA tensor maps encoded by the driver, a launch through the CUDA driver API), plus:

* a persistent grid: one block per SM (at most one per tile), each walking tiles
  blockIdx.x, blockIdx.x + gridDim.x, ... in the grouped order (`persistent_tile`);
* a third tensor map, for C: the epilogue stores 64 x 64 chunks of C with the TMA, which clips
  at M and N, so C is written in place at any M, N;
* no padded copies: where the TMA cannot read an operand as it is (row strides not multiples of
  16 bytes, i.e. K or N not a multiple of 8, or a base address not 16-byte aligned) the launcher
  refuses with a ValueError that names the rung that pads, `matmul_wgmma_tma`;
* A row-major or column-major, read from its strides: `a` may be the transpose of a row-major K x M
  matrix (`dy.t()`), as a weight gradient dW = dY^T X has it, and the launcher runs the
  `wgmma_persistent_a_col_*` entry, which loads A as K x M boxes and lets wgmma transpose them
  (imm-trans-a): no transposed copy of dY is made (the cooperative schedule, no cluster);
* tile width builds: `width=` 256 (the source's WP_BN), 192 or 128, each its own cubin (-DWP_BN);
  narrower tiles fill the last wave of a small-N GEMM better (the kernel's header, and
  matmul_wgmma_waves.py for the arithmetic). The boxes of the tensor maps do not change with it:
  B is loaded in 64-column slabs and C stored in 64-column chunks at every width, WP_BN / 64 of each.

Cost model for A (M x K) @ B (K x N), C (M x N), all fp16 or bf16: 2 M N K FLOPs; at least
2 (M K + K N + M N) bytes. Per 128 x 256 tile and 64-wide k step, 48 KB from L2 into shared
memory for 2 * 128 * 256 * 64 = 4.2 MFLOP (85 FLOP per byte). Numerics: as the rung below
(products exact in fp32, fp32 accumulation, one rounding to C's type).

The same kernel, compiled with 2-block clusters, is the next rung, `matmul_wgmma_cluster`: the two
blocks of a cluster take vertically adjacent tiles, which need the same tile of B at every k step;
each loads half of it and the TMA multicasts it into both blocks' shared memory (the kernel's
"clusters" comment). Its benchmark (both rungs beside wgmma_tma and cuBLAS, in interleaved rounds)
is matmul_wgmma_persistent_bench.py.
"""
from __future__ import annotations

import ctypes
import functools
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from course import runtime  # first: chooses the GPU or simulation
from course import holes, validate
from course.check import poisoned, random_tensor
from week1_cuda_python.hopper_ptx import HOPPER_PTX_INCLUDE  # the -I of every Hopper build (one place)
from week1_cuda_python.matmul_tensor_cores import (
    TYPE_SUFFIX, WGMMA_CAPABILITY, WGMMA_GENCODE, cuda_driver, driver_check, tensor_map)

# BEGIN SOLUTION ONLY: where the kernel sources are: the body's is the learner's copy under --impl=exercises
from os import environ

_EXERCISES = environ.get(runtime.IMPL_ENV) == "exercises"
# The body has exercise holes: under `pytest --impl=exercises` (COURSE_IMPL=exercises) it is the learner's copy,
# generated at the same path under exercises/ (as attention/hopper.py does). The ping-pong and fused entry
# points have no holes: their files stay the solution's, and include the body BODY_DEFINES names.
PERSISTENT_SOURCE = Path(__file__).parent / ("exercises/kernels" if _EXERCISES else "kernels") \
    / "matmul_wgmma_persistent.cu"
PINGPONG_SOURCE = Path(__file__).parent / "kernels" / "matmul_wgmma_pingpong.cu"  # the same body, PINGPONG
BODY_DEFINES = (f'-DWP_BODY="{PERSISTENT_SOURCE}"',) if _EXERCISES else ()  # (kernels/matmul_wgmma_pingpong.cu)
# END SOLUTION ONLY
DTYPES = (torch.float16, torch.bfloat16)
FALLBACK = "matmul_wgmma_tma"        # pads odd strides with zero copies; same GPUs
OFF_HOPPER_FALLBACK = "matmul_wmma_cp_async"  # for every GPU that is not compute capability 9.0
TMA_ALIGN_BYTES = 16                  # base address and row strides of every TMA tensor
CLUSTERS = {1: "wgmma_persistent", 2: "wgmma_cluster"}  # blocks per cluster -> the kernels' name
# Consumer schedules (kernels/matmul_wgmma_pingpong.cu says why the second): both warpgroups on one
# 128 x 256 tile, or each on its own 64 x 256 tiles, alternately, one's epilogue beside the other's wgmmas.
SCHEDULES = ("cooperative", "pingpong")
# Tile widths (columns of C per tile), each a build of the same source (-DWP_BN; the kernel's header says why):
# 256, the source's default, first. matmul_wgmma_schedule.WIDTHS must match (its test holds them equal).
WIDTHS = (256, 192, 128)
INT32_MAX = 2**31 - 1
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


@dataclass(frozen=True)
class PersistentTiles:
    """The kernel's tiles (the WP_* #defines of kernels/matmul_wgmma_persistent.cu must match)."""
    bm: int = 128        # rows of C per tile: 2 consumer warpgroups x wgmma's M = 64
    bn: int = 256        # columns per tile: wgmma's largest N
    bk: int = 64         # k per ring stage: 64 halves = the 128-byte swizzle span
    stages: int = 4
    consumers: int = 2   # consumer warpgroups; one more produces (issues the TMA loads)
    b_slab: int = 64     # columns of B per TMA load box
    c_chunk: int = 64    # columns of C per TMA store box (64 rows: one consumer's slice)
    c_buffers: int = 2   # store buffers per consumer warpgroup
    group_m: int = 16    # rows of tiles per group of the tile order

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory: the ring, the epilogue's buffers, 1 KB to align to 1024 bytes."""
        stage = (self.bm * self.bk + self.bk * self.bn) * 2
        epilogue = self.consumers * self.c_buffers * 64 * self.c_chunk * 2
        return self.stages * stage + epilogue + 1024

    def defines(self) -> tuple[str, ...]:
        """nvcc -D flags for what may differ from the source's defaults: the tile order and the tile width
        (bm follows the schedule, which is an entry point, not a build)."""
        flags = () if self.group_m == PersistentTiles.group_m else (f"-DWP_GROUP_M={self.group_m}",)
        return flags + (() if self.bn == PersistentTiles.bn else (f"-DWP_BN={self.bn}",))


PERSISTENT_TILES = PersistentTiles()
PINGPONG_TILES = PersistentTiles(bm=64)  # a tile per consumer warpgroup: 64 rows; the ring's stage 40 KB


def check_width(width) -> int | None:
    """`width` when it is one of WIDTHS (or None: the measured rule's); else ValueError naming it."""
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width not in WIDTHS):
        raise ValueError(f"width must be one of {WIDTHS} (columns of C per tile: the kernel's -DWP_BN builds) or "
                         f"None (the measured rule), got {width!r}")
    return width


def schedule_tiles(schedule: str, width: int, group_m: int = PERSISTENT_TILES.group_m) -> PersistentTiles:
    """The tiles of one build: 128 rows (cooperative) or 64 (ping-pong), `width` columns, the tile order's group_m."""
    return PersistentTiles(bm=PINGPONG_TILES.bm if schedule == "pingpong" else PERSISTENT_TILES.bm, bn=width,
                           group_m=group_m)


def persistent_tile(tile: int, tiles_m: int, tiles_n: int, group_m: int = PERSISTENT_TILES.group_m) -> tuple[int, int]:
    """(row tile, column tile) of C for the persistent loop's tile number `tile`: wp_tile in the
    kernel, same arithmetic (groups of `group_m` rows of tiles, each walked column by column). The
    cluster rung walks units of 2 tiles with the same arithmetic (rows of units, group_m / 2)."""
    # BEGIN EXERCISE: the grouped order: which group `tile` falls in, that group's first row tile and
    #   its number of rows (the last group may be short), then down the group's column first
    # HINT: a group is group_m rows of tiles times every column: group_m * tiles_n tiles; within it,
    #   consecutive tiles go down a column (so the tiles in flight form a square-ish patch of C).
    # HINT: first_m = tile // per_group * group_m; rows = min(tiles_m - first_m, group_m); then the
    #   position inside the group, split by `rows` into (row, column).
    per_group = group_m * tiles_n
    first_m = tile // per_group * group_m
    rows = min(tiles_m - first_m, group_m)
    in_group = tile % per_group
    return first_m + in_group % rows, in_group // rows
    # END EXERCISE


def launch_geometry(m: int, n: int, sms: int, tiles: PersistentTiles = PERSISTENT_TILES, cluster: int = 1):
    """(grid, block): one block per SM, never more blocks than units of work (a block with none would
    only wait at the start); each block of 3 warpgroups walks its share. A unit is `cluster`
    vertically adjacent tiles (1: a tile), one per block of a cluster, so the grid is a multiple of
    `cluster`: the cluster rung pairs blocks (kernels/matmul_wgmma_persistent.cu, "clusters")."""
    tiles_m, tiles_n = -(-m // tiles.bm), -(-n // tiles.bn)  # ceiling divisions
    units = -(-tiles_m // cluster) * tiles_n
    return (cluster * max(1, min(sms // cluster, units)), 1, 1), (tiles.threads, 1, 1)


def unsupported(capability: tuple[int, int] | None) -> str | None:
    """Why these rungs cannot run on a GPU of this compute capability (None: it can, or no GPU)."""
    if capability is None or tuple(capability) == WGMMA_CAPABILITY:
        return None
    major, minor = capability
    return (f"the wgmma_persistent and wgmma_cluster rungs need an sm_90a GPU (compute capability 9.0: H100, H200), because "
            f"wgmma, setmaxnreg and the TMA exist only there; this GPU is compute capability {major}.{minor}: "
            f"use {OFF_HOPPER_FALLBACK}, which runs on every GPU from sm_75 on")


def stride_problem(name: str, t: torch.Tensor, fix: str) -> str | None:
    """Why the TMA cannot read or write `t` as it is (None: it can): 16-byte base and row stride."""
    row_bytes = t.stride(0) * t.element_size()
    if t.data_ptr() % TMA_ALIGN_BYTES == 0 and row_bytes % TMA_ALIGN_BYTES == 0:
        return None
    return (f"{name} has rows of {row_bytes} bytes starting at an address {t.data_ptr() % TMA_ALIGN_BYTES} "
            f"bytes past a 16-byte boundary; the TMA needs both to be multiples of 16 bytes ({fix}): "
            f"use {FALLBACK}, which pads with zeros")


def nvcc_command(output: Path, nvcc: str = "nvcc", defines: tuple[str, ...] = (), source: Path | None = None) -> list[str]:
    """The nvcc command that builds the kernel for sm_90a (the CPU test runs the same one); `source`:
    PINGPONG_SOURCE for the ping-pong entry points (plain and fused), else PERSISTENT_SOURCE."""
    return [nvcc, "-cubin", WGMMA_GENCODE, "-O3", "-lineinfo", "-Werror", "all-warnings", *defines, *BODY_DEFINES,
            *HOPPER_PTX_INCLUDE, "-o", str(output), str(source or PERSISTENT_SOURCE)]


def refuse_open_hole() -> None:
    """NotImplementedError ('not implemented yet', which hole) while the body (PERSISTENT_SOURCE: the learner's
    copy under --impl=exercises) has a hole open. Every build of these rungs includes the body, the ping-pong
    and fused ones too, and a half-written ring hangs the GPU (course/holes.py): each asks this before nvcc."""
    holes.refuse_open_hole(PERSISTENT_SOURCE)


@functools.cache
def cubin_module(defines: tuple[str, ...] = (), source: Path | None = None):
    """`source` (PERSISTENT_SOURCE, or a file that includes its body: the ping-pong and split-K entries) compiled
    for sm_90a with `defines` and loaded into torch's (primary) context."""
    refuse_open_hole()
    source = source or PERSISTENT_SOURCE
    return load_cubin(source, lambda cubin, nvcc: nvcc_command(cubin, nvcc, defines, source), "the wgmma_persistent rung")


def load_cubin(source: Path, command: Callable[[Path, str], list[str]], rung: str):
    """`command(cubin, nvcc)`, an nvcc command line that compiles `source` into the file `cubin`, run in a temporary
    folder, and the cubin loaded into torch's (primary) context: how each of week 1's Hopper GEMM modules is built
    at first use (this rung's, the fused entries', the split-K entries')."""
    nvcc = runtime.nvcc_path()
    if nvcc is None:
        raise RuntimeError(f"nvcc is not on PATH: {rung} is compiled for sm_90a at first use")
    with tempfile.TemporaryDirectory(prefix=f"{source.stem}_") as tmp:
        cubin = Path(tmp) / f"{source.stem}.sm_90a.cubin"
        built = subprocess.run(command(cubin, nvcc), capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"nvcc failed on {source.name}:\n{built.stderr}")
        image = cubin.read_bytes()
    runtime.pycuda_driver()  # makes the primary context, torch's, current in this thread
    module = ctypes.c_void_p()
    driver_check(cuda_driver().cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
    return module


def kernel_function(module, name: str, shared_bytes: int = 0):
    """The kernel `name` of a loaded module, allowed `shared_bytes` of dynamic shared memory: a launch asking for
    more than 48 KB fails unless the function is told first, and the rings take about 200 KB."""
    kernel = ctypes.c_void_p()
    driver_check(cuda_driver().cuModuleGetFunction(ctypes.byref(kernel), module, name.encode()),
                 f"cuModuleGetFunction({name})")
    if shared_bytes:
        driver_check(cuda_driver().cuFuncSetAttribute(kernel, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                      shared_bytes), "cuFuncSetAttribute")
    return kernel


@functools.cache
def _kernel(name: str, shared_bytes: int, defines: tuple[str, ...] = (), source: Path | None = None):
    return kernel_function(cubin_module(defines, source), name, shared_bytes)


def launch_kernel(kernel, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int, args: list,
                  device) -> None:
    """cuLaunchKernel on torch's current stream of `device` (so the launch orders with torch's work and a CUDA graph
    captures it). `args` are ctypes objects, one per kernel parameter; the driver copies their bytes at the call."""
    params = (ctypes.c_void_p * len(args))(*(ctypes.addressof(arg) for arg in args))
    stream = ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)
    driver_check(cuda_driver().cuLaunchKernel(kernel, *grid, *block, shared_bytes, stream, params, None),
                 "cuLaunchKernel")


class _LaunchConfig(ctypes.Structure):
    """cuda.h's CUlaunchConfig: the grid, block, shared memory and stream of a launch, plus attributes."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


@functools.cache
def resident_clusters(kernel_name: str, shared_bytes: int, cluster: int, defines: tuple[str, ...] = ()) -> int | None:
    """How many clusters of this kernel the GPU runs at once (cuOccupancyMaxActiveClusters), or None
    if the driver cannot say. A cluster's blocks must sit on SMs of one GPC: with one 225 KB block
    per SM, a GPC with an odd number of free SMs leaves one idle, so this can be below SMs / 2. A
    persistent grid of more clusters than that would run the extra ones after the others finish,
    doubling the time of their tiles: the launcher keeps the grid within it. `defines`: the build's
    (PersistentTiles.defines: the width)."""
    config = _LaunchConfig((ctypes.c_uint * 3)(cluster, 1, 1), (ctypes.c_uint * 3)(PERSISTENT_TILES.threads, 1, 1),
                           shared_bytes, None, None, 0)
    count = ctypes.c_int()
    query = cuda_driver().cuOccupancyMaxActiveClusters
    query.argtypes, query.restype = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(_LaunchConfig)], ctypes.c_int
    if query(ctypes.byref(count), _kernel(kernel_name, shared_bytes, defines), ctypes.byref(config)) != 0 \
            or count.value < 1:
        return None
    return count.value


def column_major(a: torch.Tensor) -> bool:
    """True when A (M x K) is the transpose of a row-major K x M tensor (`dy.t()`) and not row-major itself (a
    tensor with one row or column is both: it takes the row-major entry)."""
    return not a.is_contiguous() and a.t().is_contiguous()


def dense_rows(t: torch.Tensor) -> torch.Tensor:
    """`t` with the row stride its shape implies. torch calls a one-row tensor contiguous whatever its stride(0) (a
    transposed column, `x[:, :1].t()`, has stride(0) = 1), but the TMA's tensor map takes that stride as given."""
    if t.dim() == 2 and t.shape[0] == 1 and t.is_contiguous() and t.stride(0) != t.shape[1]:
        return t.as_strided(t.shape, (t.shape[1], 1))
    return t


def a_tensor_map(a: torch.Tensor, tiles: PersistentTiles) -> bytes:
    """A's tensor map: 128 rows (ping-pong: 64) x 64 k of a row-major A; for a column-major A (column_major), the
    K x M matrix a.t() in boxes of 64 k x 64 m (TILE_M / 64 a tile: the kernel's A_KM)."""
    return tensor_map(a.t(), tiles.bk, 64) if column_major(a) else tensor_map(a, tiles.bm, tiles.bk)


def checked_operands(a, b, out):
    """Validate A (M x K, row-major or column-major), B (K x N), `out`; return (a, out, M, N, K), a and out with
    dense_rows' strides. Nothing is launched before this."""
    validate.tensor(a, "a", dtypes=DTYPES, ndim=2, contiguous=False)
    if not (a.is_contiguous() or column_major(a)):
        raise ValueError(f"a must be row-major (contiguous) or column-major (a.t() contiguous, as dy.t() in a weight "
                         f"gradient), got strides {a.stride()} for shape {tuple(a.shape)}: pass a.contiguous()")
    validate.tensor(b, "b", dtypes=DTYPES, ndim=2)
    a = dense_rows(a)
    validate.same_dtype(a=a, b=b)
    if a.device != b.device:
        raise ValueError(f"a is on {a.device} but b is on {b.device}: put both on the same GPU")
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b:
        raise ValueError(f"inner dimensions must match: a is {m} x {k}, b is {k_b} x {n} "
                         f"(a.shape[1] = {k} != b.shape[0] = {k_b})")
    if out is None:
        out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    else:
        # C in the inputs' type only: the TMA store writes the staged 16-bit chunks as they are.
        validate.tensor(out, "out", dtypes=(a.dtype,), ndim=2)
        if tuple(out.shape) != (m, n):
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {(m, n)}")
        if out.device != a.device:
            raise ValueError(f"out is on {out.device} but a is on {a.device}")
        out = dense_rows(out)
    for name, size in (("M", m), ("N", n), ("K", k)):
        if size > INT32_MAX - 256:
            raise ValueError(f"{name} = {size} is too large: the kernel takes sizes as 32-bit ints")
    if m and n and k:
        a_rows = (stride_problem("a.t()", a.t(), "M a multiple of 8, a being column-major") if column_major(a)
                  else stride_problem("a", a, "K a multiple of 8"))
        for problem in (a_rows, stride_problem("b", b, "N a multiple of 8"),
                        stride_problem("out", out, "N a multiple of 8")):
            if problem:
                raise ValueError(problem)
    return a, out, m, n, k


def choose_schedule(a, b, epilogue: str | None = None) -> str:
    """The schedule the measured rule picks for A (M x K) @ B (K x N) (`epilogue`: see the rule), read
    from the shapes alone: nothing is launched (the CPU tests ask it)."""
    return choose_build(a, b, epilogue).schedule


def choose_build(a, b, epilogue: str | None = None):
    """The build (schedule and tile width) the measured rule picks for A (M x K) @ B (K x N): a
    matmul_wgmma_schedule.Build, from the shapes alone."""
    # imported here, not at the top: the rule module reads this module's tiles
    from week1_cuda_python import matmul_wgmma_schedule
    (m, k), n = a.shape, b.shape[1]
    return matmul_wgmma_schedule.choose_build(m, n, k, a.dtype, epilogue)


def launch_persistent(a, b, out=None, tiles: PersistentTiles = PERSISTENT_TILES, blocks: int | None = None,
                      cluster: int = 1, schedule: str | None = None, width: int | None = None) -> torch.Tensor:
    """C = A @ B with the kernel built with `tiles`' tile order (group_m; its rows follow the schedule,
    its columns `width`): what the public launchers call. `blocks` caps the grid below the SM count:
    the tests make one block walk many tiles with it.
    `cluster`: 1 is the wgmma_persistent rung, 2 the wgmma_cluster rung (pairs sharing B's loads).
    `schedule`: "cooperative" (both consumers on one 128 x 256 tile), or "pingpong" (each consumer on
    its own 64 x 256 tiles, alternately: kernels/matmul_wgmma_pingpong.cu; cluster 1 only).
    `width`: the tile's columns, one of WIDTHS (256, the source's; 192 and 128 are -DWP_BN builds).
    Both None: the measured rule's build for this shape (matmul_wgmma_schedule.py; its schedule and
    width were measured together, so it is asked only when both are left open); otherwise a schedule
    left open is cooperative and a width 256. The cluster rung never asks the rule.
    A column-major `a` (`dy.t()`: column_major) runs the wgmma_persistent_a_col entry: cooperative, cluster 1, at
    `width` (256 when left open: the rule measured row-major A only)."""
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster must be one of {sorted(CLUSTERS)} (blocks per cluster), got {cluster!r}")
    if schedule is not None and schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES} or None (the measured rule), got {schedule!r}")
    check_width(width)
    if schedule == "pingpong" and cluster != 1:
        raise ValueError(f"schedule='pingpong' runs without clusters: cluster must be 1, got {cluster!r}")
    if blocks is not None and (not isinstance(blocks, int) or blocks < cluster):
        raise ValueError(f"blocks must be a positive int (the most blocks to launch), at least the cluster's "
                         f"{cluster}, got {blocks!r}")
    given = out  # returned as given: checked_operands may hand back a view of it with dense rows
    a, out, m, n, k = checked_operands(a, b, out)
    result = out if given is None else given
    a_col = column_major(a)
    if a_col and (cluster != 1 or schedule == "pingpong"):
        raise ValueError(f"a column-major a (a.t() contiguous) runs the cooperative schedule without clusters: got "
                         f"cluster={cluster!r}, schedule={schedule!r}; pass a.contiguous() for those")
    if schedule is None and width is None and cluster == 1 and not a_col:
        schedule, width = choose_build(a, b)
    schedule, width = schedule or "cooperative", width or PERSISTENT_TILES.bn
    pingpong = schedule == "pingpong"
    tiles = schedule_tiles(schedule, width, tiles.group_m)  # ping-pong: 64-row tiles; the same tile order
    why = unsupported(runtime.capability())
    if why is not None:
        raise RuntimeError(why)
    if m == 0 or n == 0:
        return result
    if k == 0:
        out.zero_()  # every dot product is empty: C = 0, as torch gives
        return result
    # Encoded once per (address, shape, stride, dtype, box) and cached (matmul_tensor_cores.tensor_map).
    map_a = a_tensor_map(a, tiles)                     # A: 128 rows x 64 k, or (column-major) 64 k x 64 m
    map_b = tensor_map(b, tiles.bk, tiles.b_slab)      # B: 64 k x 64 columns
    map_c = tensor_map(out, 64, tiles.c_chunk)         # C: 64 rows x 64 columns, one consumer's chunk
    name = f"{'wgmma_pingpong' if pingpong else CLUSTERS[cluster]}{'_a_col' if a_col else ''}_{TYPE_SUFFIX[a.dtype]}"
    sms = runtime.sm_count()
    if cluster > 1:  # as many blocks as whole clusters can be resident at once (resident_clusters)
        sms = cluster * (resident_clusters(name, tiles.shared_bytes, cluster, tiles.defines()) or sms // cluster)
    grid, block = launch_geometry(m, n, min(sms, blocks or sms), tiles, cluster)
    kernel = _kernel(name, tiles.shared_bytes, tiles.defines(), PINGPONG_SOURCE if pingpong else None)
    args = [ctypes.create_string_buffer(map_a, 128), ctypes.create_string_buffer(map_b, 128),
            ctypes.create_string_buffer(map_c, 128), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k)]
    launch_kernel(kernel, grid, block, tiles.shared_bytes, args, a.device)
    return result


def matmul_wgmma_persistent(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """C = A @ B with the persistent wgmma + TMA kernel (`wgmma_persistent_*`).

    a (M x K), b (K x N): fp16 or bf16, same dtype, b row-major (contiguous), a row-major or
    column-major (a.t() contiguous: a weight gradient's dy.t(), no copy made), on an H100/H200
    (compute capability 9.0; elsewhere RuntimeError naming matmul_wmma_cp_async). C in the inputs'
    dtype, written into `out` if given. The TMA's rule: rows of a multiple of 16 bytes (K, or M for
    a column-major a, and N multiples of 8) and 16-byte aligned tensors; otherwise ValueError naming
    matmul_wgmma_tma, which pads.
    """
    return launch_persistent(a, b, out, schedule="cooperative")


def matmul_wgmma_cluster(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """C = A @ B with the cluster rung (`wgmma_cluster_*`): the persistent kernel with blocks paired in
    clusters of 2 on vertically adjacent tiles, each loading half of their common B tile and
    multicasting it to both. Same contract as `matmul_wgmma_persistent`."""
    return launch_persistent(a, b, out, cluster=2)


def matmul_wgmma_pingpong(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """C = A @ B with the ping-pong schedule (`wgmma_pingpong_*`): each consumer warpgroup computes its
    own 64 x 256 tiles, alternately, so one's epilogue overlaps the other's wgmmas (for small K, where
    the epilogue is a large share of a tile). Same contract as `matmul_wgmma_persistent`."""
    return launch_persistent(a, b, out, schedule="pingpong")


# --- compute-sanitizer cases (python -m course sanitize week1 --only matmul_wgmma_persistent) ---

def _sanitizer_case(dtype: torch.dtype, cluster: int = 1, schedule: str = "cooperative", width: int = 256,
                    a_col: bool = False) -> None:
    # 300 x 328 @ K = 328: partial tiles in M (300 = 2 x 128 + 44) and N (328 = 256 + 72: one store
    # chunk of the last column of tiles partly outside C, two wholly outside), K = 5 full stages and a
    # partial one; 6 tiles on 2 blocks, so each block walks several and the ring wraps across them.
    # For the cluster rung: 3 rows of tiles, so the pair's second block has no tile in the last row.
    # Width 192: 328 = 192 + 136 (the last chunk 8 columns wide); 128: 2 x 128 + 72.
    # a_col: A column-major, the 328 x 296 tensor's transpose, read as 64 x 64 boxes (296 = 4 x 64 + 40; M a
    # multiple of 8, as the TMA needs of a column-major A's rows: 300 is refused before launch).
    device = runtime.DEVICE
    m = 296 if a_col else 300
    a = random_tensor((328, m), dtype, device).t() if a_col else random_tensor((m, 328), dtype, device)
    b = random_tensor((328, 328), dtype, device)
    launch_persistent(a, b, poisoned((m, 328), dtype, device), blocks=2, cluster=cluster, schedule=schedule,
                      width=width)
    torch.cuda.synchronize()


def sanitizer_cases() -> dict[str, Callable[[], None]]:
    """Every case, on any machine: the CPU tests run each one's host side up to the launch, so a shape the launcher
    refuses fails there, not as a failed sanitizer run on the GPU."""
    return {
        f"{name}_{TYPE_SUFFIX[dtype]}": functools.partial(_sanitizer_case, dtype, cluster)
        for cluster, name in CLUSTERS.items() for dtype in DTYPES
    } | {  # ping-pong: 5 row tiles of 64 x 2 column tiles on 2 blocks: 5 tiles each, 3 and 2 per consumer
        f"wgmma_pingpong_{TYPE_SUFFIX[dtype]}": functools.partial(_sanitizer_case, dtype, 1, "pingpong")
        for dtype in DTYPES
    } | {  # the width builds, both schedules, bf16
        f"{'wgmma_pingpong' if schedule == 'pingpong' else CLUSTERS[1]}_bf16_bn{width}":
            functools.partial(_sanitizer_case, torch.bfloat16, 1, schedule, width)
        for width in WIDTHS[1:] for schedule in SCHEDULES
    } | {  # A column-major (dW = dY^T X's layout), at 256 and 192
        f"wgmma_persistent_a_col_{TYPE_SUFFIX[dtype]}{'' if width == 256 else f'_bn{width}'}":
            functools.partial(_sanitizer_case, dtype, 1, "cooperative", width, True)
        for dtype, width in ((torch.bfloat16, 256), (torch.float16, 256), (torch.bfloat16, 192))
    }


# Only where the rung runs (compute capability 9.0; in simulation nothing launches anyway).
SANITIZER_CASES: dict[str, Callable[[], None]] = sanitizer_cases() if unsupported(runtime.capability()) is None else {}
