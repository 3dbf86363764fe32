"""Training the capstone GPT: bf16 autocast, exact checkpoint/resume, a loss log and its plot, FSDP.

Over 500 lines: the Trainer (the step, exact checkpoint and resume, FSDP), its log and plot, and
the training command itself: `python -m capstone.train` is the capstone's training program, the
thing this module teaches, not tooling around a kernel.

    python -m capstone.train --config tiny --steps 20 --out /tmp/run            # CPU, seconds
    python -m capstone.train --config tiny --steps 40 --stop-after 20 --out /tmp/r  # pause at 20 ...
    python -m capstone.train --config tiny --steps 40 --out /tmp/r --resume         # ... go on to 40
    python -m capstone.train --text capstone/data/tinyshakespeare.txt --sample-bytes 200 --out /tmp/t  # your text
    torchrun --nproc_per_node 2 -m capstone.train --config tiny --steps 20 --fsdp --out /tmp/run2
    python -m capstone.train --config gpt2_124m --steps 300 --batch 8 --out /tmp/gpt2   # an H100

What one step does (week 5's recipe, train.py there explains each choice): AdamW (fused on a
GPU) with weight decay on matrices only, linear warm-up then cosine decay (`lr_at`), gradient
clipping to a global norm, bf16 autocast on a GPU with bf16 tensor cores (weights, optimizer
state and the residual stream stay fp32; no GradScaler: bf16 has fp32's exponent range).

Exact resume. A checkpoint holds everything the next step depends on: the weights, the
optimizer state (AdamW's m, v and step count), the data position (the seeded batch sampler's
generator state: the next batch is the one the uninterrupted run would have drawn), the torch
RNG states (nothing here samples, but a dropout added later would), the step number (the LR
schedule is a function of it) and the configs it was made with (a resume under another config
is refused, not silently mixed). So "train N steps" and "train k, save, resume, train N - k"
give bit-identical weights and losses (tests/capstone/test_train.py checks it).

The host stays ahead of the GPU: losses are kept as device tensors and copied out every
`log_every` steps (one synchronization per flush, not per step), which is also when the
progress bar moves and the jsonl log grows.

FSDP (`--fsdp`, under torchrun or `distributed_worker`): every rank builds the same seeded
model, each `Block` and then the root become FSDP2 units (`fully_shard`, as in
week5_integration/distributed.py), each rank takes its contiguous 1/N of every global batch,
and the logged loss is the all-reduced mean. Backend: NCCL with one GPU per rank, gloo on CPUs.
Checkpoints gather full (unsharded) state dicts to the CPU (`get_state_dict(full_state_dict=True)`),
so a checkpoint written under FSDP resumes on one process and the other way round.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist

from course import runtime
from course.bench_clock import LoopClock
from capstone import model as cm
from capstone import text as texts
from week5_integration import data
from week5_integration.distributed import LossModel, fsdp_mesh, full_parameters, shard_batch
from week5_integration.train import TrainConfig, amp_enabled, lr_at, param_groups

CHECKPOINT = "checkpoint.pt"
LOG = "log.jsonl"
VAL_LOG = "val.jsonl"
SAMPLE = "sample.txt"
PLOT = "loss.png"
SUMMARY = "summary.json"


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _full(t: torch.Tensor) -> torch.Tensor:
    """A DTensor (FSDP2 shard, or a norm computed from shards) as a plain tensor; others unchanged."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")


def compile_mode(compile) -> str | None:
    """None (eager), or one of COMPILE_MODES: `compile=True` is torch.compile's default mode."""
    if compile is False or compile is None:
        return None
    if compile is True:
        return "default"
    if compile not in COMPILE_MODES:
        raise ValueError(f"compile must be a bool or one of {COMPILE_MODES}, got {compile!r}")
    return compile


