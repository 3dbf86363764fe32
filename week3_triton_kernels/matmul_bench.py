"""The Triton matmul's benchmarks, config sweep and command line (the kernels: matmul.py).

`BENCHMARKS` (found by `python -m course bench week3`): the Triton matmuls (fixed tiles, tuned,
persistent, TMA) against cuBLAS in fp16 and bf16, and fp8 against torch._scaled_mm where the GPU has
fp8. `python -m week3_triton_kernels.matmul_bench --sweep --out DIR` (GPU, ~4 minutes) times a wide
set of configs of each kernel at the benchmark shapes beside cuBLAS and writes the fastest to
DIR/dispatch_matmul.json, the table `matmul` reads from results/ (see "the sweep" below).
Over 500 lines: the benchmarks, the ladders and the sweep (parallel precompile, timing loop,
table) of one lesson module, together because the sweep times exactly the launches the
benchmarks run.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from course import runtime
from course.bench import Benchmark
from course.check import random_tensor
from course.rungs import Ladder, Rung

from week3_triton_kernels.matmul import (
    matmul, matmul_fixed, matmul_persistent, matmul_tiled, matmul_tma, row_align, run_kernel,
    stores_c_through_tma)
from week3_triton_kernels.matmul_basic import matmul_grouped, matmul_plain
from week3_triton_kernels.matmul_fp8 import FP8_BLOCK_K, matmul_fp8, matmul_fp8_torch, quantize_fp8


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


def _matmul_benchmark(dtype):
    short = str(dtype).replace("torch.", "")
    variants = {
        "torch": torch.matmul,
        "triton_plain": matmul_plain,
        "triton_grouped": matmul_grouped,
        "triton_tiled": matmul_tiled,
        "triton": matmul,
        "triton_ungrouped": lambda a, b: matmul_fixed(a, b, group_m=1),
        "triton_unpadded": lambda a, b: matmul(a, b, pad_strides=False),
        "triton_persistent": matmul_persistent,
        "triton_tma": matmul_tma,
    }
    if not runtime.has_capability((9, 0), instead="no triton_tma row: the tiled and persistent rungs"):
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
        notes="flops = 2 M N K; bytes = (MK + KN + MN) x 2, the minimum; triton_plain and triton_grouped "
              "are rungs 1 and 2 (matmul_basic: fixed 128x128x32 tiles, row-major and grouped order); "
              "triton_tiled, triton_persistent and triton_tma run the config results/dispatch_matmul.json holds "
              "for the shape on this GPU, else their autotuner's; triton is `matmul`, the fastest of those "
              "three per the same table (triton_tiled without one); triton_ungrouped is "
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


def _epilogue_inputs(size):
    a, b = _inputs(size)
    return a, b, random_tensor((size[1],), size[3], runtime.DEVICE)


def _epilogue_benchmark():
    gelu = torch.nn.functional.gelu
    return Benchmark(
        name="matmul_epilogue",
        title="Matmul + bias + GELU, bfloat16: separate ops vs the fused epilogue",
        sizes=[(4096, 4096, 4096, torch.bfloat16)],
        sim_sizes=[(64, 48, 80, torch.float16)],  # the interpreter's bf16 is wrong by design
        size_label=lambda s: f"{s[0]}x{s[1]}x{s[2]}",
        make_inputs=_epilogue_inputs,
        variants={
            "torch": lambda a, b, bias: gelu(torch.addmm(bias, a, b)),
            "triton_unfused": lambda a, b, bias: gelu(matmul(a, b) + bias),
            "triton": lambda a, b, bias: matmul(a, b, bias, "gelu"),
        },
        headline=("triton",),
        bytes=lambda s: (s[0] * s[2] + s[2] * s[1] + s[0] * s[1] + s[1]) * 2,
        flops=lambda s: 2 * s[0] * s[1] * s[2],
        notes="flops = 2 M N K (the epilogue's are not counted); bytes = (MK + KN + MN + N) x 2, the "
              "fused minimum; torch is addmm (bias fused by cuBLASLt) then gelu; triton_unfused is "
              "`matmul`, then torch's bias add and gelu (two more passes over C); triton applies both "
              "to the fp32 accumulator before the one store (exact erf GELU)",
    )


MATMUL_FP16, MATMUL_BF16, MATMUL_EPILOGUE = (_matmul_benchmark(torch.float16), _matmul_benchmark(torch.bfloat16),
                                            _epilogue_benchmark())
MATMUL_FP8 = _fp8_benchmark() if runtime.has_capability((8, 9)) else None  # fp8 tensor cores: Ada and Hopper
BENCHMARKS = [MATMUL_FP16, MATMUL_BF16, MATMUL_EPILOGUE] + ([MATMUL_FP8] if MATMUL_FP8 else [])


# ----------------------------------------------------------------------------------- ladders
# `python -m course rung matmul_triton [N]`: the kernels in teaching order, each checked against
# torch.matmul on the same inputs, then timed beside it. rel_tol: each result is rounded once to
# bf16 (unit roundoff u = 2^-8) from an fp32 sum whose own error is ~sqrt(K) 2^-24 relative (5e-6
# at K = 8192); the rung and cuBLAS may round an element to neighbouring bf16 values, so
# |out - ref| <= 2u |c| element by element and ||out - ref|| / ||ref|| <= 2^-7 = 7.8e-3, which 1e-2
# covers with room for the fp32 sums. A wrong tile, a missed K step or a stale output is O(1).
# (In simulation the ladder runs the benchmark's fp16 sim size: u = 2^-11, tighter still.)
MATMUL_RUNGS = [
    Rung("triton_plain", "one program per C tile in row-major order, a K loop of tl.dot into fp32, masked edges"),
    Rung("triton_grouped", "the same kernel, tiles in grouped order: programs in flight share A and B panels in L2"),
    Rung("triton_tiled", "tuned configs (tile shape, warps, stages; the sweep's table, else autotune), unmasked "
                         "wrap-around loads, 16-byte aligned rows promised (ROW_ALIGN), misaligned strides padded"),
    Rung("triton_persistent", "one program per SM looping over tiles: no partial last wave, loads of the next "
                              "tile overlap this tile's store"),
    Rung("triton_tma", "A and B tiles copied by the TMA engine through tensor descriptors (sm_90), C stored "
                       "through one where out allows: no address math, no masks"),
    Rung("triton", "matmul: whichever of rungs 3-5 the sweep measured fastest at this shape"),
]
LADDERS = [Ladder("matmul_triton", MATMUL_BF16, MATMUL_RUNGS, rel_tol=1e-2)]
# Rungs 6 and 7 of the story, ladders of their own since their reference is not torch.matmul.
# The epilogue against addmm + gelu: GELU's slope is at most 1.13, and the roundings to bf16 differ
# (torch: C, then GELU's output; fused: once; unfused: C, C + bias, GELU's output), so an element
# may differ by up to (1.13 x 2 + 1) u + (1.13 + 1) u = 5.4 u = 2.1e-2: rel_tol 3e-2.
LADDERS.append(Ladder("matmul_triton_epilogue", MATMUL_EPILOGUE, [
    Rung("triton_unfused", "matmul, then torch's bias add and GELU: C written and read twice more"),
    Rung("triton", "rung 6: bias and GELU applied to the fp32 accumulator before the one store"),
], rel_tol=3e-2))
# fp8 against torch._scaled_mm on the same fp8 values (promoted every 128 products): bf16 out as
# above, and without promotion Hopper's ~14-bit tensor-core sums, which DeepSeek-V3 (arXiv:2412.19437,
# sec. 3.3.2) measured at up to ~2% relative error for K = 4096; K = 8192 sums twice as long: 5e-2.
if MATMUL_FP8 is not None:
    LADDERS.append(Ladder("matmul_triton_fp8", MATMUL_FP8, [
        Rung("triton", "rung 7: fp8 in, per-tensor scales, partial sums promoted to fp32 every 128 products"),
        Rung("triton_fast_accum", "fp8 with all of K summed in the tensor cores' ~14-bit accumulator"),
    ], rel_tol=5e-2))


# --------------------------------------------------------------------------------- the sweep
# `--sweep` (GPU) times candidate configs of every kernel at each shape and dtype beside cuBLAS in
# the same run, prints the fastest, and writes them to dispatch_matmul.json (results/, or --out),
# which `matmul`, `matmul_tiled`, `matmul_persistent` and `matmul_tma` read on the GPU that measured it
# (matmul_dispatch.py). It fits one device call of ~4 minutes: compiling is most of a sweep
# (~1-3 s per config and kernel, and a kernel compiles once per dtype and per class of shape:
# 4096^3 and 8192^3 share theirs, 5000 x 3000 x 4000 has its own), so --jobs worker processes
# compile every candidate first, in parallel, into Triton's on-disk cache, and the timing loop
# then only loads them. Timing is short (do_bench-style, ~25 ms of calls per config) and each
# (shape, dtype) gets an equal share of --budget-s, candidates most promising first.
SWEEP_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (5000, 3000, 4000)]
SWEEP_KINDS = ("tiled", "persistent", "tma")


def sweep_config(bm, bn, bk, warps, stages, group=8, **extra) -> dict:
    """One candidate: BLOCK_M x BLOCK_N x BLOCK_K tiles, GROUP_M, num_warps, num_stages (+ FLATTEN,
    PER_SM for the persistent kernels: PER_SM programs per SM, 0 for one program per tile)."""
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, num_warps=warps, num_stages=stages, **extra)


def _persistent(bm, bn, bk, warps, stages, group=8, flatten=True, per_sm=1, subtile=False) -> dict:
    # subtile (the TMA kernel): C stored as two BLOCK_N / 2 halves, half the staging buffer
    extra = {"EPILOGUE_SUBTILE": True} if subtile else {}
    return sweep_config(bm, bn, bk, warps, stages, group, FLATTEN=flatten, PER_SM=per_sm, **extra)


# Most promising first. Shared memory: stages x (BLOCK_M + BLOCK_N) x BLOCK_K x 2 bytes must fit
# the H100's 227 KB: 128x256x64 takes 48 KB a stage (s4: 192 KB), 128x128x64 32 KB (s5: 160 KB),
# 64x256x64 40 KB, 128x128x128 64 KB (s3: 192 KB); configs that do not fit fail and are listed as
# such. 128x128 tiles with 3 stages (96 KB) let two programs share an SM (PER_SM=2). Smaller tiles
# are there for wave quantization: 5000 x 3000 in 128 x 256 tiles is 40 x 12 = 480 tiles, 3.6
# waves on 132 SMs (the 4th wave 64% full); in 128 x 128 tiles 960, 7.3 waves (the 8th 27% full,
# but a smaller share of the time). The TMA kernel's C store stages a C tile (128 x 256 x 2 = 64 KB) in
# shared memory too: 4-stage 128x256 / 256x128 pipelines (192 KB) fit only storing C in halves (sub,
# 32 KB); without, they fall back to masked stores (matmul.stores_c_through_tma; the log says which).
SWEEP_CANDIDATES = {
    "tiled": [
        sweep_config(128, 256, 64, 8, 3), sweep_config(128, 256, 64, 8, 4), sweep_config(256, 128, 64, 8, 3),
        sweep_config(256, 128, 64, 8, 4), sweep_config(128, 128, 64, 8, 4), sweep_config(128, 128, 64, 4, 4),
        sweep_config(128, 128, 64, 8, 5), sweep_config(128, 128, 64, 4, 5), sweep_config(128, 256, 64, 8, 3, 4),
        sweep_config(128, 256, 64, 8, 3, 16), sweep_config(64, 256, 64, 4, 4), sweep_config(64, 256, 64, 8, 4),
        sweep_config(256, 64, 64, 4, 4), sweep_config(128, 128, 128, 8, 3), sweep_config(128, 256, 32, 8, 5),
        sweep_config(64, 128, 64, 4, 4),
    ],
    "persistent": [
        _persistent(128, 256, 64, 8, 3), _persistent(128, 256, 64, 8, 4), _persistent(256, 128, 64, 8, 3),
        _persistent(128, 128, 64, 8, 4), _persistent(128, 128, 64, 4, 4), _persistent(128, 128, 64, 8, 5),
        _persistent(64, 256, 64, 8, 4), _persistent(128, 256, 64, 8, 3, flatten=False),
        _persistent(128, 128, 64, 4, 3, per_sm=2), _persistent(128, 256, 64, 8, 3, 16),
    ],
    "tma": [
        _persistent(128, 256, 64, 8, 3), _persistent(128, 256, 64, 8, 4, subtile=True), _persistent(256, 128, 64, 8, 3),
        _persistent(256, 128, 64, 8, 4, subtile=True), _persistent(128, 256, 64, 8, 3, subtile=True),
        _persistent(256, 128, 64, 8, 3, subtile=True), _persistent(128, 256, 64, 8, 4), _persistent(256, 128, 64, 8, 4),
        _persistent(128, 128, 64, 8, 4), _persistent(128, 128, 64, 4, 4),
        _persistent(128, 128, 64, 8, 5), _persistent(64, 256, 64, 8, 4), _persistent(128, 256, 64, 8, 3, 4),
        _persistent(128, 256, 64, 8, 3, 16), _persistent(128, 256, 64, 8, 3, flatten=False),
        _persistent(128, 256, 64, 8, 4, flatten=False), _persistent(128, 128, 64, 4, 3, per_sm=2),
        _persistent(128, 128, 128, 8, 3), _persistent(128, 256, 64, 8, 3, per_sm=0),
        _persistent(128, 128, 64, 8, 4, per_sm=0),
    ],
}
# fp8 (`--dtypes fp8`): BLOCK_K = 128 moves as many bytes per step as 64 in fp16; promotion on.
FP8_SWEEP_CANDIDATES = {
    kind: [_persistent(128, 256, FP8_BLOCK_K, 8, 3), _persistent(128, 256, FP8_BLOCK_K, 8, 4),
           _persistent(256, 128, FP8_BLOCK_K, 8, 3), _persistent(128, 128, FP8_BLOCK_K, 8, 4),
           _persistent(128, 128, FP8_BLOCK_K, 4, 4), _persistent(64, 128, FP8_BLOCK_K, 4, 4),
           _persistent(128, 256, FP8_BLOCK_K, 8, 3, flatten=False)]
    for kind in ("persistent", "tma")}
SWEEP_WRONG = 2e-2  # max |out - fp32 ref| / max |ref| past which a config is reported WRONG (a bad tile: O(1))


def config_label(config: dict) -> str:
    """e.g. '128x256x64 g8 w8 s3 flat' (+ ' 2/SM' or ' 1/tile', persistent; ' sub': C in two halves)."""
    flat = "" if "FLATTEN" not in config else (" flat" if config["FLATTEN"] else " nofl")
    per_sm = config.get("PER_SM", 1)
    programs = "" if per_sm == 1 else (" 1/tile" if per_sm == 0 else f" {per_sm}/SM")
    halves = " sub" if config.get("EPILOGUE_SUBTILE") else ""
    return (f"{config['BLOCK_M']}x{config['BLOCK_N']}x{config['BLOCK_K']} g{config['GROUP_M']} "
            f"w{config['num_warps']} s{config['num_stages']}{flat}{programs}{halves}")


def _sweep_inputs(shape, dtype_name):
    M, N, K = shape
    if dtype_name == "fp8":
        return _fp8_inputs((M, N, K))
    return _inputs((M, N, K, getattr(torch, dtype_name)))


def _sweep_call(kind, config, shape, dtype_name, inputs, out):
    """The launch the sweep times: the kernel with this config, the padded copies included."""
    M, N, K = shape
    if dtype_name == "fp8":
        a, b, sa, sb = inputs
        return lambda: run_kernel(kind, a, b, None, None, out, M, N, K, scales=(sa, sb), fp8_precise=True,
                                  config=config)
    a, b = inputs
    return lambda: run_kernel(kind, a, b, None, None, out, M, N, K, config=config)


def _out_dtype(dtype_name):
    return torch.bfloat16 if dtype_name == "fp8" else getattr(torch, dtype_name)


_worker_inputs: dict = {}


def compile_job(job) -> str | None:
    """In a worker process: run one (kind, config, shape, dtype) once, so that Triton compiles it
    into its on-disk cache; returns None or the error's first line."""
    kind, config, shape, dtype_name = job
    try:
        if (shape, dtype_name) not in _worker_inputs:
            _worker_inputs.clear()  # one shape's operands at a time
            _worker_inputs[(shape, dtype_name)] = _sweep_inputs(shape, dtype_name)
        inputs = _worker_inputs[(shape, dtype_name)]
        out = torch.empty(shape[:2], dtype=_out_dtype(dtype_name), device=runtime.DEVICE)
        _sweep_call(kind, config, shape, dtype_name, inputs, out)()
        torch.cuda.synchronize()
        return None
    except Exception as error:  # reported again, and skipped, by the timing loop
        return _first_line(error)[:100]


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _compile_signature(kind, config, shape, dtype_name):
    # What decides a separate compile: the kernel, its config, the dtype, which of M, N, K are
    # multiples of 16 (Triton's integer specialisation) and, for one program per tile, the shape.
    shape_key = shape if config.get("PER_SM", 1) == 0 else tuple(d % 16 == 0 for d in shape)
    return kind, config_label(config), dtype_name, shape_key


