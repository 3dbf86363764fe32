"""The fine-tuning experiment: full fine-tuning vs LoRA vs QLoRA, on the week's GPT.

Over 500 lines: four ways to fine-tune run through one experiment (same data, seed, steps),
so their shared loop stays in one file; the holes carry their graded hints.

A model is pre-trained briefly on `corpus("stories")`, then adapted to a second task,
`corpus("arithmetic")` (sums like "17+25=42."), four ways, with the same steps, seed and batches:

* `full`: every weight trained (fp32 master weights, bf16 autocast on the GPU (fp16 with loss
  scaling where there are no bf16 tensor cores, e.g. a T4), AdamW);
* `lora_torch`: LoRA adapters (r = 16 on qkv, proj, up, down) with PEFT's unfused torch arithmetic,
  the frozen base in bf16, and the byte embedding trained too (the new task's characters, digits,
  '+' and '=', never occur in the stories: without it LoRA cannot give them meaning; on the tiny
  config the validation loss stalls at 4.4 nats instead of reaching 1.4);
* `lora`: the same adapters through `lora.py`'s fused Triton kernel (same initial adapters);
* `qlora`: the base in NF4 with double-quantized scales (`nf4.py`), the same adapters.

Measured per variant: trainable parameters, peak memory (`torch.cuda.max_memory_allocated` over
the steady-state steps: everything allocated at the peak, so weights + gradients + optimizer
states + activations + temporaries), step time (CUDA events, median), the final training loss,
the validation loss, and exact-match accuracy on held-out sums ("17+25=" -> "42.", greedy).
`run` runs the experiment for one config. Its record, table, plot and command line are
finetune_bench.py's: `python -m week5_integration.finetune_bench --config small --pretrain-steps N
--steps M --out DIR` writes `finetune_week5.json` (a `course.bench`-compatible record), `.md` and
the loss curves `finetune_week5_loss.png`; with several configs (`--config large gpt2`, the GPU
run) the record is rewritten after each one, so a run cut off later keeps the configs already
done. Its `BENCHMARKS` holds `lora_step_large_week5`: one LoRA layer's training step at sizes where
the GPU's work, not the host's, sets the time, beside a frozen layer's step (the floor).

Where the memory goes (bytes; P parameters, P_lin of them in the adapted nn.Linear layers, P_a
adapter parameters, T tokens per step, L layers, d model width, h MLP hidden width, V vocabulary):
    full:   4P weights + 4P grads + 8P AdamW (m, v) + activations
    LoRA:   2 P_lin (bf16 base) + 4 (P - P_lin) + 16 P_a (fp32 adapters, grads, m, v)
            + 12 P_emb (the trained embedding's grads, m, v) + activations
    QLoRA:  (4.127 / 8) P_lin (NF4 + scales) + 4 (P - P_lin) + 16 P_a + 12 P_emb + activations
    activations (bf16 autocast, tensors saved for the backward, per token and layer): ~22d + 8h
      (fp32 norm inputs 2 x 4d; bf16 inputs of qkv, proj, up 3 x 2d; q, k, v, attention output
      4 x 2d; gate, up, silu(gate), the down input 4 x 2h), plus 6d + 10V for the head and loss.
      With activation checkpointing per block (the QLoRA paper uses it too): L x 4d (each block's
      fp32 input) + one block's 22d + 8h (recomputed in the backward) + 6d + 10V.
`memory_model` evaluates this; `--config gpt2` (GPT2_SMALL with the byte vocabulary: 85M
parameters, 84.9M of them in the adapted layers; GPT-2's own 50k vocabulary would add 38M in the
embedding, which is not adapted and would only dilute the comparison) at 16 x 512 tokens with
checkpointing predicts full 1.86 GiB (weights 325 MiB, grads 325, AdamW 650, activations 604),
LoRA 0.79 GiB (0.42x), QLoRA 0.67 GiB (0.36x: weights 52 MiB, adapter grads + states 30,
activations 604). The activations, the same for all three, are the floor: the ratio falls towards
the weights' 4.127 / 128 = 0.03 only as the batch shrinks or the model grows. Without
checkpointing the same batch needs ~3.1 GiB of activations and QLoRA/full rises to ~0.73; the
`small` config (26M parameters, same batch) predicts 0.51 even with checkpointing. The `large`
config (453M parameters, 16 x 1536, at 8 x 512 tokens) is where model state dominates: full 7.43 GiB
(weights 1.69, grads 1.69, AdamW 3.38, activations 0.67), LoRA 0.22x, QLoRA 0.13x.
"""
from __future__ import annotations

