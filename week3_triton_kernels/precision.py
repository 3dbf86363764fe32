"""Precision: one matmul in fp32, tf32, fp16, bf16 and fp8; how fast, how wrong, and why.

The same C = A @ B (A, B given in fp32) computed five ways on the GPU:

  format     significand bits   unit roundoff u   largest finite   how torch runs it
  fp32       24 (23 stored)     2^-24 ~ 6e-8      3.4e38           torch.matmul, TF32 off: CUDA cores
  tf32       11 (10 stored)     2^-11 ~ 4.9e-4    3.4e38           torch.matmul, TF32 on: tensor cores
  fp16       11 (10 stored)     2^-11 ~ 4.9e-4    65504            A.half() @ B.half(): tensor cores
  bf16        8 (7 stored)      2^-8  ~ 3.9e-3    3.4e38           A.bfloat16() @ B.bfloat16()
  fp8 e4m3    4 (3 stored)      2^-4  = 0.0625    448              torch._scaled_mm, per-tensor scales (sm_89+)

u = 2^-p for p significand bits: rounding to nearest moves a value by at most u of itself.
In every format but fp32 the tensor cores multiply the rounded inputs *exactly* and add the
products in fp32; the result is rounded once more to the output format (fp16/bf16; fp8 GEMMs
write bf16 here). So the error of C has three sources, and the model below predicts each:

* input rounding: each operand moves by a relative delta with |delta| <= u. For data whose
  significands are spread evenly on a log scale (normal random data are), E[delta^2] ~ 0.18 u^2
  (rounding to nearest), and each of the K products a*b carries two such errors with random
  signs: the relative (Frobenius) error of C from the inputs is ~ sqrt(2 * 0.18) u = 0.6 u.
  Independent of K: the errors of the K terms grow like sqrt(K), and so does C.
* output rounding: ~ sqrt(0.18) u_out = 0.42 u_out, in fp16, bf16 (and fp8's bf16 output).
* fp32 accumulation: each addition rounds the running sum (size ~ sqrt(k)) by up to 2^-24 of
  itself; with random signs that is ~ 0.3 * 2^-24 * sqrt(K) relative for a sequential sum,
  less for the blocked sums real GEMMs do. Only visible in fp32 itself (~1e-7 .. 1e-6).

Predictions for random normal data: fp32 ~1e-7..1e-6 < tf32 ~ 2.9e-4 (7.7e-4 if the hardware
truncates instead of rounding the inputs to tf32) ~ fp16 ~ 3.6e-4 < bf16 ~ 2.9e-3 < fp8 ~ 3.7e-2.
bf16 has fp32's exponent range with fp16's storage and 8x fp16's error; fp16 has 8x the
precision but overflows at 65504 (bf16 goes to 3.4e38); fp8 needs a scale per tensor so that
its 448 covers the data (e4m3 has 4 exponent bits: 2^-9 .. 448).

Why the sum must be fp32: an accumulator with p significand bits stops growing once the
addend drops below half its spacing. Summing 1.0 4096 times, a bf16 accumulator stalls at 256
(spacing 2 there: 256 + 1 rounds back to 256), fp16 at 2048, fp32 reaches 4096
(`running_sum`). Tensor cores therefore accumulate fp16/bf16/fp8 products in fp32.

On the CPU (the course's simulation mode) the error part runs as an exact emulation of that
model (`matmul_emulated`: round the inputs, multiply and sum in fp32, round the output); the
speed part needs the GPU. `python -m week3_triton_kernels.precision --write` measures both on
a GPU and writes results/precision_week3.* (speed and error at 4096^3) and
results/precision_k_sweep_week3.* (error for K = 256 .. 16384).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from course import runtime  # first: chooses the GPU or simulation
from course import validate
from course.bench import Benchmark

U32 = 2.0**-24
E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
RESULTS_DIR = Path(__file__).parent / "results"
# rms relative error of one rounding to nearest, in units of u, for significands spread evenly
# on a log scale: E[delta^2] = (u^2 / 3) * E[1/m^2] with m log-uniform on [1, 2) = 0.18 u^2.
ROUNDING_RMS = math.sqrt(0.18)  # ~0.42
TRUNCATION_RMS = 1.57  # the same for truncation (bias included), two operands: see notes


@dataclass(frozen=True)
class Format:
    name: str
    significand_bits: int  # stored fraction bits + the implicit leading 1
    max_finite: float
    storage: torch.dtype  # what the operands are stored in
    output: str  # the format C is written in
    engine: str  # what does the multiply-adds on an H100

    @property
    def unit_roundoff(self) -> float:
        return 2.0 ** -self.significand_bits


FORMATS = {
    "fp32": Format("fp32", 24, 3.4028234663852886e38, torch.float32, "fp32", "CUDA cores (FFMA), TF32 off"),
    "tf32": Format("tf32", 11, 3.4028234663852886e38, torch.float32, "fp32", "tensor cores, inputs as tf32"),
    "fp16": Format("fp16", 11, 65504.0, torch.float16, "fp16", "tensor cores, fp32 accumulation"),
    "bf16": Format("bf16", 8, 3.3895313892515355e38, torch.bfloat16, "bf16", "tensor cores, fp32 accumulation"),
    "fp8_e4m3": Format("fp8_e4m3", 4, E4M3_MAX, torch.float8_e4m3fn, "bf16",
                       "tensor cores (torch._scaled_mm), per-tensor scales, fp32 accumulation"),
}
FORMAT_NAMES = tuple(FORMATS)
OUTPUT_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


# --- rounding to a format ----------------------------------------------------------------------

def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 values rounded to the nearest tf32 value (10 stored fraction bits, ties to even).

    An fp32 number is 1 sign, 8 exponent and 23 fraction bits; tf32 keeps the top 10 fraction
    bits. Adding 0xFFF plus the lowest kept bit and clearing the 13 low bits rounds to nearest,
    ties to even; a carry out of the fraction correctly bumps the exponent.
    """
    if x.dtype != torch.float32:
        raise TypeError(f"x has dtype {x.dtype}; expected torch.float32")
    # BEGIN EXERCISE: round to tf32 on the bits (nearest, ties to even): view x as int32, add 0xFFF plus the
    #   lowest kept bit (bit 13), clear the 13 low bits; NaN and Inf stay as they are
    bits = x.contiguous().view(torch.int32)
    lowest_kept = (bits >> 13) & 1
    rounded = ((bits + 0xFFF + lowest_kept) & -8192).view(torch.float32)  # -8192 = ~0x1FFF
    return torch.where(torch.isfinite(x), rounded, x)  # NaN and Inf stay as they are
    # END EXERCISE


