"""Which build week 1's wgmma GEMMs run when the caller names none: the rule, in one place.

The persistent kernel has two schedules (matmul_wgmma_persistent.SCHEDULES): "cooperative", both
consumer warpgroups on one 128 x 256 tile, and "pingpong", each on its own 64 x 256 tiles, one's
epilogue beside the other's wgmmas (kernels/matmul_wgmma_pingpong.cu); and three tile widths
(matmul_wgmma_persistent.WIDTHS: 256, and the -DWP_BN builds 192 and 128, which fill a small-N
GEMM's last wave better: the kernel's header). A build is a schedule and a width (`Build`).
`launch_persistent` and `launch_fused` (and the torch ops on it, the capstone's `wgmma_gemms` model
among their callers) take `schedule=None, width=None` to mean: ask `choose_build` here.

The rule reads results/dispatch_wgmma_schedule.json (course/dispatch.py's format), which `derive`
computes from the two benchmark records that time both schedules in the same interleaved rounds:

    results/matmul_wgmma_schedules_week1.json   launch_persistent: wgmma_persistent vs wgmma_pingpong
    results/matmul_wgmma_fused_week1.json       launch_fused: wgmma_gemm vs wgmma_gemm_pp (no epilogue),
                                                wgmma_fused vs wgmma_fused_pp (that case's epilogue)

and each of those variants at the other widths, named with the width's suffix (`variant`:
wgmma_persistent_bn192, wgmma_gemm_pp_bn128, ...), where the bench timed them.

    python -m week1_cuda_python.matmul_wgmma_schedule          (on the CPU: rewrites the table from them)

One row per measured (M, N, K, dtype, kernel), kernel "gemm" (launch_persistent, B as K x N) or a
fused epilogue ("none", "bias", "residual", "swiglu"; w as N x K): its `rung` the schedule, its
`tile` {"bn": width}. The baseline is the default build, cooperative at 256. For each other build
timed, and each round, the ratio baseline ms / that build's ms is taken within the round (drift lands
on both alike); a build qualifies only where its worst round's ratio is above MARGIN, i.e. it was
faster by more than the margin in every round: beyond the rounds' spread, not a median that noise
could flip. Of those that qualify, the row names the one whose worst round is best. Timings the host
paced (bench_timing's host_bound) decide nothing: their times are Python's; but where both rows carry
each round's GPU time (`gpu_ms_rounds`: the bench replays host-paced rounds from a CUDA graph), the
rounds are compared on it (`on_gpu_ms` in `builds`), and those decide. Everywhere else, and on
any other GPU than the one measured (course/dispatch.py), the default build. A row without a tile (a
table from before the widths) is width 256; `check_row` checks every row once, when the file is read
(a width not built, or 192 for SwiGLU, refuses the file, naming the row).

`measured` of each row carries every timed build's ratios (`builds`; ping-pong's at 256 also as
`pingpong_vs_cooperative`, `worst_round`, `best_round`) and the arithmetic that explains them
(`explain`): k steps per tile, and per build the tiles, the busiest SM's count of them on the record's
SMs, and the share of the SMs' time that wave leaves used. Ping-pong's tile is half as tall, so the
last wave is finer: `wave_gain` is how much shorter the busiest SM's work is in 64-row units (an
upper bound on what ping-pong can win from waves alone, before its lower FLOP per byte from L2 costs
it back).

Lookup (`choose_build`; `choose` is its schedule): the row of the same shape, dtype and kernel; for
a fused epilogue without one, that shape's row without an epilogue (the fused kernel's, then
launch_persistent's: the same mainloop and tile order), passing over a row whose width the epilogue
cannot run (SwiGLU at 192); else the default build. No nearest-shape borrowing: the wave arithmetic
changes with every tile count, so a neighbouring shape's verdict says little.
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
DEFAULT = "cooperative"
SCHEDULES = ("cooperative", "pingpong")  # matmul_wgmma_persistent.SCHEDULES
# The tile widths (matmul_wgmma_persistent.WIDTHS; the default first) and those SwiGLU runs at
# (matmul_wgmma_fused.SWIGLU_WIDTHS): written here, not imported, as TILE_SHAPES below; a test holds them equal.
WIDTHS = (256, 192, 128)
DEFAULT_WIDTH = WIDTHS[0]
SWIGLU_WIDTHS = (256, 128)
MARGIN = 1.03  # ping-pong must beat cooperative by 3% in every round (cuBLAS alone drifts ~2% within a run)
PROG = "python -m week1_cuda_python.matmul_wgmma_schedule"
# (record, kernel of its rows or None: the row's `epilogue`, cooperative variant, ping-pong variant)
SOURCES = (("matmul_wgmma_schedules_week1", "gemm", "wgmma_persistent", "wgmma_pingpong"),
           ("matmul_wgmma_fused_week1", "none", "wgmma_gemm", "wgmma_gemm_pp"),
           ("matmul_wgmma_fused_week1", None, "wgmma_fused", "wgmma_fused_pp"))
KERNELS = ("gemm", "none", "bias", "residual", "swiglu")


class Build(NamedTuple):
    """What a call runs: the consumer schedule and the tile width (columns of C per tile)."""
    schedule: str
    width: int


DEFAULT_BUILD = Build(DEFAULT, DEFAULT_WIDTH)


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


def build_label(schedule: str, width: int) -> str:
    """A build's name in records: the schedule at 256 ("cooperative"), else with the width ("pingpong_bn192")."""
    return schedule if width == DEFAULT_WIDTH else f"{schedule}_bn{width}"


