"""The norm's scale on the way in: RMSNorm applied to A's tiles as the GEMM loads them.

A pre-norm block feeds norm(x) straight into a matmul (attention's QKV, the MLP's up projection):

    y = rms_norm(x) * w_norm          # written to HBM, read back by the matmul
    out = y @ W^T

RMSNorm is a per-row scale (rstd, one number per row) times a per-column scale (w_norm, one per
feature): y[m, k] = x[m, k] * rstd[m] * w_norm[k]. Both factors are cheap to apply to an A tile in
registers, between its load and the `tl.dot`: the tile's rows take rstd[rows], its K columns
w_norm[k0:k0 + BLOCK_K]. So the normalized y is never written. What the GEMM cannot do is compute
rstd itself: a tile of A sees BLOCK_K of the row's K values, and rstd needs the whole row before
the first product. So the op is two launches:

1. `row_rstd_kernel`: rstd of every row, one pass over x (reads M*K, writes M floats);
2. the GEMM with NORM on (fused_linear/kernel.py), reading x, rstd and w_norm, whose A loads
   go through `normed_a_tile` below.

Bytes (x of M x K in fp32 under autocast, the matmul in bf16): unfused, the norm reads x (4 B per
element), writes y in fp32 (4 B), autocast's cast reads y (4 B) and writes bf16 (2 B), the GEMM reads
it (2 B): 16 B per element of x. Fused: the rstd pass reads x (4 B), the GEMM reads x (4 B): 8 B, and
the GEMM's A loads are twice as wide (fp32), which L2 absorbs at K = 768 (A is re-read N / BLOCK_N
times from L2 anyway). At 8192 x 768 that is 50 MB against 100 MB per norm, ~17 us at 3 TB/s.

The rounding is the unfused pair's: y = (x * rstd) * w_norm in fp32, rounded once to W's dtype,
which is what autocast hands the matmul after F.rms_norm. rstd as torch computes it, with a row
holding an Inf coming out NaN (week 4's rmsnorm._rstd: + (x - x)).
"""
from __future__ import annotations

import torch

from course.gpu import triton, tl

RSTD_BLOCK_M = 16   # rows per program: 8192 rows -> 512 programs
RSTD_BLOCK_K = 256  # columns per step of the row loop (any K: the loop walks the row)


@triton.jit
def row_rstd_kernel(x_ptr, rstd_ptr, M, K, stride_xm, stride_xk, eps,
                    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """rstd[m] = 1 / sqrt(mean(x[m, :]^2) + eps) in fp32, BLOCK_M rows per program."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    cols = tl.arange(0, BLOCK_K)
    total = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + cols
        mask = row_ok[:, None] & (kk[None, :] < K)
        x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xm + kk[None, :] * stride_xk,
                    mask=mask, other=0.0).to(tl.float32)
        # + (x - x): 0 for a finite x, NaN for an Inf, so a row holding an Inf gets rstd NaN (torch's
        # result) instead of 1/sqrt(Inf) = 0, which would silently zero the row.
        total += x * x + (x - x)
    rstd = 1.0 / tl.sqrt(tl.sum(total, axis=1) / K + eps)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)


@triton.jit
def normed_a_tile(a, rstd, nw_ptr, offs_k, k_mask, OUT_DTYPE: tl.constexpr):
    """An A tile (BLOCK_M x BLOCK_K, loaded masked along K) as RMSNorm's output in OUT_DTYPE: each row
    times its rstd (BLOCK_M fp32, loaded once per tile), each column times w_norm[offs_k]."""
    w = tl.load(nw_ptr + offs_k, mask=k_mask, other=0.0).to(tl.float32)
    y = (a.to(tl.float32) * rstd[:, None]) * w[None, :]
    return y.to(OUT_DTYPE)


def row_rstd(x: torch.Tensor, eps: float) -> torch.Tensor:
    """rstd (M,) fp32 of a checked 2-D x (any strides): the prologue's per-row factor."""
    M, K = x.shape
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    if M:
        row_rstd_kernel[(triton.cdiv(M, RSTD_BLOCK_M),)](x, rstd, M, K, x.stride(0), x.stride(1), eps,
                                                          BLOCK_M=RSTD_BLOCK_M, BLOCK_K=RSTD_BLOCK_K, num_warps=4)
    return rstd


def row_rstd_reference(x: torch.Tensor, eps: float) -> torch.Tensor:
    """rstd in float64: 1 / sqrt(mean(x^2) + eps), per row."""
    return torch.rsqrt(x.double().pow(2).mean(-1) + eps)


def normed_reference(x: torch.Tensor, norm_weight: torch.Tensor, eps: float, dtype: torch.dtype) -> torch.Tensor:
    """What the unfused pair hands the matmul: F.rms_norm(x, w_norm) in x's dtype, cast to `dtype`."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), norm_weight, eps).to(dtype)
