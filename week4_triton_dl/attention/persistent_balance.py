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
that alignment. `dynamic_balance` replays it (hopper.py's dynamic=True, `-DAH_DYNAMIC_TILES=1`,
kernels/attention_hopper_dynamic.cuh): tiles in `dynamic_tile`'s order (sections of heads whose K and V
fit in L2, longest first within a section), handed out by list scheduling: block b starts with tile b
and draws the next one when its producer has issued the loads of the current one, STAGES key tiles
before its consumers finish it. The json records both figures side by side.
"""
from __future__ import annotations

import argparse
import json
import sys
import heapq
from pathlib import Path

PROG = "python -m week4_triton_dl.attention.persistent_balance"
RESULTS = Path(__file__).resolve().parents[1] / "results" / "attention_hopper_persistent_balance.json"
BM = BN = 128  # AH_BM, AH_BN: query rows per work tile, keys per key tile
SMS = 132  # an H100 SXM's SMs (the H200 has as many): the persistent grid's size
STAGES = 2  # AH_STAGES: how far ahead of its consumers the producer draws its next tile, in key tiles
L2_SECTION_BYTES = 32 << 20  # AH_L2_SECTION_BYTES: a section's K and V (the dynamic order)
# The causal problems of the forward's benchmark (hopper_bench.SIZES), as (B * H, S, D)
CAUSAL = {"B16 H16 S1024": (256, 1024, 128), "B8 H16 S2048": (128, 2048, 128), "B4 H16 S4096": (64, 4096, 128),
          "B2 H16 S8192": (32, 8192, 128), "B1 H16 S16384": (16, 16384, 128), "B8 H12 S1024 D64": (96, 1024, 64)}


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


def _check(**values) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def section_heads(d: int, seq_k: int, bh: int) -> int:
    """ah_section_heads: the heads whose K and V (4 d bytes a key) fit in L2_SECTION_BYTES, 1 to bh."""
    return max(1, min(bh, L2_SECTION_BYTES // (4 * d) // seq_k))


def dynamic_tile(tile: int, bh: int, m_tiles: int, heads: int, causal: bool) -> tuple[int, int]:
    """ah_dyn_work's (batch * head, query tile) of work tile `tile`: ah_work's order when not causal; causal,
    sections of `heads` heads, a section's query tiles longest first (the last rows), its heads fastest."""
    if not causal:
        return tile // m_tiles, tile % m_tiles
    section, in_section = divmod(tile, heads * m_tiles)
    here = min(heads, bh - section * heads)
    order, head = divmod(in_section, here)
    return section * heads + head, m_tiles - 1 - order


def _key_tiles_of(query_tile: int, seq: int, causal: bool) -> int:
    last_key = min(seq - 1, query_tile * BM + BM - 1) if causal else seq - 1
    return last_key // BN + 1


def list_schedule(costs, grid: int, lookahead: int = STAGES) -> list[int]:
    """Each block's total cost when G blocks take `costs` in order: block b starts with tile b; a block draws
    its next tile `lookahead` units before it finishes the current one (at its start if shorter), the earliest
    draw first (ties: the lower block, an arbitrary choice: on the GPU the atomic decides)."""
    loads, draws = [0] * grid, []
    for block in range(min(grid, len(costs))):
        loads[block] = costs[block]
        heapq.heappush(draws, (max(0, costs[block] - lookahead), block))
    for cost in costs[grid:]:
        _, block = heapq.heappop(draws)
        start = loads[block]  # the drawn tile starts when the block's current one ends
        loads[block] += cost
        heapq.heappush(draws, (start + max(0, cost - lookahead), block))
    return loads


def dynamic_balance(bh: int, seq: int, d: int = 128, causal: bool = True, sms: int = SMS) -> dict:
    """Each block's key tiles under the dynamic scheduler (list scheduling in dynamic_tile's order)."""
    _check(bh=bh, seq=seq, d=d, sms=sms)
    m_tiles = -(-seq // BM)
    tiles, heads = bh * m_tiles, section_heads(d, seq, bh)
    costs = [_key_tiles_of(dynamic_tile(t, bh, m_tiles, heads, causal)[1], seq, causal) for t in range(tiles)]
    loads = list_schedule(costs, min(sms, tiles))
    mean = sum(loads) / len(loads)
    return {"grid": len(loads), "section_heads": heads, "busiest_key_tiles": max(loads),
            "busiest_over_mean": round(max(loads) / mean, 3)}


def balance(bh: int, seq: int, causal: bool = True, sms: int = SMS) -> dict:
    """Each block's key tiles under the static walk: the busiest block against the mean."""
    _check(bh=bh, seq=seq, sms=sms)
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
            "problems": {label: {**balance(bh, seq), "d": d, "dynamic": dynamic_balance(bh, seq, d)}
                         for label, (bh, seq, d) in CAUSAL.items()}}


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
