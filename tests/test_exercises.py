"""The exercise kit: stubs generated from marked solutions, must-fail fixtures, the progress view.

Fast and GPU-free: a toy lesson in a temporary folder for the generator's rules, then the
course's own files (every committed stub is what its solution generates; every known-wrong
fixture still applies inside an exercise region), and the pytest plugin in a subprocess.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from classroom import lesson_files, must_fail, progress, pytest_lesson, regions, stubs

ROOT = Path(__file__).resolve().parent.parent

LESSON = '''\
"""Toy lesson: scale a list, the slow way and the fast way.

The second paragraph is the theory; the stub keeps only the first.
"""
import math

# EXERCISE NOTE: Rules of the house: keep the input list unchanged;
#   return new lists.

FACTOR = 2


def scale(xs, factor=FACTOR):
    """Every element times factor."""
    if not isinstance(xs, list):
        raise TypeError("xs must be a list")
    # BEGIN EXERCISE: multiply each element by factor; keep the order
    #   (a list comprehension is enough)
    out = [x * factor for x in xs]
    return out
    # END EXERCISE


def norm(xs):
    """Euclidean norm, through the helper below."""
    return math.sqrt(_sum_of_squares(xs))


# BEGIN EXERCISE: the helper norm() calls: _sum_of_squares(xs), the sum of x * x
# STUB: def _sum_of_squares(xs):
# STUB:     raise NotImplementedError("not implemented yet: _sum_of_squares")
def _sum_of_squares(xs):
    return sum(x * x for x in xs)
# END EXERCISE


class Scaler:
    """A callable scale()."""

    def __call__(self, xs):
        # BEGIN EXERCISE: call scale() with this object's factor
        return scale(xs, self.factor)
        # END EXERCISE

    factor = 3


# BEGIN SOLUTION ONLY: a command line the stub does not need
def main():
    print(scale([1, 2, 3]))
# END SOLUTION ONLY
'''

TRITON_LESSON = '''\
"""Toy Triton lesson."""
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # BEGIN EXERCISE: y = x + 1, masked to n
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
    # END EXERCISE
'''

CUDA_SOURCE = '''\
// Toy CUDA C: add one.
//
// The theory paragraph.

__device__ float twice(float v) {
    // BEGIN EXERCISE: return 2 v
    v = 2.0f * v;
    // END EXERCISE
    return v;
}

__global__ void add_one(const float* x, float* y, long long n) {
    // BEGIN EXERCISE: one thread per element, guarded by i < n
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
    // END EXERCISE
}
'''


@pytest.fixture
def course(tmp_path):
    """A course of one week: a marked lesson, a Triton one, a CUDA C file, an unmarked lesson."""
    week = tmp_path / "week9_toy"
    (week / "exercises").mkdir(parents=True)
    (week / "kernels").mkdir()
    (week / "__init__.py").write_text('"""Week 9."""\n')
    (week / "exercises" / "__init__.py").write_text("")
    (week / "lesson.py").write_text(LESSON)
    (week / "tri.py").write_text(TRITON_LESSON)
    (week / "loader.py").write_text('"""Loads kernels/add.cu."""\nSOURCE = "add.cu"\n')
    (week / "kernels" / "add.cu").write_text(CUDA_SOURCE)
    (week / "plain.py").write_text('"""No markers."""\n')
    (week / "exercises" / "plain.py").write_text('"""Hand-written stub."""\n')
    tests = tmp_path / "tests" / "week9"
    tests.mkdir(parents=True)
    for name in ("lesson", "tri", "loader"):
        (tests / f"test_{name}.py").write_text("")
    return tmp_path


def _load(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_python_hole_raises_not_implemented_with_its_hint_and_size(course, monkeypatch):
    monkeypatch.syspath_prepend(str(course))  # the stub imports what SOLUTION ONLY kept out from the solution
    stub = stubs.generate(course / "week9_toy" / "lesson.py", course)
    assert "out = [x * factor" not in stub and "sum(x * x" not in stub
    assert "# TODO (about 2 lines): multiply each element by factor; keep the order (a list comprehension" in stub
    assert "raise NotImplementedError('not implemented yet: scale: multiply each element by factor')" in stub
    assert "not implemented yet: Scaler.__call__" in stub
    assert "def main" not in stub and "SOLUTION ONLY" not in stub and "BEGIN" not in stub
    assert "from week9_toy.lesson import main  # noqa: E402, F401  (given: a command line the stub" in stub
    path = course / "stub.py"
    path.write_text(stub)
    module = _load(path, "toy_stub")
    with pytest.raises(TypeError, match="xs must be a list"):  # the given plumbing still runs
        module.scale("no list")
    with pytest.raises(NotImplementedError, match="not implemented yet: scale"):
        module.scale([1.0])
    with pytest.raises(NotImplementedError, match="not implemented yet: _sum_of_squares"):  # the STUB lines
        module.norm([3.0, 4.0])
    assert module.main.__module__ == "week9_toy.lesson"  # imported, not copied


def test_the_stub_docstring_names_the_holes_the_test_command_and_the_source(course):
    stub = stubs.generate(course / "week9_toy" / "lesson.py", course)
    doc = " ".join(ast.get_docstring(ast.parse(stub)).split())  # the text, whatever its wrapping
    assert doc.startswith("Exercise: toy lesson: scale a list, the slow way and the fast way.")
    assert "second paragraph" not in doc and "Toy lesson" not in doc
    assert "`pytest tests/week9/test_lesson.py --impl=exercises`" in doc
    assert "python -m course progress" in doc
    assert "You write (about 5 lines in 3 holes" in doc
    assert "Imported from week9_toy/lesson.py, not repeated here: `main`." in doc
    assert "* `scale`: multiply each element by factor" in doc and "* at module level: the helper" in doc
    assert "week9_toy/lesson.py" in doc and stubs.GENERATED_MARK in doc
    assert "Rules of the house: keep the input list unchanged; return new lists." in doc  # the note
    assert "EXERCISE NOTE" not in stub and "EXERCISE NOTE" in LESSON


def test_a_triton_hole_keeps_the_kernel_importable_and_stops_at_compile_or_interpretation(course):
    stub = stubs.generate(course / "week9_toy" / "tri.py", course)
    assert "tl.static_assert(False, 'not implemented yet: add_kernel: y = x + 1, masked to n')" in stub
    tree = ast.parse(stub)
    kernel = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    assert [ast.unparse(d) for d in kernel.decorator_list] == ["triton.jit"]


def test_cuda_holes_are_comments_and_the_header_is_regenerated(course):
    stub = stubs.generate(course / "week9_toy" / "kernels" / "add.cu", course)
    assert stub.startswith("// Exercise: toy CUDA C: add one.")
    assert "`pytest tests/week9/test_loader.py --impl=exercises`" in stub  # the module that loads it
    assert "* `twice`: return 2 v (about 1 line)" in stub and "* `add_one`: one thread per element" in stub
    assert "    // TODO (about 1 line): return 2 v\n    return v;" in stub
    assert "blockIdx" not in stub and "The theory paragraph" not in stub


def test_filling_the_holes_gives_back_the_solution(course):
    solution = course / "week9_toy" / "lesson.py"
    filled = stubs.filled(solution)
    assert "BEGIN" not in filled and "END EXERCISE" not in filled and "def main" not in filled
    kept = [line for line in LESSON.splitlines() if "EXERCISE" not in line and "(a list comprehension" not in line]
    assert filled.splitlines() == [line for line in kept if line in filled.splitlines()]
    assert "out = [x * factor for x in xs]" in filled


def test_write_then_check_and_an_edited_stub_is_reported(course):
    changed = stubs.write(course)
    written = {p.relative_to(course).as_posix() for p in changed}
    assert written == {"week9_toy/exercises/lesson.py", "week9_toy/exercises/tri.py",
                     "week9_toy/exercises/kernels/add.cu", ".gitattributes"}
    assert (course / "week9_toy" / "exercises" / "plain.py").read_text() == '"""Hand-written stub."""\n'
    assert "week9_toy/exercises/lesson.py linguist-generated=true" in (course / ".gitattributes").read_text()
    assert stubs.check(course) == []
    assert stubs.write(course) == []  # regenerating changes nothing
    stub = course / "week9_toy" / "exercises" / "lesson.py"
    stub.write_text(stub.read_text().replace("FACTOR = 2", "FACTOR = 3"))
    assert stubs.check(course) == ["week9_toy/exercises/lesson.py: differs from its solution's markers from line 24"]


@pytest.mark.parametrize("text, message", [
    ('"""D."""\ndef f():\n    # BEGIN EXERCISE: x\n    return 1\n', "never closed"),
    ('"""D."""\ndef f():\n    # BEGIN EXERCISE: x\n    # BEGIN EXERCISE: y\n    return 1\n'
     '    # END EXERCISE\n    # END EXERCISE\n', "do not nest"),
    ('"""D."""\ndef f():\n    # BEGIN EXERCISE\n    return 1\n    # END EXERCISE\n', "needs a hint"),
    ('"""D."""\n# BEGIN EXERCISE: all of it\ndef f():\n    return 1\n# END EXERCISE\nf()\n', "still uses f"),
    ('"""D."""\nclass A:\n    # BEGIN EXERCISE: the body\n    x = 1\n    # END EXERCISE\n', "does not parse"),
])
def test_malformed_markers_are_refused_with_the_line(tmp_path, text, message):
    (tmp_path / "week9_toy").mkdir()
    path = tmp_path / "week9_toy" / "bad.py"
    path.write_text(text)
    with pytest.raises(regions.MarkerError, match=message):
        stubs.generate(path, tmp_path)


def test_the_committed_stubs_are_what_their_solutions_generate():
    """`python -m course exercises --check` on this checkout (CI runs it too)."""
    assert stubs.check(ROOT) == []


def test_every_generated_stub_names_its_test_file_and_has_holes():
    for solution in lesson_files.marked_solutions(ROOT):
        assert lesson_files.test_file(solution, ROOT) is not None, solution
        marked = regions.parse_regions(solution.read_text().splitlines(), regions.comment_of(solution))
        assert any(r.kind == "EXERCISE" for r in marked), solution


def test_every_must_fail_fixture_applies_inside_an_exercise_region():
    fixtures = must_fail.load_fixtures(ROOT)
    assert fixtures, "tests/<week>/wrong/ holds the known-wrong solutions"
    for fixture in fixtures:
        source = must_fail.wrong_source(fixture)  # raises when stale or outside a hole
        assert source != fixture.solution.read_text()
        assert fixture.test is not None and fixture.test.exists(), fixture.label
    per_lesson = {}
    for fixture in fixtures:
        per_lesson.setdefault(fixture.solution, []).append(fixture)
    marked = set(lesson_files.marked_solutions(ROOT))
    for solution in marked:
        if solution.suffix == ".py":
            lesson = [f for s, fs in per_lesson.items() for f in fs if f.module.endswith("." + solution.stem)]
            assert len(lesson) >= 2, f"{solution.name}: at least two known-wrong solutions per converted lesson"


def test_a_stale_fixture_is_reported_not_run(tmp_path):
    week = tmp_path / "week9_toy"
    week.mkdir()
    (week / "lesson.py").write_text(LESSON)
    wrong = must_fail.Wrong("gone", "text that is not there", old="no such line\n", new="")
    fixture = must_fail.Fixture(wrong, week / "lesson.py", "week9_toy.lesson", tmp_path / "t.py", tmp_path / "w.py")
    with pytest.raises(ValueError, match="occurs 0 times"):
        must_fail.wrong_source(fixture)
    outside = must_fail.Wrong("outside", "a line the learner never writes", old="FACTOR = 2\n", new="FACTOR = 5\n")
    with pytest.raises(ValueError, match="not inside an EXERCISE region"):
        must_fail.wrong_source(must_fail.Fixture(outside, week / "lesson.py", "week9_toy.lesson",
                                                 tmp_path / "t.py", tmp_path / "w.py"))


def test_the_plugin_overrides_a_module_selects_one_case_per_test_and_records_reasons(tmp_path):
    (tmp_path / "toy_pkg").mkdir()
    (tmp_path / "toy_pkg" / "__init__.py").write_text("")
    (tmp_path / "toy_pkg" / "mod.py").write_text("VALUE = 1\n")
    (tmp_path / "wrong_mod.py").write_text("VALUE = 2\n")
    (tmp_path / "test_toy.py").write_text(textwrap.dedent("""
        import pytest
        from toy_pkg import mod

        @pytest.mark.parametrize("n", [1, 2, 3])
        def test_value(n):
            assert mod.VALUE == 1

        def test_later():
            raise NotImplementedError("not implemented yet: later")

        def test_unrelated():
            pass
    """))
    results = tmp_path / "results.jsonl"
    env = {**os.environ, pytest_lesson.RESULTS_ENV: str(results), pytest_lesson.SMOKE_ENV: "1",
           pytest_lesson.OVERRIDE_ENV: f"toy_pkg.mod={tmp_path / 'wrong_mod.py'}",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "classroom.pytest_lesson",
                    "test_toy.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    records = pytest_lesson.read_results(results)
    assert [r["nodeid"] for r in records] == ["test_toy.py::test_value[1]"]  # then the file stops
    assert records[0]["outcome"] == "failed"
    assert records[0]["message"].startswith("assert 2 == 1")  # the override was imported
    assert "in `assert mod.VALUE == 1`" in records[0]["message"]


def test_progress_states():
    nie = {"outcome": "failed", "nodeid": "t.py::a", "message": "NotImplementedError: not implemented yet: f: x"}
    wrong = {"outcome": "failed", "nodeid": "t.py::b[1]", "message": "AssertionError: out: 3 of 9 elements differ"}
    ok = {"outcome": "passed", "nodeid": "t.py::c", "message": ""}
    assert progress.status([ok], True) == ("done", "")
    assert progress.status([ok, nie], True)[0] == "not started"
    assert progress.status([ok, nie], False)[0] == "in progress"
    assert progress.status([nie, wrong], False) == ("failing", "b[1]: AssertionError: out: 3 of 9 elements differ")
    assert progress.status([], None)[0] == "no result"


def test_progress_lists_a_weeks_lessons_in_the_order_of_its_readme(tmp_path):
    week = tmp_path / "week9_toy"
    (week / "exercises").mkdir(parents=True)
    for name in ("alpha", "beta", "gamma"):
        (week / "exercises" / f"{name}.py").write_text("")
        (tmp_path / "tests" / "week9").mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / "week9" / f"test_{name}.py").write_text("")
    (week / "README.md").write_text("## 1 `gamma.py`\n## 2 `alpha.py`\n")
    assert [name for name, _, _ in progress.lessons(week, tmp_path)] == ["gamma", "alpha", "beta"]


def test_a_module_a_lesson_is_split_into_is_graded_by_the_test_file_that_loads_it(course):
    """lesson_part.py has no test file of its own; test_lesson.py loads it (runtime.lesson, so that
    --impl=exercises loads its stub): its stub's command and its progress are test_lesson.py's."""
    week, tests = course / "week9_toy", course / "tests" / "week9"
    (week / "lesson_part.py").write_text(LESSON)
    assert lesson_files.test_file(week / "lesson_part.py", course) is None
    (tests / "test_lesson.py").write_text('part = runtime.lesson("week9_toy.lesson_part")\n')
    assert lesson_files.test_file(week / "lesson_part.py", course) == tests / "test_lesson.py"
    assert "`pytest tests/week9/test_lesson.py --impl=exercises`" in stubs.generate(week / "lesson_part.py", course)
    stubs.write(course)
    lesson, part = week / "exercises" / "lesson.py", week / "exercises" / "lesson_part.py"
    assert progress.companions(lesson, tests / "test_lesson.py", course) == [part]
    assert progress.as_shipped([lesson, part], course) is True
    part.write_text(part.read_text() + "# my work\n")  # a change to the part alone: the lesson is started
    assert progress.as_shipped([lesson, part], course) is False


def test_command_line_lists_generated_and_hand_written_stubs():
    out = subprocess.run([sys.executable, "-m", "course", "exercises"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "generated  week4_triton_dl/exercises/attention/flash.py" in out.stdout
    assert "hand-written" in out.stdout or "generated" in out.stdout


def test_the_planted_bugs_still_apply_to_the_marked_solutions():
    """Markers go into solutions: none may split the exact text a tools/plant_bugs.py plant replaces."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import plant_bugs
    finally:
        sys.path.remove(str(ROOT / "tools"))
    for plant in plant_bugs.PLANTS:
        assert (ROOT / plant.path).read_text().count(plant.old) == 1, plant.name


