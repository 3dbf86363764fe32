"""Which forward week 4's attention op runs on this GPU: the sweep that writes its table.

`python -m week4_triton_dl.attention.sweep_forward` (GPU) times, per (head dim, causal, sequence band)
at one S per band (BAND_SEQ): flash_tma's tiles (each checked against SDPA first), flash_blocked as the
op runs it (autotuned), and every build of the Hopper CUDA C forward (attention/hopper.py: default,
overlap, persistent, persistent+overlap and the persistent builds with the dynamic tile scheduler; each
checked first) where it runs, beside cuDNN. The fastest
becomes the op's rung (and tile, or build) for that key in results/dispatch_attention.json only when it
beats flash_blocked by dispatch.MARGIN (run-to-run noise is about 2 %): `table_row` decides, from the
timings alone (the CPU tests give it fake ones); attention/dispatch.py reads the table.
`--prebuild` builds the six extensions (HOPPER_BUILDS) first, side by side (a cold sweep would build them
one by one).
"""
from __future__ import annotations

import argparse
import math
import sys

import torch

from course import runtime
from course.check import random_tensor
from course.dispatch import Row
from course.gpu import DEVICE

from week4_triton_dl.attention import dispatch, hopper
from week4_triton_dl.attention import flash as blocked  # the flash_blocked forward's launcher
from week4_triton_dl.attention.bench import HEADS, sdpa_backends, sdpa, time_ms, attempt, attention_flops, batch_for
from week4_triton_dl.attention.tma import launch_forward_tma


# flash_tma's tiles: (BLOCK_M, BLOCK_N, warps, stages). The probe's best at D = 128 first
# (tools/probe_fa_hopper.py), then its runners-up and tiles a D = 64 accumulator leaves room for.
TMA_TILES = [(128, 64, 4, 2), (64, 64, 4, 3), (128, 128, 8, 3), (128, 64, 4, 3), (128, 64, 8, 3),
             (128, 128, 4, 3), (128, 128, 8, 2), (64, 128, 4, 3)]
# The S each sequence band is measured at (dispatch.seq_band): the middle of the short band, where the table
# measured before the bands; the long band at the benchmark's 16k, where the persistent build's static walk
# is imbalanced (attention/persistent_balance.py). B * H * S stays bench.TOKENS (batch_for).
BAND_SEQ = {dispatch.seq_band(4096): 4096, dispatch.seq_band(16384): 16384}
# The Hopper forward's builds, by the name hopper.build_label gives them, in the order a tie keeps.
HOPPER_BUILDS = {hopper.build_label(b): b for b in ({"overlap": False, "persistent": False},
                                                     {"overlap": True, "persistent": False},
                                                     {"overlap": False, "persistent": True},
                                                     {"overlap": True, "persistent": True},
                                                     {"persistent": True, "dynamic": True},
                                                     {"overlap": True, "persistent": True, "dynamic": True})}
REL_BOUND = 2e-2  # a candidate's norm-wise error against SDPA: bf16 attention is ~4e-3; NaN fails too


def _time_hopper(q, k, v, causal, ref, say, build: dict) -> float | None:
    """One Hopper build's time in ms on these inputs, or None where it cannot run here or is wrong
    (then the op never names it)."""
    name = f"flash_hopper {hopper.build_label(build)}"
    scale = 1 / math.sqrt(q.shape[-1])
    run = lambda: hopper.launch_forward_hopper(q, k, v, causal, scale, build=build)  # noqa: E731
    out, err = attempt(lambda: run()[0])
    if err is not None:
        say(f"  {name}: failed: {err}")
        return None
    rel = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    if not rel < REL_BOUND:  # the same bound as flash_tma's tiles
        say(f"  {name}: WRONG, rel err {rel:.1e}")
        return None
    ms = time_ms(run, 25, 200)
    say(f"  {name} (CUDA C): {ms:.4f} ms (rel err {rel:.1e})")
    return ms


