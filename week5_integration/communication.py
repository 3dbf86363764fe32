"""Communication measured: how much of it the GPU hid behind other work, and how fast each collective runs.

`overlap` reads a profiled step's device timeline (torch.profiler's chrome trace): the NCCL
kernels (all-reduce, all-gather, reduce-scatter, by name) against every other kernel and copy.
comm = the union of the NCCL kernels' intervals; hidden = the part of it during which other device
work ran too; exposed = comm - hidden, the time communication alone occupied the GPU. An NCCL
kernel starts when its stream reaches it and ends when the data has arrived, so its span includes
waiting for the slower rank: it is an upper bound on transfer time. `profile_overlap` profiles a
step function and returns its `overlap`.

`comm_bandwidth` times each collective on 256 MiB in the same run: bus bandwidth, NCCL's
definition (all-reduce S/t x 2(N-1)/N, all-gather and reduce-scatter S/t x (N-1)/N), the ceiling a
bench divides its bytes on the wire by. Week 5's `scaleout.py` and the capstone's `fsdp.py` use both.
"""
from __future__ import annotations

import gzip
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from week5_integration.torchrun import free_memory, max_over_ranks, sync

# NCCL kernel names (ncclDevKernel_AllReduce_Sum_f32_RING_LL, ncclKernel_AllGather_RING_LL_Sum_int8_t, ...).
_KIND_BY_NAME = (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
                 ("broadcast", "broadcast"), ("sendrecv", "send_recv"), ("send", "send_recv"),
                 ("recv", "send_recv"))
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


# ------------------------------------------------------------------------------ the timeline
def _kind(name: str) -> str | None:
    """The collective an NCCL kernel performs, or None for any other kernel."""
    low = name.lower()
    if "nccl" not in low:
        return None
    compact = low.replace("_", "")
    for needle, kind in _KIND_BY_NAME:
        if needle in compact:
            return kind
    return "other_nccl"


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals) -> float:
    return sum(end - start for start, end in intervals)


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of (union a) & (union b); both already merged and sorted."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def overlap(events: list[dict], steps: int = 1, device: int | None = None) -> dict:
    """Communication against other device work, per step, in ms, from chrome-trace events.

    `events`: the trace's "traceEvents" (torch.profiler's `export_chrome_trace`): complete ("X")
    events of category kernel / gpu_memcpy / gpu_memset, times in microseconds. `device`: keep only
    this GPU's events (a process may see others'). Returns zeros and `device_events: 0` for a trace
    without device events (a CPU run).
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    comm, other, by_kind, counts = [], [], {}, {}
    first, last = float("inf"), float("-inf")
    for e in events:
        if e.get("ph") != "X" or str(e.get("cat", "")).lower() not in DEVICE_CATEGORIES:
            continue
        if device is not None and (e.get("args") or {}).get("device", device) != device:
            continue
        start, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))
        first, last = min(first, start), max(last, end)
        kind = _kind(str(e.get("name", ""))) if str(e["cat"]).lower() == "kernel" else None
        if kind is None:
            other.append((start, end))
        else:
            comm.append((start, end))
            by_kind[kind] = by_kind.get(kind, 0.0) + (end - start)
            counts[kind] = counts.get(kind, 0) + 1
    n = len(comm) + len(other)
    comm_u, other_u = _union(comm), _union(other)
    busy = _length(_union(comm + other))
    hidden = _intersection(comm_u, other_u)
    span = (last - first) if n else 0.0
    per_step = lambda us: us / steps / 1e3  # noqa: E731  (us over all steps -> ms per step)
    comm_ms = per_step(_length(comm_u))
    return {
        "steps": steps, "device_events": n,
        "span_ms": per_step(span), "busy_ms": per_step(busy), "idle_ms": per_step(span - busy),
        "compute_ms": per_step(_length(other_u)),
        "comm_ms": comm_ms, "hidden_ms": per_step(hidden), "exposed_ms": per_step(_length(comm_u) - hidden),
        "hidden_fraction": (hidden / _length(comm_u)) if comm_u else None,
        "kernel_ms": {k: per_step(v) for k, v in sorted(by_kind.items())},
        "kernels_per_step": {k: v / steps for k, v in sorted(counts.items())},
    }


def profile_overlap(step, steps: int, device: torch.device, trace_path: Path | None = None) -> dict:
    """Run `step()` `steps` times under torch.profiler; the `overlap` of its device timeline.
    `trace_path` (x.json.gz): keep the chrome trace there."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    if dist.is_initialized():
        dist.barrier()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        sync(device)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        trace = json.loads(raw.read_text())
        if trace_path is not None:
            trace_path = Path(trace_path)
            trace_path.parent.mkdir(parents=True, exist_ok=True)
            with open(raw, "rb") as src, gzip.open(trace_path, "wb") as dst:
                shutil.copyfileobj(src, dst)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return overlap(events, steps, device.index if device.type == "cuda" else None)



# ------------------------------------------------------------------------------ the collectives' ceiling
def comm_bandwidth(device: torch.device, world: int, nbytes: int | None = None, iters: int = 5) -> dict:
    """Bus bandwidth (GB/s, NCCL's definition) of all-reduce, all-gather and reduce-scatter on
    `nbytes` of fp32 (256 MiB on GPUs), median of `iters` timed calls after 2 warm-up calls."""
    if world == 1:
        return {}
    nbytes = nbytes or (256 << 20 if device.type == "cuda" else 4 << 20)
    n = nbytes // 4 // world * world
    full = torch.ones(n, device=device)
    part = torch.ones(n // world, device=device)
    calls = {"all_reduce": lambda: dist.all_reduce(full),
             "all_gather": lambda: dist.all_gather_into_tensor(full, part),
             "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, full)}
    factor = {"all_reduce": 2 * (world - 1) / world, "all_gather": (world - 1) / world,
              "reduce_scatter": (world - 1) / world}
    out = {"bytes": n * 4}
    for name, call in calls.items():
        try:
            for _ in range(2):
                call()
            times = []
            for _ in range(iters):
                sync(device)
                dist.barrier()
                t0 = time.perf_counter()
                call()
                sync(device)
                times.append(time.perf_counter() - t0)
            seconds = max(max_over_ranks([statistics.median(times)], device)[0], 1e-9)
            out[f"{name}_busbw_gbps"] = n * 4 / seconds * factor[name] / 1e9
        except Exception as error:  # e.g. a collective the backend lacks: say so, measure the rest
            out[f"{name}_error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
    del full, part
    free_memory(device)
    return out

