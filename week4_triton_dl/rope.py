"""Rotary position embedding (RoPE) in Triton: q and k rotated by their position, forward and backward.

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
* "bshd" (B, S, H, D): what a qkv projection produces before its transpose. Rotating here
  and then `.transpose(1, 2)` hands SDPA a (B, H, S, D) view, also with no copy.
One program handles one (batch, position) and a block of heads: it loads that position's cos
and sin rows once and applies them to every head in the block.

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
"""
from __future__ import annotations

import numbers

import torch

from course import runtime  # before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.bench import Benchmark
from course.check import random_tensor

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
LAYOUTS = ("bhsd", "bshd")
BASE = 10000.0
TILE = 2048  # elements of each half per program: ~16 per thread at 4 warps


@triton.jit
def rope_kernel(x_ptr, y_ptr, cos_ptr, sin_ptr, S, H, HALF, position_offset,
                stride_xb, stride_xs, stride_xh, stride_yb, stride_ys, stride_yh,
                INVERSE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
                ACC: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # one (batch, position) per program along axis 0
    b = pid // S
    s = pid % S
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    d_mask = d < HALF
    mask = (heads < H)[:, None] & d_mask[None, :]
    # This position's row of each table: loaded once, used for every head of the block.
    pos = position_offset + s
    cos = tl.load(cos_ptr + pos * HALF + d, mask=d_mask, other=0.0).to(ACC)[None, :]
    sin = tl.load(sin_ptr + pos * HALF + d, mask=d_mask, other=0.0).to(ACC)[None, :]
    if INVERSE:  # the backward: R(theta)^T = R(-theta)
        sin = -sin
    x_first = x_ptr + b * stride_xb + s * stride_xs + heads[:, None].to(tl.int64) * stride_xh + d[None, :]
    y_first = y_ptr + b * stride_yb + s * stride_ys + heads[:, None].to(tl.int64) * stride_yh + d[None, :]
    # Each half-row is D/2 contiguous elements: whole cache lines for D = 128 in 16-bit.
    x1 = tl.load(x_first, mask=mask, other=0.0).to(ACC)
    x2 = tl.load(x_first + HALF, mask=mask, other=0.0).to(ACC)
    tl.store(y_first, (x1 * cos - x2 * sin).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_first + HALF, (x2 * cos + x1 * sin).to(y_ptr.dtype.element_ty), mask=mask)


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
    device = runtime.DEVICE if device is None else device
    return angles.cos().float().to(device), angles.sin().float().to(device)


def _dims(x: torch.Tensor, layout: str):
    """(B, S, H, D) and the matching strides of x, whatever its layout."""
    if layout == "bhsd":
        B, H, S, D = x.shape
        sb, sh, ss, _ = x.stride()
    else:
        B, S, H, D = x.shape
        sb, ss, sh, _ = x.stride()
    return (B, S, H, D), (sb, ss, sh)


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
    if not isinstance(position_offset, numbers.Integral) or isinstance(position_offset, bool) \
            or position_offset < 0:
        raise ValueError(f"position_offset must be an int >= 0, got {position_offset!r}")
    if position_offset + S > cos.shape[0]:
        raise ValueError(f"positions {position_offset} .. {position_offset + S - 1} need tables of at least "
                         f"{position_offset + S} rows; cos/sin have {cos.shape[0]}")
    return B, S, H, D


def rope_forward(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_offset: int = 0,
                 layout: str = "bhsd", *, inverse: bool = False, out: torch.Tensor | None = None) -> torch.Tensor:
    """Rotate x (4-D, `layout`) by the angles of positions offset .. offset + S - 1.

    `inverse=True` rotates by -theta (the backward). The output has x's memory layout when x
    is dense (`torch.empty_like`), else is contiguous; `out` may be any tensor of x's shape
    and dtype whose last dimension is contiguous.
    """
    B, S, H, D = _check_inputs(x, cos, sin, position_offset, layout)
    if out is None:
        out = torch.empty_like(x)
    else:
        validate.tensor(out, "out", dtypes=(x.dtype,), contiguous=False)
        if out.shape != x.shape:
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {tuple(x.shape)}")
        if out.stride(-1) != 1 and out.numel() > 0:
            raise ValueError(f"out has strides {out.stride()}: its last dimension must be contiguous")
    if x.numel() == 0:
        return out
    _, (sxb, sxs, sxh) = _dims(x, layout)
    _, (syb, sys_, syh) = _dims(out, layout)
    block_d = triton.next_power_of_2(D // 2)
    block_h = min(triton.next_power_of_2(H), max(1, TILE // block_d))
    grid = (B * S, triton.cdiv(H, block_h))
    rope_kernel[grid](x, out, cos, sin, S, H, D // 2, int(position_offset), sxb, sxs, sxh, syb, sys_, syh,
                      INVERSE=bool(inverse), BLOCK_H=block_h, BLOCK_D=block_d,
                      ACC=tl.float64 if x.dtype == torch.float64 else tl.float32, num_warps=4)
    return out


# ----------------------------------------------------------------------------------- autograd
class RoPEFunction(torch.autograd.Function):
    """y = R(m theta) x; backward dx = R(-m theta) dy (no gradient for the tables)."""

    @staticmethod
    def forward(ctx, x, cos, sin, position_offset, layout):
        ctx.save_for_backward(cos, sin)
        ctx.position_offset, ctx.layout = position_offset, layout
        return rope_forward(x, cos, sin, position_offset, layout)

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        if dy.stride(-1) != 1:  # gradients may arrive in any layout; the kernel needs stride 1 last
            dy = dy.contiguous()
        dx = rope_forward(dy, cos, sin, ctx.position_offset, ctx.layout, inverse=True)
        return dx, None, None, None, None


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_offset: int = 0,
         layout: str = "bhsd") -> torch.Tensor:
    """RoPE on one tensor (q or k), differentiable."""
    return RoPEFunction.apply(x, cos, sin, position_offset, layout)


def apply_rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               position_offset: int = 0, layout: str = "bhsd"):
    """(rope(q), rope(k)): q and k may have different head counts (grouped-query attention)."""
    return rope(q, cos, sin, position_offset, layout), rope(k, cos, sin, position_offset, layout)


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


# ---------------------------------------------------------------------------------- benchmarks
# (B, S, H_q, H_kv, D), bf16 on the GPU. The last size is the headline: q and k 134 MB each.
SIZES = [(8, 2048, 32, 8, 128), (4, 4096, 32, 32, 128)]
SIM_SIZES = [(1, 8, 2, 1, 16)]
_compiled: dict = {}


def bench_dtype() -> torch.dtype:
    """bf16 on GPUs with bf16 hardware (sm_80+), fp16 on older ones (Colab's T4), fp32 simulated."""
    if not runtime.on_gpu():
        return torch.float32
    return torch.bfloat16 if torch.cuda.get_device_capability()[0] >= 8 else torch.float16


def _compiled_rotate_half(*args):
    if "f" not in _compiled:  # compiled on the first (warm-up) call, never inside the timing
        _compiled["f"] = torch.compile(rope_rotate_half, dynamic=False)
    return _compiled["f"](*args)


def _inputs(size):
    B, S, Hq, Hkv, D = size
    dtype = bench_dtype()
    q = random_tensor((B, Hq, S, D), dtype, runtime.DEVICE)
    k = random_tensor((B, Hkv, S, D), dtype, runtime.DEVICE)
    cos, sin = rope_tables(S, D)
    cos_full, sin_full = full_tables(cos, sin, S, dtype)
    return q, k, cos, sin, cos_full, sin_full


def _bytes(size):
    B, S, Hq, Hkv, D = size
    itemsize = bench_dtype().itemsize
    return 2 * B * S * (Hq + Hkv) * D * itemsize + 2 * S * (D // 2) * 4


BENCHMARKS = [
    Benchmark(
        name="rope_week4",
        title="RoPE on q and k, (B, H, S, D), bf16 (fp16 before sm_80, fp32 in simulation); "
              "size = B x S x Hq/Hkv x D",
        sizes=SIZES, sim_sizes=SIM_SIZES,
        size_label=lambda s: f"{s[0]}x{s[1]}x{s[2]}/{s[3]}x{s[4]}",
        make_inputs=_inputs,
        variants={
            "torch": lambda q, k, c, s, cf, sf: rope_rotate_half(q, k, cf, sf),
            "torch_compile": lambda q, k, c, s, cf, sf: _compiled_rotate_half(q, k, cf, sf),
            "triton": lambda q, k, c, s, cf, sf: (rope_forward(q, c, s), rope_forward(k, c, s)),
            "triton_backward": lambda q, k, c, s, cf, sf: (rope_forward(q, c, s, inverse=True),
                                                           rope_forward(k, c, s, inverse=True)),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=_bytes,
        flops=lambda s: 3 * s[0] * s[1] * (s[2] + s[3]) * s[4],
        notes="bytes = read q, k + write both (+ the fp32 tables once); torch = x * cos + "
              "rotate_half(x) * sin in eager bf16 ops (neg, cat, mul, mul, add: ~5x the bytes); "
              "triton_backward is the same kernel rotating by -theta (two launches: q, then k)",
    ),
]
