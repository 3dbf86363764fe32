"""Fused linears: GEMMs that take the element-wise work around them into their prologue and epilogue.

Read in this order: epilogues.py (bias, residual add, SwiGLU on the fp32 accumulator), prologue_norm.py
(RMSNorm applied to A's tiles as they are loaded), kernel.py (week 3's tiled GEMM with those switches),
launch.py (checks, tiles, the launch), ops.py (the registered op, its backward, the public entries),
bench.py (each against cuBLAS + the torch op, and torch.compile of that sequence).
"""
from week4_triton_dl.fused_linear.launch import Result, fused_linear  # noqa: F401
from week4_triton_dl.fused_linear.ops import (  # noqa: F401
    fused_linear_op, linear_bias, linear_residual, linear_residual_torch, linear_swiglu, linear_swiglu_torch,
    norm_linear, norm_linear_torch)