import random
import statistics
import time
from dataclasses import asdict, dataclass, replace

import torch
import torch.utils.checkpoint

from course import bench, runtime
from week5_integration import data
from week5_integration import lora as lora_mod
from week5_integration import model as gpt
from week5_integration import nf4 as nf4_mod

VARIANTS = ("full", "lora_torch", "lora", "qlora")
REFERENCE_VARIANT = "lora_torch"  # "vs torch": LoRA's step time against PEFT-style torch arithmetic
CONFIGS = {
    "tiny": gpt.config(gpt.GPT_TINY, vocab_size=data.VOCAB_SIZE),
    "small": gpt.GPT_SMALL,
    "gpt2": gpt.config(gpt.GPT2_SMALL, vocab_size=data.VOCAB_SIZE, max_seq_len=512),
    # 453M parameters (16 x 1536, heads of 128): large enough that full fine-tuning's 16 bytes per
    # parameter of model state (7.3 GB) dwarf the checkpointed activations of 8 x 512 tokens (0.7 GB),
    # so the three variants' peaks are set by what each keeps per parameter (see memory_model).
    "large": gpt.config(gpt.GPT2_SMALL, vocab_size=data.VOCAB_SIZE, max_seq_len=512, d_model=1536, n_heads=12,
                        n_layers=16),
}


@dataclass(frozen=True)
class Plan:
    """How one config is trained: batch shape, learning rates, adapter rank, evaluation sizes."""
    batch: int
    seq_len: int
    pretrain_steps: int
    steps: int
    pretrain_lr: float = 1e-3
    full_lr: float = 1e-4       # full fine-tuning: a small step for every weight
    adapter_lr: float = 1e-3    # adapters start at zero and are few: LoRA's usual 10x larger rate
    rank: int = 16
    alpha: float = 32.0
    checkpointing: bool = True  # per-block activation checkpointing (all variants alike)
    train_embedding: bool = True  # adapters + the (tied) byte embedding: see `prepare`
    eval_batches: int = 8
    prompts: int = 200
    prompt_chars: int = 48
    warmup: int = 20


PLANS = {
    "tiny": Plan(batch=16, seq_len=32, pretrain_steps=200, steps=150, pretrain_lr=3e-3, full_lr=2e-3,
                 adapter_lr=1e-2, rank=4, alpha=8.0, checkpointing=False, eval_batches=4, prompts=64,
                 prompt_chars=24, warmup=10),
    "small": Plan(batch=16, seq_len=512, pretrain_steps=300, steps=200),
    "gpt2": Plan(batch=16, seq_len=512, pretrain_steps=300, steps=200, pretrain_lr=6e-4),
    # Memory and speed, not accuracy: a short pre-training (the loss curves still show each variant
    # learning the sums' format), 60 fine-tuning steps of which the last 45 are timed.
    "large": Plan(batch=8, seq_len=512, pretrain_steps=100, steps=60, pretrain_lr=3e-4, full_lr=5e-5,
                  eval_batches=4, prompts=100, warmup=10),
}
SEED = 0
STORIES_SEED, ARITHMETIC_SEED, PROMPT_SEED = 0, 1, 2


# ------------------------------------------------------------------------------ the memory model
def layer_shapes(cfg: gpt.GPTConfig) -> list[tuple[int, int]]:
    """(in, out) of the adapted nn.Linear layers of one block: qkv, proj, up, down."""
    up_out = 2 * cfg.hidden if cfg.mlp == "swiglu" else cfg.hidden
    return [(cfg.d_model, 3 * cfg.d_model), (cfg.d_model, cfg.d_model), (cfg.d_model, up_out),
            (cfg.hidden, cfg.d_model)]


