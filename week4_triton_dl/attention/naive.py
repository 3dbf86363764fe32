"""Attention the straightforward way: scaled, masked scores, a softmax, then P @ V (three kernels).

    O = softmax(Q K^T * scale + mask) V        Q: (B, H, Sq, D), K and V: (B, H, Sk, D)

This module builds that formula literally, one kernel per step, so that the next module
(`attention/flash.py`) has something concrete to fuse:

1. `scaled_masked_scores_kernel`: S = (Q K^T) * scale, a batched matmul with an epilogue that
   writes -inf where a key is masked: the causal mask (key j is visible to query i only when
   j <= i, top-left aligned as in torch's `is_causal`) and key padding (`key_lengths[b]`: keys at
   positions >= that length are padding). One program per BLOCK_M x BLOCK_N tile of S; the whole
   head dimension D (<= 128) fits in one `tl.dot`, so there is no loop over D.
2. The row softmax of week 3 (`week3_triton_kernels.softmax`), run IN PLACE on S: P overwrites S.
3. `probs_times_values_kernel`: O = P @ V, a second batched matmul that walks the keys in blocks.

Cost model (N = B * H * Sq * Sk scores, E = B * H * S * D elements per input, itemsize s):
* FLOPs: 2 N D for Q K^T plus 2 N D for P V: 4 N D (the convention every attention benchmark uses).
* Memory: the S^2 buffer, N fp32 values = 4 N bytes (4 GB at B*H = 64, S = 4096). It is written
  once (scores), read and rewritten once (softmax), and read once (P @ V): 16 N bytes of HBM
  traffic, against (3 + 1) E s bytes for reading Q, K, V and writing O. At S = 4096, D = 128 in bf16
  the scores traffic is 16 * 4096 / (4 * 128 * 2) = 64x the Q/K/V/O traffic: this version is
  memory-bound on a buffer that exists only because the steps are separate kernels. That is
  the whole argument for FlashAttention (see `attention/flash.py`).
* Fully masked rows (key_lengths[b] == 0, or Sk == 0) give zeros, as torch's SDPA does: P @ V
  reads only the first key_lengths[b] columns of P, so the softmax's 0/0 = NaN on an all -inf row
  is never read.
"""
from __future__ import annotations

import math

import torch

from course import runtime
from course import validate
from course.gpu import triton, tl

from week3_triton_kernels.softmax import softmax  # week 3's kernel, reused as step 2
from week4_triton_dl.attention.padding_keys import check_key_lengths

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HEAD_DIMS = (16, 32, 64, 128)  # tl.dot needs a power of two >= 16; 128 keeps a Q tile in registers
INT32_MAX = 2**31 - 1
MAX_GRID_Y = 65535  # CUDA's limit on the second grid dimension, where B * H goes
# One tile of S per program. 64 x 64 fp32 is 16 KB of output per program; the scores kernel is
# bound by writing S, not by the matmul, so the tile shape hardly matters.
SCORES_BLOCK = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4}
PV_BLOCK = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
SIM_BLOCK = {"BLOCK_M": 16, "BLOCK_N": 16}  # tiny tiles in the interpreter: more edges tested


