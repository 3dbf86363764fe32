"""What the fused FlashAttention kernels share: which keys a program visits, and cheap launches.

attention/flash.py (the forward) and attention/backward.py (the backward) import this; it
imports neither. Three things, all of them about planning the work rather than doing it:

* What the kernels accept (`DTYPES`, `HEAD_DIMS`, `check_inputs`) and the dtype of their
  statistics (`stats_dtype`: fp32, fp64 for fp64 inputs).
* Which keys a block of queries visits (`visible_key_count`, `query_block_key_range`, two
  @triton.jit helpers the forward and the dQ kernel both call): the keys left of the causal
  diagonal and inside the sequence need no mask; the diagonal and the ragged last block do.
* Tile configs and launch plans. A kernel a model calls is also a host cost: GPT-2 small calls
  attention 12 times a step each way, and at a short prompt the GPU work is a few us. Measured on
  the H100 machine (torch 2.11), the first version cost 143 us of host time per forward at
  (1, 12, 64, 64) against 28 us for F.scaled_dot_product_attention, and its backward 530-680 us of
  CPU per call in the capstone's training step: the autotuner's `run` rebuilt its key from ~40
  arguments on every launch, and every grid was a lambda calling `triton.cdiv` (a jitted helper).
  Now a shape's launch settings are computed once (`plan`); the autotuner runs on an autotune
  key's first call only and its choice is kept (`AUTOTUNED`); later calls launch the plain kernel with
  a tuple grid (`launch_plan`). fp32, fp64 and short sequences have one fixed config each
  (`fixed_config`) and never meet the autotuner. `attention_host_week4` (attention/bench.py)
  times the host cost per call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from course import runtime
from course.gpu import triton, tl
from course.launch import launch

from course.launch import next_power_of_2  # plain Python, no jit
from week4_triton_dl.attention.naive import check_attention_inputs, dot_precision

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
HEAD_DIMS = (16, 32, 64, 128)
LOG2E = 1.4426950408889634  # host side: folded into the scale passed to the kernels (exp2, not exp)


def check_inputs(q, k, v, causal, sm_scale, key_lengths) -> float:
    """The fused kernels' full input check (attention_naive's, with fp64 allowed); the scale to use."""
    return check_attention_inputs(q, k, v, causal, sm_scale, key_lengths, dtypes=DTYPES, head_dims=HEAD_DIMS)


def stats_dtype(dtype):
    """The dtype of the log-sum-exp, delta and the accumulators: fp32, or fp64 for fp64 inputs."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# =============================================================================== which keys
@triton.jit
def visible_key_count(key_len_ptr, b, seq_k, HAS_KEY_LENGTHS: tl.constexpr):
    """Keys 0 .. n_keys-1 exist for batch b: all of them, or key_lengths[b] clamped to [0, Sk]."""
    n_keys = seq_k
    if HAS_KEY_LENGTHS:
        n_keys = tl.minimum(tl.maximum(tl.load(key_len_ptr + b).to(tl.int32), 0), seq_k)
    return n_keys


@triton.jit
def query_block_key_range(m_start, n_keys, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr):
    """Keys a block of queries [m_start, m_start + BLOCK_M) must visit: [0, hi).

    Blocks in [0, full_hi) are visible to every query of the block and lie inside the
    sequence: no mask. [full_hi, hi) holds the causal diagonal and/or the ragged last block.
    """
    if CAUSAL:
        # Key j is visible to query i when j <= i. A key block [n, n + BLOCK_N) is visible to
        # every row of the block iff n + BLOCK_N - 1 <= m_start.
        hi = tl.minimum(m_start + BLOCK_M, n_keys)
        full_hi = tl.minimum((m_start + 1) // BLOCK_N, n_keys // BLOCK_N) * BLOCK_N
    else:
        hi = n_keys
        full_hi = n_keys // BLOCK_N * BLOCK_N
    return full_hi, hi


# =============================================================================== tile configs
def tile_config(block_m, block_n, warps, stages, max_head_dim=128):
    """A triton.Config of BLOCK_M x BLOCK_N tiles, tagged with the largest head dim it serves."""
    config = triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages)
    config.max_head_dim = max_head_dim  # larger D would spill: the accumulators outgrow the registers
    return config


def configs_for(configs, head_dim):
    """The configs of a list that serve head dimension `head_dim`."""
    return [c for c in configs if head_dim <= c.max_head_dim]


def config_kwargs(config) -> dict:
    """A triton.Config or a plain dict {'BLOCK_M', 'BLOCK_N'[, 'num_warps', 'num_stages']}."""
    if isinstance(config, triton.Config):
        return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    if not isinstance(config, dict) or not {"BLOCK_M", "BLOCK_N"} <= set(config):
        raise ValueError(f"config must be a triton.Config or a dict with BLOCK_M and BLOCK_N, got {config!r}")
    for name in ("BLOCK_M", "BLOCK_N"):
        value = config[name]
        if not isinstance(value, int) or value < 16 or value & (value - 1):
            raise ValueError(f"config {name} must be a power of two >= 16 (tl.dot's minimum), got {value!r}")
    return dict(config)


WIDE_DTYPE_CONFIG = tile_config(32, 32, 4, 2)  # fp32: true-fp32 products, twice the bytes per tile
# fp64 multiplies by broadcast FMAs (course/tl_dot.py): a (16, D, 16) tile of products in registers.
FP64_CONFIG = tile_config(16, 16, 4, 1)
SHORT_SEQUENCE = 512  # below this (bucket), tuning costs more than it can win


