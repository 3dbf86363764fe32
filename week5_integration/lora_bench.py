"""LoRA's benchmarks, tile sweep and command line (the layer: lora.py; its kernels: lora_kernels.py).

`BENCHMARKS` (found by `python -m course bench week5`): the fused LoRA linear against eager torch
and torch.compile at GPT-2 and Llama-like shapes, training step and inference. `python -m
week5_integration.lora_bench --sweep` (GPU) times each tile config of the fused kernel, forward
and backward.
"""
from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F

from course import bench, runtime
from course.bench import Benchmark, compile_on_first_call, itemsize
from course.check import random_tensor
from course.gpu import tl, triton
from course.sweep import sweep_main
from week5_integration.lora import (LORA_INFER_CODE, LORA_TRAIN_CODE, LORA_TWO_PASS_CODE, lora_linear, lora_linear_torch,
                                    lora_linear_torch_addmm, lora_linear_two_pass, merged_weight)
from week5_integration.lora_kernels import AUTOTUNE_CONFIGS, block_r, lora_fused_kernel


# ---------------------------------------------------------------------------------- benchmarks
# The 124M model's layers at 4096 tokens (8 x 512): qkv, proj, up (gate and up stacked), down.
LORA_SHAPES = [(4096, 768, 2304), (4096, 768, 768), (4096, 768, 4096), (4096, 2048, 768)]
RANK, ALPHA = 16, 32.0


def _inputs(size, train=True):
    m, k, n, r, dtype = size
    dev = runtime.DEVICE
    x = random_tensor((m, k), dtype, dev).requires_grad_(train)
    w = random_tensor((n, k), dtype, dev, scale=k ** -0.5)
    a = random_tensor((r, k), dtype, dev, scale=k ** -0.5).requires_grad_(train)
    b = random_tensor((n, r), dtype, dev, scale=r ** -0.5).requires_grad_(train)  # trained B: not zero
    if train:
        return x, w, a, b, random_tensor((m, n), dtype, dev)
    return x, w, a, b, merged_weight(w, a, b, ALPHA / r)


def _train_step(fn):
    def run(x, w, a, b, dy):
        y = fn(x, w, a, b, ALPHA / a.shape[0])
        return torch.autograd.grad(y, (x, a, b), dy)
    return run


def _infer(fn):
    def run(x, w, a, b, w_merged):
        with torch.no_grad():
            return fn(x, w, a, b, ALPHA / a.shape[0])
    return run


def _label(size):
    m, k, n, r, dtype = size
    return f"M={m} K={k} N={n} r={r} {str(dtype).replace('torch.', '')}"


def _train_bytes(s):
    m, k, n, r, dtype = s
    # read x, W, A, B, dY; write y, dx, dA, dB (each once)
    return (2 * m * k + n * k + 2 * r * k + 2 * n * r + 2 * m * n) * itemsize(dtype)


def _infer_bytes(s):
    m, k, n, r, dtype = s
    return (m * k + n * k + r * k + n * r + m * n) * itemsize(dtype)


