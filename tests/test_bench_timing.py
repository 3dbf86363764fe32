"""course.bench_timing: telling a GPU-paced timing loop from a host-paced one, on the CPU.

time_gpu itself needs CUDA, so its decision is a pure function of what the loop measured (the
host's time per call, the events' median, how long the synchronize after the loop waited), and the
loop is replayed here in a small model of a host and a GPU: the host records a start event, runs
its Python before the launch, launches, runs its Python after it, records the end event; the GPU
processes each item when it is queued and free; the host blocks when the launch queue is full. The
rule is checked against the loops it must tell apart, including the one a host-time ratio alone
misreads (a long loop of short calls that fills the queue), then rows and tables are checked to
carry the flag.
"""
import statistics

import pytest

from course import bench, bench_timing
from course.bench_timing import is_host_bound

SYNC_MS = 0.01  # synchronize's own wake-up, which the drain always includes


def loop(pre_ms, gpu_ms, *, post_ms=0.002, reps=1000, queue_calls=10_000, syncs=False):
    """(host ms per call, events' median ms, drain ms) of time_gpu's loop in the model above.

    `queue_calls`: calls the launch queue holds before the host blocks; `syncs`: the call waits for
    its kernel (an .item(), a copy to the host) before its Python after the launch."""
    host = gpu_free = 0.0
    done, samples = [], []
    for i in range(reps):
        if i >= queue_calls:  # queue full: the host waits for the call queue_calls back to finish
            host = max(host, done[i - queue_calls])
        start = max(host, gpu_free)  # the start event: processed as soon as it is queued and the GPU free
        host += pre_ms
        gpu_free = max(host, start) + gpu_ms  # the kernel: launched now, run when the GPU is free
        if syncs:
            host = max(host, gpu_free)
        host += post_ms
        end = max(host, gpu_free)  # the end event
        gpu_free = end
        done.append(end)
        samples.append(end - start)
        host += 0.001  # the loop's own Python
    return host / reps, statistics.median(samples), max(0.0, gpu_free - host) + SYNC_MS


def test_a_gpu_bound_loop_is_not_flagged():
    host, median, drain = loop(pre_ms=0.01, gpu_ms=0.1)
    assert median == pytest.approx(0.1, rel=1e-6)  # the events measured the kernel
    assert not is_host_bound(host, median, drain)


def test_a_host_bound_loop_is_flagged_and_its_events_measured_the_host():
    host, median, drain = loop(pre_ms=0.08, gpu_ms=0.02, post_ms=0.01)
    assert median == pytest.approx(0.091, rel=1e-6)  # the host's whole call, not the 0.02 kernel
    assert is_host_bound(host, median, drain)


def test_a_host_bound_loop_whose_python_all_precedes_the_launch_is_flagged():
    """The case span-against-sum misses: the idle time is inside each event pair, not between them."""
    host, median, drain = loop(pre_ms=0.05, gpu_ms=0.01, post_ms=0.0)
    assert median == pytest.approx(0.051, rel=1e-6)
    assert is_host_bound(host, median, drain)


def test_a_full_launch_queue_fools_the_ratio_but_not_the_drain():
    """A long loop of short calls fills the queue; then the host waits at each launch and its time
    per call nears the GPU's. The ratio alone would flag it; the backlog left at the end does not."""
    host, median, drain = loop(pre_ms=0.01, gpu_ms=0.1, queue_calls=100)
    assert median == pytest.approx(0.1, rel=1e-6)
    assert host >= bench_timing.HOST_RATIO * median  # the ratio sign, alone, says host-bound
    assert drain > 50 * median  # the GPU had a queue-full of calls left
    assert not is_host_bound(host, median, drain)


def test_a_call_that_synchronises_is_flagged():
    """The GPU idles while the host finishes each call and starts the next: the events hold host time."""
    host, median, drain = loop(pre_ms=0.03, gpu_ms=0.02, post_ms=0.02, syncs=True)
    assert median > 0.02 * 1.5
    assert is_host_bound(host, median, drain)


def test_tiny_host_bound_calls_are_not_taken_for_backlog_by_synchronizes_own_latency():
    host, median, drain = loop(pre_ms=0.005, gpu_ms=0.002, post_ms=0.002)
    assert drain > 1.0 * median  # synchronize alone waits longer than a call
    assert is_host_bound(host, median, drain)


