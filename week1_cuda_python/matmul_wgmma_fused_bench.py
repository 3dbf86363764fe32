"""The fused wgmma GEMMs against what they replace: cuBLAS + the torch elementwise op, eager and
under torch.compile, at the capstone's shapes, in interleaved rounds.

    python -m week1_cuda_python.matmul_wgmma_fused_bench            (H100/H200; writes results/)
    python -m week1_cuda_python.matmul_wgmma_fused_bench --quick    (fewer rounds, one shape per epilogue)

Variants, per (epilogue, shape, dtype), each timed once per round in turn (the persistent rung's
bench says why rounds: cuBLAS moves ~10% from run to run):
  torch          x @ w.T, then the op (+ bias, + residual, silu(gate) * up) in eager torch: two kernels
  torch.compile  the same sequence compiled (Inductor runs the GEMM on cuBLAS, or its own Triton
                 template where it judges that faster, and fuses the elementwise op into one kernel)
  gemm_only      x @ w.T alone (cuBLAS): the floor the epilogue's cost is measured from
  wgmma_gemm     this kernel with no epilogue (x @ w.T alone): against gemm_only it is the GEMM's rate,
                 against wgmma_fused the epilogue's cost, so the two are never confused
  wgmma_fused    matmul_wgmma_fused.launch_fused: one kernel, the epilogue in registers
  wgmma_gemm_pp, wgmma_fused_pp   the same two with schedule="pingpong" (each consumer warpgroup on
                 its own 64 x 256 tiles, one's epilogue beside the other's wgmmas)
  ..._bn192, ..._bn128   those four at the other tile widths (launch_fused's `width`, the kernel's
                 -DWP_BN builds; `--widths` picks which; SwiGLU's fused variants at 128 only, its
                 halves need whole 64-column slabs): the schedule rule's table compares them all
                 with wgmma_gemm / wgmma_fused (matmul_wgmma_schedule.py)
Ratios are per round (torch ms / variant ms; > 1 is faster), the median and the min - max over rounds,
of the GPU's times: where the host paced a round (short calls), the calls replayed from a CUDA graph
(time_gpu(graph=True); the persistent rung's bench says why graphs), the events' elsewhere.

Shapes (M x N x K, M = 8 x 1024 tokens, capstone GPT: d = 768, SwiGLU hidden 2048, vocab 50304):
qkv (N = 2304) and LM head (50304) without epilogue; attention projection (768 x 768) and MLP down
(K = 2048) with the residual add; MLP up with SwiGLU (N = 2 x 2048); a bias at N = 3072 (GPT-2's fc).
Writes results/matmul_wgmma_fused_week1.{json,md}.
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import torch

from course import bench, bench_timing, runtime  # runtime first: chooses the GPU or simulation
from course.check import random_tensor
from week1_cuda_python.matmul_wgmma_fused import SWIGLU_WIDTHS, WIDTHS, launch_fused, reference, unsupported
from week1_cuda_python.matmul_wgmma_persistent_bench import gpu_fields
from week1_cuda_python.matmul_wgmma_schedule import variant

PROG = "python -m week1_cuda_python.matmul_wgmma_fused_bench"
NAME = "matmul_wgmma_fused_week1"
RESULTS = Path(__file__).parent / "results"
TOKENS = 8 * 1024
CASES = [("none", (TOKENS, 2304, 768)), ("residual", (TOKENS, 768, 768)), ("swiglu", (TOKENS, 4096, 768)),
         ("residual", (TOKENS, 768, 2048)), ("bias", (TOKENS, 3072, 768)), ("none", (TOKENS, 50304, 768))]
QUICK_CASES = [("residual", (TOKENS, 768, 768)), ("swiglu", (TOKENS, 4096, 768)), ("bias", (TOKENS, 3072, 768))]
DTYPES = (torch.bfloat16, torch.float16)


def _compiled():
    """One compiled reference sequence; Dynamo keeps a graph per (epilogue, shape, dtype)."""
    for knob in ("cache_size_limit", "recompile_limit"):  # the knob's name differs between torch versions
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    return torch.compile(reference, dynamic=False)


def variants(epilogue: str, widths=WIDTHS[1:]) -> dict:
    """The variants of one epilogue's cases; `widths`: the tile widths besides 256 to time."""
    compiled = _compiled()
    fns = {
        "torch": lambda x, w, extra, out: reference(x, w, epilogue, extra),
        "torch.compile": lambda x, w, extra, out: compiled(x, w, epilogue, extra),
        "gemm_only": lambda x, w, extra, out: torch.matmul(x, w.t()),
        "wgmma_gemm": lambda x, w, extra, out: launch_fused(x, w, "none", schedule="cooperative"),
        "wgmma_fused": lambda x, w, extra, out: launch_fused(x, w, epilogue, extra, out, schedule="cooperative"),
        # the ping-pong schedule (kernels/matmul_wgmma_pingpong.cu): the GEMM alone, and fused
        "wgmma_gemm_pp": lambda x, w, extra, out: launch_fused(x, w, "none", schedule="pingpong"),
        "wgmma_fused_pp": lambda x, w, extra, out: launch_fused(x, w, epilogue, extra, out, schedule="pingpong"),
    }
    for width in widths:  # the same four at the other widths (the fused ones where the epilogue runs at it)
        for schedule, suffix in (("cooperative", ""), ("pingpong", "_pp")):
            fns[variant(f"wgmma_gemm{suffix}", width)] = (
                lambda x, w, extra, out, s=schedule, wd=width: launch_fused(x, w, "none", schedule=s, width=wd))
            if epilogue != "swiglu" or width in SWIGLU_WIDTHS:
                fns[variant(f"wgmma_fused{suffix}", width)] = (
                    lambda x, w, extra, out, s=schedule, wd=width: launch_fused(x, w, epilogue, extra, out,
                                                                                schedule=s, width=wd))
    return fns


