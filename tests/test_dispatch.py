"""course/dispatch.py: an op's rung and tile come from its sweep's rows, only on the GPU that measured them."""
import json

import pytest

from course import dispatch


def _machine(monkeypatch, gpu):
    monkeypatch.setattr(dispatch.runtime, "on_gpu", lambda: gpu is not None)
    monkeypatch.setattr(dispatch.runtime, "describe", lambda: {"gpu": gpu, "torch": "x", "triton": "y"})


ROWS = [{"key": [128, False], "rung": "fast", "tile": {"BLOCK_M": 128}, "measured": {"ms": 1.0}},
        {"key": [64, False], "rung": "plain", "tile": None, "measured": {"ms": 2.0}}]


def test_rows_apply_on_the_gpu_that_measured_them_only(tmp_path, monkeypatch):
    table = dispatch.Table(str(tmp_path / "week9" / "lesson" / "dispatch.py"), "demo")
    assert table.path == tmp_path / "week9" / "lesson" / "results" / "dispatch_demo.json"
    _machine(monkeypatch, "NVIDIA H100 80GB HBM3")
    assert table.get((128, False)) is None  # before a sweep: no rows, the op's default rule
    path = table.save(ROWS, "python -m demo --sweep")
    record = json.loads(path.read_text())
    assert record["op"] == "demo" and record["machine"]["gpu"] == "NVIDIA H100 80GB HBM3" and not record["simulated"]
    assert table.get([128, False]) == dispatch.Row((128, False), "fast", {"BLOCK_M": 128}, {"ms": 1.0})
    assert table.get((64, False)).rung == "plain" and table.get((32, True)) is None  # no row: the rule
    _machine(monkeypatch, "Tesla T4")
    table.forget()
    assert table.rows() == {} and table.get((128, False)) is None  # another GPU's table
    _machine(monkeypatch, None)  # simulation
    table.forget()
    assert table.rows() == {}


def test_check_row_runs_once_per_row_when_the_file_is_read(tmp_path, monkeypatch):
    seen = []

    def check_row(row):
        seen.append(row.key)
        if row.tile is not None and "BLOCK_M" not in row.tile:
            raise ValueError(f"tile needs BLOCK_M, got {row.tile!r}")
        return row._replace(tile=None if row.tile is None else {"num_warps": 4, **row.tile})

    table = dispatch.Table(str(tmp_path / "week9" / "lesson.py"), "demo", check_row=check_row)
    _machine(monkeypatch, "NVIDIA H100 80GB HBM3")
    table.save(ROWS, "sweep")
    for _ in range(3):  # looked up three times, checked once
        assert table.get((128, False)).tile == {"num_warps": 4, "BLOCK_M": 128}
    assert sorted(seen) == [(64, False), (128, False)]
    table.save([{"key": [32, True], "rung": "fast", "tile": {"BLOCK_N": 64}}], "sweep")
    for _ in range(2):  # a bad row fails every lookup (no half-read table is kept), naming file and key
        with pytest.raises(ValueError, match=r"dispatch_demo.json: the row for \[32, True\]: tile needs BLOCK_M"):
            table.get((64, False))


def test_rows_need_a_key_a_rung_and_a_tile(tmp_path):
    table = dispatch.Table(str(tmp_path / "week9" / "lesson.py"), "demo")
    with pytest.raises(ValueError, match="'key', 'rung' and 'tile'"):
        table.save([{"key": [1], "rung": "fast"}], "sweep")


def test_check_rung_names_the_choices():
    assert dispatch.check_rung("op", "fast", ("plain", "fast")) == "fast"
    with pytest.raises(ValueError, match=r"op: rung must be one of 'plain', 'fast', got 'rung3'"):
        dispatch.check_rung("op", "rung3", ("plain", "fast"))
