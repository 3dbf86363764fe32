"""Lesson 08's measurement: tokens/s of DDP, ZeRO-1 and FSDP (week5_integration/distributed.py).

    python -m week5_integration.distributed_bench --gpus 2 --steps 20     # NCCL: tokens/s per strategy

On GPUs that command runs `scaleout.py` (torchrun with 1 process, then with --gpus, then the
report: tokens/s, scaling efficiency, memory per GPU, and the communication overlap from a profile);
without enough GPUs it runs `throughput` in 2 gloo processes on the CPU and saves nothing.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from week5_integration import data
from week5_integration import model as m
from week5_integration.distributed import BENCHMARK_NAME, STRATEGIES, ZERO_STAGE, launch, train

ROOT = Path(__file__).resolve().parent


# ------------------------------------------------------------------------------ throughput
def _throughput_worker(rank: int, world: int, plan: dict) -> dict:
    device = torch.device("cuda", rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    common = dict(cfg=plan["cfg"], steps=plan["steps"], seq_len=plan["seq_len"], amp=plan["amp"],
                  warmup=plan["warmup"], device=device, lr=1e-4, return_params=False)
    rows = {}
    if rank == 0:  # one process alone, the same per-process batch: the scaling baseline
        rows["single"] = train("single", global_batch=plan["batch"], **common)
    dist.barrier()
    for strategy in plan["strategies"]:
        got = train(strategy, rank=rank, world=world, global_batch=plan["batch"] * world, **common)
        # The slowest rank sets the pace; the largest peak is what must fit.
        stats = torch.tensor([got["step_ms"], got["peak_mib"] or 0.0], device=device)
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)
        rows[strategy] = {"step_ms": float(stats[0]), "peak_mib": float(stats[1]) or None,
                          "losses": got["losses"]}
        dist.barrier()
    return rows


def throughput(world_size: int, *, steps: int = 20, batch: int | None = None, seq_len: int | None = None,
               cfg: m.GPTConfig | None = None, strategies=STRATEGIES, backend: str | None = None) -> dict:
    """Tokens/s of every strategy on `world_size` processes; the results record (fsdp_week5)."""
    from course import bench, runtime

    on_gpu = torch.cuda.is_available() and backend != "gloo"
    cfg = cfg or (m.GPT2_SMALL if on_gpu else m.config(m.GPT_TINY, vocab_size=data.VOCAB_SIZE))
    plan = {"cfg": cfg, "steps": steps, "batch": batch or (8 if on_gpu else 2),
            "seq_len": seq_len or cfg.max_seq_len, "amp": on_gpu, "warmup": 3 if on_gpu else 1,
            "strategies": tuple(strategies)}
    per_rank = launch(_throughput_worker, world_size, plan, backend=backend)
    tokens_single = plan["batch"] * plan["seq_len"]
    rows = []
    single = per_rank[0]["single"]
    label = f"{world_size} procs, B={plan['batch']}/proc x T={plan['seq_len']}"
    rows.append({"size": label, "variant": "single (1 process)", "ms": single["step_ms"],
                 "tokens_per_s": tokens_single / (single["step_ms"] * 1e-3), "peak_mib": single["peak_mib"]})
    for strategy in plan["strategies"]:
        got = per_rank[0][strategy]
        tokens = tokens_single * world_size
        tps = tokens / (got["step_ms"] * 1e-3)
        rows.append({"size": label, "variant": strategy, "zero_stage": ZERO_STAGE[strategy], "ms": got["step_ms"],
                     "tokens_per_s": tps, "peak_mib": got["peak_mib"],
                     "scaling_efficiency": tps / (world_size * rows[0]["tokens_per_s"])})
    params = _count_params(cfg)
    return {
        "benchmark": BENCHMARK_NAME,
        "title": (f"Data-parallel training step, GPT d{cfg.d_model} L{cfg.n_layers} V{cfg.vocab_size} "
                  f"({params / 1e6:.3g}M parameters), AdamW{', bf16 autocast' if plan['amp'] else ''}"),
        "notes": (f"ms = median step over {steps} steps after {plan['warmup']} warm-up, slowest rank; tokens/s = "
                  "global batch tokens / ms; peak = largest torch.cuda.max_memory_allocated over ranks; "
                  "scaling efficiency = tokens/s / (N x one process's tokens/s at the same per-process batch)"),
        "headline": ["ddp", "fsdp"],
        "simulated": not on_gpu,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {**runtime.describe(), "processes": world_size,
                    "backend": "nccl" if on_gpu else "gloo",
                    "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0},
        "ceilings": {"copy_gbps": bench.copy_bandwidth_gbps()},
        "params": params,
        "rows": rows,
    }


def _count_params(cfg: m.GPTConfig) -> int:
    with torch.device("meta"):
        return m.count_parameters(m.GPT(cfg))


def markdown_table(result: dict) -> str:
    from course.bench import measured_on

    head = ["size", "strategy", "ZeRO stage", "ms / step", "tokens/s", "peak MiB", "scaling efficiency"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        cells = [r["size"], r["variant"], str(r.get("zero_stage", "-")), f"{r['ms']:.2f}",
                 f"{r['tokens_per_s']:,.0f}", "-" if r.get("peak_mib") is None else f"{r['peak_mib']:.0f}",
                 "-" if r.get("scaling_efficiency") is None else f"{100 * r['scaling_efficiency']:.0f}%"]
        lines.append("| " + " | ".join(cells) + " |")
    return f"**{result['title']}**: {measured_on(result)}.\n\n" + "\n".join(lines) + f"\n\n{result['notes']}.\n"


def save(result: dict, results_dir) -> list[Path]:
    from course import bench

    return bench.write_record(result, results_dir, markdown_table(result))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=None,
                        help="processes, one per GPU (default: every GPU; without GPUs: 2 gloo processes)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per strategy")
    parser.add_argument("--batch", type=int, default=None, help="sequences per process (default 8 on GPUs)")
    parser.add_argument("--strategies", nargs="*", default=list(STRATEGIES), help=f"subset of {STRATEGIES}")
    parser.add_argument("--out", default=None, help="results folder (default: week5_integration/results on GPUs)")
    args = parser.parse_args(argv)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    world = args.gpus or gpus or 2
    backend = "nccl" if gpus and world <= gpus else "gloo"
    if backend == "nccl":
        # On GPUs the measurement runs as real jobs do: torchrun, one process per GPU, once with one
        # process (the baseline) and once with `world`, then the report (scaleout.py: the overlap too).
        from week5_integration import scaleout
        extra = ["--steps", str(args.steps)]
        if args.strategies != list(STRATEGIES):  # the default: scaleout's (these and fsdp_bf16)
            extra += ["--strategies", *args.strategies]
        if args.batch:
            extra += ["--batch", str(args.batch)]
        return scaleout.run_all(world, Path(args.out) if args.out else ROOT / "results", extra=extra)
    result = throughput(world, steps=args.steps, batch=args.batch, strategies=args.strategies, backend=backend)
    print(markdown_table(result))
    out = args.out or (ROOT / "results" if backend == "nccl" else None)
    if out:
        for path in save(result, out):
            print("wrote", path)
    else:
        print("(gloo on the CPU: nothing saved; results/ holds only figures measured on GPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
