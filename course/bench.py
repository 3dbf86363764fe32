"""Timing kernels honestly, next to their torch reference, against the machine's own ceilings.

How a number is made here:
* device work is asynchronous, so each call is bracketed by CUDA events, never a host clock;
* the first calls compile and load, so they are thrown away (warm-up) before timing;
* one timing is noise, so each figure is the median of many calls;
* the events time the GPU only while it is ahead of the host: a call whose Python outlasts its
  kernel leaves the GPU idle between them, so `time_gpu` says when that happened (`host_bound`,
  course/bench_timing.py), the row records it and the tables mark its ms with `*`;
* inputs that fit in L2 would measure the cache, so small cases rotate through several
  freshly drawn input sets;
* GB/s and TFLOP/s come from byte and FLOP counts written beside each benchmark (each input
  read once, each output written once), and "% of copy" divides by a device-to-device
  copy measured in the same run on the same GPU, not by a datasheet.

Two more columns describe a variant beside its speed:
* "peak MiB": device memory the variant allocated above its inputs while it was timed
  (`torch.cuda.max_memory_allocated` after `reset_peak_memory_stats`, minus what was allocated
  before: outputs it allocates, workspaces, temporaries). Compilation and autotuning happen in
  one untimed call before the reset, so their buffers are not counted. None in simulation.
* "LoC": lines of code of the kernel(s) and launcher a variant runs (course/source_lines.py),
  when the benchmark names them in `sources=`: the source of each function (found with
  `inspect`) or CUDA C function (`c_function(path, name)`), counting every line that holds code, signature and decorators
  included, but not blank lines, comment-only lines or docstrings. A rough, qualitative
  measure of effort; helpers shared by several kernels count only where they are listed.

In simulation (no GPU) the same code runs with a host clock and tiny sizes; every table
then says SIMULATION, because those times measure Python, not a GPU.
"""
from __future__ import annotations

import dataclasses
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

from course import bench_timing, runtime
# The one clock every timed loop runs on (time_gpu's here; a training or decode loop's in its lesson).
from course.bench_clock import LoopClock, Timing  # noqa: F401
# c_function is handed on: lessons name a benchmark's CUDA C sources through course.bench.
from course.source_lines import c_function, count_source_lines  # noqa: F401
# A row's timing fields (ms, host_bound, host_ms, graphed_ms), its printed ms and a printed table's footnote.
from course.bench_timing import footnote, mark, ms_cell, timing_fields  # noqa: F401

REFERENCE = "torch"


@dataclass
class Benchmark:
    """One kernel family timed over sizes: the table a week's `BENCHMARKS` list holds.

    `variants` maps a label to a callable taking the inputs that `make_inputs(size)`
    returns; the label "torch" is the reference every other variant is divided by.
    `bytes(size)` and `flops(size)` are the minimum traffic and arithmetic of one call.
    `sources` maps a variant to the function(s) it runs (kernels, launcher; a list, or one
    callable or `c_function(...)`): their lines of code go in the "LoC" column.
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
    sources: dict = field(default_factory=dict)  # variant -> callable(s) whose lines are counted
    # "events": GPU time per call (CUDA events, launches queued ahead); "wall": host cost per
    # call (wall time of many calls, then one synchronize), for tiny sizes where Python, the
    # launcher and autograd are the bottleneck and the GPU waits for the host.
    clock: str = "events"
    # Variants also timed replayed from a CUDA graph (rows "<label>_graph", GPU only): the GPU's
    # time for a call without the host's, what a captured or compiled model pays (see `graphed`).
    graphed: tuple = ()

    def active_sizes(self) -> list:
        return runtime.pick(gpu=self.sizes, sim=self.sim_sizes)

    def lines_of_code(self) -> dict:
        """{variant: lines of code} for the variants named in `sources` (see `count_source_lines`)."""
        unknown = set(self.sources) - set(self.variants)
        if unknown:
            raise ValueError(f"{self.name}: sources= names variants that do not exist: {sorted(unknown)}")
        return {label: count_source_lines(spec) for label, spec in self.sources.items()}


def utc_now() -> str:
    """The date a record is stamped with: UTC, to the minute."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def pow2_label(n: int) -> str:
    """2^26 rather than 67108864 in tables."""
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