def parameter_counts(cfg: gpt.GPTConfig, rank: int) -> dict:
    with torch.device("meta"):
        total = gpt.count_parameters(gpt.GPT(cfg))
    lin = cfg.n_layers * sum(i * o for i, o in layer_shapes(cfg))
    adapters = cfg.n_layers * sum(lora_mod.adapter_parameter_count(i, o, rank) for i, o in layer_shapes(cfg))
    return {"total": total, "linear": lin, "other": total - lin, "adapters": adapters,
            "embedding": cfg.vocab_size * cfg.d_model}


def activation_bytes(cfg: gpt.GPTConfig, tokens: int, checkpointing: bool) -> int:
    """Bytes of tensors saved for the backward at the end of the forward (bf16 autocast)."""
    # BEGIN EXERCISE: per token and block 22d + 8h (d = d_model, h = hidden); with checkpointing L x 4d (each
    #   block's fp32 input) + one block's, without it L blocks'; plus 6d + 10V for the head and the loss; times
    #   tokens
    # HINT: The saved-activation model from the module docstring: a fixed number of bytes per token per
    #   block, plus the head and loss; checkpointing keeps only each block's input, plus one block's full
    #   set while it is recomputed.
    # HINT: Name d, h, L, V from cfg; block = 22d + 8h, head = 6d + 10V; per token either L * 4d + block
    #   (checkpointing) or L * block, plus head; times tokens.
    # HINT: `per_token = (L * 4 * d + block if checkpointing else L * block) + head`
    d, h, L, V = cfg.d_model, cfg.hidden, cfg.n_layers, cfg.vocab_size
    block = 22 * d + 8 * h
    head = 6 * d + 10 * V
    per_token = (L * 4 * d + block if checkpointing else L * block) + head
    return tokens * per_token
    # END EXERCISE


def memory_model(cfg: gpt.GPTConfig, variant: str, tokens: int, *, rank: int = 16,
                 checkpointing: bool = True, train_embedding: bool = True) -> dict:
    """Predicted peak bytes: weights + gradients + AdamW states + activations (see the docstring)."""
    # BEGIN EXERCISE: n = parameter_counts(cfg, rank); weights by variant (full 4P; lora, lora_torch 2 P_lin +
    #   4 other + 4 adapters; qlora nf4_mod.bits_per_parameter(True) / 8 P_lin + 4 other + 4 adapters) and the
    #   trainable count (all P; adapters + the embedding when train_embedding); grads 4 x trainable, optimizer
    #   8 x trainable, activation_bytes(...); their 'total'. ValueError "variant must be one of ..." otherwise
    # HINT: Peak memory = weights + gradients + AdamW's two fp32 states + activations; only the trainable
    #   parameters have gradients and optimizer states, and the weight bytes depend on how the frozen
    #   linears are stored.
    # HINT: From parameter_counts: full = 4 bytes x all parameters, all trainable; lora = bf16 linears (2
    #   bytes) + fp32 rest and adapters; qlora = NF4 linears at bits_per_parameter / 8; trainable = adapters
    #   (+ embedding when train_embedding); grads 4 and optimizer 8 bytes per trainable; add the total.
    # HINT: Unknown variants end in `raise ValueError(f"variant must be one of {VARIANTS}, got
    #   {variant!r}")`.
    n = parameter_counts(cfg, rank)
    extra = n["embedding"] if train_embedding else 0  # trained beside the adapters (fp32, counted in "other")
    if variant == "full":
        weights, trainable = 4 * n["total"], n["total"]
    elif variant in ("lora", "lora_torch"):
        weights, trainable = 2 * n["linear"] + 4 * n["other"] + 4 * n["adapters"], n["adapters"] + extra
    elif variant == "qlora":
        nf4_bits = nf4_mod.bits_per_parameter(True)
        weights = nf4_bits / 8 * n["linear"] + 4 * n["other"] + 4 * n["adapters"]
        trainable = n["adapters"] + extra
    else:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    parts = {"weights": int(weights), "grads": 4 * trainable, "optimizer": 8 * trainable,
             "activations": activation_bytes(cfg, tokens, checkpointing)}
    parts["total"] = sum(parts.values())
    return parts
    # END EXERCISE


