"""FlashAttention-2 in Triton: fused attention that never stores the scores (the flash_blocked rung).

    O = softmax(Q K^T * scale + mask) V        Q: (B, H, Sq, D), K and V: (B, H, Sk, D)

Read attention/forward.py first (rung 2 of `python -m course rung attention`): the same
online softmax in one short kernel, forward only, every block masked, one fixed tile. This module
is the full forward a model runs (through the op, attention/op.py, and its dispatch, attention/dispatch.py);
it adds what a forward needs to be fast and to have a backward:

* The log-sum-exp L = m + log(l) of each row, written beside the output (B*H*Sq floats): the
  only statistic the backward (attention/backward.py) needs, since P = exp(s - L) can be
  recomputed exactly from Q, K and L.
* exp2 instead of exp: exp(x) = 2^(x log2 e), and the GPU's fast exponential is a base-2
  instruction (MUFU.EX2), so log2(e) is folded into the score scale once (`qk_scale`) and the
  inner loop calls `tl.exp2` with no extra multiply.
* Masking only where needed. A block of keys entirely visible to every query of the program
  (left of the causal diagonal, fully inside the sequence) needs no mask at all; the diagonal
  blocks and the ragged last block (S not a multiple of BLOCK_N) go through a second copy of
  the loop that masks. So the common block pays nothing for causality or odd lengths.
* Key padding (`key_lengths` (B,): keys at positions >= key_lengths[b] are masked; a row with no
  visible key gives zeros, as torch's SDPA does), fp64 inputs (all arithmetic in fp64, so
  `torch.autograd.gradcheck` can test the backward), and tile configs picked by the autotuner
  once per shape bucket, launched through plans kept per shape (attention/plans.py).
* Nothing above the kernel but its launcher, `launch_forward`: the checks, the choice between this
  rung and attention/tma.py's, autograd and the registered op `torch.ops.course.flash_attention`
  are the op's (attention/op.py), which calls down to here through attention/dispatch.py.

Cost model, per (batch, head), S = Sq = Sk, itemsize s: forward 4 S^2 D FLOPs (QK^T and PV, 2
FLOPs per multiply-add), halved for causal. HBM traffic: Q, K, V read and O written once, 4 S D s
bytes, plus L (4 S bytes): that is all, since scores never leave the chip. K and V are re-read
by every query block (S / BLOCK_M times), but the programs of one head run together and those
re-reads are served from L2. Compare attention/naive.py's 16 S^2 bytes of score traffic: at
S = 4096, D = 128 bf16, 4.2 MB versus 268 MB per head. The fused kernel does 4 S^2 D FLOPs on
4 S D s bytes: S/s FLOPs per byte, ~2000 at S = 4096, far above the H100's ridge point (~240
FLOPs/byte for bf16 tensor cores against 3 TB/s): compute-bound, so the yardstick is TFLOP/s
against SDPA's FlashAttention-2 and cuDNN backends (attention/bench.py, which also times
the op as a model calls it: `attention_train_week4`, `attention_host_week4`).

Inputs are (B, H, S, D) tensors with any strides (so q.transpose(1, 2) of a (B, S, H, D)
tensor works without a copy), fp16 or bf16 (fp32 accumulation), fp32 (exact fp32 products, for
checking), or fp64. Head dims 16, 32, 64, 128. Causal masks are top-left aligned like torch's
`is_causal`. Sk == 0 gives zeros.
"""
from __future__ import annotations

import torch

from course.gpu import triton, tl
from course.tl_dot import dot  # tl.dot, with float64 as plain FMAs (see course/tl_dot.py)

# The shared DTYPES, HEAD_DIMS, LOG2E and config_kwargs are part of this module's public API too
# (importers of week4_triton_dl.attention.flash keep working).
from week4_triton_dl.attention.plans import (  # noqa: F401
    AUTOTUNE_KEY, DTYPES, HEAD_DIMS, LOG2E, TunedKernel, config_kwargs, launch_plan, plan, pruner,
    query_block_key_range, stats_dtype, tile_config, visible_key_count)
# Inside @triton.jit only tl.constexpr globals are visible (the interpreter would not complain).
_LN2 = tl.constexpr(0.6931471805599453)

# EXERCISE NOTE: The kernel is attention/forward.py's (do that lesson first) with what a model
#   needs: exp2 with log2(e) folded into qk_scale, the log-sum-exp written for the backward, key_lengths,
#   and a mask-free copy of the loop for the blocks that need no mask (attention/plans.py has the
#   key ranges: query_block_key_range).

# The config the interpreter runs (it cannot time configs). BLOCK_M != BLOCK_N on purpose, so
# the causal bounds are exercised with both orders of tile sizes across the tests.
SIM_FWD = {"BLOCK_M": 32, "BLOCK_N": 16}


