"""Reading compute-sanitizer's output: one run's text and exit status classified as an Outcome.

The runner (classroom/sanitize.py) starts the tool once per case and tool; what it printed is read
here: the ERROR and RACECHECK summaries, the finding lines for an excerpt, and the refused
driver-symbol lookups that Numba's binding causes (counted apart: they say nothing of a kernel).
`summary_counts` and `cell` turn outcomes into the report's table.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

ERROR_EXIT = 99  # --error-exitcode: what compute-sanitizer returns when it found something
EXCERPT_LINES = 10


ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
RACECHECK_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")
BANNER = re.compile(r"^=+\s*(COMPUTE-SANITIZER\s*)?$")
API_ERROR = re.compile(r"Program hit \S+ \(error \d+\) .* on CUDA API call to (\w+)")
# numba-cuda's driver binding resolves every entry point it knows through cuGetProcAddress, and
# the driver answers "invalid argument" for the ones it does not have. memcheck counts each refused
# lookup as an API error: 34 per Numba process on the H100 of 2026-11-23 (driver 580), in every
# Numba case alike and in none of the CUDA C ones, all before the first launch. They say nothing
# about the kernel, so they are counted apart; any other API error is a finding.
SYMBOL_LOOKUPS = frozenset({"cuGetProcAddress", "cuGetProcAddress_v2"})


@dataclass
class Outcome:
    """One case under one tool."""
    case: str
    tool: str
    status: str                 # "clean", "3 errors", "2 hazards (...)", "failed (exit 1)", "timeout ...", "not run ..."
    ok: bool                    # clean
    errors: int | None = None   # ERROR SUMMARY, or racecheck's error hazards
    hazards: int | None = None  # racecheck: hazards displayed
    warnings: int | None = None
    symbol_lookups: int = 0     # refused cuGetProcAddress lookups (not errors of the kernel)
    returncode: int | None = None
    seconds: float | None = None
    excerpt: list[str] = field(default_factory=list)


def _sanitizer_lines(text: str) -> list[str]:
    """The report's own lines (prefixed =========) without the banner, blank ones and summaries."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("========="):
            continue
        if BANNER.match(line.strip()) or "SUMMARY:" in line or not line.strip("= \t"):
            continue
        lines.append(line.rstrip())
    return lines


def parse_report(case: str, tool: str, text: str, returncode: int | None, *, timed_out: bool = False,
                 seconds: float | None = None, timeout_note: str = "") -> Outcome:
    """Classify one compute-sanitizer run from its combined stdout + stderr and exit status."""
    outcome = Outcome(case, tool, status="", ok=False, returncode=returncode, seconds=seconds)
    errors = ERROR_SUMMARY.search(text)
    race = RACECHECK_SUMMARY.search(text)
    if errors:
        outcome.errors = int(errors.group(1))
    if race:
        outcome.hazards, race_errors, outcome.warnings = (int(g) for g in race.groups())
        outcome.errors = max(outcome.errors or 0, race_errors)
    found = _sanitizer_lines(text)
    lookups = sum(1 for line in found if (m := API_ERROR.search(line)) and m.group(1) in SYMBOL_LOOKUPS)
    if outcome.errors and lookups == outcome.errors:  # every error printed, and every one a lookup
        outcome.symbol_lookups, outcome.errors = lookups, 0
        found = [line for line in found if not API_ERROR.search(line)]
        if returncode == ERROR_EXIT:  # the exit code counted the lookups too
            returncode = 0
    if timed_out:
        outcome.status = f"timeout{timeout_note}"
        outcome.excerpt = (found or text.strip().splitlines())[-EXCERPT_LINES:]
    elif outcome.hazards:
        outcome.status = (f"{outcome.hazards} hazard{'s' * (outcome.hazards != 1)} "
                          f"({race_errors} errors, {outcome.warnings} warnings)")
        outcome.excerpt = found[:EXCERPT_LINES]
    elif outcome.errors:
        outcome.status = f"{outcome.errors} error{'s' * (outcome.errors != 1)}"
        outcome.excerpt = found[:EXCERPT_LINES]
    elif returncode != 0:
        # No sanitizer finding, but the case itself failed (a Python exception, a crash):
        # the traceback is at the end of the output.
        outcome.status = f"failed (exit {returncode})"
        outcome.excerpt = text.strip().splitlines()[-EXCERPT_LINES:]
    elif errors is None and race is None:
        outcome.status = "no sanitizer summary (exit 0)"
        outcome.excerpt = text.strip().splitlines()[-EXCERPT_LINES:]
    else:
        outcome.status, outcome.ok = "clean", True
        if outcome.symbol_lookups:
            outcome.status = f"clean ({outcome.symbol_lookups} refused driver-symbol lookups, not kernel errors)"
    return outcome



def summary_counts(outcomes: list[Outcome], tool: str) -> dict[str, int]:
    mine = [o for o in outcomes if o.tool == tool]
    kinds = {"clean": 0, "with findings": 0, "failed": 0, "timeout": 0, "not run": 0}
    for o in mine:
        if o.ok:
            kinds["clean"] += 1
        elif o.status.startswith("not run"):
            kinds["not run"] += 1
        elif o.status.startswith("timeout"):
            kinds["timeout"] += 1
        elif o.errors or o.hazards:
            kinds["with findings"] += 1
        else:
            kinds["failed"] += 1
    return kinds


def cell(o: Outcome | None) -> str:
    if o is None:
        return "-"
    text = o.status if o.seconds is None else f"{o.status} ({o.seconds:.0f} s)"
    return text.replace("|", "/")
