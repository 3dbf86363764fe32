"""Exercise: residual add + RMSNorm in one pass, forward and backward.

Same names as week4_triton_dl/add_rmsnorm.py; read its docstring first (why the fusion saves
half the bytes a pre-norm block moves around its norms). Check your work with
`pytest tests/week4/test_add_rmsnorm.py --impl=exercises`. Do the RMSNorm exercise first: the
backward kernel is `rmsnorm_bwd_kernel`'s loop with two more streams.

YOUR PART: the two kernels and the two hot-path launchers `_forward` and `_backward`.
GIVEN: the registered ops (fake functions, autograd formula), `AddRMSNormFunction` and the
public `add_rms_norm` (its checks and its two-op path for rows wider than MAX_N).
"""
from __future__ import annotations

import math

import torch

from course import ops, runtime  # runtime before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.launch import launch  # noqa: F401
from week4_triton_dl import layernorm as ln
from week4_triton_dl import rmsnorm as rn

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

DTYPES = ln.DTYPES
MAX_N = ln.MAX_N
NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)


# ------------------------------------------------------------------------------------ kernels
@triton.jit
def add_rmsnorm_fwd_kernel(x_ptr, d_ptr, w_ptr, h_ptr, y_ptr, rstd_ptr, N, eps,
                           HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """One program per row: h = x + delta, rounded to h's dtype and stored; y = h * rstd (* w) in y's
    dtype; rstd stored. A row holding an Inf or a NaN comes out NaN (RMSNorm's + (h - h) trick)."""
    # TODO
    pass


@triton.jit
def add_rmsnorm_bwd_kernel(dy_ptr, dh_ptr, h_ptr, w_ptr, rstd_ptr, dx_ptr, dd_ptr, dw_partial_ptr,
                           M, N, rows_per_program, HAS_WEIGHT: tl.constexpr, HAS_DH: tl.constexpr,
                           STORE_DD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           ACC: tl.constexpr, NUM_STAGES: tl.constexpr):
    """rmsnorm_bwd_kernel's loop on h, plus dh (when HAS_DH) added to the norm's dx, stored in
    dx's dtype and, when STORE_DD, also in dd's; dw partials one row per program."""
    # TODO
    pass


# ------------------------------------------------------------- the hot path (no checks here)
def _forward(x, delta, weight, eps, M, N, out_dtype):
    """(h, y, rstd) of contiguous (M, N) x and delta: h in torch.promote_types(x.dtype, delta.dtype),
    y in out_dtype (or h's), rstd fp32 (fp64 for fp64). No checks: the callers made them."""
    raise NotImplementedError("not implemented yet: _forward (week4 exercise)")


def _backward(dy, dh, h, rstd, weight, x_dtype, d_dtype, M, N):
    """(dx, ddelta, dw or None); dh may be None; ddelta may be dx itself when the dtypes agree.
    Launch settings: `rn.backward_launch(M, N, h.dtype, weight is not None)` (RMSNorm's tuned ones)."""
    raise NotImplementedError("not implemented yet: _backward (week4 exercise)")


# ------------------------------------------------------------------- the op torch.compile sees
@torch.library.custom_op(f"{NAMESPACE}::add_rms_norm", mutates_args=())
def add_rms_norm_op(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor | None, eps: float,
                    out_dtype: torch.dtype | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(h, y, rstd) of contiguous (M, N) x and delta (see add_rms_norm)."""
    return _forward(x, delta, weight, eps, x.shape[0], x.shape[1], out_dtype)


@add_rms_norm_op.register_fake
def _add_rms_norm_fake(x, delta, weight, eps, out_dtype):
    h_dtype = torch.promote_types(x.dtype, delta.dtype)
    h = x.new_empty(x.shape, dtype=h_dtype)
    return h, x.new_empty(x.shape, dtype=out_dtype or h_dtype), x.new_empty(x.shape[:1], dtype=ln._acc_torch(h_dtype))


@torch.library.custom_op(f"{NAMESPACE}::add_rms_norm_backward", mutates_args=())
def add_rms_norm_backward_op(dy: torch.Tensor, dh: torch.Tensor | None, h: torch.Tensor, rstd: torch.Tensor,
                             weight: torch.Tensor | None, x_dtype: torch.dtype,
                             d_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, ddelta, dw); an op never returns one tensor twice, so ddelta is a copy when the dtypes agree,
    and dw is empty without a weight."""
    dx, dd, dw = _backward(dy.contiguous(), None if dh is None else dh.contiguous(), h, rstd, weight, x_dtype,
                           d_dtype, h.shape[0], h.shape[1])
    return dx, (dd.clone() if dd is dx else dd), (dw if dw is not None else h.new_empty(0))


@add_rms_norm_backward_op.register_fake
def _add_rms_norm_backward_fake(dy, dh, h, rstd, weight, x_dtype, d_dtype):
    return (h.new_empty(h.shape, dtype=x_dtype), h.new_empty(h.shape, dtype=d_dtype),
            torch.empty_like(weight) if weight is not None else h.new_empty(0))


def _setup_context(ctx, inputs, output):
    x, delta, weight, _, _ = inputs
    h, _, rstd = output
    ctx.save_for_backward(h, weight, rstd)
    ctx.dtypes = (x.dtype, delta.dtype)
    ctx.mark_non_differentiable(rstd)


def _backward_formula(ctx, dh, dy, _drstd):
    h, weight, rstd = ctx.saved_tensors
    if dy is None:
        dy = torch.zeros_like(h)
    dx, dd, dw = add_rms_norm_backward_op(dy, dh, h, rstd, weight, *ctx.dtypes)
    return dx, dd, (dw if weight is not None else None), None, None


add_rms_norm_op.register_autograd(_backward_formula, setup_context=_setup_context)


# ------------------------------------------------------------------- the op eager mode calls
class AddRMSNormFunction(torch.autograd.Function):
    """(h, y) = (x + delta, rms_norm(x + delta) * w) for contiguous x, delta of M rows of N."""

    @staticmethod
    def forward(ctx, x, delta, weight, eps, M, N, out_dtype):
        h, y, rstd = _forward(x, delta, weight, eps, M, N, out_dtype)
        ctx.save_for_backward(h, weight, rstd)
        ctx.info = (x.dtype, delta.dtype, M, N, x.shape)
        return h.view(x.shape), y.view(x.shape)

    @staticmethod
    def backward(ctx, dh, dy):
        h, weight, rstd = ctx.saved_tensors
        x_dtype, d_dtype, M, N, shape = ctx.info
        if dy is None:  # only h was used: the norm passes no gradient
            dy = torch.zeros_like(h)
        dx, dd, dw = _backward(dy.contiguous(), None if dh is None else dh.contiguous(), h, rstd, weight,
                               x_dtype, d_dtype, M, N)
        return dx.view(shape), dd.view(shape), dw, None, None, None, None


# ----------------------------------------------------------------------------- public entry
def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor | None = None,
                 eps: float | None = None, out_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(h, y) = (x + delta, F.rms_norm(x + delta, (N,), weight, eps)), y in `out_dtype` (default h's).

    x and delta: the same shape (..., N), floating dtypes DTYPES, one device; weight (N,) or None.
    Differentiable in x, delta and weight; compilable (the registered op
    `torch.ops.course.add_rms_norm`). Rows wider than MAX_N take the two-op path.
    """
    if not (isinstance(x, torch.Tensor) and isinstance(delta, torch.Tensor)):
        raise TypeError(f"x and delta must be tensors, got {type(x).__name__} and {type(delta).__name__}")
    if x.shape != delta.shape:
        raise ValueError(f"x and delta must have one shape (a residual add), got {tuple(x.shape)} and "
                         f"{tuple(delta.shape)}")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (the normalized one)")
    N = x.shape[-1]
    shape = (N,)
    ln.check_call(x, shape, weight)
    ln.check_call(delta, shape)
    if delta.get_device() != x.get_device():
        validate.same_device(x=x, delta=delta)
    if out_dtype is not None and out_dtype not in DTYPES:
        raise TypeError(f"out_dtype must be one of {DTYPES} or None, got {out_dtype!r}")
    eps = rn.default_eps(torch.promote_types(x.dtype, delta.dtype)) if eps is None else ln._check_eps(eps)
    if N > MAX_N:  # wider than a block: the two ops (any width)
        h = x + delta
        y = rn.rms_norm(h, shape, weight, eps)
        return h, (y if out_dtype is None else y.to(out_dtype))
    if ops.compiling():
        h, y, _ = add_rms_norm_op(x.reshape(-1, N), delta.reshape(-1, N), weight, eps, out_dtype)
        return h.view(x.shape), y.view(x.shape)
    x, delta = x.contiguous(), delta.contiguous()
    weight = weight if weight is None else weight.contiguous()
    M = x.numel() // N if N else math.prod(x.shape[:-1])
    if ops.needs_grad(x, delta, weight):
        return AddRMSNormFunction.apply(x, delta, weight, eps, M, N, out_dtype)
    h, y, _ = _forward(x, delta, weight, eps, M, N, out_dtype)
    return h.view(x.shape), y.view(x.shape)


def add_rms_norm_reference(x, delta, weight=None, eps=None, out_dtype=None):
    """What the op computes, in torch ops: the add, torch's RMSNorm, the cast."""
    h = x + delta
    y = torch.nn.functional.rms_norm(h, (h.shape[-1],), weight, eps)
    return h, (y if out_dtype is None else y.to(out_dtype))
