"""Softmax in Triton: one fused pass per row, and an online (streaming) version for wide rows.

softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), with m = max_j x_j. Subtracting the row
maximum changes nothing mathematically (it cancels) but keeps exp() from overflowing: without
it a row holding 100.0 in fp32 gives inf / inf = NaN.

What it teaches:
* `softmax_row_kernel`: one program per row, the whole row in one block of registers. The
  row is read from HBM once and written once; max, exp, sum and divide all happen on-chip.
  PyTorch's eager `x - x.max(); e = x.exp(); e / e.sum()` would move the row ~8 times.
* `softmax_rows_kernel`: the same, with several short rows per program (a 2-D block): the
  usual fix when one row is too little work per program. On the H100 it did not pay for 1k-2k
  rows (one row per program already reached ~96% of copy in fp32), so it is opt-in.
* `softmax_online_kernel`: for rows wider than one block. The running maximum `m` and the
  running sum `d` are updated chunk by chunk (d <- d * exp(m_old - m_new) + sum exp(x - m_new),
  Milakov & Gimelshein 2018), so the statistics need ONE read of the row instead of two (max,
  then sum); a second read produces the output. This is the recurrence FlashAttention uses.

Cost model (rows x cols, itemsize s): the fused kernels move 2 * rows * cols * s bytes (read x,
write y); the online kernel reads x twice, 3 * rows * cols * s, though the second read often
hits L2. About 5 FLOPs per element (sub, exp, add, mul, max): ~1 FLOP/byte in fp32, so every
version is memory-bound and "% of copy bandwidth" is the yardstick.

bf16 inputs are loaded as bf16, converted to fp32 in registers, and the result is rounded back
to bf16 only on the store: the arithmetic is fp32, the traffic is bf16.
"""
from __future__ import annotations

import torch

from course import runtime  # before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.bench import Benchmark
from course.check import random_tensor

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Widest row that `softmax_one_block` accepts: 32k fp32 values is 128 KB of registers per
# program, already one program per SM at 16 warps. Wider rows must stream (online softmax).
MAX_ONE_BLOCK = 32768
# Where `softmax` switches from the one-block kernel to the online kernel.
AUTO_ONE_BLOCK = 32768
ONLINE_BLOCK = 4096  # chunk the online kernel streams through per step
# Rows per program by default. Packing 1k-2k rows 4 or 2 to a program gained nothing on the
# H100 in fp32 (within 0.3%) and looked worse in bf16, so one row per program is the default;
# `rows_per_program=` keeps the 2-D kernel to experiment with.
DEFAULT_ROWS_PER_PROGRAM = 1


