"""Matrix multiplication in fp8 (float8_e4m3fn), the last rung of the Triton matmul ladder.

matmul.py's persistent and TMA kernels, run with two switches on: HAS_SCALE multiplies the fp32
accumulator by a_scale * b_scale in the epilogue (per-tensor scales: the real operands are
a * a_scale and b * b_scale), and FP8_PRECISE promotes the tensor cores' partial sums to a separate
fp32 accumulator every BLOCK_K (= 128) products, as torch._scaled_mm(use_fast_accum=False) does.
Hopper's fp8 tensor cores keep only ~14 significant bits of their running sum (DeepSeek-V3
report, arXiv:2412.19437, sec. 3.3.2), so without promotion (fast_accum=True: faster, less
precise) the error grows with K (`fp8_sum_error_bound` is the error model the tests use).

    matmul_fp8(a, b, a_scale, b_scale, bias=None, activation=None, out=None, *,
               out_dtype=torch.bfloat16, fast_accum=False, rung=None)
        a (M, K) and b (K, N) in torch.float8_e4m3fn; a_scale, b_scale per-tensor float32
        scales (0-d or 1-element tensors on the device, or Python floats); returns
        activation(a_scale * b_scale * (a @ b) + bias) in out_dtype (bf16, fp16 or fp32; bias in
        out_dtype). b is fastest "column-major" (b = w.t() of a row-major (N, K) weight, which is
        what torch._scaled_mm requires too); another layout is copied to that one first, as fp8
        wgmma reads B only K-major. Needs compute capability >= 8.9 (Ada, Hopper): RuntimeError
        elsewhere; rung="tma" needs 9.0 (None: tma where the GPU has it, else persistent).
    quantize_fp8(x) -> (x_fp8, scale) with a per-tensor amax scale.

Twice the values per byte: the fp8 configs take BLOCK_K = 128 to move as many bytes per K step
as BLOCK_K = 64 does in fp16. The yardstick is torch._scaled_mm (cuBLASLt) in the same run.
"""
from __future__ import annotations

import math

import torch

from course import dispatch, runtime, validate
from course.gpu import triton, DEVICE

from week3_triton_kernels.matmul import KERNELS, matmul_persistent_kernel, matmul_tma_kernel, run_kernel
from week3_triton_kernels.matmul_dispatch import tile_for
from week3_triton_kernels.matmul_launch import (
    POINTER_KEY, PRUNE, TMA_KEY, check_args, epilogue_torch, tile_config, with_tma_block_shapes)

FP8_DTYPES = (torch.float8_e4m3fn,)
FP8_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
FP8_MAX = 448.0  # largest finite float8_e4m3fn
FP8_BLOCK_K = 128  # fp8 configs' BLOCK_K, and how often fast_accum=False promotes partial sums
# Hopper's fp8 tensor cores keep ~14 significant bits of their running sum (DeepSeek-V3 report,
# arXiv:2412.19437, sec. 3.3.2): an addition may lose up to 2^-13 of the partial sum.
FP8_TENSOR_CORE_UNIT = 2.0**-13

# fp8: twice the values per byte, so BLOCK_K = 128 moves the same bytes per step as 64 in fp16.
FP8_CONFIGS = [
    tile_config(128, 256, FP8_BLOCK_K, 3, 8, FLATTEN=True),
    tile_config(128, 256, FP8_BLOCK_K, 4, 8, FLATTEN=True),
    tile_config(128, 128, FP8_BLOCK_K, 4, 8, FLATTEN=True),
    tile_config(128, 128, FP8_BLOCK_K, 4, 4, FLATTEN=True),
    tile_config(64, 128, FP8_BLOCK_K, 4, 4, FLATTEN=True),
]
# fp8 has its own tuners: C is bf16 like a bf16 matmul's, so the key alone would not tell them apart.
matmul_persistent_fp8_autotuned = triton.autotune(configs=FP8_CONFIGS, key=POINTER_KEY,
                                                  prune_configs_by=PRUNE)(matmul_persistent_kernel)
matmul_tma_fp8_autotuned = triton.autotune(configs=with_tma_block_shapes(FP8_CONFIGS), key=TMA_KEY,
                                           prune_configs_by=PRUNE)(matmul_tma_kernel)
FP8_TUNED = KERNELS._replace(persistent_autotuned=matmul_persistent_fp8_autotuned,
                             tma_autotuned=matmul_tma_fp8_autotuned)


def _scale_tensor(scale, name):
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        return torch.full((1,), float(scale), dtype=torch.float32, device=DEVICE)
    validate.tensor(scale, name, dtypes=(torch.float32,))
    if scale.numel() != 1:
        raise ValueError(f"{name} must hold one value (a per-tensor scale), got shape {tuple(scale.shape)}")
    return scale


