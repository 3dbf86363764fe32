"""The house's layout: the kit (course/) is what lessons import, the machinery (classroom/) runs
the course; the kit never imports the machinery, no lesson does, and no module is over 600 lines.

Lessons stand on the kit, the machinery stands on both (it finds and runs the lessons by name), so
a learner reading course/ reads only what a lesson uses. The one crossing the other way is
course/__main__.py: `python -m course` is the learner's command, and it hands over to
classroom/ by name when it runs (runpy; its docstring says why), never by an import statement.
"""
import ast
import json
import os
import re
import subprocess
import sys

from course import weeks

ROOT = weeks.ROOT
MAX_LINES = 600
# Lesson modules over 600 lines that other changes are splitting, at their size when this rule was
# written: one may shrink (then take it out of this list once it is at 600 or under), never grow.
KNOWN_LONG = {
}
SOURCE_SUFFIXES = (".py", ".cu", ".cuh", ".cpp", ".h", ".sh")
# Names that load a module given as a string: an import that no import statement shows.
DYNAMIC_IMPORTS = ("import_module", "__import__", "run_module", "run_path")


def _lesson_dirs() -> list:
    packages = {w.package for w in weeks.all_weeks()}
    return sorted({ROOT / p for p in packages} | {p for p in ROOT.glob("week*") if p.is_dir()}
                  | {ROOT / "capstone"})


def _python_files(folder) -> list:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _imports_of(path) -> list[tuple[int, str]]:
    """(line, module) of every import in a Python file: statements anywhere (a lazy one inside a
    function too) and calls that load a module named by a string constant (importlib, runpy)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in DYNAMIC_IMPORTS and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def _machinery(module: str) -> bool:
    return module == "classroom" or module.startswith("classroom.")


def test_the_kit_never_imports_the_machinery():
    """course/ imports nothing of classroom/: not at the top, not lazily, not by name, except the
    hand-over of `python -m course` in course/__main__.py."""
    found = [f"{path.relative_to(ROOT)}:{line}: {module}"
             for path in _python_files(ROOT / "course") if path.name != "__main__.py"
             for line, module in _imports_of(path) if _machinery(module)]
    assert not found, f"the kit (course/) imports the machinery (classroom/): {found}"
    main = _imports_of(ROOT / "course" / "__main__.py")
    assert [module for _, module in main if _machinery(module)] == ["classroom"], main
    assert not any(isinstance(node, ast.ImportFrom) and _machinery(node.module or "")
                   for node in ast.walk(ast.parse((ROOT / "course" / "__main__.py").read_text()))), \
        "course/__main__.py hands over by name (runpy), never by an import statement"


def test_importing_the_whole_kit_loads_none_of_the_machinery():
    """What the statements above cannot see (an import built from a variable) shows at run time:
    every course/ module imported in a fresh process, and classroom/ still not loaded."""
    modules = sorted(f"course.{p.stem}" for p in (ROOT / "course").glob("*.py") if p.stem not in ("__init__", "__main__"))
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m == 'classroom' or m.startswith('classroom.'))))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COURSE_BACKEND": "sim"}
    env.pop("COURSE_RECORD_LAUNCHES", None)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [], out.stdout


def test_no_lesson_imports_the_machinery():
    """A lesson (week*/, capstone/: its modules, exercise stubs, benchmarks and notebooks) imports
    the kit and earlier lessons, never classroom/."""
    found = []
    for folder in _lesson_dirs():
        for path in _python_files(folder):
            found += [f"{path.relative_to(ROOT)}:{line}: {module}"
                      for line, module in _imports_of(path) if _machinery(module)]
        for notebook in sorted(folder.rglob("*.ipynb")):
            for cell in json.loads(notebook.read_text()).get("cells", []):
                source = "".join(cell.get("source", [])) if cell.get("cell_type") == "code" else ""
                if re.search(r"^\s*(from|import)\s+classroom\b|['\"]classroom[.'\"]", source, re.M):
                    found.append(f"{notebook.relative_to(ROOT)}: a code cell names classroom")
    assert not found, f"lessons that import the machinery (classroom/): {found}"


def test_no_module_over_600_lines():
    """Lessons, the kit, the machinery and the tools: a file over 600 lines holds more than one
    idea. The modules other changes are splitting are listed at their size, and may not grow."""
    folders = [*_lesson_dirs(), ROOT / "course", ROOT / "classroom", ROOT / "tools"]
    sizes = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.suffix in SOURCE_SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                sizes[path.relative_to(ROOT).as_posix()] = len(path.read_text(errors="replace").splitlines())
    too_long = [f"{rel}: {n} lines" for rel, n in sizes.items() if n > MAX_LINES and rel not in KNOWN_LONG]
    grown = [f"{rel}: {sizes[rel]} lines (was {was})" for rel, was in KNOWN_LONG.items()
             if rel in sizes and sizes[rel] > was]
    done = [rel for rel, was in KNOWN_LONG.items() if sizes.get(rel, 0) <= MAX_LINES]
    assert not too_long, f"over {MAX_LINES} lines: split by idea: {too_long}"
    assert not grown, f"a module over {MAX_LINES} lines, being split elsewhere, grew: {grown}"
    assert not done, f"at {MAX_LINES} lines or under (or gone) now: take out of KNOWN_LONG: {done}"


def test_python_m_course_and_python_m_classroom_are_one_command_line():
    """The learner types `python -m course ...`; the machinery's own name works too."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    helps = [subprocess.run([sys.executable, "-m", package, "--help"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300) for package in ("course", "classroom")]
    assert [h.returncode for h in helps] == [0, 0], [h.stderr[-2000:] for h in helps]
    assert helps[0].stdout == helps[1].stdout
    assert "usage: python -m course" in helps[0].stdout and "exercises" in helps[0].stdout


