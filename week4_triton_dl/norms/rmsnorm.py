"""RMSNorm in Triton, forward and backward, as a PyTorch op: eager, autograd and torch.compile.

Its benchmarks, launch sweep and command line: rmsnorm_bench.py (`python -m
week4_triton_dl.norms.rmsnorm_bench --sweep`). Over 500 lines: the row, persistent and looped
kernels of one op, forward and backward, with its launchers; what every norm shares around its
kernels (checks, rows, launch plans, the autograd and torch.compile glue) is plumbing.py's.

y = x * rstd * w over the last dimension, rstd = 1 / sqrt(mean(x^2) + eps): LayerNorm without
the mean subtraction and without the bias (LLaMA, Mistral, Qwen, Gemma all use it). Diff this
file against `layernorm.py` (the forward) and `layernorm_backward.py`: the kernels are the same
shape with one reduction fewer per row.

What it teaches (beyond LayerNorm's, whose two-stage dw reduction and partials buffer this
module reuses, `column_sums.py`, with the checks and launch sizing every norm shares: plumbing.py):
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
    computed once and cached (`_forward_plan`, `_backward_plan`, made by plumbing.py): no autotuning, no config
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

from course import ops, validate
from course.gpu import triton, tl
from course.launch import launch
from week4_triton_dl.norms import plumbing as nc  # checks, rows, launch plans, the op's skeleton: shared
from week4_triton_dl.norms.column_sums import column_sums  # stage 2 of dw, shared with LayerNorm

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
#   LayerNorm's stage-2 reduction (`column_sums`), input checks and launch sizing (`nc`, imported above, is the
#   solution's plumbing module). The launchers, launch plans and the registered op are given.


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
# Computed once per shape and kept (plumbing.py says why); the kernels are this file's.
_FORWARD_PLANS: dict = {}
_BACKWARD_PLANS: dict = {}


def _forward_plan(N: int, dtype: torch.dtype, has_weight: bool, kernel: str | None = None,
                  block_n: int | None = None, num_warps: int | None = None, store_stats: bool = True):
    """(kernel, constexprs, launch options, key) of the row or looped forward for rows of N."""
    key = (N, dtype, has_weight, kernel, block_n, num_warps, store_stats)
    return _FORWARD_PLANS.get(key) or nc.forward_plan(
        _FORWARD_PLANS, key, N, dtype, (has_weight,), rmsnorm_fwd_row_kernel, rmsnorm_fwd_looped_kernel,
        kernel, block_n, num_warps, store_stats)


def _backward_plan(M: int, N: int, dtype: torch.dtype, has_weight: bool, kernel: str | None = None,
                   block_n: int | None = None):
    """(kernel, programs P, rows per program, constexprs, options, key) of the backward."""
    key = (M, N, dtype, has_weight, kernel, block_n)
    return _BACKWARD_PLANS.get(key) or nc.backward_plan(
        _BACKWARD_PLANS, key, M, N, dtype, (has_weight,), rmsnorm_bwd_kernel, rmsnorm_bwd_looped_kernel,
        kernel == "looped" or (kernel is None and N > MAX_N), block_n, BWD_PROGRAMS_PER_SM, BWD_NUM_STAGES, {})


def backward_launch(M: int, N: int, dtype: torch.dtype, has_weight: bool):
    """The default backward launch for M rows of N <= MAX_N: (kernel, programs, rows per program,
    (HAS_WEIGHT, BLOCK_M, BLOCK_N, ACC, NUM_STAGES), launch options, key). Public for kernels that
    run this backward's loop with more streams (add_rmsnorm.py)."""
    return _backward_plan(M, N, dtype, has_weight)


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
        return dx, nc.zeros_or_none(has_weight, N, x)
    kernel, programs, rows_per_program, constexprs, options, key = plan
    partial = torch.empty((programs, N), dtype=nc.acc_dtype(x.dtype), device=x.device) if has_weight else dx
    nc.run(kernel, (programs,), key, (dy, x, weight if has_weight else x, rstd, dx, partial, M, N, rows_per_program,
                                      *constexprs), options)
    return dx, (column_sums(partial, x.dtype) if has_weight else None)


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


