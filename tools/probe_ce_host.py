"""Probe (GPU): where the host time of one `cross_entropy` call goes, at a decode-step size.

Each line is the wall time of 2000 calls / 2000 (then one synchronize), in microseconds, of one
piece of the call alone: torch's F.cross_entropy for scale, the whole course call, its argument
checks, one torch.empty, the scratch lookup, the compiled kernel's launch through course.launch,
and a bare `compiled.run` with everything precomputed (the floor for one Triton launch from
Python). Writes nothing but stdout (and $OUT/probe_ce_host.json when OUT is set).
"""
from __future__ import annotations

import json
import os
import time

import torch
import torch.nn.functional as F

from course import launch as course_launch
from week4_triton_dl import cross_entropy as ce


def per_call_us(fn, calls: int = 2000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    logits = torch.randn(8, 50304, device="cuda", dtype=torch.bfloat16)
    targets = torch.randint(0, 50304, (8,), device="cuda")
    acc = torch.float32
    ce.cross_entropy(logits, targets)
    ticket, loss_rows = ce.scratch(logits, 8, acc)
    out = torch.empty((), dtype=logits.dtype, device="cuda")
    block, num_warps = ce.launch_plan(50304)
    coef = ce.smoothing_coefficients(0.0, 50304, acc, logits.device)
    key = (logits.dtype, targets.dtype, 8, 50304, 50304, -100, False, False, True, block)
    args = (logits, targets, loss_rows, out, out, out, ticket, 8, 50304, 50304, -100, coef, False, False, False,
            True, block, ce.REDUCE_BLOCK)
    compiled, tail = course_launch.cached_launch(ce.cross_entropy_fwd_reduce_kernel, key)
    stream = torch.cuda.current_stream().cuda_stream
    full = args + tail

    def bare():
        compiled.run(8, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None, *full)

    rows = {
        "torch F.cross_entropy": lambda: F.cross_entropy(logits, targets),
        "course cross_entropy (no grad)": lambda: ce.cross_entropy(logits, targets),
        "check_call": lambda: ce.check_call(logits, targets, -100, "mean", 0.0),
        "one_launch": lambda: ce.one_launch(logits, "mean"),
        "torch.empty(())": lambda: torch.empty((), dtype=logits.dtype, device=logits.device),
        "scratch": lambda: ce.scratch(logits, 8, acc),
        "launch_plan + smoothing_coefficients": lambda: (ce.launch_plan(50304), ce.smoothing_coefficients(0.0, 50304, acc, logits.device)),
        "course.launch (cached)": lambda: course_launch.launch(ce.cross_entropy_fwd_reduce_kernel, (8,), key, args,
                                                               num_warps=num_warps),
        "compiled.run (bare)": bare,
        "logits.device": lambda: logits.device,
    }
    result = {name: round(per_call_us(fn), 2) for name, fn in rows.items()}
    for name, us in result.items():
        print(f"{name:34s} {us:8.2f} us")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "probe_ce_host.json"), "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