def quantize_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): x ~ q * scale with q in float8_e4m3fn and the largest |x| mapped to 448.

    One scale per tensor ("tensor-wise scaling"): fp8's 4 exponent bits span only 2^-9 .. 448,
    so the data must be moved into that window; the scale (a float32 scalar tensor) undoes it.
    """
    # BEGIN EXERCISE: one scale per tensor: the largest |x| maps to 448 (scale 1 for an all-zero x); q = x /
    #   scale in float8_e4m3fn, clamped to +-448 first (x / scale can land a hair above 448, and e4m3fn has
    #   no Inf)
    amax = x.abs().max().float()
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    # clamp: x / scale can land a hair above 448 by fp32 rounding; e4m3fn has no Inf to absorb it
    q = (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale
    # END EXERCISE


def round_to(fmt: str, x: torch.Tensor) -> torch.Tensor:
    """x (fp32) as the format stores it, returned in fp32: what the tensor cores multiply."""
    # BEGIN EXERCISE: x (fp32) as the format stores it, returned in fp32: fp32 itself, tf32 (round_to_tf32),
    #   fp8 (q * scale), the 16-bit types by a cast there and back
    if fmt == "fp32":
        return x
    if fmt == "tf32":
        return round_to_tf32(x)
    if fmt == "fp8_e4m3":
        q, scale = quantize_fp8(x)
        return q.float() * scale
    return x.to(FORMATS[fmt].storage).float()
    # END EXERCISE


@contextlib.contextmanager
def matmul_flags(*, tf32: bool = False, reduced_precision_reduction: bool = False):
    """Set torch's matmul backend flags for a block and restore them after, even on error.

    allow_tf32: fp32 matmuls may run on the tensor cores with tf32 inputs. allow_{fp16,bf16}_
    reduced_precision_reduction: cuBLAS may do parts of an fp16/bf16 sum (split-K) in the
    16-bit type; off here, so every format accumulates in fp32 as the model says.
    """
    matmul = torch.backends.cuda.matmul
    saved = (matmul.allow_tf32, matmul.allow_fp16_reduced_precision_reduction,
             matmul.allow_bf16_reduced_precision_reduction)
    matmul.allow_tf32 = tf32
    matmul.allow_fp16_reduced_precision_reduction = reduced_precision_reduction
    matmul.allow_bf16_reduced_precision_reduction = reduced_precision_reduction
    try:
        yield
    finally:
        (matmul.allow_tf32, matmul.allow_fp16_reduced_precision_reduction,
         matmul.allow_bf16_reduced_precision_reduction) = saved


# --- the matmul in each format -------------------------------------------------------------------

def _check(fmt, a, b):
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {list(FORMATS)}, got {fmt!r}")
    validate.tensor(a, "a", dtypes=(torch.float32,), ndim=2, contiguous=False)
    validate.tensor(b, "b", dtypes=(torch.float32,), ndim=2, contiguous=False)
    if a.device != b.device:
        raise ValueError(f"a is on {a.device} but b is on {b.device}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions must match: a is {tuple(a.shape)}, b is {tuple(b.shape)}")


def matmul_emulated(fmt: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The model, exactly: inputs rounded to `fmt`, exact products summed in fp32, output rounded.

    Runs anywhere (fp32 matmul with TF32 off). Products of two fp16/bf16/tf32/fp8 values have at
    most 22 significant bits, so the fp32 multiply is exact, as in the tensor cores.
    """
    _check(fmt, a, b)
    # BEGIN EXERCISE: the model: inputs rounded to fmt, the product in fp32 (TF32 off: matmul_flags), C
    #   rounded to OUTPUT_DTYPES[FORMATS[fmt].output]; fp8: (q_a @ q_b) * (s_a * s_b), the scales applied to
    #   the fp32 sum
    with matmul_flags(tf32=False):
        if fmt == "fp8_e4m3":
            (qa, sa), (qb, sb) = quantize_fp8(a), quantize_fp8(b)
            c = (qa.float() @ qb.float()) * (sa * sb)  # scales applied to the fp32 sum, as in the GEMM
        else:
            c = round_to(fmt, a) @ round_to(fmt, b)
    return c.to(OUTPUT_DTYPES[FORMATS[fmt].output])
    # END EXERCISE


