"""course/tuning.py: swept launch settings are read from results files, only on the GPU that measured them."""
import json

import pytest

from course import tuning


def _machine(monkeypatch, gpu):
    monkeypatch.setattr(tuning.runtime, "on_gpu", lambda: gpu is not None)
    monkeypatch.setattr(tuning.runtime, "describe", lambda: {"gpu": gpu, "torch": "x", "triton": "y"})


def test_save_then_load_on_the_same_gpu(tmp_path, monkeypatch):
    _machine(monkeypatch, "NVIDIA H100 80GB HBM3")
    path = tuning.save(tmp_path, "demo", [{"key": [2, 1024], "config": {"num_warps": 4}, "measured": {"gbps": 2900}}],
                       "python -m demo --sweep")
    record = json.loads(path.read_text())
    assert path.name == "tuned_demo.json" and record["how"] == "python -m demo --sweep"
    assert record["machine"]["gpu"] == "NVIDIA H100 80GB HBM3" and record["date"] and not record["simulated"]
    assert tuning.load(tmp_path, "demo") == {(2, 1024): {"num_warps": 4}}


def test_another_gpu_simulation_or_no_file_get_nothing(tmp_path, monkeypatch):
    _machine(monkeypatch, "NVIDIA H100 80GB HBM3")
    tuning.save(tmp_path, "demo", [{"key": [1], "config": {"a": 1}}], "sweep")
    _machine(monkeypatch, "Tesla T4")
    assert tuning.load(tmp_path, "demo") == {}
    _machine(monkeypatch, None)  # the Triton interpreter: nothing to tune
    assert tuning.load(tmp_path, "demo") == {}
    assert tuning.load(tmp_path, "missing") == {}


def test_entries_need_a_key_and_a_config(tmp_path):
    with pytest.raises(ValueError, match="'key' and 'config'"):
        tuning.save(tmp_path, "demo", [{"config": {}}], "sweep")


def test_a_stub_reads_its_weeks_results(tmp_path):
    assert tuning.results_folder(str(tmp_path / "week9" / "exercises" / "lesson.py")) == tmp_path / "week9" / "results"
    assert tuning.results_folder(str(tmp_path / "week9" / "lesson.py")) == tmp_path / "week9" / "results"


def test_a_lesson_folders_module_reads_its_weeks_results(tmp_path):
    """week9/topic/lesson.py (a lesson in several modules) and its stub read week9/results, not topic/results."""
    for folder in ("week9", "week9/topic", "week9/exercises", "week9/exercises/topic"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    for module in ("week9/topic/lesson.py", "week9/exercises/topic/lesson.py", "week9/lesson.py"):
        assert tuning.results_folder(str(tmp_path / module)) == tmp_path / "week9" / "results", module


def test_tuned_table_reads_once_builds_configs_and_forgets_on_request(tmp_path, monkeypatch):
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Config:
        num_warps: int

    lesson = tmp_path / "week9" / "lesson.py"
    table = tuning.TunedTable(str(lesson), "demo", Config)
    assert table.path == tmp_path / "week9" / "results" / "tuned_demo.json"
    _machine(monkeypatch, "NVIDIA H100 80GB HBM3")
    assert table.configs() == {} and table.get([2, 1024]) is None  # not swept yet: the heuristic's turn
    path = table.save([{"key": [2, 1024], "config": {"num_warps": 4}}], "python -m demo --sweep")
    assert path == table.path
    assert table.get([2, 1024]) == Config(4) and table.get((2, 2048), "fallback") == "fallback"
    _machine(monkeypatch, "Tesla T4")
    assert table.get((2, 1024)) == Config(4)  # kept: the file is read once per process
    table.forget()
    assert table.configs() == {}  # read again, on a GPU it was not measured on
