"""Rotary position embedding (RoPE) in Triton: q and k rotated by their position, forward and backward.

Over 500 lines: one kernel, but the op a model calls needs its launchers, the custom-op
registration with fake and backward, and the q+k fused variant; the holes carry their graded hints.

RoPE (Su et al. 2021, "RoFormer") encodes the position m of a token by rotating pairs of
coordinates of its query and key vectors by angles proportional to m. With head dimension D
and i = 0 .. D/2 - 1, the frequencies are theta_i = base^(-2i / D) (base = 10000) and the
angle of pair i at position m is m * theta_i. In the "rotate half" convention of GPT-NeoX and
LLaMA (the one Hugging Face models use), pair i is (x[i], x[i + D/2]):

    y[i]       = x[i] cos(m theta_i) - x[i + D/2] sin(m theta_i)
    y[i + D/2] = x[i + D/2] cos(m theta_i) + x[i] sin(m theta_i)

Why it encodes *relative* position: a rotation R(a) satisfies R(a)^T R(b) = R(b - a), so the
attention score <R(m theta) q, R(n theta) k> = <q, R((n - m) theta) k> depends on n - m only.
The backward is the transpose of a rotation, i.e. the rotation by -theta: dx = R(-m theta) dy,
the same kernel with the sign of sin flipped (`inverse=True`).

Layouts. The kernel addresses q/k through their strides as (batch, seq, head, dim) and needs
only the head dimension to be contiguous, so both common layouts work without a copy:
* "bhsd" (B, H, S, D), the default: what `F.scaled_dot_product_attention` and the week-4
  attention kernels take;
* "bshd" (B, S, H, D): what a qkv projection produces before its transpose. q and k may be
  the strided, non-dense views `qkv.view(B, S, 3, H, D)[:, :, 0]` and `[:, :, 1]`: read in
  place. Rotating here and then `.transpose(1, 2)` hands SDPA a (B, H, S, D) view, no copy.
The result is always a new tensor, dense and contiguous in the logical layout (`layout`):
(B, H, S, D) row-major for "bhsd", (B, S, H, D) for "bshd", whatever the input's strides. One
rule, so the registered op's fake function can state it, and what attention reads next is
dense. (`rope_forward(..., out=)` writes any `out` whose last dimension is contiguous.)

One launch rotates q AND k: program (b * S + s, j) rotates head block j of q, or, for
j >= the number of q blocks, head block j - (q blocks) of k. q and k share B, S and D (their
head counts may differ: grouped-query attention), so one grid covers both, and each program
loads its position's cos and sin rows once for BLOCK_H heads.

Tables. `rope_tables` precomputes cos and sin once per model, shape (max_seq_len, D/2), fp32:
half the size of the (S, D) tables with duplicated halves many implementations keep. The
angles are computed in fp64 and rounded once: in fp32, m * theta at m ~ 100k has an ulp of
~0.008 rad, an error that would land directly in cos and sin. `position_offset` starts the
positions at a given index: decoding with a KV cache rotates the new token(s) at positions
offset .. offset + S - 1.

Cost model (n = elements of q plus k, itemsize s): read q, k and write them rotated, 2ns bytes;
the tables (S x D/2 x 4 bytes x 2) are read by every batch and head but are small and stay in
L2, so they add little HBM traffic. 6 FLOPs per pair: memory-bound. The eager "rotate half"
formula `x * cos + rotate_half(x) * sin` runs neg, cat, mul, mul, add: ~10ns bytes, ~5x more.
The backward moves the same 2ns. torch.compile fuses the rotate-half formula into one kernel
per pass that moves the same bytes as ours: against it, the race is bandwidth and launches.

As an op a model calls (the second half of this file), following rmsnorm.py: `apply_rope(q, k,
...)` is ONE call for q and k. Eager calls run `RoPEQKFunction` (an autograd.Function), or the
bare hot path `rope_hot_path` when nothing needs a gradient; under torch.compile they go through
the registered op `torch.ops.course.rope_qk` (fake function + autograd formula; its backward is the
op `rope_qk_backward`, the inverse rotation), one node in Dynamo's graph, no graph break.
`rope(x, ...)` has its own pair, `course::rope` / `course::rope_backward`. The hot path does no
validation (the public entry checks its arguments with a few comparisons), keeps the launch
settings of a head count in `_PLANS`, and launches once for q and k: on the H100's host a
launch costs ~15 us and a custom-op dispatch ~8 us more than an autograd.Function
(course/ops.py), while a single-token decode step of a batch of 8 moves ~50 KB, well under
1 us of GPU time: at that size the host is the whole cost, and the eager rotate-half formula
pays it ten times (10 kernels for q and k). The benchmarks (rope_bench.py) `rope_train_week4`
(forward + backward through autograd at model shapes, against the eager rotate-half formula and
torch.compile of it) and `rope_host_week4` (host cost per call at that decode step,
clock="wall") measure it as a model calls it.
"""
from __future__ import annotations