@triton.jit
def scaled_masked_scores_kernel(q_ptr, k_ptr, s_ptr, key_len_ptr, n_heads, seq_q, seq_k, sm_scale,
                                stride_qb, stride_qh, stride_qs, stride_qd,
                                stride_kb, stride_kh, stride_ks, stride_kd,
                                CAUSAL: tl.constexpr, HAS_KEY_LENGTHS: tl.constexpr,
                                DOT_PRECISION: tl.constexpr, HEAD_DIM: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # BEGIN EXERCISE: one BLOCK_M x BLOCK_N tile of S = (Q K^T) * scale for one (batch, head): program_id(0)
    #   -> (tile row, tile column), program_id(1) -> b * n_heads + h, base pointers in int64 (b * stride_qb
    #   can pass 2^31); q and k tiles masked past the sequence (other=0); s = tl.dot(q, tl.trans(k),
    #   input_precision=DOT_PRECISION) * sm_scale; keep key j for query i when j < n_keys (key_lengths[b]
    #   clamped to [0, seq_k] when HAS_KEY_LENGTHS) and, if CAUSAL, j <= i: tl.where(keep, s, -inf); store
    #   into the contiguous S, masked
    # HINT: The naive attention's first step writes all of S to memory: each program computes one BLOCK_M x
    #   BLOCK_N tile of Q K^T for one (batch, head), then masks padding keys and the causal future with
    #   -inf.
    # HINT: Split program_id(0) into tile row and column (// and % by the number of key tiles),
    #   program_id(1) into b and h; int64 base pointers; load q and k tiles masked on the sequence; tl.dot
    #   with k transposed; build `keep` from n_keys and the causal test; tl.where; store into S at bh *
    #   seq_q * seq_k + row * seq_k + col.
    # HINT: `s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale`, then `keep =
    #   offs_n[None, :] < n_keys` and `& (offs_n[None, :] <= offs_m[:, None])` when CAUSAL.
    tiles_n = tl.cdiv(seq_k, BLOCK_N)
    pid_m = tl.program_id(0) // tiles_n
    pid_n = tl.program_id(0) % tiles_n
    bh = tl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    # int64 for the (batch, head) base: B * H * S * D passes 2^31 long before one head does.
    q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = k_ptr + b.to(tl.int64) * stride_kb + h.to(tl.int64) * stride_kh
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd,
                mask=offs_m[:, None] < seq_q, other=0.0)
    k = tl.load(k_base + offs_n[:, None] * stride_ks + offs_d[None, :] * stride_kd,
                mask=offs_n[:, None] < seq_k, other=0.0)
    # Tensor cores take fp16/bf16 in and accumulate in fp32; tl.trans(k) costs nothing, the
    # compiler just reads the K tile from shared memory in the other order.
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale

    n_keys = seq_k
    if HAS_KEY_LENGTHS:
        n_keys = tl.minimum(tl.maximum(tl.load(key_len_ptr + b), 0), seq_k)
    keep = offs_n[None, :] < n_keys
    if CAUSAL:
        keep = keep & (offs_n[None, :] <= offs_m[:, None])
    # where(), not adding a -inf bias: a NaN score at a masked position is dropped, not spread.
    s = tl.where(keep, s, -float("inf"))
    s_rows = s_ptr + bh.to(tl.int64) * seq_q * seq_k
    tl.store(s_rows + offs_m[:, None] * seq_k + offs_n[None, :], s,
             mask=(offs_m[:, None] < seq_q) & (offs_n[None, :] < seq_k))
    # END EXERCISE


@triton.jit
def probs_times_values_kernel(p_ptr, v_ptr, o_ptr, key_len_ptr, n_heads, seq_q, seq_k,
                              stride_vb, stride_vh, stride_vs, stride_vd,
                              stride_ob, stride_oh, stride_os, stride_od,
                              HAS_KEY_LENGTHS: tl.constexpr, DOT_PRECISION: tl.constexpr,
                              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    p_base = p_ptr + bh.to(tl.int64) * seq_q * seq_k
    v_base = v_ptr + b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    n_keys = seq_k
    if HAS_KEY_LENGTHS:
        n_keys = tl.minimum(tl.maximum(tl.load(key_len_ptr + b), 0), seq_k)

    # BEGIN EXERCISE: O = P @ V over the keys in BLOCK_N steps into an fp32 accumulator: read only the first
    #   n_keys columns of P (a row with no key at all is NaN after the softmax and must not reach the sum),
    #   round each P tile to v's dtype for tl.dot; store in o's dtype
    # HINT: O = P V is a matmul with K = the keys: loop over key blocks, accumulate tl.dot of a P tile and a
    #   V tile in fp32. Stopping at n_keys keeps padding keys, and the NaN of an empty row, out of the sum.
    # HINT: acc = zeros [BLOCK_M, HEAD_DIM] fp32; `for start in range(0, n_keys, BLOCK_N)`: load P's columns
    #   start..start+BLOCK_N (masked on rows and cols < n_keys), V's rows at the same keys (masked), tl.dot;
    #   store acc in o's dtype through o's strides.
    # HINT: `acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)`: P is rounded to V's dtype,
    #   as `P.to(v.dtype) @ V` would.
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # Only the first n_keys columns of P are read: padding keys (and the NaN that the softmax
    # leaves on a row with no key at all) never reach the sum, so such a row comes out 0.
    for start in range(0, n_keys, BLOCK_N):
        cols = start + offs_n
        p = tl.load(p_base + offs_m[:, None] * seq_k + cols[None, :],
                    mask=(offs_m[:, None] < seq_q) & (cols[None, :] < n_keys), other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :] * stride_vd,
                    mask=cols[:, None] < n_keys, other=0.0)
        # P is rounded to V's dtype so the tensor cores can take it, as `P.to(v.dtype) @ V` would.
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
    o_base = o_ptr + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od,
             acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_q)
    # END EXERCISE


