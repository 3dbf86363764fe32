"""The capstone's headline numbers, measured in one command (H100: about 4 minutes).

The capstone's bench, no kernels: three measuring phases and their records, behind one command
line; the profile's kinds of kernels are `step_profile.py`'s, the summary of every target `summary.py`'s.
Over 500 lines: the three phases share one ladder of variants, its refusals off sm_90a and its guards, and
every issue's rows (32's fused GEMMs, 33's attention) joined that ladder here; the variants' models are
built by model.py's ladder(), only their order and measuring live here.

    python -m capstone.measure --out capstone/results          # on the GPU
    python -m capstone.measure --out /tmp/capm                 # on a CPU: a smoke test (tiny model)

Phases, each guarded (a failure is recorded in the results and the next phase runs), in the
order of what the README needs most, each stopped when the time budget (`--budget-s`) is spent:

1. train: tokens/s and peak memory of one training step (AdamW, bf16 autocast) of the 124M
   model at batch 8 x 1024, the optimization ladder one rung at a time:
   torch (the eager twin) -> +flash_attention -> +fused_norm_rope_swiglu -> fast (+fused_ce),
   then the fused GEMMs of issue 32 (week 4's fused_linear), one fusion a rung: +swiglu_gemm ->
   +residual_gemm -> +norm_gemm (compiled too: fused_gemms+compile[+cudagraphs]), and the same SwiGLU and
   residual fusions on week 1's CUDA C wgmma kernels, compiled (wgmma_gemms+compile[+cudagraphs]; sm_90a
   only: elsewhere their rows are skipped with the reason), the attention isolated (issue 33): fast with its
   attention forced to SDPA, to week 4's Triton kernel, or to week 4's CUDA C Hopper kernels, forward and
   backward (sdpa_attention, triton_attention, hopper_attention[+compile[+cudagraphs]]; Hopper: sm_90a
   only, skipped elsewhere with the reason; every row names the attention it ran),
   then the twin under torch.compile (the bar a practitioner would pick instead) and the fast
   model under torch.compile (compiling what the kernels leave: residual adds, the embedding,
   the optimizer is not compiled). Median of `steps` CUDA-event-timed steps after `warmup`.
   A torch.profiler table of the fast model's kernels (3 steps) goes to profile.md, and of the CUDA-graphed
   steps of fast, the twin and the fused GEMMs' models to profile_*.md (PROFILES).
2. decode: greedy decode tokens/s at ~1k context (prompt 960, 64 new tokens), batch 1 and 8:
   the no-cache eager loop of the twin (the baseline), then the fast model with the KV cache
   (eager) and with the KV cache + CUDA graph (week 5's StaticDecoder), bf16 weights.
3. loss: 200 steps of the eager twin, the fast model, the fused GEMMs' models (Triton; CUDA C on sm_90a) and
   the Hopper attention's (sm_90a), same seed and batches, at batch
   4 x 1024 (half the throughput batch, to keep this phase near 10 s): the loss curves, their
   largest difference, and whether it is within the tolerance stated in `LOSS_TOLERANCE`.

Writes capstone_train.json|md and capstone_decode.json|md (records shaped like
`course.bench.run`'s, so `python -m course report` fills `<!-- results:capstone_train -->`
blocks), capstone_loss.json (curves; not a table record) + loss_fast_vs_eager.png,
profile*.md, summary.md (every target of issue 8 with its measured value), fused_roads.md (the fused
GEMMs' graphed steps by kind of kernel against the twin's, when they were profiled), and prints
summary.md. On the CPU every size shrinks (tiny model, a few steps) and the compile phases are
skipped: the numbers then measure Python and the Triton interpreter, and say so.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

from course import bench, bench_timing, runtime
from capstone import attention_ops
from capstone import model as cm
from capstone import wgmma_ops
from capstone.step_profile import profile_steps
from capstone.summary import fused_roads_markdown, summary_markdown
from capstone.train import Trainer
from week5_integration import inference
from week5_integration import model as m
from week5_integration.train import TrainConfig

TRAIN_BENCH, DECODE_BENCH, LOSS_FILE = "capstone_train", "capstone_decode", "capstone_loss"
FSDP_BENCH = "capstone_fsdp"  # written by capstone/fsdp.py (2 GPUs); the summary's FSDP row reads it

# Loss tolerance (bf16 autocast in both runs). Step 0 sees identical weights and batch: the two
# losses differ only by where bf16 rounding happens (the fused CE rounds logits chunk by chunk
# in fp32 from bf16 GEMMs; the twin rounds the whole logits to bf16 then upcasts: relative
# 2^-8 per logit, averaging out over 4096 tokens to ~1e-3 of the loss): 0.01 absolute. Later
# steps follow different trajectories (each step's rounding changes the next weights), so we
# bound the 20-step moving averages, which average the batch-to-batch noise: 0.05 nats, ~1 %
# of the initial loss, while a real bug (a wrong gradient) moves them by tenths within 200 steps.
LOSS_TOLERANCE = {"step0_abs": 0.01, "moving_avg_abs": 0.05, "window": 20, "final_abs": 0.01}


def plan() -> dict:
    """Sizes for this machine: the 124M model on a GPU, the tiny one in simulation."""
    gpu = runtime.on_gpu()
    return {
        "config": "gpt2_124m" if gpu else "tiny",
        "batch": runtime.pick(gpu=8, sim=2), "seq_len": runtime.pick(gpu=1024, sim=32),
        "warmup": runtime.pick(gpu=4, sim=1), "steps": runtime.pick(gpu=20, sim=2),
        "loss_steps": runtime.pick(gpu=200, sim=4), "loss_batch": runtime.pick(gpu=4, sim=2),
        "decode_prompt": runtime.pick(gpu=960, sim=16), "decode_new": runtime.pick(gpu=64, sim=4),
        "decode_batches": runtime.pick(gpu=[1, 8], sim=[1]), "decode_repeats": runtime.pick(gpu=3, sim=1),
        "decode_dtype": runtime.pick(gpu=torch.bfloat16, sim=torch.float32),
        "compile": gpu, "profile_steps": 3, "corpus_bytes": runtime.pick(gpu=1 << 21, sim=1 << 16),
    }


def _free() -> None:
    # Dynamo's caches and the CUDA-graph trees are per process: a variant compiled after another would find the
    # earlier one's graphs and pool (an H100 run of 2026-12-07: "Detected 1 tensor(s) in the cudagraph pool not
    # tracked as outputs" in the next variant's first recording) and its frames counted against the recompile
    # limit. So every variant starts from a fresh compile state, as in a new process.
    torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _error(error: BaseException) -> str:
    return f"failed: {type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"


def _header(name: str, title: str, notes: str, headline: list, rows: list, **extra) -> dict:
    return {"benchmark": name, "title": title, "notes": notes, "headline": headline,
            "simulated": not runtime.on_gpu(),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": runtime.describe(), "ceilings": {"copy_gbps": bench.copy_bandwidth_gbps()},
            "rows": rows, **extra}


# ------------------------------------------------------------------------------ training
def train_variants() -> list[tuple[str, object, bool]]:
    """(name, ops, compile) of every training variant, in the order they run (the Trainer's other
    options of a variant: TRAINER_OPTIONS)."""
    rungs = cm.ladder()
    variants = [(name, ops, False) for name, ops in zip(LADDER_NAMES, rungs)]
    fast, fused = rungs[LADDER_NAMES.index("fast")], rungs[-1]
    # Eager, with the backward on the calling thread: what the GIL hand-overs to autograd's CUDA
    # thread cost a model of Python-backward ops (course/ops.py, week4_triton_dl/notes/kernels_as_ops.md).
    variants += [("fast, one-thread backward", fast, False)]
    # Each compiled pair in one mode: torch.compile's default, then reduce-overhead, which replays
    # the compiled forward and backward as CUDA graphs (the host then launches one graph per step).
    variants += [("torch.compile", rungs[0], True), ("fast+compile", fast, True),
                 ("torch.compile+cudagraphs", rungs[0], "reduce-overhead"),
                 ("fast+compile+cudagraphs", fast, "reduce-overhead")]
    # The fused GEMMs' model (issue 32) compiled the same two ways.
    variants += [("fused_gemms+compile", fused, True), ("fused_gemms+compile+cudagraphs", fused, "reduce-overhead")]
    # The same SwiGLU and residual fusions on week 1's CUDA C wgmma kernels (sm_90a; skipped elsewhere, with
    # the reason: WGMMA_VARIANTS), compiled the same two ways.
    wgmma = cm.wgmma_gemm_ops()
    variants += [("wgmma_gemms+compile", wgmma, True), ("wgmma_gemms+compile+cudagraphs", wgmma, "reduce-overhead")]
    # The attention isolated (issue 33): fast with its attention forced, nothing else changed, each read against
    # fast (READ_AGAINST); the Hopper kernels compiled too (sm_90a; skipped elsewhere: HOPPER_ATTENTION_VARIANTS).
    variants += [(f"{kind}_attention", cm.attention_ops(kind), False) for kind in attention_ops.KINDS]
    hopper = cm.attention_ops("hopper")
    variants += [("hopper_attention+compile", hopper, True),
                 ("hopper_attention+compile+cudagraphs", hopper, "reduce-overhead")]
    return variants


# The eager ladder's rows (capstone/model.py's LADDER, in order): the rung named "+fused_ce" is `fast`.
LADDER_NAMES = ["torch", "+flash_attention", "+fused_norm_rope_swiglu", "fast", "+swiglu_gemm", "+residual_gemm",
                "+norm_gemm"]
# Each variant off the eager ladder, the row it is read against ("vs previous rung"): a compiled variant, the
# one it is one step after; a sibling of fast (wgmma_gemms, the *_attention rows), fast in the same mode.
READ_AGAINST = {"fast+compile": "fast", "fast+compile+cudagraphs": "fast+compile",
                "fused_gemms+compile": "+norm_gemm", "fused_gemms+compile+cudagraphs": "fused_gemms+compile",
                # week 1's GEMMs have no eager rung: their compiled rows are read against fast's, mode for mode
                "wgmma_gemms+compile": "fast+compile", "wgmma_gemms+compile+cudagraphs": "fast+compile+cudagraphs",
                # the attention alone changed: each attention against fast's (the dispatch rule's pick), mode for mode
                "sdpa_attention": "fast", "triton_attention": "fast", "hopper_attention": "fast",
                "hopper_attention+compile": "fast+compile",
                "hopper_attention+compile+cudagraphs": "fast+compile+cudagraphs"}
# Variants on week 1's sm_90a kernels: where wgmma_ops.unsupported() gives a reason, their row is skipped
# with it (never run on another kernel in their name).
WGMMA_VARIANTS = ("wgmma_gemms+compile", "wgmma_gemms+compile+cudagraphs")
# Variants on week 4's sm_90a attention kernels: the same rule with attention_ops.unsupported().
HOPPER_ATTENTION_VARIANTS = ("hopper_attention", "hopper_attention+compile", "hopper_attention+compile+cudagraphs")


def refusal(name: str) -> str | None:
    """Why this machine cannot run variant (or loss curve) `name`'s sm_90a kernels; None: it can, or it has none."""
    if name in WGMMA_VARIANTS or name == "wgmma_gemms":
        return wgmma_ops.unsupported()
    if name in HOPPER_ATTENTION_VARIANTS:
        return attention_ops.unsupported()
    return None