def table_row(key, cudnn_ms: float, blocked_ms: float, tma: tuple[float, dict] | None,
              hopper_ms: dict[str, float], seq: int, batch: int, flops: float) -> dict:
    """The table's row for `key` from the sweep's timings (ms): `tma` (its best tile's ms, the tile) or None,
    `hopper_ms` {build label: ms} of the builds that ran and were right. The fastest candidate, a flash_tma
    tile or a Hopper build, is the op's rung only where flash_blocked takes dispatch.MARGIN times as long;
    `measured` keeps every time and its ratio to cuDNN (> 1: faster than cuDNN)."""
    candidates = {**({("flash_tma", None): tma[0]} if tma else {}),
                  **{(dispatch.HOPPER, label): ms for label, ms in hopper_ms.items()}}
    rung, build = "flash_blocked", None
    if candidates:
        fastest = min(candidates, key=candidates.get)  # first of equals: flash_tma, then HOPPER_BUILDS' order
        if blocked_ms / candidates[fastest] >= dispatch.MARGIN:
            rung, build = fastest
    measured = {"cudnn_ms": round(cudnn_ms, 4), "flash_blocked_ms": round(blocked_ms, 4),
                "flash_blocked_vs_cudnn": round(cudnn_ms / blocked_ms, 3)}
    if "default" in hopper_ms:  # the fields of the tables from before the builds: the default build's
        measured.update(flash_hopper_ms=round(hopper_ms["default"], 4),
                        flash_hopper_vs_cudnn=round(cudnn_ms / hopper_ms["default"], 3))
    if hopper_ms:
        measured["flash_hopper_builds"] = {label: {"ms": round(ms, 4), "vs_cudnn": round(cudnn_ms / ms, 3),
                                                   "tflops": round(flops / ms / 1e9, 1)}
                                           for label, ms in hopper_ms.items()}
    if tma:
        measured.update(flash_tma_tile=tma[1], flash_tma_ms=round(tma[0], 4),
                        flash_tma_tflops=round(flops / tma[0] / 1e9, 1),
                        flash_tma_vs_cudnn=round(cudnn_ms / tma[0], 3),
                        flash_tma_vs_blocked=round(blocked_ms / tma[0], 3))
    measured.update(seq=seq, batch=batch)
    row = {"key": list(key), "rung": rung, "tile": tma[1] if rung == "flash_tma" else None, "measured": measured}
    if rung == dispatch.HOPPER:
        row["build"] = dict(HOPPER_BUILDS[build])
    return row


def _best_tma(q, k, v, causal, ref, cudnn, flops, say) -> tuple[float, dict] | None:
    """(ms, tile) of flash_tma's fastest right tile, or None where none ran."""
    best = None
    for bm, bn, warps, stages in TMA_TILES:
        tile = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages}
        run = lambda: launch_forward_tma(q, k, v, causal, 1 / math.sqrt(q.shape[-1]), None, tile=tile)  # noqa: E731
        out, err = attempt(lambda: run()[0])
        if err is not None:
            say(f"  {bm}x{bn} w{warps} s{stages}: failed: {err}")
            continue
        rel = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
        if not rel < REL_BOUND:
            say(f"  {bm}x{bn} w{warps} s{stages}: WRONG, rel err {rel:.1e}")
            continue
        ms = time_ms(run, 25, 200)
        say(f"  {bm}x{bn} w{warps} s{stages}: {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOP/s "
            f"{cudnn / ms:.2f}x cuDNN (rel err {rel:.1e})")
        if best is None or ms < best[0]:
            best = (ms, tile)
    return best


