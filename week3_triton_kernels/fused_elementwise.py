"""Fused element-wise kernels: bias + GELU, and x * y + z, each one pass over memory.

An element-wise op does a handful of FLOPs per element and is limited by the bytes it moves.
A sequence of them in eager PyTorch launches one kernel per op, and every intermediate makes a
round trip through HBM. Fusing the sequence into one kernel keeps the intermediates in
registers: the FLOPs are the same, the bytes drop, and the time drops with the bytes.

Cost model (n = rows * cols elements, itemsize s):

* bias + GELU on x (rows, cols), bias (cols,):
  - unfused torch `gelu(x + bias)`: add reads x, bias and writes t (2ns, bias ~0), gelu reads t
    and writes y (2ns): 4ns bytes;
  - fused: read x, write y (+ cols * s for the bias, which stays in L2/L1): 2ns bytes.
  Predicted speed-up: 2x. FLOPs: ~10 per element (tanh form), ~ the same with erf.
* x * y + z:
  - unfused `x * y + z`: mul reads 2, writes 1 (3ns); add reads 2, writes 1 (3ns): 6ns bytes;
  - fused: read 3, write 1: 4ns bytes. Predicted speed-up: 1.5x. 2 FLOPs per element.
  (`torch.addcmul(z, x, y)` is torch's own fused kernel for this: also 4ns.)

GELU(x) = x * Phi(x). `approximate="none"` uses the exact erf form 0.5 x (1 + erf(x / sqrt 2));
`approximate="tanh"` uses 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), written here as
x * sigmoid(2u), the same function (0.5 (1 + tanh u) = sigmoid(2u)), which needs only exp.
Both match `torch.nn.functional.gelu(..., approximate=...)`. Arithmetic is fp32 for every
input dtype; results are rounded to the input dtype on the store.
"""
from __future__ import annotations

import math

import torch

from course import validate
from course.bench import Benchmark, itemsize
from course.check import random_tensor
from course.gpu import triton, tl, DEVICE

BLOCK_SIZE = 1024  # as in vector_add: 4 warps x 32 threads x 8 elements
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
APPROXIMATE = ("none", "tanh")
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n, n_cols,
                     TANH: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: the fused epilogue: x and its bias (column i % n_cols of flat element i) in fp32, h =
    #   x + b, then the exact 0.5 h (1 + erf(h / sqrt 2)) or, when TANH, 0.5 h (1 + tanh(sqrt(2/pi) (h +
    #   0.044715 h^3))); one store in out's dtype: h never goes to memory
    # HINT: Fusion means one read of x, one write of out: the bias add and GELU happen in registers. The
    #   bias of flat element i is column i % n_cols because x is row-major.
    # HINT: Same offsets/mask as vector_add; load x and bias[offsets % n_cols] and cast both to fp32;
    #   compute h, then pick the formula with `if TANH:` (a constexpr, so no runtime branch); cast back on
    #   store.
    # HINT: tanh needs no tl.tanh: 0.5 h (1 + tanh u) = h * sigmoid(2u) = `h / (1.0 + tl.exp(-2.0 * u))`;
    #   the exact form is `0.5 * h * (1.0 + tl.erf(h * 0.70710678...))`.
    pid = tl.program_id(0)
    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    # x is row-major (rows, cols): element i belongs to column i % cols. The bias is tiny and
    # re-read by every row, so it is served from cache, not HBM.
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(bias_ptr + offsets % n_cols, mask=mask).to(tl.float32)
    h = x + b
    if TANH:  # constexpr: each variant compiles to its own kernel, no runtime branch
        u = 0.7978845608028654 * (h + 0.044715 * h * h * h)  # sqrt(2/pi) * (...)
        y = h / (1.0 + tl.exp(-2.0 * u))  # h * sigmoid(2u) = 0.5 h (1 + tanh u)
    else:
        y = 0.5 * h * (1.0 + tl.erf(h * 0.7071067811865476))
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


