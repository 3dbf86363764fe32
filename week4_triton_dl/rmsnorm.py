"""RMSNorm in Triton, forward and backward, as a PyTorch op: eager, autograd and torch.compile.

Its benchmarks, launch sweep and command line: rmsnorm_bench.py (`python -m
week4_triton_dl.rmsnorm_bench --sweep`). Over 500 lines: the row, persistent and looped kernels of
one op, forward and backward, with its launchers and autograd glue.

y = x * rstd * w over the last dimension, rstd = 1 / sqrt(mean(x^2) + eps): LayerNorm without
the mean subtraction and without the bias (LLaMA, Mistral, Qwen, Gemma all use it). Diff this
file against `layernorm.py` (the forward) and `layernorm_backward.py`: the kernels are the same
shape with one reduction fewer per row.

What it teaches (beyond LayerNorm's, whose two-stage dw reduction and partials buffer this
module reuses, with the checks and launch sizing both norms share: `norm_common.column_sums`):
* the forward saves only rstd (4 bytes per row);
* backward, with xhat = x * rstd and g = dy * w:
      dx = rstd * (g - xhat * mean(g * xhat))     (one row reduction instead of two)
      dw = sum over rows of dy * xhat              (the column reduction, via partials)
* rows wider than a block (`rmsnorm_fwd_looped_kernel`, `rmsnorm_bwd_looped_kernel`): a row
  that does not fit in registers is streamed in chunks, twice (once to reduce, once to
  write): 3 reads instead of 2 in the forward, 5 instead of 3 in the backward. Every width
  torch accepts works; rows up to MAX_N take the one-pass kernels.
* eps: `nn.RMSNorm(eps=None)` uses the machine epsilon of the type torch computes in (fp32
  for fp16/bf16/fp32 inputs, fp64 for fp64), not that of x's dtype: `default_eps` matches it.
* a kernel a model can call (the second half of this file). A model calls RMSNorm 25 times a
  step on small tensors (8192 x 768: ~10 us of GPU work each way), so what the CALL costs on
  the host is as important as the kernel:
  - `rms_norm` checks its arguments once, cheaply, and the launch settings of a shape are
    computed once and cached (`_forward_plan`, `_backward_plan`): no autotuning, no config
    search, no `triton.cdiv` (a jitted helper, ~2 us a call from Python) on the hot path;
  - eager calls go through `RMSNormFunction` (an autograd.Function), or straight to the
    launcher when nothing needs a gradient; under `torch.compile` they go through the
    registered op `torch.ops.course.rms_norm` (fake function + autograd formula), which
    Dynamo records as one node, so a model that uses it compiles with no graph break and
    Inductor fuses the torch code around it. course/ops.py says why two paths, with numbers.
* which torch to race: written out in eager ops (as many models still do: upcast, pow, mean,
  rsqrt, mul, mul, downcast) RMSNorm is ~7 kernels and ~40 bytes per bf16 element against
  the fused kernel's 4; `torch.nn.RMSNorm` dispatches to a
  fused CUDA kernel (`aten._fused_rms_norm`, torch >= 2.9 when weight and x share a dtype),
  which moves the minimum 2MNs. The benchmark times both, and torch.compile of the written-out
  form.

Cost model (M rows, N columns, itemsize s), the minimum traffic:
* forward: read x, write y: 2MNs (+ w: Ns, rstd: 4M). ~4 FLOPs per element: memory-bound.
* backward: read x, dy, write dx: 3MNs (+ rstd, w, dw), plus the (P, N) fp32 partials
  (4PN bytes written and read again). torch's fused backward computes dw in a second kernel
  that reads x and dy again: ~5MNs.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from course import ops, runtime  # runtime before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.launch import launch
from week4_triton_dl import norm_common as nc  # shared checks, launch sizing and the stage-2 sum

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

DTYPES = nc.DTYPES
MAX_N = nc.MAX_N  # widest row the one-pass kernels hold in registers; wider rows are looped
KERNELS_FORWARD = ("persistent", "row", "looped")
KERNELS_BACKWARD = ("partial", "looped")
FWD_PROGRAMS_PER_SM = 4
BWD_PROGRAMS_PER_SM = nc.BWD_PROGRAMS_PER_SM
FWD_NUM_STAGES = 2  # loop steps in flight (tl.range num_stages), as in layernorm.py
BWD_NUM_STAGES = 2
# The H100 run (results/rmsnorm_fwd_week4.md, 2026-11-23): the row kernel ~95% of copy at every
# size, the persistent one 61-90%: the row kernel is the default, as in layernorm.py.
FORWARD_KERNEL = "row"
LOOP_BLOCK_N = nc.LOOP_BLOCK_N  # chunk of a looped row: 4096 elements, 16 per thread at 8 warps
NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)
# EXERCISE NOTE: Do the LayerNorm exercise first: this is the same with one reduction fewer, and it reuses
#   LayerNorm's stage-2 reduction (`nc.column_sums`), input checks and launch sizing (`nc`, imported above,
#   is the solution's norm_common module). The launchers, launch plans and the registered op are given.


# ------------------------------------------------------------------------------------ forward
@triton.jit
def _rstd(x, N, eps, AXIS: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) along AXIS, NaN for a row holding a NaN or an Inf.

    Mathematically an Inf makes rstd = 1/sqrt(inf) = 0: the row's finite entries become 0 and the
    Inf itself NaN (inf * 0), which is what torch computes on the CPU. torch's CUDA kernel (what
    F.rms_norm and nn.RMSNorm run on a GPU) takes the row's moments with Welford's update, where
    the Inf meets inf - inf: the whole row comes out NaN. We race that kernel, so we match it.
    x - x is 0 for every finite x and NaN for +-Inf: added to the squares it turns the sum NaN
    exactly for those rows, for one add per element and no second reduction. (A finite row whose
    squares overflow still gets rstd = 0, y = 0.)
    """
    return 1.0 / tl.sqrt(tl.sum(x * x + (x - x), axis=AXIS) / N + eps)


