"""Plant known bugs of each blind-spot class in a scratch copy of the course and see the suite go red.

Issue 17's audit found bugs the suite could not see: a reused decoder with stale state, paths that
only start at larger sizes (a deeper recursion, a second quantization group, offsets past 2^31),
non-dense layouts, races and CUDA C vector tails. Each PLANT below is one such bug, written as an
exact text replacement in one source file, with the tests that must now fail. The tool copies the
working tree (tracked and untracked files, not .git) to a temporary folder, applies one plant,
runs its tests there and reports red (caught) or green (the bug survives: a blind spot). The
working tree is never modified, so it is safe while others run tests in it.

    python tools/plant_bugs.py --list
    python tools/plant_bugs.py                  # every plant this machine can run (GPU ones need a GPU)
    python tools/plant_bugs.py scan_recursion nf4_second_group
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Plant:
    name: str
    bug_class: str
    path: str
    old: str
    new: str
    tests: tuple  # pytest arguments (node ids, -k expressions)
    gpu: bool = False  # only a GPU can show it (races, CUDA C launches)


PLANTS = [
    # --- stateful objects reused -----------------------------------------------------------------
    Plant("decoder_cache_not_rewound", "reuse", "week5_integration/inference.py",
          "        self.cache.length = 0\n        logits = self.model(idx, cache=self.cache)",
          "        logits = self.model(idx, cache=self.cache)",
          ("tests/week5/test_inference.py", "-k", "reused")),
    Plant("conv_filter_cached_by_shape", "reuse", "week1_cuda_python/conv2d.py",
          "    return _numba_kernel(kind, host.tobytes(), host.shape[0])\n",
          "    cache = _compiled_for.__dict__.setdefault('planted', {})\n"
          "    if (kind, host.shape[0]) not in cache:\n"
          "        cache[kind, host.shape[0]] = _numba_kernel(kind, host.tobytes(), host.shape[0])\n"
          "    return cache[kind, host.shape[0]]\n",
          ("tests/week1/test_conv2d.py", "-k", "reused")),
    Plant("graph_step_keeps_its_first_input", "reuse", "week2_pytorch_optimizations/compile_benchmark.py",
          "    def graph_step(x):\n        if x.data_ptr() != static_x.data_ptr():\n            static_x.copy_(x)\n",
          "    def graph_step(x):\n        if False:\n            static_x.copy_(x)\n",
          ("tests/week2/test_compile_benchmark.py", "-k", "reused"), gpu=True),
    # --- paths that start only at larger sizes -------------------------------------------------------
    Plant("scan_recursion_one_tile", "size", "week1_cuda_python/scan.py",
          "        _numba_multiblock(totals, offsets, True, threads)\n",
          "        _NUMBA['blelloch', x.dtype][1, threads](interop.to_numba(totals), interop.to_numba(offsets),"
          " interop.to_numba(torch.empty(1, dtype=x.dtype)), 1)\n",
          ("tests/week1/test_scan.py", "-k", "numba_multiblock")),
    Plant("nf4_second_group", "size", "week5_integration/nf4.py",
          "absmax_step_ptr + (block >> 8)", "absmax_step_ptr + (block >> 9)",
          ("tests/week5/test_nf4.py",)),
    Plant("int32_offsets_mul_add", "size", "week3_triton_kernels/fused_elementwise.py",
          "    pid = tl.program_id(0)\n    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n"
          "    mask = offsets < n\n    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)\n"
          "    y = tl.load(y_ptr",
          "    pid = tl.program_id(0)\n    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)\n"
          "    mask = offsets < n\n    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)\n"
          "    y = tl.load(y_ptr",
          ("tests/week3/test_fused_elementwise.py", "-k", "past")),
    Plant("int32_offsets_softmax_rows", "size", "week3_triton_kernels/softmax.py",
          "    row = tl.program_id(0).to(tl.int64)  # int64: row * stride passes 2^31 on big inputs",
          "    row = tl.program_id(0)",
          ("tests/week3/test_softmax.py", "-k", "past")),
    Plant("matmul_out_span_unchecked", "size", "week3_triton_kernels/matmul_basic.py",
          'for name, t in (("a", a), ("b", b), ("out", out)):', 'for name, t in (("a", a), ("b", b)):',
          ("tests/week3/test_matmul.py", "-k", "past")),
    Plant("lora_out_span_unchecked", "size", "week5_integration/lora_kernels.py",
          "    check_int32_span(out, name)  # the stores' offsets are int32 too\n", "",
          ("tests/week5/test_lora.py", "-k", "spans")),
    # --- non-dense layouts -------------------------------------------------------------------------
    Plant("lora_ignores_x_row_stride", "layout", "week5_integration/lora_kernels.py",
          "    args = (p, q, u, v, out, xa_out if store_xa else out, M, N, K, R, scale,\n            p.stride(0),",
          "    args = (p, q, u, v, out, xa_out if store_xa else out, M, N, K, R, scale,\n            p.shape[1],",
          ("tests/week5/test_lora.py", "-k", "non_dense")),
    Plant("nf4_matmul_assumes_dense_x_rows", "layout", "week5_integration/nf4.py",
          "            x2.stride(0), x2.stride(1), y.stride(0), y.stride(1))",
          "            K, 1, y.stride(0), y.stride(1))",
          ("tests/week5/test_nf4.py", "-k", "non_dense")),
    Plant("int8_matmul_takes_strided_x", "layout", "week5_integration/quantization.py",
          '    validate.tensor(x, "x", dtypes=X_DTYPES, ndim=2)',
          '    validate.tensor(x, "x", dtypes=X_DTYPES, ndim=2, contiguous=False)',
          ("tests/week5/test_quantization.py", "-k", "non_dense")),
    Plant("copy2d_out_column_stride_ignored", "layout", "week3_triton_kernels/access_patterns.py",
          '    validate.tensor(out, "out", dtypes=(x.dtype,))\n    if tuple(out.shape) != tuple(shape):',
          '    validate.tensor(out, "out", dtypes=(x.dtype,), contiguous=False)\n    if tuple(out.shape) != tuple(shape):',
          ("tests/week3/test_access_patterns.py", "-k", "other_layouts")),
    # --- races (a GPU runs threads concurrently; the simulator runs them one by one) --------------
    Plant("histogram_global_without_atomic", "race", "week1_cuda_python/histogram.py",
          "            cuda.atomic.add(counts, value, 1)\n", "            counts[value] += 1\n",
          ("tests/week1/test_histogram.py", "-k", "contention and numba_global"), gpu=True),
    Plant("histogram_merge_without_atomic", "race", "week1_cuda_python/kernels/histogram.cu",
          "            atomicAdd(counts + b, total);", "            counts[b] += total;",
          ("tests/week1/test_histogram.py", "-k", "contention and (per_warp or per_lane)"), gpu=True),
    Plant("reduction_block_sum_without_atomic", "race", "week1_cuda_python/kernels/reduction.cu",
          "            atomicAdd(out, acc);", "            *out += acc;",
          ("tests/week1/test_reduction.py", "-k", "contention and warp_shuffle"), gpu=True),
    Plant("reduction_tree_without_atomic", "race", "week1_cuda_python/reduction.py",
          "        cuda.atomic.add(out, 0, partial[0])", "        out[0] += partial[0]",
          ("tests/week1/test_reduction.py", "-k", "contention and shared_tree"), gpu=True),
    # --- CUDA C vector tails --------------------------------------------------------------------------
    Plant("vec4_tail_dropped", "tail", "week1_cuda_python/kernels/vector_add.cu",
          "    if (tail < n) {", "    if (tail < 4 * n4) {",
          ("tests/week1/test_vector_add.py", "-k", "vec4_tails"), gpu=True),
    Plant("reduction_float4_tail_dropped", "tail", "week1_cuda_python/kernels/reduction.cu",
          "    for (long long i = 4 * n4 + start; i < n; i += stride) {",
          "    for (long long i = 4 * n4 + start; i < 4 * n4; i += stride) {",
          ("tests/week1/test_reduction.py", "-k", "float4_tails"), gpu=True),
    Plant("histogram_vector_tail_dropped", "tail", "week1_cuda_python/kernels/histogram.cu",
          "    for (long long i = vectors * per_vector + first; i < n; i += grid) {",
          "    for (long long i = vectors * per_vector + first; i + per_vector < n; i += grid) {",
          ("tests/week1/test_histogram.py", "-k", "vector_tails"), gpu=True),
    Plant("lookback_last_tile_vectorized", "tail", "week1_cuda_python/kernels/scan.cu",
          "    const bool full_tile = vectorize && (tile + 1) * LOOKBACK_TILE <= n;",
          "    const bool full_tile = vectorize && tile * LOOKBACK_TILE < n;",
          ("tests/week1/test_scan.py", "-k", "lookback_vector_tails"), gpu=True),
    Plant("tile64_odd_width_column_dropped", "tail", "week1_cuda_python/kernels/transpose.cu",
          "            if (row < rows && c + 1 < cols) {",
          "            if (row < rows && c + 2 < cols) {",
          ("tests/week1/test_transpose.py", "-k", "tile64_vector_tails"), gpu=True),
]


def _on_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def _copy_tree(dst: Path) -> None:
    """The working tree's files (git's tracked and unignored ones; everything but caches without git)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True)
    if listed.returncode != 0:  # a copy of the tree without .git (the GPU machine's)
        shutil.copytree(ROOT, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", "__pycache__", ".devwheels", "*.egg-info", ".pytest_cache"))
        return
    for name in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)