TRAINER_OPTIONS = {"fast, one-thread backward": {"autograd_threads": False}}
# The variants whose steps are profiled after their timing (3 more steps each, under torch.profiler), and where
# to: the eager fast model, then the CUDA-graphed steps the summary reads side by side by kind of kernel (fast's
# and each fused road's against the twin's: summary.py's "what limits" rows).
PROFILES = {"fast": "profile.md", "fast+compile+cudagraphs": "profile_compiled.md",
            "torch.compile+cudagraphs": "profile_twin_compiled.md",
            "fused_gemms+compile+cudagraphs": "profile_fused_gemms.md",
            "wgmma_gemms+compile+cudagraphs": "profile_wgmma_gemms.md"}


def time_training(p: dict, ops, *, compile: bool, profile_to: Path | None = None, name: str = "") -> dict:
    """Median step time and peak memory of `warmup + steps` training steps with these ops."""
    tc = TrainConfig(steps=p["warmup"] + p["steps"], batch=p["batch"], seq_len=p["seq_len"], lr=6e-4,
                     warmup=2, corpus_bytes=p["corpus_bytes"], skip=p["warmup"])
    device = torch.device(runtime.DEVICE)
    _free()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer = Trainer(p["config"], tc, ops=ops, compile=compile, **TRAINER_OPTIONS.get(name, {}))
    started = time.perf_counter()
    # The warm-up steps, then the timed steps as one group: one clock over them (course/bench_clock.py),
    # so the row says whether the host paced them (host_bound; then ms is the host's time).
    records = trainer.run(p["warmup"], log_every=max(p["warmup"], 1))
    records += trainer.run(log_every=p["steps"])
    wall = time.perf_counter() - started
    timing = trainer.timings[-1]
    result = {**bench.timing_fields(timing), "first_step_ms": records[0]["ms"], "wall_s": wall,
              "loss_first": records[0]["loss"], "loss_last": records[-1]["loss"],
              "peak_mib": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None}
    if profile_to is not None:
        try:
            result["profile"] = str(profile_steps(trainer, p["profile_steps"], profile_to,
                                                  f"{name or 'the model'} (compile: {trainer.compile_mode})"))
            result["gpu_ms_by_kind"] = getattr(trainer, "profile_kinds", None)
            result["gpu_kernels"] = getattr(trainer, "profile_kernels", None)
        except Exception as error:  # the profile is a bonus: never lose the timing for it
            result["profile"] = _error(error)
    del trainer
    _free()
    return result


