"""FlashAttention-2's backward in Triton: dQ, dK and dV from Q, K, V, O, dO and the log-sum-exp alone.

Over 500 lines: three kernels and their launchers make one lesson, an exercise in five stages whose
holes carry their graded hints (`# HINT:` lines) in this file.

The forward (attention/flash.py) saves, besides its output O, one number per query row: the
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
to L2 and a result that is not bit-reproducible). `python -m week4_triton_dl.attention.bench
--sweep` measures both (Dao 2023, FlashAttention-2, Algorithm 2).

Cost model: counted as 2.5x the forward's FLOPs (5 matmuls instead of 2; the recomputation of
the split backward is not counted, as every FlashAttention paper and benchmark counts it); HBM
traffic Q, K, V, O, dO read and dQ, dK, dV written once, plus L and D. Masks, tiles, configs
and launch plans work as in the forward (attention/plans.py). `flash_attention_backward`
is the checked launcher; the autograd glue that calls `launch_backward` is in attention/op.py.
"""
from __future__ import annotations

import torch

from course import runtime
from course import validate
from course.launch import launch
from course.tl_dot import dot  # tl.dot, with float64 as plain FMAs (see course/tl_dot.py)
from course.gpu import triton, tl

from week4_triton_dl.attention.naive import check_out
from week4_triton_dl.attention.plans import (
    AUTOTUNE_KEY, LOG2E, TunedKernel, check_inputs, config_kwargs, launch_plan, plan, pruner, query_block_key_range,
    stats_dtype, tile_config, visible_key_count)

BWD_STRATEGIES = ("split", "atomic")
DEFAULT_BWD_STRATEGY = "split"  # deterministic; switch if the sweep shows "atomic" clearly faster
# Inside @triton.jit only tl.constexpr globals are visible (the interpreter would not complain).
_LOG2E = tl.constexpr(LOG2E)