# ------------------------------------------------------------------------------ holes and stages
MAX_HOLE = 40  # lines of code in one hole: a bigger one is a blank page, not an exercise


def test_no_hole_is_over_forty_lines_of_code():
    too_big = {}
    for solution in lesson_files.marked_solutions(ROOT):
        for r in regions.parse_regions(solution.read_text().splitlines(), regions.comment_of(solution)):
            if r.kind == "EXERCISE" and r.size > MAX_HOLE:
                too_big[f"{lesson_files.rel_path(solution, ROOT)}:{r.begin + 1}"] = r.size
    assert not too_big, (f"holes over {MAX_HOLE} lines of code (cut them into smaller holes, "
                             "or the lesson into stages: classroom/stages.py)")


STAGED = '''\
"""Toy lesson in stages."""


def first(xs):
    """Stage 1."""
    # BEGIN EXERCISE [stage 1: the sum]: add them up
    # HINT: a loop, or sum()
    # HINT: `return sum(xs)`
    return sum(xs)
    # END EXERCISE


def second(xs):
    """Stage 2, and more of stage 1."""
    # BEGIN EXERCISE [stage 2: the mean]: divide by the length
    n = len(xs)
    # END EXERCISE
    # BEGIN EXERCISE [stage 1]: (a second hole of stage 1)
    total = first(xs)
    # END EXERCISE
    return total / n
'''