# =============================================================================== the kernel
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
        # BEGIN EXERCISE: load this block's K (masked past n_keys when MASKED); qk = q k^T; then the
        #   block's new running max m_new, p = exp2(s - m_new) and alpha = exp2(m_i - m_new), in base 2 (qk_scale
        #   holds log2 e). MASKED: s = qk * qk_scale, -inf where the key is past n_keys or (CAUSAL) after
        #   the query, and a row with no visible key yet (m_new = -inf) shifted by 0; unmasked: no where()
        # HINT: forward-only's update (attention/forward.py) in base 2: exp2(x log2 e) = exp(x), and
        #   the GPU's exponential is base 2. Key padding can hide every key of a row: then m_new = -inf, and
        #   -inf - -inf is NaN, so those rows subtract 0 instead (their p and alpha are exp2(-inf) = 0).
        # HINT: `if MASKED:` keep = cols[None, :] < n_keys (and the causal comparison with offs_m), s =
        #   tl.where(keep, ...); `else:` scale once: m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale) (scale > 0).
        # HINT: `shift = tl.where(m_new == -float("inf"), 0.0, m_new)`
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
        # END EXERCISE
        # BEGIN EXERCISE: rescale l and acc by alpha, then add the block: rowsum(p) to l, p @ V to acc (V
        #   loaded like K; p rounded to V's dtype for the tensor cores); m_i = m_new
        # HINT: the online softmax's step: everything summed so far was relative to the old max; alpha
        #   brings it to the new one before this block's terms are added.
        # HINT: `acc = dot(p.to(v.dtype), v, acc, DOT_PRECISION)` after `acc = acc * alpha[:, None]`
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if MASKED:
            v = tl.load(v_ptrs, mask=cols[:, None] < n_keys, other=0.0)
        else:
            v = tl.load(v_ptrs)
        # P is rounded to the input dtype for the tensor cores; the sum is accumulated in fp32.
        acc = dot(p.to(v.dtype), v, acc, DOT_PRECISION)
        m_i = m_new
        # END EXERCISE
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
    # BEGIN EXERCISE: one program per (query block, b * n_heads + h), causal ones in reverse order; the
    #   (batch, head) bases of q, k, v, o; n_keys (visible_key_count); the Q tile loaded once (rows past
    #   seq_q as 0); m = -inf, l = 0, acc = 0 in lse's dtype
    # HINT: as in attention/forward.py, plus: key_lengths through visible_key_count, and causal
    #   query blocks launched last-first (the long ones start first and the short ones fill the last wave).
    # HINT: pid_m = tl.num_programs(0) - 1 - pid_m when CAUSAL; acc_ty = lse_ptr.dtype.element_ty (fp32,
    #   fp64 for fp64 inputs) for m_i (tl.full with -inf), l_i and acc (tl.zeros).
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
    n_keys = visible_key_count(key_len_ptr, b, seq_k, HAS_KEY_LENGTHS)

    m_start = pid_m * BLOCK_M
    offs_m = m_start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seq_q
    # The Q tile is loaded once and stays on-chip for the whole sweep over the keys.
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd,
                mask=row_ok[:, None], other=0.0)
    # Statistics and accumulator in fp32 (fp64 for fp64 inputs): the type of the lse buffer.
    acc_ty = lse_ptr.dtype.element_ty
    # The scale in that type too: Triton passes a Python float as fp32, but a caller compiled by
    # Inductor (week 5's AOTInductor package) passes it as fp64, which would promote the scores,
    # the statistics and the accumulator to fp64 and break the dot's fp32 accumulator.
    qk_scale = tl.cast(qk_scale, acc_ty)
    m_i = tl.full([BLOCK_M], -float("inf"), acc_ty)
    l_i = tl.zeros([BLOCK_M], acc_ty)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], acc_ty)
    # END EXERCISE

    # BEGIN EXERCISE: the key range of this query block (query_block_key_range: [0, full_hi) needs no mask,
    #   [full_hi, hi) does), then _fwd_key_blocks over each, unmasked first
    # HINT: a block entirely visible to every query of the program (left of the causal diagonal, inside
    #   n_keys) runs the mask-free loop; only the diagonal and ragged blocks pay for the mask.
    # HINT: `full_hi, hi = query_block_key_range(m_start, n_keys, CAUSAL, BLOCK_M, BLOCK_N)`, then two calls
    #   that differ in start, stop and MASKED.
    full_hi, hi = query_block_key_range(m_start, n_keys, CAUSAL, BLOCK_M, BLOCK_N)
    acc, m_i, l_i = _fwd_key_blocks(acc, m_i, l_i, q, k_base, v_base, offs_m, 0, full_hi, n_keys, qk_scale,
                                    stride_ks, stride_kd, stride_vs, stride_vd,
                                    False, CAUSAL, DOT_PRECISION, HEAD_DIM, BLOCK_N)
    acc, m_i, l_i = _fwd_key_blocks(acc, m_i, l_i, q, k_base, v_base, offs_m, full_hi, hi, n_keys, qk_scale,
                                    stride_ks, stride_kd, stride_vs, stride_vd,
                                    True, CAUSAL, DOT_PRECISION, HEAD_DIM, BLOCK_N)
    # END EXERCISE

    # BEGIN EXERCISE: out = acc / l and the natural log-sum-exp lse = (m + log2 l) ln 2 per row; a row with
    #   l = 0 (no visible key) gets out 0 and lse -inf; store both (rows past seq_q masked)
    # HINT: m and l are in base 2: log2 of the row's sum of 2^(s2) is m + log2(l); times ln 2 gives the
    #   natural log torch uses. The backward recomputes P = exp(s - lse) from it.
    # HINT: `l_safe = tl.where(l_i == 0.0, 1.0, l_i)` keeps the division and the log finite.
    # l = 0 only for a row that saw no visible key at all: define its output as 0 (torch's
    # SDPA does the same) and its log-sum-exp as -inf (the log of an empty sum).
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc * (1.0 / l_safe)[:, None]
    lse = tl.where(empty, -float("inf"), (m_i + tl.log2(l_safe)) * _LN2)  # natural log, like torch
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
    tl.store(lse_ptr + bh.to(tl.int64) * seq_q + offs_m, lse, mask=row_ok)
    # END EXERCISE