def compile_options(mode: str, device: torch.device) -> dict:
    """torch.compile's arguments. Without a GPU, the aot_eager backend: Dynamo and AOTAutograd
    trace exactly what Inductor would get (fake tensors, the ops' autograd formulas), without
    compiling C++ for the CPU, which takes minutes and teaches nothing here."""
    if device.type != "cuda":
        return {"backend": "aot_eager"}
    return {} if mode == "default" else {"mode": mode}


class Trainer:
    """One model, its optimizer and its data stream, stepped and checkpointed as a unit.

    `ops`: "fast" (the course's kernels) or "reference" (the pure-PyTorch twin). `fsdp=True`
    needs an initialized process group. `compile=True` wraps the loss in torch.compile.
    `compile_blocks=True` (or a mode) compiles each transformer block on its own instead, before
    FSDP wraps it: the per-block recipe that works with FSDP2, whose hooks stay outside the
    compiled code (all-gather before a block's forward, reduce-scatter after its backward) while
    the block's own Python (its ops, autograd's bookkeeping) is replaced by compiled graphs.
    `text`: the path of a UTF-8 file to train on (capstone/text.py: bytes as tokens, its tail held
    out); None: the generated stories corpus of tc.corpus_bytes.
    `autograd_threads=False` runs the backward on the calling thread instead of autograd's CUDA
    worker thread: a Python backward (every course op's autograd.Function) then needs no GIL
    hand-over between threads (torch.autograd.set_multithreading_enabled).
    """

    def __init__(self, config: str | cm.GPTConfig, tc: TrainConfig, *, ops: str = "fast", device=None,
                 fsdp: bool = False, compile: bool | str = False, autograd_threads: bool = True,
                 compile_blocks: bool | str = False, text=None):
        if not isinstance(tc, TrainConfig):
            raise TypeError(f"tc must be a week5 TrainConfig, got {type(tc).__name__}")
        self.cfg, self.tc, self.ops_name = cm.preset(config), tc, ops
        self.rank, self.world = _world()
        if fsdp and self.world == 1 and not dist.is_initialized():
            raise RuntimeError("fsdp=True needs a process group: run under torchrun or distributed_worker")
        self.fsdp = fsdp
        self.device = torch.device(runtime.DEVICE if device is None else device)
        seq_len = tc.seq_len or self.cfg.max_seq_len
        if seq_len > self.cfg.max_seq_len:
            raise ValueError(f"seq_len {seq_len} exceeds the model's max_seq_len {self.cfg.max_seq_len}")
        if tc.batch % self.world:
            raise ValueError(f"batch {tc.batch} (global) must split evenly over {self.world} processes")
        # The data first: a text file that cannot be trained on is refused before a model is built.
        if text is None:
            tokens = data.encode(data.corpus("stories", tc.corpus_bytes, seed=tc.seed))
            self.train_tokens, self.val_tokens = data.split(tokens)
            self.source = {"corpus": "stories", "bytes": tc.corpus_bytes}
        else:
            self.train_tokens, self.val_tokens, self.source = texts.load(text, seq_len)
        self.model = cm.build(self.cfg, ops, seed=tc.seed, device=self.device)
        self.module = LossModel(self.model)
        self.compile_blocks = compile_mode(compile_blocks)
        if self.compile_blocks is not None:
            if compile_mode(compile) is not None:
                raise ValueError("compile and compile_blocks are two ways to compile: choose one")
            for block in self.model.blocks:  # in place: the module tree (and FSDP's units) stay as they are
                block.compile(**compile_options(self.compile_blocks, self.device))
        if fsdp:
            from torch.distributed.fsdp import fully_shard
            mesh = fsdp_mesh(self.device)  # gloo on a GPU machine: the CPU, not the default cuda mesh
            for block in self.model.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(self.module, mesh=mesh)  # the root: embedding, tied head, final norm
        on_cuda = self.device.type == "cuda"
        # fused: one kernel updates every parameter (CUDA, plain tensors); foreach elsewhere and for
        # FSDP's DTensor shards (the multi-tensor path every torch version supports for them).
        fused = on_cuda and not fsdp
        self.opt = torch.optim.AdamW(param_groups(self.module, tc.weight_decay), lr=tc.lr, betas=tc.betas,
                                     fused=fused or None, foreach=None if fused else True)
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        # The global batch is drawn on the CPU in every rank (same seed: same batches), then sharded.
        self.batches = data.Batches(self.train_tokens, tc.batch, seq_len, seed=tc.seed, device="cpu")
        self.amp = amp_enabled(tc, self.device)
        self.compile_mode = compile_mode(compile)
        # reduce-overhead / max-autotune replay the compiled forward and backward as CUDA graphs:
        # one launch of the whole graph instead of hundreds, so the host no longer paces the GPU.
        self.cudagraphs = self.compile_mode in CUDAGRAPH_MODES and self.device.type == "cuda"
        self.loss_fn = self.module if self.compile_mode is None else torch.compile(
            self.module, **compile_options(self.compile_mode, self.device))
        self.autograd_threads = bool(autograd_threads)
        self.step = 0
        self.timings = []  # each flushed group's Timing (run): whether the host paced its steps

    # ------------------------------------------------------------------ one step
    def next_batch(self):
        x, y = self.batches.next()
        x, y = shard_batch(x, y, self.rank, self.world)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def train_step(self, x, y):
        """One optimizer step at the schedule's LR; returns (loss, grad norm) as device tensors."""
        lr = lr_at(self.step, self.tc)
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        if self.cudagraphs:  # a new step: the graphs may reuse the last step's output memory
            torch.compiler.cudagraph_mark_step_begin()
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16) if self.amp else nullcontext()
        with autocast:
            loss = self.loss_fn(x, y)
        if self.autograd_threads:
            loss.backward()
        else:
            with torch.autograd.set_multithreading_enabled(False):
                loss.backward()
        clip = self.tc.grad_clip if self.tc.grad_clip is not None else math.inf
        norm = _full(torch.nn.utils.clip_grad_norm_(self.params, clip, foreach=True))
        self.opt.step()
        # A CUDA graph's output lives in memory the next replay overwrites: keep a copy.
        loss = loss.detach().float().clone() if self.cudagraphs else loss.detach().float()
        if self.world > 1:  # this rank's shard mean -> the global batch's mean (equal shards)
            dist.all_reduce(loss)
            loss = loss / self.world
        self.step += 1
        return loss, norm.detach().float()

    def run(self, until: int | None = None, *, log_every: int = 10, on_flush=None) -> list[dict]:
        """Step until step `until` (default: tc.steps); return one record per step
        {"step", "loss", "lr", "grad_norm", "ms"}. `on_flush(records)` gets each flushed group.

        Each group of `log_every` steps (synchronised once, at its flush) is timed by the kit's clock
        (course/bench_clock.py): "ms" is a step's CUDA-event time (host clock off the GPU), and
        `self.timings` gains the group's Timing, which says whether the host paced its steps."""
        until = self.tc.steps if until is None else until
        if not self.step <= until <= self.tc.steps:
            raise ValueError(f"until must be in [{self.step}, {self.tc.steps}], got {until}")
        self.module.train()
        group_size = max(1, log_every)
        clock = LoopClock(min(group_size, until - self.step), events=self.device.type == "cuda")
        pending, records = [], []

        def flush():
            nonlocal clock
            if not pending:
                return
            timing = clock.timing()  # waits for the GPU: the drain the host-bound rule reads
            _sync(self.device)
            self.timings.append(timing)
            group = [{"step": step, "loss": float(loss), "lr": lr, "grad_norm": float(norm), "ms": ms}
                     for (step, lr, loss, norm), ms in zip(pending, timing.samples)]
            pending.clear()
            records.extend(group)
            clock = LoopClock(min(group_size, until - self.step), events=self.device.type == "cuda")
            if on_flush is not None:
                on_flush(group)

        while self.step < until:
            x, y = self.next_batch()
            step, lr = self.step, lr_at(self.step, self.tc)
            clock.start()
            loss, norm = self.train_step(x, y)
            clock.stop()
            pending.append((step, lr, loss, norm))
            if len(pending) >= group_size or self.step == until:
                flush()
        flush()
        return records

    @torch.no_grad()
    def evaluate(self, n_batches: int = 4) -> float:
        """Mean loss over seeded windows of the held-out tokens (every rank the same value)."""
        seq_len = min(self.batches.seq_len, len(self.val_tokens) - 1)
        batches = data.Batches(self.val_tokens, self.tc.batch, seq_len, seed=self.tc.seed + 1)
        self.module.eval()
        total = torch.zeros((), device=self.device)
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16) if self.amp else nullcontext()
        for _ in range(n_batches):
            x, y = batches.next()
            x, y = (t.to(self.device) for t in shard_batch(x, y, self.rank, self.world))
            with autocast:
                total += self.module(x, y).float()
        if self.world > 1:
            dist.all_reduce(total)
            total /= self.world
        self.module.train()
        return float(total) / n_batches

    def parameters_flat(self) -> torch.Tensor:
        """Every parameter, unsharded, as one fp32 CPU vector (a collective under FSDP)."""
        return full_parameters(self.module)

    # ------------------------------------------------------------------ checkpoints
    def _model_and_optimizer_state(self):
        # One format whatever the number of processes: full (unsharded) tensors, optimizer state
        # keyed by parameter name (not by position), so a checkpoint written by N processes loads
        # in M. Under FSDP the gather is a collective, offloaded to the CPU as it goes.
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
        return get_state_dict(self.module, self.opt,
                              options=StateDictOptions(full_state_dict=True, cpu_offload=self.fsdp))

    def state_dict(self) -> dict:
        model_state, optim_state = self._model_and_optimizer_state()
        return {
            "step": self.step, "model": model_state, "optimizer": optim_state,
            "data": self.batches.state(), "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "config": dataclasses.asdict(self.cfg), "train_config": dataclasses.asdict(self.tc),
            "ops": self.ops_name, "world": self.world, "source": self.source,
        }

    def save(self, path) -> Path:
        """Write a checkpoint atomically (temporary file, then rename): a crash mid-write leaves the
        previous checkpoint intact. Every rank must call it under FSDP (the gather is a collective)."""
        path = Path(path)
        state = self.state_dict()
        if self.rank == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            torch.save(state, tmp)
            os.replace(tmp, path)
        if self.world > 1:
            dist.barrier()
        return path

    def load(self, path) -> None:
        """Restore a checkpoint written by `save` (by any number of processes)."""
        state = torch.load(Path(path), map_location="cpu", weights_only=False)
        for key, mine in (("config", dataclasses.asdict(self.cfg)), ("train_config", dataclasses.asdict(self.tc))):
            saved = state[key]
            if key == "train_config":
                saved, mine = {**saved, "betas": tuple(saved["betas"])}, {**mine, "betas": tuple(mine["betas"])}
            if saved != mine:
                diff = {k: (saved.get(k), mine.get(k)) for k in mine if saved.get(k) != mine.get(k)}
                raise ValueError(f"checkpoint {path} was made with another {key}: (saved, now) = {diff}")
        if state.get("source", self.source) != self.source:  # checkpoints older than `source` have none
            raise ValueError(f"checkpoint {path} was trained on {state['source']}, this run reads {self.source}")
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict
        set_state_dict(self.module, self.opt, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"], options=StateDictOptions(full_state_dict=True))
        self.batches.load_state(state["data"])
        torch.set_rng_state(state["rng_cpu"])
        if state["rng_cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng_cuda"])
        self.step = state["step"]


