"""Known-wrong solutions ("must-fail fixtures") and the run that requires each to fail.

tests/<week>/wrong/<lesson>.py lists `Wrong`s: one bug learners write (a missing mask, a wrong
scale, fp16 accumulation, zeros returned), as an exact text replacement in the solution, inside
an EXERCISE region. `run_must_fail` runs the lesson's tests on each (the wrong module loaded in
the solution's place, see classroom/pytest_lesson.py) and requires a failure, not 'not implemented
yet', whose message contains what the fixture expects. A race the tests may never show on a GPU names a
CPU protocol model's test too (`model`): the model proves the order necessary, its source-tie test fails
on a source that breaks the order, and that failure rejects the fixture ('model').
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from classroom.lesson_files import (ROOT, lesson_dirs, lesson_folders, loader_of, module_name, rel_path, test_file,
                                    week_of)
from classroom.regions import comment_of, parse_regions
from classroom.stubs import NOT_IMPLEMENTED


@dataclasses.dataclass(frozen=True)
class Wrong:
    """A known-wrong solution: the lesson's solution with `old` (exactly once) replaced by `new`.

    `expect`: a regular expression the first failure's test name or message must match (ignoring
    case): what tells the learner where to look ("out-of-bounds|elements differ"). `tests`: pytest arguments added to the lesson's test file (a -k
    selection that catches the bug fast); the run stops at the first failure (-x).
    """
    name: str
    why: str
    old: str
    new: str
    expect: str = ""
    tests: tuple = ()
    lesson: str = ""  # the file patched, in the week package (kernels/x.cu, attention/kernels/x.cu);
    #                   default: <fixture file name>.py
    gpu: bool = False  # only a GPU shows it (a PyCUDA launch, a race)
    hang_s: float | None = None  # a barrier bug that may hang the GPU instead of failing: its run is cut after
    #                              hang_s seconds (killed: the driver frees the GPU) and, with no test failed
    #                              by then, counts as rejected ('hung'): the tests never pass on it
    model: tuple = ()  # a race the GPU's tests may never show: pytest arguments of the CPU protocol model's
    #                    test that ties the model to the source (a file and its -k), run on the same wrong module;
    #                    its failure matching `model_expect` rejects the fixture ('model'), on a GPU or not
    model_expect: str = ""


@dataclasses.dataclass
class Fixture:
    wrong: Wrong
    solution: Path
    module: str       # the solution's import name (a .cu: the module that loads it)
    test: Path
    source: Path      # the fixture file

    @property
    def label(self) -> str:
        """'week4/rope__position_offset_ignored'."""
        return f"{self.source.parent.parent.name}/{self.source.stem}__{self.wrong.name}"

    def matches(self, name: str) -> bool:
        """`name` is this fixture's label, its lesson ('rope', 'week4/rope') or its week ('week4')."""
        short = self.label.split("/", 1)[1]
        return name in (self.label, short, self.label.split("/")[0]) or \
            self.label.startswith(name + "__") or short.startswith(name + "__")


def fixture_files(root: Path = ROOT) -> list[Path]:
    return sorted((root / "tests").glob("*/wrong/*.py"))


