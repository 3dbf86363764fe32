"""The fused linears as one registered PyTorch op: fake implementation, autograd, public entries.

`torch.ops.course.fused_linear(x, weight, bias, residual, norm_weight, eps, swiglu, store_pre)` is
launch.py's `fused_linear` as a `torch.library.custom_op`: Dynamo records one node per call (no graph
break), the fake implementation gives torch.compile shapes and dtypes without a launch, and
`register_autograd` gives it a backward. In eager mode the entries call the same forward and backward
through a plain autograd.Function (`FusedLinearFunction`: less host time per call, course/ops.py), or
the launch alone when nothing needs a gradient. The public entries are that op with its switches
set, one per fusion the capstone uses:

    linear_bias(x, W, b)                 x W^T + b
    linear_residual(x, W, residual)      residual + x W^T           (attention's proj, the MLP's down)
    linear_swiglu(x, W_gate_up)          silu(x W_g^T) * (x W_u^T)  (the MLP's up)
    norm_linear(x, w_norm, W, eps)       rms_norm(x) W^T            (QKV; swiglu=True: the MLP's up)

The backward, and why it is mostly cuBLAS. Forward, the fusion saves passes over activations; the
backward of a linear is two GEMMs (dA = dZ W, dW = dZ^T A) whose operands must be in memory anyway,
so its gain is only in the element-wise work around them, which is small, separate kernels reading
what the GEMMs need anyway:
* SwiGLU: dZ = [dg | du] from dh and the saved [g | u] by week 4's packed SwiGLU backward (one
  Triton pass, itself a registered op), then ONE GEMM each for dx and dW (the stacked weight).
* residual: d(residual) = dout, passed through; dZ = dout (cast to W's dtype for the GEMMs).
* norm prologue: A = rms_norm(x) is not stored; the backward rebuilds it for dW = dZ^T A (one
  element-wise pass, torch ops: Inductor fuses it under torch.compile), dA = dZ W by cuBLAS, then
  week 4's RMSNorm backward kernel (`rms_norm_backward` op) for dx and d(w_norm) from dA, x, rstd.
* bias: d(bias) = dZ summed over rows in fp32.
cuBLAS is the honest choice for the backward GEMMs: their shapes (dW's K = tokens = 8192) are ones
the fused kernel was not tuned for, and nothing can be fused into them that is not already.

Autocast: under torch.autocast the op is not cast by torch (a custom op has no autocast rule), so
the entries do what F.linear would: W (and x, except for the norm prologue, which reads the fp32
residual stream and rounds after the scale) cast to the autocast dtype. The residual keeps its dtype.
"""
from __future__ import annotations

import torch

from course import ops
from week4_triton_dl import swiglu as swiglu_module
from week4_triton_dl.fused_linear import launch
from week4_triton_dl.norms import rmsnorm

NAMESPACE = ops.namespace(__name__)


