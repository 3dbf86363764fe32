"""Exercise stubs for week 4: same names as the solutions, run with `pytest tests/week4 --impl=exercises`."""
