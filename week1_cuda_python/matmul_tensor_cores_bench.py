"""The tensor-core matmul's benchmark, tile sweep and SASS dump (its launchers: matmul_tensor_cores.py).

`BENCHMARKS` (found by `python -m course bench week1`): the WMMA rungs and the Hopper rung (wgmma +
TMA, compute capability 9.0 only) against torch.matmul (cuBLAS), with the Hopper rung's row-major
block order as an A/B row. The command line:

    python -m week1_cuda_python.matmul_tensor_cores_bench --sweep [--size N]   (GPU)
    python -m week1_cuda_python.matmul_tensor_cores_bench --sass [--arch sm_XY] [--full] [--out DIR]

--sweep times block / warp tile shapes and pipeline depths of wmma_shared and wmma_cp_async at
N^3 fp16 (default 4096). --sass (needs only nvcc and cuobjdump) prints each kernel's static
instruction mix (HMMA = tensor-core mma, LDSM = ldmatrix, LDGSTS = cp.async, HGMMA = wgmma,
UTMALDG = TMA load); on sm_90 it also disassembles the sm_90a build of kernels/matmul_wgmma.cu.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from course import bench, interop, runtime  # runtime first: chooses the GPU or simulation
from course.rungs import Ladder, Rung as LadderRung
from course.bench import Benchmark, c_function
from course.check import random_tensor
from course.sweep import sweep_main

from week1_cuda_python.hopper_ptx import HOPPER_PTX  # the PTX wrappers' header (one place)
from week1_cuda_python.matmul_tensor_cores import (
    CUDA_SOURCE, RUNGS, TYPE_SUFFIX, WGMMA_SOURCE, TileConfig, WgmmaTiles,
    encoded_tensor_map, launch_wgmma, launch_wmma, tensor_map, wgmma_nvcc_command, wgmma_unsupported)
from week1_cuda_python.matmul_wgmma_persistent import PERSISTENT_SOURCE, launch_persistent

PROG = "python -m week1_cuda_python.matmul_tensor_cores_bench"


# --- benchmark ---------------------------------------------------------------------------------

def _inputs(size):
    n, dtype = size
    device = runtime.DEVICE
    # B scaled by 1/sqrt(n) keeps C ~ N(0, 1): no fp16 overflow however large n is.
    return (random_tensor((n, n), dtype, device), random_tensor((n, n), dtype, device, scale=n**-0.5),
            torch.empty((n, n), dtype=dtype, device=device))


def _size_label(size) -> str:
    n, dtype = size
    return f"{n}^3 {TYPE_SUFFIX[dtype]}"


def _c(*names):
    return [c_function(CUDA_SOURCE, name) for name in names]


def _ptx(*names):
    """The PTX wrappers a variant calls, from the course's one copy (kernels/hopper_ptx.cuh)."""
    return [c_function(HOPPER_PTX, name) for name in names]


# What each variant runs, for the LoC column: the kernel body, its device helpers, the launcher.
_SHARED_HELPERS = ("mma_warp_tile", "load_shared", "store_warp_tile", "store_fragment")
_SOURCES = {
    "wmma_naive": _c("wmma_naive_body", "store_fragment") + [launch_wmma],
    "wmma_shared": _c("wmma_shared_body", "copy_tile_sync", *_SHARED_HELPERS) + [launch_wmma],
    "wmma_cp_async": _c("wmma_cp_async_body", "copy_tile_async", "copy16_async", "copy_commit", "copy_wait",
                        *_SHARED_HELPERS) + [launch_wmma],
    "wgmma_tma": [c_function(WGMMA_SOURCE, name) for name in ("wgmma_tma_body", "grouped_tile", "store_pair")]
        + _ptx("mbar_init", "mbar_arrive_expect_tx", "mbar_arrive", "mbar_wait", "tma_load_2d", "smem_desc",
               "wgmma_fence", "wgmma_commit", "wgmma_wait")
        + [launch_wgmma, tensor_map, encoded_tensor_map],
    "wgmma_persistent": [c_function(PERSISTENT_SOURCE, name) for name in ("wgmma_persistent_body", "wp_tile")]
        + _ptx("mbar_init", "mbar_arrive_expect_tx", "mbar_arrive", "mbar_wait", "tma_load_2d", "tma_store_2d",
               "bulk_commit", "bulk_wait_read", "bulk_wait", "fence_async_smem", "warpgroup_sync", "smem_desc",
               "wgmma_fence", "wgmma_commit", "wgmma_wait", "pack2")
        + [launch_persistent, tensor_map, encoded_tensor_map],
}
# The cluster rung is the same body and launcher, plus the cluster helpers.
_SOURCES["wgmma_cluster"] = _SOURCES["wgmma_persistent"] + _ptx(
    "cluster_rank", "cluster_sync", "mbar_arrive_remote", "tma_load_2d_multicast")