# =============================================================================== configs
# The space the sweep measures and the autotuner picks from (16-bit inputs). BLOCK_M = 128
# gives each program 128 rows of Q against which every K/V block is reused (the arithmetic
# intensity of the inner loop); 8 warps split a 128-row tile into 16-row wgmma slices.
# num_stages is how many K/V blocks the compiler prefetches ahead (cp.async pipelining).
# The max_head_dim=64 entries were seen to spill registers at D = 128 when compiled for sm_90
# (Triton 3.9, ptxas): a 128 x 128 fp32 accumulator is 128 registers per thread at 4 warps.
# The first entries of each list are the ones `--sweep --quick` measures.
FWD_CONFIGS = [
    tile_config(128, 64, 8, 3), tile_config(128, 128, 8, 2), tile_config(64, 64, 4, 3), tile_config(128, 64, 8, 4),
    tile_config(128, 128, 8, 3), tile_config(64, 64, 4, 4), tile_config(64, 128, 4, 3), tile_config(128, 32, 8, 4),
    tile_config(128, 64, 4, 3, max_head_dim=64), tile_config(128, 32, 4, 4, max_head_dim=64),
]
SMALL_FWD = tile_config(64, 64, 4, 2)  # short 16-bit sequences (fp32, fp64: flash_attention_plans.fixed_config)
flash_attention_fwd_autotuned = triton.autotune(
    configs=FWD_CONFIGS, key=AUTOTUNE_KEY,
    prune_configs_by={"early_config_prune": pruner(SMALL_FWD)})(flash_attention_fwd_kernel)
FWD = TunedKernel("fwd", flash_attention_fwd_kernel, flash_attention_fwd_autotuned, SIM_FWD, SMALL_FWD, axis="BLOCK_M")


# =============================================================================== the launcher
# The flash_blocked rung: attention/dispatch.py calls it (the op, attention/op.py, calls the dispatch),
# with inputs the op has checked once, so nothing is checked here.
def launch_forward(q, k, v, causal, scale, key_lengths, config=None, out=None):
    """(out, lse) of checked inputs: out (B, H, Sq, D) in q's dtype (written into `out` when given),
    lse (B, H, Sq) in stats_dtype: each row's natural log-sum-exp of its scaled, masked scores.

    `scale` is sm_scale (a float); `key_lengths` (B,) int32/int64 or None: keys j >= key_lengths[b]
    are masked; `causal`: key j is masked for query i when j > i; `config` (a dict or triton.Config,
    checked by config_kwargs) fixes BLOCK_M and BLOCK_N instead of autotuning.
    """
    # BEGIN EXERCISE: allocate out (unless given) and lse; nothing to launch for empty inputs; launch your
    #   forward kernel(s) over (query blocks, B * H), with config's BLOCK_M and BLOCK_N when it is given
    # HINT: lse in stats_dtype(q.dtype); B * H * Sq == 0 or D == 0: nothing to launch.
    # HINT: `fwd = plan(FWD, Sq, Sk, D, causal, has_kl, q.dtype, None, config)`, then launch_plan(fwd, Sq, B * H,
    #   (kernel arguments in order, qk_scale = scale * LOG2E), key) as flash_attention_backward.launch_dq does.
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    if out is None:
        out = torch.empty((B, H, Sq, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, Sq), dtype=stats_dtype(q.dtype), device=q.device)
    if B * H * Sq == 0 or D == 0:
        return out, lse
    has_kl = key_lengths is not None
    fwd = plan(FWD, Sq, Sk, D, causal, has_kl, q.dtype, None, config)
    strides = (*q.stride(), *k.stride(), *v.stride(), *out.stride())
    launch_plan(fwd, Sq, B * H, (q, k, v, out, lse, key_lengths if has_kl else lse, H, Sq, Sk, scale * LOG2E, fwd.seq_bucket,
                                 *strides),
                None if config is not None else ("fwd", q.dtype, key_lengths.dtype if has_kl else None, B, H, Sq, Sk,
                                                 strides))
    return out, lse
    # END EXERCISE