def test_a_staged_lesson_lists_its_holes_stage_by_stage_and_fills_them_stage_by_stage(course):
    path = course / "week9_toy" / "staged.py"
    path.write_text(STAGED)
    (course / "tests" / "week9" / "test_staged.py").write_text("")
    assert regions.stages(path) == {1: "the sum", 2: "the mean"}
    marked = regions.parse_regions(STAGED.splitlines(), "#")
    assert [(r.stage, r.title) for r in marked] == [(1, "the sum"), (2, "the mean"), (1, "the sum")]
    assert marked[0].size == 1, "HINT lines are comments: not counted, not shown"
    stub = stubs.generate(path, course)
    doc = " ".join(ast.get_docstring(ast.parse(stub)).split())
    assert "`pytest tests/week9/test_staged.py --impl=exercises --stage N` checks stage N alone" in doc
    assert doc.index("Stage 1: the sum (about 2 lines; `--stage 1`)") < doc.index("* `second`: (a second hole") \
        < doc.index("Stage 2: the mean") < doc.index("* `second`: divide by the length")
    assert "# TODO (stage 2, about 1 line): divide by the length" in stub
    assert "not implemented yet: stage 1: first: add them up" in stub and "HINT" not in stub
    through_1 = stubs.generate(path, course, through=1)
    assert "return sum(xs)" in through_1 and "total = first(xs)" in through_1 and "n = len(xs)" not in through_1
    assert "BEGIN" not in through_1 and "not implemented yet: stage 2: second" in through_1
    assert "raise NotImplementedError" not in stubs.generate(path, course, through=2)


