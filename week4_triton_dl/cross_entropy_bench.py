"""Cross-entropy's benchmarks, sweep and command line (kernels: cross_entropy.py, fused_linear_cross_entropy.py).

`BENCHMARKS` (found by `python -m course bench week4`): the row kernels against F.cross_entropy,
the fused linear + cross-entropy against the full logits, and the ops as a model calls them
(`cross_entropy_train_week4`, `fused_linear_ce_train_week4`, `cross_entropy_host_week4`).
`python -m week4_triton_dl.cross_entropy_bench --sweep` times the fused linear cross-entropy's chunk
sizes beside torch and torch.compile: ms, peak MiB, error.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course import runtime
from course.bench import Benchmark, bench_dtype, itemsize
from course.check import random_tensor

from week4_triton_dl.cross_entropy import CROSS_ENTROPY_CODE, cross_entropy, cross_entropy_forward
from week4_triton_dl.fused_linear_cross_entropy import (
    FUSED_LINEAR_CE_CODE, default_chunk_size, fused_linear_cross_entropy, linear_cross_entropy_torch, loss_and_grads,
    peak_memory_mib)


# ---------------------------------------------------------------------------------- benchmarks
def _linear_inputs(size):
    n, d, v, dtype = size
    dev = runtime.DEVICE
    h = random_tensor((n, d), dtype, dev).requires_grad_()
    w = random_tensor((v, d), dtype, dev, scale=d ** -0.5).requires_grad_()
    return h, w, torch.randint(0, v, (n,), device=dev)


_compiled = {}


def _torch_compiled(h, w, t):
    if "linear_ce" not in _compiled:
        _compiled["linear_ce"] = torch.compile(loss_and_grads(linear_cross_entropy_torch))
    return _compiled["linear_ce"](h, w, t)


def _logits_inputs(size):
    n, v, dtype = size
    return (random_tensor((n, v), dtype, runtime.DEVICE, scale=2.0).requires_grad_(),
            torch.randint(0, v, (n,), device=runtime.DEVICE))


def _ce_fwd_bwd(fn):
    def run(logits, targets):
        loss = fn(logits, targets)
        return torch.autograd.grad(loss, (logits,))
    return run


def _ce_compiled(logits, targets):
    if "ce" not in _compiled:
        _compiled["ce"] = torch.compile(_ce_fwd_bwd(F.cross_entropy))
    return _compiled["ce"](logits, targets)


VOCAB = 128256  # Llama 3's vocabulary: "128k", and not a power of two
BENCHMARKS = [
    Benchmark(
        name="fused_ce_week4",
        title="Linear + cross-entropy, forward + backward, bf16 (N=8192 tokens, V=128256)",
        sizes=[(8192, 2048, VOCAB, torch.bfloat16), (8192, 4096, VOCAB, torch.bfloat16)],
        sim_sizes=[(64, 32, 300, torch.float32)],
        size_label=lambda s: f"N={s[0]} d={s[1]} V={s[2]}",
        make_inputs=_linear_inputs,
        variants={
            "torch": loss_and_grads(linear_cross_entropy_torch),
            "torch_compile": _torch_compiled,
            "fused": loss_and_grads(fused_linear_cross_entropy),
        },
        gpu_only=("torch_compile",),
        headline=("fused",),
        sources={"fused": FUSED_LINEAR_CE_CODE},
        bytes=lambda s: 2 * (s[0] * s[1] + s[2] * s[1]) * itemsize(s[3]),
        flops=lambda s: 6 * s[0] * s[1] * s[2],
        compute_dtype=torch.bfloat16,
        notes="forward + backward of CE(h @ W^T, t), mean; flops = 6 N d V (logits, dh, dW matmuls); bytes = "
              "read h, W and write dh, dW once (the minimum). Peak MiB is the memory above the inputs; the "
              "chunk-size trade-off: `python -m week4_triton_dl.cross_entropy_bench --sweep`.",
    ),
    Benchmark(
        name="cross_entropy_week4",
        title="Cross-entropy on given logits, forward + backward",
        sizes=[(8192, VOCAB, torch.bfloat16), (8192, VOCAB, torch.float32), (32768, 32000, torch.bfloat16)],
        sim_sizes=[(16, 300, torch.float32)],
        size_label=lambda s: f"{s[0]}x{s[1]} {str(s[2]).replace('torch.', '')}",
        make_inputs=_logits_inputs,
        variants={
            "torch": _ce_fwd_bwd(F.cross_entropy),
            "torch_compile": _ce_compiled,
            "triton": _ce_fwd_bwd(cross_entropy),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        sources={"triton": CROSS_ENTROPY_CODE},
        bytes=lambda s: 3 * s[0] * s[1] * itemsize(s[2]),
        flops=lambda s: 0,
        notes="bytes = 3 N V s: read the logits in the forward, read them and write their gradient in the "
              "backward (the minimum for a separate forward and backward)",
    ),
]


# ------------------------------------------------------------------- as a model calls it
# Tokens x vocabulary: GPT-2's padded vocabulary (50304 = 50257 rounded up to a multiple of 64)
# and Llama 3's (128256), at 8192 tokens (B = 8 x T = 1024) and 16384; in the model's dtype.
TRAIN_SIZES = [(8192, 50304), (8192, VOCAB), (16384, 50304)]
TRAIN_SIM_SIZES = [(16, 300)]
# (tokens, d, V): GPT-2 small's LM head at B = 8 x T = 1024, and Llama-3-8B's.
LINEAR_TRAIN_SIZES = [(8192, 768, 50304), (8192, 4096, VOCAB)]
LINEAR_TRAIN_SIM_SIZES = [(64, 32, 300)]
HOST_SIZES = [(8, 50304)]  # one decode step of a batch of 8: the host sets the pace


def _compile(fn):
    """torch.compile(fn), compiled on its first call (the benchmark's warm-up, not timed)."""
    def run(*args):
        if fn not in _compiled:
            _compiled[fn] = torch.compile(fn, dynamic=False)  # one kernel per shape, as in training
        return _compiled[fn](*args)
    return run


def torch_loss(logits, targets):
    """Cross-entropy as training code writes it: upcast the logits, then F.cross_entropy."""
    return F.cross_entropy(logits.float(), targets)


def torch_linear_loss(h, weight, targets):
    """The LM head's loss as training code writes it: the logits, upcast, then F.cross_entropy."""
    return F.cross_entropy((h @ weight.t()).float(), targets)


def _train_inputs(size):
    n, v = size
    logits = random_tensor((n, v), bench_dtype(), runtime.DEVICE, scale=2.0).requires_grad_(True)
    return logits, torch.randint(0, v, (n,), device=runtime.DEVICE)


def _linear_train_inputs(size):
    n, d, v = size
    return _linear_inputs((n, d, v, bench_dtype()))


def _host_inputs(size):
    n, v = size
    logits = random_tensor((n, v), bench_dtype(), runtime.DEVICE, scale=2.0)
    return logits, torch.randint(0, v, (n,), device=runtime.DEVICE)


BENCHMARKS += [
    Benchmark(
        name="cross_entropy_train_week4",
        title="Cross-entropy forward + backward through autograd, as a model calls it, bf16 (fp32 in simulation), "
              "tokens x V",
        sizes=TRAIN_SIZES, sim_sizes=TRAIN_SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_train_inputs,
        variants={
            "torch": _ce_fwd_bwd(torch_loss),
            "torch_compile": _ce_fwd_bwd(_compile(torch_loss)),
            "triton": _ce_fwd_bwd(cross_entropy),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        sources={"triton": CROSS_ENTROPY_CODE},
        bytes=lambda s: 3 * s[0] * s[1] * itemsize(bench_dtype()),
        flops=lambda s: 0,
        notes="loss = f(logits, t) (mean), then torch.autograd.grad(loss, logits): the public entry, autograd and "
              "every launch included; torch = F.cross_entropy(logits.float(), t) (as training code upcasts), "
              "torch_compile = torch.compile of it (dynamic=False); bytes = 3 N V s (read the logits in the "
              "forward, read them and write their gradient in the backward: the minimum). Peak MiB above the "
              "inputs: torch holds fp32 copies of the logits and of their gradient",
    ),
    Benchmark(
        name="fused_linear_ce_train_week4",
        title="LM head + cross-entropy (h @ W^T, then CE), forward + backward through autograd, bf16 "
              "(fp32 in simulation)",
        sizes=LINEAR_TRAIN_SIZES, sim_sizes=LINEAR_TRAIN_SIM_SIZES,
        size_label=lambda s: f"N={s[0]} d={s[1]} V={s[2]}",
        make_inputs=_linear_train_inputs,
        variants={
            "torch": loss_and_grads(torch_linear_loss),
            "torch_compile": loss_and_grads(_compile(torch_linear_loss)),
            "triton": loss_and_grads(fused_linear_cross_entropy),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        sources={"triton": FUSED_LINEAR_CE_CODE},
        bytes=lambda s: 2 * (s[0] * s[1] + s[2] * s[1]) * itemsize(bench_dtype()),
        flops=lambda s: 6 * s[0] * s[1] * s[2],
        compute_dtype=torch.bfloat16,
        notes="loss = f(h, W, t) (mean), then torch.autograd.grad(loss, (h, W)); torch = F.cross_entropy((h @ "
              "W.T).float(), t), torch_compile = torch.compile of it (dynamic=False), triton = "
              "fused_linear_cross_entropy (default chunk); flops = 6 N d V (logits, dh, dW matmuls); bytes = "
              "read h, W and write dh, dW once. Peak MiB above the inputs: torch holds the N x V logits (and "
              "fp32 copies), the fused version dW, dh and one chunk of logits",
    ),
    Benchmark(
        name="cross_entropy_host_week4",
        title="Cross-entropy forward: host cost per call at a decode-step size, bf16 (fp32 in simulation)",
        sizes=HOST_SIZES, sim_sizes=HOST_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_host_inputs,
        variants={"torch": F.cross_entropy, "triton": cross_entropy,
                  "triton_launcher": lambda logits, t: cross_entropy_forward(logits, t)},
        headline=("triton",),
        clock="wall",
        bytes=lambda s: 0,
        notes="ms = wall time of 300 calls / 300, then one synchronize: the host's cost per call (argument "
              "checks, allocation, the launches), the GPU work being a few us; torch = F.cross_entropy "
              "(log_softmax + nll_loss); triton = cross_entropy (the public entry: one launch, the last "
              "row program reducing, no host sync); triton_launcher = cross_entropy_forward (per-row losses; validates the "
              "target values, one host sync: the lesson's API, not the hot path)",
    ),
]


# ---------------------------------------------------------------------------------- the sweep
def _timed(fn, *args) -> dict:
    """fn's timing fields: its ms, and whether the host paced it (course.bench.timing_fields)."""
    from course.bench import time_call, timing_fields
    return timing_fields(time_call(fn, [args]))


def _max_rel_err(got, want):
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def sweep(n=None, v=None, ds=None, dtype=None, chunks=None) -> None:
    """Chunk-size sweep of the fused linear CE beside torch and torch.compile: ms, peak MiB, error.

    On the H100 (~1-2 min, most of it torch.compile's first call): N = 8192, V = 128256,
    d = 2048 and 4096, bf16. In simulation: tiny sizes, to show the table; memory is '-'.
    """
    from course.bench import footnote, ms_cell

    gpu = runtime.on_gpu()
    n = n or runtime.pick(gpu=8192, sim=64)
    v = v or runtime.pick(gpu=VOCAB, sim=300)
    ds = ds or runtime.pick(gpu=[4096, 2048], sim=[32])
    dtype = dtype or runtime.pick(gpu=torch.bfloat16, sim=torch.float32)
    chunks = chunks or runtime.pick(gpu=[256, 512, 1024, 2048, 4096, 8192], sim=[16, 64])
    print(f"fused linear cross-entropy, forward + backward, N={n} V={v} {str(dtype).replace('torch.', '')}, "
          f"{'GPU: ' + torch.cuda.get_device_name() if gpu else 'SIMULATION (times measure Python)'}")
    print("peak MiB = memory allocated above the inputs (h, W, targets) at the peak; err = max |diff| / max |ref|")
    head = f"{'d':>5} {'variant':<26} {'ms':>9} {'peak MiB':>9} {'loss err':>9} {'dh err':>9} {'dW err':>9}"
    timed = []
    for d in ds:
        h, w, t = _linear_inputs((n, d, v, dtype))
        ref = loss_and_grads(linear_cross_entropy_torch)(h, w, t)
        rows = [("torch", loss_and_grads(linear_cross_entropy_torch))]
        if gpu:
            rows.append(("torch_compile", _torch_compiled))
        default = default_chunk_size(n, v, itemsize(dtype))
        for c in chunks:
            rows.append((f"fused chunk={c}{' (default)' if c == default else ''}",
                         loss_and_grads(lambda a, b, c_, c=c: fused_linear_cross_entropy(a, b, c_, chunk_size=c))))
        print(head)
        for label, fn in rows:
            got = fn(h, w, t)
            errs = [_max_rel_err(g, r) for g, r in zip(got, ref)]
            del got
            peak = f"{peak_memory_mib(fn, h, w, t):9.0f}" if gpu else f"{'-':>9}"
            timed.append(_timed(fn, h, w, t))
            print(f"{d:>5} {label:<26} {ms_cell(timed[-1], '9.3f')} {peak} "
                  + " ".join(f"{e:9.2e}" for e in errs), flush=True)
        del h, w, t, ref
        if gpu:
            torch.cuda.empty_cache()
    print(footnote(timed), end="")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="chunk-size sweep: ms, peak MiB, error vs torch")
    args = parser.parse_args()
    if args.sweep:
        sweep()
    else:
        parser.print_help()
