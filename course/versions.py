"""One version set: the torch and Triton installed here against those the GPU results were measured with.

    python -m course versions            print the installed versions and the measured ones
    python -m course versions --check    ...and fail (exit 1) if torch or triton differ
    python -m course versions --newest   the newest torch/triton CI tests, as pip pins

The supported range (SUPPORTED below): from the oldest torch/triton the course is tested with,
whose PyPI build runs on a CUDA 12 driver, up to the newest on PyPI when it was last checked.
`python -m course info`, `versions` and every notebook's set-up cell say where the installed pair
stands: measured (the results' versions), tested (an end of the range), untested inside the
range, or outside it. Library version differences the course works around live here too.

The measured versions are the `machine` fields (written by `course.runtime.describe()`) of the
newest results record, by its `date`, across every week's `results/*.json` (course/weeks.py).
CI runs the check right after installing from PyPI, so the course is tested with the versions it
is measured with.

Versions are compared by their public part: `2.11.0+cu130` (the CUDA build measured on the GPU)
and `2.11.0` (a CPU build, or the same wheel's metadata) are the same release of torch; the local
suffix after `+` names only the build, whose kernels Triton does not use in simulation.
"""
from __future__ import annotations

import functools
import json
import re
from datetime import datetime
from importlib import metadata
from pathlib import Path

from course import weeks

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("torch", "triton")                      # must equal the measured ones
SHOWN = ("torch", "triton", "numba", "numba_cuda", "numpy")  # printed beside them
DISTRIBUTIONS = {"numba_cuda": "numba-cuda"}       # describe()'s key -> the name pip knows


# The supported range: each end is a torch release and the triton its PyPI wheel pins.
OLDEST = {"torch": "2.9.1", "triton": "3.5.1"}
OLDEST_WHY = ("its PyPI wheel is built for CUDA 12.8, so a CUDA 12 driver runs it (PyPI's torch 2.11 and "
              "newer are CUDA 13 builds, which need a driver >= 580). Every lesson's quick selection ran "
              "with it when the range was set (2026-12-06), not in every CI run. Older releases are not tested")
NEWEST = {"torch": "2.15.0", "triton": "3.9.0"}  # CI's second venv installs exactly these (.ci/run)
NEWEST_WHY = ("the newest on PyPI when last checked (2026-12-06); CI runs every lesson's quick selection "
              "with it. A newer release is untested until NEWEST is moved (one line, here)")
TESTED = ((OLDEST, "every lesson's quick selection ran with it when the range was set, not in every CI run"),
          (NEWEST, "CI runs every lesson's quick selection with it"))  # and the measured versions (CI's main run)


def release(version: str | None) -> tuple[int, ...] | None:
    """'2.15.0+cu130' -> (2, 15, 0); '2.16.0.dev20261201' -> (2, 16, 0); '3.9' -> (3, 9, 0);
    None if unreadable."""
    found = re.match(r"\s*(\d+(?:\.\d+)*)", str(version or ""))
    if not found:
        return None
    parts = tuple(int(part) for part in found.group(1).split("."))[:3]
    return parts + (0,) * (3 - len(parts))


def installed_version(name: str) -> str | None:
    """The installed version of a distribution (None if absent), without importing it."""
    try:
        return metadata.version(DISTRIBUTIONS.get(name, name))
    except metadata.PackageNotFoundError:
        return None


def range_text() -> str:
    return (f"torch {OLDEST['torch']} (triton {OLDEST['triton']}) to torch {NEWEST['torch']} "
            f"(triton {NEWEST['triton']})")


