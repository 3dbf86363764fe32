"""Lessons in stages: a big exercise cut into steps, each with its own holes, tests and progress line.

A solution marks each hole with its stage (`# BEGIN EXERCISE [stage 2: online softmax]: ...`, see
classroom/regions.py); the lesson's tests carry `@pytest.mark.stage(2)` and
`pytest tests/<week>/test_<lesson>.py --impl=exercises --stage 2` runs that stage's alone
(tests/conftest.py). A stage's tests call the stage's own kernel or launcher, with what earlier
stages compute taken from torch, so they pass while later stages are still holes.

`python -m course stages [LESSON|WEEK ...]` proves it for every staged lesson: for each stage N, the stub
with stages 1..N filled by the solution (and the later ones still holes) passes stage N's tests,
and stage N + 1's tests fail with 'not implemented yet' on it. `python -m course progress` shows one
line per stage (`progress_rows` below).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from classroom import lesson_files, pytest_lesson, regions, stubs

ROOT = lesson_files.ROOT


def staged_solutions(root: Path = ROOT) -> list[Path]:
    return [p for p in lesson_files.marked_solutions(root) if p.suffix == ".py" and regions.stages(p)]


def _run(solution: Path, through: int, stage: int, root: Path, timeout: float = 900) -> tuple[list[dict], str]:
    """The records of `pytest <lesson's tests> --stage <stage>` on the stub filled through stage `through`."""
    rel = solution.resolve().relative_to(root.resolve())
    module = rel.with_suffix("").as_posix().replace("/", ".")
    test = lesson_files.test_file(solution, root).resolve().relative_to(root.resolve()).as_posix()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / solution.name
        path.write_text(stubs.generate(solution, root, through=through))
        results = Path(tmp) / "results.jsonl"
        env = {**os.environ, pytest_lesson.OVERRIDE_ENV: f"{module}={path}", pytest_lesson.RESULTS_ENV: str(results),
               "COLUMNS": "200"}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "classroom.pytest_lesson",
                   "--impl=solutions", test, "--stage", str(stage)]
        try:
            proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
            tail = " ".join((proc.stdout + proc.stderr).strip().splitlines()[-1:])
        except subprocess.TimeoutExpired:
            tail = "timed out"
        return pytest_lesson.read_results(results), tail


def check_stage(solution: Path, stage: int, last: int, root: Path = ROOT) -> dict:
    """Stage `stage` of a lesson: its tests pass on the stub filled through it, and (before the last
    stage) the next stage's tests fail with 'not implemented yet' there: the stages are independent."""
    started = time.time()
    records, tail = _run(solution, stage, stage, root)
    failed = [r for r in records if r["outcome"] in ("failed", "error")]
    passed = [r for r in records if r["outcome"] == "passed"]
    if not passed or failed:
        first = failed[0] if failed else {"nodeid": "", "message": tail}
        return {"ok": False, "s": time.time() - started, "why": f"stage {stage}'s tests on the stub filled through "
                f"stage {stage}: {len(passed)} passed, {len(failed)} failed: {first['nodeid'].split('::')[-1]}: "
                f"{first['message']}"}
    if stage < last:
        records, tail = _run(solution, stage, stage + 1, root)
        failed = [r for r in records if r["outcome"] in ("failed", "error")]
        if not failed or any(stubs.NOT_IMPLEMENTED not in r["message"] for r in failed):
            return {"ok": False, "s": time.time() - started,
                    "why": f"stage {stage + 1}'s tests on the stub filled through stage {stage} should all fail "
                           f"with '{stubs.NOT_IMPLEMENTED}': " + ("; ".join(r["message"] for r in failed[:1])
                                                                     or f"none failed ({tail})")}
    return {"ok": True, "s": time.time() - started, "why": f"{len(passed)} tests pass"}


