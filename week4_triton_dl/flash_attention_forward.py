"""FlashAttention's forward alone, the simplest version: one kernel, online softmax, no backward.

    O = softmax(Q K^T * scale + causal mask) V        Q: (B, H, Sq, D), K and V: (B, H, Sk, D)

Read this before flash_attention.py: it is the same algorithm with nothing else in the way. Rung 2
of the attention ladder (`python -m course rung attention 2` checks it against torch and times it;
`python -m course rung attention` lists the rungs): rung 1, attention_naive.py, writes the
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

What it leaves out, each added by flash_attention.py (rung 3) for a reason written there:
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

from course import runtime  # runtime before triton: chooses the GPU or the Triton interpreter

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

from week4_triton_dl.attention_naive import (  # noqa: E402
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
    # BEGIN EXERCISE: one program per (block of BLOCK_M queries, b * n_heads + h): load the Q tile once
    #   (rows past seq_q as 0); m = -inf, l = 0, acc = 0 in fp32; for each block of BLOCK_N keys up to
    #   seq_k (causal: up to the block's last query): s = q k^T * sm_scale, -inf where the key is past
    #   seq_k or (causal) after the query; m_new = max(m, rowmax(s)); p = exp(s - m_new); rescale l and acc
    #   by exp(m - m_new) before adding rowsum(p) and p @ v (p rounded to v's dtype); store acc / l
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
    # Causal: no query of this block sees a key past its last row, so the loop stops there (the
    # blocks right of the diagonal are skipped, not masked: half the work at Sq = Sk).
    hi = seq_k
    if CAUSAL:
        hi = tl.minimum((pid_m + 1) * BLOCK_M, seq_k)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        # Keys past the end load as 0: whatever memory holds there (even NaN) never enters a sum.
        k = tl.load(k_base + cols[:, None] * stride_ks + offs_d[None, :] * stride_kd,
                    mask=cols[:, None] < seq_k, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :] * stride_vd,
                    mask=cols[:, None] < seq_k, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale
        keep = cols[None, :] < seq_k
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        # where(), not adding a -inf bias: a NaN score of a hidden key is dropped, not spread.
        s = tl.where(keep, s, -float("inf"))
        # Key 0 is visible to every row (causal or not), so after the first block m is finite
        # and m_i - m_new below is never -inf - (-inf). (flash_attention.py, whose key padding
        # can hide every key of a row, has to guard it.)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])           # hidden keys: exp(-inf) = 0
        alpha = tl.exp(m_i - m_new)              # the rescale of everything summed so far
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        # P is rounded to V's dtype so the tensor cores take it; the sum stays fp32.
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_new
    # One division per row at the end, not one per block: l only grows, the rescaling is exact.
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
    # BEGIN EXERCISE: launch your kernel over (query blocks, B * H) with BLOCK on a GPU and SIM_BLOCK in the
    #   interpreter (runtime.pick), the strides of q, k, v and out, and dot_precision(q.dtype)
    config = runtime.pick(gpu=BLOCK, sim=SIM_BLOCK)
    grid = (triton.cdiv(Sq, config["BLOCK_M"]), B * H)
    flash_forward_kernel[grid](q, k, v, out, H, Sq, Sk, scale,
                               *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                               CAUSAL=causal, DOT_PRECISION=dot_precision(q.dtype), HEAD_DIM=D, **config)
    return out
    # END EXERCISE
