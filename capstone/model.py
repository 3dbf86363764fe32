"""The capstone model: one GPT, two sets of operations, and the ladder between them.

The model is week 5's `GPT` (week5_integration/model.py): a LLaMA-style GPT whose hot operations
are called through an `Ops` record. The capstone adds nothing to the architecture; it fixes the
configurations, names the two twins and the steps between them:

* the **reference twin** runs `TORCH_OPS`: nothing but PyTorch (SDPA, F.rms_norm, the rotate-half
  RoPE, silu(g) * u, a full-logits cross-entropy). It is what a learner would write.
* the **fast model** runs `FAST_OPS` = week 5's `COURSE_OPS`: the week-4 Triton kernels, each with
  its own backward: FlashAttention-2 (forward + backward), RMSNorm, RoPE, SwiGLU, and the fused
  linear + cross-entropy that never materializes the (tokens x vocab) logits.

Both are the same `nn.Module` class with the same parameters, so `reference_twin(fast)` is a
state_dict copy and any difference between them is the kernels'.

`LADDER` turns the reference into the fast model one group of kernels at a time (eager ->
+flash attention -> +fused norms/RoPE/SwiGLU -> +fused CE), so a benchmark can show what each
step buys in the whole training step (measure.py; the cost model of each step is in README.md).
Past `fast` it climbs on with the fused GEMMs of week 4's fused_linear (issue 32), one fusion a rung:
+SwiGLU in the up GEMM's epilogue -> +residual adds in proj's and down's epilogues -> +RMSNorm in
the QKV and up GEMMs' prologue, the last rung being `fused_gemm_ops()` ("fused_gemms").
Beside that ladder, `wgmma_gemm_ops()` ("wgmma_gemms") is `fast` with the same SwiGLU and residual
fusions on week 1's CUDA C persistent wgmma kernels (sm_90a only; no norm prologue there; the
residual stream in bf16): capstone/wgmma_ops.py says why and what it adapts.
Beside it too, `attention_ops(kind)` ("sdpa_attention", "triton_attention", "hopper_attention") is `fast`
with its attention forced to torch's SDPA, week 4's Triton kernel, or week 4's CUDA C Hopper kernels
(sm_90a): the attention's share of the step, one choice at a time (capstone/attention_ops.py).

Vocabulary. The corpus is generated text tokenized as bytes (week5_integration/data.py: 256
ids, nothing to download or train). `tiny` uses exactly those 256. `gpt2_124m` uses GPT-2's
padded vocabulary, 50304 (= 50257 rounded up to a multiple of 128), with the bytes as ids
0..255 and the rest never seen in the data. Why not 256? Because the point of the headline
configuration is GPT-2 small's *cost profile*: with V = 50304 the LM head is 38.6 M of the
124 M parameters and ~25 % of the matmul FLOPs, and the logits of a 8 x 1024 batch are 8192 x
50304 values, 1.6 GB in fp32: the tensor the fused cross-entropy exists to avoid. With V = 256
the logits are 8 MB and the fused loss would be measured on a problem it does not address.
The unused rows still cost what they cost in GPT-2 (their logits are computed and pushed down
by the softmax), so the throughput numbers are those of a 124 M GPT-2-small-shaped model.
"""
from __future__ import annotations

import dataclasses

import torch

from course.gpu import DEVICE
from week5_integration import data
from week5_integration import model as m

GPTConfig, GPT, KVCache, TORCH_OPS = m.GPTConfig, m.GPT, m.KVCache, m.TORCH_OPS

PRESETS = {
    # CPU tests: the Triton kernels run in the interpreter, so everything is tiny. Head dim 32
    # is one the flash-attention kernel supports (16, 32, 64, 128).
    "tiny": GPTConfig(vocab_size=data.VOCAB_SIZE, max_seq_len=32, d_model=64, n_heads=2, n_layers=2),
    # A quick GPU run (a loss curve in a minute): bytes vocabulary, 8 layers of 512.
    "small": GPTConfig(vocab_size=data.VOCAB_SIZE, max_seq_len=512, d_model=512, n_heads=8, n_layers=8),
    # The headline: GPT-2 small's shape, 12 x 768, 12 heads of 64, 1024 context, V = 50304 (see above).
    "gpt2_124m": GPTConfig(vocab_size=50304, max_seq_len=1024, d_model=768, n_heads=12, n_layers=12),
}


def preset(name: str | GPTConfig, **changes) -> GPTConfig:
    """A preset by name (or a config passed through), with some fields changed."""
    if isinstance(name, GPTConfig):
        cfg = name
    elif name in PRESETS:
        cfg = PRESETS[name]
    else:
        raise ValueError(f"config must be one of {sorted(PRESETS)} or a GPTConfig, got {name!r}")
    if cfg.vocab_size < data.VOCAB_SIZE:
        raise ValueError(f"the corpus is bytes: vocab_size must be >= {data.VOCAB_SIZE}, got {cfg.vocab_size}")
    return m.config(cfg, **changes) if changes else cfg


