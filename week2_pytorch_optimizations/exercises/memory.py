"""Not an exercise (yet): `--impl=exercises` runs the course's own week2_pytorch_optimizations.memory.

The week's hand-written exercise is autograd_basics.py. To practise here anyway, replace this
re-export with your own module of the same public names and run
`pytest tests/week2/test_memory.py --impl=exercises`.
"""
from week2_pytorch_optimizations.memory import *  # noqa: F401,F403
