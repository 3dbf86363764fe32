"""`python -m course hint LESSON [N]`: graded hints for an exercise's holes, one level at a time.

The hints live in the solution, inside each `BEGIN EXERCISE` region, right after its TODO text
(the generator drops region bodies, so a stub never shows them):

    # BEGIN EXERCISE: one program per row: ...
    # HINT: the idea, in a sentence or two
    # HINT: the shape of the code, in words
    #   (a hint continues on comment lines indented 2+ spaces after '#')
    # HINT: the one line that matters

(`// HINT:` in CUDA C.) `hint LESSON` lists the lesson's holes; `hint LESSON N` shows the next
hint of hole N that you have not seen (and the ones you have, above it); `--all` shows every level.
What you were shown is kept in .course/hints.json (git ignores it); `course progress` counts it.
`hint --check` lists the holes with fewer than MIN_HINTS hints (CI runs it).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import textwrap
from pathlib import Path

from course import exercises

ROOT = exercises.ROOT
STATE = Path(".course") / "hints.json"  # under the checkout's root; .gitignore lists .course/
MIN_HINTS = 2
LEVELS = ("the idea", "the shape of the code", "the line that matters")


@dataclasses.dataclass
class HoleHints:
    where: str          # "`softmax_row_kernel`", "at module level"
    todo: str           # the TODO text the stub shows
    size: int           # lines of code in the answer
    hints: list[str]
    solution: Path
    line: int           # 1-based line of the BEGIN marker in the solution


def region_hints(lines: list[str], region: exercises.Region, comment: str) -> list[str]:
    """The `# HINT:` paragraphs in a region's body (each with its indented continuation lines)."""
    start = re.compile(rf"^[ \t]*{re.escape(comment)} HINT:[ \t]*(.*?)\s*$")
    cont = re.compile(rf"^[ \t]*{re.escape(comment)}[ \t]{{2,}}(\S.*?)\s*$")
    hints, k = [], region.body[0]
    while k < region.body[1]:
        m = start.match(lines[k])
        k += 1
        if not m:
            continue
        text = [m[1]]
        while k < region.body[1] and cont.match(lines[k]):
            text.append(cont.match(lines[k])[1])
            k += 1
        hints.append(" ".join(t for t in text if t))
    return hints


def holes_of(solution: Path, root: Path = ROOT) -> list[HoleHints]:
    """Every EXERCISE region of a marked solution, with its hints, in file order."""
    comment = "//" if solution.suffix in (".cu", ".cuh", ".c", ".cpp", ".h") else "#"
    text = solution.read_text()
    lines = text.splitlines()
    regions = [r for r in exercises.parse_regions(lines, comment, str(solution)) if r.kind == "EXERCISE"]
    scopes = exercises.code_scopes(__import__("ast").parse(text)) if comment == "#" else []
    out = []
    for r in regions:
        if comment == "#":
            scope = exercises.innermost_scope(scopes, r.begin + 1)
            where = f"`{scope[2]}`" if scope else "at module level"
        else:
            fn = exercises.cu_function(lines, r.begin)
            where = f"`{fn}` ({solution.name})" if fn else f"file level ({solution.name})"
        out.append(HoleHints(where, " ".join(r.hint), r.size, region_hints(lines, r, comment), solution, r.begin + 1))
    return out


