"""`python -m course progress`: where every exercise stands, in one table, and what to run next.

The test files of the stubs you changed run quietly (`--impl=exercises`; simulation on a CPU, the
GPU where there is one) with the quick selection of classroom/pytest_lesson.py: the first (smallest)
case of each test function, and a file stops at its first failure; a stub as the course ships it is
not run (CI checks that its tests fail). The weeks, and parts of a week, run side by side (one
pytest per CPU core). Each exercise is then
* done: every selected test passed (or was skipped: it needs a GPU);
* not started: the stub is as the course ships it, and its tests fail with 'not implemented yet';
* in progress: you changed it and a hole still raises 'not implemented yet';
* failing: the first failing test and its one-line reason.
`pytest tests/<week>/test_<lesson>.py --impl=exercises` runs that lesson's full tests.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from classroom import hints, lesson_files, pytest_lesson, regions, stages, stubs

ROOT = lesson_files.ROOT


def lessons(package_dir: Path, root: Path = ROOT) -> list[tuple[str, Path, Path]]:
    """(lesson, stub, test file) of a week, in the order the week's README teaches them."""
    found = []
    for stub in sorted((package_dir / "exercises").rglob("*.py")):  # lesson folders too (exercises/norms/)
        if stub.name == "__init__.py" or not is_exercise(stub):
            continue
        test = root / "tests" / lesson_files.week_of(package_dir) / f"test_{stub.stem}.py"
        if test.exists():
            found.append((stub.stem, stub, test))
    for stub in sorted(package_dir.glob("*/exercises/*.py")):  # a lesson folder's (week4_triton_dl/attention/)
        if stub.name == "__init__.py" or not is_exercise(stub):
            continue
        test = lesson_files.test_file(stub.parent.parent / stub.name, root)
        if test is not None:
            found.append((f"{stub.parent.parent.name}/{stub.stem}", stub, test))
    readme = package_dir / "README.md"
    text = readme.read_text() if readme.exists() else ""

    def order(item):  # `rmsnorm.py`, or a lesson folder's `norms/rmsnorm.py`
        found = [at for at in (text.find(f"`{item[0]}.py`"), text.find(f"/{item[0]}.py`")) if at >= 0]
        return (min(found) if found else len(text) + 1, item[0])
    return sorted(found, key=order)


def is_exercise(stub: Path) -> bool:
    """False for a stub whose docstring starts 'Not an exercise' (machinery the week re-exports, such
    as week 3's matmul_fp8.py): it has nothing to fill, so it is never done nor not started."""
    try:
        doc = ast.get_docstring(ast.parse(stub.read_text())) or ""
    except SyntaxError:  # a learner's half-written stub is still an exercise
        return True
    return not doc.lower().startswith("not an exercise")


def companions(stub: Path, test: Path, root: Path = ROOT) -> list[Path]:
    """The other stubs `test` grades: modules a lesson is split into, with no test file of their own
    (exercises/norms/layernorm_backward.py and column_sums.py, graded by tests/week4/test_layernorm.py)."""
    found = []
    for other in sorted(stub.parent.glob("*.py")):
        solution = lesson_files.solution_of(other)
        if other == stub or other.name == "__init__.py" or not solution.exists() or \
                (test.parent / f"test_{other.stem}.py").exists():
            continue
        if lesson_files.test_file(solution, root) == test:
            found.append(other)
    return found


def as_shipped(stubs: list[Path], root: Path = ROOT) -> bool | None:
    """Are these stubs all as the course ships them (None: one has no shipped copy to compare)?"""
    texts = [pristine(stub, root) for stub in stubs]
    if any(text is None for text in texts):
        return None
    return all(stub.read_text() == text for stub, text in zip(stubs, texts))


def pristine(stub: Path, root: Path = ROOT) -> str | None:
    """The stub as the course ships it: generated from its solution, or git's committed copy."""
    solution = stub.parent.parent / stub.name
    if solution.exists() and regions.is_marked(solution):
        return stubs.generate(solution, root)
    if shutil.which("git") and (root / ".git").exists():
        rel = stub.relative_to(root).as_posix()
        proc = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=root, capture_output=True, text=True)
        if proc.returncode == 0:
            return proc.stdout
    return None


