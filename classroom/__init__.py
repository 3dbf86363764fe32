"""The machinery that runs the course: the command line (cli.py, behind `python -m course`), the
exercise stubs and their markers, the known-wrong fixtures, progress, stages, hints, reports,
figures, timings, skips, the compile matrix and the pytest plugin for lessons.

Lessons never import it; it imports the kit (course/) and, by name, the lessons it runs. Kept
import-free, like course/__init__.py: the CLI must set COURSE_BACKEND before course.runtime loads.
"""
