"""Tuned launch settings live in result files, never pasted into code.

A sweep (`python -m <lesson> --sweep` on a GPU) times candidate configs and calls `save` with
the fastest per key: `results/tuned_<name>.json` gets them beside the GPU, versions and date of
the run, like every other result. A launcher calls `load` once and gets the entries only when
the file was measured on the kind of GPU it is running on (same device name): a table tuned on
an H100 says nothing about Colab's T4, and in simulation there is nothing to tune. Otherwise it
gets no entries and uses its heuristic.

An entry is a dict {"key": [...], "config": {...}, "measured": {...}}: `key` is what the
launcher looks the config up by (e.g. [itemsize, padded width]), `config` its launch settings,
`measured` what the sweep saw (GB/s, % of copy, ...), for the reader.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

from course import runtime


def results_folder(module_file: str) -> Path:
    """The results/ folder of the lesson that `module_file` belongs to (its exercise stub's too:
    a stub in <week>/exercises/ reads the tables its week measured)."""
    folder = Path(module_file).resolve().parent
    return (folder.parent if folder.name == "exercises" else folder) / "results"


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
