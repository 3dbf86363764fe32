"""How long each week's tests take on the GPU: `tests/timings_gpu.json`, made from a timing log.

`pytest -p pytest_timelog` (the plugin in the GPU machine's shared folder) writes one END line
per test; `python -m course timings LOG --write` sums them per week into the record that
README's "How long the tests take" section is generated from. The sum of the test durations is
the week's serial time (one process running the week's tests one after another; measured inside
an `-n 14` run, where 14 processes share the GPU and the host's compilers, so an upper bound).
Under xdist both the controller and the worker may write a test's END line: each test is counted
once, at its longest.

The measured serial time is better than that bound: `tools/gpu_week_times.sh` runs each week's
default tests in its own pytest process (no xdist), all weeks side by side on the GPU machine, each
with its own timing log, and writes each process's wall time to `walls.txt`; `--serial DIR` reads
them (`serial_<week>.txt`, `walls.txt`) and the table then shows each week's own wall time.
"""
from __future__ import annotations

import collections
import datetime as _dt
import json
import re
from pathlib import Path

TIMINGS_FILE = "tests/timings_gpu.json"
ROOT = Path(__file__).resolve().parent.parent


def parse(log_text: str) -> dict:
    """{node id: seconds} from a timing log's END lines."""
    durations: dict = {}
    for line in log_text.splitlines():
        parts = line.split(" ", 5)
        if len(parts) == 6 and parts[0] == "END":
            node = parts[5].strip()
            durations[node] = max(durations.get(node, 0.0), float(parts[4]))
    return durations


def per_week(durations: dict) -> dict:
    """{"week1": {"seconds", "tests", "slowest": [[node, s], ...]}, ..., "kit": ...}."""
    groups: dict = collections.defaultdict(list)
    for node, seconds in durations.items():
        match = re.match(r"tests/(\w+)/", node)
        groups[match.group(1) if match else "kit"].append((node, seconds))
    return {week: {"seconds": round(sum(s for _, s in rows), 1), "tests": len(rows),
                   "slowest": [[n, round(s, 1)] for n, s in sorted(rows, key=lambda r: -r[1])[:5]]}
            for week, rows in sorted(groups.items())}


def read_walls(text: str) -> dict:
    """{week: (exit status, wall seconds)} from walls.txt lines "week1 rc=0 wall=179"."""
    walls = {}
    for line in text.splitlines():
        match = re.match(r"(\w+) rc=(\d+) wall=(\d+(?:\.\d+)?)", line.strip())
        if match:
            walls[match.group(1)] = (int(match.group(2)), float(match.group(3)))
    return walls


def serial_weeks(folder: Path) -> dict:
    """Each week's own serial run: {week: {"wall_s", "exit", "seconds", "tests", "slowest"}}."""
    walls = read_walls((folder / "walls.txt").read_text())
    weeks = {}
    for week, (status, wall) in sorted(walls.items()):
        log = folder / f"serial_{week}.txt"
        summed = per_week(parse(log.read_text())) if log.is_file() else {}
        rows = summed.get(week) or next(iter(summed.values()), {"seconds": 0.0, "tests": 0, "slowest": []})
        weeks[week] = {"wall_s": wall, "exit": status, **rows}
    return weeks


def record(log_text: str, *, gpu: str, command: str, wall_s: float, versions: dict,
           serial: dict | None = None, serial_command: str = "") -> dict:
    weeks = serial if serial else per_week(parse(log_text))
    rec = {"date": _dt.date.today().isoformat(), "gpu": gpu, "command": command, "wall_s": wall_s,
           **versions, "weeks": weeks}
    if serial:
        rec["serial_command"] = serial_command
    return rec


def summary_counts(pytest_output: str) -> dict:
    """{"passed": n, "failed": n, "skipped": n, ...} from pytest's last summary line ({} if none)."""
    for line in reversed(pytest_output.splitlines()):
        found = re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)", line)
        if found:
            return {kind: int(n) for n, kind in found}
    return {}


def with_suite(rec: dict, log_text: str, *, command: str, wall_s: float, pytest_output: str, cache: str,
               date: str | None = None) -> dict:
    """The record with its whole-suite run (xdist) replaced, the per-week serial runs kept."""
    tests = len(parse(log_text))
    return {**rec, "command": command, "wall_s": wall_s,
            "suite": {"date": date or _dt.date.today().isoformat(), "tests_timed": tests, "cache": cache,
                      **summary_counts(pytest_output)}}


def with_other_gpu(rec: dict, *, gpu: str, versions: dict, command: str, wall_s: float, pytest_output: str,
                   cache: str, date: str | None = None) -> dict:
    """The record with a whole-suite run on ANOTHER GPU added (or replaced) under "other_gpus":
    the per-week table stays the reference GPU's; this says the same suite ran green elsewhere.
    (A GPU whose name differs from the tuned one runs every fallback config for real.)"""
    others = dict(rec.get("other_gpus", {}))
    others[gpu] = {"date": date or _dt.date.today().isoformat(), "command": command, "wall_s": wall_s,
                   "cache": cache, **versions, **summary_counts(pytest_output)}
    return {**rec, "other_gpus": others}


