"""Did the GPU or the host set the pace of a timed loop? (course.bench.time_gpu asks this.)

`time_gpu` brackets each call with two CUDA events and never synchronises inside its loop, so
that the host queues launches ahead of the GPU. That holds only while a call's kernels take
longer than its Python (argument checks, a custom op's dispatch, allocation, Triton's launch).
When the Python is longer, the GPU reaches a call's start event, then sits idle until the host
gets round to the launch: the event pair measures the host, and the table would show a kernel
time that does not grow with the work. This module decides, from what the loop measured, which
case it was (`is_host_bound`), and how a table says so (`MARK`, `FOOTNOTE`); `graph_replay_ms`
times the same calls replayed from a CUDA graph, which is the GPU's time alone.

The rule, and why it is this one. Three signs were considered:

* span against sum: the events' first start to last end, against the sum of the per-call
  intervals. A GPU-bound loop has span ~= sum. But so does a host-bound one: the GPU processes a
  start event as soon as it is queued, and most of a call's Python comes before its launch, so
  the idle time lands *inside* [start, end] (the interval stretches), while the gap between one
  call's end event and the next call's start event is only the loop's own few microseconds.
  The sign is nearly blind to the case it is meant to catch.
* the host's time per call (perf_counter around the loop / reps) against the events' median.
  Host-bound, the GPU follows the host, so the median is at most the host's time: the ratio is
  about 1 or more. GPU-bound, the host runs ahead: the ratio is below 1, but not always far
  below: the driver's launch queue holds on the order of a thousand entries, a long loop of short
  calls fills it, and from then on the host waits at every launch, so its time per call climbs
  toward the GPU's. Alone, a threshold such as 0.8 would flag GPU-bound loops of short kernels.
* the drain: after the loop, how long `synchronize` waits. GPU-bound, the GPU is behind by the
  work still queued: the backlog the host built up, a queue-full of calls when the queue filled.
  Host-bound, it had caught up with the host: what is left is at most the last call's kernel.

A loop is host-bound when the host's time per call is at least HOST_RATIO of the median AND the
drain is under BACKLOG_CALLS medians (plus DRAIN_FLOOR_MS, for synchronize's own wake-up, which
would otherwise count as backlog when calls are a few microseconds). The ratio rules out loops
where the host clearly ran ahead; the drain rules out the full-queue loops the ratio misreads.
Between the two sits only a balanced loop (host and GPU per call within a few percent of each
other), where the events' figure is near the GPU's time whichever way it is called.
"""
from __future__ import annotations

import math
import statistics
from typing import Callable

import torch

HOST_RATIO = 0.8  # host ms per call / events' median ms, at or above which the host kept pace or lagged
BACKLOG_CALLS = 2.0  # a drain under this many medians: the GPU had not been left a queue of work
DRAIN_FLOOR_MS = 0.05  # synchronize's own latency, not backlog
GRAPH_MIN_CALLS = 16  # calls captured in one graph: one replay's host cost spread thin
MARK = "*"
FOOTNOTE = ("\\* host-bound: the GPU waited for Python between calls; the time is the host's "
            "(course/bench_timing.py). \"GPU ms (graph)\", where shown, is the same calls replayed "
            "from a CUDA graph: the GPU's time alone.")


