"""The Hopper attention backward beside cuDNN's and week 4's Triton backward, in interleaved rounds.

    python -m week4_triton_dl.attention.hopper_backward_bench            (H100/H200; writes results/)
    python -m week4_triton_dl.attention.hopper_backward_bench --quick    (fewer sizes and rounds)

What is timed: the BACKWARD ALONE, each variant from the same q, k, v, dO:
* torch: SDPA's cuDNN backend (torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)). Its forward
  runs once, outside the timing, with q, k, v requiring grad; each timed call is
  torch.autograd.grad(out, (q, k, v), dO, retain_graph=True), so only the backward kernels (and
  autograd's small host cost) are in it. Where cuDNN refuses a shape, its cells say so.
* triton: week 4's flash_attention_backward (split strategy, autotuned) on the Triton forward's o and lse.
* hopper: attention_hopper_backward (kernels/attention_hopper_backward.cu) on the same o and lse; dQ added
  by TMA reduce-adds of shared-memory tiles.
* hopper_atomics: the same kernel built with -DAHB_DQ_TMA=0 (dq_tma=False): dQ added by per-element float2
  atomics from registers, the previous rung. Timed in the same rounds as hopper: their ratio is the price
  (or the gain) of the reduce-add.

Why rounds (matmul_wgmma_persistent_bench.py says it at length): every round times each variant once in
turn, and a ratio is taken within a round, so clock drift lands on all alike; the row's ms is the median
over rounds, its ratio the median of the rounds' ratios with their min and max beside it.

Host-paced rounds (hopper_bench.py says why): where the host paced a round's loop, time_gpu replays its
calls from a CUDA graph, and that round's ratios and the row's TFLOP/s use the replay's time (the GPU's)
instead of the events' (the host's); the table shows both. The capstone's shape, the shortest, gets at
least hopper_bench's SHORT_ROUNDS rounds of SHORT_REP_MS per variant, in quick mode too.

Sizes: D = 128, S = 1k .. 16k with B * S = 16k tokens and H = 16 (FlashAttention-3's benchmark shapes),
causal and not; and GPT-2's B = 8, H = 12, S = 1024, D = 64, causal. bf16. FLOPs counted as the
FlashAttention papers count a backward: 2.5 x the forward's 4 B H S^2 D, halved when causal.

Writes results/attention_hopper_backward_week4.json and .md (course.bench.write_record).
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from course import bench, bench_timing, runtime  # runtime first: chooses the GPU or simulation
from course.check import random_tensor
from week4_triton_dl.attention.backward import flash_attention_backward
from week4_triton_dl.attention.op import flash_attention_forward
from week4_triton_dl.attention.hopper_backward import attention_hopper_backward, unsupported
from week4_triton_dl.attention.hopper_bench import SHORT_FLOPS, SHORT_REP_MS, SHORT_ROUNDS, timed_row

PROG = "python -m week4_triton_dl.attention.hopper_backward_bench"
NAME = "attention_hopper_backward_week4"
RESULTS = Path(__file__).resolve().parent.parent / "results"
TOKENS = 16 * 1024
SIZES = [(TOKENS // s, 16, s, 128, c) for s in (1024, 2048, 4096, 8192, 16384) for c in (False, True)] \
    + [(8, 12, 1024, 64, True)]
QUICK_SIZES = [(TOKENS // s, 16, s, 128, c) for s in (1024, 4096) for c in (False, True)] + [(8, 12, 1024, 64, True)]
DTYPE = torch.bfloat16


def size_label(size) -> str:
    B, H, S, D, causal = size
    return f"B{B} H{H} S{S} D{D} {'causal' if causal else 'full'}"


def flops(size) -> float:
    B, H, S, D, causal = size
    return 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1.0)


def plan(size, rounds: int, rep_ms: float) -> tuple[int, float]:
    """(rounds, rep_ms) of one size: a short size's (under SHORT_FLOPS) at least SHORT_ROUNDS and SHORT_REP_MS."""
    if flops(size) < SHORT_FLOPS:
        return max(rounds, SHORT_ROUNDS), max(rep_ms, SHORT_REP_MS)
    return rounds, rep_ms


