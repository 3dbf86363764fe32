"""course.timings: a GPU run's timing log summed per week, each test counted once."""
from course import timings

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