def other_gpus_sentence(rec: dict) -> str:
    """'The same suite on an NVIDIA H200 ...: 4,639 passed, 0 failed, 21 skipped in 4.5 min.' ('' if none)."""
    parts = []
    for gpu, run in sorted(rec.get("other_gpus", {}).items()):
        counts = ", ".join(f"{run.get(k, 0):,} {k}" for k in ("passed", "failed", "skipped"))
        parts.append(f"The same whole-suite command on an {gpu} on {run['date']} (torch {run['torch']}, triton "
                     f"{run['triton']}, Triton's cache {run['cache']}): {run['wall_s'] / 60:.1f} min of wall time, {counts}.")
    return (" ".join(parts) + " ") if parts else ""


def verified_gpus(root: Path = ROOT) -> list[str]:
    """'NVIDIA H100 80GB HBM3 (torch 2.11.0+cu130, triton 3.6.0)' for each GPU the suite ran on, reference first."""
    rec = load(root)
    if rec is None:
        return []
    rows = [f"{rec['gpu']} (torch {rec['torch']}, triton {rec['triton']})"]
    rows += [f"{gpu} (torch {run['torch']}, triton {run['triton']})" for gpu, run in sorted(rec.get("other_gpus", {}).items())]
    return rows


def load(root: Path = ROOT) -> dict | None:
    path = root / TIMINGS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def section(root: Path = ROOT) -> str:
    rec = load(root)
    if rec is None:
        return "\n_Not measured yet: run the suite on a GPU with `-p pytest_timelog`, then `python -m course timings`._\n"
    if "serial_command" in rec:
        return _serial_section(rec)
    lines = ["\n| tests | serial time on the GPU | tests run | slowest test |", "|---|---|---|---|"]
    for week, w in rec["weeks"].items():
        slowest = w["slowest"][0] if w["slowest"] else ["-", 0]
        label = "the kit (`tests/*.py`)" if week == "kit" else f"`tests/{week}`"
        lines.append(f"| {label} | {w['seconds'] / 60:.1f} min | {w['tests']:,} | "
                     f"`{slowest[0].split('::', 1)[-1][:60]}` ({slowest[1]:.0f} s) |")
    total = sum(w["seconds"] for w in rec["weeks"].values())
    lines.append(f"\nThe default run (the tests marked slow left out), measured on {rec['date']} on an "
                 f"{rec['gpu']} (torch {rec['torch']}, triton {rec['triton']}) by `{rec['command']}`: "
                 f"{rec['wall_s'] / 60:.1f} min of wall time, {total / 60:.0f} min of test time. A week's "
                 "serial time is the sum of its tests' durations inside that parallel run (14 processes "
                 f"sharing one GPU and the host's compilers: an upper bound). Every week's five slowest "
                 f"tests: `{TIMINGS_FILE}`.")
    return "\n".join(lines) + "\n"


def _suite_sentence(rec: dict) -> str:
    suite = rec.get("suite")
    if not suite:
        return f"The whole suite, `{rec['command']}`, right after: {rec['wall_s'] / 60:.1f} min of wall time. "
    counts = ", ".join(f"{suite.get(k, 0):,} {k}" for k in ("passed", "failed", "skipped"))
    return (f"The whole suite, `{rec['command']}`, on {suite['date']} on a fresh machine (Triton's cache: "
            f"{suite['cache']}): {rec['wall_s'] / 60:.1f} min of wall time, {counts}. ")


def _serial_section(rec: dict) -> str:
    lines = ["\n| tests | serial wall time on the GPU | tests run | slowest test |", "|---|---|---|---|"]
    for week, w in rec["weeks"].items():
        slowest = w["slowest"][0] if w["slowest"] else ["-", 0]
        label = "the kit (`tests/*.py`)" if week == "kit" else f"`tests/{week}`"
        status = "" if w["exit"] == 0 else f" (exit {w['exit']})"
        lines.append(f"| {label} | {w['wall_s'] / 60:.1f} min{status} | {w['tests']:,} | "
                     f"`{slowest[0].split('::', 1)[-1][:60]}` ({slowest[1]:.0f} s) |")
    lines.append(f"\nThe default run (the tests marked slow left out), measured on {rec['date']} on an {rec['gpu']} "
                 f"(torch {rec['torch']}, triton {rec['triton']}). Each week: `{rec['serial_command']}`, its own "
                 "pytest process, no xdist, from a cold Triton cache (a fresh machine), every week's process "
                 "started at once beside the others (16 host cores, one GPU: an upper bound on a lone run). "
                 + (_suite_sentence(rec) if rec.get("wall_s") else "The whole suite with xdist was not timed in this run. ")
                 + other_gpus_sentence(rec)
                 + "An exit status other than 0 is a failed test in that run (the table's note says which). "
                 f"Every week's five slowest tests: `{TIMINGS_FILE}`.")
    return "\n".join(lines) + "\n"
