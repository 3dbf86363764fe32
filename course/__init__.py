"""The shared kit of the GPU kernels course: backend choice, checks, timing, roofline, CLI.

Kept import-free on purpose: `course.runtime` decides GPU or simulation when it is first
imported, and the CLI must be able to set `COURSE_BACKEND` before that happens.
"""
