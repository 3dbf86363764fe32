"""Exercise stubs generated from the solutions, and the known-wrong solutions their tests must reject.

One source per lesson. A solution marks the code a learner writes:

    def rope_forward(x, cos, sin, ...):
        \"\"\"Rotate x ...\"\"\"                          <- kept: the learner's contract
        # BEGIN EXERCISE: check the arguments (_check_inputs) and `out`, or allocate it;
        #   then one _launch for x alone                 <- more hint (a comment indented 2+ spaces)
        B, S, H, D = _check_inputs(x, cos, sin, position_offset, layout)
        ...
        # END EXERCISE

`python -m course exercises --write` turns every marked solution into its stub in the week's
exercises/ folder (kernels/*.cu into exercises/kernels/): the solution, with each region replaced
by a hole that says what to write and how big the answer is ("about 12 lines"):
* in a Python function: the hint as a TODO comment and
  `raise NotImplementedError("not implemented yet: rope_forward: ...")`, so every untouched
  stub fails its tests with 'not implemented yet';
* in a @triton.jit function: `tl.static_assert(False, "not implemented yet: ...")`, which
  stops the Triton interpreter and the GPU compiler alike (and keeps the kernel importable);
* at module or class level (whole helpers, a kernel the learner designs): the TODO comment only;
* in CUDA C (`// BEGIN EXERCISE: ...` / `// END EXERCISE`): a `// TODO` comment.
A `# STUB: code` comment inside a region replaces that statement with its code (a CUDA C device
function that must still return a value: `// STUB: return v;`).
`# BEGIN SOLUTION ONLY: why` ... `# END SOLUTION ONLY` keeps a region out of the stub: tooling the
learner does not write (benchmarks, a sweep, a command line). At module level the names it defines
are imported from the solution instead (one `from ... import` line), so the stub's API is whole.
The module docstring (the leading comment of a .cu file) becomes the exercise's: what to write,
the per-file test command, where the notes are, and the solution's `# EXERCISE NOTE: ...`
comments (rules that hold for every hole), which only the stub shows. Everything else is copied, so a stub gives the
plumbing (validation, launch settings, op registration, benchmarks) and asks for the lesson.

`--check` fails when a committed stub differs from what would be generated (CI runs it). A
solution without markers keeps its hand-written stub, so lessons convert one at a time.
The markers are read by classroom/regions.py, stubs written by classroom/stubs.py, a lesson's
files found by classroom/lesson_files.py; this module is the command line over them.

Known-wrong solutions ("must-fail fixtures") live in tests/<week>/wrong/<lesson>.py: each `Wrong`
is one bug learners write (a missing mask, a wrong scale, fp16 accumulation, zeros returned),
as an exact text replacement in the solution. `--must-fail` runs the lesson's tests on each
(the wrong module loaded in the solution's place, see classroom/pytest_lesson.py;
classroom/must_fail.py) and requires a
failure, not 'not implemented yet', whose message contains what the fixture expects.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from classroom.lesson_files import ROOT, hand_written_tests, marked_solutions, rel_path, solution_files, stub_path
from classroom.must_fail import run_must_fail
from classroom.regions import MarkerError, is_marked
from classroom.stubs import check, write


# ------------------------------------------------------------------------------ command line
def main(args) -> int:
    root = Path(args.root) if getattr(args, "root", None) else ROOT
    if args.must_fail:
        return run_must_fail(root, args.only or None, jobs=args.jobs)
    if args.write:
        changed = write(root)
        for path in changed:
            print(f"wrote {rel_path(path, root)}")
        print(f"{len(marked_solutions(root))} stubs generated from marked solutions; {len(changed)} changed")
        return 0
    if args.check:
        try:
            problems = check(root)
        except MarkerError as err:
            print(err)
            return 1
        for problem in problems:
            print(problem)
        if problems:
            print("run `python -m course exercises --write` and commit the stubs (edit the solutions' markers, "
                  "never a generated stub)")
            return 1
        print(f"{len(marked_solutions(root))} generated stubs match their solutions")
        return 0
    if args.hand_written_tests:
        for test in hand_written_tests(root):
            print(rel_path(test, root))
        return 0
    # no flag: list what is generated and what is still hand-written
    for solution in solution_files(root):
        stub = stub_path(solution)
        if not stub.exists():
            continue
        kind = "generated" if is_marked(solution) else "hand-written"
        print(f"{kind:>12}  {rel_path(stub, root)}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("exercises", help="generate the exercise stubs from the solutions' markers; "
                                         "run the known-wrong fixtures")
    p.add_argument("--write", action="store_true", help="write every generated stub")
    p.add_argument("--check", action="store_true", help="fail if a committed stub differs from its generated text")
    p.add_argument("--must-fail", action="store_true",
                   help="run each known-wrong solution (tests/<week>/wrong/) against its lesson's tests")
    p.add_argument("--only", nargs="*", help="with --must-fail: fixtures (week4/rope__bug), lessons (rope, "
                                             "week4/rope) or weeks (week4)")
    p.add_argument("--hand-written-tests", action="store_true",
                   help="list the test files of lessons whose stubs are still hand-written (CI)")
    p.add_argument("--jobs", type=int, default=2, help="with --must-fail: runs at once")
    p.add_argument("--root", help=argparse.SUPPRESS)  # another checkout (the kit's tests use a temp dir)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m classroom.exercises")
    add_parser(parser.add_subparsers(dest="command", required=True))
    sys.exit(main(parser.parse_args()))
