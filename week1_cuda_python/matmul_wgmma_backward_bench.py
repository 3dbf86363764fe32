"""The capstone's backward GEMMs on the persistent wgmma rung against cuBLAS, in interleaved rounds.

    python -m week1_cuda_python.matmul_wgmma_backward_bench            (H100/H200; writes results/)
    python -m week1_cuda_python.matmul_wgmma_backward_bench --quick    (3 rounds, one Linear)

Each of the capstone's Linears (y = x W^T, x: tokens x in, W: out x in) costs three GEMMs a training step: the
forward (matmul_wgmma_persistent_bench.py times it) and two in the backward:

* dX = dY W (tokens x in, over the out features): A = dY and B = W, both row-major as the model has them: the
  persistent rung as it is (its B is K x N row-major). Its shapes are the forward's with N and K swapped.
* dW = dY^T X (out x in, over the 8192 tokens): A = dY^T, column-major: the `wgmma_persistent_a_col` entry
  (kernels/matmul_wgmma_persistent.cu, A_KM), which reads dY as it is stored. C is small and K long: 768 x 768 is
  18 tiles of 128 x 256 for 132 SMs, and matmul_wgmma_waves.py's ceilings (the `*_dw` shapes) say how much of the
  GPU a grid of output tiles can use at all; the narrower builds (bn192, bn128) are timed beside it, and the
  split-K rung (matmul_wgmma_split_k.py: K cut into ranges, fp32 partial sums added afterwards), at the number of
  ranges its plan picks, at both widths.

cuBLAS is torch.matmul of the same views (`dy.t()` is a transposed operand to it, no copy). The rows, rounds,
CUDA-graph replays of host-paced rounds and ratios are matmul_wgmma_persistent_bench's (its `measure`).

Writes results/matmul_wgmma_backward_week1.json and .md.
"""
from __future__ import annotations

import argparse
import datetime
import sys

import torch

from course import bench, runtime  # runtime first: chooses the GPU or simulation
from course.check import random_tensor
from week1_cuda_python.matmul_wgmma_persistent import WIDTHS, launch_persistent, schedule_tiles, unsupported
from week1_cuda_python.matmul_wgmma_persistent_bench import RESULTS, TOKENS, markdown, measure
from week1_cuda_python.matmul_wgmma_schedule import variant
from week1_cuda_python.matmul_wgmma_split_k import launch_split_k, plan_build, plan_splits

PROG = "python -m week1_cuda_python.matmul_wgmma_backward_bench"
NAME = "matmul_wgmma_backward_week1"
# The capstone's Linears: (out features, in features) of W (capstone/model.py: d = 768, 4d MLP, vocab 50304).
LINEARS = {"qkv": (2304, 768), "proj": (768, 768), "fc": (3072, 768), "fc2": (768, 3072), "lm_head": (50304, 768)}
KINDS = ("dx", "dw")
DTYPES = (torch.bfloat16,)  # what the capstone trains in


def gemm_shape(linear: str, kind: str) -> tuple[int, int, int]:
    """(M, N, K) of one backward GEMM: dX is tokens x in over out; dW is out x in over the tokens."""
    if linear not in LINEARS or kind not in KINDS:
        raise ValueError(f"linear must be one of {sorted(LINEARS)} and kind one of {KINDS}, got {linear!r}, {kind!r}")
    out_features, in_features = LINEARS[linear]
    return (TOKENS, in_features, out_features) if kind == "dx" else (out_features, in_features, TOKENS)


def make_inputs(size):
    """(A, B, C) as the backward has them. dX: dY (tokens x out) and W (out x in), both row-major. dW: dY^T as the
    transposed view of dY (tokens x out) and X (tokens x in). B scaled by 1/sqrt(K): C ~ N(0, 1)."""
    (m, n, k, kind), dtype = size
    device = runtime.DEVICE
    a = random_tensor((k, m), dtype, device).t() if kind == "dw" else random_tensor((m, k), dtype, device)
    return a, random_tensor((k, n), dtype, device, scale=k**-0.5), torch.empty((m, n), dtype=dtype, device=device)


def inputs_for(kind: str):
    """make_inputs for one kind, taking measure's ((M, N, K), dtype)."""
    return lambda size: make_inputs(((*size[0], kind), size[1]))


