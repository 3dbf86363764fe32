"""Exercise: row softmax in Triton. Same names as week3_triton_kernels/softmax.py.

Check your work with `pytest tests/week3/test_softmax.py --impl=exercises`.
Without a GPU the kernels run in the Triton interpreter: `print` and pdb work inside them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_ONE_BLOCK = 32768
AUTO_ONE_BLOCK = 32768
ONLINE_BLOCK = 4096
DEFAULT_ROWS_PER_PROGRAM = 1


@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK_SIZE: tl.constexpr):
    """One program per row: the whole row in one block."""
    # TODO: row = tl.program_id(0) (as int64); load the row with other=-inf past n_cols and
    # convert to fp32; subtract tl.max, tl.exp, divide by tl.sum; store in out's dtype.
    pass


@triton.jit
def softmax_rows_kernel(x_ptr, out_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                        BLOCK_ROWS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """BLOCK_ROWS rows per program, a 2-D block [BLOCK_ROWS, BLOCK_SIZE]."""
    # TODO: as softmax_row_kernel, reducing along axis=1; mask both rows and columns.
    pass


@triton.jit
def softmax_persistent_kernel(x_ptr, out_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                              BLOCK_ROWS: tl.constexpr, BLOCK_SIZE: tl.constexpr, NUM_STAGES: tl.constexpr):
    """A fixed grid of programs, each looping over blocks of BLOCK_ROWS rows."""
    # TODO: for block in tl.range(tl.program_id(0), tl.cdiv(n_rows, BLOCK_ROWS), tl.num_programs(0),
    # num_stages=NUM_STAGES): the body of softmax_rows_kernel for rows block * BLOCK_ROWS + arange
    # (convert the row numbers to int64 before multiplying by the stride).
    pass


@triton.jit
def softmax_online_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK_SIZE: tl.constexpr):
    """Rows of any width: running max m and running sum d, then a second pass for the output."""
    # TODO: loop over chunks: m_new = max(m, x); d = d * exp(m - m_new) + exp(x - m_new)
    # (beware -inf - -inf = NaN while a lane has seen only -inf); then reduce m and d across
    # lanes and write exp(x - max) / sum in a second loop.
    pass


# Launch settings (given: the tests and `softmax` use them; the kernels are yours).
@dataclass(frozen=True)
class SoftmaxConfig:
    persistent: bool
    rows: int
    num_warps: int
    num_stages: int = 1

    def label(self) -> str:
        kind = f"persistent s{self.num_stages}" if self.persistent else "grid of blocks"
        return f"{kind:<15} rows={self.rows:<2} warps={self.num_warps:<2}"


def _num_warps(elements_per_program: int) -> int:
    return max(4, min(16, triton.next_power_of_2(elements_per_program) // (32 * 16)))


def heuristic_config(n_cols, dtype):
    block = triton.next_power_of_2(max(n_cols, 1))
    itemsize = torch.empty((), dtype=dtype).element_size()
    if itemsize >= 4:
        return SoftmaxConfig(persistent=False, rows=1, num_warps=_num_warps(block))
    rows = max(1, 8192 // (block * itemsize))
    return SoftmaxConfig(persistent=True, rows=rows, num_warps=_num_warps(rows * block),
                         num_stages=2 if 2 * rows * block * itemsize <= STAGED_BYTES else 1)


STAGED_BYTES = 160 * 1024
TUNED_H100 = {}


def config_for(n_cols, dtype):
    return heuristic_config(n_cols, dtype)


def sweep_configs(n_cols, dtype):
    block = triton.next_power_of_2(n_cols)
    itemsize = torch.empty((), dtype=dtype).element_size()
    configs, rows = [], 1
    while rows == 1 or rows * block * itemsize <= 16384:
        w0 = _num_warps(rows * block)
        for warps in (w0, 2 * w0):
            if warps > 32 or rows * block < 4 * 32 * warps:
                continue
            if rows == 1:
                configs.append(SoftmaxConfig(persistent=False, rows=1, num_warps=warps))
            for stages in (1, 2):
                if stages == 1 or 2 * rows * block * itemsize <= STAGED_BYTES:
                    configs.append(SoftmaxConfig(persistent=True, rows=rows, num_warps=warps, num_stages=stages))
        rows *= 2
    return configs


def softmax_one_block(x, out=None, *, rows_per_program=None, num_warps=None):
    """Softmax over the last dimension, each row in one block (cols <= MAX_ONE_BLOCK)."""
    raise NotImplementedError("not implemented yet: softmax_one_block (week3 exercise)")


def softmax_persistent(x, out=None, *, rows_per_program=None, num_warps=None, num_stages=None):
    """Softmax over the last dimension with a persistent grid (cols <= MAX_ONE_BLOCK)."""
    raise NotImplementedError("not implemented yet: softmax_persistent (week3 exercise)")


def softmax_online(x, out=None, *, block_size=ONLINE_BLOCK):
    """Softmax over the last dimension, streamed in block_size chunks."""
    raise NotImplementedError("not implemented yet: softmax_online (week3 exercise)")


def softmax(x, out=None):
    """torch.softmax(x, dim=-1): one block per row when it fits, online otherwise."""
    raise NotImplementedError("not implemented yet: softmax (week3 exercise)")
