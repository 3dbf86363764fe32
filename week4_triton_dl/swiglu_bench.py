"""SwiGLU's benchmarks (the kernels: swiglu.py): the kernels alone, and as a model calls them.

`BENCHMARKS` (found by `python -m course bench week4`): `swiglu_week4` and `swiglu_bwd_week4`, the
forward and backward kernels against eager torch and torch.compile; `swiglu_train_week4` and
`swiglu_packed_train_week4`, forward + backward through autograd at model shapes;
`swiglu_host_week4`, the host cost per call at a decode step.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course.gpu import DEVICE
from course.bench import Benchmark, bench_dtype, compile_on_first_call, itemsize
from course.check import random_tensor

from week4_triton_dl.swiglu import (
    swiglu, swiglu_backward, swiglu_forward, swiglu_packed, swiglu_packed_backward, swiglu_packed_forward,
    swiglu_packed_reference, swiglu_reference, torch_backward, torch_backward_recompute)


# ---------------------------------------------------------------------------------- benchmarks
# (M tokens, N hidden): 14336 is LLaMA-3-8B's MLP width. bf16 on the GPU, the last is the headline.
SIZES = [(8192, 4096), (8192, 14336)]
SIM_SIZES = [(16, 96)]
_compiled_forward = compile_on_first_call(swiglu_reference, dynamic=False)
_compiled_backward = compile_on_first_call(torch_backward_recompute, dynamic=False)


def _forward_inputs(size):
    M, N = size
    h = random_tensor((M, 2 * N), bench_dtype(), DEVICE)
    a, b = h.chunk(2, dim=-1)  # views of one fused projection's output, rows strided by 2N
    return a, b, h


def _backward_inputs(size):
    a, b, h = _forward_inputs(size)
    return random_tensor(a.shape, a.dtype, DEVICE), a, b, h, F.silu(a)


BENCHMARKS = [
    Benchmark(
        name="swiglu_week4",
        title="SwiGLU forward silu(a) * b, a and b halves of one (M, 2N) tensor, "
              "bf16 (fp16 before sm_80, fp32 in simulation)",
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_forward_inputs,
        variants={
            "torch": lambda a, b, h: swiglu_reference(a, b),
            "torch_compile": lambda a, b, h: _compiled_forward(a, b),
            "triton": lambda a, b, h: swiglu_forward(a, b),
            "triton_packed": lambda a, b, h: swiglu_packed_forward(h),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=lambda s: 3 * s[0] * s[1] * itemsize(bench_dtype()),
        flops=lambda s: 8 * s[0] * s[1],
        notes="bytes = read a, b + write y; eager torch moves 5 x M x N x s (silu, then mul)",
    ),
    Benchmark(
        name="swiglu_bwd_week4",
        title="SwiGLU backward (da, db), bf16 (fp16 before sm_80, fp32 in simulation)",
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_backward_inputs,
        variants={
            "torch": lambda dy, a, b, h, t: torch_backward(dy, a, b, t),
            "torch_compile": lambda dy, a, b, h, t: _compiled_backward(dy, a, b),
            "triton": lambda dy, a, b, h, t: swiglu_backward(dy, a, b),
            "triton_packed": lambda dy, a, b, h, t: swiglu_packed_backward(dy, h),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=lambda s: 5 * s[0] * s[1] * itemsize(bench_dtype()),
        flops=lambda s: 12 * s[0] * s[1],
        notes="bytes = read dy, a, b + write da, db; eager autograd moves 9 x M x N x s "
              "(dy * b, silu_backward, dy * silu(a) saved by the forward)",
    ),
]


# ------------------------------------------------------------------- as a model calls it
# (tokens, N): a GPT-2-small-sized model's MLP (hidden 2048) at 8192 tokens, Llama-3-8B's
# (14336) at 8192 tokens, a 1.5B-class model's (5632) at 32768 tokens; (8, 2048) is one decode
# step of a batch of 8, where the host sets the pace.
TRAIN_SIZES = [(8192, 2048), (8192, 14336), (32768, 5632)]
TRAIN_SIM_SIZES = [(4, 48)]
HOST_SIZES = [(8, 2048)]


def _train_inputs(size):
    M, N = size
    dtype = bench_dtype()
    a = random_tensor((M, N), dtype, DEVICE).requires_grad_(True)
    b = random_tensor((M, N), dtype, DEVICE).requires_grad_(True)
    return a, b, random_tensor((M, N), dtype, DEVICE)


def _packed_train_inputs(size):
    M, N = size
    dtype = bench_dtype()
    h = random_tensor((M, 2 * N), dtype, DEVICE).requires_grad_(True)
    return h, random_tensor((M, N), dtype, DEVICE)


def _fwd_bwd(fn):
    """forward + backward through autograd, as a training step runs it: (da, db)."""
    return lambda a, b, dy: torch.autograd.grad(fn(a, b), (a, b), dy)


def _fwd_bwd_packed(fn):
    """forward + backward through autograd: dh."""
    return lambda h, dy: torch.autograd.grad(fn(h), (h,), dy)


def _host_inputs(size):
    M, N = size
    dtype = bench_dtype()
    return random_tensor((M, N), dtype, DEVICE), random_tensor((M, N), dtype, DEVICE)


_train_notes = ("then torch.autograd.grad: the public entry, autograd and every launch included; bytes = "
                "forward 3MNs + backward 5MNs, the minimum (eager torch moves 14MNs); torch_compile = "
                "torch.compile of the torch form (dynamic=False), its forward and backward graphs")

BENCHMARKS += [
    Benchmark(
        name="swiglu_train_week4",
        title="SwiGLU y = silu(a) * b, forward + backward through autograd, as a model calls it, "
              "bf16 (fp32 in simulation), tokens x N",
        sizes=TRAIN_SIZES, sim_sizes=TRAIN_SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_train_inputs,
        variants={
            "torch": _fwd_bwd(swiglu_reference),
            "torch_compile": _fwd_bwd(_compiled_forward),
            "triton": _fwd_bwd(swiglu),
        },
        gpu_only=("torch_compile",),
        graphed=("torch", "torch_compile", "triton"),  # rows *_graph: the GPU time alone, as a captured step sees it
        headline=("triton",),
        bytes=lambda s: 8 * s[0] * s[1] * itemsize(bench_dtype()),
        flops=lambda s: 20 * s[0] * s[1],
        notes="y = swiglu(a, b) / F.silu(a) * b for (M, N) a, b, " + _train_notes,
    ),
    Benchmark(
        name="swiglu_packed_train_week4",
        title="SwiGLU of a fused gate/up projection h = [a | b], forward + backward through autograd, "
              "bf16 (fp32 in simulation), tokens x N (h is tokens x 2N)",
        sizes=TRAIN_SIZES, sim_sizes=TRAIN_SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_packed_train_inputs,
        variants={
            "torch": _fwd_bwd_packed(swiglu_packed_reference),
            "torch_compile": _fwd_bwd_packed(compile_on_first_call(swiglu_packed_reference, dynamic=False)),
            "triton": _fwd_bwd_packed(swiglu_packed),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=lambda s: 8 * s[0] * s[1] * itemsize(bench_dtype()),
        flops=lambda s: 20 * s[0] * s[1],
        notes="y = swiglu_packed(h) / (g, u = h.chunk(2, -1); F.silu(g) * u), " + _train_notes
              + "; eager autograd also concatenates dg and du into dh (+4MNs)",
    ),
    Benchmark(
        name="swiglu_host_week4",
        title="SwiGLU forward: host cost per call at a decode-step size, bf16 (fp32 in simulation)",
        sizes=HOST_SIZES, sim_sizes=HOST_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_host_inputs,
        variants={"torch": swiglu_reference, "triton": swiglu,
                  "triton_launcher": swiglu_forward},
        headline=("triton",),
        clock="wall",
        bytes=lambda s: 0,
        notes="ms = wall time of 300 calls / 300, then one synchronize: the host's cost per call "
              "(checks, allocation, the launch), the GPU work being ~2 us; torch = F.silu(a) * b "
              "(two kernels); triton = swiglu (the public entry); triton_launcher = swiglu_forward "
              "(validated: the lesson's API, not the hot path)",
    ),
]