def is_host_bound(host_ms: float, median_ms: float, drain_ms: float) -> bool:
    """True when a non-synchronising loop of `reps` calls was paced by the host (see the docstring).

    `host_ms`: the host's wall time over the loop / reps; `median_ms`: the events' median per call;
    `drain_ms`: how long the synchronize after the loop waited.
    """
    for name, value in (("host_ms", host_ms), ("median_ms", median_ms), ("drain_ms", drain_ms)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite time >= 0 in ms, got {value!r}")
    if median_ms == 0:
        return host_ms > 0  # the GPU's intervals vanished: whatever took time was the host's
    kept_pace = host_ms >= HOST_RATIO * median_ms
    caught_up = drain_ms < BACKLOG_CALLS * median_ms + DRAIN_FLOOR_MS
    return kept_pace and caught_up


def flagged(row: dict) -> bool:
    """A row whose time is the host's (absent or None: not known, as in records made before the flag)."""
    return row.get("host_bound") is True


def mark(cell: str, row: dict) -> str:
    """A table's ms cell, with MARK where the row was host-bound."""
    return f"{cell}{MARK}" if flagged(row) and cell != "-" else cell


def footnote(rows: list) -> str:
    """The footnote a table ends with when any of its rows is marked; "" otherwise."""
    return f"\n{FOOTNOTE}\n" if any(flagged(r) for r in rows) else ""


# Every host-bound loop time_gpu timed since the last record was written: a bench that keeps only
# `.median_ms` and builds its own rows cannot drop the fact on the way to its results file.
HOST_BOUND_SEEN: list = []
UNFLAGGED_SHOWN = 12  # entries listed in a table's note; the record keeps them all


def seen_entry(fn, timing) -> dict:
    """What HOST_BOUND_SEEN keeps of one host-bound loop: which callable, its ms and the host's."""
    name = f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    return {"fn": name, "ms": timing.median_ms, "host_ms": timing.host_ms}


def take_seen() -> list:
    """HOST_BOUND_SEEN's entries, and the list emptied: what a record written now was measured with.
    (The sweeps' tables, course/tuning.py and course/dispatch.py, keep them as `host_bound_timings`:
    a tile chosen among host-bound times was chosen by noise.)"""
    seen = list(HOST_BOUND_SEEN)
    HOST_BOUND_SEEN.clear()
    return seen


def unflagged_note(result: dict, markdown: str) -> tuple:
    """(record, table) to write, said host-bound where needed, and HOST_BOUND_SEEN emptied.

    Rows that carry `host_bound` (bench.run's, the rounds' that keep Timings) speak for themselves;
    where none does but time_gpu found host-bound loops while the record was measured, the record
    gains `host_bound_timings` (the loops) and the table a note under it."""
    seen = take_seen()
    rows = result.get("rows") if isinstance(result.get("rows"), list) else []
    if not seen or any(isinstance(r, dict) and "host_bound" in r for r in rows):
        return result, markdown
    listed = "; ".join(f"`{e['fn']}` {e['ms']:.4f} ms (host {e['host_ms']:.4f})" for e in seen[:UNFLAGGED_SHOWN])
    more = f"; and {len(seen) - UNFLAGGED_SHOWN} more" if len(seen) > UNFLAGGED_SHOWN else ""
    note = (f"\n**Host-bound timings in this run** ({len(seen)}): the GPU waited for Python between calls, "
            f"so these times are the host's, not the kernels' (course/bench_timing.py): {listed}{more}.\n")
    return dict(result, host_bound_timings=seen), markdown.rstrip("\n") + "\n" + note


def row_fields(timing) -> dict:
    """What a results row records of a Timing beside its ms: only what was measured, so an absent
    `host_bound` keeps meaning "not known" (host clocks, simulation, older records)."""
    fields = {}
    if getattr(timing, "host_bound", None) is not None:
        fields["host_bound"] = timing.host_bound
        fields["host_ms"] = timing.host_ms
    if getattr(timing, "graphed_ms", None) is not None:
        fields["graphed_ms"] = timing.graphed_ms
    if getattr(timing, "graph_error", None):
        fields["graph_error"] = timing.graph_error
    return fields


def timing_fields(timing) -> dict:
    """A results row's timing fields, made from one Timing: its `ms` (the median) and `row_fields`.

    Every row built from a time_gpu / time_call result takes its time from here (as `**fields`), so
    no bench can keep the ms and drop whether the host paced it; tests/test_house.py fails on a
    function that times and builds an "ms" row, or reads `.median_ms`, without it."""
    return {"ms": timing.median_ms, **row_fields(timing)}


def ms_cell(row: dict, spec: str = ".4f") -> str:
    """A printed ms of a row made by timing_fields, with MARK where it was host-bound (a sweep that
    prints its table ends it with `footnote(rows)`)."""
    return "-" if row.get("ms") is None else mark(format(row["ms"], spec), row)


def rounds_fields(timings: list) -> dict:
    """`row_fields` over the Timings of a variant's interleaved rounds: host-bound if any round was
    (no row carries a host time unmarked), the median host and graph-replay times; {} if unknown."""
    timings = [t for t in timings if t.host_bound is not None]
    if not timings:
        return {}
    fields = {"host_bound": any(t.host_bound for t in timings),
              "host_ms": statistics.median(t.host_ms for t in timings)}
    graphed = [t.graphed_ms for t in timings if t.graphed_ms is not None]
    errors = [t.graph_error for t in timings if t.graph_error]
    if graphed:
        fields["graphed_ms"] = statistics.median(graphed)
    elif errors:
        fields["graph_error"] = errors[0]
    return fields


def gpu_ms(timing) -> float | None:
    """The GPU's own time per call of one Timing: the CUDA-graph replay's where the host paced the
    loop (the events' median is then the host's time), the events' median where the GPU did; None
    where the loop was host-bound and its calls could not be replayed (the GPU's time is not known)."""
    return timing.graphed_ms if getattr(timing, "host_bound", None) else timing.median_ms


def graph_replay_ms(fn: Callable, sets: list, *, budget_ms: float, guess_ms: float) -> tuple:
    """(ms per call, None) of `fn`'s calls replayed from one CUDA graph, or (None, why) when `fn`
    cannot be captured (it synchronises, copies to the host, or calls what capture forbids).

    One graph holds GRAPH_MIN_CALLS or more calls, rotating through `sets` as the timed loop does,
    so one replay's own launch is spread over many kernels and the GPU never waits for the host.
    `guess_ms` (an upper bound of a call's GPU time: the events' median) sizes the replays to
    about `budget_ms` of GPU work. The caller has warmed `fn` up: nothing compiles in the capture.
    """
    calls = len(sets) * math.ceil(GRAPH_MIN_CALLS / len(sets))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph, failed = torch.cuda.CUDAGraph(), None
    # Not `with torch.cuda.graph(...)`: when a capture fails, its __exit__ raises from capture_end
    # before it restores the current stream. Here the stream context unwinds whatever happens, and
    # the first error (the call capture forbade, not capture_end's "invalidated") is the one kept.
    with torch.cuda.stream(side):
        for args in sets:  # per-stream lazy state (cuBLAS workspaces) made before the capture
            fn(*args)
        torch.cuda.synchronize()
        graph.capture_begin()
        try:
            for i in range(calls):
                fn(*sets[i % len(sets)])
        # Any Exception, but only from these calls: the same calls have just run in the timed loop,
        # so what fails now is the capture (torch's RuntimeError for a sync or a copy to the host,
        # PyCUDA's LogicError for a launch on the legacy stream, ...), never a bug to hide.
        except Exception as error:  # noqa: BLE001
            failed = error
        finally:  # the capture always ends: a stream left capturing breaks every later CUDA call
            try:
                graph.capture_end()
            except RuntimeError as error:  # "capture invalidated", after the call that caused it
                failed = failed or error
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if failed is not None:
        first_line = (str(failed).strip().splitlines() or [""])[0]
        return None, f"capture failed: {type(failed).__name__}: {first_line[:160]}"
    graph.replay()
    torch.cuda.synchronize()
    replays = max(1, min(50, int(budget_ms / max(guess_ms * calls, 1e-3))))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(5):
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / (replays * calls))
    del graph
    return statistics.median(samples), None
