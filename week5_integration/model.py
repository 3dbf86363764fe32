"""The week-5 model: a GPT-style Transformer in plain PyTorch whose hot operations can be swapped.

The model is written once. Every operation the course has a kernel for (normalization, rotary
embedding, attention, the MLP's gated activation, the LM head's cross-entropy) is called through
an `Ops` record of plain functions, so "swap in the Triton kernels" means handing the same model
another `Ops` (`model.use_ops(...)`), with the same parameters. `TORCH_OPS` is the reference
twin: nothing but PyTorch. Week 5's `kernels.py` builds the course's `Ops`; the capstone reuses
both.

Architecture (LLaMA-style GPT, the shape most current models share; GPT-2's choices are flags):
token embedding -> n_layers x [x + attn(norm(x)); x + mlp(norm(x))] -> norm -> LM head (tied to
the embedding). Attention: one fused QKV projection, rotary position embedding on q and k,
causal scaled-dot-product attention, output projection. MLP: SwiGLU, down(silu(gate(x)) * up(x)),
or GPT-2's GELU MLP.

Cost model per token, d = d_model, h = mlp_hidden, L = n_layers, V = vocab, T = context:
matmul FLOPs of the forward 2 * (L * (4 d^2 + k d h) + V d), k = 3 for SwiGLU (gate, up, down)
and 2 for GELU, plus attention 4 * T * d * L / 2 (causal); a training step is ~3x the forward.
`flops_per_token` returns it.

Deferred residual adds (when the `Ops` have `add_norm`): each half of a block ends with a residual
add whose result the next norm reads straight back (x = x + a; norm(x)). `add_norm` does the two in
one op (one pass over x, the fp32 residual stream under autocast, instead of the add's write and
the norm's read, and one pass backward too, where the residual gradient's add joins the norm's
backward). Inside a block, norm2 takes attention's output that way. The block's LAST add, x +
mlp(y), has its norm in the NEXT block (norm1) or in the final `norm_f`, so the block does not do
it: it returns (x, pending = mlp(y)) and the next norm adds pending in its add_norm. Measured on the
compiled 124M step (H100, 8 x 1024), per layer: the separate add 17.6 us + RMSNorm 15.1 us forward
against add_rmsnorm's 25.3 us, and RMSNorm's backward 27.8 us + the gradient add 27.5 us against
add_rmsnorm's backward 41 us: ~20 us a layer. Without `add_norm` (`TORCH_OPS`, the twin) every
add is where a torch model writes it and a block returns (x + mlp(...), None): the same ops, in
the same order, as a model that never heard of deferring.

Fused GEMMs (when the `Ops` have `linear_swiglu`, `linear_residual`, `norm_linear`: week 4's
fused_linear): the MLP's up GEMM writes silu(g) * u instead of [g | u]; attention's proj and the
MLP's down GEMM add the residual in their epilogue (x + W y, the stream's dtype); the RMSNorms are
applied to A inside the QKV and up GEMMs, so the normalized x is never written. With either of the
last two a block adds nothing later (`Block._forward_fused_gemms`): there is no add left to defer.

KV cache (inference): each layer keeps the keys and values of the positions seen so far, so
decoding one new token costs one token's projections plus attention over the cache, instead of a
forward over the whole prefix. `KVCache` holds fixed-size buffers (max_seq_len), which is also
what a CUDA-graph-captured decode step needs (static addresses).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

NORMS = ("rmsnorm", "layernorm")
MLPS = ("swiglu", "gelu")
POSITIONS = ("rope", "learned")


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 50304  # GPT-2's 50257 rounded up to a multiple of 128: friendlier GEMM shapes
    max_seq_len: int = 1024
    d_model: int = 768
    n_heads: int = 12
    n_layers: int = 12
    mlp_hidden: int | None = None  # None: 4d for GELU; for SwiGLU 2/3 of 4d rounded up to 64 (same params)
    norm: str = "rmsnorm"
    mlp: str = "swiglu"
    pos: str = "rope"
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    tie_embeddings: bool = True

    def __post_init__(self):
        for name in ("vocab_size", "max_seq_len", "d_model", "n_heads", "n_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"GPTConfig.{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"GPTConfig.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.pos == "rope" and self.head_dim % 2:
            raise ValueError(f"rotary embedding needs an even head dim, got {self.head_dim}")
        for name, allowed in (("norm", NORMS), ("mlp", MLPS), ("pos", POSITIONS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"GPTConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.mlp_hidden is not None and (not isinstance(self.mlp_hidden, int) or self.mlp_hidden < 1):
            raise ValueError(f"GPTConfig.mlp_hidden must be a positive int or None, got {self.mlp_hidden!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def hidden(self) -> int:
        if self.mlp_hidden is not None:
            return self.mlp_hidden
        if self.mlp == "gelu":
            return 4 * self.d_model
        return 64 * math.ceil(8 * self.d_model / 3 / 64)


# GPT-2 small's size (124 M parameters with GPT-2's vocabulary), LLaMA-style blocks.
GPT2_SMALL = GPTConfig()
# Trains for a few minutes on an H100; the week's profiling and swapping model.
GPT_SMALL = GPTConfig(vocab_size=256, max_seq_len=512, d_model=512, n_heads=8, n_layers=8)
# A CPU test runs a training step of this in milliseconds.
GPT_TINY = GPTConfig(vocab_size=96, max_seq_len=32, d_model=32, n_heads=2, n_layers=2)


def config(base: GPTConfig, **changes) -> GPTConfig:
    """A copy of a config with some fields changed (configs are frozen)."""
    return replace(base, **changes)


# --- the swappable operations ------------------------------------------------------------------

def torch_norm(x, weight, bias, eps: float, kind: str):
    if kind == "rmsnorm":
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def torch_rope(q, k, cos, sin):
    """Rotary embedding, "rotate half" convention, q and k (B, H, T, Dh), cos/sin (T, Dh/2) fp32."""
    cos = torch.cat((cos, cos), dim=-1).to(q.dtype)
    sin = torch.cat((sin, sin), dim=-1).to(q.dtype)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def torch_attention(q, k, v, causal: bool):
    """(B, H, Tq, Dh) queries against (B, H, Tk, Dh) keys/values; causal aligns the query block
    with the END of the keys (the queries are the newest positions, as in decoding)."""
    tq, tk = q.shape[2], k.shape[2]
    # tq == tk is asked first: for the same sequence it holds whatever the length, so an export
    # with a dynamic length (week 5's ONNX lesson) records no guard on it. Asking `tq == 1` first
    # made torch.export (2.9) guard seq != 1 and refuse the range 1 <= seq; with tq == tk == 1
    # the causal mask is one True, the same as none.
    if not causal:
        return F.scaled_dot_product_attention(q, k, v)
    if tq == tk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if tq == 1:  # decoding: the newest query sees every cached key
        return F.scaled_dot_product_attention(q, k, v)
    # Prefill after a cached prefix: query i sits at key position tk - tq + i.
    mask = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(diagonal=tk - tq)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def torch_swiglu(h):
    """silu(gate) * up for h = [gate | up] (..., 2 * hidden), the up projection's output."""
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


