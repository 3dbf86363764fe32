"""FlashAttention-2 in Triton: fused attention, forward and backward, that never stores the scores.

Its benchmarks, config sweep and command line: flash_attention_bench.py (`python -m
week4_triton_dl.flash_attention_bench --sweep`). Over 500 lines: the forward and three backward
kernels of one op, their launch plans and its custom-op and autograd glue.

    O = softmax(Q K^T * scale + mask) V        Q: (B, H, Sq, D), K and V: (B, H, Sk, D)

`attention_naive.py` computes this in three kernels and keeps the B*H*Sq*Sk scores in HBM.
Here one kernel does everything for a block of BLOCK_M queries of one (batch, head): it keeps
its Q tile on-chip, streams K and V through in blocks of BLOCK_N keys and never writes a score.
The ideas, in the order the kernels use them:

* Online softmax (Milakov & Gimelshein 2018; used for attention by Rabe & Staats 2021 and by
  FlashAttention, Dao et al. 2022). For each query row keep a running max m, a running sum
  l = sum exp(s - m) and an unnormalised output acc = sum exp(s - m) v. A new block of scores
  with a larger max m' rescales both by alpha = exp(m - m'), then adds its own terms. One
  division by l at the end gives exactly softmax(s) V. Nothing of size S^2 ever exists.
* exp2 instead of exp: exp(x) = 2^(x log2 e), and the GPU's fast exponential is a base-2
  instruction (MUFU.EX2), so log2(e) is folded into the score scale once (`qk_scale`) and the
  inner loop calls `tl.exp2` with no extra multiply.
* Masking only where needed. A block of keys entirely visible to every query of the program
  (left of the causal diagonal, fully inside the sequence) needs no mask at all; the diagonal
  blocks and the ragged last block (S not a multiple of BLOCK_N) go through a second copy of
  the loop that masks. So the common block pays nothing for causality or odd lengths.
* The log-sum-exp L = m + log(l) of each row is the only statistic saved for the backward
  (B*H*Sq floats): P = exp(s - L) can be recomputed exactly from Q, K and L.
* Backward (FlashAttention-2, Dao 2023): with dP = dO V^T and D_i = rowsum(dO_i * O_i),
  dS = P * (dP - D) and dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO. A small kernel first
  computes D (`flash_attention_bwd_delta_kernel`). Then, by default ("split"), one kernel owns
  a block of keys and loops over all queries, accumulating its dK and dV on-chip, and a second
  kernel owns a block of queries and accumulates its dQ: every output is written once, no
  atomics, deterministic, at the price of recomputing P (and dP) twice: 7 block matmuls
  instead of 5. The "atomic" strategy computes dQ inside the dK/dV kernel and adds each
  partial dQ tile into an fp32 buffer with atomics (5 matmuls, but traffic to L2 and a
  result that is not bit-reproducible). The bench's `--sweep` measures both.

Cost model, per (batch, head), S = Sq = Sk, itemsize s:
* FLOPs: forward 4 S^2 D (QK^T and PV, 2 FLOPs per multiply-add), halved for causal;
  backward counted as 2.5x the forward (5 matmuls instead of 2; the recomputation of the
  split backward is not counted, as every FlashAttention paper and benchmark counts it).
* HBM traffic, forward: Q, K, V read and O written once, 4 S D s bytes, plus L (4 S bytes):
  that is all, since scores never leave the chip. K and V are re-read by every query block
  (S / BLOCK_M times), but the programs of one head run together and those re-reads are served
  from L2. Compare the naive version's 16 S^2 bytes of score traffic: at S = 4096, D = 128 bf16,
  4.2 MB versus 268 MB per head. The fused kernel does 4 S^2 D FLOPs on 4 S D s bytes: S/s
  FLOPs per byte, ~2000 at S = 4096, far above the H100's ridge point (~240 FLOPs/byte for bf16
  tensor cores against 3 TB/s): compute-bound, so the yardstick is TFLOP/s against SDPA's
  FlashAttention-2 and cuDNN backends.

Inputs are (B, H, S, D) tensors with any strides (so q.transpose(1, 2) of a (B, S, H, D)
tensor works without a copy), fp16 or bf16 (fp32 accumulation), fp32 (exact fp32 products, for
checking), or fp64 (all arithmetic in fp64, so `torch.autograd.gradcheck` can test the
backward). Head dims 16, 32, 64, 128. Causal masks are top-left aligned like torch's
`is_causal`. `key_lengths` (B,) marks keys at positions >= key_lengths[b] as padding; a query
row with no visible key (key_lengths[b] == 0, or Sk == 0) gives zeros, as torch's SDPA does.

A kernel a model calls (from "launch plans" down). GPT-2 small calls attention 12 times a step
each way, and at a short prompt the GPU work is a few us: the call's host cost matters as much
as the kernel. Measured on the H100 machine (torch 2.11), the first version cost 143 us of host
time per forward at (1, 12, 64, 64) against 28 us for F.scaled_dot_product_attention, and its
backward 530-680 us of CPU per call in the capstone's training step: the autotuner's `run`
rebuilt its key from ~40 arguments on every launch, and every grid was a lambda calling
`triton.cdiv` (a jitted helper). Now a shape's launch settings are computed once (`_plan`); the
autotuner runs on an autotune key's first call only and its choice is kept (`_TUNED`); later
calls launch the plain kernels with tuple grids, after a few comparisons (`_check_call`). Eager
calls run `FlashAttentionFunction` (or the forward alone when nothing needs a gradient); under
torch.compile, the registered op `torch.ops.course.flash_attention` (fake function + autograd
formula, the backward itself an op), so Dynamo records one node and never meets the autotuner,
whose config list it cannot trace ("ListVariable ... is already tracked for mutation").
course/ops.py says why two paths, with numbers. `attention_host_week4` times the host cost
per call (target: at most 2x SDPA's); `attention_train_week4` forward + backward through autograd
at GPT-2 small's shape against SDPA's default backend (cuDNN on the H100) and its
FlashAttention-2 backend (no torch.compile row: compiling SDPA does not change its kernel).
"""
from __future__ import annotations

