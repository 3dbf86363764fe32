"""Exercise: number formats, autocast, where precision is lost, and loss scaling.
Same names as week2_pytorch_optimizations/mixed_precision.py.

Check your work with `pytest tests/week2/test_mixed_precision.py --impl=exercises`. Each stub
raises NotImplementedError until you write it; delete that line when you do. Everything here
runs on a CPU too (autocast, bfloat16 and float16 exist there; only the speed is missing).

The three facts to find with your own code: a low-precision matmul's error is about the rounding
of its inputs, not the length of the dot product (the hardware accumulates in float32); a
running sum kept in bf16 stops growing; small fp16 gradients flush to zero unless the loss is
scaled first, and a GradScaler skips the steps whose scaled gradients overflowed.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from course import runtime

LOW = (torch.bfloat16, torch.float16)


def format_facts() -> dict:
    """For "float32", "bfloat16" and "float16": {"bits", "mantissa_bits", "unit_roundoff", "max",
    "smallest_normal"}.

    Read them from `torch.finfo(dtype)`: `.bits`, `.eps` (the gap after 1.0 = 2^-(p-1) for p
    significant bits, so p = -log2(eps) + 1, counting the implicit leading 1), `.max`, `.tiny`
    (the smallest normal number). Unit roundoff (the largest relative rounding error) is eps / 2.
    Expect p = 24, 8 and 11.
    """
    raise NotImplementedError("not implemented yet: format_facts (week2 exercise)")


def autocast_dtypes(model: nn.Module, x: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> dict:
    """The output dtype of every leaf module (one with no children) of `model(x)` under
    `torch.autocast(x.device.type, dtype=dtype)`, keyed by its name in `model.named_modules()`,
    plus "<parameters>": the dtype of the model's first parameter.

    Record them with `module.register_forward_hook(lambda m, inputs, output: ...)` and remove the
    hooks afterwards (in a `finally`). Raise ValueError("dtype must be torch.bfloat16 or
    torch.float16, ...") for any other dtype. You will see Linear run in `dtype` and the
    parameters stay float32 (on CUDA, LayerNorm's output stays float32 as well).
    """
    raise NotImplementedError("not implemented yet: autocast_dtypes (week2 exercise)")


def matmul_error(k: int, dtype: torch.dtype, *, m: int = 64, n: int = 64, device=None, seed: int = 0) -> float:
    """Relative error (Frobenius norm) of an (m x k) @ (k x n) product computed in `dtype`.

    Draw a and b in float64 on the CPU with `torch.Generator().manual_seed(seed)`; the exact
    answer is their float64 product. Round them to `dtype` on `device` (default runtime.DEVICE),
    multiply there, bring the result back to float64 on the CPU and return
    ||got - exact|| / ||exact||. Try k = 16 and k = 4096: does the error grow with k?
    """
    raise NotImplementedError("not implemented yet: matmul_error (week2 exercise)")


def accumulation_error(n: int, dtype: torch.dtype) -> dict:
    """Add `value = torch.tensor(0.01, dtype=dtype)` n times to a running total kept in `dtype`,
    one `total = total + value` at a time (a Python loop: torch.sum would accumulate in float32
    for you, which is the point of the lesson).

    Return {"low_accumulator": the total, "fp32_accumulator": value.float() * n,
            "exact": n * float(value) (the rounded input, added exactly),
            "rel_err": |low_accumulator - exact| / exact}. Why does bf16 stall far below 20 for
    n = 2000? (Compare 0.01 with half the gap between bf16 numbers near the total.)
    """
    raise NotImplementedError("not implemented yet: accumulation_error (week2 exercise)")


def fp16_underflow_fraction(values: torch.Tensor, scale: float = 1.0) -> float:
    """Fraction of the nonzero `values` that become exactly 0 when `values.float() * scale` is
    stored as float16 (0.0 when no value is nonzero). With gradients spread over 1e-10 .. 1e-2,
    about a third vanish unscaled; with scale 2**16 almost none do."""
    raise NotImplementedError("not implemented yet: fp16_underflow_fraction (week2 exercise)")


def fp16_step(model: nn.Module, opt: torch.optim.Optimizer, scaler, x: torch.Tensor, y: torch.Tensor) -> dict:
    """One fp16 training step with a `torch.amp.GradScaler`; say whether the step was taken.

    zero the grads; forward under `torch.autocast(x.device.type, dtype=torch.float16)`, loss =
    `nn.functional.mse_loss(model(x).float(), y)`; note `scaler.get_scale()`; then
    `scaler.scale(loss).backward()`, `scaler.step(opt)` (unscales, and skips the update when a
    gradient is inf/NaN), `scaler.update()` (halves the scale after an overflow).
    Return {"loss", "scale_before", "scale_after", "skipped": scale_after < scale_before}.
    """
    raise NotImplementedError("not implemented yet: fp16_step (week2 exercise)")


def make_scaler(device=None, init_scale: float = 2.0 ** 16):
    """Given: a GradScaler for `device` (default runtime.DEVICE) starting at `init_scale`."""
    device = runtime.DEVICE if device is None else torch.device(device)
    return torch.amp.GradScaler(device.type, init_scale=init_scale)


def loss_error_vs_fp64(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Relative error of the MSE loss of `model(x)` vs a float64 copy of the model
    (`copy.deepcopy(model).double()` on `x.double()`, `y.double()`), under `torch.no_grad()`:
    {"float32": plain forward, "bfloat16" and "float16": forward under autocast of that dtype
    (loss computed on `model(x).float()`)}. Expect float32 < float16 < bfloat16.
    """
    raise NotImplementedError("not implemented yet: loss_error_vs_fp64 (week2 exercise)")
