"""Exercise: where the time of a training step goes, read from `torch.profiler`.
Same names as week2_pytorch_optimizations/profiling.py.

Check your work with `pytest tests/week2/test_profiling.py --impl=exercises`. Each stub raises
NotImplementedError until you write it; delete that line when you do. On a CPU the profiler
records CPU ops (aten::mm, ...); on a GPU it also records every kernel, and the trace shows
the gaps between them: the time the GPU waited for Python to launch the next kernel.
"""
from __future__ import annotations

import gzip  # noqa: F401  (a .json.gz trace is gzip-compressed JSON)
import json  # noqa: F401
from pathlib import Path  # noqa: F401
from typing import Callable

import torch  # noqa: F401
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: F401

from course import runtime  # noqa: F401


def profile_steps(step: Callable, *, steps: int = 3, warmup: int = 2, trace_path=None, label: str = "step"):
    """Run `step()` `warmup` times unprofiled, then `steps` times under the profiler; return it.

    Raise ValueError("steps must be at least 1, ...") first. Activities: `ProfilerActivity.CPU`,
    plus `ProfilerActivity.CUDA` when `runtime.on_gpu()`. `with profile(activities=...,
    record_shapes=True) as prof:` around the loop; wrap each step in `record_function(label)` so
    it shows as one span in the trace; on a GPU, `torch.cuda.synchronize()` before the profile and
    before leaving it (kernels run asynchronously: without it the last ones are missing).
    When `trace_path` is given, create its folder and `prof.export_chrome_trace(str(trace_path))`.
    Why warm up? The first calls include lazy initialization, cuBLAS heuristics and compilation.
    """
    raise NotImplementedError("not implemented yet: profile_steps (week2 exercise)")


def top_ops(prof, n: int = 10) -> list[dict]:
    """The n entries of `prof.key_averages()` with the most self time, largest first, as
    {"name": evt.key, "calls": evt.count, "self_us": float}. Self time is
    `evt.self_device_time_total` on a GPU (kernels) and `evt.self_cpu_time_total` on a CPU;
    leave out entries whose self time is 0."""
    raise NotImplementedError("not implemented yet: top_ops (week2 exercise)")


def table(prof, n: int = 15) -> str:
    """Given: the profiler's own table, sorted by self time on the device that did the work."""
    sort = "self_cuda_time_total" if runtime.on_gpu() else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=sort, row_limit=n)


def gpu_busy_fraction(trace_path) -> float | None:
    """How much of the profiled span the GPU was doing something, from a chrome trace file.

    Load the JSON (gunzip it first when the suffix is .gz) and take its "traceEvents" with
    "ph" == "X" and "cat" in ("kernel", "gpu_memcpy", "gpu_memset"): each is an interval
    [ts, ts + dur] in microseconds. Return the length of the *union* of the intervals (sort by
    start and merge the overlapping ones: streams run concurrently) divided by the span from
    the first start to the last end; None when there is no such event (a CPU trace); 1.0 for a
    zero span. [0,10] + [5,15] + [30,40] gives 25 / 40.
    """
    raise NotImplementedError("not implemented yet: gpu_busy_fraction (week2 exercise)")


def profile_config(config: str = "eager", kind: str = "gpt", *, trace_path=None, steps: int = 3, cfg=None,
                   batch=None) -> dict:
    """Given: profile training steps of one compile_benchmark configuration with your functions."""
    from week2_pytorch_optimizations import compile_benchmark as cb

    task = cb.make_task(kind, cfg, batch)
    train = cb.make_train_step(task, config)
    x, y = task.batch
    prof = profile_steps(lambda: train(x, y), steps=steps, trace_path=trace_path, label=f"train_step[{config}]")
    return {"config": config, "top": top_ops(prof), "table": table(prof),
            "gpu_busy_fraction": gpu_busy_fraction(trace_path) if trace_path else None}
