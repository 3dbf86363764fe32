"""The profiling runs that write results, and their command line (what a profile means: profile_model.py).

`profile_run` profiles a training step with each Ops (torch, then the course's kernels) in one
run and places every group on the roofline: results/profile_week5.json|md|png and a trace per
Ops. `swaps_run` times the step for torch, each single swap, all swaps and torch.compile of the
torch twin: results/swaps_week5.json|md. On a GPU:

    python -m week5_integration.profile_model_bench --out week5_integration/results

On the CPU the same runs profile GPT_TINY's aten ops with host times and save nothing by default.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import sys
import time
from pathlib import Path

import torch

from course import bench, bench_timing, runtime
from course.bench import fmt
from week5_integration import kernels
from week5_integration import model as m
from week5_integration import train as tr
from week5_integration.profile_model import (
    GROUP_PATTERNS, group_costs, place_on_roofline, plot_roofline, profile_training)

RESULTS = Path(__file__).resolve().parent / "results"


# --- results -----------------------------------------------------------------------------------
def ceilings() -> dict:
    """Copy bandwidth and bf16 matmul rate measured now, on this machine (small stand-ins in simulation)."""
    return {"copy_gbps": bench.copy_bandwidth_gbps(), "matmul_bfloat16_tflops": bench.matmul_tflops(torch.bfloat16)}


def default_setup() -> tuple[m.GPTConfig, tr.TrainConfig]:
    """GPT_SMALL at batch 32 x 512 on a GPU (enough work per kernel to keep the GPU busy); GPT_TINY on the CPU."""
    cfg = tr.byte_vocab(runtime.pick(gpu=m.GPT_SMALL, sim=m.GPT_TINY))
    tc = tr.TrainConfig(steps=runtime.pick(gpu=30, sim=3), batch=runtime.pick(gpu=32, sim=2),
                        seq_len=runtime.pick(gpu=512, sim=16), lr=1e-3, warmup=5, corpus_bytes=1 << 18,
                        skip=runtime.pick(gpu=5, sim=1))
    return cfg, tc


def results_record(name: str, title: str, notes: str, rows: list, extra: dict) -> dict:
    """A results record shaped like `course.bench.run`'s, so `python -m course report` can read it."""
    return {"benchmark": name, "title": title, "notes": notes, "headline": extra.pop("headline", []),
            "simulated": not runtime.on_gpu(),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": runtime.describe(), "ceilings": extra.pop("ceilings"), "rows": rows, **extra}


def model_size_label(cfg: m.GPTConfig, tc: tr.TrainConfig) -> str:
    """'GPT d768 L12 V50304, B8 x T1024, bf16': the model and step a record measured."""
    amp = "bf16" if tr.amp_enabled(tc, runtime.DEVICE) else "fp32"
    return f"GPT d{cfg.d_model} L{cfg.n_layers} V{cfg.vocab_size}, B{tc.batch} x T{tc.seq_len}, {amp}"


def profile_run(ops_list=None, *, cfg=None, tc=None, out: Path | None = None, steps: int = 3) -> dict:
    """Profile each Ops (default: torch, then course) in one run; the profile_week5 record.

    Rows: one per (ops, group): ms of GPU time per step in that group, its FLOPs and minimum bytes,
    achieved TFLOP/s and GB/s, % of copy, and the speed-up of the group over the torch ops' group.
    """
    default_cfg, default_tc = default_setup()
    cfg, tc = tr.byte_vocab(cfg or default_cfg), tc or default_tc
    ops_list = ops_list or [m.TORCH_OPS, kernels.COURSE_OPS]
    ceil = ceilings()
    act_bytes = 2 if tr.amp_enabled(tc, runtime.DEVICE) else 4
    costs = group_costs(cfg, tc.batch, tc.seq_len or cfg.max_seq_len, act_bytes=act_bytes)
    profiles, placed, rows = {}, {}, []
    for ops in ops_list:
        trace = (out / f"trace_week5_{ops.name}.json.gz") if out is not None else None
        kernels.reset_fallbacks()
        prof = profile_training(ops, cfg, tc, steps=steps, trace_path=trace)
        profiles[ops.name] = prof
        placed[ops.name] = place_on_roofline(prof, costs, copy_gbps=ceil["copy_gbps"],
                                             peak_tflops=ceil["matmul_bfloat16_tflops"])
        reference = profiles[next(iter(profiles))].groups()
        for group, g in prof.groups().items():
            p = placed[ops.name].get(group, {})
            ref_us = reference[group]["us"]
            rows.append({"size": f"{ops.name} ops", "variant": group, "ms": g["us"] / 1e3, "share": g["share"],
                         "calls_per_step": g["calls"], "top": g["top"],
                         "flops": p.get("flops"), "bytes": p.get("bytes"), "tflops": p.get("tflops"),
                         "gbps": p.get("gbps"), "pct_of_copy": 100 * p["gbps"] / ceil["copy_gbps"] if p else None,
                         "pct_of_roof": p.get("pct_of_roof"), "bound": p.get("bound"),
                         "speedup_vs_torch": ref_us / g["us"] if g["us"] > 0 and ref_us > 0 else None})
        prof.fallbacks = {f"{op}: {why}": n for (op, why), n in kernels.FALLBACKS.items()}
    record = results_record("profile_week5", f"Where a training step's GPU time goes, by group: {model_size_label(cfg, tc)}",
                     "ms = GPU time per step in the group (kernel durations from the trace); FLOPs and bytes = "
                     "the cost model of profile_model.py (minimum traffic); vs torch = the torch ops' group "
                     "time / this group's time",
                     rows, {"ceilings": ceil, "patterns": GROUP_PATTERNS, "headline": ["attention", "norm", "elementwise", "loss"],
                            "profiles": {name: {"source": p.source, "trace": Path(p.trace).name if p.trace else None,
                                                "gpu_busy_fraction": p.gpu_busy, "steps": p.steps,
                                                "wall_ms_per_step_profiled": p.wall_ms_per_step,
                                                "fallbacks": getattr(p, "fallbacks", {}),
                                                "kernels": p.per_step()[:25]}
                                         for name, p in profiles.items()}})
    if out is not None:
        save(record, out, profile_markdown(record))
        plot_roofline(placed, copy_gbps=ceil["copy_gbps"], peak_tflops=ceil["matmul_bfloat16_tflops"],
                      title=f"Training-step groups on the roofline ({record['machine'].get('gpu') or 'CPU'})",
                      path=Path(out) / "profile_week5.png")
    return record


def warm_rope_cache(model: m.GPT, tc: tr.TrainConfig) -> None:
    """Touch the model's RoPE tables before compiling (kept for older models: harmless).

    `GPT.rope_tables` used to fill a dict on first use, so a cold compile computed the tables
    in-graph and recompiled on the next call. The tables are now buffers of the model, computed
    at construction and moved with it (model.py): this call only slices them.
    """
    if model.cfg.pos == "rope":
        model.rope_tables(0, tc.seq_len or model.cfg.max_seq_len)


def compiled_loss(model: m.GPT, tc: tr.TrainConfig):
    """torch.compile of the loss (forward and, through AOTAutograd, backward), default mode."""
    warm_rope_cache(model, tc)
    return torch.compile(model.loss)


def swap_variants(cfg: m.GPTConfig) -> list[tuple[m.Ops, object]]:
    """(Ops, loss_fn factory or None) for the swaps table: the plan, then the compiled torch twin,
    then (GPU, RMSNorm models) the CUDA C++ RMSNorm of cuda_extension.py."""
    variants = [(ops, None) for ops in kernels.swap_plan(cfg)]
    variants.append((dataclasses.replace(m.TORCH_OPS, name="torch.compile"), compiled_loss))
    if runtime.on_gpu() and cfg.norm == "rmsnorm":
        from week5_integration import cuda_extension
        variants.append((dataclasses.replace(m.TORCH_OPS, name="+norm (CUDA C++)", norm=cuda_extension.ext_norm), None))
    return variants


def swaps_run(*, cfg=None, tc=None, out: Path | None = None, variants=None, on_row=None) -> dict:
    """Time training steps for every swap variant, in one run, from the same seed and batches."""
    default_cfg, default_tc = default_setup()
    cfg, tc = tr.byte_vocab(cfg or default_cfg), tc or default_tc
    variants = variants or swap_variants(cfg)
    label = model_size_label(cfg, tc)
    rows, ref = [], None
    ceil = ceilings()
    for ops, factory in variants:
        kernels.reset_fallbacks()
        t0 = time.perf_counter()
        try:
            model = tr.build_model(cfg, ops, seed=tc.seed)
            batches, _ = tr.make_batches(model.cfg, tc)
            result = tr.train(model, batches, tc, loss_fn=factory(model, tc) if factory else None)
        except Exception as error:  # one broken variant must not lose the table
            rows.append({"size": label, "variant": ops.name,
                         "skipped": f"failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"})
            torch._dynamo.reset()
            continue
        # ms (the timed steps' median) and whether the host paced them, from the kit's clock (bench.timing_fields)
        row = {"size": label, "variant": ops.name, **bench.timing_fields(result.timing), "ms_min": min(result.step_ms),
               "reps": len(result.step_ms) - result.skip, "tokens_per_s": result.tokens_per_s,
               "flops": result.flops_per_step, "tflops": result.tflops, "losses": result.losses,
               "first_step_s": result.step_ms[0] * 1e-3,  # includes autotuning / compilation
               "build_s": time.perf_counter() - t0 - sum(result.step_ms) * 1e-3,
               "fallbacks": {f"{op}: {why}": n for (op, why), n in kernels.FALLBACKS.items()}}
        if ref is None:
            ref = row
        row["speedup_vs_torch"] = ref["ms"] / row["ms"]
        row["loss_max_rel_diff"] = max(abs(a - b) / abs(b) for a, b in zip(row["losses"], ref["losses"]))
        rows.append(row)
        del model, batches, result
        torch._dynamo.reset()
        if runtime.on_gpu():
            torch.cuda.empty_cache()
        if on_row:
            on_row(row)
    timer = "CUDA-event-timed" if runtime.on_gpu() else "host-timed"
    record = results_record("swaps_week5", f"Training step with each kernel swapped in: {label}",
                     f"median of {tc.steps - tc.skip} {timer} steps after {tc.skip} left out (the first step "
                     "autotunes the Triton kernels or compiles: 'first step s'); same seed and batches for every "
                     "row; loss diff = largest relative difference of the per-step losses from the torch row's",
                     rows, {"ceilings": ceil, "headline": ["course", "torch.compile"]})
    if out is not None:
        save(record, out, swaps_markdown(record))
    return record


def profile_markdown(record: dict) -> str:
    lines = [f"**{record['title']}**: {bench.measured_on(record)}.", ""]
    for name, p in record["profiles"].items():
        busy = "-" if p["gpu_busy_fraction"] is None else f"{100 * p['gpu_busy_fraction']:.0f}%"
        lines += [f"### {name} ops ({p['source']}; GPU busy {busy} of the profiled span; trace `{p['trace']}`)", "",
                  "| group | ms / step | share | calls / step | TFLOP/s | GB/s | FLOP/B | bound | % of roof | vs torch |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in record["rows"] if r["size"] == f"{name} ops"):
            intensity = r["flops"] / r["bytes"] if r.get("flops") and r.get("bytes") else None
            lines.append(f"| {r['variant']} | {r['ms']:.3f} | {100 * r['share']:.1f}% | {r['calls_per_step']:.0f} | "
                         f"{fmt(r['tflops'], '.1f')} | {fmt(r['gbps'], '.0f')} | {fmt(intensity, '.1f')} | "
                         f"{r.get('bound') or '-'} | {fmt(r['pct_of_roof'], '.0f')} | "
                         f"{'-' if not r.get('speedup_vs_torch') else format(r['speedup_vs_torch'], '.2f') + 'x'} |")
        if p["fallbacks"]:
            lines += ["", "Fallbacks to torch: " + "; ".join(f"{k} ({v})" for k, v in p["fallbacks"].items())]
        lines += ["", "| kernel | group | calls / step | us / step | share |", "|---|---|---|---|---|"]
        for k in p["kernels"][:15]:
            lines.append(f"| `{k['name'][:90]}` | {k['group']} | {k['calls']:.0f} | {k['us']:.1f} | {100 * k['share']:.1f}% |")
        lines.append("")
    lines += ["Groups by name (first match wins, lower-cased):", ""]
    lines += [f"- {group}: `{pattern}`" for group, pattern in record["patterns"]] + ["- other: everything else", ""]
    return "\n".join(lines)


def swaps_markdown(record: dict) -> str:
    lines = [f"**{record['title']}**: {bench.measured_on(record)}.", "",
             "| variant | ms / step | tokens/s | TFLOP/s | vs torch | loss diff vs torch | first step s | fallbacks |",
             "|---|---|---|---|---|---|---|---|"]
    for r in record["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['variant']} | skipped: {r['skipped']} | | | | | | |")
            continue
        lines.append(f"| {r['variant']} | {bench_timing.mark(format(r['ms'], '.3f'), r)} | {r['tokens_per_s']:,.0f} | {r['tflops']:.1f} | "
                     f"{r['speedup_vs_torch']:.2f}x | {r['loss_max_rel_diff']:.1e} | {r['first_step_s']:.1f} | "
                     f"{sum(r['fallbacks'].values()) or '-'} |")
    return "\n".join(lines) + f"\n\n{record['notes']}.\n" + bench_timing.footnote(record["rows"])


def save(record: dict, out: Path, markdown: str) -> list[Path]:
    return bench.write_record(record, out, markdown, json_default=str)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--what", nargs="*", choices=("profile", "swaps"), default=["profile", "swaps"])
    parser.add_argument("--out", help="results folder (default: week5_integration/results on a GPU, none on the CPU)")
    parser.add_argument("--batch", type=int, help="tokens per step = batch x seq")
    parser.add_argument("--seq", type=int)
    parser.add_argument("--steps", type=int, help="training steps per swap variant (first --skip untimed)")
    args = parser.parse_args(argv)
    cfg, tc = default_setup()
    tc = dataclasses.replace(tc, **{k: v for k, v in (("batch", args.batch), ("seq_len", args.seq),
                                                       ("steps", args.steps)) if v is not None})
    out = Path(args.out) if args.out else (RESULTS if runtime.on_gpu() else None)
    if "profile" in args.what:
        record = profile_run(cfg=cfg, tc=tc, out=out)
        print(profile_markdown(record))
    if "swaps" in args.what:
        record = swaps_run(cfg=cfg, tc=tc, out=out,
                           on_row=lambda r: print(f"  {r['variant']}: {r['ms']:.3f} ms/step", flush=True))
        print(swaps_markdown(record))
    if out is None:
        print("(simulation: nothing saved; these times measure Python on the CPU)")
    else:
        print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