def measure_training(p: dict, out: Path, deadline: float, only: tuple[str, ...] = ()) -> dict:
    cfg = cm.preset(p["config"])
    tokens = p["batch"] * p["seq_len"]
    flops = m.flops_per_token(cfg, context=p["seq_len"]) * tokens
    size = f"{cm.count_parameters(cfg) / 1e6:.3g}M, B={p['batch']} x T={p['seq_len']}"
    # The attention each row runs, named in its row (issue 33): asked once per kind of attention, at the step's
    # shape and dtype (bf16 under the GPU's autocast).
    shape = (p["batch"], cfg.n_heads, p["seq_len"], cfg.head_dim)
    dtype = torch.bfloat16 if runtime.on_gpu() else torch.float32
    labels = {}
    rows = []
    for name, ops, compile in train_variants():
        if only and name not in only:
            continue
        print(f"[train] {name}", file=sys.stderr, flush=True)
        if ops.attention not in labels:
            labels[ops.attention] = attention_ops.describe(ops.attention, shape, dtype)
        row = {"size": size, "variant": name, "attention": labels[ops.attention]}
        why = refusal(name)
        if why is not None:
            rows.append({**row, "skipped": why})
            continue
        if compile and not p["compile"]:
            rows.append({**row, "skipped": "torch.compile is measured on the GPU only"})
            continue
        if time.perf_counter() > deadline:
            rows.append({**row, "skipped": "time budget spent"})
            continue
        try:
            profile = PROFILES.get(name)
            got = time_training(p, ops, compile=compile, profile_to=out / profile if profile else None, name=name)
        except Exception as error:
            traceback.print_exc()
            rows.append({**row, "skipped": _error(error)})
            continue
        seconds = got["ms"] * 1e-3
        rows.append({**row, **got, "tokens_per_s": tokens / seconds, "flops": flops, "tflops": flops / seconds / 1e12})
    timed = {r["variant"]: r for r in rows if "ms" in r}
    previous = None
    for r in rows:
        if "ms" not in r:
            continue
        if "torch" in timed:
            r["speedup_vs_torch"] = timed["torch"]["ms"] / r["ms"]
        if "torch.compile" in timed:
            r["speedup_vs_compile"] = timed["torch.compile"]["ms"] / r["ms"]
        if r["variant"] in LADDER_NAMES[1:] and previous:
            r["gain_vs_previous_rung"] = previous["ms"] / r["ms"]
        if r["variant"] in LADDER_NAMES:
            previous = r
    for variant, after in READ_AGAINST.items():
        if variant in timed and after in timed:
            timed[variant]["gain_vs_previous_rung"] = timed[after]["ms"] / timed[variant]["ms"]
    if "torch.compile+cudagraphs" in timed:
        for r in rows:
            if "ms" in r:
                r["speedup_vs_compile_cudagraphs"] = timed["torch.compile+cudagraphs"]["ms"] / r["ms"]
    return _header(TRAIN_BENCH,
                   f"Training step of the capstone GPT ({size}), AdamW, "
                   f"{'bf16 autocast' if runtime.on_gpu() else 'fp32'}: the optimization ladder",
                   f"ms = median of {p['steps']} steps (CUDA events; host clock on a CPU; * where the host paced the steps: "
                   f"course/bench_clock.py) after {p['warmup']} warm-up steps "
                   "(Triton autotuning, compilation); vs torch = the eager twin's ms / this ms; TFLOP/s from "
                   "model.flops_per_token (6 N per token + attention); peak = torch.cuda.max_memory_allocated "
                   "over the run (weights, AdamW state, activations); vs previous rung: off the eager ladder, against "
                   "the row it is read against (a sibling of fast: fast's row of the same mode); attention: the kernels "
                   "the row's attention ran (fast's: week 4's dispatch rule's pick at this shape)",
                   ["fast", "torch.compile", "fast+compile", "fast+compile+cudagraphs", "fused_gemms+compile",
                    "fused_gemms+compile+cudagraphs", "wgmma_gemms+compile", "wgmma_gemms+compile+cudagraphs",
                    "hopper_attention", "hopper_attention+compile+cudagraphs"], rows)


