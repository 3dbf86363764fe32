"""RoPE's benchmarks (the kernels: rope.py): the kernel alone, and as a model calls it.

`BENCHMARKS` (found by `python -m course bench week4`): `rope_week4`, the rotation of q and k
against the eager rotate-half formula and torch.compile of it (with the backward's rotation by
-theta and two separate launches beside it); `rope_train_week4`, forward + backward through
autograd at model shapes; `rope_host_week4`, the host cost per call at a single-token decode step.
"""
from __future__ import annotations

import torch

from course.gpu import DEVICE
from course.bench import Benchmark, bench_dtype, compile_on_first_call
from course.check import random_tensor

from week4_triton_dl.rope import (
    apply_rope, full_tables, rope_forward, rope_hot_path, rope_rotate_half, rope_tables)


# ---------------------------------------------------------------------------------- benchmarks
# (B, S, H_q, H_kv, D), bf16 on the GPU. The last size is the headline: q and k 134 MB each.
SIZES = [(8, 2048, 32, 8, 128), (4, 4096, 32, 32, 128)]
SIM_SIZES = [(1, 8, 2, 1, 16)]
_compiled_rotate_half = compile_on_first_call(rope_rotate_half, dynamic=False)


def _inputs(size, requires_grad: bool = False):
    B, S, Hq, Hkv, D = size
    dtype = bench_dtype()
    q = random_tensor((B, Hq, S, D), dtype, DEVICE).requires_grad_(requires_grad)
    k = random_tensor((B, Hkv, S, D), dtype, DEVICE).requires_grad_(requires_grad)
    cos, sin = rope_tables(S, D)
    cos_full, sin_full = full_tables(cos, sin, S, dtype)
    return q, k, cos, sin, cos_full, sin_full


