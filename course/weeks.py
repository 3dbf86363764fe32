"""The course's weeks, discovered: the kit itself names none of them.

A lesson package is a top-level folder of the course with an `__init__.py` that either declares
a `COURSE` registry or keeps its tests in `tests/<short>/` (`short`: the folder's name up to its
first "_"). The registry is a literal dict, read from the source without importing the package
(importing a week may start CUDA, and `course.runtime` must be chosen first):

    COURSE = {
        "short": "week3",     # the command line's name for it: `course check week3`, tests/week3/
        "title": "Triton kernels and the benchmarking framework",
        "order": 3,           # its place in the course (unregistered packages come last)
        # results/RECORD.json files written by a lesson's own command line, not by `course bench`:
        # the command that measures each (what `course report` tells a reader to run)
        "runners": {"RECORD": "python -m PACKAGE.MODULE --out PACKAGE/results"},
        # numbered ladders of rungs (`python -m course rung NAME N`): the module whose LADDERS
        # list defines each (course/rungs.py)
        "ladders": {"NAME": "MODULE"},
        # this week's rows of the performance-comparison tables, by table title: each entry is
        # one benchmark's rows, {"file", "bench", "size", "rows": [(label, variant), ...]} and
        # optionally "ceiling" (a key of the result's ceilings) and "optional" (a variant that
        # only some versions register)
        "comparisons": {"TABLE TITLE": [{...}, ...]},
        # the page holding those tables, declared by the one week it lives in:
        # {"file", "title", "intro", "tables": [{"title", "metric": "gbps"|"tflops", "note"}, ...]}
        "comparison_page": {...},
    }

Every key is optional. Benchmarks are found in the package's modules (a `BENCHMARKS` list).
"""
from __future__ import annotations

import ast
import functools
import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = "COURSE"
KEYS = ("short", "title", "order", "runners", "ladders", "comparisons", "comparison_page")
NOT_MODULES = ("exercises", "notebooks", "results", "kernels")  # folders of a week, not lessons



def week_dir_of(path) -> Path:
    """The week package a file belongs to: its outermost package folder (week4_triton_dl for
    week4_triton_dl/norms/rmsnorm.py, for .../kernels/x.cu and for .../exercises/norms/rmsnorm.py)."""
    folder = Path(path).parent
    while (folder.parent / "__init__.py").is_file():
        folder = folder.parent
    return folder

@dataclass(frozen=True)
class Week:
    """One lesson package and what its `COURSE` registry says about it."""
    short: str                  # the command line's name, and its tests' folder under tests/
    package: str                # the folder, and the import name
    title: str
    order: float
    runners: dict = field(default_factory=dict)
    ladders: dict = field(default_factory=dict)  # ladder name -> module defining it (course/rungs.py)
    comparisons: dict = field(default_factory=dict)
    comparison_page: dict | None = None

    def runner(self, record: str) -> str | None:
        """The command that writes results/<record>.json, when not `course bench`."""
        return self.runners.get(record)


def read_registry(package_dir: Path) -> dict | None:
    """The `COURSE = {...}` literal of a package's `__init__.py`, or None when it declares none
    (ValueError when it is not a literal dict of known keys)."""
    init = package_dir / "__init__.py"
    if not init.is_file():
        return None
    tree = ast.parse(init.read_text(), str(init))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == REGISTRY
                                                for t in node.targets):
            try:
                registry = ast.literal_eval(node.value)
            except ValueError:
                raise ValueError(f"{init}: {REGISTRY} must be a literal (the kit reads it without "
                                 "importing the package)") from None
            if not isinstance(registry, dict) or set(registry) - set(KEYS):
                raise ValueError(f"{init}: {REGISTRY} must be a dict with keys among {', '.join(KEYS)}")
            return registry
    return None


def _docstring_title(package_dir: Path) -> str:
    doc = ast.get_docstring(ast.parse((package_dir / "__init__.py").read_text())) or package_dir.name
    return doc.strip().splitlines()[0]


def short_name(package_dir: Path) -> str:
    """A package's short name: its registry's "short", else its folder's name up to the first "_"."""
    return (read_registry(package_dir) or {}).get("short") or package_dir.name.split("_")[0]


def discover(root: Path = ROOT) -> list[Week]:
    """The lesson packages under `root`, in course order (see the module docstring)."""
    found = []
    for folder in sorted(p for p in root.iterdir() if (p / "__init__.py").is_file()):
        registry = read_registry(folder)
        short = short_name(folder)
        if registry is None and not (root / "tests" / short).is_dir():
            continue  # the kit, or any other package: not a lesson
        registry = registry or {}
        found.append(Week(short=short, package=folder.name,
                          title=registry.get("title") or _docstring_title(folder),
                          order=registry.get("order", math.inf),
                          runners=dict(registry.get("runners", {})),
                          ladders=dict(registry.get("ladders", {})),
                          comparisons=dict(registry.get("comparisons", {})),
                          comparison_page=registry.get("comparison_page")))
    return sorted(found, key=lambda w: (w.order, w.package))


@functools.cache
def _course() -> tuple[Week, ...]:
    return tuple(discover(ROOT))


def all_weeks() -> tuple[Week, ...]:
    """This course's weeks (discovered once per process), in course order."""
    return _course()


def resolve(name: str) -> Week:
    """A week by its short name, its folder or its order ('week1', 'week1_cuda_python', '1');
    SystemExit naming the choices otherwise."""
    key = name.strip().lower()
    for week in all_weeks():
        if key in (week.short, week.package) or (key.isdigit() and week.order == int(key)):
            return week
    raise SystemExit(f"unknown week {name!r}; choose one of: {', '.join(w.short for w in all_weeks())}")


def of_package(package: str) -> Week:
    """The week whose folder is `package` (KeyError if none)."""
    for week in all_weeks():
        if week.package == package:
            return week
    raise KeyError(package)


def benchmarks(week: Week | str) -> list:
    """Every `BENCHMARKS` entry of the week's modules, those of its lesson folders (a lesson in
    several modules: week4_triton_dl/norms/) included (this imports them)."""
    package = week.package if isinstance(week, Week) else week
    pkg = importlib.import_module(package)
    found = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name in NOT_MODULES:
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        found.extend(getattr(module, "BENCHMARKS", []))
        if info.ispkg:  # a lesson folder (week4_triton_dl/attention/): its modules' benchmarks too
            for sub in pkgutil.iter_modules(module.__path__):
                if sub.name not in NOT_MODULES:
                    found.extend(getattr(importlib.import_module(f"{module.__name__}.{sub.name}"), "BENCHMARKS", []))
    return found


def runner_command(record: str) -> str | None:
    """The command (of whichever week registers it) that writes results/<record>.json."""
    for week in all_weeks():
        if week.runner(record):
            return week.runner(record)
    return None
