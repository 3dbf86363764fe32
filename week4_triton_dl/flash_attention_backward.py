"""FlashAttention-2's backward in Triton: dQ, dK and dV from Q, K, V, O, dO and the log-sum-exp alone.

The forward (flash_attention.py) saves, besides its output O, one number per query row: the
log-sum-exp L = m + log(l) of its scaled scores (B*H*Sq floats). That is enough, because
P = exp(s - L) can be recomputed exactly from Q, K and L: the backward never stores or reads
anything of size S^2 either. With dP = dO V^T and D_i = rowsum(dO_i * O_i) (which equals
sum_j P_ij dP_ij, so it needs no pass over the keys):

    dS = P * (dP - D)      dQ = scale dS K      dK = scale dS^T Q      dV = P^T dO

A small kernel first computes D (`flash_attention_bwd_delta_kernel`). Then, by default
("split"), one kernel owns a block of keys and loops over all queries, accumulating its dK and
dV on-chip (`flash_attention_bwd_dkdv_kernel`), and a second kernel owns a block of queries and
accumulates its dQ (`flash_attention_bwd_dq_kernel`, which sweeps the keys like the forward):
every output is written once, no atomics, deterministic, at the price of recomputing P (and
dP) twice: 7 block matmuls instead of 5. The "atomic" strategy computes dQ inside the dK/dV
kernel and adds each partial dQ tile into an fp32 buffer with atomics (5 matmuls, but traffic
to L2 and a result that is not bit-reproducible). `python -m week4_triton_dl.flash_attention_bench
--sweep` measures both (Dao 2023, FlashAttention-2, Algorithm 2).

Cost model: counted as 2.5x the forward's FLOPs (5 matmuls instead of 2; the recomputation of
the split backward is not counted, as every FlashAttention paper and benchmark counts it); HBM
traffic Q, K, V, O, dO read and dQ, dK, dV written once, plus L and D. Masks, tiles, configs
and launch plans work as in the forward (flash_attention_plans.py). `flash_attention_backward`
is the checked launcher; the autograd glue that calls `launch_backward` is in flash_attention.py.
"""
from __future__ import annotations

import torch

from course import runtime  # runtime before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.launch import launch
from course.tl_dot import dot  # tl.dot, with float64 as plain FMAs (see course/tl_dot.py)

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

from week4_triton_dl.attention_naive import check_out  # noqa: E402
from week4_triton_dl.flash_attention_plans import (  # noqa: E402
    AUTOTUNE_KEY, LOG2E, TunedKernel, check_inputs, config_kwargs, launch_plan, plan, pruner, query_block_key_range,
    stats_dtype, tile_config, visible_key_count)

BWD_STRATEGIES = ("split", "atomic")
DEFAULT_BWD_STRATEGY = "split"  # deterministic; switch if the sweep shows "atomic" clearly faster
# Inside @triton.jit only tl.constexpr globals are visible (the interpreter would not complain).
_LOG2E = tl.constexpr(LOG2E)

# BEGIN EXERCISE: your backward kernels: recompute P from lse instead of storing it: delta = rowsum(dO * O)
#   (one small kernel), then dK, dV (one program per key block, looping over the query blocks) and dQ (one
#   program per query block, or atomics from the dK/dV kernel). Masks: the causal triangle, key_lengths, the
#   ragged tails (flash_attention_plans.py has the key ranges and the launch plans). Your configs, the
#   TunedKernels DKDV and DQ, and backward_delta too (the solution's: flash_attention_backward.py)
# Configs the interpreter runs (it cannot time configs). BLOCK_M != BLOCK_N on purpose, so
# the causal bounds are exercised with both orders of tile sizes across the tests.
SIM_BWD_KV = {"BLOCK_M": 16, "BLOCK_N": 32}
SIM_BWD_Q = {"BLOCK_M": 32, "BLOCK_N": 16}
SIM_DELTA_BLOCK = 16
DELTA_BLOCK = 64


