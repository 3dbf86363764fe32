"""classroom.timings: a GPU run's timing log summed per week, each test counted once."""
from classroom import timings

LOG = """START 1.0 tests/week1/test_a.py::test_x
END 3.0 call passed 2.00 tests/week1/test_a.py::test_x
END 3.1 call passed 2.50 tests/week1/test_a.py::test_x
END 4.0 call passed 1.00 tests/week3/test_b.py::test_y[1]
END 5.0 call failed 0.50 tests/test_kit.py::test_z
not a log line
"""


def test_a_test_logged_twice_counts_once_at_its_longest():
    assert timings.parse(LOG) == {"tests/week1/test_a.py::test_x": 2.5, "tests/week3/test_b.py::test_y[1]": 1.0,
                                  "tests/test_kit.py::test_z": 0.5}


def test_weeks_and_the_kit_are_summed_apart():
    weeks = timings.per_week(timings.parse(LOG))
    assert {k: (v["seconds"], v["tests"]) for k, v in weeks.items()} == {
        "kit": (0.5, 1), "week1": (2.5, 1), "week3": (1.0, 1)}
    assert weeks["week1"]["slowest"] == [["tests/week1/test_a.py::test_x", 2.5]]


def test_serial_runs_give_each_week_its_own_wall_time(tmp_path):
    (tmp_path / "walls.txt").write_text("week1 rc=0 wall=179\nkit rc=0 wall=150\nweek3 rc=124 wall=300\n")
    (tmp_path / "serial_week1.txt").write_text("END 2.0 call passed 1.50 tests/week1/test_a.py::test_x\n")
    (tmp_path / "serial_kit.txt").write_text("END 2.0 call passed 0.25 tests/test_kit.py::test_z\n")
    weeks = timings.serial_weeks(tmp_path)
    assert weeks["week1"]["wall_s"] == 179 and weeks["week1"]["tests"] == 1 and weeks["week1"]["seconds"] == 1.5
    assert weeks["kit"]["tests"] == 1
    assert weeks["week3"] == {"wall_s": 300, "exit": 124, "seconds": 0.0, "tests": 0, "slowest": []}
    rec = timings.record("", gpu="H100", command="pytest -n 14 tests", wall_s=240.0, versions={"torch": "t",
                         "triton": "x"}, serial=weeks, serial_command="pytest tests/<week>")
    assert "| `tests/week3` | 5.0 min (exit 124) |" in timings._serial_section(rec)


def test_a_whole_suite_run_replaces_only_that_run_and_reads_pytest_counts():
    serial = {"week1": {"wall_s": 179, "exit": 0, "seconds": 1.5, "tests": 1, "slowest": []}}
    rec = timings.record("", gpu="H100", command="old", wall_s=1.0, versions={"torch": "t", "triton": "x"},
                         serial=serial, serial_command="pytest tests/<week>")
    output = "....\nFAILED tests/x.py::t - boom\n= 4255 passed, 1 failed, 18 skipped, 165 warnings in 257.80s (0:04:17) =\n"
    new = timings.with_suite(rec, LOG, command="pytest -n 14 tests", wall_s=265.0, pytest_output=output, cache="cold")
    assert new["weeks"] == serial and new["serial_command"] == "pytest tests/<week>"  # the serial runs kept
    assert new["wall_s"] == 265.0 and new["command"] == "pytest -n 14 tests"
    assert {k: new["suite"][k] for k in ("passed", "failed", "skipped", "tests_timed")} == {
        "passed": 4255, "failed": 1, "skipped": 18, "tests_timed": 3}
    assert "4.4 min of wall time, 4,255 passed, 1 failed, 18 skipped" in timings._serial_section(new)


def test_a_run_on_another_gpu_is_kept_beside_the_reference_record():
    rec = timings.record("", gpu="NVIDIA H100", command="c", wall_s=255.0, versions={"torch": "2.11", "triton": "3.6"},
                         serial={"week1": {"wall_s": 60.0, "exit": 0, "seconds": 50.0, "tests": 3, "slowest": []}},
                         serial_command="s")
    output = "==== 4,600 passed, 2 failed, 30 skipped in 270.00s ===="
    new = timings.with_other_gpu(rec, gpu="NVIDIA H200", versions={"torch": "2.11", "triton": "3.6"}, command="c",
                                 wall_s=270.0, pytest_output=output.replace(",", ""), cache="cold", date="2026-12-06")
    assert new["weeks"] == rec["weeks"] and new["gpu"] == "NVIDIA H100"  # the reference GPU's table stays
    assert new["other_gpus"]["NVIDIA H200"]["failed"] == 2
    text = timings._serial_section(new)
    assert "on an NVIDIA H200 on 2026-12-06" in text and "4.5 min of wall time, 4,600 passed, 2 failed, 30 skipped" in text
