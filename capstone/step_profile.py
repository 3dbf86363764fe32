"""Where a training step's GPU time goes: the step profiled, its kernels sorted into kinds, and the
bounds those kinds set on how fast the step could be.

`capstone.measure` profiles the fast model, the twins and the fused GEMMs' graphed steps with
`profile_steps` (profile.md: every kernel with its kind); `capstone.summary` reads two CUDA-graphed
profiles' kinds side by side (`kinds_of`, `step_bounds`) to say what limits the fast model against the
compiled twin, and each fused road's against the twin's (`fused_road_limits`): what its GEMMs added,
what its fusions removed.
"""
from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from course import runtime

if TYPE_CHECKING:
    from capstone.train import Trainer


ROOT = Path(__file__).resolve().parent.parent
COURSE_GEMM = "matmul (course fused GEMM)"
# Where the course's GEMM kernels are named: week 1's CUDA C entry points (`WF_ENTRY(wgmma_linear_swiglu_bf16, ...)`:
# the fused GEMMs wgmma_gemms runs, and the plain, persistent, cluster and ping-pong rungs they are built on) and
# week 4's fused linears (the @triton.jit kernels of kernel.py and kernel_tma.py, the tiled and the TMA rung, which
# fused_gemms runs; the norm prologue's row_rstd_kernel is a norm's reduction and stays one).
CUDA_GEMM_SOURCES = ("week1_cuda_python/kernels", "matmul_wgmma*.cu")
TRITON_GEMM_SOURCES = ("week4_triton_dl/fused_linear", "kernel*.py")
CUDA_ENTRY = re.compile(r"^\s*[A-Z_]+_ENTRY\((\w+)\s*,", re.M)            # an entry point's macro use (not its #define)
TRITON_KERNEL = re.compile(r"^@triton\.jit\s*\ndef (\w+)\(", re.M)


def course_gemm_kernels(root: Path = ROOT) -> tuple[str, ...]:
    """The names the course's GEMM kernels launch under (a profile's kernel names), read from their sources,
    so a kernel renamed or added there is classified without a second list here."""
    names = []
    for (folder, pattern), found in ((CUDA_GEMM_SOURCES, CUDA_ENTRY), (TRITON_GEMM_SOURCES, TRITON_KERNEL)):
        for path in sorted((root / folder).glob(pattern)):
            names += found.findall(path.read_text())
    return tuple(sorted({name.lower() for name in names}))


# Kernel names by kind, first match wins: the GPU time of a step split by what the kernels do.
# The course's GEMMs come first: their names carry their epilogue (wgmma_linear_swiglu_bf16), which
# the SwiGLU kind would otherwise take. cuBLAS on Hopper names its GEMMs nvjet_* (sm90_xmma/cutlass/
# gemm elsewhere); Inductor's generated kernels start triton_ (poi: pointwise, red/per: reductions);
# the course's other kernels carry their op's name.
# The optimizer comes before the norms: gradient clipping's global norm runs torch's multi-tensor
# and reduction kernels whose names contain "Norm" (LpNormFunctor, NormTwoOps, lpnorm_cleanup).
KERNEL_KINDS = (
    (COURSE_GEMM, course_gemm_kernels()),
    ("matmul (cuBLAS)", ("nvjet", "gemm", "xmma", "cutlass", "cublas", "splitk")),
    # cuDNN's attention backward runs two helpers beside its main kernel: the row term
    # D = rowsum(dO * O) (compute_dot_do_o) and dQ's fp32 -> 16-bit conversion (convert_dq).
    ("attention", ("flash", "attention", "fmha", "sdpa", "attn", "dot_do_o", "convert_dq")),
    ("optimizer (AdamW + gradient clipping)", ("adam", "multi_tensor", "lpnorm", "normtwoops")),
    ("cross-entropy / LM head loss", ("cross_entropy", "nll", "log_softmax", "softmax")),
    ("normalization", ("norm", "rstd")),
    ("RoPE, SwiGLU", ("rope", "swiglu", "rotary", "silu")),
    ("Inductor-generated (fused elementwise/reductions)", ("triton_",)),
    ("copies and fills", ("copy", "memcpy", "memset", "fill", "cat", "elementwise_kernel")),
)


