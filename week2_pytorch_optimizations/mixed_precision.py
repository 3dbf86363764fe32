"""Mixed precision: what autocast changes, where precision is lost, and why fp16 needs a scaler.

What it teaches:
* the formats: float32 has 24 significant bits and exponents to 1e38; bfloat16 keeps the
  exponent range with 8 significant bits (unit roundoff 2^-8 = 3.9e-3); float16 has 11 bits
  (2^-11 = 4.9e-4) but overflows past 65504 and goes subnormal below 6e-5, zero below 6e-8.
* `torch.autocast` runs matmuls and convolutions in the low-precision type (tensor cores,
  half the bytes) and keeps precision-hungry ops (softmax, layer_norm, losses, big sums)
  in float32 on CUDA; weights and the optimizer stay float32 ("mixed").
* error grows with the length of a dot product: the low-precision inputs are rounded once
  each, and tensor cores accumulate in float32, so relative error stays near the input
  rounding (~2^-8 for bf16) instead of growing like k * eps as a bf16 accumulator would.
* fp16 gradients underflow: a loss scale (GradScaler) multiplies the loss before backward
  and divides the gradients after, and skips a step whose gradients overflowed.

Cost model: bf16/fp16 matmuls run at ~16x the non-tensor-core float32 rate on an H100 and
move half the bytes; elementwise ops only gain the halved bytes.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from course import runtime

LOW = (torch.bfloat16, torch.float16)


# EXERCISE NOTE: Everything here runs on a CPU too (autocast, bfloat16 and float16 exist there; only the
#   speed is missing). The three facts to find with your own code: a low-precision matmul's error is
#   about the rounding of its inputs, not the length of the dot product (the hardware accumulates in
#   float32); a running sum kept in bf16 stops growing; small fp16 gradients flush to zero unless the
#   loss is scaled first, and a GradScaler skips the steps whose scaled gradients overflowed.

def format_facts() -> dict:
    """Significant bits, unit roundoff, largest and smallest normal value of each format."""
    # BEGIN EXERCISE: for 'float32', 'bfloat16', 'float16': {'bits', 'mantissa_bits', 'unit_roundoff',
    #   'max', 'smallest_normal'} read from torch.finfo(dtype): .bits, .eps (the gap after 1.0 = 2^-(p-1)
    #   for p significant bits, the implicit leading 1 counted), .max, .tiny; the unit roundoff is eps / 2.
    #   Expect p = 24, 8 and 11
    # HINT: torch.finfo describes a float format; its eps is the gap after 1.0, 2^-(p-1) for p significant
    #   bits, so p follows from log2(eps), and rounding to nearest errs by at most half that gap.
    # HINT: loop over the three dtypes, build one dict per dtype name (without the 'torch.' prefix) from
    #   finfo's bits, eps, max and tiny.
    # HINT: `mantissa_bits = 1 - log2(eps)` (rounded to an int); `unit_roundoff = eps / 2`.
    out = {}
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        info = torch.finfo(dtype)
        out[str(dtype).replace("torch.", "")] = {"bits": info.bits, "mantissa_bits": -round(torch.log2(
            torch.tensor(info.eps)).item()) + 1, "unit_roundoff": info.eps / 2, "max": info.max,
            "smallest_normal": info.tiny}
    return out
    # END EXERCISE


def autocast_dtypes(model: nn.Module, x: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> dict:
    """Output dtype of every leaf module of `model(x)` under autocast(dtype), and the params' dtype."""
    if dtype not in LOW:
        raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype}")
    # BEGIN EXERCISE: a forward hook (register_forward_hook) on every leaf module (no children) records its
    #   output dtype under torch.autocast(x.device.type, dtype=dtype), keyed by its name in named_modules();
    #   remove the hooks afterwards (in a finally); add '<parameters>': the dtype of the first parameter
    # HINT: autocast decides per op which dtype to run in (matmuls and linears in 16 bits, reductions and
    #   norms in float32) while the parameters stay float32; forward hooks on the leaves reveal each op's
    #   choice.
    # HINT: register a hook on every module without children that stores its output's dtype by name; run the
    #   model inside torch.autocast(device type, dtype) in a try, removing every handle in the finally;
    #   then add the first parameter's dtype.
    # HINT: bind the name in the lambda's defaults: `lambda m, i, o, name=name: ...`, or every hook records
    #   under the last name.
    seen, handles = {}, []
    for name, module in model.named_modules():
        if not list(module.children()):
            handles.append(module.register_forward_hook(
                lambda m, i, o, name=name: seen.__setitem__(name, o.dtype)))
    try:
        with torch.autocast(x.device.type, dtype=dtype):
            model(x)
    finally:
        for h in handles:
            h.remove()
    seen["<parameters>"] = next(model.parameters()).dtype
    return seen
    # END EXERCISE