def variant(base: str, width: int) -> str:
    """A benchmark variant at a width: `base` at 256 ("wgmma_pingpong"), else "wgmma_pingpong_bn192"."""
    return base if width == DEFAULT_WIDTH else f"{base}_bn{width}"


# Every build's tile: the schedule's rows, the width's columns; the 256-wide ones first, as TILE_SHAPES.
BUILDS = tuple(Build(schedule, width) for width in WIDTHS for schedule in TILE_SHAPES)
BUILD_TILES = {build_label(*b): TileShape(TILE_SHAPES[b.schedule].bm, b.width, TILE_SHAPES[b.schedule].bk)
               for b in BUILDS}


def _tiles():
    return BUILD_TILES


def explain(m: int, n: int, k: int, sms: int) -> dict:
    """The wave arithmetic of every build at M x N x K on `sms` SMs (one block per SM)."""
    out = {"k_steps": -(-k // _tiles()[DEFAULT].bk)}
    for schedule, tiles in _tiles().items():
        count = -(-m // tiles.bm) * -(-n // tiles.bn)
        busiest = -(-count // sms)
        out[schedule] = {"tile": f"{tiles.bm}x{tiles.bn}", "tiles": count, "waves": round(count / sms, 2),
                         "busiest": busiest, "used_pct": round(100 * count / (busiest * sms), 1),
                         "busiest_rows": busiest * tiles.bm}  # rows of the tile's columns on the busiest SM
    out["wave_gain"] = round(out[DEFAULT]["busiest_rows"] / out["pingpong"]["busiest_rows"], 3)
    return out


def _shape(size: str) -> tuple[int, int, int, str]:
    """'8192x768x3072 bfloat16' or 'residual 8192x768x768 bfloat16' -> (M, N, K, dtype)."""
    dims, dtype = size.split()[-2:]
    m, n, k = (int(d) for d in dims.split("x"))
    return m, n, k, dtype


def _gpu_rounds(row: dict) -> list | None:
    """The row's GPU time of every round (the bench's `gpu_ms_rounds`: the CUDA-graph replay's where the host paced
    the round), or None where the row has none or a round lacks it (a host-paced round whose capture failed)."""
    gpu = row.get("gpu_ms_rounds")
    return gpu if gpu and len(gpu) == len(row["ms_rounds"]) and None not in gpu else None


def _compare(base: dict, other: dict) -> dict:
    """`other`'s rounds against the baseline's, round by round: > 1 is faster than the baseline. On the GPU's
    times where both rows know them in every round (`on_gpu_ms`: such a comparison decides even where the events
    were host-paced), else on the events' (records from before the GPU times: a host-paced one decides nothing)."""
    gpu = (_gpu_rounds(base), _gpu_rounds(other))
    on_gpu = None not in gpu
    ratios = [x / y for x, y in zip(*(gpu if on_gpu else (base["ms_rounds"], other["ms_rounds"])))]
    return {"vs_cooperative": round(statistics.median(ratios), 3), "worst_round": round(min(ratios), 3),
            "best_round": round(max(ratios), 3), "rounds": len(ratios),
            "host_bound": bool(base.get("host_bound") or other.get("host_bound")),
            **({"on_gpu_ms": True} if on_gpu else {})}


def _decides(compared: dict) -> bool:
    """Whether a comparison may pick a build: its times are the GPU's (the graph's, or events the GPU paced)."""
    return compared.get("on_gpu_ms", False) or not compared["host_bound"]


def derive(results: Path | None = None, margin: float = MARGIN) -> dict | None:
    """The dispatch record from the benchmark records in `results` (None: neither measured on a GPU)."""
    results = Path(results or TABLE.results)
    rows, machine, dates = [], None, []
    for name, kernel, coop, pp in SOURCES:
        bases = {"cooperative": coop, "pingpong": pp}
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
            base = table.get((size, coop))
            timed = {b: table[(size, variant(bases[b.schedule], b.width))] for b in BUILDS[1:]
                     if (size, variant(bases[b.schedule], b.width)) in table}
            if base is None or not timed:
                continue
            m, n, k, dtype = _shape(size)
            builds = {build_label(*b): _compare(base, row) for b, row in timed.items()}
            # Qualify: faster than the baseline by the margin in every round, on the GPU's times.
            wins = [b for b in timed
                    if _decides(builds[build_label(*b)]) and builds[build_label(*b)]["worst_round"] > margin]
            best = max(wins, key=lambda b: builds[build_label(*b)]["worst_round"], default=DEFAULT_BUILD)
            pingpong = builds.get("pingpong")  # the two schedules at 256: the fields the notes cite
            rows.append({"key": [m, n, k, dtype, kernel or base["epilogue"]], "rung": best.schedule,
                         "tile": {"bn": best.width}, "measured": {
                             "source": name, "size": size, "rounds": min(b["rounds"] for b in builds.values()),
                             "host_bound": any(b["host_bound"] for b in builds.values()),
                             **({"pingpong_vs_cooperative": pingpong["vs_cooperative"],
                                 "worst_round": pingpong["worst_round"], "best_round": pingpong["best_round"]}
                                if pingpong else {}),
                             "builds": builds, **explain(m, n, k, machine.get("sm_count") or 132)}})
    if not rows:
        return None
    return {"op": OP, "how": f"{PROG} (derived from {', '.join(dates)}; another build than cooperative at 256 "
            f"where every round's cooperative / that build's ms > {margin})",
            "machine": machine, "date": max(d.split(": ")[1] for d in dates),
            "simulated": False, "margin": margin, "rows": rows}


def text(record: dict) -> str:
    return json.dumps(record, indent=1) + "\n"


def lookup_keys(m: int, n: int, k: int, dtype, epilogue: str | None) -> list[tuple]:
    """The keys `choose` asks, in order (the module docstring's lookup)."""
    name = dtype_name(dtype)
    if epilogue is None:
        return [(m, n, k, name, "gemm"), (m, n, k, name, "none")]
    return [(m, n, k, name, epilogue)] + [(m, n, k, name, kernel) for kernel in ("none", "gemm") if kernel != epilogue]


def row_width(row: dispatch.Row) -> int:
    """A row's tile width: its tile's "bn", or 256 for a row without a tile (tables from before the widths)."""
    return DEFAULT_WIDTH if row.tile is None else row.tile.get("bn", DEFAULT_WIDTH)


def check_row(row: dispatch.Row) -> dispatch.Row:
    """A table row as `choose_build` uses it, checked once when the file is read (course/dispatch.Table): its
    rung one of SCHEDULES, its tile None (width 256) or {"bn": one of WIDTHS}, and SwiGLU's width one it
    runs at; returned with its tile made whole ({"bn": width}). Else a ValueError (the Table adds the
    file and the row's key), before any launch."""
    if row.rung not in SCHEDULES:
        raise ValueError(f"rung must be one of {SCHEDULES}, got {row.rung!r}: re-derive the table ({PROG})")
    if row.tile is not None and (not isinstance(row.tile, dict) or set(row.tile) != {"bn"}):
        raise ValueError(f"tile must be None or {{'bn': width}}, got {row.tile!r}")
    width = row_width(row)
    if isinstance(width, bool) or not isinstance(width, int) or width not in WIDTHS:
        raise ValueError(f"tile width (bn) must be one of {WIDTHS}, got {width!r}")
    if row.key[-1] == "swiglu" and width not in SWIGLU_WIDTHS:
        raise ValueError(f"the swiglu epilogue runs at widths {SWIGLU_WIDTHS}, not {width}")
    return row._replace(tile={"bn": width})


TABLE = dispatch.Table(__file__, OP, check_row=check_row)  # results/dispatch_wgmma_schedule.json


def choose_build(m: int, n: int, k: int, dtype, epilogue: str | None = None, rows: dict | None = None) -> Build:
    """The build for C = A @ B (epilogue None: launch_persistent) or a fused epilogue at M x N x K
    (N: the GEMM's columns, w's rows): the first measured row's that the epilogue can run, else the
    default. `rows`: {key: Row} (default: the table's rows measured on this GPU, checked; the CPU tests
    pass a fake)."""
    rows = TABLE.rows() if rows is None else rows
    for key in lookup_keys(m, n, k, dtype, epilogue):
        row = rows.get(key)
        if row is None:
            continue
        width = row_width(row)
        if epilogue == "swiglu" and width not in SWIGLU_WIDTHS:
            continue  # a plain GEMM's row at a width SwiGLU's halves cannot split
        return Build(row.rung if row.rung in SCHEDULES else DEFAULT, width if width in WIDTHS else DEFAULT_WIDTH)
    return DEFAULT_BUILD


def choose(m: int, n: int, k: int, dtype, epilogue: str | None = None, rows: dict | None = None) -> str:
    """The schedule of `choose_build`'s build (the same arguments)."""
    return choose_build(m, n, k, dtype, epilogue, rows).schedule


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
        best = max(row["measured"]["builds"].values(), key=lambda b: b["worst_round"])
        print(f"{' '.join(map(str, row['key'])):40s} {build_label(row['rung'], row['tile']['bn']):20s} best worst "
              f"round {best['worst_round']:.3f}{' (host-bound)' if row['measured']['host_bound'] else ''}"
              f"{' (on GPU ms)' if any(b.get('on_gpu_ms') for b in row['measured']['builds'].values()) else ''}")
    print("wrote", TABLE.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
