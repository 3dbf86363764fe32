"""The fused linear's launcher: input checks, tiles (the dispatch table, else the autotuner), the launch.

`fused_linear` checks everything before any launch (ValueError / TypeError naming the argument), then
runs kernel.py's `fused_linear_kernel` (the tiled rung) or, where the dispatch table's row or `rung=`
says so and it can run the call, kernel_tma.py's persistent TMA rung (launch_tma.py), with the tile
of this shape: the dispatch table's row
(results/dispatch_fused_linear.json, course/dispatch.py: rows apply only on the GPU that measured
them), else the autotuner over week 3's configs (one accumulator) or the dual GEMM's (SwiGLU: two
accumulators double the registers, so its tiles stop at 128 x 128, as week 4's fused_mlp), pruned
to those whose pipeline buffers fit this GPU's shared memory. bf16 is refused before launch on a GPU
without bf16 tensor cores (a T4), as week 3's matmul refuses it. In simulation one small tile runs.

Dtypes: x and weight fp16, bf16 or fp32 (fp32 with exact products, `input_precision="ieee"`: the
tests' float32 runs; no TF32). x and weight share a dtype, except with the norm prologue, where x is
the residual stream (fp32 under autocast) and is rounded to weight's dtype after the scale. The
output is in weight's dtype, or the residual's when there is one.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from course import dispatch, runtime, validate
from course.gpu import triton
from week3_triton_kernels.matmul_launch import SIM_CONFIG, tile_config
from week4_triton_dl.fused_linear import kernel as solution
from week4_triton_dl.fused_linear import launch_tma
from week4_triton_dl.fused_linear.prologue_norm import row_rstd

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INT32_MAX = 2**31 - 1
# Two fp32 accumulators: 128 x 128 x 2 over 256 threads is 128 registers a thread for them alone.
DUAL_CONFIGS = [
    tile_config(128, 128, 64, 3, 8),
    tile_config(128, 64, 64, 4, 4),
    tile_config(64, 128, 64, 4, 4),
    tile_config(64, 64, 64, 4, 4),
]
# One accumulator: week 3's tiles and the shapes a Hopper adds. 128 x 128 x 64 at 3 stages takes 96 KB
# of shared memory, so two blocks share an SM and one's epilogue and pipeline fill overlap the other's
# main loop; every 128 x 256 / 256 x 128 tile takes 144 KB or more, one block an SM, its epilogue
# (a shuffle through shared memory, then the store) leaving the tensor cores idle. At the capstone's
# K = 768 a tile has only 12 K steps, so that exposed part is a large share (the note's diagnosis).
# Compiled for sm_90 (tools/probe_fused_linear_sass.py), ptxas serializes this kernel's wgmma at
# 128 x 256 over 8 warps (its warning C7515), at every stage count: the sweep times it anyway (week 3's
# tile, and a tile for the other GPU classes), 128 x 256 at 4 stages is not added.
SINGLE_CONFIGS = [
    tile_config(128, 256, 64, 3, 8),
    tile_config(256, 128, 64, 3, 8),
    tile_config(128, 128, 64, 3, 8),
    tile_config(128, 128, 64, 4, 8),
    tile_config(128, 128, 64, 4, 4),
    tile_config(64, 128, 64, 4, 4),
]
# The residual epilogue holds the residual tile in fp32 beside the fp32 accumulator: compiled for sm_90,
# every tile with 128 accumulator elements a thread (128 x 256 or 256 x 128 over 8 warps, 128 x 128
# over 4) reaches 255 registers and spills to local memory; 64 a thread (128 x 128 over 8 warps) takes
# 150 registers and no stack. So a residual launch keeps the tiles with at most 64.
RESIDUAL_ACC_PER_THREAD = 64
SMALL_PROBLEM = 512 * 512  # C this small: the smallest tile (big ones would leave SMs idle)
KEY = ["M", "N", "K", "HAS_BIAS", "HAS_RESIDUAL", "NORM", "SWIGLU", "STORE_PRE"]
TABLE = dispatch.Table(__file__, "fused_linear")  # week 4's results/dispatch_fused_linear.json


def shared_memory_bytes(config, a_itemsize: int, w_itemsize: int, w_tiles: int) -> int:
    """Pipeline buffers of one block: stages x (an A tile + w_tiles W tiles)."""
    kw = config.kwargs
    return config.num_stages * kw["BLOCK_K"] * (kw["BLOCK_M"] * a_itemsize + w_tiles * kw["BLOCK_N"] * w_itemsize)


def accumulator_per_thread(config) -> int:
    """fp32 accumulator elements each thread holds: the tile over the block's threads."""
    return config.kwargs["BLOCK_M"] * config.kwargs["BLOCK_N"] // (32 * config.num_warps)


