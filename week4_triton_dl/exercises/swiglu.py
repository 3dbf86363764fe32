"""Exercise: SwiGLU, y = silu(a) * b, forward and backward fused in Triton, as a PyTorch op.

Same names as week4_triton_dl/swiglu.py. Check your work with
`pytest tests/week4/test_swiglu.py --impl=exercises`.

You write: the two kernels, `_launch_forward` / `_launch_backward` (the unchecked hot path:
launch settings cached per shape, the grid, the launch) and the four validated launchers
(`swiglu_forward`, `swiglu_backward`, `swiglu_packed_forward`, `swiglu_packed_backward`).

Given: the input checks, `_as_rows` (a view the kernels read in place, else a copy),
`_forward` / `_backward` / `_packed_forward` / `_packed_backward` (allocate the outputs, then
call your launches), the registered ops torch.compile sees (`swiglu_op`, `swiglu_packed_op`
and their backward ops), the autograd Functions eager mode runs, the public entries `swiglu` /
`swiglu_packed` and the torch references. Read them beside swiglu.py's second half.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course import ops, runtime  # runtime before triton: GPU or interpreter
from course import validate
from week4_triton_dl.layernorm import next_power_of_2  # noqa: F401  plain Python, for your launch plans

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TILE = 2048
NAMESPACE = ops.namespace(__name__)  # "course_exercises": apart from the solution's ops


@triton.jit
def swiglu_fwd_kernel(a_ptr, b_ptr, y_ptr, M, N, stride_a, stride_b, stride_y,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """A [BLOCK_M, BLOCK_N] tile: y = a * sigmoid(a) * b, rows addressed through their strides."""
    # TODO: a 1-D grid, column blocks fastest (program p: row block p // cdiv(N, BLOCK_N), column
    # block p % cdiv(N, BLOCK_N)); s = 1 / (1 + exp(-a)) in ACC; store (a * s) * b.
    pass


@triton.jit
def swiglu_bwd_kernel(dy_ptr, a_ptr, b_ptr, da_ptr, db_ptr, M, N,
                      stride_dy, stride_a, stride_b, stride_da, stride_db,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """db = dy * silu(a); da = dy * b * s * (1 + a * (1 - s)), s = sigmoid(a) recomputed."""
    # TODO
    pass


def _launch_forward(a2, b2, y2) -> None:
    """y2 = silu(a2) * b2 for (M, N) tensors with a contiguous last dimension (rows any stride)."""
    # TODO: block sizes and grid computed once per (M, N, dtype) and kept in a dict; the launch.
    raise NotImplementedError("not implemented yet: _launch_forward (week4 exercise)")


def _launch_backward(dy2, a2, b2, da2, db2) -> None:
    """(da2, db2) of y = silu(a2) * b2 for (M, N) tensors, rows of any stride."""
    raise NotImplementedError("not implemented yet: _launch_backward (week4 exercise)")


# ------------------------------------------------------------- given: the hot path around yours
def _as_rows(t, n):
    """t as (rows, n) with a contiguous last dimension: a view when possible, else a copy."""
    if t.dim() == 2 and (t.stride(1) == 1 or n == 1):
        return t
    try:
        rows = t.view(-1, n)
        if rows.stride(1) == 1 or n == 1:
            return rows
    except RuntimeError:
        pass
    return t.contiguous().view(-1, n)


def _dense_like(t: torch.Tensor) -> torch.Tensor:
    """A new tensor of t's shape and dtype, contiguous: what every result of this module is."""
    return torch.empty_like(t, memory_format=torch.contiguous_format)  # ~2x cheaper than t.new_empty(t.shape)


def _forward(a, b):
    """silu(a) * b, a new contiguous tensor of a's shape. a, b: same shape and dtype; unchecked."""
    y = _dense_like(a)
    n = a.shape[-1]
    if y.numel() == 0:
        return y
    _launch_forward(_as_rows(a, n), _as_rows(b, n), y if y.ndim == 2 else y.view(-1, n))
    return y


def _backward(dy, a, b):
    """(da, db), new contiguous tensors; dy of any layout. Unchecked."""
    da, db = _dense_like(a), _dense_like(b)
    n = a.shape[-1]
    if da.numel() == 0:
        return da, db
    if da.ndim == 2:
        _launch_backward(_as_rows(dy, n), _as_rows(a, n), _as_rows(b, n), da, db)
    else:
        _launch_backward(_as_rows(dy, n), _as_rows(a, n), _as_rows(b, n), da.view(-1, n), db.view(-1, n))
    return da, db


