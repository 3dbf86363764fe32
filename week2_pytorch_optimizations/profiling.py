"""Profiling: where the time of a step goes, read from `torch.profiler`.

What it teaches:
* the profiler records each op on the CPU (aten::linear, aten::addmm, ...) and, on a GPU,
  each kernel it launched (`ampere_sgemm...`, `triton_poi_fused...`, `flash_fwd...`).
  `key_averages().table(sort_by=...)` ranks them; the chrome trace (open it in
  chrome://tracing or https://ui.perfetto.dev) shows them on a timeline.
* the *gaps*: where the GPU timeline is empty the GPU waited for the CPU to launch the next
  kernel. `gpu_busy_fraction` measures it from the trace: the union of kernel intervals
  over the wall time of the profiled steps. Eager small models are gap-bound (launch
  overhead); CUDA graphs and torch.compile close the gaps.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from course import runtime


# EXERCISE NOTE: On a CPU the profiler records CPU ops (aten::mm, ...); on a GPU it also records every
#   kernel, and the trace shows the gaps between them: the time the GPU waited for Python to launch the
#   next kernel.

def profile_steps(step: Callable, *, steps: int = 3, warmup: int = 2, trace_path=None, label: str = "step"):
    """Run `step()` `warmup` times, then `steps` times under the profiler; returns the profile.

    Each profiled step is wrapped in `record_function(label)` so it shows as one span.
    `trace_path` (a .json, or .json.gz to compress it) gets the chrome trace.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    # BEGIN EXERCISE: step() warmup times unprofiled (why? lazy init, cuBLAS heuristics, compilation), then
    #   steps times inside profile(activities=[CPU, plus CUDA when runtime.on_gpu()], record_shapes=True),
    #   each step in record_function(label) so it shows as one span; on a GPU torch.cuda.synchronize()
    #   before the profile and before leaving it (kernels run asynchronously); with trace_path, create its
    #   folder and prof.export_chrome_trace(str(trace_path))
    # HINT: the first calls pay one-off costs (CUDA context, cuBLAS heuristics, compilation) that would
    #   dominate a profile; and since kernels run asynchronously, the profile must start and end with the
    #   GPU idle or it cuts kernels in half.
    # HINT: a warmup loop; the activity list (CPU, plus CUDA on a GPU); synchronise; `with profile(...) as
    #   prof:` around a loop that wraps each step in record_function(label), synchronising again before
    #   the block ends; then export the trace if asked, creating its folder.
    # HINT: the last `torch.cuda.synchronize()` goes inside the `with profile(...)` block, after the loop.
    for _ in range(warmup):  # first calls include lazy init, autotuning, compilation
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if runtime.on_gpu() else [])
    if runtime.on_gpu():
        torch.cuda.synchronize()
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            with record_function(label):
                step()
        if runtime.on_gpu():
            torch.cuda.synchronize()
    if trace_path is not None:
        Path(trace_path).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace_path))
    return prof
    # END EXERCISE


def top_ops(prof, n: int = 10) -> list[dict]:
    """The n ops (or, on a GPU, kernels) with the most self time: name, calls, self time in us."""
    # BEGIN EXERCISE: the n entries of prof.key_averages() with the most self time, largest first, as
    #   {'name': evt.key, 'calls': evt.count, 'self_us': float}; self time is evt.self_device_time_total on
    #   a GPU (kernels), evt.self_cpu_time_total on a CPU; leave out entries whose self time is 0
    # HINT: key_averages() groups events by name; self time excludes children, so it points at where time is
    #   really spent; on a GPU the interesting time is the device's (kernels), on a CPU the CPU's.
    # HINT: loop the averages, pick self_device_time_total or self_cpu_time_total by on_gpu, keep rows with
    #   positive time as dicts, sort by self_us descending and slice n.
    # HINT: `sorted(rows, key=lambda r: r['self_us'], reverse=True)[:n]`
    on_gpu = runtime.on_gpu()
    rows = []
    for evt in prof.key_averages():
        self_us = evt.self_device_time_total if on_gpu else evt.self_cpu_time_total
        if self_us > 0:
            rows.append({"name": evt.key, "calls": evt.count, "self_us": float(self_us)})
    return sorted(rows, key=lambda r: r["self_us"], reverse=True)[:n]
    # END EXERCISE


def table(prof, n: int = 15) -> str:
    sort = "self_cuda_time_total" if runtime.on_gpu() else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=sort, row_limit=n)


def gpu_busy_fraction(trace_path) -> float | None:
    """Union of GPU kernel (and memcpy/memset) intervals / the span from first to last one.

    None when the trace holds no GPU activity (a CPU run). 1.0 means no gaps at all.
    """
    # BEGIN EXERCISE: load the trace (gunzip a .gz), take its traceEvents with ph == 'X' and cat in
    #   ('kernel', 'gpu_memcpy', 'gpu_memset'): intervals [ts, ts + dur]; the length of their UNION (sort by
    #   start, merge the overlaps: streams run concurrently) over the span from the first start to the last
    #   end; None without such events (a CPU trace), 1.0 for a zero span. [0,10] + [5,15] + [30,40] gives 25
    #   / 40
    # HINT: GPU utilisation is the time covered by at least one kernel or copy divided by the wall span;
    #   kernels on different streams overlap, so summing durations would overcount: merge overlapping
    #   intervals first.
    # HINT: read the JSON (gzip.decompress for .gz), filter complete events ('X') of the GPU categories into
    #   sorted (start, end) pairs, return None when empty; sweep: extend the current interval while the
    #   next starts before its end, else add it to `busy` and start a new one; divide by last end minus
    #   first start.
    # HINT: the merge test: `if start > cur_end:` closes the current interval; otherwise `cur_end =
    #   max(cur_end, end)`.
    path = Path(trace_path)
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    events = json.loads(text).get("traceEvents", [])
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
                   if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    if not spans:
        return None
    busy, cur_start, cur_end = 0.0, spans[0][0], spans[0][1]
    for start, end in spans[1:]:
        if start > cur_end:
            busy += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    busy += cur_end - cur_start
    wall = max(e for _, e in spans) - spans[0][0]
    return busy / wall if wall > 0 else 1.0
    # END EXERCISE


def profile_config(config: str = "eager", kind: str = "gpt", *, trace_path=None, steps: int = 3, cfg=None,
                   batch=None) -> dict:
    """Profile training steps of one compile_benchmark configuration; the numbers the notes quote."""
    from week2_pytorch_optimizations import compile_benchmark as cb

    task = cb.make_task(kind, cfg, batch)
    train = cb.make_train_step(task, config)
    x, y = task.batch
    prof = profile_steps(lambda: train(x, y), steps=steps, trace_path=trace_path, label=f"train_step[{config}]")
    return {"config": config, "top": top_ops(prof), "table": table(prof),
            "gpu_busy_fraction": gpu_busy_fraction(trace_path) if trace_path else None}
