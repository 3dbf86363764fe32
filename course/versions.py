"""One version set: the torch and Triton installed here against those the GPU results were measured with.

    python -m course versions            print the installed versions and the measured ones
    python -m course versions --check    ...and fail (exit 1) if torch or triton differ

The measured versions are the `machine` fields (written by `course.runtime.describe()`) of the
newest results record, by its `date`, across every week's `results/*.json` (course/weeks.py).
CI runs the check right after installing from PyPI, so the course is tested with the versions it
is measured with.

Versions are compared by their public part: `2.11.0+cu130` (the CUDA build measured on the GPU)
and `2.11.0` (a CPU build, or the same wheel's metadata) are the same release of torch; the local
suffix after `+` names only the build, whose kernels Triton does not use in simulation.
"""
from __future__ import annotations

import json
from datetime import datetime
from importlib import metadata
from pathlib import Path

from course import weeks

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("torch", "triton")                      # must equal the measured ones
SHOWN = ("torch", "triton", "numba", "numba_cuda", "numpy")  # printed beside them
DISTRIBUTIONS = {"numba_cuda": "numba-cuda"}       # describe()'s key -> the name pip knows


def public(version: str | None) -> str | None:
    """'2.11.0+cu130' -> '2.11.0': the release, without the local build label."""
    return None if version is None else str(version).split("+", 1)[0].strip()


def _date(record: dict) -> datetime:
    text = str(record.get("date", "")).replace(" UTC", "").strip()
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            pass
    raise ValueError(f"unreadable date {record.get('date')!r}")


def measured_records(root: Path = ROOT) -> list[tuple[Path, dict]]:
    """Every results record measured on a GPU that names its versions: (path, record)."""
    found = []
    folders = [root / week.package / "results" for week in weeks.all_weeks()]
    for folder in folders:
        for path in sorted(folder.glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            machine = record.get("machine") if isinstance(record, dict) else None
            if (isinstance(machine, dict) and machine.get("torch") and record.get("date")
                    and not record.get("simulated")):
                found.append((path, record))
    return found


def newest_record(root: Path = ROOT) -> tuple[Path, dict]:
    """The newest measured record, by its `date` (ValueError if there is none)."""
    records = measured_records(root)
    if not records:
        raise ValueError(f"no measured results/*.json with `machine` and `date` under {root}")
    return max(records, key=lambda item: (_date(item[1]), str(item[0])))


def installed() -> dict[str, str | None]:
    """The versions installed here; torch's as `torch.__version__` says it (with its build label)."""
    found = {}
    for name in SHOWN:
        try:
            found[name] = metadata.version(DISTRIBUTIONS.get(name, name))
        except metadata.PackageNotFoundError:
            found[name] = None
    if found["torch"] is not None:
        import torch  # the metadata says 2.11.0; torch itself says which build (+cu130, +cpu)

        found["torch"] = torch.__version__
    return found


def compare(have: dict, measured: dict) -> list[str]:
    """The CHECKED packages whose public versions differ, as sentences (empty: all equal)."""
    return [f"{name} {have.get(name)} is installed, the results were measured with {measured.get(name)}"
            for name in CHECKED if public(have.get(name)) != public(measured.get(name))]


def report(root: Path = ROOT, check: bool = False, have: dict | None = None) -> int:
    """Print both version sets; with `check`, 1 if torch or triton differ from the measured ones."""
    path, record = newest_record(root)
    measured = record["machine"]
    have = installed() if have is None else have
    where = path.relative_to(root) if path.is_relative_to(root) else path
    print(f"{'':>10}  {'installed':<16}  measured ({where}, {record['date']})")
    for name in SHOWN:
        differs = public(have.get(name)) != public(measured.get(name))
        mark = ("  <- differs" if name in CHECKED else "  (differs; not checked)") if differs else ""
        print(f"{name:>10}  {str(have.get(name)):<16}  {measured.get(name)}{mark}")
    problems = compare(have, measured)
    if not check:
        return 0
    if problems:
        print("version check FAILED (compared without the +build label): " + "; ".join(problems) +
              ". Pin requirements.txt to the measured versions, or re-measure results/ with the new ones.")
        return 1
    print("version check: torch and triton equal the measured ones (compared without the +build label)")
    return 0