def fp8_native_available() -> bool:
    """torch._scaled_mm on this GPU: fp8 tensor cores exist from compute capability 8.9 (Ada, Hopper)."""
    return (runtime.on_gpu() and hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")
            and torch.cuda.get_device_capability(runtime.DEVICE) >= (8, 9))


def prepare(fmt: str, a: torch.Tensor, b: torch.Tensor) -> tuple:
    """The operands as `run_prepared` takes them (converted once, outside any timing)."""
    if fmt in ("fp32", "tf32"):
        return a, b
    if fmt == "fp8_e4m3":
        (qa, sa), (qb, sb) = quantize_fp8(a), quantize_fp8(b)
        # _scaled_mm wants A row-major and B column-major (cuBLASLt's fp8 "TN" layout)
        return qa.contiguous(), sa, qb.t().contiguous().t(), sb
    dtype = FORMATS[fmt].storage
    return a.to(dtype).contiguous(), b.to(dtype).contiguous()


def run_prepared(fmt: str, *operands) -> torch.Tensor:
    """One matmul on prepared operands with torch's own kernels (cuBLAS / cuBLASLt)."""
    if fmt == "fp8_e4m3":
        qa, sa, qb, sb = operands
        return torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    a, b = operands
    with matmul_flags(tf32=(fmt == "tf32")):
        return torch.matmul(a, b)


