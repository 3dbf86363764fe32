"""A pytest plugin for the course's own runs of lesson tests (`-p classroom.pytest_lesson`).

Used by `python -m course progress` and `python -m course exercises --must-fail`; inert unless
its environment variables are set:

* COURSE_LESSON_OVERRIDE="week4_triton_dl.rope=/tmp/x/rope.py[;...]": import that file under the
  module's name, in place of the real one (a known-wrong solution, tested where the solution was);
* COURSE_LESSON_RESULTS=PATH: append one JSON line per test outcome (node id, outcome, the
  failure's one-line reason, the stage of a staged lesson's test) and per collection error, for
  the caller to read back;
* COURSE_LESSON_SMOKE=1: the quick selection: the first case of each test function that this
  machine runs (the parametrizations list the smallest sizes first), and once a test file has
  failed, its later tests are skipped (one failing test is all a progress table shows; in a lesson
  in stages, once a test of that stage has failed: each stage has its own line);
  COURSE_LESSON_SMOKE=first: the first case of each test function only (CI's check that
  untouched stubs fail with 'not implemented yet': the reason is the same for every case).
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest

OVERRIDE_ENV = "COURSE_LESSON_OVERRIDE"
RESULTS_ENV = "COURSE_LESSON_RESULTS"
SMOKE_ENV = "COURSE_LESSON_SMOKE"


class _Override(importlib.abc.MetaPathFinder):
    def __init__(self, files: dict[str, str]):
        self.files = files

    def find_spec(self, name, path=None, target=None):
        if name in self.files:
            return importlib.util.spec_from_file_location(name, self.files[name])
        return None


def _overrides() -> dict[str, str]:
    spec = os.environ.get(OVERRIDE_ENV, "")
    pairs = [item.split("=", 1) for item in spec.split(";") if item.strip()]
    return {name.strip(): path.strip() for name, path in pairs}


def pytest_configure(config):
    files = _overrides()
    if files:
        sys.meta_path.insert(0, _Override(files))
    config._lesson_failed_files = set()


# "triton.compiler.errors.CompileTimeAssertionFailure: at 26:4:" (then source lines, then the message)
_COMPILE_ERROR = re.compile(r"^(?P<kind>[\w.]*(?:CompilationError|CompileTimeAssertionFailure|UnsupportedLanguageConstruct))"
                            r": at (?P<at>\d+:\d+):\s*$")


def reason(report) -> str:
    """The one line a learner reads: 'NotImplementedError: not implemented yet: ...', 'AssertionError: ...'."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and crash.message:
        lines = [line for line in crash.message.splitlines() if line.strip()]
        first = lines[0] if lines else crash.message
        compiled = _COMPILE_ERROR.match(first)
        if compiled and len(lines) > 1:
            # A Triton compile error (on the GPU, where kernels compile): its first line is only
            # 'at 26:4:', then the source, then the message. Show the message and where it is.
            first = f"{compiled.group('kind')}: {lines[-1].strip()} (kernel line {compiled.group('at')})"
        if first.startswith(("AssertionError: assert", "assert ")):  # a bare assert: show its line
            source = _failing_line(longrepr)
            if source:
                first = f"{first} in `{source}`"
        return first
    text = str(longrepr or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E ")]
    return (errors[0][1:].strip() if errors else lines[-1] if lines else "")


def _failing_line(longrepr) -> str:
    """The source line pytest marks with '>' in the test's own frame (where the assert is)."""
    entries = getattr(getattr(longrepr, "reprtraceback", None), "reprentries", None) or []
    for entry in entries:
        marked = [line[1:].strip() for line in getattr(entry, "lines", []) if line.startswith(">")]
        if marked:
            return marked[-1]
    return ""


def _record(entry: dict) -> None:
    path = os.environ.get(RESULTS_ENV)
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(entry) + "\n")


def read_results(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _stage(item):
    marker = item.get_closest_marker("stage")
    return int(marker.args[0]) if marker is not None else None


def _group(nodeid: str) -> tuple:
    """What one failure stops in the quick selection: the test file, or one stage of it."""
    return nodeid.split("::", 1)[0], _STAGES.get(nodeid)


_STAGES: dict = {}  # node id -> stage, for the tests of a lesson in stages


@pytest.hookimpl(trylast=True)  # after the suite's own conftest has marked what a CPU must skip
def pytest_collection_modifyitems(config, items):
    _STAGES.update({item.nodeid: _stage(item) for item in items if _stage(item) is not None})
    if os.environ.get(SMOKE_ENV) not in ("1", "first"):
        return
    chosen = {}
    for item in items:
        key = (item.nodeid.split("::", 1)[0], getattr(item, "cls", None), getattr(item, "originalname", item.name))
        runs = not any(True for _ in item.iter_markers("skip"))
        if key not in chosen or (runs and not chosen[key][1]):  # the first case that will run
            chosen[key] = (item, runs)
    keep = {id(item) for item, _ in chosen.values()}
    drop = [item for item in items if id(item) not in keep]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if id(item) in keep]


def pytest_runtest_setup(item):
    if os.environ.get(SMOKE_ENV) == "1" and _group(item.nodeid) in item.config._lesson_failed_files:
        pytest.skip("an earlier test of this file failed")


def pytest_runtest_logreport(report):
    if report.when == "call" or report.failed or (report.when == "setup" and report.skipped):
        outcome = "error" if report.failed and report.when != "call" else report.outcome
        if report.skipped and "an earlier test of this file failed" in str(report.longrepr):
            return
        _record({"nodeid": report.nodeid, "outcome": outcome, "when": report.when,
                 "message": reason(report) if report.failed else "",
                 **({"stage": _STAGES[report.nodeid]} if report.nodeid in _STAGES else {})})
    if report.failed and os.environ.get(SMOKE_ENV) == "1":
        config = getattr(report, "config", None) or _CONFIG.get("config")
        if config is not None:
            config._lesson_failed_files.add(_group(report.nodeid))


_CONFIG: dict = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _CONFIG["config"] = session.config


def pytest_collectreport(report):
    if report.failed:
        _record({"nodeid": report.nodeid, "outcome": "error", "when": "collect", "message": reason(report)})
