"""Access patterns' benchmarks, launch sweeps and command line (the kernels: access_patterns.py).

`BENCHMARKS` (found by `python -m course bench week3`): the strided read at strides 1-32 and the
transposes (gather, 2-D tiles, block pointers, TMA descriptors) against torch's copies.
`python -m week3_triton_kernels.access_patterns_bench --sweep [strided launch tiles]` times the
strided read against the sector model, the copy's launch parameters (BLOCK_SIZE, num_warps,
num_stages, programs) and the transpose's tile shapes; `--profile` launches each strided copy and
transpose once, for ncu.
"""
from __future__ import annotations

import argparse
import sys

import torch

from course import runtime
from course.bench import Benchmark
from course.check import random_tensor
from course.gpu import triton

from week3_triton_kernels.access_patterns import (
    BLOCK_PTR_SUPPORTED, COPY2D_BLOCK_PTR_CODE, COPY2D_CODE, COPY2D_DESCRIPTOR_CODE, COPY2D_GATHER_CODE,
    STRIDED_COPY_CODE, copy, copy2d, copy2d_block_ptr, copy2d_descriptor, copy2d_gather, read_amplification,
    strided_copy)


# --------------------------------------------------------------------------------- benchmarks
STRIDED_N = 1 << 24  # useful fp32 elements: 64 MB read + 64 MB written, the stride-32 base 2 GB
STRIDES = [1, 2, 4, 8, 16, 32]


def strided_inputs(stride: int):
    """(x, out): a float32 view with this stride over a base of n * stride elements, and out (n,)."""
    n = runtime.pick(gpu=STRIDED_N, sim=1 << 10)
    base = random_tensor(n * stride, torch.float32, runtime.DEVICE)
    return base[::stride], torch.empty(n, device=runtime.DEVICE)


def square_inputs(n: int):
    """(x, out): a random n x n float32 matrix and an n x n output."""
    return random_tensor((n, n), torch.float32, runtime.DEVICE), torch.empty((n, n), device=runtime.DEVICE)


def _copy2d_variants() -> dict:
    variants = {
        "torch": lambda x, out: out.copy_(x.t()),
        "triton_naive": lambda x, out: copy2d_gather(x.t(), out),
        "triton_tiled": lambda x, out: copy2d(x.t(), out),
        "triton_block_ptr": lambda x, out: copy2d_block_ptr(x.t(), out),
        "triton_descriptor": lambda x, out: copy2d_descriptor(x.t(), out),
        "torch_copy": lambda x, out: out.copy_(x),
        "triton_copy": lambda x, out: copy2d(x, out),
    }
    if not BLOCK_PTR_SUPPORTED:
        del variants["triton_block_ptr"]
    return variants


_COPY2D_SOURCES = {
    "triton_naive": COPY2D_GATHER_CODE,
    "triton_tiled": COPY2D_CODE,
    "triton_block_ptr": COPY2D_BLOCK_PTR_CODE,
    "triton_descriptor": COPY2D_DESCRIPTOR_CODE,
    "triton_copy": COPY2D_CODE,
}

BENCHMARKS = [
    Benchmark(
        name="strided_read_week3",
        title=f"Strided read out[i] = x[i * stride], float32, {STRIDED_N >> 20}M useful elements",
        sizes=STRIDES,
        sim_sizes=[1, 8],
        size_label=lambda s: f"stride={s}",
        make_inputs=strided_inputs,
        variants={
            "torch": lambda x, out: out.copy_(x),
            "triton": strided_copy,
        },
        headline=("triton",),
        bytes=lambda s: 2 * 4 * runtime.pick(gpu=STRIDED_N, sim=1 << 10),
        sources={"triton": STRIDED_COPY_CODE},
        notes="bytes = useful traffic 2 x 4 x n (read n elements, write n); the read actually "
              "fetches n x 4 x min(stride, 8) bytes in 32-byte sectors, so GB/s here is the "
              "useful rate and falls with the stride",
    ),
    Benchmark(
        name="copy2d_week3",
        title="Transpose (copy of the view x.t()), float32: gather, 2-D tiles, block pointers, TMA",
        sizes=[4096, 8192, 16384],
        sim_sizes=[64],
        size_label=lambda n: f"{n}x{n}",
        make_inputs=square_inputs,
        variants=_copy2d_variants(),
        headline=("triton_tiled", "triton_descriptor"),
        bytes=lambda n: 2 * 4 * n * n,
        sources={k: v for k, v in _COPY2D_SOURCES.items() if k in _copy2d_variants()},
        notes="bytes = 2 x 4 x n^2 (read x, write out); torch_copy and triton_copy copy x without "
              "transposing it: the same bytes, the ceiling a transpose can reach",
    ),
]


# -------------------------------------------------------------------------------------- sweep
def _timed(fn, *args) -> dict:
    """fn's timing fields: its ms, and whether the host paced it (course.bench.timing_fields)."""
    from course.bench import time_call, timing_fields

    return timing_fields(time_call(lambda *a: fn(*a), [args]))


def _gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def _try(fn, *args):
    """Time fn, or return the first line of why it failed (a config the compiler refuses)."""
    try:
        return _timed(fn, *args)
    except Exception as error:  # noqa: BLE001  (a sweep reports failures instead of stopping)
        return f"error: {type(error).__name__}: {str(error).splitlines()[0][:80] if str(error) else ''}"


def _cell(result, nbytes, copy_gbps) -> str:
    if isinstance(result, str):
        return result
    from course.bench import ms_cell

    gbps = _gbps(nbytes, result["ms"])
    return f"{ms_cell(result, '9.4f')} ms {gbps:7.0f} GB/s {100 * gbps / copy_gbps:6.1f}%"