def matmul_native(fmt: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The matmul as torch runs it in `fmt` on this GPU (GPU only)."""
    _check(fmt, a, b)
    if not runtime.on_gpu():
        raise RuntimeError("matmul_native runs torch's GPU kernels: it needs an NVIDIA GPU "
                           "(matmul_emulated computes the same model on the CPU)")
    if fmt == "fp8_e4m3":
        if not fp8_native_available():
            raise RuntimeError("fp8 matmul (torch._scaled_mm) needs compute capability 8.9 or newer")
        if any(d % 16 for d in (*a.shape, b.shape[1])):
            raise ValueError(f"fp8 matmul needs M, K, N multiples of 16, got {tuple(a.shape)} @ {tuple(b.shape)}")
    return run_prepared(fmt, *prepare(fmt, a, b))


def native_supported(fmt: str, m: int, n: int, k: int) -> bool:
    if not runtime.on_gpu():
        return False
    return fmt != "fp8_e4m3" or (fp8_native_available() and not any(d % 16 for d in (m, n, k)))


def matmul_in(fmt: str, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, str]:
    """(C, how): torch's GPU kernel where there is one for `fmt`, else the exact emulation."""
    _check(fmt, a, b)
    if native_supported(fmt, a.shape[0], b.shape[1], a.shape[1]):
        return matmul_native(fmt, a, b), "torch on " + torch.cuda.get_device_name(runtime.DEVICE)
    return matmul_emulated(fmt, a, b), "emulated (inputs rounded, fp32 sum, output rounded)"


# --- the error model ------------------------------------------------------------------------------

def relative_error(c: torch.Tensor, reference: torch.Tensor) -> float:
    """||C - C64||_F / ||C64||_F, in float64."""
    reference = reference.double()
    return float((c.double() - reference).norm() / reference.norm())


def predicted_rel_error(fmt: str, k: int) -> float:
    """The model's relative error for random normal data (rounding to nearest everywhere)."""
    f = FORMATS[fmt]
    inputs = 0.0 if fmt == "fp32" else math.sqrt(2) * ROUNDING_RMS * f.unit_roundoff
    output = 0.0 if f.output == "fp32" else ROUNDING_RMS * FORMATS[f.output].unit_roundoff
    accumulation = 0.3 * U32 * math.sqrt(k)  # sequential fp32 sum; blocked sums do better
    return math.sqrt(inputs**2 + output**2 + accumulation**2)


def predicted_range(fmt: str, k: int) -> tuple[float, float]:
    """(low, high) that a correct run should land in: the prediction within 2x, with room for
    blocked fp32 sums (fp32: any value below) and for tf32 inputs truncated, not rounded."""
    p = predicted_rel_error(fmt, k)
    if fmt == "fp32":
        return 0.0, 2 * p
    if fmt == "tf32":
        return p / 2, 2 * TRUNCATION_RMS * FORMATS["tf32"].unit_roundoff
    return p / 2, 2 * p


def running_sum(values: torch.Tensor, acc_dtype: torch.dtype) -> torch.Tensor:
    """Sum the last dimension one term at a time, the accumulator rounded to `acc_dtype` each step.

    This is what an accumulator register of that type does; torch.sum would use a wider one.
    """
    # BEGIN EXERCISE: one term at a time into an accumulator of acc_dtype, rounded at every step (what a
    #   register of that type does; torch.sum would use a wider one)
    acc = torch.zeros(values.shape[:-1], dtype=acc_dtype, device=values.device)
    for k in range(values.shape[-1]):
        acc = acc + values[..., k].to(acc_dtype)  # the sum of two acc_dtype values is rounded to it
    return acc
    # END EXERCISE


def format_ranges() -> dict[str, dict[str, float]]:
    """Largest finite, smallest normal and smallest subnormal value of each storage type."""
    ranges = {}
    for name in ("fp32", "fp16", "bf16", "fp8_e4m3"):
        info = torch.finfo(FORMATS[name].storage)
        ranges[name] = {"max": float(info.max), "smallest_normal": float(info.smallest_normal),
                        "smallest_subnormal": float(info.smallest_normal) * float(info.eps)}
    return ranges


# --- measuring: speed (GPU) and error, written as results files ---------------------------------

def _random_operands(m: int, n: int, k: int, seed: int = 0):
    generator = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(m, k, generator=generator).to(runtime.DEVICE)
    b = torch.randn(k, n, generator=generator).to(runtime.DEVICE)
    return a, b


def timed_formats() -> tuple[str, ...]:
    """Formats with a torch kernel to time here (fp8 needs sm_89+; none in simulation but fp32)."""
    if not runtime.on_gpu():
        return FORMAT_NAMES  # timed too, but the host clock measures the emulation, not a GPU
    return tuple(f for f in FORMAT_NAMES if f != "fp8_e4m3" or fp8_native_available())


def _operand_slices() -> dict[str, slice]:
    """Where each format's operands sit in the flat input tuple (fp8: q_a, s_a, q_b, s_b)."""
    slices, start = {}, 0
    for fmt in timed_formats():
        count = 4 if fmt == "fp8_e4m3" and runtime.on_gpu() else 2
        slices[fmt] = slice(start, start + count)
        start += count
    return slices


def _speed_inputs(size):
    """One flat tuple of tensors (so the timer can count their bytes), every format's operands."""
    m, n, k = size
    a, b = _random_operands(m, n, k, seed=1)
    return tuple(t for fmt in timed_formats() for t in (prepare(fmt, a, b) if runtime.on_gpu() else (a, b)))


def _speed_variant(fmt: str):
    where = _operand_slices()[fmt]
    if runtime.on_gpu():
        return lambda *inputs: run_prepared(fmt, *inputs[where])
    return lambda *inputs: matmul_emulated(fmt, *inputs[where])


def _size_label(size) -> str:
    m, n, k = size
    return f"{m}x{n}x{k}"


def precision_benchmark(sizes=None) -> Benchmark:
    """The speed half of the precision table: torch.matmul in every format, same problem."""
    formats = timed_formats()
    return Benchmark(
        name="precision_week3",
        title="One matmul in five formats: TFLOP/s and relative error vs float64",
        sizes=sizes or [(4096, 4096, 4096)],
        sim_sizes=sizes or [(64, 64, 64)],
        size_label=_size_label,
        make_inputs=_speed_inputs,
        variants={fmt: _speed_variant(fmt) for fmt in formats},
        headline=formats,
        bytes=lambda size: 0,  # per format: filled in by write_results
        flops=lambda size: 2 * size[0] * size[1] * size[2],
        notes="A, B random normal fp32; each format converts them once, outside the timing. "
              "rel_error = ||C - C64|| / ||C64|| against the float64 product of the fp32 data; "
              "fp8 = torch._scaled_mm with per-tensor scales, bf16 output.",
    )


def _bytes(fmt: str, m: int, n: int, k: int) -> int:
    """Each operand read once in its storage type, C written once in its output type."""
    f = FORMATS[fmt]
    itemsize = torch.empty((), dtype=f.storage).element_size()
    out_itemsize = torch.empty((), dtype=OUTPUT_DTYPES[f.output]).element_size()
    return itemsize * (m * k + k * n) + out_itemsize * m * n


def _error_fields(fmt: str, a, b, reference) -> dict:
    c, how = matmul_in(fmt, a, b)
    k = a.shape[1]
    return {"rel_error": relative_error(c, reference), "predicted_rel_error": predicted_rel_error(fmt, k),
            "unit_roundoff": FORMATS[fmt].unit_roundoff, "significand_bits": FORMATS[fmt].significand_bits,
            "path": how}


def measure_speed_and_error(sizes=None) -> dict:
    """precision_week3: the benchmark record, each row with its measured and predicted error."""
    from course import bench

    record = bench.run(precision_benchmark(sizes))
    for size in precision_benchmark(sizes).active_sizes():
        m, n, k = size
        a, b = _random_operands(m, n, k, seed=2)
        reference = a.double() @ b.double()
        fp32_ms = next((r["ms"] for r in record["rows"] if r["size"] == _size_label(size)
                        and r["variant"] == "fp32" and "ms" in r), None)
        for row in record["rows"]:
            if row["size"] != _size_label(size):
                continue
            fmt = row["variant"]
            row.update(_error_fields(fmt, a, b, reference))
            if "ms" in row:
                row["bytes"] = _bytes(fmt, m, n, k)
                seconds = row["ms"] * 1e-3
                row["gbps"] = row["bytes"] / seconds / 1e9
                row["pct_of_copy"] = 100 * row["gbps"] / record["ceilings"]["copy_gbps"]
                row["speedup_vs_fp32"] = fp32_ms / row["ms"] if fp32_ms else None
        missing = [f for f in FORMAT_NAMES if f not in timed_formats()]
        for fmt in missing:  # no kernel to time here, but the error is still worth a row
            record["rows"].append({"size": _size_label(size), "variant": fmt, "skipped": "no fp8 GPU kernel here",
                                   **_error_fields(fmt, a, b, reference)})
    return record


def measure_k_sweep(mn: int | None = None, k_values=None) -> dict:
    """precision_k_sweep_week3: relative error of every format for K = 256 .. 16384 (no timing)."""
    from course import bench

    mn = mn or runtime.pick(gpu=4096, sim=64)
    k_values = k_values or runtime.pick(gpu=[256, 512, 1024, 2048, 4096, 8192, 16384], sim=[256, 1024, 4096])
    rows = []
    for k in k_values:
        a, b = _random_operands(mn, mn, k, seed=3)
        reference = a.double() @ b.double()
        for fmt in FORMAT_NAMES:
            rows.append({"size": f"{mn}x{mn}x{k}", "variant": fmt, "k": k, **_error_fields(fmt, a, b, reference)})
        del a, b, reference
    return {
        "benchmark": "precision_k_sweep_week3",
        "title": f"Relative error vs K ({mn} x {mn} x K), five formats, against float64",
        "notes": "rel_error = ||C - C64|| / ||C64||; predicted_rel_error from the model in precision.py",
        "headline": [],
        "simulated": not runtime.on_gpu(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": runtime.describe(),
        "ceilings": {"copy_gbps": bench.copy_bandwidth_gbps()},
        "rows": rows,
    }


def _cell(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def precision_markdown(record: dict) -> str:
    """The speed-and-error table (the shared markdown_table has no error columns)."""
    from course.bench import measured_on

    head = ["size", "format", "significand bits", "u", "ms", "TFLOP/s", "vs fp32", "rel. error",
            "predicted", "how"]
    lines = [f"**{record['title']}**: {measured_on(record)}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in record["rows"]:
        lines.append("| " + " | ".join([
            str(r["size"]), r["variant"], str(r.get("significand_bits", "-")), _cell(r.get("unit_roundoff"), ".1e"),
            _cell(r.get("ms"), ".4f"), _cell(r.get("tflops"), ".1f"),
            "-" if not r.get("speedup_vs_fp32") else f"{r['speedup_vs_fp32']:.1f}x",
            _cell(r.get("rel_error"), ".2e"), _cell(r.get("predicted_rel_error"), ".1e"),
            r.get("path", r.get("skipped", "-"))]) + " |")
    return "\n".join(lines) + "\n"


def _plot_speed_and_error(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = record["rows"][-1]["size"]
    rows = [r for r in record["rows"] if r["size"] == size]
    names = [r["variant"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(names, [r.get("tflops") or 0 for r in rows], color="tab:blue")
    left.set_ylabel("TFLOP/s")
    left.set_title(f"speed, {size}")
    right.bar(names, [r["rel_error"] for r in rows], color="tab:orange", label="measured")
    right.plot(names, [r["predicted_rel_error"] for r in rows], "k_", markersize=20, label="model")
    right.set_yscale("log")
    right.set_ylabel("||C - C64|| / ||C64||")
    right.set_title("relative error")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=8)
    where = record["machine"].get("gpu") or "simulation (CPU)"
    fig.suptitle(f"{record['title']} on {where}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_k_sweep(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, fmt in enumerate(FORMAT_NAMES):
        rows = [r for r in record["rows"] if r["variant"] == fmt]
        color = f"C{i}"
        ax.plot([r["k"] for r in rows], [r["rel_error"] for r in rows], "o-", color=color, label=fmt)
        ax.plot([r["k"] for r in rows], [r["predicted_rel_error"] for r in rows], "--", color=color, linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("K (length of each dot product)")
    ax.set_ylabel("||C - C64|| / ||C64||  (dashed: model)")
    where = record["machine"].get("gpu") or "simulation (CPU)"
    ax.set_title(f"{record['title']}\non {where}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def k_sweep_markdown(record: dict) -> str:
    from course.bench import measured_on

    ks = sorted({r["k"] for r in record["rows"]})
    lines = [f"**{record['title']}**: {measured_on(record)}. Measured (model in brackets).", "",
             "| format | " + " | ".join(f"K = {k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for fmt in FORMAT_NAMES:
        by_k = {r["k"]: r for r in record["rows"] if r["variant"] == fmt}
        lines.append(f"| {fmt} | " + " | ".join(
            f"{by_k[k]['rel_error']:.2e} ({by_k[k]['predicted_rel_error']:.1e})" for k in ks) + " |")
    return "\n".join(lines) + "\n"


def write_results(out_dir: Path | None, sizes=None, k_values=None, mn: int | None = None) -> list[Path]:
    """Measure both records, print their tables; save json, md and png to `out_dir` if given."""
    speed = measure_speed_and_error(sizes)
    sweep = measure_k_sweep(mn, k_values)
    print(precision_markdown(speed))
    print(k_sweep_markdown(sweep))
    if out_dir is None:
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for record, table, plot in ((speed, precision_markdown, _plot_speed_and_error),
                                (sweep, k_sweep_markdown, _plot_k_sweep)):
        base = out_dir / record["benchmark"]
        base.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
        base.with_suffix(".md").write_text(table(record))
        plot(record, base.with_suffix(".png"))
        written += [base.with_suffix(s) for s in (".json", ".md", ".png")]
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true",
                        help="measure speed and error; on a GPU save results/precision_week3.* and "
                             "results/precision_k_sweep_week3.*")
    parser.add_argument("--out", help="save here instead (also in simulation)")
    args = parser.parse_args(argv)
    if not args.write:
        parser.print_help()
        return 2
    out = Path(args.out) if args.out else (RESULTS_DIR if runtime.on_gpu() else None)
    for path in write_results(out):
        print("wrote", path)
    if out is None:
        print("(simulation: errors are the exact emulation, times measure the CPU; nothing saved)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