def load_fixtures(root: Path = ROOT) -> list[Fixture]:
    weeks = {week_of(d): d for d in lesson_dirs(root)}
    found = []
    for path in fixture_files(root):
        spec = importlib.util.spec_from_file_location(f"_wrong_{path.parent.parent.name}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        package = weeks[path.parent.parent.name]
        for wrong in module.WRONG:
            # LESSON: a fixture file's lesson in a lesson folder (LESSON = "attention/flash.py"), or the CUDA C
            # file all its bugs are in (LESSON = "attention/kernels/attention_hopper_backward.cu")
            solution = package / (wrong.lesson or getattr(module, "LESSON", f"{path.stem}.py"))
            if not wrong.lesson and not solution.exists():  # a module of a lesson folder (norms/rmsnorm.py)
                solution = next((folder / solution.name for folder in lesson_folders(package)
                                 if (folder / solution.name).exists()), solution)
            test = test_file(solution, root)
            loader = solution if solution.suffix == ".py" else loader_of(solution)
            name = module_name(loader, root) if loader is not None else f"{package.name}.{path.stem}"
            found.append(Fixture(wrong, solution, name, test, path))
    return found


def fixture_stage(fixture: Fixture) -> int | None:
    """The stage of the region a fixture's bug sits in (its tests then run with `--stage N`: a stage's
    own tests must catch the bugs of its holes), or None for a lesson in one piece."""
    text = fixture.solution.read_text()
    if fixture.wrong.old not in text:
        return None
    line = text.count("\n", 0, text.index(fixture.wrong.old))
    regions = parse_regions(text.splitlines(), comment_of(fixture.solution))
    return next((r.stage for r in regions if r.kind == "EXERCISE" and r.body[0] <= line < r.body[1]), None)


def wrong_source(fixture: Fixture) -> str:
    """The wrong module's text; ValueError when the fixture no longer applies to its solution."""
    text = fixture.solution.read_text()
    count = text.count(fixture.wrong.old)
    if count != 1:
        raise ValueError(f"{fixture.label}: its `old` text occurs {count} times in {fixture.solution.name} "
                         "(must be once): update the fixture beside the solution")
    start = text.index(fixture.wrong.old)
    comment = comment_of(fixture.solution)
    lines = text.splitlines()
    regions = [r for r in parse_regions(lines, comment) if r.kind == "EXERCISE"]
    if regions:  # a marked lesson: the bug must sit where the learner writes
        first_line = text.count("\n", 0, start)
        last_line = text.count("\n", 0, start + len(fixture.wrong.old.rstrip("\n")))
        if not any(r.body[0] <= first_line and last_line < r.body[1] for r in regions):
            raise ValueError(f"{fixture.label}: its `old` text (line {first_line + 1}) is not inside an "
                             f"EXERCISE region of {fixture.solution.name}: a learner never writes it")
    return text.replace(fixture.wrong.old, fixture.wrong.new)


def run_fixture(fixture: Fixture, root: Path = ROOT, timeout: float = 600, gpu: bool = True) -> dict:
    """Run the lesson's tests on the wrong module (and its protocol model's, where it names one); {'ok':
    required failure seen, 'message', ...}. gpu=False: a GPU-only fixture runs its model alone."""
    from classroom import pytest_lesson

    started = time.time()
    try:
        source = wrong_source(fixture)
        if fixture.test is None or (fixture.solution.suffix != ".py" and loader_of(fixture.solution) is None):
            raise ValueError(f"{fixture.label}: no test module (or no module that loads {fixture.solution.name})")
    except ValueError as err:
        return {"ok": False, "label": fixture.label, "verdict": "stale", "message": str(err), "test": "", "s": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{fixture.module.split('.')[-1]}.py"  # the module the tests import
        if fixture.solution.suffix == ".py":
            path.write_text(source)
            kernels = fixture.solution.parent / "kernels"
            if kernels.is_dir():  # lessons load their CUDA C from kernels/ beside the module
                (Path(tmp) / "kernels").symlink_to(kernels)
        else:  # a wrong CUDA C file: the module that loads it, unchanged, loads it from tmp/kernels/
            loader = loader_of(fixture.solution)
            path.write_text(loader.read_text())
            (Path(tmp) / "kernels").mkdir()
            for cu in (f for f in fixture.solution.parent.iterdir() if f.is_file()):  # its headers too (x_ptx.cuh)
                (Path(tmp) / "kernels" / cu.name).write_text(source if cu.name == fixture.solution.name
                                                           else cu.read_text())
        def run(selection: list, name: str, limit: float):
            """The selected tests on the wrong module: (records, output, hung)."""
            results = Path(tmp) / f"{name}.jsonl"
            env = {**os.environ, pytest_lesson.OVERRIDE_ENV: f"{fixture.module}={path}",
                   pytest_lesson.RESULTS_ENV: str(results), "COLUMNS": "200"}
            command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p",
                       "classroom.pytest_lesson", "--impl=solutions", *selection]
            try:
                proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=limit)
                output, hung = proc.stdout + proc.stderr, False
            except subprocess.TimeoutExpired:
                output, hung = "timed out", True
            return pytest_lesson.read_results(results), output, hung

        stage = fixture_stage(fixture)
        if gpu or not fixture.wrong.gpu:
            records, output, hung = run([rel_path(fixture.test, root), *fixture.wrong.tests,
                                         *(["--stage", str(stage)] if stage is not None else [])],
                                        "tests", fixture.wrong.hang_s or timeout)
        else:  # no GPU: only the model can say anything of a race
            records, output, hung = [], "no GPU: the lesson's tests were not run", False
        model = run(list(fixture.wrong.model), "model", timeout)[0] if fixture.wrong.model else []
    model_failed = [r for r in model if r["outcome"] in ("failed", "error")]
    failed = [r for r in records if r["outcome"] in ("failed", "error")]
    passed = [r for r in records if r["outcome"] == "passed"]
    result = {"label": fixture.label, "s": round(time.time() - started, 1), "passed": len(passed),
              "test": failed[0]["nodeid"] if failed else "", "message": failed[0]["message"] if failed else ""}
    if not failed and model_failed and re.search(fixture.wrong.model_expect, model_failed[0]["message"], re.IGNORECASE):
        # The race passed the lesson's tests (or they need a GPU), and the protocol model, which the source no
        # longer follows, rejects it: caught, and the verdict says by what.
        result.update(ok=True, verdict="model", test=model_failed[0]["nodeid"],
                      message=(f"the lesson's tests passed ({len(passed)}: a race they did not show); "
                               if records else "") + "the protocol model: " + model_failed[0]["message"])
    elif hung and fixture.wrong.hang_s and not failed:
        result.update(ok=True, verdict="hung", message=f"no test ended within {fixture.wrong.hang_s:.0f} s: the "
                      "kernel hung (killed), so the tests never pass on it")
    elif not records:
        result.update(ok=False, verdict="no test ran", message=" ".join(output.strip().splitlines()[-1:]))
    elif not failed:
        result.update(ok=False, verdict="SURVIVED", message=f"{len(passed)} tests passed: the tests do not see this bug")
    elif NOT_IMPLEMENTED in result["message"]:
        result.update(ok=False, verdict="wrong reason")
    elif fixture.wrong.expect and not re.search(fixture.wrong.expect, result["test"] + " " + result["message"],
                                                re.IGNORECASE):
        result.update(ok=False, verdict="unclear",
                      message=f"expected the message to say {fixture.wrong.expect!r}: " + result["message"])
    else:
        result.update(ok=True, verdict="caught")
    return result


