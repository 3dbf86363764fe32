"""Quantized inference in the package: the int8 weight-only GPT (and fp8 on sm_89+) through the same export.

aot_package.py packages the capstone GPT in its own precision. Here the same two functions
(prefill, cached decode) are exported and AOT-compiled from a QUANTIZED copy of the model, so
that the .pt2 holds int8 weights (half the bytes of bf16, a quarter of fp32) and the code that
multiplies by them. Nothing else changes: the triton_ops of aot_package, the caches the caller
owns, the metadata (one more key, `course.weights`), aot_runner.py to serve it.

int8 weight-only (week 5's quantization lesson)
------------------------------------------------
Every nn.Linear becomes `Int8Linear`: the lesson's per-output-channel symmetric int8
(`quantization.quantize_int8`: q in [-127, 127], one fp32 scale per row) and a forward through
ONE transparent op, `course::aot_int8_linear` (a triton_op, like aot_package's five): on a GPU
its body launches the lesson's `int8_matmul_kernel` (q converted to x's dtype in the tile loop,
exactly; the scale applied to the fp32 accumulator once), so the package reads int8 bytes and
never writes a dequantized copy; on a CPU its body is the same arithmetic in torch ops
(`x @ q^T`, then `* scale`), which Inductor compiles to a conversion loop and an MKL/aten matmul.
The tile shape is fixed at BLOCK_M = 16: a package has no autotuner and M (batch x positions)
is a symbolic size, so the config cannot depend on it; 16 rows is the decode case the lesson
is about (weight-bandwidth-bound), and a prefill of many rows runs the same tiles, rereading
each weight strip per 16 rows from L2. The LM head is tied to the token embedding: the head
becomes int8, the embedding stays in the model's dtype (a lookup reads one row per token).

Accuracy (the quantization lesson's check): the int8 package is compared (a) with the int8
EAGER model (`quantization.quantize_model`), which does the same arithmetic in another order:
the error model of aot_package (`TOLERANCE` fp32, `TOLERANCE_BF16` bf16); (b) with the FLOAT
model, within the lesson's accuracy bound on the logits (`quantization.LOGITS_REL_ERR`,
norm-wise relative).

fp8 (sm_89+): dynamic activation, per-row scales
------------------------------------------------
What a practitioner deploys in fp8 (torchao's float8 dynamic-activation recipe, rowwise): the
weight is stored in float8_e4m3fn with one fp32 scale per output row (max |w| / 448), and every
call quantizes the activation rows on the fly (one scale per row, max |x| / 448) and multiplies
the fp8 operands on the tensor cores with `torch._scaled_mm` (cuBLASLt/CUTLASS), the scales
applied in its epilogue, output bf16. fp8 tensor cores start at compute capability 8.9 (L4, RTX 40,
H100); `package_fp8` refuses before exporting anything on an older GPU or without one, naming the
int8 package instead. `_scaled_mm` also needs K and N multiples of 16: a Linear that is not
(a head over GPT-2's own 50,257 tokens; the capstone pads its vocabulary to 50,304) stays in bf16. Error model: e4m3 keeps 3 mantissa bits, a
relative rounding error of at most 2^-4 per operand element (RMS ~2.5%), so a dot product of two
rounded operands errs by ~3.6% RMS relative: logits move by a few percent, `FP8_LOGITS_REL_ERR`
bounds them (the int8 bound is 0.03; fp8 rounds the activations too, with 4 fewer bits).
"""
from __future__ import annotations

import copy
from pathlib import Path

import torch
import torch.nn as nn

from course import ops, runtime
from week5_integration import aot_package as ap
from week5_integration import model as m
from week5_integration import quantization as qz

NAMESPACE = ops.namespace(__name__)
FP8_MAX = 448.0  # largest finite float8_e4m3fn
FP8_MINIMUM = (8, 9)  # fp8 tensor cores: Ada (L4, RTX 40) and Hopper
FP8_INSTEAD = "package the int8 weight-only model instead (aot_quant.package_int8), which runs on any GPU and on the CPU"
# fp8's logits bound against the float model: ~3.6% RMS relative per matmul output (module docstring),
# which the residual stream and the final norm do not amplify; 0.1 still catches a wrong scale
# (a factor), a transposed weight or a lost row, all errors of order 1.
FP8_LOGITS_REL_ERR = 0.1
# The int8 kernel's fixed tiles in a package (module docstring): decode's 16 rows.
PACKAGE_BLOCK_M = 16


