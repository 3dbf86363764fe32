"""Week 4: Triton for deep learning: softmax to FlashAttention, norms, RoPE, fused losses, autotuning, sparse."""

# What the course's kit knows of this week (course/weeks.py reads it without importing the week).
COURSE = {"short": "week4", "title": "Triton for deep learning", "order": 4,
          # `python -m course rung attention [N]`: the attention forward, naive to fused (course/rungs.py)
          "ladders": {"attention": "attention.bench"}}