def precompile(jobs: list, workers: int, budget_s: float, log) -> None:
    """Compile `jobs` (kind, config, shape, dtype) in `workers` spawned processes, one per distinct
    compile, for at most budget_s; what is left compiles in the timing loop."""
    import concurrent.futures as cf
    import multiprocessing

    from week3_triton_kernels import matmul_bench  # compile_job by its importable name (not __main__)

    distinct = {}
    for job in jobs:
        distinct.setdefault(_compile_signature(*job), job)
    started = time.perf_counter()
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    futures = [pool.submit(matmul_bench.compile_job, job) for job in distinct.values()]
    done, pending = cf.wait(futures, timeout=budget_s)
    failed = sum(1 for f in done if f.exception() is None and f.result() is not None)
    pool.shutdown(wait=not pending, cancel_futures=True)
    log(f"precompiled {len(done)} of {len(futures)} distinct kernels in {workers} processes in "
        f"{time.perf_counter() - started:.0f} s ({failed} failed, {len(pending)} left to the timing loop)")


def _paths(kind, config, inputs, out, dtype_name) -> str:
    """Which of the launchers' paths the candidate ran: how C is stored (and B read)."""
    a, b = inputs[:2]
    if kind == "tma":
        return "C: TMA store" if stores_c_through_tma(out, a.element_size(), config) else "C: masked stores"
    if dtype_name != "fp8" and row_align(a, b, out) > 1:
        return "rows aligned: in place, vector stores"
    return ""