def test_a_host_nearly_as_slow_as_the_gpu_with_few_reps_is_gpu_bound():
    host, median, drain = loop(pre_ms=0.085, gpu_ms=0.1, post_ms=0.0, reps=100)
    assert host >= bench_timing.HOST_RATIO * median
    assert not is_host_bound(host, median, drain)


@pytest.mark.parametrize("pre_ms", [0.090, 0.095, 0.099, 0.101, 0.105, 0.110])
def test_balanced_loops_read_near_the_gpu_whichever_way_they_are_called(pre_ms):
    """Host and GPU within ~10% of each other: the verdict may go either way, and either is honest:
    a GPU-bound verdict is only ever given where the events' median is the kernel's time to ~10%."""
    host, median, drain = loop(pre_ms=pre_ms, gpu_ms=0.1, post_ms=0.0)
    if not is_host_bound(host, median, drain):
        assert median == pytest.approx(0.1, rel=0.1)


@pytest.mark.parametrize("reps", [10, 100, 1000])
@pytest.mark.parametrize("pre_ms,gpu_ms,expected", [(0.01, 0.1, False), (0.2, 0.01, True), (0.02, 1.0, False),
                                                    (0.03, 0.005, True)])
def test_the_verdict_does_not_depend_on_the_loops_length(reps, pre_ms, gpu_ms, expected):
    assert is_host_bound(*loop(pre_ms, gpu_ms, reps=reps, queue_calls=300)) is expected


def test_the_thresholds_at_their_edges():
    median = 0.1
    caught_up = bench_timing.BACKLOG_CALLS * median + bench_timing.DRAIN_FLOOR_MS
    assert is_host_bound(bench_timing.HOST_RATIO * median, median, 0.0)  # at the ratio: kept pace
    assert not is_host_bound(bench_timing.HOST_RATIO * median * 0.999, median, 0.0)
    assert is_host_bound(median, median, caught_up * 0.999)
    assert not is_host_bound(median, median, caught_up)  # at the drain bound: work was queued
    assert is_host_bound(0.01, 0.0, 0.0) and not is_host_bound(0.0, 0.0, 0.0)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), None, "0.1"])
def test_times_that_are_not_times_are_refused(bad):
    with pytest.raises(ValueError, match="median_ms"):
        is_host_bound(0.1, bad, 0.0)


# ---------------------------------------------------------------- rows and tables carry the flag
HOST_BOUND = bench.Timing(0.094, 0.09, 100, [], host_ms=0.1, host_bound=True, drain_ms=0.02, graphed_ms=0.031)
GPU_BOUND = bench.Timing(0.5, 0.49, 100, [], host_ms=0.05, host_bound=False, drain_ms=40.0)
UNKNOWN = bench.Timing(0.5, 0.49, 100, [])  # time_host, time_wall, simulation


def test_timing_keeps_its_positional_fields_and_the_flag_defaults_to_unknown():
    t = bench.Timing(1.0, 0.5, 3, [1.0])
    assert (t.median_ms, t.min_ms, t.reps, t.samples) == (1.0, 0.5, 3, [1.0])
    assert t.host_bound is None and t.graphed_ms is None


def test_row_fields_record_only_what_was_measured():
    assert bench_timing.row_fields(HOST_BOUND) == {"host_bound": True, "host_ms": 0.1, "graphed_ms": 0.031}
    assert bench_timing.row_fields(GPU_BOUND) == {"host_bound": False, "host_ms": 0.05}
    assert bench_timing.row_fields(UNKNOWN) == {}  # absent: not known, not False
    failed = bench.Timing(0.1, 0.1, 10, [], host_ms=0.2, host_bound=True, drain_ms=0.0, graph_error="capture failed: x")
    assert bench_timing.row_fields(failed)["graph_error"] == "capture failed: x"


def tiny_benchmark():
    import torch
    return bench.Benchmark(name="fake_host_bound", title="Fake", sizes=[4], sim_sizes=[4],
                           make_inputs=lambda n: (torch.zeros(n),), variants={"torch": lambda x: x, "triton": lambda x: x},
                           bytes=lambda n: 4 * n)