# ------------------------------------------------------------------------------ which lesson
def _rel(path: Path, root: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()


def lesson_key(solution: Path, root: Path = ROOT) -> str:
    """'week3/softmax' (a CUDA C file counts with the lesson of the same name: week1/vector_add)."""
    return f"{exercises.week_of(exercises.week_dir(solution))}/{solution.stem}"


def lessons(root: Path = ROOT) -> dict[str, list[Path]]:
    """{'week3/softmax': [its marked solution files]} for every generated exercise."""
    found: dict[str, list[Path]] = {}
    for solution in exercises.marked_solutions(root):
        found.setdefault(lesson_key(solution, root), []).append(solution)
    return found


def resolve(name: str, root: Path = ROOT) -> tuple[str, list[Path]]:
    """A lesson by stub name ('softmax') or week/name ('week4/softmax'); ValueError names the choices."""
    table = lessons(root)
    name = name.removesuffix(".py").strip("/")
    if name in table:
        return name, table[name]
    if "/" in name:  # 'week4_triton_dl/softmax' or 'week4/exercises/softmax'
        week, stem = name.split("/", 1)[0], name.rsplit("/", 1)[1]
        week = week.split("_", 1)[0]
        if f"{week}/{stem}" in table:
            return f"{week}/{stem}", table[f"{week}/{stem}"]
    matches = [key for key in table if key.split("/", 1)[1] == name]
    if len(matches) == 1:
        return matches[0], table[matches[0]]
    if matches:
        raise ValueError(f"lesson {name!r} is in several weeks: say which, e.g. {' or '.join(matches)}")
    close = [key for key in table if name in key]
    raise ValueError(f"no exercise named {name!r}" + (f"; did you mean {', '.join(close)}?" if close else
                                                      "; `python -m course progress` lists them"))


def lesson_holes(files: list[Path], root: Path = ROOT) -> list[HoleHints]:
    return [hole for solution in files for hole in holes_of(solution, root)]


# ------------------------------------------------------------------------------ what was shown
def load_state(root: Path = ROOT) -> dict:
    path = root / STATE
    try:
        return json.loads(path.read_text()) if path.exists() else {}
    except json.JSONDecodeError:
        return {}  # a damaged file: start again rather than fail a learner's command


def save_state(state: dict, root: Path = ROOT) -> None:
    path = root / STATE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")


def _hole_id(hole: HoleHints) -> str:
    """A hole's key in the state file: where it is and its TODO's start, so renumbering holes
    (a lesson split into stages) does not hand one hole's count to another."""
    return f"{hole.where} {hole.todo[:60]}"


def used(lesson: str, root: Path = ROOT) -> int:
    """Hints shown so far for a lesson, all holes together (what `course progress` prints)."""
    return sum(load_state(root).get(lesson, {}).values())


# ------------------------------------------------------------------------------ CI's coverage check
def check(root: Path = ROOT, minimum: int = MIN_HINTS) -> list[str]:
    """'week3/softmax hole 2 (`softmax_rows_kernel`, line 85): 1 hint' for each hole with too few."""
    problems = []
    for key, files in lessons(root).items():
        for n, hole in enumerate(lesson_holes(files, root), 1):
            if len(hole.hints) < minimum:
                rel = _rel(hole.solution, root)
                problems.append(f"{key} hole {n} ({hole.where}, {rel}:{hole.line}): "
                                f"{len(hole.hints)} hint{'s' if len(hole.hints) != 1 else ''}")
    return problems


# ------------------------------------------------------------------------------ command line
def _wrap(text: str, prefix: str) -> str:
    return "\n".join(textwrap.wrap(text, width=100, initial_indent=prefix, subsequent_indent=" " * len(prefix),
                                   break_on_hyphens=False))


def show_list(lesson: str, holes: list[HoleHints], seen: dict, root: Path) -> None:
    stubs = sorted({_rel(exercises.stub_path(h.solution), root) for h in holes})
    print(f"{lesson}: {len(holes)} hole{'s' if len(holes) != 1 else ''} in {', '.join(stubs)}")
    for n, hole in enumerate(holes, 1):
        shown = seen.get(_hole_id(hole), 0)
        print(_wrap(f"{hole.where} (about {hole.size} lines; {len(hole.hints)} hints, {shown} seen): {hole.todo}",
                    f"{n:>3}  "))
    print(f"\n`python -m course hint {lesson} N` shows hole N's next hint.")


def show_hint(lesson: str, holes: list[HoleHints], n: int, state: dict, show_all: bool, root: Path) -> int:
    if not 1 <= n <= len(holes):
        print(f"{lesson} has holes 1 to {len(holes)}; `python -m course hint {lesson}` lists them")
        return 2
    hole = holes[n - 1]
    seen = state.setdefault(lesson, {})
    key = _hole_id(hole)
    before = seen.get(key, 0)
    if not hole.hints:
        print(f"Hole {n} of {lesson} ({hole.where}) has no hints yet.")
        return 0
    upto = len(hole.hints) if show_all else min(before + 1, len(hole.hints))
    print(_wrap(f"Hole {n} of {len(holes)}, {hole.where}: {hole.todo}", ""))
    for level, text in enumerate(hole.hints[:upto], 1):
        name = LEVELS[level - 1] if level <= len(LEVELS) and len(hole.hints) <= len(LEVELS) else f"level {level}"
        new = "" if level <= before else "  (new)"
        print()
        print(_wrap(text, "      "))
        print(f"      -- hint {level} of {len(hole.hints)}, {name}{new}")
    seen[key] = max(before, upto)
    save_state(state, root)
    print()
    if upto < len(hole.hints):
        print(f"Run it again for hint {upto + 1} of {len(hole.hints)}.")
    else:
        print("That was the last hint. Your tests: `python -m course progress`.")
    return 0


def main(args) -> int:
    root = Path(args.root) if getattr(args, "root", None) else ROOT
    if args.check:
        problems = check(root)
        for problem in problems:
            print(problem)
        total = sum(len(lesson_holes(files, root)) for files in lessons(root).values())
        print(f"{len(problems)} of {total} holes have fewer than {MIN_HINTS} hints"
              + ("" if problems else ": every hole is covered"))
        return 1 if problems else 0
    if not args.lesson:
        print("name a lesson: `python -m course hint softmax` (its holes), `python -m course hint softmax 1`")
        return 2
    try:
        lesson, files = resolve(args.lesson, root)
    except ValueError as error:
        print(f"hint: {error}")
        return 2
    holes = lesson_holes(files, root)
    state = load_state(root)
    if args.n is None:
        show_list(lesson, holes, state.get(lesson, {}), root)
        return 0
    return show_hint(lesson, holes, args.n, state, args.all, root)


def add_parser(sub) -> None:
    p = sub.add_parser("hint", help="graded hints for an exercise's holes, one level at a time")
    p.add_argument("lesson", nargs="?", help="the exercise: its stub's name (softmax) or week/name (week4/softmax)")
    p.add_argument("n", nargs="?", type=int, help="the hole (numbers as `hint LESSON` lists them)")
    p.add_argument("--all", action="store_true", help="every hint of hole N at once")
    p.add_argument("--check", action="store_true", help=f"list the holes with fewer than {MIN_HINTS} hints (CI)")
    p.add_argument("--root", help=argparse.SUPPRESS)
