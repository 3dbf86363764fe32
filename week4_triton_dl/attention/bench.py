"""FlashAttention's benchmarks, config sweeps, ladder and command line (the kernels: attention/*.py).

`BENCHMARKS` (found by `python -m course bench week4`): the fused forward and forward + backward
against SDPA's backends over S at B*H*S = 2^18, unfused against fused, and the op as a model calls
it (`attention_train_week4`, `attention_host_week4`); on an H100/H200 the CUDA C rung (attention/hopper.py)
is a row of each of those but the last (`hopper`, `hopper_overlap`). `python -m week4_triton_dl.attention.bench
--sweep` (GPU) times every tile config of every kernel beside SDPA's flash and cuDNN backends, and
the split and atomic backward strategies; `python -m week4_triton_dl.attention.sweep_forward` picks the
forward (flash_hopper, flash_tma or flash_blocked) and flash_tma's tile per head dim and mask, and
writes them as rows of results/dispatch_attention.json (attention/dispatch.py reads it). `LADDERS`: the forward as
numbered rungs, naive to fused (`python -m course rung attention` lists them, `python -m course
rung attention 2` runs one). Over 500 lines: the measuring side of one op, with no kernel in it
(benchmarks, the ladder, flash_blocked's sweep, each its own section; the forward's sweep that
writes the op's table is attention/sweep_forward.py).
"""
from __future__ import annotations

import argparse
import math
import sys

import torch

from course import runtime
from course.bench import Benchmark, bench_dtype, itemsize
from course.rungs import Ladder, Rung
from course.check import random_tensor
from course.gpu import triton, DEVICE

from week4_triton_dl.attention import hopper
from week4_triton_dl.attention.naive import attention_naive
from week4_triton_dl.attention.flash import FWD_CONFIGS
from week4_triton_dl.attention.op import flash_attention, flash_attention_forward
from week4_triton_dl.attention.tma import (
    flash_attention_tma_forward, supported_here)
from week4_triton_dl.attention.backward import (
    BWD_KV_CONFIGS, BWD_Q_CONFIGS, backward_delta, flash_attention_bwd_dkdv_kernel, flash_attention_bwd_dq_kernel)
from week4_triton_dl.attention.forward import flash_attention_forward_only
from week4_triton_dl.attention.plans import HEAD_DIMS, LOG2E, config_kwargs, configs_for


# =============================================================================== benchmarks
# Tokens x heads held constant: B * H * S = 2^18 with H = 16, so every size launches the same
# number of query-block programs (2048 of 128 rows: ~15 waves over 132 SMs) and moves the same
# 64 MB per input tensor at D = 128, while the FLOPs grow with S.
HEADS = 16
TOKENS = 1 << 18
SEQ_LENS = [1024, 2048, 4096, 8192, 16384]


