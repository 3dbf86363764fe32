"""Training the week-5 GPT: AdamW, bf16 autocast, gradient clipping, cosine LR with warm-up, timed.

The loop every later lesson (profiling, swapping kernels, the capstone) runs, written once:

* data: random windows of the generated corpus (`data.Batches`, seeded: two runs with different
  kernels see the same batches in the same order, so their losses can be compared step by step);
* AdamW with decoupled weight decay on the matrices only (norm weights and biases are not
  decayed: shrinking a gain towards 0 is not regularization, it is damage), betas (0.9, 0.95)
  as GPT-style models use; `fused=True` on a GPU: one multi-tensor kernel updates every
  parameter instead of several launches per parameter;
* bf16 autocast on a GPU with bf16 tensor cores: matmuls in bf16, weights, optimizer state and
  the residual stream in fp32; no GradScaler, since bf16 keeps fp32's exponent range;
* gradient clipping to a global norm (`clip_grad_norm_`, foreach: no host sync);
* learning rate: linear warm-up over `warmup` steps, then cosine decay to `min_lr_ratio * lr`
  at the last step (`lr_at`).

Timing: a GPU step is bracketed by CUDA events (the host runs ahead; only the events know when
the GPU finished), no `.item()` inside the loop (each would stall the host until the GPU
drains), losses and gradient norms are copied out once at the end. The first `skip` steps
(Triton autotuning, torch.compile, cuBLAS heuristics) are left out of the median step time.
On the CPU the host clock times each step.

Cost per step: `model.flops_per_token(cfg) * batch * seq_len` FLOPs (`TrainResult.tflops`).

    python -m week5_integration.train --config small --ops torch --steps 200
    python -m week5_integration.train --config small --ops course --steps 200
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass, field, replace

import torch

from course import runtime
from course.bench_clock import LoopClock, Timing
from week5_integration import data
from week5_integration import model as m

CONFIGS = {"tiny": m.GPT_TINY, "small": m.GPT_SMALL, "gpt2": m.GPT2_SMALL}


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 200
    batch: int = 32
    seq_len: int | None = None    # None: the model's max_seq_len
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup: int = 20
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    grad_clip: float | None = 1.0  # None: no clipping
    amp: bool | None = None       # None: bf16 autocast where the GPU has bf16 tensor cores
    seed: int = 0
    corpus_bytes: int = 1 << 20
    skip: int = 3                 # steps left out of the timing (autotuning, compilation)

    def __post_init__(self):
        for name in ("steps", "batch", "corpus_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name} must be a positive int, got {value!r}")
        for name in ("warmup", "skip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"TrainConfig.{name} must be an int >= 0, got {value!r}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"TrainConfig.lr must be a positive number, got {self.lr!r}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"TrainConfig.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"TrainConfig.grad_clip must be > 0 or None, got {self.grad_clip!r}")
        if self.seq_len is not None and (not isinstance(self.seq_len, int) or self.seq_len < 1):
            raise ValueError(f"TrainConfig.seq_len must be a positive int or None, got {self.seq_len!r}")


def lr_at(step: int, tc: TrainConfig) -> float:
    """Learning rate of step `step` (0-based): linear warm-up to tc.lr, then cosine to min_lr_ratio * lr.

    Warm-up: step s < warmup gets lr * (s + 1) / warmup (never 0: step 0 must move the weights).
    Decay: over the remaining steps the cosine goes from lr (first step after warm-up) to
    min_lr_ratio * lr (the last step, steps - 1).
    """
    # BEGIN EXERCISE: refuse steps outside [0, tc.steps) with ValueError("step must be in ..."). Warm-up:
    #   step s < tc.warmup gets tc.lr * (s + 1) / tc.warmup. Then a cosine from tc.lr (first step after the
    #   warm-up) to tc.min_lr_ratio * tc.lr at the last step (tc.steps - 1).
    # HINT: Linear warm-up then cosine decay: warm-up avoids huge early updates while Adam's statistics are
    #   poor; the cosine ends at a floor, not at 0.
    # HINT: Validate the step range; during warm-up scale lr by (s + 1) / warmup; after it compute progress
    #   in [0, 1] over the remaining steps (guard a zero-length decay), then interpolate between floor and
    #   lr with 0.5 (1 + cos(pi * progress)).
    # HINT: `floor + (tc.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))`
    if step < 0 or step >= tc.steps:
        raise ValueError(f"step must be in [0, {tc.steps}), got {step}")
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    decay_steps = tc.steps - 1 - tc.warmup
    progress = (step - tc.warmup) / decay_steps if decay_steps > 0 else 1.0
    floor = tc.min_lr_ratio * tc.lr
    return floor + (tc.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    # END EXERCISE


def has_bf16_tensor_cores(device: torch.device) -> bool:
    """sm_80 (Ampere) or newer. A T4 (sm_75) emulates bf16: slow, and Triton's bf16 dot refuses it."""
    return device.type == "cuda" and runtime.has_capability((8, 0), device)