# ------------------------------------------------------------------------------ decoding
def measure_decode(p: dict, deadline: float) -> dict:
    cfg = cm.preset(p["config"])
    dtype = p["decode_dtype"]
    prompt, new = p["decode_prompt"], p["decode_new"]
    rows = []
    models = {}
    variants = [("torch no_cache", "reference", "no_cache"), ("torch cache", "reference", "cache"),
                ("fast cache", "fast", "cache"), ("fast cache+graph", "fast", "cache_graph"),
                ("torch cache+graph", "reference", "cache_graph")]
    for batch in p["decode_batches"]:
        size = f"B={batch}, context {prompt}+{new}"
        # Rounds: every variant runs once per round, in turn, and its ms is the median over the
        # rounds. The loops without a graph are host-bound and this host drifts by tens of percent
        # within minutes; interleaving puts the drift on every variant alike instead of on
        # whichever ran during a slow spell.
        runs = {name: [] for name, _, _ in variants}  # each variant's rounds, or why it stopped (a str)
        for round_ in range(p["decode_repeats"]):
            for name, ops, variant in variants:
                if isinstance(runs[name], str) or time.perf_counter() > deadline:
                    continue  # failed in an earlier round, or out of time
                print(f"[decode] {size} {name} (round {round_ + 1})", file=sys.stderr, flush=True)
                try:
                    if ops not in models:
                        models[ops] = cm.build(cfg, ops, seed=0, dtype=dtype).eval()
                    runs[name].append(inference.measure_generate(models[ops], batch=batch, prompt=prompt,
                                                                 new_tokens=new, variant=variant, repeats=1))
                except Exception as error:
                    traceback.print_exc()
                    runs[name] = _error(error)
        base_tokens = None
        for name, _, _ in variants:
            got = runs[name]
            if isinstance(got, str) or not got:
                rows.append({"size": size, "variant": name, "skipped": got or "time budget spent"})
                continue
            tokens = got[-1]["tokens"]
            if base_tokens is None:
                base_tokens = tokens
            ms = statistics.median(g["ms"] for g in got)
            rows.append({"size": size, "variant": name, "batch": batch, "ms": ms, "tokens_per_s": batch / (ms * 1e-3),
                         "prefill_ms": statistics.median(g["prefill_ms"] for g in got),
                         "ms_rounds": [g["ms"] for g in got],
                         # host-bound if the host paced any round's decode steps (course/bench_clock.py)
                         **bench_timing.rounds_fields([t for g in got for t in g["timings"]]),
                         "same_tokens_as_baseline": bool(torch.equal(tokens.cpu(), base_tokens.cpu()))})
        base = next((r for r in rows if r["size"] == size and r["variant"] == "torch no_cache" and "ms" in r), None)
        for r in rows:
            if r["size"] == size and "ms" in r and base:
                r["speedup_vs_torch"] = base["ms"] / r["ms"]
    del models
    _free()
    return _header(DECODE_BENCH,
                   f"Greedy decoding of the capstone GPT ({cfg.n_layers} x {cfg.d_model}, V={cfg.vocab_size}, "
                   f"{str(dtype).replace('torch.', '')} weights) at ~{prompt + new} context: ms per new token",
                   f"ms = one decode step (one new token per sequence), median of {p['decode_repeats']} rounds, each "
                   f"running every variant in turn ({new} tokens after a warm-up run), prefill excluded (* where the host "
                   "paced a round's decode steps); tokens/s = batch / ms; vs torch = the "
                   "no-cache eager loop's ms / this ms; same_tokens_as_baseline in the json (bf16: a near-tie "
                   "may flip; the CPU tests check equality in fp32)",
                   [name for name, _, _ in variants], rows)


