"""Not an exercise: the assignment's machinery. This file re-exports
week2_pytorch_optimizations.compile_benchmark, and `--impl=exercises` tests the course's own.

The assignment is to *run and read* it, not to rewrite it: time each configuration (eager,
torch.compile modes, bf16 autocast, CUDA graphs) on a GPU, check it against eager float32, and
explain the table (README "The assignment"; notebooks/torch_compile_benchmarks.ipynb). The
lessons it rests on are exercises: profiling.py (where the time goes), compilation.py (what
torch.compile does), mixed_precision.py and memory.py. To practise the harness too, replace this
re-export with your own module of the same public names and run
`pytest tests/week2/test_compile_benchmark.py --impl=exercises`.
"""
from week2_pytorch_optimizations.compile_benchmark import *  # noqa: F401,F403
