"""Exercise: FlashAttention-2 forward and backward in Triton. Same names as
week4_triton_dl/flash_attention.py.

Check your work with `pytest tests/week4/test_flash_attention.py --impl=exercises`. Do the
naive exercise first (`attention_naive.py`): the first kernel here is its two kernels fused.
Suggested order: the forward kernel with no mask at all (full blocks only), then the masked
second loop (ragged last block, causal diagonal, key padding), then the delta kernel, the dK/dV
kernel and the dQ kernel, then the hot-path launchers `_forward` and `_backward` and the
checked launchers `flash_attention_forward` / `flash_attention_backward`.

GIVEN (at the end of this file, as in the solution): the registered ops torch.compile sees
(`flash_attention_op`, `flash_attention_backward_op`: fake functions and autograd formula),
the autograd.Function eager mode calls, and the public entry `flash_attention` with its cheap
checks. They call your `_forward` and `_backward`, so they work as soon as those do.
"""
from __future__ import annotations

import math

import torch

from course import ops, runtime  # noqa: F401  runtime before triton: GPU or interpreter
from course import validate  # noqa: F401
from week4_triton_dl.attention_naive import (  # noqa: F401
    INT32_MAX, MAX_GRID_Y, check_attention_inputs, check_out, dot_precision, resolve_scale)
from course.tl_dot import dot  # noqa: F401  every product: tl.dot, fp64 as plain FMAs (course/tl_dot.py)

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
HEAD_DIMS = (16, 32, 64, 128)
BWD_STRATEGIES = ("split", "atomic")
DEFAULT_BWD_STRATEGY = "split"
NAMESPACE = ops.namespace(__name__)  # "course_exercises": apart from the solution's ops
LOG2E = 1.4426950408889634
_LOG2E = tl.constexpr(LOG2E)  # kernels may only read tl.constexpr globals
_LN2 = tl.constexpr(0.6931471805599453)
SIM_FWD = {"BLOCK_M": 32, "BLOCK_N": 16}
SIM_BWD_KV = {"BLOCK_M": 16, "BLOCK_N": 32}
SIM_BWD_Q = {"BLOCK_M": 32, "BLOCK_N": 16}
SIM_DELTA_BLOCK = 16
DELTA_BLOCK = 64


@triton.jit
def _visible_key_count(key_len_ptr, b, seq_k, HAS_KEY_LENGTHS: tl.constexpr):
    """seq_k, or key_lengths[b] clamped to [0, seq_k]."""
    # TODO
    pass


@triton.jit
def _query_block_key_range(m_start, n_keys, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr):
    """(full_hi, hi): key blocks [0, full_hi) need no mask for queries [m_start, m_start + BLOCK_M)."""
    # TODO: non-causal: hi = n_keys, full_hi = n_keys rounded down to BLOCK_N. Causal (key j
    # visible to query i iff j <= i): hi = min(m_start + BLOCK_M, n_keys); a key block
    # [n, n + BLOCK_N) is visible to every row iff n + BLOCK_N - 1 <= m_start.
    pass


