"""The numbers quoted in README.md and memory_optimizations.md, measured in one run.

    python -m week2_pytorch_optimizations.measure_notes --out DIR

Writes `notes_measurements.json` (profiles of the GPT training step under three
configurations: top kernels and the GPU busy fraction; the pinned-memory overlap; the
caching allocator; activation checkpointing; precision errors) and one chrome trace,
`trace_eager_bf16.json.gz`, for reading the gaps. On the CPU it runs the parts that exist there.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import traceback
from pathlib import Path

import torch

from course import runtime

from week2_pytorch_optimizations import memory, mixed_precision, models, profiling


def _safe(fn):
    try:
        return fn()
    except Exception as error:  # record and go on: one failure must not lose the others
        traceback.print_exc()
        return {"failed": f"{type(error).__name__}: {error}"[:300]}


def measure(out: Path) -> dict:
    """Cheap measurements first and the record rewritten after each part, so a run cut off
    by a time limit still leaves what it measured."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "notes_measurements.json"
    record = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "machine": runtime.describe()}

    def save():
        path.write_text(json.dumps(record, indent=1, default=str) + "\n")

    record["views_and_copies"] = {k: v["view"] for k, v in memory.views_and_copies().items()}
    record["matmul_rel_err_k4096"] = {str(d): mixed_precision.matmul_error(4096, d)
                                      for d in (torch.float32, torch.float16, torch.bfloat16)}
    if runtime.on_gpu():
        torch.backends.cuda.matmul.allow_tf32 = True
        record["matmul_rel_err_k4096"]["tf32"] = mixed_precision.matmul_error(4096, torch.float32)
        torch.backends.cuda.matmul.allow_tf32 = False
        for name, fn in (("caching_allocator", memory.caching_allocator_demo),
                         ("pinned_overlap", memory.pinned_transfer_overlap),
                         ("checkpointing", memory.checkpointing_peak_memory)):
            record[name] = _safe(fn)
            save()
    record["profiles"] = {}
    cfg, batch = runtime.pick(gpu=(models.GPT_BENCH, 8), sim=(models.GPT_TINY, 2))
    configs = ["eager", "eager+bf16", "cudagraph+bf16"] if runtime.on_gpu() else ["eager", "eager+bf16"]
    for config in configs:
        trace = out / f"trace_{config.replace('+', '_').replace('-', '_')}.json.gz"
        r = _safe(lambda: profiling.profile_config(config, cfg=cfg, batch=batch, trace_path=trace, steps=3))
        if isinstance(r, dict) and "table" in r:
            r.pop("table")
            r["top"] = r["top"][:12]
        record["profiles"][config] = r
        if config != "eager+bf16" and trace.exists():
            trace.unlink()  # keep one trace: the files that come back are few
        save()
        print(f"profiled {config}", file=sys.stderr, flush=True)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    record = measure(Path(args.out))
    print(json.dumps({k: v for k, v in record.items() if k != "machine"}, indent=1, default=str)[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