def itemsize(dtype: torch.dtype) -> int:
    """Bytes of one element of `dtype`: what a benchmark's `bytes=` counts elements in."""
    return torch.empty((), dtype=dtype).element_size()


def bench_dtype() -> torch.dtype:
    """The half-precision dtype a model's ops are measured in: bf16 on GPUs with bf16 hardware
    (sm_80+), fp16 on older ones (Colab's T4), fp32 simulated (the interpreter's bf16 is slow)."""
    if not runtime.on_gpu():
        return torch.float32
    return torch.bfloat16 if runtime.has_capability((8, 0)) else torch.float16


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


def warm_up(fn: Callable, sets: list) -> None:
    """Call `fn` once on every input set before anything is timed. A first call per set can cost
    far more than the rest: a graphed variant captures a CUDA graph per set (milliseconds), and a
    timing loop that reaches a set the warm-up skipped would time that capture (seen: graph rows
    of tiny sizes, which rotate through 64 sets, read 3-4 ms for ~20 us of work)."""
    for args in sets:
        fn(*args)


def time_gpu(fn: Callable, sets: list, *, warmup_ms: float = 25, rep_ms: float = 200, graph: bool = False) -> Timing:
    """Median GPU time per call (CUDA events around each call, launches queued ahead), and whether
    the host paced the loop instead (`Timing.host_bound`); if it did and `graph`, the calls are
    also timed replayed from a CUDA graph (`Timing.graphed_ms`, the GPU's own time)."""
    warm_up(fn, sets)
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
    # No synchronisation inside the loop: the host queues launches ahead of the GPU, so
    # Python's launch cost overlaps the previous kernel instead of landing in the timing.
    # The clock's host time around the loop, and around the drain after it, tell whether it did.
    clock = LoopClock(reps, events=True)
    for i in range(reps):
        clock.start()
        fn(*sets[i % len(sets)])
        clock.stop()
    timing = clock.timing()
    if timing.host_bound:  # for write_record, whose caller may have kept only the ms
        bench_timing.HOST_BOUND_SEEN.append(bench_timing.seen_entry(fn, timing))
    return with_graph_time(timing, fn, sets, rep_ms) if graph else timing


def with_graph_time(timing: Timing, fn: Callable, sets: list, rep_ms: float = 200) -> Timing:
    """`timing`, with the calls' CUDA-graph replay time (or why there is none) when it was host-bound."""
    if not timing.host_bound:
        return timing
    ms, why = bench_timing.graph_replay_ms(fn, sets, budget_ms=rep_ms / 5, guess_ms=timing.median_ms)
    return dataclasses.replace(timing, graphed_ms=ms, graph_error=why)


def time_host(fn: Callable, sets: list, *, budget_s: float = 0.5) -> Timing:
    warm_up(fn, sets)
    samples = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < 3 or (time.perf_counter() < deadline and len(samples) < 50):
        t0 = time.perf_counter()
        fn(*sets[len(samples) % len(sets)])
        samples.append((time.perf_counter() - t0) * 1e3)
    return Timing(statistics.median(samples), min(samples), len(samples), samples)


def time_wall(fn: Callable, sets: list, *, calls: int = 300, reps: int = 7) -> Timing:
    """Host cost per call: the wall time of `calls` back-to-back calls, then one synchronize.

    When a call's GPU work is shorter than its Python (validation, allocation, the launch
    itself, autograd bookkeeping), the GPU idles between kernels and this is the time a model
    pays per call. Median over `reps` repetitions.
    """
    warm_up(fn, sets)
    if runtime.on_gpu():
        torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for i in range(calls):
            fn(*sets[i % len(sets)])
        if runtime.on_gpu():
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / calls * 1e3)
    return Timing(statistics.median(samples), min(samples), reps * calls, samples)


def compile_on_first_call(fn: Callable, **options) -> Callable:
    """torch.compile(fn, **options), compiled on its first call: a benchmark's torch.compile
    variant compiles in its warm-up, never inside the timing, and not at import (a machine that
    skips the variant, such as the Triton interpreter's, never compiles it)."""
    compiled = None

    def run(*args, **kwargs):
        nonlocal compiled
        if compiled is None:
            compiled = torch.compile(fn, **options)
        return compiled(*args, **kwargs)
    return run


