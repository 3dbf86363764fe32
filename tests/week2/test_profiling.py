"""week2_pytorch_optimizations.profiling: a profile, its table, its trace and the GPU gaps."""
import json

import pytest
import torch

from course import runtime

prof_mod = runtime.lesson("week2_pytorch_optimizations.profiling")
models = runtime.lesson("week2_pytorch_optimizations.models")


def test_profile_of_a_training_step(tmp_path):
    trace = tmp_path / "trace.json"
    r = prof_mod.profile_config("eager", cfg=models.GPT_TINY, batch=2, trace_path=trace, steps=2)
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "train_step[eager]" for e in events)
    names = " ".join(row["name"] for row in r["top"])
    assert r["top"] and all(row["self_us"] > 0 for row in r["top"])
    assert "aten::" in names or runtime.on_gpu()  # CPU ops on the CPU, kernels on a GPU
    assert "Self CPU" in r["table"]
    if runtime.on_gpu():
        assert 0 < r["gpu_busy_fraction"] <= 1
    else:
        assert r["gpu_busy_fraction"] is None


def test_busy_fraction_from_intervals(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "ts": 0, "dur": 10}, {"ph": "X", "cat": "kernel", "ts": 5, "dur": 10},
              {"ph": "X", "cat": "kernel", "ts": 30, "dur": 10}, {"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 99}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert prof_mod.gpu_busy_fraction(path) == pytest.approx(25 / 40)  # [0,15] + [30,40] over [0,40]


def test_bad_steps():
    with pytest.raises(ValueError, match="steps must be"):
        prof_mod.profile_steps(lambda: None, steps=0)


@pytest.mark.gpu(reason="kernel gaps exist only on a GPU timeline")
def test_cuda_graph_closes_the_gaps(tmp_path):
    sizes = {"cfg": models.GPT_TINY, "batch": 2}
    eager = prof_mod.profile_config("eager", trace_path=tmp_path / "e.json", **sizes)
    graph = prof_mod.profile_config("cudagraph", trace_path=tmp_path / "g.json", **sizes)
    print(eager["gpu_busy_fraction"], graph["gpu_busy_fraction"])
    assert graph["gpu_busy_fraction"] > eager["gpu_busy_fraction"]
