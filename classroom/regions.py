"""The exercise markers in a solution: where a learner's code begins and ends.

A solution marks the code a learner writes with `# BEGIN EXERCISE: what to write` ...
`# END EXERCISE` (`//` in CUDA C), optionally staged (`BEGIN EXERCISE [stage 2: title]: ...`), and
keeps tooling out of the stub with `# BEGIN SOLUTION ONLY: why` ... `# END SOLUTION ONLY`. This
module reads those markers (and nothing else): the stub writer (classroom/stubs.py), the must-fail
fixtures (classroom/must_fail.py), hints and stages read the regions it returns.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

_MARKER = re.compile(r"^(?P<indent>[ \t]*)(?P<comment>#|//) ?(?P<edge>BEGIN|END) "
                     r"(?P<kind>EXERCISE|SOLUTION ONLY)\b"
                     r"(?:[ \t]*\[stage[ \t]+(?P<stage>\d+)(?::[ \t]*(?P<title>[^\]]*?))?[ \t]*\])?"
                     r":?[ \t]*(?P<hint>.*?)\s*$")


class MarkerError(ValueError):
    """A solution's markers are malformed (unclosed, nested, an empty block left behind)."""


@dataclasses.dataclass
class Region:
    kind: str            # "EXERCISE" or "SOLUTION ONLY"
    begin: int           # index of the BEGIN line
    end: int             # index of the END line
    indent: str
    hint: list[str]      # the BEGIN line's text, then its continuation lines
    body: tuple[int, int]  # [first, last) line indices of the solution code inside
    size: int = 0        # lines of code (not blank, not comments) in the body
    stub: list[str] = dataclasses.field(default_factory=list)  # `# STUB: code` lines: the stub's code
    stage: int | None = None  # `BEGIN EXERCISE [stage 2: title]: ...`: the step of a staged lesson
    title: str = ""           # the stage's title (given on one of its regions at least)


def _is_comment(line: str, comment: str) -> bool:
    return line.lstrip().startswith(comment)


def parse_regions(lines: list[str], comment: str, where: str = "<text>") -> list[Region]:
    """The marked regions of a solution's lines, in order; MarkerError names the line."""
    regions, open_ = [], None
    for i, line in enumerate(lines):
        m = _MARKER.match(line)
        if not m:
            continue
        if m["comment"] != comment:
            raise MarkerError(f"{where}:{i + 1}: this file's comments start with {comment!r}")
        if m["edge"] == "BEGIN":
            if open_ is not None:
                raise MarkerError(f"{where}:{i + 1}: BEGIN {m['kind']} inside the region opened at line "
                                  f"{open_.begin + 1} (regions do not nest)")
            hint = [m["hint"]] if m["hint"] else []
            j = i + 1
            cont = re.compile(rf"^[ \t]*{re.escape(comment)}[ \t]{{2,}}(\S.*?)\s*$")
            while j < len(lines) and cont.match(lines[j]):
                hint.append(cont.match(lines[j]).group(1))
                j += 1
            if m["kind"] == "EXERCISE" and not hint:
                raise MarkerError(f"{where}:{i + 1}: BEGIN EXERCISE needs a hint: '# BEGIN EXERCISE: what to write'")
            if m["stage"] is not None and m["kind"] != "EXERCISE":
                raise MarkerError(f"{where}:{i + 1}: only an EXERCISE region belongs to a stage")
            open_ = Region(m["kind"], i, -1, m["indent"], hint, (j, -1),
                           stage=int(m["stage"]) if m["stage"] is not None else None, title=m["title"] or "")
        else:
            if open_ is None or open_.kind != m["kind"]:
                raise MarkerError(f"{where}:{i + 1}: END {m['kind']} without its BEGIN")
            open_.end = i
            open_.body = (open_.body[0], i)
            open_.size = sum(1 for k in range(*open_.body)
                             if lines[k].strip() and not _is_comment(lines[k], comment))
            stub = re.compile(rf"^([ \t]*){re.escape(comment)} STUB: (.*)$")
            open_.stub = [f"{m[1]}{m[2]}" for k in range(*open_.body) if (m := stub.match(lines[k]))]
            regions.append(open_)
            open_ = None
    if open_ is not None:
        raise MarkerError(f"{where}:{open_.begin + 1}: BEGIN {open_.kind} is never closed")
    _check_stages(regions, where)
    return regions


def _check_stages(regions: list[Region], where: str) -> None:
    """A staged lesson: every hole has a stage, stages run 1..N, each stage has one title (given on
    at least one of its regions; the others may say `[stage 2]` alone), which every region gets."""
    holes = [r for r in regions if r.kind == "EXERCISE"]
    staged = [r for r in holes if r.stage is not None]
    if not staged:
        return
    if len(staged) != len(holes):
        r = next(r for r in holes if r.stage is None)
        raise MarkerError(f"{where}:{r.begin + 1}: this lesson is in stages: every BEGIN EXERCISE needs its "
                          "[stage N] (or none has one)")
    titles: dict[int, str] = {}
    for r in staged:
        known = titles.get(r.stage, "")
        if r.title and known and known != r.title:
            raise MarkerError(f"{where}:{r.begin + 1}: stage {r.stage} is titled {known!r} elsewhere")
        titles[r.stage] = r.title or known
    numbers = sorted(titles)
    if numbers != list(range(1, len(numbers) + 1)):
        raise MarkerError(f"{where}: stages must be numbered 1..N without gaps, found {numbers}")
    for n, title in titles.items():
        if not title:
            r = next(r for r in staged if r.stage == n)
            raise MarkerError(f"{where}:{r.begin + 1}: stage {n} needs a title on one of its regions: "
                              f"'[stage {n}: what it builds]'")
    for r in staged:
        r.title = titles[r.stage]


def stages(path: Path) -> dict[int, str]:
    """{stage number: title} of a staged lesson's solution, in order ({} for a lesson in one piece)."""
    regions = parse_regions(path.read_text().splitlines(), comment_of(path), str(path))
    return dict(sorted({r.stage: r.title for r in regions if r.stage is not None}.items()))


def comment_of(path: Path) -> str:
    return "//" if path.suffix in (".cu", ".cuh", ".c", ".cpp", ".h") else "#"


def is_marked(path: Path) -> bool:
    comment = comment_of(path)
    return any((m := _MARKER.match(line)) and m["comment"] == comment
               for line in path.read_text().splitlines())