@triton.jit
def rmsnorm_fwd_row_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, N, eps,
                           HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr,
                           STORE_STATS: tl.constexpr = True):
    # BEGIN EXERCISE: one row per program (int64 row index): load the row masked (other=0: padding adds 0 to
    #   sum x^2) .to(ACC); rstd = _rstd(x, N, eps, 0); y = x * rstd (* w) stored in y's dtype; rstd stored when
    #   STORE_STATS
    # HINT: RMSNorm is LayerNorm without the mean: divide the row by its root mean square. The whole row
    #   fits one block, so one program, one load, one reduction.
    # HINT: int64 row, cols masked to N; load in ACC with other=0 (zeros add nothing to the sum of squares);
    #   rstd from _rstd along axis 0; y = x * rstd, times w when HAS_WEIGHT; store y, and rstd if
    #   STORE_STATS.
    # HINT: `rstd = _rstd(x, N, eps, 0)`
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(ACC)  # padding adds 0 to sum x^2
    rstd = _rstd(x, N, eps, 0)
    y = x * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_STATS:  # only a backward reads rstd: inference skips its allocation and store
        tl.store(rstd_ptr + row, rstd)
    # END EXERCISE


@triton.jit
def rmsnorm_fwd_persistent_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, M, N, rows_per_program, eps,
                                  HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr,
                                  BLOCK_N: tl.constexpr, ACC: tl.constexpr, NUM_STAGES: tl.constexpr):
    first = tl.program_id(0).to(tl.int64) * rows_per_program
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    # BEGIN EXERCISE: w loaded once, before the loop; for step in tl.range(0, rows_per_program, BLOCK_M,
    #   num_stages=NUM_STAGES): a [BLOCK_M, BLOCK_N] tile of rows masked against M and N; rstd = _rstd(x, N,
    #   eps, 1) (along axis=1); y and rstd stored masked
    # HINT: Many rows per program for narrow rows: w is loaded once, rows come BLOCK_M at a time, and the
    #   loop is software-pipelined so the next tile loads while this one reduces.
    # HINT: Optional w load before the loop; `for step in tl.range(0, rows_per_program, BLOCK_M,
    #   num_stages=NUM_STAGES)`; 2-D tile with row and column masks; rstd along axis 1; broadcast rstd[:,
    #   None] and w[None, :]; store y and rstd (rows-masked).
    # HINT: `y = x * rstd[:, None]` after `rstd = _rstd(x, N, eps, 1)`.
    if HAS_WEIGHT:  # once per program, not once per row
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    for step in tl.range(0, rows_per_program, BLOCK_M, num_stages=NUM_STAGES):
        rows = first + step + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        offsets = rows[:, None] * N + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(ACC)
        rstd = _rstd(x, N, eps, 1)
        y = x * rstd[:, None]
        if HAS_WEIGHT:
            y = y * w[None, :]
        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(rstd_ptr + rows, rstd, mask=row_mask)
    # END EXERCISE