@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride,
                       BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride passes 2^31 on big inputs
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # -inf in the padding lanes: they never win the max and exp(-inf) = 0 adds nothing.
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    den = tl.sum(num, axis=0)
    y = num * (1.0 / den)  # one division per row, then multiplies
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_rows_kernel(x_ptr, out_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                        BLOCK_ROWS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    # BLOCK_ROWS rows per program: a 1k-wide fp32 row is only 4 KB per program; packing rows
    # gives each program more loads in flight (the H100 had enough programs resident anyway).
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask,
                other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=1)[:, None]
    num = tl.exp(z)
    den = tl.sum(num, axis=1)
    y = num * (1.0 / den)[:, None]
    tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :],
             y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_online_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride,
                          BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    # Per-lane running max and sum: no cross-lane reduction inside the loop, one at the end.
    m = tl.full([BLOCK_SIZE], -float("inf"), tl.float32)
    d = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # A lane that has seen only -inf keeps m = -inf; -inf - (-inf) would be NaN, so shift
        # by 0 there: its rescale factor exp(-inf) = 0 and its terms exp(-inf) = 0, as they must.
        shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        d = d * tl.exp(m - shift) + tl.exp(x - shift)
        m = m_new
    row_max = tl.max(m, axis=0)
    # An all -inf row gives -inf - (-inf) = NaN here, and so NaN outputs: what torch gives.
    row_sum = tl.sum(d * tl.exp(m - row_max), axis=0)
    inv = 1.0 / row_sum
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - row_max) * inv
        tl.store(out_row + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def _num_warps(elements_per_program: int) -> int:
    # ~16 fp32 values per thread keeps registers low enough for two or more programs per SM.
    return max(4, min(16, triton.next_power_of_2(elements_per_program) // (32 * 16)))


def _prepare(x, out):
    validate.tensor(x, "x", dtypes=DTYPES)
    if x.dim() == 0:
        raise ValueError("x must have at least 1 dimension (softmax runs over the last one), got a scalar")
    out = validate.output(out, x)
    n_cols = x.shape[-1] if x.dim() else 1
    n_rows = x.numel() // n_cols if n_cols else 0
    return out, n_rows, n_cols


def softmax_one_block(x: torch.Tensor, out: torch.Tensor | None = None, *,
                      rows_per_program: int | None = None) -> torch.Tensor:
    """Softmax over the last dimension, each row held in one block (cols <= MAX_ONE_BLOCK).

    `rows_per_program` > 1 packs several narrow rows into each program (`softmax_rows_kernel`);
    by default one row per program (`softmax_row_kernel`).
    """
    out, n_rows, n_cols = _prepare(x, out)
    if n_cols > MAX_ONE_BLOCK:
        raise ValueError(f"x has rows of {n_cols} elements, more than one block holds "
                         f"(MAX_ONE_BLOCK = {MAX_ONE_BLOCK}): use softmax_online or softmax")
    if rows_per_program is not None and (not isinstance(rows_per_program, int) or rows_per_program < 1
                                         or rows_per_program & (rows_per_program - 1)):
        raise ValueError(f"rows_per_program must be a power of two >= 1, got {rows_per_program!r}")
    if out.numel() == 0:
        return out
    block = triton.next_power_of_2(n_cols)
    rows = rows_per_program or DEFAULT_ROWS_PER_PROGRAM
    rows = min(rows, triton.next_power_of_2(n_rows))
    if rows == 1:
        softmax_row_kernel[(n_rows,)](x, out, n_cols, n_cols, n_cols, BLOCK_SIZE=block,
                                      num_warps=_num_warps(block))
    else:
        softmax_rows_kernel[(triton.cdiv(n_rows, rows),)](x, out, n_rows, n_cols, n_cols, n_cols,
                                                         BLOCK_ROWS=rows, BLOCK_SIZE=block,
                                                         num_warps=_num_warps(rows * block))
    return out


def softmax_online(x: torch.Tensor, out: torch.Tensor | None = None, *,
                   block_size: int = ONLINE_BLOCK) -> torch.Tensor:
    """Softmax over the last dimension for rows of any width, streamed in `block_size` chunks."""
    if not isinstance(block_size, int) or block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two >= 16, got {block_size!r}")
    out, n_rows, n_cols = _prepare(x, out)
    if out.numel() == 0:
        return out
    block = min(block_size, max(16, triton.next_power_of_2(n_cols)))
    softmax_online_kernel[(n_rows,)](x, out, n_cols, n_cols, n_cols, BLOCK_SIZE=block,
                                     num_warps=_num_warps(block))
    return out


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.softmax(x, dim=-1): one block per row when it fits, the online kernel otherwise."""
    validate.tensor(x, "x", dtypes=DTYPES)
    if x.dim() >= 1 and x.shape[-1] <= AUTO_ONE_BLOCK:
        return softmax_one_block(x, out)
    return softmax_online(x, out)


# ---------------------------------------------------------------------------------- benchmarks
# 128 MB per input whatever the dtype (2^25 fp32, 2^26 bf16): 2.5x the H100's L2, so HBM is
# measured, and long enough (~90 us) that Python's launch cost does not set the pace. At 2^25
# bf16 elements (64 MB, ~45 us of traffic) the first H100 run was launch-bound and noisy.
INPUT_BYTES = 1 << 27
WIDTHS = [1024, 2048, 4096, 8192, 16384, 32768]


def _itemsize(dtype):
    return torch.empty((), dtype=dtype).element_size()


def _rows(size):
    cols, dtype = size
    return runtime.pick(gpu=INPUT_BYTES // _itemsize(dtype), sim=64 * cols) // cols


def _inputs(size):
    x = random_tensor((_rows(size), size[0]), size[1], runtime.DEVICE)
    return x, torch.empty_like(x)


def _bytes(size):
    cols, dtype = size
    return 2 * _rows(size) * cols * _itemsize(dtype)


def _softmax_benchmark(dtype: torch.dtype) -> Benchmark:
    short = str(dtype).replace("torch.", "")
    return Benchmark(
        name=f"softmax_{short}",
        title=f"Row softmax, {short} ({INPUT_BYTES >> 20} MB per input; rows = elements / cols)",
        sizes=[(w, dtype) for w in WIDTHS],
        sim_sizes=[(64, dtype), (256, dtype)],
        size_label=lambda size: f"cols={size[0]}",
        make_inputs=_inputs,
        variants={
            "torch": lambda x, out: torch.softmax(x, dim=-1),
            "triton": softmax,
            "triton_one_block": softmax_one_block,
            "triton_4_rows_per_program": lambda x, out: softmax_one_block(x, out, rows_per_program=4),
            "triton_online": softmax_online,
        },
        headline=("triton",),
        bytes=_bytes,
        flops=lambda size: 0,
        notes="bytes = 2 x rows x cols x itemsize (read x once, write y once); the online "
              "kernel actually reads x twice, so its % of copy is an under-count of its traffic",
    )


BENCHMARKS = [_softmax_benchmark(torch.float32), _softmax_benchmark(torch.bfloat16)]