SIZES = [(m, k, n, RANK, torch.bfloat16) for m, k, n in LORA_SHAPES]
SIM_SIZES = [(40, 48, 33, 4, torch.float32)]
BENCHMARKS = [
    Benchmark(
        name="lora_linear_week5",
        title="LoRA linear, training step (forward + backward for x, A, B; W frozen), r=16",
        sizes=SIZES,
        sim_sizes=SIM_SIZES,
        size_label=_label,
        make_inputs=_inputs,
        variants={
            "torch": _train_step(lora_linear_torch),
            "torch_addmm": _train_step(lora_linear_torch_addmm),
            "torch_compile": _train_step(compile_on_first_call(lora_linear_torch)),
            "triton": _train_step(lora_linear),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        sources={"triton": LORA_TRAIN_CODE},
        bytes=_train_bytes,
        flops=lambda s: 4 * s[0] * s[1] * s[2] + 6 * s[0] * s[3] * (s[1] + s[2]),
        compute_dtype=torch.bfloat16,
        notes="torch = PEFT's unfused arithmetic under autograd; flops = 4MNK + 6Mr(K+N) (no dW); bytes "
              "= x, W, A, B, dY read and y, dx, dA, dB written once",
    ),
    Benchmark(
        name="lora_linear_infer_week5",
        title="LoRA linear, inference forward, r=16: unfused, merged weight, two-pass and fused kernels",
        sizes=SIZES,
        sim_sizes=SIM_SIZES,
        size_label=_label,
        make_inputs=lambda s: _inputs(s, train=False),
        variants={
            "torch": _infer(lora_linear_torch),
            "torch_addmm": _infer(lora_linear_torch_addmm),
            "torch_merged": lambda x, w, a, b, wm: F.linear(x, wm),
            "triton_two_pass": _infer(lora_linear_two_pass),
            "triton": _infer(lora_linear),
        },
        headline=("triton", "torch_merged"),
        sources={"triton": LORA_INFER_CODE,
                 "triton_two_pass": LORA_TWO_PASS_CODE},
        bytes=_infer_bytes,
        flops=lambda s: 2 * s[0] * s[1] * s[2] + 2 * s[0] * s[3] * (s[1] + s[2]),
        compute_dtype=torch.bfloat16,
        notes="torch_merged = F.linear with W + sBA precomputed (one adapter, merged: the floor); "
              "flops = 2MNK + 2Mr(K+N)",
    ),
]


# --------------------------------------------------------------------------------- the sweep
def sweep(shapes=LORA_SHAPES, rank: int = RANK) -> None:
    """Time every autotune config of the fused kernel (forward, and dx in the backward's layout)."""
    started = time.perf_counter()
    dtype = torch.bfloat16
    timed = []
    print(f"fused LoRA kernel, bf16, r={rank}; TFLOP/s of the base GEMM (2MNK) over the time")
    for m, k, n in shapes:
        x, w, a, b, dy = _inputs((m, k, n, rank, dtype))
        x, a, b = x.detach(), a.detach(), b.detach()
        scale = ALPHA / rank
        cases = {"forward": (x, w, a, b, n), "backward dx": (dy, w.t(), b.t(), a.t(), k)}
        for what, (p, q, u, v, n_out) in cases.items():
            flops = 2 * m * n * k

            def rate(fn):  # the timing's fields (whether the host paced it: bench.timing_fields), TFLOP/s
                fields = bench.timing_fields(bench.time_gpu(fn, [()], warmup_ms=5, rep_ms=40))
                timed.append(fields)
                return fields, flops / (fields["ms"] * 1e-3) / 1e12

            fields, tf = rate(lambda: p @ q.t())
            print(f"\nM={m} K={k} N={n} {what}: torch matmul (no adapter) {bench.ms_cell(fields)} ms {tf:6.1f} TFLOP/s")
            out = torch.empty((m, n_out), dtype=dtype, device=p.device)
            xa = torch.empty((m, rank), dtype=dtype, device=p.device)
            for config in AUTOTUNE_CONFIGS:
                kw = config.kwargs
                grid = (triton.cdiv(m, kw["BLOCK_M"]) * triton.cdiv(n_out, kw["BLOCK_N"]),)
                args = (p, q, u, v, out, xa, m, n_out, p.shape[1], rank, scale, p.stride(0), p.stride(1),
                        q.stride(0), q.stride(1), u.stride(0), u.stride(1), v.stride(0), v.stride(1),
                        out.stride(0), out.stride(1), xa.stride(0), xa.stride(1))

                def launch():
                    lora_fused_kernel[grid](*args, STORE_XA=True, ACC_DTYPE=tl.float32, INPUT_PRECISION="tf32",
                                            BLOCK_R=block_r(rank), num_warps=config.num_warps,
                                            num_stages=config.num_stages, **kw)
                try:
                    fields, tf = rate(launch)
                except Exception as error:  # a config that does not compile or fit: say so, go on
                    print(f"  {kw} failed: {str(error).splitlines()[0][:70]}")
                    continue
                print(f"  BM={kw['BLOCK_M']:<3} BN={kw['BLOCK_N']:<3} BK={kw['BLOCK_K']} stages={config.num_stages} "
                      f"warps={config.num_warps}: {bench.ms_cell(fields)} ms {tf:6.1f} TFLOP/s")
    print(bench.footnote(timed), end="")
    print(f"\nswept in {time.perf_counter() - started:.0f} s")


def main(argv=None) -> int:
    return sweep_main(sweep, argv, doc=__doc__, help="time the fused kernel's tile configs", gpu_only=True)


if __name__ == "__main__":
    sys.exit(main())
