"""The attention op a model calls: `flash_attention`, differentiable, compilable, over the dispatch's rungs.

    O = softmax(Q K^T * scale + mask) V        Q: (B, H, Sq, D), K and V: (B, H, Sk, D)

This module is the top of the lesson: what a model imports. It checks the call, asks
attention/dispatch.py to run a forward (the rule there picks the rung and its tile, or takes the
caller's `rung=` and `tile=`), and wires the backward (attention/backward.py) to autograd. It owns no
kernel: the forwards live below it (attention/flash.py's flash_blocked, attention/tma.py's flash_tma),
and every call flows down: op -> dispatch -> a rung's launcher -> the kernel.

Two paths, on ONE set of launchers (course/ops.py says why two):

* eager: `FlashAttentionFunction` (or the forward alone when nothing needs a gradient);
* torch.compile: the registered op `torch.ops.course.flash_attention` (fake function + autograd
  formula, the backward itself an op), so Dynamo records one node and never meets the autotuner,
  whose config list it cannot trace ("ListVariable ... is already tracked for mutation").

An `AttentionOp` is that op over one table of forwards. The course's (`OP`, whose methods this
module exports as `flash_attention`, `flash_attention_forward`, ...) runs the solutions; `over(flash,
tma)` builds the same op over a learner's stubs (exercises/attention/), registered as
`torch.ops.course_exercises.*`: how `pytest tests/week4 --impl=exercises` runs your forward inside
the op, autograd and torch.compile included.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from course import ops, runtime

from week4_triton_dl.attention import dispatch  # which forward runs, and the call that runs it
from week4_triton_dl.attention.backward import BWD_STRATEGIES, DEFAULT_BWD_STRATEGY, check_strategy, launch_backward
from week4_triton_dl.attention.naive import INT32_MAX, MAX_GRID_Y, check_out, resolve_scale
from week4_triton_dl.attention.padding_keys import check_key_lengths
from week4_triton_dl.attention.plans import DTYPES, HEAD_DIMS, check_inputs, stats_dtype

TILE_KEYS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")


# ========================================================================== the call's checks
def _on_device(t) -> bool:  # t.is_cuda costs ~0.15 us, t.device.type ~1.3 us
    return t.is_cuda if runtime.ON_GPU else t.is_cpu


def _span(t, shape) -> bool:  # one head indexed in int32 (attention_naive._check_span)
    stride = t.stride()
    return (shape[2] - 1) * stride[2] + (shape[3] - 1) * stride[3] <= INT32_MAX


def _check_call(q, k, v, causal, sm_scale, key_lengths, strategy) -> float:
    """The public entry's checks: a few comparisons per call (a quarter of `check_inputs`'s cost on the
    course's CPU machine); when one fails, `check_inputs` raises the course's message."""
    if (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
            and type(causal) is bool and strategy in BWD_STRATEGIES):
        qs, ks, dtype = q.shape, k.shape, q.dtype
        if (dtype in DTYPES and k.dtype == dtype and v.dtype == dtype and _on_device(q) and _on_device(k)
                and _on_device(v) and len(qs) == 4 and len(ks) == 4 and ks == v.shape and qs[0] == ks[0]
                and qs[1] == ks[1] and qs[3] == ks[3] and qs[3] in HEAD_DIMS and qs[0] * qs[1] <= MAX_GRID_Y
                and _span(q, qs) and _span(k, ks) and _span(v, ks)):
            # q, k, v as check_inputs wants them: its next check is key_lengths', the one check (padding_keys),
            # which raises its own message (a microsecond, and only with padding keys)
            check_key_lengths(key_lengths, q)
            return 1.0 / math.sqrt(qs[3]) if sm_scale is None else resolve_scale(sm_scale, qs[3])
    check_strategy(strategy)
    return check_inputs(q, k, v, causal, sm_scale, key_lengths)


def _tile_list(tile):  # a custom op takes no dict: a tile crosses it as a list of ints
    return None if tile is None else [tile["BLOCK_M"], tile["BLOCK_N"], tile.get("num_warps", 4),
                                      tile.get("num_stages", 2)]


def _tile_dict(tile):
    return None if tile is None else dict(zip(TILE_KEYS, tile))


# ========================================================================= the op eager mode calls
class FlashAttentionFunction(torch.autograd.Function):
    """Autograd glue: the forward saves q, k, v, out and the log-sum-exp (not P)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, key_lengths, strategy, rung, tile, forwards):
        out, lse = dispatch.forward(q, k, v, causal, scale, key_lengths, rung, tile, None, forwards)
        ctx.save_for_backward(q, k, v, out, lse, key_lengths)
        ctx.causal, ctx.scale, ctx.strategy = causal, scale, strategy
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do):
        q, k, v, out, lse, key_lengths = ctx.saved_tensors
        dq, dk, dv = launch_backward(do, q, k, v, out, lse, ctx.causal, ctx.scale, key_lengths, ctx.strategy)
        return dq, dk, dv, None, None, None, None, None, None, None


