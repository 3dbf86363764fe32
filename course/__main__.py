"""`python -m course COMMAND`: the learner's command line, handed on to the course's machinery.

The commands (info, check, bench, progress, hint, stages, exercises, report, ...) are defined in
classroom/cli.py: they belong to the machinery that runs the course (classroom/), which imports
this kit (course/). The learner keeps typing `python -m course ...` (the README, the notes, the
notebooks and CI say so), so this entry point stays here and runs `python -m classroom` in its place.

Why runpy and not `from classroom.cli import main`: course/ is what lessons import, and it must
never import classroom/ (tests/test_house.py enforces it). An import statement here would be an
arrow from course/ up to classroom/ and, with classroom/ -> course/, a circle between the two
packages. The dependency is real but exists only when this file runs as the program: importing
`course` or any course/ module never loads classroom/. runpy is how `python -m` itself starts a
package, so `python -m course X` is exactly `python -m classroom X`. This is the one place the kit
names classroom/, and the kit's test allows it here alone.
"""
import runpy

if __name__ == "__main__":
    runpy.run_module("classroom", run_name="__main__", alter_sys=True)
