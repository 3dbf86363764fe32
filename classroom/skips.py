"""What a run without a GPU skips, counted from pytest's own summary and kept in tests/skips_cpu.json.

    python -m course skips pytest.log           fail if the run's skips, passed count or nvcc count
                                                differ from tests/skips_cpu.json
    python -m course skips pytest.log --write   record them there (then `python -m course report`
                                                rewrites README's count)

`pytest.log` is the output of README's test command: pyproject's `-ra` makes pytest end with one
`SKIPPED [N] path:line: reason` line per skipped test function, and a line of totals. CI runs the
check after its CPU run, so README's "N tests need a GPU" is the count of the last run, never typed.
Each reason falls into the first CATEGORIES entry whose pattern it matches.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIPS_FILE = "tests/skips_cpu.json"
GPU_PREFIX = "needs a real NVIDIA GPU ("  # tests/conftest.py's reason for every `gpu`-marked test

# (what the test needs, pattern on the reason). The first match wins: the `gpu` marker's reasons
# first (NEEDS_GPU), grouped by what the hardware provides, then the other hardware and tools.
NEEDS_GPU = (
    ("PyCUDA launches of the CUDA C kernels",
     r"^needs a real NVIDIA GPU \((a PyCUDA launch|.*PyCUDA|CUDA C|page-locked)"),
    ("bf16 (rounding inside kernels, which simulation computes in float32; bf16 autocast)",
     r"^needs a real NVIDIA GPU \(.*\bbf16\b"),
    ("sizes too slow to simulate (long rows and sequences, torch.compile of whole models)",
     r"^needs a real NVIDIA GPU \(.*(minutes|costs \d+-\d+ s)"),
    ("torch.compile of Triton kernels (Dynamo traces real GPU kernels only)",
     r"^needs a real NVIDIA GPU \(.*(wrap_triton|Dynamo|JITFunction)"),
    ("timing, autotuning, profiling, GPU memory",
     r"^needs a real NVIDIA GPU \(.*(\btimes?\b|timing|clock|measur|autotun|trace|timeline|profil|memory)"),
    ("CUDA graphs and streams, NCCL, cuBLAS/cuDNN, CUDA extensions, compute-sanitizer",
     r"^needs a real NVIDIA GPU \("),
)
OTHER_REASONS = (
    ("a newer GPU (fp8, TMA, sm_90a: wgmma)", r"compute capability|needs an sm_90 GPU"),
    ("a tool not installed here (nvcc, ONNX, a C++ compiler)", r"not installed|cannot build"),
    ("GPU machines only: on the CPU the same test checks the CPU's message instead",
     r"^checks the|^what Dynamo|^how the Triton"),
)
CATEGORIES = NEEDS_GPU + OTHER_REASONS
# Skips that are not about hardware: README lists them apart (each one is a thing to fix).
NOT_HARDWARE = (
    ("not hardware: depends on the Triton version", r"make_block_ptr|this Triton|Triton [\d.]+'s interpreter"),
    ("not hardware: not written yet", r"\byet\b"),
)
OTHER = "not hardware: other"

SKIPPED_LINE = re.compile(r"^SKIPPED \[(?P<count>\d+)\] (?P<where>\S+?)(?::\d+)?: (?P<reason>.*)$")
TOTALS_LINE = re.compile(r"^=*\s*(?P<counts>(?:\d+ [a-z]+(?:, )?)+) in (?P<seconds>[\d.]+)s\b")


def category(reason: str) -> str:
    for name, pattern in CATEGORIES + NOT_HARDWARE:
        if re.search(pattern, reason):
            return name
    return OTHER


def parse(text: str) -> dict:
    """{"reasons": [{reason, category, tests, files}], "totals": {...}, "seconds": float|None}."""
    reasons: dict[str, dict] = {}
    totals, seconds = {}, None
    for line in text.splitlines():
        line = line.rstrip()
        match = SKIPPED_LINE.match(line)
        if match:
            entry = reasons.setdefault(match["reason"], {"reason": match["reason"],
                                                         "category": category(match["reason"]),
                                                         "tests": 0, "files": set()})
            entry["tests"] += int(match["count"])
            entry["files"].add(match["where"])
            continue
        match = TOTALS_LINE.match(line.strip("= "))
        if match:
            totals = {word: int(n) for n, word in
                      (part.split(" ", 1) for part in match["counts"].split(", "))}
            seconds = float(match["seconds"])
    listed = sorted(reasons.values(), key=lambda e: (e["category"], -e["tests"], e["reason"]))
    for entry in listed:
        entry["files"] = sorted(entry["files"])
    return {"reasons": listed, "totals": totals, "seconds": seconds}


def by_category(record: dict) -> list[tuple[str, int]]:
    """[(category, tests)] in CATEGORIES order, empty ones left out."""
    counts: dict[str, int] = {}
    for entry in record["reasons"]:
        counts[entry["category"]] = counts.get(entry["category"], 0) + entry["tests"]
    order = [name for name, _ in CATEGORIES + NOT_HARDWARE] + [OTHER]
    return [(name, counts[name]) for name in order if counts.get(name)]


def tests_run(record: dict) -> int:
    """Tests in the run (pytest's totals without its count of warnings)."""
    return sum(n for key, n in record["totals"].items()
               if key in ("passed", "failed", "skipped", "xfailed", "xpassed", "error", "errors"))


def needing_gpu(record: dict) -> int:
    """How many skipped tests need a GPU (the `gpu` marker's reasons)."""
    gpu = {name for name, _ in NEEDS_GPU}
    return sum(n for name, n in by_category(record) if name in gpu)


def counted(record: dict) -> dict[str, int]:
    """{reason: tests}: what the check compares (line numbers and timings may change freely)."""
    return {entry["reason"]: entry["tests"] for entry in record["reasons"]}


def load(root: Path = ROOT) -> dict | None:
    path = root / SKIPS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def nvcc_tests(root: Path = ROOT) -> int:
    """How many tests need nvcc (the `nvcc` marker): they run where nvcc is installed, as in CI, and
    skip on most laptops, so README counts them apart. Asked of pytest's collection (~30 s)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "nvcc",
                           "-p", "no:cacheprovider", "tests"], cwd=root, capture_output=True, text=True)
    if done.returncode == 5:  # pytest's "no tests collected"
        return 0
    found = re.search(r"(\d+)(?:/\d+)? tests? (?:collected|selected)", done.stdout)
    if done.returncode != 0 or not found:
        raise ValueError(f"counting the nvcc tests failed (pytest exit {done.returncode}):\n{done.stdout[-2000:]}")
    return int(found.group(1))


def record_of(text: str, root: Path = ROOT) -> dict:
    """A run's skips with the facts README quotes beside them: versions, cores, date, nvcc tests."""
    from course.versions import installed

    parsed = parse(text)
    if not parsed["totals"]:
        raise ValueError("no pytest totals line (`... passed, ... skipped in ...s`) in the log")
    versions = installed()
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "command": "pytest -n 2", "cpu_count": os.cpu_count(),
            "torch": versions["torch"], "triton": versions["triton"],
            "totals": parsed["totals"], "seconds": parsed["seconds"], "nvcc_tests": nvcc_tests(root),
            "reasons": parsed["reasons"]}


