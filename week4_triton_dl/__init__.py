"""Week 4: Triton for deep learning: softmax to FlashAttention, norms, RoPE, fused losses, autotuning, sparse."""