@triton.jit
def mul_add_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: out = x * y + z in fp32 in one pass (one fma: the product is never rounded), masked
    #   like vector_add
    # HINT: An elementwise kernel like vector_add with three inputs; compute in fp32 so x * y + z contracts
    #   to one fused multiply-add.
    # HINT: Offsets and mask as in vector_add, three masked loads cast with .to(tl.float32), one masked
    #   store cast to out_ptr.dtype.element_ty.
    # HINT: `tl.store(out_ptr + offsets, (x * y + z).to(out_ptr.dtype.element_ty), mask=mask)`
    pid = tl.program_id(0)
    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    z = tl.load(z_ptr + offsets, mask=mask).to(tl.float32)
    # The compiler contracts this to one fma instruction; the product is never rounded.
    tl.store(out_ptr + offsets, (x * y + z).to(out_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


def bias_gelu(x: torch.Tensor, bias: torch.Tensor, approximate: str = "none",
              out: torch.Tensor | None = None) -> torch.Tensor:
    """gelu(x + bias, approximate=...) with bias broadcast over the last dimension of x."""
    validate.tensor(x, "x", dtypes=DTYPES)
    validate.tensor(bias, "bias", dtypes=DTYPES, ndim=1)
    validate.same_dtype(x=x, bias=bias)
    if approximate not in APPROXIMATE:
        raise ValueError(f"approximate must be 'none' or 'tanh' (as in torch), got {approximate!r}")
    if x.dim() == 0:
        raise ValueError("x must have at least 1 dimension (the bias runs along the last one)")
    if bias.shape[0] != x.shape[-1]:
        raise ValueError(f"bias has {bias.shape[0]} elements but x's last dimension is {x.shape[-1]}")
    out = validate.output(out, x)
    n = out.numel()
    if n == 0:
        return out
    grid = (triton.cdiv(n, BLOCK_SIZE),)
    bias_gelu_kernel[grid](x, bias, out, n, x.shape[-1], TANH=approximate == "tanh",
                           BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
    return out


def mul_add(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
            out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x * y + z, element-wise, in one pass (same shapes and dtypes, no broadcasting)."""
    validate.tensor(x, "x", dtypes=DTYPES)
    validate.tensor(y, "y", dtypes=DTYPES)
    validate.tensor(z, "z", dtypes=DTYPES)
    validate.same_dtype(x=x, y=y, z=z)
    validate.same_shape(x=x, y=y, z=z)
    out = validate.output(out, x)
    n = out.numel()
    if n == 0:
        return out
    mul_add_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, y, z, out, n, BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
    return out


def bias_gelu_torch(x, bias, approximate="none"):
    """The unfused eager sequence the fused kernel replaces: two kernels, one intermediate."""
    return torch.nn.functional.gelu(x + bias, approximate=approximate)


def mul_add_torch(x, y, z):
    return x * y + z  # two kernels: the product x * y makes a round trip through HBM


# BEGIN SOLUTION ONLY: the benchmarks, sweep and command line (they measure the solution's kernels)
# ---------------------------------------------------------------------------------- benchmarks
def _gelu_inputs(size):
    rows, cols, dtype = size
    d = DEVICE
    return random_tensor((rows, cols), dtype, d), random_tensor(cols, dtype, d)


def _gelu_label(size):
    rows, cols, dtype = size
    return f"{rows}x{cols} {str(dtype).replace('torch.', '')}"


def _mul_add_inputs(size):
    n, dtype = size
    return tuple(random_tensor(n, dtype, DEVICE) for _ in range(3))


GELU_SIZES = [(8192, 4096), (16384, 8192)]
BENCHMARKS = [
    Benchmark(
        name="bias_gelu",
        title="Fused bias + GELU vs eager gelu(x + bias)",
        sizes=[(r, c, dt) for dt in (torch.float32, torch.bfloat16) for r, c in GELU_SIZES],
        sim_sizes=[(64, 48, torch.float32)],
        size_label=_gelu_label,
        make_inputs=_gelu_inputs,
        variants={
            "torch": lambda x, b: bias_gelu_torch(x, b),
            "triton": lambda x, b: bias_gelu(x, b),
            "torch_tanh": lambda x, b: bias_gelu_torch(x, b, "tanh"),
            "triton_tanh": lambda x, b: bias_gelu(x, b, "tanh"),
        },
        headline=("triton",),
        bytes=lambda s: 2 * s[0] * s[1] * itemsize(s[2]) + s[1] * itemsize(s[2]),
        flops=lambda s: 10 * s[0] * s[1],
        notes="bytes = fused traffic 2 x rows x cols x itemsize (+ bias); the unfused torch "
              "sequence moves 4 x rows x cols x itemsize (add: read x, write t; gelu: read t, "
              "write y), so the byte count predicts a 2x speed-up. 'vs torch' divides by the "
              "erf variant; compare triton_tanh with torch_tanh by hand.",
    ),
    Benchmark(
        name="mul_add",
        title="Fused x * y + z vs eager x * y + z",
        sizes=[(n, dt) for dt in (torch.float32, torch.bfloat16) for n in (1 << 24, 1 << 26)],
        sim_sizes=[(1 << 12, torch.float32)],
        size_label=lambda s: f"{s[0]} {str(s[1]).replace('torch.', '')}",
        make_inputs=_mul_add_inputs,
        variants={
            "torch": mul_add_torch,
            "torch_addcmul": lambda x, y, z: torch.addcmul(z, x, y),
            "triton": mul_add,
        },
        headline=("triton",),
        bytes=lambda s: 4 * s[0] * itemsize(s[1]),
        flops=lambda s: 2 * s[0],
        notes="bytes = fused traffic 4 x n x itemsize (read x, y, z; write out); the unfused "
              "torch sequence moves 6 x n x itemsize (mul: 3, add: 3), so the byte count "
              "predicts a 1.5x speed-up; torch.addcmul is torch's own fused kernel (4 x n).",
    ),
]
# END SOLUTION ONLY