def amp_enabled(tc: TrainConfig, device: torch.device) -> bool:
    """bf16 autocast: on when asked, or by default on a GPU with bf16 tensor cores (sm_80+)."""
    if tc.amp is not None:
        if tc.amp and device.type == "cuda" and not has_bf16_tensor_cores(device):
            raise ValueError("amp=True asks for bf16 autocast, but this GPU has no bf16 tensor cores (sm_80+)")
        return tc.amp
    return has_bf16_tensor_cores(device)


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Matrices (embeddings, linear weights) decayed; vectors (norm gains, biases) not."""
    # BEGIN EXERCISE: two groups of the parameters that require grad: dim >= 2 with weight_decay, the rest
    #   with 0.0.
    # HINT: Weight decay is meant for matrices (it limits their norm); applied to norm gains and biases it
    #   only pulls them towards 0 and hurts.
    # HINT: Split the trainable parameters by p.dim() (>= 2 decayed, < 2 not) into two dicts with "params"
    #   and "weight_decay".
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # END EXERCISE


def make_optimizer(model: torch.nn.Module, tc: TrainConfig) -> torch.optim.AdamW:
    on_cuda = next(model.parameters()).device.type == "cuda"
    # fused: one kernel for all parameters' updates (CUDA only); foreach on the CPU.
    return torch.optim.AdamW(param_groups(model, tc.weight_decay), lr=tc.lr, betas=tc.betas,
                             fused=on_cuda or None, foreach=None if on_cuda else True)


def make_batches(cfg: m.GPTConfig, tc: TrainConfig, device=None):
    """(training batches, held-out tokens) from the generated stories corpus (bytes as tokens)."""
    if cfg.vocab_size < data.VOCAB_SIZE:
        raise ValueError(f"the corpus is bytes (vocabulary {data.VOCAB_SIZE}); the model's vocab_size is "
                         f"{cfg.vocab_size}: use m.config(cfg, vocab_size={data.VOCAB_SIZE})")
    seq_len = tc.seq_len or cfg.max_seq_len
    if seq_len > cfg.max_seq_len:
        raise ValueError(f"seq_len {seq_len} exceeds the model's max_seq_len {cfg.max_seq_len}")
    train_tokens, val_tokens = data.split(data.encode(data.corpus("stories", tc.corpus_bytes, seed=tc.seed)))
    device = runtime.DEVICE if device is None else device
    return data.Batches(train_tokens, tc.batch, seq_len, seed=tc.seed, device=device), val_tokens


def make_step(model: m.GPT, opt: torch.optim.Optimizer, tc: TrainConfig, *, loss_fn=None):
    """step(x, y, lr) -> (loss, grad norm), both device tensors (no host sync).

    `loss_fn(x, y)` defaults to `model.loss`; pass `torch.compile(model.loss)` to compile it.
    """
    # BEGIN EXERCISE: return step(x, y, lr): set lr in every param group, zero the grads (set_to_none),
    #   compute loss_fn(x, y) (default model.loss) under torch.autocast(device type, bfloat16,
    #   enabled=amp_enabled(...)), backward, clip_grad_norm_(params, tc.grad_clip, foreach=True) when
    #   tc.grad_clip is set (else compute the global norm), opt.step(); return (loss.detach(),
    #   norm.detach()). No .item().
    # HINT: A training step as a closure that never syncs with the host: the loss and grad norm stay device
    #   tensors, so the GPU can run ahead of Python.
    # HINT: Resolve device, autocast flag, loss function and trainable params once, outside the closure;
    #   inside: set lr in every param group, zero grads with set_to_none, forward under
    #   torch.autocast(bfloat16), backward, clip (or just measure) the global grad norm, opt.step, return
    #   detached tensors.
    # HINT: `norm = torch.nn.utils.clip_grad_norm_(params, tc.grad_clip, foreach=True)`: it returns the
    #   pre-clip norm as a tensor, no .item().
    device = next(model.parameters()).device
    amp = amp_enabled(tc, device)
    loss_fn = model.loss if loss_fn is None else loss_fn
    params = [p for p in model.parameters() if p.requires_grad]

    def step(x, y, lr: float):
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(x, y)
        loss.backward()
        if tc.grad_clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(params, tc.grad_clip, foreach=True)
        else:
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
        opt.step()
        return loss.detach(), norm.detach()

    return step
    # END EXERCISE


@dataclass
class TrainResult:
    losses: list
    lrs: list
    grad_norms: list
    step_ms: list                # per step: CUDA events on a GPU, host clock on the CPU
    tokens_per_step: int
    flops_per_step: float
    skip: int                    # leading steps left out of the timing
    timer: str                   # "cuda_events" or "host_clock"
    extra: dict = field(default_factory=dict)
    # the timed steps' (after `skip`) Timing from the kit's clock (course/bench_clock.py): on a GPU, whether
    # the host paced them (host_bound, host_ms); None where no step was timed
    timing: Timing | None = None

    @property
    def median_step_ms(self) -> float:
        timed = self.step_ms[self.skip:] or self.step_ms
        return statistics.median(timed)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / (self.median_step_ms * 1e-3)

    @property
    def tflops(self) -> float:
        return self.flops_per_step / (self.median_step_ms * 1e-3) / 1e12

    def summary(self) -> dict:
        return {"steps": len(self.losses), "first_loss": self.losses[0], "last_loss": self.losses[-1],
                "median_step_ms": self.median_step_ms, "tokens_per_s": self.tokens_per_s,
                "tflops": self.tflops, "timer": self.timer, **self.extra}


def train(model: m.GPT, batches: data.Batches, tc: TrainConfig, *, opt=None, loss_fn=None,
          on_step=None) -> TrainResult:
    """Run tc.steps optimizer steps; returns losses, learning rates, gradient norms and timings.

    `on_step(step, loss_tensor)` is called after each step (it may sync: for logging only).
    """
    device = next(model.parameters()).device
    opt = make_optimizer(model, tc) if opt is None else opt
    step = make_step(model, opt, tc, loss_fn=loss_fn)
    model.train()
    use_events = device.type == "cuda"
    skip = min(tc.skip, max(tc.steps - 1, 0))
    # The kit's clock (course/bench_clock.py): one for the steps left out (autotuning, compilation), one for
    # the timed steps, so that the timed loop's host time per step (half of the host-bound rule) is not the
    # compiler's. The warm-up clock is read (a synchronize) before the first timed step.
    warm, timed = LoopClock(skip, events=use_events), LoopClock(tc.steps - skip, events=use_events)
    losses, norms, lrs = [], [], []
    for i in range(tc.steps):
        if i == skip and len(warm):
            warm.timing()
        clock = warm if i < skip else timed
        x, y = batches.next()
        lr = lr_at(i, tc)
        clock.start()
        loss, norm = step(x, y, lr)
        clock.stop()
        losses.append(loss)
        norms.append(norm)
        lrs.append(lr)
        if on_step is not None:
            on_step(i, loss)
    timing = timed.timing() if len(timed) else None
    step_ms = (warm.timing().samples if len(warm) else []) + (timing.samples if timing else [])
    tokens = batches.batch * batches.seq_len
    return TrainResult(losses=torch.stack(losses).float().tolist(), lrs=lrs,
                       grad_norms=torch.stack(norms).float().tolist(), step_ms=step_ms,
                       tokens_per_step=tokens,
                       flops_per_step=m.flops_per_token(model.cfg, context=batches.seq_len) * tokens,
                       skip=skip, timer="cuda_events" if use_events else "host_clock", timing=timing)


@torch.no_grad()
def evaluate(model: m.GPT, tokens: torch.Tensor, tc: TrainConfig, *, n_batches: int = 8) -> float:
    """Mean loss over n_batches seeded random windows of held-out tokens."""
    device = next(model.parameters()).device
    seq_len = tc.seq_len or model.cfg.max_seq_len
    batches = data.Batches(tokens, tc.batch, min(seq_len, len(tokens) - 1), seed=tc.seed + 1, device=device)
    model.eval()
    total = 0.0
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp_enabled(tc, device)):
        for _ in range(n_batches):
            x, y = batches.next()
            total += float(model.loss(x, y))
    model.train()
    return total / n_batches


def build_model(config: str | m.GPTConfig, ops: str | m.Ops = "torch", *, seed: int = 0, device=None) -> m.GPT:
    """A GPT with byte vocabulary, seeded weights, on the course's device, using these ops."""
    if isinstance(config, str) and config not in CONFIGS:
        raise ValueError(f"config must be one of {sorted(CONFIGS)}, got {config!r}")
    cfg = byte_vocab(CONFIGS[config] if isinstance(config, str) else config)
    torch.manual_seed(seed)
    model = m.GPT(cfg).to(runtime.DEVICE if device is None else device)
    return model.use_ops(resolve_ops(ops))