def torch_gelu(x):
    return F.gelu(x, approximate="tanh")


def torch_linear_cross_entropy(hidden, weight, targets, ignore_index: int = -100):
    """mean CE of (hidden @ weight^T) against targets; the (N, V) logits are materialized."""
    logits = hidden @ weight.t()
    return F.cross_entropy(logits.float(), targets, ignore_index=ignore_index)


@dataclass(frozen=True)
class Ops:
    """The operations a `GPT` calls for its hot spots; swap the record to swap the kernels."""
    name: str
    norm: Callable = torch_norm                  # (x, weight, bias, eps, kind) -> y
    rope: Callable = torch_rope                  # (q, k, cos, sin) -> (q, k)
    attention: Callable = torch_attention        # (q, k, v, causal) -> y
    swiglu: Callable = torch_swiglu              # ([gate | up]) -> silu(gate) * up
    gelu: Callable = torch_gelu                  # (x) -> gelu_tanh(x)
    linear_cross_entropy: Callable = torch_linear_cross_entropy  # (h, W, targets, ignore_index) -> loss
    # (x, delta, weight, bias, eps, kind, out_dtype) -> (x + delta, norm(x + delta) in out_dtype): the
    # residual add and the next norm in one op; None = the add, then `norm` (what a torch model writes).
    add_norm: Callable | None = None
    # Fused GEMMs (week 4's fused_linear); None = the model's nn.Linear with the op before or after it.
    linear_swiglu: Callable | None = None    # (x, W_gate_up) -> silu(x W_g^T) * (x W_u^T): the MLP's up + swiglu
    linear_residual: Callable | None = None  # (x, W, residual) -> residual + x W^T: proj / down + the residual add
    # (x, norm_weight, W, eps, swiglu) -> rms_norm(x) W^T (then silu(g) * u if swiglu): the norm in the GEMM
    norm_linear: Callable | None = None


