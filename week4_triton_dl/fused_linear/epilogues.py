"""What a fused linear does to its fp32 accumulator before the one store: bias, SwiGLU, residual.

Week 3's matmul (matmul.py, rung 6) already applies bias and an activation to the accumulator tile
while it is in registers. The capstone's block needs two more epilogues, each saving a whole pass
over an activation in HBM:

* residual add, out = residual + x @ W^T: attention's output projection and the MLP's down
  projection end in the residual stream. Unfused, the GEMM writes its product (2 B per element in
  bf16) and the add reads it back with the residual (4 B fp32) and writes the sum (4 B): fused, the
  epilogue reads the residual tile and writes the sum, 8 B instead of 12 B per element, and one launch.
  The sum is formed in fp32 from the unrounded product, then rounded once to the residual's dtype.
* SwiGLU, h = silu(x W_g^T) * (x W_u^T), with W_g and W_u stacked in one (2F, K) weight as the
  model stores them ([gate; up]: the capstone's MLP `up` layer). Each program holds TWO accumulators,
  the gate tile (W rows n0..n0+BLOCK_N) and the up tile (rows F+n0..), fed by the same A tile per K
  step (a dual GEMM, week 4's fused_mlp.py), and writes h only: N x F instead of N x 2F, and no
  separate SwiGLU pass (which reads 2F and writes F per row). For training the backward needs g and
  u: STORE_PRE writes them, side by side as [g | u] in one (M, 2F) buffer, the layout week 4's packed
  SwiGLU backward reads (swiglu.swiglu_packed_backward).
* bias, out = x @ W^T + b (the course's GELU MLP and any nn.Linear with a bias).

Order when several are on (as a model would write them): (acc + bias), then SwiGLU, then + residual.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course.gpu import triton, tl


@triton.jit
def swiglu_epilogue(acc_g, acc_u, pre_ptr, rows, cols, mask, stride_pm, F_COLS, STORE_PRE: tl.constexpr):
    """h = silu(g) * u on the two fp32 accumulators; with STORE_PRE also g and u, rounded to the
    buffer's dtype, at (row, col) and (row, F_COLS + col) of the (M, 2 F_COLS) buffer `pre`."""
    if STORE_PRE:
        pre = pre_ptr + rows[:, None].to(tl.int64) * stride_pm + cols[None, :]
        tl.store(pre, acc_g.to(pre_ptr.dtype.element_ty), mask=mask)
        tl.store(pre + F_COLS, acc_u.to(pre_ptr.dtype.element_ty), mask=mask)
    return acc_g / (1.0 + tl.exp(-acc_g)) * acc_u


@triton.jit
def bias_epilogue(acc, bias_ptr, cols, N):
    """acc + bias[cols] (fp32), the bias masked to N."""
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    return acc + bias[None, :]


@triton.jit
def residual_epilogue(acc, res_ptr, rows, cols, mask, stride_rm, stride_rn):
    """acc + residual[rows, cols] in fp32 (the residual in any dtype and strides)."""
    res = tl.load(res_ptr + rows[:, None].to(tl.int64) * stride_rm + cols[None, :] * stride_rn, mask=mask, other=0.0)
    return acc + res.to(tl.float32)


# ----------------------------------------------------------------------------------- references
def swiglu_reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """silu(x W_g^T) * (x W_u^T) in float64 (weight = [W_g; W_u], (2F, K)), rounded once to x's dtype."""
    g, u = (x.double() @ weight.double().t()).chunk(2, dim=-1)
    return (F.silu(g) * u).to(weight.dtype)


def residual_reference(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                       bias: torch.Tensor | None = None) -> torch.Tensor:
    """residual + x W^T (+ bias) in float64, rounded once to the residual's dtype."""
    acc = x.double() @ weight.double().t()
    if bias is not None:
        acc = acc + bias.double()
    return (residual.double() + acc).to(residual.dtype)


def linear_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x W^T (+ bias) in float64, rounded once to the weight's dtype."""
    acc = x.double() @ weight.double().t()
    return (acc if bias is None else acc + bias.double()).to(weight.dtype)
