"""The capstone's fused GEMMs on week 1's CUDA C kernels (issue 32): the `wgmma_gemms` ops.

`wgmma_gemms` is `fast` with two fused GEMMs from week1_cuda_python/matmul_wgmma_fused.py, the
persistent wgmma + TMA kernel of week 1 with an epilogue (sm_90a: H100/H200 only):

    Ops field         week 1 op                                   replaces (in `fast`)
    linear_swiglu     wf.linear_swiglu(x, [W_g; W_u])             up GEMM (cuBLAS) + the SwiGLU kernel
    linear_residual   wf.linear_residual(x, W, residual)          proj / down GEMM (cuBLAS) + the residual add

It is the sibling of week 4's `+residual_gemm` rung (the same two fusions in Triton), not a rung
after `fused_gemms`: week 1 has no norm prologue, so `norm_linear` stays None and the norms are
fast's Triton RMSNorm. (Keeping week 4's norm_linear would not mix the two: the MLP's up GEMM
would then be week 4's norm + SwiGLU GEMM, and week 1's SwiGLU would never run.)

What the adapters do beyond calling week 1's ops, and why:
* autocast. A custom op has no autocast rule, so they do what F.linear does under
  torch.autocast: x and W cast to the autocast dtype (bf16 in the Trainer), then the op with
  autocast off. Without autocast the operands must already be fp16/bf16 (week 1's dtypes): an
  fp32 model gets a TypeError saying so, before any launch.
* the residual stream. Week 1's epilogue reads the residual in C's dtype and writes C once, in
  that dtype (the add in fp32 before the one rounding). So the residual is cast to bf16 and the
  block's output is bf16: from the first block's proj on, the residual stream is bf16 (fast's and
  week 4's keep it fp32 under autocast). That is the only way the fusion saves bytes here:
  casting the product back to fp32 would add a pass per GEMM (read 2 B, write 4 B per element)
  and undo the saving. Cost: the stream rounded to bf16 at each of the 2 L adds, and its gradient
  summed in bf16 (what pure-bf16 training does); the GPU test and the loss curve (measure.py's
  `wgmma_gemms` curve) hold it to the fast model and the twin. The cast of the fp32 embedding
  output happens once (block 0's proj); after that `residual.to(bf16)` is a no-op.
* the norm. Week 4's Triton RMSNorm takes x and its weight in one dtype; with a bf16 stream the
  fp32 norm weight is cast to x's dtype (d elements) and its gradient comes back through the cast.
* layout. The model's up weight is one nn.Linear(d, 2F) whose output is [gate | up] on the last
  dimension (the model chunks it in that order), i.e. rows 0..F-1 are W_g and F..2F-1 are W_u:
  exactly the [W_g; W_u] stacking week 1's SwiGLU kernel reads (gate rows f0.., up rows F + f0..).
  No view or copy is needed. x is (B, T, K): week 1's ops flatten the leading dimensions with a
  view (contiguous x, no copy) and return (B, T, N).

`unsupported()` says why this machine cannot run them (no GPU, not sm_90, no nvcc); measure.py
reports the wgmma variants as skipped with that reason, never replaced by another kernel.
"""
from __future__ import annotations

import dataclasses

import torch

from course import runtime
from week1_cuda_python import matmul_wgmma_fused as wf
from week5_integration import model as m


def unsupported() -> str | None:
    """Why week 1's wgmma GEMMs cannot run here (None: they can): they need an sm_90a GPU and nvcc."""
    if not runtime.on_gpu():
        return ("the wgmma GEMMs are week 1's CUDA C for sm_90a (H100/H200); this run has no GPU (simulation), "
                "so the wgmma_gemms variants are not measured")
    why = wf.unsupported(runtime.capability())
    if why is not None:
        return why
    if runtime.nvcc_path() is None:
        return "nvcc (CUDA toolkit) is not on PATH: week 1's wgmma GEMMs are compiled for sm_90a at first use"
    return None


def _gemm_dtype(x: torch.Tensor, w: torch.Tensor, op: str) -> torch.dtype:
    """The dtype the GEMM runs in: autocast's when it is on (what F.linear would cast to), else x's,
    which must then be one week 1's kernels take."""
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise TypeError(f"{op}: x must be a tensor (..., K) of at least 2 dimensions, got "
                        f"{type(x).__name__} {tuple(getattr(x, 'shape', ()))}")
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or w.shape[1] != x.shape[-1]:
        raise ValueError(f"{op}: the weight must be (N, K = x.shape[-1] = {x.shape[-1]}) as nn.Linear stores it, "
                         f"got {tuple(getattr(w, 'shape', ()))}")
    if torch.is_autocast_enabled(x.device.type):
        dtype = torch.get_autocast_dtype(x.device.type)
    else:
        dtype = x.dtype
    if dtype not in wf.DTYPES:
        raise TypeError(f"{op}: week 1's wgmma GEMMs take fp16/bf16 operands; x is "
                        f"{str(x.dtype).replace('torch.', '')} with autocast off: run the step under "
                        "torch.autocast(dtype=torch.bfloat16) (the Trainer's amp) or use a bf16 model")
    return dtype


def linear_swiglu(x: torch.Tensor, w_gate_up: torch.Tensor) -> torch.Tensor:
    """silu(x W_g^T) * (x W_u^T) for the MLP's up weight [W_g; W_u] (2F, K): week 1's fused kernel."""
    dtype = _gemm_dtype(x, w_gate_up, "linear_swiglu")
    if w_gate_up.shape[0] % 2:
        raise ValueError(f"linear_swiglu: the weight must stack [W_gate; W_up] (2F rows), got {w_gate_up.shape[0]} rows")
    with torch.autocast(x.device.type, enabled=False):
        return wf.linear_swiglu(x.to(dtype), w_gate_up.to(dtype))


def linear_residual(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """residual + x W^T in the GEMM's dtype (bf16 under autocast: the module docstring says why)."""
    dtype = _gemm_dtype(x, w, "linear_residual")
    want = (*x.shape[:-1], w.shape[0])
    if not isinstance(residual, torch.Tensor) or tuple(residual.shape) != want:
        got = tuple(residual.shape) if isinstance(residual, torch.Tensor) else type(residual).__name__
        raise ValueError(f"linear_residual: residual must have shape {want} (x's leading shape, N = w.shape[0]), "
                         f"got {got}")
    with torch.autocast(x.device.type, enabled=False):
        return wf.linear_residual(x.to(dtype), w.to(dtype), residual.to(dtype))


def norm_in_stream_dtype(base):
    """`base` (an Ops.norm) with the norm's weight and bias cast to x's dtype when they differ (the
    bf16 stream against fp32 parameters: week 4's kernels take one dtype)."""
    def norm(x, weight, bias, eps, kind):
        if weight is not None and weight.dtype != x.dtype:
            weight = weight.to(x.dtype)
        if bias is not None and bias.dtype != x.dtype:
            bias = bias.to(x.dtype)
        return base(x, weight, bias, eps, kind)
    norm.__qualname__ = norm.__name__ = f"{getattr(base, '__name__', 'norm')}_in_stream_dtype"
    return norm


def wgmma_gemm_ops(base: m.Ops, name: str = "wgmma_gemms") -> m.Ops:
    """`base` (fast's ops) with week 1's SwiGLU and residual GEMMs, its norm following the stream's dtype,
    no norm prologue."""
    return dataclasses.replace(base, name=name, norm=norm_in_stream_dtype(base.norm), linear_swiglu=linear_swiglu,
                               linear_residual=linear_residual, norm_linear=None)
