"""Exercise: fused bias + GELU and x * y + z. Same names as week3_triton_kernels/fused_elementwise.py.

Check your work with `pytest tests/week3/test_fused_elementwise.py --impl=exercises`.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

BLOCK_SIZE = 1024
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
APPROXIMATE = ("none", "tanh")


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n, n_cols, TANH: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """out = gelu(x + bias[col]); the column of flat element i is i % n_cols."""
    # TODO: load x and the bias (fp32), then exact 0.5 h (1 + erf(h / sqrt 2)) or, when TANH,
    # 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))); store in out's dtype.
    pass


@triton.jit
def mul_add_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    # TODO: out = x * y + z in fp32, masked like vector_add.
    pass


def bias_gelu(x, bias, approximate="none", out=None):
    raise NotImplementedError("not implemented yet: bias_gelu (week3 exercise)")


def mul_add(x, y, z, out=None):
    raise NotImplementedError("not implemented yet: mul_add (week3 exercise)")


def bias_gelu_torch(x, bias, approximate="none"):
    """The unfused eager sequence (given): the reference the fused kernel replaces."""
    return torch.nn.functional.gelu(x + bias, approximate=approximate)


def mul_add_torch(x, y, z):
    return x * y + z
