"""Exercise: row softmax in Triton. Same names as week3_triton_kernels/softmax.py.

Check your work with `pytest tests/week3/test_softmax.py --impl=exercises`.
Without a GPU the kernels run in the Triton interpreter: `print` and pdb work inside them.
"""
from __future__ import annotations

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
def softmax_online_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK_SIZE: tl.constexpr):
    """Rows of any width: running max m and running sum d, then a second pass for the output."""
    # TODO: loop over chunks: m_new = max(m, x); d = d * exp(m - m_new) + exp(x - m_new)
    # (beware -inf - -inf = NaN while a lane has seen only -inf); then reduce m and d across
    # lanes and write exp(x - max) / sum in a second loop.
    pass


def softmax_one_block(x, out=None, *, rows_per_program=None):
    """Softmax over the last dimension, each row in one block (cols <= MAX_ONE_BLOCK)."""
    raise NotImplementedError("not implemented yet: softmax_one_block (week3 exercise)")


def softmax_online(x, out=None, *, block_size=ONLINE_BLOCK):
    """Softmax over the last dimension, streamed in block_size chunks."""
    raise NotImplementedError("not implemented yet: softmax_online (week3 exercise)")


def softmax(x, out=None):
    """torch.softmax(x, dim=-1): one block per row when it fits, online otherwise."""
    raise NotImplementedError("not implemented yet: softmax (week3 exercise)")