@pytest.mark.parametrize("text, message", [
    (STAGED.replace("[stage 2: the mean]", ""), "every BEGIN EXERCISE needs its"),
    (STAGED.replace("[stage 2: the mean]", "[stage 3: the mean]"), "without gaps"),
    (STAGED.replace("[stage 1]", "[stage 1: another]"), "titled 'the sum' elsewhere"),
    (STAGED.replace("[stage 2: the mean]", "[stage 2]"), "stage 2 needs a title"),
])
def test_malformed_stages_are_refused(text, message):
    with pytest.raises(regions.MarkerError, match=message):
        regions.parse_regions(text.splitlines(), "#")


def test_every_stage_of_a_staged_lesson_has_known_wrong_solutions_of_its_own():
    """(Its own tests: `python -m course exercises --stages` runs each stage's, on the stub filled up to it.)"""
    from classroom import stages

    fixtures = must_fail.load_fixtures(ROOT)
    staged = stages.staged_solutions(ROOT)
    assert staged, "FlashAttention's backward at least is in stages"
    for solution in staged:
        numbers = set(regions.stages(solution))
        caught = {must_fail.fixture_stage(f) for f in fixtures if f.solution == solution}
        assert numbers <= caught, f"{solution.name}: stages without a known-wrong fixture: {sorted(numbers - caught)}"


