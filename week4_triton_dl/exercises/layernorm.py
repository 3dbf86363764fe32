"""Exercise: LayerNorm forward and backward in Triton, wired into autograd.

Same names as week4_triton_dl/layernorm.py. Check your work with
`pytest tests/week4/test_layernorm.py --impl=exercises`. Without a GPU the kernels run in the
Triton interpreter: `print` and pdb work inside them.

Order that works: `layernorm_fwd_row_kernel` + `layer_norm_forward(kernel="row")`; then the
backward (`layernorm_bwd_kernel`, `partial_sum_kernel`, `column_sums`, `layer_norm_backward`);
then `_forward` and `_backward`, the unchecked hot path the op calls (gradcheck tells you when
the backward is right); the looped kernels for rows wider than MAX_N; the persistent forward and
the atomic backward last. The solution's private helpers (`_check_rows`, `_check_vector`,
`_check_eps`, `_check_stats`, `_programs`, `_num_warps`, `next_power_of_2`, ...) do the input
checks and launch sizing; import them from `week4_triton_dl.layernorm` if you like.

GIVEN (not exercises): the registered op `torch.ops.course_exercises.layer_norm` with its fake
function and autograd formula, `LayerNormFunction` and the public `layer_norm`: they call your
`_forward` and `_backward`. Read them in the solution to see how a kernel becomes a PyTorch op.
"""
from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from course import ops, runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401
from week4_triton_dl import layernorm as _solution  # given plumbing only: the public-entry checks

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
MAX_N = 32768
LOOP_BLOCK_N = 4096
KERNELS_FORWARD = ("persistent", "row", "looped")
KERNELS_BACKWARD = ("partial", "atomic", "looped")
NAMESPACE = ops.namespace(__name__)
FWD_PROGRAMS_PER_SM = 4
BWD_PROGRAMS_PER_SM = 2
FWD_NUM_STAGES = 2
BWD_NUM_STAGES = 3
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
def layernorm_fwd_looped_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, N, eps,
                                HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                                BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """A row wider than a block, in chunks of BLOCK_N: the mean, the centred squares, then y."""
    # TODO: for start in range(0, N, BLOCK_N): accumulate sums element-wise in a [BLOCK_N] vector,
    # reduce once; the same for (x - mean)^2 (padding lanes 0); a third loop writes y.
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
def layernorm_bwd_looped_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr,
                                dw_partial_ptr, db_partial_ptr, M, N, rows_per_program,
                                HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                                BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """Rows wider than a block: per row, one chunked pass for mean(g * xhat) and mean(g), one
    for dx; this program's dw/db partials rows live in global memory (read, add, write back)."""
    # TODO: the program's first row starts the partial sums (load with other=0 when row == first).
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
                       block_m=None, num_programs=None, num_warps=None, num_stages=None, block_n=None):
    """LayerNorm over the last dimension: returns (y, mean, rstd). kernel: "row" (default up to
    MAX_N columns), "looped" (default above; block_n = its chunk), "persistent"."""
    raise NotImplementedError("not implemented yet: layer_norm_forward (week4 exercise)")


def layer_norm_backward(dy, x, mean, rstd, weight=None, has_bias=False, *, kernel=None,
                        block_m=None, num_partials=None, num_warps=None, num_stages=None, block_n=None):
    """Returns (dx, dweight or None, dbias or None). kernel: "partial" (default up to MAX_N
    columns), "looped" (default above), "atomic"."""
    raise NotImplementedError("not implemented yet: layer_norm_backward (week4 exercise)")


def _forward(x, weight, bias, eps, M, N):
    """The hot path the op calls: (y, mean (M,), rstd (M,)) of a contiguous x of M rows of N,
    no argument checks (the public entry made them), launch settings cached per shape."""
    # TODO: like layer_norm_forward without the checks: the row kernel, or the looped one for N > MAX_N.
    raise NotImplementedError("not implemented yet: _forward (week4 exercise)")


def _backward(dy, x, mean, rstd, weight, has_bias, M, N):
    """The hot path of the backward: (dx, dw or None, db or None), no argument checks."""
    raise NotImplementedError("not implemented yet: _backward (week4 exercise)")


# ------------------------------------------------------------- GIVEN: the op around your kernels
@torch.library.custom_op(f"{NAMESPACE}::layer_norm", mutates_args=())
def layer_norm_op(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _forward(x, weight, bias, eps, x.shape[0], x.shape[1])


@layer_norm_op.register_fake
def _layer_norm_fake(x, weight, bias, eps):
    stats = x.new_empty(x.shape[:1], dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)
    return torch.empty_like(x), stats, torch.empty_like(stats)


@torch.library.custom_op(f"{NAMESPACE}::layer_norm_backward", mutates_args=())
def layer_norm_backward_op(dy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                           weight: torch.Tensor | None, has_bias: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dw, db = _backward(dy.contiguous(), x, mean, rstd, weight, has_bias, x.shape[0], x.shape[1])
    return dx, (x.new_empty(0) if dw is None else dw), (x.new_empty(0) if db is None else db)


@layer_norm_backward_op.register_fake
def _layer_norm_backward_fake(dy, x, mean, rstd, weight, has_bias):
    vector = x.new_empty(x.shape[1:])
    return torch.empty_like(x), (vector if weight is not None else x.new_empty(0)), \
        (torch.empty_like(vector) if has_bias else x.new_empty(0))


def _setup_context(ctx, inputs, output):
    x, weight, bias, _ = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)
    ctx.has_bias = bias is not None
    ctx.mark_non_differentiable(mean, rstd)


def _backward_formula(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = layer_norm_backward_op(dy, x, mean, rstd, weight, ctx.has_bias)
    return dx, (dw if weight is not None else None), (db if ctx.has_bias else None), None


layer_norm_op.register_autograd(_backward_formula, setup_context=_setup_context)


class LayerNormFunction(torch.autograd.Function):
    """The eager path: the same _forward/_backward, without the custom op's dispatch cost."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, M, N, dims=1):
        y, mean, rstd = _forward(x, weight, bias, eps, M, N)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.has_bias, ctx.rows, ctx.dims = bias is not None, (M, N), dims
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = _backward(dy.contiguous(), x, mean, rstd, weight, ctx.has_bias, *ctx.rows)
        shape = x.shape[x.dim() - ctx.dims:]
        return dx, (dw if dw is None else dw.view(shape)), (db if db is None else db.view(shape)), None, None, None, None


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """`F.layer_norm` on your kernels: the registered op under torch.compile, else LayerNormFunction."""
    shape = _solution.normalized_shape_of(normalized_shape)
    _solution.check_call(x, shape, weight, bias)
    eps = _solution._check_eps(eps)
    if ops.compiling():
        x2 = _solution.as_rows(x, shape)
        n = x2.shape[1]
        w = weight if weight is None or weight.dim() == 1 else weight.reshape(n)
        b = bias if bias is None or bias.dim() == 1 else bias.reshape(n)
        return layer_norm_op(x2, w, b, eps)[0].view(x.shape)
    x = x.contiguous()
    weight = weight if weight is None else weight.contiguous()
    bias = bias if bias is None else bias.contiguous()
    M, N = _solution.rows_of(x, shape)
    if ops.needs_grad(x, weight, bias):
        return LayerNormFunction.apply(x, weight, bias, eps, M, N, len(shape))
    return _forward(x, weight, bias, eps, M, N)[0]


class TritonLayerNorm(nn.LayerNorm):
    def forward(self, x):
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
