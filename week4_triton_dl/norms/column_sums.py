"""Stage 2 of the norms' weight gradients: the column sums of a (P, N) buffer of partial sums.

dw and db are column sums over every row of x. Stage 1 (layernorm_backward.py, rmsnorm.py,
add_rmsnorm.py) has each of P programs write the sums of its own rows into one row of a (P, N)
fp32 "partials" buffer: no two programs write one address, so no atomics. Stage 2, here, sums
the P rows of each column and rounds once to the weight's dtype. A program owns BLOCK_N columns
and walks down the rows, so each tile row it loads is BLOCK_N contiguous floats (coalesced);
fixed P and a fixed order give the same bits every run.

Cost model: the buffer is P x N x 4 bytes, written once (stage 1) and read once (here): at
P = 264 programs and N = 8192 that is 8.6 MB, a few % of a backward that reads 128 MB of x.
"""
from __future__ import annotations

import torch

from course.gpu import triton, tl
from course.launch import launch

PARTIAL_BLOCK_P, PARTIAL_BLOCK_N = 32, 64  # stage-2 tile: 32 partial rows x 64 columns
# EXERCISE NOTE: `pytest tests/week4/test_layernorm.py --impl=exercises -k column_sums` checks stage 2
#   alone. Until you write it, your backward (exercises/norms/layernorm_backward.py) runs on the solution's
#   stage 2: the two can be written in either order.


@triton.jit
def partial_sum_kernel(partial_ptr, out_ptr, P, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    # Stage 2: column sums of the (P, N) partials. Each program owns BLOCK_N columns and walks
    # down all P rows; a tile row is BLOCK_N contiguous floats, so the loads coalesce.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    # BEGIN EXERCISE: stage 2: a [BLOCK_P, BLOCK_N] accumulator in the partials' dtype (fp32); walk down the P rows
    #   BLOCK_P at a time (rows masked against P, int64 offsets), adding tiles element-wise; then tl.sum(axis=0)
    #   stored masked in out's dtype (rounded once)
    # HINT: Stage 2 of the split reduction: each program owns BLOCK_N columns and sums the P partial rows,
    #   keeping a 2-D tile accumulator so the loop only adds element-wise and reduces once at the end.
    # HINT: acc = zeros [BLOCK_P, BLOCK_N] in the partials' dtype; loop start over range(0, P, BLOCK_P):
    #   rows = start + arange, mask rows < P and the column mask, load with other=0 and add; after the loop
    #   tl.sum over axis 0 and one masked store.
    # HINT: Index with `rows[:, None].to(tl.int64) * N + cols[None, :]`: P * N can pass 2^31.
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=partial_ptr.dtype.element_ty)
    for start in range(0, P, BLOCK_P):
        rows = start + tl.arange(0, BLOCK_P)
        mask = (rows < P)[:, None] & col_mask[None, :]
        acc += tl.load(partial_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=col_mask)
    # END EXERCISE


def column_sums(partials: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Stage 2: sum a (P, N) partials buffer over its rows, rounded once to `dtype`."""
    P, N = partials.shape
    out = torch.empty(N, dtype=dtype, device=partials.device)
    if N == 0:
        return out
    if P == 0:
        return out.zero_()
    launch(partial_sum_kernel, (-(-N // PARTIAL_BLOCK_N),), (P, N, partials.dtype, dtype),
           (partials, out, P, N, PARTIAL_BLOCK_P, PARTIAL_BLOCK_N), num_warps=4)
    return out