def batch_for(seq):
    """The batch that keeps B * H * S = TOKENS at sequence length `seq` (H = HEADS)."""
    return max(1, TOKENS // (HEADS * seq))


def sdpa(backend=None):
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    def run(q, k, v, causal):
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def sdpa_backends():
    from torch.nn.attention import SDPBackend
    return {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
            "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION, "sdpa_math": SDPBackend.MATH}


def _inputs(size, requires_grad):
    seq, head_dim, dtype = size
    batch, heads = runtime.pick(gpu=(batch_for(seq), HEADS), sim=(1, 2))
    d = DEVICE
    q, k, v = (random_tensor((batch, heads, seq, head_dim), dtype, d).requires_grad_(requires_grad)
               for _ in range(3))
    if requires_grad:
        return q, k, v, random_tensor((batch, heads, seq, head_dim), dtype, d)
    return q, k, v


def _forward_only(fn, causal):
    def run(q, k, v):
        with torch.no_grad():
            return fn(q, k, v, causal)
    return run


def _forward_backward(fn, causal):
    def run(q, k, v, do):
        out = fn(q, k, v, causal)
        return torch.autograd.grad(out, (q, k, v), do)
    return run


def attention_flops(batch, heads, seq_q, seq_k, head_dim, causal, backward=False):
    """4 B H Sq Sk D for the forward (halved when causal); the backward counts 2.5x that."""
    fwd = 4 * batch * heads * seq_q * seq_k * head_dim * (0.5 if causal else 1.0)
    return fwd * 3.5 if backward else fwd


def _size_numbers(size):
    seq, head_dim, dtype = size
    batch, heads = runtime.pick(gpu=(batch_for(seq), HEADS), sim=(1, 2))
    return batch, heads, seq, head_dim, itemsize(dtype)


def hopper_here() -> bool:
    """Whether the CUDA C rung (attention/hopper.py) runs here: an sm_90 GPU that can build it. Elsewhere
    its rows are left out of the benchmarks below (it would refuse the GPU, or the CPU), as flash_tma's are
    before Hopper."""
    return runtime.on_gpu() and runtime.capability() == hopper.CAPABILITY and hopper.toolchain_missing() is None


def hopper_variants(wrap, causal, backward) -> dict:
    """The CUDA C rung's rows: `hopper` (attention_hopper, differentiable: its backward is
    attention/hopper_backward.py's kernels) and, forward only, `hopper_overlap` (its A/B build with the
    intra-warpgroup overlap). Registered here, in the week's benchmarks, so that `python -m course ncu
    --launch` (tools/ncu_hopper.sh) and `python -m course bench week4` see them beside cuDNN and Triton."""
    variants = {"hopper": wrap(lambda q, k, v, c: hopper.attention_hopper(q, k, v, c), causal)}
    if not backward:
        variants["hopper_overlap"] = wrap(
            lambda q, k, v, c: hopper.attention_hopper_forward(q, k, v, c, overlap=True)[0], causal)
    return variants


HOPPER_NOTE = ("; hopper: attention_hopper, the CUDA C rung for sm_90a (attention/hopper.py; its backward "
               "attention/hopper_backward.py), hopper_overlap: its -DAH_INTRA_OVERLAP=1 build (H100/H200 only: "
               "elsewhere these rows are left out)")


def _attention_benchmark(head_dim, causal, backward, dtype=torch.bfloat16):
    short = str(dtype).replace("torch.", "")
    kind = "fwdbwd" if backward else "fwd"
    name = f"attention_{kind}{'_causal' if causal else ''}_{short}_d{head_dim}"
    wrap = _forward_backward if backward else _forward_only
    ours = lambda q, k, v, c: flash_attention(q, k, v, c)  # noqa: E731
    blocked_only = lambda q, k, v, c: flash_attention(q, k, v, c, rung="flash_blocked")  # noqa: E731
    variants = {"torch": wrap(sdpa(), causal)}
    for label in ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient"):
        variants[label] = wrap(sdpa(sdpa_backends()[label]), causal)
    variants["triton_flash"] = wrap(ours, causal)  # the op as a model gets it: flash_tma's forward on an H100
    variants["triton_flash_blocked"] = wrap(blocked_only, causal)
    if hopper_here():
        variants.update(hopper_variants(wrap, causal, backward))

    def flops(size):
        b, h, s, d, _ = _size_numbers(size)
        return attention_flops(b, h, s, s, d, causal, backward)

    def nbytes(size):
        b, h, s, d, item = _size_numbers(size)
        return (12 if backward else 4) * b * h * s * d * item

    return Benchmark(
        name=name,
        title=(f"Attention {'forward + backward' if backward else 'forward'}, {'causal' if causal else 'non-causal'}, "
               f"{short}, D = {head_dim}, B*H*S = {TOKENS} (H = {HEADS})"),
        sizes=[(s, head_dim, dtype) for s in SEQ_LENS],
        sim_sizes=[(48, head_dim, torch.float16)],
        size_label=lambda size: f"S={size[0]}",
        make_inputs=lambda size: _inputs(size, backward),
        variants=variants,
        gpu_only=("sdpa_cudnn", "sdpa_efficient", "hopper", "hopper_overlap"),
        headline=("triton_flash", "sdpa_flash", "sdpa_cudnn"),
        bytes=nbytes,
        flops=flops,
        compute_dtype=dtype,
        notes=("flops = 4 B H S^2 D for the forward, halved when causal; forward + backward counts 3.5x "
               "that (backward = 2.5x forward; recomputation not counted). bytes = q, k, v read and o "
               "written once (forward), plus q, k, v, o, dO read and dq, dk, dv written once (backward). "
               "'torch' is SDPA's default choice of backend. triton_flash: flash_attention, the op a model "
               "calls (its forward runs flash_tma, attention/tma.py, where attention/dispatch.py's rule sends it on sm_90 "
               "GPUs); triton_flash_blocked: the same op with rung=\"flash_blocked\", the pointer kernel's forward"
               + HOPPER_NOTE + "."),
    )


def _naive_benchmark(head_dim=128, dtype=torch.bfloat16):
    short = str(dtype).replace("torch.", "")
    variants = {
        "torch": _forward_only(sdpa(), False),
        "sdpa_math": _forward_only(sdpa(sdpa_backends()["sdpa_math"]), False),
        "triton_naive": _forward_only(lambda q, k, v, c: attention_naive(q, k, v, c), False),
        "triton_flash_fwd_only": _forward_only(lambda q, k, v, c: flash_attention_forward_only(q, k, v, c), False),
        "triton_flash": _forward_only(lambda q, k, v, c: flash_attention(q, k, v, c, rung="flash_blocked"), False),
        "triton_flash_tma": _forward_only(lambda q, k, v, c: flash_attention_tma_forward(q, k, v, c)[0], False),
    }
    if not supported_here():
        del variants["triton_flash_tma"]  # no TMA before Hopper: the table simply has no such row

    def nbytes(size):
        b, h, s, d, item = _size_numbers(size)
        return 4 * b * h * s * d * item

    def flops(size):
        b, h, s, d, _ = _size_numbers(size)
        return attention_flops(b, h, s, s, d, False)

    return Benchmark(
        name=f"attention_naive_vs_fused_{short}_d{head_dim}",
        title=f"Unfused vs fused attention forward, non-causal, {short}, D = {head_dim}, B*H*S = {TOKENS}",
        sizes=[(s, head_dim, dtype) for s in SEQ_LENS[:4]],
        sim_sizes=[(48, head_dim, torch.float16)],
        size_label=lambda size: f"S={size[0]}",
        make_inputs=lambda size: _inputs(size, False),
        variants=variants,
        headline=("triton_naive", "triton_flash"),
        bytes=nbytes,
        flops=flops,
        compute_dtype=dtype,
        notes=("bytes counts only q, k, v, o (the fused minimum): the naive version also writes and reads "
               "the 4 B H S^2-byte fp32 score matrix (16 B H S^2 bytes of traffic), which is why it loses. "
               "triton_flash_fwd_only: attention/forward.py, the one-kernel forward with every "
               "block masked and one fixed tile; triton_flash: the full kernel's forward (flash_blocked, pointer loads); "
               "triton_flash_tma: flash_tma, the same forward with every tile moved by TMA (sm_90)."),
    )


NAIVE_VS_FUSED = _naive_benchmark()
BENCHMARKS = [
    _attention_benchmark(128, False, False), _attention_benchmark(128, True, False),
    _attention_benchmark(128, False, True), _attention_benchmark(128, True, True),
    _attention_benchmark(64, False, False), _attention_benchmark(64, True, False),
    _attention_benchmark(64, False, True), _attention_benchmark(64, True, True),
    NAIVE_VS_FUSED,
]


# =============================================================================== the ladder
# `python -m course rung attention [N]` (course/rungs.py): the forward, one idea per rung, each run
# checked against SDPA on the same inputs, then timed beside it. Non-causal bf16 at D = 128.
# rel_tol, the norm-wise relative error ||out - sdpa|| / ||sdpa|| a correct rung stays under: every
# rung and SDPA round their output to bf16 (unit roundoff u = 2^-8), <= u each, so <= 2u apart; every
# rung rounds P to bf16 before P @ V (<= u relative on each term of a row's sum, so <= u on the row);
# the fp32 sums over S keys add about S * 2^-24 (<= 2^-11 at S = 8192). That is under 3.5u; 4u = 2^-6
# leaves the margin, while a missed rescale, mask or tail block moves the error to order 1. (The
# simulation runs fp16, u = 2^-11: the same bound holds with more room.)
LADDERS = [
    Ladder("attention", NAIVE_VS_FUSED, [
        Rung("triton_naive", "three kernels: scores written to HBM in fp32, softmax in place, then P @ V "
                             "(attention/naive.py)"),
        Rung("triton_flash_fwd_only", "one kernel: online softmax over K/V blocks, the scores never leave "
                                          "the chip (attention/forward.py)"),
        Rung("triton_flash", "+ mask-free blocks off the diagonal, exp2, autotuned tiles, launch plans kept "
                             "per shape (attention/flash.py's forward)"),
    ] + ([Rung("triton_flash_tma", "+ Q, K, V and O moved by the TMA copy engine through descriptors built "
                                   "on the device, one tile (attention/tma.py; sm_90 and later)")]
         if supported_here() else []), rel_tol=4 * 2.0**-8),
]


# ------------------------------------------------------------------------ as a model calls it
# GPT-2 small's attention (B = 8 sequences of S = 1024, H = 12 heads of D = 64, causal), the
# shape the capstone trains at; (1, 12, 64, 64) is a short prompt, where the host sets the pace.
# No torch.compile row: compiling SDPA does not change its kernel. The baselines are SDPA's
# default pick (cuDNN on the H100) and its FlashAttention-2 backend.
TRAIN_SIZES, TRAIN_SIM_SIZES = [(8, 12, 1024, 64)], [(1, 2, 32, 16)]
HOST_SIZES, HOST_SIM_SIZES = [(1, 12, 64, 64)], [(1, 2, 16, 16)]


def _model_inputs(size, requires_grad):
    dtype = bench_dtype()
    q, k, v = (random_tensor(size, dtype, DEVICE).requires_grad_(requires_grad) for _ in range(3))
    return (q, k, v, random_tensor(size, dtype, DEVICE)) if requires_grad else (q, k, v)


def _model_label(size):
    return "x".join(str(n) for n in size)


def _public_entry(q, k, v, causal):
    return flash_attention(q, k, v, causal)


BENCHMARKS += [
    Benchmark(
        name="attention_train_week4",
        title="Attention forward + backward through autograd at GPT-2 small's shape, causal, bf16 "
              "(fp32 in simulation), B x H x S x D",
        sizes=TRAIN_SIZES, sim_sizes=TRAIN_SIM_SIZES, size_label=_model_label,
        make_inputs=lambda size: _model_inputs(size, True),
        variants={"torch": _forward_backward(sdpa(), True),
                  "sdpa_flash": _forward_backward(sdpa(sdpa_backends()["sdpa_flash"]), True),
                  "triton": _forward_backward(_public_entry, True),
                  **(hopper_variants(_forward_backward, True, True) if hopper_here() else {})},
        gpu_only=("hopper",),
        # rows *_graph: the GPU time alone, as a captured step sees it
        graphed=("torch", "triton") + (("hopper",) if hopper_here() else ()),
        headline=("triton", "sdpa_flash"),
        bytes=lambda s: 12 * math.prod(s) * bench_dtype().itemsize,
        flops=lambda s: attention_flops(s[0], s[1], s[2], s[2], s[3], True, True),
        compute_dtype=torch.bfloat16,
        notes="out = attention(q, k, v), then torch.autograd.grad(out, (q, k, v), dO): the public entry "
              "(flash_attention / F.scaled_dot_product_attention), autograd and every launch included; "
              "torch = SDPA's default backend (cuDNN on the H100), sdpa_flash = its FlashAttention-2; "
              "flops and bytes as in attention_fwdbwd_*. Events time the call as the GPU sees it, host gaps "
              "included: at this shape the GPU work is ~0.2 ms for triton and cuDNN alike (torch.profiler, "
              "H100, 2026-11-26), so a call that costs the host more than that (4 launches, and autograd "
              "handing a Python backward to its CUDA thread) is timed at the host's pace" + HOPPER_NOTE,
    ),
    Benchmark(
        name="attention_host_week4",
        title="Attention forward: host cost per call at a short-prompt size, causal, bf16 (fp32 in "
              "simulation), B x H x S x D",
        sizes=HOST_SIZES, sim_sizes=HOST_SIM_SIZES, size_label=_model_label,
        make_inputs=lambda size: _model_inputs(size, False),
        variants={"torch": lambda q, k, v: sdpa()(q, k, v, True),
                  "triton": lambda q, k, v: flash_attention(q, k, v, True),
                  "triton_tma": lambda q, k, v: flash_attention_tma_forward(q, k, v, True)[0]},
        headline=("triton",),
        clock="wall",
        bytes=lambda s: 0,
        notes="ms = wall time of 300 calls / 300, then one synchronize: the host's cost per call "
              "(argument checks, allocation, the launch), the GPU work being a few us; torch = "
              "F.scaled_dot_product_attention; triton = flash_attention (the public entry; no input "
              "needs a gradient, so no autograd on either side; below dispatch.MIN_TMA_SCORES it runs flash_blocked); "
              "triton_tma = flash_tma called directly (flash_attention_tma_forward): four tensor descriptors built per call",
    ),
]


# =============================================================================== sweep
def time_ms(fn, warmup=10, rep=40):
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep)


def _cfg_label(cfg):
    kw = config_kwargs(cfg)
    return f"M{kw['BLOCK_M']:>3} N{kw['BLOCK_N']:>3} w{kw.get('num_warps', 4)} s{kw.get('num_stages', 3)}"


def attempt(fn):
    try:
        return fn(), None
    except Exception as error:  # a config that does not compile (shared memory, registers) is a result
        return None, f"{type(error).__name__}: {str(error).splitlines()[0][:60] if str(error) else ''}"


def _sdpa_times(label, q, k, v, do, causal):
    fn = sdpa(sdpa_backends()[label])
    fwd, err = attempt(lambda: time_ms(lambda: fn(q, k, v, causal)))
    if err:
        return None, None, err
    out = fn(q, k, v, causal)
    bwd, err = attempt(lambda: time_ms(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)))
    return fwd, bwd, err


