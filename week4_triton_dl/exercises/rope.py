"""Exercise: rotary position embedding (RoPE) in Triton, forward and backward.

Same names as week4_triton_dl/rope.py. Check your work with
`pytest tests/week4/test_rope.py --impl=exercises`. The tables and the torch references are
given; write the kernel, its launcher and the autograd Function.
"""
from __future__ import annotations

import torch

from course import runtime
from course import validate  # noqa: F401

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
LAYOUTS = ("bhsd", "bshd")
BASE = 10000.0
TILE = 2048


@triton.jit
def rope_kernel(x_ptr, y_ptr, cos_ptr, sin_ptr, S, H, HALF, position_offset,
                stride_xb, stride_xs, stride_xh, stride_yb, stride_ys, stride_yh,
                INVERSE: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, ACC: tl.constexpr):
    """Program (b * S + s, head block): rotate pairs (x[i], x[i + HALF]) of BLOCK_H heads."""
    # TODO: b, s from program_id(0) (int64); load the cos/sin row of position
    # position_offset + s once; address x through its strides; y1 = x1 cos - x2 sin,
    # y2 = x2 cos + x1 sin; INVERSE flips the sign of sin (the backward).
    pass


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


def rope_forward(x, cos, sin, position_offset=0, layout="bhsd", *, inverse=False, out=None):
    """Rotate x (4-D, `layout`) by positions offset .. offset + S - 1; inverse=True rotates back."""
    raise NotImplementedError("not implemented yet: rope_forward (week4 exercise)")


class RoPEFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin, position_offset, layout):
        raise NotImplementedError("not implemented yet: RoPEFunction.forward (week4 exercise)")

    @staticmethod
    def backward(ctx, dy):
        raise NotImplementedError("not implemented yet: RoPEFunction.backward (week4 exercise)")


def rope(x, cos, sin, position_offset=0, layout="bhsd"):
    return RoPEFunction.apply(x, cos, sin, position_offset, layout)


def apply_rope(q, k, cos, sin, position_offset=0, layout="bhsd"):
    return rope(q, cos, sin, position_offset, layout), rope(k, cos, sin, position_offset, layout)


def _table_view(t, S, position_offset, layout):
    rows = t[position_offset:position_offset + S]
    return rows[None, None] if layout == "bhsd" else rows[None, :, None]


def rope_reference(x, cos, sin, position_offset=0, layout="bhsd"):
    """The rotate-half formulas in torch, fp32 (fp64 for fp64 x), rounded once (given)."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    S, half = x.shape[2 if layout == "bhsd" else 1], x.shape[-1] // 2
    c = _table_view(cos, S, position_offset, layout).to(compute)
    s = _table_view(sin, S, position_offset, layout).to(compute)
    x1, x2 = x[..., :half].to(compute), x[..., half:].to(compute)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)
