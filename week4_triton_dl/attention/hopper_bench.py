"""The Hopper attention forward beside SDPA's cuDNN backend and the Triton op, in interleaved rounds.

    python -m week4_triton_dl.attention.hopper_bench            (H100/H200; writes results/attention_hopper.*)
    python -m week4_triton_dl.attention.hopper_bench --quick    (3 sizes, 3 rounds: results/attention_hopper_quick.*)

Variants, forward only, no autograd, the same q, k, v (B, H, S, D) contiguous:
* torch:  F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.CUDNN_ATTENTION), cuDNN's fused
          attention, the fastest torch backend on an H100 (where this torch build lacks it, the row
          is left out and the notes say so);
* triton: week4_triton_dl.attention.flash_attention, the public Triton op (its dispatch picks the
          rung and tile for this GPU; where it would pick this CUDA C rung, flash_tma: triton_attention);
* hopper: week4_triton_dl.attention.hopper.attention_hopper, the CUDA C rung (kernels/attention_hopper_forward.cu);
* hopper_overlap: the same kernel built with the intra-warpgroup overlap (-DAH_INTRA_OVERLAP=1: each
          consumer's softmax of key tile j under its own P V wgmma of tile j - 1), a row beside hopper;
* hopper_no_pingpong (with --variants): the same kernel built without the consumers' turn-taking;
* hopper_persistent, hopper_persistent_overlap (with --variants): the same kernel built persistent
          (-DAH_PERSISTENT=1: one block per SM walking the work tiles), alone and with the overlap;
* hopper_dynamic, hopper_dynamic_overlap (with --variants): the persistent builds with the dynamic scheduler
          (-DAH_DYNAMIC_TILES=1: the blocks draw their tiles from a global counter, causal longest first).

Sizes as FlashAttention-3's paper measures them (arXiv:2407.08608, section 4.1): head dim 128,
hidden 2048 (16 heads), batch chosen so that B * S = 16k tokens, S = 1k .. 16k, causal and not;
plus the capstone-like B = 8, H = 12, S = 1024, D = 64, causal. bf16 (--dtypes adds fp16).

Why rounds: the rate of a vendor kernel on one H100 moves by ~10% between runs (week 1's GEMM
bench, issue 32), so every round times each variant once, in turn, and the ratio to cuDNN is
taken within the round; a row gives the median over rounds and the min - max of the ratios.

Why graphs: at the capstone's shape a call is ~50 us of GPU work behind as much Python (SDPA's
dispatch, the ops' checks), so the host can pace the timed loop and the CUDA events then time the
host (course/bench_timing.py: the quick run of 2026-12-07 read 0.08-0.14 ms, and a ratio of 1.32x,
from two Pythons). time_gpu says when a round was host-paced and replays those calls from a CUDA
graph, the GPU's time alone; each round's ratios and TFLOP/s use that time where the host paced the
round and the events' where the GPU did (bench_timing.gpu_ms). A short size also gets more rounds
and a longer loop (SHORT_*): its times are the noisiest, and the extra cost is seconds.
FLOPs = 4 B H S^2 D (two GEMMs of 2 S^2 D per head), halved for causal: the count FA3 reports.
Each size also records the largest |hopper - cuDNN| of one call (a correctness smoke, not a test).
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from course import (  # runtime first: chooses the GPU or simulation
    bench,
    bench_timing,
    runtime,
)
from course.check import random_tensor
from week4_triton_dl.attention import dispatch
from week4_triton_dl.attention.hopper import (
    attention_hopper,
    attention_hopper_forward,
    device_refusal,
)
from week4_triton_dl.attention.op import flash_attention

PROG = "python -m week4_triton_dl.attention.hopper_bench"
NAME = "attention_hopper"
RESULTS = Path(__file__).resolve().parent.parent / "results"
TOKENS = 16 * 1024
# (B, H, S, D, causal)
SIZES = ([(TOKENS // s, 16, s, 128, c) for c in (False, True) for s in (1024, 2048, 4096, 8192, 16384)]
         + [(8, 12, 1024, 64, True)])
QUICK_SIZES = [(16, 16, 1024, 128, False), (4, 16, 4096, 128, True), (8, 12, 1024, 64, True)]
# A size under SHORT_FLOPS (calls under ~0.1 ms on an H100: the capstone's shape, 12.9 GFLOP) is timed in
# at least SHORT_ROUNDS rounds of SHORT_REP_MS per variant, in quick mode too.
SHORT_FLOPS, SHORT_ROUNDS, SHORT_REP_MS = 5e10, 7, 100.0


def _cudnn():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(SDPBackend.CUDNN_ATTENTION)


def _sdpa_cudnn(q, k, v, causal):
    with _cudnn():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def triton_attention(q, k, v, causal):
    """The week's op with a Triton forward: where its dispatch sends the call to this rung (the sweep's
    table names flash_hopper for D = 128 causal), flash_tma instead, so that `triton` never times the CUDA C
    kernel (until 2026-12-07 it did there: those rows of that day's records say so)."""
    if dispatch.choose(q, k, v, causal).rung == "flash_hopper":
        return flash_attention(q, k, v, causal, rung="flash_tma")
    return flash_attention(q, k, v, causal)


VARIANTS = {
    "torch": _sdpa_cudnn,
    "triton": triton_attention,
    "hopper": lambda q, k, v, causal: attention_hopper(q, k, v, causal),
    # The A/B of the intra-warpgroup overlap (a second build, -DAH_INTRA_OVERLAP=1): timed by default.
    "hopper_overlap": lambda q, k, v, causal: attention_hopper_forward(q, k, v, causal, overlap=True)[0],
    # The A/B of the ping-pong (a second build, -DAH_PINGPONG=0): only when asked with --variants.
    "hopper_no_pingpong": lambda q, k, v, causal: attention_hopper_forward(q, k, v, causal, pingpong=False)[0],
    # The A/B of the persistent grid (-DAH_PERSISTENT=1), alone and with the overlap: only when asked with --variants.
    "hopper_persistent": lambda q, k, v, causal: attention_hopper_forward(q, k, v, causal, persistent=True)[0],
    "hopper_persistent_overlap": lambda q, k, v, causal: attention_hopper_forward(q, k, v, causal, overlap=True,
                                                                                  persistent=True)[0],
    # The A/B of the dynamic scheduler (-DAH_DYNAMIC_TILES=1) against the static walk: only when asked with --variants.
    "hopper_dynamic": lambda q, k, v, causal: attention_hopper_forward(q, k, v, causal, persistent=True,
                                                                       dynamic=True)[0],
    "hopper_dynamic_overlap": lambda q, k, v, causal: attention_hopper_forward(q, k, v, causal, overlap=True,
                                                                               persistent=True, dynamic=True)[0],
}
DEFAULT_VARIANTS = ("torch", "triton", "hopper", "hopper_overlap")


def size_label(size, dtype) -> str:
    B, H, S, D, causal = size
    return f"B{B} H{H} S{S} D{D}{' causal' if causal else ''} {str(dtype).replace('torch.', '')}"


def flops(size) -> float:
    B, H, S, D, causal = size
    return 4 * B * H * S * S * D / (2 if causal else 1)


def plan(size, rounds: int, rep_ms: float) -> tuple[int, float]:
    """(rounds, rep_ms) of one size: a short size's at least SHORT_ROUNDS and SHORT_REP_MS."""
    if flops(size) < SHORT_FLOPS:
        return max(rounds, SHORT_ROUNDS), max(rep_ms, SHORT_REP_MS)
    return rounds, rep_ms


def make_inputs(arg):
    (B, H, S, D, causal), dtype = arg
    return tuple(random_tensor((B, H, S, D), dtype, runtime.DEVICE) for _ in range(3)) + (causal,)


def usable(variants: dict, dtype) -> tuple[dict, list[str]]:
    """The variants that run here (one small call each: builds the extension, compiles Triton), and why
    any other was dropped."""
    kept, dropped = {}, []
    q, k, v, _ = make_inputs(((1, 2, 256, 128, True), dtype))
    for label, fn in variants.items():
        try:
            fn(q, k, v, True)
            torch.cuda.synchronize()
            kept[label] = fn
        except (RuntimeError, ValueError, TypeError) as error:
            dropped.append(f"{label}: {str(error).splitlines()[0][:200]}")
    return kept, dropped


def timed_row(timed, label: str, size: str, rounds: int, rep_ms: float, flops: float) -> dict:
    """One variant's row of interleaved rounds, its ratio to cuDNN ("torch") taken round by round of the GPU's
    times (the graph replay's where the host paced a round): the three Hopper attention benches' rows."""
    ms = timed.ms[label]
    gpu = timed.median(label, gpu=True)  # None: host-bound and no graph replay
    row = {"size": size, "variant": label, "ms": timed.median(label), "ms_min": min(ms),
           "ms_rounds": ms, "reps": rounds, "rep_ms": rep_ms, "flops": flops, "gpu_ms": gpu,
           "tflops": flops / (gpu * 1e-3) / 1e12 if gpu else None,
           "spread_pct": timed.spread_pct(label), **timed.row_fields(label)}
    ratio = timed.ratio_range(label, "torch", gpu=True)  # > 1: faster than cuDNN that round
    if ratio:
        row.update(zip(("speedup_vs_torch", "speedup_min", "speedup_max"), ratio))
    return row


def measure(size, dtype, rounds: int, rep_ms: float, variants: dict) -> list[dict]:
    """The rows of one size: every variant timed once per round, in turn (graph-replayed where the host
    paced the loop); ratios within rounds, of the GPU's times."""
    rounds, rep_ms = plan(size, rounds, rep_ms)
    sets = bench.input_sets(make_inputs, (size, dtype))
    timed = bench.interleaved_rounds(
        variants, rounds, lambda fn, sets=sets: bench.time_gpu(fn, sets, warmup_ms=5, rep_ms=rep_ms, graph=True))
    diff = None
    if "hopper" in variants and "torch" in variants:
        q, k, v, causal = sets[0]
        diff = (attention_hopper(q, k, v, causal).float() - _sdpa_cudnn(q, k, v, causal).float()).abs().max().item()
    del sets
    torch.cuda.empty_cache()
    rows = []
    for label in timed.ms:
        row = timed_row(timed, label, size_label(size, dtype), rounds, rep_ms, flops(size))
        if label == "hopper" and diff is not None:
            row["max_abs_diff_vs_torch"] = diff
        ratio = timed.ratio_range("hopper_overlap", "hopper", gpu=True)
        if label == "hopper_overlap" and ratio:  # > 1: the overlap build is the faster
            row.update(zip(("speedup_vs_hopper", "speedup_vs_hopper_min", "speedup_vs_hopper_max"), ratio))
        static = label.replace("dynamic", "persistent")  # hopper_dynamic(_overlap)'s static twin
        static = timed.ratio_range(label, static, gpu=True) if label != static and static in timed.ms else None
        if static:  # > 1: the dynamic scheduler beats the static walk
            row.update(zip(("speedup_vs_static", "speedup_vs_static_min", "speedup_vs_static_max"), static))
        rows.append(row)
    return rows


def markdown(result: dict) -> str:
    head = ("| size | variant | ms (median) | GPU ms (graph) | TFLOP/s | vs cuDNN (median of rounds) "
            "| min - max over rounds | ms spread |\n|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in result["rows"]:
        ratio = f"{r['speedup_vs_torch']:.3f}x" if "speedup_vs_torch" in r else "-"
        spread = f"{r['speedup_min']:.3f}x - {r['speedup_max']:.3f}x" if "speedup_min" in r else "-"
        lines.append(f"| {r['size']} | {r['variant']} | {bench_timing.mark(format(r['ms'], '.4f'), r)} "
                     f"| {bench.fmt(r.get('graphed_ms'), '.4f')} | {bench.fmt(r.get('tflops'), '.0f')} | {ratio} | {spread} "
                     f"| {r['spread_pct']:.1f}% |")
    return (f"**{result['title']}**: {bench.measured_on(result)}.\n\n{head}" + "\n".join(lines) + f"\n\n{result['notes']}\n"
            + bench_timing.footnote(result["rows"]))


def run(sizes, rounds: int, rep_ms: float, dtypes=(torch.bfloat16,), variants: dict = VARIANTS,
        name: str = NAME) -> dict:
    why = "this benchmark times an sm_90a kernel: it needs an H100/H200" if not runtime.on_gpu() else \
        device_refusal(torch.device("cuda"))
    if why:
        raise RuntimeError(why)
    copy_gbps = bench.copy_bandwidth_gbps()
    rows, dropped = [], []
    for dtype in dtypes:
        kept, why_not = usable(variants, dtype)
        dropped += [f"{str(dtype).replace('torch.', '')} {w}" for w in why_not]
        for size in sizes:
            print(f"[bench] {size_label(size, dtype)}", file=sys.stderr, flush=True)
            rows += measure(size, dtype, rounds, rep_ms, kept)
    short, short_rep = plan(SIZES[-1], rounds, rep_ms)
    notes = (f"forward only; FLOPs = 4 B H S^2 D, halved for causal; {rounds} rounds ({short} of ~{short_rep:.0f} ms "
             f"at sizes under {SHORT_FLOPS / 1e9:.0f} GFLOP), each timing "
             f"{', '.join(variants)} once in turn (torch = SDPA's cuDNN backend; CUDA events, median of "
             f"~{rep_ms:.0f} ms of launches); ms = the events' median over rounds (* where the host paced a round: "
             "the host's time); GPU ms (graph) = the host-paced rounds' calls replayed from a CUDA graph, the GPU's time "
             "alone; TFLOP/s and every ratio use each round's GPU time (the graph replay's where the host paced the "
             "round, the events' where the GPU did); vs cuDNN = median over rounds of "
             "(cuDNN GPU ms / variant GPU ms) in the same round; max_abs_diff_vs_torch in the json: one call of "
             "hopper against cuDNN; hopper_overlap = the same kernel built with -DAH_INTRA_OVERLAP=1 (the softmax of "
             "key tile j under the warpgroup's own P V of tile j - 1), its speedup_vs_hopper (json) = median over rounds "
             "of (hopper GPU ms / hopper_overlap GPU ms) in the same round")
    if dropped:
        notes += "; left out: " + "; ".join(dropped)
    return {
        "benchmark": name,
        "title": "Attention forward on Hopper: the CUDA C FA3-style rung vs SDPA cuDNN vs the Triton op (interleaved rounds)",
        "notes": notes,
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
                        help=f"3 sizes, 3 rounds (a smoke run; writes results/{NAME}_quick.*, the full sweep's stays)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per size (default 7; 3 with --quick)")
    parser.add_argument("--rep-ms", type=float, default=40.0, help="timing budget per variant per round, ms")
    parser.add_argument("--dtypes", nargs="+", choices=["bfloat16", "float16"], default=["bfloat16"])
    parser.add_argument("--out", default=str(RESULTS), help="folder for the results files")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(DEFAULT_VARIANTS),
                        help="what to time (torch, the baseline, always; hopper_overlap: the A/B of the intra-warpgroup "
                             "overlap; hopper_no_pingpong: the A/B of the ping-pong; hopper_dynamic: the dynamic scheduler's, its "
                             "speedup_vs_static against hopper_persistent when both are timed)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    variants = {label: VARIANTS[label] for label in VARIANTS if label == "torch" or label in args.variants}
    result = run(QUICK_SIZES if args.quick else SIZES, rounds, args.rep_ms,
                 tuple(getattr(torch, d) for d in args.dtypes), variants, f"{NAME}_quick" if args.quick else NAME)
    text = markdown(result)
    print(text)
    for path in bench.write_record(result, args.out, text):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