def _packed_forward(h):
    """silu(h[..., :N]) * h[..., N:], a new contiguous (..., N) tensor. Unchecked."""
    n = h.shape[-1] // 2
    y = h.new_empty((*h.shape[:-1], n))
    if y.numel() == 0:
        return y
    h2 = _as_rows(h, 2 * n)
    _launch_forward(h2[:, :n], h2[:, n:], y if y.ndim == 2 else y.view(-1, n))
    return y


def _packed_backward(dy, h):
    """dh = [da | db], a new contiguous tensor of h's shape, written by one launch. Unchecked."""
    n = h.shape[-1] // 2
    dh = _dense_like(h)
    if dh.numel() == 0:
        return dh
    h2, dh2 = _as_rows(h, 2 * n), (dh if dh.ndim == 2 else dh.view(-1, 2 * n))
    _launch_backward(_as_rows(dy, n), h2[:, :n], h2[:, n:], dh2[:, :n], dh2[:, n:])
    return dh


# -------------------------------------------------------------- given: checks for your launchers
def _rows(t, name):
    """t as (rows, N) with evenly strided rows and a contiguous last dimension, or a clear error."""
    n = t.shape[-1]
    try:
        rows = t.view(-1, n)
    except RuntimeError:
        rows = None
    if rows is None or (n > 1 and rows.stride(1) != 1):
        raise ValueError(f"{name} (shape {tuple(t.shape)}, strides {t.stride()}) must be a tensor whose "
                         "last dimension is contiguous and whose rows are evenly strided: contiguous, "
                         "or a slice of the last dimension of a contiguous tensor (h[..., :N]); "
                         "pass .contiguous() (the public swiglu / swiglu_packed copy such inputs themselves)")
    return rows


def _check_pair(a, b):
    validate.tensor(a, "a", dtypes=DTYPES, contiguous=False)
    validate.tensor(b, "b", dtypes=DTYPES, contiguous=False)
    validate.same_shape(a=a, b=b)
    validate.same_dtype(a=a, b=b)
    if a.dim() == 0:
        raise ValueError("a and b must have at least 1 dimension (N, the last), got scalars")
    if a.device != b.device:
        raise ValueError(f"a is on {a.device}, b on {b.device}: they must share a device")


def _check_out(t, name, like):
    if t is None:
        return torch.empty_like(like, memory_format=torch.contiguous_format)
    validate.tensor(t, name, dtypes=(like.dtype,), contiguous=False)
    if t.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {tuple(like.shape)}")
    return t


def _halves(h):
    validate.tensor(h, "h", dtypes=DTYPES, contiguous=False)
    if h.dim() == 0 or h.shape[-1] % 2:
        raise ValueError(f"h must be (..., 2N) with [gate | up] halves; got shape {tuple(h.shape)}")
    n = h.shape[-1] // 2
    return h[..., :n], h[..., n:]


def swiglu_forward(a, b, out=None):
    """silu(a) * b, fused; `out` (default: a new contiguous tensor) is returned."""
    # TODO: _check_pair, _check_out; nothing to launch for empty inputs; _launch_forward on _rows(...).
    raise NotImplementedError("not implemented yet: swiglu_forward (week4 exercise)")


def swiglu_backward(dy, a, b, da=None, db=None):
    """(da, db), one fused pass; da/db may be given (e.g. halves of one dh)."""
    raise NotImplementedError("not implemented yet: swiglu_backward (week4 exercise)")


def swiglu_packed_forward(h):
    """silu(h[..., :N]) * h[..., N:] for h of shape (..., 2N)."""
    raise NotImplementedError("not implemented yet: swiglu_packed_forward (week4 exercise)")


def swiglu_packed_backward(dy, h):
    """dh = [da | db] of h's shape, written in one pass."""
    raise NotImplementedError("not implemented yet: swiglu_packed_backward (week4 exercise)")


# ---------------------------------------------- given: the ops torch.compile sees (swiglu.py says why)
@torch.library.custom_op(f"{NAMESPACE}::swiglu", mutates_args=())
def swiglu_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _forward(a, b)


@swiglu_op.register_fake
def _swiglu_fake(a, b):
    return _dense_like(a)


