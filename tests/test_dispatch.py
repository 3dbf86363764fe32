"""course/dispatch.py: an op's rung and tile come from its sweep's rows, only on the GPU that measured them."""
import json

import pytest

from course import dispatch


def _machine(monkeypatch, gpu):
    monkeypatch.setattr(dispatch.runtime, "on_gpu", lambda: gpu is not None)
    monkeypatch.setattr(dispatch.runtime, "describe", lambda: {"gpu": gpu, "torch": "x", "triton": "y"})


ROWS = [{"key": [128, False], "rung": "fast", "tile": {"BLOCK_M": 128}, "measured": {"ms": 1.0}},
        {"key": [64, False], "rung": "plain", "tile": None, "measured": {"ms": 2.0}}]


def default(key):
    return dispatch.Choice("plain")


def test_rows_apply_on_the_gpu_that_measured_them_only(tmp_path, monkeypatch):
    table = dispatch.Table(str(tmp_path / "week9" / "lesson" / "dispatch.py"), "demo")
    assert table.path == tmp_path / "week9" / "lesson" / "results" / "dispatch_demo.json"
    _machine(monkeypatch, "NVIDIA H100 80GB HBM3")
    assert table.get((128, False)) is None and dispatch.pick(table, (128, False), ("plain", "fast"), default) == ("plain", None)
    path = table.save(ROWS, "python -m demo --sweep")
    record = json.loads(path.read_text())
    assert record["op"] == "demo" and record["machine"]["gpu"] == "NVIDIA H100 80GB HBM3" and not record["simulated"]
    assert dispatch.pick(table, [128, False], ("plain", "fast"), default) == dispatch.Choice("fast", {"BLOCK_M": 128})
    assert dispatch.pick(table, (64, False), ("plain", "fast"), default) == ("plain", None)
    assert dispatch.pick(table, (32, True), ("plain", "fast"), default) == ("plain", None)  # no row: the rule
    assert dispatch.pick(table, (128, False), ("plain",), default) == ("plain", None)  # a rung the op lacks
    _machine(monkeypatch, "Tesla T4")
    table.forget()
    assert table.rows() == {} and dispatch.pick(table, (128, False), ("plain", "fast"), default) == ("plain", None)
    _machine(monkeypatch, None)  # simulation
    table.forget()
    assert table.rows() == {}


def test_rows_need_a_key_a_rung_and_a_tile(tmp_path):
    table = dispatch.Table(str(tmp_path / "week9" / "lesson.py"), "demo")
    with pytest.raises(ValueError, match="'key', 'rung' and 'tile'"):
        table.save([{"key": [1], "rung": "fast"}], "sweep")


def test_check_rung_names_the_choices():
    assert dispatch.check_rung("op", "fast", ("plain", "fast")) == "fast"
    with pytest.raises(ValueError, match=r"op: rung must be one of 'plain', 'fast', got 'rung3'"):
        dispatch.check_rung("op", "rung3", ("plain", "fast"))