def run_must_fail(root: Path = ROOT, only: list[str] | None = None, jobs: int = 2, gpu: bool | None = None) -> int:
    if gpu is None:
        import torch
        gpu = torch.cuda.is_available()
    fixtures = [f for f in load_fixtures(root) if not only or any(f.matches(o) for o in only)]
    skipped = [f for f in fixtures if f.wrong.gpu and not gpu and not f.wrong.model]
    fixtures = [f for f in fixtures if f not in skipped]
    if only and not fixtures and not skipped:
        print(f"no fixture matches {only}; there are: {', '.join(f.label for f in load_fixtures(root))}")
        return 2
    print(f"must-fail: {len(fixtures)} known-wrong solutions, each run against its lesson's tests "
          f"({len(skipped)} need a GPU: skipped)" if skipped else
          f"must-fail: {len(fixtures)} known-wrong solutions, each run against its lesson's tests", flush=True)
    bad = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for fixture, result in zip(fixtures, pool.map(lambda f: run_fixture(f, root, gpu=gpu), fixtures)):
            bad += not result["ok"]
            message = result["message"].strip().splitlines()[0] if result["message"].strip() else ""
            print(f"{result['verdict']:>12}  {fixture.label:<48} {result['s']:6.1f}s  "
                  f"{result['test'].split('::', 1)[-1]}: {message[:160]}", flush=True)
    if bad:
        print(f"\n{bad} known-wrong solution(s) not rejected for the right reason: a learner's bug of that "
              "kind would pass, or fail with a message that does not point at it")
    return 1 if bad else 0