def _timed(fn, warmup_ms, rep_ms):
    """fn's Timing (whether the host paced it too: the tuned entries keep it, bench.timing_fields)."""
    from course import bench
    if runtime.on_gpu():
        return bench.time_gpu(fn, [()], warmup_ms=warmup_ms, rep_ms=rep_ms)
    return bench.time_host(fn, [()], budget_s=0.02)  # the interpreter: plumbing only


def _reference(inputs, dtype_name):
    if dtype_name == "fp8":
        a, b, sa, sb = inputs
        return (lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16),
                matmul_fp8_torch(a, b, sa, sb).float())
    a, b = inputs
    return (lambda: torch.matmul(a, b)), a.float() @ b.float()


def sweep(dtypes=("float16", "bfloat16"), shapes=SWEEP_SHAPES, *, kinds=SWEEP_KINDS, candidates=None,
          workers: int = 12, budget_s: float = 210.0, warmup_ms: float = 5.0, rep_ms: float = 25.0,
          out_dir=None) -> list[dict]:
    """Time the candidates (default SWEEP_CANDIDATES / FP8_SWEEP_CANDIDATES) of each kernel in `kinds`
    at each shape and dtype beside cuBLAS; print the table; write dispatch_matmul.json to out_dir
    (default results/); return its entries. Runs under the interpreter too (tiny shapes, host times:
    a check of the plumbing, which writes a file marked simulated that no launcher reads)."""
    from course import bench, dispatch

    from week3_triton_kernels.matmul_dispatch import TABLE

    started = time.perf_counter()
    log_lines = []

    def log(line):
        log_lines.append(line)

    def candidates_for(dtype_name):
        table = candidates or (FP8_SWEEP_CANDIDATES if dtype_name == "fp8" else SWEEP_CANDIDATES)
        return [(kind, config) for kind in kinds if kind in table for config in table[kind]]

    combos = [(shape, name) for name in dtypes for shape in (FP8_SHAPES if name == "fp8" and shapes is SWEEP_SHAPES
                                                              else shapes)]
    if not runtime.has_capability((9, 0), instead="the sweep times the tiled and persistent rungs, not tma"):
        kinds = tuple(k for k in kinds if k != "tma")
    if runtime.on_gpu() and workers > 0:
        jobs = [(kind, config, shape, name) for shape, name in combos for kind, config in candidates_for(name)]
        precompile(jobs, workers, budget_s * 0.45, log)
        print(log_lines[-1], flush=True)
    entries, rows = [], []
    for index, (shape, name) in enumerate(combos):
        M, N, K = shape
        deadline = time.perf_counter() + (budget_s - (time.perf_counter() - started)) / (len(combos) - index)
        # M, N, K bound now: the table printed after the loop calls each row's own function
        tflops = lambda ms, M=M, N=N, K=K: 2 * M * N * K / (ms * 1e-3) / 1e12  # noqa: E731
        inputs = _sweep_inputs(shape, name)
        out = torch.empty((M, N), dtype=_out_dtype(name), device=runtime.DEVICE)
        reference, want = _reference(inputs, name)
        cublas_ms = _timed(reference, warmup_ms, 4 * rep_ms).median_ms
        log(f"\n{name} {M}x{N}x{K}: cuBLAS {cublas_ms:.4f} ms {tflops(cublas_ms):.1f} TFLOP/s")
        best = {}  # kind -> (ms, config, Timing)
        todo = candidates_for(name)
        for number, (kind, config) in enumerate(todo):
            if time.perf_counter() > deadline:
                log(f"  time budget spent: {len(todo) - number} candidates not timed")
                break
            fn = _sweep_call(kind, config, shape, name, inputs, out)
            try:
                out.fill_(float("nan"))  # a config that skips tiles shows as NaN, not as a stale result
                timing = _timed(fn, warmup_ms, rep_ms)
                ms = timing.median_ms
            except Exception as error:  # does not compile or does not fit: say so, go on
                log(f"  {kind:<10} {config_label(config):<32} failed: {_first_line(error)[:70]}")
                continue
            err = float((out.float() - want).abs().max() / want.abs().max().clamp_min(1e-30))
            ok = err <= SWEEP_WRONG  # NaN fails
            log(f"  {kind:<10} {config_label(config):<32} {bench.ms_cell(bench.timing_fields(timing), '8.4f')} ms "
                f"{tflops(ms):7.1f} TFLOP/s "
                f"{cublas_ms / ms:5.2f}x cuBLAS  {_paths(kind, config, inputs, out, name)}"
                + ("" if ok else f"  WRONG (rel err {err:.2g})"))
            if ok and (kind not in best or ms < best[kind][0]):
                best[kind] = (ms, config, timing)
        cublas_ms = min(cublas_ms, _timed(reference, warmup_ms, 4 * rep_ms).median_ms)  # the faster of before/after
        measured = lambda t: {**bench.timing_fields(t), "ms": round(t.median_ms, 5),  # noqa: E731
                              "tflops": round(tflops(t.median_ms), 1), "cublas_ms": round(cublas_ms, 5),
                              "cublas_tflops": round(tflops(cublas_ms), 1), "vs_cublas": round(cublas_ms / t.median_ms, 3)}
        key = [M, N, K, "float8_e4m3fn" if name == "fp8" else name]
        for kind, (ms, config, timing) in best.items():  # each rung's fastest tile, for a call that names the rung
            entries.append({"key": key + [kind], "rung": kind, "tile": config, "measured": measured(timing)})
        if best:  # the choice: the fastest rung and its tile, for a call that names none
            kind, (ms, config, timing) = min(best.items(), key=lambda kv: kv[1][0])
            entries.append({"key": key, "rung": kind, "tile": config, "measured": measured(timing)})
        rows.append((shape, name, best, cublas_ms, tflops))
        del inputs, out, want
        if runtime.on_gpu():
            torch.cuda.empty_cache()
    _print_sweep_table(rows)
    how = "python -m week3_triton_kernels.matmul_bench --sweep --dtypes " + " ".join(dtypes)
    path = dispatch.save(Path(out_dir) if out_dir else TABLE.results, "matmul", entries, how)
    TABLE.forget()
    if out_dir:  # every candidate's line: a file beside the table (the device call's output is short)
        (Path(out_dir) / "sweep_matmul.log").write_text("\n".join(log_lines) + "\n")
        print(f"every candidate's time: {Path(out_dir) / 'sweep_matmul.log'}")
    else:
        print("\n".join(log_lines))
    print(f"wrote {path}; swept in {time.perf_counter() - started:.0f} s")
    return entries


