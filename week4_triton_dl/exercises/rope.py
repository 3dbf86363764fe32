"""Exercise: rotary position embedding (RoPE) in Triton, forward and backward, as a PyTorch op.

Same names as week4_triton_dl/rope.py. Check your work with
`pytest tests/week4/test_rope.py --impl=exercises`.

You write: `rope_kernel` (q AND k in one launch), `_launch` (the unchecked hot path: launch
settings cached per head count, the grid, the launch) and `rope_forward` (the validated
launcher of one tensor).

Given: the tables, the input checks (`_check_inputs`), `_forward` (allocates the outputs, then
calls your `_launch`), the registered ops torch.compile sees (`rope_qk_op`, `rope_op` and their
backward ops), the autograd Functions eager mode runs, the public entries `rope` / `apply_rope`
and the torch references. They run your kernel once you have written it; read them beside
rope.py's second half.
"""
from __future__ import annotations

import numbers

import torch

from course import ops, runtime  # runtime before triton: GPU or interpreter
from course import validate
from week4_triton_dl.layernorm import next_power_of_2  # noqa: F401  plain Python, for your launch plans

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402, F401

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
LAYOUTS = ("bhsd", "bshd")
BASE = 10000.0
TILE = 2048  # elements of each half per program at most
NAMESPACE = ops.namespace(__name__)  # "course_exercises": apart from the solution's ops


