"""Which forward week 4's attention op runs on this GPU: the sweep that writes its table.

`python -m week4_triton_dl.attention.sweep_forward` (GPU) times, per (head dim, causal) at
S = 4096: flash_tma's tiles (each checked against SDPA first), flash_blocked as the op runs it
(autotuned), and the Hopper CUDA C forward (attention/hopper.py) where it runs, beside cuDNN. The
fastest becomes the op's rung for that key in results/dispatch_attention.json only when it beats
flash_blocked by dispatch.MARGIN (run-to-run noise is about 2 %); attention/dispatch.py reads it.
"""
from __future__ import annotations

import argparse
import math
import sys

import torch

from course import runtime
from course.check import random_tensor
from course.gpu import DEVICE

from week4_triton_dl.attention import dispatch, hopper
from week4_triton_dl.attention import flash as blocked  # the flash_blocked forward's launcher
from week4_triton_dl.attention.bench import HEADS, sdpa_backends, sdpa, time_ms, attempt, attention_flops, batch_for
from week4_triton_dl.attention.tma import launch_forward_tma


# flash_tma's tiles: (BLOCK_M, BLOCK_N, warps, stages). The probe's best at D = 128 first
# (tools/probe_fa_hopper.py), then its runners-up and tiles a D = 64 accumulator leaves room for.
TMA_TILES = [(128, 64, 4, 2), (64, 64, 4, 3), (128, 128, 8, 3), (128, 64, 4, 3), (128, 64, 8, 3),
             (128, 128, 4, 3), (128, 128, 8, 2), (64, 128, 4, 3)]


def _time_hopper(q, k, v, causal, ref, say) -> float | None:
    """The Hopper CUDA C forward's time in ms on these inputs, or None where it cannot run here or
    is wrong (then the op never names it)."""
    why = hopper.hopper_unsupported(q, k, v, causal)
    if why is not None:
        say(f"  flash_hopper: not here ({why[:100]})")
        return None
    scale = 1 / math.sqrt(q.shape[-1])
    run = lambda: hopper.launch_forward_hopper(q, k, v, causal, scale)  # noqa: E731
    out, err = attempt(lambda: run()[0])
    if err is not None:
        say(f"  flash_hopper: failed: {err}")
        return None
    rel = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    if not rel < 2e-2:  # the same bound as flash_tma's tiles above
        say(f"  flash_hopper: WRONG, rel err {rel:.1e}")
        return None
    ms = time_ms(run, 25, 200)
    say(f"  flash_hopper (CUDA C): {ms:.4f} ms (rel err {rel:.1e})")
    return ms


def sweep_tma(head_dims=(64, 128), seq=4096, dtype=torch.bfloat16, stream=sys.stdout):
    """Time flash_tma's tiles per (head dim, causal) beside cuDNN, check each against SDPA first, time
    flash_blocked as the op runs it, and save a row per key to results/dispatch_attention.json: the rung the
    op should run (flash_tma where its best tile beats flash_blocked by dispatch.MARGIN) and its tile."""
    if not runtime.on_gpu():
        raise SystemExit("the forward sweep times kernels on a GPU; this machine runs the Triton interpreter")
    say = lambda text: print(text, file=stream, flush=True)  # noqa: E731
    rows = []
    for head_dim in head_dims:
        for causal in (False, True):
            batch = batch_for(seq)
            q, k, v = (random_tensor((batch, HEADS, seq, head_dim), dtype, DEVICE) for _ in range(3))
            flops = attention_flops(batch, HEADS, seq, seq, head_dim, causal)
            ref = sdpa()(q, k, v, causal)
            cudnn = time_ms(lambda: sdpa(sdpa_backends()["sdpa_cudnn"])(q, k, v, causal), 25, 200)
            say(f"D={head_dim} {'causal' if causal else 'full'} S={seq} B={batch}: cuDNN {cudnn:.4f} ms "
                f"{flops / cudnn / 1e9:.0f} TFLOP/s")
            best = None
            for bm, bn, warps, stages in TMA_TILES:
                tile = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages}
                run = lambda: launch_forward_tma(q, k, v, causal, 1 / math.sqrt(head_dim), None, tile=tile)  # noqa: E731
                out, err = attempt(lambda: run()[0])
                if err is not None:
                    say(f"  {bm}x{bn} w{warps} s{stages}: failed: {err}")
                    continue
                rel = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                if not rel < 2e-2:  # bf16 attention: ~4e-3 norm-wise; NaN fails too
                    say(f"  {bm}x{bn} w{warps} s{stages}: WRONG, rel err {rel:.1e}")
                    continue
                ms = time_ms(run, 25, 200)
                say(f"  {bm}x{bn} w{warps} s{stages}: {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOP/s "
                    f"{cudnn / ms:.2f}x cuDNN (rel err {rel:.1e})")
                if best is None or ms < best[0]:
                    best = (ms, tile)
            if best is not None:
                # flash_blocked as the op would run it (autotuned pointer kernel), same inputs: flash_tma
                # becomes what a model gets only where it beats this by dispatch.MARGIN.
                scale = 1 / math.sqrt(head_dim)
                blocked_ms = time_ms(lambda: blocked.launch_forward(q, k, v, causal, scale, None),
                                 25, 200)
                # The CUDA C forward (attention/hopper.py), where it runs: checked, then timed the same way.
                hopper_ms = _time_hopper(q, k, v, causal, ref, say)
                timed = {"flash_tma": best[0], **({"flash_hopper": hopper_ms} if hopper_ms else {})}
                fastest = min(timed, key=timed.get)
                rung = fastest if blocked_ms / timed[fastest] >= dispatch.MARGIN else "flash_blocked"
                say(f"  flash_blocked (autotuned): {blocked_ms:.4f} ms {cudnn / blocked_ms:.2f}x cuDNN; best "
                    f"flash_tma tile {blocked_ms / best[0]:.2f}x flash_blocked: {rung} for the op")
                rows.append({"key": [head_dim, causal], "rung": rung, "tile": best[1] if rung == "flash_tma" else None,
                             "measured": {**({"flash_hopper_ms": round(hopper_ms, 4),
                                              "flash_hopper_vs_cudnn": round(cudnn / hopper_ms, 3)} if hopper_ms else {}),
                                          "flash_tma_tile": best[1], "flash_tma_ms": round(best[0], 4),
                                          "flash_tma_tflops": round(flops / best[0] / 1e9, 1),
                                          "flash_tma_vs_cudnn": round(cudnn / best[0], 3),
                                          "flash_blocked_ms": round(blocked_ms, 4),
                                          "flash_tma_vs_blocked": round(blocked_ms / best[0], 3),
                                          "seq": seq, "batch": batch}})
            del q, k, v, ref
            torch.cuda.empty_cache()
    path = dispatch.TABLE.save(rows, "python -m week4_triton_dl.attention.sweep_forward")
    say(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    args = parser.parse_args(argv)
    sweep_tma(dtype=getattr(torch, args.dtype))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