# ------------------------------------------------------------------------------ input checks
def dot_precision(dtype: torch.dtype) -> str:
    """fp32 inputs ask for true fp32 products ("ieee"); tl.dot's default would round them to TF32."""
    return "ieee" if dtype in (torch.float32, torch.float64) else "tf32"


def _check_span(t: torch.Tensor, name: str) -> None:
    # Inside one head the kernels index with int32; the (batch, head) base is int64.
    span = sum((size - 1) * abs(stride) for size, stride in zip(t.shape[2:], t.stride()[2:]))
    if span > INT32_MAX:
        raise ValueError(f"{name}: one head spans more than 2^31 elements (strides {t.stride()}); "
                         "the kernels index within a head in int32")


def resolve_scale(sm_scale, head_dim: int) -> float:
    """1/sqrt(D) when None; otherwise a positive finite number (the kernels fold it into exp2)."""
    if sm_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)):
        raise TypeError(f"sm_scale must be a float or None, got {type(sm_scale).__name__}")
    if not math.isfinite(sm_scale) or sm_scale <= 0:
        raise ValueError(f"sm_scale must be a positive finite number, got {sm_scale!r}")
    return float(sm_scale)


def check_attention_inputs(q, k, v, causal, sm_scale, key_lengths, *, dtypes=DTYPES,
                           head_dims=HEAD_DIMS) -> float:
    """Validate (B, H, S, D) q, k, v (any strides) and the options; return the scale to use."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        validate.tensor(t, name, dtypes=dtypes, ndim=4, contiguous=False)
    validate.same_dtype(q=q, k=k, v=v)
    runtime.require_bf16_tensor_cores(q.dtype, "Triton attention (tl.dot)")  # before launch: a T4 refuses bf16
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape (B, H, Sk, D): k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[:2] != k.shape[:2]:
        raise ValueError(f"q and k must agree on batch and heads (B, H): q {tuple(q.shape)}, k {tuple(k.shape)} "
                         "(grouped-query attention is not supported here: repeat k and v per head)")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"q and k must have the same head dimension D: q {tuple(q.shape)}, k {tuple(k.shape)}")
    head_dim = q.shape[3]
    if head_dim not in head_dims:
        raise ValueError(f"head dimension D = {head_dim} is not supported; expected one of {list(head_dims)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if q.shape[0] * q.shape[1] > MAX_GRID_Y:
        raise ValueError(f"B * H = {q.shape[0] * q.shape[1]} exceeds {MAX_GRID_Y}, the grid's second "
                         "dimension: split the batch")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_span(t, name)
    check_key_lengths(key_lengths, q)  # padding_keys: the one check, the Hopper rung's too
    return resolve_scale(sm_scale, head_dim)


def _blocks(config):
    return config if runtime.on_gpu() else SIM_BLOCK


def check_out(out, shape, dtype, name="out"):
    """`out` if given (checked: dtype, shape, device; any strides), else None."""
    if out is None:
        return None
    validate.tensor(out, name, dtypes=(dtype,), ndim=len(shape), contiguous=False)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(out.shape)}; expected {tuple(shape)}")
    return out


# ------------------------------------------------------------------------------ launchers
def scaled_masked_scores(q: torch.Tensor, k: torch.Tensor, causal: bool = False, sm_scale: float | None = None,
                         *, key_lengths: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Step 1: S = (q @ k^T) * sm_scale as (B, H, Sq, Sk) float32, -inf where a key is masked."""
    scale = check_attention_inputs(q, k, k, causal, sm_scale, key_lengths)
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    if out is not None:
        # the softmax after this step runs in place on S: one dense row-major block
        validate.tensor(out, "out", dtypes=(torch.float32,), ndim=4)
    s = check_out(out, (B, H, Sq, Sk), torch.float32)
    if s is None:
        s = torch.empty((B, H, Sq, Sk), dtype=torch.float32, device=q.device)
    if s.numel() == 0:
        return s
    cfg = dict(_blocks(SCORES_BLOCK))
    grid = (triton.cdiv(Sq, cfg["BLOCK_M"]) * triton.cdiv(Sk, cfg["BLOCK_N"]), B * H)
    scaled_masked_scores_kernel[grid](
        q, k, s, key_lengths if key_lengths is not None else s, H, Sq, Sk, scale,
        *q.stride(), *k.stride(), CAUSAL=causal, HAS_KEY_LENGTHS=key_lengths is not None,
        DOT_PRECISION=dot_precision(q.dtype), HEAD_DIM=D, **cfg)
    return s


