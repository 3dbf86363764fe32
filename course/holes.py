"""Exercise holes in a CUDA C source that must not be built while one is open.

A CUDA C kernel with a hole left open does not fail, it hangs the GPU (a barrier wait that no
producer arms, a ring slot never released) or traps and takes the process's CUDA context with it.
So each hole of such an exercise's stub holds the line

    #define HOLE_OPEN 1  // delete once this hole is filled: nothing is built while one is left

which the learner deletes with the hole. In the solution it is a `// STUB: #define HOLE_OPEN 1 ...`
line inside the exercise region, so `python -m course exercises --write` puts it in every hole of the
stub. The launcher calls `refuse_open_hole(source)` (with every file that holds holes, e.g. a body
that other sources #include) before it asks nvcc or torch's build for anything: the learner gets
'not implemented yet' and which hole, as a Python hole's `NotImplementedError` says, and the tests
of the lesson fail with those words instead of hanging.

To give another CUDA C exercise this refusal: in the solution, end each exercise region's comments (its
TODO, its HINT lines) with `// STUB: #define HOLE_OPEN 1  // delete once this hole is filled: ...`, run
`python -m course exercises --write`, and call `holes.refuse_open_hole(SOURCE)` first thing in the
launcher's build (week4_triton_dl/attention/hopper.py's load_extension does). tests/test_holes.py then
checks the stub holds one marker per hole (`// TODO (`) and the solution none.
"""
from __future__ import annotations

import re
from pathlib import Path

MARKER = "#define HOLE_OPEN"
_MARKER_LINE = re.compile(r"^\s*#\s*define\s+HOLE_OPEN\b")


def refuse_open_hole(*sources: Path) -> None:
    """NotImplementedError ('not implemented yet', the file, the line and its hole's TODO) for the first
    `#define HOLE_OPEN` line left in `sources`; nothing when every hole is filled."""
    for path in sources:
        lines = Path(path).read_text().splitlines()
        for number, line in enumerate(lines, 1):
            if _MARKER_LINE.match(line):
                # the hole's TODO is the nearest comment above that says one: it names the hole in words
                todo = next((t.strip().lstrip("/# ").rstrip(",;") for t in reversed(lines[:number - 1]) if "TODO" in t), "")
                raise NotImplementedError(
                    f"not implemented yet: {path} line {number} has a hole open (its `{MARKER} 1` line is left"
                    f"{': ' + todo if todo else ''}); it is not built, since a kernel with a hole open could hang "
                    "the GPU")