def test_stage_selection_keeps_one_stage_and_refuses_an_unmarked_test_of_a_staged_file():
    from tests import conftest

    class Item:
        def __init__(self, nodeid, stage):
            self.nodeid, self._stage = nodeid, stage

        def get_closest_marker(self, name):
            return pytest.mark.stage(self._stage).mark if name == "stage" and self._stage else None

    class Config:
        def __init__(self, stage):
            self.stage, self.hook = stage, type("Hook", (), {"pytest_deselected": staticmethod(lambda items: None)})

        def getoption(self, name):
            return self.stage

    items = [Item("t.py::a", 1), Item("t.py::b", 2), Item("u.py::c", None)]
    conftest._select_stage(Config(2), items)
    assert [i.nodeid for i in items] == ["t.py::b"]
    items = [Item("t.py::a", 1), Item("t.py::b", None)]
    with pytest.raises(pytest.UsageError, match="t.py::b: every test of a lesson in stages"):
        conftest._select_stage(Config(None), items)


def test_progress_shows_a_line_per_stage_and_a_stage_is_not_started_while_its_holes_are_as_shipped(course):
    from classroom import stages

    week = course / "week9_toy"
    (week / "staged.py").write_text(STAGED)
    (course / "tests" / "week9" / "test_staged.py").write_text("")
    stubs.write(course)
    stub = week / "exercises" / "staged.py"
    assert stages.is_staged(stub) and not stages.is_staged(week / "exercises" / "lesson.py")
    stub.write_text(stubs.generate(week / "staged.py", course, through=1))  # the learner did stage 1
    assert stages.untouched(stub, week / "staged.py", course) == {1: False, 2: True}
    test = course / "tests" / "week9" / "test_staged.py"
    records = [{"nodeid": "tests/week9/test_staged.py::test_sum", "outcome": "passed", "message": "", "stage": 1},
               {"nodeid": "tests/week9/test_staged.py::test_mean", "outcome": "failed", "stage": 2,
                "message": "NotImplementedError: not implemented yet: stage 2: second: divide by the length"}]
    rows = stages.progress_rows("staged", stub, test, records, False, "exercises", progress.status, course)
    assert rows == [("staged 1/2", "done", "the sum", "pytest tests/week9/test_staged.py --impl=exercises --stage 1"),
                    ("staged 2/2", "not started", "the mean (about 1 line)",
                     "pytest tests/week9/test_staged.py --impl=exercises --stage 2")]


