"""Data parallelism measured: DDP, ZeRO-1 and FSDP2 under torchrun on 1 and N GPUs, with the
communication's overlap read from a profile.

`distributed.py` is the lesson (what each strategy keeps and sends; `train` checks that every
strategy reproduces one process). This is its measuring bench, run the way real jobs run: one
process per GPU started by torchrun, each joining the NCCL group from its environment.
Over 500 lines: a bench, no kernels: the strategies' state and wire bytes, the measuring run and
the report, behind one command line (the process group and the driver the capstone's bench shares:
`torchrun.py`; the overlap read from a profile and the collectives' bandwidth: `communication.py`).

    torchrun --standalone --nproc-per-node 1 -m week5_integration.scaleout run --stage /tmp/w5
    torchrun --standalone --nproc-per-node 2 -m week5_integration.scaleout run --stage /tmp/w5 --profile
    python -m week5_integration.scaleout report --stage /tmp/w5 --out week5_integration/results
    python -m week5_integration.scaleout all --gpus 2 --out week5_integration/results   # the three above
    torchrun --nproc-per-node 2 -m week5_integration.scaleout run --stage /tmp/w5cpu --device cpu --tiny
                                                                  # a gloo dry run on a CPU (saves nothing)

What `run` measures, per strategy, in each process (the world-1 run adds "single": the plain model,
no wrapper, the baseline of the scaling efficiency):
* the step: `warmup` steps (allocation, cuBLAS heuristics, NCCL's first connections), then `steps`
  timed steps: wall time over all of them (host clock, one synchronization at each end; so the
  host's work and any wait for another rank are in it) and each step's CUDA-event time; the slowest
  rank's figures are kept. tokens/s = global tokens per step / mean step time.
* memory per GPU: `torch.cuda.max_memory_allocated` from before the model is built to the end of
  the timed steps (the most any rank held), and the model state counted tensor by tensor on this
  rank: parameters, gradients and AdamW's moments (local shards only), in bytes per parameter of
  the whole model. fp32 master weights, fp32 gradients, AdamW (m, v fp32), bf16 autocast:
  16 B/param unsharded; ZeRO-1 4 + 4 + 8/N; FSDP (either resharding) 16/N at rest.
* with `--profile`: `profile_steps` more steps under torch.profiler; `communication.overlap` reads
  the device timeline of the trace: how much of the NCCL kernels' time other device work hid.
  `communication.comm_bandwidth` times each collective in the same run (bus bandwidth), and the
  report divides each strategy's bytes on the wire (`distributed.ring_bytes`) by it: the time the
  transfers would take alone.

Strategies: `distributed.STRATEGIES` (ddp, zero1, fsdp_grad_op, fsdp: `distributed.wrap_model`) and
`fsdp_bf16`: `fully_shard` with `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`: the
all-gathers move bf16 (2 bytes per parameter instead of 4), the reduce-scatter stays fp32.

`report` merges the world-1 and world-N files into `fsdp_week5.json` (a `course.bench` record)
and `fsdp_week5.md` (the step table, the bandwidth ceilings and the overlap table), which the
notes include (`<!-- results:fsdp_week5.md -->`).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist

from course import bench_timing, runtime  # before anything imports triton (torch.profiler, FSDP may)
from course.bench import fmt
from course.bench_clock import LoopClock
from week5_integration import data
from week5_integration import distributed as dd
from week5_integration import model as m
from week5_integration.communication import comm_bandwidth, profile_overlap
from week5_integration.torchrun import (drive, free_memory, from_every_rank, init_from_env, max_over_ranks, publish, sync,
                                        write_stage)

ROOT = Path(__file__).resolve().parent
BENCHMARK_NAME = dd.BENCHMARK_NAME  # "fsdp_week5": the table of lesson 08
STRATEGIES = dd.STRATEGIES + ("fsdp_bf16",)
ZERO_STAGE = {**dd.ZERO_STAGE, "single": None, "fsdp_bf16": 3}


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one `run` trains: the model, the per-process batch, how many steps of each kind."""
    config: str = "gpt2"           # "gpt2": GPT2_SMALL (124M with GPT-2's vocabulary); "tiny": GPT_TINY (CPU)
    batch: int = 8                 # sequences per process (the global batch is batch x world)
    seq_len: int = 1024
    warmup: int = 3
    steps: int = 15
    profile_steps: int = 3
    lr: float = 1e-4
    amp: bool = True               # bf16 autocast (weights, gradients and AdamW state stay fp32)
    seed: int = 0
    corpus_bytes: int = 1 << 21

    def model_config(self) -> m.GPTConfig:
        if self.config == "gpt2":
            return m.GPT2_SMALL
        if self.config == "tiny":
            return m.config(m.GPT_TINY, vocab_size=data.VOCAB_SIZE)
        raise ValueError(f"config must be 'gpt2' or 'tiny', got {self.config!r}")


