"""Week 4, lesson 02: LayerNorm and RMSNorm, forward and backward, and the residual add fused with RMSNorm.

One plumbing, three lessons. Each norm's file holds its kernels and its math (layernorm.py with
layernorm_backward.py, rmsnorm.py, add_rmsnorm.py); stage 2 of the weight gradients, which they
share, is column_sums.py; what they share around their kernels (checks, rows, launch plans, the
autograd and torch.compile glue) is plumbing.py. Benchmarks: layernorm_bench.py, rmsnorm_bench.py
(what both time alike: bench.py) and add_rmsnorm_bench.py. The notes: ../notes/layernorm.md.

The public API, as torch names it: `layer_norm`, `rms_norm`, `add_rms_norm` (and the modules
`TritonLayerNorm`, `TritonRMSNorm`), with the launchers of each pass for study and benchmarks.
"""
from week4_triton_dl.norms.add_rmsnorm import add_rms_norm, add_rms_norm_reference
from week4_triton_dl.norms.layernorm import (
    TritonLayerNorm, layer_norm, layer_norm_forward, layer_norm_unfused)
from week4_triton_dl.norms.layernorm_backward import layer_norm_backward
from week4_triton_dl.norms.plumbing import DTYPES, MAX_N
from week4_triton_dl.norms.rmsnorm import (
    TritonRMSNorm, default_eps, rms_norm, rms_norm_backward, rms_norm_forward, rms_norm_unfused)

__all__ = ["DTYPES", "MAX_N", "TritonLayerNorm", "TritonRMSNorm", "add_rms_norm", "add_rms_norm_reference",
           "default_eps", "layer_norm", "layer_norm_backward", "layer_norm_forward", "layer_norm_unfused",
           "rms_norm", "rms_norm_backward", "rms_norm_forward", "rms_norm_unfused"]