# The wgmma row runs where it can: on an H100/H200, and (skipped as "needs a GPU") in simulation.
_WGMMA_ROWS = ("wgmma_tma",) if wgmma_unsupported(runtime.capability()) is None else ()
# The same kernel in plain row-major block order (group_m = 1), not a rung: the A/B measurement of
# what the grouped order (kernels/matmul_wgmma.cu, "Block order") buys, at 8192^3 above all.
_ROW_MAJOR = WgmmaTiles(group_m=1)
_WGMMA_AB_ROWS = ("wgmma_tma_row_major",) if _WGMMA_ROWS else ()
# The rung above (matmul_wgmma_persistent.py: persistent grid, TMA-store epilogue), same GPUs; its own
# benchmark (matmul_wgmma_persistent_bench.py) times it against cuBLAS in interleaved rounds.
_PERSISTENT_ROWS = ("wgmma_persistent", "wgmma_cluster") if _WGMMA_ROWS else ()

BENCHMARKS = [
    Benchmark(
        name="matmul_tc_week1",
        title="Matmul on tensor cores, WMMA in CUDA C (fp16/bf16 in, fp32 accumulate) vs cuBLAS",
        # The last size is the headline (README table and roofline): 4096^3 fp16.
        sizes=[(2048, torch.float16), (8192, torch.float16), (4096, torch.bfloat16), (4096, torch.float16)],
        sim_sizes=[(32, torch.float16)],
        size_label=_size_label,
        make_inputs=_inputs,
        variants={
            "torch": lambda a, b, out: torch.matmul(a, b, out=out),
            **{f"wmma_{rung}": (lambda rung: lambda a, b, out: launch_wmma(rung, a, b, out, None))(rung)
               for rung in RUNGS},
            **{label: lambda a, b, out: launch_wgmma(a, b, out, None) for label in _WGMMA_ROWS},
            **{label: lambda a, b, out: launch_wgmma(a, b, out, None, _ROW_MAJOR) for label in _WGMMA_AB_ROWS},
            **{label: (lambda c: lambda a, b, out: launch_persistent(a, b, out, cluster=c, schedule="cooperative"))(label.endswith("cluster") + 1)
               for label in _PERSISTENT_ROWS},
        },
        gpu_only=(*(f"wmma_{rung}" for rung in RUNGS), *_WGMMA_ROWS, *_WGMMA_AB_ROWS, *_PERSISTENT_ROWS),
        headline=(*(f"wmma_{rung}" for rung in RUNGS), *_WGMMA_ROWS),
        # Also replayed from a CUDA graph (rows "<label>_graph"): the GPU's time without the Python
        # launcher's, which at 2048^3 (~30 us of work) is most of a call.
        graphed=("torch", *_WGMMA_ROWS),
        bytes=lambda size: 3 * 2 * size[0] ** 2,
        flops=lambda size: 2 * size[0] ** 3,
        compute_dtype=torch.float16,
        sources={label: spec for label, spec in _SOURCES.items() if not label.startswith("wgmma") or _WGMMA_ROWS},
        notes="FLOPs = 2 n^3; bytes = 2 (n^2 A + n^2 B + n^2 C), each matrix once; torch = "
              "torch.matmul (cuBLAS) in the size's dtype; C in the inputs' dtype; wgmma_tma only on "
              "compute capability 9.0 (H100/H200); wgmma_tma_row_major = the same kernel with "
              "row-major block order (-DWG_GROUP_M=1), the A/B of the grouped order; wgmma_persistent "
              "(the rung above, sm_90a too): persistent grid, TMA-store epilogue; wgmma_cluster: the same "
              "with 2-block clusters multicasting B",
    ),
]

