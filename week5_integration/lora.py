"""LoRA: fine-tune a frozen model through low-rank adapters, and one fused Triton kernel for the layer.

Its benchmarks, tile sweep and command line: lora_bench.py (`python -m
week5_integration.lora_bench --sweep`). Over 500 lines: the fused and two-pass kernels with their
forward, backward and autograd glue, and the LoRALinear module and whole-model helpers.

Full fine-tuning updates every weight W (N x K) of a pre-trained model. LoRA (Hu et al. 2021,
"LoRA: Low-Rank Adaptation of Large Language Models", arXiv:2106.09685) freezes W and learns the
update as a product of two thin matrices, W + (alpha / r) B A, with A (r x K), B (N x r), r << K, N:

    y = x W^T + s (x A^T) B^T,        s = alpha / r

A starts random (here as `nn.Linear` initializes its weight), B starts at zero, so training starts
exactly at the pre-trained model. Only A and B get gradients and optimizer states: for the 124M
model's qkv projection (768 -> 2304) at r = 16 that is 16 x (768 + 2304) = 49k parameters
instead of 1.77M (2.8%). After training, `merge()` folds s B A into W: inference then costs
nothing extra (`unmerge()` takes it out again, to switch adapters).

What the module teaches, in order:
* `lora_linear_torch`: the unfused reference, as adapter libraries (PEFT) write it:
  F.linear(x, W) + F.linear(F.linear(x, A), B) * s. Five kernels in eager mode.
* `lora_epilogue_kernel` ("two-pass"): xa = s x A^T is computed first (a thin torch matmul, M x r),
  then ONE GEMM computes x W^T and adds xa B^T in its epilogue, while the accumulator is still in
  registers. The M x N low-rank term never goes to memory.
* `lora_fused_kernel`: the same, but xa is computed inside the GEMM's K loop from the x tile that
  is already loaded for x W^T (`tl.dot(x, A^T)` beside `tl.dot(x, W^T)`): x is read once, xa lives
  in registers (BLOCK_M x r fp32). Each program recomputes xa for its rows, so the extra FLOPs are
  2 M K r per column block, r / BLOCK_N of the base GEMM (16 / 128 = 12.5%, 6% at BLOCK_N = 256).
  The program of column block 0 also writes xa (M x r) for the backward.
* `LoRALinearFunction`: the autograd op. Backward, with G = s dY B (M x r):
      dx = dY W + G A     the SAME fused kernel: "x" = dY, "W" = W^T, "A" = B^T, "B" = A^T,
                          so G is computed on chip from the dY tiles and stored for dA
      dA = G^T x          torch matmul (r x M @ M x K)
      dB = dY^T xa        torch matmul (N x M @ M x r); xa = s x A^T, saved by the forward
  No dW: W is frozen, so a LoRA step skips one of the three big GEMMs of a training step.
* `LoRALinear` (an nn.Module with merge/unmerge), `apply_lora` (swap a model's nn.Linear layers).

Cost model (M tokens, K in, N out, rank r, itemsize b; counts of elements moved to/from HBM):
forward  torch:  x W^T writes y; x A^T; (xa) B^T writes t; * s reads t, writes t'; y + t' reads
                 2, writes 1:  2MK + NK + 7MN.   fused:  MK + NK + MN   (xa: M r, negligible)
backward torch:  dt = s dY (2MN); dY W (MN + NK + MK); dt B (MN); dt^T xa (MN); dxa^T x (MK);
                 dxa A (MK); dx = dx1 + dx2 (3MK):  5MN + NK + 6MK
         here:   dx kernel (MN + NK + MK), dB reads dY again (MN), dA reads x (MK): 2MN + NK + 2MK
Why dA and dB stay torch matmuls: each is a thin GEMM (one side is r = 16 wide) whose whole cost
is one read of a big operand (x or dY); cuBLAS streams that at near-copy bandwidth, and fusing dB
into the dx kernel would need an atomic reduction over M across programs for a saving of one
read of dY (MN b bytes, ~6 us at M = 4096, N = 2304 in bf16 against ~25 us of GEMM).
FLOPs: forward 2MNK + 2Mr(K + N); training step 4MNK + 6Mr(K + N) (no 2MNK for dW).
At M = 4096, K = 768, N = 2304, bf16: forward torch ~148 MB + 14.5 GFLOP, fused ~29 MB + the
same FLOPs. At ~600 TFLOP/s and 3 TB/s that predicts ~66 us against ~27 us forward, and ~2x for
the training step (`lora_linear_week5`); against torch's best eager form (`torch.addmm`, which
fuses the add into the second GEMM's epilogue) ~1.3-1.5x. For inference with one adapter, merge:
the merged F.linear is the floor, and the fused kernel pays its ~10% of recomputed xa.

Dropout on the adapter input (the LoRA paper's regularizer) needs dropout(x) for A but x for W:
the two-pass kernel then takes xa = s dropout(x) A^T from a torch matmul (x read twice).
Dtypes: fp16 and bf16 (tensor cores), fp32 (exact fp32 products, `input_precision="ieee"`) and
fp64 (for gradcheck); accumulation in fp32 (fp64 for fp64).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from course import ops, runtime  # runtime before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.tl_dot import dot  # tl.dot, with float64 as plain FMAs (see course/tl_dot.py)

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402
# Week 3's grouped tile order (concurrent programs cover a squarish patch of output tiles, so
# the x row panels and W column panels they share are read from L2) and its config maker.
from week3_triton_kernels.matmul import tile_config  # noqa: E402
from week3_triton_kernels.matmul_basic import grouped_tile  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TARGETS = ("qkv", "proj", "up", "down")  # the week-5 GPT's nn.Linear layers (head is tied to tok)
MAX_RANK = 128  # xa is a BLOCK_M x r fp32 block of registers: r = 128 is already 64 KB per program
KERNELS = ("auto", "triton", "torch")
NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)
INT32_MAX = 2**31 - 1


# ------------------------------------------------------------------------------ the kernels
# store_tile: the masked store of one output tile in y's dtype (shared with nf4.py's GEMM).
@triton.jit
def store_tile(acc, y_ptr, pid_m, pid_n, M, N, stride_ym, stride_yn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn,
             acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def lora_epilogue_kernel(x_ptr, w_ptr, xa_ptr, b_ptr, y_ptr, M, N, K, R,
                         stride_xm, stride_xk, stride_wn, stride_wk, stride_xam, stride_xar,
                         stride_bn, stride_br, stride_ym, stride_yn,
                         ACC_DTYPE: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         BLOCK_R: tl.constexpr, GROUP_M: tl.constexpr):
    """y = x W^T + xa B^T with xa (M x R, already scaled by s) read from memory."""
    # BEGIN EXERCISE: the tiled x W^T, then the rank-r epilogue xa B^T on the same accumulator; (pid_m, pid_n)
    #   = grouped_tile(...); wrapped row/col offsets (% M, % N); loop over K in BLOCK_K steps: acc = dot(x
    #   tile [BM, BK], W^T tile [BK, BN], acc, INPUT_PRECISION) (course.tl_dot.dot: tl.dot, with fp64 as plain
    #   FMAs) (masks on k only, other=0); then load xa [BM, BLOCK_R] and B^T [BLOCK_R, BN] (mask r < R,
    #   other=0), acc = dot(xa, b, acc, INPUT_PRECISION); store_tile(acc, ...).
    # HINT: LoRA's y = x W^T + (s x A^T) B^T: the low-rank term is just one more small dot (K = r) added to
    #   the base GEMM's accumulator while the tile is still in registers, so y is written once.
    # HINT: Week 3's grouped tile order and wrapped offsets; a K loop masking only k (other=0) with `dot(x,
    #   w, acc, INPUT_PRECISION)`; after it load the xa tile [BM, BLOCK_R] and the B^T tile [BLOCK_R, BN],
    #   both masked to r < R; one more dot; store_tile.
    # HINT: The padding rank lanes must be zeros on both sides: `mask=r_mask[None, :]` on xa and
    #   `mask=r_mask[:, None]` on B^T, `other=0.0`.
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    # Rows and columns past M and N wrap around instead of being masked, so the loads need no
    # row/column masks; the wrapped results are never stored.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn  # a W^T tile
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = dot(x, w, acc, INPUT_PRECISION)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    # Epilogue: one more small dot, K = r, on the accumulator still in registers.
    r_mask = offs_r < R
    xa = tl.load(xa_ptr + offs_m[:, None] * stride_xam + offs_r[None, :] * stride_xar,
                 mask=r_mask[None, :], other=0.0)
    b = tl.load(b_ptr + offs_r[:, None] * stride_br + offs_n[None, :] * stride_bn,
                mask=r_mask[:, None], other=0.0)
    acc = dot(xa, b, acc, INPUT_PRECISION)
    store_tile(acc, y_ptr, pid_m, pid_n, M, N, stride_ym, stride_yn, BLOCK_M, BLOCK_N)
    # END EXERCISE


@triton.jit
def lora_fused_kernel(x_ptr, w_ptr, a_ptr, b_ptr, y_ptr, xa_ptr, M, N, K, R, scale,
                      stride_xm, stride_xk, stride_wn, stride_wk, stride_ar, stride_ak,
                      stride_bn, stride_br, stride_ym, stride_yn, stride_xam, stride_xar,
                      STORE_XA: tl.constexpr, ACC_DTYPE: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      BLOCK_R: tl.constexpr, GROUP_M: tl.constexpr):
    """y = x W^T + (s x A^T) B^T; xa = s x A^T computed from the same x tiles, kept on chip."""
    # BEGIN EXERCISE: as lora_epilogue_kernel, but compute xa in the same K loop: also load the A^T tile [BK,
    #   BLOCK_R] and xa = dot(x, a, xa, INPUT_PRECISION) with the SAME x tile. After the loop: xa = where(r <
    #   R, xa * scale, 0) (Inf * 0 in the padding would be NaN), round it to x's dtype, one more dot with B^T,
    #   store y; if STORE_XA and pid_n == 0, store xa (masked rows < M, r < R).
    # HINT: Fuse further: xa = x A^T uses the same x tiles as the base GEMM, so compute it in the same K
    #   loop (a second, narrow accumulator) and never read x twice.
    # HINT: Add an A^T tile pointer [BK, BLOCK_R] advanced with the others; per step two dots on the same x
    #   tile; after the loop zero the padding columns while scaling, round xa to x's dtype, dot with B^T,
    #   store y; with STORE_XA only the pid_n == 0 column of programs writes xa (masked to rows < M and r <
    #   R).
    # HINT: `xa = tl.where(r_mask[None, :], xa * scale, 0.0)`: an Inf in x makes the padding sum(x * 0) NaN,
    #   which must not leak into y.
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    r_mask = offs_r < R
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn  # a W^T tile
    a_ptrs = a_ptr + offs_k[:, None] * stride_ak + offs_r[None, :] * stride_ar  # an A^T tile
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    xa = tl.zeros((BLOCK_M, BLOCK_R), dtype=ACC_DTYPE)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        a = tl.load(a_ptrs, mask=(offs_k[:, None] < k_left) & r_mask[None, :], other=0.0)
        # The x tile, loaded once, feeds both products: the base GEMM and the rank-r projection.
        acc = dot(x, w, acc, INPUT_PRECISION)
        xa = dot(x, a, xa, INPUT_PRECISION)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
        a_ptrs += BLOCK_K * stride_ak
    # The padding columns r >= R hold sum(x * 0), which is NaN where x holds Inf: zero them so
    # that a non-finite input cannot leak through the padding into the epilogue.
    xa = tl.where(r_mask[None, :], xa * scale, 0.0)
    # Rounded to the input dtype, as torch rounds x A^T when it stores it: the epilogue dot runs
    # on tensor cores in that dtype.
    xa = xa.to(x_ptr.dtype.element_ty)
    b = tl.load(b_ptr + offs_r[:, None] * stride_br + offs_n[None, :] * stride_bn,
                mask=r_mask[:, None], other=0.0)
    acc = dot(xa, b, acc, INPUT_PRECISION)
    store_tile(acc, y_ptr, pid_m, pid_n, M, N, stride_ym, stride_yn, BLOCK_M, BLOCK_N)
    if STORE_XA:
        # Every column block computed the same xa for these rows; the first one writes it.
        if pid_n == 0:
            rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            mask = (rows[:, None] < M) & r_mask[None, :]
            tl.store(xa_ptr + rows[:, None] * stride_xam + offs_r[None, :] * stride_xar, xa, mask=mask)
    # END EXERCISE


# ------------------------------------------------------------------------------ autotuning
# Few on purpose: each config is a compile on the first call of every (M, N, K, r). The 128 x 256
# tile halves the recomputed xa (r / BLOCK_N); the 64-wide ones give small layers enough programs.
AUTOTUNE_CONFIGS = [
    tile_config(128, 128, 64, 3, 8),
    tile_config(128, 256, 64, 3, 8),
    tile_config(128, 64, 64, 4, 4),
    tile_config(64, 128, 64, 4, 4),
]
# When none fits (fp32 with a large r; a T4's 64 KB of shared memory): the first of these that does.
FALLBACK_CONFIGS = [tile_config(64, 64, 32, 2, 4), tile_config(32, 32, 32, 1, 4)]
# fp64 multiplies by broadcast FMAs (course/tl_dot.py): an (M, K, N) tile of products in registers.
FP64_CONFIG = tile_config(16, 16, 16, 1, 4)
SIM_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}  # the interpreter cannot time configs
SMALL_PROBLEM = 256 * 256


def _shared_memory_bytes(config, itemsize: int, block_r: int) -> int:
    kw = config.kwargs
    return config.num_stages * (kw["BLOCK_M"] + kw["BLOCK_N"] + block_r) * kw["BLOCK_K"] * itemsize


def _prune_configs(configs, named_args, **kwargs):
    # Drop tiles whose pipeline buffers overflow shared memory (fp32/fp64 tests, a T4's 64 KB);
    # if none fits, one small single-stage tile. For a small output, only the smallest tile.
    itemsize = named_args["x_ptr"].element_size()
    if named_args["x_ptr"].dtype == torch.float64:
        return [FP64_CONFIG]
    block_r = kwargs.get("BLOCK_R", 16)
    limit = runtime.shared_memory_per_block()
    fitting = [c for c in configs if _shared_memory_bytes(c, itemsize, block_r) <= limit]
    if not fitting:
        small = [c for c in FALLBACK_CONFIGS if _shared_memory_bytes(c, itemsize, block_r) <= limit]
        return small[:1] or FALLBACK_CONFIGS[-1:]
    if named_args["M"] * named_args["N"] <= SMALL_PROBLEM:
        # A small output: one small tile, not timed: more programs for few outputs, and a quicker
        # compile (fp32's exact-product 128 x 64 x 64, 4-stage tile took 5-8 s per variant in the
        # H100 test timing log of 2026-11-26).
        small = [c for c in FALLBACK_CONFIGS if _shared_memory_bytes(c, itemsize, block_r) <= limit]
        return small[:1] or [min(fitting, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]
    return fitting


_PRUNE = {"early_config_prune": _prune_configs}
lora_fused_autotuned = triton.autotune(configs=AUTOTUNE_CONFIGS, key=["M", "N", "K", "R", "STORE_XA"],
                                       prune_configs_by=_PRUNE)(lora_fused_kernel)
lora_epilogue_autotuned = triton.autotune(configs=AUTOTUNE_CONFIGS, key=["M", "N", "K", "R"],
                                          prune_configs_by=_PRUNE)(lora_epilogue_kernel)


# ------------------------------------------------------------------------------- launchers
def _acc_dtype(dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def _precision(dtype):
    # fp32/fp64: exact products (no TF32), so tests can hold the kernel to fp32 error bounds.
    return "ieee" if dtype in (torch.float32, torch.float64) else "tf32"


def block_r(rank: int) -> int:
    """The kernels' BLOCK_R: the rank padded to a power of two >= 16."""
    return max(16, triton.next_power_of_2(rank))  # tl.dot needs every dimension >= 16


