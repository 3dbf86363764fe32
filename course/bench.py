"""Timing kernels honestly, next to their torch reference, against the machine's own ceilings.

How a number is made here:
* device work is asynchronous, so each call is bracketed by CUDA events, never a host clock;
* the first calls compile and load, so they are thrown away (warm-up) before timing;
* one timing is noise, so each figure is the median of many calls;
* inputs that fit in L2 would measure the cache, so small cases rotate through several
  freshly drawn input sets;
* GB/s and TFLOP/s come from byte and FLOP counts written beside each benchmark (each input
  read once, each output written once), and "% of copy" divides by a device-to-device
  copy measured in the same run on the same GPU, not by a datasheet.

In simulation (no GPU) the same code runs with a host clock and tiny sizes; every table
then says SIMULATION, because those times measure Python, not a GPU.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from course import runtime

REFERENCE = "torch"


@dataclass
class Benchmark:
    """One kernel family timed over sizes: the table a week's `BENCHMARKS` list holds.

    `variants` maps a label to a callable taking the inputs that `make_inputs(size)`
    returns; the label "torch" is the reference every other variant is divided by.
    `bytes(size)` and `flops(size)` are the minimum traffic and arithmetic of one call.
    """
    name: str
    title: str
    sizes: list
    sim_sizes: list
    make_inputs: Callable
    variants: dict
    bytes: Callable
    flops: Callable = lambda size: 0
    size_label: Callable = str
    gpu_only: tuple = ()  # variants that cannot run in simulation (PyCUDA launches)
    headline: tuple = ()  # variants the README's results table shows, beside torch
    compute_dtype: torch.dtype | None = None  # measure torch.matmul in it: the roofline's flat roof
    notes: str = ""

    def active_sizes(self) -> list:
        return runtime.pick(gpu=self.sizes, sim=self.sim_sizes)


def pow2_label(n: int) -> str:
    """2^26 rather than 67108864 in tables."""
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    reps: int
    samples: list = field(repr=False, default_factory=list)


def _l2_bytes() -> int:
    if not runtime.on_gpu():
        return 0
    return int(getattr(torch.cuda.get_device_properties(runtime.DEVICE), "L2_cache_size", 50 << 20))


def _input_bytes(inputs) -> int:
    return sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))


def input_sets(make_inputs: Callable, size) -> list:
    """Enough independent input sets that rotating through them overflows L2 four times."""
    first = make_inputs(size)
    per_set = max(_input_bytes(first), 1)
    count = min(64, math.ceil(4 * _l2_bytes() / per_set)) if runtime.on_gpu() else 1
    return [first] + [make_inputs(size) for _ in range(max(count, 1) - 1)]


def time_gpu(fn: Callable, sets: list, *, warmup_ms: float = 25, rep_ms: float = 200) -> Timing:
    fn(*sets[0])
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(5):
        fn(*sets[i % len(sets)])
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)
    for i in range(min(max(1, int(warmup_ms / estimate)), 500)):
        fn(*sets[i % len(sets)])
    reps = min(max(int(rep_ms / estimate), 10), 1000)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    # No synchronisation inside the loop: the host queues launches ahead of the GPU, so
    # Python's launch cost overlaps the previous kernel instead of landing in the timing.
    for i in range(reps):
        starts[i].record()
        fn(*sets[i % len(sets)])
        ends[i].record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return Timing(statistics.median(samples), min(samples), reps, samples)


def time_host(fn: Callable, sets: list, *, budget_s: float = 0.5) -> Timing:
    fn(*sets[0])
    samples = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < 3 or (time.perf_counter() < deadline and len(samples) < 50):
        t0 = time.perf_counter()
        fn(*sets[len(samples) % len(sets)])
        samples.append((time.perf_counter() - t0) * 1e3)
    return Timing(statistics.median(samples), min(samples), len(samples), samples)


def time_call(fn: Callable, sets: list) -> Timing:
    return time_gpu(fn, sets) if runtime.on_gpu() else time_host(fn, sets)


_ceilings: dict = {}


def copy_bandwidth_gbps() -> float:
    """Device-to-device copy, bytes read plus bytes written, in GB/s (1 GB = 1e9 B).

    This is what a memory-bound kernel can hope for on this machine: each byte it must read
    and write, moved at the rate the copy engine of torch manages.
    """
    if "copy_gbps" not in _ceilings:
        n = runtime.pick(gpu=1 << 28, sim=1 << 20)  # 1 GiB of fp32 on a GPU
        src = torch.randn(n, device=runtime.DEVICE)
        dst = torch.empty_like(src)
        timing = time_call(lambda s, d: d.copy_(s), [(src, dst)])
        _ceilings["copy_gbps"] = 2 * n * 4 / (timing.median_ms * 1e-3) / 1e9
        del src, dst
    return _ceilings["copy_gbps"]


def matmul_tflops(dtype: torch.dtype = torch.bfloat16, n: int = 4096) -> float:
    """torch.matmul (cuBLAS) at n x n x n: the compute ceiling for this dtype, measured."""
    key = f"matmul_{str(dtype).replace('torch.', '')}_tflops"
    if key not in _ceilings:
        n = runtime.pick(gpu=n, sim=128)
        a = torch.randn(n, n, device=runtime.DEVICE).to(dtype)
        b = torch.randn(n, n, device=runtime.DEVICE).to(dtype)
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, not TF32 tensor cores
        try:
            timing = time_call(torch.matmul, [(a, b)])
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        _ceilings[key] = 2 * n**3 / (timing.median_ms * 1e-3) / 1e12
    return _ceilings[key]


class Progress:
    """A one-line progress bar on a terminal, plain lines elsewhere (logs, CI)."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.stream = max(total, 1), 0, stream
        self.tty = getattr(stream, "isatty", lambda: False)()

    def step(self, label: str) -> None:
        self.done += 1
        width = 28
        filled = int(width * self.done / self.total)
        text = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label}"
        if self.tty:
            self.stream.write("\r" + text[:110].ljust(110))
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def run(bench: Benchmark, progress: Progress | None = None) -> dict:
    """Time every variant of `bench` at every size; return the results record."""
    copy_gbps = copy_bandwidth_gbps()
    if bench.compute_dtype is not None:
        matmul_tflops(bench.compute_dtype)
    rows = []
    for size in bench.active_sizes():
        sets = input_sets(bench.make_inputs, size)
        nbytes, nflops = bench.bytes(size), bench.flops(size)
        by_variant = {}
        for label, fn in bench.variants.items():
            if progress:
                progress.step(f"{bench.name} {bench.size_label(size)} {label}")
            if label in bench.gpu_only and not runtime.on_gpu():
                rows.append({"size": bench.size_label(size), "variant": label, "skipped": "needs a GPU"})
                continue
            timing = time_call(fn, sets)
            seconds = timing.median_ms * 1e-3
            by_variant[label] = timing.median_ms
            rows.append({
                "size": bench.size_label(size), "variant": label,
                "ms": timing.median_ms, "ms_min": timing.min_ms, "reps": timing.reps,
                "bytes": nbytes, "flops": nflops,
                "gbps": nbytes / seconds / 1e9 if nbytes else None,
                "tflops": nflops / seconds / 1e12 if nflops else None,
                "pct_of_copy": 100 * nbytes / seconds / 1e9 / copy_gbps if nbytes else None,
            })
        reference = by_variant.get(REFERENCE)
        for row in rows:
            if row["size"] == bench.size_label(size) and "ms" in row and reference:
                row["speedup_vs_torch"] = reference / row["ms"]
        del sets
        if runtime.on_gpu():
            torch.cuda.empty_cache()
    return {
        "benchmark": bench.name,
        "title": bench.title,
        "notes": bench.notes,
        "headline": list(bench.headline),
        "simulated": not runtime.on_gpu(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": runtime.describe(),
        "ceilings": dict(_ceilings),
        "rows": rows,
    }


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown_table(result: dict) -> str:
    """The results record as a markdown table (also what the CLI prints)."""
    copy = result["ceilings"].get("copy_gbps")
    head = ["size", "variant", "ms", "GB/s", "TFLOP/s", "% of copy", "vs torch"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in result["rows"]:
        if "skipped" in row:
            lines.append(f"| {row['size']} | {row['variant']} | skipped: {row['skipped']} | | | | |")
            continue
        lines.append("| " + " | ".join([
            str(row["size"]), row["variant"], _fmt(row["ms"], ".4f"), _fmt(row["gbps"], ".0f"),
            _fmt(row["tflops"], ".2f"), _fmt(row["pct_of_copy"], ".1f"),
            _fmt(row.get("speedup_vs_torch"), ".2f") + ("x" if row.get("speedup_vs_torch") else ""),
        ]) + " |")
    machine = result["machine"]
    where = machine.get("gpu") or "CPU"
    banner = ("SIMULATION on the CPU: these times measure Python, not a GPU"
              if result["simulated"] else f"{where}, copy ceiling {copy:.0f} GB/s measured in the same run")
    versions = ", ".join(f"{k} {machine[k]}" for k in ("torch", "triton", "numba", "pycuda", "cuda_runtime")
                         if machine.get(k))
    return f"**{result['title']}**: {banner}; {versions}; {result['date']}.\n\n" + "\n".join(lines) + "\n"


def save(result: dict, results_dir: Path) -> list[Path]:
    """Write `<name>.json` (the record), `<name>.md` (its table) and `<name>.png` (roofline)."""
    from course import roofline

    results_dir.mkdir(parents=True, exist_ok=True)
    base = results_dir / result["benchmark"]
    base.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    base.with_suffix(".md").write_text(markdown_table(result))
    roofline.plot_result(result, base.with_suffix(".png"))
    return [base.with_suffix(s) for s in (".json", ".md", ".png")]


def load_results(results_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results_dir.glob("*.json"))]