def fixed_config(small, dtype, seq_bucket):
    """The one config that fp64, fp32 and short sequences always get (nothing to tune), else None.
    `small` is the kernel's own config for short 16-bit sequences."""
    if dtype == torch.float64:
        return FP64_CONFIG
    if dtype == torch.float32:
        return WIDE_DTYPE_CONFIG
    return small if seq_bucket <= SHORT_SEQUENCE else None


def pruner(small):
    """The autotuner's early_config_prune: the fixed config where there is one, else the configs
    that serve the head dim."""
    def prune(configs, named_args, **kwargs):
        fixed = fixed_config(small, named_args["q_ptr"].dtype, named_args["seq_bucket"])
        if fixed is not None:
            return [fixed]
        head_dim = kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM"))
        return configs_for(configs, head_dim) if head_dim is not None else configs
    return prune


# The autotune key of every fused kernel: one tuning serves every length of a power-of-two bucket.
AUTOTUNE_KEY = ["seq_bucket", "HEAD_DIM", "CAUSAL", "HAS_KEY_LENGTHS"]


# =============================================================================== launch plans
@dataclass(frozen=True)
class TunedKernel:
    """A fused kernel as the launch plans see it."""
    name: str         # "fwd", "kv", "q": the first item of its plan and tuning keys
    plain: object     # the @triton.jit kernel, launched with a kept config
    autotuned: object  # triton.autotune(...)(plain): run on a tuning key's first call only
    sim: dict         # the config the interpreter runs (it cannot time configs)
    small: object     # the config of short 16-bit sequences (see fixed_config)
    axis: str         # "BLOCK_M" (one program per query block) or "BLOCK_N" (one per key block)


class Plan(NamedTuple):
    """One shape's launch settings for one fused kernel, computed once (`plan`) and kept."""
    kernel: object       # the plain @triton.jit kernel, or the autotuned one before its first choice
    programs: int | None  # programs along grid axis 0; None while the autotuner has yet to choose
    seq_bucket: int      # next power of two of the longer sequence: the autotune key's length
    meta: dict           # constexprs and launch options (num_warps, num_stages)
    tune_key: tuple      # where the autotuner's choice is kept (AUTOTUNED)
    axis: str            # "BLOCK_M" (one program per query block) or "BLOCK_N" (one per key block)


AUTOTUNED: dict = {}  # (name, seq_bucket, D, causal, has_key_lengths, dtype, atomic) -> launch kwargs
PLANS: dict = {}  # (name, Sq, Sk, D, causal, has_key_lengths, dtype, atomic) -> plan
_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def plan(kernel: TunedKernel, Sq, Sk, D, causal, has_kl, dtype, atomic=None, config=None):
    """The Plan of `kernel` for one shape.

    `programs` is None when the autotuner has yet to choose (the plan is then not kept). An
    explicit `config` (the sweep, the launchers' config=) gives a plan that is not kept either.
    `atomic` (the dK/dV kernel only) is its ATOMIC_DQ constexpr; None for the other kernels.
    """
    key = (kernel.name, Sq, Sk, D, causal, has_kl, dtype, atomic)
    found = PLANS.get(key) if config is None else None
    if found is not None:
        return found
    bucket = next_power_of_2(max(Sq, Sk, 1))
    meta = dict(CAUSAL=causal, HAS_KEY_LENGTHS=has_kl, DOT_PRECISION=dot_precision(dtype), HEAD_DIM=D)
    if atomic is not None:
        meta["ATOMIC_DQ"] = atomic
    tune_key = (kernel.name, bucket, D, causal, has_kl, dtype, atomic)
    if config is not None:
        chosen = config_kwargs(config)
    elif not runtime.on_gpu():
        chosen = dict(kernel.sim)
    else:
        chosen = AUTOTUNED.get(tune_key)
        if chosen is None:
            fixed = fixed_config(kernel.small, dtype, bucket)
            if fixed is None:
                return Plan(kernel.autotuned, None, bucket, meta, tune_key, kernel.axis)
            chosen = fixed.all_kwargs()
    programs = -(-(Sq if kernel.axis == "BLOCK_M" else Sk) // chosen[kernel.axis])
    found = Plan(kernel.plain, programs, bucket, {**meta, **chosen}, tune_key, kernel.axis)
    if config is None:
        if len(PLANS) > 4096:  # many distinct lengths (decoding with a growing cache): start over
            PLANS.clear()
        PLANS[key] = found
    return found


def launch_plan(plan: Plan, length, bh, args, key=None):
    """Launch a plan's kernel over (programs, bh); on an autotune key's first call the autotuner
    runs over (cdiv(length, tile), bh) and its choice is kept in AUTOTUNED.

    With a `key` (the plan's shape key plus every int argument that can vary: the strides),
    the launch goes through course.launch, which calls the compiled kernel directly after the
    first time (~14 us of host time instead of ~25 us for these 27-argument kernels, H100).
    """
    kernel, programs, _, meta, tune_key, axis = plan
    if programs is not None:
        if key is None:
            kernel[(programs, bh)](*args, **meta)
        else:
            options = {name: meta[name] for name in _OPTIONS if name in meta}
            launch(kernel, (programs, bh), (key, tuple(meta.items())), args,
                   {k: v for k, v in meta.items() if k not in options}, **options)
        return
    kernel[lambda m: (-(-length // m[axis]), bh)](*args, **meta)
    AUTOTUNED[tune_key] = kernel.best_config.all_kwargs()
