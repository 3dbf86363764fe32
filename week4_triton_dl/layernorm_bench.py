"""LayerNorm's benchmarks, launch sweep and command line (the kernels: layernorm.py).

`BENCHMARKS` (found by `python -m course bench week4`): forward and backward against torch's
kernels and torch.compile at 128 MB per input, and the op as a model calls it (forward + backward
through autograd, host cost at a decode-step size). `python -m week4_triton_dl.layernorm_bench
--sweep` times each launch configuration (kernel, warps, rows per step, stages, programs) at one
shape. `sweep_configs`, `timed`, `print_sweep` and `sweep_cli` serve rmsnorm_bench.py's sweep too.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from course import runtime  # runtime before triton: chooses the GPU or the Triton interpreter
from course.bench import Benchmark, bench_dtype, itemsize
from course.check import random_tensor

import triton  # noqa: E402  (after course.runtime on purpose)

from week4_triton_dl.layernorm import (  # noqa: E402
    FORWARD_KERNEL, compile_on_first_call, layer_norm, layer_norm_backward, layer_norm_forward, layer_norm_unfused,
    pipeline_stages)


# ---------------------------------------------------------------------------------- benchmarks
EPS = 1e-5
# bf16, 128 MB per input at every shape (2.5x the H100's L2), 8192 x 8192 last: the headline.
SIZES = [(65536, 1024), (16384, 4096), (8192, 8192)]
SIM_SIZES = [(64, 256)]


def torch_forward(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, EPS)


def torch_backward(dy, x, w, b, mean, rstd):
    """What autograd runs for F.layer_norm's backward (dx kernel + a dw/db kernel)."""
    return torch.ops.aten.native_layer_norm_backward(dy, x, [x.shape[-1]], mean, rstd, w, b,
                                                     [True, True, True])


_torch_backward_compiled = compile_on_first_call(torch_backward)


def _forward_inputs(size):
    M, N = size
    dtype = bench_dtype()
    x = random_tensor((M, N), dtype, runtime.DEVICE)
    return x, random_tensor(N, dtype, runtime.DEVICE), random_tensor(N, dtype, runtime.DEVICE)


def _backward_inputs(size):
    x, w, b = _forward_inputs(size)
    dy = random_tensor(x.shape, x.dtype, runtime.DEVICE)
    _, mean_t, rstd_t = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], w, b, EPS)
    _, mean, rstd = layer_norm_forward(x, w, b, EPS)
    return dy, x, w, b, mean_t, rstd_t, mean, rstd


