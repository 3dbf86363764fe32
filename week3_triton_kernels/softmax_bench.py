"""Softmax's benchmarks, launch-config sweep and command line (the kernels: softmax.py).

`BENCHMARKS` (found by `python -m course bench week3`): every softmax kernel against torch.softmax
in fp32 and bf16 at 1k-32k columns. `python -m week3_triton_kernels.softmax_bench --sweep` (GPU)
times the candidate launch configs per (dtype, width) and writes the fastest to
results/tuned_softmax.json, the table `softmax` launches from.
"""
from __future__ import annotations

import dataclasses
import sys
import time

import torch

from course import bench, runtime
from course.bench import Benchmark, itemsize
from course.check import random_tensor
from course.sweep import sweep_main
from course.gpu import triton

from week3_triton_kernels.softmax import (
    TUNED, SoftmaxConfig, default_num_warps, softmax, softmax_one_block, softmax_online, softmax_persistent,
    softmax_with_config, two_stages_fit)


# ---------------------------------------------------------------------------------- benchmarks
# 256 MB per input whatever the dtype (2^26 fp32, 2^27 bf16): 5x the H100's L2, so HBM is
# measured, and ~170 us of traffic per call, far above Python's launch cost. At 64 MB per bf16
# input (~45 us) the first H100 run was launch-bound and noisy.
INPUT_BYTES = 1 << 28
WIDTHS = [1024, 2048, 4096, 8192, 16384, 32768]


