"""The persistent and cluster wgmma rungs against the rung below (wgmma_tma) and cuBLAS, in interleaved rounds.

    python -m week1_cuda_python.matmul_wgmma_persistent_bench            (H100/H200; writes results/)
    python -m week1_cuda_python.matmul_wgmma_persistent_bench --quick    (fewer rounds and sizes)

Why rounds. cuBLAS's rate on the same H100 moves by about 10% from run to run (issue 32: 599 to
668 TFLOP/s at 5000 x 3000 x 4000 fp16 on two days), so a ratio from two timings taken minutes
apart says as much about the clock and the neighbours as about the kernel. Here every round
times each variant once (course.bench.interleaved_rounds; CUDA events, course.bench.time_gpu with
a short budget), one after another at the same size, and the ratio is taken within the round:
drift lands on all three alike. The row's ms is the median over rounds; its ratio the median of
the rounds' ratios, with their min and max (the spread) beside it.

Why graphs. At the capstone's small shapes a call is 20-60 us of GPU work behind about as much Python,
so the host paces the loop and the events time Python (bench_timing). time_gpu(graph=True) then replays
the calls from a CUDA graph (the launchers launch on torch's current stream, so they capture), and the
TFLOP/s and every ratio use each round's GPU time: the graph's where the host paced the round, the
events' elsewhere (`gpu_ms_rounds` in the row; a capture that fails leaves None and its `graph_error`).
The capstone runs these GEMMs inside CUDA graphs, so the GPU's time is the one that matters there.

Sizes (M x N x K): 4096^3 and 8192^3; 5000 x 3000 x 4000 (no dimension a multiple of the tile);
the capstone's GEMMs at its batch of 8 x 1024 tokens: x @ W for qkv (N = 2304), the attention
projection (768), the MLP's fc (3072) and fc2 (K = 3072, N = 768), and the LM head (50304).
Each in bf16 and fp16. C in the inputs' type for every variant.

Tile widths. `wgmma_persistent_bn192`, `wgmma_pingpong_bn128`, ... are the same schedules built at the
other widths (launch_persistent's `width`; kernels/matmul_wgmma_persistent.cu's -DWP_BN), timed in the
same rounds. `--small` times both schedules at every width by default: its record is what the
schedule rule derives its table from (matmul_wgmma_schedule.py: a build other than cooperative at
256 only where it won every round by the margin); the full run times the 256-wide rungs unless
`--variants` names others.

Writes results/matmul_wgmma_persistent_week1.json and .md (a benchmark record as course.bench
writes them, rows with size, variant, ms, gpu_ms, tflops, speedup_vs_torch, plus the rounds' spread).

`BENCHMARKS` registers the same variants at the shapes tools/ncu_hopper.sh profiles (`ws_*` groups:
`python -m course ncu --launch matmul_wgmma_shapes_week1 ...` calls each once), so ncu and the
sanitizer reach the schedules through the week's one registry. `python -m course bench week1` times
it too, plainly (one variant after another); the ratios the notes cite come from the rounds above.
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import torch

from course import bench, bench_timing, runtime  # runtime first: chooses the GPU or simulation
from course.bench import Benchmark
from course.check import random_tensor
from week1_cuda_python.matmul_tensor_cores import launch_wgmma, wgmma_unsupported
from week1_cuda_python.matmul_wgmma_persistent import WIDTHS, launch_persistent, unsupported
from week1_cuda_python.matmul_wgmma_schedule import variant

PROG = "python -m week1_cuda_python.matmul_wgmma_persistent_bench"

NAME = "matmul_wgmma_persistent_week1"
NAME_SMALL = "matmul_wgmma_schedules_week1"  # --small: its own record (other shapes than the note's figures)
RESULTS = Path(__file__).parent / "results"
TOKENS = 8 * 1024
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (5000, 3000, 4000),
          (TOKENS, 2304, 768), (TOKENS, 768, 768), (TOKENS, 3072, 768), (TOKENS, 768, 3072), (TOKENS, 50304, 768)]
QUICK_SHAPES = [(4096, 4096, 4096), (5000, 3000, 4000), (TOKENS, 50304, 768)]
# The capstone's small-N, small-K GEMMs, where the schedules differ most (--small: these alone).
SMALL_SHAPES = [(TOKENS, 768, 768), (TOKENS, 2304, 768), (TOKENS, 3072, 768), (TOKENS, 768, 3072)]
DTYPES = (torch.bfloat16, torch.float16)
VARIANTS = {
    "torch": lambda a, b, out: torch.matmul(a, b, out=out),
    "wgmma_tma": lambda a, b, out: launch_wgmma(a, b, out, None),
    "wgmma_persistent": lambda a, b, out: launch_persistent(a, b, out, schedule="cooperative"),
    "wgmma_cluster": lambda a, b, out: launch_persistent(a, b, out, cluster=2),
    # each consumer warpgroup on its own 64 x 256 tiles, alternately (kernels/matmul_wgmma_pingpong.cu)
    "wgmma_pingpong": lambda a, b, out: launch_persistent(a, b, out, schedule="pingpong"),
} | {  # both schedules at the other tile widths (the -DWP_BN builds): wgmma_persistent_bn192, ...
    variant(base, width): (lambda a, b, out, schedule=schedule, width=width:
                           launch_persistent(a, b, out, schedule=schedule, width=width))
    for width in WIDTHS[1:] for base, schedule in (("wgmma_persistent", "cooperative"), ("wgmma_pingpong", "pingpong"))
}
# What a run times unless --variants says otherwise: the 256-wide rungs; with --small (the schedule rule's
# record) both schedules at every width.
FULL_VARIANTS = ("torch", "wgmma_tma", "wgmma_persistent", "wgmma_cluster", "wgmma_pingpong")
SMALL_VARIANTS = ("torch", *(variant(base, width) for width in WIDTHS
                              for base in ("wgmma_persistent", "wgmma_pingpong")))


def size_label(shape, dtype) -> str:
    m, n, k = shape
    return f"{m}x{n}x{k} {str(dtype).replace('torch.', '')}"


def _label(size) -> str:
    return size_label(*size)


def make_inputs(size):
    (m, n, k), dtype = size
    device = runtime.DEVICE
    # B scaled by 1/sqrt(K): C ~ N(0, 1), no fp16 overflow at any K.
    return (random_tensor((m, k), dtype, device), random_tensor((k, n), dtype, device, scale=k**-0.5),
            torch.empty((m, n), dtype=dtype, device=device))


# The shapes tools/ncu_hopper.sh profiles, bf16: 5000 x 3000 x 4000 (the open gap), 4096^3 (ping-pong's
# ordinary loss), fc2 (ping-pong's win), fc (even waves), the LM head and its backward dX (K = 50304).
NCU_SHAPES = [(5000, 3000, 4000), (4096, 4096, 4096), (TOKENS, 768, 3072), (TOKENS, 3072, 768),
              (TOKENS, 50304, 768), (TOKENS, 768, 50304)]
# The sm_90a rows only where they run (an H100/H200; in simulation listed, skipped as "needs a GPU"):
# a launch elsewhere raises, and course bench would stop at it. wgmma_tma is matmul_tc_week1's row.
_HOPPER_ROWS = (("wgmma_persistent", "wgmma_cluster", "wgmma_pingpong")
                if unsupported(runtime.capability()) is None and wgmma_unsupported(runtime.capability()) is None
                else ())

BENCHMARKS = [
    Benchmark(
        name="matmul_wgmma_shapes_week1",
        title="Persistent, cluster and ping-pong wgmma GEMMs vs cuBLAS at issue 32's odd and capstone shapes, bf16",
        sizes=[(shape, torch.bfloat16) for shape in NCU_SHAPES],
        sim_sizes=[((256, 256, 64), torch.bfloat16)],
        size_label=_label,
        make_inputs=make_inputs,
        variants={label: VARIANTS[label] for label in ("torch", *_HOPPER_ROWS)},
        gpu_only=_HOPPER_ROWS,
        bytes=lambda size: 2 * (size[0][0] * size[0][2] + size[0][2] * size[0][1] + size[0][0] * size[0][1]),
        flops=lambda size: 2 * size[0][0] * size[0][1] * size[0][2],
        notes="FLOPs = 2 M N K; bytes = 2 (M K + K N + M N); torch = torch.matmul (cuBLAS); "
              "wgmma_persistent = schedule='cooperative' (128 x 256 tiles), wgmma_pingpong = schedule='pingpong' "
              "(64 x 256), wgmma_cluster = 2-block clusters multicasting B; sm_90a rows on H100/H200 only. "
              "What tools/ncu_hopper.sh's ws_* groups launch; the interleaved ratios: "
              "matmul_wgmma_persistent_bench.py",
    ),
]


def gpu_fields(timed, label: str, flops: float) -> dict:
    """A row's GPU times: each round's (bench_timing.gpu_ms: the CUDA-graph replay's where the host paced the round,
    None where it could not be replayed), their median, and the TFLOP/s of that median (None where no round knows it).
    `gpu_ms_rounds` is what the schedule rule compares builds on, round by round (matmul_wgmma_schedule.derive)."""
    gpu = timed.median(label, gpu=True)
    return {"gpu_ms": gpu, "gpu_ms_rounds": timed.per_round(label, gpu=True),
            "tflops": flops / (gpu * 1e-3) / 1e12 if gpu else None}


def measure(shape, dtype, rounds: int, rep_ms: float, variants: dict, make=None,
            size_name: str | None = None) -> list[dict]:
    """The rows of one size: every variant timed once per round, in turn (graph-replayed where the host paced the
    loop: the capstone's small GEMMs are 20-60 us, as short as their Python); ratios within rounds, of GPU times.
    `make`: the inputs' maker (make_inputs; the backward bench's lays A out column-major); `size_name`: the rows'
    size (size_label's by default)."""
    m, n, k = shape
    flops = 2 * m * n * k
    sets = bench.input_sets(make or make_inputs, (shape, dtype))  # enough sets to overflow the L2
    timed = bench.interleaved_rounds(variants, rounds, lambda fn, sets=sets: bench.time_gpu(
        fn, sets, warmup_ms=5, rep_ms=rep_ms, graph=True))  # Timings: host-bound? and the GPU's time if so
    del sets
    torch.cuda.empty_cache()
    rows = []
    size = size_name or size_label(shape, dtype)
    for label, ms in timed.ms.items():
        # per round, of the GPU's times: > 1 is faster than cuBLAS; None where no round knows both GPU times
        ratio, low, high = timed.ratio_range(label, gpu=True) or (None, None, None)
        rows.append({"size": size, "variant": label, "ms": timed.median(label), "ms_min": min(ms),
                     "ms_rounds": ms, "reps": rounds, "flops": flops, **gpu_fields(timed, label, flops),
                     "speedup_vs_torch": ratio, "speedup_min": low,
                     "speedup_max": high, "spread_pct": timed.spread_pct(label), **timed.row_fields(label)})
    return rows


def ratio_cells(row: dict, key: str = "speedup_vs_torch", low: str = "speedup_min", high: str = "speedup_max") -> tuple:
    """(median, "min - max") of a row's ratio as table cells; "-" where no round knew both GPU times."""
    if row.get(key) is None:
        return "-", "-"
    return f"{row[key]:.3f}x", f"{row[low]:.3f}x - {row[high]:.3f}x"


def markdown(result: dict) -> str:
    head = ("| size | variant | ms (median) | GPU ms (graph) | TFLOP/s | vs cuBLAS (median of rounds) "
            "| min - max over rounds | ms spread |\n|---|---|---|---|---|---|---|---|\n")
    lines = [f"| {r['size']} | {r['variant']} | {bench_timing.mark(format(r['ms'], '.4f'), r)} "
             f"| {bench.fmt(r.get('graphed_ms'), '.4f')} | {bench.fmt(r.get('tflops'), '.0f')} "
             f"| {' | '.join(ratio_cells(r))} | {r['spread_pct']:.1f}% |" for r in result["rows"]]
    return (f"**{result['title']}**: {bench.measured_on(result)}.\n\n{head}" + "\n".join(lines) + f"\n\n{result['notes']}\n"
            + bench_timing.footnote(result["rows"]))


def run(shapes, rounds: int, rep_ms: float, dtypes=DTYPES, variants: dict = VARIANTS, name: str = NAME) -> dict:
    why = unsupported(runtime.capability()) or wgmma_unsupported(runtime.capability())
    if not runtime.on_gpu() or why:
        raise RuntimeError(why or "this benchmark times sm_90a kernels: it needs an H100/H200")
    copy_gbps = bench.copy_bandwidth_gbps()
    for fn in variants.values():  # compile both cubins before anything is timed
        fn(*make_inputs(((256, 256, 64), torch.bfloat16)))
    rows = []
    for shape in shapes:
        for dtype in dtypes:
            print(f"[bench] {size_label(shape, dtype)}", file=sys.stderr, flush=True)
            rows += measure(shape, dtype, rounds, rep_ms, variants)
    return {
        "benchmark": name,
        "title": "Persistent and cluster wgmma + TMA GEMMs vs the wgmma_tma rung vs cuBLAS (interleaved rounds)",
        "notes": (f"FLOPs = 2 M N K; {rounds} rounds, each timing {', '.join(variants)} once in turn "
                  f"(torch = torch.matmul, cuBLAS; CUDA events, median of ~{rep_ms:.0f} ms of launches); ms = the "
                  "events' median over rounds (* where the host paced a round: the host's time); GPU ms (graph) = "
                  "the host-paced rounds' calls replayed from a CUDA graph, the GPU's time alone; TFLOP/s and "
                  "vs cuBLAS use each round's GPU time (the graph replay's where the host paced the round, the "
                  "events' where the GPU did): vs cuBLAS = median over rounds of (cuBLAS GPU ms / variant GPU ms) "
                  "in the same round; C in the inputs' dtype"),
        "clock": "events",
        "headline": [v for v in ("wgmma_persistent", "wgmma_cluster", "wgmma_pingpong") if v in variants],
        "simulated": False,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": runtime.describe(),
        # The week's records all carry the copy ceiling measured in the same run (RESULTS.md quotes it).
        "ceilings": {"copy_gbps": copy_gbps},
        "rows": rows,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 sizes, 3 rounds (a smoke run)")
    parser.add_argument("--small", action="store_true", help="the capstone's small-N/K shapes (SMALL_SHAPES), then 4096^3 and 5000 x 3000 x 4000")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per size (default 7; 3 with --quick)")
    parser.add_argument("--rep-ms", type=float, default=40.0, help="timing budget per variant per round, ms")
    parser.add_argument("--out", default=str(RESULTS), help="folder for the results files")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=None,
                        help="what to time (torch, the baseline, always; default: the 256-wide rungs, with "
                             "--small both schedules at every width)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    wanted = args.variants or (SMALL_VARIANTS if args.small else FULL_VARIANTS)
    variants = {label: VARIANTS[label] for label in VARIANTS if label == "torch" or label in wanted}
    shapes = (SMALL_SHAPES + QUICK_SHAPES[:2]) if args.small else QUICK_SHAPES if args.quick else SHAPES
    result = run(shapes, rounds, args.rep_ms, variants=variants, name=NAME_SMALL if args.small else NAME)
    text = markdown(result)
    print(text)
    for path in bench.write_record(result, args.out, text):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
