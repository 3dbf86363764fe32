"""LayerNorm's backward in Triton: dx row by row, and dw, db, the column sums over every row.

The forward, and the registered op and autograd Function that call this backward: layernorm.py.
What every norm shares (argument checks, launch sizing and plans): plumbing.py; stage 2 of dw and
db: column_sums.py.

With xhat = (x - mean) * rstd and g = dy * w, where mean and rstd are the statistics the forward
saved (8 bytes per row, so the backward need not recompute them):
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat))     (per row: two row reductions)
    dw = sum over rows of dy * xhat,   db = sum over rows of dy   (per column: over ALL rows)
dx is row-local, like the forward. dw and db are column sums over every row, the transposed
reduction, and that is the interesting part:
- `layernorm_bwd_atomic_kernel`: each row's program adds its dy * xhat into one fp32 row of N
  with `tl.atomic_add`. Every program hits the same N addresses, and the L2 applies the
  updates to one address one after another (read-modify-write), so M rows mean M queued
  updates per address: the atomics serialize. The result also depends on the order the
  programs happen to arrive in (fp32 addition is not associative): not reproducible.
- `layernorm_bwd_kernel` + `column_sums.column_sums`: a two-stage reduction. Stage 1: P
  programs, each owning a contiguous run of rows, compute dx row by row and accumulate dw, db in
  registers, then write ONE row of a (P, N) fp32 "partials" buffer: no two programs write the
  same address, so no atomics and no contention. Stage 2 (`partial_sum_kernel`) sums the P rows
  of each column. P is chosen to fill the GPU (a few programs per SM, enough to hide memory
  latency) and no larger: each extra partial row is 4N bytes written and read again, and
  the P x N buffer must stay small next to x (P = 264, N = 8192: 8.6 MB per buffer against
  128 MB for x in bf16). Fixed P and fixed order: the same bits every run.

Cost model (M rows, N columns, itemsize s; the minimum traffic): read x, dy (2MNs), mean, rstd
(8M), w (Ns); write dx (MNs), dw, db (2Ns): ~3MNs, plus the partials (2 x P x N x 4 bytes
written and read: a few % at N = 8192). torch's CUDA backward launches one kernel for dx and
another for dw/db that reads x and dy again: ~5MNs bytes, so a one-pass backward can approach
5/3 = 1.67x at equal bandwidth.

Rows wider than a block (`layernorm_bwd_looped_kernel`) are streamed in chunks, twice (the two
row sums, then dx): every width torch accepts works, the one-pass kernels take rows up to MAX_N.
bf16/fp16 inputs are computed in fp32, fp64 inputs in fp64 (so `torch.autograd.gradcheck` can
check this hand-written backward). `python -m week4_triton_dl.norms.layernorm_bench --sweep` times the
configurations (num_warps, rows per step, stages, programs per SM = partial-buffer size) on a GPU.
"""
from __future__ import annotations

import torch

from course.gpu import triton, tl
from course.launch import next_power_of_2
from week4_triton_dl.norms import plumbing as nc  # checks, rows, launch plans: shared by every norm
from week4_triton_dl.norms.column_sums import column_sums  # stage 2 of dw and db

DTYPES = nc.DTYPES
MAX_N = nc.MAX_N  # widest row the one-pass kernels hold in registers; wider rows are looped
KERNELS_BACKWARD = ("partial", "atomic", "looped")
BWD_PROGRAMS_PER_SM = nc.BWD_PROGRAMS_PER_SM  # programs of stage 1 per SM = rows of the partials per SM
# 3 steps in flight and ~4k elements per step (rows_per_step x N, `nc.bwd_block_m`), 2 programs per SM:
# the best of 54 settings on the H100 at 65536 x 768 bf16 (tools/probe_norm_bwd.py, 2026-11-26:
# 129 us = 78% of copy for LayerNorm, against 284 us with 1 row x 2 stages, and torch's 404 us).
BWD_NUM_STAGES = 3
# No FMA contraction in the backward (see `_row_grads`): g is rounded once and used as such, so
# one column gives dx = 0 exactly. The FMAs lost are a few per element of a memory-bound kernel.
_BWD_COMPILE = dict(enable_fp_fusion=False)
# EXERCISE NOTE: Do the forward first (exercises/layernorm.py): the tests feed this backward the mean and rstd
#   your forward saves. An order that works: the backward formula (`_row_grads`) with the partials kernel
#   (`layernorm_bwd_kernel`; its stage 2 is column_sums.py's `partial_sum_kernel`, a hole of its own); then the
#   looped kernel (rows wider than MAX_N) and the atomic one. The launch plans and the launcher are given: they
#   call your kernels. (The autograd Function and the registered op in layernorm.py call the solution's backward.)