@triton.jit
def rmsnorm_fwd_looped_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, N, eps,
                              HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr,
                              STORE_STATS: tl.constexpr = True):
    """A row wider than a block, in chunks of BLOCK_N: pass 1 sums the squares, pass 2 writes y.

    x is read twice (the second read often hits L2 for one row, but not for many rows at once):
    the price of a row that does not fit in registers.
    """
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * N
    y_row = y_ptr + row * N
    # BEGIN EXERCISE: pass 1: for start in range(0, N, BLOCK_N), x * x + (x - x) of each masked chunk added
    #   element-wise into a [BLOCK_N] vector of ACC, reduced once: rstd = 1 / sqrt(sum / N + eps); pass 2:
    #   y = x * rstd (* w) chunk by chunk, stored masked in y's dtype; rstd stored when STORE_STATS
    # HINT: A row wider than a block: pass 1 streams it to get the sum of squares (per-lane vector, one
    #   reduction at the end), pass 2 streams it again to scale and store.
    # HINT: Pass 1: zeros [BLOCK_N] in ACC, add each masked chunk's squares; rstd = 1 / sqrt(sum / N + eps).
    #   Pass 2: reload each chunk, multiply by rstd (and w), store masked; then rstd if STORE_STATS.
    # HINT: `squares += x * x + (x - x)`: the (x - x) is 0 for finite x and NaN for Inf, so an Inf row gives
    #   NaN as _rstd does.
    squares = tl.zeros([BLOCK_N], dtype=ACC)  # element-wise partial sums, reduced once at the end
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(ACC)
        squares += x * x + (x - x)  # + (x - x): NaN for an Inf, as in _rstd
    rstd = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        y = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC) * rstd
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_STATS:
        tl.store(rstd_ptr + row, rstd)
    # END EXERCISE


