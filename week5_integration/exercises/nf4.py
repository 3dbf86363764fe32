"""Exercise: QLoRA's NF4 data type, double quantization, and Triton kernels that read 4-bit weights.

Same names as week5_integration/nf4.py (read its docstring first). Yours to write: the table's
derivation `nf4_code_table`, `pack_codes` / `unpack_codes`, `nf4_quantize`, `double_quantize`,
`bits_per_parameter`, `nf4_dequantize_torch`, the kernels (`_nf4_levels`, `_block_scales`,
`nf4_dequantize_kernel`, `nf4_matmul_kernel`) and their launchers, `QLoRAFunction`,
`qlora_linear` and `QLoRALinear.forward`. Given: the published table, the float64 reference
from the paper (`nf4_reference_*`, what the tests hold you to), the storage class, the configs,
the benchmarks. Check with `pytest tests/week5/test_nf4.py --impl=exercises`.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from course import runtime  # before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.bench import Benchmark
from course.check import random_tensor
from week5_integration import lora as lora_mod
from week5_integration.lora import _grouped_tile, _store_tile

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

# The 16 NF4 levels, as published (QLoRA, appendix E; bitsandbytes' NF4 map), float32 values.
NF4_TABLE_VALUES = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
)
NF4_TABLE = torch.tensor(NF4_TABLE_VALUES, dtype=torch.float32)
# The outermost probability of the quantile construction, as bitsandbytes uses it. Numerically it is
# the mean of 1 - 1/32 and 1 - 1/30: the centre of the last of 16 (positive side) or of 15
# (negative side) equal-probability bins.
NF4_OFFSET = 0.9677083
BLOCK = 64          # weights per absmax scale
DQ_BLOCK = 256      # scales per second-level (fp32) scale
DQ_LEVELS = 127     # int8 grid of the centred scales: -127..127
X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
MAX_NUMEL = 2**31 - 2**16  # int32 element offsets in the kernels, with room for one block past the end
FUSED_MAX_M = 64  # QLoRALinear: fused dequant-matmul up to this many rows, dequantize + GEMM above


# --------------------------------------------------------------------------- the data type
def nf4_code_table(offset: float = NF4_OFFSET) -> torch.Tensor:
    """The NF4 levels from their definition (float64): N(0,1) quantiles, normalized, exact zero.

    Positive half: 8 quantiles at probabilities evenly spaced from `offset` down to (not
    including) 0.5; negative half: 7 such quantiles, negated; plus 0. Dividing by the largest
    (the quantile at `offset`) puts the outermost levels at -1 and +1.
    """
    # TODO: 8 positive quantiles: torch.special.ndtri(linspace(offset, 0.5, 9)[:-1]) (float64);
    #       7 negative: -ndtri(linspace(offset, 0.5, 8)[:-1]); add 0; sort; divide by the max.
    raise NotImplementedError("not implemented yet: nf4_code_table (week5 exercise)")


def nf4_midpoints(table: torch.Tensor = NF4_TABLE) -> torch.Tensor:
    """The 15 decision boundaries between neighbouring levels: nearest level = bucket index."""
    return (table[1:] + table[:-1]) / 2


# ------------------------------------------------------------------ the reference, from the paper
def nf4_reference_quantize(weight: torch.Tensor, block: int = BLOCK):
    """(codes int64 (n,), absmax float64 (blocks,)): the paper's block-wise NF4, in float64.

    Straight from the definition: flatten, split into blocks of `block`, divide by each block's
    absmax, take the nearest NF4 level (ties to the lower one, as argmin does). A trailing partial
    block is padded with zeros (which change no absmax).
    """
    flat = weight.detach().reshape(-1).double()
    n = flat.numel()
    padded = torch.zeros(-(-n // block) * block, dtype=torch.float64, device=flat.device)
    padded[:n] = flat
    blocks = padded.view(-1, block)
    absmax = blocks.abs().amax(dim=1)
    normalized = blocks / torch.where(absmax > 0, absmax, torch.ones_like(absmax))[:, None]
    table = NF4_TABLE.double().to(flat.device)
    codes = (normalized[..., None] - table).abs().argmin(dim=-1)
    return codes.reshape(-1)[:n], absmax


def nf4_reference_dequantize(codes, absmax, shape, block: int = BLOCK) -> torch.Tensor:
    """float64 weights from `nf4_reference_quantize`'s codes and scales."""
    table = NF4_TABLE.double().to(codes.device)
    n = codes.numel()
    scales = absmax.double().repeat_interleave(block)[:n]
    return (table[codes] * scales).reshape(shape)