def test_a_staged_stub_with_every_stage_filled_is_its_solution():
    """What `course stages` tests at the last stage is the solution itself (below the stub's docstring)."""
    from classroom import stages

    for solution in stages.staged_solutions(ROOT):
        last = max(regions.stages(solution))
        through = stubs.generate(solution, ROOT, through=last)
        body = lambda text: text.split('"""', 2)[2]  # noqa: E731  (after the module docstring)
        assert body(through) == body(stubs.filled(solution, ROOT)), solution.name
        assert stubs.NOT_IMPLEMENTED not in body(through)


def test_a_triton_compile_error_reads_as_its_message_not_its_first_line():
    """On the GPU a stub's hole fails at compile time: Triton's message starts 'at 3:4:', then the
    kernel's source, then the static_assert's text. The one line a learner (and `course stages`)
    reads must be that text, or a hole no longer says 'not implemented yet' on the GPU."""
    import ast
    from types import SimpleNamespace

    from triton.compiler.errors import CompileTimeAssertionFailure

    src = "def kernel(x):\n    y = x\n    tl.static_assert(False, 'not implemented yet: kernel: the sum')\n"
    node = ast.parse(src).body[0].body[1]
    error = CompileTimeAssertionFailure(src, node, "not implemented yet: kernel: the sum")
    message = f"triton.compiler.errors.CompileTimeAssertionFailure: {error}"
    report = SimpleNamespace(longrepr=SimpleNamespace(reprcrash=SimpleNamespace(message=message)))
    line = pytest_lesson.reason(report)
    assert line == ("triton.compiler.errors.CompileTimeAssertionFailure: not implemented yet: kernel: the sum "
                    "(kernel line 3:4)"), line
    # Any other error keeps its first line.
    plain = SimpleNamespace(longrepr=SimpleNamespace(reprcrash=SimpleNamespace(message="ValueError: x must be 2-D\nmore")))
    assert pytest_lesson.reason(plain) == "ValueError: x must be 2-D"


def test_a_race_the_gpu_tests_miss_is_rejected_by_its_protocol_model():
    """The attention forward's slot released before its wgmma wait is a race no H100 run of the tests has
    shown; its fixture names the protocol model's source-tie test, which the wrong source fails: 'model'
    (without a GPU too). The same fixture with a model selection that passes is not rejected."""
    import dataclasses

    fixture = next(f for f in must_fail.load_fixtures(ROOT)
                   if f.label == "week4/attention_hopper_forward__slot_released_before_wgmma_wait")
    result = must_fail.run_fixture(fixture, ROOT, gpu=False)
    assert result["ok"] and result["verdict"] == "model", result
    assert "the default build's order is not the model's" in result["message"]
    blind = dataclasses.replace(fixture, wrong=dataclasses.replace(fixture.wrong, model=(
        "tests/week4/test_attention_hopper_forward_protocol.py", "-k", "catches_a_barrier_left_half_arrived")))
    result = must_fail.run_fixture(blind, ROOT, gpu=False)
    assert not result["ok"], result