# ----------------------------------------------------------------------------------- backward
@triton.jit
def rmsnorm_bwd_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_partial_ptr,
                       M, N, rows_per_program, HAS_WEIGHT: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr,
                       NUM_STAGES: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    first = pid * rows_per_program
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    # BEGIN EXERCISE: dw_acc [BLOCK_M, BLOCK_N] zeros in ACC; for step in tl.range(0, rows_per_program, BLOCK_M,
    #   num_stages=NUM_STAGES): rows masked against M; x, dy (in ACC) and rstd loaded; xhat = x * rstd, g = dy * w
    #   (dy without weight); c1 = mean(g * xhat) per row (axis=1); dx = (g - xhat * c1) * rstd stored in dx's
    #   dtype; dw_acc += dy * xhat. After the loop dw_acc's column sums (axis=0) into row pid of the partials
    # HINT: RMSNorm's backward: with xhat = x * rstd and g = dy * w, dx = (g - xhat * mean(g * xhat)) * rstd
    #   (no mean term: nothing was subtracted); dw sums dy * xhat over rows, here per program first.
    # HINT: An ACC zeros [BLOCK_M, BLOCK_N] dw accumulator; a pipelined tl.range loop over row tiles: load
    #   x, dy (2-D masked) and rstd (rows-masked), xhat, g, c1 along axis 1, store dx, add dy * xhat; after
    #   the loop store the column sums into row pid of the partials.
    # HINT: `dx = (g - xhat * c1[:, None]) * rstd[:, None]`, with `c1 = tl.sum(xhat * g, axis=1) / N`.
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)  # this program's share of dw, in registers
    for step in tl.range(0, rows_per_program, BLOCK_M, num_stages=NUM_STAGES):
        rows = first + step + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        offsets = rows[:, None] * N + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(ACC)
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        xhat = x * rstd[:, None]
        if HAS_WEIGHT:
            g = dy * w[None, :]
        else:
            g = dy
        c1 = tl.sum(xhat * g, axis=1) / N  # mean(g * xhat): the only row reduction
        dx = (g - xhat * c1[:, None]) * rstd[:, None]
        tl.store(dx_ptr + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            dw_acc += dy * xhat
    if HAS_WEIGHT:  # one partials row per program: no atomics (see layernorm_backward.py)
        tl.store(dw_partial_ptr + pid * N + cols, tl.sum(dw_acc, axis=0), mask=col_mask)
    # END EXERCISE


@triton.jit
def rmsnorm_bwd_looped_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_partial_ptr,
                              M, N, rows_per_program, HAS_WEIGHT: tl.constexpr,
                              BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """Rows wider than a block: per row, pass 1 reduces mean(g * xhat), pass 2 writes dx.

    dw: this program's partials row is N floats, too wide for registers, so it lives in global
    memory and is read, added to and written back chunk by chunk. Only this program touches
    that row, and a thread reads back exactly the elements it wrote (same chunk, same lanes):
    no atomics, no barrier, and the same bits every run.
    """
    pid = tl.program_id(0).to(tl.int64)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    dw_row = dw_partial_ptr + pid * N
    # BEGIN EXERCISE: for each row in [first, last): pass 1 accumulates x * rstd * g (g = dy * w) chunk by chunk
    #   into a [BLOCK_N] vector: c1 = its sum / N; pass 2 stores dx = (g - xhat * c1) * rstd and adds dy * xhat
    #   to dw_row: read back with other=0 for the program's first row (the buffer is never zeroed), add, store
    # HINT: The wide-row backward: each row needs c1 = mean(g * xhat) before any dx can be written, so two
    #   passes per row; dw's per-program partial row is read, added to, and written back chunk by chunk.
    # HINT: Outer loop `for row in range(first, last)`; pass 1 over chunks accumulates x * rstd * g into a
    #   [BLOCK_N] vector, c1 = its sum / N; pass 2 reloads x and dy, stores dx, updates dw_row + cols.
    # HINT: The partials are never zeroed: `before = tl.load(dw_row + cols, mask=mask & (row > first),
    #   other=0.0)`.
    for row in range(first, last):
        offset = row * N
        rstd = tl.load(rstd_ptr + row)
        c1_terms = tl.zeros([BLOCK_N], dtype=ACC)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = cols < N
            x = tl.load(x_ptr + offset + cols, mask=mask, other=0.0).to(ACC)
            g = tl.load(dy_ptr + offset + cols, mask=mask, other=0.0).to(ACC)
            if HAS_WEIGHT:
                g = g * tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
            c1_terms += x * rstd * g
        c1 = tl.sum(c1_terms, axis=0) / N
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = cols < N
            x = tl.load(x_ptr + offset + cols, mask=mask, other=0.0).to(ACC)
            dy = tl.load(dy_ptr + offset + cols, mask=mask, other=0.0).to(ACC)
            xhat = x * rstd
            g = dy
            if HAS_WEIGHT:
                g = dy * tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
            tl.store(dx_ptr + offset + cols, ((g - xhat * c1) * rstd).to(dx_ptr.dtype.element_ty), mask=mask)
            if HAS_WEIGHT:
                # The program's first row starts the sum (other=0): the buffer is never zeroed.
                before = tl.load(dw_row + cols, mask=mask & (row > first), other=0.0)
                tl.store(dw_row + cols, before + dy * xhat, mask=mask)
    # END EXERCISE


# ------------------------------------------------------------------------------- launch plans
# Computed once per shape and kept: the hot path does a dict lookup instead of arithmetic on
# Python ints and calls into Triton helpers. A plan's key holds everything the launch depends
# on, so it also keys the compiled kernel in course.launch (which skips Triton's per-call work).
_FORWARD_PLANS: dict = {}
_BACKWARD_PLANS: dict = {}


def _forward_plan(N: int, dtype: torch.dtype, has_weight: bool, kernel: str | None = None,
                  block_n: int | None = None, num_warps: int | None = None, store_stats: bool = True):
    """(kernel, constexprs, launch options, key) of the row or looped forward for rows of N."""
    key = (N, dtype, has_weight, kernel, block_n, num_warps, store_stats)
    plan = _FORWARD_PLANS.get(key)
    if plan is None:
        if kernel == "looped" or (kernel is None and N > MAX_N):
            launch, block, warps = rmsnorm_fwd_looped_kernel, block_n or LOOP_BLOCK_N, 8
        else:
            block = nc.next_power_of_2(N)
            launch, warps = rmsnorm_fwd_row_kernel, nc.warps_for(block)
        plan = (launch, (has_weight, block, nc.acc_type(dtype), store_stats), dict(num_warps=num_warps or warps), key)
        _FORWARD_PLANS[key] = plan
    return plan


def _backward_plan(M: int, N: int, dtype: torch.dtype, has_weight: bool, kernel: str | None = None,
                   block_n: int | None = None):
    """(kernel, programs P, rows per program, constexprs, options, key) of the backward."""
    key = (M, N, dtype, has_weight, kernel, block_n)
    plan = _BACKWARD_PLANS.get(key)
    if plan is None:
        if kernel == "looped" or (kernel is None and N > MAX_N):
            rows_per_program, programs = nc.persistent_grid(M, 1, BWD_PROGRAMS_PER_SM, None)
            plan = (rmsnorm_bwd_looped_kernel, programs, rows_per_program,
                    (has_weight, block_n or LOOP_BLOCK_N, nc.acc_type(dtype)), dict(num_warps=8), key)
        else:
            block = nc.next_power_of_2(N)
            block_m = min(nc.bwd_block_m(block), nc.next_power_of_2(M))
            rows_per_program, programs = nc.persistent_grid(M, block_m, BWD_PROGRAMS_PER_SM, None)
            stages = nc.pipeline_stages(BWD_NUM_STAGES, 2 * block_m * block * dtype.itemsize)
            plan = (rmsnorm_bwd_kernel, programs, rows_per_program,
                    (has_weight, block_m, block, nc.acc_type(dtype), stages), dict(num_warps=nc.warps_for(block_m * block)),
                    key)
        if len(_BACKWARD_PLANS) > 4096:  # many distinct row counts (varying batch x length): start over
            _BACKWARD_PLANS.clear()
        _BACKWARD_PLANS[key] = plan
    return plan


def backward_launch(M: int, N: int, dtype: torch.dtype, has_weight: bool):
    """The default backward launch for M rows of N <= MAX_N: (kernel, programs, rows per program,
    (HAS_WEIGHT, BLOCK_M, BLOCK_N, ACC, NUM_STAGES), launch options, key). Public for kernels that
    run this backward's loop with more streams (add_rmsnorm.py)."""
    return _backward_plan(M, N, dtype, has_weight)


def _tuned_backward_plan(plan, M, N, dtype, block_m, num_partials, num_warps, num_stages):
    """A plan with the sweep's overrides (not cached, and not the fast launch path's)."""
    kernel, programs, rows_per_program, constexprs, options, key = plan
    if kernel is rmsnorm_bwd_looped_kernel:  # only the program count and the warps change
        if num_partials:
            rows_per_program = -(-max(M, 1) // min(num_partials, max(M, 1)))
            programs = -(-max(M, 1) // rows_per_program)
        options = dict(num_warps=num_warps or options["num_warps"])
    else:
        has_weight, default_block_m, block, acc, stages = constexprs
        block_m = min(block_m or default_block_m, nc.next_power_of_2(M))
        rows_per_program, programs = nc.persistent_grid(M, block_m, BWD_PROGRAMS_PER_SM, num_partials)
        stages = num_stages or nc.pipeline_stages(BWD_NUM_STAGES, 2 * block_m * block * dtype.itemsize)
        constexprs = (has_weight, block_m, block, acc, stages)
        options = dict(num_warps=num_warps or nc.warps_for(block_m * block))
    return kernel, programs, rows_per_program, constexprs, options, None


# ------------------------------------------------------------- the hot path (no checks here)
# x, dy: contiguous, any shape whose trailing dimensions hold N elements per row (no views made:
# a view costs host time too); M = rows. rstd: (M,). Callers have checked the arguments.
def _launch_forward(x, weight, eps, M, N, plan, out=None):
    """(y, rstd) with a forward plan; y into `out` if given."""
    y = torch.empty_like(x) if out is None else out
    rstd = torch.empty(M, dtype=nc.acc_dtype(x.dtype), device=x.device)
    if M == 0 or N == 0:
        return y, rstd.fill_(math.nan)
    kernel, constexprs, options, key = plan
    launch(kernel, (M,), key, (x, x if weight is None else weight, y, rstd, N, eps, *constexprs), **options)
    return y, rstd


def _launch_backward(dy, x, rstd, weight, M, N, plan):
    """(dx, dw or None) with a backward plan."""
    dx = torch.empty_like(x)
    has_weight = weight is not None
    if M == 0 or N == 0:
        return dx, (torch.zeros(N, dtype=x.dtype, device=x.device) if has_weight else None)
    kernel, programs, rows_per_program, constexprs, options, key = plan
    partial = torch.empty((programs, N), dtype=nc.acc_dtype(x.dtype), device=x.device) if has_weight else dx
    args = (dy, x, weight if has_weight else x, rstd, dx, partial, M, N, rows_per_program, *constexprs)
    if key is None:
        kernel[(programs,)](*args, **options)
    else:
        launch(kernel, (programs,), key, args, **options)
    return dx, (nc.column_sums(partial, x.dtype) if has_weight else None)


def _forward(x: torch.Tensor, weight: torch.Tensor | None, eps: float, M: int, N: int):
    """(y, rstd (M,)) with the default plan."""
    return _launch_forward(x, weight, eps, M, N, _forward_plan(N, x.dtype, weight is not None))


def _infer(x: torch.Tensor, weight: torch.Tensor | None, eps: float, M: int, N: int):
    """y alone, for calls no backward will follow: no rstd allocated or stored."""
    y = torch.empty_like(x)
    if M == 0 or N == 0:
        return y
    kernel, constexprs, options, key = _forward_plan(N, x.dtype, weight is not None, store_stats=False)
    launch(kernel, (M,), key, (x, x if weight is None else weight, y, y, N, eps, *constexprs), **options)
    return y


def _backward(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor | None, M: int, N: int):
    """(dx, dw or None) with the default plan."""
    return _launch_backward(dy, x, rstd, weight, M, N, _backward_plan(M, N, x.dtype, weight is not None))


# ---------------------------------------------------------------------------------- launchers
def default_eps(dtype: torch.dtype) -> float:
    """What torch uses for eps=None: the epsilon of its compute type (fp32 for 16-bit inputs)."""
    return torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps


def rms_norm_forward(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float | None = None, *,
                     out: torch.Tensor | None = None, kernel: str | None = None,
                     block_m: int | None = None, num_programs: int | None = None,
                     num_warps: int | None = None, num_stages: int | None = None,
                     block_n: int | None = None):
    """RMSNorm over the last dimension of a contiguous x: returns (y, rstd), rstd per row.

    `kernel`: "row" (default up to MAX_N columns), "looped" (default above; `block_n` sets its
    chunk, a power of two), or "persistent" (`block_m`, `num_programs`, `num_warps`,
    `num_stages` set its launch; for the sweep).
    """
    M, N = nc.check_rows(x)
    weight = nc.check_vector(weight, "weight", x)
    eps = default_eps(x.dtype) if eps is None else nc.check_eps(eps)
    if kernel is not None and kernel not in KERNELS_FORWARD:
        raise ValueError(f"kernel must be one of {KERNELS_FORWARD}, got {kernel!r}")
    kernel = kernel or ("looped" if N > MAX_N else FORWARD_KERNEL)
    nc.check_positive_int(num_stages, "num_stages")
    nc.check_power_of_two(block_m, "block_m", high=64)
    nc.check_positive_int(num_programs, "num_programs")
    nc.check_power_of_two(num_warps, "num_warps", high=32)
    nc.check_power_of_two(block_n, "block_n", low=16)
    if kernel != "looped" and N > MAX_N:
        raise ValueError(f"kernel={kernel!r} holds a row in one block, at most MAX_N = {MAX_N} columns; "
                         f"x has {N}: use kernel='looped' (the default for wide rows)")
    out = validate.output(out, x)
    if kernel in ("row", "looped"):
        plan = _forward_plan(N, x.dtype, weight is not None, kernel, block_n, num_warps)
        _, rstd = _launch_forward(x, weight, eps, M, N, plan, out=out)
        return out, rstd.view(x.shape[:-1])
    x2, y2 = nc.rows_view(x, M, N), nc.rows_view(out, M, N)
    rstd = torch.empty(x.shape[:-1], dtype=nc.acc_dtype(x.dtype), device=x.device)
    if M == 0 or N == 0:
        return out, rstd.fill_(math.nan)
    w = weight if weight is not None else x  # a dummy pointer, never read without HAS_WEIGHT
    block = nc.next_power_of_2(N)
    block_m = min(block_m or nc.fwd_block_m(block), nc.next_power_of_2(M))
    rows_per_program, programs = nc.persistent_grid(M, block_m, FWD_PROGRAMS_PER_SM, num_programs)
    rmsnorm_fwd_persistent_kernel[(programs,)](
        x2, w, y2, rstd, M, N, rows_per_program, eps, HAS_WEIGHT=weight is not None, BLOCK_M=block_m,
        BLOCK_N=block, ACC=nc.acc_type(x.dtype),
        NUM_STAGES=num_stages or nc.pipeline_stages(FWD_NUM_STAGES, block_m * block * x.element_size()),
        num_warps=num_warps or nc.warps_for(block_m * block))
    return out, rstd


def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor,
                      weight: torch.Tensor | None = None, *, kernel: str | None = None,
                      block_m: int | None = None, num_partials: int | None = None,
                      num_warps: int | None = None, num_stages: int | None = None,
                      block_n: int | None = None):
    """Gradients of RMSNorm: returns (dx, dweight or None); dw by the two-stage reduction.

    `kernel`: "partial" (default up to MAX_N columns; `block_m`, `num_partials`, `num_warps`,
    `num_stages` override its launch) or "looped" (default above; `block_n` sets its chunk,
    `num_partials` its number of programs).
    """
    M, N = nc.check_rows(x)
    validate.tensor(dy, "dy", dtypes=DTYPES)
    validate.same_shape(dy=dy, x=x)
    validate.same_dtype(dy=dy, x=x)
    rstd = nc.check_stats(rstd, "rstd", x)
    weight = nc.check_vector(weight, "weight", x)
    if kernel is not None and kernel not in KERNELS_BACKWARD:
        raise ValueError(f"kernel must be one of {KERNELS_BACKWARD}, got {kernel!r}")
    nc.check_power_of_two(block_m, "block_m", high=64)
    nc.check_positive_int(num_partials, "num_partials")
    nc.check_power_of_two(num_warps, "num_warps", high=32)
    nc.check_positive_int(num_stages, "num_stages")
    nc.check_power_of_two(block_n, "block_n", low=16)
    if kernel == "partial" and N > MAX_N:
        raise ValueError(f"kernel='partial' holds a row in one block, at most MAX_N = {MAX_N} columns; "
                         f"x has {N}: use kernel='looped' (the default for wide rows)")
    looped = kernel == "looped" or (kernel is None and N > MAX_N)
    plan = _backward_plan(M, N, x.dtype, weight is not None, "looped" if looped else None, block_n)
    if any(v is not None for v in (block_m, num_partials, num_warps, num_stages)):
        plan = _tuned_backward_plan(plan, M, N, x.dtype, block_m, num_partials, num_warps, num_stages)
    return _launch_backward(dy, x, rstd, weight, M, N, plan)


# ------------------------------------------------------------------- the op torch.compile sees
@torch.library.custom_op(f"{NAMESPACE}::rms_norm", mutates_args=())
def rms_norm_op(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd) of a contiguous (M, N) x: the forward as a registered op (see rms_norm)."""
    return _forward(x, weight, eps, x.shape[0], x.shape[1])


@rms_norm_op.register_fake
def _rms_norm_fake(x, weight, eps):
    # Shapes and dtypes only: what the compiler plans with, without running a kernel.
    return torch.empty_like(x), x.new_empty(x.shape[:1], dtype=nc.acc_dtype(x.dtype))


@torch.library.custom_op(f"{NAMESPACE}::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor,
                         weight: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw); dw is empty when there is no weight (an op returns tensors, not None)."""
    dx, dw = _backward(dy.contiguous(), x, rstd, weight, x.shape[0], x.shape[1])  # gradients come in any layout
    return dx, (dw if dw is not None else x.new_empty(0))


@rms_norm_backward_op.register_fake
def _rms_norm_backward_fake(dy, x, rstd, weight):
    return torch.empty_like(x), (torch.empty_like(weight) if weight is not None else x.new_empty(0))


def _setup_context(ctx, inputs, output):
    x, weight, _ = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.mark_non_differentiable(output[1])  # rstd: a statistic for the backward, not a result


def _backward_formula(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = rms_norm_backward_op(dy, x, rstd, weight)  # itself an op: one node in the backward graph
    return dx, (dw if weight is not None else None), None


rms_norm_op.register_autograd(_backward_formula, setup_context=_setup_context)


# ------------------------------------------------------------------- the op eager mode calls
class RMSNormFunction(torch.autograd.Function):
    """y = rms_norm(x) for a contiguous x of M rows of N elements; the same kernels."""

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


def rms_norm(x: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
             eps: float | None = None) -> torch.Tensor:
    """`torch.nn.functional.rms_norm`, computed by the Triton kernels, differentiable, compilable.

    Any x torch accepts: the normalized dimensions are flattened into rows of N = their product
    (any N: rows wider than MAX_N take the looped kernels); a non-contiguous x is copied first,
    as torch's own kernel does. Eager calls run `RMSNormFunction` (or the bare launcher when no
    gradient is needed); under torch.compile, the registered op `torch.ops.course.rms_norm`.
    """
    shape = nc.normalized_shape_of(normalized_shape)
    nc.check_call(x, shape, weight)
    eps = default_eps(x.dtype) if eps is None else (eps if type(eps) is float and 0 <= eps < math.inf else nc.check_eps(eps))
    if ops.compiling():  # the registered op, on 2-D views: the compiler sees one node
        x2 = nc.as_rows(x, shape)
        w = weight if weight is None or weight.dim() == 1 else weight.reshape(x2.shape[1])
        return rms_norm_op(x2, w, eps)[0].view(x.shape)
    if not x.is_contiguous():
        x = x.contiguous()  # as torch's own kernel does
    if weight is not None and not weight.is_contiguous():
        weight = weight.contiguous()
    M, N = nc.rows_of(x, shape)
    if ops.needs_grad(x, weight):
        return RMSNormFunction.apply(x, weight, eps, M, N)
    return _infer(x, weight, eps, M, N)


class TritonRMSNorm(nn.RMSNorm):
    """`nn.RMSNorm` with the Triton kernels: same arguments, parameters, init and state_dict."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)


# ------------------------------------------------------------------------- torch references
def rms_norm_unfused(x: torch.Tensor, weight: torch.Tensor | None, eps: float | None = None) -> torch.Tensor:
    """RMSNorm as many model files write it (fp32 math, round once): ~6 eager kernels."""
    eps = default_eps(x.dtype) if eps is None else eps
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(x.dtype)


def rms_norm_backward_unfused(dy, x, rstd, weight):
    """The backward formula in eager ops: what autograd runs for the written-out forward."""
    xf, dyf = x.float(), dy.float()
    r = rstd.float().reshape(*x.shape[:-1], 1)
    xhat = xf * r
    g = dyf * weight.float()
    dx = (g - xhat * (g * xhat).mean(-1, keepdim=True)) * r
    dw = (dyf * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dw.to(weight.dtype)
