"""Exercise: tiled matmul with tl.dot, grouped ordering, autotuning and a fused epilogue.

Same names as week3_triton_kernels/matmul.py. Check your work with
`pytest tests/week3/test_matmul.py --impl=exercises`.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16)
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3}


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    # TODO: map pid to (pid_m, pid_n) in GROUP_M-row groups; loop over K in BLOCK_K steps,
    # masking K only, accumulating tl.dot into an fp32 tile; add bias, apply the activation,
    # store the tile masked to (M, N).
    pass


AUTOTUNE_CONFIGS = [
    # TODO: 4 to 6 triton.Config({"BLOCK_M": ..., "BLOCK_N": ..., "BLOCK_K": ..., "GROUP_M": ...},
    # num_stages=..., num_warps=...)
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=3, num_warps=4),
]
matmul_kernel_autotuned = triton.autotune(configs=AUTOTUNE_CONFIGS, key=["M", "N", "K"])(matmul_kernel)


def matmul_fixed(a, b, bias=None, activation=None, out=None, *, block_m=128, block_n=256, block_k=64,
                 group_m=8, num_warps=8, num_stages=3):
    raise NotImplementedError("not implemented yet: matmul_fixed (week3 exercise)")


def matmul(a, b, bias=None, activation=None, out=None):
    """activation(a @ b + bias), fp16/bf16 in, fp32 accumulation."""
    raise NotImplementedError("not implemented yet: matmul (week3 exercise)")


def matmul_torch(a, b, bias=None, activation=None):
    """The reference (given), in float64, rounded once to a's dtype."""
    acc = a.double() @ b.double()
    if bias is not None:
        acc = acc + bias.double()
    if activation == "relu":
        acc = torch.relu(acc)
    elif activation in ("gelu", "gelu_tanh"):
        acc = torch.nn.functional.gelu(acc, approximate="tanh" if activation == "gelu_tanh" else "none")
    return acc.to(a.dtype)
