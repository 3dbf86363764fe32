"""Exercise: precision of one matmul in fp32, tf32, fp16, bf16 and fp8. Same names as
week3_triton_kernels/precision.py.

Check your work with `pytest tests/week3/test_precision.py --impl=exercises` (the error tests
run on the CPU through your `matmul_emulated`; the GPU tests call your `matmul_native`). Each
function that raises NotImplementedError is yours; delete that line when you write it. The
format table, the error model and the dispatch (`matmul_in`) are given.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from course import runtime  # noqa: F401  first: chooses the GPU or simulation
from course import validate

U32 = 2.0**-24
E4M3_MAX = 448.0
ROUNDING_RMS = math.sqrt(0.18)
TRUNCATION_RMS = 1.57


@dataclass(frozen=True)
class Format:
    name: str
    significand_bits: int
    max_finite: float
    storage: torch.dtype
    output: str
    engine: str

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


def round_to_tf32(x):
    """fp32 -> nearest tf32 value (10 fraction bits, ties to even), returned as fp32.

    Hint: x.view(torch.int32); add 0xFFF plus bit 13, clear the 13 low bits; keep NaN/Inf.
    Raise TypeError for a dtype other than float32.
    """
    raise NotImplementedError("not implemented yet: round_to_tf32 (week3 exercise)")


def quantize_fp8(x):
    """(q, scale): q = x / scale in float8_e4m3fn, the largest |x| mapped to 448; scale a float32
    scalar tensor (1.0 for an all-zero x). Clamp to +-448 before the cast."""
    raise NotImplementedError("not implemented yet: quantize_fp8 (week3 exercise)")


def round_to(fmt, x):
    """x (fp32) rounded to the format, returned in fp32 (fp8: q * scale)."""
    raise NotImplementedError("not implemented yet: round_to (week3 exercise)")


@contextlib.contextmanager
def matmul_flags(*, tf32: bool = False, reduced_precision_reduction: bool = False):
    """Given: set torch's matmul flags for a block, restore them after."""
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


def _check(fmt, a, b):
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {list(FORMATS)}, got {fmt!r}")
    validate.tensor(a, "a", dtypes=(torch.float32,), ndim=2, contiguous=False)
    validate.tensor(b, "b", dtypes=(torch.float32,), ndim=2, contiguous=False)
    if a.device != b.device:
        raise ValueError(f"a is on {a.device} but b is on {b.device}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions must match: a is {tuple(a.shape)}, b is {tuple(b.shape)}")


def matmul_emulated(fmt, a, b):
    """The model: call _check first; inputs rounded to `fmt`, product in fp32 (TF32 off), C
    rounded to OUTPUT_DTYPES[FORMATS[fmt].output]. fp8: (q_a @ q_b) * (s_a * s_b), then bf16."""
    raise NotImplementedError("not implemented yet: matmul_emulated (week3 exercise)")


def fp8_native_available() -> bool:
    return (runtime.on_gpu() and hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")
            and torch.cuda.get_device_capability(runtime.DEVICE) >= (8, 9))


def prepare(fmt, a, b):
    """Operands for run_prepared: (a, b) in the storage type; fp8: (q_a, s_a, q_b column-major, s_b)."""
    raise NotImplementedError("not implemented yet: prepare (week3 exercise)")


def run_prepared(fmt, *operands):
    """torch.matmul under matmul_flags (tf32 on only for "tf32"); fp8: torch._scaled_mm(..., out_dtype=bf16)."""
    raise NotImplementedError("not implemented yet: run_prepared (week3 exercise)")


def matmul_native(fmt, a, b):
    """_check, refuse (RuntimeError) without a GPU, then run_prepared(fmt, *prepare(fmt, a, b))."""
    raise NotImplementedError("not implemented yet: matmul_native (week3 exercise)")


def native_supported(fmt, m, n, k) -> bool:
    if not runtime.on_gpu():
        return False
    return fmt != "fp8_e4m3" or (fp8_native_available() and not any(d % 16 for d in (m, n, k)))


def matmul_in(fmt, a, b):
    """Given: (C, how): the GPU kernel where there is one, else the emulation."""
    _check(fmt, a, b)
    if native_supported(fmt, a.shape[0], b.shape[1], a.shape[1]):
        return matmul_native(fmt, a, b), "torch on " + torch.cuda.get_device_name(runtime.DEVICE)
    return matmul_emulated(fmt, a, b), "emulated (inputs rounded, fp32 sum, output rounded)"


def relative_error(c, reference) -> float:
    reference = reference.double()
    return float((c.double() - reference).norm() / reference.norm())


def predicted_rel_error(fmt, k) -> float:
    f = FORMATS[fmt]
    inputs = 0.0 if fmt == "fp32" else math.sqrt(2) * ROUNDING_RMS * f.unit_roundoff
    output = 0.0 if f.output == "fp32" else ROUNDING_RMS * FORMATS[f.output].unit_roundoff
    accumulation = 0.3 * U32 * math.sqrt(k)
    return math.sqrt(inputs**2 + output**2 + accumulation**2)


def predicted_range(fmt, k):
    p = predicted_rel_error(fmt, k)
    if fmt == "fp32":
        return 0.0, 2 * p
    if fmt == "tf32":
        return p / 2, 2 * TRUNCATION_RMS * FORMATS["tf32"].unit_roundoff
    return p / 2, 2 * p


def running_sum(values, acc_dtype):
    """Sum the last dimension one term at a time in an accumulator of `acc_dtype` (rounded each step)."""
    raise NotImplementedError("not implemented yet: running_sum (week3 exercise)")


def format_ranges():
    ranges = {}
    for name in ("fp32", "fp16", "bf16", "fp8_e4m3"):
        info = torch.finfo(FORMATS[name].storage)
        ranges[name] = {"max": float(info.max), "smallest_normal": float(info.smallest_normal),
                        "smallest_subnormal": float(info.smallest_normal) * float(info.eps)}
    return ranges