def _print_sweep_table(rows) -> None:
    from course import bench_timing

    print(f"\n{'shape':<16} {'dtype':<9} {'kernel':<10} {'best config':<32} {'TFLOP/s':>8} {'cuBLAS':>7} {'ratio':>6}")
    marked = []
    for shape, name, best, cublas_ms, tflops in rows:
        label = "x".join(map(str, shape))
        if not best:
            print(f"{label:<16} {name:<9} no candidate ran correctly (see the log)")
        for kind, (ms, config, timing) in sorted(best.items(), key=lambda kv: kv[1][0]):
            marked.append(bench_timing.row_fields(timing))  # * where the host paced the winner's time
            print(f"{label:<16} {name:<9} {kind:<10} {config_label(config):<32} "
                  f"{bench_timing.mark(f'{tflops(ms):8.1f}', marked[-1])} {tflops(cublas_ms):7.1f} {cublas_ms / ms:5.2f}x")
            label, name = "", ""  # the fastest kernel first; the shape and dtype once
    print(bench_timing.footnote(marked), end="")


def _shape(text: str) -> tuple[int, int, int]:
    try:
        M, N, K = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is MxNxK, e.g. 4096x4096x4096, got {text!r}") from None
    return M, N, K


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", action="store_true", help="time each kernel's configs per shape (GPU)")
    parser.add_argument("--dtypes", nargs="*", default=["float16", "bfloat16"],
                        help="float16, bfloat16 and/or fp8 (default: float16 bfloat16)")
    parser.add_argument("--shapes", nargs="*", type=_shape, default=SWEEP_SHAPES,
                        help="MxNxK problems (default: 4096^3, 8192^3, 5000x3000x4000)")
    parser.add_argument("--kinds", nargs="*", default=list(SWEEP_KINDS), choices=SWEEP_KINDS)
    parser.add_argument("--out", help="folder for dispatch_matmul.json and the log (default: results/)")
    parser.add_argument("--budget-s", type=float, default=210.0,
                        help="seconds for the whole sweep, compiles included (default 210)")
    parser.add_argument("--jobs", type=int, default=12,
                        help="processes compiling the candidates first (0: compile while timing)")
    args = parser.parse_args(argv)
    if not args.sweep:
        parser.print_help()
        return 2
    bad = [d for d in args.dtypes if d not in ("float16", "bfloat16", "fp8")]
    if bad:
        parser.error(f"--dtypes takes float16, bfloat16, fp8; got {bad}")
    if not runtime.on_gpu() and max(m * n * k for m, n, k in args.shapes) > 128**3:
        parser.error("this machine runs the Triton interpreter: sweep only tiny --shapes here (e.g. 64x48x80)")
    sweep(tuple(args.dtypes), args.shapes, kinds=tuple(args.kinds), workers=args.jobs, budget_s=args.budget_s,
          out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