def _check_probs_values(p, v, key_lengths, out):
    validate.tensor(p, "p", dtypes=(torch.float32,), ndim=4)
    validate.tensor(v, "v", dtypes=DTYPES, ndim=4, contiguous=False)
    if p.shape[:2] != v.shape[:2] or p.shape[3] != v.shape[2]:
        raise ValueError(f"p must be (B, H, Sq, Sk) for v (B, H, Sk, D): p {tuple(p.shape)}, v {tuple(v.shape)}")
    B, H, Sq, Sk = p.shape
    D = v.shape[3]
    if D not in HEAD_DIMS:
        raise ValueError(f"head dimension D = {D} is not supported; expected one of {list(HEAD_DIMS)}")
    _check_span(v, "v")
    check_key_lengths(key_lengths, p, "p")
    return check_out(out, (B, H, Sq, D), v.dtype)


def probs_times_values(p: torch.Tensor, v: torch.Tensor, *, key_lengths: torch.Tensor | None = None,
                       out: torch.Tensor | None = None) -> torch.Tensor:
    """Step 3: O = P @ V, P (B, H, Sq, Sk) float32 contiguous, V (B, H, Sk, D); O in v's dtype."""
    out = _check_probs_values(p, v, key_lengths, out)
    B, H, Sq, Sk = p.shape
    D = v.shape[3]
    if out is None:
        out = torch.empty((B, H, Sq, D), dtype=v.dtype, device=v.device)
    if out.numel() == 0:
        return out
    cfg = dict(_blocks(PV_BLOCK))
    grid = (triton.cdiv(Sq, cfg["BLOCK_M"]), B * H)
    probs_times_values_kernel[grid](
        p, v, out, key_lengths if key_lengths is not None else p, H, Sq, Sk, *v.stride(), *out.stride(),
        HAS_KEY_LENGTHS=key_lengths is not None, DOT_PRECISION=dot_precision(v.dtype), HEAD_DIM=D, **cfg)
    return out


def attention_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    sm_scale: float | None = None, *, key_lengths: torch.Tensor | None = None,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """Step 2: softmax(q k^T * scale + mask) v, unfused: the (B, H, Sq, Sk) scores live in HBM.

    Peak extra memory: `naive_scores_bytes(...)` = 4 * B * H * Sq * Sk bytes (the softmax runs in
    place, so P reuses S's buffer).
    """
    check_attention_inputs(q, k, v, causal, sm_scale, key_lengths)
    check_out(out, q.shape, q.dtype)  # before any launch
    # BEGIN EXERCISE: the three steps: the scores, the softmax in place (out=scores: P reuses S's buffer),
    #   then P @ V into out
    # HINT: The naive attention is three separate kernels with S and P materialized in memory: scores, row
    #   softmax, then P times V.
    # HINT: Call scaled_masked_scores, then the softmax with out= the scores tensor (in place saves a second
    #   S-sized buffer), then probs_times_values into out; pass key_lengths to both ends.
    scores = scaled_masked_scores(q, k, causal, sm_scale, key_lengths=key_lengths)
    probs = softmax(scores, out=scores)  # in place: one row is read whole before it is written
    return probs_times_values(probs, v, key_lengths=key_lengths, out=out)
    # END EXERCISE