def label(epilogue, shape, dtype) -> str:
    m, n, k = shape
    return f"{epilogue} {m}x{n}x{k} {str(dtype).replace('torch.', '')}"


def make_inputs(size):
    epilogue, (m, n, k), dtype = size
    device = runtime.DEVICE
    extra = {"bias": (n,), "residual": (m, n)}.get(epilogue)
    return (random_tensor((m, k), dtype, device), random_tensor((n, k), dtype, device, scale=k**-0.5),
            random_tensor(extra, dtype, device) if extra else None,
            torch.empty((m, n // 2 if epilogue == "swiglu" else n), dtype=dtype, device=device))


def measure(epilogue, shape, dtype, rounds: int, rep_ms: float, fns: dict) -> list[dict]:
    m, n, k = shape
    flops = 2 * m * n * k
    sets = bench.input_sets(make_inputs, (epilogue, shape, dtype))
    timed = bench.interleaved_rounds(fns, rounds, lambda fn, sets=sets: bench.time_gpu(
        fn, sets, warmup_ms=5, rep_ms=rep_ms, graph=True))  # Timings: host-bound? and the GPU's time if so
    del sets
    torch.cuda.empty_cache()
    rows = []
    for name, ms in timed.ms.items():
        # of the GPU's times, round by round; None where no round knows both
        vs_torch = timed.ratio_range(name, "torch", gpu=True) or (None, None, None)
        vs_compiled = timed.ratio_range(name, "torch.compile", gpu=True) or (None, None, None)
        rows.append({"size": label(epilogue, shape, dtype), "epilogue": epilogue, "variant": name,
                     "ms": timed.median(name), "ms_min": min(ms), "ms_rounds": ms, "reps": rounds, "flops": flops,
                     **gpu_fields(timed, name, flops),
                     "speedup_vs_torch": vs_torch[0], "speedup_min": vs_torch[1],
                     "speedup_max": vs_torch[2], "speedup_vs_compile": vs_compiled[0],
                     "vs_compile_min": vs_compiled[1], "vs_compile_max": vs_compiled[2],
                     "spread_pct": timed.spread_pct(name), **timed.row_fields(name)})
    return rows


def markdown(result: dict) -> str:
    head = ("| size | variant | ms (median) | GPU ms (graph) | TFLOP/s | vs torch eager (min - max) "
            "| vs torch.compile (min - max) | ms spread |\n|---|---|---|---|---|---|---|---|\n")

    def ratio(r, key, low, high):  # "-" where no round knew both GPU times
        return "-" if r.get(key) is None else f"{r[key]:.3f}x ({r[low]:.3f} - {r[high]:.3f})"
    lines = [f"| {r['size']} | {r['variant']} | {bench_timing.mark(format(r['ms'], '.4f'), r)} "
             f"| {bench.fmt(r.get('graphed_ms'), '.4f')} | {bench.fmt(r.get('tflops'), '.0f')} "
             f"| {ratio(r, 'speedup_vs_torch', 'speedup_min', 'speedup_max')} "
             f"| {ratio(r, 'speedup_vs_compile', 'vs_compile_min', 'vs_compile_max')} "
             f"| {r['spread_pct']:.1f}% |" for r in result["rows"]]
    return (f"**{result['title']}**: {bench.measured_on(result)}.\n\n{head}" + "\n".join(lines) + f"\n\n{result['notes']}\n"
            + bench_timing.footnote(result["rows"]))


def run(cases, rounds: int, rep_ms: float, dtypes=DTYPES, widths=WIDTHS[1:]) -> dict:
    why = unsupported(runtime.capability())
    if not runtime.on_gpu() or why:
        raise RuntimeError(why or "this benchmark times sm_90a kernels: it needs an H100/H200")
    copy_gbps = bench.copy_bandwidth_gbps()
    rows = []
    for epilogue in dict.fromkeys(e for e, _ in cases):
        fns = variants(epilogue, widths)
        for fn in fns.values():  # build the cubin and compile the graphs before anything is timed
            fn(*make_inputs((epilogue, (256, 512, 64), torch.bfloat16)))
        for e, shape in cases:
            if e != epilogue:
                continue
            for dtype in dtypes:
                print(f"[bench] {label(epilogue, shape, dtype)}", file=sys.stderr, flush=True)
                rows += measure(epilogue, shape, dtype, rounds, rep_ms, fns)
    return {
        "benchmark": NAME,
        "title": "Fused wgmma GEMM epilogues vs cuBLAS + torch op, eager and torch.compile (interleaved rounds)",
        "notes": (f"FLOPs = 2 M N K of the GEMM; {rounds} rounds, each timing torch (x @ w.T then the op), "
                  "torch.compile of that sequence, gemm_only (x @ w.T alone), wgmma_gemm (this kernel, no "
                  f"epilogue), wgmma_fused, and both with the ping-pong schedule (_pp), each also at widths "
                  f"{', '.join(map(str, widths)) or 'none'} besides 256 (_bn<width>), once in turn (CUDA "
                  f"events, median of ~{rep_ms:.0f} ms of launches); ms = the events' median over rounds (* where the "
                  "host paced a round: the host's time); GPU ms (graph) = the host-paced rounds' calls replayed from "
                  "a CUDA graph, the GPU's time alone; TFLOP/s and ratios use each round's GPU time (the graph "
                  "replay's where the host paced the round, the events' where the GPU did): ratios = median over "
                  "rounds of (baseline GPU ms / variant GPU ms) in the same round, min - max beside it"),
        "clock": "events",
        "headline": ["wgmma_fused", "wgmma_fused_pp"],
        "simulated": False,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": runtime.describe(),
        "ceilings": {"copy_gbps": copy_gbps},
        "rows": rows,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one shape per epilogue, 3 rounds, bf16 only")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per size (default 7; 3 with --quick)")
    parser.add_argument("--rep-ms", type=float, default=40.0, help="timing budget per variant per round, ms")
    parser.add_argument("--out", default=str(RESULTS), help="folder for the results files")
    parser.add_argument("--widths", nargs="*", type=int, choices=list(WIDTHS[1:]), default=list(WIDTHS[1:]),
                        help="tile widths to time besides 256 (default: all; none: `--widths` alone)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 7)
    result = run(QUICK_CASES if args.quick else CASES, rounds, args.rep_ms,
                 dtypes=(torch.bfloat16,) if args.quick else DTYPES, widths=tuple(args.widths))
    text = markdown(result)
    print(text)
    for path in bench.write_record(result, args.out, text):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
