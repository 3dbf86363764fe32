"""The capstone on N GPUs: FSDP2 over NCCL with the fast model, against one GPU at the same per-GPU batch.

A bench, no kernels: the capstone's twin of week 5's scaleout.py, whose process group and driver
(`week5_integration.torchrun`) and overlap reading (`week5_integration.communication`) it uses:
the runs on 1 and N GPUs, the report and the command line.

    python -m torch.distributed.run --standalone --nproc-per-node 1 -m capstone.fsdp run --stage /tmp/cf
    python -m torch.distributed.run --standalone --nproc-per-node 2 -m capstone.fsdp run --stage /tmp/cf --profile
    python -m capstone.fsdp report --stage /tmp/cf --out capstone/results
    python -m capstone.fsdp all --gpus 2 --out capstone/results            # the three above
    python -m capstone.fsdp warm                 # before the first run on a fresh machine (GPU; see below)
    python -m torch.distributed.run --nproc-per-node 2 -m capstone.fsdp run --stage /tmp/cfc --device cpu --tiny
                                                 # a gloo dry run on a CPU (Triton interpreter; saves nothing)

The model is the capstone's fast model (`ops="fast"`: the week-4 kernels, registered as torch
ops) in `capstone.train.Trainer`, bf16 autocast, AdamW, gradient clipping, the LR schedule:
what `python -m capstone.train --fsdp` runs. Each rank takes its contiguous 1/N of every global
batch; each `Block`, then the root, is an FSDP2 unit (`fully_shard`).

`run` with one process measures two things:
* the baseline: the plain model (no FSDP) at the per-GPU batch B: tokens/s (median CUDA-event
  step after `warmup` steps) and peak memory;
* the reference loss curve: `loss_steps` steps at the global batch N x B on one GPU, with the
  same TrainConfig (seed, batches, schedule) as the N-GPU run, so the two curves must agree.
`run` with N processes trains FSDP2 at N x B global (B per GPU) for `loss_steps` steps: the loss
curve, tokens/s of the steps after `warmup` (the slowest rank), peak memory per GPU, and with
`--profile` the communication overlap of `profile_steps` more steps (`week5_integration.communication.
overlap`). `report` writes `capstone_fsdp.json|md` and `fsdp_loss.png`; `capstone.measure`'s summary
reads the json for its FSDP row.

Optimizer. The Trainer takes foreach AdamW for FSDP's DTensor shards (the path every torch version
supports) and the fused kernel for plain tensors; torch 2.11 has a fused AdamW for DTensors too
(`aten._fused_adamw_` has a DTensor sharding rule). `fused_optimizer=True` (the default) gives the
FSDP run the fused kernel as well, so both sides step the same way and the comparison is of the
sharding and communication alone; `--trainer-optimizer` keeps the Trainer's choice.

Loss tolerance (stated before measuring; bf16 autocast on both sides). Step 0: the same weights
and the same global batch; only where rounding happens differs (each rank's GEMMs have half the
rows and may pick other cuBLAS kernels; the loss is the mean of two shard means instead of one
mean): 0.01 nats absolute (capstone.measure's step-0 bound). Later steps follow slightly
different trajectories (each step's rounding changes the next weights), so the `window`-step
moving averages must stay within 0.05 nats, ~1% of the initial loss; a real bug (a missing
average, a rank's gradient lost, a shard trained twice) moves them by tenths within these steps.

`warm`: on a fresh machine the first run compiles FlashAttention's ~27 autotune configs one after
another (~2-4 s each); `warm` compiles them for this model's shape in parallel processes first
(week4_triton_dl.attention's warm_cache), filling Triton's on-disk cache.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from course import runtime
from course.bench import fmt, measured_on
from capstone import model as cm
from week5_integration.communication import comm_bandwidth, profile_overlap
from week5_integration.torchrun import (drive, free_memory, from_every_rank, init_from_env, max_over_ranks, publish,
                                        write_stage)
from week5_integration.train import TrainConfig, param_groups

ROOT = Path(__file__).resolve().parent
BENCHMARK_NAME = "capstone_fsdp"
PLOT = "fsdp_loss.png"
TOLERANCE = {"step0_abs": 0.01, "moving_avg_abs": 0.05, "window": 10}
TARGET_SCALING = 1.8  # issue 16: >= 1.8x one GPU's tokens/s on 2 GPUs (capstone.summary.TARGETS)


@dataclasses.dataclass(frozen=True)
class Plan:
    config: str = "gpt2_124m"
    batch: int = 16            # sequences per GPU; 16 keeps the GPU, not the host, the bottleneck
    seq_len: int = 1024
    warmup: int = 5            # steps left out of every timing (autotuning, first NCCL calls)
    steps: int = 20            # timed steps of the one-GPU baseline
    loss_steps: int = 40       # steps of both loss curves (the N-GPU run's timed steps are those after warmup)
    profile_steps: int = 2
    lr: float = 6e-4
    corpus_bytes: int = 1 << 21
    world: int = 2             # the N of the N-GPU run: the one-GPU reference trains at N x batch
    fused_optimizer: bool = True
    # Also time both sides at this larger per-GPU batch (0: not): FSDP2's hooks cost the host ~45 ms
    # per step of this model on the H100 machine (tools/probe_fsdp_host.py: forward 35 ms and backward
    # 44 ms of Python against 15 and 19 without FSDP), more than the GPU work at batch 16, so there
    # the GPU waits for the host. At 48 the GPU work (~110 ms) is longer than the host's.
    large_batch: int = 48
    # Also time both sides with each Block torch.compile'd (Trainer(compile_blocks=...)). Off: on the
    # H100 pair (2026-11-26) it made the FSDP step slower (the hooks, not the blocks, cost the host).
    compile_blocks: bool = False


GPU_PLAN = Plan()
TINY_PLAN = Plan(config="tiny", batch=2, seq_len=32, warmup=1, steps=2, loss_steps=4, profile_steps=1, lr=1e-3,
                 corpus_bytes=1 << 16, large_batch=0)


def train_config(plan: Plan, global_batch: int, steps: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch=global_batch, seq_len=plan.seq_len, lr=plan.lr,
                       warmup=min(10, max(1, plan.loss_steps // 4)), corpus_bytes=plan.corpus_bytes,
                       skip=plan.warmup, seed=0)


def train(plan: Plan, device: torch.device, *, global_batch: int, steps: int, schedule_steps: int, fsdp: bool,
          profile: bool = False, trace_path: Path | None = None, compile_blocks: bool = False) -> dict:
    """`steps` steps of the fast model (FSDP2 when `fsdp`) at `global_batch`; the slowest rank's
    median step after `plan.warmup`, peak memory, the loss curve, and optionally the overlap."""
    free_memory(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    tc = train_config(plan, global_batch, schedule_steps)
    from capstone.train import Trainer

    trainer = Trainer(plan.config, tc, ops="fast", device=device, fsdp=fsdp, compile_blocks=compile_blocks)
    fused = plan.fused_optimizer and device.type == "cuda"
    if fsdp and fused:  # see the module docstring: the same fused AdamW on both sides
        trainer.opt = torch.optim.AdamW(param_groups(trainer.module, tc.weight_decay), lr=tc.lr, betas=tc.betas,
                                        fused=True)
    records = trainer.run(steps, log_every=steps)
    timed = [r["ms"] for r in records[plan.warmup:]] or [r["ms"] for r in records]
    ms, peak = max_over_ranks(
        [statistics.median(timed), torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0], device)
    world = dist.get_world_size() if dist.is_initialized() else 1
    tokens = global_batch * plan.seq_len
    result = {"world": world, "fsdp": fsdp, "global_batch": global_batch, "batch_per_gpu": global_batch // world,
              "ms": ms, "tokens_per_step": tokens, "tokens_per_s": tokens / (ms * 1e-3),
              "peak_mib": peak / 2**20 if device.type == "cuda" else None, "amp": trainer.amp,
              "optimizer": "fused" if (fused if fsdp else device.type == "cuda") else "foreach",
              "losses": [r["loss"] for r in records], "grad_norms": [r["grad_norm"] for r in records],
              "params": cm.count_parameters(trainer.cfg), "compile_blocks": bool(compile_blocks)}
    if profile:
        def step():
            trainer.run(trainer.step + 1, log_every=1)
        result["overlap"] = profile_overlap(step, plan.profile_steps, device, trace_path)
        result["overlap_by_rank"] = from_every_rank(result["overlap"])
    del trainer
    free_memory(device)
    return result


def run(plan: Plan, stage: Path, *, device_kind: str, profile: bool = False, trace_dir: Path | None = None) -> dict | None:
    """This process's part of a torchrun job; rank 0 writes `stage/capstone_world{N}.json`."""
    rank, world, device = init_from_env(device_kind)
    try:
        schedule = plan.loss_steps + plan.profile_steps
        record = {"world": world, "backend": dist.get_backend(), "plan": dataclasses.asdict(plan),
                  "model": dataclasses.asdict(cm.preset(plan.config)),
                  "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                  "machine": runtime.describe(), "runs": {}, "errors": {}}
        if device.type == "cuda" and rank == 0:  # every record names the copy ceiling of its GPU
            from course import bench
            record["copy_gbps"] = bench.copy_bandwidth_gbps()
        if world == 1:
            jobs = {"one_gpu": dict(global_batch=plan.batch, steps=plan.warmup + plan.steps,
                                    schedule_steps=plan.warmup + plan.steps, fsdp=False),
                    "one_gpu_global_batch": dict(global_batch=plan.batch * plan.world, steps=plan.loss_steps,
                                                 schedule_steps=schedule, fsdp=False)}
            if plan.large_batch:
                jobs["one_gpu_large"] = dict(jobs["one_gpu"], global_batch=plan.large_batch)
            if plan.compile_blocks:
                jobs["one_gpu_compiled"] = dict(jobs["one_gpu"], compile_blocks=True)
        else:
            record["comm"] = comm_bandwidth(device, world)

            def trace(tag=""):  # rank 0's chrome trace of a job, when asked for
                keep = trace_dir and rank == 0
                return Path(trace_dir) / f"capstone_fsdp_world{world}{tag}_rank0.json.gz" if keep else None

            jobs = {"fsdp": dict(global_batch=plan.batch * world, steps=plan.loss_steps, schedule_steps=schedule,
                                 fsdp=True, profile=profile, trace_path=trace())}
            if plan.large_batch:
                jobs["fsdp_large"] = dict(global_batch=plan.large_batch * world, steps=plan.warmup + plan.steps,
                                          schedule_steps=plan.warmup + plan.steps + plan.profile_steps, fsdp=True,
                                          profile=profile, trace_path=trace("_large"))
            if plan.compile_blocks:
                jobs["fsdp_compiled"] = dict(jobs["fsdp"], compile_blocks=True, trace_path=trace("_compiled"))
        for name, job in jobs.items():
            if rank == 0:
                print(f"[capstone.fsdp] world {world}: {name}", file=sys.stderr, flush=True)
            try:
                try:
                    record["runs"][name] = train(plan, device, **job)
                except Exception:
                    if not (job["fsdp"] and plan.fused_optimizer and device.type == "cuda"):
                        raise
                    # Every rank runs the same code, so every rank lands here: retry with the
                    # Trainer's own (foreach) AdamW rather than lose the run, and say so.
                    import traceback
                    traceback.print_exc()
                    free_memory(device)
                    record["fused_optimizer_failed"] = True
                    record["runs"][name] = train(dataclasses.replace(plan, fused_optimizer=False), device, **job)
            except Exception as error:  # keep what the other job measured
                import traceback
                traceback.print_exc()
                record["errors"][name] = f"{type(error).__name__}: {str(error)[:300]}"
                free_memory(device)
            if world > 1:
                dist.barrier()
            if rank == 0:  # after every job: a run killed later keeps what it measured
                write_stage(record, stage, f"capstone_world{world}.json")
        if rank == 0:
            for name, r in record["runs"].items():
                print(f"[capstone.fsdp] world {world} {name}: {r['ms']:.2f} ms/step, {r['tokens_per_s']:,.0f} tokens/s, "
                      f"peak {r['peak_mib'] or 0:,.0f} MiB, loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}",
                      file=sys.stderr, flush=True)
            return record
        return None
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------------------ report
def _moving_average(xs: list, w: int) -> list:
    return [statistics.fmean(xs[i - w + 1:i + 1]) for i in range(w - 1, len(xs))]


def compare_losses(reference: list, got: list, tolerance: dict = TOLERANCE) -> dict:
    """Step-0 difference and the largest difference of the moving averages, against `tolerance`."""
    n = min(len(reference), len(got))
    if n == 0:
        raise ValueError("no losses to compare")
    a, b = reference[:n], got[:n]
    w = min(tolerance["window"], n)
    step0 = abs(a[0] - b[0])
    moving = max(abs(x - y) for x, y in zip(_moving_average(a, w), _moving_average(b, w)))
    return {"steps": n, "window": w, "step0_abs_diff": step0, "moving_avg_max_abs_diff": moving,
            "max_abs_diff": max(abs(x - y) for x, y in zip(a, b)),
            "within_tolerance": step0 <= tolerance["step0_abs"] and moving <= tolerance["moving_avg_abs"]}


def report(stage: Path) -> dict:
    """The capstone_fsdp record from stage/capstone_world1.json and capstone_world{N}.json."""
    stage = Path(stage)
    one_path = stage / "capstone_world1.json"
    many = sorted(p for p in stage.glob("capstone_world*.json") if p.name != one_path.name)
    if not one_path.is_file() or not many:
        raise FileNotFoundError(f"{stage} needs capstone_world1.json and capstone_world{{N}}.json: run both "
                                "torchrun jobs first")
    one, multi = json.loads(one_path.read_text()), json.loads(many[-1].read_text())
    plan, world = multi["plan"], multi["world"]
    base = one["runs"].get("one_gpu")
    reference = one["runs"].get("one_gpu_global_batch")
    fsdp = multi["runs"].get("fsdp")
    cfg = cm.preset(plan["config"])
    size = f"{cm.count_parameters(cfg) / 1e6:.3g}M, B={plan['batch']}/GPU x T={plan['seq_len']}"
    rows = []

    def add(variant, r, **extra):
        if r is None:
            return
        rows.append({"size": size, "variant": variant, "world": r["world"], "global_batch": r["global_batch"],
                     "ms": r["ms"], "tokens_per_s": r["tokens_per_s"], "peak_mib": r["peak_mib"],
                     "optimizer": r["optimizer"], **extra})

    add("1 GPU", base)
    add(f"1 GPU, batch {plan['batch'] * world} (the {world}-GPU global batch)", reference,
        **({"speedup_vs_one_gpu": reference["tokens_per_s"] / base["tokens_per_s"]} if reference and base else {}))
    base_compiled, fsdp_compiled = one["runs"].get("one_gpu_compiled"), multi["runs"].get("fsdp_compiled")
    add("1 GPU, each Block compiled", base_compiled)
    base_large, fsdp_large = one["runs"].get("one_gpu_large"), multi["runs"].get("fsdp_large")
    large = plan.get("large_batch") or 0
    add(f"1 GPU, batch {large}", base_large)

    def add_fsdp(variant, r, baseline):
        if r is None:
            return
        extra = {}
        if baseline:
            extra = {"speedup_vs_one_gpu": r["tokens_per_s"] / baseline["tokens_per_s"],
                     "scaling_efficiency": r["tokens_per_s"] / (world * baseline["tokens_per_s"])}
        if "overlap" in r:
            extra["overlap"], extra["overlap_by_rank"] = r["overlap"], r.get("overlap_by_rank")
        add(variant, r, **extra)

    # Each FSDP row against the one-GPU row that runs the same code: eager with eager, compiled with compiled.
    add_fsdp(f"FSDP2, {world} GPUs", fsdp, base)
    add_fsdp(f"FSDP2, {world} GPUs, each Block compiled", fsdp_compiled, base_compiled)
    add_fsdp(f"FSDP2, {world} GPUs, batch {large}/GPU", fsdp_large, base_large)
    for name, error in {**one.get("errors", {}), **multi.get("errors", {})}.items():
        rows.append({"size": size, "variant": name, "skipped": f"failed: {error}"})
    loss = compare_losses(reference["losses"], fsdp["losses"]) if reference and fsdp else None
    gpu_run = multi["backend"] == "nccl"
    # The target is met by the better of the two like-for-like comparisons (eager, compiled).
    scaling = max((r["speedup_vs_one_gpu"] for r in rows
                   if r["variant"].startswith("FSDP2") and r.get("speedup_vs_one_gpu") is not None), default=None)
    return {
        "benchmark": BENCHMARK_NAME,
        "title": (f"The capstone's fast model, FSDP2 on {world} GPUs against one GPU ({size}), AdamW, "
                  f"{'bf16 autocast' if (fsdp or base or {}).get('amp') else 'fp32'}"),
        "notes": (f"ms = median CUDA-event step after {plan['warmup']} warm-up steps, the slowest rank; tokens/s = "
                  "global tokens per step / ms; speedup = tokens/s / the 1-GPU row's (same per-GPU batch); peak = "
                  "the largest torch.cuda.max_memory_allocated over ranks, model built to last step; loss curves: "
                  f"{plan['loss_steps']} steps of the {world}-GPU run and of one GPU at the same global batch, same "
                  "seed, batches and schedule"),
        "headline": [r["variant"] for r in rows if r["variant"].startswith("FSDP2")],
        "simulated": not gpu_run,
        "date": multi["date"],
        "machine": {**multi["machine"], "processes": world, "backend": multi["backend"]},
        "ceilings": {**({"copy_gbps": one.get("copy_gbps") or multi["copy_gbps"]}
                        if one.get("copy_gbps") or multi.get("copy_gbps") else {}),
                     **{k: v for k, v in multi.get("comm", {}).items() if k.endswith("_gbps")}},
        "plan": plan, "target_scaling": TARGET_SCALING, "scaling": scaling,
        "target_met": None if scaling is None else scaling >= TARGET_SCALING,
        "loss": {**(loss or {}), "tolerance": TOLERANCE,
                 "curves": {"one_gpu_global_batch": reference["losses"] if reference else None,
                            "fsdp": fsdp["losses"] if fsdp else None}},
        "rows": rows,
    }


def markdown(record: dict) -> str:
    head = ["variant", "GPUs", "global batch", "ms / step", "tokens/s", "vs 1 GPU", "scaling efficiency",
            "peak MiB per GPU", "AdamW"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in record["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['variant']} | {r['skipped']} |" + " |" * (len(head) - 2))
            continue
        lines.append("| " + " | ".join([
            r["variant"], str(r["world"]), str(r["global_batch"]), f"{r['ms']:.2f}", f"{r['tokens_per_s']:,.0f}",
            "-" if r.get("speedup_vs_one_gpu") is None else f"{r['speedup_vs_one_gpu']:.2f}x",
            "-" if r.get("scaling_efficiency") is None else f"{100 * r['scaling_efficiency']:.1f}%",
            fmt(r.get("peak_mib"), ",.0f"), r["optimizer"]]) + " |")
    text = [f"**{record['title']}**: {measured_on(record)}.", "", "\n".join(lines), ""]
    if record.get("scaling") is not None and not record["simulated"]:
        each = "; ".join(f"{r['variant']} {r['speedup_vs_one_gpu']:.2f}x" for r in record["rows"]
                         if r.get("speedup_vs_one_gpu") is not None and r["variant"].startswith("FSDP2"))
        text += [f"Target: >= {record['target_scaling']}x one GPU's tokens/s at the same per-GPU batch: "
                 f"measured {each}; best {record['scaling']:.2f}x, {'met' if record['target_met'] else 'NOT met'}.", ""]
    loss = record["loss"]
    if "step0_abs_diff" in loss:
        t = loss["tolerance"]
        text += [f"Loss over {loss['steps']} steps, {record['machine']['processes']}-GPU FSDP against one GPU at the "
                 f"same global batch: step 0 differs by {loss['step0_abs_diff']:.4f} (bound {t['step0_abs']}), the "
                 f"{loss['window']}-step moving averages by at most {loss['moving_avg_max_abs_diff']:.4f} (bound "
                 f"{t['moving_avg_abs']}); largest single-step difference {loss['max_abs_diff']:.4f}: "
                 f"{'within' if loss['within_tolerance'] else 'NOT within'} the tolerance. Curves: `{PLOT}`.", ""]
    for row in record["rows"]:
        o = row.get("overlap")
        if not o or not o["device_events"]:
            continue
        k = o["kernel_ms"]
        text += [f"Communication in the step of \"{row['variant']}\" (torch.profiler, rank 0, per step of "
                 f"{o['span_ms']:.2f} ms): all-gather {k.get('all_gather', 0):.2f} ms, reduce-scatter "
                 f"{k.get('reduce_scatter', 0):.2f} ms, all-reduce {k.get('all_reduce', 0):.2f} ms of NCCL kernels (a "
                 f"kernel spans its wait for the other rank too); their union {o['comm_ms']:.2f} ms, of which "
                 f"{o['hidden_ms']:.2f} ms overlapped other GPU work and {o['exposed_ms']:.2f} ms did not; GPU idle "
                 f"{o['idle_ms']:.2f} ms.", ""]
    bws = [f"{name.replace('_busbw_gbps', '').replace('_', '-')} {v:.0f}" for name, v in record["ceilings"].items()
           if name.endswith("_busbw_gbps")]
    if bws:
        text += [f"Bus bandwidth measured in the same run (GB/s): {', '.join(bws)}.", ""]
    text.append(f"{record['notes']}.")
    return "\n".join(text) + "\n"


def plot(record: dict, path: Path) -> Path | None:
    curves = record["loss"]["curves"]
    if not curves.get("fsdp") or not curves.get("one_gpu_global_batch"):
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    world = record["machine"]["processes"]
    ax.plot(curves["one_gpu_global_batch"], lw=1.0, label="1 GPU, same global batch")
    ax.plot(curves["fsdp"], lw=1.0, ls="--", label=f"FSDP2, {world} GPUs")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats / byte)")
    gpu = record["machine"].get("gpu") or "CPU simulation"
    ax.set_title(f"capstone fast model, {record['rows'][0]['size']}; {gpu}", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def save(record: dict, out: Path) -> list[Path]:
    from course import bench

    paths = bench.write_record(record, out, markdown(record))
    png = plot(record, Path(out) / PLOT)
    return paths + ([png] if png else [])


# ------------------------------------------------------------------------------ warm the cache
def warm(batch: int, procs: int, config: str = "gpt2_124m") -> int:
    """Compile FlashAttention's autotune configs for the model's attention shape in `procs` processes."""
    if not runtime.on_gpu():
        print("warm: compiles and launches GPU kernels; nothing to do without a GPU", file=sys.stderr)
        return 0
    from week4_triton_dl.attention import warm_cache

    cfg = cm.preset(config)
    shape = (batch, cfg.n_heads, cfg.max_seq_len, cfg.head_dim)
    warm_cache([(shape, True)], procs, lambda done, total: print(
        f"\rcompiled {done}/{total} FlashAttention config sets for {shape}", end="", file=sys.stderr, flush=True))
    print(file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------ all (the driver)
def run_all(gpus: int, out: Path | None, stage: Path | None = None, extra: list[str] = ()) -> int:
    """torchrun with 1 process, then with `gpus` (profiled), then the report: what `all` does
    (`torchrun.drive`; the one-GPU job learns N, its reference loss curve's batch is N x B)."""
    return drive("capstone.fsdp", gpus, report=report, markdown=markdown, save=save, out=out, stage=stage,
                 run_args=["--world", str(gpus)], extra=extra)


# ------------------------------------------------------------------------------ command line
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="this process's part of a torchrun job")
    r.add_argument("--stage", required=True)
    r.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda where there is a GPU")
    r.add_argument("--tiny", action="store_true", help="the tiny model and a few steps (a CPU dry run)")
    r.add_argument("--batch", type=int, default=None, help="sequences per GPU")
    r.add_argument("--steps", type=int, default=None, help="timed steps of the one-GPU baseline")
    r.add_argument("--loss-steps", type=int, default=None, help="steps of both loss curves")
    r.add_argument("--warmup", type=int, default=None)
    r.add_argument("--large-batch", type=int, default=None, help="also time both sides at this batch per GPU (0: not)")
    r.add_argument("--world", type=int, default=None, help="N of the N-GPU run (the one-GPU reference's batch is N x B)")
    r.add_argument("--profile", action="store_true", help="profile the FSDP steps (communication overlap)")
    r.add_argument("--trace-dir", default=None, help="keep rank 0's chrome trace here (gzipped)")
    r.add_argument("--trainer-optimizer", action="store_true", help="keep the Trainer's foreach AdamW under FSDP")
    s = sub.add_parser("report", help="merge the stage files into capstone_fsdp.json|md")
    s.add_argument("--stage", required=True)
    s.add_argument("--out", default=None, help="results folder (GPU runs only; default: print)")
    a = sub.add_parser("all", help="torchrun with 1 process, then with --gpus, then the report")
    a.add_argument("--gpus", type=int, default=2)
    a.add_argument("--out", default=None, help="results folder (GPU runs only)")
    a.add_argument("--stage", default=None)
    w = sub.add_parser("warm", help="compile FlashAttention's autotune configs for the model's shape, in parallel")
    w.add_argument("--batch", type=int, default=GPU_PLAN.batch)
    w.add_argument("--procs", type=int, default=8)
    return p


def plan_from_args(args) -> Plan:
    plan = TINY_PLAN if args.tiny else GPU_PLAN
    changes = {k: v for k, v in (("batch", args.batch), ("steps", args.steps), ("loss_steps", args.loss_steps),
                                 ("warmup", args.warmup), ("world", args.world),
                                 ("large_batch", args.large_batch)) if v is not None}
    for k, v in changes.items():
        low = 0 if k in ("warmup", "large_batch") else 1
        if v < low:
            raise SystemExit(f"--{k.replace('_', '-')} must be >= {low}, got {v}")
    if args.trainer_optimizer:
        changes["fused_optimizer"] = False
    plan = dataclasses.replace(plan, **changes)
    if plan.loss_steps <= plan.warmup:
        raise SystemExit(f"--loss-steps ({plan.loss_steps}) must exceed --warmup ({plan.warmup}): the N-GPU "
                         "run's timed steps are those after the warm-up")
    return plan


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.command == "warm":
        return warm(args.batch, args.procs)
    if args.command == "all":
        return run_all(args.gpus, Path(args.out) if args.out else None, Path(args.stage) if args.stage else None)
    if args.command == "run":
        plan = plan_from_args(args)
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        run(plan, Path(args.stage), device_kind=device, profile=args.profile,
            trace_dir=Path(args.trace_dir) if args.trace_dir else None)
        return 0
    publish(report(Path(args.stage)), Path(args.out) if args.out else None, markdown, save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