def support(have: dict | None = None, measured: dict | None = None) -> tuple[str, str]:
    """Where the installed torch/triton stand: (status, the sentence a learner reads).

    status: 'measured' (the versions results/ was measured with), 'tested' (an end of the
    range), 'untested' (inside the range, not run by CI), 'outside' (older or newer), 'absent'.
    """
    have = have if have is not None else {name: installed_version(name) for name in ("torch", "triton")}
    if not have.get("torch") or not have.get("triton"):
        missing = " and ".join(name for name in ("torch", "triton") if not have.get(name))
        return "absent", f"{missing} not installed: the course needs both ({range_text()})"
    pair = f"torch {have['torch']} with triton {have['triton']}"
    outside = []
    for name in ("torch", "triton"):
        version = release(have[name])
        if version is None:
            outside.append(f"{name} {have[name]} is not a version this course can read")
        elif not release(OLDEST[name]) <= version <= release(NEWEST[name]):
            outside.append(f"{name} {have[name]} is {'older' if version < release(OLDEST[name]) else 'newer'} "
                           f"than the supported {OLDEST[name]}..{NEWEST[name]}")
    if outside:
        return "outside", (f"{pair}: OUTSIDE the supported range ({range_text()}): " + "; ".join(outside) +
                           ". Lessons may fail for that reason alone; see README, 'Which PyTorch'.")
    same = lambda ref: all(public(have[name]) == public(ref.get(name)) for name in ("torch", "triton"))  # noqa: E731
    if measured and same(measured):
        return "measured", f"{pair}: the versions the course's GPU results were measured with (supported)"
    for ref, how in TESTED:
        if same(ref):
            return "tested", f"{pair}: an end of the supported range ({range_text()}); {how}"
    return "untested", (f"{pair}: inside the supported range ({range_text()}) but not itself tested "
                        f"(CI runs the measured versions and torch {NEWEST['torch']})")


def support_line(root: Path = ROOT) -> str:
    """One line for `course info` and the notebooks' set-up cell."""
    try:
        measured = newest_record(root)[1]["machine"]
    except ValueError:
        measured = None
    return "versions: " + support(measured=measured)[1]


# ------------------------------------------------ library differences inside the range (one place)
@functools.cache
def interpreter_descriptor_limitation() -> str | None:
    """Why tensor-descriptor (TMA) kernels cannot take every aligned view in this simulation, or None.

    Triton 3.5's interpreter checks a descriptor's strides as if they counted bytes: a row stride
    must be a multiple of 16 ELEMENTS ("stride must be 16-byte aligned" for rows of 20 float32,
    80 bytes, which a GPU takes). Triton 3.6 checks bytes, as the GPU and Triton's own host-side
    TensorDescriptor do. None on a GPU and from Triton 3.6.

    Answered once a process and kept (the backend and the installed Triton cannot change while it
    runs): TMA launchers ask before EVERY launch (`refuse_unsimulated_descriptors`), and reading
    Triton's version from its package metadata opens and parses its METADATA file, which took
    longer than the GPU time of the fused linear it guarded (week 4's note on the fused linear, "A
    file read on every launch"). On a GPU nothing is read at all.
    """
    from course import runtime

    if runtime.on_gpu():
        return None
    version = installed_version("triton")
    if release(version) is None or release(version) >= (3, 6, 0):
        return None
    return (f"Triton {version}'s interpreter checks tensor-descriptor strides in elements, not bytes "
            "(fixed in Triton 3.6): a row stride that is not a multiple of 16 elements is refused in "
            "simulation. On a GPU this Triton runs them; in simulation, from Triton 3.6")


def refuse_unsimulated_descriptors(what: str, instead: str, *tensors_and_strides) -> None:
    """RuntimeError before a launch whose descriptors this simulation cannot take (see
    interpreter_descriptor_limitation); `tensors_and_strides`: the strides, in elements, of each
    descriptor's dimensions (the last one is 1)."""
    problem = interpreter_descriptor_limitation()
    if problem is None:
        return
    bad = [tuple(strides) for strides in tensors_and_strides if any(int(st) % 16 for st in list(strides)[:-1])]
    if bad:
        raise RuntimeError(f"{what}: {problem}. Strides {bad[0]} here; {instead}")


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
    found = {name: installed_version(name) for name in SHOWN}
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
    print(support({name: have.get(name) for name in ("torch", "triton")}, measured)[1])
    if not check:
        return 0
    if problems:
        print("version check FAILED (compared without the +build label): " + "; ".join(problems) +
              ". Pin requirements.txt to the measured versions, or re-measure results/ with the new ones.")
        return 1
    print("version check: torch and triton equal the measured ones (compared without the +build label)")
    return 0