# =============================================================================== kernels
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
    n_keys = visible_key_count(key_len_ptr, b, seq_k, HAS_KEY_LENGTHS)
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
    n_keys = visible_key_count(key_len_ptr, b, seq_k, HAS_KEY_LENGTHS)
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
    full_hi, hi = query_block_key_range(m_start, n_keys, CAUSAL, BLOCK_M, BLOCK_N)
    dq = _bwd_key_blocks_for_queries(dq, q, do, lse2, delta, k_base, v_base, offs_m, 0, full_hi, n_keys, qk_scale,
                                     stride_ks, stride_kd, stride_vs, stride_vd,
                                     False, CAUSAL, DOT_PRECISION, HEAD_DIM, BLOCK_N)
    dq = _bwd_key_blocks_for_queries(dq, q, do, lse2, delta, k_base, v_base, offs_m, full_hi, hi, n_keys, qk_scale,
                                     stride_ks, stride_kd, stride_vs, stride_vd,
                                     True, CAUSAL, DOT_PRECISION, HEAD_DIM, BLOCK_N)
    tl.store(dq_ptr + b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh
             + offs_m[:, None] * stride_dqs + offs_d[None, :] * stride_dqd,
             (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=row_ok[:, None])


# =============================================================================== configs
# dK/dV kernel: BLOCK_N keys per program (their dK, dV accumulators live in registers: 2 x
# BLOCK_N x D fp32, so D = 128 with 128 keys wants 8 warps), BLOCK_M query rows per step.
BWD_KV_CONFIGS = [
    tile_config(32, 128, 8, 3), tile_config(64, 128, 8, 2), tile_config(32, 64, 4, 3), tile_config(64, 128, 8, 3),
    tile_config(32, 64, 4, 2), tile_config(64, 64, 8, 3), tile_config(32, 128, 8, 2),
    tile_config(32, 128, 4, 3, max_head_dim=64), tile_config(64, 64, 4, 3, max_head_dim=64),
    tile_config(16, 128, 4, 4, max_head_dim=64),
    # Seen fastest at D = 64, S = 2048, not causal (sweep of 2026-11-27: 4 stages of 64-row
    # query blocks keep the tensor cores fed where the unmasked loop is long).
    tile_config(64, 64, 4, 4, max_head_dim=64),
]
# dQ kernel: BLOCK_M queries per program, BLOCK_N keys per step.
BWD_Q_CONFIGS = [
    tile_config(128, 64, 8, 3), tile_config(128, 32, 8, 3), tile_config(64, 64, 4, 3), tile_config(128, 64, 8, 2),
    tile_config(64, 32, 4, 4), tile_config(64, 32, 4, 2), tile_config(128, 32, 4, 3, max_head_dim=64),
]
# For short sequences (16-bit inputs): one small tile. fp32 and fp64 take their own below.
# For short sequences (16-bit inputs): one small tile (fp32 and fp64: flash_attention_plans.fixed_config).
SMALL_BWD_KV, SMALL_BWD_Q = tile_config(32, 64, 4, 2), tile_config(64, 32, 4, 2)
flash_attention_bwd_dkdv_autotuned = triton.autotune(
    configs=BWD_KV_CONFIGS, key=AUTOTUNE_KEY + ["ATOMIC_DQ"], reset_to_zero=["dq_acc_ptr"],
    prune_configs_by={"early_config_prune": pruner(SMALL_BWD_KV)})(flash_attention_bwd_dkdv_kernel)
flash_attention_bwd_dq_autotuned = triton.autotune(
    configs=BWD_Q_CONFIGS, key=AUTOTUNE_KEY,
    prune_configs_by={"early_config_prune": pruner(SMALL_BWD_Q)})(flash_attention_bwd_dq_kernel)
DKDV = TunedKernel("kv", flash_attention_bwd_dkdv_kernel, flash_attention_bwd_dkdv_autotuned, SIM_BWD_KV,
                   SMALL_BWD_KV, axis="BLOCK_N")
DQ = TunedKernel("q", flash_attention_bwd_dq_kernel, flash_attention_bwd_dq_autotuned, SIM_BWD_Q, SMALL_BWD_Q,
                 axis="BLOCK_M")
_DELTA_BLOCK = runtime.pick(gpu=DELTA_BLOCK, sim=SIM_DELTA_BLOCK)


def backward_delta(out, do, lse_dtype):
    """D = rowsum(dO * O) per query row (B, H, Sq) in lse_dtype: the backward's first kernel."""
    B, H, Sq, D = out.shape
    delta = torch.empty((B, H, Sq), dtype=lse_dtype, device=out.device)
    strides = (*out.stride(), *do.stride())
    launch(flash_attention_bwd_delta_kernel, (-(-Sq // _DELTA_BLOCK), B * H),
           (out.dtype, do.dtype, B, H, Sq, D, strides), (out, do, delta, H, Sq, *strides),
           dict(HEAD_DIM=D, BLOCK_M=_DELTA_BLOCK), num_warps=4)
    return delta
# END EXERCISE


# =============================================================================== launchers
# No checks in launch_backward: flash_attention_backward below and the public entry
# (flash_attention.py) check once, then call it.
def launch_backward(do, q, k, v, out, lse, causal, scale, key_lengths, strategy, kv_config=None, q_config=None,
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
    kv = plan(DKDV, Sq, Sk, D, causal, has_kl, q.dtype, atomic, kv_config)
    # dq_acc is read and written only with ATOMIC_DQ. The autotuner zeroes it before every trial
    # (reset_to_zero), so then it must be a throwaway buffer, never a tensor that holds data.
    if atomic:
        dq_acc = torch.zeros((B, H, Sq, D), dtype=lse.dtype, device=q.device)
    else:
        dq_acc = lse if kv[1] is not None else torch.empty(1, dtype=lse.dtype, device=q.device)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    tuned = kv_config is None and q_config is None
    kv_strides = (*strides, *dk.stride(), *dv.stride())
    launch_plan(kv, Sk, B * H, (q, k, v, do, lse, delta, dk, dv, dq_acc, lengths, H, Sq, Sk, scale, scale * LOG2E,
                                 kv[2], *kv_strides),
                ("kv", q.dtype, lengths.dtype, B, H, Sq, Sk, kv_strides) if tuned else None)
    if atomic:
        dq.copy_(dq_acc)
        return dq, dk, dv
    qp = plan(DQ, Sq, Sk, D, causal, has_kl, q.dtype, None, q_config)
    q_strides = (*strides, *dq.stride())
    launch_plan(qp, Sq, B * H, (q, k, v, do, lse, delta, dq, lengths, H, Sq, Sk, scale, scale * LOG2E, qp[2],
                                 *q_strides), ("q", q.dtype, lengths.dtype, B, H, Sq, Sk, q_strides) if tuned else None)
    return dq, dk, dv
    # END EXERCISE


def check_strategy(strategy):
    """ValueError unless `strategy` is one of BWD_STRATEGIES."""
    if strategy not in BWD_STRATEGIES:
        raise ValueError(f"strategy must be one of {list(BWD_STRATEGIES)}, got {strategy!r}")


def flash_attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             out: torch.Tensor, lse: torch.Tensor, causal: bool = False,
                             sm_scale: float | None = None, *, key_lengths: torch.Tensor | None = None,
                             strategy: str = DEFAULT_BWD_STRATEGY, kv_config=None, q_config=None,
                             grads: tuple | None = None):
    """(dq, dk, dv) from the forward's out and lse: P is recomputed, never loaded.

    `grads=(dq, dk, dv)` writes into given tensors; `kv_config`/`q_config` fix the block sizes
    of the dK/dV kernel and the dQ kernel (dicts or triton.Configs) instead of autotuning.
    """
    scale = check_inputs(q, k, v, causal, sm_scale, key_lengths)
    check_strategy(strategy)
    validate.tensor(do, "do", dtypes=(q.dtype,), ndim=4, contiguous=False)
    validate.tensor(out, "out", dtypes=(q.dtype,), ndim=4, contiguous=False)
    validate.tensor(lse, "lse", dtypes=(stats_dtype(q.dtype),), ndim=3)
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
    return launch_backward(do, q, k, v, out, lse, causal, scale, key_lengths, strategy, kv_config, q_config, grads)
