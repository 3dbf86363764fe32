"""Probe (2 GPUs): where an FSDP2 training step of the capstone's fast model spends its host time.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tools/probe_fsdp_host.py [--plain]

Times each phase of `capstone.train.Trainer.train_step` on the host, with a synchronize after each
(so a phase's time is its Python plus the GPU work it waits for): forward, backward, gradient
clipping, optimizer step. `--plain`: the same without FSDP (one process). Rank 0 prints medians.
"""
from __future__ import annotations

import math
import statistics
import sys
import time

import torch
import torch.distributed as dist

from course import runtime  # noqa: F401
from capstone import fsdp as cf
from capstone.train import Trainer
from week5_integration import torchrun


def main() -> None:
    plain = "--plain" in sys.argv
    rank, world, device = torchrun.init_from_env("cuda")
    plan = cf.GPU_PLAN
    tc = cf.train_config(plan, plan.batch * world, 30)
    trainer = Trainer(plan.config, tc, ops="fast", device=device, fsdp=not plain)
    trainer.opt = torch.optim.AdamW(cf.param_groups(trainer.module, tc.weight_decay), lr=tc.lr, fused=True)
    phases: dict = {k: [] for k in ("batch", "forward", "backward", "clip", "optimizer", "step")}
    host: dict = {k: [] for k in phases}

    def tick(name, t0):
        host[name].append((time.perf_counter() - t0) * 1e3)  # the call's own host time (returned, not done)
        torch.cuda.synchronize()
        now = time.perf_counter()
        phases[name].append((now - t0) * 1e3)
        return now

    for i in range(25):
        torch.cuda.synchronize()
        start = t = time.perf_counter()
        x, y = trainer.next_batch()
        t = tick("batch", t)
        trainer.opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = trainer.loss_fn(x, y)
        t = tick("forward", t)
        loss.backward()
        t = tick("backward", t)
        torch.nn.utils.clip_grad_norm_(trainer.params, 1.0, foreach=True)
        t = tick("clip", t)
        trainer.opt.step()
        t = tick("optimizer", t)
        phases["step"].append((t - start) * 1e3)
    if rank == 0:
        mode = "plain (no FSDP)" if plain else f"FSDP2 x {world}"
        print(f"{mode}, B={plan.batch}/GPU: median ms per phase over the last 15 steps (to the call's return | to done)")
        for name, xs in phases.items():
            h = statistics.median(host[name][10:]) if host[name] else math.nan
            print(f"  {name:10s} {h:8.2f} | {statistics.median(xs[10:]):8.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