import math

import torch

from course import ops, runtime  # runtime before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.launch import launch
from course.tl_dot import dot  # tl.dot, with float64 as plain FMAs (see course/tl_dot.py)

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

from week4_triton_dl.attention_naive import (  # noqa: E402
    INT32_MAX, MAX_GRID_Y, check_attention_inputs, check_out, dot_precision, resolve_scale)
from week4_triton_dl.norm_common import next_power_of_2  # noqa: E402  (plain Python, no jit)

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
HEAD_DIMS = (16, 32, 64, 128)
BWD_STRATEGIES = ("split", "atomic")
DEFAULT_BWD_STRATEGY = "split"  # deterministic; switch if the sweep shows "atomic" clearly faster
NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)
LOG2E = 1.4426950408889634  # host side: folded into the scale passed to the kernels
# Inside @triton.jit only tl.constexpr globals are visible (the interpreter would not complain).
_LOG2E = tl.constexpr(LOG2E)
_LN2 = tl.constexpr(0.6931471805599453)

# BEGIN EXERCISE: your kernels, designed by you: a forward that walks the K/V blocks of each query block
#   with the online softmax (running max m and sum l per row; rescale the accumulator by exp(m_old - m_new)
#   before adding P V) and writes out and lse; a backward that recomputes P from lse instead of storing it:
#   delta = rowsum(dO * O), then dK, dV (one program per key block) and dQ (one per query block, or
#   atomics). Masks: the causal triangle, key_lengths, the ragged tails. Helpers, autotuning and launch
#   plans are yours too (the solution's: flash_attention.py)
# Configs the interpreter runs (it cannot time configs). BLOCK_M != BLOCK_N on purpose, so
# the causal bounds are exercised with both orders of tile sizes across the tests.
SIM_FWD = {"BLOCK_M": 32, "BLOCK_N": 16}
SIM_BWD_KV = {"BLOCK_M": 16, "BLOCK_N": 32}
SIM_BWD_Q = {"BLOCK_M": 32, "BLOCK_N": 16}
SIM_DELTA_BLOCK = 16
DELTA_BLOCK = 64


# =============================================================================== forward
@triton.jit
def _visible_key_count(key_len_ptr, b, seq_k, HAS_KEY_LENGTHS: tl.constexpr):
    """Keys 0 .. n_keys-1 exist for batch b: all of them, or key_lengths[b] clamped to [0, Sk]."""
    n_keys = seq_k
    if HAS_KEY_LENGTHS:
        n_keys = tl.minimum(tl.maximum(tl.load(key_len_ptr + b).to(tl.int32), 0), seq_k)
    return n_keys


