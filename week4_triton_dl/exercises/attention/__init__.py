"""Exercise stubs of the attention lesson: same names as the solutions, run with `pytest tests/week4 -k attention --impl=exercises`."""