def _bytes(size):
    B, S, Hq, Hkv, D = size
    itemsize = bench_dtype().itemsize
    return 2 * B * S * (Hq + Hkv) * D * itemsize + 2 * S * (D // 2) * 4


BENCHMARKS = [
    Benchmark(
        name="rope_week4",
        title="RoPE on q and k, (B, H, S, D), bf16 (fp16 before sm_80, fp32 in simulation); "
              "size = B x S x Hq/Hkv x D",
        sizes=SIZES, sim_sizes=SIM_SIZES,
        size_label=lambda s: f"{s[0]}x{s[1]}x{s[2]}/{s[3]}x{s[4]}",
        make_inputs=_inputs,
        variants={
            "torch": lambda q, k, c, s, cf, sf: rope_rotate_half(q, k, cf, sf),
            "torch_compile": lambda q, k, c, s, cf, sf: _compiled_rotate_half(q, k, cf, sf),
            "triton": lambda q, k, c, s, cf, sf: apply_rope(q, k, c, s),
            "triton_backward": lambda q, k, c, s, cf, sf: rope_hot_path(q, k, c, s, 0, "bhsd", True),
            "triton_two_launches": lambda q, k, c, s, cf, sf: (rope_forward(q, c, s), rope_forward(k, c, s)),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=_bytes,
        flops=lambda s: 3 * s[0] * s[1] * (s[2] + s[3]) * s[4],
        notes="bytes = read q, k + write both (+ the fp32 tables once); torch = x * cos + "
              "rotate_half(x) * sin in eager bf16 ops (neg, cat, mul, mul, add: ~5x the bytes); "
              "triton = apply_rope (q and k in one launch); triton_backward = the same kernel "
              "rotating by -theta; triton_two_launches = the validated launcher rope_forward on q, then k",
    ),
]


# ------------------------------------------------------------------- as a model calls it
# (B, S, Hq, Hkv, D): GPT-2 small's attention at 8 x 1024 tokens, a Llama-3-8B-like layer
# (grouped-query attention, 8 key heads) at 4 x 4096, one long 8192-token sequence; and a
# single-token decode step of a batch of 8 for the host cost.
TRAIN_SIZES = [(8, 1024, 12, 12, 64), (4, 4096, 32, 8, 128), (1, 8192, 32, 32, 128)]
TRAIN_SIM_SIZES = [(1, 4, 2, 1, 8)]
HOST_SIZES = [(8, 1, 12, 12, 64)]


def _train_inputs(size):
    q, k, cos, sin, cos_full, sin_full = _inputs(size, requires_grad=True)
    dq, dk = (random_tensor(t.shape, t.dtype, DEVICE) for t in (q, k))
    return q, k, cos, sin, cos_full, sin_full, dq, dk


def _fwd_bwd_torch(rotate):
    """forward + backward through autograd, as a training step runs it: (dq, dk)."""
    return lambda q, k, c, s, cf, sf, dq, dk: torch.autograd.grad(rotate(q, k, cf, sf), (q, k), (dq, dk))


def _fwd_bwd_triton(q, k, c, s, cf, sf, dq, dk):
    return torch.autograd.grad(apply_rope(q, k, c, s, 0, "bhsd"), (q, k), (dq, dk))


def _train_bytes(size):
    return 2 * _bytes(size)  # forward: read q, k, write both; backward: read dq', dk', write dq, dk


BENCHMARKS += [
    Benchmark(
        name="rope_train_week4",
        title="RoPE on q and k, forward + backward through autograd, as a model calls it, (B, H, S, D), "
              "bf16 (fp32 in simulation); size = B x S x Hq/Hkv x D",
        sizes=TRAIN_SIZES, sim_sizes=TRAIN_SIM_SIZES,
        size_label=lambda s: f"{s[0]}x{s[1]}x{s[2]}/{s[3]}x{s[4]}",
        make_inputs=_train_inputs,
        variants={
            "torch": _fwd_bwd_torch(rope_rotate_half),
            "torch_compile": _fwd_bwd_torch(_compiled_rotate_half),
            "triton": _fwd_bwd_triton,
        },
        gpu_only=("torch_compile",),
        graphed=("torch", "torch_compile", "triton"),  # rows *_graph: the GPU time alone, as a captured step sees it
        headline=("triton",),
        bytes=_train_bytes,
        flops=lambda s: 6 * s[0] * s[1] * (s[2] + s[3]) * s[4],
        notes="(q', k') = rope(q, k), then torch.autograd.grad((q', k'), (q, k), (dq', dk')): the public "
              "entry (apply_rope: one launch forward, one backward) against the rotate-half formula in "
              "eager ops with (S, D) bf16 tables made beforehand (rope_rotate_half) and torch.compile of "
              "it (dynamic=False); bytes = forward 2ns + backward 2ns (+ tables), the minimum",
    ),
    Benchmark(
        name="rope_host_week4",
        title="RoPE on q and k: host cost per call at a single-token decode step, bf16 (fp32 in simulation)",
        sizes=HOST_SIZES, sim_sizes=HOST_SIZES,
        size_label=lambda s: f"{s[0]}x{s[1]}x{s[2]}/{s[3]}x{s[4]}",
        make_inputs=_inputs,
        variants={
            "torch": lambda q, k, c, s, cf, sf: rope_rotate_half(q, k, cf, sf),
            "triton": lambda q, k, c, s, cf, sf: apply_rope(q, k, c, s, 0, "bhsd"),
            "triton_launcher": lambda q, k, c, s, cf, sf: (rope_forward(q, c, s), rope_forward(k, c, s)),
        },
        headline=("triton",),
        clock="wall",
        bytes=lambda s: 0,
        notes="ms = wall time of 300 calls / 300, then one synchronize: the host's cost per call "
              "(checks, allocation, launches), the GPU work being ~2 us; torch = the rotate-half formula "
              "(10 eager kernels for q and k); triton = apply_rope (one launch); triton_launcher = "
              "rope_forward on q, then k (validated, two launches)",
    ),
]