def run(plant: Plant, scratch: Path) -> tuple[bool, str]:
    """(caught, last lines): plant the bug in `scratch`, run its tests, restore the file."""
    target = scratch / plant.path
    original = target.read_text()
    if original.count(plant.old) != 1:
        return False, f"the text to replace occurs {original.count(plant.old)} times in {plant.path}"
    target.write_text(original.replace(plant.old, plant.new))
    try:
        env = dict(os.environ, PYTHONPATH=str(scratch))
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "--slow",
                               *plant.tests], cwd=scratch, env=env, capture_output=True, text=True, timeout=1800)
    finally:
        target.write_text(original)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    failed = [line for line in lines if line.startswith("FAILED")]
    return done.returncode == 1 and bool(failed), "\n".join(failed[:3] + lines[-1:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="plants to run (default: all this machine can run)")
    parser.add_argument("--list", action="store_true", help="list the plants")
    args = parser.parse_args(argv)
    if args.list:
        for p in PLANTS:
            print(f"{p.name:36} {p.bug_class:7} {'GPU' if p.gpu else 'any':4} {p.path}")
        return 0
    unknown = set(args.names) - {p.name for p in PLANTS}
    if unknown:
        parser.error(f"unknown plants: {', '.join(sorted(unknown))}")
    gpu = _on_gpu()
    chosen = [p for p in PLANTS if (p.name in args.names if args.names else gpu or not p.gpu)]
    survived = 0
    with tempfile.TemporaryDirectory(prefix="plant-") as tmp:
        scratch = Path(tmp)
        _copy_tree(scratch)
        for plant in chosen:
            caught, tail = run(plant, scratch)
            survived += not caught
            print(f"{'RED (caught)' if caught else 'GREEN (survived!)':18} {plant.bug_class:7} {plant.name}\n"
                  + "\n".join("    " + line for line in tail.splitlines()), flush=True)
    print(f"{len(chosen) - survived} of {len(chosen)} planted bugs caught")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
