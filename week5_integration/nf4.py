"""NF4: QLoRA's 4-bit NormalFloat weights, and Triton kernels that read them; the QLoRA layer.

The data type (levels, block scales, double quantization, packing): nf4_format.py. Its
benchmarks, crossover sweep and command line: nf4_bench.py (`python -m
week5_integration.nf4_bench --sweep`).

QLoRA (Dettmers, Pagnoni, Holtzman, Zettlemoyer 2023, "QLoRA: Efficient Finetuning of Quantized
LLMs", arXiv:2305.14314) fine-tunes a model whose frozen base weights are stored in 4 bits, with
LoRA adapters (`lora.py`) in 16 bits on top: the base costs ~0.52 bytes per parameter instead of 2.

Kernels, simplest first:
* `nf4_dequantize_kernel`: one element per lane; load the byte holding its code (idx >> 1), pick
  the nibble, look the code up in the 16-entry table (64 bytes, L1-resident after one touch),
  multiply by the block's scale (dequantized from its int8 code: q * step + mean), store.
  Memory-bound: reads 0.5 + 1/64 bytes per weight, writes 2 (bf16): `nf4_dequantize_week5`.
* `nf4_matmul_kernel`: y = x dequant(W)^T, dequantizing each W^T tile inside the K loop (BLOCK_K
  = 64 = one quantization block, so with K % 64 == 0 a tile row shares one scale) and feeding it
  to tl.dot: the bf16 weight never exists in memory.

Cost model, x (M x K) bf16, W (N x K): bf16 matmul reads 2NK bytes of weight; dequantize-then-
matmul reads 0.52NK, writes 2NK, reads 2NK again (4.5NK: slower than bf16); the fused kernel reads
0.52NK. At decode sizes (M <= 16) the weight bytes are the whole cost, so the prediction there is
fused ~ 2NK / 0.52NK = up to 3.9x faster than bf16 if it reaches the same bandwidth; its per-weight
instruction count (byte load, shift, mask, table load, scale, convert: ~10 per weight) caps it
nearer ~2x. At training sizes (M = 4096) the matmul is compute-bound and every program
re-dequantizes its W tiles (M / BLOCK_M times): the fused kernel is predicted SLOWER than
dequantize-once + cuBLAS, which is why `QLoRALinear` (and bitsandbytes) dequantize the whole
weight into a temporary for training and use the fused kernel only for small M (`FUSED_MAX_M`).

`QLoRALinear`: frozen NF4 base + LoRA adapters. For training it dequantizes W into a temporary,
runs `lora.py`'s fused kernel, and frees it; the backward dequantizes again instead of keeping the
bf16 copy (keeping it would bring back all the memory QLoRA saves).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from course import runtime, validate
from course.gpu import tl, triton
from week3_triton_kernels.matmul_basic import grouped_tile
from week5_integration import lora as lora_mod
from week5_integration import lora_kernels
from week5_integration.lora_kernels import store_tile

# The format, from the module beside this one (a stub's own sibling, in exercises/, for a learner).
from .nf4_format import (BLOCK, NF4_TABLE, WEIGHT_DTYPES, NF4Weight, bits_per_parameter,  # noqa: F401 (finetune.py's)
                         nf4_dequantize_torch, nf4_quantize)

X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
FUSED_MAX_M = 64  # QLoRALinear: fused dequant-matmul up to this many rows, dequantize + GEMM above


# ------------------------------------------------------------------------------- the kernels
@triton.jit
def _nf4_levels(packed_ptr, table_ptr, idx, mask):
    """The NF4 level of element idx (int32): its nibble of byte idx >> 1, looked up in the table."""
    # BEGIN EXERCISE: byte = load(packed + (idx >> 1)); the even element's code is the HIGH nibble; return
    #   tl.load(table_ptr + code).
    # HINT: Element idx's code sits in byte idx // 2: the high nibble for even idx, the low nibble for odd
    #   idx; the 16-entry table lookup is a tiny gather that stays in L1.
    # HINT: Load the byte at packed_ptr + (idx >> 1) with the mask (other=0) as int32; shift right by 4 for
    #   even idx and by 0 for odd idx; & 0xF; load table_ptr + code.
    # HINT: `code = (byte >> ((1 - (idx & 1)) * 4)) & 0xF`
    byte = tl.load(packed_ptr + (idx >> 1), mask=mask, other=0).to(tl.int32)
    code = (byte >> ((1 - (idx & 1)) * 4)) & 0xF  # even element: high nibble
    # A 16-entry gather: the 64-byte table stays in L1 after the first touch.
    return tl.load(table_ptr + code)
    # END EXERCISE


@triton.jit
def _block_scales(absmax_ptr, absmax_q_ptr, absmax_step_ptr, mean, block, mask, DOUBLE_QUANT: tl.constexpr):
    """absmax of quantization block(s) `block` (float32), undoing the double quantization."""
    # BEGIN EXERCISE: DOUBLE_QUANT: tl.fma(q (int8 -> fp32), step[block >> 8], mean) (one rounding, as
    #   block_scales computes it); else absmax[block].
    # HINT: Recover each block's fp32 scale: either stored plainly, or as int8 q on a centred grid, absmax =
    #   q * step + mean with one step per 256 blocks.
    # HINT: Constexpr branch on DOUBLE_QUANT: load q (int8 to fp32) at block and the step at block >> 8,
    #   masked; else load absmax at block.
    # HINT: `tl.fma(q, step, mean)`: one rounding, matching block_scales on the host whatever the compiler's
    #   contraction default.
    if DOUBLE_QUANT:
        q = tl.load(absmax_q_ptr + block, mask=mask, other=0).to(tl.float32)
        step = tl.load(absmax_step_ptr + (block >> 8), mask=mask, other=0.0)  # 256 scales per step
        return tl.fma(q, step, mean)  # one rounding, whatever the compiler's FP-contraction default
    else:
        return tl.load(absmax_ptr + block, mask=mask, other=0.0)
    # END EXERCISE


@triton.jit
def nf4_dequantize_kernel(packed_ptr, absmax_ptr, absmax_q_ptr, absmax_step_ptr, mean_ptr, table_ptr,
                          out_ptr, n, DOUBLE_QUANT: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: offs of this program (BLOCK_SIZE), mask < n; level * scale of block offs >> 6; store
    #   in out's dtype.
    # HINT: Elementwise dequantization: each lane gets its level from the packed codes and multiplies by the
    #   scale of its 64-element block.
    # HINT: Offsets and mask as in vector_add (int32 is enough, n < 2^31 is checked); mean loaded only when
    #   DOUBLE_QUANT; _nf4_levels for the levels; _block_scales with block index offs >> 6; store in out's
    #   dtype.
    # HINT: `scale = _block_scales(..., mean, offs >> 6, mask, DOUBLE_QUANT)`
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # int32: n < 2^31 is checked
    mask = offs < n
    mean = 0.0
    if DOUBLE_QUANT:
        mean = tl.load(mean_ptr)
    level = _nf4_levels(packed_ptr, table_ptr, offs, mask)
    # 64 neighbouring lanes share a scale: the same address, one transaction per warp.
    scale = _block_scales(absmax_ptr, absmax_q_ptr, absmax_step_ptr, mean, offs >> 6, mask, DOUBLE_QUANT)
    tl.store(out_ptr + offs, (level * scale).to(out_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


@triton.jit
def nf4_matmul_kernel(x_ptr, packed_ptr, absmax_ptr, absmax_q_ptr, absmax_step_ptr, mean_ptr, table_ptr, y_ptr,
                      M, N, K, stride_xm, stride_xk, stride_ym, stride_yn,
                      DOUBLE_QUANT: tl.constexpr, ROW_ALIGNED: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    """y = x dequant(W)^T, W (N, K) in NF4; each W^T tile dequantized in registers, in the K loop."""
    # BEGIN EXERCISE: tiles as in lora's kernels; per K step of 64: the x tile, idx = n * K + k for the W^T
    #   tile [BK, BN], levels, scales (one per column when ROW_ALIGNED, else per element), zero past K, cast
    #   to x's dtype, tl.dot into the fp32 accumulator; store_tile.
    # HINT: Never materialize the dequantized weight: inside the GEMM's K loop, dequantize each W^T tile in
    #   registers and feed it straight to tl.dot. BLOCK_K = 64 makes one K step one quantization block per
    #   row.
    # HINT: Grouped tile order and wrapped row/col offsets as in lora; per K step: load the x tile masked on
    #   k; idx = n * K + k for the [BK, BN] W^T tile; levels; scales per column if ROW_ALIGNED (block (n * K
    #   + k0) >> 6) else per element (idx >> 6); zero past K; cast to x's dtype; dot into fp32 acc;
    #   store_tile.
    # HINT: `w = tl.where(k_mask[:, None], w, 0.0).to(x_ptr.dtype.element_ty)` before `acc = tl.dot(x, w,
    #   acc, ...)`.
    tl.static_assert(BLOCK_K == 64, "one K step = one quantization block of a row")
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M  # wrapped rows: loads need no row mask
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    mean = 0.0
    if DOUBLE_QUANT:
        mean = tl.load(mean_ptr)
    row_start = offs_n * K  # element (n, k) of W is n * K + k (int32: N * K < 2^31 is checked)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = (k0 + offs_k) < K
        x = tl.load(x_ptrs, mask=k_mask[None, :], other=0.0)
        idx = row_start[None, :] + (k0 + offs_k)[:, None]  # the W^T tile [BLOCK_K, BLOCK_N]
        level = _nf4_levels(packed_ptr, table_ptr, idx, k_mask[:, None])
        if ROW_ALIGNED:
            # K % 64 == 0: the tile's 64 values of each row form one block: one scale per column.
            scale = _block_scales(absmax_ptr, absmax_q_ptr, absmax_step_ptr, mean, (row_start + k0) >> 6,
                                  offs_n < N, DOUBLE_QUANT)
            w = level * scale[None, :]
        else:
            # Blocks straddle rows: each element finds its own block.
            w = level * _block_scales(absmax_ptr, absmax_q_ptr, absmax_step_ptr, mean, idx >> 6,
                                      k_mask[:, None], DOUBLE_QUANT)
        # Rounded to x's dtype, as a dequantize-then-matmul would store it; zero past K.
        w = tl.where(k_mask[:, None], w, 0.0).to(x_ptr.dtype.element_ty)
        acc = tl.dot(x, w, acc, input_precision=INPUT_PRECISION)
        x_ptrs += BLOCK_K * stride_xk
    store_tile(acc, y_ptr, pid_m, pid_n, M, N, stride_ym, stride_yn, BLOCK_M, BLOCK_N)
    # END EXERCISE


def tile_config(bm, bn, stages, warps, group_m=8):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": BLOCK, "GROUP_M": group_m},
                         num_stages=stages, num_warps=warps)


# Decode (M <= 16) wants many narrow column blocks to spread the weight over 132 SMs; training
# sizes want the big tensor-core tiles. `_prune_matmul_configs` keeps the ones that fit M.
MATMUL_CONFIGS = [
    tile_config(16, 32, 4, 4), tile_config(16, 64, 4, 4), tile_config(16, 128, 4, 4),
    tile_config(64, 128, 4, 4), tile_config(128, 128, 3, 8), tile_config(128, 256, 3, 8),
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
    limit = runtime.shared_memory_per_block()
    itemsize = named_args["x_ptr"].element_size()
    keep = [c for c in keep if c.num_stages * (c.kwargs["BLOCK_M"] + c.kwargs["BLOCK_N"]) * BLOCK * itemsize <= limit]
    return keep or [tile_config(16, 32, 1, 4)]


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
    _check_nf4(w)
    if dtype not in WEIGHT_DTYPES:
        raise TypeError(f"dtype must be one of {WEIGHT_DTYPES}, got {dtype}")
    if out is None:
        out = torch.empty(w.shape, dtype=dtype, device=w.device)
    else:
        validate.tensor(out, "out", dtypes=(dtype,))
        if tuple(out.shape) != tuple(w.shape):
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {tuple(w.shape)}")
    n = w.numel
    if n:
        nf4_dequantize_kernel[(triton.cdiv(n, DEQUANT_BLOCK),)](
            w.packed, *_scale_pointers(w), _table(w.device), out, n,
            DOUBLE_QUANT=w.double_quant, BLOCK_SIZE=DEQUANT_BLOCK, num_warps=4)
    return out


def nf4_matmul(x: torch.Tensor, w: NF4Weight, *, out=None) -> torch.Tensor:
    """x dequant(W)^T for x (..., K), W an NF4Weight of shape (N, K): the fused kernel (no autograd)."""
    validate.tensor(x, "x", dtypes=X_DTYPES, contiguous=False)
    runtime.require_bf16_tensor_cores(x.dtype, "nf4_matmul (tl.dot)")  # before launch: a T4 refuses bf16
    _check_nf4(w)
    if len(w.shape) != 2:
        raise ValueError(f"weight must be a 2-D (out_features, in_features) matrix, got shape {w.shape}")
    if x.dim() < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"x's last dimension must equal the weight's in_features: x is {tuple(x.shape)}, "
                         f"weight is {tuple(w.shape)} (out x in)")
    N, K = w.shape
    x2 = x.reshape(math.prod(x.shape[:-1]), K)  # not -1: x may be empty
    lora_kernels.check_int32_span(x2, "x")
    shape = (*x.shape[:-1], N)
    if out is None:
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
    else:
        validate.tensor(out, "out", dtypes=(x.dtype,))
        if tuple(out.shape) != shape:
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {shape}")
    y = out.view(-1, N)
    lora_kernels.check_int32_span(y, "out")  # M * N elements: the stores' offsets are int32
    M = x2.shape[0]
    if M and N:
        if K == 0:  # empty sums
            y.zero_()
        else:
            _launch_matmul(x2, w, y, M, N, K)
    return out


def _launch_matmul(x2, w, y, M, N, K):
    args = (x2, w.packed, *_scale_pointers(w), _table(w.device), y, M, N, K,
            x2.stride(0), x2.stride(1), y.stride(0), y.stride(1))
    meta = dict(DOUBLE_QUANT=w.double_quant, ROW_ALIGNED=K % BLOCK == 0,
                INPUT_PRECISION="ieee" if x2.dtype == torch.float32 else "tf32")
    if runtime.on_gpu():
        grid = lambda m: (triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"]),)  # noqa: E731
        nf4_matmul_autotuned[grid](*args, **meta)
    else:
        c = SIM_MATMUL_CONFIG
        nf4_matmul_kernel[(triton.cdiv(M, c["BLOCK_M"]) * triton.cdiv(N, c["BLOCK_N"]),)](*args, **meta, **c)


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
        shape, double_quant, kernel = meta
        w = NF4Weight(stored[0], shape, double_quant, **dict(zip(_scale_names(double_quant), stored[1:])))
        weight = _dequantize(w, x2.dtype, kernel)
        if kernel == "triton":
            if x_in is None:
                y, xa = lora_kernels.lora_forward(x2, weight, lora_a, lora_b, scale)
            else:
                xa = (x_in @ lora_a.t()) * scale
                y = lora_kernels.lora_epilogue(x2, weight, xa, lora_b)
        else:
            xa = ((x2 if x_in is None else x_in) @ lora_a.t()) * scale
            y = torch.addmm(x2 @ weight.t(), xa, lora_b.t())
        del weight  # freed here: keeping it for the backward would undo the 4-bit saving
        ctx.save_for_backward(x2 if x_in is None else x_in, xa, lora_a, lora_b, *stored)
        ctx.scale, ctx.meta, ctx.dropout = scale, meta, x_in is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x_in, xa, lora_a, lora_b, *stored = ctx.saved_tensors
        shape, double_quant, kernel = ctx.meta
        w = NF4Weight(stored[0], shape, double_quant, **dict(zip(_scale_names(double_quant), stored[1:])))
        weight = _dequantize(w, dy.dtype, kernel)  # again, rather than kept since the forward
        needs_dx = ctx.needs_input_grad[0] or ctx.needs_input_grad[4]
        dy = dy.contiguous()
        if kernel == "triton":
            dx, dx_in, d_a, d_b = lora_kernels.lora_backward(dy, x_in, xa, weight, lora_a, lora_b, ctx.scale,
                                                         needs_dx=needs_dx, fused_dx=not ctx.dropout)
        else:
            g = (dy @ lora_b) * ctx.scale
            dx = dx_in = None
            if needs_dx:
                dx = dy @ weight
                if ctx.dropout:
                    dx_in = g @ lora_a
                else:
                    dx.addmm_(g, lora_a)
            d_a, d_b = g.t() @ x_in, dy.t() @ xa
        return (dx if ctx.needs_input_grad[0] else None, d_a if ctx.needs_input_grad[1] else None,
                d_b if ctx.needs_input_grad[2] else None, None,
                dx_in if ctx.needs_input_grad[4] else None, None) + (None,) * len(stored)


def _scale_names(double_quant):
    return ("absmax_q", "absmax_step", "absmax_mean") if double_quant else ("absmax",)


def qlora_linear(x, w: NF4Weight, lora_a, lora_b, scale, *, adapter_input=None, kernel="triton"):
    """x dequant(W)^T + scale (x A^T) B^T, W in NF4 (frozen), autograd for x, lora_a, lora_b.

    Without autograd and with at most FUSED_MAX_M rows, the base product runs in the fused
    dequant-matmul kernel; otherwise W is dequantized into a temporary for one GEMM (`QLoRAFunction`).
    """
    _check_nf4(w)
    if kernel not in ("triton", "torch"):
        raise ValueError(f"kernel must be 'triton' or 'torch', got {kernel!r}")
    validate.tensor(x, "x", dtypes=X_DTYPES, contiguous=False)
    if len(w.shape) != 2 or x.dim() < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"x (..., in_features) and weight (out, in) do not match: x {tuple(x.shape)}, "
                         f"weight {tuple(w.shape)}")
    N, K = w.shape
    x2 = x.reshape(math.prod(x.shape[:-1]), K)
    for t, name in ((lora_a, "lora_a"), (lora_b, "lora_b")):
        validate.tensor(t, name, dtypes=(x.dtype,), ndim=2, contiguous=False)
    if lora_a.shape[1] != K or tuple(lora_b.shape) != (N, lora_a.shape[0]):
        raise ValueError(f"lora_a must be (r, {K}) and lora_b ({N}, r); got {tuple(lora_a.shape)} and "
                         f"{tuple(lora_b.shape)}")
    lora_kernels.check_rank(lora_a.shape[0])
    scale = lora_kernels.check_scale(scale)
    x_in = None
    if adapter_input is not None:
        validate.tensor(adapter_input, "adapter_input", dtypes=(x.dtype,), contiguous=False)
        if adapter_input.shape != x.shape:
            raise ValueError(f"adapter_input must have x's shape {tuple(x.shape)}, got {tuple(adapter_input.shape)}")
        x_in = adapter_input.reshape(x2.shape)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (x, lora_a, lora_b))
    if not grad and kernel == "triton" and x_in is None and x2.shape[0] <= FUSED_MAX_M:
        y = nf4_matmul(x2, w)
        y.addmm_(x2 @ lora_a.t(), lora_b.t(), alpha=scale)
    else:
        meta = (tuple(w.shape), w.double_quant, kernel)
        y = QLoRAFunction.apply(x2, lora_a, lora_b, scale, x_in, meta, *w.tensors().values())
    return y.reshape(*x.shape[:-1], N)


class QLoRALinear(nn.Module):
    """A frozen NF4 base (buffers) plus trainable LoRA adapters (fp32 masters, computed in bf16)."""

    def __init__(self, in_features: int, out_features: int, r: int = 8, alpha: float = 16.0,
                 dropout: float = 0.0, *, double_quant: bool = True, kernel: str = "auto", device=None,
                 weight: torch.Tensor | None = None):
        super().__init__()
        lora_mod.check_hyper(r, alpha, dropout, in_features, out_features)
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
        dtype = lora_mod.compute_dtype(x)
        if dtype not in X_DTYPES:
            dtype = torch.float32
        x = x.to(dtype)
        x_in = F.dropout(x, self.dropout, training=True) if self.dropout and self.training else None
        return qlora_linear(x, self.nf4_weight(), self.lora_a.to(dtype), self.lora_b.to(dtype), self.scaling,
                            adapter_input=x_in, kernel=lora_mod.resolve_kernel(self.kernel))

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


# ------------------------------------------------------------------------- the code behind each entry
# What `nf4_matmul` and `nf4_dequantize` run: the benchmarks (nf4_bench.py) count its lines beside
# each variant (`Benchmark.sources`).
NF4_MATMUL_CODE = (nf4_matmul_kernel, _nf4_levels, _block_scales, _launch_matmul, nf4_matmul)
NF4_DEQUANTIZE_CODE = (nf4_dequantize_kernel, _nf4_levels, _block_scales, nf4_dequantize)