def sweep_strided(copy_gbps: float) -> None:
    n = runtime.pick(gpu=STRIDED_N, sim=1 << 10)
    print(f"\nStrided read, float32, {n} useful elements (GB/s counts useful bytes: 8 per element)")
    print(f"{'stride':>6} | {'triton':>36} | {'torch':>36} | fetched/useful (32 B sectors) | predicted GB/s")
    for stride in STRIDES:
        x, out = strided_inputs(stride)
        amp = read_amplification(stride, 4)
        # time = (read amp*4n + write 4n) / copy rate, so useful rate = 8n / time = 2 * copy / (amp + 1)
        predicted = 2 * copy_gbps / (amp + 1)
        print(f"{stride:>6} | {_cell(_try(strided_copy, x, out), 8 * n, copy_gbps):>36} | "
              f"{_cell(_try(lambda a, o: o.copy_(a), x, out), 8 * n, copy_gbps):>36} | "
              f"{amp:>29.0f} | {predicted:>14.0f}")
        del x, out


def sweep_launch(copy_gbps: float) -> None:
    n = runtime.pick(gpu=1 << 26, sim=1 << 12)
    x = random_tensor(n, torch.float32, runtime.DEVICE)
    out = torch.empty_like(x)
    sms = runtime.sm_count()
    print(f"\nCopy of {n} float32 ({2 * 4 * n >> 20} MB moved): one program per block")
    print(f"{'BLOCK_SIZE':>10} {'num_warps':>9} | result")
    for block in (256, 1024, 4096, 16384):
        for warps in (1, 4, 8, 16):
            run = _try(lambda a, o, b=block, w=warps: copy(a, o, block_size=b, num_warps=w), x, out)
            print(f"{block:>10} {warps:>9} | {_cell(run, 8 * n, copy_gbps)}")
    print(f"\nPersistent copy (programs loop over blocks; {sms} SMs), num_warps=4")
    print(f"{'BLOCK_SIZE':>10} {'programs':>9} {'num_stages':>10} | result")
    for block in (1024, 4096):
        for programs in (sms, 4 * sms):
            for stages in (1, 2, 3, 4):
                run = _try(lambda a, o, b=block, p=programs, s=stages:
                           copy(a, o, block_size=b, programs=p, num_stages=s), x, out)
                print(f"{block:>10} {programs:>9} {stages:>10} | {_cell(run, 8 * n, copy_gbps)}")


def sweep_tiles(copy_gbps: float) -> None:
    n = runtime.pick(gpu=8192, sim=64)
    x, out = square_inputs(n)
    print(f"\nTranspose {n}x{n} float32 (copy of x.t()): tile shape and num_warps")
    print(f"{'kernel':>11} {'tile':>10} {'warps':>5} | result")
    for tile in ((32, 32), (64, 64), (128, 32), (32, 128), (128, 128)):
        for warps in (4, 8):
            run = _try(lambda a, o, t=tile, w=warps: copy2d(a.t(), o, tile=t, num_warps=w), x, out)
            print(f"{'tiled':>11} {str(tile):>10} {warps:>5} | {_cell(run, 8 * n * n, copy_gbps)}")
    for tile in ((32, 32), (64, 64), (64, 32), (128, 64)):
        run = _try(lambda a, o, t=tile: copy2d_descriptor(a.t(), o, tile=t), x, out)
        print(f"{'descriptor':>11} {str(tile):>10} {4:>5} | {_cell(run, 8 * n * n, copy_gbps)}")
    run = _try(lambda a, o: copy2d_gather(a.t(), o), x, out)
    print(f"{'gather':>11} {'1-D':>10} {4:>5} | {_cell(run, 8 * n * n, copy_gbps)}")


SWEEPS = {"strided": sweep_strided, "launch": sweep_launch, "tiles": sweep_tiles}


def profile_once() -> None:
    """One launch of each strided copy and each transpose: cheap to run under a profiler, e.g.
    ncu --clock-control none -k regex:"strided_copy|copy2d" --metrics dram__bytes_read.sum,dram__bytes_write.sum
    """
    for stride in STRIDES:
        strided_copy(*strided_inputs(stride))
    x, out = square_inputs(runtime.pick(gpu=8192, sim=64))
    for name in ("triton_naive", "triton_tiled", "triton_block_ptr", "triton_descriptor"):
        if name in _copy2d_variants():
            _copy2d_variants()[name](x, out)
    if runtime.on_gpu():
        torch.cuda.synchronize()
    print("profiled: strided_copy at strides", STRIDES, "and the transposes of an", tuple(x.shape), "matrix")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Measure access patterns and launch parameters.")
    parser.add_argument("--sweep", nargs="*", choices=sorted(SWEEPS), metavar="PART",
                        help=f"parts to run (default all): {', '.join(SWEEPS)}")
    parser.add_argument("--profile", action="store_true",
                        help="launch each strided copy and transpose once (run under ncu)")
    args = parser.parse_args(argv)
    if args.profile:
        profile_once()
        return 0
    if args.sweep is None:
        parser.print_help()
        return 0
    from course import bench_timing
    from course.bench import copy_bandwidth_gbps

    where = runtime.describe().get("gpu") or "SIMULATION on the CPU: these times measure Python, not a GPU"
    copy_gbps = copy_bandwidth_gbps()
    print(f"{where}; triton {triton.__version__}; copy ceiling {copy_gbps:.0f} GB/s measured now")
    for part in args.sweep or list(SWEEPS):
        SWEEPS[part](copy_gbps)
    if bench_timing.take_seen():  # time_gpu keeps every host-bound loop: some cell above is marked
        print(f"\n{bench_timing.FOOTNOTE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