# EXERCISE NOTE: A stage's tests call that stage's own kernel or launcher (backward_delta,
#   launch_dkdv, launch_dq) and take what earlier stages compute from torch: stage N passes while
#   the later stages are still holes.

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
    # BEGIN EXERCISE [stage 1: delta = rowsum(dO * O)]: one program per BLOCK_M rows of one (batch, head)
    #   (program ids: row block, then b * n_heads + h): load those rows of O and dO (masked past seq_q),
    #   multiply them in delta's dtype and sum over the head dim; store at delta_ptr + bh * seq_q + row
    # HINT: D_i = sum_j P_ij dP_ij = dO_i . O_i (O_i = sum_j P_ij V_j): one dot product per query row,
    #   so no pass over the keys is needed; the inputs may be fp16, the sum is in fp32 (delta's dtype).
    # HINT: offsets offs_m (the block's rows) and offs_d = tl.arange(0, HEAD_DIM); a 2-D load of each
    #   tile with base + b * stride_b + h * stride_h (as int64) + rows * stride_s + d * stride_d and
    #   mask=row_ok[:, None]; then tl.sum over axis 1 and one masked tl.store.
    # HINT: `delta = tl.sum(o.to(acc_ty) * do.to(acc_ty), 1)` with acc_ty = delta_ptr.dtype.element_ty
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
    # END EXERCISE


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
        # BEGIN EXERCISE [stage 2: dK and dV of one key block]: load this query block's Q and dO tiles
        #   (q_ptrs, do_ptrs), lse2 = lse * log2(e) and delta (lse_base + rows, delta_base + rows), masked
        #   past seq_q only when MASKED; then s_t = K Q^T and the recomputed P^T = exp2(s_t * qk_scale - lse2)
        # HINT: P is never stored: exp(scale * s - lse) is exactly the forward's softmax, recomputed from
        #   the saved log-sum-exp. Base 2 (exp2, lse times log2 e, qk_scale = scale * log2 e) as the forward.
        # HINT: `if MASKED:` loads with mask=row_ok[:, None] (other=0) for Q and dO, other=+inf for lse
        #   (exp2(s - inf) = 0: a row past the end adds nothing) and 0 for delta; `else:` plain loads.
        #   Keys run along the rows here: s_t has shape (BLOCK_N, BLOCK_M).
        # HINT: `s_t = dot(k, tl.trans(q), None, DOT_PRECISION)`; `p_t = tl.exp2(s_t * qk_scale - lse2[None, :])`
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
        # END EXERCISE
        if MASKED:
            keep = (rows[None, :] < seq_q) & (offs_n[:, None] < n_keys)
            if CAUSAL:
                # BEGIN EXERCISE [stage 3: the causal skip]: on a block that straddles the diagonal, keep
                #   only the pairs whose key is not after the query (key offs_n <= query row)
                # HINT: causal attention lets query i see keys 0..i: P_ij = 0 for j > i, so those pairs
                #   add nothing to dK and dV. Here keys run along axis 0 and query rows along axis 1.
                # HINT: and `keep` with one more comparison of offs_n[:, None] against rows[None, :]
                keep = keep & (offs_n[:, None] <= rows[None, :])
                # END EXERCISE
            p_t = tl.where(keep, p_t, 0.0)
        # BEGIN EXERCISE [stage 2]: accumulate dV += P^T dO; then dP^T = V dO^T, dS^T = P^T (dP^T - delta)
        #   and dK += dS^T Q (cast P^T and dS^T to the inputs' dtype for the tensor cores)
        # HINT: the chain rule through softmax: dS = P * (dP - D) with D the delta of stage 1 (one value
        #   per query row: a column here, delta[None, :]); the scale of dK is applied once, at the end.
        # HINT: four lines, each a `dot(a, b, acc, DOT_PRECISION)` of on-chip tiles or an element-wise
        #   product; accumulate into dv and dk by passing them as acc.
        # HINT: `ds_t = p_t * (dp_t - delta[None, :])`
        dv = dot(p_t.to(do.dtype), do, dv, DOT_PRECISION)
        dp_t = dot(v, tl.trans(do), None, DOT_PRECISION)
        ds_t = p_t * (dp_t - delta[None, :])
        dk = dot(ds_t.to(q.dtype), q, dk, DOT_PRECISION)
        # END EXERCISE
        if ATOMIC_DQ:
            # BEGIN EXERCISE [stage 5: dQ with atomics]: this key block's share of dQ for these rows,
            #   scale dS K (dS = the transpose of ds_t), added into the fp32 buffer at dq_base + rows *
            #   stride_dqs + d with tl.atomic_add (masked past seq_q when MASKED)
            # HINT: dQ_i = scale sum_j dS_ij K_j sums over every key block, and each key block is another
            #   program: a plain store would keep only one block's share, a load-add-store would race.
            #   Atomics make the sum's order, so its last bits, vary from run to run.
            # HINT: dq_part = dot(tl.trans(ds_t.to(k.dtype)), k, ...) * sm_scale, shape (BLOCK_M, HEAD_DIM);
            #   pointers rows[:, None] * stride_dqs + offs_d[None, :] (the buffer is contiguous).
            # HINT: `tl.atomic_add(dq_ptrs, dq_part, mask=rows[:, None] < seq_q)`
            dq_part = dot(tl.trans(ds_t.to(k.dtype)), k, None, DOT_PRECISION) * sm_scale
            dq_ptrs = dq_base + rows[:, None] * stride_dqs + offs_d[None, :]
            if MASKED:
                tl.atomic_add(dq_ptrs, dq_part, mask=rows[:, None] < seq_q)
            else:
                tl.atomic_add(dq_ptrs, dq_part)
            # END EXERCISE
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
    # BEGIN EXERCISE [stage 2]: load this block's K and V tiles once (rows offs_n, masked by key_ok); the
    #   bases of Q, dO (this batch and head), lse and delta (bh * seq_q)
    # HINT: the key block stays on-chip for the whole loop over the queries: it is read from memory
    #   once, and dK, dV accumulate in fp32 registers (fp64 for fp64 inputs: lse's dtype).
    # HINT: offsets as in the delta kernel (b and h as int64 times their strides); lse and delta are
    #   contiguous (B, H, Sq): `lse_base = lse_ptr + bh.to(tl.int64) * seq_q`.
    k = tl.load(k_ptr + b.to(tl.int64) * stride_kb + h.to(tl.int64) * stride_kh
                + offs_n[:, None] * stride_ks + offs_d[None, :] * stride_kd, mask=key_ok[:, None], other=0.0)
    v = tl.load(v_ptr + b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
                + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd, mask=key_ok[:, None], other=0.0)
    q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    do_base = do_ptr + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
    lse_base = lse_ptr + bh.to(tl.int64) * seq_q
    delta_base = delta_ptr + bh.to(tl.int64) * seq_q
    # END EXERCISE
    dq_base = dq_acc_ptr + bh.to(tl.int64) * seq_q * HEAD_DIM  # contiguous fp32 buffer (atomic only)
    # BEGIN EXERCISE [stage 2]: dK and dV accumulators of zeros, one row per key, in lse's dtype
    # HINT: dK and dV are sums over every query block: they accumulate on-chip, in fp32 whatever the
    #   inputs (fp64 for fp64 inputs: the dtype of lse).
    # HINT: `dk = tl.zeros([BLOCK_N, HEAD_DIM], lse_ptr.dtype.element_ty)`
    dk = tl.zeros([BLOCK_N, HEAD_DIM], lse_ptr.dtype.element_ty)  # fp32 (fp64 for fp64 inputs)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], lse_ptr.dtype.element_ty)
    # END EXERCISE

    # Query blocks to visit: [q_lo, q_end). Unmasked: [u_lo, u_hi), blocks entirely below the
    # causal diagonal and inside the sequence. Masked: [q_lo, u_lo) (the diagonal) and
    # [u_hi, q_end) (the ragged last block).
    q_end = tl.where(n_start < n_keys, seq_q, 0)  # a block of padding keys has no gradient
    q_ceil = tl.cdiv(seq_q, BLOCK_M) * BLOCK_M
    if CAUSAL:
        # BEGIN EXERCISE [stage 3]: the query blocks this key block skips: q_lo, the first query block
        #   that sees any of its keys (queries before n_start see none), and u_lo, the first block whose
        #   every row sees every key of the block (no mask needed from there on); both multiples of BLOCK_M
        # HINT: query i sees key j when j <= i. No row below n_start sees the block (skip those blocks);
        #   from row n_start + BLOCK_N - 1 on, every row sees all BLOCK_N keys. Round down, resp. up, to
        #   whole query blocks: the blocks in between are the diagonal ones, visited with the mask.
        # HINT: `q_lo = n_start // BLOCK_M * BLOCK_M`; u_lo rounds n_start + BLOCK_N - 1 up with tl.cdiv
        q_lo = n_start // BLOCK_M * BLOCK_M
        u_lo = tl.cdiv(n_start + BLOCK_N - 1, BLOCK_M) * BLOCK_M
        # END EXERCISE
    else:
        q_lo = 0
        u_lo = 0
    if ATOMIC_DQ:
        # BEGIN EXERCISE [stage 5]: with atomics, a key block holding padding keys must mask every step
        #   (its dQ share would add the padding keys): move u_lo to q_ceil for such a block
        # HINT: dK and dV of padding keys are zeroed at the end, but dQ sums over the keys: a padding
        #   key's dS must be masked in every query block, so this key block gets no unmasked steps.
        # HINT: `tl.where(<this block reaches past n_keys>, q_ceil, u_lo)`
        u_lo = tl.where(n_start + BLOCK_N > n_keys, q_ceil, u_lo)
        # END EXERCISE
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
    # BEGIN EXERCISE [stage 2]: dK times sm_scale; padding keys (not key_ok) get exactly zero dK and dV;
    #   store both in the outputs' dtype (rows offs_n, masked to offs_n < seq_k)
    # HINT: S = scale Q K^T, so dK = scale dS^T Q: the loop left the scale out of every step, it is
    #   applied once here. A padding key (past key_lengths[b]) gets zero, not whatever its rows summed.
    # HINT: tl.where(key_ok[:, None], ..., 0.0) for each; a 2-D tl.store like the loads, with
    #   .to(dk_ptr.dtype.element_ty) and mask=offs_n[:, None] < seq_k.
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
    # END EXERCISE


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
        # BEGIN EXERCISE [stage 4: dQ, and the whole backward]: load this key block's K and V (masked past
        #   n_keys when MASKED); recompute P = exp2(Q K^T * qk_scale - lse2), masked like the dK/dV kernel's
        #   (keys past n_keys; with CAUSAL, keys after the query) when MASKED; dP = dO V^T,
        #   dS = P (dP - delta) and dq += dS K
        # HINT: the same chain rule as stage 2 from the queries' side: the query block stays on-chip and
        #   the loop sweeps the keys, as the forward does; untransposed tiles (queries along the rows).
        # HINT: the mask is the stage 3 one, transposed: cols[None, :] against offs_m[:, None]; the
        #   scale of dQ is applied once, at the store.
        # HINT: `dq = dot(ds.to(k.dtype), k, dq, DOT_PRECISION)`
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
        # END EXERCISE
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
    # BEGIN EXERCISE [stage 4]: load this query block's Q and dO tiles, lse2 = lse * log2(e) and delta
    #   (all masked past seq_q; lse +inf there), the bases of K and V, and a dQ accumulator of zeros in
    #   lse's dtype
    # HINT: the stage 2 kernel's loads with the roles swapped: the query block is the one kept on-chip.
    # HINT: `lse2 = tl.load(lse_ptr + bh.to(tl.int64) * seq_q + offs_m, mask=row_ok, other=float("inf")) * _LOG2E`
    q = tl.load(q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
                + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd, mask=row_ok[:, None], other=0.0)
    do = tl.load(do_ptr + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
                 + offs_m[:, None] * stride_dos + offs_d[None, :] * stride_dod, mask=row_ok[:, None], other=0.0)
    lse2 = tl.load(lse_ptr + bh.to(tl.int64) * seq_q + offs_m, mask=row_ok, other=float("inf")) * _LOG2E
    delta = tl.load(delta_ptr + bh.to(tl.int64) * seq_q + offs_m, mask=row_ok, other=0.0)
    k_base = k_ptr + b.to(tl.int64) * stride_kb + h.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
    dq = tl.zeros([BLOCK_M, HEAD_DIM], lse_ptr.dtype.element_ty)
    # END EXERCISE
    full_hi, hi = query_block_key_range(m_start, n_keys, CAUSAL, BLOCK_M, BLOCK_N)
    dq = _bwd_key_blocks_for_queries(dq, q, do, lse2, delta, k_base, v_base, offs_m, 0, full_hi, n_keys, qk_scale,
                                     stride_ks, stride_kd, stride_vs, stride_vd,
                                     False, CAUSAL, DOT_PRECISION, HEAD_DIM, BLOCK_N)
    dq = _bwd_key_blocks_for_queries(dq, q, do, lse2, delta, k_base, v_base, offs_m, full_hi, hi, n_keys, qk_scale,
                                     stride_ks, stride_kd, stride_vs, stride_vd,
                                     True, CAUSAL, DOT_PRECISION, HEAD_DIM, BLOCK_N)
    # BEGIN EXERCISE [stage 4]: store dQ times sm_scale in dq's dtype (rows past seq_q masked)
    # HINT: dQ = scale dS K: the scale the loop left out, once, as for dK.
    # HINT: a 2-D tl.store like the loads, with (dq * sm_scale).to(dq_ptr.dtype.element_ty).
    tl.store(dq_ptr + b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh
             + offs_m[:, None] * stride_dqs + offs_d[None, :] * stride_dqd,
             (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=row_ok[:, None])
    # END EXERCISE


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


# =============================================================================== launchers
# No checks in these: flash_attention_backward below and the public entry (attention/op.py)
# check once, then call launch_backward, which calls the three below.
def backward_delta(out, do, lse_dtype, delta=None):
    """D = rowsum(dO * O) per query row (B, H, Sq) in lse_dtype: the backward's first kernel
    (written into `delta` when given: a contiguous (B, H, Sq) tensor)."""
    B, H, Sq, D = out.shape
    if delta is None:
        delta = torch.empty((B, H, Sq), dtype=lse_dtype, device=out.device)
    strides = (*out.stride(), *do.stride())
    launch(flash_attention_bwd_delta_kernel, (-(-Sq // _DELTA_BLOCK), B * H),
           (out.dtype, do.dtype, B, H, Sq, D, strides), (out, do, delta, H, Sq, *strides),
           dict(HEAD_DIM=D, BLOCK_M=_DELTA_BLOCK), num_warps=4)
    return delta


def launch_dkdv(q, k, v, do, lse, delta, dk, dv, causal, scale, key_lengths, atomic=False, kv_config=None):
    """Run the dK/dV kernel into dk, dv; with `atomic`, return the fp32 dQ it accumulated (else None).
    `kv_config` (a dict or triton.Config) fixes its block sizes instead of the tuned ones."""
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    has_kl = key_lengths is not None
    lengths = key_lengths if has_kl else lse
    kv = plan(DKDV, Sq, Sk, D, causal, has_kl, q.dtype, atomic, kv_config)
    # dq_acc is read and written only with ATOMIC_DQ. The autotuner zeroes it before every trial
    # (reset_to_zero), so then it must be a throwaway buffer, never a tensor that holds data.
    if atomic:
        dq_acc = torch.zeros((B, H, Sq, D), dtype=lse.dtype, device=q.device)
    else:
        dq_acc = lse if kv[1] is not None else torch.empty(1, dtype=lse.dtype, device=q.device)
    kv_strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(), *dv.stride())
    launch_plan(kv, Sk, B * H, (q, k, v, do, lse, delta, dk, dv, dq_acc, lengths, H, Sq, Sk, scale, scale * LOG2E,
                                 kv.seq_bucket, *kv_strides),
                ("kv", q.dtype, lengths.dtype, B, H, Sq, Sk, kv_strides) if kv_config is None else None)
    return dq_acc if atomic else None


def launch_dq(q, k, v, do, lse, delta, dq, causal, scale, key_lengths, q_config=None):
    """Run the dQ kernel into dq; `q_config` fixes its block sizes instead of the tuned ones."""
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    has_kl = key_lengths is not None
    lengths = key_lengths if has_kl else lse
    qp = plan(DQ, Sq, Sk, D, causal, has_kl, q.dtype, None, q_config)
    q_strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride(), *dq.stride())
    launch_plan(qp, Sq, B * H, (q, k, v, do, lse, delta, dq, lengths, H, Sq, Sk, scale, scale * LOG2E, qp.seq_bucket,
                                 *q_strides), ("q", q.dtype, lengths.dtype, B, H, Sq, Sk, q_strides)
                if q_config is None else None)


def launch_backward(do, q, k, v, out, lse, causal, scale, key_lengths, strategy, kv_config=None, q_config=None,
                    grads=None):
    """(dq, dk, dv) of checked inputs, for dO of any strides (no copy: the kernels take strides).

    `out` and `lse` are the forward's; `strategy` is "split" or "atomic"; `kv_config` / `q_config`
    (dicts or triton.Configs) fix the block sizes of the dK/dV and the dQ pass; `grads` = (dq, dk,
    dv) to write into, or None.
    """
    # The autograd path arrives here with the forward's checks long returned: the bf16 refusal below
    # sm_80 is asked again, before any launch (a capability lookup), so this launcher refuses on its own.
    runtime.require_bf16_tensor_cores(q.dtype, "Triton attention (tl.dot)")
    # BEGIN EXERCISE [stage 4]: allocate dq, dk, dv (unless given in grads); empty inputs: nothing to
    #   launch (no query or no key: every gradient is an empty sum, zeros); then delta, dK and dV, and dQ
    #   (strategy 'split': launch_dq; 'atomic': the dK/dV kernel's accumulated dQ, copied into dq)
    # HINT: three launches in order, each reading what the one before wrote: backward_delta (stage 1),
    #   launch_dkdv (stages 2 and 3), launch_dq (stage 4). With B * H == 0 or D == 0 there is nothing
    #   to write; with Sq == 0 or Sk == 0 the gradients exist but are empty sums.
    # HINT: `dq_acc = launch_dkdv(q, k, v, do, lse, delta, dk, dv, causal, scale, key_lengths, strategy ==
    #   "atomic", kv_config)`; a None back means: run launch_dq.
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
    dq_acc = launch_dkdv(q, k, v, do, lse, delta, dk, dv, causal, scale, key_lengths, strategy == "atomic",
                         kv_config)
    if dq_acc is not None:
        dq.copy_(dq_acc)
    else:
        launch_dq(q, k, v, do, lse, delta, dq, causal, scale, key_lengths, q_config)
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
