"""Exercise: LayerNorm forward and backward in Triton, wired into autograd.

Same names as week4_triton_dl/layernorm.py. Check your work with
`pytest tests/week4/test_layernorm.py --impl=exercises`. Without a GPU the kernels run in the
Triton interpreter: `print` and pdb work inside them.

Order that works: `layernorm_fwd_row_kernel` + `layer_norm_forward(kernel="row")`; then the
backward (`layernorm_bwd_kernel`, `partial_sum_kernel`, `column_sums`, `layer_norm_backward`);
then `LayerNormFunction` (gradcheck tells you when the backward is right); the persistent
forward and the atomic backward last. The solution's private helpers (`_check_rows`,
`_check_vector`, `_check_eps`, `_check_stats`, `_programs`, `_num_warps`, ...) do the input
checks and launch sizing; import them from `week4_triton_dl.layernorm` if you like.
"""
from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
MAX_N = 32768
KERNELS_FORWARD = ("persistent", "row")
KERNELS_BACKWARD = ("partial", "atomic")
FWD_PROGRAMS_PER_SM = 4
BWD_PROGRAMS_PER_SM = 2
FWD_NUM_STAGES = 2
BWD_NUM_STAGES = 2
PIPELINE_SMEM_BYTES = 128 * 1024
FORWARD_KERNEL = "row"  # the default: the row kernel won on the H100
PARTIAL_BLOCK_P, PARTIAL_BLOCK_N = 32, 64


@triton.jit
def layernorm_fwd_row_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, N, eps,
                             HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                             BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """One program per row: mean, variance (two passes over registers), normalise, scale, shift."""
    # TODO: row = program_id as int64; load the row (other=0) and convert .to(ACC); mean; centre
    # with tl.where(mask, x - mean, 0) so padding adds nothing to the variance; rstd = 1 / sqrt;
    # y = xc * rstd (* w) (+ b); store y in y's dtype, and mean and rstd.
    pass


@triton.jit
def layernorm_fwd_persistent_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr,
                                    M, N, rows_per_program, eps,
                                    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr,
                                    NUM_STAGES: tl.constexpr):
    """Each program normalises rows [pid * rows_per_program, ...) in steps of BLOCK_M rows."""
    # TODO: load w and b once, before the loop;
    # for step in tl.range(0, rows_per_program, BLOCK_M, num_stages=NUM_STAGES):
    # a [BLOCK_M, BLOCK_N] tile, reductions along axis=1, rows masked against M.
    pass


@triton.jit
def layernorm_bwd_atomic_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr,
                                N, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                                BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """One program per row: dx, then tl.atomic_add of dy * xhat and dy into fp32 dw, db."""
    # TODO: xhat = (x - mean) * rstd (0 in padding lanes); g = dy * w;
    # dx = (g - xhat * mean(g * xhat) - mean(g)) * rstd. Launch the backward kernels with
    # enable_fp_fusion=False: an FMA would subtract the rounded mean(g) from the EXACT dy * w,
    # and with one column (rstd = 1/sqrt(eps)) that rounding error shows up as dx != 0.
    pass


@triton.jit
def layernorm_bwd_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr,
                         dw_partial_ptr, db_partial_ptr, M, N, rows_per_program,
                         HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr,
                         NUM_STAGES: tl.constexpr):
    """dx for a run of rows; dw/db partial sums in registers, one partials row per program."""
    # TODO: as the atomic kernel for dx; accumulate dy * xhat and dy into [BLOCK_M, BLOCK_N]
    # accumulators; after the loop, store their column sums into row `pid` of the partials.
    pass


@triton.jit
def partial_sum_kernel(partial_ptr, out_ptr, P, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """Stage 2: each program sums BLOCK_N columns of the (P, N) partials over all P rows."""
    # TODO: loop over P in BLOCK_P steps, accumulate tiles, tl.sum(axis=0), store in out's dtype.
    pass


def column_sums(partials, dtype):
    """Sum a (P, N) partials buffer over its rows, rounded once to `dtype`."""
    raise NotImplementedError("not implemented yet: column_sums (week4 exercise)")


def layer_norm_forward(x, weight=None, bias=None, eps=1e-5, *, out=None, kernel=None,
                       block_m=None, num_programs=None, num_warps=None, num_stages=None):
    """LayerNorm over the last dimension: returns (y, mean, rstd)."""
    raise NotImplementedError("not implemented yet: layer_norm_forward (week4 exercise)")


def layer_norm_backward(dy, x, mean, rstd, weight=None, has_bias=False, *, kernel="partial",
                        block_m=None, num_partials=None, num_warps=None, num_stages=None):
    """Returns (dx, dweight or None, dbias or None)."""
    raise NotImplementedError("not implemented yet: layer_norm_backward (week4 exercise)")


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        # TODO: run layer_norm_forward, save x, weight, mean, rstd; remember whether bias exists.
        raise NotImplementedError("not implemented yet: LayerNormFunction.forward (week4 exercise)")

    @staticmethod
    def backward(ctx, dy):
        # TODO: layer_norm_backward on dy.contiguous(); return dx, dw, db, None (for eps).
        raise NotImplementedError("not implemented yet: LayerNormFunction.backward (week4 exercise)")


def _normalized_shape(normalized_shape):
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(n) for n in normalized_shape)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """`F.layer_norm` through LayerNormFunction (given: the reshaping around your kernels)."""
    shape = _normalized_shape(normalized_shape)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    k = len(shape)
    if k == 0 or x.dim() < k or tuple(x.shape[-k:]) != shape:
        raise ValueError(f"normalized_shape {shape} must be the last dimensions of x (shape {tuple(x.shape)})")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (not isinstance(t, torch.Tensor) or tuple(t.shape) != shape):
            raise ValueError(f"{name} has shape {getattr(t, 'shape', None)}; expected normalized_shape {shape}")
    n = math.prod(shape)
    x2 = x.contiguous().reshape(*x.shape[:x.dim() - k], n)
    w = weight.reshape(n) if weight is not None else None
    b = bias.reshape(n) if bias is not None else None
    return LayerNormFunction.apply(x2, w, b, eps).reshape(x.shape)


class TritonLayerNorm(nn.LayerNorm):
    def forward(self, x):
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
