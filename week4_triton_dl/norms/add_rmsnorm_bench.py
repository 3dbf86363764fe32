"""The residual add fused with RMSNorm, timed as a pre-norm block calls it (the kernels: add_rmsnorm.py).

`BENCHMARKS` (found by `python -m course bench week4`): forward + backward through autograd of torch's
add + norm + cast in eager ops, of torch.compile of it (Inductor fuses the three), of the course's
add and rms_norm as two ops, and of `add_rms_norm` (one kernel each way).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course.bench import Benchmark, bench_dtype, compile_on_first_call
from course.check import random_tensor
from course.gpu import DEVICE
from week4_triton_dl.norms.add_rmsnorm import add_rms_norm
from week4_triton_dl.norms.rmsnorm import rms_norm

# A pre-norm block's case: the residual stream in fp32, the branch output (attention's or the MLP's
# projection under autocast) in bf16, and y in bf16 for the next matmul. GPT-2 small's width at one
# and eight batches of 8 x 1024 tokens, and Llama-7B's.
TRAIN_SIZES = [(8192, 768), (65536, 768), (16384, 4096)]
TRAIN_SIM_SIZES = [(4, 64)]


def _train_inputs(size):
    M, N = size
    low = bench_dtype()  # bf16 on the GPU, fp32 in simulation (simulation computes bf16 in float32: nothing to time)
    x = random_tensor((M, N), torch.float32, DEVICE).requires_grad_(True)
    delta = random_tensor((M, N), low, DEVICE).requires_grad_(True)
    w = random_tensor(N, torch.float32, DEVICE).requires_grad_(True)
    return x, delta, w, random_tensor((M, N), torch.float32, DEVICE), random_tensor((M, N), low, DEVICE)


def _torch_add_norm(x, delta, w):
    h = x + delta
    return h, F.rms_norm(h, (h.shape[-1],), w, 1e-6).to(delta.dtype)


def _course_unfused(x, delta, w):
    h = x + delta
    return h, rms_norm(h, (h.shape[-1],), w, 1e-6).to(delta.dtype)


def _fused(x, delta, w):
    return add_rms_norm(x, delta, w, 1e-6, delta.dtype)


def _fwd_bwd(fn):
    """(h, y) = fn(x, delta, w), then torch.autograd.grad((h, y), (x, delta, w), (dh, dy))."""
    return lambda x, delta, w, dh, dy: torch.autograd.grad(fn(x, delta, w), (x, delta, w), (dh, dy))


BENCHMARKS = [
    Benchmark(
        name="add_rmsnorm_train_week4",
        title="Residual add + RMSNorm, forward + backward through autograd, fp32 residual + bf16 branch -> "
              "bf16 y (fp32 in simulation), rows x N",
        sizes=TRAIN_SIZES, sim_sizes=TRAIN_SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_train_inputs,
        variants={
            "torch": _fwd_bwd(_torch_add_norm),
            "torch_compile": _fwd_bwd(compile_on_first_call(_torch_add_norm, dynamic=False)),
            "triton_unfused": _fwd_bwd(_course_unfused),
            "triton": _fwd_bwd(_fused),
        },
        gpu_only=("torch_compile",),
        graphed=("torch", "torch_compile", "triton"),  # rows *_graph: the GPU time alone, as a captured step sees it
        headline=("triton",),
        bytes=lambda s: s[0] * s[1] * (4 + 2 + 4 + 2) + s[0] * s[1] * (2 + 4 + 4 + 4 + 2),
        flops=lambda s: 14 * s[0] * s[1],
        notes="(h, y) = f(x, delta, w), then torch.autograd.grad((h, y), (x, delta, w), (dh, dy)); torch = x + "
              "delta, F.rms_norm, .to(bf16) in eager ops; torch_compile = torch.compile of it (Inductor fuses "
              "the three); triton_unfused = the add, course rms_norm, the cast; triton = add_rms_norm (one "
              "kernel each way); bytes = the fused minimum: forward reads x (4 B), delta (2 B), writes h (4 B), "
              "y (2 B); backward reads dy (2 B), dh, h (4 B each), writes dx (4 B), ddelta (2 B)",
    ),
]