# --------------------------------------------------------------------------------- the models
def checkpoint_blocks(model: gpt.GPT) -> gpt.GPT:
    """Recompute each block in the backward instead of keeping its activations (training only)."""
    # BEGIN EXERCISE: replace each block's forward by one that calls torch.utils.checkpoint.checkpoint(forward,
    #   x, rope, None, layer, pending, use_reentrant=False) when grad is enabled and there is no KV cache (else
    #   the plain forward); bind each block's own forward (a default argument: a closure would see the last
    #   block's); return the model
    # HINT: Activation checkpointing trades compute for memory: in the backward, each block's forward is
    #   rerun from its saved input instead of keeping all its intermediate tensors.
    # HINT: For each block replace block.forward by a wrapper; skip checkpointing when there is a KV cache
    #   or grad is off (inference); otherwise torch.utils.checkpoint.checkpoint with use_reentrant=False.
    # HINT: Bind the block's own forward as a default argument (`_forward=forward`): a closure over the loop
    #   variable would call the last block's forward in every block.
    for block in model.blocks:
        forward = block.forward

        def checkpointed(x, rope=None, cache=None, layer=0, pending=None, _forward=forward):
            if cache is not None or not torch.is_grad_enabled():
                return _forward(x, rope, cache, layer, pending)
            return torch.utils.checkpoint.checkpoint(_forward, x, rope, None, layer, pending, use_reentrant=False)
        block.forward = checkpointed
    return model
    # END EXERCISE


def prepare(model: gpt.GPT, variant: str, plan: Plan) -> gpt.GPT:
    """Turn the pre-trained model into the variant to fine-tune (in place)."""
    # BEGIN EXERCISE: full: the model unchanged; lora_torch / lora: lora_mod.apply_lora(model, r=plan.rank,
    #   alpha=plan.alpha, kernel "torch" / "auto", base_dtype=amp_dtype() on a GPU, else None); qlora:
    #   nf4_mod.apply_qlora(..., kernel="auto"); any other variant: ValueError "variant must be one of ...";
    #   then the byte embedding trains too when plan.train_embedding (model.tok.weight)
    # HINT: Preparing a variant is swapping the linear layers: LoRA adds trainable low-rank adapters on a
    #   frozen base; QLoRA also stores the base in NF4.
    # HINT: full returns at once; lora / lora_torch call lora_mod.apply_lora with kernel "torch" or "auto"
    #   and a half-precision base on a GPU; qlora calls nf4_mod.apply_qlora; anything else raises; finally
    #   unfreeze model.tok.weight when plan.train_embedding.
    # HINT: `model.tok.weight.requires_grad_(True)`: digits and '+'/'=' never appear in pre-training, so
    #   their (tied) embedding rows must learn.
    half = amp_dtype() if runtime.on_gpu() else None  # a frozen base needs no fp32 copy
    if variant == "full":
        return model
    # "auto": the Triton kernels on a GPU; in simulation their torch twins (the same arithmetic;
    # the interpreter would take seconds per step, and tests/week5 checks the kernels themselves).
    if variant in ("lora", "lora_torch"):
        kernel = "torch" if variant == "lora_torch" else "auto"
        lora_mod.apply_lora(model, r=plan.rank, alpha=plan.alpha, kernel=kernel, base_dtype=half)
    elif variant == "qlora":
        nf4_mod.apply_qlora(model, r=plan.rank, alpha=plan.alpha, kernel="auto")
    else:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if plan.train_embedding:
        # Digits, '+' and '=' never occur in the stories: their embedding rows (tied to the LM head)
        # are untrained, and adapters on the linear layers cannot give them meaning. So the byte
        # embedding trains too (PEFT's `modules_to_save`): vocab x d parameters, 0.2M at d = 768.
        model.tok.weight.requires_grad_(True)
    return model
    # END EXERCISE


def make_optimizer(model, lr: float, warmup: int):
    params = [p for p in model.parameters() if p.requires_grad]
    fused = runtime.on_gpu()  # one kernel for the whole update: no foreach temporaries at the peak
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0, fused=fused)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / max(warmup, 1)))
    return opt, sched


def amp_dtype() -> torch.dtype:
    """bf16 where the GPU has bf16 tensor cores (sm_80+), fp16 elsewhere (a T4), with loss scaling."""
    if runtime.on_gpu() and not torch.cuda.is_bf16_supported():
        return torch.float16
    return torch.bfloat16