@triton.jit(do_not_specialize=["position_offset"])  # it changes every decode step: no recompiles
def rope_kernel(q_ptr, k_ptr, qo_ptr, ko_ptr, cos_ptr, sin_ptr, S, HQ, HK, HALF, position_offset, q_blocks,
                stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                stride_qob, stride_qos, stride_qoh, stride_kob, stride_kos, stride_koh,
                INVERSE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    """Program (b * S + s, j): head block j of q, or block j - q_blocks of k, at position s."""
    # TODO: b, s from program_id(0) (int64); load the cos/sin row of position
    # position_offset + s once (INVERSE flips the sign of sin: the backward); then for
    # j < q_blocks rotate BLOCK_H heads of q into qo, else heads of k into ko: address each
    # through its (batch, seq, head) strides, y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin, with
    # x1 = x[:HALF], x2 = x[HALF:]. (A @triton.jit helper for one tensor keeps the two branches short.)
    pass


def _bshd_strides(t: torch.Tensor, layout: str):
    """(batch, seq, head) strides of a 4-D tensor in `layout` (given)."""
    sb, s1, s2, _ = t.stride()
    return (sb, s2, s1) if layout == "bhsd" else (sb, s1, s2)


def _launch(q, k, q_out, k_out, cos, sin, position_offset, layout, inverse) -> None:
    """Rotate q into q_out and k into k_out (k, k_out None: q only) with ONE launch. Unchecked."""
    # TODO: (B, S, HQ, D) of q and HK of k (0 without k) from the layout; block sizes for D/2 and
    # the heads, computed once per (HQ, HK, D/2, dtype) and kept in a dict; nothing to launch
    # for empty tensors; grid (B * S, q blocks + k blocks).
    raise NotImplementedError("not implemented yet: _launch (week4 exercise)")


def _last_dim_contiguous(t):
    """Gradients arrive in any layout (y.sum() sends stride-0 ones): copy only if the kernel must."""
    return t if t.stride(-1) == 1 or t.numel() == 0 else t.contiguous()


def _dense_like(t: torch.Tensor) -> torch.Tensor:
    """A new tensor of t's shape and dtype, contiguous: what every result of this module is."""
    return torch.empty_like(t, memory_format=torch.contiguous_format)  # ~2x cheaper than t.new_empty(t.shape)


def _forward(q, k, cos, sin, position_offset: int, layout: str, inverse: bool = False):
    """(rotated q, rotated k or None), new tensors contiguous in the logical layout. Unchecked."""
    q_out = _dense_like(q)
    k_out = None if k is None else _dense_like(k)
    _launch(q, k, q_out, k_out, cos, sin, position_offset, layout, inverse)
    return q_out, k_out


def rope_tables(max_seq_len, head_dim, *, base=BASE, device=None):
    """(cos, sin), each (max_seq_len, head_dim // 2) fp32, from angles computed in fp64 (given)."""
    if not isinstance(max_seq_len, int) or max_seq_len < 0:
        raise ValueError(f"max_seq_len must be an int >= 0, got {max_seq_len!r}")
    if not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be an even int >= 2, got {head_dim!r}")
    half = head_dim // 2
    inv_freq = base ** (-torch.arange(half, dtype=torch.float64) * 2.0 / head_dim)
    angles = torch.arange(max_seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
    device = runtime.DEVICE if device is None else device
    return angles.cos().float().to(device), angles.sin().float().to(device)


def _check_inputs(x, cos, sin, position_offset, layout, name="x"):
    """Every check of a rotation's arguments, with the course's messages (given)."""
    validate.tensor(x, name, dtypes=DTYPES, ndim=4, contiguous=False)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    B, S, H, D = (x.shape[0], x.shape[2], x.shape[1], x.shape[3]) if layout == "bhsd" else tuple(x.shape)
    if D % 2:
        raise ValueError(f"{name} has head dimension {D}; RoPE rotates pairs, so it must be even")
    if x.stride(-1) != 1 and x.numel() > 0:
        raise ValueError(f"{name} has strides {x.stride()}: the head dimension (last) must be contiguous "
                         "(stride 1); the other dimensions may be strided (views are fine)")
    for label, t in (("cos", cos), ("sin", sin)):
        validate.tensor(t, label, dtypes=(torch.float32,), ndim=2)
        if t.shape[1] != D // 2:
            raise ValueError(f"{label} has shape {tuple(t.shape)}; expected (positions, {D // 2}) "
                             f"for head dimension {D} (see rope_tables)")
    if cos.shape != sin.shape:
        raise ValueError(f"cos {tuple(cos.shape)} and sin {tuple(sin.shape)} must have the same shape")
    if not isinstance(position_offset, (numbers.Integral, torch.SymInt)) or isinstance(position_offset, bool) \
            or position_offset < 0:
        raise ValueError(f"position_offset must be an int >= 0, got {position_offset!r}")
    if position_offset + S > cos.shape[0]:
        raise ValueError(f"positions {position_offset} .. {position_offset + S - 1} need tables of at least "
                         f"{position_offset + S} rows; cos/sin have {cos.shape[0]}")
    if x.device != cos.device or x.device != sin.device:
        raise ValueError(f"{name} ({x.device}) and the tables (cos {cos.device}, sin {sin.device}) "
                         "must be on the same device")
    return B, S, H, D


def rope_forward(x, cos, sin, position_offset=0, layout="bhsd", *, inverse=False, out=None):
    """Rotate x (4-D, `layout`) by positions offset .. offset + S - 1; inverse=True rotates back.

    Without `out`: a new tensor, contiguous in the logical layout. `out`: any tensor of x's shape
    and dtype whose last dimension is contiguous.
    """
    # TODO: _check_inputs; check `out` (dtype, shape, last dimension contiguous, device) or
    # allocate it; _launch(x, None, out, None, ...).
    raise NotImplementedError("not implemented yet: rope_forward (week4 exercise)")


# ---------------------------------------------- given: the ops torch.compile sees (rope.py says why)
@torch.library.custom_op(f"{NAMESPACE}::rope_qk", mutates_args=())
def rope_qk_op(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               position_offset: int, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward(q, k, cos, sin, position_offset, layout)


@rope_qk_op.register_fake
def _rope_qk_fake(q, k, cos, sin, position_offset, layout):
    return _dense_like(q), _dense_like(k)


@torch.library.custom_op(f"{NAMESPACE}::rope_qk_backward", mutates_args=())
def rope_qk_backward_op(dq: torch.Tensor, dk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                        position_offset: int, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward(_last_dim_contiguous(dq), _last_dim_contiguous(dk), cos, sin, position_offset, layout, True)


@rope_qk_backward_op.register_fake
def _rope_qk_backward_fake(dq, dk, cos, sin, position_offset, layout):
    return _dense_like(dq), _dense_like(dk)


def _setup_context(ctx, inputs, output):
    _, _, cos, sin, position_offset, layout = inputs[:6]
    ctx.save_for_backward(cos, sin)
    ctx.position_offset, ctx.layout = position_offset, layout


def _rope_qk_backward_formula(ctx, dq, dk):
    cos, sin = ctx.saved_tensors
    dq, dk = rope_qk_backward_op(dq, dk, cos, sin, ctx.position_offset, ctx.layout)
    return dq, dk, None, None, None, None


rope_qk_op.register_autograd(_rope_qk_backward_formula, setup_context=_setup_context)


@torch.library.custom_op(f"{NAMESPACE}::rope", mutates_args=())
def rope_op(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_offset: int,
            layout: str) -> torch.Tensor:
    return _forward(x, None, cos, sin, position_offset, layout)[0]


@rope_op.register_fake
def _rope_fake(x, cos, sin, position_offset, layout):
    return _dense_like(x)


@torch.library.custom_op(f"{NAMESPACE}::rope_backward", mutates_args=())
def rope_backward_op(dy: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_offset: int,
                     layout: str) -> torch.Tensor:
    return _forward(_last_dim_contiguous(dy), None, cos, sin, position_offset, layout, True)[0]


@rope_backward_op.register_fake
def _rope_backward_fake(dy, cos, sin, position_offset, layout):
    return _dense_like(dy)


def _setup_context_one(ctx, inputs, output):
    _, cos, sin, position_offset, layout = inputs
    ctx.save_for_backward(cos, sin)
    ctx.position_offset, ctx.layout = position_offset, layout


def _rope_backward_formula(ctx, dy):
    cos, sin = ctx.saved_tensors
    return rope_backward_op(dy, cos, sin, ctx.position_offset, ctx.layout), None, None, None, None


rope_op.register_autograd(_rope_backward_formula, setup_context=_setup_context_one)


# ------------------------------------------------- given: what eager mode calls, the public entries
class RoPEQKFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, cos, sin, position_offset, layout):
        ctx.save_for_backward(cos, sin)
        ctx.position_offset, ctx.layout = position_offset, layout
        return _forward(q, k, cos, sin, position_offset, layout)

    @staticmethod
    def backward(ctx, dq, dk):
        cos, sin = ctx.saved_tensors
        dq, dk = _forward(_last_dim_contiguous(dq), _last_dim_contiguous(dk), cos, sin,
                          ctx.position_offset, ctx.layout, True)
        return dq, dk, None, None, None, None


class RoPEFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin, position_offset, layout):
        ctx.save_for_backward(cos, sin)
        ctx.position_offset, ctx.layout = position_offset, layout
        return _forward(x, None, cos, sin, position_offset, layout)[0]

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        dx = _forward(_last_dim_contiguous(dy), None, cos, sin, ctx.position_offset, ctx.layout, True)[0]
        return dx, None, None, None, None


# The public entries' checks: a few comparisons on the hot path (on the CPU machine this was
# written on, `t.device.type` alone cost ~1 us a call, `t.is_cuda` ~0.1 us); the full checks,
# with the course's messages, run only when one of these fails.
_on_device = (lambda t: t.is_cuda) if runtime.DEVICE.type == "cuda" else (lambda t: t.is_cpu)


def _tables_ok(cos, sin, D: int, S: int, position_offset) -> bool:
    if not (isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor) and type(position_offset) is int):
        return False
    shape = cos.shape
    return (len(shape) == 2 and shape == sin.shape and shape[1] * 2 == D and 0 <= position_offset
            and position_offset + S <= shape[0] and cos.dtype == torch.float32 and sin.dtype == torch.float32)


def _fast_ok(x, cos, sin, position_offset, layout) -> bool:
    """Does rope(x, ...) pass every check of _check_inputs? (x: a tensor on the kernels' device)"""
    if not (isinstance(x, torch.Tensor) and x.ndim == 4 and layout in LAYOUTS):
        return False
    shape = x.shape
    return (_tables_ok(cos, sin, shape[3], shape[2 if layout == "bhsd" else 1], position_offset)
            and x.dtype in DTYPES and _on_device(x) and _on_device(cos) and _on_device(sin)
            and x.get_device() == cos.get_device() == sin.get_device()
            and (x.stride(3) == 1 or x.numel() == 0))


def _qk_fast_ok(q, k, cos, sin, position_offset, layout) -> bool:
    """Do q and k pass every check, and can they share one launch (dtype, device, B, S, D)?"""
    if not (_fast_ok(q, cos, sin, position_offset, layout) and isinstance(k, torch.Tensor) and k.ndim == 4):
        return False
    qs, ks, t = q.shape, k.shape, 2 if layout == "bhsd" else 1
    return (qs[0] == ks[0] and qs[t] == ks[t] and qs[3] == ks[3] and k.dtype == q.dtype
            and k.get_device() == q.get_device() and (k.stride(3) == 1 or k.numel() == 0))


def _as_int(n):
    return n if isinstance(n, torch.SymInt) else int(n)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_offset: int = 0,
         layout: str = "bhsd") -> torch.Tensor:
    """RoPE on one tensor (q or k), differentiable, compilable; a new tensor contiguous in `layout`."""
    if not _fast_ok(x, cos, sin, position_offset, layout):
        _check_inputs(x, cos, sin, position_offset, layout)  # raises with the reason
        position_offset = _as_int(position_offset)  # e.g. a NumPy integer
    if ops.compiling():
        return rope_op(x, cos, sin, position_offset, layout)
    if ops.needs_grad(x):
        return RoPEFunction.apply(x, cos, sin, position_offset, layout)
    return _forward(x, None, cos, sin, position_offset, layout)[0]


