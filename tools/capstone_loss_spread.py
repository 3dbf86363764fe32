"""How far rounding alone moves a loss curve: the capstone's eager twin against rounding-sized changes, on the CPU.

    python tools/capstone_loss_spread.py --seeds 0 1 2 3 --steps 200     # ~1 min a seed on one core

The capstone's loss phase (capstone/measure.py) holds each model's curve to the eager twin's, and to a
control (the twin compiled). This asks the same question where no GPU is: a small model (4 layers of 128,
64 tokens, bytes vocabulary) trained under bf16 autocast, the torch twin against
* `nudge`: the twin with every weight multiplied by 1 + 2^-20 N(0, 1) after init (a few float32 ulps: no
  change to the model at all, only to where its trajectory starts);
* `bf16_stream`: the twin with the residual stream rounded to bf16 at every add (x + h W^T formed in fp32
  from bf16 operands, stored in bf16, as week 1's fused GEMM epilogue does in the capstone's wgmma_gemms;
  the norms read the bf16 stream with their weights cast to it).
For each seed it prints the distances measure.py computes (the 20-step means' largest gap, the last 50
steps' means). Where `bf16_stream` sits inside the spread `nudge` shows seed to seed, the stream's rounding is
not what a curve distance of that size can see. Nothing is written: the numbers depend on the CPU's
torch build and are printed for the reader.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

from capstone import model as cm
from capstone.measure import LOSS_TOLERANCE, curve_distance
from capstone.train import Trainer
from capstone.wgmma_ops import norm_in_stream_dtype
from week5_integration import model as m
from week5_integration.train import TrainConfig

CONFIG = m.GPTConfig(vocab_size=256, max_seq_len=64, d_model=128, n_heads=4, n_layers=4)


def bf16_stream_residual(x, w, residual):
    """residual + x W^T: bf16 operands, the sum in fp32, stored in bf16 (week 1's epilogue, in torch)."""
    with torch.autocast(x.device.type, enabled=False):
        acc = x.to(torch.bfloat16).float() @ w.to(torch.bfloat16).float().t()
        return (residual.to(torch.bfloat16).float() + acc).to(torch.bfloat16)


VARIANTS = {
    "twin": cm.TORCH_OPS,
    "nudge": cm.TORCH_OPS,
    "bf16_stream": dataclasses.replace(cm.TORCH_OPS, name="bf16_stream", linear_residual=bf16_stream_residual,
                                       norm=norm_in_stream_dtype(cm.TORCH_OPS.norm)),
}


def curve(name: str, seed: int, steps: int) -> list[float]:
    tc = TrainConfig(steps=steps, batch=8, lr=3e-3, warmup=10, corpus_bytes=1 << 16, amp=True, seed=seed)
    trainer = Trainer(CONFIG, tc, ops=VARIANTS[name], device="cpu")
    if name == "nudge":
        gen = torch.Generator().manual_seed(1000 + seed)
        with torch.no_grad():
            for p in trainer.model.parameters():
                p.mul_(1 + 2.0**-20 * torch.randn(p.shape, generator=gen))
    return [r["loss"] for r in trainer.run(log_every=10**9)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args(argv)
    if args.steps < LOSS_TOLERANCE["window"]:
        raise ValueError(f"--steps must be >= the {LOSS_TOLERANCE['window']}-step window, got {args.steps}")
    torch.set_num_threads(1)
    print(f"seed  variant      {LOSS_TOLERANCE['window']}-step means' largest gap  last 50 steps' means")
    for seed in args.seeds:
        twin = curve("twin", seed, args.steps)
        for name in ("nudge", "bf16_stream"):
            d = curve_distance(twin, curve(name, seed, args.steps), LOSS_TOLERANCE["window"])
            print(f"{seed:4d}  {name:11s}  {d['moving_avg_max_abs_diff']:.4f}{'':24s}{d['final_mean_abs_diff']:.4f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