def _rows(size):
    cols, dtype = size
    return runtime.pick(gpu=INPUT_BYTES // itemsize(dtype), sim=64 * cols) // cols


def _inputs(size):
    x = random_tensor((_rows(size), size[0]), size[1], runtime.DEVICE)
    return x, torch.empty_like(x)


def _bytes(size):
    cols, dtype = size
    return 2 * _rows(size) * cols * itemsize(dtype)


def _softmax_benchmark(dtype: torch.dtype) -> Benchmark:
    short = str(dtype).replace("torch.", "")
    return Benchmark(
        name=f"softmax_{short}",
        title=f"Row softmax, {short} ({INPUT_BYTES >> 20} MB per input; rows = elements / cols)",
        sizes=[(w, dtype) for w in WIDTHS],
        sim_sizes=[(64, dtype), (256, dtype)],
        size_label=lambda size: f"cols={size[0]}",
        make_inputs=_inputs,
        variants={
            "torch": lambda x, out: torch.softmax(x, dim=-1),
            "triton": softmax,
            "triton_one_block": softmax_one_block,
            "triton_4_rows_per_program": lambda x, out: softmax_one_block(x, out, rows_per_program=4),
            "triton_persistent": softmax_persistent,
            "triton_online": softmax_online,
        },
        headline=("triton",),
        bytes=_bytes,
        flops=lambda size: 0,
        notes="bytes = 2 x rows x cols x itemsize (read x once, write y once); the online "
              "kernel actually reads x twice, so its % of copy is an under-count of its traffic; "
              "`triton` is `softmax` (results/tuned_softmax.json, else heuristic_config); `triton_persistent` uses "
              "heuristic_config's rows/warps/stages with a persistent grid",
    )


BENCHMARKS = [_softmax_benchmark(torch.float32), _softmax_benchmark(torch.bfloat16)]


# --------------------------------------------------------------------------------- the sweep
SWEEP_BYTES = 1 << 27  # 128 MB per input: still 2.5x L2, half the time of the benchmark size


def sweep_configs(n_cols: int, dtype: torch.dtype) -> list[SoftmaxConfig]:
    """The configs `--sweep` times for one (width, dtype): few on purpose (each is a compile).

    One row per program on a grid of rows (the baseline kernel), and the persistent kernel with
    1 to 16 KB of input per block (or one row), without and with a second block in flight (when
    two fit in shared memory); each with ~16 and ~8 values per thread (w0 and 2 w0 warps).
    """
    block = triton.next_power_of_2(n_cols)
    element_bytes = itemsize(dtype)
    configs = []
    rows = 1
    while rows == 1 or rows * block * element_bytes <= 16384:
        w0 = default_num_warps(rows * block)
        for warps in (w0, 2 * w0):
            if warps > 32 or rows * block < 4 * 32 * warps:  # fewer than 4 values per thread
                continue
            if rows == 1:
                configs.append(SoftmaxConfig(persistent=False, rows=1, num_warps=warps))
            for stages in (1, 2):
                if stages == 1 or two_stages_fit(rows * block * element_bytes):
                    configs.append(SoftmaxConfig(persistent=True, rows=rows, num_warps=warps, num_stages=stages))
        rows *= 2
    return configs


def sweep(widths=WIDTHS, dtypes=(torch.float32, torch.bfloat16), save: bool = True) -> dict:
    """Time every config of `sweep_configs` against torch.softmax; print GB/s; return the best and
    (`save`) write it to results/tuned_softmax.json, which `config_for` reads (GPU)."""
    started = time.perf_counter()
    copy = bench.copy_bandwidth_gbps()
    print(f"copy ceiling {copy:.0f} GB/s; {SWEEP_BYTES >> 20} MB per input; GB/s = 2 x bytes / time")
    best: dict[tuple[int, int], tuple[float, SoftmaxConfig, dict]] = {}  # GB/s, config, its timing fields
    for dtype in dtypes:
        for width in widths:
            rows_total = SWEEP_BYTES // itemsize(dtype) // width
            x = random_tensor((rows_total, width), dtype, runtime.DEVICE)
            out = torch.empty_like(x)
            nbytes = 2 * x.numel() * x.element_size()
            want = torch.softmax(x.float(), dim=-1)

            def rate(fn):  # GB/s, and the timing's fields (whether the host paced it: bench.timing_fields)
                fields = bench.timing_fields(bench.time_gpu(fn, [()], warmup_ms=5, rep_ms=30))
                return nbytes / (fields["ms"] * 1e-3) / 1e9, fields

            torch_gbps, _ = rate(lambda: torch.softmax(x, dim=-1))
            short = str(dtype).replace("torch.", "")
            print(f"\n{short} cols={width}: torch {torch_gbps:.0f} GB/s ({100 * torch_gbps / copy:.1f}% of copy)")
            for config in sweep_configs(width, dtype):
                try:
                    gbps, fields = rate(lambda: softmax_with_config(x, out, config))
                except Exception as error:  # a config that does not compile or fit: say so, go on
                    print(f"  {config.label()}  failed: {str(error).splitlines()[0][:70]}")
                    continue
                err = float((out.float() - want).abs().max())
                wrong = "  WRONG (max err %.2g)" % err if err > 1e-2 else ""
                print(f"  {config.label()}  {bench.mark(f'{gbps:6.0f}', fields)} GB/s {100 * gbps / copy:5.1f}% of copy "
                      f"{gbps / torch_gbps:5.2f}x torch{wrong}")
                key = (x.element_size(), triton.next_power_of_2(width))
                if not wrong and gbps > best.get(key, (0.0, None))[0]:
                    best[key] = (gbps, config, fields)
            del x, out, want
            torch.cuda.empty_cache()
    print(f"\nswept in {time.perf_counter() - started:.0f} s. Fastest per (itemsize, width):")
    for key, (gbps, c, fields) in sorted(best.items()):
        print(f"    {key}: {c.label()}  {bench.mark(f'{gbps:.0f}', fields)} GB/s, {100 * gbps / copy:.1f}% of copy")
    print(bench.footnote([fields for _, _, fields in best.values()]), end="")
    if save:
        entries = [{"key": list(key), "config": dataclasses.asdict(c),
                    "measured": {"gbps": round(gbps), "pct_of_copy": round(100 * gbps / copy, 1), **fields}}
                   for key, (gbps, c, fields) in sorted(best.items())]
        print(f"wrote {TUNED.save(entries, 'python -m week3_triton_kernels.softmax_bench --sweep')}")
    return {key: config for key, (_, config, _) in best.items()}


def main(argv=None) -> int:
    def options(parser):
        parser.add_argument("--widths", type=int, nargs="*", default=WIDTHS, help="row widths")
        parser.add_argument("--dtypes", nargs="*", type=lambda name: getattr(torch, name),
                            default=[torch.float32, torch.bfloat16], help="dtypes (float32, bfloat16, float16)")

    return sweep_main(sweep, argv, doc=__doc__, help="time launch configs per width and dtype", gpu_only=True,
                      options=options)


if __name__ == "__main__":
    sys.exit(main())