def variants(kind: str) -> dict:
    """cuBLAS and the rung's builds: the measured rule's for dX (its shapes are forward shapes to it), and the
    column-major-A entry at every width for dW (the rule measured row-major A only; ping-pong takes no a_col);
    then split-K at its plan's number of ranges, 256 and 128 wide (one range: the plain kernel again)."""
    timed = {"torch": lambda a, b, out: torch.matmul(a, b, out=out)}
    if kind == "dx":
        timed["wgmma_rule"] = lambda a, b, out: launch_persistent(a, b, out)
        timed["wgmma_persistent"] = lambda a, b, out: launch_persistent(a, b, out, schedule="cooperative")
        timed["wgmma_pingpong"] = lambda a, b, out: launch_persistent(a, b, out, schedule="pingpong")
    else:
        for width in WIDTHS:
            timed[variant("wgmma_persistent", width)] = (
                lambda a, b, out, width=width: launch_persistent(a, b, out, width=width))
    for width in (256, 128):
        timed[variant("wgmma_split_k", width)] = lambda a, b, out, width=width: launch_split_k(a, b, out, width=width)
    timed["wgmma_split_k_planned"] = lambda a, b, out: launch_split_k(a, b, out)  # plan_build: width and ranges
    return timed


def split_count(shape, label: str) -> int:
    """The ranges of K a variant runs `shape` in: its plan's for the split-K rows, 1 for the others."""
    if not label.startswith("wgmma_split_k"):
        return 1
    if label == "wgmma_split_k_planned":
        return plan_build(*shape, runtime.sm_count())[1].splits
    width = 128 if label.endswith("bn128") else 256
    return plan_splits(*shape, runtime.sm_count(), schedule_tiles("cooperative", width)).splits


def planned_width(shape, label: str) -> int | None:
    """The tile width plan_build chose for the planned split-K row (None for the others: their names say it)."""
    return plan_build(*shape, runtime.sm_count())[0] if label == "wgmma_split_k_planned" else None


def run(linears, rounds: int, rep_ms: float) -> dict:
    why = unsupported(runtime.capability())
    if not runtime.on_gpu() or why:
        raise RuntimeError(why or "this benchmark times sm_90a kernels: it needs an H100/H200")
    copy_gbps = bench.copy_bandwidth_gbps()
    rows = []
    for linear in linears:
        for kind in KINDS:
            shape = gemm_shape(linear, kind)
            timed = variants(kind)
            for fn in timed.values():  # build every cubin before anything is timed
                fn(*make_inputs(((256, 256, 64, kind), torch.bfloat16)))
            for width in WIDTHS:  # the planned row may run any width's split-K build
                launch_split_k(*make_inputs(((256, 256, 256, kind), torch.bfloat16)), splits=2, width=width)
            for dtype in DTYPES:
                name = f"{linear} {kind} {'x'.join(map(str, shape))} {str(dtype)[6:]}"
                print(f"[bench] {name}", file=sys.stderr, flush=True)
                rows += [{**row, "linear": linear, "kind": kind, "splits": split_count(shape, row["variant"]),
                          **({"width": w} if (w := planned_width(shape, row["variant"])) else {})}
                         for row in measure(shape, dtype, rounds, rep_ms, timed, make=inputs_for(kind), size_name=name)]
    return {
        "benchmark": NAME,
        "title": "The capstone's backward GEMMs (dX = dY W, dW = dY^T X) on the persistent wgmma rung vs cuBLAS "
                 "(interleaved rounds)",
        "notes": (f"FLOPs = 2 M N K; {rounds} rounds, each timing every variant once in turn (torch = torch.matmul "
                  "of the same views, cuBLAS); TFLOP/s and vs cuBLAS from each round's GPU time (CUDA-graph "
                  "replays where the host paced the round), vs cuBLAS = median over rounds; dX: wgmma_rule = the "
                  "schedule rule's build; dW: A = dY^T column-major, the wgmma_persistent_a_col entry per width; "
                  "wgmma_split_k: matmul_wgmma_split_k at plan_splits' ranges (in the row's `splits`); "
                  "wgmma_split_k_planned: at plan_build's width and ranges (the row's `width` and `splits`)"),
        "clock": "events",
        "headline": ["wgmma_rule", "wgmma_persistent", "wgmma_split_k"],
        "simulated": False,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": runtime.describe(),
        "ceilings": {"copy_gbps": copy_gbps},
        "rows": rows,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the attention projection only, 3 rounds")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per GEMM (default 7; 3 with --quick)")
    parser.add_argument("--rep-ms", type=float, default=40.0, help="timing budget per variant per round, ms")
    parser.add_argument("--linears", nargs="+", choices=list(LINEARS), default=None, help="which Linears (default all)")
    parser.add_argument("--out", default=str(RESULTS), help="folder for the results files")
    args = parser.parse_args(argv)
    linears = args.linears or (["proj"] if args.quick else list(LINEARS))
    result = run(linears, args.rounds or (3 if args.quick else 7), args.rep_ms)
    text = markdown(result)
    print(text)
    for path in bench.write_record(result, args.out, text):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