def _max_err(got, want):
    return max((g.float() - w.float()).abs().max().item() for g, w in zip(got, want))


class _Problem:
    """One (causal, S) point of the sweep: inputs, FLOP counts, and launchers for each kernel."""

    def __init__(self, seq, head_dim, dtype, causal):
        self.seq, self.head_dim, self.causal = seq, head_dim, causal
        self.batch = batch_for(seq)
        shape = (self.batch, HEADS, seq, head_dim)
        self.q, self.k, self.v, self.do = (random_tensor(shape, dtype, DEVICE) for _ in range(4))
        for t in (self.q, self.k, self.v):
            t.requires_grad_(True)
        self.scale = 1 / math.sqrt(head_dim)
        self.flops_fwd = attention_flops(self.batch, HEADS, seq, seq, head_dim, causal)
        self.flops_bwd = 2.5 * self.flops_fwd
        self.tag = f"{'causal' if causal else 'full  '} S={seq:>5} B={self.batch:>3}"
        self.dq, self.dk, self.dv = (torch.empty_like(t) for t in (self.q, self.k, self.v))
        self.dq_acc = torch.zeros(shape, dtype=torch.float32, device=DEVICE)

    def forward(self, cfg):
        return flash_attention_forward(self.q, self.k, self.v, self.causal, self.scale, config=cfg)

    def prepare_backward(self, cfg):
        with torch.no_grad():
            self.out, self.lse = self.forward(cfg)
        self.delta = backward_delta(self.out, self.do, self.lse.dtype)

    def _common(self):
        return dict(CAUSAL=self.causal, HAS_KEY_LENGTHS=False, DOT_PRECISION="tf32", HEAD_DIM=self.head_dim)

    def kv(self, cfg, atomic=False):
        kw = config_kwargs(cfg)
        q, k, v, S = self.q, self.k, self.v, self.seq
        if atomic:
            self.dq_acc.zero_()
        flash_attention_bwd_dkdv_kernel[(triton.cdiv(S, kw["BLOCK_N"]), self.batch * HEADS)](
            q, k, v, self.do, self.lse, self.delta, self.dk, self.dv, self.dq_acc,
            self.lse, HEADS, S, S, self.scale, self.scale * LOG2E, 0,
            *q.stride(), *k.stride(), *v.stride(), *self.do.stride(), *self.dk.stride(), *self.dv.stride(),
            ATOMIC_DQ=atomic, **self._common(), **kw)
        if atomic:
            self.dq.copy_(self.dq_acc)

    def dq_kernel(self, cfg):
        kw = config_kwargs(cfg)
        q, k, v, S = self.q, self.k, self.v, self.seq
        flash_attention_bwd_dq_kernel[(triton.cdiv(S, kw["BLOCK_M"]), self.batch * HEADS)](
            q, k, v, self.do, self.lse, self.delta, self.dq, self.lse, HEADS, S, S, self.scale,
            self.scale * LOG2E, 0, *q.stride(), *k.stride(), *v.stride(), *self.do.stride(), *self.dq.stride(),
            **self._common(), **kw)