def run_week(tests: list[Path], impl: str, root: Path = ROOT, timeout: float = 600) -> tuple[list[dict], float, str]:
    """(outcomes, seconds, trouble) of one quiet pytest run of `tests` with the quick selection."""
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.jsonl"
        env = {**os.environ, pytest_lesson.RESULTS_ENV: str(results), pytest_lesson.SMOKE_ENV: "1"}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "classroom.pytest_lesson",
                   f"--impl={impl}", *(t.relative_to(root).as_posix() for t in tests)]
        try:
            proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] if proc.returncode not in (0, 1) else []
        except subprocess.TimeoutExpired:
            tail = [f"stopped after {timeout:.0f} s"]
        return pytest_lesson.read_results(results), time.time() - started, " ".join(tail)


def _chunks(per_week: list[list[Path]], jobs: int) -> list[tuple[int, list[Path]]]:
    """(week index, test files) to run, about `jobs` of them: a week's files split by its share."""
    total = sum(len(files) for files in per_week)
    out = []
    for w, files in enumerate(per_week):
        if not files:
            continue
        n = max(1, min(len(files), round(jobs * len(files) / max(total, 1))))
        out += [(w, files[i::n]) for i in range(n)]
    return out


def status(records: list[dict], unchanged: bool | None) -> tuple[str, str]:
    failed = [r for r in records if r["outcome"] in ("failed", "error")]
    if not records:
        return "no result", ""
    if not failed:
        return "done", ""
    real = [r for r in failed if stubs.NOT_IMPLEMENTED not in r["message"]]
    if not real:
        return ("not started" if unchanged in (True, None) else "in progress"), failed[0]["message"]
    first = real[0]  # a wrong result says more than a hole still open
    return "failing", f"{first['nodeid'].split('::', 1)[-1]}: {first['message']}"


def _holes(stub: Path, root: Path) -> str:
    """'holes: a, b (about N lines)' of a generated stub, from its solution's markers."""
    solution = stub.parent.parent / stub.name
    if not (solution.exists() and regions.is_marked(solution)):
        return "(as shipped)"
    marked = [r for r in regions.parse_regions(solution.read_text().splitlines(), "#") if r.kind == "EXERCISE"]
    text = solution.read_text()
    scopes = stubs.code_scopes(__import__("ast").parse(text))
    names = []
    for r in marked:
        scope = stubs.innermost_scope(scopes, r.begin + 1)
        names.append(scope[2] if scope else "module level")
    return f"holes: {', '.join(dict.fromkeys(names))} (about {sum(r.size for r in marked)} lines)"


def _fit(text: str, width: int) -> str:
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= width else text[:width - 3] + "..."


