"""NF4's benchmarks, crossover sweep and command line (the kernels: nf4.py; the format: nf4_format.py).

`BENCHMARKS` (found by `python -m course bench week5`): the fused NF4 matmul and the dequantize
kernel against dequantize + cuBLAS at decode and prefill shapes. `python -m
week5_integration.nf4_bench --sweep` (GPU) times the fused kernel, dequantize + cuBLAS and the bf16
matmul over M, the crossover that sets `FUSED_MAX_M`.
"""
from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F

from course import bench, runtime
from course.bench import Benchmark
from course.check import random_tensor
from course.sweep import sweep_main

from week5_integration.nf4 import (FUSED_MAX_M, NF4_DEQUANTIZE_CODE, NF4_MATMUL_CODE, dequantize_matmul, nf4_dequantize,
                                   nf4_matmul)
from week5_integration.nf4_format import BLOCK, DQ_BLOCK, nf4_dequantize_torch, nf4_quantize


# ---------------------------------------------------------------------------------- benchmarks
# Decode-sized (16 rows: weight-bandwidth-bound) and training-sized (compute-bound) products.
MATMUL_SIZES = [(16, 4096, 4096), (16, 11008, 4096), (4096, 2304, 768), (4096, 4096, 4096)]


def _matmul_inputs(size):
    m, n, k = size
    dev = runtime.DEVICE
    dtype = torch.bfloat16 if runtime.on_gpu() else torch.float32
    w = random_tensor((n, k), torch.float32, dev, scale=k ** -0.5)
    return random_tensor((m, k), dtype, dev), w.to(dtype), nf4_quantize(w)


def _nf4_bytes(n, k):
    return n * k // 2 + -(-n * k // BLOCK) + 4 * -(-n * k // (BLOCK * DQ_BLOCK))


def _dequant_inputs(size):
    n, k = size
    w = random_tensor((n, k), torch.float32, runtime.DEVICE, scale=k ** -0.5)
    return (nf4_quantize(w),)


def _out_dtype():
    return torch.bfloat16 if runtime.on_gpu() else torch.float32


BENCHMARKS = [
    Benchmark(
        name="nf4_matmul_week5",
        title="y = x dequant(W_nf4)^T, bf16: fused dequant-matmul vs dequantize then cuBLAS vs bf16 cuBLAS",
        sizes=MATMUL_SIZES,
        sim_sizes=[(5, 40, 64), (17, 33, 70)],
        size_label=lambda s: f"M={s[0]} N={s[1]} K={s[2]}",
        make_inputs=_matmul_inputs,
        variants={
            "torch": lambda x, w16, q: F.linear(x, w16),
            "torch_dequant": lambda x, w16, q: dequantize_matmul(x, q, nf4_dequantize_torch),
            "triton_dequant": lambda x, w16, q: dequantize_matmul(x, q),
            "triton_fused": lambda x, w16, q: nf4_matmul(x, q),
        },
        headline=("triton_fused", "triton_dequant"),
        sources={"triton_fused": NF4_MATMUL_CODE,
                 "triton_dequant": NF4_DEQUANTIZE_CODE},
        bytes=lambda s: 2 * s[0] * s[2] + _nf4_bytes(s[1], s[2]) + 2 * s[0] * s[1],
        flops=lambda s: 2 * s[0] * s[1] * s[2],
        compute_dtype=torch.bfloat16,
        notes="bytes = the NF4 minimum (x, packed W + double-quantized scales, y) for every variant, so "
              "GB/s is an effective rate; torch reads a bf16 W (4x the weight bytes)",
    ),
    Benchmark(
        name="nf4_dequantize_week5",
        title="NF4 (double-quantized) -> bf16 dequantization",
        sizes=[(4096, 4096), (11008, 4096)],
        sim_sizes=[(33, 70)],
        size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_dequant_inputs,
        variants={
            "torch": lambda q: nf4_dequantize_torch(q, _out_dtype()),
            "triton": lambda q: nf4_dequantize(q, _out_dtype()),
        },
        headline=("triton",),
        sources={"triton": NF4_DEQUANTIZE_CODE},
        bytes=lambda s: _nf4_bytes(*s) + 2 * s[0] * s[1],
        notes="bytes = packed codes + scales read, bf16 weight written",
    ),
]


# --------------------------------------------------------------------------------- the sweep
def sweep(n: int = 4096, k: int = 4096, rows=(1, 4, 16, 32, 64, 128, 256, 1024, 4096)) -> None:
    """Fused dequant-matmul vs dequantize + cuBLAS vs bf16 cuBLAS over M: where the fused kernel stops paying."""
    started = time.perf_counter()
    w = random_tensor((n, k), torch.float32, runtime.DEVICE, scale=k ** -0.5)
    q, w16 = nf4_quantize(w), w.to(torch.bfloat16)
    print(f"N={n} K={k} bf16; ms (median); FUSED_MAX_M = {FUSED_MAX_M}")
    timed = []
    print(f"{'M':>6} {'bf16 cuBLAS':>12} {'dequant+mm':>12} {'fused':>10}  fused vs dequant+mm")
    for m in rows:
        x = random_tensor((m, k), torch.bfloat16, runtime.DEVICE)
        cells = [bench.timing_fields(bench.time_gpu(fn, [()], warmup_ms=5, rep_ms=40))
                 for fn in (lambda: F.linear(x, w16), lambda: dequantize_matmul(x, q), lambda: nf4_matmul(x, q))]
        timed += cells
        print(f"{m:>6} {bench.ms_cell(cells[0], '>12.4f')} {bench.ms_cell(cells[1], '>12.4f')} "
              f"{bench.ms_cell(cells[2], '>10.4f')}  {cells[1]['ms'] / cells[2]['ms']:.2f}x")
    print(bench.footnote(timed), end="")
    print(f"swept in {time.perf_counter() - started:.0f} s")


def main(argv=None) -> int:
    return sweep_main(sweep, argv, doc=__doc__, help="fused vs dequantize+matmul over M", gpu_only=True)


if __name__ == "__main__":
    sys.exit(main())