def test_a_row_built_from_a_host_bound_timing_carries_the_flag_and_the_table_its_footnote(monkeypatch):
    timings = {"torch": GPU_BOUND, "triton": HOST_BOUND}
    order = iter(["torch", "triton"])
    monkeypatch.setattr(bench, "copy_bandwidth_gbps", lambda: 3000.0)
    monkeypatch.setattr(bench, "time_with_memory", lambda fn, sets, clock: (timings[next(order)], None))
    record = bench.run(tiny_benchmark())
    rows = {r["variant"]: r for r in record["rows"]}
    assert rows["triton"]["host_bound"] is True and rows["triton"]["graphed_ms"] == 0.031
    assert rows["torch"]["host_bound"] is False and "graphed_ms" not in rows["torch"]
    table = bench.markdown_table(record)
    lines = table.splitlines()
    assert lines[2].startswith("| size | variant | ms | GPU ms (graph) |")
    assert "| triton | 0.0940* | 0.0310 |" in table and "| torch | 0.5000 | - |" in table
    assert table.rstrip().endswith(bench_timing.FOOTNOTE)
    assert "the GPU waited for Python between calls; the time is the host's" in table


def test_a_record_without_the_flag_renders_as_before(monkeypatch):
    order = iter([UNKNOWN, UNKNOWN])
    monkeypatch.setattr(bench, "copy_bandwidth_gbps", lambda: 3000.0)
    monkeypatch.setattr(bench, "time_with_memory", lambda fn, sets, clock: (next(order), None))
    record = bench.run(tiny_benchmark())
    assert all("host_bound" not in r for r in record["rows"])
    table = bench.markdown_table(record)
    assert "*" not in table.replace("**Fake**", "") and "GPU ms (graph)" not in table
    assert "host-bound" not in table


def test_rounds_flag_a_variant_if_any_round_was_host_bound():
    script = {"torch": [GPU_BOUND, GPU_BOUND], "triton": [GPU_BOUND, HOST_BOUND], "plain": [1.0, 2.0]}
    fns = {label: (lambda label=label: label) for label in script}
    timed = bench.interleaved_rounds(fns, 2, lambda fn: script[fn()].pop(0))
    assert timed.ms["triton"] == [0.5, 0.094] and timed.ms["plain"] == [1.0, 2.0]
    assert timed.row_fields("triton") == {"host_bound": True, "host_ms": pytest.approx(0.075), "graphed_ms": 0.031}
    assert timed.row_fields("torch")["host_bound"] is False
    assert timed.row_fields("plain") == {}  # a timer that returned bare ms: unknown


def test_gpu_ms_is_the_graph_replay_where_the_host_paced_the_loop_and_the_events_where_the_gpu_did():
    assert bench_timing.gpu_ms(HOST_BOUND) == 0.031  # not the events' 0.094: that was the host
    assert bench_timing.gpu_ms(GPU_BOUND) == 0.5
    assert bench_timing.gpu_ms(UNKNOWN) == 0.5  # not asked (older timers): the events, as before
    failed = bench.Timing(0.1, 0.1, 10, [], host_ms=0.2, host_bound=True, drain_ms=0.0, graph_error="capture failed: x")
    assert bench_timing.gpu_ms(failed) is None  # host-bound and not replayed: the GPU's time is not known
    timed = bench.Rounds({"k": [0.094, 0.5, 0.1], "lost": [0.1]}, {"k": [HOST_BOUND, GPU_BOUND, failed], "lost": [failed]})
    assert timed.median("k", gpu=True) == pytest.approx((0.031 + 0.5) / 2)  # the rounds whose GPU time is known
    assert timed.median("k") == 0.1  # the events' median: the host's, in the host-bound rounds
    assert timed.median("lost", gpu=True) is None


def test_round_ratios_compare_the_gpus_times_not_two_hosts():
    """A variant host-paced in a round is compared by its graph replay; a round where either side's GPU
    time is unknown gives no ratio, and a label with none gives None (the table's "-")."""
    slow_host = bench.Timing(0.2, 0.2, 10, [], host_ms=0.25, host_bound=True, drain_ms=0.0, graphed_ms=0.05)
    failed = bench.Timing(0.1, 0.1, 10, [], host_ms=0.2, host_bound=True, drain_ms=0.0, graph_error="capture failed: x")
    kernel = [bench.Timing(ms, ms, 10, [], host_ms=ms / 4, host_bound=False, drain_ms=5.0) for ms in (0.04, 0.05, 0.05)]
    timings = {"torch": [slow_host, slow_host, failed], "kernel": kernel, "lost": [failed] * 3}
    timed = bench.Rounds({label: [t.median_ms for t in ts] for label, ts in timings.items()}, timings)
    assert timed.ratio_range("kernel", "torch", gpu=True) == pytest.approx((1.125, 1.0, 1.25))
    assert timed.ratio_range("kernel", "torch") == pytest.approx((4.0, 2.0, 5.0))  # the events': host against GPU
    assert timed.ratio_range("torch", "torch", gpu=True) == pytest.approx((1.0, 1.0, 1.0))
    assert timed.ratio_range("lost", "torch", gpu=True) is None
    assert timed.ratio_range("kernel", "absent", gpu=True) is None


