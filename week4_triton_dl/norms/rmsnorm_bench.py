"""RMSNorm's benchmarks, launch sweep and command line (the kernels: rmsnorm.py).

`BENCHMARKS` (found by `python -m course bench week4`): forward and backward against torch's
kernels and torch.compile, and the op as a model calls it (forward + backward through autograd,
host cost). `python -m week4_triton_dl.norms.rmsnorm_bench --sweep` times each launch configuration at
one shape. What LayerNorm's benchmarks share with these (sizes, the model-call benchmarks, the
sweep): bench.py.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from course import runtime
from course.bench import Benchmark, bench_dtype, compile_on_first_call, itemsize
from course.check import random_tensor
from week4_triton_dl.norms import bench as norm_bench
from week4_triton_dl.norms.bench import SIM_SIZES, SIZES, fwd_bwd, size_label, train_inputs
from week4_triton_dl.norms.rmsnorm import (
    FORWARD_KERNEL, rms_norm, rms_norm_backward, rms_norm_backward_unfused, rms_norm_forward, rms_norm_unfused)


# ---------------------------------------------------------------------------------- benchmarks
EPS = 1e-6


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


_compiled_forward = compile_on_first_call(torch_unfused_forward, dynamic=False)
_compiled_backward = compile_on_first_call(rms_norm_backward_unfused, dynamic=False)


def _forward_inputs(size):
    M, N = size
    dtype = bench_dtype()
    return random_tensor((M, N), dtype, runtime.DEVICE), random_tensor(N, dtype, runtime.DEVICE)


def torch_rstd(x, w):
    """The rstd torch's backward takes: its fused forward's, or the eager formula's in simulation."""
    if HAS_FUSED_BACKWARD:
        return torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], w, EPS)[1]
    return torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS)


def _backward_inputs(size):
    x, w = _forward_inputs(size)
    dy = random_tensor(x.shape, x.dtype, runtime.DEVICE)
    _, rstd = rms_norm_forward(x, w, EPS)
    return dy, x, w, torch_rstd(x, w), rstd


BENCHMARKS = [
    Benchmark(
        name="rmsnorm_fwd_week4",
        title="RMSNorm forward, bf16 (fp16 before sm_80, fp32 in simulation), rows x N",
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=size_label,
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
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=size_label,
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
def _triton_norm(x, w):
    return rms_norm(x, (x.shape[-1],), w, EPS)


BENCHMARKS += [
    norm_bench.train_benchmark(
        "rmsnorm", "RMSNorm", torch_forward, _triton_norm, parameters=1,
        bytes=lambda s: 5 * s[0] * s[1] * itemsize(bench_dtype()) + 3 * s[1] * itemsize(bench_dtype()) + 8 * s[0],
        flops=lambda s: 12 * s[0] * s[1],
        notes="y = norm(x, w), then torch.autograd.grad(y, (x, w), dy): the public entry "
              "(rms_norm / F.rms_norm), autograd and every launch included; bytes = forward 2MNs + "
              "backward 3MNs, the minimum; torch_compile = torch.compile(F.rms_norm) (dynamic=False), "
              "its forward and backward graphs; at 8x768 the host is the bottleneck (see rmsnorm_host_week4)",
    ),
    norm_bench.host_benchmark(
        "rmsnorm", "RMSNorm", _forward_inputs, torch_forward, _triton_norm,
        lambda x, w: rms_norm_forward(x, w, EPS),
        notes="ms = wall time of 300 calls / 300, then one synchronize: the host's cost per call "
              "(argument checks, allocation, the launch), the GPU work being ~3 us; torch = "
              "F.rms_norm; triton = rms_norm (the public entry); triton_launcher = "
              "rms_norm_forward (validates every tuning argument: the lesson's API, not the hot path)",
    ),
]


def _on_the_calling_thread(step):
    """step (a `fwd_bwd`) with autograd's backward run on the calling thread, not on its CUDA device thread.

    By default the autograd engine runs a CUDA backward on a worker thread per device; a Python
    backward (an autograd.Function's) then has to take the GIL from the calling thread and hand
    it back, per node. Turning the worker off shows what that hand-over costs per call.
    """
    def run(*args):
        with torch.autograd.set_multithreading_enabled(False):
            return step(*args)
    return run


TRAIN_HOST_SIZES = [(8, 768), (8192, 768)]
BENCHMARKS += [
    Benchmark(
        name="rmsnorm_train_host_week4",
        title="RMSNorm forward + backward through autograd: host cost per call, autograd's device thread on "
              "and off, bf16 (fp32 in simulation), rows x N",
        sizes=TRAIN_HOST_SIZES, sim_sizes=[(8, 64)], size_label=size_label,
        make_inputs=train_inputs(1),
        variants={
            "torch": fwd_bwd(torch_forward),
            "triton": fwd_bwd(_triton_norm),
            "torch_one_thread": _on_the_calling_thread(fwd_bwd(torch_forward)),
            "triton_one_thread": _on_the_calling_thread(fwd_bwd(_triton_norm)),
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
    x, w = random_tensor((M, N), dtype, runtime.DEVICE), random_tensor(N, dtype, runtime.DEVICE)
    dy = random_tensor((M, N), dtype, runtime.DEVICE)
    _, rstd = rms_norm_forward(x, w, EPS)
    rstd_t = torch_rstd(x, w)
    torch_label = "torch " + ("_fused_rms_norm_backward" if HAS_FUSED_BACKWARD else "eager formula")
    norm_bench.sweep(
        "RMSNorm", x,
        lambda **kw: rms_norm_forward(x, w, EPS, **kw),
        lambda **kw: rms_norm_backward(dy, x, rstd, w, **kw),
        {"forward": ("torch F.rms_norm", lambda: torch_forward(x, w)),
         "backward": (torch_label, lambda: torch_backward(dy, x, rstd_t, w))},
        forward_kernel=FORWARD_KERNEL)


if __name__ == "__main__":
    sys.exit(norm_bench.sweep_cli("week4_triton_dl.norms.rmsnorm_bench", sweep, __doc__))
