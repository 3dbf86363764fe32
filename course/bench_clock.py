"""The kit's one clock for a timed loop, whoever drives the loop: CUDA events around each call, the
host's clock around the loop, and the drain after it; what `course.bench_timing.is_host_bound` decides
from (the GPU's time, or the host's).

`course.bench.time_gpu` drives it over a benchmark's `fn(*args)` calls. A loop that cannot be handed
over as such a call drives it itself: a training step that draws its batch and keeps its loss, a decode
step whose input is the last step's output, a fixed count of steps that must not run once more:

    clock = LoopClock(steps)
    for _ in range(steps):
        clock.start()
        step()
        clock.stop()
    timing = clock.timing()   # a Timing: the events' median, host_ms, drain_ms and host_bound

Whatever the caller does between a stop and the next start (drawing a batch, logging) is part of the
host's time per call, as the loop's own Python is in time_gpu: it is what the GPU waits for when the
host is the slower. The caller must not synchronise inside the loop: the drain after it is one of the
rule's two signs. Off the GPU (simulation, a CPU run) each call is timed by the host's clock alone and
the Timing's `host_bound` stays None (not known), as `time_host`'s.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from course import bench_timing, runtime


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    reps: int
    samples: list = field(repr=False, default_factory=list)
    # time_gpu and LoopClock on a GPU only (None: not measured, as with host clocks): the host's wall
    # time per call over the timed loop, whether the loop was paced by the host (course/bench_timing.py:
    # the rule), how long the GPU still had queued when the host finished, and, when host-bound, the
    # calls' time replayed from a CUDA graph (the GPU's alone) or why they could not be captured.
    host_ms: float | None = None
    host_bound: bool | None = None
    drain_ms: float | None = None
    graphed_ms: float | None = None
    graph_error: str | None = None


def _cuda_event():
    return torch.cuda.Event(enable_timing=True)


class LoopClock:
    """Times the calls between each `start()` and `stop()`; `timing()` after the loop.

    `reps`: the calls expected, whose events are made before the loop (one more is made when needed);
    `events`: CUDA events (default: on a GPU) or the host's clock. `event` and `synchronize` stand for
    torch.cuda's in the CPU tests, which drive the GPU path with events whose times they choose.
    """

    def __init__(self, reps: int = 0, *, events: bool | None = None, event: Callable = _cuda_event,
                 synchronize: Callable | None = None):
        if not isinstance(reps, int) or reps < 0:
            raise ValueError(f"reps must be a count of calls >= 0, got {reps!r}")
        self.events = runtime.on_gpu() if events is None else bool(events)
        self._event, self._sync = event, synchronize or torch.cuda.synchronize
        # made ahead: making an event inside the loop would add to the host's time per call
        self._pool = [(event(), event()) for _ in range(reps)] if self.events else []
        self._marks: list = []  # (start, end) events, or host ms per call
        self._open = None
        self._t0 = self._t1 = None
        self._timing: Timing | None = None

    def start(self) -> None:
        if self._open is not None:
            raise RuntimeError("LoopClock.start() called twice without stop()")
        if self._timing is not None:
            raise RuntimeError("LoopClock: the loop was already read by timing(); make a new clock")
        now = time.perf_counter()
        if self._t0 is None:
            self._t0 = now
        if not self.events:
            self._open = now
            return
        n = len(self._marks)
        self._open = self._pool[n] if n < len(self._pool) else (self._event(), self._event())
        self._open[0].record()

    def stop(self) -> None:
        if self._open is None:
            raise RuntimeError("LoopClock.stop() called without start()")
        if self.events:
            self._open[1].record()
            self._marks.append(self._open)
        else:
            self._marks.append((time.perf_counter() - self._open) * 1e3)
        self._open = None
        self._t1 = time.perf_counter()

    def __len__(self) -> int:
        return len(self._marks)

    def timing(self) -> Timing:
        """The loop's Timing (waits for the GPU the first time: the drain). Read once, kept."""
        if self._timing is not None:
            return self._timing
        if self._open is not None or not self._marks:
            raise RuntimeError("LoopClock.timing(): no call was timed, or the last start() has no stop()")
        if not self.events:
            samples = list(self._marks)
            self._timing = Timing(statistics.median(samples), min(samples), len(samples), samples)
            return self._timing
        self._sync()
        drain_ms = (time.perf_counter() - self._t1) * 1e3
        samples = [s.elapsed_time(e) for s, e in self._marks]
        median, host_ms = statistics.median(samples), (self._t1 - self._t0) * 1e3 / len(samples)
        self._timing = Timing(median, min(samples), len(samples), samples, host_ms=host_ms, drain_ms=drain_ms,
                              host_bound=bench_timing.is_host_bound(host_ms, median, drain_ms))
        return self._timing