def test_the_fused_linear_rounds_table_marks_host_bound_rows():
    from week4_triton_dl.fused_linear import bench as fl_bench

    row = {"size": "residual 8192x768x768", "variant": "triton", "ms": 0.094, "ms_min": 0.09, "ms_max": 0.1,
           "tflops": 100.0, "speedup_vs_torch": 1.0, "speedup_min": 1.0, "speedup_max": 1.0}
    record = {"title": "Fake", "date": "2026-12-07 00:00 UTC", "machine": {"gpu": "NVIDIA H100"},
              "rows": [dict(row), dict(row, variant="gemm_only", ms=0.026, host_bound=False)]}
    old = fl_bench.rounds_table(record)
    assert "0.0940 |" in old and "host-bound" not in old  # the committed records: no flag, no mark
    record["rows"][0]["host_bound"] = True
    table = fl_bench.rounds_table(record)
    assert "| triton | 0.0940* |" in table and "| gemm_only | 0.0260 |" in table
    assert bench_timing.FOOTNOTE in table


def test_the_readme_headline_rows_mark_host_bound_rows():
    from classroom import report

    record = {"benchmark": "fake", "headline": ["triton"], "date": "2026-12-07 00:00 UTC",
              "machine": {"gpu": "NVIDIA H100"},
              "rows": [{"size": "2^20", "variant": "torch", "ms": 0.5},
                       {"size": "2^20", "variant": "triton", "ms": 0.094, "host_bound": True}]}
    torch_row, triton_row = report.headline_rows(record)
    assert "| 0.5000 |" in torch_row and "| 0.0940* |" in triton_row


