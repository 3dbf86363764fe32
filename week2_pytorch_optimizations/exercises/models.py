"""Not an exercise: the models the week measures are machinery, not a lesson, so this file
re-exports week2_pytorch_optimizations.models and `--impl=exercises` tests the course's own.

The GPT (pre-norm blocks, fused QKV, SDPA causal attention, tied LM head, optional activation
checkpointing) and the MLP are read, not written, this week: the exercises in memory.py,
profiling.py and compile_benchmark.py run them. To practise anyway, replace this re-export with
your own module of the same public names (GPTConfig, GPT, MLP, gpt_loss, gpt_batch, tiny, ...)
and run `pytest tests/week2/test_models.py --impl=exercises`.
"""
from week2_pytorch_optimizations.models import *  # noqa: F401,F403