FP8_RUNGS = ("tma", "persistent")  # the kernels fp8 runs on, by what they are (matmul_dispatch.py)


def matmul_fp8(a: torch.Tensor, b: torch.Tensor, a_scale, b_scale, bias: torch.Tensor | None = None,
               activation: str | None = None, out: torch.Tensor | None = None, *,
               out_dtype: torch.dtype = torch.bfloat16, fast_accum: bool = False,
               rung: str | None = None) -> torch.Tensor:
    """activation(a_scale * b_scale * (a @ b) + bias) for float8_e4m3fn a, b (the module docstring).

    rung: "tma" (sm_90), "persistent" (pointer loads, sm_89+), None = tma where available.
    """
    if out_dtype not in FP8_OUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {[str(d).replace('torch.', '') for d in FP8_OUT_DTYPES]}, "
                        f"got {out_dtype}")
    if rung is not None:
        dispatch.check_rung("matmul_fp8", rung, FP8_RUNGS)
    M, N, K, out = check_args(a, b, bias, activation, out, dtypes=FP8_DTYPES, out_dtype=out_dtype)
    scales = (_scale_tensor(a_scale, "a_scale"), _scale_tensor(b_scale, "b_scale"))
    runtime.require_capability((8, 9), "fp8 matmul (fp8 tensor cores)",
                               "use matmul in fp16/bf16 (Colab's T4 is 7.5, an A100 8.0)")
    if rung is None:  # the rule: tma where the GPU has the engine (asked, not required: the other rung runs)
        rung = "tma" if runtime.has_capability((9, 0), instead="the persistent rung (matmul_persistent_kernel)") \
            else "persistent"
    elif rung == "tma":  # asked for by name: refused below sm_90, naming the rung that runs there
        runtime.require_capability((9, 0), "matmul_fp8(rung='tma')", "use rung='persistent'")
    # The sweep (`matmul_bench --sweep --dtypes fp8`) times fp8 with promotion: its table serves that.
    config = tile_for(M, N, K, a.dtype, rung) if runtime.on_gpu() and not fast_accum else None
    return run_kernel(rung, a, b, bias, activation, out, M, N, K, scales=scales, fp8_precise=not fast_accum,
                      config=config, kernels=FP8_TUNED)


def quantize_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_fp8, scale): x / scale in float8_e4m3fn with scale = amax(|x|) / 448 (float32, 0-d).

    Per-tensor scaling maps the largest |x| to e4m3's largest finite value, so nothing overflows
    and the 3-bit mantissa's relative error (<= 2^-4) is spread over the whole range.
    """
    if x.numel() == 0:
        return x.to(torch.float8_e4m3fn), torch.ones((), dtype=torch.float32, device=x.device)
    amax = x.detach().abs().amax().float().clamp_min(1e-12)  # an all-zero x: any scale will do
    scale = amax / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale



# -------------------------------------------------------------------------------- references
def matmul_fp8_torch(a, b, a_scale, b_scale, bias=None, activation=None, out_dtype=torch.bfloat16):
    """The fp8 reference, in float64 from the fp8 values themselves, rounded once to out_dtype."""
    scale = float(a_scale) * float(b_scale)
    acc = (a.double() @ b.double()) * scale
    return epilogue_torch(acc, None if bias is None else bias.double(), activation).to(out_dtype)


def fp8_sum_error_bound(a, b, a_scale, b_scale, products_per_partial: int,
                        unit: float = FP8_TENSOR_CORE_UNIT) -> float:
    """Worst-case |error| of a_scale * b_scale * (a @ b) (fp8 a, b) summed as fp8 tensor cores do.

    Each product of two fp8 values is exact. The tensor core adds them into a partial sum that
    loses up to `unit` (2^-13: ~14 bits kept) of itself at each addition, so a partial of n
    products errs by at most n * unit * sum |a_k b_k| (Higham's recursive-summation bound with
    `unit` for u); the ceil(K / n) partials are then added in fp32 (u = 2^-24). Hence
        |error_ij| <= (n * unit + ceil(K / n) * 2^-24) * sum_k |a_ik b_kj| * a_scale * b_scale,
    returned for the worst (i, j). n = products_per_partial, capped at K: BLOCK_K when partial
    sums are promoted to an fp32 accumulator every BLOCK_K products, K when they never are. A
    worst case (every addition losing its most): random data err hundreds of times less. Pass unit=2^-24 for
    a sum done wholly in fp32 (the Triton interpreter, a CPU emulation).
    """
    K = a.shape[1]
    n = max(1, min(K, products_per_partial))
    gamma = n * unit + math.ceil(K / n) * 2.0**-24
    worst = float((a.double().abs() @ b.double().abs()).max()) if a.numel() and b.numel() else 0.0
    return gamma * worst * float(a_scale) * float(b_scale)