GPU_PLAN = Plan()
TINY_PLAN = Plan(config="tiny", batch=2, seq_len=32, warmup=1, steps=3, profile_steps=1, lr=1e-3, amp=False,
                 corpus_bytes=1 << 15)


# ------------------------------------------------------------------------------ the strategies
def wrap(strategy: str, gpt: m.GPT, lr: float, device: torch.device):
    """(module to call, optimizer): `distributed.wrap_model`, plus fsdp_bf16 (bf16 all-gathers)."""
    if strategy != "fsdp_bf16":
        return dd.wrap_model(strategy, gpt, lr, device)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    module, mesh = dd.LossModel(gpt), dd.fsdp_mesh(device)
    for block in gpt.blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(module, mesh=mesh, mp_policy=policy)
    return module, torch.optim.AdamW(module.parameters(), lr=lr)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def model_state_bytes(module: torch.nn.Module, opt) -> dict:
    """Bytes this rank holds of parameters, gradients and optimizer state (its shards only)."""
    params = grads = 0
    for p in module.parameters():
        local = _local(p.detach())
        params += local.numel() * local.element_size()
        if p.grad is not None:
            g = _local(p.grad)
            grads += g.numel() * g.element_size()
    inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer keeps its shard's state in .optim
    optimizer = 0
    for state in inner.state.values():
        for v in state.values():
            if torch.is_tensor(v) and v.dim() > 0:
                v = _local(v)
                optimizer += v.numel() * v.element_size()
    return {"params": params, "grads": grads, "optimizer": optimizer, "total": params + grads + optimizer}


def predicted_state_bytes_per_param(strategy: str, world: int) -> float:
    """fp32 weights (4) + fp32 gradients (4) + AdamW m and v (8), at rest between steps, per GPU."""
    if strategy in ("single", "ddp"):
        return 16.0
    if strategy == "zero1":
        return 4 + 4 + 8 / world
    if strategy in ("fsdp_grad_op", "fsdp", "fsdp_bf16"):
        return 16 / world
    raise ValueError(f"unknown strategy {strategy!r}")


def wire_bytes_per_step(strategy: str, params: int, world: int) -> dict:
    """{collective: bytes each GPU sends per step} (ring algorithms; `distributed.ring_bytes`).

    DDP all-reduces fp32 gradients; ZeRO-1 (ZeroRedundancyOptimizer) all-reduces them too, then
    broadcasts each rank's updated fp32 shard (N - 1 shards of Psi/N arrive: an all-gather's worth);
    FSDP all-gathers fp32 (bf16 for fsdp_bf16) weights for the forward, again for the backward
    (the root unit, held from forward to backward, only once: counted twice here, a bound), and
    reduce-scatters fp32 gradients; SHARD_GRAD_OP gathers once.
    """
    if world == 1 or strategy == "single":
        return {}
    grads = 4 * params
    if strategy == "ddp":
        return {"all_reduce": dd.ring_bytes("all_reduce", grads, world)}
    if strategy == "zero1":
        return {"all_reduce": dd.ring_bytes("all_reduce", grads, world),
                "broadcast": dd.ring_bytes("all_gather", 4 * params, world)}
    gathered = (2 if strategy == "fsdp_bf16" else 4) * params
    gathers = 1 if strategy == "fsdp_grad_op" else 2
    return {"all_gather": gathers * dd.ring_bytes("all_gather", gathered, world),
            "reduce_scatter": dd.ring_bytes("reduce_scatter", grads, world)}