@triton.jit
def _fwd_key_blocks(acc, m_i, l_i, q, k_base, v_base, offs_m, start, stop, n_keys, qk_scale,
                    stride_ks, stride_kd, stride_vs, stride_vd,
                    MASKED: tl.constexpr, CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
                    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    """Online-softmax update of (acc, m_i, l_i) over the key blocks [start, stop), base 2."""
    # TODO: for each block: qk = q @ k^T (dot(q, tl.trans(k), None, DOT_PRECISION)); (MASKED: s = where(keep, qk * qk_scale, -inf))
    # m_new = max(m_i, rowmax(s)); p = exp2(s - m_new); alpha = exp2(m_i - m_new);
    # l_i = l_i * alpha + rowsum(p); acc = acc * alpha + p.to(v.dtype) @ v; m_i = m_new.
    # Careful: a row with no visible key yet has m_new = -inf, and -inf - -inf = NaN.
    pass


@triton.jit
def flash_attention_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, key_len_ptr,
                               n_heads, seq_q, seq_k, qk_scale, seq_bucket,
                               stride_qb, stride_qh, stride_qs, stride_qd,
                               stride_kb, stride_kh, stride_ks, stride_kd,
                               stride_vb, stride_vh, stride_vs, stride_vd,
                               stride_ob, stride_oh, stride_os, stride_od,
                               CAUSAL: tl.constexpr, HAS_KEY_LENGTHS: tl.constexpr,
                               DOT_PRECISION: tl.constexpr,
                               HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per (query block, batch * head): out and the natural-log lse of its rows."""
    # TODO: load the Q tile once; m_i = -inf, l_i = 0, acc = 0 (fp32, or fp64 for fp64
    # inputs: use lse_ptr.dtype.element_ty); the unmasked loop
    # over [0, full_hi), the masked loop over [full_hi, hi); out = acc / l (0 where l == 0),
    # lse = (m_i + log2(l)) * ln 2 (-inf where l == 0).
    pass


@triton.jit
def flash_attention_bwd_delta_kernel(o_ptr, do_ptr, delta_ptr, n_heads, seq_q,
                                     stride_ob, stride_oh, stride_os, stride_od,
                                     stride_dob, stride_doh, stride_dos, stride_dod,
                                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """D_i = sum_d dO_id * O_id."""
    # TODO
    pass


@triton.jit
def _bwd_query_blocks_for_keys(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, offs_n,
                               start, stop, n_keys, seq_q, sm_scale, qk_scale,
                               stride_qs, stride_qd, stride_dos, stride_dod, stride_dqs,
                               MASKED: tl.constexpr, CAUSAL: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                               DOT_PRECISION: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """dK, dV of one key block, accumulated over the query blocks [start, stop)."""
    # TODO: p^T = exp2(K Q^T * qk_scale - lse * log2 e); dV += p^T dO; dp^T = V dO^T;
    # ds^T = p^T (dp^T - D); dK += ds^T Q. With ATOMIC_DQ also atomically add scale * ds K to dQ.
    pass


@triton.jit
def flash_attention_bwd_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                                    dq_acc_ptr, key_len_ptr, n_heads, seq_q, seq_k, sm_scale, qk_scale,
                                    seq_bucket,
                                    stride_qb, stride_qh, stride_qs, stride_qd,
                                    stride_kb, stride_kh, stride_ks, stride_kd,
                                    stride_vb, stride_vh, stride_vs, stride_vd,
                                    stride_dob, stride_doh, stride_dos, stride_dod,
                                    stride_dkb, stride_dkh, stride_dks, stride_dkd,
                                    stride_dvb, stride_dvh, stride_dvs, stride_dvd,
                                    CAUSAL: tl.constexpr, HAS_KEY_LENGTHS: tl.constexpr,
                                    ATOMIC_DQ: tl.constexpr, DOT_PRECISION: tl.constexpr,
                                    HEAD_DIM: tl.constexpr,
                                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per block of keys: its dK (times scale) and dV; padding keys get 0."""
    # TODO
    pass


@triton.jit
def _bwd_key_blocks_for_queries(dq, q, do, lse2, delta, k_base, v_base, offs_m, start, stop, n_keys, qk_scale,
                                stride_ks, stride_kd, stride_vs, stride_vd,
                                MASKED: tl.constexpr, CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
                                HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    """dQ of one query block, accumulated over the key blocks [start, stop)."""
    # TODO
    pass


@triton.jit
def flash_attention_bwd_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, key_len_ptr,
                                  n_heads, seq_q, seq_k, sm_scale, qk_scale, seq_bucket,
                                  stride_qb, stride_qh, stride_qs, stride_qd,
                                  stride_kb, stride_kh, stride_ks, stride_kd,
                                  stride_vb, stride_vh, stride_vs, stride_vd,
                                  stride_dob, stride_doh, stride_dos, stride_dod,
                                  stride_dqb, stride_dqh, stride_dqs, stride_dqd,
                                  CAUSAL: tl.constexpr, HAS_KEY_LENGTHS: tl.constexpr,
                                  DOT_PRECISION: tl.constexpr,
                                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per block of queries: its dQ (times scale)."""
    # TODO
    pass


def _stats_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _forward(q, k, v, causal, scale, key_lengths, config=None, out=None):
    """(out, lse) of checked q, k, v (any strides): allocate, launch, no checks (the hot path)."""
    # TODO: out (B, H, Sq, D) in q's dtype (or the `out` given), lse (B, H, Sq) in _stats_dtype;
    # grid (cdiv(Sq, BLOCK_M), B * H); SIM_FWD in the interpreter, `config` when given. A model
    # calls this for every layer: compute a shape's launch settings once and keep them in a dict
    # (no triton.cdiv / next_power_of_2 per call: plain integer arithmetic).
    raise NotImplementedError("not implemented yet: _forward (week4 exercise)")


def _backward(do, q, k, v, out, lse, causal, scale, key_lengths, strategy, kv_config=None, q_config=None,
              grads=None):
    """(dq, dk, dv) for checked inputs; dO may have any strides (pass them, do not copy)."""
    # TODO: delta kernel, then the dK/dV kernel, then the dQ kernel ("split"), or the dK/dV
    # kernel with ATOMIC_DQ into a zeroed fp32 buffer ("atomic"). Empty sizes: see the solution's tests.
    raise NotImplementedError("not implemented yet: _backward (week4 exercise)")


def _check(q, k, v, causal, sm_scale, key_lengths):
    return check_attention_inputs(q, k, v, causal, sm_scale, key_lengths, dtypes=DTYPES, head_dims=HEAD_DIMS)


def _check_strategy(strategy):
    if strategy not in BWD_STRATEGIES:
        raise ValueError(f"strategy must be one of {list(BWD_STRATEGIES)}, got {strategy!r}")


def flash_attention_forward(q, k, v, causal=False, sm_scale=None, *, key_lengths=None, config=None, out=None):
    """Returns (out, lse), lse the natural-log log-sum-exp (B, H, Sq)."""
    # TODO: check everything (_check, check_out, the config), then _forward.
    raise NotImplementedError("not implemented yet: flash_attention_forward (week4 exercise)")


def flash_attention_backward(do, q, k, v, out, lse, causal=False, sm_scale=None, *, key_lengths=None,
                             strategy=DEFAULT_BWD_STRATEGY, kv_config=None, q_config=None, grads=None):
    """Returns (dq, dk, dv)."""
    # TODO: check everything (do, out, lse, grads, configs), then _backward.
    raise NotImplementedError("not implemented yet: flash_attention_backward (week4 exercise)")


# ============================================== GIVEN: the op torch.compile sees (as in the solution)
@torch.library.custom_op(f"{NAMESPACE}::flash_attention", mutates_args=())
def flash_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                       key_lengths: torch.Tensor | None,
                       strategy: str = DEFAULT_BWD_STRATEGY) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward(q, k, v, causal, scale, key_lengths)


@flash_attention_op.register_fake
def _flash_attention_fake(q, k, v, causal, scale, key_lengths, strategy=DEFAULT_BWD_STRATEGY):
    B, H, Sq, D = q.shape
    return q.new_empty((B, H, Sq, D)), q.new_empty((B, H, Sq), dtype=_stats_dtype(q.dtype))


@torch.library.custom_op(f"{NAMESPACE}::flash_attention_backward", mutates_args=())
def flash_attention_backward_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                out: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float,
                                key_lengths: torch.Tensor | None,
                                strategy: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(do, q, k, v, out, lse, causal, scale, key_lengths, strategy)


@flash_attention_backward_op.register_fake
def _flash_attention_backward_fake(do, q, k, v, out, lse, causal, scale, key_lengths, strategy):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, key_lengths, strategy = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1], key_lengths)
    ctx.causal, ctx.scale, ctx.strategy = causal, scale, strategy
    ctx.mark_non_differentiable(output[1])


def _backward_formula(ctx, do, _dlse):
    q, k, v, out, lse, key_lengths = ctx.saved_tensors
    dq, dk, dv = flash_attention_backward_op(do, q, k, v, out, lse, ctx.causal, ctx.scale, key_lengths, ctx.strategy)
    return dq, dk, dv, None, None, None, None


flash_attention_op.register_autograd(_backward_formula, setup_context=_setup_context)


# ============================================== GIVEN: the op eager mode calls, and the public entry
class FlashAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, key_lengths, strategy):
        out, lse = _forward(q, k, v, causal, scale, key_lengths)
        ctx.save_for_backward(q, k, v, out, lse, key_lengths)
        ctx.causal, ctx.scale, ctx.strategy = causal, scale, strategy
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do):
        q, k, v, out, lse, key_lengths = ctx.saved_tensors
        dq, dk, dv = _backward(do, q, k, v, out, lse, ctx.causal, ctx.scale, key_lengths, ctx.strategy)
        return dq, dk, dv, None, None, None, None


_ON_GPU = runtime.DEVICE.type == "cuda"


def _on_device(t) -> bool:  # t.is_cuda costs ~0.15 us, t.device.type ~1.3 us
    return t.is_cuda if _ON_GPU else t.is_cpu


def _span(t, shape) -> bool:
    stride = t.stride()
    return (shape[2] - 1) * stride[2] + (shape[3] - 1) * stride[3] <= INT32_MAX


def _check_call(q, k, v, causal, sm_scale, key_lengths, strategy) -> float:
    """A few comparisons per call; `_check` gives the message when one fails."""
    if (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
            and type(causal) is bool and strategy in BWD_STRATEGIES):
        qs, ks, dtype = q.shape, k.shape, q.dtype
        if (dtype in DTYPES and k.dtype == dtype and v.dtype == dtype and _on_device(q) and _on_device(k)
                and _on_device(v) and len(qs) == 4 and len(ks) == 4 and ks == v.shape and qs[0] == ks[0]
                and qs[1] == ks[1] and qs[3] == ks[3] and qs[3] in HEAD_DIMS and qs[0] * qs[1] <= MAX_GRID_Y
                and _span(q, qs) and _span(k, ks) and _span(v, ks)
                and (key_lengths is None or (isinstance(key_lengths, torch.Tensor) and _on_device(key_lengths)
                                             and key_lengths.dtype in (torch.int32, torch.int64)
                                             and key_lengths.shape == qs[:1]))):
            return 1.0 / math.sqrt(qs[3]) if sm_scale is None else resolve_scale(sm_scale, qs[3])
    _check_strategy(strategy)
    return _check(q, k, v, causal, sm_scale, key_lengths)


def flash_attention(q, k, v, causal=False, sm_scale=None, *, key_lengths=None, strategy=DEFAULT_BWD_STRATEGY):
    """Like F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale), fused."""
    scale = _check_call(q, k, v, causal, sm_scale, key_lengths, strategy)
    if ops.compiling():
        return flash_attention_op(q, k, v, causal, scale, key_lengths, strategy)[0]
    if ops.needs_grad(q, k, v):
        return FlashAttentionFunction.apply(q, k, v, causal, scale, key_lengths, strategy)
    return _forward(q, k, v, causal, scale, key_lengths)[0]
