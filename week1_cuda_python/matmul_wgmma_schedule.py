"""Which consumer schedule week 1's wgmma GEMMs run when the caller names none: the rule, in one place.

The persistent kernel has two schedules (matmul_wgmma_persistent.SCHEDULES): "cooperative", both
consumer warpgroups on one 128 x 256 tile, and "pingpong", each on its own 64 x 256 tiles, one's
epilogue beside the other's wgmmas (kernels/matmul_wgmma_pingpong.cu). `launch_persistent` and
`launch_fused` (and the torch ops on it, the capstone's `wgmma_gemms` model among their callers)
take `schedule=None` to mean: ask `choose` here.

The rule reads results/dispatch_wgmma_schedule.json (course/dispatch.py's format), which `derive`
computes from the two benchmark records that time both schedules in the same interleaved rounds:

    results/matmul_wgmma_schedules_week1.json   launch_persistent: wgmma_persistent vs wgmma_pingpong
    results/matmul_wgmma_fused_week1.json       launch_fused: wgmma_gemm vs wgmma_gemm_pp (no epilogue),
                                                wgmma_fused vs wgmma_fused_pp (that case's epilogue)

    python -m week1_cuda_python.matmul_wgmma_schedule          (on the CPU: rewrites the table from them)

One row per measured (M, N, K, dtype, kernel), kernel "gemm" (launch_persistent, B as K x N) or a
fused epilogue ("none", "bias", "residual", "swiglu"; w as N x K). For each round the ratio
cooperative ms / ping-pong ms is taken within the round (drift lands on both alike); the row names
"pingpong" only where the worst round's ratio is above MARGIN, i.e. ping-pong was faster by more
than the margin in every round: beyond the rounds' spread, not a median that noise could flip.
Rows the host paced (bench_timing's host_bound) decide nothing: their times are Python's.
Everywhere else, and on any other GPU than the one measured (course/dispatch.py), cooperative.

`measured` of each row also carries the arithmetic that explains it (`explain`): k steps per tile,
and per schedule the tiles, the busiest SM's count of them on the record's SMs, and the share of
the SMs' time that wave leaves used. Ping-pong's tile is half as tall, so the last wave is finer:
`wave_gain` is how much shorter the busiest SM's work is in 64-row units (an upper bound on what
ping-pong can win from waves alone, before its lower FLOP per byte from L2 costs it back).

Lookup (`choose`): the row of the same shape, dtype and kernel; for a fused epilogue without one,
that shape's row without an epilogue (the fused kernel's, then launch_persistent's: the same
mainloop and tile order); else cooperative. No nearest-shape borrowing: the wave arithmetic changes
with every tile count, so a neighbouring shape's verdict says little.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import NamedTuple

from course import dispatch

OP = "wgmma_schedule"
TABLE = dispatch.Table(__file__, OP)  # results/dispatch_wgmma_schedule.json
DEFAULT = "cooperative"
MARGIN = 1.03  # ping-pong must beat cooperative by 3% in every round (cuBLAS alone drifts ~2% within a run)
PROG = "python -m week1_cuda_python.matmul_wgmma_schedule"
# (record, kernel of its rows or None: the row's `epilogue`, cooperative variant, ping-pong variant)
SOURCES = (("matmul_wgmma_schedules_week1", "gemm", "wgmma_persistent", "wgmma_pingpong"),
           ("matmul_wgmma_fused_week1", "none", "wgmma_gemm", "wgmma_gemm_pp"),
           ("matmul_wgmma_fused_week1", None, "wgmma_fused", "wgmma_fused_pp"))
KERNELS = ("gemm", "none", "bias", "residual", "swiglu")


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


class TileShape(NamedTuple):
    bm: int
    bn: int
    bk: int


# The two schedules' tiles as the wave arithmetic needs them (matmul_wgmma_persistent.PERSISTENT_TILES
# and PINGPONG_TILES; tests/week1/test_matmul_wgmma_schedule.py holds them equal). Written here, not
# imported: the launchers ask this module for their schedule, so it must not import them back.
TILE_SHAPES = {"cooperative": TileShape(128, 256, 64), "pingpong": TileShape(64, 256, 64)}


def _tiles():
    return TILE_SHAPES


def explain(m: int, n: int, k: int, sms: int) -> dict:
    """The wave arithmetic of both schedules at M x N x K on `sms` SMs (one block per SM)."""
    out = {"k_steps": -(-k // _tiles()[DEFAULT].bk)}
    for schedule, tiles in _tiles().items():
        count = -(-m // tiles.bm) * -(-n // tiles.bn)
        busiest = -(-count // sms)
        out[schedule] = {"tile": f"{tiles.bm}x{tiles.bn}", "tiles": count, "waves": round(count / sms, 2),
                         "busiest": busiest, "used_pct": round(100 * count / (busiest * sms), 1),
                         "busiest_rows": busiest * tiles.bm}  # rows of 256 columns on the busiest SM
    out["wave_gain"] = round(out[DEFAULT]["busiest_rows"] / out["pingpong"]["busiest_rows"], 3)
    return out


def _shape(size: str) -> tuple[int, int, int, str]:
    """'8192x768x3072 bfloat16' or 'residual 8192x768x768 bfloat16' -> (M, N, K, dtype)."""
    dims, dtype = size.split()[-2:]
    m, n, k = (int(d) for d in dims.split("x"))
    return m, n, k, dtype


def derive(results: Path | None = None, margin: float = MARGIN) -> dict | None:
    """The dispatch record from the benchmark records in `results` (None: neither measured on a GPU)."""
    results = Path(results or TABLE.results)
    rows, machine, dates = [], None, []
    for name, kernel, coop, pp in SOURCES:
        path = results / f"{name}.json"
        if not path.exists():
            continue
        record = json.loads(path.read_text())
        if record.get("simulated"):
            continue
        machine = machine or record["machine"]
        if record["machine"].get("gpu") != machine.get("gpu"):
            raise ValueError(f"{path.name} was measured on {record['machine'].get('gpu')}, the other record on "
                             f"{machine.get('gpu')}: one table holds one GPU's rows")
        dates.append(f"{name}: {record['date']}")
        table = {(r["size"], r["variant"]): r for r in record["rows"]}
        for size in dict.fromkeys(r["size"] for r in record["rows"]):
            a, b = table.get((size, coop)), table.get((size, pp))
            if a is None or b is None:
                continue
            m, n, k, dtype = _shape(size)
            ratios = [x / y for x, y in zip(a["ms_rounds"], b["ms_rounds"])]
            host_bound = bool(a.get("host_bound") or b.get("host_bound"))
            wins = not host_bound and min(ratios) > margin
            rows.append({"key": [m, n, k, dtype, kernel or a["epilogue"]], "rung": "pingpong" if wins else DEFAULT,
                         "tile": None, "measured": {
                             "source": name, "size": size, "rounds": len(ratios), "host_bound": host_bound,
                             "pingpong_vs_cooperative": round(statistics.median(ratios), 3),
                             "worst_round": round(min(ratios), 3), "best_round": round(max(ratios), 3),
                             **explain(m, n, k, machine.get("sm_count") or 132)}})
    if not rows:
        return None
    return {"op": OP, "how": f"{PROG} (derived from {', '.join(dates)}; ping-pong where every round's "
            f"cooperative / ping-pong ms > {margin})", "machine": machine, "date": max(d.split(": ")[1] for d in dates),
            "simulated": False, "margin": margin, "rows": rows}


def text(record: dict) -> str:
    return json.dumps(record, indent=1) + "\n"


def lookup_keys(m: int, n: int, k: int, dtype, epilogue: str | None) -> list[tuple]:
    """The keys `choose` asks, in order (the module docstring's lookup)."""
    name = dtype_name(dtype)
    if epilogue is None:
        return [(m, n, k, name, "gemm"), (m, n, k, name, "none")]
    return [(m, n, k, name, epilogue)] + [(m, n, k, name, kernel) for kernel in ("none", "gemm") if kernel != epilogue]


def choose(m: int, n: int, k: int, dtype, epilogue: str | None = None, rows: dict | None = None) -> str:
    """The schedule for C = A @ B (epilogue None: launch_persistent) or a fused epilogue at M x N x K
    (N: the GEMM's columns, w's rows): the first measured row's, else cooperative. `rows`: {key: Row}
    (default: the table's rows measured on this GPU; the CPU tests pass a fake)."""
    rows = TABLE.rows() if rows is None else rows
    for key in lookup_keys(m, n, k, dtype, epilogue):
        row = rows.get(key)
        if row is not None:
            return row.rung if row.rung in ("cooperative", "pingpong") else DEFAULT
    return DEFAULT


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is not what the records give")
    args = parser.parse_args(argv)
    record = derive()
    if record is None:
        print("no GPU record times both schedules yet: nothing to derive")
        return 0
    current = TABLE.path.read_text() if TABLE.path.exists() else None
    if args.check:
        if current != text(record):
            print(f"{TABLE.path} is stale: run {PROG}")
            return 1
        return 0
    TABLE.path.write_text(text(record))
    TABLE.forget()
    for row in record["rows"]:
        print(f"{' '.join(map(str, row['key'])):40s} {row['rung']:12s} worst round "
              f"{row['measured']['worst_round']:.3f}{' (host-bound)' if row['measured']['host_bound'] else ''}")
    print("wrote", TABLE.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
