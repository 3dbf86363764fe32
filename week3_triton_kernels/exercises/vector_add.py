"""Exercise: vector add in Triton. Same names as week3_triton_kernels/vector_add.py.

Check your work with `pytest tests/week3/test_vector_add.py --impl=exercises`.
Without a GPU the kernel runs in the Triton interpreter: `print` and pdb work inside it.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

BLOCK_SIZE = 1024
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    """Program `pid` adds elements pid * BLOCK_SIZE ... pid * BLOCK_SIZE + BLOCK_SIZE - 1."""
    # TODO: offsets from tl.program_id(0) and tl.arange; a mask for offsets < n;
    # masked tl.load of a and b, masked tl.store of their sum.
    pass


def vector_add(a, b, out=None):
    """out = a + b: validate (course.validate), allocate `out`, launch cdiv(n, BLOCK_SIZE) programs."""
    raise NotImplementedError("not implemented yet: vector_add (week3 exercise)")