# ---------------------------------------------------------------------------- log and plot
def read_log(path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_log(path, records: list[dict], *, append: bool = True) -> None:
    with open(path, "a" if append else "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def plot_losses(records: list[dict], path, *, title: str = "", val: list[dict] = ()) -> Path:
    """The loss curve (and its 20-step moving average) as a png; `val`: {"step", "val_loss"} points."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    losses = [r["loss"] for r in records]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.plot(steps, losses, lw=0.8, alpha=0.5, label="loss")
    window = 20
    if len(losses) > window:
        avg = [statistics.fmean(losses[i - window + 1:i + 1]) for i in range(window - 1, len(losses))]
        ax.plot(steps[window - 1:], avg, lw=1.5, label=f"{window}-step mean")
    if val:
        ax.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", ms=3, lw=1.2,
                label="validation (held-out text)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / byte)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


class ProgressBar:
    """A one-line text progress bar on stderr (no dependency): step, loss, tokens/s."""

    def __init__(self, total: int, start: int = 0, width: int = 30, stream=sys.stderr):
        self.total, self.width, self.stream = total, width, stream
        self.update(start, None, None)

    def update(self, step: int, loss: float | None, tokens_per_s: float | None) -> None:
        done = int(self.width * step / max(self.total, 1))
        text = f"\r[{'#' * done}{'.' * (self.width - done)}] {step}/{self.total}"
        if loss is not None:
            text += f"  loss {loss:.4f}"
        if tokens_per_s:
            text += f"  {tokens_per_s:,.0f} tok/s"
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


# ---------------------------------------------------------------------------- the command
def train_run(args, *, out: Path) -> dict:
    """What the CLI does, in this process (rank of a group, or alone); returns the summary."""
    tc = TrainConfig(steps=args.steps, batch=args.batch, seq_len=args.seq_len, lr=args.lr,
                     warmup=args.warmup if args.warmup is not None else min(20, max(1, args.steps // 10)),
                     seed=args.seed, corpus_bytes=args.corpus_bytes)
    rank, world = _world()
    device = None
    if world > 1 and torch.cuda.is_available() and dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    trainer = Trainer(args.config, tc, ops=args.ops, device=device, fsdp=args.fsdp, compile=args.compile,
                      text=args.text)
    checkpoint, log_path, val_path = out / CHECKPOINT, out / LOG, out / VAL_LOG
    if args.resume:
        if not checkpoint.is_file():
            raise FileNotFoundError(f"--resume: no checkpoint at {checkpoint}")
        trainer.load(checkpoint)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        # The log holds exactly the steps the weights have seen: lines after the checkpoint's step
        # (a run that crashed after saving) are dropped, and a fresh run starts a fresh log.
        # (A validation point at step s was measured after s steps: it stays when the checkpoint is at s.)
        write_log(log_path, [r for r in read_log(log_path) if r["step"] < trainer.step] if args.resume else [],
                  append=False)
        write_log(val_path, [r for r in read_log(val_path) if r["step"] <= trainer.step] if args.resume else [],
                  append=False)
    until = min(args.stop_after, tc.steps) if args.stop_after is not None else tc.steps
    tokens_per_step = tc.batch * trainer.batches.seq_len
    if rank == 0 and not args.quiet:
        print(f"{args.config}: {cm.count_parameters(trainer.cfg) / 1e6:.2f} M parameters, ops={args.ops}, "
              f"{world} process(es){' FSDP' if args.fsdp else ''}, global batch {tc.batch} x {trainer.batches.seq_len}, "
              f"amp={trainer.amp}, {trainer.device}, steps {trainer.step} -> {until}", file=sys.stderr)
    bar = ProgressBar(until, trainer.step) if rank == 0 and not args.quiet else None
    if trainer.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(trainer.device)

    def on_flush(group):
        if rank == 0:
            write_log(log_path, group)
            if bar is not None:
                ms = statistics.median(r["ms"] for r in group)
                bar.update(group[-1]["step"] + 1, group[-1]["loss"], tokens_per_step / (ms * 1e-3))

    started = time.perf_counter()
    save_every, eval_every = args.save_every or until, args.eval_every or until
    records = []
    while trainer.step < until:
        next_save = (trainer.step // save_every + 1) * save_every
        next_stop = min(until, next_save, (trainer.step // eval_every + 1) * eval_every)
        records += trainer.run(next_stop, log_every=args.log_every, on_flush=on_flush)
        if trainer.step % eval_every == 0 and trainer.step < until:  # the final one is below
            val = trainer.evaluate()  # every rank: a collective under FSDP
            if rank == 0:
                write_log(val_path, [{"step": trainer.step, "val_loss": val}])
        if trainer.step in (next_save, until):
            trainer.save(checkpoint)
    if bar is not None:
        bar.close()
    wall = time.perf_counter() - started
    val = trainer.evaluate()
    if rank == 0:
        write_log(val_path, [{"step": trainer.step, "val_loss": val}])
    history = read_log(log_path) if rank == 0 else []
    timed = [r["ms"] for r in records[min(tc.skip, max(len(records) - 1, 0)):]]
    summary = {
        "config": args.config, "ops": args.ops, "world": world, "fsdp": args.fsdp, "compile": args.compile,
        "steps_done": trainer.step, "steps_total": tc.steps, "batch": tc.batch, "seq_len": trainer.batches.seq_len,
        "amp": trainer.amp, "device": str(trainer.device), "wall_s": wall,
        "last_loss": history[-1]["loss"] if history else None, "val_loss": val,
        "median_step_ms": statistics.median(timed) if timed else None,
        "tokens_per_s": tokens_per_step / (statistics.median(timed) * 1e-3) if timed else None,
        "peak_mib": torch.cuda.max_memory_allocated(trainer.device) / 2**20 if trainer.device.type == "cuda" else None,
        "source": trainer.source, "machine": runtime.describe(),
    }
    if rank == 0:
        val_history = read_log(val_path)
        summary["val_curve"] = [[r["step"], r["val_loss"]] for r in val_history]
        if args.sample_bytes:
            summary["samples"] = texts.write_samples(trainer, out / SAMPLE, checkpoint, prompt=args.prompt,
                                                     n=args.sample_bytes, temperature=args.temperature,
                                                     seed=args.seed)
        (out / SUMMARY).write_text(json.dumps(summary, indent=1) + "\n")
        if not args.no_plot and history:
            what = summary["source"].get("text") or "generated stories"
            plot_losses(history, out / PLOT, val=val_history,
                        title=f"capstone {args.config} on {what}, ops={args.ops}, {world} process(es)")
        if args.record:
            from capstone import text_record
            text_record.save(text_record.record(summary, history, args), Path(args.record), out / PLOT)
    return summary


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", choices=sorted(cm.PRESETS), default="tiny")
    p.add_argument("--ops", choices=cm.OPS_NAMES, default="fast")
    p.add_argument("--steps", type=int, default=20, help="length of the LR schedule (total steps)")
    p.add_argument("--stop-after", type=int, default=None, help="stop (and checkpoint) after this step")
    p.add_argument("--batch", type=int, default=None, help="global batch (default 8 on a GPU, 2 on the CPU)")
    p.add_argument("--seq-len", type=int, default=None, help="default: the config's max_seq_len")
    p.add_argument("--lr", type=float, default=None, help="default 6e-4 (1e-3 for tiny)")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus-bytes", type=int, default=None, help="default 4 MiB on a GPU, 256 KiB on the CPU")
    p.add_argument("--text", default=None, metavar="FILE",
                   help="train on this UTF-8 file (bytes as tokens; its last 10%% held out) instead of the "
                        "generated corpus, e.g. capstone/data/tinyshakespeare.txt")
    p.add_argument("--eval-every", type=int, default=None, help="validation loss every N steps (default: at the end)")
    p.add_argument("--prompt", default=None, help="after training, sample from this prompt (default: the start "
                                                  "of a held-out line, or 'The fox saw' for the generated corpus)")
    p.add_argument("--sample-bytes", type=int, default=0, help="after training, write OUT/sample.txt: this many "
                                                               "bytes, greedy and sampled (0: no sample)")
    p.add_argument("--temperature", type=float, default=0.8, help="of the sampled continuation")
    p.add_argument("--record", default=None, metavar="DIR",
                   help="also write DIR/capstone_text.json, .md and _loss.png: the README's record of this run")
    p.add_argument("--out", required=True, help="folder for checkpoint.pt, log.jsonl, loss.png, summary.json")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    p.add_argument("--save-every", type=int, default=None, help="checkpoint every N steps (default: at the end)")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--fsdp", action="store_true", help="FSDP2 (needs torchrun, or WORLD_SIZE=1 for one process)")
    p.add_argument("--compile", nargs="?", const="default", default=None, choices=COMPILE_MODES,
                   help="torch.compile the loss (forward + backward); optionally a mode: reduce-overhead and "
                        "max-autotune replay it as CUDA graphs")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--quiet", action="store_true")
    return p


def _defaults(args) -> None:
    args.batch = args.batch or runtime.pick(gpu=8, sim=2)
    args.lr = args.lr or (1e-3 if args.config == "tiny" else 6e-4)
    args.corpus_bytes = args.corpus_bytes or runtime.pick(gpu=1 << 22, sim=1 << 18)
    for name in ("eval_every", "sample_bytes"):
        if getattr(args, name) is not None and getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.text is not None:  # refused here, before a process group or a model exists
        texts.read_text(args.text, args.seq_len or cm.preset(args.config).max_seq_len)


def _init_from_env() -> bool:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, ...); False when not under torchrun."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return False
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    else:
        dist.init_process_group("gloo")
    return True


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        _defaults(args)
    except ValueError as error:
        print(f"capstone.train: {error}", file=sys.stderr)
        return 2
    joined = _init_from_env()
    if args.fsdp and not joined:
        print("--fsdp needs a process group: run under torchrun --nproc_per_node N -m capstone.train ...",
              file=sys.stderr)
        return 2
    try:
        summary = train_run(args, out=Path(args.out))
    finally:
        if joined:
            dist.destroy_process_group()
    if int(os.environ.get("RANK", 0)) == 0:
        tps = summary["tokens_per_s"]
        print(f"steps {summary['steps_done']}/{summary['steps_total']}: loss {summary['last_loss']}, "
              f"val {summary['val_loss']:.4f}, median step {summary['median_step_ms'] or 0:.2f} ms, "
              f"{tps or 0:,.0f} tokens/s, peak {summary['peak_mib'] or 0:.0f} MiB; wrote {args.out}")
        for sample in summary.get("samples", []):
            print(f"{sample['method']}: {sample['text']!r}")
        if not runtime.on_gpu():
            print("(CPU: the Triton kernels run in the interpreter; these times measure Python)")
    return 0


# ---------------------------------------------------------------------------- spawned workers
def distributed_worker(rank: int, world: int, config, tc: TrainConfig, ops: str, steps: int,
                       checkpoint: str | None = None) -> dict:
    """For `week5_integration.distributed.launch`: an FSDP run of `steps` steps in this rank;
    returns {"records", "params"} (and writes `checkpoint` if given)."""
    device = torch.device("cuda", rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    trainer = Trainer(config, tc, ops=ops, device=device, fsdp=True)
    records = trainer.run(steps, log_every=steps)
    if checkpoint:
        trainer.save(checkpoint)
    return {"records": records, "params": trainer.parameters_flat()}


if __name__ == "__main__":
    sys.exit(main())