def candidates(configs, a_itemsize: int, w_itemsize: int, w_tiles: int, residual: bool) -> list:
    """The configs this launch may take: pipeline buffers within this GPU's shared memory and, with the
    residual epilogue, at most RESIDUAL_ACC_PER_THREAD accumulator elements a thread (else the
    smallest, which the launch then needs: a small GPU)."""
    size = lambda c: shared_memory_bytes(c, a_itemsize, w_itemsize, w_tiles)  # noqa: E731
    fitting = [c for c in configs if size(c) <= runtime.shared_memory_per_block()
               and (not residual or accumulator_per_thread(c) <= RESIDUAL_ACC_PER_THREAD)]
    return fitting or [min(configs, key=size)]


def _pruner(w_tiles: int):
    def prune(configs, named_args, **kwargs):
        a, w = named_args["a_ptr"], named_args["w_ptr"]
        residual = bool(kwargs.get("HAS_RESIDUAL", named_args.get("HAS_RESIDUAL", False)))
        fitting = candidates(configs, a.element_size(), w.element_size(), w_tiles, residual)
        if named_args["M"] * named_args["N"] <= SMALL_PROBLEM:
            return [min(fitting, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]
        return fitting
    return {"early_config_prune": prune}


class Kernels(NamedTuple):
    """The kernel a launch runs: the @triton.jit kernel (launched with a tile) and its two autotuned
    wrappers (one accumulator: SINGLE_CONFIGS; two for SwiGLU: DUAL_CONFIGS). `kernels_of(kernel.fused_linear_kernel)`; an exercise stub's are made the same way from its kernel."""
    jit: object
    single_autotuned: object
    dual_autotuned: object


def kernels_of(kernel) -> Kernels:
    """`kernel` with its autotuners (SINGLE_CONFIGS for one accumulator, DUAL_CONFIGS for two)."""
    return Kernels(kernel, triton.autotune(configs=SINGLE_CONFIGS, key=KEY, prune_configs_by=_pruner(1))(kernel),
                   triton.autotune(configs=DUAL_CONFIGS, key=KEY, prune_configs_by=_pruner(2))(kernel))


@functools.cache
def _default_kernels() -> Kernels:
    """The solution's kernel with its autotuners, made once (a learner's stub passes its own)."""
    return kernels_of(solution.fused_linear_kernel)


class Result(NamedTuple):
    out: torch.Tensor          # the op's output
    pre: torch.Tensor | None   # [g | u] (M, 2F) with swiglu and store_pre, else None
    rstd: torch.Tensor | None  # the rows' rstd (fp32) with the norm prologue, else None


def epilogue_name(bias, residual, norm_weight, swiglu) -> str:
    """The dispatch table's name of this combination ("plain", "bias", "norm+swiglu", ...)."""
    parts = [n for n, on in (("norm", norm_weight is not None), ("bias", bias is not None),
                             ("swiglu", swiglu), ("residual", residual is not None)) if on]
    return "+".join(parts) or "plain"


# ------------------------------------------------------------------------------- checks
def _int32_span(t, name):
    if t.numel() and sum((s - 1) * st for s, st in zip(t.shape, t.stride())) > INT32_MAX:
        raise ValueError(f"{name} spans more than 2^31 elements: the kernel's A and W offsets are int32")


def check(x, weight, bias, residual, norm_weight, eps, swiglu, store_pre, out):
    """(M, N, K, out dtype) of a call, or ValueError / TypeError naming the argument: before any launch."""
    validate.tensor(x, "x", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.tensor(weight, "weight", dtypes=DTYPES, ndim=2, contiguous=False)
    if norm_weight is None:
        validate.same_dtype(x=x, weight=weight)
    M, K = x.shape
    if weight.shape[1] != K:
        raise ValueError(f"weight must be (out_features, in_features) with in_features = x's {K} columns; "
                         f"got weight {tuple(weight.shape)}")
    if not isinstance(swiglu, bool) or not isinstance(store_pre, bool):
        raise TypeError(f"swiglu and store_pre must be bools, got {swiglu!r} and {store_pre!r}")
    if store_pre and not swiglu:
        raise ValueError("store_pre=True keeps SwiGLU's [g | u] for the backward: it needs swiglu=True")
    if swiglu and weight.shape[0] % 2:
        raise ValueError(f"swiglu: weight must stack [W_gate; W_up] (2F rows), got an odd {weight.shape[0]} rows")
    N = weight.shape[0] // 2 if swiglu else weight.shape[0]
    if bias is not None:
        validate.tensor(bias, "bias", dtypes=DTYPES, ndim=1, contiguous=False)
        if swiglu:
            raise ValueError("bias with swiglu is not offered: the capstone's MLP has none (add it to both halves first)")
        if bias.shape[0] != N:
            raise ValueError(f"bias has {bias.shape[0]} elements; expected out_features = {N}")
    if residual is not None:
        validate.tensor(residual, "residual", dtypes=DTYPES, ndim=2, contiguous=False)
        if tuple(residual.shape) != (M, N):
            raise ValueError(f"residual has shape {tuple(residual.shape)}; expected {(M, N)} (x's rows, the output's columns)")
    if norm_weight is not None:
        validate.tensor(norm_weight, "norm_weight", dtypes=(x.dtype,), ndim=1, contiguous=False)
        if norm_weight.shape[0] != K:
            raise ValueError(f"norm_weight has {norm_weight.shape[0]} elements; expected x's {K} columns")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise ValueError(f"eps must be a positive float, got {eps!r}")
    out_dtype = residual.dtype if residual is not None else weight.dtype
    if out is not None:
        validate.tensor(out, "out", dtypes=(out_dtype,), ndim=2, contiguous=False)
        if tuple(out.shape) != (M, N):
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {(M, N)}")
    _int32_span(x, "x")
    _int32_span(weight, "weight")
    runtime.require_bf16_tensor_cores(weight.dtype, "fused_linear (tl.dot)")
    return M, N, K, out_dtype


# ------------------------------------------------------------------------------- launch
def tile_for(M, N, K, dtype, kind: str, tile: dict | None) -> dict | None:
    """The caller's tile, else the dispatch table's row for this shape on this GPU, else None (autotune)."""
    if tile is not None:
        if not isinstance(tile, dict) or not {"BLOCK_M", "BLOCK_N", "BLOCK_K"} <= set(tile):
            raise ValueError(f"tile must be a dict with BLOCK_M, BLOCK_N and BLOCK_K, got {tile!r}")
        return dict(tile)
    row = TABLE.get((M, N, K, str(dtype).replace("torch.", ""), kind))
    if row is None or row.tile is None:
        return None
    t = dict(row.tile)
    if getattr(row, "rung", None) == launch_tma.RUNG:
        t["_rung"] = launch_tma.RUNG  # fused_linear takes it out (the rung the sweep timed this tile on)
    if "residual" in kind and t["BLOCK_M"] * t["BLOCK_N"] // (32 * t.get("num_warps", 4)) > RESIDUAL_ACC_PER_THREAD:
        return None  # a row swept before the residual's register rule (it spills): the autotuner instead
    return t


TMA_ONLY = ("FLATTEN",)  # a TMA tile's keys the tiled kernel does not take


def fused_linear(x, weight, *, bias=None, residual=None, norm_weight=None, eps=1e-5, swiglu=False,
                 store_pre=False, out=None, tile=None, kernels: Kernels | None = None, rung: str | None = None) -> Result:
    """out = [residual +] epilogue(prologue(x) @ weight^T [+ bias]) in one launch (two with the norm).

    prologue: with `norm_weight`, x is RMSNorm'ed on its way in (rstd per row, computed first, and
    norm_weight per column; `eps`). epilogue: `swiglu` takes weight as [W_gate; W_up] (2F, K) and
    writes silu(g) * u (M, F); `store_pre` also returns [g | u] (M, 2F). Returns a `Result`.
    `kernels`: which kernel runs (default kernel.py's; the tests pass an exercise stub's). `rung`: "tiled"
    (kernel.py) or "tma" (kernel_tma.py, sm_90: ValueError where it cannot run this call); None: the
    dispatch table row's rung where it can run, else "tiled".
    """
    if rung not in (None, "tiled", launch_tma.RUNG):
        raise ValueError(f"rung must be None, 'tiled' or {launch_tma.RUNG!r}, got {rung!r}")
    M, N, K, out_dtype = check(x, weight, bias, residual, norm_weight, eps, swiglu, store_pre, out)
    kind = epilogue_name(bias, residual, norm_weight, swiglu)
    tile = tile_for(M, N, K, weight.dtype, kind, tile)
    chosen = rung or (tile.pop("_rung", "tiled") if tile is not None else "tiled")
    if chosen == launch_tma.RUNG:
        why = launch_tma.why_not(x, weight, norm_weight, swiglu)
        if why is not None and rung is not None:
            raise ValueError(f"rung={rung!r} cannot run this call: {why}")
        chosen = "tiled" if why is not None else chosen
    if tile is not None and chosen == "tiled":
        tile = {k: v for k, v in tile.items() if k not in TMA_ONLY}
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype, device=x.device)
    pre = torch.empty((M, 2 * N), dtype=weight.dtype, device=x.device) if store_pre else None
    rstd = row_rstd(x, float(eps)) if norm_weight is not None else None
    if M == 0 or N == 0:
        return Result(out, pre, rstd)
    if K == 0:  # empty sums: acc = 0; the epilogue still applies (not worth a kernel)
        acc = torch.zeros((M, N), dtype=torch.float32, device=x.device)
        if bias is not None:
            acc = acc + bias.float()
        if pre is not None:
            pre.zero_()
        if swiglu:
            acc = torch.zeros_like(acc)  # silu(0) * 0
        if residual is not None:
            acc = acc + residual.float()
        out.copy_(acc)
        return Result(out, pre, rstd)
    if chosen == launch_tma.RUNG:
        launch_tma.launch(x, weight, out, bias, residual, M, N, K, tile)
        return Result(out, pre, rstd)
    dummy = out  # pointer arguments a switch leaves unread
    args = (x, weight, out, dummy if bias is None else bias, dummy if residual is None else residual,
            dummy if rstd is None else rstd, dummy if norm_weight is None else norm_weight,
            dummy if pre is None else pre, M, N, K, x.stride(0), x.stride(1), weight.stride(0), weight.stride(1),
            out.stride(0), out.stride(1), *(residual.stride() if residual is not None else (0, 0)),
            pre.stride(0) if pre is not None else 0)
    meta = dict(HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None, NORM=norm_weight is not None,
                SWIGLU=swiglu, STORE_PRE=store_pre,
                INPUT_PRECISION="ieee" if weight.dtype == torch.float32 else "tf32")
    tiles = lambda m: (triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"]),)  # noqa: E731
    if tile is None and not runtime.on_gpu():
        tile = dict(SIM_CONFIG)  # the interpreter cannot time configs
    kernels = _default_kernels() if kernels is None else kernels
    if tile is None:
        (kernels.dual_autotuned if swiglu else kernels.single_autotuned)[tiles](*args, **meta)
    else:
        tile.setdefault("GROUP_M", 8)
        kernels.jit[tiles(tile)](*args, **meta, **tile)
    return Result(out, pre, rstd)
