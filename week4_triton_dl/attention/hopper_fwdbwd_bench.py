"""Forward + backward as one training step: the Hopper rung vs SDPA's cuDNN vs the Triton op, in interleaved rounds.

    python -m week4_triton_dl.attention.hopper_fwdbwd_bench            (H100/H200; writes results/)
    python -m week4_triton_dl.attention.hopper_fwdbwd_bench --quick    (3 sizes, 3 rounds: its own record)

What a model pays for attention in a training step is neither half alone: it is out = attention(q, k, v)
and then the backward from dO, each with its launches and autograd's bookkeeping. Issue 33's second
target is that pair (>= 0.9x cuDNN at D = 128, >= 1.0x at GPT-2's shape), and hopper_bench.py and
hopper_backward_bench.py time only the halves. Here every variant is one call,

    out = attention(q, k, v, causal); dq, dk, dv = torch.autograd.grad(out, (q, k, v), dO)

on the same q, k, v (requiring grad, contiguous (B, H, S, D)) and dO:
* torch:  F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.CUDNN_ATTENTION): cuDNN's fused
          forward and backward (where cuDNN refuses a shape, the rows say so);
* triton: week4_triton_dl.attention.flash_attention, the public op, with a Triton forward: its dispatch's
          choice, except where that is this rung (D = 128 causal on an H100, results/dispatch_attention.json),
          where it is flash_tma with its default tile; then the split backward;
* hopper: week4_triton_dl.attention.hopper.attention_hopper, the CUDA C rung: its forward op saves o and
          lse, its autograd calls the backward op (attention/hopper_backward.py's kernels).

Rounds, graph replay of host-paced rounds, the longer timing of short sizes and the rows' fields are
hopper_backward_bench.py's (its docstring says why). FLOPs: forward + backward = 3.5 x the forward's
4 B H S^2 D (the backward counted as 2.5 x, recomputation not counted), halved when causal: the count
week 4's attention_fwdbwd_* records use. Each size also records the largest |dq| difference of one call
of hopper and triton against cuDNN (a smoke of the wiring, not a test: tests/week4 test the kernels).

Writes results/attention_hopper_fwdbwd_week4.{json,md} (--quick: attention_hopper_fwdbwd_quick.*).
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from course import bench, runtime  # runtime first: chooses the GPU or simulation
from course.check import random_tensor
from week4_triton_dl.attention.hopper import attention_hopper, device_refusal
from week4_triton_dl.attention.hopper_backward_bench import markdown
from week4_triton_dl.attention.hopper_bench import (
    SHORT_FLOPS,
    SHORT_REP_MS,
    SHORT_ROUNDS,
    timed_row,
    triton_attention,
)

PROG = "python -m week4_triton_dl.attention.hopper_fwdbwd_bench"
NAME = "attention_hopper_fwdbwd_week4"
RESULTS = Path(__file__).resolve().parent.parent / "results"
TOKENS = 16 * 1024
# (B, H, S, D, causal): FlashAttention-3's shapes (B * S = 16k tokens, 16 heads of 128), then GPT-2's
SIZES = [(TOKENS // s, 16, s, 128, c) for s in (1024, 2048, 4096, 8192, 16384) for c in (False, True)] \
    + [(8, 12, 1024, 64, True)]
QUICK_SIZES = [(16, 16, 1024, 128, False), (4, 16, 4096, 128, True), (8, 12, 1024, 64, True)]
DTYPE = torch.bfloat16
BACKWARD_FACTOR = 3.5  # forward + backward FLOPs over the forward's


def size_label(size) -> str:
    B, H, S, D, causal = size
    return f"B{B} H{H} S{S} D{D} {'causal' if causal else 'full'}"


def flops(size) -> float:
    B, H, S, D, causal = size
    return BACKWARD_FACTOR * 4 * B * H * S * S * D * (0.5 if causal else 1.0)


def plan(size, rounds: int, rep_ms: float) -> tuple[int, float]:
    """(rounds, rep_ms) of one size: a short size's (under SHORT_FLOPS) at least SHORT_ROUNDS and SHORT_REP_MS."""
    if flops(size) < SHORT_FLOPS:
        return max(rounds, SHORT_ROUNDS), max(rep_ms, SHORT_REP_MS)
    return rounds, rep_ms


def make_inputs(size, dtype=DTYPE):
    """(q, k, v requiring grad, dO, causal): one input set."""
    B, H, S, D, causal = size
    q, k, v = (random_tensor((B, H, S, D), dtype, runtime.DEVICE).requires_grad_() for _ in range(3))
    return q, k, v, random_tensor((B, H, S, D), dtype, runtime.DEVICE), causal


