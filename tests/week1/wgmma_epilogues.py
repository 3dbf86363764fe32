"""What the fused wgmma GEMM's tests (test_matmul_wgmma_fused.py) and the ping-pong schedule's
(test_matmul_wgmma_pingpong.py) both set up: the shape of each epilogue's extra operand and of C, a
poisoned C, the SASS tool. Each imports it (`from tests.week1 import wgmma_epilogues as epi`, as
week 4's tests import their helpers).

The shapes are the launcher's contract (week1_cuda_python/matmul_wgmma_fused.py): for x (M x K) and
w (N x K), the bias is one value per column of x @ w.T (N), the residual is M x N like it, and SwiGLU
writes C = silu(gate) * up, half as many columns as the GEMM computes (w stacks the gate and up rows).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

from course.check import poisoned


def extra_shape(epilogue: str, m: int, n: int) -> tuple[int, ...] | None:
    """The epilogue's extra operand for C = x @ w.T of M x N: bias (N,), residual (M, N), else none."""
    return {"bias": (n,), "residual": (m, n)}.get(epilogue)


def extra_operand(epilogue: str, m: int, n: int, make) -> torch.Tensor | None:
    """`make(shape)` for the epilogue's extra operand (random, ones, zeros: the test's choice), or None."""
    shape = extra_shape(epilogue, m, n)
    return make(shape) if shape is not None else None


def out_columns(epilogue: str, n: int) -> int:
    """C's columns: N, or N / 2 for SwiGLU (the gate and up halves combine into one)."""
    return n // 2 if epilogue == "swiglu" else n


def poisoned_out(epilogue: str, m: int, n: int, dtype: torch.dtype, device) -> torch.Tensor:
    """C for an M x N GEMM with this epilogue, filled with NaN: an element the kernel never writes fails."""
    return poisoned((m, out_columns(epilogue, n)), dtype, device)


def cuobjdump() -> str | None:
    """cuobjdump from the CUDA toolkit, else the copy Triton ships (CPU CI has Triton, not always the toolkit's)."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    import triton
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.exists() else None
