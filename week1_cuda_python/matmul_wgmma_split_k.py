"""Split-K: the persistent wgmma GEMM for a small C over a long K, such as a weight gradient.

The kernel is kernels/matmul_wgmma_split_k.cu (the persistent body with SPLIT_K; its header is the lesson): a
persistent grid deals output tiles to SMs, and the capstone's dW = dY^T X of the attention projection, 768 x 768
over 8192 tokens, has only 18 tiles of 128 x 256 for an H100's 132 SMs. Cutting each tile's K into `splits` ranges
makes tiles x splits units of work; each writes fp32 partial sums to a workspace, and a second kernel adds the
ranges in a fixed order and rounds once to C's type.

    matmul_wgmma_split_k(a, b, out=None, splits=None)      C = A @ B, A row-major or column-major (dy.t())

`splits=None` asks `plan_splits`, which weighs the two costs from the shape alone: the busiest SM's k tiles (its
units times each unit's range, plus a ring's worth of prologue per unit) against the workspace's bytes (written
in fp32 by every range, read back by the sum). Its two rates are parameters: `TFLOPS_PER_SM` (the tensor cores'
dense rate a persistent tile sustains, per SM) and `WORKSPACE_GBPS` (the memory rate the workspace moves at); the
defaults are round figures for an H100, to be checked against the benchmark (matmul_wgmma_backward_bench.py
times the plan's choice beside no split and cuBLAS). One range is the plain persistent kernel: no workspace.
`plan_build` asks it at every tile width (256, 192, 128) and keeps the least: a narrower tile that fills the SMs
whole can beat a wider one split, and on the H100 it did (the MLP's weight gradients).

Numerics: each range's products and sums as the plain kernel's (fp32); the ranges' partial sums added in fp32 in
the order 0, 1, ... (the same bits every run), then one rounding to C's type. The result differs from the plain
kernel's by fp32 reassociation only, within the same error bound.

Cost model (bytes): the plain kernel's, plus splits x M_rows x N x 4 written and read (M_rows: M rounded up to the
tile's 128 rows), plus M x N x 2 written by the sum.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import NamedTuple

import torch

from course import runtime  # first: chooses the GPU or simulation
from course import holes
from course.check import poisoned, random_tensor
from week1_cuda_python.matmul_tensor_cores import TYPE_SUFFIX, tensor_map
from week1_cuda_python.matmul_wgmma_persistent import (
    PERSISTENT_SOURCE, PERSISTENT_TILES, WIDTHS, a_tensor_map, check_width, checked_operands, column_major,
    cubin_module, kernel_function, launch_kernel, launch_persistent, nvcc_command, schedule_tiles, unsupported)

# BEGIN SOLUTION ONLY: where the kernel source is: the learner's copy under --impl=exercises (it has a hole: the sum),
# which includes the learner's body (nvcc_command's BODY_DEFINES)
from os import environ

SPLIT_K_SOURCE = Path(__file__).parent / ("exercises/kernels" if environ.get(runtime.IMPL_ENV) == "exercises"
                                          else "kernels") / "matmul_wgmma_split_k.cu"
# END SOLUTION ONLY
MAX_SPLITS = 16            # ranges at most: past this the workspace costs more than any idle SM
MIN_K_TILES = 4            # k tiles (of 64) a range keeps at least: a shorter one is mostly prologue and epilogue
TFLOPS_PER_SM = 5.0        # dense bf16/fp16 rate of one SM running a persistent tile (~660 TFLOP/s over 132 SMs)
WORKSPACE_GBPS = 3000.0    # the rate the fp32 workspace is written and read at (an H100's HBM3; L2 is faster)
PROLOGUE_K_TILES = 2       # a unit's fixed cost, in k tiles: filling the ring, the epilogue's stores
SUM_THREADS = 256          # threads per block of the sum kernel (4 columns a thread)


class SplitPlan(NamedTuple):
    """How a GEMM is split: `splits` ranges of `k_per_split` k tiles (64 each; the last range may be shorter), over
    `tiles` output tiles, `busiest` units on the busiest SM, the fp32 workspace's bytes, and the model's time (us)."""
    splits: int
    k_per_split: int
    tiles: int
    busiest: int
    workspace_bytes: int
    model_us: float


def split(k_tiles: int, splits: int) -> tuple[int, int]:
    """(ranges, k tiles per range) for asking `splits` ranges of `k_tiles`: every range non-empty (the last may be
    shorter), so a request the k tiles cannot honour gets fewer ranges (128 k tiles in 7: 7 of 19, the last 14;
    9 in 4: 3 of 3)."""
    # BEGIN EXERCISE: k tiles per range for `splits` ranges (rounded up), then the ranges that many k tiles a range
    #   really makes (rounded up again): fewer than asked when the k tiles cannot honour the request, none empty
    # HINT: 9 k tiles asked for 4 ranges: 3 a range, so 3 ranges, not 4 (a fourth would be empty, and its units
    #   would store partial sums of nothing over C's rows).
    # HINT: ceil(a / b) in integers is -(-a // b): `per = -(-k_tiles // splits)`, then the same division by per.
    per = -(-k_tiles // splits)
    return -(-k_tiles // per), per
    # END EXERCISE


@functools.lru_cache(maxsize=256)  # asked at every launch with splits=None: the loop below once per shape
def plan_splits(m: int, n: int, k: int, sms: int, tiles=PERSISTENT_TILES, tflops_per_sm: float = TFLOPS_PER_SM,
                workspace_gbps: float = WORKSPACE_GBPS) -> SplitPlan:
    """The number of ranges whose modelled time is least (the fewer on a tie): the busiest SM's k tiles, each
    2 bm bn 64 FLOPs at `tflops_per_sm`, plus PROLOGUE_K_TILES per unit, plus (more than one range) the workspace's
    bytes at `workspace_gbps`. From the shape alone: nothing is launched (the CPU tests ask it)."""
    for name, value in (("m", m), ("n", n), ("k", k), ("sms", sms)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    k_tiles, tile_count = -(-k // tiles.bk), -(-m // tiles.bm) * -(-n // tiles.bn)
    us_per_k_tile = 2 * tiles.bm * tiles.bn * tiles.bk / (tflops_per_sm * 1e12) * 1e6
    m_rows = -(-m // tiles.bm) * tiles.bm
    best = None
    for asked in range(1, min(MAX_SPLITS, max(1, k_tiles // MIN_K_TILES)) + 1):
        ranges, per = split(k_tiles, asked)
        if best is not None and ranges == best.splits:
            continue
        busiest = -(-tile_count * ranges // sms)
        workspace = ranges * m_rows * n * 4 if ranges > 1 else 0
        moved = 2 * workspace + (m * n * 2 if ranges > 1 else 0)  # written, read back; the sum's C
        us = busiest * (per + PROLOGUE_K_TILES) * us_per_k_tile + moved / (workspace_gbps * 1e9) * 1e6
        if best is None or us < best.model_us:
            best = SplitPlan(ranges, per, tile_count, busiest, workspace, us)
    return best


def nvcc_split_k_command(output: Path, nvcc: str = "nvcc", defines: tuple[str, ...] = ()) -> list[str]:
    """The persistent rung's nvcc command on the split-K source, the body named (body_define): what cubin_module
    runs for it (the CPU test runs the same one)."""
    return nvcc_command(output, nvcc, (*defines, body_define()), source=SPLIT_K_SOURCE)


def body_define() -> str:
    """The -D that names the body this build includes: the persistent module's PERSISTENT_SOURCE (the learner's under
    --impl=exercises, a known-wrong body under the must-fail harness), not whichever file sits beside this source."""
    return f'-DWP_BODY="{PERSISTENT_SOURCE}"'


@functools.cache
def _kernel(name: str, width: int = PERSISTENT_TILES.bn):
    tiles = schedule_tiles("cooperative", width)
    holes.refuse_open_hole(SPLIT_K_SOURCE)  # the sum's hole (cubin_module refuses the body's)
    module = cubin_module((*tiles.defines(), body_define()), SPLIT_K_SOURCE)  # nvcc_split_k_command's build
    # The GEMM's ring takes ~200 KB of dynamic shared memory; the sum none.
    return kernel_function(module, name, tiles.shared_bytes if name.startswith("wgmma_persistent") else 0)


@functools.lru_cache(maxsize=256)
def plan_build(m: int, n: int, k: int, sms: int) -> tuple[int, SplitPlan]:
    """(width, plan): the tile width (one of WIDTHS) and its plan_splits ranges whose modelled time is least, the
    wider tile on a tie. Weighing the width with the ranges matters where a narrower tile fills the SMs without a
    workspace: the MLP's dW (3072 x 768 over 8192) is 72 tiles at 256 wide, which plan_splits cuts into 3 ranges,
    but 96 whole tiles at 192; the benchmark (results/matmul_wgmma_backward_week1.*) timed the 192-wide build
    faster than either 256-wide one, as this model says."""
    best = None
    for width in WIDTHS:
        plan = plan_splits(m, n, k, sms, schedule_tiles("cooperative", width))
        if best is None or plan.model_us < best[1].model_us:
            best = (width, plan)
    return best


def launch_split_k(a, b, out=None, splits: int | None = None, width: int | None = None,
                   blocks: int | None = None) -> torch.Tensor:
    """C = A @ B in `splits` ranges of K (None: the plan's choice; 1: the plain persistent kernel), `width` the
    tile's columns (one of WIDTHS), `blocks` a cap on the GEMM's grid (the tests walk many units with it). Both None:
    plan_build's width and ranges; a width alone: plan_splits' ranges at it; ranges alone: 256 wide.
    A row-major or column-major (`dy.t()`), B row-major, as launch_persistent takes them."""
    if splits is not None and (isinstance(splits, bool) or not isinstance(splits, int) or splits < 1):
        raise ValueError(f"splits must be a positive int (ranges of K) or None (the plan's choice), got {splits!r}")
    if blocks is not None and (isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1):
        raise ValueError(f"blocks must be a positive int (the most blocks to launch), got {blocks!r}")
    width = check_width(width)
    given = out
    a, out, m, n, k = checked_operands(a, b, out)
    result = out if given is None else given
    why = unsupported(runtime.capability())
    if why is not None:
        raise RuntimeError(why)
    if m == 0 or n == 0 or k == 0:  # nothing to split
        return launch_persistent(a, b, result, schedule="cooperative", width=width or PERSISTENT_TILES.bn)
    if splits is None and width is None:
        width = plan_build(m, n, k, runtime.sm_count())[0]  # its plan is plan_splits' at that width (cached)
    width = width or PERSISTENT_TILES.bn
    tiles = schedule_tiles("cooperative", width)
    if splits is None:
        plan = plan_splits(m, n, k, runtime.sm_count(), tiles)
        ranges, per = plan.splits, plan.k_per_split
    else:
        ranges, per = split(-(-k // tiles.bk), splits)
    if ranges == 1:
        return launch_persistent(a, b, result, blocks=blocks, schedule="cooperative", width=width)
    a_col = column_major(a)
    m_rows = -(-m // tiles.bm) * tiles.bm
    # Every range's rows of partial sums, one after another; the rows past M are written (zeros) and never read.
    workspace = torch.empty((ranges * m_rows, n), dtype=torch.float32, device=a.device)
    map_a = a_tensor_map(a, tiles)
    map_b = tensor_map(b, tiles.bk, tiles.b_slab)
    map_w = tensor_map(workspace, 64, 32)  # fp32 boxes of 64 rows x 32 columns: 128 bytes a row
    gemm = f"wgmma_persistent{'_a_col' if a_col else ''}_split_k_{TYPE_SUFFIX[a.dtype]}"
    units = -(-m // tiles.bm) * -(-n // tiles.bn) * ranges
    grid = max(1, min(runtime.sm_count(), blocks or units, units))
    launch_kernel(_kernel(gemm, width), (grid, 1, 1), (tiles.threads, 1, 1), tiles.shared_bytes,
                  [ctypes.create_string_buffer(map_a, 128), ctypes.create_string_buffer(map_b, 128),
                   ctypes.create_string_buffer(map_w, 128), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k),
                   ctypes.c_int(per)], a.device)
    quads = m * n // 4
    launch_kernel(_kernel(f"wgmma_split_k_sum_{TYPE_SUFFIX[a.dtype]}", width),
                  (max(1, min(4 * runtime.sm_count(), -(-quads // SUM_THREADS))), 1, 1), (SUM_THREADS, 1, 1), 0,
                  [ctypes.c_void_p(workspace.data_ptr()), ctypes.c_void_p(out.data_ptr()), ctypes.c_int(m),
                   ctypes.c_int(n), ctypes.c_int(m_rows), ctypes.c_int(ranges)], a.device)
    return result


def matmul_wgmma_split_k(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None,
                         splits: int | None = None) -> torch.Tensor:
    """C = A @ B with split-K (`wgmma_persistent[_a_col]_split_k_*` then `wgmma_split_k_sum_*`).

    a (M x K) row-major or column-major (a.t() contiguous: a weight gradient's dy.t()), b (K x N) row-major: fp16 or
    bf16, on an H100/H200 (elsewhere RuntimeError naming matmul_wmma_cp_async). `splits`: ranges of K (256 wide), or
    None for plan_build's tile width and ranges. The TMA's rules as matmul_wgmma_persistent's (ValueError naming matmul_wgmma_tma)."""
    return launch_split_k(a, b, out, splits)


# --- compute-sanitizer cases (python -m course sanitize week1 --only wgmma_split_k_...) -----------

def _sanitizer_case(dtype: torch.dtype, a_col: bool) -> None:
    # 200 x 328 over K = 1000: 16 k tiles in 3 ranges of 6 (the last 4), 2 x 2 tiles (the last column of tiles 72
    # wide: one of its fp32 boxes partly outside C, the rest wholly), 12 units on 5 blocks: each walks several.
    device = runtime.DEVICE
    a = random_tensor((1000, 200), dtype, device).t() if a_col else random_tensor((200, 1000), dtype, device)
    b = random_tensor((1000, 328), dtype, device)
    launch_split_k(a, b, poisoned((200, 328), dtype, device), splits=3, blocks=5)
    torch.cuda.synchronize()


def sanitizer_cases() -> dict:
    """Every case, on any machine (the CPU tests run each one's host side up to the launch)."""
    return {
        f"wgmma_split_k{'_a_col' if a_col else ''}_{TYPE_SUFFIX[dtype]}":
            functools.partial(_sanitizer_case, dtype, a_col)
        for dtype in (torch.bfloat16, torch.float16) for a_col in (False, True)
    }


SANITIZER_CASES = sanitizer_cases() if unsupported(runtime.capability()) is None else {}
