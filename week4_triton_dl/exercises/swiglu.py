"""Exercise: SwiGLU, y = silu(a) * b, forward and backward fused in Triton.

Same names as week4_triton_dl/swiglu.py. Check your work with
`pytest tests/week4/test_swiglu.py --impl=exercises`.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TILE = 2048


@triton.jit
def swiglu_fwd_kernel(a_ptr, b_ptr, y_ptr, M, N, stride_a, stride_b, stride_y,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """A [BLOCK_M, BLOCK_N] tile: y = a * sigmoid(a) * b, rows addressed through their strides."""
    # TODO: 2-D grid (row block, column block); s = 1 / (1 + exp(-a)) in ACC; store (a * s) * b.
    pass


@triton.jit
def swiglu_bwd_kernel(dy_ptr, a_ptr, b_ptr, da_ptr, db_ptr, M, N,
                      stride_dy, stride_a, stride_b, stride_da, stride_db,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """db = dy * silu(a); da = dy * b * s * (1 + a * (1 - s)), s = sigmoid(a) recomputed."""
    # TODO
    pass


def swiglu_forward(a, b, out=None):
    raise NotImplementedError("not implemented yet: swiglu_forward (week4 exercise)")


def swiglu_backward(dy, a, b, da=None, db=None):
    raise NotImplementedError("not implemented yet: swiglu_backward (week4 exercise)")


def swiglu_packed_forward(h):
    """silu(h[..., :N]) * h[..., N:] for h of shape (..., 2N)."""
    raise NotImplementedError("not implemented yet: swiglu_packed_forward (week4 exercise)")


def swiglu_packed_backward(dy, h):
    """dh = [da | db] of h's shape, written in one pass."""
    raise NotImplementedError("not implemented yet: swiglu_packed_backward (week4 exercise)")


class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        raise NotImplementedError("not implemented yet: SwiGLUFunction.forward (week4 exercise)")

    @staticmethod
    def backward(ctx, dy):
        raise NotImplementedError("not implemented yet: SwiGLUFunction.backward (week4 exercise)")


class SwiGLUPackedFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        raise NotImplementedError("not implemented yet: SwiGLUPackedFunction.forward (week4 exercise)")

    @staticmethod
    def backward(ctx, dy):
        raise NotImplementedError("not implemented yet: SwiGLUPackedFunction.backward (week4 exercise)")


def swiglu(a, b):
    return SwiGLUFunction.apply(a, b)


def swiglu_packed(h):
    return SwiGLUPackedFunction.apply(h)