def sweep(head_dim=128, dtype=torch.bfloat16, seq_lens=(1024, 4096, 16384), quick=False, stream=sys.stdout):
    """Time every config of every kernel beside SDPA's flash and cuDNN backends; print a table.

    At the first sequence length each config's result is also compared with SDPA's flash
    backend (output for the forward, dQ/dK/dV for the backward kernels): `err` is the largest
    absolute difference, which should be ~1e-2 or less in bf16 for unit-variance inputs.
    """
    if not runtime.on_gpu():
        raise SystemExit("--sweep times kernels on a GPU; this machine runs the Triton interpreter")
    import time

    t0 = time.time()
    say = lambda text: print(text, file=stream, flush=True)  # noqa: E731
    tflops = lambda flops, ms: flops / (ms * 1e-3) / 1e12  # noqa: E731
    fwd_cfgs, kv_cfgs, q_cfgs = (configs_for(c, head_dim) for c in (FWD_CONFIGS, BWD_KV_CONFIGS, BWD_Q_CONFIGS))
    if quick:
        fwd_cfgs, kv_cfgs, q_cfgs = fwd_cfgs[:4], kv_cfgs[:3], q_cfgs[:3]
    atomic_cfgs = kv_cfgs[:3]  # the atomic kernel is the dK/dV kernel plus one matmul: its best tiles
    props = torch.cuda.get_device_properties(0)
    say(f"# flash attention sweep: {props.name}, torch {torch.__version__}, triton {triton.__version__}, "
        f"{str(dtype).replace('torch.', '')}, D={head_dim}, B*H*S={TOKENS}, H={HEADS}")
    say("# TFLOP/s: fwd 4BHS^2D (x0.5 causal); bwd 2.5x fwd. err: max |ours - sdpa_flash| (first S only)")
    summary = []
    for causal in (False, True):
        for seq in seq_lens:
            pb = _Problem(seq, head_dim, dtype, causal)
            check = seq == seq_lens[0]
            base = {}
            for label in ("sdpa_flash", "sdpa_cudnn"):
                fwd, bwd, err = _sdpa_times(label, pb.q, pb.k, pb.v, pb.do, causal)
                base[label] = (fwd, bwd)
                if err:
                    say(f"{pb.tag} {label:<12} failed: {err}")
                else:
                    say(f"{pb.tag} {label:<12} fwd {fwd:8.3f} ms {tflops(pb.flops_fwd, fwd):6.1f} TFLOP/s | "
                        f"bwd {bwd:8.3f} ms {tflops(pb.flops_bwd, bwd):6.1f} TFLOP/s")
            if check:
                ref_out = sdpa(sdpa_backends()["sdpa_flash"])(pb.q, pb.k, pb.v, causal)
                ref_grads = torch.autograd.grad(ref_out, (pb.q, pb.k, pb.v), pb.do)
                ref_out = ref_out.detach()
            err_text = lambda e: f"err {e:.1e}" if check else ""  # noqa: E731

            best_fwd = (math.inf, None)
            for cfg in fwd_cfgs:
                ms, err = attempt(lambda: time_ms(lambda: pb.forward(cfg)))
                if err:
                    say(f"{pb.tag} fwd    {_cfg_label(cfg)} failed: {err}")
                    continue
                e = _max_err([pb.forward(cfg)[0]], [ref_out]) if check else 0.0
                best_fwd = min(best_fwd, (ms, cfg), key=lambda x: x[0])
                say(f"{pb.tag} fwd    {_cfg_label(cfg)} {ms:8.3f} ms {tflops(pb.flops_fwd, ms):6.1f} TFLOP/s  "
                    f"{err_text(e)}")
            if best_fwd[1] is None:
                continue
            pb.prepare_backward(best_fwd[1])
            ms_delta = time_ms(lambda: backward_delta(pb.out, pb.do, pb.lse.dtype))
            best = {}
            for kind, cfgs, launch, outputs in (
                    ("bwd_kv", kv_cfgs, lambda c: pb.kv(c), lambda: ((pb.dk, pb.dv), ref_grads[1:] if check else None)),
                    ("bwd_q", q_cfgs, pb.dq_kernel, lambda: ((pb.dq,), ref_grads[:1] if check else None)),
                    ("atomic", atomic_cfgs, lambda c: pb.kv(c, atomic=True),
                     lambda: ((pb.dq, pb.dk, pb.dv), ref_grads if check else None))):
                best[kind] = (math.inf, None)
                for cfg in cfgs:
                    ms, err = attempt(lambda: time_ms(lambda: launch(cfg)))
                    if err:
                        say(f"{pb.tag} {kind:<6} {_cfg_label(cfg)} failed: {err}")
                        continue
                    e = 0.0
                    if check:
                        launch(cfg)
                        got, want = outputs()
                        e = _max_err(got, want)
                    best[kind] = min(best[kind], (ms, cfg), key=lambda x: x[0])
                    note = " (zero + kernel + fp32->bf16 copy)" if kind == "atomic" else ""
                    say(f"{pb.tag} {kind:<6} {_cfg_label(cfg)} {ms:8.3f} ms  {err_text(e)}{note}")
            split_ms = ms_delta + best["bwd_kv"][0] + best["bwd_q"][0]
            atomic_ms = ms_delta + best["atomic"][0]
            flash_f, flash_b = base["sdpa_flash"]
            cudnn_f, cudnn_b = base["sdpa_cudnn"]
            ratio = lambda ours, theirs: f"{theirs / ours:.2f}x" if theirs and ours < math.inf else "-"  # noqa: E731
            rate = lambda flops, ms: f"{tflops(flops, ms):6.1f}" if ms and ms < math.inf else "     -"  # noqa: E731
            summary.append(
                f"{pb.tag} fwd {rate(pb.flops_fwd, best_fwd[0])} TFLOP/s ({_cfg_label(best_fwd[1])}) "
                f"= {ratio(best_fwd[0], flash_f)} flash, {ratio(best_fwd[0], cudnn_f)} cudnn | "
                f"bwd split {rate(pb.flops_bwd, split_ms)} = {ratio(split_ms, flash_b)} flash "
                f"[kv {_cfg_label(best['bwd_kv'][1]) if best['bwd_kv'][1] else '-'}; "
                f"q {_cfg_label(best['bwd_q'][1]) if best['bwd_q'][1] else '-'}], "
                f"atomic {rate(pb.flops_bwd, atomic_ms)} = {ratio(atomic_ms, flash_b)} flash, "
                f"cudnn bwd {rate(pb.flops_bwd, cudnn_b)} TFLOP/s; delta kernel {ms_delta:.3f} ms")
            del pb
            torch.cuda.empty_cache()
    say("\n# summary (targets: fwd >= 1.00x sdpa_flash, bwd >= 0.80x sdpa_flash); bwd = delta + kernels")
    for line in summary:
        say(line)
    _memory_line(head_dim, dtype, say)
    say(f"# sweep took {time.time() - t0:.0f} s")


