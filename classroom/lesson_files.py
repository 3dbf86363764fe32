"""Where a lesson's files are: its solutions, their stubs, their test modules and notes.

The lesson packages are found by course/weeks.py; a solution is week*/X.py, a lesson folder's
week*/<folder>/X.py, or a CUDA C file in the kernels/ folder beside the module that loads it
(week*/kernels/X.cu, week*/<folder>/kernels/X.cu); its stub sits in the week's exercises/ folder,
at the same path.
"""
from __future__ import annotations

import re
from pathlib import Path

from course import weeks
from course.weeks import week_dir_of
from classroom.regions import is_marked

ROOT = weeks.ROOT


def lesson_dirs(root: Path = ROOT) -> list[Path]:
    """The lesson packages under `root`, in course order (course/weeks.py finds them)."""
    return [root / week.package for week in weeks.discover(root)]


def week_of(package_dir: Path) -> str:
    """'week4_triton_dl' -> 'week4'; 'capstone' -> 'capstone' (the week's short name)."""
    return weeks.short_name(package_dir)


def solution_files(root: Path = ROOT) -> list[Path]:
    """Every lesson source that could have a stub: week*/X.py, week*/<lesson folder>/X.py (a
    multi-module lesson, week4_triton_dl/attention/) and the *.cu of the kernels/ folder of each
    (week*/kernels/*.cu, week*/<lesson folder>/kernels/*.cu)."""
    found = []
    for d in lesson_dirs(root):
        for home in (d, *lesson_folders(d)):
            found += sorted(p for p in home.glob("*.py") if p.name != "__init__.py")
            found += sorted((home / "kernels").glob("*.cu"))
    return found


def loader_of(cuda_source: Path) -> Path | None:
    """The module that loads a CUDA C file: kernels/x.cu is loaded by a module in the folder that holds
    kernels/ (the week's, or a lesson folder's) that names "x.cu" in quotes; None if no module does."""
    home = cuda_source.parent.parent
    return next((py for py in sorted(home.glob("*.py")) if f'"{cuda_source.name}"' in py.read_text()), None)


def lesson_folders(week: Path) -> list[Path]:
    """A week's folders of lessons (a lesson in several modules: week4_triton_dl/norms/), not its
    exercises/, notebooks/, results/ or kernels/."""
    return sorted(d for d in week.iterdir() if (d / "__init__.py").is_file() and d.name not in weeks.NOT_MODULES)


def module_name(solution: Path, root: Path = ROOT) -> str:
    """'week4_triton_dl.attention.flash' for week4_triton_dl/attention/flash.py."""
    return rel_path(solution, root).removesuffix(".py").replace("/", ".")


def stub_path(solution: Path) -> Path:
    """The stub of a solution: the same path under the week's exercises/, which mirrors the week
    (kernels/x.cu -> exercises/kernels/x.cu, norms/rmsnorm.py -> exercises/norms/rmsnorm.py)."""
    week = week_dir_of(solution)
    return week / "exercises" / solution.relative_to(week)


def solution_of(stub: Path) -> Path:
    """The solution of a stub (the inverse of `stub_path`)."""
    week = week_dir_of(stub)
    return week / stub.relative_to(week / "exercises")


def marked_solutions(root: Path = ROOT) -> list[Path]:
    return [p for p in solution_files(root) if is_marked(p)]


def test_file(solution: Path, root: Path = ROOT) -> Path | None:
    """The test module of a lesson: tests/<week>/test_<name>.py, or, for a module a lesson is split
    into (layernorm_backward.py), the lesson's test module that loads it (`runtime.lesson(
    "<package>.<module>")`, so that --impl=exercises loads its stub), or, for a lesson folder's module
    no test loads that way, tests/<week>/test_<folder>_<name>.py (attention/hopper_backward.py:
    test_attention_hopper_backward.py); for a .cu, the test module of the module that loads it."""
    package_dir = week_dir_of(solution)
    tests = root / "tests" / week_of(package_dir)
    if solution.suffix == ".py":
        candidate = tests / f"test_{solution.stem}.py"
        loads = f'lesson("{module_name(solution, root)}")'
        # a lesson folder's module (norms/rmsnorm.py) keeps test_rmsnorm.py if that file loads it
        # (attention/bench.py must not take a test_bench.py about something else)
        if candidate.exists() and (solution.parent == package_dir or loads in candidate.read_text()):
            return candidate
        found = next((test for test in sorted(tests.glob("test_*.py")) if loads in test.read_text()), None)
        named = tests / f"test_{solution.parent.name}_{solution.stem}.py"
        if found is None and solution.parent != package_dir and named.exists():
            return named
        return found
    loader = loader_of(solution)
    return test_file(loader, root) if loader is not None else None


def hand_written_tests(root: Path = ROOT) -> list[Path]:
    """The test files that load a lesson whose stub is still hand-written (CI fills those stubs with
    their solutions and runs these: a generated stub filled IS its solution, already tested)."""
    modules = set()
    for solution in solution_files(root):
        if stub_path(solution).exists() and not is_marked(solution):
            if f"from {module_name(solution, root)} import *" in stub_path(solution).read_text():
                continue  # "not an exercise": the stub re-exports the solution, nothing to fill
            if solution.suffix == ".py":
                modules.add(module_name(solution, root))
            else:  # a CUDA C stub: the lesson module that loads it
                loader = loader_of(solution)
                if loader is not None:
                    modules.add(module_name(loader, root))
    found = []
    for test in sorted((root / "tests").glob("*/test_*.py")):
        text = test.read_text()
        if any(f'lesson("{module}")' in text for module in modules):
            found.append(test)
    return found


def rel_path(path: Path, root: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()



def note_of(solution: Path) -> Path:
    """The lesson's note: notes/<name>.md, else the note whose title names the file (`layernorm_backward.py`,
    `kernels/rmsnorm_ext.cu`), else the note the README's lessons table links beside the file
    (`add_rmsnorm.py`), else the week's README (a week without notes/)."""
    week_dir = week_dir_of(solution)
    notes = week_dir / "notes"
    if (notes / f"{solution.stem}.md").exists():
        return notes / f"{solution.stem}.md"
    named = f"`{solution.relative_to(week_dir).as_posix()}`"
    for note in sorted(notes.glob("*.md")):
        title = next(iter(note.read_text().splitlines()), "")
        if named in title:
            return note
    readme = week_dir / "README.md"
    for line in readme.read_text().splitlines() if readme.exists() else []:  # the lessons table's row
        link = re.search(r"\]\(notes/([\w-]+\.md)\)", line)
        if named in line and link and (notes / link[1]).exists():
            return notes / link[1]
    return readme