BENCHMARKS = [
    Benchmark(
        name="layernorm_fwd_week4",
        title="LayerNorm forward, bf16 (fp16 before sm_80, fp32 in simulation), rows x N",
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_forward_inputs,
        variants={
            "torch": torch_forward,
            "torch_compile": compile_on_first_call(torch_forward),
            "torch_unfused": lambda x, w, b: layer_norm_unfused(x, w, b, EPS),
            "triton": lambda x, w, b: layer_norm_forward(x, w, b, EPS)[0],  # FORWARD_KERNEL: row
            "triton_persistent": lambda x, w, b: layer_norm_forward(x, w, b, EPS, kernel="persistent")[0],
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=lambda s: 2 * s[0] * s[1] * itemsize(bench_dtype()) + 2 * s[1] * itemsize(bench_dtype()) + 8 * s[0],
        flops=lambda s: 8 * s[0] * s[1],
        notes="bytes = read x + write y (+ w, b, mean, rstd); torch = F.layer_norm (one fused "
              "kernel); torch_unfused = the formula in eager ops (~14 x M x N x s bytes moved)",
    ),
    Benchmark(
        name="layernorm_bwd_week4",
        title="LayerNorm backward (dx, dw, db), bf16 (fp16 before sm_80, fp32 in simulation), rows x N",
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_backward_inputs,
        variants={
            "torch": lambda dy, x, w, b, mt, rt, m, r: torch_backward(dy, x, w, b, mt, rt),
            "torch_compile": lambda dy, x, w, b, mt, rt, m, r: _torch_backward_compiled(dy, x, w, b, mt, rt),
            "triton": lambda dy, x, w, b, mt, rt, m, r: layer_norm_backward(dy, x, m, r, w, True),
            "triton_atomic": lambda dy, x, w, b, mt, rt, m, r: layer_norm_backward(
                dy, x, m, r, w, True, kernel="atomic"),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=lambda s: 3 * s[0] * s[1] * itemsize(bench_dtype()) + 3 * s[1] * itemsize(bench_dtype()) + 8 * s[0],
        flops=lambda s: 12 * s[0] * s[1],
        notes="bytes = read x, dy + write dx (+ mean, rstd, w, dw, db): the minimum; the partials "
              "buffer (2 x P x N x 4 bytes, each way) is not counted; torch's backward reads x "
              "and dy twice (~5 x M x N x s)",
    ),
]



# ------------------------------------------------------------------- as a model calls it
# Tokens x width: GPT-2 small (768), 1024-wide models (BERT-large, GPT-2 medium) and Llama 7B
# (4096); 8 x 768 is one decode step of a batch of 8: there the host sets the pace.
TRAIN_SIZES = [(8, 768), (8192, 768), (65536, 768), (16384, 1024), (65536, 1024), (16384, 4096)]
TRAIN_SIM_SIZES = [(4, 64)]
HOST_SIZES = [(8, 768)]


def _train_inputs(size):
    M, N = size
    dtype = bench_dtype()
    x = random_tensor((M, N), dtype, runtime.DEVICE).requires_grad_(True)
    w = random_tensor(N, dtype, runtime.DEVICE).requires_grad_(True)
    b = random_tensor(N, dtype, runtime.DEVICE).requires_grad_(True)
    return x, w, b, random_tensor((M, N), dtype, runtime.DEVICE)


def _fwd_bwd(norm):
    """forward + backward through autograd, as a training step runs it: (dx, dw, db)."""
    return lambda x, w, b, dy: torch.autograd.grad(norm(x, w, b), (x, w, b), dy)


def _triton_norm(x, w, b):
    return layer_norm(x, (x.shape[-1],), w, b, EPS)


BENCHMARKS += [
    Benchmark(
        name="layernorm_train_week4",
        title="LayerNorm forward + backward through autograd, as a model calls it, bf16 (fp32 in simulation), rows x N",
        sizes=TRAIN_SIZES, sim_sizes=TRAIN_SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_train_inputs,
        variants={
            "torch": _fwd_bwd(torch_forward),
            "torch_compile": _fwd_bwd(compile_on_first_call(torch_forward)),
            "triton": _fwd_bwd(_triton_norm),
        },
        gpu_only=("torch_compile",),
        graphed=("torch", "torch_compile", "triton"),  # rows *_graph: the GPU time alone, as a captured step sees it
        headline=("triton",),
        bytes=lambda s: 5 * s[0] * s[1] * itemsize(bench_dtype()) + 5 * s[1] * itemsize(bench_dtype()) + 16 * s[0],
        flops=lambda s: 20 * s[0] * s[1],
        notes="y = norm(x, w, b), then torch.autograd.grad(y, (x, w, b), dy): the public entry "
              "(layer_norm / F.layer_norm), autograd and every launch included; bytes = forward 2MNs "
              "+ backward 3MNs, the minimum; torch_compile = torch.compile(F.layer_norm) (dynamic=False); "
              "at 8x768 the host is the bottleneck (see layernorm_host_week4)",
    ),
    Benchmark(
        name="layernorm_host_week4",
        title="LayerNorm forward: host cost per call at a decode-step size, bf16 (fp32 in simulation)",
        sizes=HOST_SIZES, sim_sizes=HOST_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_forward_inputs,
        variants={"torch": torch_forward, "triton": _triton_norm,
                  "triton_launcher": lambda x, w, b: layer_norm_forward(x, w, b, EPS)},
        headline=("triton",),
        clock="wall",
        bytes=lambda s: 0,
        notes="ms = wall time of 300 calls / 300, then one synchronize: the host's cost per call "
              "(argument checks, allocation, the launch), the GPU work being ~3 us; torch = "
              "F.layer_norm; triton = layer_norm (the public entry); triton_launcher = "
              "layer_norm_forward (checks every tuning argument: the lesson's API, not the hot path)",
    ),
]


# -------------------------------------------------------------------------------------- sweep
def sweep_configs(N: int, itemsize: int, loaded_per_step: int):
    """(num_warps, rows per step, pipeline stages) worth timing at row width N, on this backend."""
    block_n = triton.next_power_of_2(N)
    for nw in runtime.pick(gpu=(4, 8, 16), sim=(4,)):
        for bm in ((1, 2, 4) if N >= 1024 else (1, 2, 4, 16)):
            if bm * block_n > nw * 32 * 64:
                continue  # > 64 values per thread per tensor: registers spill; not worth a compile
            for stages in (1, 2):
                if pipeline_stages(stages, loaded_per_step * bm * block_n * itemsize) == stages:
                    yield nw, bm, stages


def timed(fn) -> float:
    """Median ms of fn(): CUDA events on a GPU (short budget), the host clock in simulation."""
    from course import bench

    if runtime.on_gpu():
        return bench.time_gpu(lambda: fn(), [()], warmup_ms=10, rep_ms=60).median_ms
    return bench.time_host(lambda: fn(), [()], budget_s=0.05).median_ms


def sweep(M: int, N: int, dtype: torch.dtype) -> None:
    """Time each launch configuration at one shape and print a table (for the GPU)."""
    from course import bench

    sms = runtime.sm_count()
    x, w, b = (random_tensor(s, dtype, runtime.DEVICE) for s in ((M, N), N, N))
    dy = random_tensor((M, N), dtype, runtime.DEVICE)
    _, mean, rstd = layer_norm_forward(x, w, b, EPS)
    _, mean_t, rstd_t = torch.ops.aten.native_layer_norm(x, [N], w, b, EPS)
    copy = bench.copy_bandwidth_gbps()
    fwd_bytes, bwd_bytes = 2 * M * N * x.element_size(), 3 * M * N * x.element_size()
    per_sm = runtime.pick(gpu=(1, 2, 4, 8), sim=(1, 2))
    fwd = lambda **kw: timed(lambda: layer_norm_forward(x, w, b, EPS, **kw))  # noqa: E731
    bwd = lambda **kw: timed(lambda: layer_norm_backward(dy, x, mean, rstd, w, True, **kw))  # noqa: E731

    rows = [("forward", "torch F.layer_norm", "-", "-", "-", "-", timed(lambda: torch_forward(x, w, b)),
             fwd_bytes),
            ("forward", f"default ({FORWARD_KERNEL})", "-", "-", "-", "-", fwd(), fwd_bytes)]
    for nw in runtime.pick(gpu=(4, 8, 16), sim=(4,)):
        rows.append(("forward", "row", nw, 1, "-", M, fwd(kernel="row", num_warps=nw), fwd_bytes))
    for nw, bm, stages in sweep_configs(N, x.element_size(), 1):
        for k in per_sm:
            rows.append(("forward", "persistent", nw, bm, stages, k * sms, fwd(
                kernel="persistent", block_m=bm, num_programs=k * sms, num_warps=nw, num_stages=stages), fwd_bytes))
    rows += [("backward", "torch native_layer_norm_backward", "-", "-", "-", "-",
              timed(lambda: torch_backward(dy, x, w, b, mean_t, rstd_t)), bwd_bytes),
             ("backward", "default (partial)", "-", "-", "-", "-", bwd(), bwd_bytes),
             ("backward", "atomic", "-", 1, "-", M, bwd(kernel="atomic"), bwd_bytes)]
    for nw, bm, stages in sweep_configs(N, x.element_size(), 2):
        for k in per_sm:
            rows.append(("backward", "partial", nw, bm, stages, k * sms, bwd(
                block_m=bm, num_partials=k * sms, num_warps=nw, num_stages=stages), bwd_bytes))
    print_sweep(f"LayerNorm {M}x{N} {str(dtype).replace('torch.', '')}, {sms} SMs, copy {copy:.0f} GB/s",
                rows, copy)


def print_sweep(title: str, rows: list, copy_gbps: float) -> None:
    print(f"\n{title}{'' if runtime.on_gpu() else ' (SIMULATION: times measure Python)'}")
    print("| pass | kernel | num_warps | rows/step | stages | programs (= partial rows) | ms | GB/s | % of copy | vs torch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    reference = {}
    for pass_, kernel, nw, bm, stages, programs, ms, nbytes in rows:
        reference.setdefault(pass_, ms)  # the first row of each pass is torch's
        gbps = nbytes / (ms * 1e-3) / 1e9
        print(f"| {pass_} | {kernel} | {nw} | {bm} | {stages} | {programs} | {ms:.4f} | {gbps:.0f} | "
              f"{100 * gbps / copy_gbps:.1f} | {reference[pass_] / ms:.2f}x |")


def sweep_cli(module_name: str, run) -> None:
    """The norms' command line: `python -m MODULE --sweep [--shape MxN] [--dtype D]` calls run(M, N, dtype)."""
    parser = argparse.ArgumentParser(prog=f"python -m {module_name}")
    parser.add_argument("--sweep", action="store_true", help="time launch configurations")
    parser.add_argument("--shape", default=None, help="MxN (default 8192x8192 on a GPU, 64x256 simulated)")
    parser.add_argument("--dtype", default=None, choices=("bfloat16", "float16", "float32"))
    args = parser.parse_args()
    if not args.sweep:
        parser.print_help()
        return
    shape = args.shape or runtime.pick(gpu="8192x8192", sim="64x256")
    M, N = (int(v) for v in shape.lower().split("x"))
    dtype = getattr(torch, args.dtype or runtime.pick(gpu="bfloat16", sim="float32"))
    run(M, N, dtype)


if __name__ == "__main__":
    sweep_cli("week4_triton_dl.layernorm_bench", sweep)
