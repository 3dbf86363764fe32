"""The Triton matmul's benchmarks, config sweep and command line (the kernels: matmul.py).

`BENCHMARKS` (found by `python -m course bench week3`): the Triton matmuls (fixed tiles, autotuned,
persistent, TMA) against cuBLAS in fp16 and bf16, and fp8 against torch._scaled_mm where the GPU has
fp8. `python -m week3_triton_kernels.matmul_bench --sweep` (GPU) times every tile config of each
kernel at the benchmark shapes.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from course import runtime  # before triton: chooses the GPU or the Triton interpreter
from course.bench import Benchmark
from course.check import random_tensor

from week3_triton_kernels.matmul import (  # noqa: E402
    AUTOTUNE_CONFIGS, FP8_CONFIGS, PERSISTENT_CONFIGS, device_capability, matmul, matmul_fixed, matmul_fp8,
    matmul_fp8_torch, matmul_persistent, matmul_tma, quantize_fp8, run_kernel)


# ---------------------------------------------------------------------------------- benchmarks
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (5000, 3000, 4000), (4097, 4097, 4097)]
FP8_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]


def _inputs(size):
    M, N, K, dtype = size
    d = runtime.DEVICE
    return random_tensor((M, K), dtype, d), random_tensor((K, N), dtype, d, scale=max(K, 1) ** -0.5)


def _fp8_inputs(size):
    M, N, K = size
    d = runtime.DEVICE
    a, a_scale = quantize_fp8(random_tensor((M, K), torch.float32, d))
    w, b_scale = quantize_fp8(random_tensor((N, K), torch.float32, d, scale=max(K, 1) ** -0.5))
    return a, w.t(), a_scale, b_scale  # b = w.t(): column-major, as torch._scaled_mm requires


def _has(minimum) -> bool:
    capability = device_capability()
    return capability is None or capability >= minimum  # the interpreter emulates everything


def _matmul_benchmark(dtype):
    short = str(dtype).replace("torch.", "")
    variants = {
        "torch": torch.matmul,
        "triton": matmul,
        "triton_ungrouped": lambda a, b: matmul_fixed(a, b, group_m=1),
        "triton_unpadded": lambda a, b: matmul(a, b, pad_strides=False),
        "triton_persistent": matmul_persistent,
        "triton_tma": matmul_tma,
    }
    if not _has((9, 0)):
        del variants["triton_tma"]  # no TMA before Hopper: the table simply has no such row
    return Benchmark(
        name=f"matmul_{short}",
        title=f"Matmul, {short} in, fp32 accumulate (Triton vs cuBLAS)",
        sizes=[(*s, dtype) for s in SHAPES],
        sim_sizes=[(64, 64, 64, torch.float16)],
        size_label=lambda s: f"{s[0]}x{s[1]}x{s[2]}",
        make_inputs=_inputs,
        variants=variants,
        headline=("triton", "triton_tma"),
        bytes=lambda s: (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]) * 2,
        flops=lambda s: 2 * s[0] * s[1] * s[2],
        compute_dtype=dtype,
        notes="flops = 2 M N K; bytes = (MK + KN + MN) x 2, the minimum; triton_ungrouped is "
              "the 128x256x64 config with GROUP_M = 1 (row-major program order); triton_unpadded "
              "skips the padded-stride copy of odd-strided operands (pad_strides=False); the "
              "padded variants' times include that copy",
    )


def _fp8_benchmark():
    def scaled_mm(fast):
        return lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
    return Benchmark(
        name="matmul_fp8",
        title="Matmul, float8_e4m3fn in (per-tensor scales), fp32 accumulate, bf16 out "
              "(Triton vs torch._scaled_mm / cuBLASLt)",
        sizes=FP8_SHAPES,
        sim_sizes=[(64, 64, 64)],
        size_label=lambda s: f"{s[0]}x{s[1]}x{s[2]}",
        make_inputs=_fp8_inputs,
        variants={
            "torch": scaled_mm(False),
            "torch_fast_accum": scaled_mm(True),
            "triton": lambda a, b, sa, sb: matmul_fp8(a, b, sa, sb),
            "triton_fast_accum": lambda a, b, sa, sb: matmul_fp8(a, b, sa, sb, fast_accum=True),
        },
        headline=("triton", "triton_fast_accum"),
        bytes=lambda s: s[0] * s[2] + s[2] * s[1] + 2 * s[0] * s[1],
        flops=lambda s: 2 * s[0] * s[1] * s[2],
        notes="flops = 2 M N K; bytes = MK + KN (fp8) + 2 MN (bf16 C); b is column-major (w.t()); "
              "`torch`/`triton` promote partial sums to fp32 every 128 products, the *_fast_accum "
              "variants accumulate all of K in the tensor cores",
    )


BENCHMARKS = [_matmul_benchmark(torch.float16), _matmul_benchmark(torch.bfloat16)] + (
    [_fp8_benchmark()] if _has((8, 9)) else [])  # fp8 tensor cores: Ada and Hopper


# --------------------------------------------------------------------------------- the sweep
def sweep_configs(kind: str, fp8: bool = False) -> list[dict]:
    """Launch configs `--sweep` times for one kernel: its autotuning space, and for the persistent
    kernels the first config also without `flatten` (what merging the loops is worth)."""
    configs = FP8_CONFIGS if fp8 else (AUTOTUNE_CONFIGS if kind == "tiled" else PERSISTENT_CONFIGS)
    out = [dict(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages) for c in configs]
    if kind != "tiled":
        out.append(dict(out[0], FLATTEN=False))
    return out


def _label(config: dict) -> str:
    flat = "" if "FLATTEN" not in config else (" flat" if config["FLATTEN"] else " nofl")
    return (f"{config['BLOCK_M']}x{config['BLOCK_N']}x{config['BLOCK_K']} g{config['GROUP_M']} "
            f"w{config['num_warps']} s{config['num_stages']}{flat}")


def sweep(dtypes=("float16", "fp8"), shapes=SHAPES) -> None:
    """Time every config of every kernel at each shape beside torch; print TFLOP/s (GPU)."""
    from course import bench

    if not runtime.on_gpu():
        raise SystemExit("--sweep times kernels on the GPU; this machine runs the Triton interpreter")
    started = time.perf_counter()
    for name in dtypes:
        fp8 = name == "fp8"
        for M, N, K in (FP8_SHAPES if fp8 else shapes):
            flops = 2 * M * N * K
            if fp8:
                a, b, sa, sb = _fp8_inputs((M, N, K))
                out = torch.empty((M, N), dtype=torch.bfloat16, device=runtime.DEVICE)
                want = matmul_fp8_torch(a, b, sa, sb).float()
                refs = {"torch._scaled_mm": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16),
                        "torch._scaled_mm fast": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,
                                                                          use_fast_accum=True)}
            else:
                dtype = getattr(torch, name)
                a, b = _inputs((M, N, K, dtype))
                out = torch.empty((M, N), dtype=dtype, device=runtime.DEVICE)
                want = (a.float() @ b.float())
                refs = {"torch.matmul": lambda: torch.matmul(a, b)}
            tflops = lambda ms: flops / (ms * 1e-3) / 1e12  # noqa: E731
            print(f"\n{name} {M}x{N}x{K}")
            base = None
            for label, fn in refs.items():
                ms = bench.time_gpu(fn, [()], warmup_ms=10, rep_ms=60).median_ms
                base = base or ms
                print(f"  {label:<44} {ms:8.3f} ms {tflops(ms):7.1f} TFLOP/s")
            kinds = ("persistent", "tma") if fp8 else ("tiled", "persistent", "tma")
            for kind in kinds:
                for config in sweep_configs(kind, fp8):
                    if fp8:
                        fn = lambda: run_kernel(kind, a, b, None, None, out, M, N, K, scales=(sa, sb),  # noqa: E731
                                          fp8_precise=True, config=config)
                    else:
                        fn = lambda: run_kernel(kind, a, b, None, None, out, M, N, K, config=config)  # noqa: E731
                    try:
                        ms = bench.time_gpu(fn, [()], warmup_ms=10, rep_ms=60).median_ms
                    except Exception as error:  # a config that does not compile or fit: say so
                        print(f"  {kind:<10} {_label(config):<33} failed: {str(error).splitlines()[0][:60]}")
                        continue
                    err = float((out.float() - want).abs().max() / want.abs().max())
                    flag = f"  WRONG (rel err {err:.2g})" if err > 2e-2 else ""
                    print(f"  {kind:<10} {_label(config):<33} {ms:8.3f} ms {tflops(ms):7.1f} TFLOP/s "
                          f"{base / ms:5.2f}x torch{flag}")
            del a, b, out, want
            torch.cuda.empty_cache()
    print(f"\nswept in {time.perf_counter() - started:.0f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", action="store_true", help="time each kernel's configs per shape (GPU)")
    parser.add_argument("--dtypes", nargs="*", default=["float16", "fp8"],
                        help="float16, bfloat16 and/or fp8 (default: float16 fp8)")
    args = parser.parse_args(argv)
    if not args.sweep:
        parser.print_help()
        return 2
    sweep(args.dtypes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
