"""Tuned launch settings live in result files, never pasted into code.

A sweep (`python -m <lesson>_bench --sweep` on a GPU) times candidate configs and calls `save`
with the fastest per key: `results/tuned_<name>.json` gets them beside the GPU, versions and date
of the run, like every other result. A launcher reads the table through a `TunedTable`, once, and
gets the entries only when the file was measured on the kind of GPU it is running on (same device
name): a table tuned on an H100 says nothing about Colab's T4, and in simulation there is nothing
to tune. Otherwise it gets no entries and uses its heuristic.

An entry is a dict {"key": [...], "config": {...}, "measured": {...}}: `key` is what the
launcher looks the config up by (e.g. [itemsize, padded width]), `config` its launch settings,
`measured` what the sweep saw (GB/s, % of copy, ...), for the reader.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, Callable

from course import bench_timing, runtime


def results_folder(module_file: str) -> Path:
    """The results/ folder of the week that `module_file` belongs to: its exercise stub's too (a
    stub in <week>/exercises/ reads the tables its week measured), and a lesson folder's module's
    (<week>/norms/rmsnorm.py, <week>/exercises/norms/rmsnorm.py: the week is the outermost package)."""
    folder = Path(module_file).resolve().parent
    while folder.name == "exercises" or (folder.parent / "__init__.py").is_file():
        folder = folder.parent
    return folder / "results"


def tuned_path(results: Path, name: str) -> Path:
    """results/tuned_<name>.json"""
    return Path(results) / f"tuned_{name}.json"


def save(results: Path, name: str, entries: list[dict], how: str) -> Path:
    """Write the sweep's choices (`how`: the command that measured them) with this machine's
    description and the date; returns the path."""
    for entry in entries:
        if not isinstance(entry, dict) or not {"key", "config"} <= set(entry):
            raise ValueError(f"each entry must be a dict with 'key' and 'config', got {entry!r}")
    path = tuned_path(results, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"name": name, "how": how, "machine": runtime.describe(),
              "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "simulated": not runtime.on_gpu(), "entries": entries}
    seen = bench_timing.take_seen()
    if seen:  # the sweep timed loops the host paced: its choice among them may be noise
        record["host_bound_timings"] = seen
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def load(results: Path, name: str) -> dict[tuple, dict]:
    """{tuple(key): config} from results/tuned_<name>.json when it was measured on this GPU;
    {} when the file is missing, was measured on another GPU, or this run simulates."""
    path = tuned_path(results, name)
    if not runtime.on_gpu() or not path.exists():
        return {}
    record = json.loads(path.read_text())
    if record.get("simulated") or record.get("machine", {}).get("gpu") != runtime.describe().get("gpu"):
        return {}
    return {tuple(entry["key"]): entry["config"] for entry in record["entries"]}


class TunedTable:
    """One lesson's tuned launch settings: results/tuned_<name>.json of the lesson's week, read on
    first use and kept (a launcher looks configs up on every call; the file is read once).

        TUNED = tuning.TunedTable(__file__, "softmax", SoftmaxConfig)
        config = TUNED.get((itemsize, width)) or heuristic_config(...)

    `make_config` turns an entry's "config" dict into the lesson's config (called with its items as
    keyword arguments: a dataclass of launch settings); the default keeps the dict.
    """

    def __init__(self, module_file: str, name: str, make_config: Callable[..., Any] = dict):
        self.results = results_folder(module_file)
        self.name = name
        self.make_config = make_config
        self._configs: dict[tuple, Any] | None = None

    @property
    def path(self) -> Path:
        """results/tuned_<name>.json (it may not exist yet)."""
        return tuned_path(self.results, self.name)

    def configs(self) -> dict[tuple, Any]:
        """{tuple(key): config} for this GPU ({} on another GPU, in simulation, or before a sweep)."""
        if self._configs is None:
            self._configs = {key: self.make_config(**config) for key, config in load(self.results, self.name).items()}
        return self._configs

    def get(self, key, default=None):
        """The config tuned for `key` (any sequence), or `default`."""
        return self.configs().get(tuple(key), default)

    def save(self, entries: list[dict], how: str) -> Path:
        """Write the sweep's choices (see `save`) and read them afresh on the next lookup."""
        path = save(self.results, self.name, entries, how)
        self.forget()
        return path

    def forget(self) -> None:
        """Read the file again on the next lookup (after it changed, or the machine seen did)."""
        self._configs = None
