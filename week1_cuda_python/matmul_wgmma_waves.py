"""How a persistent GEMM's tiles fall on the SMs: the wave arithmetic of week 1's wgmma schedules.

A persistent grid deals tiles of C to its blocks, one block per SM, tile t to block t mod SMs
(kernels/matmul_wgmma_persistent.cu; the tile order only decides which tile, not how many). So
every SM computes floor(tiles / SMs) tiles and the first (tiles mod SMs) of them one more: the
busiest SM's count is the kernel's critical path, in tiles. Two ceilings follow from the shape
alone, before any measurement:

* the last wave: the busiest SM's count times SMs is the SM-time the grid holds; the tiles use
  `sm_time_used_pct` of it (the rest is SMs idle while the last wave's tiles finish);
* the ragged edges: a tile is computed whole (the TMA reads zeros past M, N and K), so of the MACs
  the tensor cores issue only M N K / (tiles bm bn k_steps bk) are the problem's (`mac_used_pct`).

Their product (`ceiling_pct`) is the share of the SMs' tensor time, with every tile taking the same
time, that does the problem's work: what waves and edges allow at best, not a prediction.

Per build: both schedules at each tile width (matmul_wgmma_schedule.BUILD_TILES: "cooperative",
"pingpong" at 256, "cooperative_bn192", ...), and per shape `fullest_width`: for each schedule the
width whose grid leaves the most of the SMs' time used (the fullest last wave; a tie goes to the
wider tile, which reads more FLOPs per byte of L2). At N = 768 a 256-wide tile makes 3 column tiles
and a 192-wide one 4: the arithmetic the width builds exist for (kernels/matmul_wgmma_persistent.cu).

    python -m week1_cuda_python.matmul_wgmma_waves            (on the CPU: writes results/matmul_wgmma_waves.json)
    python -m week1_cuda_python.matmul_wgmma_waves --check    (exit 1 if the committed file is not what this gives)

The notes cite the file's numbers as figures (path=shapes.SHAPE.SCHEDULE.FIELD).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from week1_cuda_python.matmul_wgmma_schedule import BUILD_TILES, TILE_SHAPES, WIDTHS, TileShape, build_label

PROG = "python -m week1_cuda_python.matmul_wgmma_waves"
RESULTS = Path(__file__).parent / "results" / "matmul_wgmma_waves.json"
SMS = 132  # an H100 SXM's SMs, the GPU issue 32's targets are set on (the H200 has as many)
TOKENS = 8 * 1024
# (M, N, K): issue 32's target shapes, and the capstone's backward ones that the ncu groups profile
SHAPES = {
    "4096^3": (4096, 4096, 4096), "8192^3": (8192, 8192, 8192), "5000x3000x4000": (5000, 3000, 4000),
    "qkv": (TOKENS, 2304, 768), "proj": (TOKENS, 768, 768), "fc": (TOKENS, 3072, 768),
    "fc2": (TOKENS, 768, 3072), "lm_head": (TOKENS, 50304, 768),
    # the LM head's backward: dX = dY W^T (K = 50304, only 8192 x 768 of C) and dW = X^T dY
    "lm_head_dx": (TOKENS, 768, 50304), "lm_head_dw": (768, 50304, TOKENS),
    # every Linear's backward (matmul_wgmma_backward_bench.py times them): dX = dY W, tokens x in x out, and the
    # weight gradient dW = dY^T X, out x in over the 8192 tokens: a small C with a long K, few tiles
    **{f"{name}_{kind}": shape for name, (out_features, in_features) in
       {"qkv": (2304, 768), "proj": (768, 768), "fc": (3072, 768), "fc2": (768, 3072)}.items()
       for kind, shape in (("dx", (TOKENS, in_features, out_features)), ("dw", (out_features, in_features, TOKENS)))},
}


def waves(m: int, n: int, k: int, tile: TileShape, sms: int = SMS) -> dict:
    """The wave arithmetic of an M x N x K GEMM in `tile`s dealt round-robin to `sms` persistent blocks."""
    for name, value in (("m", m), ("n", n), ("k", k), ("sms", sms)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    tiles_m, tiles_n, k_steps = -(-m // tile.bm), -(-n // tile.bn), -(-k // tile.bk)
    tiles = tiles_m * tiles_n
    busiest = -(-tiles // sms)
    last = tiles - (busiest - 1) * sms  # tiles of the last wave: 1..sms
    sm_time = 100 * tiles / (busiest * sms)
    macs = 100 * m * n * k / (tiles * tile.bm * tile.bn * k_steps * tile.bk)
    return {
        "tile": f"{tile.bm}x{tile.bn}x{tile.bk}", "sms": sms,
        "tiles_m": tiles_m, "tiles_n": tiles_n, "tiles": tiles, "k_steps": k_steps,
        # rows of the last row of tiles, columns of the last column, k of the last step: how ragged
        "edge_m": m - (tiles_m - 1) * tile.bm, "edge_n": n - (tiles_n - 1) * tile.bn,
        "edge_k": k - (k_steps - 1) * tile.bk,
        "waves": round(tiles / sms, 2), "full_waves": tiles // sms, "busiest": busiest, "last_wave_tiles": last,
        "last_wave_fill_pct": round(100 * last / sms, 1),
        "sm_time_used_pct": round(sm_time, 1), "mac_used_pct": round(macs, 1),
        "ceiling_pct": round(sm_time * macs / 100, 1),
    }


def fullest_width(builds: dict) -> dict:
    """{schedule: the width whose grid uses the most of the SMs' time} from one shape's `waves` per build
    label; a tie goes to the wider tile (WIDTHS is widest first)."""
    return {schedule: max(WIDTHS, key=lambda w: (builds[build_label(schedule, w)]["sm_time_used_pct"], w))
            for schedule in TILE_SHAPES}


def record(sms: int = SMS) -> dict:
    """Every shape of SHAPES in every build's tiles: what results/matmul_wgmma_waves.json holds."""
    shapes = {}
    for name, mnk in SHAPES.items():
        builds = {label: waves(*mnk, tile, sms) for label, tile in BUILD_TILES.items()}
        shapes[name] = {"mnk": list(mnk), **builds, "fullest_width": fullest_width(builds)}
    return {"how": f"{PROG} (arithmetic from the shapes and the tiles, no GPU)", "sms": sms,
            "tiles": {name: f"{t.bm}x{t.bn}x{t.bk}" for name, t in BUILD_TILES.items()}, "shapes": shapes}


def text(result: dict) -> str:
    return json.dumps(result, indent=1) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file is stale")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the JSON file to write")
    args = parser.parse_args(argv)
    wanted = text(record())
    if args.check:
        if not args.out.is_file() or args.out.read_text() != wanted:
            print(f"{args.out} is stale: run {PROG}")
            return 1
        return 0
    args.out.write_text(wanted)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