def autocast():
    return torch.autocast("cuda", dtype=amp_dtype(), enabled=runtime.on_gpu())


# ------------------------------------------------------------------------------------ the data
@dataclass
class Task:
    train: torch.Tensor
    val: torch.Tensor


def load_task(kind: str, n_bytes: int, seed: int) -> Task:
    train, val = data.split(data.encode(data.corpus(kind, n_bytes, seed=seed)), 0.05)
    return Task(train, val)


def eval_loss(model, tokens: torch.Tensor, plan: Plan, batches: int) -> float:
    """Mean loss over fixed validation windows (seeded: the same windows for every variant)."""
    source = data.Batches(tokens, plan.batch, min(plan.seq_len, len(tokens) - 1), seed=1234, device=runtime.DEVICE)
    model.eval()
    total = 0.0
    with torch.no_grad(), autocast():
        for _ in range(batches):
            x, y = source.next()
            total += float(model.loss(x, y))
    model.train()
    return total / batches


def sum_prompts(n: int, chars: int, seed: int = PROMPT_SEED) -> tuple[list[str], list[str]]:
    """n prompts of exactly `chars` characters ending in "a+b=", and their answers "c.".

    Each prompt is a window of other sums (the context a model fine-tuned on the arithmetic
    stream expects) cut on the left so that every prompt has the same length: one batched
    greedy generation answers them all.
    """
    rng = random.Random(seed)
    prompts, answers = [], []
    for _ in range(n):
        a, b = rng.randrange(100), rng.randrange(100)
        context = " ".join(f"{u}+{v}={u + v}." for u, v in ((rng.randrange(100), rng.randrange(100))
                                                            for _ in range(chars // 6 + 1)))
        prompts.append((context + f" {a}+{b}=")[-chars:])
        answers.append(f"{a + b}.")
    return prompts, answers


def score_answers(generated: list[str], answers: list[str]) -> float:
    """Exact match: the text up to and including the first '.' must be the answer."""
    # BEGIN EXERCISE: ValueError "... generations for ... answers" on a length mismatch; a hit when the text up
    #   to and including its first '.' is the answer; the fraction of hits
    # HINT: Exact-match scoring: the model should stop after the answer's period, so compare the text up to
    #   and including the first '.'.
    # HINT: Check the lengths match (ValueError naming both counts); for each pair find the first '.', count
    #   a hit when it exists and the prefix equals the answer; return hits over the count (guarding an empty
    #   list).
    # HINT: `cut = text.find(".")`; a hit is `cut >= 0 and text[:cut + 1] == answer`.
    if len(generated) != len(answers):
        raise ValueError(f"{len(generated)} generations for {len(answers)} answers")
    hits = 0
    for text, answer in zip(generated, answers):
        cut = text.find(".")
        hits += cut >= 0 and text[:cut + 1] == answer
    return hits / max(len(answers), 1)
    # END EXERCISE


def exact_match(model, plan: Plan) -> float:
    prompts, answers = sum_prompts(plan.prompts, plan.prompt_chars)
    idx = torch.stack([data.encode(p) for p in prompts]).to(runtime.DEVICE)
    model.eval()
    with torch.no_grad(), autocast():
        out = gpt.generate(model, idx, 5)  # "198." is the longest answer: 4 characters and a spare
    model.train()
    return score_answers([data.decode(row[plan.prompt_chars:].tolist()) for row in out], answers)


# ------------------------------------------------------------------------------------ training
def train(model, task: Task, plan: Plan, steps: int, lr: float, *, seed: int, warmup_steps: int = 0,
          on_warm=None) -> dict:
    """`steps` AdamW steps on random windows of task.train; losses, and the steps after the warm-up timed
    by the kit's clock (course/bench_clock.py: CUDA events, and whether the host paced the steps; a host
    clock off the GPU), as "timing" (None when no step was timed) and its per-step "step_ms"."""
    opt, sched = make_optimizer(model, lr, plan.warmup)
    # fp16 (a T4) needs loss scaling against gradient underflow; bf16 has fp32's exponent range.
    scaler = torch.amp.GradScaler("cuda", enabled=runtime.on_gpu() and amp_dtype() == torch.float16)
    batches = data.Batches(task.train, plan.batch, plan.seq_len, seed=seed, device=runtime.DEVICE)
    losses, clock = [], bench.LoopClock(max(steps - warmup_steps, 0))
    model.train()
    for step in range(steps):
        if step == warmup_steps and on_warm is not None:
            on_warm()  # compilation, autotuning and optimizer-state allocation are behind us
        x, y = batches.next()
        timed = step >= warmup_steps
        if timed:
            clock.start()
        with autocast():
            loss = model.loss(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if timed:
            clock.stop()
        losses.append(loss.detach())
    timing = clock.timing() if len(clock) else None  # before the losses' copy to the host: the drain
    return {"losses": [float(v) for v in torch.stack(losses).cpu()] if losses else [],
            "timing": timing, "step_ms": timing.samples if timing else [], "optimizer": opt}


def state_bytes(model, opt) -> dict:
    """Bytes held by parameters and buffers, and by the optimizer's state (counted, not measured)."""
    seen = {}
    for t in list(model.parameters()) + list(model.buffers()):
        seen[t.data_ptr()] = t.numel() * t.element_size()
    optimizer = sum(v.numel() * v.element_size() for state in opt.state.values() for v in state.values()
                    if torch.is_tensor(v) and v.dim() > 0)
    return {"weights": sum(seen.values()), "optimizer": optimizer}


def release_memory():
    """Wait for the GPU, then hand its cached blocks back: each variant's peak starts from zero."""
    if runtime.on_gpu():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def pretrain(cfg: gpt.GPTConfig, plan: Plan, steps: int, *, seed: int = SEED, log=print):
    """A briefly pre-trained model's state (on the CPU) and its curve."""
    torch.manual_seed(seed)
    model = gpt.GPT(cfg).to(runtime.DEVICE)
    stories = load_task("stories", max(1 << 20, 64 * plan.batch * plan.seq_len), STORIES_SEED)
    started = time.perf_counter()
    result = train(model, stories, plan, steps, plan.pretrain_lr, seed=seed)
    val = eval_loss(model, stories.val, plan, plan.eval_batches)
    log(f"pre-trained {steps} steps in {time.perf_counter() - started:.1f} s: "
        f"loss {result['losses'][-1] if steps else float('nan'):.3f}, stories val {val:.3f}")
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    del model, result["optimizer"]
    release_memory()
    return state, {"losses": result["losses"], "val_loss": val}


def fresh_model(cfg, state, plan: Plan) -> gpt.GPT:
    with torch.device(runtime.DEVICE):  # built where it trains: its initial values are overwritten anyway
        model = gpt.GPT(cfg)
    model = model.to(runtime.DEVICE)  # the RoPE tables are made on the CPU whatever the default device
    model.load_state_dict(state)
    return checkpoint_blocks(model) if plan.checkpointing else model


def finetune_variant(variant: str, cfg, state, task: Task, plan: Plan, steps: int, *, seed: int = SEED,
                     log=print) -> dict:
    """Fine-tune one variant from the pre-trained state; its row of the table and its curve."""
    release_memory()
    torch.manual_seed(seed)  # the same initial adapters for lora_torch, lora and qlora
    model = prepare(fresh_model(cfg, state, plan), variant, plan)
    lr = plan.full_lr if variant == "full" else plan.adapter_lr
    warm = min(5, max(steps // 4, 1)) if steps > 1 else 0

    def reset_peak():
        if runtime.on_gpu():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    started = time.perf_counter()
    result = train(model, task, plan, steps, lr, seed=seed + 1, warmup_steps=warm, on_warm=reset_peak)
    peak = torch.cuda.max_memory_allocated() if runtime.on_gpu() and steps > warm else None
    held = state_bytes(model, result["optimizer"])
    del result["optimizer"]
    tokens = plan.batch * plan.seq_len
    predicted = memory_model(cfg, variant, tokens, rank=plan.rank, checkpointing=plan.checkpointing,
                             train_embedding=plan.train_embedding)
    row = {
        "size": describe_config(cfg, plan), "variant": variant,
        "trainable_params": lora_mod.count_trainable(model),
        "total_params": sum(p.numel() for p in model.parameters()),
        "final_loss": statistics.fmean(result["losses"][-10:]) if result["losses"] else None,
        "val_loss": eval_loss(model, task.val, plan, plan.eval_batches),
        "exact_match": exact_match(model, plan),
        "peak_mem_bytes": peak, "peak_mib": None if peak is None else peak / 2**20,
        "predicted_peak_mib": predicted["total"] / 2**20,
        "predicted": {k: v / 2**20 for k, v in predicted.items()},
        "weights_mib": held["weights"] / 2**20, "optimizer_mib": held["optimizer"] / 2**20,
        "lr": lr, "steps": steps,
    }
    timing = result["timing"]
    if timing is not None:  # its ms, and whether the host paced the steps (then the time is the host's)
        row.update({**bench.timing_fields(timing), "ms_min": timing.min_ms, "reps": timing.reps})
        row["tokens_per_s"] = tokens / (row["ms"] * 1e-3)
    log(f"{variant:>10}: {time.perf_counter() - started:6.1f} s, step {row.get('ms', float('nan')):.2f} ms, "
        f"peak {bench.fmt(row['peak_mib'], '.0f')} MiB (predicted {row['predicted_peak_mib']:.0f}), "
        f"val {row['val_loss']:.3f}, exact match {row['exact_match']:.0%}")
    del model
    release_memory()
    return {"row": row, "losses": result["losses"]}


def describe_config(cfg: gpt.GPTConfig, plan: Plan) -> str:
    ckpt = ", ckpt" if plan.checkpointing else ""
    return (f"d{cfg.d_model} L{cfg.n_layers} h{cfg.n_heads} V{cfg.vocab_size}, "
            f"B{plan.batch} x T{plan.seq_len}{ckpt}")


def run(config: str = "tiny", *, pretrain_steps: int | None = None, steps: int | None = None,
        variants=VARIANTS, plan_changes: dict | None = None, log=print) -> dict:
    """The whole experiment for one config: the results record (rows, curves, settings)."""
    if config not in CONFIGS:
        raise ValueError(f"config must be one of {sorted(CONFIGS)}, got {config!r}")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise ValueError(f"variants must be a non-empty subset of {VARIANTS}, got {list(variants)}")
    cfg = CONFIGS[config]
    plan = replace(PLANS[config], **(plan_changes or {}))
    pretrain_steps = plan.pretrain_steps if pretrain_steps is None else pretrain_steps
    steps = plan.steps if steps is None else steps
    if pretrain_steps < 0 or steps < 0:
        raise ValueError(f"step counts must be >= 0, got pretrain {pretrain_steps}, fine-tune {steps}")
    if plan.seq_len > cfg.max_seq_len or plan.prompt_chars + 5 > cfg.max_seq_len:
        raise ValueError(f"seq_len {plan.seq_len} / prompts of {plan.prompt_chars} + 5 characters exceed "
                         f"max_seq_len {cfg.max_seq_len}")
    state, pre = pretrain(cfg, plan, pretrain_steps, log=log)
    task = load_task("arithmetic", max(1 << 19, 64 * plan.batch * plan.seq_len), ARITHMETIC_SEED)
    base = fresh_model(cfg, state, plan)
    baseline = {"size": describe_config(cfg, plan), "variant": "pretrained",
                "val_loss": eval_loss(base, task.val, plan, plan.eval_batches),
                "exact_match": exact_match(base, plan)}
    log(f"pre-trained model on arithmetic: val {baseline['val_loss']:.3f}, exact match {baseline['exact_match']:.0%}")
    del base
    rows, curves = [baseline], {}
    for variant in variants:
        out = finetune_variant(variant, cfg, state, task, plan, steps, log=log)
        rows.append(out["row"])
        curves[variant] = out["losses"]
    reference = next((r.get("ms") for r in rows if r["variant"] == REFERENCE_VARIANT), None)
    for row in rows:
        if reference and row.get("ms"):
            row["speedup_vs_torch"] = reference / row["ms"]
    return {"rows": rows, "curves": curves, "pretrain": pre, "config": config,
            "settings": {**asdict(plan), "pretrain_steps": pretrain_steps, "steps": steps,
                         "model": asdict(cfg), "params": parameter_counts(cfg, plan.rank)}}
