"""FlashAttention's forward alone, the simplest version: one kernel, online softmax, no backward.

    O = softmax(Q K^T * scale + causal mask) V        Q: (B, H, Sq, D), K and V: (B, H, Sk, D)

Read this before attention/flash.py: it is the same algorithm with nothing else in the way. Rung 2
of the attention ladder (`python -m course rung attention 2` checks it against torch and times it;
`python -m course rung attention` lists the rungs): rung 1, attention/naive.py, writes the
B*H*Sq*Sk scores to HBM and reads them back twice; this kernel never writes a score.

One program owns BLOCK_M queries of one (batch, head). It loads its Q tile once, then streams K
and V past it in blocks of BLOCK_N keys. For each query row it keeps three things on-chip:
  m   the largest score seen so far,
  l   the sum of exp(s - m) over the keys seen so far,
  acc the sum of exp(s - m) * v over the same keys (unnormalised output, BLOCK_M x D, fp32).
A new block whose scores raise the max to m' makes every earlier term too large by exp(m' - m),
so l and acc are first multiplied by alpha = exp(m - m'), then the block's own terms are added.
After the last block, out = acc / l is exactly softmax(s) V (Milakov & Gimelshein 2018; Dao et
al. 2022). The work is the same 4 Sq Sk D FLOPs as the naive version; the traffic is Q, K, V read
and O written, since the scores live and die in registers.

What it leaves out, each added by attention/flash.py (rung 3) for a reason written there:
* the backward: nothing is saved for it (the full kernel also writes each row's log-sum-exp,
  m + log l, from which the backward recomputes P instead of storing it);
* masking only where needed: here every key block pays for the mask, even the ones entirely
  visible to every query (the full kernel runs those through a second, mask-free copy of the loop);
* exp2 with log2(e) folded into the scale (the GPU's exponential is base 2), key padding
  (`key_lengths`), fp64, and tile sizes chosen by the autotuner: here one fixed tile per machine.

Inputs: fp16 or bf16 (tensor-core products, fp32 accumulation) or fp32 (true fp32 products);
D in 16, 32, 64, 128; any Sq and Sk, any strides. Causal masks are top-left aligned like torch's
`is_causal` (key j is visible to query i when j <= i). Sk = 0 gives zeros, as torch's SDPA does.
"""
from __future__ import annotations

import torch

from course import runtime
from course.gpu import triton, tl

from week4_triton_dl.attention.naive import (
    HEAD_DIMS, check_attention_inputs, check_out, dot_precision)

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# One tile for every shape: 64 queries x 64 keys with 4 warps keeps the fp32 accumulator at 64
# registers per thread for D = 128 and the K and V blocks of two pipeline stages in shared
# memory even for fp32. Picking tiles per shape is the full kernel's autotuner's job.
BLOCK = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
# The interpreter: small tiles, BLOCK_M != BLOCK_N, so ragged lengths and the causal bound are
# exercised with tiles smaller than the tests' sequences.
SIM_BLOCK = {"BLOCK_M": 32, "BLOCK_N": 16}


