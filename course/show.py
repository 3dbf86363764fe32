"""Printing a solution's source in a notebook: without the exercise markers, after a pointer to the exercise.

A notebook that shows how a kernel is written shows the course's solution. The solution's source
carries the exercise generator's markers (`# BEGIN EXERCISE: ...`, its hints, `# END EXERCISE`),
which are the stub generator's business, not the lesson's; and a learner should know, before
reading an answer, that the same function is an exercise in exercises/. `show_solution(fn)` prints
that pointer, then the source with the marker and hint lines left out.
"""
from __future__ import annotations

import inspect
import re
from pathlib import Path

from course import weeks

_BEGIN = re.compile(r"^[ \t]*(#|//) ?(BEGIN|END) (EXERCISE|SOLUTION ONLY)\b")
_HINT = re.compile(r"^[ \t]*(#|//) (HINT|STUB):")


def _unwrap(obj):
    """The Python object behind a Triton JITFunction (.fn) or a Numba kernel (.py_func)."""
    for attr in ("fn", "py_func"):
        while getattr(obj, attr, None) is not None and not inspect.isclass(obj):
            obj = getattr(obj, attr)
    return obj


def strip_markers(source: str) -> str:
    """`source` without the exercise markers, their continuation lines, and `# HINT:`/`# STUB:` lines."""
    out, skipping = [], None
    for line in source.splitlines():
        m = _BEGIN.match(line) or _HINT.match(line)
        if m:  # after BEGIN or a hint, a continuation line is the same comment leader and 2+ spaces
            skipping = None if "END" in m.groups() else m[1]
            continue
        if skipping and re.match(rf"^[ \t]*{re.escape(skipping)}[ \t]{{2,}}\S", line):
            continue
        skipping = None
        out.append(line)
    return "\n".join(out) + ("\n" if source.endswith("\n") else "")


def exercise_of(path: Path) -> Path | None:
    """The learner's stub of a lesson file (week*/exercises/<name>, or exercises/norms/<name> for a
    lesson folder's file), if the course has one."""
    # exercises/ mirrors the week (classroom/lesson_files.py's stub_path, by the same week_dir_of)
    week = weeks.week_dir_of(path)
    stub = week / "exercises" / Path(path).relative_to(week)
    return stub if stub.exists() else None


def solution_source(obj) -> str:
    """The pointer to the exercise (when there is one) and the marker-free source of `obj`."""
    target = _unwrap(obj)
    path = Path(inspect.getsourcefile(target)).resolve()
    root = next((p for p in path.parents if (p / "course").is_dir()), path.parent)
    stub = exercise_of(path)
    head = ""
    if stub is not None:
        head = (f"# The course's solution, from {path.relative_to(root).as_posix()}.\n# Your exercise is "
                f"{stub.relative_to(root).as_posix()}: try it before reading on\n# (`python -m course hint "
                f"{path.parent.name.split('_')[0]}/{path.stem}` gives graded hints).\n\n")
    return head + strip_markers(inspect.getsource(target))


def show_solution(obj) -> None:
    print(solution_source(obj))