# `python -m NAME` in a script, note or docstring must name a module that runs something: one whose
# file has a `__main__` guard, or a package with __main__.py. A module that lost its command line in
# a move (week1_cuda_python.sanitize, now `python -m course sanitize week1`) imports, exits 0 and
# prints nothing, so the GPU check script that called it saw no error and no report.
PYTHON_M = re.compile(r"python3? -m ([A-Za-z_][\w.]*)")
COMMAND_SUFFIXES = (".py", ".sh", ".md", ".ipynb", ".toml", ".txt", ".cfg", ".yml", ".yaml")


def _local_tops() -> set:
    return {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} \
        | {p.stem for p in ROOT.glob("*.py")}


def _runs_as_main(module: str) -> bool:
    base = ROOT.joinpath(*module.split("."))
    if (base / "__main__.py").is_file():
        return True
    path = base.with_suffix(".py")
    return path.is_file() and re.search(r"__name__\s*==\s*['\"]__main__['\"]", path.read_text()) is not None


def test_every_python_m_command_names_a_module_with_a_command_line():
    tops, bad = _local_tops(), []
    # results/ keeps each record as it ran (its command line then), so the rule reads everything else
    skip = {".git", ".devwheels", "__pycache__", "node_modules", "results"}
    for path in sorted(ROOT.rglob("*")):
        if not path.is_file() or path.suffix not in COMMAND_SUFFIXES or skip & set(path.relative_to(ROOT).parts):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for module in PYTHON_M.findall(line):
                module = module.rstrip(".")
                if module.split(".")[0] in tops and not _runs_as_main(module):
                    bad.append(f"{path.relative_to(ROOT)}:{number}: python -m {module}")
    assert not bad, "these commands name a module with no command line (no __main__ guard):\n" + "\n".join(bad)


