"""Not an exercise (yet): `--impl=exercises` runs the course's own week2_pytorch_optimizations.mixed_precision.

The week's hand-written exercise is autograd_basics.py. To practise here anyway, replace this
re-export with your own module of the same public names and run
`pytest tests/week2/test_mixed_precision.py --impl=exercises`.
"""
from week2_pytorch_optimizations.mixed_precision import *  # noqa: F401,F403