@torch.library.custom_op(f"{NAMESPACE}::fused_linear", mutates_args=())
def fused_linear_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
                    norm_weight: torch.Tensor | None, eps: float, swiglu: bool,
                    store_pre: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, pre, rstd) of 2-D x (see launch.fused_linear); pre and rstd are empty when not made
    (an op returns tensors, not None)."""
    return _forward(x, weight, bias, residual, norm_weight, eps, swiglu, store_pre)


def _forward(x, weight, bias, residual, norm_weight, eps, swiglu, store_pre):
    r = launch.fused_linear(x, weight, bias=bias, residual=residual, norm_weight=norm_weight, eps=eps,
                            swiglu=swiglu, store_pre=store_pre)
    return (r.out, r.pre if r.pre is not None else x.new_empty(0, dtype=weight.dtype),
            r.rstd if r.rstd is not None else x.new_empty(0, dtype=torch.float32))


@fused_linear_op.register_fake
def _fused_linear_fake(x, weight, bias, residual, norm_weight, eps, swiglu, store_pre):
    M = x.shape[0]
    N = weight.shape[0] // 2 if swiglu else weight.shape[0]
    out = x.new_empty((M, N), dtype=residual.dtype if residual is not None else weight.dtype)
    pre = x.new_empty((M, 2 * N) if store_pre else (0,), dtype=weight.dtype)
    return out, pre, x.new_empty((M,) if norm_weight is not None else (0,), dtype=torch.float32)


def _setup_context(ctx, inputs, output):
    _save(ctx, inputs, output)
    ctx.mark_non_differentiable(output[1], output[2])


def _save(ctx, inputs, output):
    x, weight, bias, residual, norm_weight, eps, swiglu, store_pre = inputs
    _, pre, rstd = output
    ctx.save_for_backward(x, weight, norm_weight, pre, rstd)
    ctx.info = (bias is not None, bias.dtype if bias is not None else None,
                residual.dtype if residual is not None else None, swiglu)


def _normed(x, norm_weight, rstd, dtype):
    """rms_norm(x) as the prologue made it: (x * rstd) * w_norm in fp32, rounded to `dtype`."""
    return ((x.float() * rstd[:, None]) * norm_weight.float()).to(dtype)


def _backward(ctx, dout, _dpre, _drstd):
    x, weight, norm_weight, pre, rstd = ctx.saved_tensors
    has_bias, bias_dtype, residual_dtype, swiglu = ctx.info
    need_x, need_w, need_b, need_r, need_nw = (ctx.needs_input_grad[i] for i in range(5))
    if swiglu:
        if pre.numel() == 0 and x.shape[0] and weight.shape[0]:
            raise RuntimeError("fused_linear: the SwiGLU backward needs [g | u]: call with store_pre=True")
        dz = swiglu_module.swiglu_packed_backward_op(dout.to(pre.dtype), pre)  # [dg | du], (M, 2F)
    else:
        dz = dout.to(weight.dtype)
    d_residual = dout.to(residual_dtype) if residual_dtype is not None and need_r else None
    d_bias = dz.sum(0, dtype=torch.float32).to(bias_dtype) if has_bias and need_b else None
    a = x if norm_weight is None else _normed(x, norm_weight, rstd, weight.dtype)
    d_weight = dz.t() @ a if need_w else None
    dx = d_norm_weight = None
    if need_x or need_nw:
        da = dz @ weight
        if norm_weight is None:
            dx = da
        else:
            x_rows = x.contiguous()
            dx, d_norm_weight = rmsnorm.rms_norm_backward_op(da.to(x.dtype), x_rows, rstd, norm_weight.contiguous())
    return dx, d_weight, d_bias, d_residual, d_norm_weight if need_nw else None, None, None, None


fused_linear_op.register_autograd(_backward, setup_context=_setup_context)


class FusedLinearFunction(torch.autograd.Function):
    """The same forward and backward for eager mode, without a custom op's dispatch (course/ops.py: the
    registered op costs host time per call that a plain autograd.Function does not)."""

    @staticmethod
    def forward(ctx, x, weight, bias, residual, norm_weight, eps, swiglu, store_pre):
        output = _forward(x, weight, bias, residual, norm_weight, eps, swiglu, store_pre)
        _save(ctx, (x, weight, bias, residual, norm_weight, eps, swiglu, store_pre), output)
        return output[0]

    @staticmethod
    def backward(ctx, dout):
        return _backward(ctx, dout, None, None)


# --------------------------------------------------------------------------------- public entries
def _autocast_dtype(x: torch.Tensor):
    return torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else None


def _call(x, weight, *, bias=None, residual=None, norm_weight=None, eps=1e-5, swiglu=False):
    """Rows of x (..., K) through the op; returns out shaped (..., N)."""
    if not isinstance(x, torch.Tensor) or x.dim() < 1:
        raise TypeError(f"x must be a tensor of at least one dimension (..., in_features), got {type(x).__name__}")
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    low = _autocast_dtype(x)
    if low is not None:  # what F.linear does under autocast (see the module docstring)
        weight = weight.to(low)
        bias = bias.to(low) if bias is not None else None
        x = x if norm_weight is not None else x.to(low)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    r2 = residual.reshape(-1, residual.shape[-1]) if isinstance(residual, torch.Tensor) else residual
    store_pre = swiglu and torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in (x, weight, norm_weight))
    with torch.autocast(x.device.type, enabled=False):
        if ops.compiling():  # torch.compile: the registered op, one node in the graph
            out = fused_linear_op(x2, weight, bias, r2, norm_weight, float(eps), swiglu, store_pre)[0]
        elif torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                             for t in (x2, weight, bias, r2, norm_weight)):
            out = FusedLinearFunction.apply(x2, weight, bias, r2, norm_weight, float(eps), swiglu, store_pre)
        else:  # nothing needs a gradient: the launch alone
            out = launch.fused_linear(x2, weight, bias=bias, residual=r2, norm_weight=norm_weight, eps=float(eps),
                                      swiglu=swiglu).out
    return out.view(*lead, out.shape[-1])


def linear_bias(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """F.linear(x, weight, bias), the bias in the GEMM's epilogue."""
    return _call(x, weight, bias=bias)


def linear_residual(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
    """residual + F.linear(x, weight, bias) in the residual's dtype, the add in the GEMM's epilogue."""
    return _call(x, weight, bias=bias, residual=residual)


def linear_swiglu(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """silu(x W_g^T) * (x W_u^T) for weight = [W_g; W_u] (2F, K): one GEMM, only the product written."""
    return _call(x, weight, swiglu=True)


def norm_linear(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5,
                swiglu: bool = False) -> torch.Tensor:
    """F.linear(F.rms_norm(x, (K,), norm_weight, eps), weight), the norm applied to A as it is loaded;
    swiglu=True: then silu(g) * u as linear_swiglu."""
    return _call(x, weight, norm_weight=norm_weight, eps=eps, swiglu=swiglu)


# ------------------------------------------------------------------- the unfused torch sequences
def linear_swiglu_torch(x, weight):
    """What the model does without the fusion: the GEMM writes [g | u], then silu(g) * u."""
    g, u = torch.nn.functional.linear(x, weight).chunk(2, dim=-1)
    return torch.nn.functional.silu(g) * u


def linear_residual_torch(x, weight, residual, bias=None):
    return residual + torch.nn.functional.linear(x, weight, bias)


def norm_linear_torch(x, norm_weight, weight, eps=1e-5, swiglu=False):
    y = torch.nn.functional.linear(torch.nn.functional.rms_norm(x, (x.shape[-1],), norm_weight, eps), weight)
    if swiglu:
        g, u = y.chunk(2, dim=-1)
        return torch.nn.functional.silu(g) * u
    return y