def time_call(fn: Callable, sets: list) -> Timing:
    """time_gpu on a GPU (with the graph-replay time where host-bound), time_host in simulation."""
    return time_gpu(fn, sets, graph=True) if runtime.on_gpu() else time_host(fn, sets)


def graphed(fn: Callable) -> Callable:
    """`fn` replayed from a CUDA graph, one graph per input set: what a call costs the GPU alone.

    A model whose step is captured (the capstone's) or compiled with CUDA graphs pays no Python
    per op; this variant shows an op's time there, beside its eager time, which includes the
    host's (autograd, checks, launches) whenever that is longer than the GPU work. The first call
    for a set warms `fn` up on a side stream (caches, compiled kernels), then captures it; later
    calls replay and return the graph's output tensors. Keyed by each tensor's address, shape,
    strides and dtype: a graph replays on addresses, so a new tensor at the same address with the
    same layout is read correctly. GPU only (the capture needs CUDA).
    """
    graphs: dict = {}

    def call(*args):
        key = tuple((a.data_ptr(), a.shape, a.stride(), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
        hit = graphs.get(key)
        if hit is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    fn(*args)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = fn(*args)
            hit = graphs[key] = (graph, out)
        hit[0].replay()
        return hit[1]

    return call


def time_with_memory(fn: Callable, sets: list, clock: str = "events") -> tuple[Timing, int | None]:
    """`time_call`, and the bytes the calls allocated above what was live before (None off-GPU).

    One untimed call first compiles and autotunes (the autotuner allocates its own buffers),
    then the peak counter is reset, so the figure is what the timed calls themselves need:
    outputs they allocate, workspaces and temporaries, not the inputs.
    """
    if clock not in ("events", "wall"):
        raise ValueError(f"clock must be 'events' or 'wall', got {clock!r}")
    if not runtime.on_gpu():
        return (time_wall(fn, sets, calls=20, reps=3) if clock == "wall" else time_host(fn, sets)), None
    fn(*sets[0])
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    timing = time_wall(fn, sets) if clock == "wall" else time_gpu(fn, sets, graph=False)
    torch.cuda.synchronize()
    peak = max(0, torch.cuda.max_memory_allocated() - before)
    return with_graph_time(timing, fn, sets), peak  # after the peak: the graph's pool is not the calls'


@dataclass
class Rounds:
    """The times of interleaved rounds: `ms[label][r]` is variant `label`'s time (ms) in round r;
    `timings[label][r]` its Timing, where the timer returned one (whether the round was host-bound)."""
    ms: dict
    timings: dict = field(default_factory=dict)

    def row_fields(self, label: str) -> dict:
        """What the label's row records of its rounds' Timings (bench_timing.rounds_fields)."""
        return bench_timing.rounds_fields(self.timings.get(label, []))

    def per_round(self, label: str, gpu: bool = False) -> list:
        """The variant's ms in each round: the events' median; gpu=True: the GPU's own time (bench_timing.gpu_ms:
        the CUDA-graph replay where the host paced that round, None where it is not known). A ratio of two
        host-paced times compares two Pythons, so a bench whose small sizes are host-bound asks for gpu=True."""
        return [bench_timing.gpu_ms(t) for t in self.timings.get(label, [])] if gpu else self.ms[label]

    def median(self, label: str, gpu: bool = False) -> float | None:
        """The variant's ms: the median over rounds (of `per_round(label, gpu)`, where known; None if none is)."""
        known = [ms for ms in self.per_round(label, gpu) if ms is not None]
        return statistics.median(known) if known else None

    def spread_pct(self, label: str) -> float:
        """How far the variant's own times moved over the rounds: (max - min) / median, in %."""
        ms = self.ms[label]
        return 100 * (max(ms) - min(ms)) / statistics.median(ms)

    def ratios(self, label: str, baseline: str = REFERENCE, gpu: bool = False) -> list:
        """baseline ms / variant ms, round by round (> 1: faster than the baseline in that round), of
        `per_round(..., gpu)`: the rounds where both are known."""
        pairs = zip(self.per_round(baseline, gpu), self.per_round(label, gpu))
        return [base / own for base, own in pairs if base is not None and own]

    def ratio_range(self, label: str, baseline: str = REFERENCE, gpu: bool = False) -> tuple | None:
        """(median, min, max) over rounds of `ratios(label, baseline, gpu)`: a ratio and its spread; None
        where no round has one (gpu=True: a variant never timed, or whose GPU time no round knows)."""
        ratios = self.ratios(label, baseline, gpu)
        return (statistics.median(ratios), min(ratios), max(ratios)) if ratios else None


def interleaved_rounds(variants: dict, rounds: int, time_ms: Callable) -> Rounds:
    """Time every variant once per round, in turn, for `rounds` rounds; `time_ms(fn)` times one
    (its ms, or the Timing itself, which keeps whether the round was host-bound: `Rounds.row_fields`).

    Why interleave: a vendor kernel's rate on one GPU moves by ~10% between runs minutes apart
    (cuBLAS on an H100: 599 to 668 TFLOP/s at one shape on two days; a torch.compile'd twin
    drifts as much), with the clock, the temperature and the neighbours. A ratio of two timings
    taken apart measures that drift as much as the kernel. Timed in turn, round after round, the
    variants share each round's conditions, so a ratio is taken within a round (`Rounds.ratios`),
    and the median over rounds with the min - max beside it says whether a target holds against
    the baseline's good rounds too, not only on average.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    ms, timings = {label: [] for label in variants}, {label: [] for label in variants}
    for _ in range(rounds):
        for label, fn in variants.items():
            timed = time_ms(fn)
            if isinstance(timed, Timing):
                timings[label].append(timed)
                timed = timed.median_ms
            ms[label].append(timed)
    return Rounds(ms, {label: t for label, t in timings.items() if t})


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
    loc = bench.lines_of_code()
    rows = []
    for size in bench.active_sizes():
        sets = input_sets(bench.make_inputs, size)
        nbytes, nflops = bench.bytes(size), bench.flops(size)
        by_variant = {}
        variants, graph_labels = dict(bench.variants), {f"{label}_graph" for label in bench.graphed}
        for label in bench.graphed:  # made per size: the graphs (and their memory) go with the size
            variants[f"{label}_graph"] = graphed(bench.variants[label])
        for label, fn in variants.items():
            if progress:
                progress.step(f"{bench.name} {bench.size_label(size)} {label}")
            if (label in bench.gpu_only or label in graph_labels) and not runtime.on_gpu():
                rows.append({"size": bench.size_label(size), "variant": label, "skipped": "needs a GPU"})
                continue
            timing, peak = time_with_memory(fn, sets, bench.clock)
            seconds = timing.median_ms * 1e-3
            by_variant[label] = timing.median_ms
            rows.append({
                "size": bench.size_label(size), "variant": label,
                **timing_fields(timing), "ms_min": timing.min_ms, "reps": timing.reps,
                "bytes": nbytes, "flops": nflops,
                "gbps": nbytes / seconds / 1e9 if nbytes else None,
                "tflops": nflops / seconds / 1e12 if nflops else None,
                "pct_of_copy": 100 * nbytes / seconds / 1e9 / copy_gbps if nbytes else None,
                "peak_mem_bytes": peak, "loc": loc.get(label),
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
        "clock": bench.clock,
        "headline": list(bench.headline),
        "simulated": not runtime.on_gpu(),
        "date": utc_now(),
        "machine": runtime.describe(),
        "ceilings": dict(_ceilings),
        "rows": rows,
    }


def fmt(value, spec: str) -> str:
    """A table cell: format(value, spec), or "-" where the value is missing (None)."""
    return "-" if value is None else format(value, spec)


def _speedup(value) -> str:
    return "-" if not value else f"{value:.2f}x"


def _mib(value) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}"


# (header, cell) of each column; a column whose cells are all "-" is left out of the table.
COLUMNS = [
    ("size", lambda r: str(r["size"])),
    ("variant", lambda r: str(r["variant"])),
    ("ms", lambda r: bench_timing.mark(fmt(r.get("ms"), ".4f"), r)),  # * host-bound (footnote)
    ("GPU ms (graph)", lambda r: fmt(r.get("graphed_ms"), ".4f")),
    ("GB/s", lambda r: fmt(r.get("gbps"), ".0f")),
    ("TFLOP/s", lambda r: fmt(r.get("tflops"), ".2f")),
    ("% of copy", lambda r: fmt(r.get("pct_of_copy"), ".1f")),
    ("vs torch", lambda r: _speedup(r.get("speedup_vs_torch"))),
    # week 2's compile benchmark records "peak_mib" itself
    ("peak MiB", lambda r: _mib(r.get("peak_mem_bytes")) if "peak_mib" not in r else fmt(r["peak_mib"], ".1f")),
    ("LoC", lambda r: fmt(r.get("loc"), "d")),
]
ALWAYS_SHOWN = ("size", "variant", "ms")


def markdown_table(result: dict, rows: list | None = None) -> str:
    """The results record as a markdown table (also what the CLI prints).

    `rows` (default: all of the record's) picks a subset. A column empty in every row shown
    (no FLOPs counted, no memory measured in simulation, no `sources=`) is left out.
    """
    rows = result["rows"] if rows is None else rows
    timed = [r for r in rows if "skipped" not in r]
    columns = [(head, cell) for head, cell in COLUMNS
               if head in ALWAYS_SHOWN or any(cell(r) != "-" for r in timed)]
    lines = ["| " + " | ".join(head for head, _ in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        if "skipped" in row:
            cells = [str(row["size"]), str(row["variant"]), f"skipped: {row['skipped']}"]
            cells += [""] * (len(columns) - 3)
        else:
            cells = [cell(row) for _, cell in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return (f"**{result['title']}**: {measured_on(result)}.\n\n" + "\n".join(lines) + "\n"
            + bench_timing.footnote(rows))


def measured_on(result: dict) -> str:
    """'GPU, copy ceiling N GB/s measured in the same run; versions; date': the table's caption."""
    machine = result["machine"]
    copy = result.get("ceilings", {}).get("copy_gbps")
    where = machine.get("gpu") or "CPU"
    if result.get("simulated"):
        banner = "SIMULATION on the CPU: these times measure Python, not a GPU"
    elif copy:
        banner = f"{where}, copy ceiling {copy:.0f} GB/s measured in the same run"
    else:
        banner = where
    versions = ", ".join(f"{k} {machine[k]}" for k in ("torch", "triton", "numba", "pycuda", "cuda_runtime")
                         if machine.get(k))
    return f"{banner}; {versions}; {result['date']}"


def write_record(result: dict, results_dir, markdown: str, *, json_default=None) -> list[Path]:
    """Write `<name>.json` (the record) and `<name>.md` (`markdown`: its table) into `results_dir`.

    Every results file goes through here, whatever draws its table; `json_default` is json.dumps's
    `default` for records holding values JSON lacks. Where time_gpu found host-bound loops since the
    last record and no row carries the flag, the record and its table say so (`unflagged_note`).
    """
    result, markdown = bench_timing.unflagged_note(result, markdown)
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    base = results_dir / result["benchmark"]
    base.with_suffix(".json").write_text(json.dumps(result, indent=1, default=json_default) + "\n")
    base.with_suffix(".md").write_text(markdown)
    return [base.with_suffix(".json"), base.with_suffix(".md")]


def save(result: dict, results_dir: Path) -> list[Path]:
    """Write `<name>.json` (the record), `<name>.md` (its table) and `<name>.png` (roofline)."""
    from course import roofline

    paths = write_record(result, results_dir, markdown_table(result))
    png = paths[0].with_suffix(".png")
    roofline.plot_result(result, png)
    return paths + [png]


def is_result(record) -> bool:
    """A benchmark record as `run` makes it (results/ may hold other json files: measurements, traces)."""
    return isinstance(record, dict) and "benchmark" in record and isinstance(record.get("rows"), list)


def load_results(results_dir: Path) -> list[dict]:
    records = (json.loads(p.read_text()) for p in sorted(results_dir.glob("*.json")))
    return [r for r in records if is_result(r)]
