"""The prefix sum's benchmark, block-shape sweep and command line (the kernels: scan.py).

`BENCHMARKS` (found by `python -m course bench week1`): the multi-block scans (Numba, CUDA C) and
the single-pass look-back (CUDA C) against torch.cumsum. `python -m week1_cuda_python.scan_bench
--sweep` (GPU) times the look-back kernel for each (threads, vectors per thread).
"""
from __future__ import annotations

import sys

import torch

from course import bench
from course.gpu import DEVICE
from course.bench import Benchmark, pow2_label
from course.check import random_tensor
from course.sweep import sweep_main

from week1_cuda_python.scan import (
    DTYPE_SUFFIX, lookback_launch, scan_cuda_lookback, scan_cuda_multiblock, scan_numba_multiblock)


# --- benchmark ---------------------------------------------------------------------------------------
def _inputs(size):
    n, dtype = size
    device = DEVICE
    return random_tensor(n, dtype, device), torch.empty(n, dtype=dtype, device=device)


def _size_label(size) -> str:
    n, dtype = size
    return f"{pow2_label(n)} {DTYPE_SUFFIX[dtype]}"


BENCHMARKS = [
    Benchmark(
        name="scan_week1",
        title="Inclusive prefix sum: multi-block (Numba, CUDA C) and single-pass look-back (CUDA C) vs torch.cumsum",
        # The last size is the headline: 2^28 float32 (1 GiB in, 1 GiB out).
        sizes=[(1 << 24, torch.float32), (1 << 26, torch.int32), (1 << 28, torch.int32),
               (1 << 26, torch.float32), (1 << 28, torch.float32)],
        sim_sizes=[(300, torch.float32)],
        size_label=_size_label,
        make_inputs=_inputs,
        variants={
            "torch": lambda x, out: torch.cumsum(x, 0, dtype=x.dtype, out=out),
            "numba_multiblock": lambda x, out: scan_numba_multiblock(x, out),
            "cuda_multiblock": lambda x, out: scan_cuda_multiblock(x, out),
            "cuda_lookback": lambda x, out: scan_cuda_lookback(x, out),
        },
        gpu_only=("cuda_multiblock", "cuda_lookback"),
        headline=("numba_multiblock", "cuda_multiblock", "cuda_lookback"),
        bytes=lambda size: 2 * 4 * size[0],
        flops=lambda size: size[0],
        notes="bytes = 8 n (x read once, out written once: the minimum); FLOPs = n additions; "
              "torch = torch.cumsum(x, 0, dtype=x.dtype, out=out)",
    ),
]


# --- the sweep (GPU) -------------------------------------------------------------------------------

SWEEP_SHAPES = [(threads, vectors) for threads in (128, 256, 512) for vectors in (2, 4, 8)]


def sweep(sizes=(1 << 26, 1 << 28)) -> list[dict]:
    """Time scan_lookback_f32 for each (threads, vectors per thread) at `sizes` (GPU only)."""
    copy_gbps = bench.copy_bandwidth_gbps()
    print(f"copy ceiling {copy_gbps:.0f} GB/s; bytes = 8 n; 'exact' = integer-valued input matches float64 cumsum")
    print(f"{'n':>6} {'threads':>7} {'vectors':>7} {'tile':>6} {'ms':>8} {'GB/s':>6} {'% copy':>7} exact")
    rows = []
    for n in sizes:
        x = random_tensor(n, torch.float32, DEVICE)
        small_ints = torch.randint(-2, 3, (n,), device=DEVICE).float()
        expected = torch.cumsum(small_ints.double(), 0).float()
        out = torch.empty_like(x)
        torch_row = bench.timing_fields(bench.time_gpu(lambda: torch.cumsum(x, 0, out=out), [()]))
        gbps = 8 * n / (torch_row["ms"] * 1e-3) / 1e9
        print(f"{pow2_label(n):>6} {'torch.cumsum':>15} {'':>6} {bench.ms_cell(torch_row, '8.3f')} {gbps:6.0f} "
              f"{100 * gbps / copy_gbps:6.1f}%")
        for threads, vectors in SWEEP_SHAPES:
            defines = (f"-DLOOKBACK_THREADS={threads}", f"-DLOOKBACK_VECTORS={vectors}")
            try:
                lookback_launch(small_ints, out, False, threads, vectors, defines)
                exact = bool(torch.equal(out, expected))
                timing = bench.time_gpu(lambda: lookback_launch(x, out, False, threads, vectors, defines), [()])
            except Exception as error:  # a shape that fails to compile or launch: report, go on
                print(f"{pow2_label(n):>6} {threads:>7} {vectors:>7} failed: {str(error).splitlines()[0][:70]}")
                continue
            gbps = 8 * n / (timing.median_ms * 1e-3) / 1e9
            rows.append({"n": n, "threads": threads, "vectors": vectors, **bench.timing_fields(timing), "gbps": gbps})
            print(f"{pow2_label(n):>6} {threads:>7} {vectors:>7} {threads * vectors * 4:>6} {bench.ms_cell(rows[-1], '8.3f')} "
                  f"{gbps:6.0f} {100 * gbps / copy_gbps:6.1f}% {exact}")
        del x, small_ints, expected, out
        torch.cuda.empty_cache()
    print(bench.footnote(rows), end="")
    return rows


def main(argv=None) -> int:
    return sweep_main(sweep, argv, doc=__doc__, help="time the look-back kernel's block shapes", gpu_only=True)


if __name__ == "__main__":
    sys.exit(main())
