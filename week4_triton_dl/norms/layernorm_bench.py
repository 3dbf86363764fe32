"""LayerNorm's benchmarks, launch sweep and command line (the kernels: layernorm.py, layernorm_backward.py).

`BENCHMARKS` (found by `python -m course bench week4`): forward and backward against torch's
kernels and torch.compile at 128 MB per input, and the op as a model calls it (forward + backward
through autograd, host cost at a decode-step size). `python -m week4_triton_dl.norms.layernorm_bench
--sweep` times each launch configuration (kernel, warps, rows per step, stages, programs) at one
shape. What RMSNorm's benchmarks share with these (sizes, the model-call benchmarks, the sweep):
bench.py.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from course.gpu import DEVICE
from course.bench import Benchmark, bench_dtype, compile_on_first_call, itemsize
from course.check import random_tensor
from week4_triton_dl.norms import bench as norm_bench
from week4_triton_dl.norms.layernorm import FORWARD_KERNEL, layer_norm, layer_norm_forward, layer_norm_unfused
from week4_triton_dl.norms.layernorm_backward import layer_norm_backward
from week4_triton_dl.norms.bench import SIM_SIZES, SIZES, size_label


# ---------------------------------------------------------------------------------- benchmarks
EPS = 1e-5


def torch_forward(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, EPS)


def torch_backward(dy, x, w, b, mean, rstd):
    """What autograd runs for F.layer_norm's backward (dx kernel + a dw/db kernel)."""
    return torch.ops.aten.native_layer_norm_backward(dy, x, [x.shape[-1]], mean, rstd, w, b,
                                                     [True, True, True])


_torch_backward_compiled = compile_on_first_call(torch_backward, dynamic=False)


def _forward_inputs(size):
    M, N = size
    dtype = bench_dtype()
    x = random_tensor((M, N), dtype, DEVICE)
    return x, random_tensor(N, dtype, DEVICE), random_tensor(N, dtype, DEVICE)


def _backward_inputs(size):
    x, w, b = _forward_inputs(size)
    dy = random_tensor(x.shape, x.dtype, DEVICE)
    _, mean_t, rstd_t = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], w, b, EPS)
    _, mean, rstd = layer_norm_forward(x, w, b, EPS)
    return dy, x, w, b, mean_t, rstd_t, mean, rstd


BENCHMARKS = [
    Benchmark(
        name="layernorm_fwd_week4",
        title="LayerNorm forward, bf16 (fp16 before sm_80, fp32 in simulation), rows x N",
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=size_label,
        make_inputs=_forward_inputs,
        variants={
            "torch": torch_forward,
            "torch_compile": compile_on_first_call(torch_forward, dynamic=False),
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
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=size_label,
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
def _triton_norm(x, w, b):
    return layer_norm(x, (x.shape[-1],), w, b, EPS)


BENCHMARKS += [
    norm_bench.train_benchmark(
        "layernorm", "LayerNorm", torch_forward, _triton_norm, parameters=2,
        bytes=lambda s: 5 * s[0] * s[1] * itemsize(bench_dtype()) + 5 * s[1] * itemsize(bench_dtype()) + 16 * s[0],
        flops=lambda s: 20 * s[0] * s[1],
        notes="y = norm(x, w, b), then torch.autograd.grad(y, (x, w, b), dy): the public entry "
              "(layer_norm / F.layer_norm), autograd and every launch included; bytes = forward 2MNs "
              "+ backward 3MNs, the minimum; torch_compile = torch.compile(F.layer_norm) (dynamic=False); "
              "at 8x768 the host is the bottleneck (see layernorm_host_week4)",
    ),
    norm_bench.host_benchmark(
        "layernorm", "LayerNorm", _forward_inputs, torch_forward, _triton_norm,
        lambda x, w, b: layer_norm_forward(x, w, b, EPS),
        notes="ms = wall time of 300 calls / 300, then one synchronize: the host's cost per call "
              "(argument checks, allocation, the launch), the GPU work being ~3 us; torch = "
              "F.layer_norm; triton = layer_norm (the public entry); triton_launcher = "
              "layer_norm_forward (checks every tuning argument: the lesson's API, not the hot path)",
    ),
]


# -------------------------------------------------------------------------------------- sweep
def sweep(M: int, N: int, dtype: torch.dtype) -> None:
    """Time each launch configuration at one shape and print a table (for the GPU)."""
    x, w, b = (random_tensor(s, dtype, DEVICE) for s in ((M, N), N, N))
    dy = random_tensor((M, N), dtype, DEVICE)
    _, mean, rstd = layer_norm_forward(x, w, b, EPS)
    _, mean_t, rstd_t = torch.ops.aten.native_layer_norm(x, [N], w, b, EPS)
    norm_bench.sweep(
        "LayerNorm", x,
        lambda **kw: layer_norm_forward(x, w, b, EPS, **kw),
        lambda **kw: layer_norm_backward(dy, x, mean, rstd, w, True, **kw),
        {"forward": ("torch F.layer_norm", lambda: torch_forward(x, w, b)),
         "backward": ("torch native_layer_norm_backward", lambda: torch_backward(dy, x, w, b, mean_t, rstd_t))},
        forward_kernel=FORWARD_KERNEL, backward_kernels=("atomic",))


if __name__ == "__main__":
    sys.exit(norm_bench.sweep_cli("week4_triton_dl.norms.layernorm_bench", sweep, __doc__))