def run_stages(root: Path = ROOT, only: list[str] | None = None, jobs: int = 2) -> int:
    """`python -m course stages`: every stage of every staged lesson (or those in `only`)."""
    work = []
    for solution in staged_solutions(root):
        if only and solution.stem not in only and lesson_files.week_of(lesson_files.week_dir_of(solution)) not in only:
            continue
        titles = regions.stages(solution)
        work += [(solution, n, len(titles), title) for n, title in titles.items()]
    if not work:
        print(f"no staged lesson matches {only}" if only else "no lesson is in stages")
        return 2
    print(f"stages: {len(work)} stages, each tested on the stub filled up to it", flush=True)
    bad = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for (solution, n, last, title), result in zip(work, pool.map(lambda w: check_stage(w[0], w[1], w[2], root),
                                                                     work)):
            bad += not result["ok"]
            print(f"{'ok' if result['ok'] else 'FAILED':>7}  {solution.stem} stage {n}/{last} ({title}) "
                  f"{result['s']:6.1f}s  {result['why'][:200]}", flush=True)
    return 1 if bad else 0


# ------------------------------------------------------------------------------ the progress view
def untouched(stub: Path, solution: Path, root: Path = ROOT) -> dict[int, bool]:
    """{stage: are its holes still as the course ships them in `stub`} (each hole's TODO line is there)."""
    text = stub.read_text().splitlines()
    shipped = [line.strip() for line in stubs.generate(solution, root).splitlines()]
    out = {}
    for n in regions.stages(solution):
        todo = [line for line in shipped if line.startswith((f"# TODO (stage {n},", f"// TODO (stage {n},"))]
        out[n] = all(any(line.strip() == t for line in text) for t in todo)
    return out


def _lines(n: int) -> str:
    return "about 1 line" if n == 1 else f"about {n} lines"


def is_staged(stub: Path) -> bool:
    solution = stub.parent.parent / stub.name
    return solution.exists() and solution.suffix == ".py" and regions.is_marked(solution) \
        and bool(regions.stages(solution))


def progress_rows(name: str, stub: Path, test: Path, records: list[dict], shipped: bool, impl: str, status,
                  root: Path = ROOT) -> list[tuple[str, str, str, str]]:
    """(label, state, detail, command) per stage of a staged lesson: `course progress`'s lines.

    A stage is done when its tests pass; not started while its holes are as shipped (whatever the
    later stages' tests say); else in progress or failing, as `status(records, unchanged)` (course/
    progress.py's, passed in: progress imports this module) says of a whole lesson."""
    solution = stub.parent.parent / stub.name
    titles = regions.stages(solution)
    marked = [r for r in regions.parse_regions(solution.read_text().splitlines(), "#") if r.kind == "EXERCISE"]
    fresh = {n: True for n in titles} if shipped else untouched(stub, solution, root)
    rel = test.relative_to(root).as_posix()
    rows = []
    for n, title in titles.items():
        mine = [r for r in records if r.get("stage") == n and r["nodeid"].split("::", 1)[0] == rel]
        size = sum(r.size for r in marked if r.stage == n)
        if shipped:
            state, detail = "not started", f"{title} ({_lines(size)})"
        else:
            state, detail = status(mine, fresh[n])
            if state == "not started":
                detail = f"{title} ({_lines(size)})"
            elif state == "done":
                detail = title
        rows.append((f"{name} {n}/{len(titles)}", state, detail, f"pytest {rel} --impl={impl} --stage {n}"))
    return rows


def main(args) -> int:
    root = Path(args.root) if getattr(args, "root", None) else ROOT
    return run_stages(root, args.lessons or None, jobs=args.jobs)


def add_parser(sub) -> None:
    p = sub.add_parser("stages", help="lessons in stages: each stage's tests pass on the stub filled up to it "
                                      "(later stages still holes), and the next stage's fail with 'not implemented yet'")
    p.add_argument("lessons", nargs="*", help="lessons (backward, softmax) or weeks (week4); default: all")
    p.add_argument("--jobs", type=int, default=2, help="pytest runs at once")
    p.add_argument("--root", help=__import__("argparse").SUPPRESS)