def _memory_line(head_dim, dtype, say, seq=4096):
    """Peak extra memory of the naive and the fused forward, measured, beside the model."""
    from week4_triton_dl.attention.naive import naive_scores_bytes

    batch = batch_for(seq)
    q, k, v = (random_tensor((batch, HEADS, seq, head_dim), dtype, DEVICE) for _ in range(3))
    results = {}
    for label, fn in (("naive", lambda: attention_naive(q, k, v)), ("fused", lambda: flash_attention(q, k, v))):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        results[label] = torch.cuda.max_memory_allocated() - before - out.numel() * out.element_size()
        del out
    say(f"# extra memory at S={seq}, B*H={batch * HEADS}: naive {results['naive'] / 2**30:.2f} GiB "
        f"(model {naive_scores_bytes(batch, HEADS, seq, seq) / 2**30:.2f} GiB of fp32 scores), "
        f"fused {results['fused'] / 2**20:.2f} MiB (log-sum-exp: {batch * HEADS * seq * 4 / 2**20:.2f} MiB)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="time every config beside SDPA (GPU)")
    parser.add_argument("--head-dim", type=int, default=128, choices=HEAD_DIMS)
    parser.add_argument("--seq", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--quick", action="store_true", help="a few configs only")
    args = parser.parse_args(argv)
    if not args.sweep:
        parser.print_help()
        return 0
    sweep(head_dim=args.head_dim, dtype=getattr(torch, args.dtype), seq_lens=tuple(args.seq), quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
