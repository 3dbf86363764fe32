"""LayerNorm in Triton, the forward, and the op a model calls: a drop-in `nn.LayerNorm` with autograd.

Its backward: layernorm_backward.py. What every norm shares (argument checks, rows, launch plans,
the autograd and torch.compile glue): plumbing.py. Its benchmarks, launch sweep and command line:
layernorm_bench.py (`python -m week4_triton_dl.norms.layernorm_bench --sweep`).

y = (x - mean) * rstd * w + b over the last dimension of x (rows, N), with
mean = sum(x) / N, var = sum((x - mean)^2) / N and rstd = 1 / sqrt(var + eps).

What it teaches:
* The forward, one fused pass: a row is loaded once into registers, its mean and variance are
  two on-chip reductions, and y is written once. `layernorm_fwd_row_kernel` gives each row its
  own program; `layernorm_fwd_persistent_kernel` gives each program a run of rows, so the weight
  and bias are loaded into registers once per program instead of once per row (at N = 8192 in
  bf16 they are 32 KB, twice the row itself: re-reading them per row costs L2 bandwidth), and
  its row loop is software-pipelined (`tl.range(num_stages=2)`): the next row loads while this
  one is reduced. The forward saves mean and rstd (8 bytes per row) so the backward need not
  recompute them.
* Rows wider than a block (`layernorm_fwd_looped_kernel`) are streamed in chunks, read three
  times (sum, centred squares, normalize): every width torch accepts works, the one-pass
  kernels take rows up to MAX_N.
* The variance is overflow-safe: in fp32, (x - mean)^2 overflows once |x - mean| nears 1.8e19
  although the variance may not, and rstd = 1/sqrt(inf) = 0 would zero the row (torch's own
  fp32 kernel does this). `_rstd` then recomputes the row's squares scaled by its largest
  |x - mean|: the scaled squares are <= 1, and var = max^2 * mean(scaled^2) never forms the
  overflowing number. It costs a max and a multiply per element, in registers, in a
  memory-bound kernel.
* As an op a model calls (the second half of the file): `layer_norm` checks its arguments once,
  the launch settings of a shape are cached (`_forward_plan`), eager calls run
  `LayerNormFunction` (or the launcher alone when no gradient is needed) and torch.compile sees
  the registered op `torch.ops.course.layer_norm`, whose autograd formula is the registered
  `layer_norm_backward` op; rmsnorm.py and course/ops.py say why two paths.

Cost model (M rows, N columns, itemsize s; the minimum traffic):
* forward: read x (MNs), write y (MNs), read w, b (2Ns), write mean, rstd (8M): ~2MNs bytes.
  ~8 FLOPs per element: ~2 FLOP/byte in bf16, far left of the H100's ridge point
  (~240 FLOP/byte for bf16 tensor cores, ~17 for fp32 CUDA cores): memory-bound, so the
  yardstick is % of copy bandwidth.
* unfused eager (`layer_norm_unfused`: upcast, mean, subtract, square, mean, rsqrt, three
  element-wise ops, downcast): ~10 kernels and ~60 bytes per bf16 element against the fused
  kernel's 4 (15x). F.layer_norm is already one fused kernel, so beating it means beating its
  bandwidth, not its byte count.
* the backward's: layernorm_backward.py.

bf16/fp16 inputs are computed in fp32 (loaded narrow, converted in registers, rounded once
on the store); fp64 inputs are computed in fp64, so `torch.autograd.gradcheck` can check the
hand-written backward. `python -m week4_triton_dl.norms.layernorm_bench --sweep` times the configurations
(num_warps, rows per step, stages, programs per SM) on a GPU.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from course import ops, validate
from course.gpu import triton, tl
from course.launch import launch
from week4_triton_dl.norms import plumbing as nc  # checks, rows, launch plans, the op's skeleton: shared
from week4_triton_dl.norms.layernorm_backward import backward  # the backward the op and autograd run

DTYPES = nc.DTYPES
MAX_N = nc.MAX_N  # widest row the one-pass kernels hold in registers; wider rows are looped
KERNELS_FORWARD = ("persistent", "row", "looped")
NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)
# Programs per SM for the persistent kernel: enough resident programs that while one is
# reducing, another's loads are in flight. Sweep: `python -m week4_triton_dl.norms.layernorm_bench --sweep`.
FWD_PROGRAMS_PER_SM = 4
# Loop steps in flight (tl.range num_stages; 1 = no software pipelining). Each extra stage
# buffers one step's loads in shared memory, so wide rows fall back to 1 (`nc.pipeline_stages`).
FWD_NUM_STAGES = 2
# `layer_norm_forward`'s default, the winner of the H100 run (results/layernorm_fwd_week4.md,
# 2026-11-23): the row kernel beat the persistent one at all three sizes (1.31x torch and ~80% of
# copy at 8192 x 8192 bf16, against 0.97x). The sweep and both benchmark variants keep comparing.
FORWARD_KERNEL = "row"
# EXERCISE NOTE: An order that works: the row forward kernel (with `_rstd`, given); then the backward
#   (exercises/norms/layernorm_backward.py, and stage 2 in exercises/norms/column_sums.py; `-k backward` selects
#   its tests); then the looped kernels (rows wider than MAX_N), the persistent forward and the atomic backward. One test
#   file checks the three stubs: `pytest tests/week4/test_layernorm.py --impl=exercises`. The launchers, launch
#   plans and the registered op are given: they call your kernels (the op's backward, and so gradcheck, runs the
#   solution's backward). Without a GPU the kernels run in the Triton interpreter, where `print` and pdb work
#   inside them.


# ------------------------------------------------------------------------------------ forward
@triton.jit
def _rstd(xc, N, eps, AXIS: tl.constexpr):
    """1 / sqrt(mean(xc^2) + eps) along AXIS for centred values xc (0 in padding lanes).

    The plain sum of squares overflows to inf once |xc| nears sqrt(float max) (1.8e19 in fp32),
    even where the variance would fit, and 1/sqrt(inf) = 0 would zero the whole row. Such rows
    take the scaled sum instead: (xc / m)^2 <= 1 with m = max |xc|, and
    1/sqrt(var + eps) = (1/m) / sqrt(mean((xc/m)^2) + eps/m^2), where eps/m^2 underflows
    harmlessly to 0. Only a block holding such a row pays for it (a uniform branch); a row
    holding a NaN (or an Inf: inf - inf) has var = NaN, not inf, and stays NaN.
    """
    var = tl.sum(xc * xc, axis=AXIS) / N
    rstd = 1.0 / tl.sqrt(var + eps)  # sqrt.rn: fp64 rsqrt would be approximate
    if AXIS == 0:  # one row: var is a scalar
        largest = var
    else:  # a block of rows: any row that overflowed sends the block down the slow path
        largest = tl.max(var, axis=0)
    if largest == float("inf"):
        m = tl.max(tl.abs(xc), axis=AXIS)
        inv_m = 1.0 / tl.where(m > 0, m, 1.0)
        scaled = xc * tl.expand_dims(inv_m, AXIS)
        safe = inv_m / tl.sqrt(tl.sum(scaled * scaled, axis=AXIS) / N + eps * inv_m * inv_m)
        rstd = tl.where(var == float("inf"), safe, rstd)
    return rstd


@triton.jit
def layernorm_fwd_row_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, N, eps,
                             HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                             BLOCK_N: tl.constexpr, ACC: tl.constexpr, STORE_STATS: tl.constexpr = True):
    # BEGIN EXERCISE: one row per program: row = program_id(0) as int64; load the row (other=0) and convert
    #   .to(ACC); mean; centre with tl.where(mask, x - mean, 0) so padding adds nothing to the variance;
    #   rstd = _rstd(xc, N, eps, 0); y = xc * rstd (* w) (+ b) stored in y's dtype; mean and rstd stored
    #   when STORE_STATS
    # HINT: With the whole row in registers, compute the mean first and then the variance of the centred
    #   values: two reductions over registers, no sum(x^2) - mean^2 cancellation.
    # HINT: int64 row, cols = arange(BLOCK_N) masked to N; load x in ACC with other=0; mean = sum / N;
    #   centre, but force padding lanes back to 0; rstd from _rstd; scale, then optional weight and bias
    #   (each loaded masked); store y and, if asked, the two per-row stats.
    # HINT: `xc = tl.where(mask, x - mean, 0.0)`: without it every padding lane adds mean^2 to the variance.
    row = tl.program_id(0).to(tl.int64)  # int64: row * N passes 2^31 on big inputs
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(ACC)
    mean = tl.sum(x, axis=0) / N
    # Two passes over registers (mean, then centred squares), not sum(x^2) - mean^2: the
    # latter cancels catastrophically when |mean| >> std. Padding lanes must not add (0-mean)^2.
    xc = tl.where(mask, x - mean, 0.0)
    rstd = _rstd(xc, N, eps, 0)
    y = xc * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
    if HAS_BIAS:
        y = y + tl.load(b_ptr + cols, mask=mask, other=0.0).to(ACC)
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_STATS:  # only a backward reads them: inference skips two allocations and stores
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)
    # END EXERCISE


@triton.jit
def layernorm_fwd_persistent_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr,
                                    M, N, rows_per_program, eps,
                                    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                    ACC: tl.constexpr, NUM_STAGES: tl.constexpr):
    first = tl.program_id(0).to(tl.int64) * rows_per_program
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    # BEGIN EXERCISE: load w and b once, before the loop; for step in tl.range(0, rows_per_program, BLOCK_M,
    #   num_stages=NUM_STAGES): a [BLOCK_M, BLOCK_N] tile of rows first + step + arange(BLOCK_M), masked against
    #   M and N; the row kernel's arithmetic with reductions along axis=1 (_rstd(xc, N, eps, 1)); y, mean and
    #   rstd stored masked
    # HINT: Narrow rows give a one-row program too little work; here each program owns many rows, loads w
    #   and b once, and handles BLOCK_M rows per step while the next step's rows are prefetched.
    # HINT: Optional w and b loaded before the loop; a tl.range loop with num_stages; per step a 2-D tile
    #   (rows masked against M, cols against N); the row kernel's math with axis=1 and [:, None] broadcasts;
    #   stats stored masked by rows.
    # HINT: `xc = tl.where(mask, x - mean[:, None], 0.0)`, `rstd = _rstd(xc, N, eps, 1)`, `y = xc * rstd[:,
    #   None]`.
    # Loaded once per program and kept in registers for all its rows (not once per row).
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    if HAS_BIAS:
        b = tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    # BLOCK_M rows per step: narrow rows give a program too little to load at once otherwise.
    # tl.range(num_stages=2) software-pipelines the loop: the next step's rows are loaded (via
    # shared memory) while this step reduces, so the memory system never waits on arithmetic.
    for step in tl.range(0, rows_per_program, BLOCK_M, num_stages=NUM_STAGES):
        rows = first + step + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        offsets = rows[:, None] * N + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(ACC)
        mean = tl.sum(x, axis=1) / N
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = _rstd(xc, N, eps, 1)
        y = xc * rstd[:, None]
        if HAS_WEIGHT:
            y = y * w[None, :]
        if HAS_BIAS:
            y = y + b[None, :]
        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(mean_ptr + rows, mean, mask=row_mask)
        tl.store(rstd_ptr + rows, rstd, mask=row_mask)
    # END EXERCISE


@triton.jit
def layernorm_fwd_looped_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, N, eps,
                                HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                                BLOCK_N: tl.constexpr, ACC: tl.constexpr, STORE_STATS: tl.constexpr = True):
    """A row wider than a block, in chunks: pass 1 the mean, pass 2 the centred squares (and
    the largest |x - mean|, for rows whose squares overflow: a pass 2b then rescales), pass 3
    writes y. Three reads of x where the row kernel needs one: the price of a row that does
    not fit in registers.
    """
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * N
    # BEGIN EXERCISE: pass 1: for start in range(0, N, BLOCK_N), add the masked chunks (other=0, .to(ACC))
    #   element-wise into a [BLOCK_N] vector, reduced once: the mean; pass 2: the same for the centred squares
    #   (padding lanes 0), and `largest`, the running element-wise max of |x - mean| (the rescue below needs
    #   it); var = their sum / N, rstd = 1 / sqrt(var + eps)
    # HINT: A row wider than one block needs passes over memory: one to get the mean, one for the variance
    #   of the centred values (still no cancellation), keeping per-lane vectors and reducing once after each
    #   loop.
    # HINT: Pass 1: a [BLOCK_N] zeros vector, add masked chunks, mean = tl.sum / N. Pass 2: reload chunks,
    #   centre (padding 0), add squares and track `largest` with tl.maximum of |xc|; then var and rstd.
    # HINT: `largest = tl.maximum(largest, tl.abs(xc))`: the rescue after this region divides by it when the
    #   squares overflow.
    sums = tl.zeros([BLOCK_N], dtype=ACC)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        sums += tl.load(x_row + cols, mask=cols < N, other=0.0).to(ACC)
    mean = tl.sum(sums, axis=0) / N
    squares = tl.zeros([BLOCK_N], dtype=ACC)
    largest = tl.zeros([BLOCK_N], dtype=ACC)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        xc = tl.where(mask, tl.load(x_row + cols, mask=mask, other=0.0).to(ACC) - mean, 0.0)
        squares += xc * xc
        largest = tl.maximum(largest, tl.abs(xc))
    var = tl.sum(squares, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    # END EXERCISE
    if var == float("inf"):  # the squares overflowed: sum them again, scaled (see _rstd)
        m = tl.max(largest, axis=0)
        inv_m = 1.0 / m
        scaled = tl.zeros([BLOCK_N], dtype=ACC)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = cols < N
            s = tl.where(mask, (tl.load(x_row + cols, mask=mask, other=0.0).to(ACC) - mean) * inv_m, 0.0)
            scaled += s * s
        rstd = inv_m / tl.sqrt(tl.sum(scaled, axis=0) / N + eps * inv_m * inv_m)
    # BEGIN EXERCISE: pass 3: chunk by chunk, y = (x - mean) * rstd (* w) (+ b) stored masked in y's dtype;
    #   then mean and rstd when STORE_STATS
    # HINT: The statistics are known; the third pass only normalizes each chunk and writes it.
    # HINT: A loop over BLOCK_N chunks: load x in ACC masked, (x - mean) * rstd, optional w and b loaded for
    #   the same columns, masked store in y's dtype; after the loop the two stats if STORE_STATS.
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        y = (tl.load(x_row + cols, mask=mask, other=0.0).to(ACC) - mean) * rstd
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
        if HAS_BIAS:
            y = y + tl.load(b_ptr + cols, mask=mask, other=0.0).to(ACC)
        tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_STATS:
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)
    # END EXERCISE


# ------------------------------------------------------------------------------- launch plans
# Computed once per shape and kept (plumbing.py says why); the kernels are this file's.
_FORWARD_PLANS: dict = {}


def _forward_plan(N: int, dtype: torch.dtype, has_weight: bool, has_bias: bool, kernel: str | None = None,
                  block_n: int | None = None, num_warps: int | None = None, store_stats: bool = True):
    """(kernel, constexprs, launch options, key) of the row or looped forward for rows of N."""
    key = (N, dtype, has_weight, has_bias, kernel, block_n, num_warps, store_stats)
    return _FORWARD_PLANS.get(key) or nc.forward_plan(
        _FORWARD_PLANS, key, N, dtype, (has_weight, has_bias), layernorm_fwd_row_kernel, layernorm_fwd_looped_kernel,
        kernel, block_n, num_warps, store_stats)


# ------------------------------------------------------------- the hot path (no checks here)
# x: contiguous, any shape whose trailing dimensions hold N elements per row (no views made:
# a view costs host time too); M = rows. Callers have checked the arguments.
def _launch_forward(x, weight, bias, eps, M, N, plan, out=None):
    """(y, mean, rstd) with a forward plan; y into `out` if given."""
    y = torch.empty_like(x) if out is None else out
    mean = torch.empty(M, dtype=nc.acc_dtype(x.dtype), device=x.device)
    rstd = torch.empty(M, dtype=nc.acc_dtype(x.dtype), device=x.device)
    if M == 0 or N == 0:
        return y, mean.fill_(math.nan), rstd.fill_(math.nan)  # no rows, or rows of nothing
    kernel, constexprs, options, key = plan
    # Absent weight/bias: pass x as a dummy pointer; HAS_* (constexpr) compiles the loads out.
    launch(kernel, (M,), key, (x, x if weight is None else weight, x if bias is None else bias, y, mean, rstd,
                               N, eps, *constexprs), **options)
    return y, mean, rstd


def _forward(x, weight, bias, eps, M, N):
    """(y, mean, rstd) with the default plan."""
    return _launch_forward(x, weight, bias, eps, M, N, _forward_plan(N, x.dtype, weight is not None, bias is not None))


def _infer(x, weight, bias, eps, M, N):
    """y alone, for calls no backward will follow: no mean or rstd allocated or stored."""
    y = torch.empty_like(x)
    if M == 0 or N == 0:
        return y
    kernel, constexprs, options, key = _forward_plan(N, x.dtype, weight is not None, bias is not None,
                                                     store_stats=False)
    launch(kernel, (M,), key, (x, x if weight is None else weight, x if bias is None else bias, y, y, y,
                               N, eps, *constexprs), **options)
    return y


# ---------------------------------------------------------------------------------- launcher
def layer_norm_forward(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                       eps: float = 1e-5, *, out: torch.Tensor | None = None, kernel: str | None = None,
                       block_m: int | None = None, num_programs: int | None = None,
                       num_warps: int | None = None, num_stages: int | None = None,
                       block_n: int | None = None):
    """LayerNorm over the last dimension of a contiguous x: returns (y, mean, rstd).

    mean and rstd have one fp32 value per row (fp64 for fp64 x), shape x.shape[:-1].
    `kernel="row"` (default up to MAX_N columns): one program per row; `"looped"` (default
    above; `block_n` sets its chunk): a row streamed in chunks; `"persistent"`: `num_programs`
    programs (default: a few per SM) each normalise a run of rows, `block_m` rows per step,
    `num_stages` steps in flight.
    """
    M, N = nc.check_rows(x)
    weight, bias = nc.check_vector(weight, "weight", x), nc.check_vector(bias, "bias", x)
    eps = nc.check_eps(eps)
    kernel = nc.check_launch(kernel, KERNELS_FORWARD, FORWARD_KERNEL, N, block_m=block_m, programs=num_programs,
                             num_warps=num_warps, num_stages=num_stages, block_n=block_n)
    out = validate.output(out, x)
    if kernel in ("row", "looped"):
        plan = _forward_plan(N, x.dtype, weight is not None, bias is not None, kernel, block_n, num_warps)
        _, mean, rstd = _launch_forward(x, weight, bias, eps, M, N, plan, out=out)
        return out, mean.view(x.shape[:-1]), rstd.view(x.shape[:-1])
    mean = torch.empty(x.shape[:-1], dtype=nc.acc_dtype(x.dtype), device=x.device)
    rstd = torch.empty(x.shape[:-1], dtype=nc.acc_dtype(x.dtype), device=x.device)
    if M == 0 or N == 0:
        return out, mean.fill_(math.nan), rstd.fill_(math.nan)
    programs, rows_per_program, launch_options = nc.persistent_forward(
        M, N, x.element_size(), FWD_PROGRAMS_PER_SM, FWD_NUM_STAGES, block_m, num_programs, num_warps, num_stages)
    layernorm_fwd_persistent_kernel[(programs,)](
        nc.rows_view(x, M, N), x if weight is None else weight, x if bias is None else bias, nc.rows_view(out, M, N),
        mean, rstd, M, N, rows_per_program, eps, HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        ACC=nc.acc_type(x.dtype), **launch_options)
    return out, mean, rstd


# ------------------------------------------------------------------- the op torch.compile sees
@torch.library.custom_op(f"{NAMESPACE}::layer_norm", mutates_args=())
def layer_norm_op(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd) of a contiguous (M, N) x: the forward as a registered op (see layer_norm)."""
    return _forward(x, weight, bias, eps, x.shape[0], x.shape[1])


