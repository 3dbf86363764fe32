"""Exercise: RMSNorm forward and backward in Triton, wired into autograd.

Same names as week4_triton_dl/rmsnorm.py. Check your work with
`pytest tests/week4/test_rmsnorm.py --impl=exercises`. Do the LayerNorm exercise first: this
is the same with one reduction fewer, and it reuses LayerNorm's stage-2 reduction
(`week4_triton_dl.layernorm.column_sums`) and input checks (imported below as `ln`).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401
from week4_triton_dl import layernorm as ln

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

DTYPES = ln.DTYPES
MAX_N = ln.MAX_N
KERNELS_FORWARD = ("persistent", "row")
FWD_PROGRAMS_PER_SM = 4
BWD_PROGRAMS_PER_SM = 2
FWD_NUM_STAGES = 2
BWD_NUM_STAGES = 2
FORWARD_KERNEL = "row"  # the default: the row kernel won on the H100


@triton.jit
def rmsnorm_fwd_row_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, N, eps,
                           HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """One program per row: rstd = 1 / sqrt(mean(x^2) + eps); y = x * rstd (* w).

    A row holding an Inf must come out NaN throughout, as torch's CUDA kernel returns it (its
    Welford moments meet inf - inf), not 0 beside the Inf (what 1/sqrt(inf) = 0 would give):
    x - x is 0 for finite x and NaN for an Inf.
    """
    # TODO
    pass


@triton.jit
def rmsnorm_fwd_persistent_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, M, N, rows_per_program, eps,
                                  HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr,
                                  BLOCK_N: tl.constexpr, ACC: tl.constexpr, NUM_STAGES: tl.constexpr):
    """A run of rows per program, BLOCK_M rows per step, w loaded once."""
    # TODO
    pass


@triton.jit
def rmsnorm_bwd_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_partial_ptr,
                       M, N, rows_per_program, HAS_WEIGHT: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr,
                       NUM_STAGES: tl.constexpr):
    """dx = (g - xhat * mean(g * xhat)) * rstd with xhat = x * rstd, g = dy * w; dw partials."""
    # TODO
    pass


def default_eps(dtype):
    """What torch uses for eps=None: the epsilon of its compute type (fp32 for 16-bit inputs)."""
    return torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps


def rms_norm_forward(x, weight=None, eps=None, *, out=None, kernel=None, block_m=None,
                     num_programs=None, num_warps=None, num_stages=None):
    """Returns (y, rstd)."""
    raise NotImplementedError("not implemented yet: rms_norm_forward (week4 exercise)")


def rms_norm_backward(dy, x, rstd, weight=None, *, block_m=None, num_partials=None, num_warps=None,
                      num_stages=None):
    """Returns (dx, dweight or None)."""
    raise NotImplementedError("not implemented yet: rms_norm_backward (week4 exercise)")


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        raise NotImplementedError("not implemented yet: RMSNormFunction.forward (week4 exercise)")

    @staticmethod
    def backward(ctx, dy):
        raise NotImplementedError("not implemented yet: RMSNormFunction.backward (week4 exercise)")


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """`F.rms_norm` through RMSNormFunction (given: the reshaping around your kernels)."""
    shape = ln._normalized_shape(normalized_shape)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    k = len(shape)
    if k == 0 or x.dim() < k or tuple(x.shape[-k:]) != shape:
        raise ValueError(f"normalized_shape {shape} must be the last dimensions of x (shape {tuple(x.shape)})")
    if weight is not None and tuple(weight.shape) != shape:
        raise ValueError(f"weight has shape {tuple(weight.shape)}; expected normalized_shape {shape}")
    n = math.prod(shape)
    x2 = x.contiguous().reshape(*x.shape[:x.dim() - k], n)
    return RMSNormFunction.apply(x2, weight.reshape(n) if weight is not None else None, eps).reshape(x.shape)


class TritonRMSNorm(nn.RMSNorm):
    def forward(self, x):
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)