def apply_rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               position_offset: int = 0, layout: str = "bhsd"):
    """(rope(q), rope(k)) in ONE launch (one registered op under torch.compile).

    q and k: 4-D in `layout`, any strides with a contiguous last dimension (views of a fused
    qkv buffer are read in place); their head counts may differ (grouped-query attention). The
    results are new tensors, contiguous in `layout`. q and k of different dtypes, devices,
    batch sizes, lengths or head dimensions are rotated by two calls of `rope` instead.
    """
    if not _qk_fast_ok(q, k, cos, sin, position_offset, layout):
        _check_inputs(q, cos, sin, position_offset, layout, "q")  # raises with the reason
        _check_inputs(k, cos, sin, position_offset, layout, "k")
        position_offset = _as_int(position_offset)  # e.g. a NumPy integer
        t = 2 if layout == "bhsd" else 1
        if q.dtype != k.dtype or q.device != k.device or q.shape[0] != k.shape[0] or q.shape[t] != k.shape[t] \
                or q.shape[3] != k.shape[3]:
            return rope(q, cos, sin, position_offset, layout), rope(k, cos, sin, position_offset, layout)
    if ops.compiling():
        return rope_qk_op(q, k, cos, sin, position_offset, layout)
    if ops.needs_grad(q, k):
        return RoPEQKFunction.apply(q, k, cos, sin, position_offset, layout)
    return _forward(q, k, cos, sin, position_offset, layout)


# ------------------------------------------------------------------------- given: torch references
def _table_view(t, S, position_offset, layout):
    rows = t[position_offset:position_offset + S]
    return rows[None, None] if layout == "bhsd" else rows[None, :, None]


def rope_reference(x, cos, sin, position_offset=0, layout="bhsd"):
    """The rotate-half formulas in torch, fp32 (fp64 for fp64 x), rounded once."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    S, half = x.shape[2 if layout == "bhsd" else 1], x.shape[-1] // 2
    c = _table_view(cos, S, position_offset, layout).to(compute)
    s = _table_view(sin, S, position_offset, layout).to(compute)
    x1, x2 = x[..., :half].to(compute), x[..., half:].to(compute)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rope_rotate_half(q, k, cos_full, sin_full):
    """The form most model code uses, eager, in q's dtype, with (S, D) tables in that dtype."""
    return q * cos_full + rotate_half(q) * sin_full, k * cos_full + rotate_half(k) * sin_full


def full_tables(cos, sin, S, dtype, layout="bhsd"):
    c, s = (torch.cat([t[:S], t[:S]], dim=-1).to(dtype) for t in (cos, sin))
    return _table_view(c, S, 0, layout), _table_view(s, S, 0, layout)
