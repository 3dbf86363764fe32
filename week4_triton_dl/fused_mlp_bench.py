"""The fused MLP's benchmarks, sweep and command line (the kernels: fused_mlp.py).

`BENCHMARKS` (found by `python -m course bench week4`): Linear + bias + GELU in one epilogue-fused
launch against F.linear then F.gelu, and the SwiGLU MLP (dual GEMM with the silu * up epilogue)
against eager torch and torch.compile, inference and training. `python -m
week4_triton_dl.fused_mlp_bench --sweep` times fused against eager at the benchmark sizes and
prints the tile the autotuner chose (GPU, ~20 s; in simulation it runs, at the tiny sizes).
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from course import runtime
from course.bench import Benchmark, compile_on_first_call, footnote, itemsize, ms_cell, time_call, timing_fields
from course.check import random_tensor
from course.sweep import sweep_main

from week4_triton_dl.fused_mlp import (
    LINEAR_ACT_CODE, SWIGLU_MLP_CODE, SWIGLU_MLP_TRAIN_CODE, linear_act, linear_act_torch, swiglu_gate_up,
    swiglu_gate_up_kernel_autotuned, swiglu_mlp, swiglu_mlp_torch)


# ---------------------------------------------------------------------------------- benchmarks
def _linear_inputs(size):
    n, k, f, dtype = size
    dev = runtime.DEVICE
    return (random_tensor((n, k), dtype, dev), random_tensor((f, k), dtype, dev, scale=k ** -0.5),
            random_tensor(f, dtype, dev))


def _mlp_inputs(size, requires_grad=False):
    n, d, f, dtype = size
    dev = runtime.DEVICE
    x = random_tensor((n, d), dtype, dev).requires_grad_(requires_grad)
    wgu = random_tensor((2 * f, d), dtype, dev, scale=d ** -0.5).requires_grad_(requires_grad)
    wd = random_tensor((d, f), dtype, dev, scale=f ** -0.5).requires_grad_(requires_grad)
    return x, wgu, wd


def _no_grad(fn):
    def run(*args):
        with torch.no_grad():
            return fn(*args)
    return run


def _fwd_bwd(fn):
    def run(x, wgu, wd):
        out = fn(x, wgu, wd)
        return torch.autograd.grad(out, (x, wgu, wd), torch.ones_like(out))
    return run


def _label(s):
    return f"N={s[0]} d={s[1]} F={s[2]} {str(s[3]).replace('torch.', '')}"


MLP_SIZES = [(8192, 4096, 14336, torch.bfloat16), (8192, 2048, 5632, torch.bfloat16)]
MLP_SIM_SIZES = [(40, 32, 48, torch.float16)]
BENCHMARKS = [
    Benchmark(
        name="linear_gelu_week4",
        title="Linear + bias + GELU, forward (inference): one epilogue-fused launch vs F.linear then F.gelu",
        sizes=[(8192, 4096, 16384, torch.bfloat16), (8192, 4096, 11008, torch.bfloat16)],
        sim_sizes=MLP_SIM_SIZES,
        size_label=lambda s: f"N={s[0]} K={s[1]} F={s[2]} {str(s[3]).replace('torch.', '')}",
        make_inputs=_linear_inputs,
        variants={
            "torch": _no_grad(linear_act_torch),
            "torch_compile": compile_on_first_call(_no_grad(linear_act_torch)),
            "fused": _no_grad(linear_act),
        },
        gpu_only=("torch_compile",),
        headline=("fused",),
        sources={"fused": LINEAR_ACT_CODE},  # + week 3's matmul kernel
        bytes=lambda s: (s[0] * s[1] + s[2] * s[1] + s[0] * s[2]) * itemsize(s[3]),
        flops=lambda s: 2 * s[0] * s[1] * s[2],
        compute_dtype=torch.bfloat16,
        notes="flops = 2 N K F; bytes = read x, W, write y once. Eager also writes and re-reads the "
              "N x F pre-activation (2 N F s more bytes).",
    ),
    Benchmark(
        name="swiglu_mlp_week4",
        title="SwiGLU MLP forward (inference): dual-GEMM + silu*up epilogue, then down projection",
        sizes=MLP_SIZES,
        sim_sizes=MLP_SIM_SIZES,
        size_label=_label,
        make_inputs=_mlp_inputs,
        variants={
            "torch": _no_grad(swiglu_mlp_torch),
            "torch_compile": compile_on_first_call(_no_grad(swiglu_mlp_torch)),
            "fused": _no_grad(swiglu_mlp),
        },
        gpu_only=("torch_compile",),
        headline=("fused",),
        sources={"fused": SWIGLU_MLP_CODE},
        bytes=lambda s: (3 * s[1] * s[2] + 2 * s[0] * s[1]) * itemsize(s[3]),
        flops=lambda s: 6 * s[0] * s[1] * s[2],
        compute_dtype=torch.bfloat16,
        notes="flops = 6 N d F; bytes = weights (3 d F) + x + out once. Activation traffic: eager "
              "3Nd + 8NF, fused 2Nd + 2NF (see activation_bytes).",
    ),
    Benchmark(
        name="swiglu_mlp_train_week4",
        title="SwiGLU MLP forward + backward",
        sizes=MLP_SIZES,
        sim_sizes=MLP_SIM_SIZES,
        size_label=_label,
        make_inputs=lambda s: _mlp_inputs(s, requires_grad=True),
        variants={
            "torch": _fwd_bwd(swiglu_mlp_torch),
            "torch_compile": compile_on_first_call(_fwd_bwd(swiglu_mlp_torch)),
            "fused": _fwd_bwd(swiglu_mlp),
        },
        gpu_only=("torch_compile",),
        headline=("fused",),
        sources={"fused": SWIGLU_MLP_TRAIN_CODE},
        bytes=lambda s: 2 * (3 * s[1] * s[2] + 2 * s[0] * s[1]) * itemsize(s[3]),
        flops=lambda s: 18 * s[0] * s[1] * s[2],
        compute_dtype=torch.bfloat16,
        notes="flops = 18 N d F (forward 6, backward 12); bytes = weights and x read, gradients written "
              "once (the minimum)",
    ),
]


def _gate_up_torch(x, wgu, wd):
    w_gate, w_up = wgu.chunk(2, dim=0)
    return F.silu(F.linear(x, w_gate)) * F.linear(x, w_up)


def sweep() -> None:
    """Fused vs eager at the benchmark sizes, and the tile the autotuner chose (GPU, ~20 s)."""
    print(f"{'size':<30} {'variant':<34} {'ms':>9}  autotuned config")
    timed = []
    for size in runtime.pick(gpu=MLP_SIZES, sim=MLP_SIM_SIZES):
        inputs = _mlp_inputs(size)
        rows = (("MLP, eager torch", swiglu_mlp_torch, False),
                ("MLP, fused", swiglu_mlp, True),
                ("silu(x Wg^T) * (x Wu^T), eager", _gate_up_torch, False),
                ("  same, dual GEMM (inference)", lambda x, w, wd: swiglu_gate_up(x, w), True),
                ("  same, dual GEMM + store g, u", lambda x, w, wd: swiglu_gate_up(x, w, store_gu=True), True))
        for label, fn, tuned in rows:
            timed.append(timing_fields(time_call(_no_grad(fn), [inputs])))
            chosen = swiglu_gate_up_kernel_autotuned.best_config if runtime.on_gpu() and tuned else ""
            print(f"{_label(size):<30} {label:<34} {ms_cell(timed[-1], '9.3f')}  {chosen}", flush=True)
    print(footnote(timed), end="")


def main(argv=None) -> int:
    return sweep_main(sweep, argv, doc=__doc__, help="time fused vs eager; print the autotuned tiles")


if __name__ == "__main__":
    sys.exit(main())
