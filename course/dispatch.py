"""Which rung and which tile an op runs: a rule in one place, its tuned part as data.

An op with several rungs (FlashAttention's pointer kernel and its TMA kernel; week 3's matmul
from blocked to persistent) has one dispatch module between its public function and its rungs.
That module owns the rule, and the rule reads one table: results/dispatch_<op>.json of the
lesson's week, written by the op's sweep (`<topic>_bench.py --sweep` on a GPU), one row per key:

    {"key": [128, false], "rung": "flash_tma", "tile": {"BLOCK_M": 128, ...}, "measured": {...}}

`key` is what the op looks a row up by (head dim and causal flag; a matmul's dtype and shape
bucket), `rung` names the kernel by what it is (never by its number in the ladder: a new rung would
make the number lie), `tile` its launch settings (None: the rung's own autotuner picks), `measured`
what the sweep saw, for the reader. The file carries the GPU, versions and date of the run, like
every result (course/tuning.py's record), and its rows apply only on the GPU that measured them:
elsewhere, in simulation, and for a key with no row, the op's default rule decides.

Public ops take `rung=` and `tile=`: tests and benchmarks choose by argument (a row of a table
is never forced by patching a module's globals).
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Callable, NamedTuple

from course import bench_timing, runtime, tuning


class Choice(NamedTuple):
    """What an op runs for one call: the rung's name and its tile (None: the rung's own choice)."""
    rung: str
    tile: dict | None = None


class Row(NamedTuple):
    """One row of a dispatch table: the sweep's choice for `key`. `build`: which build of a rung with
    several (compile-time variants of one kernel, e.g. week 4's Hopper attention), None where the
    rung has one or the row predates builds: the op's dispatch says what it holds."""
    key: tuple
    rung: str
    tile: dict | None
    measured: dict
    build: dict | None = None


def check_rung(op: str, rung, rungs) -> str:
    """`rung` when it names one of `rungs`; else ValueError naming the op and its rungs."""
    if rung not in rungs:
        raise ValueError(f"{op}: rung must be one of {', '.join(map(repr, rungs))}, got {rung!r}")
    return rung


class Table:
    """results/dispatch_<op>.json of the lesson's week, read on first use and kept.

        TABLE = dispatch.Table(__file__, "attention")
        row = TABLE.get((head_dim, causal))        # a Row, or None: then the default rule

    `check_row(row) -> Row`, where an op's rows hold more than a rung and a tile (week 4's attention: a
    build), checks each row once, when the file is read, and may return it normalized: the hot path then
    trusts what it looks up. A ValueError from it names the file and the row's key, before any launch.
    """

    def __init__(self, module_file: str, op: str, check_row: Callable[[Row], Row] | None = None):
        self.results = tuning.results_folder(module_file)
        self.op = op
        self.check_row = check_row
        self._rows: dict[tuple, Row] | None = None

    @property
    def path(self) -> Path:
        """results/dispatch_<op>.json (it may not exist yet)."""
        return Path(self.results) / f"dispatch_{self.op}.json"

    def record(self) -> dict | None:
        """The whole file (machine, date, rows), whatever GPU measured it; None before a sweep."""
        return json.loads(self.path.read_text()) if self.path.exists() else None

    def rows(self) -> dict[tuple, Row]:
        """{key: Row} measured on this GPU; {} on another GPU, in simulation, or before a sweep."""
        if self._rows is None:
            record = self.record() if runtime.on_gpu() else None
            same_gpu = (record is not None and not record.get("simulated")
                        and record.get("machine", {}).get("gpu") == runtime.describe().get("gpu"))
            rows = [Row(tuple(r["key"]), r["rung"], r.get("tile"), r.get("measured", {}), r.get("build"))
                    for r in record["rows"]] if same_gpu else []
            self._rows = {row.key: self._checked(row) for row in rows}
        return self._rows

    def _checked(self, row: Row) -> Row:
        if self.check_row is None:
            return row
        try:
            return self.check_row(row)
        except ValueError as error:
            raise ValueError(f"{self.path}: the row for {list(row.key)}: {error}") from None

    def get(self, key) -> Row | None:
        """The row for `key` (any sequence) measured on this GPU, or None."""
        return self.rows().get(tuple(key))

    def save(self, rows: list[dict], how: str) -> Path:
        """Write the sweep's rows (`how`: the command that measured them) and read them afresh next time."""
        path = save(self.results, self.op, rows, how)
        self.forget()
        return path

    def forget(self) -> None:
        """Read the file again on the next lookup (after it changed)."""
        self._rows = None


def save(results: Path, op: str, rows: list[dict], how: str) -> Path:
    """results/dispatch_<op>.json: the sweep's rows (`how`: the command that measured them) with this
    machine's description and the date (a run in simulation is marked so: no launcher reads it)."""
    for row in rows:
        if not isinstance(row, dict) or not {"key", "rung", "tile"} <= set(row):
            raise ValueError(f"each row must be a dict with 'key', 'rung' and 'tile', got {row!r}")
    path = Path(results) / f"dispatch_{op}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"op": op, "how": how, "machine": runtime.describe(),
              "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "simulated": not runtime.on_gpu(), "rows": rows}
    seen = bench_timing.take_seen()
    if seen:  # the sweep timed loops the host paced: its choice among them may be noise
        record["host_bound_timings"] = seen
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path