def check_int32_span(t, name):
    """ValueError when `t`'s elements span more than 2^31 (the kernels index with int32)."""
    if t.numel() and sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride())) > INT32_MAX:
        raise ValueError(f"{name} spans more than 2^31 elements: the kernels' offsets are int32")


def _check_base(x2, weight):
    """x2 (M, K) and weight (N, K): types, device, shapes."""
    validate.tensor(x2, "x", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.tensor(weight, "weight", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.same_dtype(x=x2, weight=weight)
    if x2.shape[1] != weight.shape[1]:
        raise ValueError(f"x's last dimension ({x2.shape[1]}) must equal weight's in_features "
                         f"(weight is {tuple(weight.shape)}, out x in)")
    check_int32_span(x2, "x")
    check_int32_span(weight, "weight")


def check_rank(rank):
    """ValueError unless the LoRA rank is in [1, MAX_RANK]."""
    if not 1 <= rank <= MAX_RANK:
        raise ValueError(f"the rank r must be in [1, {MAX_RANK}], got {rank}")


def _check_lora_b(lora_b, x2, weight, rank):
    validate.tensor(lora_b, "lora_b", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.same_dtype(x=x2, lora_b=lora_b)
    if tuple(lora_b.shape) != (weight.shape[0], rank):
        raise ValueError(f"lora_b must be (out_features, r) = {(weight.shape[0], rank)}; got {tuple(lora_b.shape)}")
    check_int32_span(lora_b, "lora_b")


def _check_operands(x2, weight, lora_a, lora_b):
    """x2 (M, K), weight (N, K), lora_a (r, K), lora_b (N, r), one dtype, on the kernels' device."""
    _check_base(x2, weight)
    validate.tensor(lora_a, "lora_a", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.same_dtype(x=x2, lora_a=lora_a)
    if lora_a.shape[1] != weight.shape[1]:
        raise ValueError(f"lora_a must be (r, in_features) = (r, {weight.shape[1]}); got {tuple(lora_a.shape)}")
    check_rank(lora_a.shape[0])
    check_int32_span(lora_a, "lora_a")
    _check_lora_b(lora_b, x2, weight, lora_a.shape[0])


def check_scale(scale) -> float:
    """The LoRA scale (alpha / r) as a float: a finite Python number (TypeError/ValueError otherwise)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a Python number (alpha / r), got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def _output(out, shape, like, name):
    if out is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    validate.tensor(out, name, dtypes=(like.dtype,), ndim=2, contiguous=False)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(out.shape)}; expected {tuple(shape)}")
    check_int32_span(out, name)  # the stores' offsets are int32 too
    return out


def _fused(p, q, u, v, scale, out, xa_out, store_xa):
    """out = p q^T + (s p u^T) v^T, and xa_out = s p u^T: the fused kernel on any strides.

    Forward: (p, q, u, v) = (x, W, A, B). Backward dx: (dY, W^T, B^T, A^T), xa_out = s dY B.
    """
    runtime.require_bf16_tensor_cores(p.dtype, "the LoRA kernels (tl.dot)")  # before launch: a T4 refuses bf16
    M, K = p.shape
    N, R = q.shape[0], u.shape[0]
    if M == 0 or N == 0:
        return out, xa_out
    xa_strides = (xa_out.stride(0), xa_out.stride(1)) if store_xa else (0, 0)
    args = (p, q, u, v, out, xa_out if store_xa else out, M, N, K, R, scale,
            p.stride(0), p.stride(1), q.stride(0), q.stride(1), u.stride(0), u.stride(1),
            v.stride(0), v.stride(1), out.stride(0), out.stride(1), *xa_strides)
    meta = dict(STORE_XA=store_xa, ACC_DTYPE=_acc_dtype(p.dtype), INPUT_PRECISION=_precision(p.dtype),
                BLOCK_R=block_r(R))
    if runtime.on_gpu():
        grid = lambda m: (triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"]),)  # noqa: E731
        lora_fused_autotuned[grid](*args, **meta)
    else:
        grid = (triton.cdiv(M, SIM_CONFIG["BLOCK_M"]) * triton.cdiv(N, SIM_CONFIG["BLOCK_N"]),)
        lora_fused_kernel[grid](*args, **meta, **SIM_CONFIG)
    return out, xa_out


def _epilogue(x2, weight, xa, lora_b, out):
    runtime.require_bf16_tensor_cores(x2.dtype, "the LoRA kernels (tl.dot)")  # before launch: a T4 refuses bf16
    M, K = x2.shape
    N, R = weight.shape[0], xa.shape[1]
    if M == 0 or N == 0:
        return out
    args = (x2, weight, xa, lora_b, out, M, N, K, R, x2.stride(0), x2.stride(1), weight.stride(0),
            weight.stride(1), xa.stride(0), xa.stride(1), lora_b.stride(0), lora_b.stride(1),
            out.stride(0), out.stride(1))
    meta = dict(ACC_DTYPE=_acc_dtype(x2.dtype), INPUT_PRECISION=_precision(x2.dtype), BLOCK_R=block_r(R))
    if runtime.on_gpu():
        grid = lambda m: (triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"]),)  # noqa: E731
        lora_epilogue_autotuned[grid](*args, **meta)
    else:
        grid = (triton.cdiv(M, SIM_CONFIG["BLOCK_M"]) * triton.cdiv(N, SIM_CONFIG["BLOCK_N"]),)
        lora_epilogue_kernel[grid](*args, **meta, **SIM_CONFIG)
    return out


def lora_forward(x2, weight, lora_a, lora_b, scale, *, out=None, xa_out=None, store_xa=True):
    """(y, xa): y = x W^T + s (x A^T) B^T by the fused kernel, xa = s x A^T (None if not stored).

    x2 (M, K), weight (N, K), lora_a (r, K), lora_b (N, r), one dtype; no autograd (see `lora_linear`).
    """
    _check_operands(x2, weight, lora_a, lora_b)
    scale = check_scale(scale)
    M, N, R = x2.shape[0], weight.shape[0], lora_a.shape[0]
    out = _output(out, (M, N), x2, "out")
    xa_out = _output(xa_out, (M, R), x2, "xa_out") if store_xa else None
    return _fused(x2, weight, lora_a, lora_b, scale, out, xa_out, store_xa)


def lora_epilogue(x2, weight, xa, lora_b, *, out=None):
    """y = x W^T + xa B^T, xa (M, r) given (already scaled): the two-pass kernel's GEMM."""
    _check_base(x2, weight)
    validate.tensor(xa, "xa", dtypes=(x2.dtype,), ndim=2, contiguous=False)
    if xa.shape[0] != x2.shape[0]:
        raise ValueError(f"xa must have one row per row of x ({x2.shape[0]}); got {tuple(xa.shape)}")
    check_rank(xa.shape[1])
    _check_lora_b(lora_b, x2, weight, xa.shape[1])
    out = _output(out, (x2.shape[0], weight.shape[0]), x2, "out")
    return _epilogue(x2, weight, xa, lora_b, out)


def lora_backward(dy, x_in, xa, weight, lora_a, lora_b, scale, *, needs_dx=True, fused_dx=True):
    """(dx, dx_in, dA, dB) for y = x W^T + (s x_in A^T) B^T, given dy and xa = s x_in A^T.

    fused_dx (x_in is x): dx = dY W + G A in one fused kernel, G = s dY B computed on chip;
    dx_in is None. Otherwise (x_in = dropout(x)): dx = dY W and dx_in = G A, torch matmuls.
    """
    # BEGIN EXERCISE: fused_dx: dx, g = _fused(dy, W.t(), B.t(), A.t(), scale, ...) (g = s dY B); otherwise g
    #   = s dY B, dx = dY W, dx_in = g A with torch. Then dA = g^T x_in, dB = dY^T xa.
    # HINT: The LoRA backward: with G = s dY B, the input gradient is dY W + G A, and the adapter gradients
    #   are dA = G^T x_in and dB = dY^T xa; when x_in is x, the two dx terms can be fused in one kernel.
    # HINT: Fused path: allocate dx (rows x in_features) and g (rows x r), call _fused on dy with the
    #   transposed views of W, B, A and the scale. Otherwise compute g with torch, and dx and dx_in as two
    #   matmuls when dx is needed. Then the two adapter gradients.
    # HINT: `d_a = g.t() @ x_in` and `d_b = dy.t() @ xa` (xa = s x_in A^T, saved from the forward).
    g = None
    dx = dx_in = None
    if needs_dx and fused_dx:
        dx = torch.empty((dy.shape[0], weight.shape[1]), dtype=dy.dtype, device=dy.device)
        g = torch.empty((dy.shape[0], lora_a.shape[0]), dtype=dy.dtype, device=dy.device)
        # The transposes are views: the kernel reads them through their strides.
        _fused(dy, weight.t(), lora_b.t(), lora_a.t(), scale, dx, g, True)
    else:
        g = (dy @ lora_b) * scale
        if needs_dx:
            dx = dy @ weight
            dx_in = g @ lora_a
    d_a = g.t() @ x_in
    d_b = dy.t() @ xa
    return dx, dx_in, d_a, d_b
    # END EXERCISE


class LoRALinearFunction(torch.autograd.Function):
    """y = x W^T + s (x_in A^T) B^T with W frozen: forward fused, backward as `lora_backward`."""

    @staticmethod
    def forward(ctx, x2, weight, lora_a, lora_b, scale, x_in):
        if x_in is None:
            y, xa = lora_forward(x2, weight, lora_a, lora_b, scale)
        else:  # dropout: the adapter sees another input, so xa comes from a torch matmul
            xa = (x_in @ lora_a.t()) * scale
            y = lora_epilogue(x2, weight, xa, lora_b)
        ctx.save_for_backward(x2 if x_in is None else x_in, xa, weight, lora_a, lora_b)
        ctx.scale, ctx.dropout = scale, x_in is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x_in, xa, weight, lora_a, lora_b = ctx.saved_tensors
        needs_dx = ctx.needs_input_grad[0] or ctx.needs_input_grad[5]
        dx, dx_in, d_a, d_b = lora_backward(dy.contiguous(), x_in, xa, weight, lora_a, lora_b, ctx.scale,
                                            needs_dx=needs_dx, fused_dx=not ctx.dropout)
        return (dx if ctx.needs_input_grad[0] else None, None,
                d_a if ctx.needs_input_grad[2] else None, d_b if ctx.needs_input_grad[3] else None,
                None, dx_in if ctx.needs_input_grad[5] else None)


# ------------------------------------------------------------------- the op torch.compile sees
# The same launchers as LoRALinearFunction, registered as ops (week 4's custom_ops.py is the
# lesson): under torch.compile Dynamo records one node for the forward and one for the backward,
# and Inductor compiles the model's torch code around them. Dropout (an adapter input other than
# x) stays on the eager path: compiled, that layer runs its torch form.
@torch.library.custom_op(f"{NAMESPACE}::lora_linear", mutates_args=())
def lora_linear_op(x2: torch.Tensor, weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, xa) of the fused forward: y = x W^T + s (x A^T) B^T, xa = s x A^T (saved for the backward)."""
    return lora_forward(x2, weight, lora_a, lora_b, scale)


@lora_linear_op.register_fake
def _lora_linear_fake(x2, weight, lora_a, lora_b, scale):
    return x2.new_empty((x2.shape[0], weight.shape[0])), x2.new_empty((x2.shape[0], lora_a.shape[0]))


@torch.library.custom_op(f"{NAMESPACE}::lora_linear_backward", mutates_args=())
def lora_linear_backward_op(dy: torch.Tensor, x2: torch.Tensor, xa: torch.Tensor, weight: torch.Tensor,
                            lora_a: torch.Tensor, lora_b: torch.Tensor,
                            scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dA, dB), dx from the fused dx kernel (see lora_backward)."""
    dx, _, d_a, d_b = lora_backward(dy.contiguous(), x2, xa, weight, lora_a, lora_b, scale)
    return dx, d_a, d_b


@lora_linear_backward_op.register_fake
def _lora_linear_backward_fake(dy, x2, xa, weight, lora_a, lora_b, scale):
    return x2.new_empty(x2.shape), lora_a.new_empty(lora_a.shape), lora_b.new_empty(lora_b.shape)


def _lora_setup_context(ctx, inputs, output):
    x2, weight, lora_a, lora_b, scale = inputs
    ctx.save_for_backward(x2, output[1], weight, lora_a, lora_b)
    ctx.scale = scale


def _lora_backward_formula(ctx, dy, _dxa):
    x2, xa, weight, lora_a, lora_b = ctx.saved_tensors
    dx, d_a, d_b = lora_linear_backward_op(dy, x2, xa, weight, lora_a, lora_b, ctx.scale)
    return dx, None, d_a, d_b, None


lora_linear_op.register_autograd(_lora_backward_formula, setup_context=_lora_setup_context)


def _prepare(x, weight, lora_a, lora_b, scale, adapter_input):
    validate.tensor(x, "x", dtypes=DTYPES, contiguous=False)
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension (..., in_features)")
    if weight.requires_grad:
        raise ValueError("weight requires grad, but LoRA trains only lora_a and lora_b: freeze the "
                         "base weight with weight.requires_grad_(False)")
    x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # not -1: x may be empty
    _check_operands(x2, weight, lora_a, lora_b)
    x_in = None
    if adapter_input is not None:
        validate.tensor(adapter_input, "adapter_input", dtypes=(x.dtype,), contiguous=False)
        if adapter_input.shape != x.shape:
            raise ValueError(f"adapter_input must have x's shape {tuple(x.shape)}, got {tuple(adapter_input.shape)}")
        x_in = adapter_input.reshape(x2.shape)
    return x2, x_in, check_scale(scale)


def lora_linear(x, weight, lora_a, lora_b, scale, *, adapter_input=None):
    """x W^T + scale (x A^T) B^T with autograd for x, lora_a, lora_b (W frozen); x (..., K).

    adapter_input: what the adapter sees instead of x (dropout(x) in training), same shape as x.
    """
    x2, x_in, scale = _prepare(x, weight, lora_a, lora_b, scale, adapter_input)
    if ops.compiling():  # one node per call in the graph (see lora_linear_op)
        if x_in is None:
            y = lora_linear_op(x2, weight, lora_a, lora_b, scale)[0]
        else:  # dropout: the unfused torch form, which Inductor compiles
            y = lora_linear_torch(x2, weight, lora_a, lora_b, scale, adapter_input=x_in)
        return y.reshape(*x.shape[:-1], weight.shape[0])
    y = LoRALinearFunction.apply(x2, weight, lora_a, lora_b, scale, x_in)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def lora_linear_two_pass(x, weight, lora_a, lora_b, scale):
    """Inference: xa = s x A^T by torch, then one GEMM with xa B^T in its epilogue (no autograd)."""
    x2, _, scale = _prepare(x, weight, lora_a, lora_b, scale, None)
    y = lora_epilogue(x2, weight, (x2 @ lora_a.t()) * scale, lora_b)
    return y.reshape(*x.shape[:-1], weight.shape[0])


# ------------------------------------------------------------------------- torch references
def lora_linear_torch(x, weight, lora_a, lora_b, scale, *, adapter_input=None):
    """The unfused reference: PEFT's arithmetic, F.linear(x, W) + F.linear(F.linear(x, A), B) * s."""
    x_in = x if adapter_input is None else adapter_input
    return F.linear(x, weight) + F.linear(F.linear(x_in, lora_a), lora_b) * scale


def lora_linear_torch_addmm(x, weight, lora_a, lora_b, scale):
    """Torch's best eager form: the low-rank product added in the second GEMM's epilogue (beta = 1)."""
    x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
    y = torch.addmm(F.linear(x2, weight), x2 @ lora_a.t(), lora_b.t(), alpha=scale)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def merged_weight(weight, lora_a, lora_b, scale):
    """W + s B A, computed in fp32 (fp64 for fp64) and rounded once to W's dtype."""
    # BEGIN EXERCISE: W + s B A computed in fp32 (fp64 for fp64), rounded once to W's dtype.
    # HINT: Merging folds the adapter into the base weight for inference; do the arithmetic in a wide type
    #   and round only once, or the tiny s B A update is lost in W's bf16 rounding.
    # HINT: Pick float64 for float64 weights, else float32; delta = (B @ A in the wide type) * scale; add to
    #   W in the wide type; cast back to W's dtype.
    wide = torch.float64 if weight.dtype == torch.float64 else torch.float32
    delta = (lora_b.to(wide) @ lora_a.to(wide)) * scale
    return (weight.to(wide) + delta).to(weight.dtype)
    # END EXERCISE


# ------------------------------------------------------------------------------- the module
def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a layer computes in: autocast's when it is on for x's device, else x's."""
    if x.is_floating_point() and torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def resolve_kernel(kernel: str) -> str:
    """'auto' -> 'triton' on a GPU, 'torch' in simulation (the interpreter is for checking, not speed)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if kernel == "auto":
        return "triton" if runtime.on_gpu() else "torch"
    return kernel


def check_hyper(r, alpha, dropout, in_features, out_features):
    """A LoRA layer's hyperparameters for an in_features -> out_features linear layer (ValueError naming the bad one)."""
    if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= MAX_RANK:
        raise ValueError(f"r must be an int in [1, {MAX_RANK}], got {r!r}")
    if r > min(in_features, out_features):
        raise ValueError(f"r = {r} exceeds min(in_features, out_features) = {min(in_features, out_features)}: "
                         "a rank that high is no longer a low-rank update")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0 or not math.isfinite(alpha):
        raise ValueError(f"alpha must be a positive number, got {alpha!r}")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable low-rank update: y = x W^T + b + (alpha/r) drop(x) A^T B^T.

    The base `weight` (and `bias`) keep their names (so a pre-trained state_dict still loads) and
    are frozen; `lora_a` (r, in) starts like nn.Linear's weight, `lora_b` (out, r) at zero.
    Adapters are kept in fp32 when the base is 16-bit (they are what the optimizer updates).
    kernel: "triton" (the fused autograd op), "torch" (the unfused reference) or "auto".
    """

    def __init__(self, in_features: int, out_features: int, r: int = 8, alpha: float = 16.0,
                 dropout: float = 0.0, *, bias: bool = False, kernel: str = "auto", device=None, dtype=None,
                 adapter_dtype=None):
        super().__init__()
        check_hyper(r, alpha, dropout, in_features, out_features)
        resolve_kernel(kernel)
        self.in_features, self.out_features = in_features, out_features
        self.r, self.alpha, self.scaling = r, float(alpha), float(alpha) / r
        self.dropout, self.kernel, self.merged = float(dropout), kernel, False
        factory = dict(device=device, dtype=dtype)
        self.weight = nn.Parameter(torch.empty(out_features, in_features, **factory), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(out_features, **factory), requires_grad=False) if bias else None
        base_dtype = self.weight.dtype
        if adapter_dtype is None:
            adapter_dtype = torch.float32 if base_dtype in (torch.float16, torch.bfloat16) else base_dtype
        self.lora_a = nn.Parameter(torch.empty(r, in_features, device=device, dtype=adapter_dtype))
        self.lora_b = nn.Parameter(torch.zeros(out_features, r, device=device, dtype=adapter_dtype))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        self.reset_adapters()

    @classmethod
    def from_linear(cls, linear: nn.Linear, r: int = 8, alpha: float = 16.0, dropout: float = 0.0, *,
                    kernel: str = "auto", base_dtype=None) -> "LoRALinear":
        """Wrap an existing nn.Linear: its weight (and bias) become the frozen base (cast to base_dtype)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear needs an nn.Linear, got {type(linear).__name__}")
        with torch.device("meta"):
            module = cls(linear.in_features, linear.out_features, r, alpha, dropout, bias=linear.bias is not None,
                         kernel=kernel)
        dtype = base_dtype or linear.weight.dtype
        device = linear.weight.device
        # A copy, not a view: merge() writes into the weight, which must not change `linear`'s.
        module.weight = nn.Parameter(linear.weight.detach().to(dtype, copy=True), requires_grad=False)
        if linear.bias is not None:
            module.bias = nn.Parameter(linear.bias.detach().to(dtype, copy=True), requires_grad=False)
        adapter_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        module.lora_a = nn.Parameter(torch.empty(r, linear.in_features, device=device, dtype=adapter_dtype))
        module.lora_b = nn.Parameter(torch.zeros(linear.out_features, r, device=device, dtype=adapter_dtype))
        module.reset_adapters()
        return module

    def reset_adapters(self) -> None:
        """A like nn.Linear's weight (uniform, bound 1/sqrt(in)), B = 0: the layer equals its base."""
        with torch.no_grad():
            nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
            self.lora_b.zero_()

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, r={self.r}, "
                f"alpha={self.alpha:g}, dropout={self.dropout:g}, kernel={self.kernel!r}, merged={self.merged}")

    def forward(self, x):
        # BEGIN EXERCISE: merged: plain F.linear (refuse training: RuntimeError "... unmerge() ..."). Else
        #   cast x, W, A, B to compute_dtype(x); x_in = dropout(x) when training with dropout > 0;
        #   lora_linear_torch or lora_linear by resolve_kernel(self.kernel); add the bias.
        # HINT: A merged layer is a plain linear (and must not be trained, or the gradient would go to the
        #   merged weight); otherwise compute in one dtype, apply dropout to the adapter's input only, and
        #   dispatch to the torch or Triton path.
        # HINT: Merged: raise RuntimeError when training with grad enabled, else F.linear. Unmerged: dtype =
        #   compute_dtype(x); cast x, W, A, B; x_in = F.dropout(...) only when training with dropout > 0
        #   (else None); resolve_kernel picks lora_linear_torch or lora_linear; add the bias in y's dtype.
        # HINT: `x_in = F.dropout(x, self.dropout, training=True) if self.dropout and self.training else
        #   None` passed as adapter_input.
        if self.merged:
            if self.training and torch.is_grad_enabled():
                raise RuntimeError("this LoRALinear is merged (its update is folded into weight): "
                                   "call unmerge() before training it")
            return F.linear(x, self.weight, self.bias)
        # Everything in the compute dtype (autocast's, or x's): fp32 adapters meet a bf16 base there.
        dtype = compute_dtype(x)
        x = x.to(dtype)
        x_in = F.dropout(x, self.dropout, training=True) if self.dropout and self.training else None
        operands = (x, self.weight.to(dtype), self.lora_a.to(dtype), self.lora_b.to(dtype), self.scaling)
        if resolve_kernel(self.kernel) == "torch":
            y = lora_linear_torch(*operands, adapter_input=x_in)
        else:
            y = lora_linear(*operands, adapter_input=x_in)
        return y if self.bias is None else y + self.bias.to(y.dtype)
        # END EXERCISE

    @torch.no_grad()
    def merge(self) -> None:
        """Fold s B A into weight: inference then runs one plain F.linear."""
        if self.merged:
            raise RuntimeError("already merged")
        self.weight.copy_(merged_weight(self.weight, self.lora_a, self.lora_b, self.scaling))
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Take s B A out of weight again (exact up to one rounding of W's dtype)."""
        if not self.merged:
            raise RuntimeError("not merged")
        self.weight.copy_(merged_weight(self.weight, self.lora_a, self.lora_b, -self.scaling))
        self.merged = False


# ----------------------------------------------------------------------------- whole models
def _check_targets(targets):
    if isinstance(targets, str) or not targets or not all(isinstance(t, str) for t in targets):
        raise ValueError(f"targets must be a non-empty tuple of module names like {TARGETS}, got {targets!r}")


def replace_linears(model: nn.Module, targets, make) -> list[str]:
    """Replace every nn.Linear whose attribute name is in `targets` by make(linear); return their paths."""
    _check_targets(targets)
    replaced, names = [], set()
    for path, module in list(model.named_modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                names.add(name)
                if name in targets:
                    setattr(module, name, make(child))
                    replaced.append(f"{path}.{name}" if path else name)
    missing = [t for t in targets if t not in {p.rsplit(".", 1)[-1] for p in replaced}]
    if missing:
        raise ValueError(f"no nn.Linear named {missing} in the model; its nn.Linear layers are named "
                         f"{sorted(names)}")
    return replaced


def freeze_all_but(model: nn.Module, predicate) -> None:
    for name, p in model.named_parameters():
        p.requires_grad_(bool(predicate(name)))


def is_adapter(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ("lora_a", "lora_b")


def apply_lora(model: nn.Module, targets=TARGETS, r: int = 8, alpha: float = 16.0, dropout: float = 0.0, *,
               kernel: str = "auto", base_dtype=None) -> nn.Module:
    """Swap the model's nn.Linear layers named in `targets` for LoRALinear and freeze everything else.

    In place; returns the model. base_dtype (e.g. torch.bfloat16) casts the frozen base weights of
    the swapped layers: a frozen weight needs no fp32 master copy.
    """
    # BEGIN EXERCISE: resolve_kernel(kernel); replace_linears(model, targets, LoRALinear.from_linear...);
    #   freeze_all_but(model, is_adapter); return model.
    # HINT: Applying LoRA = swap the target nn.Linear layers for LoRALinear, then freeze everything except
    #   the adapters; validate the kernel name first so a typo fails before any swap.
    # HINT: resolve_kernel(kernel); replace_linears with a factory calling LoRALinear.from_linear(lin, r,
    #   alpha, dropout, kernel=..., base_dtype=...); freeze_all_but(model, is_adapter); return the model.
    resolve_kernel(kernel)
    replace_linears(model, targets, lambda lin: LoRALinear.from_linear(lin, r, alpha, dropout, kernel=kernel,
                                                                       base_dtype=base_dtype))
    freeze_all_but(model, is_adapter)
    return model
    # END EXERCISE


def adapter_modules(model: nn.Module):
    return [m for m in model.modules() if isinstance(m, LoRALinear)]


def merge_lora(model: nn.Module) -> nn.Module:
    for module in adapter_modules(model):
        module.merge()
    return model


def unmerge_lora(model: nn.Module) -> nn.Module:
    for module in adapter_modules(model):
        module.unmerge()
    return model


def lora_state_dict(model: nn.Module) -> dict:
    """Only the adapters: what a LoRA fine-tune has to save (KBs to MBs, not the model)."""
    return {k: v for k, v in model.state_dict().items() if is_adapter(k)}


def count_trainable(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def adapter_parameter_count(in_features: int, out_features: int, r: int) -> int:
    return r * (in_features + out_features)


# ------------------------------------------------------------------------- the code behind each entry
# What `lora_linear` (training, inference) and `lora_linear_two_pass` run, kernels to autograd: the
# benchmarks (lora_bench.py) count its lines beside each variant (`Benchmark.sources`).
LORA_TRAIN_CODE = (lora_fused_kernel, _fused, lora_forward, lora_backward, LoRALinearFunction.forward,
                   LoRALinearFunction.backward, lora_linear)
LORA_INFER_CODE = (lora_fused_kernel, _fused, lora_forward, LoRALinearFunction.forward, lora_linear)
LORA_TWO_PASS_CODE = (lora_epilogue_kernel, _epilogue, lora_epilogue, lora_linear_two_pass)