# The ladder, runnable by number: `python -m course rung matmul_tensor_cores 3` (course/rungs.py).
# fp16 operands, fp32 accumulation over K, C rounded to fp16 once: against cuBLAS (the same
# arithmetic in another order) the norm-wise difference is about one fp16 rounding, 2^-11 ~ 5e-4;
# 5e-3 catches a wrong fragment, tile or tail. The wgmma rung only where it runs (sm_90).
LADDERS = [Ladder("matmul_tensor_cores", BENCHMARKS[0],
                  [LadderRung(f"wmma_{name}", rung.what) for name, rung in RUNGS.items()]
                  + [LadderRung(label, "wgmma + TMA: warpgroup MMAs fed by the copy engine through an "
                                       "mbarrier ring, producer and consumer warpgroups (sm_90a)")
                     for label in _WGMMA_ROWS]
                  + [LadderRung(label, story) for label, story in zip(_PERSISTENT_ROWS, (
                      "persistent: one block per SM walks the tiles in grouped order, the epilogue stored by "
                      "the TMA from shared memory while the next tile loads",
                      "clusters of 2 blocks on adjacent tiles: each loads half of their common B tile and the "
                      "TMA multicasts it to both"))],
                  rel_tol=5e-3)]


# --- the tile sweep (GPU) ------------------------------------------------------------------------

SWEEP_CONFIGS = [
    TileConfig(128, 128, 32, 64, 64, 2),  # the default
    TileConfig(128, 128, 32, 64, 32, 2),  # 8 warps, smaller warp tiles
    TileConfig(128, 128, 32, 32, 64, 2),
    TileConfig(64, 128, 32, 32, 64, 2),
    TileConfig(128, 128, 16, 64, 64, 3),  # shallower k slices buy pipeline depth within 48 KB
    TileConfig(128, 128, 16, 64, 64, 4),
    TileConfig(128, 256, 16, 64, 64, 2),  # 8 warps on a wider tile: more reuse per L2 byte
    TileConfig(128, 256, 16, 64, 64, 3),
    TileConfig(256, 128, 16, 64, 64, 2),
    TileConfig(64, 64, 32, 32, 32, 2),
]


def sweep(size: int = 4096, configs=SWEEP_CONFIGS) -> list[dict]:
    """Time wmma_shared and wmma_cp_async for each tile configuration at size^3 fp16 (GPU only)."""
    if not runtime.on_gpu():
        raise RuntimeError("the sweep times PyCUDA launches: it needs an NVIDIA GPU")
    n = size
    a, b, out = _inputs((n, torch.float16))
    flops = 2 * n**3
    reference = a.double() @ b.double()
    cublas = bench.timing_fields(bench.time_gpu(lambda: torch.matmul(a, b, out=out), [()]))
    cublas_tflops = flops / (cublas["ms"] * 1e-3) / 1e12
    print(f"torch.matmul fp16 (cuBLAS) {n}^3: {bench.ms_cell(cublas, '.3f')} ms, {cublas_tflops:.1f} TFLOP/s")
    print(f"{'tiles':<48} {'rung':<9} {'ms':>8} {'TFLOP/s':>8} {'vs cuBLAS':>9} {'max rel err':>11}")
    rows = []
    for config in configs:
        problems = config.problems()
        if problems:
            print(f"{config.label():<48} skipped: {'; '.join(problems)}")
            continue
        for rung in ("shared", "cp_async"):
            try:
                timing = bench.time_gpu(lambda: launch_wmma(rung, a, b, out, None, config), [()])
            except Exception as error:  # a config that fails to compile or launch: report, go on
                print(f"{config.label():<48} {rung:<9} failed: {str(error).splitlines()[0][:80]}")
                continue
            err = float(((out.double() - reference).abs().max() / reference.abs().max()))
            tflops = flops / (timing.median_ms * 1e-3) / 1e12
            rows.append({"tiles": config, "rung": rung, **bench.timing_fields(timing), "tflops": tflops})
            print(f"{config.label():<48} {rung:<9} {bench.ms_cell(rows[-1], '8.3f')} {tflops:8.1f} "
                  f"{tflops / cublas_tflops:8.1%} {err:11.2e}")
    print(bench.footnote(rows + [cublas]), end="")
    return rows


# --- the SASS dump (nvcc + cuobjdump) --------------------------------------------------------------

