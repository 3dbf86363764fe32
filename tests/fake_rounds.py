"""Fake timers for the benchmarks' CPU tests: their rounds need a GPU, what they make of the rounds does not.

`play(monkeypatch)` replaces course.bench.time_gpu with a script of Timings per variant (one per round, played
by the variant's label), so a test can play rounds the GPU paced (`gpu`), rounds the host paced with the CUDA
graph's replay time (`host`), and a host-paced round whose capture failed (`LOST`). `labelled` makes the
variants callables that say who they are. Used by week 1's GEMM benches' tests and week 4's attention benches'.
"""
import torch

from course import bench


def gpu(ms):
    """A round the GPU paced: the events' median is the kernel's time."""
    return bench.Timing(ms, ms, 100, [], host_ms=ms / 3, host_bound=False, drain_ms=40 * ms)


def host(ms, graphed_ms):
    """A round the host paced: the events measured the host (ms); the graph replay, the GPU."""
    return bench.Timing(ms, ms, 100, [], host_ms=ms * 1.1, host_bound=True, drain_ms=0.0, graphed_ms=graphed_ms)


# A round the host paced whose CUDA-graph capture failed: no GPU time is known for it.
LOST = bench.Timing(0.09, 0.09, 100, [], host_ms=0.1, host_bound=True, drain_ms=0.0,
                    graph_error="capture failed: RuntimeError: x")


def play(monkeypatch, input_sets=lambda make, size: [make(size)], require_graph=False):
    """(script, asked): the benches' time_gpu plays `script[label].pop(0)` and records each call's label, rep_ms
    and graph flag in `asked`; require_graph=True fails a call without graph=True at once. `input_sets` stands in
    for course.bench.input_sets (default: one set, made by the bench's own make_inputs)."""
    script, asked = {}, []

    def time_gpu(fn, sets, *, warmup_ms=25, rep_ms=200, graph=False):
        assert graph or not require_graph, "host-paced rounds need the graph replay"
        asked.append({"label": fn.label, "rep_ms": rep_ms, "graph": graph})
        return script[fn.label].pop(0)

    monkeypatch.setattr(bench, "time_gpu", time_gpu)
    monkeypatch.setattr(bench, "input_sets", input_sets)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    return script, asked


def labelled(variants):
    """The variants as callables that say who they are (the fake timer plays by label)."""
    out = {}
    for label in variants:
        def fn(*args):
            raise AssertionError("the fake timer never calls a variant")
        fn.label = label
        out[label] = fn
    return out