TORCH_OPS = Ops("torch")


# --- the model ---------------------------------------------------------------------------------

class KVCache:
    """Fixed-size key/value buffers for every layer: (n_layers, B, H, max_seq_len, Dh) each."""

    def __init__(self, cfg: GPTConfig, batch: int, *, device, dtype):
        shape = (cfg.n_layers, batch, cfg.n_heads, cfg.max_seq_len, cfg.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0  # positions filled so far (the same for every layer and sequence)

    def append(self, layer: int, k, v):
        """Store k, v (B, H, T, Dh) at positions [length, length + T); return the cache up to there."""
        end = self.length + k.shape[2]
        if end > self.k.shape[3]:
            raise ValueError(f"KV cache is full: {end} positions > max_seq_len {self.k.shape[3]}")
        self.k[layer, :, :, self.length:end] = k
        self.v[layer, :, :, self.length:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]


class Norm(nn.Module):
    def __init__(self, cfg: GPTConfig, ops: Ops):
        super().__init__()
        self.kind, self.eps, self.ops = cfg.norm, cfg.norm_eps, ops
        self.weight = nn.Parameter(torch.ones(cfg.d_model))
        self.bias = nn.Parameter(torch.zeros(cfg.d_model)) if cfg.norm == "layernorm" else None

    def forward(self, x):
        return self.ops.norm(x, self.weight, self.bias, self.eps, self.kind)

    def add_forward(self, x, delta=None, out_dtype: torch.dtype | None = None):
        """(x + delta, norm(x + delta)): the residual add before this norm and the norm, one op when
        the ops have `add_norm` (its h = x + delta comes in x's dtype when delta's is lower, as torch's
        add promotes; y may come in `out_dtype`, the next matmul's). Without `add_norm` the add, then
        `norm`, y in h's dtype; delta None: (x, norm(x))."""
        if delta is None:
            return x, self(x)
        if self.ops.add_norm is None:
            x = x + delta
            return x, self(x)
        return self.ops.add_norm(x, delta, self.weight, self.bias, self.eps, self.kind, out_dtype)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig, ops: Ops):
        super().__init__()
        self.cfg, self.ops = cfg, ops
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)  # one GEMM, not three
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x, rope=None, cache: KVCache | None = None, layer: int = 0, norm: "Norm | None" = None,
                residual=None):
        """Attention's output projection of x; with `norm`, x is normalized inside the QKV GEMM
        (ops.norm_linear); with `residual`, residual + that projection (in its epilogue with
        ops.linear_residual)."""
        B, T, C = x.shape
        qkv = self.ops.norm_linear(x, norm.weight, self.qkv.weight, norm.eps) if norm is not None else self.qkv(x)
        # (B, T, 3C) -> three (B, H, T, Dh) VIEWS of the one projection: no copies. RoPE and
        # attention read strided tensors (last dimension contiguous); a `.contiguous()` here
        # would move q, k and v through HBM once more, forward and backward, for nothing.
        q, k, v = qkv.view(B, T, 3, self.cfg.n_heads, self.cfg.head_dim).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if rope is not None:
            q, k = self.ops.rope(q, k, *rope)
        if cache is not None:
            k, v = cache.append(layer, k, v)
        y = self.ops.attention(q, k, v, True).transpose(1, 2).reshape(B, T, C)
        return _project(self.ops, y, self.proj, residual)