# ------------------------------------------------------------------------------ loss curves
# The three loss curves: the eager twin, the fast model, and a control: the twin compiled (torch's
# own code, fused and reordered by Inductor). Eager and compiled torch are both correct, so their
# distance is what rounding alone does to a trajectory; the fast model is held to that as well as
# to LOSS_TOLERANCE, which was stated before the first measurement.
LOSS_CURVES = (("reference", "reference", False), ("fast", "fast", False), ("reference_compiled", "reference", True),
               ("fused_gemms", "fused_gemms", False), ("wgmma_gemms", "wgmma_gemms", False),
               ("hopper_attention", "hopper_attention", False))


def _moving_average(xs: list, w: int) -> list:
    return [statistics.fmean(xs[i - w + 1:i + 1]) for i in range(w - 1, len(xs))]


def curve_distance(a: list, b: list, window: int, tail: int = 50) -> dict:
    """How far two loss curves are: at step 0, between their `window`-step moving averages, and
    between the means of their last `tail` steps (where both have settled)."""
    w, t = min(window, len(a)), min(tail, len(a))
    return {"step0_abs_diff": abs(a[0] - b[0]),
            "max_abs_diff": max(abs(x - y) for x, y in zip(a, b)),
            "moving_avg_max_abs_diff": max(abs(x - y) for x, y in zip(_moving_average(a, w), _moving_average(b, w))),
            "final_mean_abs_diff": abs(statistics.fmean(a[-t:]) - statistics.fmean(b[-t:]))}


