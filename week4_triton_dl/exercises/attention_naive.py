"""Exercise: attention the unfused way, scores -> softmax -> P @ V. Same names as
week4_triton_dl/attention_naive.py.

Check your work with `pytest tests/week4/test_attention_naive.py --impl=exercises`.
Without a GPU the kernels run in the Triton interpreter: `print` and pdb work inside them.

Given (imported from the solution, so the tests' reference and error model are the same for
everyone): the input checks (`check_attention_inputs`, `check_out`, `dot_precision`), the float64
reference `attention_reference`, its mask `allowed_keys` and the error model
`attention_error_bounds`. Yours: the two kernels and the three launchers.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401
from week4_triton_dl.attention_naive import (  # noqa: F401  (given)
    UNDERFLOW, UNIT_ROUNDOFF, allowed_keys, attention_error_bounds, attention_reference,
    check_attention_inputs, check_out, dot_precision, naive_scores_bytes, resolve_scale)
from week3_triton_kernels.softmax import softmax  # noqa: F401  (week 3's kernel: step 2)

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HEAD_DIMS = (16, 32, 64, 128)
SCORES_BLOCK = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4}
PV_BLOCK = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
SIM_BLOCK = {"BLOCK_M": 16, "BLOCK_N": 16}


@triton.jit
def scaled_masked_scores_kernel(q_ptr, k_ptr, s_ptr, key_len_ptr, n_heads, seq_q, seq_k, sm_scale,
                                stride_qb, stride_qh, stride_qs, stride_qd,
                                stride_kb, stride_kh, stride_ks, stride_kd,
                                CAUSAL: tl.constexpr, HAS_KEY_LENGTHS: tl.constexpr,
                                DOT_PRECISION: tl.constexpr, HEAD_DIM: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of S = (Q K^T) * scale for one (batch, head), -inf where masked."""
    # TODO: program_id(0) -> (tile row, tile column), program_id(1) -> b * n_heads + h.
    # Base pointers of this (b, h) in int64 (b * stride_qb can pass 2^31).
    # Load a [BLOCK_M, HEAD_DIM] tile of q and a [BLOCK_N, HEAD_DIM] tile of k (mask rows past
    # the sequence, other=0), s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale.
    # Keep key j for query i when j < n_keys (n_keys = seq_k, or key_lengths[b] clamped to
    # [0, seq_k] when HAS_KEY_LENGTHS) and, if CAUSAL, j <= i: tl.where(keep, s, -inf).
    # Store into s_ptr + bh * seq_q * seq_k + i * seq_k + j (S is contiguous), masked.
    pass


@triton.jit
def probs_times_values_kernel(p_ptr, v_ptr, o_ptr, key_len_ptr, n_heads, seq_q, seq_k,
                              stride_vb, stride_vh, stride_vs, stride_vd,
                              stride_ob, stride_oh, stride_os, stride_od,
                              HAS_KEY_LENGTHS: tl.constexpr, DOT_PRECISION: tl.constexpr,
                              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program per BLOCK_M rows of O = P @ V, walking the keys in BLOCK_N steps."""
    # TODO: acc = zeros [BLOCK_M, HEAD_DIM] fp32; for start in range(0, n_keys, BLOCK_N): load a P
    # tile (columns < n_keys only: a fully masked row's softmax is NaN and must not be read),
    # round it to v's dtype and tl.dot it with the V tile into acc. Store acc in o's dtype.
    pass


def scaled_masked_scores(q, k, causal=False, sm_scale=None, *, key_lengths=None, out=None):
    """Step 1: S = (q @ k^T) * sm_scale as (B, H, Sq, Sk) float32, -inf where a key is masked."""
    raise NotImplementedError("not implemented yet: scaled_masked_scores (week4 exercise)")


def probs_times_values(p, v, *, key_lengths=None, out=None):
    """Step 3: O = P @ V; P (B, H, Sq, Sk) float32, V (B, H, Sk, D); O in v's dtype."""
    raise NotImplementedError("not implemented yet: probs_times_values (week4 exercise)")


def attention_naive(q, k, v, causal=False, sm_scale=None, *, key_lengths=None, out=None):
    """Step 2: scores, softmax(scores, out=scores) in place, then P @ V."""
    raise NotImplementedError("not implemented yet: attention_naive (week4 exercise)")