def _project(ops: "Ops", y, linear: nn.Linear, residual):
    """linear(y), plus residual when given: in the GEMM's epilogue with ops.linear_residual."""
    if residual is None:
        return linear(y)
    if ops.linear_residual is not None:
        return ops.linear_residual(y, linear.weight, residual)
    return residual + linear(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig, ops: Ops):
        super().__init__()
        self.kind, self.ops = cfg.mlp, ops
        width = 2 * cfg.hidden if cfg.mlp == "swiglu" else cfg.hidden  # gate and up in one GEMM
        self.up = nn.Linear(cfg.d_model, width, bias=False)
        self.down = nn.Linear(cfg.hidden, cfg.d_model, bias=False)

    def forward(self, x, norm: "Norm | None" = None, residual=None):
        """down(act(up(x))); with `norm`, x normalized inside the up GEMM (ops.norm_linear); with
        `residual`, residual + that (ops.linear_residual: in the down GEMM's epilogue). SwiGLU in the
        up GEMM's epilogue with ops.linear_swiglu."""
        fused_swiglu = self.kind == "swiglu" and self.ops.linear_swiglu is not None
        if norm is not None:
            h = self.ops.norm_linear(x, norm.weight, self.up.weight, norm.eps, fused_swiglu)
        elif fused_swiglu:
            h = self.ops.linear_swiglu(x, self.up.weight)
        else:
            h = self.up(x)
        if self.kind == "swiglu" and not fused_swiglu:  # h = [gate | up]: the op takes both halves as one tensor
            h = self.ops.swiglu(h)
        elif self.kind != "swiglu":
            h = self.ops.gelu(h)
        return _project(self.ops, h, self.down, residual)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, ops: Ops):
        super().__init__()
        self.norm1, self.attn = Norm(cfg, ops), Attention(cfg, ops)
        self.norm2, self.mlp = Norm(cfg, ops), MLP(cfg, ops)

    def forward(self, x, rope=None, cache: KVCache | None = None, layer: int = 0, pending=None):
        """(x, pending) -> (x, pending): the residual stream is x + pending, pending None meaning x.

        With `add_norm` the block's last residual add is left to the next norm (see the module
        docstring): it returns (x, mlp output), and adds the pending input in norm1. Without it
        (the torch twin) it returns (x + attn + mlp, None), today's ops in today's order."""
        ops = self.norm1.ops
        if ops.linear_residual is not None or ops.norm_linear is not None:
            return self._forward_fused_gemms(x, rope, cache, layer, pending), None
        # y of norm1 / norm2 goes only to a matmul (qkv, the MLP's up): it may come in that matmul's
        # dtype (autocast's), which saves the cast autocast would make.
        out_dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else None
        x, h = self.norm1.add_forward(x, pending, out_dtype)
        x, y = self.norm2.add_forward(x, self.attn(h, rope, cache, layer), out_dtype)
        if self.norm2.ops.add_norm is None:
            return x + self.mlp(y), None
        return x, self.mlp(y)

    def _forward_fused_gemms(self, x, rope, cache, layer, pending):
        """The block with its residual adds in the projections' epilogues (ops.linear_residual) and/or
        its norms in the next GEMM's prologue (ops.norm_linear, RMSNorm only): nothing is deferred
        to the next norm (the adds are already fused), so it returns the residual stream itself."""
        if pending is not None:  # a previous block deferred its add (add_norm): do it here
            x = x + pending
        prologue = self.norm1.ops.norm_linear is not None and self.norm1.kind == "rmsnorm"
        x = self.attn(x if prologue else self.norm1(x), rope, cache, layer,
                      norm=self.norm1 if prologue else None, residual=x)
        return self.mlp(x if prologue else self.norm2(x), norm=self.norm2 if prologue else None, residual=x)


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig, ops: Ops = TORCH_OPS):
        super().__init__()
        self.cfg, self.ops = cfg, ops
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.pos == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg, ops) for _ in range(cfg.n_layers))
        self.norm_f = Norm(cfg, ops)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok.weight
        if cfg.pos == "rope":  # buffers: they follow the model to its device, and are not weights
            cos, sin = self._rope_angles(torch.device("cpu"))
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self, seed: int | None = None):
        """GPT-2's initialization: N(0, 0.02), residual projections scaled by 1/sqrt(2 L)."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue  # norm weights stay 1, biases 0
            std = 0.02 / math.sqrt(2 * self.cfg.n_layers) if name.endswith(("proj.weight", "down.weight")) else 0.02
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=gen) * std)

    def use_ops(self, ops: Ops) -> "GPT":
        """Swap the operations (kernels) every layer calls; the parameters are untouched."""
        if not isinstance(ops, Ops):
            raise TypeError(f"ops must be an Ops record, got {type(ops).__name__}")
        for module in self.modules():
            if hasattr(module, "ops"):
                module.ops = ops
        return self

    def _rope_angles(self, device):
        """cos/sin of every position's angles, (max_seq_len, Dh/2), computed in fp64, rounded once."""
        dh = self.cfg.head_dim
        inv_freq = self.cfg.rope_base ** (-torch.arange(0, dh, 2, dtype=torch.float64, device=device) / dh)
        angles = torch.outer(torch.arange(self.cfg.max_seq_len, dtype=torch.float64, device=device), inv_freq)
        return angles.cos().float(), angles.sin().float()

    def _apply(self, fn, recurse=True):
        # model.to(torch.bfloat16) would cast the tables too: keep them float32, recomputed where they
        # now live (the angle of position 1000 needs more than bf16's 8 bits).
        super()._apply(fn, recurse)
        if self.cfg.pos == "rope" and self.rope_cos.dtype != torch.float32:
            self.rope_cos, self.rope_sin = self._rope_angles(self.rope_cos.device)
        return self

    def rope_tables(self, start: int, length: int):
        """cos/sin (length, Dh/2) in float32 for positions [start, start + length).

        Slices of the tables of all max_seq_len positions, which the model holds as buffers:
        computed once, moved with the model, never recomputed or copied per step. A decoding step
        asks for one new position each time (computing it on the CPU and copying it over would be
        a host-to-device copy, a synchronization, per token), and a compiled step must not compute
        them inside its graph (they would live in the graph's output memory, which a CUDA-graph
        replay overwrites). Row slices of a contiguous table are contiguous views: no allocation."""
        return self.rope_cos[start:start + length], self.rope_sin[start:start + length]

    def hidden(self, idx, *, start: int = 0, cache: KVCache | None = None):
        """Token ids (B, T) -> final normalized hidden states (B, T, d)."""
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"idx must be a (batch, time) tensor of integer token ids, got "
                             f"{getattr(idx, 'dtype', type(idx).__name__)} {tuple(getattr(idx, 'shape', ()))}")
        T = idx.shape[1]
        if start + T > self.cfg.max_seq_len:
            raise ValueError(f"positions {start}..{start + T - 1} exceed max_seq_len {self.cfg.max_seq_len}")
        x = self.tok(idx)
        rope = None
        if self.pos is not None:
            x = x + self.pos(torch.arange(start, start + T, device=idx.device))
        else:
            rope = self.rope_tables(start, T)
        pending = None  # the last block's residual branch, added by the final norm (add_norm)
        for layer, block in enumerate(self.blocks):
            x, pending = block(x, rope, cache, layer, pending)
        # y in x's dtype (no out_dtype): `hidden` is public, and the LM head / loss casts it anyway
        return self.norm_f.add_forward(x, pending)[1]

    def forward(self, idx, *, start: int = 0, cache: KVCache | None = None):
        """Token ids (B, T) -> logits (B, T, vocab)."""
        return self.head(self.hidden(idx, start=start, cache=cache))

    def loss(self, idx, targets, ignore_index: int = -100):
        """Mean next-token cross-entropy. The LM head and the loss are one op, so a fused kernel
        can avoid materializing the (B*T, vocab) logits."""
        h = self.hidden(idx)
        return self.ops.linear_cross_entropy(h.reshape(-1, h.shape[-1]), self.head.weight,
                                             targets.reshape(-1), ignore_index)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied weight is counted once