def measure_loss(p: dict, deadline: float) -> dict:
    curves = {}
    for name, ops, compile in LOSS_CURVES:
        why = refusal(ops)
        if why is not None:  # sm_90a kernels (week 1's GEMMs, week 4's attention): skipped with the reason, as in training
            curves[name] = {"skipped": why}
            continue
        if compile and not p["compile"]:
            curves[name] = {"skipped": "torch.compile is measured on the GPU only"}
            continue
        if time.perf_counter() > deadline:
            curves[name] = {"skipped": "time budget spent"}
            continue
        print(f"[loss] {name} {p['loss_steps']} steps", file=sys.stderr, flush=True)
        tc = TrainConfig(steps=p["loss_steps"], batch=p["loss_batch"], seq_len=p["seq_len"], lr=6e-4,
                         warmup=min(20, max(1, p["loss_steps"] // 10)), corpus_bytes=p["corpus_bytes"])
        try:
            _free()
            trainer = Trainer(p["config"], tc, ops=ops, compile=compile)
            curves[name] = {"losses": [r["loss"] for r in trainer.run(log_every=50)]}
            del trainer
        except Exception as error:
            traceback.print_exc()
            curves[name] = {"skipped": _error(error)}
    result = {"name": LOSS_FILE, "steps": p["loss_steps"], "batch": p["loss_batch"], "seq_len": p["seq_len"],
              "config": p["config"], "tolerance": LOSS_TOLERANCE, "curves": curves,
              "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "machine": runtime.describe(), "simulated": not runtime.on_gpu()}
    if "losses" in curves.get("reference", {}) and "losses" in curves.get("fast", {}):
        result.update(_held_to_twin(curves, "fast"))
    if "losses" in curves.get("reference", {}) and "losses" in curves.get("fused_gemms", {}):
        result["fused_gemms"] = _held_to_twin(curves, "fused_gemms")  # the fused GEMMs' model, held the same way
    if "losses" in curves.get("reference", {}) and "losses" in curves.get("wgmma_gemms", {}):
        result["wgmma_gemms"] = _held_to_twin(curves, "wgmma_gemms")  # week 1's GEMMs, and their bf16 residual stream
    if "losses" in curves.get("reference", {}) and "losses" in curves.get("hopper_attention", {}):
        result["hopper_attention"] = _held_to_twin(curves, "hopper_attention")  # week 4's CUDA C attention, fwd + bwd
    return result


def _held_to_twin(curves: dict, name: str) -> dict:
    """The distance of curve `name` from the eager twin's, against LOSS_TOLERANCE and the control."""
    a, b = curves["reference"]["losses"], curves[name]["losses"]
    result = curve_distance(a, b, LOSS_TOLERANCE["window"])
    result["within_tolerance"] = (result["step0_abs_diff"] <= LOSS_TOLERANCE["step0_abs"]
                                  and result["moving_avg_max_abs_diff"] <= LOSS_TOLERANCE["moving_avg_abs"])
    if "losses" in curves.get("reference_compiled", {}):
        control = curve_distance(a, curves["reference_compiled"]["losses"], LOSS_TOLERANCE["window"])
        result["control"] = control
        # Within what rounding alone does (twice the control's distance: two other correct
        # implementations would differ by as much again), and settled at the same loss.
        result["within_control"] = (
            result["moving_avg_max_abs_diff"] <= 2 * control["moving_avg_max_abs_diff"]
            and result["final_mean_abs_diff"] <= max(2 * control["final_mean_abs_diff"], LOSS_TOLERANCE["final_abs"]))
    return result


def plot_loss(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    for name, curve in result["curves"].items():
        if "losses" in curve:
            label = {"reference": "eager twin", "fast": "fast (course kernels)",
                     "reference_compiled": "torch.compile twin (control)",
                     "fused_gemms": "fused GEMMs (fast + fused_linear)",
                     "wgmma_gemms": "wgmma GEMMs (fast + week 1's CUDA C)",
                     "hopper_attention": "Hopper attention (fast + week 4's CUDA C)"}.get(name, name)
            ax.plot(curve["losses"], lw=0.9, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats / byte)")
    gpu = result["machine"].get("gpu") or "CPU simulation"
    ax.set_title(f"{result['config']}, batch {result['batch']} x {result['seq_len']}, same seed and data; {gpu}",
                 fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _table(record: dict) -> str:
    """The record's table with this benchmark's own columns (tokens/s, per-rung gain; the attention each
    row ran, where the rows say)."""
    named = any("attention" in r for r in record["rows"])
    head = ["size", "variant", *(["attention"] if named else []), "ms", "tokens/s", "TFLOP/s", "peak MiB", "vs torch",
            "vs previous rung", "vs compiled twin", "vs compiled twin, CUDA graphs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    f = bench.fmt  # a cell: "-" where a value is missing
    x = lambda v: "-" if v is None else f"{v:.2f}x"  # noqa: E731
    for r in record["rows"]:
        first = [str(r["size"]), r["variant"], *([r.get("attention", "-")] if named else [])]
        if "ms" not in r:
            lines.append("| " + " | ".join(first) + f" | {r.get('skipped', '')} |" + " |" * (len(head) - len(first) - 1))
            continue
        lines.append("| " + " | ".join([*first, bench_timing.mark(f(r["ms"], ".3f"), r), f(r.get("tokens_per_s"), ",.0f"),
                                        f(r.get("tflops"), ".1f"), f(r.get("peak_mib"), ",.0f"),
                                        x(r.get("speedup_vs_torch")), x(r.get("gain_vs_previous_rung")),
                                        x(r.get("speedup_vs_compile")),
                                        x(r.get("speedup_vs_compile_cudagraphs"))]) + " |")
    return (f"**{record['title']}**: {bench.measured_on(record)}.\n\n" + "\n".join(lines) + f"\n\n{record['notes']}.\n"
            + bench_timing.footnote(record["rows"]))


def save_record(record: dict, out: Path) -> None:
    bench.write_record(record, out, _table(record))


def _previous(path: Path, ran: bool, any_machine: bool = False) -> dict | None:
    if ran or not path.exists():
        return None
    record = json.loads(path.read_text())
    return record if any_machine or record.get("simulated") == (not runtime.on_gpu()) else None


def write_summary(out: Path, text: str, train: dict | None) -> None:
    """summary.md, and fused_roads.md where the train record holds the fused roads' profiles (summary.py)."""
    (out / "summary.md").write_text(text)
    roads = fused_roads_markdown(train)
    if roads:
        (out / "fused_roads.md").write_text(roads)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="results folder (capstone/results on the GPU)")
    parser.add_argument("--budget-s", type=float, default=230.0, help="start no new variant after this many seconds")
    parser.add_argument("--phases", nargs="*", default=["train", "decode", "loss"], choices=["train", "decode", "loss"])
    parser.add_argument("--variants", nargs="*", default=[], metavar="NAME",
                        help="train only these variants (default: all): "
                             + ", ".join(repr(name) for name, _, _ in train_variants()))
    parser.add_argument("--summary-only", action="store_true",
                        help="measure nothing: write summary.md from the records already in --out (any machine)")
    args = parser.parse_args(argv)
    if args.summary_only:
        records = [_previous(Path(args.out) / f"{name}.json", False, any_machine=True)
                   for name in (TRAIN_BENCH, DECODE_BENCH, LOSS_FILE, FSDP_BENCH)]
        text = summary_markdown(*records)
        write_summary(Path(args.out), text, records[0])
        print(text)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    p = plan()
    started = time.perf_counter()
    deadline = started + args.budget_s
    train = decode = loss = None
    # Each phase is guarded: an exception in one is recorded and the next still runs.
    if "train" in args.phases:
        try:
            unknown = set(args.variants) - {name for name, _, _ in train_variants()}
            if unknown:
                raise SystemExit(f"--variants: unknown {sorted(unknown)}; choose from "
                                 f"{[name for name, _, _ in train_variants()]}")
            train = measure_training(p, out, deadline, tuple(args.variants))
            save_record(train, out)
        except Exception as error:
            traceback.print_exc()
            (out / f"{TRAIN_BENCH}_error.txt").write_text(_error(error) + "\n" + traceback.format_exc())
    if "decode" in args.phases:
        try:
            decode = measure_decode(p, deadline)
            save_record(decode, out)
        except Exception as error:
            traceback.print_exc()
            (out / f"{DECODE_BENCH}_error.txt").write_text(_error(error) + "\n" + traceback.format_exc())
    if "loss" in args.phases:
        try:
            loss = measure_loss(p, deadline)
            (out / f"{LOSS_FILE}.json").write_text(json.dumps(loss, indent=1) + "\n")
            plot_loss(loss, out / "loss_fast_vs_eager.png")
        except Exception as error:
            traceback.print_exc()
            (out / f"{LOSS_FILE}_error.txt").write_text(_error(error) + "\n" + traceback.format_exc())
    # Phases not run this time: the summary reads their last records from --out (same machine
    # kind, their own dates in them), so a partial re-run does not erase the other targets.
    train = train or _previous(out / f"{TRAIN_BENCH}.json", "train" in args.phases)
    decode = decode or _previous(out / f"{DECODE_BENCH}.json", "decode" in args.phases)
    loss = loss or _previous(out / f"{LOSS_FILE}.json", "loss" in args.phases)
    text = summary_markdown(train, decode, loss, _previous(out / f"{FSDP_BENCH}.json", False))
    write_summary(out, text, train)
    for record in (train, decode):
        if record:
            print(_table(record))
    print(text)
    print(f"total {time.perf_counter() - started:.0f} s; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