def main(args) -> int:
    root = Path(args.root) if getattr(args, "root", None) else ROOT
    impl = "solutions" if args.solutions else "exercises"
    weeks = []
    for package_dir in lesson_files.lesson_dirs(root):
        short = lesson_files.week_of(package_dir)
        if args.weeks and short not in args.weeks and package_dir.name not in args.weeks:
            continue
        found = lessons(package_dir, root)
        if found:
            weeks.append((short, found))
    if not weeks:
        print("no exercises found" + (f" for {' '.join(args.weeks)}" if args.weeks else ""))
        return 1
    from course import runtime

    where = "the GPU" if runtime.on_gpu() else "simulation on the CPU"
    print(f"Checking {sum(len(f) for _, f in weeks)} exercises in {len(weeks)} "
          f"{'week' if len(weeks) == 1 else 'weeks'} ({where}; the first, smallest case of each test"
          f"{'; the solutions' if args.solutions else ''})...", flush=True)
    # A stub as the course ships it is not started (CI checks that its tests fail with 'not implemented
    # yet'): only the stubs you changed are run, unless --all.
    shipped = {}
    if impl == "exercises" and not args.all:
        for _, found in weeks:
            for _, stub, test in found:
                shipped[stub] = as_shipped([stub, *companions(stub, test, root)], root) is True
    to_run = [[t for _, stub, t in found if not shipped.get(stub)] for _, found in weeks]
    jobs = args.jobs or os.cpu_count() or 1
    chunks = _chunks(to_run, jobs)  # one pytest per chunk of a week's test files: imports paid once each
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_week, files, impl, root, args.timeout) for _, files in chunks]
        for finished, future in enumerate(as_completed(futures), 1):  # a line per run: the wait is minutes
            _, seconds, _ = future.result()
            week = weeks[chunks[futures.index(future)][0]][0]
            print(f"  [{finished}/{len(futures)}] {week}: {len(chunks[futures.index(future)][1])} test files "
                  f"checked ({seconds:.0f} s)", flush=True)
        done = [future.result() for future in futures]
    runs = []
    for w in range(len(weeks)):
        mine = [result for (week, _), result in zip(chunks, done) if week == w]
        runs.append(([r for records, _, _ in mine for r in records], max((s for _, s, _ in mine), default=0.0),
                     " ".join(t for _, _, t in mine if t)))
    width = shutil.get_terminal_size((120, 20)).columns
    name_w = max(len(name) + 4 * stages.is_staged(stub) for _, found in weeks for name, stub, _ in found) + 2
    next_command, working, counts = None, None, {}
    for (short, found), (records, seconds, trouble) in zip(weeks, runs):
        print(f"\n{short}" + (f" ({seconds:.0f} s)" if seconds else "") + (f": {trouble}" if trouble else ""))
        for name, stub, test in found:
            rel = test.relative_to(root).as_posix()
            stubs = [stub, *companions(stub, test, root)]
            if stages.is_staged(stub):  # a lesson in stages: one line per stage (classroom/stages.py)
                for label, state, detail, command in stages.progress_rows(name, stub, test, records,
                                                                          bool(shipped.get(stub)), impl, status, root):
                    counts[state] = counts.get(state, 0) + 1
                    if state in ("failing", "in progress", "no result") and working is None:
                        working = f"{command} -x"
                    if state == "not started" and next_command is None:
                        next_command = command
                    line = f"  {label:<{name_w}}{state:<13}"
                    print(line + _fit(detail, max(20, width - len(line) - 1)) if detail else line)
                continue
            if shipped.get(stub):
                state, detail = "not started", "; ".join((f"{s.name} " if s != stub else "") + _holes(s, root)
                                                        for s in stubs)
            else:
                mine = [r for r in records if r["nodeid"].split("::", 1)[0] == rel]
                unchanged = as_shipped(stubs, root) if impl == "exercises" else None
                state, detail = status(mine, unchanged)
            counts[state] = counts.get(state, 0) + 1
            if state in ("failing", "in progress", "no result") and working is None:
                working = f"pytest {rel} --impl={impl} -x"  # what you are working on comes first
            if state == "not started" and next_command is None:
                next_command = f"pytest {rel} --impl={impl}"
            used = hints.used(f"{short}/{name}", root)  # `course hint` keeps what it showed
            if used:
                detail = f"{used} hint{'s' if used != 1 else ''} used" + (f"; {detail}" if detail else "")
            line = f"  {name:<{name_w}}{state:<13}"
            print(line + _fit(detail, max(20, width - len(line) - 1)) if detail else line)
    summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    print(f"\n{summary}.")
    next_command = working or next_command
    if next_command:
        print(f"Next: {next_command}")
    else:
        print("Every exercise passes its quick tests: run `pytest tests/<week> --impl=exercises` for the full ones.")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("progress", help="where every exercise stands (done / failing / not started) and what to run next")
    p.add_argument("weeks", nargs="*", help="weeks to check (default: all), e.g. week3 week4")
    p.add_argument("--jobs", type=int, default=0, help="pytest processes at once (default: one per CPU core)")
    p.add_argument("--timeout", type=float, default=600, help="seconds a week may take")
    p.add_argument("--all", action="store_true", help="also run the tests of stubs you have not changed")
    p.add_argument("--solutions", action="store_true", help="check the solutions instead (the course's own test)")
    p.add_argument("--root", help=__import__("argparse").SUPPRESS)