# ------------------------------------------------------------------------------- int8 weight-only
def _int8_config(N: int, K: int, itemsize: int) -> qz.Int8Config:
    # The lesson's heuristic (or its swept table) for a 16-row matmul: N and K are static in the graph.
    config = qz.config_for(PACKAGE_BLOCK_M, N, K, itemsize)
    return config if config.block_m == PACKAGE_BLOCK_M else qz.Int8Config(
        PACKAGE_BLOCK_M, config.block_n, config.block_k, config.num_warps, config.num_stages)


@torch.library.triton_op(f"{NAMESPACE}::aot_int8_linear", mutates_args=())
def aot_int8_linear(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ deq(q, scale)^T -> (..., N) in x's dtype: the lesson's int8_matmul_kernel on a GPU."""
    N, K = q.shape
    flat = x.reshape(-1, K).contiguous()
    if not ap.on_gpu_tensor(x) or x.dtype not in qz.X_DTYPES:
        # The kernel's arithmetic in torch ops: integers in x's dtype (exact), the scale once, at the end.
        y = (flat @ q.to(x.dtype).t()) * scale
        return y.to(x.dtype).reshape(*x.shape[:-1], N)
    config = _int8_config(N, K, x.element_size())
    M = flat.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (-(-M // config.block_m) * -(-N // config.block_n),)
    torch.library.wrap_triton(qz.int8_matmul_kernel)[grid](
        flat, q, scale, y, M, N, K, flat.stride(0), q.stride(0), y.stride(0),
        EXACT_FP32=x.dtype == torch.float32, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
        BLOCK_K=config.block_k, num_warps=config.num_warps, num_stages=config.num_stages)
    return y.reshape(*x.shape[:-1], N)


class Int8Linear(qz.QuantLinear):
    """The lesson's QuantLinear (int8 q, fp32 scales, `.weight` dequantized on read), its forward
    through `aot_int8_linear`, which torch.export keeps and AOTInductor compiles into the package."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = aot_int8_linear(x, self.qweight, self.scale)
        return y if self.bias is None else y + self.bias.to(y.dtype)


def int8_model(model: m.GPT) -> m.GPT:
    """A copy of `model` with every nn.Linear an Int8Linear (quantization.quantize_int8's weights)."""
    _check_gpt(model)
    twin = copy.deepcopy(model)
    for name in [n for n, mod in twin.named_modules() if isinstance(mod, nn.Linear)]:
        parent_name, _, child = name.rpartition(".")
        parent = twin.get_submodule(parent_name) if parent_name else twin
        linear = getattr(parent, child)
        q, scale = qz.quantize_int8(linear.weight)
        setattr(parent, child, Int8Linear(q, scale, linear.bias, kernel="torch", dtype=linear.weight.dtype))
    return twin


def package_int8(model: m.GPT, path, *, max_batch: int = 8, max_len: int | None = None) -> Path:
    """aot_package.package of the int8 weight-only twin of `model` (metadata: course.weights = int8).
    A bf16 model on a GPU without bf16 tensor cores (a T4) is refused first, as the lesson's launcher
    refuses it: the kernel's tl.dot would be emulated there; float16 is the dtype to package."""
    _check_gpt(model)
    if model.tok.weight.device.type == "cuda":
        runtime.require_bf16_tensor_cores(model.tok.weight.dtype, "the int8 package's matmul (tl.dot)",
                                          model.tok.weight.device)
    return ap.package(int8_model(model), path, max_batch=max_batch, max_len=max_len,
                      extra_metadata={"course.weights": "int8"})


# ---------------------------------------------------------------------------------------- fp8
def quantize_fp8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(w8, scale): float8_e4m3fn rows of a 2-D weight (N, K) and one fp32 scale per row
    (max |w[n]| / 448; 1 for an all-zero row), so that w ~ w8 * scale[:, None]."""
    if not isinstance(w, torch.Tensor) or w.dim() != 2 or not w.is_floating_point():
        raise TypeError(f"w must be a 2-D floating-point tensor, got {getattr(w, 'dtype', type(w).__name__)}")
    w32 = w.detach().float()
    amax = w32.abs().amax(dim=1) if w32.shape[1] else w32.new_zeros(w32.shape[0])
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    return (w32 / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).contiguous(), scale.contiguous()


def fits_fp8(linear: nn.Linear) -> bool:
    """torch._scaled_mm's shape rule: K and N multiples of 16."""
    return linear.in_features % 16 == 0 and linear.out_features % 16 == 0


class Fp8Linear(nn.Module):
    """y = x @ w^T with w in float8_e4m3fn (per-row scales) and x quantized per row on every call,
    multiplied by torch._scaled_mm on fp8 tensor cores (sm_89+), output in x's dtype (bf16/fp16)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w8, scale = quantize_fp8_rows(linear.weight)
        self.register_buffer("w8", w8)
        self.register_buffer("w_scale", scale.view(1, -1))  # (1, N): _scaled_mm's rowwise layout for b
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    @property
    def weight(self) -> torch.Tensor:
        return self.w8.float() * self.w_scale.t()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        x8, x_scale = quantize_activation_fp8(flat)
        # b = w8^T: a column-major view of the row-major (N, K) weight, the layout _scaled_mm requires.
        y = torch._scaled_mm(x8, self.w8.t(), scale_a=x_scale, scale_b=self.w_scale, out_dtype=x.dtype)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*x.shape[:-1], self.out_features)


def quantize_activation_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x8, scale (M, 1) fp32): each row of x (M, K) in e4m3 with its own scale max|x| / 448."""
    amax = x.abs().amax(dim=1, keepdim=True).float().clamp_min(1e-12)  # an all-zero row: any scale works
    scale = amax / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale


def fp8_linear_reference(x: torch.Tensor, layer: Fp8Linear) -> torch.Tensor:
    """What Fp8Linear computes, in float32 from the rounded fp8 values (any device, no fp8 math):
    the reference of the error model, exact but for fp32 summation."""
    flat = x.reshape(-1, layer.in_features)
    x8, x_scale = quantize_activation_fp8(flat)
    y = (x8.float() * x_scale) @ layer.weight.t()
    if layer.bias is not None:
        y = y + layer.bias.float()
    return y.to(x.dtype).reshape(*x.shape[:-1], layer.out_features)


def fp8_model(model: m.GPT) -> m.GPT:
    """A copy of `model` with every nn.Linear that fits _scaled_mm an Fp8Linear (the rest as they are)."""
    _check_gpt(model)
    twin = copy.deepcopy(model)
    for name in [n for n, mod in twin.named_modules() if isinstance(mod, nn.Linear)]:
        parent_name, _, child = name.rpartition(".")
        parent = twin.get_submodule(parent_name) if parent_name else twin
        if fits_fp8(getattr(parent, child)):
            setattr(parent, child, Fp8Linear(getattr(parent, child)))
    return twin


def require_fp8(device=None) -> None:
    """NotOnThisGpu (RuntimeError) unless this machine has fp8 tensor cores: a GPU of compute
    capability >= 8.9. Without a GPU (simulation) too: torch._scaled_mm's fp8 path is a GPU's."""
    if not runtime.on_gpu():
        raise runtime.NotOnThisGpu(f"the fp8 package needs an NVIDIA GPU of compute capability >= "
                                   f"{FP8_MINIMUM[0]}.{FP8_MINIMUM[1]} (fp8 tensor cores, torch._scaled_mm); "
                                   f"this machine has none: {FP8_INSTEAD}")
    runtime.require_capability(FP8_MINIMUM, "the fp8 package (fp8 tensor cores, torch._scaled_mm)", FP8_INSTEAD,
                               device)


def package_fp8(model: m.GPT, path, *, max_batch: int = 8, max_len: int | None = None) -> Path:
    """aot_package.package of the fp8 twin of `model` (bf16 or fp16), on sm_89+ only: refused
    before anything is exported elsewhere (metadata: course.weights = fp8)."""
    _check_gpt(model)
    require_fp8(model.tok.weight.device)
    if model.tok.weight.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"the fp8 package needs a bfloat16 or float16 model (torch._scaled_mm's rowwise output), "
                        f"got {model.tok.weight.dtype}")
    return ap.package(fp8_model(model), path, max_batch=max_batch, max_len=max_len,
                      extra_metadata={"course.weights": "fp8"})


def _check_gpt(model) -> None:
    if not isinstance(model, m.GPT):
        raise TypeError(f"model must be a week5 GPT, got {type(model).__name__}")


def logits_rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """The quantization lesson's accuracy measure: ||got - want|| / ||want|| (norm-wise, float64)."""
    return float((got.double() - want.double()).norm() / want.double().norm())