def make_inputs(size):
    """(q, k, v detached, dO, cuDNN's out (graph kept) or None, the Triton forward's o and lse, causal)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, H, S, D, causal = size
    q, k, v, do = (random_tensor((B, H, S, D), DTYPE, runtime.DEVICE) for _ in range(4))
    o, lse = flash_attention_forward(q, k, v, causal)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
    except RuntimeError as error:  # cuDNN not built in, or this shape refused
        print(f"[bench] cuDNN SDPA refused {size_label(size)}: {str(error).splitlines()[0]}", file=sys.stderr)
        out = None
    return q, k, v, do, (out, qg, kg, vg), o, lse, causal


def _cudnn(q, k, v, do, graph, o, lse, causal):
    out, qg, kg, vg = graph
    return torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)


VARIANTS = {
    "torch": _cudnn,
    "triton": lambda q, k, v, do, graph, o, lse, causal: flash_attention_backward(do, q, k, v, o, lse, causal),
    "hopper": lambda q, k, v, do, graph, o, lse, causal: attention_hopper_backward(q, k, v, o, do, lse, causal,
                                                                                   q.shape[-1] ** -0.5),
    "hopper_atomics": lambda q, k, v, do, graph, o, lse, causal: attention_hopper_backward(
        q, k, v, o, do, lse, causal, q.shape[-1] ** -0.5, dq_tma=False),
}


def measure(size, rounds: int, rep_ms: float) -> list[dict]:
    """The rows of one size: every variant timed once per round, in turn (graph-replayed where the host
    paced the loop); ratios within rounds, of the GPU's times."""
    rounds, rep_ms = plan(size, rounds, rep_ms)
    sets = bench.input_sets(make_inputs, size)
    variants = dict(VARIANTS)
    if any(s[4][0] is None for s in sets):
        variants.pop("torch")
    timed = bench.interleaved_rounds(
        variants, rounds, lambda fn, sets=sets: bench.time_gpu(fn, sets, warmup_ms=5, rep_ms=rep_ms, graph=True))
    del sets
    torch.cuda.empty_cache()
    rows = []
    for label in timed.ms:
        row = timed_row(timed, label, size_label(size), rounds, rep_ms, flops(size))
        ratio = timed.ratio_range("hopper", "hopper_atomics", gpu=True)
        if label == "hopper" and ratio:  # > 1: the reduce-add build is the faster
            row.update(zip(("speedup_vs_atomics", "speedup_vs_atomics_min", "speedup_vs_atomics_max"), ratio))
        rows.append(row)
    if "torch" not in timed.ms:
        rows.append({"size": size_label(size), "variant": "torch", "ms": None, "note": "cuDNN refused this shape"})
    return rows


def markdown(result: dict) -> str:
    head = ("| size | variant | ms (median) | GPU ms (graph) | TFLOP/s | vs cuDNN (median of rounds) "
            "| min - max over rounds | ms spread |\n|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in result["rows"]:
        if r["ms"] is None:
            lines.append(f"| {r['size']} | {r['variant']} | {r['note']} | | | | | |")
            continue
        vs = (f"{r['speedup_vs_torch']:.3f}x | {r['speedup_min']:.3f}x - {r['speedup_max']:.3f}x"
              if "speedup_vs_torch" in r else "- | -")
        lines.append(f"| {r['size']} | {r['variant']} | {bench_timing.mark(format(r['ms'], '.4f'), r)} "
                     f"| {bench.fmt(r.get('graphed_ms'), '.4f')} | {bench.fmt(r.get('tflops'), '.0f')} | {vs} "
                     f"| {r['spread_pct']:.1f}% |")
    return (f"**{result['title']}**: {bench.measured_on(result)}.\n\n{head}" + "\n".join(lines) + f"\n\n{result['notes']}\n"
            + bench_timing.footnote(result["rows"]))


def run(sizes, rounds: int, rep_ms: float) -> dict:
    why = unsupported(runtime.capability()) if runtime.on_gpu() else "no GPU"
    if why:
        raise RuntimeError(f"this benchmark times sm_90a kernels on an H100/H200: {why}")
    copy_gbps = bench.copy_bandwidth_gbps()
    rows = []
    short, short_rep = plan(SIZES[-1], rounds, rep_ms)
    for size in sizes:
        print(f"[bench] {size_label(size)}", file=sys.stderr, flush=True)
        rows += measure(size, rounds, rep_ms)
    return {
        "benchmark": NAME,
        "title": "Attention backward: the Hopper CUDA C kernels vs cuDNN (SDPA) vs week 4's Triton (interleaved rounds)",
        "notes": (f"backward alone, bf16; torch = SDPA's cuDNN backend, timed as torch.autograd.grad(out, (q, k, v), dO, "
                  f"retain_graph=True) on a forward run once outside the timing; triton = flash_attention_backward; "
                  f"hopper = attention_hopper_backward (dQ by TMA reduce-adds into fp32 + convert included); "
                  f"hopper_atomics = the same built with -DAHB_DQ_TMA=0 (dQ by per-element fp32 atomics); all on the "
                  f"Triton forward's o and lse. {rounds} rounds ({short} of ~{short_rep:.0f} ms at sizes under "
                  f"{SHORT_FLOPS / 1e9:.0f} GFLOP), each timing every variant once in turn (CUDA events, median "
                  f"of ~{rep_ms:.0f} ms of calls); ms = the events' median over rounds (* where the host paced a round: the "
                  f"host's time); GPU ms (graph) = the host-paced rounds' calls replayed from a CUDA graph, the GPU's time "
                  f"alone; TFLOP/s and every ratio use each round's GPU time (the graph replay's where the host paced the "
                  f"round, the events' where the GPU did); vs cuDNN = median over rounds of (cuDNN GPU ms "
                  f"/ variant GPU ms) in the same round; FLOPs = 2.5 x 4 B H S^2 D, halved when causal; the hopper rows' "
                  f"speedup_vs_atomics (json) = median over rounds of (hopper_atomics GPU ms / hopper GPU ms) in the same round"),
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
    parser.add_argument("--quick", action="store_true", help="5 sizes, 3 rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per size (default 5; 3 with --quick)")
    parser.add_argument("--rep-ms", type=float, default=30.0, help="timing budget per variant per round, ms")
    parser.add_argument("--out", default=str(RESULTS), help="folder for the results files")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 5)
    result = run(QUICK_SIZES if args.quick else SIZES, rounds, args.rep_ms)
    text = markdown(result)
    print(text)
    for path in bench.write_record(result, args.out, text):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