# ------------------------------------------- a bench that kept only the ms still says it on record
def test_write_record_says_so_when_rows_dropped_the_flag(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(bench_timing, "HOST_BOUND_SEEN", [])
    bench_timing.HOST_BOUND_SEEN.append(bench_timing.seen_entry(test_the_thresholds_at_their_edges, HOST_BOUND))
    record = {"benchmark": "own_rows", "rows": [{"size": 1, "variant": "triton", "ms": 0.094}]}
    json_path, md_path = bench.write_record(record, tmp_path, "| table |\n")
    written = json.loads(json_path.read_text())
    assert written["host_bound_timings"] == [{"fn": "tests.test_bench_timing.test_the_thresholds_at_their_edges",
                                              "ms": 0.094, "host_ms": 0.1}]
    assert "Host-bound timings in this run** (1)" in md_path.read_text()
    assert "host_bound_timings" not in record  # the caller's dict is left as it was
    assert bench_timing.HOST_BOUND_SEEN == []  # the next record starts afresh
    json_path, md_path = bench.write_record(record, tmp_path, "| table |\n")
    assert "host_bound_timings" not in json.loads(json_path.read_text()) and md_path.read_text() == "| table |\n"


def test_write_record_leaves_rows_that_carry_the_flag_to_speak_for_themselves(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(bench_timing, "HOST_BOUND_SEEN", [{"fn": "f", "ms": 0.094, "host_ms": 0.1}])
    record = {"benchmark": "flagged", "rows": [{"size": 1, "variant": "triton", "ms": 0.094, "host_bound": True}]}
    json_path, md_path = bench.write_record(record, tmp_path, "| table |\n")
    assert "host_bound_timings" not in json.loads(json_path.read_text())
    assert md_path.read_text() == "| table |\n" and bench_timing.HOST_BOUND_SEEN == []


def test_the_note_lists_a_dozen_loops_and_counts_the_rest(monkeypatch):
    seen = [{"fn": f"f{i}", "ms": 0.01, "host_ms": 0.02} for i in range(15)]
    monkeypatch.setattr(bench_timing, "HOST_BOUND_SEEN", list(seen))
    record, table = bench_timing.unflagged_note({"benchmark": "b", "rows": []}, "t\n")
    assert len(record["host_bound_timings"]) == 15
    assert "`f11`" in table and "`f12`" not in table and "and 3 more." in table


def test_the_sweeps_tables_keep_the_host_bound_loops_they_chose_among(tmp_path, monkeypatch):
    import json

    from course import dispatch, tuning

    monkeypatch.setattr(bench_timing, "HOST_BOUND_SEEN", [{"fn": "tile_a", "ms": 0.09, "host_ms": 0.1}])
    path = dispatch.save(tmp_path, "fake", [{"key": [1], "rung": "tiled", "tile": {}}], "test")
    assert json.loads(path.read_text())["host_bound_timings"] == [{"fn": "tile_a", "ms": 0.09, "host_ms": 0.1}]
    path = tuning.save(tmp_path, "fake", [{"key": [1], "config": {}}], "test")
    assert "host_bound_timings" not in json.loads(path.read_text())  # emptied by the first: not counted twice


# --------------------------------------------------------------- on a GPU: the real loop, the real rule
from course import runtime  # noqa: E402

needs_gpu = pytest.mark.skipif(not runtime.on_gpu(), reason="needs a real NVIDIA GPU (CUDA events, graph capture)")


def _spin(seconds):
    """Python that holds the host, as argument checks and a custom op's dispatch do."""
    import time
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@needs_gpu
def test_on_a_gpu_a_tiny_kernel_behind_slow_python_is_flagged_and_its_graph_time_is_the_kernels():
    import torch
    x = torch.randn(1024, device="cuda")

    def call(x):
        _spin(200e-6)  # 0.2 ms of Python before a kernel of a few microseconds
        return x * 2

    timing = bench.time_gpu(call, [(x,)], warmup_ms=5, rep_ms=50, graph=True)
    assert timing.host_bound is True, timing
    assert timing.median_ms > 0.15 and timing.host_ms > 0.15  # the events measured the host
    assert timing.graph_error is None and timing.graphed_ms < 0.05, timing  # the replay: the kernel alone


@needs_gpu
def test_on_a_gpu_a_large_matmul_is_gpu_bound():
    import torch
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    timing = bench.time_gpu(torch.matmul, [(a, a)], warmup_ms=5, rep_ms=50, graph=True)
    assert timing.host_bound is False and timing.graphed_ms is None, timing


@needs_gpu
def test_on_a_gpu_a_call_that_cannot_be_captured_falls_back_and_says_why():
    import torch
    x = torch.randn(1024, device="cuda")

    def call(x):
        return (x * 2).sum().item()  # a copy to the host: synchronises, and capture forbids it

    timing = bench.time_gpu(call, [(x,)], warmup_ms=5, rep_ms=20, graph=True)
    assert timing.host_bound is True and timing.graphed_ms is None, timing
    assert timing.graph_error.startswith("capture failed"), timing
    assert float((x * 0 + 1).sum()) == 1024.0  # the failed capture left the device usable
    assert bench.time_gpu(lambda x: x * 2, [(x,)], warmup_ms=1, rep_ms=5).median_ms > 0


def test_the_readme_results_section_ends_a_week_with_the_footnote_only_when_a_row_is_marked(tmp_path):
    import json

    from classroom import report

    folder = tmp_path / "week3_triton_kernels" / "results"
    folder.mkdir(parents=True)
    record = {"benchmark": "fake", "headline": ["triton"], "date": "2026-12-07 00:00 UTC", "simulated": False,
              "machine": {"gpu": "NVIDIA H100"}, "ceilings": {},
              "rows": [{"size": "2^20", "variant": "torch", "ms": 0.5},
                       {"size": "2^20", "variant": "triton", "ms": 0.094}]}
    (folder / "fake.json").write_text(json.dumps(record))
    assert "host-bound" not in report.results_section(tmp_path)  # an old record: unknown, unmarked
    record["rows"][1]["host_bound"] = True
    (folder / "fake.json").write_text(json.dumps(record))
    section = report.results_section(tmp_path)
    assert "| 0.0940* |" in section and bench_timing.FOOTNOTE in section
    assert f"|\n\n{bench_timing.FOOTNOTE}" in section  # a blank line: the footnote is not a table row
