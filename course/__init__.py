"""The kit lessons import: backend choice, checks, launch and validation, timing, roofline, tuning.

The machinery that runs the course (the command line, stubs, progress, reports) is classroom/.
Kept import-free on purpose: `course.runtime` decides GPU or simulation when it is first
imported, and the CLI must be able to set `COURSE_BACKEND` before that happens.
"""