SASS_OPCODES = ("HMMA", "HGMMA", "LDSM", "LDGSTS", "UTMALDG", "LDS", "LDG", "LD", "STS", "STG", "BAR")
_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def sass_opcode_counts(sass: str) -> dict[str, dict[str, int]]:
    """{kernel: {opcode family: count}} from `cuobjdump -sass` text (static instruction counts)."""
    counts: dict[str, dict[str, int]] = {}
    current = None
    for line in sass.splitlines():
        if "Function :" in line:
            current = line.split("Function :")[1].strip()
            counts[current] = dict.fromkeys(SASS_OPCODES, 0)
            continue
        match = _SASS_LINE.search(line)
        if current is not None and match and match.group(1) in counts[current]:
            counts[current][match.group(1)] += 1
    return counts


def dump_sass(arch: str = "sm_90", out_dir: Path | None = None, full: bool = False) -> Path:
    """Compile kernels/matmul_tc.cu for `arch` (sm_90a: kernels/matmul_wgmma.cu, the Hopper rung),
    print each kernel's instruction mix, save the SASS."""
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="matmul_tc_sass_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    source = WGMMA_SOURCE if arch == "sm_90a" else CUDA_SOURCE
    cubin = out_dir / f"{source.stem}.{arch}.cubin"
    if arch == "sm_90a":
        compiled = subprocess.run(wgmma_nvcc_command(cubin, runtime.nvcc_path() or "nvcc"),
                                  capture_output=True, text=True)
    else:
        compiled = interop.nvcc_compile(CUDA_SOURCE, arch, out_dir)
    if compiled.returncode != 0:
        raise RuntimeError(f"nvcc failed for {arch}:\n{compiled.stderr}")
    return _print_sass(cubin, arch, full)


def _print_sass(cubin: Path, arch: str, full: bool) -> Path:
    if shutil.which("cuobjdump") is None:
        raise RuntimeError("cuobjdump (CUDA toolkit) is not on PATH: cannot disassemble " + str(cubin))
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    path = cubin.with_suffix(".sass")
    path.write_text(sass)
    if full:
        print(sass)
    counts = sass_opcode_counts(sass)
    print(f"static instruction counts per kernel ({arch}); full SASS in {path}")
    print(f"{'kernel':<26}" + "".join(f"{op:>8}" for op in SASS_OPCODES))
    for kernel in sorted(counts):
        print(f"{kernel:<26}" + "".join(f"{counts[kernel][op]:>8}" for op in SASS_OPCODES))
    return path


def sass_main(argv: list[str]) -> int:
    """`--sass [--arch sm_XY] [--full] [--out DIR]`: dump_sass for this GPU's architecture (else
    sm_90), and on sm_90 for sm_90a too: on Hopper the ladder goes one rung further, wgmma (HGMMA)
    fed by the TMA (UTMALDG)."""
    parser = argparse.ArgumentParser(prog=PROG, description="the instruction mix of every kernel (cuobjdump)")
    parser.add_argument("--sass", action="store_true", required=True, help="instruction mix of every kernel")
    parser.add_argument("--arch", default=None, help="sm_75, sm_90, ... (default: this GPU, else sm_90); "
                        "sm_90a disassembles the wgmma rung (kernels/matmul_wgmma.cu)")
    parser.add_argument("--full", action="store_true", help="print the whole SASS listing")
    parser.add_argument("--out", default=None, help="folder for the cubin and .sass files")
    args = parser.parse_args(argv)
    arch = args.arch
    if arch is None:
        major, minor = runtime.capability() or (9, 0)
        arch = f"sm_{major}{minor}"
    out = Path(args.out) if args.out else None
    dump_sass(arch, out, full=args.full)
    if arch == "sm_90":
        dump_sass("sm_90a", out, full=args.full)
    return 0


def main(argv=None) -> int:
    """--sass (sass_main), else the sweep's command line (course.sweep.sweep_main: --sweep [--size N])."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--sass" in argv:
        return sass_main(argv)

    def options(parser):
        parser.add_argument("--size", type=int, default=4096, help="n for --sweep (default 4096)")

    return sweep_main(sweep, argv, doc=__doc__, prog=PROG, gpu_only=True, options=options,
                      help="time tile shapes at n^3 fp16 (`--sass --help`: the SASS dump)")


if __name__ == "__main__":
    sys.exit(main())
