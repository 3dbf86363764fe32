"""Week 4: Triton for deep learning: softmax to FlashAttention, norms, RoPE, fused losses, autotuning, sparse."""

# What the course's kit knows of this week (course/weeks.py reads it without importing the week).
COURSE = {"short": "week4", "title": "Triton for deep learning", "order": 4,
          # `python -m course rung attention [N]`: the attention forward, naive to fused (course/rungs.py)
          "ladders": {"attention": "attention.bench"},
          # results written by a lesson's own command (`course report` names it where a record is missing)
          "runners": {
              "attention_hopper_fwdbwd_week4": "python -m week4_triton_dl.attention.hopper_fwdbwd_bench",
              # tools/ncu_hopper.sh writes ncu_hopper.json and each group's ncu_GROUP.md (notes/attention_hopper.md
              # includes them): copy $OUT/ncu_hopper/week4_triton_dl/* into results/
              "ncu_fah_4096": "bash tools/ncu_hopper.sh fah_4096 fah_4096c fah_gpt2 fahb_4096",
              "ncu_fah_4096c": "bash tools/ncu_hopper.sh fah_4096 fah_4096c fah_gpt2 fahb_4096",
              "ncu_fah_gpt2": "bash tools/ncu_hopper.sh fah_4096 fah_4096c fah_gpt2 fahb_4096",
              "ncu_fahb_4096": "bash tools/ncu_hopper.sh fah_4096 fah_4096c fah_gpt2 fahb_4096"}}