def kernel_kind(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in KERNEL_KINDS if any(k in low for k in keys)), "other")


def ms_by_kind(kernels: list[dict]) -> dict:
    """{kind: GPU ms per step}, largest first, of a profile's kernels ({"kernel", "us_per_step"})."""
    kinds: dict = {}
    for k in kernels:
        kind = kernel_kind(k["kernel"])
        kinds[kind] = kinds.get(kind, 0.0) + k["us_per_step"] / 1e3
    return dict(sorted(kinds.items(), key=lambda kv: -kv[1]))


def profile_steps(trainer: Trainer, steps: int, path: Path, title: str = "the fast model") -> Path:
    """torch.profiler over `steps` training steps: per step the wall time, the GPU's busy time
    (kernels and copies, summed), the host's op count and `aten::copy_` calls, then the top-15
    kernels by GPU time, as markdown."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    trainer.tc = dataclasses.replace(trainer.tc, steps=trainer.step + steps)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    with profile(activities=activities) as prof:
        trainer.run(log_every=steps)
    wall_ms = (time.perf_counter() - started) / steps * 1e3
    events = prof.key_averages()
    # Kernels and copies only: a range that torch.profiler records on the GPU's timeline for a
    # `record_function` (e.g. "Optimizer.step#AdamW.step") is a device event too, but it spans
    # kernels already counted; summing it would count the optimizer twice.
    kernels = [e for e in events if e.device_type == DeviceType.CUDA and e.self_device_time_total > 0
               and not getattr(e, "is_user_annotation", False)]
    gpu_ms = sum(e.self_device_time_total for e in kernels) / steps / 1e3
    copies = sum(e.count for e in events if e.key == "aten::copy_") / steps
    cpu_ops = sum(e.count for e in events if e.device_type == DeviceType.CPU and e.key.startswith("aten::")) / steps
    trainer.profile_kernels = [
        {"kernel": e.key, "kind": kernel_kind(e.key), "calls_per_step": e.count / steps,
         "us_per_step": e.self_device_time_total / steps, "us_per_call": e.self_device_time_total / e.count}
        for e in sorted(kernels, key=lambda e: -e.self_device_time_total)]
    trainer.profile_kinds = ms_by_kind(trainer.profile_kernels)
    kind_table = "| kernels | GPU ms per step |\n|---|---|\n" + "".join(
        f"| {kind} | {ms:.2f} |\n" for kind, ms in trainer.profile_kinds.items())
    every_kernel = "| kernel | kind | calls / step | us / step | us / call |\n|---|---|---|---|---|\n" + "".join(
        f"| `{k['kernel'][:90]}` | {k['kind']} | {k['calls_per_step']:.0f} | {k['us_per_step']:.0f} | "
        f"{k['us_per_call']:.1f} |\n" for k in trainer.profile_kernels)
    sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    try:
        table = events.table(sort_by=sort, row_limit=15, max_name_column_width=80)
    except Exception:  # the key was renamed (device_*) in newer torch
        table = events.table(sort_by=sort.replace("cuda", "device"), row_limit=15, max_name_column_width=80)
    where = runtime.describe().get("gpu") or "CPU (simulation: Python and the Triton interpreter)"
    path.write_text(
        f"# Profile of {title}: {steps} training steps\n\n{where}, torch {torch.__version__}, "
        f"triton {runtime.describe().get('triton')}, config {trainer.cfg.n_layers} x {trainer.cfg.d_model}, "
        f"batch {trainer.tc.batch} x {trainer.batches.seq_len}, sorted by {sort}.\n\n"
        f"Per step (profiled, so slower than the timed steps): wall {wall_ms:.1f} ms, GPU busy {gpu_ms:.1f} ms "
        f"({100 * gpu_ms / wall_ms:.0f}%), {cpu_ops:.0f} aten ops on the host, {copies:.0f} `aten::copy_`.\n\n"
        f"GPU time by kind of kernel (names matched by `capstone.step_profile.KERNEL_KINDS`):\n\n{kind_table}\n"
        f"```\n{table}\n```\n\nEvery kernel of the step (GPU time per step, largest first):\n\n{every_kernel}")
    return path


MATMUL, OPTIMIZER, ATTENTION, GLUE = ("matmul (cuBLAS)", "optimizer (AdamW + gradient clipping)", "attention",
                                      "Inductor-generated (fused elementwise/reductions)")


def kinds_of(row: dict) -> dict:
    """GPU ms per step by kind of kernel of a profiled row, classified by today's KERNEL_KINDS
    when the record lists its kernels (so an older record reads the same way), else as recorded."""
    return ms_by_kind(row["gpu_kernels"]) if row.get("gpu_kernels") else row["gpu_ms_by_kind"]


def step_bounds(fast_kinds: dict, twin_kinds: dict) -> dict:
    """GPU ms per step that the fast model could reach, from the two CUDA-graphed profiles:

    * `floor`: the cuBLAS matmuls and the optimizer alone (both twins run the same ones);
    * `best_today`: the fast step with its attention at the twin's (cuDNN's) time and every
      Inductor-generated kernel gone (the casts, residual adds and embedding glue around the
      course's ops), its other kernels as measured: what fusing around today's kernels could give.
    Ratios against the compiled twin's step follow from these."""
    total = sum(fast_kinds.values())
    floor = fast_kinds.get(MATMUL, 0.0) + fast_kinds.get(OPTIMIZER, 0.0)
    attention_saving = max(0.0, fast_kinds.get(ATTENTION, 0.0) - twin_kinds.get(ATTENTION, 0.0))
    return {"total": total, "floor": floor,
            "best_today": total - attention_saving - fast_kinds.get(GLUE, 0.0)}


def gemm_ms(kinds: dict) -> float:
    """A step's GEMM time: the course's GEMMs and cuBLAS's together (a fused road runs both: its fused forward
    GEMMs are the course's, its backward GEMMs and the rest cuBLAS's)."""
    return kinds.get(COURSE_GEMM, 0.0) + kinds.get(MATMUL, 0.0)


def fused_road_limits(road: dict, other: dict, noise_ms: float = 0.02) -> dict:
    """Where a fused road's graphed step gains and loses GPU time against `other`'s (the twin's, or fast's: the
    same model unfused), by kind (ms per step): `gemm_added` (its GEMMs, course + cuBLAS, minus the other's),
    `removed` (every other kind that shrank, by how much), `grew` (every other kind that grew), each largest first;
    `net` = the road's GPU busy minus the other's. Differences under `noise_ms` are left out of the two lists (not
    of `net`): two 3-step profiles of the same optimizer code differ by 0.01 ms."""
    kinds = (set(road) | set(other)) - {COURSE_GEMM, MATMUL}
    delta = {kind: road.get(kind, 0.0) - other.get(kind, 0.0) for kind in kinds}
    removed = {kind: -d for kind, d in sorted(delta.items(), key=lambda kv: kv[1]) if d < -noise_ms}
    grew = {kind: d for kind, d in sorted(delta.items(), key=lambda kv: -kv[1]) if d > noise_ms}
    return {"gemm": gemm_ms(road), "course_gemm": road.get(COURSE_GEMM, 0.0), "cublas": road.get(MATMUL, 0.0),
            "other_gemm": gemm_ms(other), "gemm_added": gemm_ms(road) - gemm_ms(other), "removed": removed,
            "grew": grew, "net": sum(road.values()) - sum(other.values())}