# --- every timing row says whether the host paced it ----------------------------------------------
# time_gpu knows whether a loop was host-bound (course/bench_timing.py); a row that keeps only the
# median drops that. A function that times (one of these, or a helper of its module that calls one)
# builds its rows' timing fields with course.bench.timing_fields (interleaved rounds: Rounds.row_fields).
# LoopClock (course/bench_clock.py) is the same clock for a loop its caller drives (training, decoding).
TIMERS = {"time_gpu", "time_call", "time_with_memory", "time_host", "time_wall", "interleaved_rounds", "LoopClock"}
ROW_HELPERS = {"timing_fields", "row_fields", "rounds_fields"}
# Functions that time but build no row: the ceilings (a 1 GiB copy, a 4096^3 matmul: never host-bound);
# the capstone Trainer's per-step log records (each group's Timing, with its flag, is kept in Trainer.timings).
NOT_ROWS = {"course/bench.py": {"copy_bandwidth_gbps", "matmul_tflops"}, "capstone/train.py": {"run"}}


def _call_name(node) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def _calls(node) -> set:
    return {_call_name(n) for n in ast.walk(node) if isinstance(n, ast.Call)}


def _functions(tree) -> list:
    """The module's functions and methods (a nested def or lambda belongs to the one around it)."""
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append(node)
        elif isinstance(node, ast.ClassDef):
            found += [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return found


def timing_row_faults(source: str, where: str = "") -> list[str]:
    """Where a function that times builds an "ms" row without timing_fields, or reads `.median_ms`
    and never calls timing_fields: the places a host-bound time would lose its flag."""
    functions = _functions(ast.parse(source))
    timers, grew = set(TIMERS), True
    while grew:  # a local helper that times is a timer to its callers
        grew = False
        for f in functions:
            if f.name not in timers and _calls(f) & timers:
                timers.add(f.name)
                grew = True
    faults = []
    for f in functions:
        if f.name in TIMERS or f.name in NOT_ROWS.get(where, ()) or not _calls(f) & timers:
            continue
        for node in ast.walk(f):
            if not isinstance(node, ast.Dict):
                continue
            ms = [v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value == "ms"]
            splats = [v for k, v in zip(node.keys, node.values) if k is None]
            if ms and not (isinstance(ms[0], ast.Constant) and ms[0].value is None) \
                    and not any(isinstance(v, ast.Call) and _call_name(v) in ROW_HELPERS for v in splats):
                faults.append(f"{where}:{node.lineno} {f.name}: an 'ms' row without **timing_fields(timing)")
        reads = [n.lineno for n in ast.walk(f) if isinstance(n, ast.Attribute) and n.attr == "median_ms"]
        if reads and not _calls(f) & ROW_HELPERS:
            faults.append(f"{where}:{reads[0]} {f.name}: reads .median_ms of a timing and never calls timing_fields")
    return faults


def test_the_timing_row_check_catches_a_bench_that_keeps_only_the_ms():
    forgot = ("def sweep():\n    t = bench.time_gpu(f, [()])\n    return [{'n': 1, 'ms': t.median_ms}]\n")
    helper = ("def _ms(fn):\n    return bench.time_gpu(fn, [()]).median_ms\n\n"
              "def sweep():\n    print(_ms(f))\n")
    kept = ("def sweep():\n    t = bench.time_gpu(f, [()])\n    row = {'n': 1, **bench.timing_fields(t)}\n"
            "    print(t.median_ms, bench.ms_cell(row))\n")
    assert len(timing_row_faults(forgot)) == 2  # the row, and the bare read
    assert timing_row_faults(helper)  # the helper drops the flag where it returns the bare ms
    assert timing_row_faults(kept) == []


def test_every_timing_row_carries_the_host_bound_flag():
    faults = []
    for folder in _lesson_dirs() + [ROOT / "course", ROOT / "classroom", ROOT / "tools"]:
        for path in _python_files(folder):
            faults += timing_row_faults(path.read_text(), str(path.relative_to(ROOT)))
    assert not faults, ("rows built from time_gpu/time_call results must take their timing fields from "
                        "course.bench.timing_fields (host_bound, host_ms, graphed_ms beside ms):\n" + "\n".join(faults))
