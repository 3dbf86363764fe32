"""Figures in prose, read from the results files: one measured number inside a sentence.

A note quotes a measurement where it explains it ("the host cost is 1.33x torch's"). Typed, that
number goes stale the day the benchmark is re-run; marked, `python -m course report` rewrites it
from the results file and `python -m course report --check` fails while it is out of date:

    host cost <!-- fig cross_entropy_host_week4 variant=triton field=ms over=torch -->1.33<!-- /fig -->x torch's

Only the text between the two markers is generated; the words and units around it are the
note's. The spec after `fig` names a results file (`NAME` = `results/NAME.json` of the note's
week folder; `week4/NAME` another week's; `NAME1+NAME2` pools the values of several files) and
what to read from it, as key=value words (quote a value that holds spaces: `size="8192^2 K=15"`):

* a benchmark record (`rows` of size/variant/fields, written by `course bench`):
  `variant=V field=F` (any row field: ms, gbps, tflops, pct_of_copy, speedup_vs_torch, ...);
  `size=S` one size, `size=S1,S2` several (a comma followed by a space belongs to the size),
  no size: every size where the field is measured;
  `over=V2` the ratio of V's field to V2's at the same size.
* any other JSON (a runner's summary): `path=key.key.0.key`, the number at that path.
* for both: `scale=X` multiplies (1000: ms to us), `fmt=.1f` is Python's format spec (default
  `.2f`; `.0f` for GB/s and TFLOP/s, `.1f` for % of copy), and several values read
  `lo-hi` (`agg=range`, the default) or `agg=min` / `agg=max`.

Markers inside code fences and `code spans` are examples and left alone.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Callable

FIGURE = re.compile(r"<!-- fig (?P<spec>.*?) -->(?P<value>.*?)<!-- /fig -->")
OPEN = "<!-- fig "
CLOSE = "<!-- /fig -->"
CODE_SPAN = re.compile(r"(`+[^`]*?`+)")
KEYS = {"variant", "field", "size", "over", "path", "scale", "fmt", "agg"}
DEFAULT_FMT = {"gbps": ".0f", "tflops": ".0f", "pct_of_copy": ".1f"}


def _values(record: dict, opts: dict) -> list[float]:
    """The numbers a spec selects from one results record."""
    if "path" in opts:
        value = record
        parts, i = opts["path"].split("."), 0
        while i < len(parts):
            # A key may itself hold dots ("torch.float32"): take the longest run of parts that is one.
            for j in range(len(parts), i, -1):
                key = ".".join(parts[i:j])
                if isinstance(value, dict) and key in value:
                    value, i = value[key], j
                    break
            else:
                key = parts[i]
                try:
                    value = value[int(key)] if isinstance(value, list) else value[key]
                except (KeyError, IndexError, ValueError, TypeError):
                    raise ValueError(f"no '{key}' on the path {opts['path']}") from None
                i += 1
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"{opts['path']} is {value!r}, not a number")
        return [float(value)]
    if "rows" not in record:
        raise ValueError("not a benchmark record: select with path=")
    if record.get("simulated"):
        raise ValueError("measured in simulation: its figures mean nothing")
    if "variant" not in opts or "field" not in opts:
        raise ValueError("a benchmark figure needs variant= and field=")
    field = opts["field"]
    table = {(r["size"], r["variant"]): r for r in record["rows"]}
    sizes = list(dict.fromkeys(r["size"] for r in record["rows"]))
    # Sizes are separated by a comma with no space after it: "B=1, context 960+64" is one size.
    wanted = re.split(r",(?! )", opts["size"]) if "size" in opts else sizes
    out = []
    for size in wanted:
        row = table.get((size, opts["variant"]))
        if row is None:
            if "size" in opts:
                raise ValueError(f"no row of variant '{opts['variant']}' at size '{size}'")
            continue
        if field not in row:
            raise ValueError(f"rows have no field '{field}'")
        value = row[field]
        if "over" in opts:
            base = table.get((size, opts["over"]))
            if base is None:
                if "size" in opts:
                    raise ValueError(f"no row of variant '{opts['over']}' at size '{size}'")
                continue
            value = None if value is None or not base.get(field) else value / base[field]
        if value is not None:
            out.append(float(value))
    if not out:
        raise ValueError(f"no measured '{field}' for variant '{opts['variant']}'")
    return out


def render(record: dict | list[dict], spec: str) -> str:
    """The text a spec stands for, read from `record` (or pooled from several records)."""
    words = shlex.split(spec)
    opts = {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if not eq or key not in KEYS:
            raise ValueError(f"unknown word '{word}' (known: {', '.join(sorted(KEYS))}, as key=value)")
        opts[key] = value
    records = record if isinstance(record, list) else [record]
    values = [v * float(opts.get("scale", 1)) for one in records for v in _values(one, opts)]
    fmt = opts.get("fmt", ".2f" if "over" in opts else DEFAULT_FMT.get(opts.get("field"), ".2f"))
    agg = opts.get("agg", "range")
    if agg == "min":
        values = [min(values)]
    elif agg == "max":
        values = [max(values)]
    elif agg != "range":
        raise ValueError(f"agg={agg}: one of range, min, max")
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low}-{high}"


def fill(text: str, results: Callable[[str], Path], where: str = "") -> str:
    """`text` with every figure regenerated. `results(NAME)` is the path of NAME's results file;
    ValueError naming `where` and the line for a figure that cannot be read."""
    lines = text.split("\n")
    fence = None
    records: dict[str, dict] = {}
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if fence is None and stripped[:3] in ("```", "~~~"):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        if OPEN not in line and CLOSE not in line:
            continue

        def one(match):
            spec = match.group("spec")
            name = shlex.split(spec)[0] if spec.strip() else ""
            try:
                for part in name.split("+"):
                    if part not in records:
                        path = results(part)
                        if not path.is_file():
                            raise ValueError(f"no results file {path.name}")
                        records[part] = json.loads(path.read_text())
                value = render([records[part] for part in name.split("+")], spec)
            except (ValueError, SystemExit) as error:
                raise ValueError(f"{where}:{i + 1}: figure `{spec}`: {error}") from None
            return f"{OPEN}{spec} -->{value}{CLOSE}"

        parts = CODE_SPAN.split(line)  # odd parts are `code spans`: examples, left alone
        for k in range(0, len(parts), 2):
            parts[k] = FIGURE.sub(one, parts[k])
            rest = FIGURE.sub("", parts[k])
            if OPEN in rest or CLOSE in rest:
                raise ValueError(f"{where}:{i + 1}: a `{OPEN}... -->` without its `{CLOSE}` on the same line")
        lines[i] = "".join(parts)
    return "\n".join(lines)
