"""week2_pytorch_optimizations.profiling: a profile, its table, its trace and the GPU gaps."""
import json
import re

import pytest
import torch

from course import runtime

prof_mod = runtime.lesson("week2_pytorch_optimizations.profiling")
models = runtime.lesson("week2_pytorch_optimizations.models")
DEVICE = runtime.DEVICE


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


def _table_column(text: str, header: str) -> list[float]:
    """One time column of a `key_averages().table(...)`, in microseconds, in the table's row order."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if header in line and "Name" in line)
    columns = [c.strip() for c in re.split(r"\s{2,}", lines[head].strip())]
    index = columns.index(header)
    units = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
    values = []
    for line in lines[head + 2:]:  # past the header and its rule of dashes
        if set(line.strip()) <= {"-", " "}:
            break  # the closing rule: the totals follow
        cells = [c.strip() for c in re.split(r"\s{2,}", line.strip())]
        number, unit = re.fullmatch(r"([0-9.]+)([a-z]+)", cells[index]).groups()
        values.append(float(number) * units[unit])
    return values


def test_top_ops_and_table_rank_by_self_time():
    # The documented key: self time (the op's own, without its children), on the GPU the kernels'
    # (self CUDA time), on the CPU the ops'. The step nests ops (linear -> addmm, the step's own
    # record_function span around everything), so ranking by total time instead puts the span and
    # the wrappers first: another order.
    x = torch.randn(64, 256, device=DEVICE)
    w = torch.randn(256, 256, device=DEVICE)

    def step():
        h = torch.nn.functional.linear(x, w)
        return torch.relu(h).sum() + torch.tanh(h @ w).mean()

    prof = prof_mod.profile_steps(step, steps=2, warmup=1)
    key = "self_device_time_total" if runtime.on_gpu() else "self_cpu_time_total"
    everything = sorted((float(getattr(e, key)) for e in prof.key_averages() if getattr(e, key) > 0), reverse=True)
    top = prof_mod.top_ops(prof, n=5)
    assert [row["self_us"] for row in top] == everything[:5], top  # the 5 largest, largest first
    column = _table_column(prof_mod.table(prof, n=20), "Self CUDA" if runtime.on_gpu() else "Self CPU")
    assert len(column) >= 3, column
    # The printed values are rounded (monotonically): a table sorted by self time stays non-increasing.
    assert all(a >= b for a, b in zip(column, column[1:])), f"table rows not sorted by self time: {column}"