def matmul_error(k: int, dtype: torch.dtype, *, m: int = 64, n: int = 64, device=None, seed: int = 0) -> float:
    """Relative error (Frobenius norm) of an (m x k) @ (k x n) product in `dtype` vs float64.

    The inputs are drawn in float64 and rounded to `dtype`, as a model's activations are; the
    error therefore includes the rounding of the inputs, which is the bulk of it.
    """
    device = runtime.DEVICE if device is None else device
    # BEGIN EXERCISE: inputs drawn in float64 (a seeded generator), rounded to dtype and multiplied on
    #   device; the Frobenius norm of the error against the float64 product, relative to it
    # HINT: the reference is the float64 product of the very same draws; rounding the inputs to the low dtype
    #   and multiplying on the device gives the error a real kernel makes (input rounding dominates it).
    # HINT: a seeded torch.Generator, two float64 randn matrices, the exact product on the CPU, the product
    #   of the converted inputs brought back as float64, then a ratio of Frobenius norms.
    # HINT: `float((got - exact).norm() / exact.norm())`
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=g, dtype=torch.float64), torch.randn(k, n, generator=g, dtype=torch.float64)
    exact = a @ b
    got = (a.to(device=device, dtype=dtype) @ b.to(device=device, dtype=dtype)).to("cpu", torch.float64)
    return float((got - exact).norm() / exact.norm())
    # END EXERCISE


def accumulation_error(n: int, dtype: torch.dtype) -> dict:
    """Summing n copies of 0.01 with a running total kept in `dtype` (what a naive kernel does)
    against a float32 accumulator over the same rounded inputs: why kernels accumulate in fp32."""
    # BEGIN EXERCISE: add value = torch.tensor(0.01, dtype=dtype) n times to a total kept in dtype, one
    #   total = total + value at a time (a Python loop: torch.sum would accumulate in float32 for you, which
    #   is the point); return {'low_accumulator', 'fp32_accumulator': value.float() * n, 'exact': n *
    #   float(value), 'rel_err'}. Why does bf16 stall far below 20 for n = 2000?
    # HINT: a running total in a 16-bit format stalls once it is so large that adding 0.01 is less than half
    #   its spacing (the add rounds back to the old total); that is why kernels accumulate in float32.
    # HINT: the rounded value as a 0-d tensor of dtype, a 0-d zero total of dtype, a Python loop of total =
    #   total + value, then the four numbers; the exact answer uses the rounded value, n * float(value).
    # HINT: bf16 keeps 8 significant bits: in [4, 8) its spacing is 2^-5 ~ 0.031, and 0.01 is less than
    #   half of that, so from 4 on every add rounds back to the old total.
    value = torch.tensor(0.01, dtype=dtype)
    total = torch.zeros((), dtype=dtype)
    for _ in range(n):  # sequential on purpose: torch.sum would accumulate in float32 for us
        total = total + value
    exact = n * float(value)
    return {"low_accumulator": float(total), "fp32_accumulator": float(value.float() * n), "exact": exact,
            "rel_err": abs(float(total) - exact) / exact}
    # END EXERCISE


