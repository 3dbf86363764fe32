"""The fused linears timed against what they replace, at the capstone's GEMM shapes.

Each fusion against (a) the unfused torch sequence: cuBLAS's GEMM (F.linear) and the element-wise op
after it (or F.rms_norm + the cast before it), in eager ops; (b) torch.compile of that sequence
(Inductor fuses the element-wise work into one kernel beside cuBLAS's GEMM, or into a Triton GEMM's
epilogue where its autotuner picks one); and (c) cuBLAS's GEMM alone (`gemm_only`): the floor a fused
op can reach only if its GEMM runs at cuBLAS's rate. Shapes: 8 x 1024 tokens of the 124M capstone
(d = 768, SwiGLU hidden 2048): QKV 768 -> 2304 with the norm, the MLP's up 768 -> 2 x 2048 with the
norm and SwiGLU, attention's proj 768 -> 768 and the MLP's down 2048 -> 768 with the residual, and
the LM head's 768 -> 50304 GEMM alone (`plain`: the kernel's bare GEMM against cuBLAS).

Two ways to run it:
* `python -m course bench week4` finds `BENCHMARKS` (course/bench.py's table per fusion, forward and
  forward + backward through autograd); results/fused_linear_*_week4.json|md.
* `python -m week4_triton_dl.fused_linear.bench --sweep` (GPU) times every tile that fits at these shapes
  and writes the fastest per shape to results/dispatch_fused_linear.json, the table launch.py reads.
* `python -m week4_triton_dl.fused_linear.bench --rounds 5` times every variant of every fusion in
  interleaved rounds (round r times each variant once, in turn, on the same inputs), so a clock or
  thermal drift lands on all of them alike, and reports per variant the median over rounds and the
  spread (min and max) of its ratio to the unfused torch sequence: results/fused_linear_rounds.json|md
  (`--table` rewrites the .md from the .json).

Inputs are the capstone's under bf16 autocast: the residual stream (the norm's x, the residual) in
fp32, weights and activations in bf16 (fp32 and tiny in simulation, where times measure Python).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from course import bench, bench_timing, runtime
from course.bench import Benchmark, bench_dtype, compile_on_first_call
from course.check import random_tensor
from course.gpu import DEVICE
from week4_triton_dl.fused_linear import launch, launch_tma, ops as fl

TOKENS = 8192
EPS = 1e-5
RESULTS = Path(__file__).resolve().parent.parent / "results"


def _low():
    return bench_dtype()


def _w(n, k, low, grad):
    return random_tensor((n, k), low, DEVICE, scale=k ** -0.5).requires_grad_(grad)


def _norm_inputs(size, grad=False, swiglu=False):
    M, K, N = size
    low = _low()
    x = random_tensor((M, K), torch.float32, DEVICE).requires_grad_(grad)
    return x, random_tensor(K, torch.float32, DEVICE).requires_grad_(grad), _w(2 * N if swiglu else N, K, low, grad)


def _residual_inputs(size, grad=False):
    M, K, N = size
    low = _low()
    return (random_tensor((M, K), low, DEVICE).requires_grad_(grad), _w(N, K, low, grad),
            random_tensor((M, N), torch.float32, DEVICE).requires_grad_(grad))


def _swiglu_inputs(size, grad=False):
    M, K, N = size
    low = _low()
    return random_tensor((M, K), low, DEVICE).requires_grad_(grad), _w(2 * N, K, low, grad)


def _plain_inputs(size, grad=False):
    M, K, N = size
    low = _low()
    return random_tensor((M, K), low, DEVICE).requires_grad_(grad), _w(N, K, low, grad)


def _torch_norm_linear(x, n, w):  # what autocast runs: rms_norm in fp32, cast, cuBLAS
    return F.linear(F.rms_norm(x, (x.shape[-1],), n, EPS).to(w.dtype), w)


def _torch_norm_swiglu(x, n, w):
    g, u = _torch_norm_linear(x, n, w).chunk(2, dim=-1)
    return F.silu(g) * u


def _fused_norm_linear(x, n, w):
    return fl.norm_linear(x, n, w, EPS)


def _fused_norm_swiglu(x, n, w):
    return fl.norm_linear(x, n, w, EPS, swiglu=True)


def _torch_residual(x, w, r):
    return r + F.linear(x, w)


def _gemm_residual(x, w, r):
    return F.linear(x, w)


def _gemm_swiglu(x, w):
    return F.linear(x, w)


def _fused_plain(x, w):  # the launch alone, as the public entries call it when nothing needs a gradient
    return launch.fused_linear(x, w).out


def _graphed(fn):
    """`fn` replayed from a CUDA graph on the GPU (course.bench.graphed): the GPU's time alone, without
    the host's. At these shapes one call's GPU work (tens of microseconds) is shorter than its Python
    (the custom op's dispatch, checks, the launch), and a per-call event timing then measures the host:
    today's first run timed the residual at K = 768 and K = 2048 alike. Off the GPU: `fn` itself."""
    replay = bench.graphed(fn)
    return lambda *args: replay(*args) if runtime.on_gpu() else fn(*args)


GRAPHED = ("torch_graphed", "triton_graphed")  # GPU-only variants, forward only (no autograd in a replay)


FUSIONS = {
    # name: (sizes (M, K, N of C), make_inputs(size, grad), {variant: fn}). The norm's gemm_only would need
    # A in bf16, which is what the unfused sequence writes: swiglu's and residual's rows give that GEMM.
    "norm": ([(TOKENS, 768, 2304)], _norm_inputs,
             {"torch": _torch_norm_linear, "torch_compile": compile_on_first_call(_torch_norm_linear, dynamic=False),
              "triton": _fused_norm_linear, "torch_graphed": _graphed(_torch_norm_linear),
              "triton_graphed": _graphed(_fused_norm_linear)}),
    "norm_swiglu": ([(TOKENS, 768, 2048)], lambda s, grad=False: _norm_inputs(s, grad, swiglu=True),
                    {"torch": _torch_norm_swiglu, "torch_compile": compile_on_first_call(_torch_norm_swiglu, dynamic=False),
                     "triton": _fused_norm_swiglu, "torch_graphed": _graphed(_torch_norm_swiglu),
                     "triton_graphed": _graphed(_fused_norm_swiglu)}),
    "swiglu": ([(TOKENS, 768, 2048)], _swiglu_inputs,
               {"torch": fl.linear_swiglu_torch, "torch_compile": compile_on_first_call(fl.linear_swiglu_torch, dynamic=False),
                "gemm_only": _gemm_swiglu, "triton": fl.linear_swiglu, "torch_graphed": _graphed(fl.linear_swiglu_torch),
                "triton_graphed": _graphed(fl.linear_swiglu)}),
    "residual": ([(TOKENS, 768, 768), (TOKENS, 2048, 768)], _residual_inputs,
                 {"torch": _torch_residual, "torch_compile": compile_on_first_call(_torch_residual, dynamic=False),
                  "gemm_only": _gemm_residual, "triton": fl.linear_residual, "torch_graphed": _graphed(_torch_residual),
                  "triton_graphed": _graphed(fl.linear_residual)}),
    "plain": ([(TOKENS, 768, 2304), (TOKENS, 768, 50304)], _plain_inputs,
              {"torch": F.linear, "triton": _fused_plain, "torch_graphed": _graphed(F.linear),
               "triton_graphed": _graphed(_fused_plain)}),
}


def _flops(name):
    # 2 M N K per GEMM; SwiGLU's GEMM is 2 N wide (N = C's columns, F).
    return lambda s: 2 * s[0] * s[1] * s[2] * (2 if name in ("swiglu", "norm_swiglu") else 1)


def _train(fn):
    """forward, then torch.autograd.grad of every input that requires grad (the model's call)."""
    def run(*inputs):
        out = fn(*inputs)
        return torch.autograd.grad(out, [t for t in inputs if t.requires_grad], torch.ones_like(out))
    return run


def _benchmarks():
    found = []
    for name, (sizes, make, variants) in FUSIONS.items():
        sim = [(8, 32, 16)]
        label = lambda s: f"{s[0]}x{s[1]}x{s[2]}"  # noqa: E731
        common = dict(sizes=sizes, sim_sizes=sim, size_label=label, flops=_flops(name), bytes=lambda s: 0,
                      gpu_only=("torch_compile", *GRAPHED), headline=("triton",), compute_dtype=torch.bfloat16)
        found.append(Benchmark(name=f"fused_linear_{name}_week4",
                               title=f"Fused linear, {name}: forward, tokens x K -> N (bf16 GEMM; fp32 in simulation)",
                               make_inputs=make, variants=variants,
                               notes="torch = cuBLAS + the element-wise op(s) in eager; torch_compile = that "
                                     "sequence compiled; gemm_only = cuBLAS's GEMM alone; triton = the fused op; "
                                     "*_graphed = replayed from a CUDA graph (GPU time, no host)",
                               **common))
        if name == "plain":
            continue
        found.append(Benchmark(name=f"fused_linear_{name}_train_week4",
                               title=f"Fused linear, {name}: forward + backward through autograd",
                               make_inputs=lambda s, make=make: make(s, True),
                               variants={k: _train(v) for k, v in variants.items() if k != "gemm_only" and k not in GRAPHED},
                               notes="forward, then torch.autograd.grad of every input (ones as the upstream gradient)",
                               **common))
    return found


BENCHMARKS = _benchmarks()


# ------------------------------------------------------------------------------ interleaved rounds
def rounds(n_rounds: int, only: tuple = ()) -> dict:
    """Every variant of every fusion timed in `n_rounds` interleaved rounds; ratios to torch per round."""
    rows = []
    for name, (sizes, make, variants) in FUSIONS.items():
        if only and name not in only:
            continue
        for size in runtime.pick(gpu=sizes, sim=[(8, 32, 16)]):
            sets = bench.input_sets(make, size)
            timed = bench.interleaved_rounds(
                {label: fn for label, fn in variants.items() if runtime.on_gpu() or label != "torch_compile"},
                n_rounds, lambda fn: bench.time_call(fn, sets))  # the Timing: whether a round was host-bound
            flops = _flops(name)(size)
            for label, times in timed.ms.items():
                ratio, low, high = timed.ratio_range(label, "torch")
                rows.append({"size": f"{name} {size[0]}x{size[1]}x{size[2]}", "variant": label,
                             "ms": timed.median(label), "ms_min": min(times), "ms_max": max(times),
                             "tflops": flops / timed.median(label) / 1e9,
                             "speedup_vs_torch": ratio,
                             "speedup_min": low, "speedup_max": high, "rounds": n_rounds,
                             **timed.row_fields(label)})
            del sets
    return {"benchmark": "fused_linear_rounds", "title": "Fused linears against cuBLAS + torch, interleaved rounds",
            "notes": f"median over {n_rounds} rounds (each round: every variant's median of course.bench.time_call, "
                     "in turn, same inputs); speedup = torch's ms / this ms in the same round, median [min, max]",
            "clock": "events", "headline": ["triton"], "simulated": not runtime.on_gpu(),
            "date": bench.utc_now(),
            "machine": runtime.describe(), "ceilings": {}, "rows": rows}


def rounds_table(record: dict) -> str:
    """The rounds' record as a table. "GPU ms (graph)": time_call's CUDA-graph replay of the same calls,
    measured in the rounds that the host paced (the median over those); "-" where none was."""
    lines = ["| fusion, M x K x N | variant | ms (median) | GPU ms (graph) | ms [min, max] | TFLOP/s | vs torch [min, max] |",
             "|---|---|---|---|---|---|---|"]
    for r in record["rows"]:
        ms = bench_timing.mark(f"{r['ms']:.4f}", r)  # * host-bound: the footnote says what it means
        lines.append(f"| {r['size']} | {r['variant']} | {ms} | {bench.fmt(r.get('graphed_ms'), '.4f')} | "
                     f"[{r['ms_min']:.4f}, {r['ms_max']:.4f}] | {r['tflops']:.0f} | "
                     f"{r['speedup_vs_torch']:.2f}x [{r['speedup_min']:.2f}, {r['speedup_max']:.2f}] |")
    unchecked = not any("host_bound" in r for r in record["rows"])  # a record made before time_gpu asked
    return (f"**{record['title']}**: {bench.measured_on(record)}.\n\n" + "\n".join(lines) + "\n"
            + bench_timing.footnote(record["rows"])
            + ("\nGPU ms (graph): not measured in this record (made before time_gpu checked whether the host "
               "paced its loop; host-bound unknown).\n" if unchecked else ""))


# ------------------------------------------------------------------------------------ the tile sweep
SWEEP_KINDS = {"norm": "norm", "norm_swiglu": "norm+swiglu", "swiglu": "swiglu", "residual": "residual",
               "plain": "plain"}  # FUSIONS' names -> launch.epilogue_name's


def _launch_args(name, inputs):
    """(x, weight, keyword arguments of launch.fused_linear) of one fusion's bench inputs."""
    if name in ("norm", "norm_swiglu"):
        x, n, w = inputs
        return x, w, dict(norm_weight=n, eps=EPS, swiglu=name == "norm_swiglu")
    if name == "residual":
        x, w, r = inputs
        return x, w, dict(residual=r)
    x, w = inputs
    return x, w, dict(swiglu=name == "swiglu")


def sweep() -> Path:
    """Time every tile the launcher may take (launch.candidates: SINGLE_CONFIGS, the dual GEMM's for
    SwiGLU; and the TMA rung's, launch_tma.candidates, where it applies) at each fusion's shapes and write the fastest as results/dispatch_fused_linear.json
    (course/dispatch.py; applies on this GPU only). Each tile is timed replayed from a CUDA graph: a
    per-call timing of these tens-of-microseconds launches measures the host's Python, the same for
    every tile, and its winner is noise. In simulation: the one simulated tile, at a tiny size."""
    from week3_triton_kernels.matmul_launch import SIM_CONFIG
    rows = []
    for name, (sizes, make, _) in FUSIONS.items():
        for size in runtime.pick(gpu=sizes, sim=[(8, 32, 16)]):
            x, w, kw = _launch_args(name, make(size))
            fits = launch.candidates(launch.DUAL_CONFIGS if kw.get("swiglu") else launch.SINGLE_CONFIGS,
                                     x.element_size(), w.element_size(), 2 if kw.get("swiglu") else 1,
                                     residual="residual" in kw)
            as_tile = lambda c: dict(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages)  # noqa: E731
            tiles = [("tiled", t) for t in runtime.pick(gpu=[as_tile(c) for c in fits], sim=[dict(SIM_CONFIG)])]
            if launch_tma.why_not(x, w, kw.get("norm_weight"), kw.get("swiglu", False)) is None:
                out_size = kw["residual"].element_size() if "residual" in kw else w.element_size()
                tma = launch_tma.candidates(w.element_size(), out_size,
                                            launch.RESIDUAL_ACC_PER_THREAD if "residual" in kw else None)
                tiles += [("tma", t) for t in runtime.pick(gpu=[as_tile(c) for c in tma], sim=[dict(launch_tma.SIM_TILE)])]
            timed = [(bench.timing_fields(bench.time_call(
                _graphed(lambda r=r, t=t: launch.fused_linear(x, w, tile=dict(t), rung=r, **kw)), [()])), r, t)
                for r, t in tiles]
            fields, rung, best = min(timed, key=lambda row: row[0]["ms"])
            M, K, N = size
            rows.append({"key": [M, N, K, str(w.dtype).replace("torch.", ""), SWEEP_KINDS[name]], "rung": rung,
                         "tile": best, "measured": {**fields, "tiles_timed": len(timed),
                                                    "tflops": _flops(name)(size) / fields["ms"] / 1e9}})
            for r in dict.fromkeys(r for _, r, _ in timed):  # each rung's best, for the log
                r_fields, _, r_tile = min((row for row in timed if row[1] == r), key=lambda row: row[0]["ms"])
                print(f"{name} {M}x{K}x{N} {r}: {bench.ms_cell(r_fields)} ms with {r_tile}", file=sys.stderr)
    return launch.TABLE.save(rows, "python -m week4_triton_dl.fused_linear.bench --sweep")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--only", nargs="*", default=(), choices=list(FUSIONS), help="these fusions only")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default: week 4's results/)")
    parser.add_argument("--sweep", action="store_true",
                        help="time the candidate tiles and write results/dispatch_fused_linear.json instead")
    parser.add_argument("--table", action="store_true",
                        help="rewrite fused_linear_rounds.md in --out from its .json (times nothing)")
    args = parser.parse_args(argv)
    if args.table:
        path = args.out / "fused_linear_rounds.json"
        path.with_suffix(".md").write_text(rounds_table(json.loads(path.read_text())))
        print(f"wrote {path.with_suffix('.md')}", file=sys.stderr)
        return 0
    if args.sweep:
        print(f"wrote {sweep()}", file=sys.stderr)
        return 0
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    record = rounds(args.rounds, tuple(args.only))
    table = rounds_table(record)
    for path in bench.write_record(record, args.out, table):
        print(f"wrote {path}", file=sys.stderr)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
