"""SwiGLU in Triton: y = silu(a) * b, forward and backward each one fused pass.

The gated MLP of LLaMA-style models is down(silu(gate(x)) * up(x)) (Shazeer 2020, "GLU Variants
Improve Transformer"). Between the matmuls sits y = silu(a) * b with silu(a) = a * sigmoid(a):
element-wise, a handful of FLOPs per element, so its speed is its bytes.

Inputs: two tensors a (the gate) and b (the up projection), (..., N) each. Models that fuse
the two projections into one matmul produce h = [a | b] of shape (..., 2N); its halves
h[..., :N] and h[..., N:] are views whose rows are strided by 2N. The kernels take a row
stride per tensor, so those views are read in place (no `.contiguous()` copies), and
`swiglu_packed(h)` writes the backward straight into one dh = [da | db] of h's shape: the
layout the fused projection's weight gradient wants, where autograd through `h.chunk(2, -1)`
would allocate da and db and then copy them into dh.

Backward, with s = sigmoid(a):
    db = dy * silu(a) = dy * a * s
    da = dy * b * s * (1 + a * (1 - s))      (d silu / da, the formula torch's silu_backward uses)
s is recomputed from a, not saved: recomputing costs a few FLOPs, saving it would cost bytes.

The grid is one-dimensional, column blocks fastest: consecutive programs walk a row block from
left to right, so the GPU streams through memory in address order, as a flat element-wise
kernel does (a 2-D grid with row blocks fastest jumps a whole row between neighbours).

Cost model (n = elements of y, itemsize s):
* forward, fused: read a, b, write y: 3ns. Eager `F.silu(a) * b`: silu reads a, writes t (2ns);
  mul reads t, b, writes y (3ns): 5ns, predicted 5/3 = 1.67x slower.
* backward, fused: read dy, a, b, write da, db: 5ns. Eager autograd: dy * b (3ns), silu_backward
  (3ns), dy * t (3ns, t saved by the forward): 9ns, predicted 1.8x slower.
~8 FLOPs per element (exp, add, div, muls) against 6 bytes in bf16: memory-bound.
torch.compile fuses `F.silu(a) * b` into one kernel each way that moves the same 3ns + 5ns as
ours (its partitioner saves a and b, not silu(a)): against it the race is bandwidth and host
time, not bytes.

As an op a model calls (the second half of this file), following rmsnorm.py: `swiglu(a, b)` and
`swiglu_packed(h)` check their arguments with a few comparisons, run an autograd.Function on
the bare launch path in eager mode (or the launch alone when no gradient is needed), and under
torch.compile the registered ops `torch.ops.course.swiglu` / `swiglu_packed`, each with a
registered backward op, one node each in Dynamo's graph. Launch settings are cached per shape
(`_PLANS`). Input layouts: rows with any stride are read in place; an input whose last
dimension is strided, or whose rows are not evenly strided (a transposed view), is COPIED by
the public entries and the ops (as torch's own kernels copy such inputs), while the launchers
(`swiglu_forward`, ...) refuse it with a ValueError that says what they need. Gradients arrive
in any layout (y.sum() sends a stride-0 one): copied only when the kernel cannot read them.
The benchmarks (swiglu_bench.py) `swiglu_train_week4` / `swiglu_packed_train_week4` (forward +
backward through autograd at model shapes, against eager torch and torch.compile of it) and
`swiglu_host_week4` (host cost per call at a decode step, clock="wall") measure the op as a model
calls it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course import ops, validate
from course.gpu import triton, tl, DEVICE
from course.launch import next_power_of_2  # plain Python: triton's is a jitted helper

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TILE = 2048  # elements per program: 16 per thread at 4 warps (2 x 16-byte loads in bf16)
NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)


@triton.jit
def _tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's (rows, cols, mask): a 1-D grid, column blocks fastest (address order)."""
    pid = tl.program_id(0).to(tl.int64)
    col_blocks = tl.cdiv(N, BLOCK_N)
    rows = (pid // col_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    return rows[:, None], cols[None, :], mask


@triton.jit
def swiglu_fwd_kernel(a_ptr, b_ptr, y_ptr, M, N, stride_a, stride_b, stride_y,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    # BEGIN EXERCISE: the fused forward of one tile: rows, cols and mask from _tile; a and b loaded (through
    #   their row strides) in ACC; s = sigmoid(a) = 1 / (1 + exp(-a)); y = a * s * b stored in y's dtype,
    #   masked
    # HINT: SwiGLU is silu(a) * b elementwise: fusing it reads a and b once and writes y once, instead of
    #   materializing silu(a).
    # HINT: Get rows, cols, mask from _tile; load a and b through their row strides in ACC; s = sigmoid(a);
    #   store a * s * b masked in y's dtype.
    # HINT: `s = 1.0 / (1.0 + tl.exp(-a))`
    rows, cols, mask = _tile(M, N, BLOCK_M, BLOCK_N)
    a = tl.load(a_ptr + rows * stride_a + cols, mask=mask, other=0.0).to(ACC)
    b = tl.load(b_ptr + rows * stride_b + cols, mask=mask, other=0.0).to(ACC)
    s = 1.0 / (1.0 + tl.exp(-a))  # a = -inf: s = 0 and a * s = NaN, as torch's silu gives
    tl.store(y_ptr + rows * stride_y + cols, (a * s * b).to(y_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


@triton.jit
def swiglu_bwd_kernel(dy_ptr, a_ptr, b_ptr, da_ptr, db_ptr, M, N,
                      stride_dy, stride_a, stride_b, stride_da, stride_db,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    # BEGIN EXERCISE: the fused backward, s = sigmoid(a) recomputed (nothing saved but a and b): db = dy *
    #   silu(a) (silu first: dy * a may overflow), da = dy * s * (1 + a * (1 - s)) * b (the bounded factor
    #   first: dy * b may overflow); both stored masked in their dtypes
    # HINT: Recompute sigmoid in the backward rather than saving it: it is cheap and saves memory. d/db =
    #   silu(a); d/da = b * silu'(a) with silu'(a) = s (1 + a (1 - s)).
    # HINT: Load dy, a, b in ACC from the tile; s = sigmoid(a); store db = dy * silu(a) and da = dy * silu'(a) *
    #   b, each masked in its own dtype.
    # HINT: Multiply in the order `dy * (a * s)`: (dy * a) * s can overflow to inf * 0 = NaN for very
    #   negative a.
    rows, cols, mask = _tile(M, N, BLOCK_M, BLOCK_N)
    dy = tl.load(dy_ptr + rows * stride_dy + cols, mask=mask, other=0.0).to(ACC)
    a = tl.load(a_ptr + rows * stride_a + cols, mask=mask, other=0.0).to(ACC)
    b = tl.load(b_ptr + rows * stride_b + cols, mask=mask, other=0.0).to(ACC)
    s = 1.0 / (1.0 + tl.exp(-a))  # recomputed: cheaper than saving sigmoid(a) in the forward
    # dy * silu(a), silu first: (dy * a) * s would overflow to inf * 0 = NaN for a = -max.
    tl.store(db_ptr + rows * stride_db + cols, (dy * (a * s)).to(db_ptr.dtype.element_ty), mask=mask)
    # dy * silu'(a) first, then * b: silu'(a) lies in [-0.1, 1.1], so the product overflows only where
    # the true da does; (dy * b) first overflows to inf for b near the dtype's max and |dy| > 1.
    da = (dy * (s * (1.0 + a * (1.0 - s)))) * b
    tl.store(da_ptr + rows * stride_da + cols, da.to(da_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


# ------------------------------------------------------------------------------- launch plans
# (grid, constexprs + num_warps) per (M, N, dtype), computed once and kept: the hot path does a
# dict lookup instead of the arithmetic (and never calls triton.cdiv / triton.next_power_of_2,
# jitted helpers that cost microseconds each from Python).
_PLANS: dict = {}


def _plan(M: int, N: int, dtype: torch.dtype):
    key = (M, N, dtype)
    plan = _PLANS.get(key)
    if plan is None:
        block_n = min(next_power_of_2(N), 1024)
        while block_n > 128 and N % block_n:  # a width that divides N leaves no ragged column block
            block_n //= 2
        block_m = min(max(1, TILE // block_n), next_power_of_2(M))
        grid = (-(-M // block_m) * -(-N // block_n),)
        plan = (grid, dict(BLOCK_M=block_m, BLOCK_N=block_n,
                           ACC=tl.float64 if dtype == torch.float64 else tl.float32, num_warps=4))
        if len(_PLANS) > 4096:  # many distinct token counts (varying batch x length): start over
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


# ------------------------------------------------------------- the hot path (no checks here)
def _launch_forward(a2, b2, y2) -> None:
    """y2 = silu(a2) * b2 for (M, N) tensors with a contiguous last dimension (rows any stride)."""
    M, N = a2.shape
    grid, meta = _plan(M, N, a2.dtype)
    swiglu_fwd_kernel[grid](a2, b2, y2, M, N, a2.stride(0), b2.stride(0), y2.stride(0), **meta)


def _launch_backward(dy2, a2, b2, da2, db2) -> None:
    """(da2, db2) of y = silu(a2) * b2 for (M, N) tensors, rows of any stride."""
    M, N = a2.shape
    grid, meta = _plan(M, N, a2.dtype)
    swiglu_bwd_kernel[grid](dy2, a2, b2, da2, db2, M, N, dy2.stride(0), a2.stride(0), b2.stride(0),
                            da2.stride(0), db2.stride(0), **meta)


def _as_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """t as (rows, n) with a contiguous last dimension: a view when the kernel can read t in place
    (contiguous, or halves h[..., :N] of a contiguous h), else a contiguous copy (a transposed view,
    a stride-0 gradient)."""
    if t.dim() == 2 and (t.stride(1) == 1 or n == 1):
        return t
    try:
        rows = t.view(-1, n)
        if rows.stride(1) == 1 or n == 1:
            return rows
    except RuntimeError:  # rows not evenly strided
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


# ---------------------------------------------------------------------------------- launchers
def _rows(t: torch.Tensor, name: str) -> torch.Tensor:
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


def _check_out(t, name: str, like: torch.Tensor) -> torch.Tensor:
    if t is None:
        return torch.empty_like(like, memory_format=torch.contiguous_format)
    validate.tensor(t, name, dtypes=(like.dtype,), contiguous=False)
    if t.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {tuple(like.shape)}")
    return t


def swiglu_forward(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(a) * b, fused. a, b: same shape and dtype; rows may be strided (views of h)."""
    _check_pair(a, b)
    out = _check_out(out, "out", a)
    if a.numel() == 0:
        return out
    _launch_forward(_rows(a, "a"), _rows(b, "b"), _rows(out, "out"))
    return out


def swiglu_backward(dy: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                    da: torch.Tensor | None = None, db: torch.Tensor | None = None):
    """(da, db) of y = silu(a) * b, one fused pass; da/db may be given (e.g. halves of one dh)."""
    _check_pair(a, b)
    validate.tensor(dy, "dy", dtypes=DTYPES, contiguous=False)
    validate.same_shape(dy=dy, a=a)
    validate.same_dtype(dy=dy, a=a)
    da, db = _check_out(da, "da", a), _check_out(db, "db", a)
    if a.numel() == 0:
        return da, db
    _launch_backward(_rows(dy, "dy"), _rows(a, "a"), _rows(b, "b"), _rows(da, "da"), _rows(db, "db"))
    return da, db


def _halves(h: torch.Tensor):
    validate.tensor(h, "h", dtypes=DTYPES, contiguous=False)
    if h.dim() == 0 or h.shape[-1] % 2:
        raise ValueError(f"h must be (..., 2N) with [gate | up] halves; got shape {tuple(h.shape)}")
    n = h.shape[-1] // 2
    return h[..., :n], h[..., n:]


def swiglu_packed_forward(h: torch.Tensor) -> torch.Tensor:
    """silu(h[..., :N]) * h[..., N:] for h = [gate | up] of shape (..., 2N)."""
    a, b = _halves(h)
    return swiglu_forward(a, b)


def swiglu_packed_backward(dy: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """dh = [da | db], h's shape, written in one pass (no concatenation afterwards)."""
    a, b = _halves(h)
    dh = torch.empty_like(h, memory_format=torch.contiguous_format)
    n = a.shape[-1]
    swiglu_backward(dy, a, b, da=dh[..., :n], db=dh[..., n:])
    return dh


# ------------------------------------------------------------------- the ops torch.compile sees
@torch.library.custom_op(f"{NAMESPACE}::swiglu", mutates_args=())
def swiglu_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b, a new contiguous tensor (see swiglu)."""
    return _forward(a, b)


@swiglu_op.register_fake
def _swiglu_fake(a, b):
    return _dense_like(a)


@torch.library.custom_op(f"{NAMESPACE}::swiglu_backward", mutates_args=())
def swiglu_backward_op(dy: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(da, db), new contiguous tensors; dy of any layout."""
    return _backward(dy, a, b)


@swiglu_backward_op.register_fake
def _swiglu_backward_fake(dy, a, b):
    return _dense_like(a), _dense_like(b)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)  # a, b (or h): not silu(a), the backward recomputes it


def _swiglu_backward_formula(ctx, dy):
    a, b = ctx.saved_tensors
    return swiglu_backward_op(dy, a, b)  # itself an op: one node in the backward graph


swiglu_op.register_autograd(_swiglu_backward_formula, setup_context=_setup_context)


@torch.library.custom_op(f"{NAMESPACE}::swiglu_packed", mutates_args=())
def swiglu_packed_op(h: torch.Tensor) -> torch.Tensor:
    """silu(h[..., :N]) * h[..., N:], a new contiguous (..., N) tensor (see swiglu_packed)."""
    return _packed_forward(h)


@swiglu_packed_op.register_fake
def _swiglu_packed_fake(h):
    return h.new_empty((*h.shape[:-1], h.shape[-1] // 2))


@torch.library.custom_op(f"{NAMESPACE}::swiglu_packed_backward", mutates_args=())
def swiglu_packed_backward_op(dy: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """dh = [da | db], a new contiguous tensor of h's shape."""
    return _packed_backward(dy, h)


@swiglu_packed_backward_op.register_fake
def _swiglu_packed_backward_fake(dy, h):
    return _dense_like(h)


def _swiglu_packed_backward_formula(ctx, dy):
    (h,) = ctx.saved_tensors
    return swiglu_packed_backward_op(dy, h)


swiglu_packed_op.register_autograd(_swiglu_packed_backward_formula, setup_context=_setup_context)


# ------------------------------------------------------------------- the ops eager mode calls
class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)  # not silu(a): the backward recomputes it
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
_on_device = (lambda t: t.is_cuda) if DEVICE.type == "cuda" else (lambda t: t.is_cpu)


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


# ---------------------------------------------------------------------------- torch references
def swiglu_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The eager expression the kernel replaces."""
    return F.silu(a) * b


def swiglu_packed_reference(h: torch.Tensor) -> torch.Tensor:
    """What a model with a fused gate/up projection writes."""
    g, u = h.chunk(2, dim=-1)
    return F.silu(g) * u


def torch_backward(dy, a, b, t):
    """What autograd runs for F.silu(a) * b: two muls and silu_backward, t = silu(a) saved."""
    return torch.ops.aten.silu_backward(dy * b, a), dy * t


def torch_backward_recompute(dy, a, b):
    """The same gradients recomputing silu(a), the form torch.compile fuses into one kernel."""
    return torch.ops.aten.silu_backward(dy * b, a), dy * F.silu(a)
