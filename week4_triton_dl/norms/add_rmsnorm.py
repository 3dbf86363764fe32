"""Residual add + RMSNorm in one pass: h = x + delta, y = rms_norm(h) * w, forward and backward.

A pre-norm transformer block ends each half with a residual add and starts the next half with a
norm of its result:

    h = x + attn(norm1(x))          # the residual stream, fp32 under autocast
    out = h + mlp(norm2(h))         # norm2 reads the h that was just written

Written as three ops (add, norm, then the bf16 cast autocast makes before the MLP's matmul),
each element of h crosses HBM 5 times in the forward: the add writes h (4 B), the norm reads it
(4 B) and writes y in fp32 (4 B), the cast reads y (4 B) and writes it in bf16 (2 B); with the
add's reads of x (4 B) and delta (2 B), 24 bytes per element. This kernel reads x and delta
once, writes h and y (already in the matmul's dtype): 12 bytes. The backward does the same to
the three ops' backward kernels (the norm's dx, autograd's sum of the two gradients that reach
h, the casts back): it reads dy, dh, h once and writes dx and, when delta has another dtype,
ddelta, in one pass. `torch.compile` makes exactly this fusion for a torch model (Inductor
fuses add + norm + cast into one generated kernel); a model built from custom ops gets it only
if an op does it, because Inductor cannot fuse across a custom op's boundary.

The op (`add_rms_norm`) returns (h, y):
* h = x + delta in torch's promoted dtype (fp32 + bf16 -> fp32), rounded as torch rounds it,
  and y is the RMSNorm of that rounded h (what `F.rms_norm(x + delta)` computes);
* y in `out_dtype` (default h's dtype): a model under autocast asks for the matmul's dtype;
* gradients: dh_total = dh + d(norm)/dh, then dx = dh_total (x's dtype), ddelta = dh_total
  (delta's dtype), dw = sum over rows of dy * h * rstd.
Rows up to MAX_N elements (one block); wider rows take the two-op path (add, then
`rmsnorm.rms_norm`), which handles any width. The backward's launch settings are RMSNorm's
tuned ones (`rmsnorm.backward_launch`): the same loop, two more streams. Its benchmark, as a
pre-norm block calls it: add_rmsnorm_bench.py.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course import ops
from course.gpu import triton, tl
from course.launch import launch, next_power_of_2
from week4_triton_dl.norms import plumbing as nc  # checks, rows, launch sizing: shared by every norm
from week4_triton_dl.norms import rmsnorm as rn
from week4_triton_dl.norms.column_sums import column_sums  # stage 2 of dw, shared with the other norms

DTYPES = nc.DTYPES
MAX_N = nc.MAX_N
NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)
# EXERCISE NOTE: Do the RMSNorm exercise first: the backward kernel is `rmsnorm_bwd_kernel`'s loop with two
#   more streams. The launchers (`_forward`, `_backward`: launch settings are RMSNorm's tuned ones), the
#   registered ops and the public `add_rms_norm` are given.


# ------------------------------------------------------------------------------------ kernels
@triton.jit
def add_rmsnorm_fwd_kernel(x_ptr, d_ptr, w_ptr, h_ptr, y_ptr, rstd_ptr, N, eps,
                           HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    offsets = row * N + cols
    # BEGIN EXERCISE: h = x + delta (both loaded masked, in ACC), rounded to h's dtype and stored: the norm
    #   reads that rounded h (back in ACC); rstd = 1 / sqrt(sum(h * h + (h - h)) / N + eps) (+ (h - h): a row
    #   holding an Inf comes out NaN, as rmsnorm._rstd); y = h * rstd (* w) stored in y's dtype; rstd stored
    # HINT: Fusing the residual add into the norm saves one round trip of h through memory, but the result
    #   must match the unfused pair: the norm has to see h rounded to its storage dtype, exactly as torch's
    #   add would leave it.
    # HINT: Load x and delta masked (other=0) in ACC and add; cast to h's dtype, store, cast back to ACC;
    #   then rmsnorm's rstd over the row (axis 0), y = h * rstd times w when HAS_WEIGHT; store y and the
    #   row's rstd.
    # HINT: `rstd = 1.0 / tl.sqrt(tl.sum(h * h + (h - h), axis=0) / N + eps)`: h - h is 0 except for Inf,
    #   where it is NaN, so an Inf row turns NaN as torch's does.
    h = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(ACC) + tl.load(d_ptr + offsets, mask=mask, other=0.0).to(ACC)
    h = h.to(h_ptr.dtype.element_ty)  # rounded once, as torch's add rounds it: the norm reads this h
    tl.store(h_ptr + offsets, h, mask=mask)
    h = h.to(ACC)
    # RMSNorm's rstd (rmsnorm._rstd): + (h - h) turns a row holding an Inf into NaN, as torch's CUDA kernel.
    rstd = 1.0 / tl.sqrt(tl.sum(h * h + (h - h), axis=0) / N + eps)
    y = h * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + row, rstd)
    # END EXERCISE


@triton.jit
def add_rmsnorm_bwd_kernel(dy_ptr, dh_ptr, h_ptr, w_ptr, rstd_ptr, dx_ptr, dd_ptr, dw_partial_ptr,
                           M, N, rows_per_program, HAS_WEIGHT: tl.constexpr, HAS_DH: tl.constexpr,
                           STORE_DD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           ACC: tl.constexpr, NUM_STAGES: tl.constexpr):
    """rmsnorm_bwd_kernel's loop, plus the gradient that reaches h from the residual stream (dh)
    and a second copy of the sum in delta's dtype (dd) when it differs from x's."""
    pid = tl.program_id(0).to(tl.int64)
    first = pid * rows_per_program
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    for step in tl.range(0, rows_per_program, BLOCK_M, num_stages=NUM_STAGES):
        rows = first + step + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        offsets = rows[:, None] * N + cols[None, :]
        h = tl.load(h_ptr + offsets, mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(ACC)
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        # BEGIN EXERCISE: rmsnorm_bwd_kernel's step on h: hhat = h * rstd, g = dy * w (dy without weight),
        #   c1 = mean(g * hhat) per row, dh_total = (g - hhat * c1) * rstd, plus dh (loaded masked, in ACC)
        #   when HAS_DH; stored in dx's dtype, and in dd's when STORE_DD; dw_acc += dy * hhat
        # HINT: RMSNorm's backward with y = hhat * w: the gradient wrt h removes the component along hhat
        #   (the rstd depends on h), then scales by rstd; the residual's own gradient simply adds.
        # HINT: Per row: hhat from h and rstd[:, None]; g = dy times w[None, :] when HAS_WEIGHT; c1 = row
        #   mean of g * hhat (axis=1, divide by N); dh_total = (g - hhat * c1) * rstd; add the loaded dh if
        #   HAS_DH; store to dx (and dd if STORE_DD); grow dw_acc.
        # HINT: `dh_total = (g - hhat * c1[:, None]) * rstd[:, None]` and `dw_acc += dy * hhat` (dw uses dy,
        #   not g).
        hhat = h * rstd[:, None]
        if HAS_WEIGHT:
            g = dy * w[None, :]
        else:
            g = dy
        c1 = tl.sum(hhat * g, axis=1) / N
        dh_total = (g - hhat * c1[:, None]) * rstd[:, None]
        if HAS_DH:  # the residual stream's own gradient: h is also the block's output
            dh_total += tl.load(dh_ptr + offsets, mask=mask, other=0.0).to(ACC)
        tl.store(dx_ptr + offsets, dh_total.to(dx_ptr.dtype.element_ty), mask=mask)
        if STORE_DD:
            tl.store(dd_ptr + offsets, dh_total.to(dd_ptr.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            dw_acc += dy * hhat
        # END EXERCISE
    if HAS_WEIGHT:
        tl.store(dw_partial_ptr + pid * N + cols, tl.sum(dw_acc, axis=0), mask=col_mask)


# ------------------------------------------------------------- the hot path (no checks here)
_PLANS: dict = {}


def _forward_plan(N, x_dtype, d_dtype, out_dtype, has_weight):
    key = (N, x_dtype, d_dtype, out_dtype, has_weight)
    plan = _PLANS.get(key)
    if plan is None:
        h_dtype = torch.promote_types(x_dtype, d_dtype)
        block = next_power_of_2(N)
        acc = nc.acc_type(torch.float64 if torch.float64 in (h_dtype, out_dtype) else h_dtype)
        plan = _PLANS[key] = (h_dtype, (has_weight, block, acc), dict(num_warps=nc.warps_for(block)), key)
    return plan


def _forward(x, delta, weight, eps, M, N, out_dtype):
    """(h, y, rstd) of contiguous (M, N) x and delta."""
    h_dtype, constexprs, options, key = _forward_plan(N, x.dtype, delta.dtype, out_dtype, weight is not None)
    h = torch.empty((M, N), dtype=h_dtype, device=x.device)
    y = torch.empty((M, N), dtype=out_dtype or h_dtype, device=x.device)
    rstd = torch.empty(M, dtype=nc.acc_dtype(h_dtype), device=x.device)
    if M == 0 or N == 0:
        return h, y, rstd.fill_(math.nan)
    launch(add_rmsnorm_fwd_kernel, (M,), key,
           (x, delta, x if weight is None else weight, h, y, rstd, N, eps, *constexprs), **options)
    return h, y, rstd


def _backward(dy, dh, h, rstd, weight, x_dtype, d_dtype, M, N):
    """(dx, ddelta, dw or None); dh may be None (h not used downstream); ddelta is dx when the dtypes agree."""
    has_weight = weight is not None
    dx = torch.empty((M, N), dtype=x_dtype, device=h.device)
    dd = dx if d_dtype == x_dtype else torch.empty((M, N), dtype=d_dtype, device=h.device)
    if M == 0 or N == 0:
        return dx, dd, (torch.zeros(N, dtype=weight.dtype, device=h.device) if has_weight else None)
    kernel, programs, rows_per_program, constexprs, options, plan_key = rn.backward_launch(M, N, h.dtype, has_weight)
    _, block_m, block, acc, stages = constexprs
    partial = torch.empty((programs, N), dtype=nc.acc_dtype(h.dtype), device=h.device) if has_weight else dx
    store_dd = dd is not dx
    key = (plan_key, dy.dtype, None if dh is None else dh.dtype, x_dtype, d_dtype, has_weight and weight.dtype)
    launch(add_rmsnorm_bwd_kernel, (programs,), key,
           (dy, h if dh is None else dh, h, weight if has_weight else h, rstd, dx, dd, partial, M, N, rows_per_program,
            has_weight, dh is not None, store_dd, block_m, block, acc, stages), **options)
    return dx, dd, (column_sums(partial, weight.dtype) if has_weight else None)


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
    return h, x.new_empty(x.shape, dtype=out_dtype or h_dtype), x.new_empty(x.shape[:1], dtype=nc.acc_dtype(h_dtype))


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
    # An unused output's gradient arrives as None, not as zeros to fill and read: a model's final norm
    # takes the last residual add and nothing reads its h (the kernel then skips the dh stream).
    ctx.set_materialize_grads(False)


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
        ctx.set_materialize_grads(False)  # an unused h's gradient: None, not zeros (see _setup_context)
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
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (the normalized one)")
    N = x.shape[-1]
    shape = (N,)
    nc.check_call(x, shape, weight, residual=delta)
    if out_dtype is not None and out_dtype not in DTYPES:
        raise TypeError(f"out_dtype must be one of {DTYPES} or None, got {out_dtype!r}")
    eps = rn.default_eps(torch.promote_types(x.dtype, delta.dtype)) if eps is None else nc.check_eps(eps)
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
    y = F.rms_norm(h, (h.shape[-1],), weight, eps)
    return h, (y if out_dtype is None else y.to(out_dtype))
