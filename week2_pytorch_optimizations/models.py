"""The two models the week measures: a small GPT-style Transformer and an MLP.

Both are plain `nn.Module`s built from the layers a learner will later replace with kernels
(LayerNorm, fused attention, GELU, Linear), sized by a config so that the same code runs a
tiny instance on the CPU in tests and a real one on the GPU in the benchmark.

Cost model of one GPT forward pass at batch B, sequence T, width d, L layers, vocab V:
about 2 * B * T * (12 * L * d^2 + V * d) FLOPs in the matmuls (QKV 3d^2, out-proj d^2,
MLP 8d^2 per layer, plus the LM head) and 4 * B * T^2 * d * L in attention; a training
step is about three times that (backward = 2x forward). `flops_per_token` returns it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 8192
    seq_len: int = 512
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    mlp_ratio: int = 4
    dropout: float = 0.0  # 0 keeps every configuration comparable bit for bit in intent

    def __post_init__(self):
        for name in ("vocab_size", "seq_len", "d_model", "n_heads", "n_layers", "mlp_ratio"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"GPTConfig.{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"GPTConfig.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")


# The benchmark's model on the GPU (about 25 M parameters, 4096 tokens a step), and one
# small enough that a CPU test does a training step in milliseconds.
GPT_BENCH = GPTConfig(vocab_size=8192, seq_len=512, d_model=512, n_heads=8, n_layers=6)
GPT_TINY = GPTConfig(vocab_size=64, seq_len=16, d_model=32, n_heads=2, n_layers=2)


@dataclass(frozen=True)
class MLPConfig:
    d_in: int = 1024
    d_hidden: int = 4096
    d_out: int = 1024
    n_layers: int = 4

    def __post_init__(self):
        for name in ("d_in", "d_hidden", "d_out", "n_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"MLPConfig.{name} must be a positive int, got {value!r}")


MLP_BENCH = MLPConfig(d_in=1024, d_hidden=4096, d_out=1024, n_layers=4)
MLP_TINY = MLPConfig(d_in=16, d_hidden=32, d_out=8, n_layers=2)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)  # one GEMM for Q, K and V, not three
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, heads, T, C / heads): a view plus transpose, no copy; SDPA takes strides.
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))
        # Flash/memory-efficient attention on the GPU: never materializes the T x T scores.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLPBlock(nn.Module):
    def __init__(self, d_model: int, ratio: int):
        super().__init__()
        self.fc = nn.Linear(d_model, ratio * d_model)
        self.out = nn.Linear(ratio * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-norm Transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLPBlock(cfg.d_model, cfg.mlp_ratio)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token + position embeddings, `n_layers` blocks, final LayerNorm, LM head (tied weights)."""

    def __init__(self, cfg: GPTConfig, *, checkpoint_blocks: bool = False):
        super().__init__()
        self.cfg = cfg
        self.checkpoint_blocks = checkpoint_blocks  # see memory.checkpointing_peak_memory
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as GPT-2 does
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) -> logits (B, T, vocab)."""
        T = idx.shape[1]
        if T > self.cfg.seq_len:
            raise ValueError(f"sequence length {T} exceeds the model's seq_len {self.cfg.seq_len}")
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for block in self.blocks:
            if self.checkpoint_blocks and self.training and torch.is_grad_enabled():
                # Keep only each block's input; recompute its insides during backward.
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.ln_f(x))


class MLP(nn.Module):
    """Linear -> GELU -> ... -> Linear: the model where launch overhead is easiest to see."""

    def __init__(self, cfg: MLPConfig):
        super().__init__()
        self.cfg = cfg
        dims = [cfg.d_in] + [cfg.d_hidden] * (cfg.n_layers - 1) + [cfg.d_out]
        layers = []
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(dims) - 2:
                layers.append(nn.GELU(approximate="tanh"))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def gpt_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # Cross-entropy in float32 even under autocast (autocast already does it for this op).
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def mlp_loss(out: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(out.float(), targets)


def gpt_batch(cfg: GPTConfig, batch: int, device, *, generator: torch.Generator | None = None):
    """Random token ids and next-token targets (B, T): the shape, not the language, matters here."""
    ids = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len + 1), generator=generator)
    ids = ids.to(device)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def mlp_batch(cfg: MLPConfig, batch: int, device, *, generator: torch.Generator | None = None):
    x = torch.randn(batch, cfg.d_in, generator=generator).to(device)
    y = torch.randn(batch, cfg.d_out, generator=generator).to(device)
    return x, y


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied weights are counted once


def flops_per_token(cfg: GPTConfig, *, training: bool = True) -> float:
    """Matmul FLOPs per token (attention included), x3 for a training step."""
    d, L, T = cfg.d_model, cfg.n_layers, cfg.seq_len
    forward = 2 * (12 * L * d * d + cfg.vocab_size * d) + 2 * L * T * d  # causal: half of 4*T*d
    return 3 * forward if training else forward


def tiny(cfg, **changes):
    """A copy of a config with some fields changed (dataclasses are frozen)."""
    return replace(cfg, **changes)