def fast_ops() -> m.Ops:
    """The course's kernels in the Ops record (imported lazily: Triton compiles on first use)."""
    from week5_integration.kernels import COURSE_OPS
    return dataclasses.replace(COURSE_OPS, name="fast")


def fused_gemm_ops() -> m.Ops:
    """`fast` with the fused GEMMs of week 4's fused_linear (issue 32): SwiGLU in the up GEMM's
    epilogue, the residual adds in proj's and down's, the RMSNorms in the QKV and up GEMMs' prologue."""
    from week4_triton_dl import fused_linear as fl
    return dataclasses.replace(fast_ops(), name="fused_gemms", **{
        "linear_swiglu": fl.linear_swiglu, "linear_residual": fl.linear_residual, "norm_linear": fl.norm_linear})


def wgmma_gemm_ops() -> m.Ops:
    """`fast` with week 1's CUDA C fused GEMMs (SwiGLU in the up GEMM's epilogue, the residual adds in
    proj's and down's): capstone/wgmma_ops.py. Runs on sm_90a only (`wgmma_ops.unsupported()`)."""
    from capstone import wgmma_ops
    return wgmma_ops.wgmma_gemm_ops(fast_ops())


def attention_ops(kind: str) -> m.Ops:
    """`fast` with its attention forced to `kind`: "sdpa" (torch's), "triton" (week 4's op, flash_blocked) or
    "hopper" (week 4's CUDA C forward and backward, sm_90a only: `attention_ops.unsupported()`)."""
    from capstone import attention_ops as ao
    return ao.attention_ops(fast_ops(), kind)


# The ladder's groups, in order: each rung adds one group of fields to the one before.
LADDER = (("+flash_attention", ("attention",)),
          ("+fused_norm_rope_swiglu", ("norm", "add_norm", "rope", "swiglu")),
          ("+fused_ce", ("linear_cross_entropy",)),
          ("+swiglu_gemm", ("linear_swiglu",)),
          ("+residual_gemm", ("linear_residual",)),
          ("+norm_gemm", ("norm_linear",)))
FAST_RUNG = "+fused_ce"  # the rung that is `fast` (COURSE_OPS); the rungs after it: the fused GEMMs


def ladder() -> list[m.Ops]:
    """[eager, +flash attention, +fused norms/RoPE/SwiGLU, +fused CE (= fast), +SwiGLU in the up GEMM,
    +residual adds in the GEMMs, +norms in the GEMMs (= fused_gemms)]: each rung adds one group of
    course kernels to the one before, the order the README's table follows."""
    full = fused_gemm_ops()
    rungs, current = [dataclasses.replace(TORCH_OPS, name="eager")], {}
    for name, fields in LADDER:
        current.update({f: getattr(full, f) for f in fields})
        rungs.append(dataclasses.replace(TORCH_OPS, name=name, **current))
    return rungs


ATTENTION_OPS = ("sdpa_attention", "triton_attention", "hopper_attention")  # attention_ops(kind): "<kind>_attention"
OPS_NAMES = ("reference", "fast", "fused_gemms", "wgmma_gemms", *ATTENTION_OPS)


def resolve_ops(ops: str | m.Ops) -> m.Ops:
    if isinstance(ops, m.Ops):
        return ops
    if ops == "reference":
        return dataclasses.replace(TORCH_OPS, name="reference")
    if ops == "fast":
        return fast_ops()
    if ops == "fused_gemms":
        return fused_gemm_ops()
    if ops == "wgmma_gemms":
        return wgmma_gemm_ops()
    if ops in ATTENTION_OPS:
        return attention_ops(ops.removesuffix("_attention"))
    raise ValueError(f"ops must be one of {OPS_NAMES} or an Ops record, got {ops!r}")


def build(config: str | GPTConfig = "tiny", ops: str | m.Ops = "fast", *, seed: int = 0, device=None,
          dtype: torch.dtype | None = None) -> GPT:
    """A seeded GPT on `device` (default: the course's) running `ops`; same seed, same weights
    whatever the ops (the weights are drawn on the CPU, then moved)."""
    cfg = preset(config)
    model = GPT(cfg)
    model.reset_parameters(seed)
    model = model.to(DEVICE if device is None else device)
    if dtype is not None:
        model = model.to(dtype)
    return model.use_ops(resolve_ops(ops))


def reference_twin(model: GPT) -> GPT:
    """A pure-PyTorch copy of `model`: same config, same weights (a state_dict load), TORCH_OPS."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a week5 GPT, got {type(model).__name__}")
    weight = model.tok.weight
    twin = GPT(model.cfg).to(device=weight.device, dtype=weight.dtype)
    twin.load_state_dict(model.state_dict())
    return twin.use_ops(resolve_ops("reference"))


def count_parameters(cfg: str | GPTConfig) -> int:
    with torch.device("meta"):
        return m.count_parameters(GPT(preset(cfg)))


flops_per_token = m.flops_per_token