def byte_vocab(cfg: m.GPTConfig) -> m.GPTConfig:
    """cfg with a vocabulary of at least the corpus's 256 bytes (GPT_TINY has 96)."""
    return cfg if cfg.vocab_size >= data.VOCAB_SIZE else m.config(cfg, vocab_size=data.VOCAB_SIZE)


def resolve_ops(ops: str | m.Ops) -> m.Ops:
    if isinstance(ops, m.Ops):
        return ops
    if ops == "torch":
        return m.TORCH_OPS
    if ops == "course":
        from week5_integration.kernels import COURSE_OPS
        return COURSE_OPS
    raise ValueError(f"ops must be 'torch', 'course' or an Ops record, got {ops!r}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small")
    parser.add_argument("--ops", choices=("torch", "course"), default="torch")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=None, help="default: 32 on a GPU, 4 on the CPU")
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--compile", action="store_true", help="torch.compile the loss (forward + backward)")
    parser.add_argument("--log-every", type=int, default=20)
    args = parser.parse_args(argv)
    tc = TrainConfig(steps=args.steps, batch=args.batch or runtime.pick(gpu=32, sim=4), seq_len=args.seq_len,
                     lr=args.lr, warmup=min(20, max(1, args.steps // 10)))
    model = build_model(args.config, args.ops, seed=tc.seed)
    batches, val = make_batches(model.cfg, tc)
    loss_fn = torch.compile(model.loss) if args.compile else None

    def log(i, loss):
        if args.log_every and (i % args.log_every == 0 or i == tc.steps - 1):
            print(f"step {i:5d}  loss {float(loss):.4f}  lr {lr_at(i, tc):.2e}", flush=True)

    print(f"{args.config} ({m.count_parameters(model) / 1e6:.2f} M parameters), ops={args.ops}, "
          f"batch {tc.batch} x {batches.seq_len}, amp={amp_enabled(tc, runtime.DEVICE)}, {runtime.DEVICE}")
    result = train(model, batches, tc, loss_fn=loss_fn, on_step=log)
    s = result.summary()
    val_loss = evaluate(model, val, replace(tc, batch=min(tc.batch, 8)))
    print(f"median step {s['median_step_ms']:.2f} ms ({s['timer']}), {s['tokens_per_s']:,.0f} tokens/s, "
          f"{s['tflops']:.1f} TFLOP/s; loss {s['first_loss']:.3f} -> {s['last_loss']:.3f}, val {val_loss:.3f}")
    if not runtime.on_gpu():
        print("(CPU: the Triton kernels run in the interpreter; these times measure Python)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
