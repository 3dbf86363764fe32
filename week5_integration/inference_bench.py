"""The KV-cache decoding benchmark and its command line (the model, decoders and timers: inference.py).

`kv_cache_benchmark` times every (batch, prompt, variant) of `benchmark_plan` with inference.py's
`measure_generate` (no cache, cache, cache replayed as a CUDA graph), beside the roofline and
launch-bound predictions; `save` writes results/kv_cache_week5.json|md|png, a record shaped like
`course.bench.run`'s.

    python -m week5_integration.inference_bench --out week5_integration/results    # on the GPU
"""
from __future__ import annotations

import argparse
import datetime as _dt
import statistics
import sys
import time
from pathlib import Path

import torch

from course import bench, bench_timing, runtime
from course.bench import fmt
from week5_integration import model as m
from week5_integration.inference import (
    EAGER_US_PER_OP, GRAPH_US_PER_KERNEL, VARIANTS, decode_step_bytes, decode_step_flops, forward_flops,
    measure_generate, ops_per_decode_step, predict_decode, static_cache_len, weights_read_per_step)

BENCHMARK_NAME = "kv_cache_week5"


# --------------------------------------------------------------------------- the benchmark
def benchmark_plan() -> dict:
    """Model, batches, prompts and new tokens: GPT-2-small-sized in bf16 on the GPU (prompts
    128..1024), a small fp32 model in simulation."""
    new = runtime.pick(gpu=64, sim=8)
    prompts = runtime.pick(gpu=[128, 256, 512, 1024], sim=[16, 64])
    base = runtime.pick(gpu=m.GPT2_SMALL, sim=m.config(m.GPT_SMALL, d_model=128, n_heads=4, n_layers=2))
    return {"cfg": m.config(base, max_seq_len=max(prompts) + new), "batches": runtime.pick(gpu=[1, 16], sim=[1, 4]),
            "prompts": prompts, "new_tokens": new, "dtype": runtime.pick(gpu=torch.bfloat16, sim=torch.float32),
            "repeats": runtime.pick(gpu=3, sim=1)}


def _row(cfg, variant, batch, prompt, new, measured, copy_gbps, tflops, itemsize, ops) -> dict:
    steps = range(1, new)  # decode calls: context P + t, or a forward over P + t positions
    mean_context = prompt + sum(steps) / len(steps)
    if variant == "no_cache":
        flops = statistics.mean(forward_flops(cfg, batch=batch, length=prompt + t) for t in steps)
        nbytes = weights_read_per_step(cfg, batch) * itemsize  # weights once; activations left out
    else:
        context = static_cache_len(prompt, new, cfg.max_seq_len) if variant == "cache_graph" else round(mean_context)
        flops = decode_step_flops(cfg, batch=batch, context=context)
        nbytes = decode_step_bytes(cfg, batch=batch, context=context, itemsize=itemsize)
    seconds = measured["ms"] * 1e-3
    roof = predict_decode(cfg, batch=batch, context=round(mean_context), copy_gbps=copy_gbps,
                          tflops=tflops, itemsize=itemsize)
    per_op = GRAPH_US_PER_KERNEL * ops["kernels"] if variant == "cache_graph" else EAGER_US_PER_OP * ops["ops"]
    return {"size": f"B={batch} prompt={prompt}", "variant": variant, "batch": batch, "prompt": prompt,
            "new_tokens": new, "ms": measured["ms"], "prefill_ms": measured["prefill_ms"],
            "tokens_per_s": measured["tokens_per_s"], "bytes": nbytes, "flops": flops,
            "gbps": nbytes / seconds / 1e9, "tflops": flops / seconds / 1e12,
            "pct_of_copy": 100 * nbytes / seconds / 1e9 / copy_gbps,
            "predicted_tokens_per_s": roof["tokens_per_s"],
            "predicted_launch_bound_tokens_per_s": batch / max(per_op * 1e-6, roof["ms"] * 1e-3),
            # whether the host paced the decode steps (then ms is the host's time), where it was measured
            **{k: measured[k] for k in ("host_bound", "host_ms") if k in measured}}


