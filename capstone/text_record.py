"""The README's record of a training run on real text: what was trained on what, how fast, how
well, and what the model then wrote.

`python -m capstone.train ... --record capstone/results` writes `capstone_text.json` (this
record), `capstone_text.md` (its markdown, made from the record alone by `markdown`, which the
README includes between `<!-- results:capstone_text.md -->` markers) and `capstone_text_loss.png`
(the run's loss curve with its validation points). A test checks that the markdown in results/ is
`markdown(record)` of the json beside it, so the README shows what was measured, not a retyped copy.
"""
from __future__ import annotations

import datetime as _dt
import json
import shutil
import statistics
from pathlib import Path

from capstone import model as cm

NAME = "capstone_text"
# The README's run (one H100, ~30 ms a step eager: ~30 s of training, 1-2 min more for the first
# compile of the course's kernels). 1000 steps of 8 x 1024 bytes pass over the 1.0 MB of training
# text about 8 times: enough to learn its spelling and layout; more passes memorize it (the
# validation curve of the record shows where that starts). capstone/__init__.py registers the same.
COMMAND = ("python -m capstone.train --config gpt2_124m --text capstone/data/tinyshakespeare.txt --steps 1000 "
           "--batch 8 --warmup 100 --eval-every 50 --sample-bytes 400 --out /tmp/capstone_text "
           "--record capstone/results")
PLOT = f"{NAME}_loss.png"
TAIL = 20  # the final train loss is the mean of the last TAIL steps: one step's loss is one batch's


def record(summary: dict, history: list[dict], args) -> dict:
    """The record of a finished `capstone.train` run: its summary, the command's settings, the
    per-step train losses and the validation curve."""
    losses = [r["loss"] for r in history]
    val = summary.get("val_curve") or []
    best = min(val, key=lambda sv: sv[1]) if val else None
    return {
        "name": NAME,
        "title": f"The capstone GPT ({summary['config']}) trained on {summary['source'].get('text', 'generated text')}",
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": summary["machine"],
        "simulated": not summary["machine"].get("gpu"),
        "config": summary["config"], "parameters": cm.count_parameters(cm.preset(summary["config"])),
        "ops": summary["ops"], "compile": summary["compile"], "amp": summary["amp"],
        "steps": summary["steps_done"], "batch": summary["batch"], "seq_len": summary["seq_len"], "lr": args.lr,
        "source": summary["source"],
        "tokens_seen": summary["steps_done"] * summary["batch"] * summary["seq_len"],
        "median_step_ms": summary["median_step_ms"], "tokens_per_s": summary["tokens_per_s"],
        "wall_s": summary["wall_s"],
        "final_train_loss": statistics.fmean(losses[-TAIL:]) if losses else None,
        "final_val_loss": summary["val_loss"],
        "best_val": None if best is None else {"step": best[0], "val_loss": best[1]},
        "curves": {"train": losses, "val": val},
        "samples": summary.get("samples", []),
        "command": "python -m capstone.train " + " ".join(_command_args(args)),
    }


def _command_args(args) -> list[str]:
    """The flags that made the run (those a reader needs to repeat it)."""
    out = []
    for flag in ("config", "ops", "text", "steps", "batch", "seq_len", "lr", "warmup", "seed", "eval_every",
                 "sample_bytes", "temperature", "compile"):
        value = getattr(args, flag, None)
        if value is not None and value is not False:
            out += [f"--{flag.replace('_', '-')}", str(value)]
    return out


def markdown(rec: dict) -> str:
    """The README's section body: what ran where, the losses, the curve, and the samples."""
    m, src = rec["machine"], rec["source"]
    where = m.get("gpu") or "CPU (simulation: the times measure Python)"
    versions = ", ".join(f"{k} {m[k]}" for k in ("torch", "triton", "cuda_runtime") if m.get(k))
    epochs = rec["tokens_seen"] / src["train_tokens"] if src.get("train_tokens") else None
    lines = [
        f"**{rec['title']}**: {where}; {versions}; {rec['date']}.", "",
        f"`{rec['command']}`", "",
        f"{rec['parameters'] / 1e6:.1f} M parameters, {rec['steps']} steps of {rec['batch']} x {rec['seq_len']} "
        f"bytes ({rec['tokens_seen']:,} tokens"
        + (f", {epochs:.1f} passes over the {src['train_tokens']:,} training bytes" if epochs else "")
        + f"), median step {rec['median_step_ms']:.2f} ms, {rec['tokens_per_s']:,.0f} tokens/s, "
        f"{rec['wall_s']:.0f} s of training.", "",
        "| loss (nats per byte) | value |", "|---|---|",
        f"| train, mean of the last {min(TAIL, len(rec['curves']['train']))} steps | {rec['final_train_loss']:.3f} |",
        f"| validation, held-out last {src.get('val_tokens', 0):,} bytes, at the end | {rec['final_val_loss']:.3f} |",
    ]
    if rec.get("best_val"):
        lines.append(f"| validation, lowest (step {rec['best_val']['step']}) | {rec['best_val']['val_loss']:.3f} |")
    lines += ["", f"![loss curve](results/{PLOT})", ""]
    for s in rec["samples"]:
        how = ("greedy (the likeliest byte each time)" if s["method"] == "greedy" else
               f"sampled at temperature {s['temperature']} (seed {s['seed']}), bytes only")
        lines += [f"{s['bytes']} bytes after the held-out prompt `{s['prompt']}`, {how}:", "", "```",
                  s["text"].replace("```", "'''"), "```", ""]
    return "\n".join(lines)


def save(rec: dict, results_dir: Path, plot: Path | None = None) -> list[Path]:
    """Write NAME.json, NAME.md and (a copy of the run's loss plot) NAME_loss.png into results_dir."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    paths = [results_dir / f"{NAME}.json", results_dir / f"{NAME}.md"]
    paths[0].write_text(json.dumps(rec, indent=1) + "\n")
    paths[1].write_text(markdown(rec))
    if plot is not None and Path(plot).is_file():
        paths.append(Path(shutil.copyfile(plot, results_dir / PLOT)))
    return paths
