"""Figures in prose, read from the results files: one measured number inside a sentence.

A note quotes a measurement where it explains it ("the host cost is 1.33x torch's"). Typed, that
number goes stale the day the benchmark is re-run; cited, `python -m course report` rewrites it
from its results file and `python -m course report --check` fails while it is out of date. The
sentence cites the figure by a short name, as a Markdown reference link whose text is the number,
and the note names each figure once, in a block at its end (reference definitions: GitHub shows
none of the block; the number links to the file it is read from, and hovering shows what is read):

    the host cost is [1.33][ce_host_x]x torch's
    ...
    <!-- figures: each [value][name] above is read by `python -m course report` from its spec here -->
    [ce_host_x]: ../results/cross_entropy_host_week4.json "variant=triton field=ms over=torch"

Only the number between the first brackets is generated. The link is the results file, relative to
the note (another week's: `../../week3_triton_kernels/results/NAME.json`); to pool the values of
several files of one folder, link the folder and name the files first: `results/ "A+B field=..."`
(`A` = `A.json`). The title says what to read, as key=value words (quote a value that holds
spaces, in the other quotes than the title's: `size='8192^2 K=15'`):

* a benchmark record (`rows` of size/variant/fields, written by `course bench`):
  `variant=V field=F` (any row field: ms, gbps, tflops, pct_of_copy, speedup_vs_torch, ...);
  `size=S` one size, `size=S1,S2` several (a comma followed by a space belongs to the size),
  no size: every size where the field is measured;
  `over=V2` the ratio of V's field to V2's at the same size.
* any other JSON (a runner's summary): `path=key.key.0.key`, the number at that path.
* for both: `scale=X` multiplies (1000: ms to us), `fmt=.1f` is Python's format spec (default
  `.2f`; `.0f` for GB/s and TFLOP/s, `.1f` for % of copy), and several values read
  `lo-hi` (`agg=range`, the default) or `agg=min` / `agg=max`.

`problems` lists what `fill` refuses: a name defined twice, a figure never cited, a citation of
no definition, an old `<!-- fig` marker, a line that citations push past MAX_LINE (a table row,
which cannot wrap: MAX_TABLE_ROW). Citations inside code fences and `code spans` are examples and
left alone.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

BLOCK = "<!-- figures"   # the line that opens a note's block of definitions
BLOCK_LINE = ("<!-- figures: each [value][name] above is read by `python -m course report` "
              "from its spec here -->")
NAME = r"[a-z0-9_]+"
CITE = re.compile(r"\[(?P<value>[^\[\]]*)\]\[(?P<name>" + NAME + r")\]")
REFERENCE = re.compile(r"\[(?P<text>[^\[\]]*)\]\[(?P<name>[^\[\]]+)\]")   # any [text][label]
DEFINE = re.compile(r"^\[(?P<name>" + NAME + r")\]: (?P<dest>\S+) (?P<q>[\"'])(?P<spec>.*)(?P=q)$")
ANY_DEFINITION = re.compile(r"^ {0,3}\[(?P<name>[^\]]+)\]: ")
OLD = "<!-- fig "
MAX_LINE = 120       # citations never push a line past this (tests/test_figures.py walks every note)
MAX_TABLE_ROW = 200  # nor a table row (it cannot wrap) past this
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


def prose_lines(text: str):
    """(index, line) of every line outside code fences and the definitions block."""
    fence = None
    for i, line in enumerate(text.split("\n")):
        stripped = line.lstrip()
        if fence is None and stripped[:3] in ("```", "~~~"):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        if line.startswith(BLOCK):
            return
        yield i, line


def definitions(text: str, where: str = "") -> dict[str, tuple[int, str, str]]:
    """{name: (line index, link, spec)} of the note's figures block; ValueError for a malformed line."""
    lines = text.split("\n")
    heads = [i for i, _ in enumerate(lines) if lines[i].startswith(BLOCK)]
    if not heads:
        return {}
    found: dict[str, tuple[int, str, str]] = {}
    for i in range(heads[0] + 1, len(lines)):
        if not lines[i].strip():
            continue
        match = DEFINE.match(lines[i])
        if match is None:
            raise ValueError(f"{where}:{i + 1}: the figures block holds only `[name]: link \"spec\"` lines "
                             f"(name: lowercase letters, digits, _), not `{lines[i][:60]}`")
        if match["name"] in found:
            raise ValueError(f"{where}:{i + 1}: figure `{match['name']}` is defined twice "
                             f"(first on line {found[match['name']][0] + 1})")
        found[match["name"]] = (i, match["dest"], match["spec"])
    return found