@triton.jit
def _query_block_key_range(m_start, n_keys, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
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


@triton.jit
def _fwd_key_blocks(acc, m_i, l_i, q, k_base, v_base, offs_m, start, stop, n_keys, qk_scale,
                    stride_ks, stride_kd, stride_vs, stride_vd,
                    MASKED: tl.constexpr, CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
                    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    """Online-softmax update of (acc, m_i, l_i) with the key blocks [start, stop).

    Scores are kept in base 2: s2 = q.k * scale * log2(e), so p = exp2(s2 - m).
    """
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    k_ptrs = k_base + (start + offs_n)[:, None] * stride_ks + offs_d[None, :] * stride_kd
    v_ptrs = v_base + (start + offs_n)[:, None] * stride_vs + offs_d[None, :] * stride_vd
    for start_n in range(start, stop, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        if MASKED:
            # Padding keys are loaded as 0 (they may hold anything, even NaN) and masked below.
            k = tl.load(k_ptrs, mask=cols[:, None] < n_keys, other=0.0)
        else:
            k = tl.load(k_ptrs)
        qk = dot(q, tl.trans(k), None, DOT_PRECISION)
        if MASKED:
            keep = cols[None, :] < n_keys
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            s = tl.where(keep, qk * qk_scale, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # A row that has seen no visible key yet has m = -inf; -inf - -inf would be NaN, so
            # shift by 0 there: its p and its rescale factor are then exp2(-inf) = 0, as they must.
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)
            p = tl.exp2(s - shift[:, None])
            alpha = tl.exp2(m_i - shift)
        else:
            # Unmasked: take the max of the raw products and scale it once (scale > 0), so the
            # exponent below is one fused multiply-add per score.
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.exp2(qk * qk_scale - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if MASKED:
            v = tl.load(v_ptrs, mask=cols[:, None] < n_keys, other=0.0)
        else:
            v = tl.load(v_ptrs)
        # P is rounded to the input dtype for the tensor cores; the sum is accumulated in fp32.
        acc = dot(p.to(v.dtype), v, acc, DOT_PRECISION)
        m_i = m_new
        k_ptrs += BLOCK_N * stride_ks
        v_ptrs += BLOCK_N * stride_vs
    return acc, m_i, l_i


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
    # seq_bucket (next power of two of the longer sequence) is not used here: it is the
    # autotuner's key, so one tuning serves every length in the bucket.
    pid_m = tl.program_id(0)
    if CAUSAL:
        # Causal query blocks near the end do the most work; starting them first leaves the
        # short ones to fill the last wave (better balance across the SMs).
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = k_ptr + b.to(tl.int64) * stride_kb + h.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
    o_base = o_ptr + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    n_keys = _visible_key_count(key_len_ptr, b, seq_k, HAS_KEY_LENGTHS)

    m_start = pid_m * BLOCK_M
    offs_m = m_start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seq_q
    # The Q tile is loaded once and stays on-chip for the whole sweep over the keys.
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd,
                mask=row_ok[:, None], other=0.0)
    # Statistics and accumulator in fp32 (fp64 for fp64 inputs): the type of the lse buffer.
    acc_ty = lse_ptr.dtype.element_ty
    m_i = tl.full([BLOCK_M], -float("inf"), acc_ty)
    l_i = tl.zeros([BLOCK_M], acc_ty)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], acc_ty)

    full_hi, hi = _query_block_key_range(m_start, n_keys, CAUSAL, BLOCK_M, BLOCK_N)
    acc, m_i, l_i = _fwd_key_blocks(acc, m_i, l_i, q, k_base, v_base, offs_m, 0, full_hi, n_keys, qk_scale,
                                    stride_ks, stride_kd, stride_vs, stride_vd,
                                    False, CAUSAL, DOT_PRECISION, HEAD_DIM, BLOCK_N)
    acc, m_i, l_i = _fwd_key_blocks(acc, m_i, l_i, q, k_base, v_base, offs_m, full_hi, hi, n_keys, qk_scale,
                                    stride_ks, stride_kd, stride_vs, stride_vd,
                                    True, CAUSAL, DOT_PRECISION, HEAD_DIM, BLOCK_N)

    # l = 0 only for a row that saw no visible key at all: define its output as 0 (torch's
    # SDPA does the same) and its log-sum-exp as -inf (the log of an empty sum).
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc * (1.0 / l_safe)[:, None]
    lse = tl.where(empty, -float("inf"), (m_i + tl.log2(l_safe)) * _LN2)  # natural log, like torch
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
    tl.store(lse_ptr + bh.to(tl.int64) * seq_q + offs_m, lse, mask=row_ok)


# =============================================================================== backward
@triton.jit
def flash_attention_bwd_delta_kernel(o_ptr, do_ptr, delta_ptr, n_heads, seq_q,
                                     stride_ob, stride_oh, stride_os, stride_od,
                                     stride_dob, stride_doh, stride_dos, stride_dod,
                                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """D_i = sum_d dO_id * O_id: the row term of dS = P * (dP - D), computed once per row."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seq_q
    acc_ty = delta_ptr.dtype.element_ty
    o = tl.load(o_ptr + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
                + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od, mask=row_ok[:, None], other=0.0)
    do = tl.load(do_ptr + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
                 + offs_m[:, None] * stride_dos + offs_d[None, :] * stride_dod, mask=row_ok[:, None], other=0.0)
    delta = tl.sum(o.to(acc_ty) * do.to(acc_ty), 1)
    tl.store(delta_ptr + bh.to(tl.int64) * seq_q + offs_m, delta, mask=row_ok)


@triton.jit
def _bwd_query_blocks_for_keys(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, offs_n,
                               start, stop, n_keys, seq_q, sm_scale, qk_scale,
                               stride_qs, stride_qd, stride_dos, stride_dod, stride_dqs,
                               MASKED: tl.constexpr, CAUSAL: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                               DOT_PRECISION: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """Accumulate dK, dV of one key block over the query blocks [start, stop).

    Works with transposed tiles (keys along rows): s^T = K Q^T, so every product below is a
    plain tl.dot of on-chip tiles and dK, dV come out in their own row order.
    """
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = q_base + (start + offs_m0)[:, None] * stride_qs + offs_d[None, :] * stride_qd
    do_ptrs = do_base + (start + offs_m0)[:, None] * stride_dos + offs_d[None, :] * stride_dod
    for start_m in range(start, stop, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        rows = start_m + offs_m0
        if MASKED:
            row_ok = rows < seq_q
            q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
            do = tl.load(do_ptrs, mask=row_ok[:, None], other=0.0)
            # +inf for rows past the end: p = exp2(s - inf) = 0, so they add nothing.
            lse2 = tl.load(lse_base + rows, mask=row_ok, other=float("inf")) * _LOG2E
            delta = tl.load(delta_base + rows, mask=row_ok, other=0.0)
        else:
            q = tl.load(q_ptrs)
            do = tl.load(do_ptrs)
            lse2 = tl.load(lse_base + rows) * _LOG2E
            delta = tl.load(delta_base + rows)
        s_t = dot(k, tl.trans(q), None, DOT_PRECISION)
        # Recompute P from the saved log-sum-exp: exact softmax probabilities, no S^2 storage.
        p_t = tl.exp2(s_t * qk_scale - lse2[None, :])
        if MASKED:
            keep = (rows[None, :] < seq_q) & (offs_n[:, None] < n_keys)
            if CAUSAL:
                keep = keep & (offs_n[:, None] <= rows[None, :])
            p_t = tl.where(keep, p_t, 0.0)
        dv = dot(p_t.to(do.dtype), do, dv, DOT_PRECISION)
        dp_t = dot(v, tl.trans(do), None, DOT_PRECISION)
        ds_t = p_t * (dp_t - delta[None, :])
        dk = dot(ds_t.to(q.dtype), q, dk, DOT_PRECISION)
        if ATOMIC_DQ:
            # This key block's share of dQ for these rows, added into the fp32 buffer. Every key
            # block adds to the same rows: atomics make the sum order, so the last bits, vary.
            dq_part = dot(tl.trans(ds_t.to(k.dtype)), k, None, DOT_PRECISION) * sm_scale
            dq_ptrs = dq_base + rows[:, None] * stride_dqs + offs_d[None, :]
            if MASKED:
                tl.atomic_add(dq_ptrs, dq_part, mask=rows[:, None] < seq_q)
            else:
                tl.atomic_add(dq_ptrs, dq_part)
        q_ptrs += BLOCK_M * stride_qs
        do_ptrs += BLOCK_M * stride_dos
    return dk, dv


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
    """One program per block of BLOCK_N keys of one (batch, head): its dK and dV (and, with
    ATOMIC_DQ, its contributions to dQ)."""
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    n_keys = _visible_key_count(key_len_ptr, b, seq_k, HAS_KEY_LENGTHS)
    n_start = pid_n * BLOCK_N
    offs_n = n_start + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    key_ok = offs_n < n_keys
    k = tl.load(k_ptr + b.to(tl.int64) * stride_kb + h.to(tl.int64) * stride_kh
                + offs_n[:, None] * stride_ks + offs_d[None, :] * stride_kd, mask=key_ok[:, None], other=0.0)
    v = tl.load(v_ptr + b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
                + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd, mask=key_ok[:, None], other=0.0)
    q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    do_base = do_ptr + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
    lse_base = lse_ptr + bh.to(tl.int64) * seq_q
    delta_base = delta_ptr + bh.to(tl.int64) * seq_q
    dq_base = dq_acc_ptr + bh.to(tl.int64) * seq_q * HEAD_DIM  # contiguous fp32 buffer (atomic only)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], lse_ptr.dtype.element_ty)  # fp32 (fp64 for fp64 inputs)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], lse_ptr.dtype.element_ty)

    # Query blocks to visit: [q_lo, q_end). Unmasked: [u_lo, u_hi), blocks entirely below the
    # causal diagonal and inside the sequence. Masked: [q_lo, u_lo) (the diagonal) and
    # [u_hi, q_end) (the ragged last block).
    q_end = tl.where(n_start < n_keys, seq_q, 0)  # a block of padding keys has no gradient
    q_ceil = tl.cdiv(seq_q, BLOCK_M) * BLOCK_M
    if CAUSAL:
        q_lo = n_start // BLOCK_M * BLOCK_M
        u_lo = tl.cdiv(n_start + BLOCK_N - 1, BLOCK_M) * BLOCK_M
    else:
        q_lo = 0
        u_lo = 0
    if ATOMIC_DQ:
        # dQ sums over keys, so padding keys must be masked in every step of a partial block.
        u_lo = tl.where(n_start + BLOCK_N > n_keys, q_ceil, u_lo)
    u_hi = tl.maximum(seq_q // BLOCK_M * BLOCK_M, u_lo)
    dk, dv = _bwd_query_blocks_for_keys(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, offs_n,
                                        q_lo, tl.minimum(u_lo, q_end), n_keys, seq_q, sm_scale, qk_scale,
                                        stride_qs, stride_qd, stride_dos, stride_dod, HEAD_DIM,
                                        True, CAUSAL, ATOMIC_DQ, DOT_PRECISION, HEAD_DIM, BLOCK_M)
    dk, dv = _bwd_query_blocks_for_keys(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, offs_n,
                                        u_lo, tl.minimum(u_hi, q_end), n_keys, seq_q, sm_scale, qk_scale,
                                        stride_qs, stride_qd, stride_dos, stride_dod, HEAD_DIM,
                                        False, CAUSAL, ATOMIC_DQ, DOT_PRECISION, HEAD_DIM, BLOCK_M)
    dk, dv = _bwd_query_blocks_for_keys(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, offs_n,
                                        u_hi, q_end, n_keys, seq_q, sm_scale, qk_scale,
                                        stride_qs, stride_qd, stride_dos, stride_dod, HEAD_DIM,
                                        True, CAUSAL, ATOMIC_DQ, DOT_PRECISION, HEAD_DIM, BLOCK_M)
    # Padding keys (past key_lengths[b]) get exactly zero gradient.
    dk = tl.where(key_ok[:, None], dk * sm_scale, 0.0)
    dv = tl.where(key_ok[:, None], dv, 0.0)
    store_ok = offs_n[:, None] < seq_k
    tl.store(dk_ptr + b.to(tl.int64) * stride_dkb + h.to(tl.int64) * stride_dkh
             + offs_n[:, None] * stride_dks + offs_d[None, :] * stride_dkd, dk.to(dk_ptr.dtype.element_ty),
             mask=store_ok)
    tl.store(dv_ptr + b.to(tl.int64) * stride_dvb + h.to(tl.int64) * stride_dvh
             + offs_n[:, None] * stride_dvs + offs_d[None, :] * stride_dvd, dv.to(dv_ptr.dtype.element_ty),
             mask=store_ok)


@triton.jit
def _bwd_key_blocks_for_queries(dq, q, do, lse2, delta, k_base, v_base, offs_m, start, stop, n_keys, qk_scale,
                                stride_ks, stride_kd, stride_vs, stride_vd,
                                MASKED: tl.constexpr, CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
                                HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    """Accumulate dQ of one query block over the key blocks [start, stop)."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    k_ptrs = k_base + (start + offs_n)[:, None] * stride_ks + offs_d[None, :] * stride_kd
    v_ptrs = v_base + (start + offs_n)[:, None] * stride_vs + offs_d[None, :] * stride_vd
    for start_n in range(start, stop, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        if MASKED:
            k = tl.load(k_ptrs, mask=cols[:, None] < n_keys, other=0.0)
            v = tl.load(v_ptrs, mask=cols[:, None] < n_keys, other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        s = dot(q, tl.trans(k), None, DOT_PRECISION)
        p = tl.exp2(s * qk_scale - lse2[:, None])
        if MASKED:
            keep = cols[None, :] < n_keys
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            p = tl.where(keep, p, 0.0)
        dp = dot(do, tl.trans(v), None, DOT_PRECISION)
        ds = p * (dp - delta[:, None])
        dq = dot(ds.to(k.dtype), k, dq, DOT_PRECISION)
        k_ptrs += BLOCK_N * stride_ks
        v_ptrs += BLOCK_N * stride_vs
    return dq


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
    """One program per block of BLOCK_M queries: its dQ, sweeping the keys like the forward."""
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    n_keys = _visible_key_count(key_len_ptr, b, seq_k, HAS_KEY_LENGTHS)
    m_start = pid_m * BLOCK_M
    offs_m = m_start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seq_q
    q = tl.load(q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
                + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd, mask=row_ok[:, None], other=0.0)
    do = tl.load(do_ptr + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
                 + offs_m[:, None] * stride_dos + offs_d[None, :] * stride_dod, mask=row_ok[:, None], other=0.0)
    lse2 = tl.load(lse_ptr + bh.to(tl.int64) * seq_q + offs_m, mask=row_ok, other=float("inf")) * _LOG2E
    delta = tl.load(delta_ptr + bh.to(tl.int64) * seq_q + offs_m, mask=row_ok, other=0.0)
    k_base = k_ptr + b.to(tl.int64) * stride_kb + h.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
    dq = tl.zeros([BLOCK_M, HEAD_DIM], lse_ptr.dtype.element_ty)
    full_hi, hi = _query_block_key_range(m_start, n_keys, CAUSAL, BLOCK_M, BLOCK_N)
    dq = _bwd_key_blocks_for_queries(dq, q, do, lse2, delta, k_base, v_base, offs_m, 0, full_hi, n_keys, qk_scale,
                                     stride_ks, stride_kd, stride_vs, stride_vd,
                                     False, CAUSAL, DOT_PRECISION, HEAD_DIM, BLOCK_N)
    dq = _bwd_key_blocks_for_queries(dq, q, do, lse2, delta, k_base, v_base, offs_m, full_hi, hi, n_keys, qk_scale,
                                     stride_ks, stride_kd, stride_vs, stride_vd,
                                     True, CAUSAL, DOT_PRECISION, HEAD_DIM, BLOCK_N)
    tl.store(dq_ptr + b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh
             + offs_m[:, None] * stride_dqs + offs_d[None, :] * stride_dqd,
             (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=row_ok[:, None])


# =============================================================================== autotuning
def _config(block_m, block_n, warps, stages, max_head_dim=128):
    config = triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages)
    config.max_head_dim = max_head_dim  # larger D would spill: the accumulators outgrow the registers
    return config


# The space the sweep measures and the autotuner picks from (16-bit inputs). BLOCK_M = 128
# gives each program 128 rows of Q against which every K/V block is reused (the arithmetic
# intensity of the inner loop); 8 warps split a 128-row tile into 16-row wgmma slices.
# num_stages is how many K/V blocks the compiler prefetches ahead (cp.async pipelining).
# The max_head_dim=64 entries were seen to spill registers at D = 128 when compiled for sm_90
# (Triton 3.9, ptxas): a 128 x 128 fp32 accumulator is 128 registers per thread at 4 warps.
# The first entries of each list are the ones `--sweep --quick` measures.
FWD_CONFIGS = [
    _config(128, 64, 8, 3), _config(128, 128, 8, 2), _config(64, 64, 4, 3), _config(128, 64, 8, 4),
    _config(128, 128, 8, 3), _config(64, 64, 4, 4), _config(64, 128, 4, 3), _config(128, 32, 8, 4),
    _config(128, 64, 4, 3, max_head_dim=64), _config(128, 32, 4, 4, max_head_dim=64),
]
# dK/dV kernel: BLOCK_N keys per program (their dK, dV accumulators live in registers: 2 x
# BLOCK_N x D fp32, so D = 128 with 128 keys wants 8 warps), BLOCK_M query rows per step.
BWD_KV_CONFIGS = [
    _config(32, 128, 8, 3), _config(64, 128, 8, 2), _config(32, 64, 4, 3), _config(64, 128, 8, 3),
    _config(32, 64, 4, 2), _config(64, 64, 8, 3), _config(32, 128, 8, 2),
    _config(32, 128, 4, 3, max_head_dim=64), _config(64, 64, 4, 3, max_head_dim=64),
    _config(16, 128, 4, 4, max_head_dim=64),
    # Seen fastest at D = 64, S = 2048, not causal (sweep of 2026-11-27: 4 stages of 64-row
    # query blocks keep the tensor cores fed where the unmasked loop is long).
    _config(64, 64, 4, 4, max_head_dim=64),
]
# dQ kernel: BLOCK_M queries per program, BLOCK_N keys per step.
BWD_Q_CONFIGS = [
    _config(128, 64, 8, 3), _config(128, 32, 8, 3), _config(64, 64, 4, 3), _config(128, 64, 8, 2),
    _config(64, 32, 4, 4), _config(64, 32, 4, 2), _config(128, 32, 4, 3, max_head_dim=64),
]
# For short sequences (16-bit inputs): one small tile. fp32 and fp64 take their own below.
SMALL_FWD, SMALL_BWD_KV, SMALL_BWD_Q = _config(64, 64, 4, 2), _config(32, 64, 4, 2), _config(64, 32, 4, 2)
WIDE_DTYPE_CONFIG = _config(32, 32, 4, 2)
# fp64 multiplies by broadcast FMAs (course/tl_dot.py): a (16, D, 16) tile of products in registers.
FP64_CONFIG = _config(16, 16, 4, 1)
SHORT_SEQUENCE = 512  # below this (bucket), tuning costs more than it can win


def configs_for(configs, head_dim):
    return [c for c in configs if head_dim <= c.max_head_dim]


def _fixed_config(small, dtype, seq_bucket):
    """The one config that fp64, fp32 and short sequences always get (nothing to tune), else None."""
    if dtype == torch.float64:
        return FP64_CONFIG
    if dtype == torch.float32:
        return WIDE_DTYPE_CONFIG
    return small if seq_bucket <= SHORT_SEQUENCE else None


def _pruner(small):
    def prune(configs, named_args, **kwargs):
        fixed = _fixed_config(small, named_args["q_ptr"].dtype, named_args["seq_bucket"])
        if fixed is not None:
            return [fixed]
        head_dim = kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM"))
        return configs_for(configs, head_dim) if head_dim is not None else configs
    return prune


_AUTOTUNE_KEY = ["seq_bucket", "HEAD_DIM", "CAUSAL", "HAS_KEY_LENGTHS"]
flash_attention_fwd_autotuned = triton.autotune(
    configs=FWD_CONFIGS, key=_AUTOTUNE_KEY,
    prune_configs_by={"early_config_prune": _pruner(SMALL_FWD)})(flash_attention_fwd_kernel)
flash_attention_bwd_dkdv_autotuned = triton.autotune(
    configs=BWD_KV_CONFIGS, key=_AUTOTUNE_KEY + ["ATOMIC_DQ"], reset_to_zero=["dq_acc_ptr"],
    prune_configs_by={"early_config_prune": _pruner(SMALL_BWD_KV)})(flash_attention_bwd_dkdv_kernel)
flash_attention_bwd_dq_autotuned = triton.autotune(
    configs=BWD_Q_CONFIGS, key=_AUTOTUNE_KEY,
    prune_configs_by={"early_config_prune": _pruner(SMALL_BWD_Q)})(flash_attention_bwd_dq_kernel)


# =============================================================================== launch plans
# The autotuner's `run` rebuilds its key from ~40 arguments and looks it up on EVERY launch, and
# its grid is a lambda calling `triton.cdiv` (a jitted helper, ~2 us from Python): with three
# launches per training step that was most of the 143 us a forward cost on the H100's host.
# So each shape gets a plan once: the kernel, its grid, its constexprs. The autotuner runs
# only on the first call of an autotune key (seq_bucket, HEAD_DIM, CAUSAL, HAS_KEY_LENGTHS,
# dtype); its choice goes into _TUNED and every later call launches the plain kernel with it.
# fp32, fp64 and short sequences have one fixed config and never meet the autotuner.
_KERNELS = {  # which: (plain kernel, autotuned, simulator config, short-sequence config, grid axis)
    "fwd": (flash_attention_fwd_kernel, flash_attention_fwd_autotuned, SIM_FWD, SMALL_FWD, "BLOCK_M"),
    "kv": (flash_attention_bwd_dkdv_kernel, flash_attention_bwd_dkdv_autotuned, SIM_BWD_KV, SMALL_BWD_KV, "BLOCK_N"),
    "q": (flash_attention_bwd_dq_kernel, flash_attention_bwd_dq_autotuned, SIM_BWD_Q, SMALL_BWD_Q, "BLOCK_M"),
}
_TUNED: dict = {}  # (which, seq_bucket, D, causal, has_key_lengths, dtype, atomic) -> launch kwargs
_PLANS: dict = {}  # (which, Sq, Sk, D, causal, has_key_lengths, dtype, atomic) -> plan
_DELTA_BLOCK = runtime.pick(gpu=DELTA_BLOCK, sim=SIM_DELTA_BLOCK)


def _plan(which, Sq, Sk, D, causal, has_kl, dtype, atomic=False, config=None):
    """(kernel, programs along grid axis 0, seq_bucket, launch kwargs, tune key) of kernel `which`.

    `programs` is None when the autotuner has yet to choose (the plan is then not kept). An
    explicit `config` (the sweep, the launchers' config=) gives a plan that is not kept either.
    """
    key = (which, Sq, Sk, D, causal, has_kl, dtype, atomic)
    plan = _PLANS.get(key) if config is None else None
    if plan is not None:
        return plan
    plain, autotuned, sim, small, axis = _KERNELS[which]
    bucket = next_power_of_2(max(Sq, Sk, 1))
    meta = dict(CAUSAL=causal, HAS_KEY_LENGTHS=has_kl, DOT_PRECISION=dot_precision(dtype), HEAD_DIM=D)
    if which == "kv":
        meta["ATOMIC_DQ"] = atomic
    tune_key = (which, bucket, D, causal, has_kl, dtype, atomic)
    if config is not None:
        chosen = config_kwargs(config)
    elif not runtime.on_gpu():
        chosen = dict(sim)  # the interpreter cannot time configs
    else:
        chosen = _TUNED.get(tune_key)
        if chosen is None:
            fixed = _fixed_config(small, dtype, bucket)
            if fixed is None:
                return autotuned, None, bucket, meta, tune_key
            chosen = fixed.all_kwargs()
    plan = (plain, -(-(Sq if axis == "BLOCK_M" else Sk) // chosen[axis]), bucket, {**meta, **chosen}, tune_key)
    if config is None:
        if len(_PLANS) > 4096:  # many distinct lengths (decoding with a growing cache): start over
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def _launch(plan, length, bh, args, key=None):
    """Launch a plan's kernel; on an autotune key's first call the autotuner's choice is kept.

    With a `key` (the plan's shape key plus every int argument that can vary: the strides),
    the launch goes through course.launch, which calls the compiled kernel directly after the
    first time (~14 us of host time instead of ~25 us for these 27-argument kernels, H100).
    """
    kernel, programs, _, meta, tune_key = plan
    if programs is not None:
        if key is None:
            kernel[(programs, bh)](*args, **meta)
        else:
            options = {name: meta[name] for name in _OPTIONS if name in meta}
            launch(kernel, (programs, bh), (key, tuple(meta.items())), args,
                   {k: v for k, v in meta.items() if k not in options}, **options)
        return
    axis = _KERNELS[tune_key[0]][4]
    kernel[lambda m: (-(-length // m[axis]), bh)](*args, **meta)
    _TUNED[tune_key] = kernel.best_config.all_kwargs()


def backward_delta(out, do, lse_dtype):
    """D = rowsum(dO * O) per query row (B, H, Sq) in lse_dtype: the backward's first kernel."""
    B, H, Sq, D = out.shape
    delta = torch.empty((B, H, Sq), dtype=lse_dtype, device=out.device)
    strides = (*out.stride(), *do.stride())
    launch(flash_attention_bwd_delta_kernel, (-(-Sq // _DELTA_BLOCK), B * H), (out.dtype, do.dtype, B, H, Sq, D, strides),
           (out, do, delta, H, Sq, *strides), dict(HEAD_DIM=D, BLOCK_M=_DELTA_BLOCK), num_warps=4)
    return delta
# END EXERCISE


# =============================================================================== the hot path
# No checks here: the public entry and the launchers below check once, then call these.
def _stats_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


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


def _forward(q, k, v, causal, scale, key_lengths, config=None, out=None):
    """(out, lse) of checked inputs: out (B, H, Sq, D) in q's dtype (written into `out` when given),
    lse (B, H, Sq) in _stats_dtype: each row's natural log-sum-exp of its scaled, masked scores.

    `scale` is sm_scale (a float); `key_lengths` (B,) int32/int64 or None: keys j >= key_lengths[b]
    are masked; `causal`: key j is masked for query i when j > i; `config` (a dict or triton.Config,
    checked by config_kwargs) fixes BLOCK_M and BLOCK_N instead of autotuning.
    """
    # BEGIN EXERCISE: allocate out (unless given) and lse; nothing to launch for empty inputs; launch your
    #   forward kernel(s) over (query blocks, B * H), with config's BLOCK_M and BLOCK_N when it is given
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    if out is None:
        out = torch.empty((B, H, Sq, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, Sq), dtype=_stats_dtype(q.dtype), device=q.device)
    if B * H * Sq == 0 or D == 0:
        return out, lse
    has_kl = key_lengths is not None
    plan = _plan("fwd", Sq, Sk, D, causal, has_kl, q.dtype, False, config)
    strides = (*q.stride(), *k.stride(), *v.stride(), *out.stride())
    _launch(plan, Sq, B * H, (q, k, v, out, lse, key_lengths if has_kl else lse, H, Sq, Sk, scale * LOG2E, plan[2],
                              *strides), None if config is not None else ("fwd", q.dtype, key_lengths.dtype if has_kl else None, B, H, Sq, Sk, strides))
    return out, lse
    # END EXERCISE


def _backward(do, q, k, v, out, lse, causal, scale, key_lengths, strategy, kv_config=None, q_config=None,
              grads=None):
    """(dq, dk, dv) of checked inputs, for dO of any strides (no copy: the kernels take strides).

    `out` and `lse` are the forward's; `strategy` is "split" or "atomic"; `kv_config` / `q_config`
    (dicts or triton.Configs) fix the block sizes of the dK/dV and the dQ pass; `grads` = (dq, dk,
    dv) to write into, or None.
    """
    # BEGIN EXERCISE: allocate dq, dk, dv (unless given in grads); empty inputs: nothing to launch (no query
    #   or no key: every gradient is an empty sum, zeros); launch your backward kernels (strategy 'split':
    #   separate dK/dV and dQ passes; 'atomic': dQ accumulated with atomics), with kv_config / q_config when
    #   given
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    if grads is None:
        grads = (torch.empty((B, H, Sq, D), dtype=q.dtype, device=q.device),
                 torch.empty((B, H, Sk, D), dtype=k.dtype, device=k.device),
                 torch.empty((B, H, Sk, D), dtype=v.dtype, device=v.device))
    dq, dk, dv = grads
    if B * H == 0 or D == 0:
        return dq, dk, dv
    if Sq == 0 or Sk == 0:  # no pair of query and key: every gradient is an empty sum
        return dq.zero_(), dk.zero_(), dv.zero_()
    delta = backward_delta(out, do, lse.dtype)
    has_kl = key_lengths is not None
    lengths = key_lengths if has_kl else lse
    atomic = strategy == "atomic"
    kv = _plan("kv", Sq, Sk, D, causal, has_kl, q.dtype, atomic, kv_config)
    # dq_acc is read and written only with ATOMIC_DQ. The autotuner zeroes it before every trial
    # (reset_to_zero), so then it must be a throwaway buffer, never a tensor that holds data.
    if atomic:
        dq_acc = torch.zeros((B, H, Sq, D), dtype=lse.dtype, device=q.device)
    else:
        dq_acc = lse if kv[1] is not None else torch.empty(1, dtype=lse.dtype, device=q.device)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    tuned = kv_config is None and q_config is None
    kv_strides = (*strides, *dk.stride(), *dv.stride())
    _launch(kv, Sk, B * H, (q, k, v, do, lse, delta, dk, dv, dq_acc, lengths, H, Sq, Sk, scale, scale * LOG2E,
                            kv[2], *kv_strides), ("kv", q.dtype, lengths.dtype, B, H, Sq, Sk, kv_strides) if tuned else None)
    if atomic:
        dq.copy_(dq_acc)
        return dq, dk, dv
    qp = _plan("q", Sq, Sk, D, causal, has_kl, q.dtype, False, q_config)
    q_strides = (*strides, *dq.stride())
    _launch(qp, Sq, B * H, (q, k, v, do, lse, delta, dq, lengths, H, Sq, Sk, scale, scale * LOG2E, qp[2],
                            *q_strides), ("q", q.dtype, lengths.dtype, B, H, Sq, Sk, q_strides) if tuned else None)
    return dq, dk, dv
    # END EXERCISE


# =============================================================================== launchers
def _check(q, k, v, causal, sm_scale, key_lengths):
    return check_attention_inputs(q, k, v, causal, sm_scale, key_lengths, dtypes=DTYPES, head_dims=HEAD_DIMS)


def _check_strategy(strategy):
    if strategy not in BWD_STRATEGIES:
        raise ValueError(f"strategy must be one of {list(BWD_STRATEGIES)}, got {strategy!r}")


def flash_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                            sm_scale: float | None = None, *, key_lengths: torch.Tensor | None = None,
                            config=None, out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused forward: (out, lse), lse = log-sum-exp of each row's scaled scores (B, H, Sq).

    `config` (a dict with BLOCK_M, BLOCK_N, num_warps, num_stages, or a triton.Config) skips the
    autotuner: for experiments and the sweep. No autograd: use `flash_attention` for that.
    """
    scale = _check(q, k, v, causal, sm_scale, key_lengths)
    out = check_out(out, q.shape, q.dtype)
    if config is not None:
        config_kwargs(config)
    return _forward(q, k, v, causal, scale, key_lengths, config, out)


def flash_attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             out: torch.Tensor, lse: torch.Tensor, causal: bool = False,
                             sm_scale: float | None = None, *, key_lengths: torch.Tensor | None = None,
                             strategy: str = DEFAULT_BWD_STRATEGY, kv_config=None, q_config=None,
                             grads: tuple | None = None):
    """(dq, dk, dv) from the forward's out and lse: P is recomputed, never loaded.

    `grads=(dq, dk, dv)` writes into given tensors; `kv_config`/`q_config` fix the block sizes
    of the dK/dV kernel and the dQ kernel (dicts or triton.Configs) instead of autotuning.
    """
    scale = _check(q, k, v, causal, sm_scale, key_lengths)
    _check_strategy(strategy)
    validate.tensor(do, "do", dtypes=(q.dtype,), ndim=4, contiguous=False)
    validate.tensor(out, "out", dtypes=(q.dtype,), ndim=4, contiguous=False)
    validate.tensor(lse, "lse", dtypes=(_stats_dtype(q.dtype),), ndim=3)
    for name, t in (("do", do), ("out", out)):
        if t.shape != q.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected q's shape {tuple(q.shape)}")
    if lse.shape != q.shape[:3]:
        raise ValueError(f"lse has shape {tuple(lse.shape)}; expected (B, H, Sq) = {tuple(q.shape[:3])}")
    for config in (kv_config, q_config):
        if config is not None:
            config_kwargs(config)
    if grads is not None:
        if not isinstance(grads, (tuple, list)) or len(grads) != 3:
            raise TypeError("grads must be a tuple (dq, dk, dv) of tensors")
        grads = tuple(check_out(g, like.shape, like.dtype, name)
                      for g, like, name in zip(grads, (q, k, v), ("dq", "dk", "dv")))
    return _backward(do, q, k, v, out, lse, causal, scale, key_lengths, strategy, kv_config, q_config, grads)


# ====================================================================== the op torch.compile sees
# Dynamo records one node per call and never looks inside (so never meets the autotuner, whose
# config list it cannot trace); the fake functions give it the shapes, strides and dtypes.
@torch.library.custom_op(f"{NAMESPACE}::flash_attention", mutates_args=())
def flash_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                       key_lengths: torch.Tensor | None,
                       strategy: str = DEFAULT_BWD_STRATEGY) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of checked q, k, v (any strides); `strategy` is the backward's (see flash_attention)."""
    return _forward(q, k, v, causal, scale, key_lengths)


@flash_attention_op.register_fake
def _flash_attention_fake(q, k, v, causal, scale, key_lengths, strategy=DEFAULT_BWD_STRATEGY):
    B, H, Sq, D = q.shape  # out is a fresh contiguous tensor, whatever the strides of q
    return q.new_empty((B, H, Sq, D)), q.new_empty((B, H, Sq), dtype=_stats_dtype(q.dtype))


@torch.library.custom_op(f"{NAMESPACE}::flash_attention_backward", mutates_args=())
def flash_attention_backward_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                out: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float,
                                key_lengths: torch.Tensor | None,
                                strategy: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv), fresh contiguous tensors; dO may have any strides (it is not copied)."""
    return _backward(do, q, k, v, out, lse, causal, scale, key_lengths, strategy)


@flash_attention_backward_op.register_fake
def _flash_attention_backward_fake(do, q, k, v, out, lse, causal, scale, key_lengths, strategy):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, key_lengths, strategy = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1], key_lengths)
    ctx.causal, ctx.scale, ctx.strategy = causal, scale, strategy
    ctx.mark_non_differentiable(output[1])  # lse: a statistic for the backward, not a result


def _backward_formula(ctx, do, _dlse):
    q, k, v, out, lse, key_lengths = ctx.saved_tensors
    dq, dk, dv = flash_attention_backward_op(do, q, k, v, out, lse, ctx.causal, ctx.scale, key_lengths, ctx.strategy)
    return dq, dk, dv, None, None, None, None


flash_attention_op.register_autograd(_backward_formula, setup_context=_setup_context)


# ========================================================================= the op eager mode calls
class FlashAttentionFunction(torch.autograd.Function):
    """Autograd glue: the forward saves q, k, v, out and the log-sum-exp (not P)."""

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


def _on_device(t) -> bool:  # t.is_cuda costs ~0.15 us, t.device.type ~1.3 us
    return t.is_cuda if runtime.ON_GPU else t.is_cpu


def _span(t, shape) -> bool: # one head indexed in int32 (attention_naive._check_span)
    stride = t.stride()
    return (shape[2] - 1) * stride[2] + (shape[3] - 1) * stride[3] <= INT32_MAX


def _check_call(q, k, v, causal, sm_scale, key_lengths, strategy) -> float:
    """The public entry's checks: a few comparisons per call (a quarter of `_check`'s cost on the
    course's CPU machine); when one fails, `_check` raises the course's message."""
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


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    sm_scale: float | None = None, *, key_lengths: torch.Tensor | None = None,
                    strategy: str = DEFAULT_BWD_STRATEGY) -> torch.Tensor:
    """Like F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale), fused.

    q (B, H, Sq, D), k and v (B, H, Sk, D), any strides; fp16, bf16, fp32 or fp64; D in 16,
    32, 64, 128. `key_lengths` (B,) int: keys at positions >= key_lengths[b] are padding.
    Differentiable in q, k and v; `strategy` picks the backward ("split" or "atomic"). Eager
    calls run `FlashAttentionFunction` (or the forward alone when no gradient is needed);
    under torch.compile, the registered op `torch.ops.course.flash_attention`.
    """
    scale = _check_call(q, k, v, causal, sm_scale, key_lengths, strategy)
    if ops.compiling():
        return flash_attention_op(q, k, v, causal, scale, key_lengths, strategy)[0]
    if ops.needs_grad(q, k, v):
        return FlashAttentionFunction.apply(q, k, v, causal, scale, key_lengths, strategy)
    return _forward(q, k, v, causal, scale, key_lengths)[0]
