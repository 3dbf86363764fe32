"""How the persistent forward's static scheduler shares causal work among its blocks (on the CPU).

The persistent build of the CUDA C forward (`hopper.py` with persistent=True, `-DAH_PERSISTENT=1`)
launches one block per SM and lets block b walk the work tiles b, 2G - 1 - b, 2G + b, ... (G blocks;
`ah_round_tile` in kernels/attention_hopper_forward.cu: rounds alternate direction when causal, so a
block that drew a long tile draws a short one next). A work tile is one 128-row query tile of one
(batch, head), tiles head-major, causal ones longest first within a head (`ah_work`). A causal query
tile visits as many 128-key tiles as its last row has keys, so tiles differ in work; the kernel
ends when its busiest block does. This module replays the scheduler (the same arithmetic, tied to the
source by tests/week4/test_attention_hopper_persistent_protocol.py) and counts each block's key tiles:
the busiest block over the mean is the time the static walk loses to imbalance, before any
measurement.

    python -m week4_triton_dl.attention.persistent_balance           (writes results/attention_hopper_persistent_balance.json)
    python -m week4_triton_dl.attention.persistent_balance --check   (exit 1 if the committed file differs)

The alternation pairs a head's long tile with a short one only while G and a head's query tiles line
up; at S = 16k a head has 128 query tiles and G = 132, so each round shifts the pairing by 4 tiles
and some blocks draw long tiles round after round (the json's figure). A dynamic scheduler (a global
counter handing out tiles longest first, FlashAttention-3's choice for causal) does not depend on
that alignment.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PROG = "python -m week4_triton_dl.attention.persistent_balance"
RESULTS = Path(__file__).resolve().parents[1] / "results" / "attention_hopper_persistent_balance.json"
BM = BN = 128  # AH_BM, AH_BN: query rows per work tile, keys per key tile
SMS = 132  # an H100 SXM's SMs (the H200 has as many): the persistent grid's size
# The causal problems of the forward's benchmark (hopper_bench.SIZES), as (B * H, S, D)
CAUSAL = {"B16 H16 S1024": (256, 1024), "B8 H16 S2048": (128, 2048), "B4 H16 S4096": (64, 4096),
          "B2 H16 S8192": (32, 8192), "B1 H16 S16384": (16, 16384), "B8 H12 S1024 D64": (96, 1024)}


def round_tile(round_: int, block: int, grid: int, causal: bool) -> int:
    """ah_round_tile: positions k G .. k G + G - 1 of round k, reversed in odd rounds when causal."""
    return round_ * grid + (grid - 1 - block if causal and round_ & 1 else block)


def walk(block: int, grid: int, tiles: int, causal: bool):
    """The work tiles block `block` runs, in order."""
    round_ = 0
    while (tile := round_tile(round_, block, grid, causal)) < tiles:
        yield tile
        round_ += 1


def key_tiles(tile: int, m_tiles: int, seq: int, causal: bool) -> int:
    """ah_work's key-tile count of work tile `tile` (Sq = Sk = seq)."""
    order = tile % m_tiles
    m0 = (m_tiles - 1 - order if causal else order) * BM
    last_key = min(seq - 1, m0 + BM - 1) if causal else seq - 1
    return last_key // BN + 1


def balance(bh: int, seq: int, causal: bool = True, sms: int = SMS) -> dict:
    """Each block's key tiles under the static walk: the busiest block against the mean."""
    for name, value in (("bh", bh), ("seq", seq), ("sms", sms)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    m_tiles = -(-seq // BM)
    tiles = bh * m_tiles
    grid = min(sms, tiles)
    loads = [sum(key_tiles(t, m_tiles, seq, causal) for t in walk(b, grid, tiles, causal)) for b in range(grid)]
    mean = sum(loads) / grid
    return {"bh": bh, "seq": seq, "causal": causal, "grid": grid, "work_tiles": tiles,
            "busiest_key_tiles": max(loads), "mean_key_tiles": round(mean, 2),
            "busiest_over_mean": round(max(loads) / mean, 3)}


def record() -> dict:
    return {"how": PROG, "sms": SMS, "tile": f"{BM} query rows x {BN} keys",
            "problems": {label: balance(bh, seq) for label, (bh, seq) in CAUSAL.items()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed results file differs")
    args = parser.parse_args(argv)
    text = json.dumps(record(), indent=1) + "\n"
    if args.check:
        same = RESULTS.exists() and RESULTS.read_text() == text
        print(f"{RESULTS.name}: {'matches' if same else 'differs from'} what the scheduler gives")
        return 0 if same else 1
    RESULTS.write_text(text)
    print("wrote", RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
