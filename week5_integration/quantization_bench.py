"""int8 weight-only quantization's benchmark, tile sweep and command line (the kernels: quantization.py).

`BENCHMARKS` (found by `python -m course bench week5`): the int8 matmuls (scale in the epilogue, and
dequantized in the loop) against bf16 cuBLAS and torch's dequantize-then-matmul at decode shapes.
`python -m week5_integration.quantization_bench --sweep` (GPU) times tile shapes per decode shape
and writes the fastest to results/tuned_int8_matmul.json, the table `int8_matmul` launches from.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time

import torch

from course import bench, runtime
from course.bench import Benchmark, compile_on_first_call
from course.check import random_tensor
from course.sweep import sweep_main

from week5_integration.quantization import (
    INT8_MATMUL_CODE, INT8_MATMUL_DEQUANT_CODE, TUNED, Int8Config, block_m_for, dequant_matmul_torch,
    heuristic_config, int8_matmul, int8_matmul_dequant, m_bucket, matmul_bytes, quantize_int8,
    shared_memory_bytes)


# ---------------------------------------------------------------------------------- benchmark
# Decode shapes of a 7B-class layer (d = 4096, MLP 4d): the MLP's up (K = d, N = 4d) and down
# (K = 4d, N = d) projections. 64 MB of int8 per matrix: 1.3x the H100's L2, ~21 us at 3 TB/s.
GPU_SHAPES = [(4096, 16384), (16384, 4096)]
BATCHES = [1, 4, 16]


def _size_label(size) -> str:
    M, K, N = size
    return f"M={M} K={K} N={N}"


def _make_inputs(size):
    M, K, N = size
    w = random_tensor((N, K), torch.float32, runtime.DEVICE, scale=0.02)
    q, scale = quantize_int8(w)
    dtype = runtime.pick(gpu=torch.bfloat16, sim=torch.float16)  # the interpreter's bf16 is wrong
    return random_tensor((M, K), dtype, runtime.DEVICE), w.to(dtype), q, scale


def _bytes(size) -> int:
    return matmul_bytes(*size, int8=True)  # what the int8 kernel must move


_compiled_dequant_matmul = compile_on_first_call(dequant_matmul_torch, dynamic=False)


BENCHMARKS = [Benchmark(
    name="int8_matmul_week5",
    title="int8 weight-only matmul at decode shapes: y = x @ deq(Wq)^T, x bf16 (M x K), W (N x K)",
    sizes=[(M, K, N) for K, N in GPU_SHAPES for M in BATCHES],
    sim_sizes=[(1, 64, 96), (16, 128, 64)],
    size_label=_size_label,
    make_inputs=_make_inputs,
    variants={
        "torch": lambda x, w, q, scale: x @ w.t(),                      # bf16 weights, cuBLAS
        "torch_dequant": lambda x, w, q, scale: dequant_matmul_torch(x, q, scale),
        "torch_compile_dequant": lambda x, w, q, scale: _compiled_dequant_matmul(x, q, scale),
        "triton_int8": lambda x, w, q, scale: int8_matmul(x, q, scale),
        "triton_int8_dequant_in_loop": lambda x, w, q, scale: int8_matmul_dequant(x, q, scale),
    },
    headline=("triton_int8",),
    gpu_only=("torch_compile_dequant",),  # Inductor on the CPU would time C++ code, not a GPU's
    bytes=_bytes,
    flops=lambda size: 2 * size[0] * size[1] * size[2],
    notes="bytes = N*K (int8) + 4N (scales) + 2MK + 2MN: the int8 kernel's minimum traffic. The bf16 "
          "`torch` row moves ~2x those bytes, so its GB/s and % of copy read half its real bandwidth: "
          "compare ms. Prediction at M <= 16: triton_int8 ~2x torch; torch_dequant slower than torch",
    sources={"triton_int8": INT8_MATMUL_CODE,
             "triton_int8_dequant_in_loop": INT8_MATMUL_DEQUANT_CODE},
)]


# ------------------------------------------------------------------------------------ sweep
def sweep_configs(M: int) -> list[Int8Config]:
    """The tile shapes `--sweep` times: few on purpose (each is a compile)."""
    block_m = block_m_for(M)
    # num_stages: weight tiles in flight per program; a streaming kernel wants several.
    return [Int8Config(block_m, bn, bk, 4, stages)
            for bn in (16, 32, 64) for bk in (128, 256) for stages in (3, 6)]


def sweep(shapes=GPU_SHAPES, batches=(1, 16), save: bool = True) -> dict:
    """Time `int8_matmul` per config and shape against torch bf16; print; return the fastest and
    (`save`) write it to results/tuned_int8_matmul.json, which `config_for` reads (GPU)."""
    started = time.perf_counter()
    copy_gbps = bench.copy_bandwidth_gbps()
    print(f"copy ceiling {copy_gbps:.0f} GB/s; GB/s counts the int8 kernel's bytes (N*K + ...)")
    best = {}
    for K, N in shapes:
        for M in batches:
            x, w, q, scale = _make_inputs((M, K, N))
            nbytes = _bytes((M, K, N))
            want = dequant_matmul_torch(x.float(), q, scale)

            def timed(fn):  # ms, and the timing's fields (whether the host paced it: bench.timing_fields)
                fields = bench.timing_fields(bench.time_gpu(fn, [()], warmup_ms=5, rep_ms=30))
                return fields["ms"], fields

            t_torch, _ = timed(lambda: x @ w.t())
            print(f"\nM={M} K={K} N={N}: torch bf16 {t_torch * 1e3:.1f} us; "
                  f"heuristic {heuristic_config(M, N, K).label()}")
            for config in sweep_configs(M):
                if shared_memory_bytes(config, 2) > 200 * 1024:
                    continue  # would not fit the H100's 227 KB per program
                try:
                    t, fields = timed(lambda: int8_matmul(x, q, scale, config=config))
                except Exception as error:  # a config that does not compile: say so, go on
                    print(f"  {config.label()}  failed: {str(error).splitlines()[0][:70]}")
                    continue
                err = float((int8_matmul(x, q, scale, config=config).float() - want).abs().max())
                wrong = f"  WRONG (max err {err:.2g})" if err > 5e-2 * float(want.abs().max()) else ""
                gbps = nbytes / (t * 1e-3) / 1e9
                print(f"  {config.label()}  {bench.mark(f'{t * 1e3:7.1f}', fields)} us {gbps:6.0f} GB/s {100 * gbps / copy_gbps:5.1f}% "
                      f"of copy {t_torch / t:5.2f}x torch{wrong}")
                key = (m_bucket(M), N, K)
                if not wrong and t < best.get(key, (math.inf,))[0]:
                    best[key] = (t, config, fields)
    print(f"\nswept in {time.perf_counter() - started:.0f} s. Fastest per (m_bucket, N, K):")
    for key, (t, c, fields) in sorted(best.items()):
        print(f"    {key}: {c.label()}  {bench.mark(f'{t * 1e3:.1f}', fields)} us")
    print(bench.footnote([fields for _, _, fields in best.values()]), end="")
    if save:
        entries = [{"key": list(key), "config": dataclasses.asdict(c),
                    "measured": {"us": round(t * 1e3, 1), **fields}}
                   for key, (t, c, fields) in sorted(best.items())]
        print(f"wrote {TUNED.save(entries, 'python -m week5_integration.quantization_bench --sweep')}")
    return {key: config for key, (_, config, _) in best.items()}


def main(argv=None) -> int:
    return sweep_main(sweep, argv, doc=__doc__, help="time tile configs at decode shapes", gpu_only=True)


if __name__ == "__main__":
    sys.exit(main())
