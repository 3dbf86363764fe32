"""Exercise: low-memory seeded dropout. Same names as week3_triton_kernels/dropout.py.

Check your work with `pytest tests/week3/test_dropout.py --impl=exercises`.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

BLOCK_SIZE = 1024
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def dropout_kernel(x_ptr, out_ptr, n, p, scale, seed, BLOCK_SIZE: tl.constexpr):
    # TODO: r = tl.rand(seed, offsets); keep where r >= p; out = x * scale there, 0 elsewhere.
    pass


def dropout(x, p, seed, out=None):
    """Inverted dropout; the same seed must give the same mask."""
    raise NotImplementedError("not implemented yet: dropout (week3 exercise)")


def dropout_mask(n, p, seed):
    raise NotImplementedError("not implemented yet: dropout_mask (week3 exercise)")