# ------------------------------------------------------------------------------ correctness worker
def match_worker(rank: int, world: int, strategies: tuple, kwargs: dict) -> dict:
    """For `distributed.launch`: each strategy's `distributed.train` in this rank (losses, final
    weights), and the size of this rank's shard of every parameter under FSDP ("shards")."""
    device = torch.device("cuda", rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    results = {}
    for strategy in strategies:
        results[strategy] = dd.train(strategy, rank=rank, world=world, device=device, **kwargs)
        dist.barrier()
    torch.manual_seed(kwargs.get("seed", 0))
    gpt = m.GPT(kwargs.get("cfg") or m.config(m.GPT_TINY, vocab_size=data.VOCAB_SIZE)).to(device)
    module, _ = wrap("fsdp", gpt, 1e-3, device)
    results["shards"] = {name: (_local(p.detach()).numel(), p.numel(), tuple(p.shape))
                         for name, p in module.named_parameters()}
    return results


# ------------------------------------------------------------------------------ one strategy
_TOKENS: dict = {}


def _tokens(n_bytes: int, seed: int) -> torch.Tensor:
    """The generated stories corpus as byte tokens (made once per process: ~0.25 s per MiB)."""
    if (n_bytes, seed) not in _TOKENS:
        _TOKENS[(n_bytes, seed)] = data.encode(data.corpus("stories", n_bytes, seed=seed))
    return _TOKENS[(n_bytes, seed)]


def measure_strategy(strategy: str, plan: Plan, rank: int, world: int, device: torch.device, *,
                     profile: bool = False, trace_path: Path | None = None) -> dict:
    """Train `strategy` for warmup + steps (+ profile_steps) steps; figures of the slowest rank."""
    if strategy == "single" and world != 1:
        raise ValueError("'single' is the one-process baseline: run it with --nproc-per-node 1")
    if strategy != "single" and strategy not in STRATEGIES:
        raise ValueError(f"strategy must be 'single' or one of {STRATEGIES}, got {strategy!r}")
    cfg = plan.model_config()
    free_memory(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(plan.seed)  # the same initial weights in every process (FSDP does not broadcast)
    gpt = m.GPT(cfg).to(device)
    params = m.count_parameters(gpt)  # before wrapping: the whole model's count
    module, opt = wrap(strategy, gpt, plan.lr, device)
    tokens = _tokens(plan.corpus_bytes, plan.seed)
    source = data.Batches(tokens, plan.batch * world, plan.seq_len, seed=plan.seed)  # the global batch
    total = plan.warmup + plan.steps + (plan.profile_steps if profile else 0)
    # Every batch on the device before the clock starts: the timed loop only queues GPU work.
    batches = [tuple(t.to(device) for t in dd.shard_batch(*source.next(), rank, world)) for _ in range(total)]
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if plan.amp else nullcontext()
    losses, position = [], iter(batches)

    def step():
        x, y = next(position)
        with autocast:
            loss = module(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach().float())

    for _ in range(plan.warmup):
        step()
    sync(device)
    if world > 1:
        dist.barrier()
    use_events = device.type == "cuda"
    # The kit's clock (course/bench_clock.py): each step's CUDA events, the host's time per step over the
    # loop and the drain after it, which say whether the GPU waited for this rank's Python (host_bound).
    clock = LoopClock(plan.steps, events=use_events)
    started = time.perf_counter()
    for _ in range(plan.steps):
        clock.start()
        step()
        clock.stop()
    timing = clock.timing()  # waits for the GPU (the drain): before sync, which would leave it nothing to wait for
    sync(device)
    wall_ms = (time.perf_counter() - started) * 1e3 / plan.steps
    peak = torch.cuda.max_memory_allocated(device) if use_events else 0
    reserved = torch.cuda.max_memory_reserved(device) if use_events else 0
    state = model_state_bytes(module, opt)
    local = torch.stack(losses[:plan.warmup + plan.steps])
    global_losses = local.clone()
    if world > 1:
        dist.all_reduce(global_losses)  # sum of the shard means; / world = the global batch's mean
        global_losses /= world
    wall_max, median_max, peak_max, reserved_max = max_over_ranks(
        [wall_ms, timing.median_ms, peak, reserved], device)
    if timing.host_bound is not None:  # host-bound on any rank; the slowest rank's host ms per step
        flag, host_max = max_over_ranks([float(timing.host_bound), timing.host_ms], device)
        timing = dataclasses.replace(timing, host_bound=flag > 0, host_ms=host_max)
    result = {
        "strategy": strategy, "world": world, "zero_stage": ZERO_STAGE.get(strategy),
        "ms": wall_max, "ms_median_step": median_max, "ms_rank": wall_ms,
        **bench_timing.row_fields(timing),  # whether the host paced the steps (every rank has events, or none)
        "tokens_per_step": plan.batch * world * plan.seq_len,
        "tokens_per_s": plan.batch * world * plan.seq_len / (wall_max * 1e-3),
        "peak_mib": peak_max / 2**20 if use_events else None,
        "reserved_mib": reserved_max / 2**20 if use_events else None,
        "state_bytes": state, "params": params,
        "state_bytes_per_param": state["total"] / params,
        "predicted_state_bytes_per_param": predicted_state_bytes_per_param(strategy, world),
        "losses": global_losses.cpu().tolist(), "local_losses": local.cpu().tolist(),
    }
    if profile:
        result["overlap"] = profile_overlap(step, plan.profile_steps, device,
                                            trace_path if rank == 0 else None)
        result["overlap_by_rank"] = from_every_rank(result["overlap"])
    del module, opt, gpt, batches, position
    free_memory(device)
    return result


# ------------------------------------------------------------------------------ run (one process)
def run(plan: Plan, strategies, stage: Path, *, device_kind: str, profile: bool = False,
        profile_strategies=("ddp", "fsdp", "fsdp_bf16"), trace_dir: Path | None = None) -> dict | None:
    """This process's part of a torchrun job; rank 0 writes `stage/world{N}.json` and returns it."""
    rank, world, device = init_from_env(device_kind)
    try:
        chosen = [s for s in strategies if not (s == "single" and world > 1)]
        if world == 1 and "single" not in chosen:
            chosen = ["single", *chosen]  # the baseline every efficiency divides by
        record = {"world": world, "backend": dist.get_backend(), "plan": dataclasses.asdict(plan),
                  "model": dataclasses.asdict(plan.model_config()),
                  "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                  "machine": runtime.describe(), "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
                  "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
                  "strategies": {}, "errors": {}}
        if device.type == "cuda" and rank == 0:  # every record names the copy ceiling of its GPU
            from course import bench
            record["copy_gbps"] = bench.copy_bandwidth_gbps()
        record["comm"] = comm_bandwidth(device, world)
        for strategy in chosen:
            if rank == 0:
                print(f"[scaleout] world {world}: {strategy}", file=sys.stderr, flush=True)
            try:
                trace = Path(trace_dir) / f"week5_{strategy}_world{world}_rank0.json.gz" if trace_dir else None
                record["strategies"][strategy] = measure_strategy(
                    strategy, plan, rank, world, device, profile=profile and strategy in profile_strategies,
                    trace_path=trace)
            except Exception as error:  # one strategy failing must not lose the others' figures
                import traceback
                traceback.print_exc()
                record["errors"][strategy] = f"{type(error).__name__}: {str(error)[:300]}"
                free_memory(device)
            if world > 1:
                dist.barrier()
            if rank == 0:  # after every strategy: a run killed later keeps what it measured
                write_stage(record, stage, f"world{world}.json")
        if rank == 0:
            write_stage(record, stage, f"world{world}.json")
            for name, r in record["strategies"].items():
                print(f"[scaleout] world {world} {name:>12}: {r['ms']:8.2f} ms/step, {r['tokens_per_s']:>12,.0f} tokens/s, "
                      f"peak {r['peak_mib'] or 0:,.0f} MiB, state {r['state_bytes_per_param']:.2f} B/param",
                      file=sys.stderr, flush=True)
            return record
        return None
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------------------ report
def _load_stage(stage: Path) -> list[dict]:
    files = sorted(Path(stage).glob("world*.json"), key=lambda p: int(p.stem[5:]))
    if not files:
        raise FileNotFoundError(f"no world*.json in {stage}: run `torchrun ... -m week5_integration.scaleout run` first")
    return [json.loads(p.read_text()) for p in files]


def report(stage: Path) -> dict:
    """The `fsdp_week5` record from the world-1 and world-N files of `stage`."""
    worlds = _load_stage(stage)
    one = next((w for w in worlds if w["world"] == 1), None)
    base = one["strategies"].get("single") if one else None
    first = worlds[-1]
    plan = first["plan"]
    cfg = m.GPTConfig(**first["model"])
    params = m.count_parameters(_meta_model(cfg))
    rows = []
    for w in worlds:
        n = w["world"]
        label = f"{n} GPU{'s' if n > 1 else ''}, B={plan['batch']}/GPU x T={plan['seq_len']}"
        if w["backend"] == "gloo":
            label = f"{n} process{'es' if n > 1 else ''} (gloo), B={plan['batch']}/proc x T={plan['seq_len']}"
        for name, r in w["strategies"].items():
            row = {"size": label, "variant": name, "world": n, "zero_stage": r["zero_stage"], "ms": r["ms"],
                   "ms_median_step": r["ms_median_step"], "tokens_per_s": r["tokens_per_s"],
                   "tokens_per_s_per_gpu": r["tokens_per_s"] / n, "peak_mib": r["peak_mib"],
                   "reserved_mib": r["reserved_mib"], "state_bytes_per_param": r["state_bytes_per_param"],
                   "predicted_state_bytes_per_param": r["predicted_state_bytes_per_param"],
                   "state_mib": r["state_bytes"]["total"] / 2**20,
                   # whether the host paced the steps on any rank (stage files made before the flag have none)
                   **{k: r[k] for k in ("host_bound", "host_ms") if k in r}}
            if base:
                row["scaling_efficiency"] = r["tokens_per_s"] / (n * base["tokens_per_s"])
                row["speedup_vs_one_gpu"] = r["tokens_per_s"] / base["tokens_per_s"]
            wire = wire_bytes_per_step(name, params, n)
            if wire:
                row["wire_mb"] = {k: v / 1e6 for k, v in wire.items()}
                bw = {k: w["comm"].get(f"{'all_gather' if k == 'broadcast' else k}_busbw_gbps") for k in wire}
                if all(bw.values()):
                    # busbw = wire bytes / time, so each collective's time alone is its wire bytes / busbw.
                    row["wire_ms"] = sum(wire[k] / (bw[k] * 1e9) * 1e3 for k in wire)
            if "overlap" in r:
                row["overlap"] = r["overlap"]
                row["overlap_by_rank"] = r.get("overlap_by_rank")
            rows.append(row)
        for name, error in w.get("errors", {}).items():
            rows.append({"size": label, "variant": name, "skipped": f"failed: {error}"})
    gpu_run = all(w["backend"] == "nccl" for w in worlds)
    machine = {**first["machine"], "processes": [w["world"] for w in worlds], "backend": first["backend"],
               "gpus": first.get("gpus")}
    ceilings = {}
    copy = next((w["copy_gbps"] for w in ([one] if one else []) + worlds if w.get("copy_gbps")), None)
    if copy:
        ceilings["copy_gbps"] = copy
    for w in worlds:
        for k, v in w.get("comm", {}).items():
            if k.endswith("_gbps"):
                ceilings[f"{k[:-5]}_{w['world']}gpus_gbps"] = v
    title = (f"Data-parallel training step of the week-5 GPT (d{cfg.d_model} L{cfg.n_layers} V{cfg.vocab_size}, "
             f"{params / 1e6:.3g}M parameters), AdamW, {'bf16 autocast' if plan['amp'] else 'fp32'}, "
             f"torchrun, {'NCCL' if gpu_run else 'gloo'}")
    return {
        "benchmark": BENCHMARK_NAME, "title": title,
        "notes": (f"ms = mean step over {plan['steps']} steps after {plan['warmup']} warm-up steps (host clock, "
                  "slowest rank; * where the host paced the steps on a rank: course/bench_clock.py); "
                  "tokens/s = global tokens per step / ms; scaling efficiency = tokens/s / "
                  "(N x the single process's tokens/s at the same per-GPU batch); peak = the largest "
                  "torch.cuda.max_memory_allocated over ranks (model built to last timed step); state = parameters + "
                  "gradients + AdamW moments held by one rank (its shards), bytes per parameter of the model; "
                  "overlap from torch.profiler over "
                  f"{plan['profile_steps']} more steps, rank 0 (every rank's in the json)"),
        "headline": ["ddp", "fsdp"],
        "simulated": not gpu_run,
        "date": first["date"], "machine": machine, "ceilings": ceilings,
        "params": params, "plan": plan, "nccl_env": first.get("nccl_env"),
        "comm": {w["world"]: w.get("comm", {}) for w in worlds},
        "rows": rows,
    }


def _meta_model(cfg: m.GPTConfig) -> m.GPT:
    with torch.device("meta"):
        return m.GPT(cfg)


def markdown(record: dict) -> str:
    """The step table, the collectives' bandwidth measured in the same run, the overlap table."""
    from course.bench import measured_on

    head = ["GPUs", "strategy", "ZeRO stage", "ms / step", "tokens/s", "tokens/s per GPU", "scaling efficiency",
            "peak MiB per GPU", "state MiB per GPU", "state B/param (predicted)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in record["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['size']} | {r['variant']} | {r['skipped']} |" + " |" * (len(head) - 3))
            continue
        eff = r.get("scaling_efficiency")
        lines.append("| " + " | ".join([
            str(r["world"]), r["variant"], "-" if r["zero_stage"] is None else str(r["zero_stage"]),
            bench_timing.mark(f"{r['ms']:.2f}", r),
            f"{r['tokens_per_s']:,.0f}", f"{r['tokens_per_s_per_gpu']:,.0f}", "-" if eff is None else f"{100 * eff:.1f}%",
            fmt(r.get("peak_mib"), ",.0f"), f"{r['state_mib']:,.0f}",
            f"{r['state_bytes_per_param']:.2f} ({r['predicted_state_bytes_per_param']:.2f})"]) + " |")
    plan = record["plan"]
    text = [f"**{record['title']}**: {measured_on(record)}.", "",
            f"Per-GPU batch {plan['batch']} x {plan['seq_len']} tokens in every row; {record['params']:,} parameters.", "",
            "\n".join(lines), ""]
    bws = []
    for world, comm in sorted(record.get("comm", {}).items(), key=lambda kv: int(kv[0])):
        got = [f"{k.replace('_busbw_gbps', '').replace('_', '-')} {v:.0f}" for k, v in comm.items() if k.endswith("_gbps")]
        if got:
            bws.append(f"{world} GPUs, {comm['bytes'] / 2**20:.0f} MiB fp32: " + ", ".join(got))
    if bws:
        text += ["Bus bandwidth of each collective measured in the same run (GB/s, NCCL's definition): "
                 + "; ".join(bws) + ".", ""]
    profiled = [r for r in record["rows"] if r.get("overlap")]
    if profiled:
        head = ["GPUs", "strategy", "step (profiled) ms", "all-reduce ms", "all-gather ms", "reduce-scatter ms",
                "comm ms", "hidden ms", "exposed ms", "hidden", "wire ms alone", "other GPU work ms", "GPU idle ms"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in profiled:
            o = r["overlap"]
            k = o["kernel_ms"]
            lines.append("| " + " | ".join([
                str(r["world"]), r["variant"], f"{o['span_ms']:.2f}", fmt(k.get("all_reduce"), ".2f"),
                fmt(k.get("all_gather"), ".2f"), fmt(k.get("reduce_scatter"), ".2f"), f"{o['comm_ms']:.2f}",
                f"{o['hidden_ms']:.2f}", f"{o['exposed_ms']:.2f}",
                "-" if o["hidden_fraction"] is None else f"{100 * o['hidden_fraction']:.0f}%",
                fmt(r.get("wire_ms"), ".2f"), f"{o['compute_ms']:.2f}", f"{o['idle_ms']:.2f}"]) + " |")
        text += ["**Communication against computation** (torch.profiler, rank 0, per step; every rank's figures in "
                 "the json):", "", "\n".join(lines), "",
                 "all-reduce / all-gather / reduce-scatter ms = summed NCCL kernel time of that collective (a kernel "
                 "spans its wait for the other rank too); comm = the union of all NCCL kernels' intervals; hidden = "
                 "the part of it during which another kernel or copy ran; exposed = comm - hidden; wire ms alone = "
                 "bytes each GPU sends (`wire_bytes_per_step`) / the bus bandwidth above; other GPU work = the union "
                 "of every non-NCCL kernel and copy; idle = the profiled step's span minus all device work.", ""]
    text.append(f"{record['notes']}.")
    return "\n".join(text) + "\n" + bench_timing.footnote(record["rows"])


def save(record: dict, out: Path) -> list[Path]:
    from course import bench

    return bench.write_record(record, out, markdown(record))


def run_all(gpus: int, out: Path | None, stage: Path | None = None, extra: list[str] = ()) -> int:
    """torchrun with 1 process, then with `gpus`, then the report: what `all` does (`torchrun.drive`)."""
    return drive("week5_integration.scaleout", gpus, report=report, markdown=markdown, save=save, out=out,
                 stage=stage, extra=extra)


# ------------------------------------------------------------------------------ command line
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="this process's part of a torchrun job (rank 0 writes STAGE/world{N}.json)")
    r.add_argument("--stage", required=True, help="folder for the per-world files (report reads them)")
    r.add_argument("--strategies", nargs="+", default=None,
                   help=f"default: single (world 1 only) and {' '.join(STRATEGIES)}")
    r.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda where there is a GPU")
    r.add_argument("--tiny", action="store_true", help="the tiny model and a few steps (a CPU dry run)")
    r.add_argument("--batch", type=int, default=None, help="sequences per process")
    r.add_argument("--steps", type=int, default=None, help="timed steps per strategy")
    r.add_argument("--warmup", type=int, default=None)
    r.add_argument("--profile", action="store_true", help="profile ddp, fsdp and fsdp_bf16 (communication overlap)")
    r.add_argument("--profile-steps", type=int, default=None)
    r.add_argument("--trace-dir", default=None, help="keep rank 0's chrome traces here (gzipped)")
    s = sub.add_parser("report", help="merge STAGE/world*.json into the fsdp_week5 record")
    s.add_argument("--stage", required=True)
    s.add_argument("--out", default=None, help="results folder (GPU runs only; default: print)")
    a = sub.add_parser("all", help="torchrun world 1 and world N, then report")
    a.add_argument("--gpus", type=int, default=2)
    a.add_argument("--out", default=None)
    a.add_argument("--stage", default=None)
    return p


def plan_from_args(args) -> Plan:
    plan = TINY_PLAN if args.tiny else GPU_PLAN
    changes = {k: v for k, v in (("batch", args.batch), ("steps", args.steps), ("warmup", args.warmup),
                                 ("profile_steps", args.profile_steps)) if v is not None}
    for k, v in changes.items():
        if v < (0 if k == "warmup" else 1):
            raise SystemExit(f"--{k.replace('_', '-')} must be >= {0 if k == 'warmup' else 1}, got {v}")
    return dataclasses.replace(plan, **changes)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.command == "run":
        plan = plan_from_args(args)
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        strategies = args.strategies or ["single", *STRATEGIES]
        unknown = [s for s in strategies if s != "single" and s not in STRATEGIES]
        if unknown:
            raise SystemExit(f"unknown strategies {unknown}; choose from single {' '.join(STRATEGIES)}")
        run(plan, strategies, Path(args.stage), device_kind=device, profile=args.profile,
            trace_dir=Path(args.trace_dir) if args.trace_dir else None)
        return 0
    if args.command == "report":
        publish(report(Path(args.stage)), Path(args.out) if args.out else None, markdown, save)
        return 0
    return run_all(args.gpus, Path(args.out) if args.out else None, Path(args.stage) if args.stage else None)


if __name__ == "__main__":
    sys.exit(main())