# ----------------------------------------------------------------------------------- backward
@triton.jit
def _row_grads(x, dy, w, mean, rstd, mask, N, HAS_WEIGHT: tl.constexpr):
    """dx of a [BLOCK_M, BLOCK_N] tile of rows, and xhat for the weight gradient.

    g must be ONE number in both places it is used: mean(g) is summed from the rounded g, so
    `g - ... - mean(g)` must subtract it from that same rounded g. With FMA contraction on, the
    compiler turns `dy * w - ...` into fma(dy, w, ...), which uses the EXACT product: dx then
    carries g's rounding error times rstd. With N = 1, var = 0 and rstd = 1/sqrt(eps) ~ 316, so
    that is ~3e-5 where the answer is exactly 0 (one column: y = b whatever x is). Hence the
    backward kernels are compiled with enable_fp_fusion=False (`_BWD_COMPILE`).
    """
    # BEGIN EXERCISE: the backward formula on a [BLOCK_M, BLOCK_N] tile: xhat = (x - mean) * rstd (0 in padding
    #   lanes); g = dy * w (dy without weight); per row c1 = mean(g * xhat), c2 = mean(g) (axis=1);
    #   dx = (g - xhat * c1 - c2) * rstd; return dx, xhat
    # HINT: LayerNorm's input gradient: with g = dy * w and xhat the normalized input, dx = rstd * (g -
    #   mean(g) - xhat * mean(g * xhat)); the two means remove the components the mean and variance depend
    #   on.
    # HINT: xhat from x, mean[:, None], rstd[:, None], zeroed in padding lanes; g = dy, times w[None, :] if
    #   HAS_WEIGHT; c1 and c2 as row sums (axis=1) divided by N; combine; return dx and xhat.
    # HINT: `dx = (g - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]`
    xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
    if HAS_WEIGHT:
        g = dy * w[None, :]
    else:
        g = dy
    c1 = tl.sum(xhat * g, axis=1) / N  # mean(g * xhat)
    c2 = tl.sum(g, axis=1) / N         # mean(g)
    dx = (g - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
    return dx, xhat
    # END EXERCISE


@triton.jit
def layernorm_bwd_atomic_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr,
                                N, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                                BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    # The simple, slow way (kept to be measured): one row per program, dw/db by atomics.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    mask = col_mask[None, :]
    offsets = row * N + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(ACC)
    dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(ACC)
    w = cols  # unused unless HAS_WEIGHT (a constexpr: the branch is compiled out)
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    mean = tl.load(mean_ptr + row + tl.arange(0, 1))
    rstd = tl.load(rstd_ptr + row + tl.arange(0, 1))
    # BEGIN EXERCISE: dx, xhat from _row_grads, dx stored masked in dx's dtype; then this row's dy * xhat and dy
    #   (summed over the tile's one row, axis=0) added into the fp32 dw and db with tl.atomic_add (masked columns)
    # HINT: dx is per row, but dw and db sum over all rows: here every program adds its row's contribution
    #   into the same fp32 buffers with atomics (simple, but contended, the baseline the next kernel
    #   improves).
    # HINT: _row_grads gives dx and xhat; store dx in dx's dtype; then, for each present parameter, sum the
    #   tile over axis 0 (one row) and tl.atomic_add it at dw_ptr + cols / db_ptr + cols with the column
    #   mask.
    # HINT: `tl.atomic_add(dw_ptr + cols, tl.sum(dy * xhat, axis=0), mask=col_mask)`
    dx, xhat = _row_grads(x, dy, w, mean, rstd, mask, N, HAS_WEIGHT)
    tl.store(dx_ptr + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    # Every program adds into the same N addresses: M updates per address, one at a time.
    if HAS_WEIGHT:
        tl.atomic_add(dw_ptr + cols, tl.sum(dy * xhat, axis=0), mask=col_mask)
    if HAS_BIAS:
        tl.atomic_add(db_ptr + cols, tl.sum(dy, axis=0), mask=col_mask)
    # END EXERCISE


@triton.jit
def layernorm_bwd_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr,
                         dw_partial_ptr, db_partial_ptr, M, N, rows_per_program,
                         HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr,
                         NUM_STAGES: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    first = pid * rows_per_program
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    w = cols  # unused unless HAS_WEIGHT
    if HAS_WEIGHT:  # loaded once per program, kept in registers for all its rows
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    # BEGIN EXERCISE: stage 1 of the dw/db reduction: dw_acc, db_acc [BLOCK_M, BLOCK_N] zeros in ACC; for step
    #   in tl.range(0, rows_per_program, BLOCK_M, num_stages=NUM_STAGES): rows first + step + arange(BLOCK_M)
    #   masked against M; x, dy (in ACC), mean and rstd loaded; dx, xhat = _row_grads(...), dx stored in dx's
    #   dtype; dw_acc += dy * xhat, db_acc += dy. After the loop their column sums (axis=0) into row pid of the
    #   partials (no atomics: no other program writes that row)
    # HINT: Replace the contended atomics with a two-stage reduction: each program sums its own rows' dw and
    #   db contributions in registers and writes one partial row; a second kernel sums the partials.
    # HINT: Two [BLOCK_M, BLOCK_N] ACC zero accumulators; a pipelined tl.range loop over BLOCK_M-row steps:
    #   load x, dy (masked 2-D), mean and rstd (masked by rows), _row_grads, store dx, add dy * xhat and dy
    #   element-wise; after the loop store the column sums into row pid of each partial buffer.
    # HINT: `tl.store(dw_partial_ptr + pid * N + cols, tl.sum(dw_acc, axis=0), mask=col_mask)`: no atomics,
    #   no other program writes that row.
    # Stage 1 of the dw/db reduction: this program's share, in registers, [BLOCK_M, BLOCK_N]
    # so a step adds element-wise and the cross-row sum happens once, at the end.
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    # Pipelined like the forward: the next rows' x and dy load while this row reduces.
    for step in tl.range(0, rows_per_program, BLOCK_M, num_stages=NUM_STAGES):
        rows = first + step + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        offsets = rows[:, None] * N + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(ACC)
        mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        dx, xhat = _row_grads(x, dy, w, mean, rstd, mask, N, HAS_WEIGHT)
        tl.store(dx_ptr + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            dw_acc += dy * xhat
        if HAS_BIAS:
            db_acc += dy
    # One row of the partials buffer per program: no other program writes it, so no atomics.
    if HAS_WEIGHT:
        tl.store(dw_partial_ptr + pid * N + cols, tl.sum(dw_acc, axis=0), mask=col_mask)
    if HAS_BIAS:
        tl.store(db_partial_ptr + pid * N + cols, tl.sum(db_acc, axis=0), mask=col_mask)
    # END EXERCISE


@triton.jit
def layernorm_bwd_looped_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr,
                                dw_partial_ptr, db_partial_ptr, M, N, rows_per_program,
                                HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                                BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """Rows wider than a block: per row, pass 1 reduces mean(g * xhat) and mean(g), pass 2
    writes dx. The dw/db partials rows (N floats each, too wide for registers) live in global
    memory; only this program touches them and each thread reads back exactly the elements it
    wrote (same chunk, same lanes), so no atomics and no barrier (rmsnorm.py has the same).
    """
    pid = tl.program_id(0).to(tl.int64)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    # BEGIN EXERCISE: for each row in [first, last): pass 1 accumulates xhat * g and g chunk by chunk (xhat 0 in
    #   padding lanes, g = dy * w) into [BLOCK_N] vectors: c1 = mean(g * xhat), c2 = mean(g); pass 2 stores
    #   dx = (g - xhat * c1 - c2) * rstd and adds dy * xhat and dy to row pid of the partials: read back with
    #   other=0 for the program's first row (the buffer is never zeroed), add, store
    # HINT: For rows too wide for registers, the backward needs two passes per row: the first gathers the
    #   two row means c1 and c2, the second writes dx and folds this row's dy * xhat and dy into the
    #   program's partial row.
    # HINT: Outer loop over rows in [first, last); pass 1 over chunks accumulates xhat * g and g into
    #   [BLOCK_N] vectors (xhat masked to 0 in padding), then c1, c2; pass 2 recomputes xhat and g, stores
    #   dx, and read-add-writes the partials.
    # HINT: The partials buffer is never zeroed: read it with `mask=mask & (row > first), other=0.0`, so the
    #   program's first row starts the sum.
    for row in range(first, last):
        offset = row * N
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        c1_terms = tl.zeros([BLOCK_N], dtype=ACC)
        c2_terms = tl.zeros([BLOCK_N], dtype=ACC)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = cols < N
            xhat = tl.where(mask, (tl.load(x_ptr + offset + cols, mask=mask, other=0.0).to(ACC) - mean) * rstd, 0.0)
            g = tl.load(dy_ptr + offset + cols, mask=mask, other=0.0).to(ACC)
            if HAS_WEIGHT:
                g = g * tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
            c1_terms += xhat * g
            c2_terms += g
        c1 = tl.sum(c1_terms, axis=0) / N
        c2 = tl.sum(c2_terms, axis=0) / N
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = cols < N
            xhat = tl.where(mask, (tl.load(x_ptr + offset + cols, mask=mask, other=0.0).to(ACC) - mean) * rstd, 0.0)
            dy = tl.load(dy_ptr + offset + cols, mask=mask, other=0.0).to(ACC)
            g = dy
            if HAS_WEIGHT:
                g = dy * tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
            tl.store(dx_ptr + offset + cols, ((g - xhat * c1 - c2) * rstd).to(dx_ptr.dtype.element_ty), mask=mask)
            keep = mask & (row > first)  # the program's first row starts the sums: never zeroed
            if HAS_WEIGHT:
                dw_before = tl.load(dw_partial_ptr + pid * N + cols, mask=keep, other=0.0)
                tl.store(dw_partial_ptr + pid * N + cols, dw_before + dy * xhat, mask=mask)
            if HAS_BIAS:
                db_before = tl.load(db_partial_ptr + pid * N + cols, mask=keep, other=0.0)
                tl.store(db_partial_ptr + pid * N + cols, db_before + dy, mask=mask)
    # END EXERCISE


# ------------------------------------------------------------------------------- launch plans
# Computed once per shape and kept (plumbing.py says why); the kernels are this file's.
_BACKWARD_PLANS: dict = {}


def _backward_plan(M: int, N: int, dtype: torch.dtype, has_weight: bool, has_bias: bool,
                   kernel: str | None = None, block_n: int | None = None):
    """(kernel, programs P, rows per program, constexprs, options, key) of the backward."""
    key = (M, N, dtype, has_weight, has_bias, kernel, block_n)
    return _BACKWARD_PLANS.get(key) or nc.backward_plan(
        _BACKWARD_PLANS, key, M, N, dtype, (has_weight, has_bias), layernorm_bwd_kernel, layernorm_bwd_looped_kernel,
        kernel == "looped" or (kernel is None and N > MAX_N), block_n, BWD_PROGRAMS_PER_SM, BWD_NUM_STAGES,
        _BWD_COMPILE)


# ------------------------------------------------------------- the hot path (no checks here)
# x, dy: contiguous, any shape whose trailing dimensions hold N elements per row (no views made:
# a view costs host time too); M = rows. mean, rstd: (M,). Callers have checked the arguments.
def _launch_backward(dy, x, mean, rstd, weight, has_bias, M, N, plan):
    """(dx, dw or None, db or None) with a backward plan."""
    dx = torch.empty_like(x)
    has_weight = weight is not None
    if M == 0 or N == 0:  # sums over no rows are zero, as in torch
        return dx, nc.zeros_or_none(has_weight, N, x), nc.zeros_or_none(has_bias, N, x)
    kernel, programs, rows_per_program, constexprs, options, key = plan
    acc = nc.acc_dtype(x.dtype)
    dw_partial = torch.empty((programs, N), dtype=acc, device=x.device) if has_weight else dx
    db_partial = torch.empty((programs, N), dtype=acc, device=x.device) if has_bias else dx
    nc.run(kernel, (programs,), key, (dy, x, weight if has_weight else x, mean, rstd, dx, dw_partial, db_partial,
                                      M, N, rows_per_program, *constexprs), options)
    return (dx, column_sums(dw_partial, x.dtype) if has_weight else None,
            column_sums(db_partial, x.dtype) if has_bias else None)


def backward(dy, x, params, stats, M, N):
    """(dx, dw or None, db or None) with the shape's default plan, for callers that have checked
    the arguments (the op and the autograd Function of layernorm.py, through plumbing's contract)."""
    (weight, bias), (mean, rstd) = params, stats
    plan = _backward_plan(M, N, x.dtype, weight is not None, bias is not None)
    return _launch_backward(dy, x, mean, rstd, weight, bias is not None, M, N, plan)


# ---------------------------------------------------------------------------------- launcher
def layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                        weight: torch.Tensor | None = None, has_bias: bool = False, *,
                        kernel: str | None = None, block_m: int | None = None,
                        num_partials: int | None = None, num_warps: int | None = None,
                        num_stages: int | None = None, block_n: int | None = None):
    """Gradients of LayerNorm: returns (dx, dweight or None, dbias or None).

    `kernel="partial"` (default up to MAX_N columns): `num_partials` programs (default: a few
    per SM), each writing one row of a (num_partials, N) fp32 buffer of dw/db partial sums,
    summed by `column_sums` (stage 2). `kernel="looped"` (default above): the same for rows
    streamed in chunks of `block_n`. `kernel="atomic"`: one program per row, dw/db accumulated
    with atomics (slow, not reproducible; for study).
    """
    M, N = nc.check_backward(dy, x)
    mean, rstd = nc.check_stats(mean, "mean", x), nc.check_stats(rstd, "rstd", x)
    weight = nc.check_vector(weight, "weight", x)
    kernel = nc.check_launch(kernel, KERNELS_BACKWARD, "partial", N, block_m=block_m, programs=num_partials,
                             programs_name="num_partials", num_warps=num_warps, num_stages=num_stages,
                             block_n=block_n)
    has_weight, has_bias = weight is not None, bool(has_bias)
    if kernel == "atomic":
        dx = torch.empty_like(x)
        if M == 0 or N == 0:
            return dx, nc.zeros_or_none(has_weight, N, x), nc.zeros_or_none(has_bias, N, x)
        block = next_power_of_2(N)
        dw = torch.zeros(N, dtype=nc.acc_dtype(x.dtype), device=x.device)
        db = torch.zeros(N, dtype=nc.acc_dtype(x.dtype), device=x.device)
        layernorm_bwd_atomic_kernel[(M,)](
            nc.rows_view(dy, M, N), nc.rows_view(x, M, N), weight if has_weight else x, mean.reshape(M),
            rstd.reshape(M), nc.rows_view(dx, M, N), dw, db, N, HAS_WEIGHT=has_weight, HAS_BIAS=has_bias,
            BLOCK_N=block, ACC=nc.acc_type(x.dtype), num_warps=num_warps or nc.warps_for(block), **_BWD_COMPILE)
        return dx, (dw.to(x.dtype) if has_weight else None), (db.to(x.dtype) if has_bias else None)
    plan = _backward_plan(M, N, x.dtype, has_weight, has_bias, "looped" if kernel == "looped" else None, block_n)
    if any(v is not None for v in (block_m, num_partials, num_warps, num_stages)):
        plan = nc.tuned_backward_plan(plan, layernorm_bwd_looped_kernel, M, x.dtype, BWD_PROGRAMS_PER_SM,
                                      BWD_NUM_STAGES, block_m, num_partials, num_warps, num_stages)
    return _launch_backward(dy, x, mean, rstd, weight, has_bias, M, N, plan)