@layer_norm_op.register_fake
def _layer_norm_fake(x, weight, bias, eps):
    stats = x.new_empty(x.shape[:1], dtype=nc.acc_dtype(x.dtype))
    return torch.empty_like(x), stats, torch.empty_like(stats)


@torch.library.custom_op(f"{NAMESPACE}::layer_norm_backward", mutates_args=())
def layer_norm_backward_op(dy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                           weight: torch.Tensor | None,
                           bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dw, db); dw/db are empty without weight/bias (an op returns tensors, not None); of
    bias only its presence counts (db does not depend on its values)."""
    dx, dw, db = backward(dy.contiguous(), x, (weight, bias), (mean, rstd), x.shape[0], x.shape[1])  # any layout
    # Empty tensors, two of them: an op never returns one tensor twice.
    return dx, (x.new_empty(0) if dw is None else dw), (x.new_empty(0) if db is None else db)


@layer_norm_backward_op.register_fake
def _layer_norm_backward_fake(dy, x, mean, rstd, weight, bias):
    vector = x.new_empty(x.shape[1:])
    return torch.empty_like(x), (vector if weight is not None else x.new_empty(0)), \
        (torch.empty_like(vector) if bias is not None else x.new_empty(0))


nc.register_autograd(layer_norm_op, layer_norm_backward_op, params=2)


# ------------------------------------------------------------------- the op eager mode calls
LayerNormFunction = nc.norm_function("LayerNormFunction", _forward, backward)


def layer_norm(x: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """`torch.nn.functional.layer_norm`, computed by the Triton kernels, differentiable, compilable.

    The normalized dimensions are flattened into one row of N = prod(normalized_shape), any N
    (rows wider than MAX_N take the looped kernels). A non-contiguous x is copied first, as
    torch's own kernel does. Eager calls run `LayerNormFunction` (or the launcher alone when no
    gradient is needed); under torch.compile, the registered op `torch.ops.course.layer_norm`
    (plumbing.entry).
    """
    return nc.entry(x, normalized_shape, (weight, bias), eps, None,
                    op=layer_norm_op, function=LayerNormFunction, infer=_infer)


class TritonLayerNorm(nn.LayerNorm):
    """`nn.LayerNorm` with the Triton kernels: same arguments, parameters, init and state_dict."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


# ------------------------------------------------------------------------- torch references
def layer_norm_unfused(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                       eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm written out in eager ops (fp32 math): one kernel and one HBM round trip each."""
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    xc = xf - mean
    y = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)