@torch.library.custom_op(f"{NAMESPACE}::swiglu_backward", mutates_args=())
def swiglu_backward_op(dy: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _backward(dy, a, b)


@swiglu_backward_op.register_fake
def _swiglu_backward_fake(dy, a, b):
    return _dense_like(a), _dense_like(b)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _swiglu_backward_formula(ctx, dy):
    a, b = ctx.saved_tensors
    return swiglu_backward_op(dy, a, b)


swiglu_op.register_autograd(_swiglu_backward_formula, setup_context=_setup_context)


@torch.library.custom_op(f"{NAMESPACE}::swiglu_packed", mutates_args=())
def swiglu_packed_op(h: torch.Tensor) -> torch.Tensor:
    return _packed_forward(h)


@swiglu_packed_op.register_fake
def _swiglu_packed_fake(h):
    return h.new_empty((*h.shape[:-1], h.shape[-1] // 2))


@torch.library.custom_op(f"{NAMESPACE}::swiglu_packed_backward", mutates_args=())
def swiglu_packed_backward_op(dy: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    return _packed_backward(dy, h)


@swiglu_packed_backward_op.register_fake
def _swiglu_packed_backward_fake(dy, h):
    return _dense_like(h)


def _swiglu_packed_backward_formula(ctx, dy):
    (h,) = ctx.saved_tensors
    return swiglu_packed_backward_op(dy, h)


swiglu_packed_op.register_autograd(_swiglu_packed_backward_formula, setup_context=_setup_context)


# ------------------------------------------------- given: what eager mode calls, the public entries
class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _forward(a, b)

    @staticmethod
    def backward(ctx, dy):
        a, b = ctx.saved_tensors
        return _backward(dy, a, b)


class SwiGLUPackedFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        ctx.save_for_backward(h)
        return _packed_forward(h)

    @staticmethod
    def backward(ctx, dy):
        (h,) = ctx.saved_tensors
        return _packed_backward(dy, h)


# The public entries' checks: a few comparisons on the hot path (on the CPU machine this was
# written on, `t.device.type` alone cost ~1 us a call, `t.is_cuda` ~0.1 us); the full checks,
# with the course's messages, run only when one of these fails.
_on_device = (lambda t: t.is_cuda) if runtime.DEVICE.type == "cuda" else (lambda t: t.is_cpu)


def _ok(t) -> bool:
    """A tensor the kernels take (a few comparisons; `validate` says why when one fails)."""
    return isinstance(t, torch.Tensor) and t.dtype in DTYPES and t.ndim > 0 and _on_device(t)


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """F.silu(a) * b, differentiable, compilable, forward and backward each one Triton kernel.

    a, b: same shape and dtype; views with strided rows (the halves of h) are read in place,
    other layouts copied. Returns a new contiguous tensor.
    """
    if not (_ok(a) and isinstance(b, torch.Tensor) and b.dtype == a.dtype and a.shape == b.shape
            and _on_device(b) and a.get_device() == b.get_device()):
        _check_pair(a, b)  # raises with the reason
    if ops.compiling():
        return swiglu_op(a, b)
    if ops.needs_grad(a, b):
        return SwiGLUFunction.apply(a, b)
    return _forward(a, b)


def swiglu_packed(h: torch.Tensor) -> torch.Tensor:
    """F.silu(a) * b with (a, b) = h.chunk(2, -1), differentiable, compilable; the gradient is one dh."""
    if not (_ok(h) and h.shape[-1] % 2 == 0):
        _halves(h)  # raises with the reason
    if ops.compiling():
        return swiglu_packed_op(h)
    if ops.needs_grad(h):
        return SwiGLUPackedFunction.apply(h)
    return _packed_forward(h)


# ------------------------------------------------------------------------- given: torch references
def swiglu_reference(a, b):
    return F.silu(a) * b


def swiglu_packed_reference(h):
    g, u = h.chunk(2, dim=-1)
    return F.silu(g) * u


def torch_backward(dy, a, b, t):
    """What autograd runs for F.silu(a) * b: two muls and silu_backward, t = silu(a) saved."""
    return torch.ops.aten.silu_backward(dy * b, a), dy * t


def torch_backward_recompute(dy, a, b):
    """The same gradients recomputing silu(a), the form torch.compile fuses into one kernel."""
    return torch.ops.aten.silu_backward(dy * b, a), dy * F.silu(a)