def flops_per_token(cfg: GPTConfig, *, context: int | None = None, training: bool = True) -> float:
    """Matmul FLOPs per token (causal attention included); x3 for a training step."""
    d, L = cfg.d_model, cfg.n_layers
    T = context or cfg.max_seq_len
    k = 3 if cfg.mlp == "swiglu" else 2
    forward = 2 * (L * (4 * d * d + k * d * cfg.hidden) + cfg.vocab_size * d) + 2 * L * T * d
    return 3 * forward if training else forward


@torch.no_grad()
def generate(model: GPT, idx, max_new_tokens: int, *, use_cache: bool = True, temperature: float = 0.0,
             generator: torch.Generator | None = None):
    """Extend idx (B, T) by max_new_tokens tokens: greedy when temperature == 0, else sampled.

    With the cache, the prompt is run once (prefill) and each new token costs one position;
    without it, every step re-runs the model over the whole sequence so far.
    """
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if idx.shape[1] + max_new_tokens > model.cfg.max_seq_len:
        raise ValueError(f"prompt ({idx.shape[1]}) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"max_seq_len {model.cfg.max_seq_len}")
    out = idx
    cache = KVCache(model.cfg, idx.shape[0], device=idx.device, dtype=model.tok.weight.dtype) if use_cache else None
    step_input, start = idx, 0
    for _ in range(max_new_tokens):
        if use_cache:
            logits = model(step_input, start=start, cache=cache)
            start = cache.length = start + step_input.shape[1]
        else:
            logits = model(out)
        nxt = pick_token(logits[:, -1].float(), temperature, generator)
        out = torch.cat((out, nxt), dim=1)
        step_input = nxt
    return out


def pick_token(logits, temperature: float, generator=None):
    if temperature == 0.0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)