def measure_key(head_dim: int, causal: bool, band: str, dtype, say) -> dict:
    """One key's row: every candidate checked against SDPA, then timed beside cuDNN and flash_blocked."""
    seq = BAND_SEQ[band]
    batch = batch_for(seq)
    q, k, v = (random_tensor((batch, HEADS, seq, head_dim), dtype, DEVICE) for _ in range(3))
    flops = attention_flops(batch, HEADS, seq, seq, head_dim, causal)
    ref = sdpa()(q, k, v, causal)
    cudnn = time_ms(lambda: sdpa(sdpa_backends()["sdpa_cudnn"])(q, k, v, causal), 25, 200)
    say(f"D={head_dim} {'causal' if causal else 'full'} {band}: S={seq} B={batch}: cuDNN {cudnn:.4f} ms "
        f"{flops / cudnn / 1e9:.0f} TFLOP/s")
    tma = _best_tma(q, k, v, causal, ref, cudnn, flops, say)
    # flash_blocked as the op would run it (autotuned pointer kernel), same inputs: another rung becomes
    # what a model gets only where it beats this by dispatch.MARGIN.
    blocked_ms = time_ms(lambda: blocked.launch_forward(q, k, v, causal, 1 / math.sqrt(head_dim), None), 25, 200)
    hopper_ms = {}
    why = hopper.hopper_unsupported(q, k, v, causal)
    if why is not None:
        say(f"  flash_hopper: not here ({why[:100]})")
    else:  # every build, checked then timed the same way
        for label, build in HOPPER_BUILDS.items():
            ms = _time_hopper(q, k, v, causal, ref, say, build)
            if ms is not None:
                hopper_ms[label] = ms
    row = table_row((head_dim, causal, band), cudnn, blocked_ms, tma, hopper_ms, seq, batch, flops)
    say(f"  flash_blocked (autotuned): {blocked_ms:.4f} ms {cudnn / blocked_ms:.2f}x cuDNN: "
        f"{dispatch.label(dispatch.row_choice(dispatch.check_row(_as_row(row))))} for the op")
    del q, k, v, ref
    torch.cuda.empty_cache()
    return row


def _as_row(row: dict) -> Row:
    """A written row as the table reads it back."""
    return Row(tuple(row["key"]), row["rung"], row["tile"], row["measured"], row.get("build"))


def prebuild() -> None:
    """Build the Hopper forward's extensions, one process per build side by side (~1 min each cold, cached on
    disk per source and flags): the sweep then only loads them. SystemExit naming a build that failed."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    code = "from week4_triton_dl.attention import hopper as hp; e = hp.load_extension(**{!r}); print(e.namespace)"
    with ThreadPoolExecutor(len(HOPPER_BUILDS)) as pool:
        done = pool.map(lambda build: (build, subprocess.run([sys.executable, "-c", code.format(build)],
                                                             capture_output=True, text=True)), HOPPER_BUILDS.values())
        for build, result in done:
            print(f"{hopper.build_label(build)}: {result.stdout.strip() or result.stderr[-2000:]}", flush=True)
            if result.returncode:
                raise SystemExit(f"the Hopper build {build} failed to build")


def sweep_forward(head_dims=(64, 128), bands=tuple(BAND_SEQ), dtype=torch.bfloat16, stream=sys.stdout):
    """Time every candidate per (head dim, causal, band) beside cuDNN (measure_key) and save a row per key to
    results/dispatch_attention.json: the rung the op should run, and its tile or build (table_row)."""
    if not runtime.on_gpu():
        raise SystemExit("the forward sweep times kernels on a GPU; this machine runs the Triton interpreter")
    say = lambda text: print(text, file=stream, flush=True)  # noqa: E731
    # The short band's rows first, in the order of the table from before the bands (D 64, 128; full, causal):
    # notes/flash_attention.md reads rows 0-3 by index (its figures' `path=rows.N...`).
    rows = [measure_key(head_dim, causal, band, dtype, say)
            for band in bands for head_dim in head_dims for causal in (False, True)]
    path = dispatch.TABLE.save(rows, "python -m week4_triton_dl.attention.sweep_forward")
    say(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--prebuild", action="store_true",
                        help="only build the Hopper forward's six extensions (HOPPER_BUILDS), in parallel (then the sweep loads them)")
    args = parser.parse_args(argv)
    if args.prebuild:
        prebuild()
        return 0
    sweep_forward(dtype=getattr(torch, args.dtype))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
