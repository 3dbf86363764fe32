"""course.bench_clock.LoopClock: the one clock time_gpu and the loops lessons drive (training, decoding) share.

Its GPU path runs here on the CPU with stand-in events (conftest's `gpu_clock`: events that read the
host's clock, or a fixed GPU time), so what it hands the host-bound rule (course/bench_timing.py) is
checked without a GPU; the rule itself is tests/test_bench_timing.py's.
"""
import time

import pytest
import torch

from course import bench, bench_timing, runtime
from course.bench_clock import LoopClock, Timing


def drive(clock, calls, work_s=0.0, between_s=0.0):
    for _ in range(calls):
        clock.start()
        time.sleep(work_s)
        clock.stop()
        time.sleep(between_s)
    return clock.timing()


def test_off_the_gpu_each_call_is_timed_by_the_host_and_the_flag_stays_unknown():
    timing = drive(LoopClock(3, events=False), 3, work_s=0.002)
    assert isinstance(timing, Timing) and timing.reps == 3 and len(timing.samples) == 3
    assert timing.median_ms >= 2.0 and timing.min_ms == min(timing.samples)
    assert timing.host_bound is None and timing.host_ms is None and timing.drain_ms is None
    assert bench_timing.row_fields(timing) == {}  # a row then records no flag: "not known"


def test_a_host_paced_loop_is_flagged_with_the_hosts_time_per_call(gpu_clock):
    """Events that follow the host (a GPU busy half the host's time, waiting on it): the rule says host-bound."""
    timing = drive(gpu_clock()(4), 4, work_s=0.002, between_s=0.001)
    assert timing.host_bound is True and timing.reps == 4
    assert timing.median_ms >= 1.0  # half of each 2 ms call: conftest.GPU_SHARE_OF_HOST
    assert timing.host_ms * timing.reps >= sum(timing.samples) * (1 - 1e-9)  # the loop's span holds every call
    assert timing.drain_ms >= 0
    assert bench_timing.row_fields(timing) == {"host_bound": True, "host_ms": timing.host_ms}


def test_a_gpu_far_behind_a_fast_host_is_not_flagged(gpu_clock):
    timing = drive(gpu_clock(gpu_ms=50.0)(5), 5)
    assert timing.median_ms == 50.0 and timing.host_bound is False
    assert timing.host_ms < bench_timing.HOST_RATIO * 50.0


def test_more_calls_than_expected_get_their_own_events(gpu_clock):
    clock = gpu_clock(gpu_ms=1.0)(2)
    timing = drive(clock, 5)
    assert timing.reps == 5 and len(clock) == 5


def test_the_loop_is_read_once_and_the_clock_refuses_misuse():
    clock = LoopClock(events=False)
    with pytest.raises(RuntimeError, match="no call was timed"):
        clock.timing()
    with pytest.raises(RuntimeError, match="without start"):
        clock.stop()
    clock.start()
    with pytest.raises(RuntimeError, match="twice"):
        clock.start()
    clock.stop()
    first = clock.timing()
    assert clock.timing() is first  # the drain is measured once
    with pytest.raises(RuntimeError, match="already read"):
        clock.start()
    for bad in (-1, 1.5, "3"):
        with pytest.raises(ValueError, match="reps"):
            LoopClock(bad)


class HostEvent:
    """torch.cuda.Event's stand-in for time_gpu on the CPU: it records the host's clock."""

    def __init__(self, enable_timing=True):
        self.at = None

    def record(self):
        self.at = time.perf_counter()

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


def test_time_gpu_times_its_loop_on_the_same_clock(monkeypatch):
    """time_gpu's loop is a LoopClock's: with torch.cuda's events and synchronize stood in for (events that
    read the host), a call that only sleeps is a host-paced loop, flagged and remembered for write_record."""
    monkeypatch.setattr(torch.cuda, "Event", HostEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(bench_timing, "HOST_BOUND_SEEN", [])

    def nap():
        time.sleep(0.001)

    timing = bench.time_gpu(nap, [()], warmup_ms=2, rep_ms=15)
    assert 10 <= timing.reps <= 1000 and len(timing.samples) == timing.reps
    assert timing.median_ms >= 1.0 and timing.host_bound is True
    assert timing.host_ms * timing.reps >= sum(timing.samples) * (1 - 1e-9)
    assert [e["fn"].rsplit(".", 1)[-1] for e in bench_timing.HOST_BOUND_SEEN] == ["nap"]
    assert bench.timing_fields(timing) == {"ms": timing.median_ms, "host_bound": True, "host_ms": timing.host_ms}


def test_bench_re_exports_the_clocks_timing():
    assert bench.Timing is Timing and bench.LoopClock is LoopClock
    assert Timing(1.0, 0.5, 3).host_bound is None  # positional fields as before; the flag unknown by default


# ------------------------------------------------------------------------------ on a real GPU
needs_gpu = pytest.mark.skipif(not runtime.on_gpu(),
                               reason="needs a real NVIDIA GPU (CUDA events)")


def _spin(seconds):
    """Python that holds the host, as a training step's dispatch, autograd and optimizer loop do."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@needs_gpu
def test_on_a_gpu_a_loop_of_tiny_kernels_behind_slow_python_is_flagged():
    x = torch.randn(1024, device="cuda")
    clock = LoopClock(50)
    for _ in range(50):
        clock.start()
        _spin(200e-6)  # 0.2 ms of Python before a kernel of a few microseconds
        x.mul_(1.0)
        clock.stop()
    timing = clock.timing()
    assert timing.host_bound is True and timing.median_ms > 0.15 and timing.host_ms > 0.15, timing


@needs_gpu
def test_on_a_gpu_a_loop_of_large_matmuls_is_not_flagged():
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.matmul(a, a)
    torch.cuda.synchronize()
    clock = LoopClock(20)
    for _ in range(20):
        clock.start()
        torch.matmul(a, a)
        clock.stop()
    timing = clock.timing()
    assert timing.host_bound is False and timing.host_ms < timing.median_ms, timing