# ====================================================================== the op torch.compile sees
# Dynamo records one node per call and never looks inside (so never meets the autotuner, whose
# config list it cannot trace); the fake functions give it the shapes, strides and dtypes.
def _fake(q, k, v, causal, scale, key_lengths, strategy=DEFAULT_BWD_STRATEGY, rung=None, tile=None):
    B, H, Sq, D = q.shape  # out is a fresh contiguous tensor, whatever the strides of q
    return q.new_empty((B, H, Sq, D)), q.new_empty((B, H, Sq), dtype=stats_dtype(q.dtype))


def _backward_fake(do, q, k, v, out, lse, causal, scale, key_lengths, strategy):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, key_lengths, strategy = inputs[:7]  # then rung, tile: the forward's only
    ctx.save_for_backward(q, k, v, output[0], output[1], key_lengths)
    ctx.causal, ctx.scale, ctx.strategy = causal, scale, strategy
    ctx.mark_non_differentiable(output[1])  # lse: a statistic for the backward, not a result


def _register(namespace: str, forwards: dict):
    """`namespace::flash_attention` (over `forwards`) and `namespace::flash_attention_backward`, with
    their fake functions and the autograd formula that joins them. Annotations are spelled with
    typing.Optional: torch reads the schema from them."""

    @torch.library.custom_op(f"{namespace}::flash_attention", mutates_args=())
    def flash_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                           key_lengths: Optional[torch.Tensor], strategy: str = DEFAULT_BWD_STRATEGY,
                           rung: Optional[str] = None,
                           tile: Optional[list[int]] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(out, lse) of checked q, k, v (any strides); `strategy` is the backward's (see flash_attention);
        `rung` and `tile` (BLOCK_M, BLOCK_N, num_warps, num_stages) checked ones, or None."""
        return dispatch.forward(q, k, v, causal, scale, key_lengths, rung, _tile_dict(tile), None, forwards)

    @torch.library.custom_op(f"{namespace}::flash_attention_backward", mutates_args=())
    def flash_attention_backward_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                    out: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float,
                                    key_lengths: Optional[torch.Tensor],
                                    strategy: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(dq, dk, dv), fresh contiguous tensors; dO may have any strides (it is not copied)."""
        return launch_backward(do, q, k, v, out, lse, causal, scale, key_lengths, strategy)

    def backward_formula(ctx, do, _dlse):
        q, k, v, out, lse, key_lengths = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward_op(do, q, k, v, out, lse, ctx.causal, ctx.scale, key_lengths,
                                                 ctx.strategy)
        return dq, dk, dv, None, None, None, None, None, None

    flash_attention_op.register_fake(_fake)
    flash_attention_backward_op.register_fake(_backward_fake)
    flash_attention_op.register_autograd(backward_formula, setup_context=_setup_context)
    return flash_attention_op, flash_attention_backward_op


