"""The one rule for CUDA C files in a kernels/ folder, the week's or a lesson folder's
(week4_triton_dl/attention/kernels/attention_hopper_backward.cu): the .cu is a solution whose stub sits at
the same path under exercises/, loaded by the module beside kernels/ that names it, and graded by that
module's tests; a known-wrong .cu (tests/<week>/wrong/) runs through that module, headers included.

Fast and GPU-free: a toy course in a temporary folder; the fixture run is a pytest subprocess.
"""
from __future__ import annotations

import textwrap

import pytest

from classroom import lesson_files, must_fail

LOADER = '''"""Loads kernels/add.cu (and its header) from the kernels/ folder beside this module."""
from pathlib import Path

KERNELS = Path(__file__).resolve().parent / "kernels"
SOURCE = KERNELS / "add.cu"


def source():
    return SOURCE.read_text() + (KERNELS / "add.cuh").read_text()
'''


@pytest.fixture
def folder_course(tmp_path):
    """A course of one week with two kernels/ folders: the week's (week9_toy/loader.py loads kernels/add.cu,
    graded by tests/week9/test_loader.py) and a lesson folder's (week9_toy/fold/loader.py loads
    fold/kernels/add.cu and add.cuh, graded by tests/week9/test_fold_loader.py, which imports it directly)."""
    course = tmp_path
    week = course / "week9_toy"
    (week / "kernels").mkdir(parents=True)
    (week / "__init__.py").write_text('"""Week 9."""\n')
    (week / "loader.py").write_text('"""Loads kernels/add.cu."""\nSOURCE = "add.cu"\n')
    (week / "kernels" / "add.cu").write_text("__global__ void k(float* y) { y[0] = 1.0f; }\n")
    (course / "tests" / "week9").mkdir(parents=True)
    (course / "tests" / "week9" / "test_loader.py").write_text("")
    fold = week / "fold"
    (fold / "kernels").mkdir(parents=True)
    (fold / "__init__.py").write_text("")
    (fold / "loader.py").write_text(LOADER)
    (fold / "kernels" / "add.cu").write_text("__global__ void k(float* y) { y[0] = y[0] + 1.0f; }\n")
    (fold / "kernels" / "add.cuh").write_text("// HEADER\n")
    tests = course / "tests" / "week9"
    (tests / "test_fold_loader.py").write_text(textwrap.dedent("""
        from week9_toy.fold import loader

        def test_adds_one():
            assert "HEADER" in loader.source(), "the header beside the kernel is missing"
            assert "+ 1.0f" in loader.source(), "the kernel must add 1"
    """))
    (course / "tests" / "conftest.py").write_text(  # the options the fixture run passes (tests/conftest.py's)
        "def pytest_addoption(parser):\n    parser.addoption('--impl')\n    parser.addoption('--stage')\n")
    (tests / "wrong").mkdir()
    (tests / "wrong" / "fold_add.py").write_text(textwrap.dedent("""
        from classroom.must_fail import Wrong

        LESSON = "fold/kernels/add.cu"
        WRONG = [Wrong("adds_two", "2 for 1", old="+ 1.0f", new="+ 2.0f", expect="must add 1"),
                 Wrong("on_gpu_only", "a race", old="y[0] = ", new="y[1] = ", expect="x", gpu=True)]
    """))
    return course


def test_a_lesson_folders_kernels_are_solutions_loaded_and_tested_by_the_module_beside_them(folder_course):
    """One rule for every kernels/ folder, the week's or a lesson folder's: its .cu is a solution (stub at the
    same path under exercises/), loaded by the module beside kernels/ that names it, and tested by that
    module's tests (a lesson folder's module: tests/<week>/test_<folder>_<module>.py when no test loads it
    by runtime.lesson)."""
    week, tests = folder_course / "week9_toy", folder_course / "tests" / "week9"
    cu = week / "fold" / "kernels" / "add.cu"
    assert cu in lesson_files.solution_files(folder_course)
    assert week / "kernels" / "add.cu" in lesson_files.solution_files(folder_course)
    assert lesson_files.stub_path(cu) == week / "exercises" / "fold" / "kernels" / "add.cu"
    assert lesson_files.loader_of(cu) == week / "fold" / "loader.py"
    assert lesson_files.loader_of(week / "kernels" / "add.cu") == week / "loader.py"
    assert lesson_files.test_file(cu, folder_course) == tests / "test_fold_loader.py"
    assert lesson_files.test_file(week / "kernels" / "add.cu", folder_course) == tests / "test_loader.py"
    (week / "fold" / "other.py").write_text("")
    assert lesson_files.test_file(week / "fold" / "other.py", folder_course) is None  # no test names it


def test_a_wrong_cuda_file_of_a_lesson_folder_is_loaded_by_its_module_and_caught(folder_course):
    fixtures = {f.wrong.name: f for f in must_fail.load_fixtures(folder_course)}
    fixture = fixtures["adds_two"]
    assert fixture.module == "week9_toy.fold.loader"  # the module the tests import, loading the wrong .cu
    assert fixture.test == folder_course / "tests" / "week9" / "test_fold_loader.py"
    result = must_fail.run_fixture(fixture, folder_course, timeout=120)
    assert result["verdict"] == "caught", result["message"]  # the header came along: the first assert passed


def test_a_gpu_fixture_selected_on_a_cpu_machine_is_skipped_not_unknown(folder_course, capsys):
    assert must_fail.run_must_fail(folder_course, ["fold_add__on_gpu_only"], jobs=1, gpu=False) == 0
    assert "0 known-wrong solutions" in capsys.readouterr().out
    assert must_fail.run_must_fail(folder_course, ["no_such_fixture"], jobs=1, gpu=False) == 2