@triton.jit
def flash_forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_heads, seq_q, seq_k, sm_scale,
                         stride_qb, stride_qh, stride_qs, stride_qd,
                         stride_kb, stride_kh, stride_ks, stride_kd,
                         stride_vb, stride_vh, stride_vs, stride_vd,
                         stride_ob, stride_oh, stride_os, stride_od,
                         CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr, HEAD_DIM: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # BEGIN EXERCISE [stage 1: the online softmax over the key blocks]: one program per (block of BLOCK_M
    #   queries, b * n_heads + h): the (batch, head) bases of q, k, v (int64), the offsets, the Q tile loaded
    #   once (rows past seq_q as 0); m = -inf, l = 0, acc = 0 in fp32
    # HINT: the Q tile is reused against every key block, so it is read once; m, l and acc are the
    #   per-row state the online softmax carries from block to block, in fp32 whatever the inputs.
    # HINT: program ids: tl.program_id(0) is the query block, tl.program_id(1) = b * n_heads + h; bases
    #   as ptr + b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h; a 2-D masked tl.load of Q.
    # HINT: `m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)`
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    # int64 for the (batch, head) base: B * H * S * D passes 2^31 long before one head does.
    q_base = q_ptr + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = k_ptr + b.to(tl.int64) * stride_kb + h.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + h.to(tl.int64) * stride_vh
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # The Q tile is read from HBM once and reused against every key block: that reuse is what
    # makes the kernel compute-bound. Rows past the end load as 0 and are never stored.
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd,
                mask=offs_m[:, None] < seq_q, other=0.0)

    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # END EXERCISE
    hi = seq_k
    if CAUSAL:
        # BEGIN EXERCISE [stage 2: causal]: no query of this block sees a key past its last row: stop the
        #   loop there (hi), skipping the blocks right of the diagonal instead of masking them
        # HINT: query i sees keys 0..i, so the block's last row, (pid_m + 1) * BLOCK_M - 1, bounds every
        #   key it needs: half the work at Sq = Sk. Never past seq_k.
        # HINT: `hi = tl.minimum(<one past the block's last row>, seq_k)`
        hi = tl.minimum((pid_m + 1) * BLOCK_M, seq_k)
        # END EXERCISE
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        # BEGIN EXERCISE [stage 1]: load this block's K and V (keys past seq_k as 0), the scores
        #   s = q k^T * sm_scale, and `keep`: the keys inside seq_k
        # HINT: masked loads keep whatever lies past the end (even NaN) out of every sum; the scores of
        #   those keys are set to -inf below (`keep`), so exp gives them weight 0.
        # HINT: `s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale`
        # Keys past the end load as 0: whatever memory holds there (even NaN) never enters a sum.
        k = tl.load(k_base + cols[:, None] * stride_ks + offs_d[None, :] * stride_kd,
                    mask=cols[:, None] < seq_k, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :] * stride_vd,
                    mask=cols[:, None] < seq_k, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale
        keep = cols[None, :] < seq_k
        # END EXERCISE
        if CAUSAL:
            # BEGIN EXERCISE [stage 2]: on the diagonal block, keep only the keys not after the query
            # HINT: key j is visible to query i when j <= i (top-left aligned, like torch's is_causal).
            # HINT: and `keep` with a comparison of cols[None, :] against offs_m[:, None]
            keep = keep & (cols[None, :] <= offs_m[:, None])
            # END EXERCISE
        # BEGIN EXERCISE [stage 1]: -inf where not keep; m_new = max(m, rowmax(s)); p = exp(s - m_new);
        #   rescale l and acc by alpha = exp(m - m_new) before adding rowsum(p) and p @ v (p rounded to
        #   v's dtype); m = m_new
        # HINT: a bigger max m' makes every term summed so far too large by exp(m' - m): multiplying l and
        #   acc by alpha = exp(m - m') first makes them as if m' had been used from the start.
        # HINT: tl.where(keep, s, -inf) (not a -inf bias: a NaN of a hidden key must not spread);
        #   tl.max / tl.sum over axis 1; tl.dot(p.to(v.dtype), v, acc, ...) accumulates in fp32.
        # HINT: `acc = acc * alpha[:, None]` before the dot that adds p @ v
        # where(), not adding a -inf bias: a NaN score of a hidden key is dropped, not spread.
        s = tl.where(keep, s, -float("inf"))
        # Key 0 is visible to every row (causal or not), so after the first block m is finite
        # and m_i - m_new below is never -inf - (-inf). (attention/flash.py, whose key padding
        # can hide every key of a row, has to guard it.)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])           # hidden keys: exp(-inf) = 0
        alpha = tl.exp(m_i - m_new)              # the rescale of everything summed so far
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        # P is rounded to V's dtype so the tensor cores take it; the sum stays fp32.
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_new
        # END EXERCISE
    # BEGIN EXERCISE [stage 1]: out = acc / l per row, stored in o's dtype (rows past seq_q masked)
    # HINT: one division per row at the end, not one per block: l only grows, the rescaling is exact.
    # HINT: `out = acc / l_i[:, None]`, then a 2-D masked tl.store at o's (batch, head) base.
    out = acc / l_i[:, None]
    o_base = o_ptr + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_q)
    # END EXERCISE


def flash_attention_forward_only(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                                 sm_scale: float | None = None, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T * sm_scale [+ causal mask]) v in one fused kernel; no autograd.

    Like F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale). q (B, H, Sq, D),
    k and v (B, H, Sk, D), any strides; fp16, bf16 or fp32; D in 16, 32, 64, 128. `sm_scale`
    defaults to 1/sqrt(D). `out` (B, H, Sq, D) in q's dtype, any strides, is written when given.
    """
    # Every check before any allocation or launch: TypeError or ValueError naming the argument.
    scale = check_attention_inputs(q, k, v, causal, sm_scale, None, dtypes=DTYPES, head_dims=HEAD_DIMS)
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    out = check_out(out, (B, H, Sq, D), q.dtype)
    if out is None:
        out = torch.empty((B, H, Sq, D), dtype=q.dtype, device=q.device)
    if B * H * Sq == 0:
        return out  # nothing to compute (and a grid of zero programs is not a valid launch)
    if Sk == 0:
        return out.zero_()  # no key at all: an empty sum, which torch's SDPA defines as 0
    # BEGIN EXERCISE [stage 1]: launch your kernel over (query blocks, B * H) with BLOCK on a GPU and SIM_BLOCK
    #   in the interpreter (runtime.pick), the strides of q, k, v and out, and dot_precision(q.dtype)
    # HINT: one program per BLOCK_M queries of one (batch, head): grid (cdiv(Sq, BLOCK_M), B * H); the
    #   kernel takes every stride, so no input is copied.
    # HINT: `flash_forward_kernel[grid](q, k, v, out, H, Sq, Sk, scale, *q.stride(), ..., CAUSAL=causal, ...)`
    config = runtime.pick(gpu=BLOCK, sim=SIM_BLOCK)
    grid = (triton.cdiv(Sq, config["BLOCK_M"]), B * H)
    flash_forward_kernel[grid](q, k, v, out, H, Sq, Sk, scale,
                               *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                               CAUSAL=causal, DOT_PRECISION=dot_precision(q.dtype), HEAD_DIM=D, **config)
    return out
    # END EXERCISE