def _outside_code(line: str) -> str:
    return "".join(CODE_SPAN.split(line)[0::2])


def problems(text: str, where: str = "") -> list[str]:
    """Why `text`'s figures are malformed: each message names `where` and the line."""
    try:
        defined = definitions(text, where)
    except ValueError as error:
        return [str(error)]
    labels = {m["name"].lower() for line in text.split("\n") if (m := ANY_DEFINITION.match(line))}
    out, cited = [], set()
    for i, line in prose_lines(text):
        prose = _outside_code(line)
        if OLD in prose:
            out.append(f"{where}:{i + 1}: an old `{OLD}...-->` marker: cite `[value][name]` and define name "
                       "in the figures block")
        for match in REFERENCE.finditer(prose):
            if match["name"].lower() not in labels:
                out.append(f"{where}:{i + 1}: `{match[0]}` cites `{match['name']}`, defined nowhere in the note")
            cited.add(match["name"])
        bare = CITE.sub(lambda m: m["value"] if m["name"] in defined else m[0], line)
        limit = MAX_TABLE_ROW if line.lstrip().startswith("|") else MAX_LINE
        if len(line) > limit and len(bare) <= limit:
            out.append(f"{where}:{i + 1}: {len(line)} characters, {len(line) - len(bare)} of them figure "
                       f"citations: wrap the sentence or shorten the names (at most {limit})")
    out += [f"{where}:{row + 1}: figure `{name}` is defined but never cited"
            for name, (row, *_) in defined.items() if name not in cited]
    return out


def sources(link: str, spec: str, here: Path) -> tuple[list[Path], str]:
    """The results files a definition reads and its selector. The link, relative to the note's
    folder `here`, is the file; or a folder (ending in /) when the spec starts with the names of
    several of its files, `NAME1+NAME2 ...` (`NAME` = `NAME.json`), whose values are pooled."""
    words = spec.split(None, 1)
    if words and "=" not in words[0]:
        if not link.endswith("/"):
            raise ValueError(f"`{words[0]}` pools files of a folder: link the folder (ending in /), not {link}")
        return [here / link / f"{name}.json" for name in words[0].split("+")], words[1] if len(words) > 1 else ""
    if not link.endswith(".json"):
        raise ValueError(f"the link {link} is not a results .json file (pooling a folder: name its files first)")
    return [here / link], spec


def fill(text: str, here: Path, where: str = "") -> str:
    """`text` with every cited figure regenerated from the file its definition links to (relative
    to `here`, the note's folder); ValueError naming `where` and the line for a figure that cannot
    be read or a malformed block."""
    found = problems(text, where)
    if found:
        raise ValueError(found[0])
    defined = definitions(text, where)
    if not defined:
        return text
    lines = text.split("\n")
    records: dict[Path, dict] = {}
    values: dict[str, str] = {}
    for name, (row, link, spec) in defined.items():
        try:
            paths, selector = sources(link, spec, here)
            for path in paths:
                if path not in records:
                    if not path.is_file():
                        raise ValueError(f"no results file {path.name} in {path.parent}")
                    records[path] = json.loads(path.read_text())
            values[name] = render([records[path] for path in paths], "_ " + selector)
        except ValueError as error:
            raise ValueError(f"{where}:{row + 1}: figure `{name}` ({link} \"{spec}\"): {error}") from None
    for i, line in prose_lines(text):
        parts = CODE_SPAN.split(line)  # odd parts are `code spans`: examples, left alone
        for k in range(0, len(parts), 2):
            parts[k] = CITE.sub(lambda m: f"[{values[m['name']]}][{m['name']}]" if m["name"] in values else m[0],
                                parts[k])
        lines[i] = "".join(parts)
    return "\n".join(lines)