def fp16_underflow_fraction(values: torch.Tensor, scale: float = 1.0) -> float:
    """Fraction of nonzero float32 `values` that become 0 when stored as float16 after `scale`."""
    # BEGIN EXERCISE: the fraction of the nonzero values that become exactly 0 once values.float() * scale
    #   is stored as float16 (0.0 when none is nonzero)
    # HINT: float16's smallest subnormal is about 6e-8: smaller magnitudes round to 0 (underflow); scaling
    #   before the cast (as loss scaling does) moves them into range. Count only values that were nonzero
    #   to begin with.
    # HINT: a nonzero mask, the scaled values cast to float16, then the count of (stored == 0) among the
    #   nonzero ones divided by the number of nonzero values (at least 1 to avoid dividing by zero).
    # HINT: `float(((stored == 0) & nonzero).sum()) / max(int(nonzero.sum()), 1)`
    nonzero = values != 0
    stored = (values.float() * scale).to(torch.float16)
    return float(((stored == 0) & nonzero).sum()) / max(int(nonzero.sum()), 1)
    # END EXERCISE


def fp16_step(model: nn.Module, opt: torch.optim.Optimizer, scaler, x: torch.Tensor, y: torch.Tensor) -> dict:
    """One fp16-autocast training step with a GradScaler; says whether the step was taken."""
    # BEGIN EXERCISE: zero the grads; forward under torch.autocast(x.device.type, dtype=torch.float16), loss
    #   = mse_loss(model(x).float(), y); note scaler.get_scale(); scaler.scale(loss).backward(),
    #   scaler.step(opt) (unscales, skips the update when a gradient is inf/NaN), scaler.update(); return
    #   {'loss', 'scale_before', 'scale_after', 'skipped': scale_after < scale_before}
    # HINT: the GradScaler multiplies the loss by a large scale so small fp16 gradients do not underflow,
    #   unscales before the step, skips the step when any gradient overflowed (inf/NaN) and lowers the
    #   scale; a drop in the scale is how you see the skip.
    # HINT: zero_grad; the forward and loss under fp16 autocast (loss computed on float32 output); remember
    #   get_scale(); scale(loss).backward(); step(opt); update(); return the dict.
    # HINT: `skipped = scaler.get_scale() < scale_before` (read after update()).
    opt.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=torch.float16):
        loss = nn.functional.mse_loss(model(x).float(), y)
    scale_before = scaler.get_scale()
    scaler.scale(loss).backward()  # gradients of loss * scale: small ones stay above fp16's floor
    scaler.step(opt)  # unscales; skips the update if any gradient is inf/NaN
    scaler.update()  # halves the scale after an overflow, grows it after 2000 clean steps
    return {"loss": float(loss.detach()), "scale_before": scale_before, "scale_after": scaler.get_scale(),
            "skipped": scaler.get_scale() < scale_before}
    # END EXERCISE


def make_scaler(device=None, init_scale: float = 2.0 ** 16):
    device = runtime.DEVICE if device is None else torch.device(device)
    return torch.amp.GradScaler(device.type, init_scale=init_scale)


def loss_error_vs_fp64(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Relative error of the MSE loss of `model` in fp32, bf16- and fp16-autocast vs a float64 copy."""
    import copy

    # BEGIN EXERCISE: the relative error of the MSE loss against a float64 copy of the model (on x.double(),
    #   y.double()), under torch.no_grad(): {'float32': the plain forward, 'bfloat16' and 'float16': the
    #   forward under autocast of that dtype, loss on model(x).float()}. Expect float32 < float16 < bfloat16
    # HINT: compare each precision's loss against a float64 copy of the same model and data: float32 is near
    #   exact, fp16 has more mantissa bits than bf16 (so a smaller error) but less range.
    # HINT: deepcopy the model to double; under no_grad compute the exact loss, the plain float32 loss, then
    #   for each low dtype the loss under autocast on model(x).float(); relative errors keyed by dtype
    #   name.
    # HINT: each entry is `abs(loss - exact) / exact`.
    exact_model = copy.deepcopy(model).double()
    out = {}
    with torch.no_grad():
        exact = float(nn.functional.mse_loss(exact_model(x.double()), y.double()))
        out["float32"] = abs(float(nn.functional.mse_loss(model(x), y)) - exact) / exact
        for dtype in LOW:
            with torch.autocast(x.device.type, dtype=dtype):
                loss = nn.functional.mse_loss(model(x).float(), y)
            out[str(dtype).replace("torch.", "")] = abs(float(loss) - exact) / exact
    return out
    # END EXERCISE
