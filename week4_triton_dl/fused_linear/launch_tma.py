"""Launching kernel_tma.py's persistent TMA rung: where it applies, its tiles, its descriptors.

launch.py calls `why_not` (None where this rung can run the call, else the reason, in words) and then
`launch` with checked arguments; the rung itself is chosen there (a dispatch table row's "rung", or
the caller's `rung=`). There is no autotuner here: a descriptor's block shape is part of its type and
must be set from the tile before the launch, so the launch takes a tile (the table's, else
DEFAULT_TILES), and the sweep times `candidates` (TMA_CONFIGS that fit).
"""
from __future__ import annotations

import torch

from course import runtime, versions
from course.gpu import triton
from triton.tools.tensor_descriptor import TensorDescriptor
from week3_triton_kernels.matmul_launch import rows_16_byte_aligned, tile_config
from week4_triton_dl.fused_linear.kernel_tma import fused_linear_tma_kernel

RUNG = "tma"
INSTEAD = "the tiled rung (fused_linear_kernel)"  # what runs where this one cannot
# One program an SM (PER_SM programs would need the buffers of two blocks on one SM: none of these fit
# twice). FLATTEN: the tile loop merged with the K loop.
TMA_CONFIGS = [
    tile_config(128, 256, 64, 3, 8, FLATTEN=True),
    tile_config(128, 256, 64, 4, 8, FLATTEN=True),
    tile_config(128, 128, 64, 3, 8, FLATTEN=True),
    tile_config(128, 128, 64, 4, 8, FLATTEN=True),
    tile_config(128, 128, 64, 4, 4, FLATTEN=True),
]
# Without a table row: the wide tile for one accumulator; 128 x 128 over 8 warps for the residual, whose
# fp32 tile lives beside the accumulator (launch.RESIDUAL_ACC_PER_THREAD's reason).
DEFAULT_TILES = {False: dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, FLATTEN=True, num_warps=8, num_stages=3),
                 True: dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, FLATTEN=True, num_warps=8, num_stages=3)}
SIM_TILE = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, FLATTEN=True)


def shared_memory_bytes(config, itemsize: int, out_itemsize: int) -> int:
    """The TMA rung's shared memory: the pipeline's stages of an A and a W tile, and, because the
    pipeline now runs on through the epilogue, a staging buffer of its own for the accumulator's
    shuffle, BLOCK_M x min(BLOCK_N, 128) in C's dtype (what sm_90 compiles of these tiles take:
    180 KB at 128 x 256 x 64 and 3 stages, 164 KB at 128 x 128 with an fp32 C)."""
    kw = config.kwargs
    pipeline = config.num_stages * kw["BLOCK_K"] * (kw["BLOCK_M"] + kw["BLOCK_N"]) * itemsize
    return pipeline + kw["BLOCK_M"] * min(kw["BLOCK_N"], 128) * out_itemsize + 1024


def candidates(itemsize: int, out_itemsize: int, acc_limit: int | None) -> list:
    """TMA_CONFIGS whose shared memory fits this GPU and, where `acc_limit` is given (the residual's
    register rule, launch.RESIDUAL_ACC_PER_THREAD), with at most that many accumulator elements a thread."""
    return [c for c in TMA_CONFIGS
            if shared_memory_bytes(c, itemsize, out_itemsize) <= runtime.shared_memory_per_block()
            and (acc_limit is None or c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] // (32 * c.num_warps) <= acc_limit)]


def why_not(x: torch.Tensor, weight: torch.Tensor, norm_weight, swiglu: bool) -> str | None:
    """None where the TMA rung can run this call, else why not (launch.py then runs the tiled rung)."""
    if swiglu:
        return ("SwiGLU's two accumulators spill on this rung (255 registers and a stack, compiled for sm_90 "
                "at 128 x 128 over 8 warps; the tiled rung's stay under 255, no stack)")
    if norm_weight is not None:
        return "the norm prologue scales A in registers from the fp32 residual stream: the tiled rung's"
    if weight.dtype not in (torch.float16, torch.bfloat16) or x.dtype != weight.dtype:
        return f"x and weight must be one 16-bit dtype (got {x.dtype} and {weight.dtype}): fp32 takes the tiled rung"
    if not (rows_16_byte_aligned(x) and rows_16_byte_aligned(weight)):
        return "TMA needs row-major x and weight with 16-byte aligned rows"
    if not runtime.has_capability((9, 0), instead=INSTEAD):
        return "TMA needs compute capability >= 9.0"
    return None


def _programs(tile: dict, M: int, N: int) -> int:
    """Programs to launch: one an SM, never more than there are tiles."""
    return min(runtime.sm_count(), triton.cdiv(M, tile["BLOCK_M"]) * triton.cdiv(N, tile["BLOCK_N"]))


def launch(x, weight, out, bias, residual, M, N, K, tile: dict | None):
    """Run fused_linear_tma_kernel on checked arguments (launch.check and why_not passed)."""
    tile = dict(tile if tile is not None else (DEFAULT_TILES[residual is not None] if runtime.on_gpu() else SIM_TILE))
    bm, bn, bk = tile["BLOCK_M"], tile["BLOCK_N"], tile["BLOCK_K"]
    a_desc = TensorDescriptor.from_tensor(x, [bm, bk])
    w_desc = TensorDescriptor.from_tensor(weight, [bn, bk])  # (N, K) as stored: K-major, the tile used .T
    versions.refuse_unsimulated_descriptors("fused_linear's TMA rung", f"use {INSTEAD}, a GPU, or Triton >= 3.6",
                                            a_desc.strides, w_desc.strides)
    programs = _programs(tile, M, N)
    tile.setdefault("GROUP_M", 8)
    tile.setdefault("FLATTEN", True)
    dummy = out
    fused_linear_tma_kernel[(programs,)](
        a_desc, w_desc, out, dummy if bias is None else bias, dummy if residual is None else residual,
        M, N, K, out.stride(0), out.stride(1), *(residual.stride() if residual is not None else (0, 0)),
        HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None, NUM_PROGRAMS=programs, **tile)
    return out
