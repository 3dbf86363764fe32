"""RMSNorm's benchmarks, launch sweep and command line (the kernels: rmsnorm.py).

`BENCHMARKS` (found by `python -m course bench week4`): forward and backward against torch's
kernels and torch.compile, and the op as a model calls it (forward + backward through autograd,
host cost). `python -m week4_triton_dl.rmsnorm_bench --sweep` times each launch configuration at
one shape (the sweep's helpers are layernorm_bench.py's).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course import runtime  # runtime before triton: chooses the GPU or the Triton interpreter
from course.bench import Benchmark, bench_dtype, itemsize
from course.check import random_tensor

from week4_triton_dl import layernorm_bench as ln_bench  # the norms' sizes and sweep helpers
from week4_triton_dl.layernorm import compile_on_first_call
from week4_triton_dl.rmsnorm import (
    FORWARD_KERNEL, rms_norm, rms_norm_backward, rms_norm_backward_unfused, rms_norm_forward, rms_norm_unfused)


# ---------------------------------------------------------------------------------- benchmarks
EPS = 1e-6
SIZES = ln_bench.SIZES
SIM_SIZES = ln_bench.SIM_SIZES
# torch >= 2.9 runs nn.RMSNorm's backward as this one op on CUDA (dx kernel + dw kernel); it
# has no CPU kernel, so in simulation the eager formula stands in.
def _has_op(name: str, arguments: list) -> bool:
    """Does this torch have aten.<name> with exactly these arguments (its schema, not a call)?"""
    if not hasattr(torch.ops.aten, name):
        return False
    return [a.name for a in getattr(torch.ops.aten, name).default._schema.arguments] == arguments


HAS_FUSED_BACKWARD = (runtime.on_gpu()
                      and _has_op("_fused_rms_norm", ["input", "normalized_shape", "weight", "eps"])
                      and _has_op("_fused_rms_norm_backward",
                                  ["grad_out", "input", "normalized_shape", "rstd", "weight", "output_mask"]))


def torch_forward(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, EPS)


def torch_backward(dy, x, rstd_t, w):
    if HAS_FUSED_BACKWARD:
        return torch.ops.aten._fused_rms_norm_backward(dy, x, [x.shape[-1]], rstd_t, w, [True, True])
    return rms_norm_backward_unfused(dy, x, rstd_t, w)


def torch_unfused_forward(x, w):
    return rms_norm_unfused(x, w, EPS)


_compiled_forward = compile_on_first_call(torch_unfused_forward)
_compiled_backward = compile_on_first_call(rms_norm_backward_unfused)


def _forward_inputs(size):
    M, N = size
    dtype = bench_dtype()
    return random_tensor((M, N), dtype, runtime.DEVICE), random_tensor(N, dtype, runtime.DEVICE)


def _torch_rstd(x, w):
    if HAS_FUSED_BACKWARD:
        return torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], w, EPS)[1]
    return torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS)


def _backward_inputs(size):
    x, w = _forward_inputs(size)
    dy = random_tensor(x.shape, x.dtype, runtime.DEVICE)
    _, rstd = rms_norm_forward(x, w, EPS)
    return dy, x, w, _torch_rstd(x, w), rstd


BENCHMARKS = [
    Benchmark(
        name="rmsnorm_fwd_week4",
        title="RMSNorm forward, bf16 (fp16 before sm_80, fp32 in simulation), rows x N",
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_forward_inputs,
        variants={
            "torch": torch_forward,
            "torch_unfused": torch_unfused_forward,
            "torch_compile": _compiled_forward,
            "triton": lambda x, w: rms_norm_forward(x, w, EPS)[0],  # FORWARD_KERNEL: row
            "triton_persistent": lambda x, w: rms_norm_forward(x, w, EPS, kernel="persistent")[0],
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=lambda s: 2 * s[0] * s[1] * itemsize(bench_dtype()) + s[1] * itemsize(bench_dtype()) + 4 * s[0],
        flops=lambda s: 4 * s[0] * s[1],
        notes="bytes = read x + write y (+ w, rstd); torch = F.rms_norm (nn.RMSNorm), fused on "
              "CUDA in torch >= 2.9; torch_unfused = the written-out formula in eager ops; "
              "torch_compile = torch.compile of the written-out formula",
    ),
    Benchmark(
        name="rmsnorm_bwd_week4",
        title="RMSNorm backward (dx, dw), bf16 (fp16 before sm_80, fp32 in simulation), rows x N",
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_backward_inputs,
        variants={
            "torch": lambda dy, x, w, rt, r: torch_backward(dy, x, rt, w),
            "torch_unfused": lambda dy, x, w, rt, r: rms_norm_backward_unfused(dy, x, r, w),
            "torch_compile": lambda dy, x, w, rt, r: _compiled_backward(dy, x, r, w),
            "triton": lambda dy, x, w, rt, r: rms_norm_backward(dy, x, r, w),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=lambda s: 3 * s[0] * s[1] * itemsize(bench_dtype()) + 2 * s[1] * itemsize(bench_dtype()) + 4 * s[0],
        flops=lambda s: 8 * s[0] * s[1],
        notes=("bytes = read x, dy + write dx (+ rstd, w, dw); partials not counted; torch = "
               + ("aten._fused_rms_norm_backward (what nn.RMSNorm's backward runs)" if HAS_FUSED_BACKWARD
                  else "the eager formula (this torch has no fused RMSNorm backward)")),
    ),
]



# ------------------------------------------------------------------- as a model calls it
# Tokens x width of GPT-2 small (768), Llama-2 7B's head-free MLP width class (1024 wide rows
# appear in BERT-large and many 300M models) and Llama 7B (4096); 8 x 768 is a single-token
# decode step: there the host, not the GPU, sets the pace.
TRAIN_SIZES = [(8, 768), (8192, 768), (65536, 768), (16384, 1024), (65536, 1024), (16384, 4096)]
TRAIN_SIM_SIZES = [(4, 64)]
HOST_SIZES = [(8, 768)]


def _train_inputs(size):
    M, N = size
    dtype = bench_dtype()
    x = random_tensor((M, N), dtype, runtime.DEVICE).requires_grad_(True)
    w = random_tensor(N, dtype, runtime.DEVICE).requires_grad_(True)
    return x, w, random_tensor((M, N), dtype, runtime.DEVICE)


def _fwd_bwd(norm):
    """forward + backward through autograd, as a training step runs it: (dx, dw)."""
    return lambda x, w, dy: torch.autograd.grad(norm(x, w), (x, w), dy)


def _triton_norm(x, w):
    return rms_norm(x, (x.shape[-1],), w, EPS)


_compiled_torch_forward = compile_on_first_call(torch_forward)

BENCHMARKS += [
    Benchmark(
        name="rmsnorm_train_week4",
        title="RMSNorm forward + backward through autograd, as a model calls it, bf16 (fp32 in simulation), rows x N",
        sizes=TRAIN_SIZES, sim_sizes=TRAIN_SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_train_inputs,
        variants={
            "torch": _fwd_bwd(torch_forward),
            "torch_compile": _fwd_bwd(_compiled_torch_forward),
            "triton": _fwd_bwd(_triton_norm),
        },
        gpu_only=("torch_compile",),
        graphed=("torch", "torch_compile", "triton"),  # rows *_graph: the GPU time alone, as a captured step sees it
        headline=("triton",),
        bytes=lambda s: 5 * s[0] * s[1] * itemsize(bench_dtype()) + 3 * s[1] * itemsize(bench_dtype()) + 8 * s[0],
        flops=lambda s: 12 * s[0] * s[1],
        notes="y = norm(x, w), then torch.autograd.grad(y, (x, w), dy): the public entry "
              "(rms_norm / F.rms_norm), autograd and every launch included; bytes = forward 2MNs + "
              "backward 3MNs, the minimum; torch_compile = torch.compile(F.rms_norm) (dynamic=False), "
              "its forward and backward graphs; at 8x768 the host is the bottleneck (see rmsnorm_host_week4)",
    ),
    Benchmark(
        name="rmsnorm_host_week4",
        title="RMSNorm forward: host cost per call at a decode-step size, bf16 (fp32 in simulation)",
        sizes=HOST_SIZES, sim_sizes=HOST_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_forward_inputs,
        variants={"torch": torch_forward, "triton": _triton_norm,
                  "triton_launcher": lambda x, w: rms_norm_forward(x, w, EPS)},
        headline=("triton",),
        clock="wall",
        bytes=lambda s: 0,
        notes="ms = wall time of 300 calls / 300, then one synchronize: the host's cost per call "
              "(argument checks, allocation, the launch), the GPU work being ~3 us; torch = "
              "F.rms_norm; triton = rms_norm (the public entry); triton_launcher = "
              "rms_norm_forward (validates every tuning argument: the lesson's API, not the hot path)",
    ),
]




def _on_the_calling_thread(fwd_bwd):
    """fwd_bwd with autograd's backward run on the calling thread, not on its CUDA device thread.

    By default the autograd engine runs a CUDA backward on a worker thread per device; a Python
    backward (an autograd.Function's) then has to take the GIL from the calling thread and hand
    it back, per node. Turning the worker off shows what that hand-over costs per call.
    """
    def run(*args):
        with torch.autograd.set_multithreading_enabled(False):
            return fwd_bwd(*args)
    return run


TRAIN_HOST_SIZES = [(8, 768), (8192, 768)]
BENCHMARKS += [
    Benchmark(
        name="rmsnorm_train_host_week4",
        title="RMSNorm forward + backward through autograd: host cost per call, autograd's device thread on "
              "and off, bf16 (fp32 in simulation), rows x N",
        sizes=TRAIN_HOST_SIZES, sim_sizes=[(8, 64)], size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_train_inputs,
        variants={
            "torch": _fwd_bwd(torch_forward),
            "triton": _fwd_bwd(_triton_norm),
            "torch_one_thread": _on_the_calling_thread(_fwd_bwd(torch_forward)),
            "triton_one_thread": _on_the_calling_thread(_fwd_bwd(_triton_norm)),
        },
        headline=("triton", "triton_one_thread"),
        clock="wall",
        bytes=lambda s: 0,
        notes="ms = wall time of 300 fwd+bwd calls / 300, then one synchronize (the host's cost when the GPU "
              "work is shorter); *_one_thread = the same under torch.autograd.set_multithreading_enabled(False): "
              "the backward runs on the calling thread, so a Python backward (triton's autograd.Function) "
              "needs no GIL hand-over to autograd's CUDA worker thread; vs torch = torch (threaded) / this",
    ),
]


# -------------------------------------------------------------------------------------- sweep
def sweep(M: int, N: int, dtype: torch.dtype) -> None:
    """Time each launch configuration at one shape and print a table (for the GPU)."""
    from course import bench

    sms = runtime.sm_count()
    x, w = random_tensor((M, N), dtype, runtime.DEVICE), random_tensor(N, dtype, runtime.DEVICE)
    dy = random_tensor((M, N), dtype, runtime.DEVICE)
    _, rstd = rms_norm_forward(x, w, EPS)
    rstd_t = _torch_rstd(x, w)
    copy = bench.copy_bandwidth_gbps()
    fwd_bytes, bwd_bytes = 2 * M * N * x.element_size(), 3 * M * N * x.element_size()
    per_sm = runtime.pick(gpu=(1, 2, 4, 8), sim=(1, 2))
    fwd = lambda **kw: ln_bench.timed(lambda: rms_norm_forward(x, w, EPS, **kw))  # noqa: E731
    bwd = lambda **kw: ln_bench.timed(lambda: rms_norm_backward(dy, x, rstd, w, **kw))  # noqa: E731

    rows = [("forward", "torch F.rms_norm", "-", "-", "-", "-", ln_bench.timed(lambda: torch_forward(x, w)), fwd_bytes),
            ("forward", f"default ({FORWARD_KERNEL})", "-", "-", "-", "-", fwd(), fwd_bytes)]
    for nw in runtime.pick(gpu=(4, 8, 16), sim=(4,)):
        rows.append(("forward", "row", nw, 1, "-", M, fwd(kernel="row", num_warps=nw), fwd_bytes))
    for nw, bm, stages in ln_bench.sweep_configs(N, x.element_size(), 1):
        for k in per_sm:
            rows.append(("forward", "persistent", nw, bm, stages, k * sms, fwd(
                kernel="persistent", block_m=bm, num_programs=k * sms, num_warps=nw, num_stages=stages), fwd_bytes))
    torch_label = "torch " + ("_fused_rms_norm_backward" if HAS_FUSED_BACKWARD else "eager formula")
    rows += [("backward", torch_label, "-", "-", "-", "-", ln_bench.timed(lambda: torch_backward(dy, x, rstd_t, w)),
              bwd_bytes),
             ("backward", "default (partial)", "-", "-", "-", "-", bwd(), bwd_bytes)]
    for nw, bm, stages in ln_bench.sweep_configs(N, x.element_size(), 2):
        for k in per_sm:
            rows.append(("backward", "partial", nw, bm, stages, k * sms, bwd(
                block_m=bm, num_partials=k * sms, num_warps=nw, num_stages=stages), bwd_bytes))
    ln_bench.print_sweep(f"RMSNorm {M}x{N} {str(dtype).replace('torch.', '')}, {sms} SMs, copy {copy:.0f} GB/s",
                   rows, copy)


if __name__ == "__main__":
    ln_bench.sweep_cli("week4_triton_dl.rmsnorm_bench", sweep)