def compared(record: dict) -> dict:
    """What the check holds a run to: every skip reason's count, the totals (passed, failed, skipped:
    README quotes them) and the nvcc tests; line numbers, timings and warnings may change freely."""
    totals = {k: record["totals"].get(k, 0) for k in ("passed", "failed", "skipped", "error", "errors")}
    return {**{f"skipped: {r}": n for r, n in counted(record).items()},
            **{f"tests {k}": n for k, n in totals.items() if n},
            "tests that need nvcc": record.get("nvcc_tests", 0)}


def main(log: Path, root: Path = ROOT, write: bool = False) -> int:
    try:
        record = record_of(log.read_text(errors="replace"), root)
    except (OSError, ValueError) as error:
        print(f"skips: {log}: {error}")
        return 1
    for name, tests in by_category(record):
        print(f"{tests:>6}  {name}")
    print(f"{sum(t for _, t in by_category(record)):>6}  skipped in all, of {tests_run(record)} tests "
          f"({record['seconds']} s)")
    if write:
        (root / SKIPS_FILE).write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {SKIPS_FILE}; now run `python -m course report` to update README's count")
        return 0
    kept = load(root)
    old, new = compared(kept or {"reasons": [], "totals": {}}), compared(record)
    if kept is None or old != new:
        changed = sorted(set(old) | set(new), key=lambda r: (r not in new, r))
        for what in changed:
            if old.get(what) != new.get(what):
                print(f"  {old.get(what, 0):>5} -> {new.get(what, 0):<5} {what}")
        print(f"this run differs from {SKIPS_FILE} (above: recorded -> this run), whose counts README quotes. "
              f"If the change is meant, run `python -m course skips {log} --write` and `python -m course report`.")
        return 1
    print(f"passed, skipped and nvcc counts match {SKIPS_FILE}")
    return 0