def naive_scores_bytes(batch: int, heads: int, seq_q: int, seq_k: int) -> int:
    """The memory attention_naive adds beyond q, k, v and the output: one fp32 score per pair."""
    return 4 * batch * heads * seq_q * seq_k


# ------------------------------------------------------------------------------ references
def allowed_keys(seq_q: int, seq_k: int, causal: bool, key_lengths=None, *, batch: int = 1, device=None):
    """(B, 1, Sq, Sk) bool: True where query i may attend key j (top-left causal, key padding)."""
    rows = torch.arange(seq_q, device=device)[:, None]
    cols = torch.arange(seq_k, device=device)[None, :]
    keep = torch.ones(seq_q, seq_k, dtype=torch.bool, device=device)
    if causal:
        keep = cols <= rows
    keep = keep.expand(batch, 1, seq_q, seq_k)
    if key_lengths is not None:
        lengths = key_lengths.to(device).clamp(0, seq_k).view(-1, 1, 1, 1)
        keep = keep & (cols.view(1, 1, 1, -1) < lengths)
    return keep


def attention_reference(q, k, v, causal: bool = False, sm_scale: float | None = None, *,
                        key_lengths=None, return_lse: bool = False):
    """softmax(q k^T * scale + mask) v in float64 with torch ops; differentiable (for gradients).

    Masked scores are replaced by -inf (so a NaN there is dropped, as the fused kernels do), and
    a row with no visible key gives zeros (and log-sum-exp -inf), as torch's SDPA does.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    qd, kd, vd = q.double(), k.double(), v.double()
    s = (qd @ kd.transpose(-1, -2)) * scale
    keep = allowed_keys(q.shape[2], k.shape[2], causal, key_lengths, batch=q.shape[0], device=q.device)
    s = s.masked_fill(~keep, -math.inf)
    any_key = keep.any(dim=-1, keepdim=True)
    p = torch.where(any_key, torch.softmax(s, dim=-1), torch.zeros((), dtype=s.dtype, device=s.device))
    out = p @ vd
    if return_lse:
        return out, torch.logsumexp(s, dim=-1)
    return out


# ------------------------------------------------------------------------------ error model
# Unit roundoff u of each format (half the gap between 1 and the next number).
UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24, torch.float64: 2.0**-53}
SCALE_ARG_ROUNDOFF = 2.0**-24  # the scale reaches a Triton kernel as an fp32 argument
# Absolute error of a value that underflows: exp2 in fp32 flushes results below 2^-126 to 0 on
# the GPU; rounding to fp16 sends everything below 2^-25 to 0 and rounds subnormals (< 2^-14)
# to a fixed spacing of 2^-24 (so half of that, absolute, not u relative). bf16 has fp32's range.
UNDERFLOW = {torch.float16: 2.0**-25, torch.bfloat16: 2.0**-126, torch.float32: 2.0**-126, torch.float64: 2.0**-1022}


def attention_error_bounds(q, k, v, do=None, causal: bool = False, sm_scale: float | None = None, *,
                           key_lengths=None) -> dict:
    """Element-wise bounds on |kernel - exact| for "scores", "out", "lse" (and "dq", "dk", "dv").

    The error model, for inputs already in their dtype (the reference uses the same rounded
    values, so input rounding is not an error). u_in is the input format's unit roundoff, u_acc
    that of the accumulator (fp32; fp64 for fp64 inputs).
    * A score s = scale q.k accumulated over D products in u_acc: |ds| <= (D + 2) u_acc scale |q|.|k|,
      plus 2^-24 |s| from the fp32 scale argument; the stored log-sum-exp adds u_acc |lse|.
      delta_s is the largest of these over the tensor (absolute, in exponent units).
    * exp(s - lse) then has relative error <= 2 delta_s; P is rounded to the input dtype (u_in)
      before P @ V, and the sum over Sk keys adds Sk u_acc: eps_p = u_in + 2 delta_s + (Sk + D) u_acc.
      A probability too small for the format underflows to 0: an absolute error up to tiny
      (`UNDERFLOW`: 2^-25 for fp16, 2^-126 otherwise), on every visible pair (mask K).
    * out = P V: |d out| <= 2 eps_p (P |V|) + tiny (K |V|) + u_in |out| + tiny (the final
      rounding: relative for normal numbers, absolute in the subnormal range). dV = P^T dO alike.
    * dS = P (dP - D_i) with |dP| <= |dO| |V|^T and |D_i| <= |dO_i|.|O_i| (O was rounded: u_in):
      with M = P (|dO| |V|^T + |dO|.|O|), |d dS| <= eps_ds M + tiny (K (|dO| |V|^T + |dO|.|O|) + K),
      eps_ds = eps_p + 2 u_in + (D + 2) u_acc; dQ = scale dS K and dK = scale dS^T Q carry that
      through |K| and |Q| (factor 2 on the relative part).
    These are worst-case (all roundings aligned) sums, with a factor 2 of margin: a typical error
    is several times smaller, while a wrong mask, scale or rescaling is off by orders of magnitude.
    """
    dtype = q.dtype
    u_in = UNIT_ROUNDOFF[dtype]
    u_acc = UNIT_ROUNDOFF[torch.float64] if dtype == torch.float64 else UNIT_ROUNDOFF[torch.float32]
    head_dim, seq_k = q.shape[-1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale
    qd, kd, vd = (t.detach().double() for t in (q, k, v))
    keep = allowed_keys(q.shape[2], seq_k, causal, key_lengths, batch=q.shape[0], device=q.device)
    s_mag = torch.where(keep, scale * (qd.abs() @ kd.abs().transpose(-1, -2)), 0.0)
    out, lse = attention_reference(qd, kd, vd, causal, sm_scale, key_lengths=key_lengths, return_lse=True)
    s = torch.where(keep, scale * (qd @ kd.transpose(-1, -2)), 0.0)
    p = torch.where(keep, torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)[..., None]), 0.0)
    biggest = lambda t: float(t[torch.isfinite(t)].abs().max()) if torch.isfinite(t).any() else 0.0  # noqa: E731
    delta_s = ((head_dim + 2) * u_acc * biggest(s_mag) + 2 * SCALE_ARG_ROUNDOFF * biggest(s)
               + 2 * u_acc * biggest(lse))
    eps_p = u_in + 2 * delta_s + (seq_k + head_dim) * u_acc
    tiny = UNDERFLOW[dtype]
    visible = keep.to(torch.float64)
    bounds = {
        "scores": (head_dim + 2) * u_acc * s_mag + SCALE_ARG_ROUNDOFF * s.abs(),
        "out": 2 * eps_p * (p @ vd.abs()) + tiny * (visible @ vd.abs()) + u_in * out.abs() + tiny,
        "lse": torch.full_like(lse, 2 * delta_s + (seq_k + 2) * u_acc) + 2 * u_acc * lse.abs().nan_to_num(posinf=0.0),
    }
    if do is not None:
        dod = do.detach().double().abs()
        dp_mag = visible * (dod @ vd.abs().transpose(-1, -2) + (dod * out.abs()).sum(-1, keepdim=True))
        m = p * dp_mag
        m_tiny = tiny * (dp_mag + visible)
        eps_ds = eps_p + 2 * u_in + (head_dim + 2) * u_acc
        bounds["dv"] = ((2 * eps_p + u_in) * (p.transpose(-1, -2) @ dod)
                        + tiny * (visible.transpose(-1, -2) @ dod) + tiny)
        bounds["dq"] = scale * (((2 * eps_ds + u_in) * m + m_tiny) @ kd.abs()) + tiny
        bounds["dk"] = scale * (((2 * eps_ds + u_in) * m + m_tiny).transpose(-1, -2) @ qd.abs()) + tiny
    return bounds