def _backward(dy, x, params, stats, M: int, N: int):
    """(dx, dw or None) with the default plan (the contract of plumbing.py)."""
    (weight,), (rstd,) = params, stats
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
    kernel = nc.check_launch(kernel, KERNELS_FORWARD, FORWARD_KERNEL, N, block_m=block_m, programs=num_programs,
                             num_warps=num_warps, num_stages=num_stages, block_n=block_n)
    out = validate.output(out, x)
    if kernel in ("row", "looped"):
        plan = _forward_plan(N, x.dtype, weight is not None, kernel, block_n, num_warps)
        _, rstd = _launch_forward(x, weight, eps, M, N, plan, out=out)
        return out, rstd.view(x.shape[:-1])
    rstd = torch.empty(x.shape[:-1], dtype=nc.acc_dtype(x.dtype), device=x.device)
    if M == 0 or N == 0:
        return out, rstd.fill_(math.nan)
    programs, rows_per_program, launch_options = nc.persistent_forward(
        M, N, x.element_size(), FWD_PROGRAMS_PER_SM, FWD_NUM_STAGES, block_m, num_programs, num_warps, num_stages)
    rmsnorm_fwd_persistent_kernel[(programs,)](
        nc.rows_view(x, M, N), x if weight is None else weight, nc.rows_view(out, M, N), rstd, M, N,
        rows_per_program, eps, HAS_WEIGHT=weight is not None, ACC=nc.acc_type(x.dtype), **launch_options)
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
    M, N = nc.check_backward(dy, x)
    rstd = nc.check_stats(rstd, "rstd", x)
    weight = nc.check_vector(weight, "weight", x)
    kernel = nc.check_launch(kernel, KERNELS_BACKWARD, "partial", N, block_m=block_m, programs=num_partials,
                             programs_name="num_partials", num_warps=num_warps, num_stages=num_stages,
                             block_n=block_n)
    plan = _backward_plan(M, N, x.dtype, weight is not None, "looped" if kernel == "looped" else None, block_n)
    if any(v is not None for v in (block_m, num_partials, num_warps, num_stages)):
        plan = nc.tuned_backward_plan(plan, rmsnorm_bwd_looped_kernel, M, x.dtype, BWD_PROGRAMS_PER_SM,
                                      BWD_NUM_STAGES, block_m, num_partials, num_warps, num_stages)
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
    dx, dw = _backward(dy.contiguous(), x, (weight,), (rstd,), x.shape[0], x.shape[1])  # gradients come in any layout
    return dx, (dw if dw is not None else x.new_empty(0))


@rms_norm_backward_op.register_fake
def _rms_norm_backward_fake(dy, x, rstd, weight):
    return torch.empty_like(x), (torch.empty_like(weight) if weight is not None else x.new_empty(0))


nc.register_autograd(rms_norm_op, rms_norm_backward_op, params=1)


# ------------------------------------------------------------------- the op eager mode calls
RMSNormFunction = nc.norm_function("RMSNormFunction", _forward, _backward)


def rms_norm(x: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
             eps: float | None = None) -> torch.Tensor:
    """`torch.nn.functional.rms_norm`, computed by the Triton kernels, differentiable, compilable.

    Any x torch accepts: the normalized dimensions are flattened into rows of N = their product
    (any N: rows wider than MAX_N take the looped kernels); a non-contiguous x is copied first,
    as torch's own kernel does. Eager calls run `RMSNormFunction` (or the bare launcher when no
    gradient is needed); under torch.compile, the registered op `torch.ops.course.rms_norm`
    (plumbing.entry).
    """
    return nc.entry(x, normalized_shape, (weight,), eps, default_eps,
                    op=rms_norm_op, function=RMSNormFunction, infer=_infer)


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
