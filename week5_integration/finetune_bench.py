"""The fine-tuning experiment's record, table, plot and command line, and a GPU-bound LoRA benchmark
(the experiment: finetune.py).

`record` turns finetune.py's `run`s into the `course.bench`-compatible record finetune_week5.json;
`save` writes it with its table (.md) and the loss curves (finetune_week5_loss.png):

    python -m week5_integration.finetune_bench --config small --pretrain-steps N --steps M --out DIR

With several configs (`--config large gpt2`, the GPU run) the record is rewritten after each one,
so a run cut off later keeps the configs already done. `BENCHMARKS` (found by `python -m course
bench week5`) holds `lora_step_large_week5`: one LoRA layer's training step at sizes where the
GPU's work, not the host's, sets the time, beside a frozen layer's step (the floor).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import functools
import sys
from pathlib import Path

import torch

from course import bench, bench_timing, runtime
from course.bench import Benchmark, fmt
from course.check import random_tensor
from week5_integration import lora as lora_mod
from week5_integration.finetune import CONFIGS, VARIANTS, release_memory, run

BENCHMARK_NAME = "finetune_week5"


# ------------------------------------------------------------------------------------ the record
def record(runs: list[dict]) -> dict:
    """The course.bench-compatible record of one or more configs' runs."""
    ceilings = {"copy_gbps": bench.copy_bandwidth_gbps()}
    release_memory()
    return {
        "benchmark": BENCHMARK_NAME,
        "title": "Fine-tuning a pre-trained GPT on sums: full vs LoRA (torch, Triton) vs QLoRA (NF4)",
        "notes": ("ms = median step (CUDA events, after warm-up steps; * where the host paced the steps: "
                  "course/bench_clock.py); peak = torch.cuda.max_memory_allocated "
                  "over the timed steps (weights + grads + optimizer + activations); vs torch = lora_torch's "
                  "step time / this step time; exact match = greedy answers to held-out sums"),
        "headline": ["lora", "qlora"],
        "simulated": not runtime.on_gpu(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": runtime.describe(),
        "ceilings": ceilings,
        "rows": [row for r in runs for row in r["rows"]],
        "curves": {r["config"]: r["curves"] for r in runs},
        "pretrain": {r["config"]: r["pretrain"] for r in runs},
        "settings": {r["config"]: r["settings"] for r in runs},
    }


# ------------------------------------------------------------------- the LoRA step, GPU-bound
# lora_linear_week5 (lora.py) times one layer's training step at the week-5 model's sizes, M = 4096
# tokens: ~0.1 ms of GPU work under ~0.6 ms of Python, launches and autograd, so it measured the
# host. Here M N K grow until the GPU's work is several times the host's (4MNK = 0.55 to 3 TFLOP:
# ~1-6 ms at ~500 TFLOP/s), and a frozen nn.Linear's step (y = x W^T, dx = dY W: the two GEMMs every
# variant must do) is the floor each variant is held to.
LARGE_LORA_SHAPES = [(8192, 4096, 4096), (16384, 4096, 4096), (16384, 4096, 11008)]
LORA_RANK, LORA_ALPHA = 16, 32.0


def _lora_inputs(size):
    m_, k, n, r, dtype = size
    dev = runtime.DEVICE
    x = random_tensor((m_, k), dtype, dev).requires_grad_(True)
    w = random_tensor((n, k), dtype, dev, scale=k ** -0.5)
    a = random_tensor((r, k), dtype, dev, scale=k ** -0.5).requires_grad_(True)
    b = random_tensor((n, r), dtype, dev, scale=r ** -0.5).requires_grad_(True)  # a trained B: not zero
    return x, w, a, b, random_tensor((m_, n), dtype, dev)


def _lora_step(fn):
    def step(x, w, a, b, dy):
        y = fn(x, w, a, b, LORA_ALPHA / a.shape[0])
        return torch.autograd.grad(y, (x, a, b), dy)
    return step


def _frozen_step(x, w, a, b, dy):
    return torch.autograd.grad(torch.nn.functional.linear(x, w), (x,), dy)


def _lora_bytes(size):
    m_, k, n, r, dtype = size
    itemsize = torch.empty((), dtype=dtype).element_size()
    return (2 * m_ * k + n * k + 2 * r * k + 2 * n * r + 2 * m_ * n) * itemsize  # x, W, A, B, dY in; y, dx, dA, dB out


def _benchmarks():
    return [Benchmark(
        name="lora_step_large_week5",
        title="LoRA linear, training step at sizes where the GPU's work dominates (forward + backward for x, A, B; "
              "W frozen), r=16",
        sizes=[(m_, k, n, LORA_RANK, torch.bfloat16) for m_, k, n in LARGE_LORA_SHAPES],
        sim_sizes=[(40, 48, 33, 4, torch.float32)],
        size_label=lambda s: f"M={s[0]} K={s[1]} N={s[2]} r={s[3]} {str(s[4]).replace('torch.', '')}",
        make_inputs=_lora_inputs,
        variants={"torch": _lora_step(lora_mod.lora_linear_torch),
                  "torch_addmm": _lora_step(lora_mod.lora_linear_torch_addmm),
                  "torch_compile": _lora_step(torch.compile(lora_mod.lora_linear_torch, dynamic=False)),
                  "triton": _lora_step(lora_mod.lora_linear),
                  # the registered ops (lora_linear_op and its backward) inside a compiled graph
                  "triton_compile": _lora_step(torch.compile(lora_mod.lora_linear, fullgraph=True, dynamic=False)),
                  "frozen_linear": _frozen_step},
        gpu_only=("torch_compile", "triton_compile"),
        headline=("triton", "frozen_linear"),
        bytes=_lora_bytes,
        flops=lambda s: 4 * s[0] * s[1] * s[2] + 6 * s[0] * s[3] * (s[1] + s[2]),
        compute_dtype=torch.bfloat16,
        notes="torch = PEFT's unfused arithmetic under autograd; torch_compile = torch.compile of it; "
              "triton_compile = torch.compile(lora_linear, fullgraph=True): the registered ops in a graph; frozen_linear = x W^T and dx = dY W alone, no "
              "adapter (the floor; its TFLOP/s counts the adapters' 6Mr(K+N) it does not do, <1%); flops = "
              "4MNK + 6Mr(K+N) (no dW)",
    )]


BENCHMARKS = _benchmarks()


# ------------------------------------------------------------------------------- table and plot
def markdown_table(result: dict) -> str:
    head = ["model, batch", "variant", "trainable", "ms / step", "tokens/s", "vs torch LoRA", "peak MiB",
            "predicted MiB", "final loss", "val loss", "exact match"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        speed = f"{r['speedup_vs_torch']:.2f}x" if r.get("speedup_vs_torch") else "-"
        n = r.get("trainable_params")
        trainable = "-" if not n else f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.1f} k"
        lines.append("| " + " | ".join([
            r["size"], r["variant"], trainable, bench_timing.mark(fmt(r.get("ms"), ".2f"), r),  # * host-paced steps
            fmt(r.get("tokens_per_s"), ",.0f"), speed,
            fmt(r.get("peak_mib"), ".0f"),
            fmt(r.get("predicted_peak_mib"), ".0f"), fmt(r.get("final_loss"), ".3f"), fmt(r.get("val_loss"), ".3f"),
            fmt(None if r.get("exact_match") is None else 100 * r["exact_match"], ".0f") + "%"]) + " |")
    text = f"**{result['title']}**: {bench.measured_on(result)}.\n\n" + "\n".join(lines) + "\n"
    ratios = peak_ratios(result)
    if ratios:
        text += "\nPeak memory relative to full fine-tuning: " + ", ".join(
            f"{size}: " + ", ".join(f"{v} {x:.2f}x" for v, x in r.items()) for size, r in ratios.items()) + ".\n"
    return text + f"\n{result['notes']}.\n" + bench_timing.footnote(result["rows"])


def peak_ratios(result: dict) -> dict:
    """{size: {variant: peak / full's peak}} wherever both were measured."""
    out = {}
    for size in dict.fromkeys(r["size"] for r in result["rows"]):
        rows = {r["variant"]: r for r in result["rows"] if r["size"] == size}
        full = rows.get("full", {}).get("peak_mib")
        if full:
            out[size] = {v: r["peak_mib"] / full for v, r in rows.items() if r.get("peak_mib") and v != "full"}
    return out


def plot(result: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = list(result["curves"])
    fig, axes = plt.subplots(len(configs), 2, figsize=(11, 3.6 * len(configs)), squeeze=False)
    for (ax_pre, ax), config in zip(axes, configs):
        pre = result["pretrain"][config]["losses"]
        ax_pre.plot(range(1, len(pre) + 1), pre, color="gray")
        ax_pre.set_title(f"{config}: pre-training on stories", fontsize=9)
        for variant, losses in result["curves"][config].items():
            ax.plot(range(1, len(losses) + 1), smooth(losses), label=variant, linewidth=1.2)
        ax.set_title(f"{config}: fine-tuning on sums (training loss, smoothed)", fontsize=9)
        ax.legend(fontsize=8)
        for a in (ax_pre, ax):
            a.set_xlabel("step")
            a.set_ylabel("loss (nats / byte)")
            a.tick_params(labelsize=8)
    where = result["machine"].get("gpu") or "CPU (simulation)"
    fig.suptitle(f"{result['title']} ({where})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def smooth(values, width: int = 5):
    """The running mean of the last `width` values at each step (the loss curves' smoothing)."""
    out = []
    for i in range(len(values)):
        window = values[max(0, i - width + 1):i + 1]
        out.append(sum(window) / len(window))
    return out


def save(result: dict, out_dir: Path) -> list[Path]:
    """finetune_week5.json (the record), .md (its table) and finetune_week5_loss.png (the curves)."""
    paths = bench.write_record(result, out_dir, markdown_table(result))
    return paths + [plot(result, Path(out_dir) / f"{BENCHMARK_NAME}_loss.png")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", nargs="+", default=["tiny" if not runtime.on_gpu() else "small"],
                        choices=sorted(CONFIGS), help="model size(s): tiny (CPU), small, gpt2 (85M), large (453M)")
    parser.add_argument("--pretrain-steps", type=int, help="pre-training steps (default: the config's plan)")
    parser.add_argument("--steps", type=int, help="fine-tuning steps per variant (default: the config's plan)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--batch", type=int, help="sequences per step (default: the config's plan)")
    parser.add_argument("--seq-len", type=int, help="tokens per sequence (default: the config's plan)")
    parser.add_argument("--no-checkpointing", action="store_true", help="keep every block's activations")
    parser.add_argument("--out", help="directory for finetune_week5.json/.md and the loss plot "
                                      "(default: week5_integration/results on a GPU; nothing saved on the CPU)")
    args = parser.parse_args(argv)
    changes = {k: v for k, v in (("batch", args.batch), ("seq_len", args.seq_len)) if v is not None}
    if args.no_checkpointing:
        changes["checkpointing"] = False
    log = functools.partial(print, file=sys.stderr, flush=True)
    out = Path(args.out) if args.out else (Path(__file__).parent / "results" if runtime.on_gpu() else None)
    runs = []
    for c in args.config:
        runs.append(run(c, pretrain_steps=args.pretrain_steps, steps=args.steps, variants=args.variants,
                        plan_changes=changes, log=log))
        result = record(runs)
        if out is not None:  # after each config: a run cut off later keeps the configs already done
            for path in save(result, out):
                log("wrote", path)
    print(markdown_table(result))
    if out is None:
        print("(simulation: nothing saved; pass --out DIR to keep the record)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