# ============================================================================ the public op
class AttentionOp:
    """The op over one table of forwards (`dispatch.rungs_of`), registered in `namespace`."""

    def __init__(self, namespace: str, forwards: dict):
        self.namespace = namespace
        self.forwards = forwards
        self.flash_attention_op, self.flash_attention_backward_op = _register(namespace, forwards)

    def flash_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        sm_scale: float | None = None, *, key_lengths: torch.Tensor | None = None,
                        strategy: str = DEFAULT_BWD_STRATEGY, rung: str | None = None, tile=None) -> torch.Tensor:
        """Like F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale), fused.

        q (B, H, Sq, D), k and v (B, H, Sk, D), any strides; fp16, bf16, fp32 or fp64; D in 16,
        32, 64, 128. `key_lengths` (B,) int: keys at positions >= key_lengths[b] are padding.
        Differentiable in q, k and v; `strategy` picks the backward ("split" or "atomic"). Eager
        calls run `FlashAttentionFunction` (or the forward alone when no gradient is needed);
        under torch.compile, the registered op `torch.ops.course.flash_attention`.

        The forward is attention/dispatch.py's choice for this GPU, dtype, head dim and mask; `rung`
        ("flash_blocked" or "flash_tma") and `tile` (a dict of BLOCK_M, BLOCK_N[, num_warps, num_stages])
        choose it instead: how the tests and the benchmarks pick one.
        """
        scale = _check_call(q, k, v, causal, sm_scale, key_lengths, strategy)
        if rung is not None or tile is not None:
            rung, tile = dispatch.resolve(rung, tile, q, k, v, causal, None, self.forwards)
        if ops.compiling():
            return self.flash_attention_op(q, k, v, causal, scale, key_lengths, strategy, rung, _tile_list(tile))[0]
        if ops.needs_grad(q, k, v):
            return FlashAttentionFunction.apply(q, k, v, causal, scale, key_lengths, strategy, rung, tile,
                                                self.forwards)
        return dispatch.forward(q, k, v, causal, scale, key_lengths, rung, tile, None, self.forwards)[0]

    def flash_attention_forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                                sm_scale: float | None = None, *, key_lengths: torch.Tensor | None = None,
                                config=None, out: torch.Tensor | None = None,
                                rung: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The fused forward: (out, lse), lse = log-sum-exp of each row's scaled scores (B, H, Sq).

        `config` (a dict with BLOCK_M, BLOCK_N, num_warps, num_stages, or a triton.Config) skips the
        autotuner: for experiments and the sweep. `rung` ("flash_blocked" or "flash_tma") names the
        forward; without rung and config, attention/dispatch.py's rule picks. No autograd: use
        `flash_attention` for that.
        """
        scale = check_inputs(q, k, v, causal, sm_scale, key_lengths)
        out = check_out(out, q.shape, q.dtype)
        rung, config = dispatch.resolve(rung, config, q, k, v, causal, out, self.forwards)
        return dispatch.forward(q, k, v, causal, scale, key_lengths, rung, config, out, self.forwards)


OP = AttentionOp("course", dispatch.FORWARDS)  # the course's op: torch.ops.course.flash_attention
NAMESPACE = OP.namespace
flash_attention = OP.flash_attention
flash_attention_forward = OP.flash_attention_forward
flash_attention_op = OP.flash_attention_op
flash_attention_backward_op = OP.flash_attention_backward_op

_LEARNERS: dict[str, AttentionOp] = {}


def over(flash, tma) -> AttentionOp:
    """The op over the forwards of these rung modules: `OP` for the solutions (or a must-fail fixture
    loaded in their place), else one op per namespace over a learner's stubs (exercises/attention/flash.py
    and tma.py), registered once as torch.ops.course_exercises.*."""
    namespace = ops.namespace(flash.__name__)
    if namespace == NAMESPACE:
        return OP
    if namespace not in _LEARNERS:
        _LEARNERS[namespace] = AttentionOp(namespace, dispatch.rungs_of(flash, tma))
    return _LEARNERS[namespace]