def kv_cache_benchmark(plan: dict | None = None, *, variants=VARIANTS, progress: bool = True) -> dict:
    """Time every (batch, prompt, variant) of `plan`; return the results record."""
    plan = plan or benchmark_plan()
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise ValueError(f"unknown variants {sorted(unknown)}; choose from {VARIANTS}")
    cfg, dtype = plan["cfg"], plan["dtype"]
    torch.manual_seed(0)
    model = m.GPT(cfg).to(runtime.DEVICE, dtype).eval()
    copy_gbps = bench.copy_bandwidth_gbps()
    tflops = bench.matmul_tflops(dtype) if runtime.on_gpu() else None
    itemsize = torch.empty((), dtype=dtype).element_size()
    rows, started = [], time.perf_counter()
    for batch in plan["batches"]:
        ops = ops_per_decode_step(model, batch=batch)
        for prompt in plan["prompts"]:
            reference = None
            for variant in variants:
                if progress:
                    print(f"[{time.perf_counter() - started:6.1f} s] B={batch} prompt={prompt} {variant}",
                          file=sys.stderr, flush=True)
                try:
                    got = measure_generate(model, batch=batch, prompt=prompt, new_tokens=plan["new_tokens"],
                                           variant=variant, repeats=plan["repeats"])
                except Exception as error:  # one failing variant must not lose the table
                    rows.append({"size": f"B={batch} prompt={prompt}", "variant": variant,
                                 "skipped": f"failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"})
                    continue
                row = _row(cfg, variant, batch, prompt, plan["new_tokens"], got, copy_gbps, tflops, itemsize, ops)
                # Greedy tokens must not depend on the variant (bf16 rounding may flip a near-tie:
                # recorded, not asserted; the tests assert it in fp32).
                if reference is None:
                    reference = got["tokens"]
                row["same_tokens_as_first_variant"] = bool(torch.equal(got["tokens"], reference))
                rows.append(row)
        for row in rows:
            if row.get("batch") == batch and "ms" in row:
                base = next((r for r in rows if r.get("batch") == batch and r.get("prompt") == row["prompt"]
                             and r["variant"] == "no_cache" and "ms" in r), None)
                if base:
                    row["speedup_vs_no_cache"] = base["ms"] / row["ms"]
    ceilings = {"copy_gbps": copy_gbps}
    if tflops:
        ceilings[f"matmul_{str(dtype).replace('torch.', '')}_tflops"] = tflops
    return {
        "benchmark": BENCHMARK_NAME,
        "title": (f"KV-cache decoding: GPT d{cfg.d_model} L{cfg.n_layers} V{cfg.vocab_size} "
                  f"{str(dtype).replace('torch.', '')}, {plan['new_tokens']} new tokens, ms per decode step"),
        "notes": ("ms = one decode step (one new token per sequence), median of runs, prefill excluded "
                  "(* where the host paced the steps: course/bench_clock.py); "
                  "tokens/s = batch / ms; bytes: cached = weights + KV cache read (cache_graph reads the whole "
                  "fixed buffer), no_cache = weights only; predicted = bytes / copy bandwidth (roofline); "
                  f"launch-bound = ops x {EAGER_US_PER_OP:g} us (eager) or kernels x {GRAPH_US_PER_KERNEL:g} us (graph)"),
        "headline": ["cache", "cache_graph"],
        "simulated": not runtime.on_gpu(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": runtime.describe(),
        "ceilings": ceilings,
        "ops_per_step": ops,
        "rows": rows,
    }


def markdown_table(result: dict) -> str:
    head = ["size", "variant", "ms / step", "tokens/s", "predicted (bytes)", "predicted (launches)",
            "GB/s", "% of copy", "vs no cache", "prefill ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['size']} | {r['variant']} | skipped: {r['skipped']} |" + " |" * (len(head) - 3))
            continue
        speed = f"{r['speedup_vs_no_cache']:.2f}x" if r.get("speedup_vs_no_cache") else "-"
        lines.append("| " + " | ".join([
            r["size"], r["variant"], bench_timing.mark(fmt(r["ms"], ".3f"), r), fmt(r["tokens_per_s"], ",.0f"),
            fmt(r.get("predicted_tokens_per_s"), ",.0f"), fmt(r.get("predicted_launch_bound_tokens_per_s"), ",.0f"),
            fmt(r.get("gbps"), ".0f"), fmt(r.get("pct_of_copy"), ".1f"), speed, fmt(r.get("prefill_ms"), ".2f")]) + " |")
    return (f"**{result['title']}**: {bench.measured_on(result)}.\n\n" + "\n".join(lines) + f"\n\n{result['notes']}.\n"
            + bench_timing.footnote(result["rows"]))


def save(result: dict, results_dir) -> list[Path]:
    """`kv_cache_week5.json` (the record), `.md` (its table), `.png` (roofline of the rows)."""
    from course import roofline

    paths = bench.write_record(result, results_dir, markdown_table(result))
    png = paths[0].with_suffix(".png")
    roofline.plot_result(result, png)
    return paths + [png]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="folder for kv_cache_week5.json|md|png (default: print only)")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), help=f"subset of {VARIANTS}")
    args = parser.parse_args(argv)
    result = kv_cache_benchmark(variants=args.variants)
    print(markdown_table(result))
    if args.out:
        for path in save(result, args.out):
            print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
