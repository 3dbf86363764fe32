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
speed part needs the GPU. Measuring both and writing them down is precision_bench.py's: `python
-m week3_triton_kernels.precision_bench --write` on a GPU writes results/precision_week3.* (speed
and error at 4096^3) and results/precision_k_sweep_week3.* (error for K = 256 .. 16384).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from course import runtime  # first: chooses the GPU or simulation
from course import validate

U32 = 2.0**-24
E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
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
    # HINT: tf32 keeps fp32's exponent and the top 10 of 23 fraction bits, so rounding is integer arithmetic
    #   on the bit pattern: add half of the dropped 13 bits (plus the tie-breaking bit), then clear them.
    # HINT: Reinterpret with .view(torch.int32) (no conversion), read bit 13 (the lowest kept bit) for
    #   round-half-to-even, add 0xFFF plus that bit, mask off the low 13 bits, view back as float32; keep
    #   non-finite x unchanged with torch.where.
    # HINT: `((bits + 0xFFF + ((bits >> 13) & 1)) & -8192).view(torch.float32)` (-8192 is ~0x1FFF).
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
    # HINT: e4m3 only spans about 2^-9 .. 448, so scale the tensor so its largest magnitude lands on 448;
    #   the scale is kept to undo it.
    # HINT: amax = max |x| (as fp32); scale = amax / 448, or 1 when amax is 0; divide in fp32, clamp to
    #   +-448, cast to torch.float8_e4m3fn; return (q, scale).
    # HINT: The clamp is not optional: e4m3fn has no Inf, so a value a rounding step above 448 becomes NaN.
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
    # HINT: Model each format as 'what value does the hardware actually multiply': round x into the format,
    #   then bring it back to fp32.
    # HINT: One branch per family: fp32 unchanged; tf32 via round_to_tf32; fp8 via quantize_fp8 then
    #   dequantize (q.float() * scale); the 16-bit types by casting to FORMATS[fmt].storage and back.
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
    # HINT: The tensor cores multiply rounded inputs exactly and sum in fp32, so the model is: round the
    #   inputs, do an fp32 matmul with TF32 disabled, round C to the output type.
    # HINT: Inside `with matmul_flags(tf32=False):` pick fp8 (quantize both, multiply the fp32 views of q,
    #   then multiply by sa * sb) or the others (round_to on both operands); finish with a cast to
    #   OUTPUT_DTYPES[FORMATS[fmt].output].
    # HINT: For fp8 the scales go on the sum, not the operands: `(qa.float() @ qb.float()) * (sa * sb)`.
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
            and runtime.has_capability((8, 9)))


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
    # HINT: To see what a narrow accumulator loses, you must round after every addition, exactly as a
    #   register of that type would; torch.sum would hide it with a wider accumulator.
    # HINT: Start from zeros of shape values.shape[:-1] in acc_dtype, loop over the last dimension, add each
    #   slice converted to acc_dtype.
    # HINT: `acc = acc + values[..., k].to(acc_dtype)` (both operands in acc_dtype, so the sum is rounded to
    #   it).
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