import numbers

import torch

from course import ops, validate
from course.gpu import triton, tl, DEVICE
from course.launch import next_power_of_2  # plain Python: triton's is a jitted helper

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
LAYOUTS = ("bhsd", "bshd")
BASE = 10000.0
TILE = 2048  # elements of each half per program at most: 16 per thread at 4 warps
NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)


@triton.jit
def _rotate(x_ptr, y_ptr, b, s, heads, H, HALF, cos, sin, stride_xb, stride_xs, stride_xh,
            stride_yb, stride_ys, stride_yh, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    """Rotate the rows of `heads` at (b, s): x1 cos - x2 sin, x2 cos + x1 sin."""
    # BEGIN EXERCISE: the rotation of BLOCK_H rows: mask heads past H and lanes past HALF, address
    #   each row through its (batch, seq, head) strides (int64), load x1 = x[:HALF] and x2 =
    #   x[HALF:] in ACC, store y1 = x1 cos - x2 sin and y2 = x2 cos + x1 sin in y's dtype
    # HINT: RoPE rotates each pair (x[i], x[i + D/2]) by the position's angle: a 2x2 rotation applied to the
    #   two halves of a head's vector, for several heads at once.
    # HINT: d = arange(BLOCK_D) with a 2-D mask (heads < H) x (d < HALF); a base pointer per head row from
    #   b, s and the head (int64) through the strides; load the first half at d and the second at d + HALF
    #   in ACC; two stores.
    # HINT: `y1 = x1 * cos - x2 * sin`, `y2 = x2 * cos + x1 * sin`, cast to y's dtype on store.
    d = tl.arange(0, BLOCK_D)
    mask = (heads < H)[:, None] & (d < HALF)[None, :]
    h = heads[:, None].to(tl.int64)
    x_first = x_ptr + b * stride_xb + s * stride_xs + h * stride_xh + d[None, :]
    y_first = y_ptr + b * stride_yb + s * stride_ys + h * stride_yh + d[None, :]
    # Each half-row is D/2 contiguous elements: whole cache lines for D = 128 in 16-bit.
    x1 = tl.load(x_first, mask=mask, other=0.0).to(ACC)
    x2 = tl.load(x_first + HALF, mask=mask, other=0.0).to(ACC)
    tl.store(y_first, (x1 * cos - x2 * sin).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_first + HALF, (x2 * cos + x1 * sin).to(y_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


# position_offset changes every step of a decode loop: without do_not_specialize Triton would
# compile a variant for offset == 1 and one for offsets divisible by 16 (its integer
# specializations), each the first time it appears, in the middle of generation.
@triton.jit(do_not_specialize=["position_offset"])
def rope_kernel(q_ptr, k_ptr, qo_ptr, ko_ptr, cos_ptr, sin_ptr, S, HQ, HK, HALF, position_offset, q_blocks,
                stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                stride_qob, stride_qos, stride_qoh, stride_kob, stride_kos, stride_koh,
                INVERSE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    """Program (b * S + s, j): head block j of q, or block j - q_blocks of k, at position s."""
    # BEGIN EXERCISE: b and s from program_id(0) (int64), j from program_id(1); this position's
    #   cos and sin rows (position_offset + s), loaded once for all BLOCK_H heads; INVERSE (the
    #   backward) rotates by -theta; j < q_blocks rotates a head block of q, else one of k (_rotate)
    # HINT: The cos/sin row depends only on the position, so load it once per program and reuse it for every
    #   head; q and k share one launch, the second grid axis choosing which head block to rotate.
    # HINT: b, s = divmod of program_id(0) (int64) by S; j = program_id(1); load cos and sin at
    #   (position_offset + s) * HALF + d masked to HALF, broadcast with [None, :]; negate sin when INVERSE;
    #   if j < q_blocks call _rotate on q's head block j, else on k's block j - q_blocks.
    # HINT: The backward is the inverse rotation R(-theta): `if INVERSE: sin = -sin`.
    pid = tl.program_id(0).to(tl.int64)
    b = pid // S
    s = pid % S
    j = tl.program_id(1)
    d = tl.arange(0, BLOCK_D)
    # This position's row of each table: loaded once, used for every head of the block.
    pos = position_offset + s
    cos = tl.load(cos_ptr + pos * HALF + d, mask=d < HALF, other=0.0).to(ACC)[None, :]
    sin = tl.load(sin_ptr + pos * HALF + d, mask=d < HALF, other=0.0).to(ACC)[None, :]
    if INVERSE:  # the backward: R(theta)^T = R(-theta)
        sin = -sin
    if j < q_blocks:
        _rotate(q_ptr, qo_ptr, b, s, j * BLOCK_H + tl.arange(0, BLOCK_H), HQ, HALF, cos, sin,
                stride_qb, stride_qs, stride_qh, stride_qob, stride_qos, stride_qoh, BLOCK_D, ACC)
    else:
        _rotate(k_ptr, ko_ptr, b, s, (j - q_blocks) * BLOCK_H + tl.arange(0, BLOCK_H), HK, HALF, cos, sin,
                stride_kb, stride_ks, stride_kh, stride_kob, stride_kos, stride_koh, BLOCK_D, ACC)
    # END EXERCISE


# ------------------------------------------------------------------------------- launch plans
# Launch settings per (q heads, k heads, D/2, dtype), computed once and kept: the hot path does a
# dict lookup, not the arithmetic (nor triton.next_power_of_2 / triton.cdiv, jitted helpers that
# cost microseconds each from Python).
_PLANS: dict = {}


def _plan(HQ: int, HK: int, half: int, dtype: torch.dtype):
    """(q blocks, k blocks, constexprs + num_warps) for q and k of HQ and HK heads (HK = 0: q only)."""
    key = (HQ, HK, half, dtype)
    plan = _PLANS.get(key)
    if plan is None:
        block_d = next_power_of_2(half)
        # One block size for q and k: a k block of fewer heads (grouped-query attention) runs with
        # masked lanes, which cost issue slots, not memory traffic.
        block_h = min(next_power_of_2(max(HQ, HK)), max(1, TILE // block_d))
        warps = max(1, min(4, block_h * block_d // 256))  # ~8-16 elements of each half per thread
        plan = (-(-HQ // block_h), -(-HK // block_h),
                dict(BLOCK_H=block_h, BLOCK_D=block_d, ACC=tl.float64 if dtype == torch.float64 else tl.float32,
                     num_warps=warps))
        _PLANS[key] = plan
    return plan


def _bshd_strides(t: torch.Tensor, layout: str):
    """(batch, seq, head) strides of a 4-D tensor in `layout`."""
    sb, s1, s2, _ = t.stride()
    return (sb, s2, s1) if layout == "bhsd" else (sb, s1, s2)


# ------------------------------------------------------------- the hot path (no checks here)
def _launch(q, k, q_out, k_out, cos, sin, position_offset: int, layout: str, inverse: bool) -> None:
    """Rotate q into q_out and k into k_out (k, k_out None: q only), one launch. Unchecked."""
    if layout == "bhsd":
        B, HQ, S, D = q.shape
    else:
        B, S, HQ, D = q.shape
    HK = 0 if k is None else k.shape[1 if layout == "bhsd" else 2]
    q_blocks, k_blocks, meta = _plan(HQ, HK, D // 2, q.dtype)
    if B * S == 0 or q_blocks + k_blocks == 0 or D == 0:
        return
    if k is None:  # dummies, never read: no program has j >= q_blocks
        k, k_out = q, q_out
    rope_kernel[(B * S, q_blocks + k_blocks)](
        q, k, q_out, k_out, cos, sin, S, HQ, HK, D // 2, position_offset, q_blocks,
        *_bshd_strides(q, layout), *_bshd_strides(k, layout),
        *_bshd_strides(q_out, layout), *_bshd_strides(k_out, layout), INVERSE=inverse, **meta)


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    """Gradients arrive in any layout (y.sum() sends stride-0 ones): copy only if the kernel must."""
    return t if t.stride(-1) == 1 or t.numel() == 0 else t.contiguous()


def _dense_like(t: torch.Tensor) -> torch.Tensor:
    """A new tensor of t's shape and dtype, contiguous: what every result of this module is."""
    return torch.empty_like(t, memory_format=torch.contiguous_format)  # ~2x cheaper than t.new_empty(t.shape)


def rope_hot_path(q, k, cos, sin, position_offset: int, layout: str, inverse: bool = False):
    """(rotated q, rotated k or None), new tensors contiguous in the logical layout; `inverse`
    rotates by -theta (the backward). Unchecked: what the checked entries call."""
    q_out = _dense_like(q)
    k_out = None if k is None else _dense_like(k)
    _launch(q, k, q_out, k_out, cos, sin, position_offset, layout, inverse)
    return q_out, k_out


# ---------------------------------------------------------------------------------- launchers
def rope_tables(max_seq_len: int, head_dim: int, *, base: float = BASE, device=None):
    """(cos, sin), each (max_seq_len, head_dim // 2) fp32, from angles computed in fp64."""
    if not isinstance(max_seq_len, int) or max_seq_len < 0:
        raise ValueError(f"max_seq_len must be an int >= 0, got {max_seq_len!r}")
    if not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be an even int >= 2, got {head_dim!r}")
    half = head_dim // 2
    inv_freq = base ** (-torch.arange(half, dtype=torch.float64) * 2.0 / head_dim)
    angles = torch.arange(max_seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
    device = DEVICE if device is None else device
    return angles.cos().float().to(device), angles.sin().float().to(device)


def _dims(x: torch.Tensor, layout: str):
    """(B, S, H, D) and the matching strides of x, whatever its layout."""
    if layout == "bhsd":
        B, H, S, D = x.shape
    else:
        B, S, H, D = x.shape
    return (B, S, H, D), _bshd_strides(x, layout)


def _check_inputs(x, cos, sin, position_offset, layout, name="x"):
    validate.tensor(x, name, dtypes=DTYPES, ndim=4, contiguous=False)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    (B, S, H, D), _ = _dims(x, layout)
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


def rope_forward(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_offset: int = 0,
                 layout: str = "bhsd", *, inverse: bool = False, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rotate x (4-D, `layout`) by the angles of positions offset .. offset + S - 1.

    `inverse=True` rotates by -theta (the backward). x may be any view whose last dimension is
    contiguous. Without `out` the result is a new tensor, contiguous in the logical layout;
    `out` may be any tensor of x's shape and dtype whose last dimension is contiguous (another
    layout's memory, a view into a cache).
    """
    _check_inputs(x, cos, sin, position_offset, layout)
    if out is None:
        out = _dense_like(x)
    else:
        validate.tensor(out, "out", dtypes=(x.dtype,), contiguous=False)
        if out.shape != x.shape:
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {tuple(x.shape)}")
        if out.stride(-1) != 1 and out.numel() > 0:
            raise ValueError(f"out has strides {out.stride()}: its last dimension must be contiguous")
        if out.device != x.device:
            raise ValueError(f"out is on {out.device}, x on {x.device}: they must share a device")
    _launch(x, None, out, None, cos, sin, _as_int(position_offset), layout, bool(inverse))
    return out


# ------------------------------------------------------------------- the op torch.compile sees
@torch.library.custom_op(f"{NAMESPACE}::rope_qk", mutates_args=())
def rope_qk_op(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               position_offset: int, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(rotated q, rotated k), one launch; see apply_rope. Outputs contiguous in the logical layout."""
    return rope_hot_path(q, k, cos, sin, position_offset, layout)


@rope_qk_op.register_fake
def _rope_qk_fake(q, k, cos, sin, position_offset, layout):
    # Shapes, dtypes and strides only: new tensors, contiguous (what rope_hot_path allocates).
    return _dense_like(q), _dense_like(k)


@torch.library.custom_op(f"{NAMESPACE}::rope_qk_backward", mutates_args=())
def rope_qk_backward_op(dq: torch.Tensor, dk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                        position_offset: int, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(dq, dk) of the inputs: the gradients rotated by -theta (gradients of any strides)."""
    return rope_hot_path(_last_dim_contiguous(dq), _last_dim_contiguous(dk), cos, sin, position_offset, layout, True)


@rope_qk_backward_op.register_fake
def _rope_qk_backward_fake(dq, dk, cos, sin, position_offset, layout):
    return _dense_like(dq), _dense_like(dk)


def _setup_context(ctx, inputs, output):
    _, _, cos, sin, position_offset, layout = inputs[:6]
    ctx.save_for_backward(cos, sin)
    ctx.position_offset, ctx.layout = position_offset, layout


def _rope_qk_backward_formula(ctx, dq, dk):
    cos, sin = ctx.saved_tensors
    dq, dk = rope_qk_backward_op(dq, dk, cos, sin, ctx.position_offset, ctx.layout)  # one node
    return dq, dk, None, None, None, None


rope_qk_op.register_autograd(_rope_qk_backward_formula, setup_context=_setup_context)


@torch.library.custom_op(f"{NAMESPACE}::rope", mutates_args=())
def rope_op(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_offset: int,
            layout: str) -> torch.Tensor:
    """One tensor rotated; see rope."""
    return rope_hot_path(x, None, cos, sin, position_offset, layout)[0]


@rope_op.register_fake
def _rope_fake(x, cos, sin, position_offset, layout):
    return _dense_like(x)


@torch.library.custom_op(f"{NAMESPACE}::rope_backward", mutates_args=())
def rope_backward_op(dy: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_offset: int,
                     layout: str) -> torch.Tensor:
    return rope_hot_path(_last_dim_contiguous(dy), None, cos, sin, position_offset, layout, True)[0]


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


# ------------------------------------------------------------------- the op eager mode calls
class RoPEQKFunction(torch.autograd.Function):
    """(R(m theta) q, R(m theta) k), one launch each way; no gradient for the tables."""

    @staticmethod
    def forward(ctx, q, k, cos, sin, position_offset, layout):
        ctx.save_for_backward(cos, sin)
        ctx.position_offset, ctx.layout = position_offset, layout
        return rope_hot_path(q, k, cos, sin, position_offset, layout)

    @staticmethod
    def backward(ctx, dq, dk):
        cos, sin = ctx.saved_tensors
        dq, dk = rope_hot_path(_last_dim_contiguous(dq), _last_dim_contiguous(dk), cos, sin,
                          ctx.position_offset, ctx.layout, True)
        return dq, dk, None, None, None, None


class RoPEFunction(torch.autograd.Function):
    """y = R(m theta) x; backward dx = R(-m theta) dy (no gradient for the tables)."""

    @staticmethod
    def forward(ctx, x, cos, sin, position_offset, layout):
        ctx.save_for_backward(cos, sin)
        ctx.position_offset, ctx.layout = position_offset, layout
        return rope_hot_path(x, None, cos, sin, position_offset, layout)[0]

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        dx = rope_hot_path(_last_dim_contiguous(dy), None, cos, sin, ctx.position_offset, ctx.layout, True)[0]
        return dx, None, None, None, None


# The public entries' checks: a few comparisons on the hot path (on the CPU machine this was
# written on, `t.device.type` alone cost ~1 us a call, `t.is_cuda` ~0.1 us); the full checks,
# with the course's messages, run only when one of these fails.
_on_device = (lambda t: t.is_cuda) if DEVICE.type == "cuda" else (lambda t: t.is_cpu)


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
    return rope_hot_path(x, None, cos, sin, position_offset, layout)[0]


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
    return rope_hot_path(q, k, cos, sin, position_offset, layout)


# ---------------------------------------------------------------------------- torch references
def _table_view(t: torch.Tensor, S: int, position_offset: int, layout: str) -> torch.Tensor:
    rows = t[position_offset:position_offset + S]
    return rows[None, None] if layout == "bhsd" else rows[None, :, None]


def rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_offset: int = 0,
                   layout: str = "bhsd") -> torch.Tensor:
    """The two formulas above in torch, in fp32 (fp64 for fp64 x), rounded once to x's dtype."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    S, half = x.shape[2 if layout == "bhsd" else 1], x.shape[-1] // 2
    c = _table_view(cos, S, position_offset, layout).to(compute)
    s = _table_view(sin, S, position_offset, layout).to(compute)
    x1, x2 = x[..., :half].to(compute), x[..., half:].to(compute)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rope_rotate_half(q, k, cos_full, sin_full):
    """The form most model code uses, eager, in q's dtype, with (S, D) tables in that dtype."""
    return q * cos_full + rotate_half(q) * sin_full, k * cos_full + rotate_half(k) * sin_full


def full_tables(cos, sin, S: int, dtype: torch.dtype, layout: str = "bhsd"):
    """(S, D) tables with the halves duplicated, in `dtype`, shaped to broadcast: for rope_rotate_half."""
    c, s = (torch.cat([t[:S], t[:S]], dim=-1).to(dtype) for t in (cos, sin))
    return _table_view(c, S, 0, layout), _table_view(s, S, 0, layout)