def nf4_reference_double_quantize(absmax, block: int = DQ_BLOCK):
    """(q int64, step float64 per block, mean float64): the centred scales on a linear 8-bit grid."""
    c = absmax.double()
    mean = c.mean() if c.numel() else c.new_zeros(())
    centred = c - mean
    padded = torch.zeros(-(-c.numel() // block) * block, dtype=torch.float64, device=c.device)
    padded[:c.numel()] = centred
    step = padded.view(-1, block).abs().amax(dim=1) / DQ_LEVELS
    safe = torch.where(step > 0, step, torch.ones_like(step))
    q = torch.round(padded.view(-1, block) / safe[:, None]).reshape(-1)[:c.numel()]
    return q.long(), step, mean


# ------------------------------------------------------------------------- the storage format
@dataclass
class NF4Weight:
    """A weight in NF4: packed codes plus its scales (plain or double-quantized), and its shape.

    packed: uint8 (ceil(n / 2),), two codes per byte, the even element in the high nibble.
    double_quant=False: absmax float32 (blocks,).
    double_quant=True: absmax_q int8 (blocks,), absmax_step float32 (ceil(blocks / 256),),
    absmax_mean float32 (1,): absmax = absmax_q * absmax_step[block // 256] + absmax_mean.
    """
    packed: torch.Tensor
    shape: tuple
    double_quant: bool
    absmax: torch.Tensor | None = None
    absmax_q: torch.Tensor | None = None
    absmax_step: torch.Tensor | None = None
    absmax_mean: torch.Tensor | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def device(self):
        return self.packed.device

    def tensors(self) -> dict:
        names = ("absmax_q", "absmax_step", "absmax_mean") if self.double_quant else ("absmax",)
        return {"packed": self.packed, **{name: getattr(self, name) for name in names}}

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def bits_per_parameter(self) -> float:
        return 8 * self.nbytes / max(self.numel, 1)

    def block_scales(self) -> torch.Tensor:
        """The per-64 absmax as the kernels use it (float32; dequantized if double-quantized)."""
        if not self.double_quant:
            return self.absmax
        step = self.absmax_step.repeat_interleave(DQ_BLOCK)[:self.absmax_q.numel()]
        # Rounded once, as the kernels' tl.fma rounds: q * step is exact in float64 (8 x 24 bits),
        # so the float64 sum rounded to float32 is the FMA's result (two float32 roundings, as
        # q.float() * step + mean gives, differ from it in the last bit).
        return (self.absmax_q.double() * step.double() + self.absmax_mean).float()


def bits_per_parameter(double_quant: bool, numel: int | None = None) -> float:
    """4-bit codes + the scales' bits per weight; the large-tensor limit when numel is None."""
    # TODO: numel None: 4 + 8/64 + 32/(64*256) (double_quant) or 4 + 32/64. Else count bytes:
    #       ceil(n/2) codes + per block of 64 one fp32 (or one int8, plus 4 bytes per 256 blocks and 4 for the mean).
    raise NotImplementedError("not implemented yet: bits_per_parameter (week5 exercise)")


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """Two 4-bit codes per uint8 (an odd count gets a zero code at the end)."""
    # TODO: pad to even; (codes[0::2] << 4) | codes[1::2] as uint8.
    raise NotImplementedError("not implemented yet: pack_codes (week5 exercise)")


def unpack_codes(packed: torch.Tensor, numel: int) -> torch.Tensor:
    """int64 codes (numel,) from `pack_codes`' bytes."""
    # TODO: high nibble then low nibble per byte, int64, first numel.
    raise NotImplementedError("not implemented yet: unpack_codes (week5 exercise)")


def _check_weight(weight):
    validate.tensor(weight, "weight", dtypes=WEIGHT_DTYPES, contiguous=False)
    if weight.numel() > MAX_NUMEL:
        raise ValueError(f"weight has {weight.numel()} elements; at most {MAX_NUMEL} (the kernels' offsets are int32)")
    if weight.numel() and not torch.isfinite(weight).all():
        raise ValueError("weight holds NaN or Inf: a block's absmax would be Inf/NaN and every weight in it lost")


def double_quantize(absmax: torch.Tensor):
    """(q int8, step float32 per 256, mean float32 (1,)): the scales on a centred 8-bit grid."""
    # TODO: mean (shape (1,)); centred = absmax - mean, padded to blocks of 256;
    #       step = block max |centred| / 127; q = round(centred / step) (step 0 -> divide by 1), int8.
    raise NotImplementedError("not implemented yet: double_quantize (week5 exercise)")


def nf4_quantize(weight: torch.Tensor, *, double_quant: bool = True) -> NF4Weight:
    """Block-wise (64) absmax NF4 of any float tensor, computed in float32 on its device."""
    # TODO: _check_weight; flatten in float32, pad to blocks of 64; absmax per block;
    #       codes = bucketize(w / absmax, nf4_midpoints()) (absmax 0 -> divide by 1); pack; store the scales
    #       plainly or double-quantized in an NF4Weight.
    raise NotImplementedError("not implemented yet: nf4_quantize (week5 exercise)")


def nf4_dequantize_torch(w: NF4Weight, dtype=torch.bfloat16) -> torch.Tensor:
    """dequant(W) with torch ops: unpack, look up, scale. The reference the kernels are held to."""
    # TODO: unpack, NF4_TABLE[codes] * w.block_scales() repeated 64 times, cast, reshape.
    raise NotImplementedError("not implemented yet: nf4_dequantize_torch (week5 exercise)")


# ------------------------------------------------------------------------------- the kernels
@triton.jit
def _nf4_levels(packed_ptr, table_ptr, idx, mask):
    """The NF4 level of element idx (int32): its nibble of byte idx >> 1, looked up in the table."""
    # TODO: byte = load(packed + (idx >> 1)); the even element's code is the HIGH nibble;
    #       return tl.load(table_ptr + code).
    pass


@triton.jit
def _block_scales(absmax_ptr, absmax_q_ptr, absmax_step_ptr, mean, block, mask, DOUBLE_QUANT: tl.constexpr):
    """absmax of quantization block(s) `block` (float32), undoing the double quantization."""
    # TODO: DOUBLE_QUANT: tl.fma(q (int8 -> fp32), step[block >> 8], mean) (one rounding, as
    #       block_scales computes it); else absmax[block].
    pass


@triton.jit
def nf4_dequantize_kernel(packed_ptr, absmax_ptr, absmax_q_ptr, absmax_step_ptr, mean_ptr, table_ptr,
                          out_ptr, n, DOUBLE_QUANT: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    # TODO: offs of this program (BLOCK_SIZE), mask < n; level * scale of block offs >> 6; store in out's dtype.
    pass


@triton.jit
def nf4_matmul_kernel(x_ptr, packed_ptr, absmax_ptr, absmax_q_ptr, absmax_step_ptr, mean_ptr, table_ptr, y_ptr,
                      M, N, K, stride_xm, stride_xk, stride_ym, stride_yn,
                      DOUBLE_QUANT: tl.constexpr, ROW_ALIGNED: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    """y = x dequant(W)^T, W (N, K) in NF4; each W^T tile dequantized in registers, in the K loop."""
    # TODO: tiles as in lora's kernels; per K step of 64: the x tile, idx = n * K + k for the
    #       W^T tile [BK, BN], levels, scales (one per column when ROW_ALIGNED, else per element), zero past K,
    #       cast to x's dtype, tl.dot into the fp32 accumulator; _store_tile.
    pass


def _config(bm, bn, stages, warps, group_m=8):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": BLOCK, "GROUP_M": group_m},
                         num_stages=stages, num_warps=warps)


# Decode (M <= 16) wants many narrow column blocks to spread the weight over 132 SMs; training
# sizes want the big tensor-core tiles. `_prune_matmul_configs` keeps the ones that fit M.
MATMUL_CONFIGS = [
    _config(16, 32, 4, 4), _config(16, 64, 4, 4), _config(16, 128, 4, 4),
    _config(64, 128, 4, 4), _config(128, 128, 3, 8), _config(128, 256, 3, 8),
]
SIM_MATMUL_CONFIG = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": BLOCK, "GROUP_M": 4}
DEQUANT_BLOCK = 1024


def _prune_matmul_configs(configs, named_args, **kwargs):
    m = named_args["M"]
    if m <= 16:
        keep = [c for c in configs if c.kwargs["BLOCK_M"] == 16]
    elif m <= 128:
        keep = [c for c in configs if c.kwargs["BLOCK_M"] <= 64]
    else:
        keep = [c for c in configs if c.kwargs["BLOCK_M"] >= 64]
    limit = lora_mod._shared_memory_limit()
    itemsize = named_args["x_ptr"].element_size()
    keep = [c for c in keep if c.num_stages * (c.kwargs["BLOCK_M"] + c.kwargs["BLOCK_N"]) * BLOCK * itemsize <= limit]
    return keep or [_config(16, 32, 1, 4)]


nf4_matmul_autotuned = triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K", "DOUBLE_QUANT", "ROW_ALIGNED"],
                                       prune_configs_by={"early_config_prune": _prune_matmul_configs})(nf4_matmul_kernel)


# ------------------------------------------------------------------------------- launchers
_tables: dict = {}


def _table(device) -> torch.Tensor:
    key = str(device)
    if key not in _tables:
        _tables[key] = NF4_TABLE.to(device)
    return _tables[key]


def _check_nf4(w, name="weight"):
    if not isinstance(w, NF4Weight):
        raise TypeError(f"{name} must be an NF4Weight (from nf4_quantize), got {type(w).__name__}")
    validate.tensor(w.packed, f"{name}.packed", dtypes=(torch.uint8,), ndim=1)
    for key, t in w.tensors().items():
        validate.tensor(t, f"{name}.{key}", dtypes=(torch.int8,) if key == "absmax_q" else
                        ((torch.uint8,) if key == "packed" else (torch.float32,)), ndim=1)
    if w.packed.numel() != -(-w.numel // 2):
        raise ValueError(f"{name}.packed has {w.packed.numel()} bytes; {w.numel} codes need {-(-w.numel // 2)}")


def _scale_pointers(w: NF4Weight):
    """(absmax, absmax_q, absmax_step, mean) for the kernels; the unused ones point at packed (never read)."""
    if w.double_quant:
        return w.packed, w.absmax_q, w.absmax_step, w.absmax_mean
    return w.absmax, w.packed, w.packed, w.packed


def nf4_dequantize(w: NF4Weight, dtype=torch.bfloat16, *, out=None) -> torch.Tensor:
    """dequant(W) in `dtype` (w's shape) by the Triton kernel."""
    # TODO: _check_nf4; dtype check; allocate/check out; launch cdiv(n, DEQUANT_BLOCK) programs.
    raise NotImplementedError("not implemented yet: nf4_dequantize (week5 exercise)")


def nf4_matmul(x: torch.Tensor, w: NF4Weight, *, out=None) -> torch.Tensor:
    """x dequant(W)^T for x (..., K), W an NF4Weight of shape (N, K): the fused kernel (no autograd)."""
    # TODO: check x (..., K) against the weight (N, K) (2-D); allocate/check out (..., N);
    #       refuse x or out spanning 2^31 elements or more (lora's _check_int32_span: int32 offsets);
    #       _launch_matmul on the 2-D views (K == 0: zeros).
    raise NotImplementedError("not implemented yet: nf4_matmul (week5 exercise)")


def _launch_matmul(x2, w, y, M, N, K):
    # TODO: nf4_matmul_autotuned on a GPU, SIM_MATMUL_CONFIG in the interpreter; ROW_ALIGNED = K % 64 == 0.
    raise NotImplementedError("not implemented yet: _launch_matmul (week5 exercise)")


def dequantize_matmul(x, w: NF4Weight, dequantize=nf4_dequantize):
    """The two-step alternative: dequantize W into a temporary, then torch.matmul (cuBLAS)."""
    return F.linear(x, dequantize(w, x.dtype))


# ------------------------------------------------------------------------------- QLoRA
def _dequantize(w: NF4Weight, dtype, kernel: str):
    return nf4_dequantize(w, dtype) if kernel == "triton" else nf4_dequantize_torch(w, dtype)


class QLoRAFunction(torch.autograd.Function):
    """LoRA over an NF4 base: the bf16 weight exists only inside forward and inside backward."""

    @staticmethod
    def forward(ctx, x2, lora_a, lora_b, scale, x_in, meta, *stored):
        # TODO: rebuild the NF4Weight from `stored`; weight = _dequantize(...) (a temporary);
        #       y and xa as LoRALinearFunction does (lora_forward / lora_epilogue, or torch for kernel='torch');
        #       del the weight; save x (or x_in), xa, A, B and the stored tensors.
        raise NotImplementedError("not implemented yet: QLoRAFunction.forward (week5 exercise)")

    @staticmethod
    def backward(ctx, dy):
        # TODO: dequantize again; lora_backward (or its torch twin); one gradient per input.
        raise NotImplementedError("not implemented yet: QLoRAFunction.backward (week5 exercise)")


def _scale_names(double_quant):
    return ("absmax_q", "absmax_step", "absmax_mean") if double_quant else ("absmax",)


def qlora_linear(x, w: NF4Weight, lora_a, lora_b, scale, *, adapter_input=None, kernel="triton"):
    """x dequant(W)^T + scale (x A^T) B^T, W in NF4 (frozen), autograd for x, lora_a, lora_b.

    Without autograd and with at most FUSED_MAX_M rows, the base product runs in the fused
    dequant-matmul kernel; otherwise W is dequantized into a temporary for one GEMM (`QLoRAFunction`).
    """
    # TODO: check inputs; without autograd, kernel 'triton', no adapter_input and at most
    #       FUSED_MAX_M rows: nf4_matmul + addmm of the adapter term; else QLoRAFunction.apply.
    raise NotImplementedError("not implemented yet: qlora_linear (week5 exercise)")


class QLoRALinear(nn.Module):
    """A frozen NF4 base (buffers) plus trainable LoRA adapters (fp32 masters, computed in bf16)."""

    def __init__(self, in_features: int, out_features: int, r: int = 8, alpha: float = 16.0,
                 dropout: float = 0.0, *, double_quant: bool = True, kernel: str = "auto", device=None,
                 weight: torch.Tensor | None = None):
        super().__init__()
        lora_mod._check_hyper(r, alpha, dropout, in_features, out_features)
        lora_mod.resolve_kernel(kernel)
        self.in_features, self.out_features = in_features, out_features
        self.r, self.alpha, self.scaling = r, float(alpha), float(alpha) / r
        self.dropout, self.kernel, self.double_quant = float(dropout), kernel, double_quant
        self.lora_a = nn.Parameter(torch.empty(r, in_features, device=device))
        self.lora_b = nn.Parameter(torch.zeros(out_features, r, device=device))
        with torch.no_grad():
            nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        if weight is None:  # a fresh layer: nn.Linear's initialization, then quantized
            weight = torch.empty(out_features, in_features, device=device)
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        self.set_base(weight)

    @classmethod
    def from_linear(cls, linear: nn.Linear, r: int = 8, alpha: float = 16.0, dropout: float = 0.0, *,
                    double_quant: bool = True, kernel: str = "auto") -> "QLoRALinear":
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear needs an nn.Linear, got {type(linear).__name__}")
        if linear.bias is not None:
            raise ValueError("QLoRALinear has no bias; the week-5 GPT's layers have none")
        return cls(linear.in_features, linear.out_features, r, alpha, dropout, double_quant=double_quant,
                   kernel=kernel, device=linear.weight.device, weight=linear.weight.detach())

    @torch.no_grad()
    def set_base(self, weight: torch.Tensor) -> None:
        """Quantize `weight` (out, in) into the frozen NF4 buffers."""
        if tuple(weight.shape) != (self.out_features, self.in_features):
            raise ValueError(f"weight must be {(self.out_features, self.in_features)}, got {tuple(weight.shape)}")
        stored = nf4_quantize(weight, double_quant=self.double_quant)
        for name, t in stored.tensors().items():
            self.register_buffer(f"nf4_{name}", t)

    def nf4_weight(self) -> NF4Weight:
        names = ("packed",) + _scale_names(self.double_quant)
        fields = {name: getattr(self, f"nf4_{name}") for name in names}
        return NF4Weight(shape=(self.out_features, self.in_features), double_quant=self.double_quant, **fields)

    def _apply(self, fn, recurse=True):
        # model.to(torch.bfloat16) must move the quantization state but never change its dtypes:
        # rounding the fp32 scales to bf16 would change every weight.
        before = {name: buf.dtype for name, buf in self._buffers.items() if buf is not None}
        originals = dict(self._buffers)
        super()._apply(fn, recurse)
        for name, dtype in before.items():
            if self._buffers[name].dtype != dtype:
                self._buffers[name] = originals[name].to(self._buffers[name].device)
        return self

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, r={self.r}, "
                f"alpha={self.alpha:g}, dropout={self.dropout:g}, nf4, double_quant={self.double_quant}, "
                f"kernel={self.kernel!r}")

    def forward(self, x):
        # TODO: compute dtype (fp32 if it is not fp16/bf16/fp32); dropout for the adapter input;
        #       qlora_linear(x, self.nf4_weight(), A, B cast to it, ...).
        raise NotImplementedError("not implemented yet: QLoRALinear.forward (week5 exercise)")

    def dequantized_weight(self, dtype=torch.float32) -> torch.Tensor:
        return nf4_dequantize_torch(self.nf4_weight(), dtype)


def apply_qlora(model: nn.Module, targets=lora_mod.TARGETS, r: int = 8, alpha: float = 16.0, dropout: float = 0.0,
                *, double_quant: bool = True, kernel: str = "auto") -> nn.Module:
    """Swap the named nn.Linear layers for QLoRALinear (quantizing their weights); freeze the rest."""
    lora_mod.resolve_kernel(kernel)
    lora_mod.replace_linears(model, targets, lambda lin: QLoRALinear.from_linear(
        lin, r, alpha, dropout, double_quant=double_quant, kernel=kernel))
    lora_mod.freeze_all_but(model, lora_mod.is_adapter)
    return model


def quantization_error(weight: torch.Tensor, *, double_quant: bool = True) -> dict:
    """RMS and max |W - dequant(quant(W))|, relative to W's RMS, and the storage's bits per weight."""
    stored = nf4_quantize(weight, double_quant=double_quant)
    err = nf4_dequantize_torch(stored, torch.float64) - weight.double()
    rms = weight.double().pow(2).mean().sqrt().item()
    return {"rms_rel": err.pow(2).mean().sqrt().item() / rms, "max_rel": err.abs().max().item() / rms,
            "bits_per_param": stored.bits_per_parameter()}


# ---------------------------------------------------------------------------------- benchmarks
# Decode-sized (16 rows: weight-bandwidth-bound) and training-sized (compute-bound) products.
MATMUL_SIZES = [(16, 4096, 4096), (16, 11008, 4096), (4096, 2304, 768), (4096, 4096, 4096)]


def _matmul_inputs(size):
    m, n, k = size
    dev = runtime.DEVICE
    dtype = torch.bfloat16 if runtime.on_gpu() else torch.float32
    w = random_tensor((n, k), torch.float32, dev, scale=k ** -0.5)
    return random_tensor((m, k), dtype, dev), w.to(dtype), nf4_quantize(w)


def _nf4_bytes(n, k):
    return n * k // 2 + -(-n * k // BLOCK) + 4 * -(-n * k // (BLOCK * DQ_BLOCK))


def _dequant_inputs(size):
    n, k = size
    w = random_tensor((n, k), torch.float32, runtime.DEVICE, scale=k ** -0.5)
    return (nf4_quantize(w),)


def _out_dtype():
    return torch.bfloat16 if runtime.on_gpu() else torch.float32


BENCHMARKS = [
    Benchmark(
        name="nf4_matmul_week5",
        title="y = x dequant(W_nf4)^T, bf16: fused dequant-matmul vs dequantize then cuBLAS vs bf16 cuBLAS",
        sizes=MATMUL_SIZES,
        sim_sizes=[(5, 40, 64), (17, 33, 70)],
        size_label=lambda s: f"M={s[0]} N={s[1]} K={s[2]}",
        make_inputs=_matmul_inputs,
        variants={
            "torch": lambda x, w16, q: F.linear(x, w16),
            "torch_dequant": lambda x, w16, q: dequantize_matmul(x, q, nf4_dequantize_torch),
            "triton_dequant": lambda x, w16, q: dequantize_matmul(x, q),
            "triton_fused": lambda x, w16, q: nf4_matmul(x, q),
        },
        headline=("triton_fused", "triton_dequant"),
        sources={"triton_fused": [nf4_matmul_kernel, _nf4_levels, _block_scales, _launch_matmul, nf4_matmul],
                 "triton_dequant": [nf4_dequantize_kernel, _nf4_levels, _block_scales, nf4_dequantize]},
        bytes=lambda s: 2 * s[0] * s[2] + _nf4_bytes(s[1], s[2]) + 2 * s[0] * s[1],
        flops=lambda s: 2 * s[0] * s[1] * s[2],
        compute_dtype=torch.bfloat16,
        notes="bytes = the NF4 minimum (x, packed W + double-quantized scales, y) for every variant, so "
              "GB/s is an effective rate; torch reads a bf16 W (4x the weight bytes)",
    ),
    Benchmark(
        name="nf4_dequantize_week5",
        title="NF4 (double-quantized) -> bf16 dequantization",
        sizes=[(4096, 4096), (11008, 4096)],
        sim_sizes=[(33, 70)],
        size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_dequant_inputs,
        variants={
            "torch": lambda q: nf4_dequantize_torch(q, _out_dtype()),
            "triton": lambda q: nf4_dequantize(q, _out_dtype()),
        },
        headline=("triton",),
        sources={"triton": [nf4_dequantize_kernel, _nf4_levels, _block_scales, nf4_dequantize]},
        bytes=lambda s: _nf4_bytes(*s) + 2 * s[0] * s[1],
        notes="bytes = packed codes + scales read, bf16 weight written",
    ),
]


# --------------------------------------------------------------------------------- the sweep
def sweep(n: int = 4096, k: int = 4096, rows=(1, 4, 16, 32, 64, 128, 256, 1024, 4096)) -> None:
    """Fused dequant-matmul vs dequantize + cuBLAS vs bf16 cuBLAS over M: where the fused kernel stops paying."""
    from course import bench

    if not runtime.on_gpu():
        raise SystemExit("--sweep times kernels on the GPU; this machine runs the Triton interpreter")
    started = time.perf_counter()
    w = random_tensor((n, k), torch.float32, runtime.DEVICE, scale=k ** -0.5)
    q, w16 = nf4_quantize(w), w.to(torch.bfloat16)
    print(f"N={n} K={k} bf16; ms (median); FUSED_MAX_M = {FUSED_MAX_M}")
    print(f"{'M':>6} {'bf16 cuBLAS':>12} {'dequant+mm':>12} {'fused':>10}  fused vs dequant+mm")
    for m in rows:
        x = random_tensor((m, k), torch.bfloat16, runtime.DEVICE)
        times = [bench.time_gpu(fn, [()], warmup_ms=5, rep_ms=40).median_ms
                 for fn in (lambda: F.linear(x, w16), lambda: dequantize_matmul(x, q), lambda: nf4_matmul(x, q))]
        print(f"{m:>6} {times[0]:>12.4f} {times[1]:>12.4f} {times[2]:>10.4f}  {times[1] / times[2]:.2f}x")
    print(f"swept in {time.perf_counter() - started:.0f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", action="store_true", help="fused vs dequantize+matmul over M (GPU)")
    args = parser.parse_args(argv)
    if not args.sweep:
        parser.print_help()
        return 2
    sweep()
    return 0


if __name__ == "__main__":
    sys.exit(main())