def _sdpa_cudnn(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def training_step(attention):
    """One call of forward + backward, as a model's step makes it: (dq, dk, dv)."""
    def step(q, k, v, do, causal):
        out = attention(q, k, v, causal)
        return torch.autograd.grad(out, (q, k, v), do)
    return step


VARIANTS = {
    "torch": training_step(_sdpa_cudnn),
    "triton": training_step(triton_attention),
    "hopper": training_step(lambda q, k, v, causal: attention_hopper(q, k, v, causal)),
}


def refusals(variants: dict, args) -> tuple[dict, dict, dict]:
    """One call of each variant on one input set: (the variants that ran, {label: why not}), and
    the dq each returned (for the smoke difference)."""
    kept, refused, dq = {}, {}, {}
    for label, fn in variants.items():
        try:
            dq[label] = fn(*args)[0]
            kept[label] = fn
        except (RuntimeError, ValueError, TypeError) as error:  # cuDNN refusing a shape, a missing build
            refused[label] = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
    return kept, refused, dq


def measure(size, rounds: int, rep_ms: float, variants: dict | None = None) -> list[dict]:
    """The rows of one size: every variant timed once per round, in turn (graph-replayed where the host
    paced the loop); ratios within rounds, of the GPU's times."""
    rounds, rep_ms = plan(size, rounds, rep_ms)
    sets = bench.input_sets(make_inputs, size)
    kept, refused, dq = refusals(VARIANTS if variants is None else variants, sets[0])
    timed = bench.interleaved_rounds(
        kept, rounds, lambda fn, sets=sets: bench.time_gpu(fn, sets, warmup_ms=5, rep_ms=rep_ms, graph=True))
    diffs = {label: (dq[label].float() - dq["torch"].float()).abs().max().item()
             for label in dq if label != "torch" and "torch" in dq}
    del sets, dq
    torch.cuda.empty_cache()
    rows = []
    for label in timed.ms:
        row = timed_row(timed, label, size_label(size), rounds, rep_ms, flops(size))
        ratio = timed.ratio_range("hopper", "triton", gpu=True)
        if label == "hopper" and ratio:  # > 1: the CUDA C rung is the faster
            row.update(zip(("speedup_vs_triton", "speedup_vs_triton_min", "speedup_vs_triton_max"), ratio))
        if label in diffs:
            row["max_abs_dq_diff_vs_torch"] = diffs[label]
        rows.append(row)
    for label, why in refused.items():
        rows.append({"size": size_label(size), "variant": label, "ms": None, "note": f"refused: {why}"})
    return rows


def notes(rounds: int, rep_ms: float) -> str:
    short, short_rep = plan(SIZES[-1], rounds, rep_ms)
    return (f"forward + backward as one call, bf16: out = attention(q, k, v), then torch.autograd.grad(out, (q, k, v), "
            f"dO); torch = SDPA's cuDNN backend, triton = flash_attention (the week's op) with a Triton forward (flash_tma "
            f"where its dispatch would run this rung), hopper = attention_hopper "
            f"(the CUDA C forward and backward). {rounds} rounds ({short} of ~{short_rep:.0f} ms at sizes under "
            f"{SHORT_FLOPS / 1e9:.0f} GFLOP), each timing every variant once in turn (CUDA events, median "
            f"of ~{rep_ms:.0f} ms of calls); ms = the events' median over rounds (* where the host paced a round: the "
            f"host's time); GPU ms (graph) = the host-paced rounds' calls replayed from a CUDA graph, the GPU's time "
            f"alone; TFLOP/s and every ratio use each round's GPU time (the graph replay's where the host paced the "
            f"round, the events' where the GPU did); vs cuDNN = median over rounds of (cuDNN GPU ms / variant GPU ms) "
            f"in the same round; FLOPs = {BACKWARD_FACTOR} x 4 B H S^2 D, halved when causal; the hopper rows' "
            f"speedup_vs_triton (json) = median over rounds of (triton GPU ms / hopper GPU ms); "
            f"max_abs_dq_diff_vs_torch (json): one call's largest |dq - cuDNN's dq|")


def run(sizes, rounds: int, rep_ms: float, name: str = NAME) -> dict:
    why = "no GPU" if not runtime.on_gpu() else device_refusal(torch.device("cuda"))
    if why:
        raise RuntimeError(f"this benchmark times sm_90a kernels on an H100/H200: {why}")
    copy_gbps = bench.copy_bandwidth_gbps()
    rows = []
    for size in sizes:
        print(f"[bench] {size_label(size)}", file=sys.stderr, flush=True)
        rows += measure(size, rounds, rep_ms)
    return {
        "benchmark": name,
        "title": "Attention forward + backward in one call: the Hopper CUDA C rung vs cuDNN (SDPA) vs week 4's "
                 "Triton op (interleaved rounds)",
        "notes": notes(rounds, rep_ms),
        "clock": "events",
        "headline": ["hopper"],
        "simulated": False,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": runtime.describe(),
        "ceilings": {"copy_gbps": copy_gbps},
        "rows": rows,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="3 sizes, 3 rounds (a smoke run; writes results/attention_hopper_fwdbwd_quick.*)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per size (default 5; 3 with --quick)")
    parser.add_argument("--rep-ms", type=float, default=30.0, help="timing budget per variant per round, ms")
    parser.add_argument("--out", default=str(RESULTS), help="folder for the results files")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 5)
    result = run(QUICK_SIZES if args.quick else SIZES, rounds, args.rep_ms,
                 "attention_hopper_fwdbwd_quick" if args.quick else NAME)
    text = markdown(result)
    print(text)
    for path in bench.write_record(result, args.out, text):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
