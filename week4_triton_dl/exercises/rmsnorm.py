"""Exercise: RMSNorm forward and backward in Triton, wired into autograd.

Same names as week4_triton_dl/rmsnorm.py. Check your work with
`pytest tests/week4/test_rmsnorm.py --impl=exercises`. Do the LayerNorm exercise first: this
is the same with one reduction fewer, and it reuses LayerNorm's stage-2 reduction
(`week4_triton_dl.layernorm.column_sums`) and input checks (imported below as `ln`).

GIVEN (not exercises): the registered op `torch.ops.course_exercises.rms_norm` (fake function,
autograd formula), `RMSNormFunction` and the public `rms_norm`: they call your `_forward` and
`_backward`, the unchecked hot path. Write the kernels, the launchers, then those two.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from course import ops, runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401
from week4_triton_dl import layernorm as ln

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

DTYPES = ln.DTYPES
MAX_N = ln.MAX_N
LOOP_BLOCK_N = ln.LOOP_BLOCK_N
KERNELS_FORWARD = ("persistent", "row", "looped")
KERNELS_BACKWARD = ("partial", "looped")
NAMESPACE = ops.namespace(__name__)
FWD_PROGRAMS_PER_SM = 4
BWD_PROGRAMS_PER_SM = 2
FWD_NUM_STAGES = 2
BWD_NUM_STAGES = 3
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
def rmsnorm_fwd_looped_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, N, eps,
                              HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """A row wider than a block, in chunks of BLOCK_N: pass 1 sums the squares, pass 2 writes y."""
    # TODO
    pass


@triton.jit
def rmsnorm_bwd_looped_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_partial_ptr,
                              M, N, rows_per_program, HAS_WEIGHT: tl.constexpr,
                              BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """Rows wider than a block: per row, one chunked pass for mean(g * xhat), one for dx; the
    program's dw partials row lives in global memory (read, add, write back)."""
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
                     num_programs=None, num_warps=None, num_stages=None, block_n=None):
    """Returns (y, rstd). kernel: "row" (default up to MAX_N), "looped" (above; block_n = chunk), "persistent"."""
    raise NotImplementedError("not implemented yet: rms_norm_forward (week4 exercise)")


def rms_norm_backward(dy, x, rstd, weight=None, *, kernel=None, block_m=None, num_partials=None,
                      num_warps=None, num_stages=None, block_n=None):
    """Returns (dx, dweight or None). kernel: "partial" (default up to MAX_N) or "looped"."""
    raise NotImplementedError("not implemented yet: rms_norm_backward (week4 exercise)")


def _forward(x, weight, eps, M, N):
    """The hot path the op calls: (y, rstd (M,)) of a contiguous x of M rows of N, no checks."""
    raise NotImplementedError("not implemented yet: _forward (week4 exercise)")


def _backward(dy, x, rstd, weight, M, N):
    """The hot path of the backward: (dx, dw or None), no checks."""
    raise NotImplementedError("not implemented yet: _backward (week4 exercise)")


# ------------------------------------------------------------- GIVEN: the op around your kernels
@torch.library.custom_op(f"{NAMESPACE}::rms_norm", mutates_args=())
def rms_norm_op(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward(x, weight, eps, x.shape[0], x.shape[1])


@rms_norm_op.register_fake
def _rms_norm_fake(x, weight, eps):
    return torch.empty_like(x), x.new_empty(x.shape[:1], dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)


@torch.library.custom_op(f"{NAMESPACE}::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor,
                         weight: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    dx, dw = _backward(dy.contiguous(), x, rstd, weight, x.shape[0], x.shape[1])
    return dx, (dw if dw is not None else x.new_empty(0))


@rms_norm_backward_op.register_fake
def _rms_norm_backward_fake(dy, x, rstd, weight):
    return torch.empty_like(x), (torch.empty_like(weight) if weight is not None else x.new_empty(0))


def _setup_context(ctx, inputs, output):
    x, weight, _ = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.mark_non_differentiable(output[1])


def _backward_formula(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = rms_norm_backward_op(dy, x, rstd, weight)
    return dx, (dw if weight is not None else None), None


rms_norm_op.register_autograd(_backward_formula, setup_context=_setup_context)


class RMSNormFunction(torch.autograd.Function):
    """The eager path: the same _forward/_backward, without the custom op's dispatch cost."""

    @staticmethod
    def forward(ctx, x, weight, eps, M, N):
        y, rstd = _forward(x, weight, eps, M, N)
        ctx.save_for_backward(x, weight, rstd)
        ctx.rows = (M, N)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = _backward(dy.contiguous(), x, rstd, weight, *ctx.rows)
        return dx, (dw if dw is None else dw.view(weight.shape)), None, None, None


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """`F.rms_norm` on your kernels: the registered op under torch.compile, else RMSNormFunction."""
    shape = ln.normalized_shape_of(normalized_shape)
    ln.check_call(x, shape, weight)
    eps = default_eps(x.dtype) if eps is None else ln._check_eps(eps)
    if ops.compiling():
        x2 = ln.as_rows(x, shape)
        w = weight if weight is None or weight.dim() == 1 else weight.reshape(x2.shape[1])
        return rms_norm_op(x2, w, eps)[0].view(x.shape)
    x = x.contiguous()
    weight = weight if weight is None else weight.contiguous()
    M, N = ln.rows_of(x, shape)
    if ops.needs_grad(x, weight):
        return RMSNormFunction.apply(x, weight, eps, M, N)
    return _forward(x, weight, eps, M, N)[0]


class TritonRMSNorm(nn.RMSNorm):
    def forward(self, x):
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)
