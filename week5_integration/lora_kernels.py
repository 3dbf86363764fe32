"""LoRA's kernels: the base GEMM with the low-rank update added on chip, and their launchers.

The layer of lora.py (the autograd op, the module and the whole-model helpers are there; its
benchmarks and tile sweep in lora_bench.py). y = x W^T + s (x A^T) B^T, s = alpha / r:

* `lora_epilogue_kernel` ("two-pass"): xa = s x A^T is computed first (a thin torch matmul, M x r),
  then ONE GEMM computes x W^T and adds xa B^T in its epilogue, while the accumulator is still in
  registers. The M x N low-rank term never goes to memory.
* `lora_fused_kernel`: the same, but xa is computed inside the GEMM's K loop from the x tile that
  is already loaded for x W^T (`tl.dot(x, A^T)` beside `tl.dot(x, W^T)`): x is read once, xa lives
  in registers (BLOCK_M x r fp32). Each program recomputes xa for its rows, so the extra FLOPs are
  2 M K r per column block, r / BLOCK_N of the base GEMM (16 / 128 = 12.5%, 6% at BLOCK_N = 256).
  The program of column block 0 also writes xa (M x r) for the backward.
* The backward (`lora_backward`, for lora.py's `LoRALinearFunction`), with G = s dY B (M x r):
      dx = dY W + G A     the SAME fused kernel: "x" = dY, "W" = W^T, "A" = B^T, "B" = A^T,
                          so G is computed on chip from the dY tiles and stored for dA
      dA = G^T x          torch matmul (r x M @ M x K)
      dB = dY^T xa        torch matmul (N x M @ M x r); xa = s x A^T, saved by the forward
  No dW: W is frozen, so a LoRA step skips one of the three big GEMMs of a training step.

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

Dtypes: fp16 and bf16 (tensor cores), fp32 (exact fp32 products, `input_precision="ieee"`) and
fp64 (for gradcheck); accumulation in fp32 (fp64 for fp64).
"""
from __future__ import annotations

import math

import torch

from course import runtime, validate
from course.gpu import tl, triton
from course.tl_dot import dot  # tl.dot, with float64 as plain FMAs (see course/tl_dot.py)
# Week 3's grouped tile order (concurrent programs cover a squarish patch of output tiles, so
# the x row panels and W column panels they share are read from L2) and its config maker.
from week3_triton_kernels.matmul import tile_config
from week3_triton_kernels.matmul_basic import grouped_tile

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
MAX_RANK = 128  # xa is a BLOCK_M x r fp32 block of registers: r = 128 is already 64 KB per program
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


def check_operands(x2, weight, lora_a, lora_b):
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


def launch_fused(p, q, u, v, scale, out, xa_out, store_xa):
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


def launch_epilogue(x2, weight, xa, lora_b, out):
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
    check_operands(x2, weight, lora_a, lora_b)
    scale = check_scale(scale)
    M, N, R = x2.shape[0], weight.shape[0], lora_a.shape[0]
    out = _output(out, (M, N), x2, "out")
    xa_out = _output(xa_out, (M, R), x2, "xa_out") if store_xa else None
    return launch_fused(x2, weight, lora_a, lora_b, scale, out, xa_out, store_xa)


def lora_epilogue(x2, weight, xa, lora_b, *, out=None):
    """y = x W^T + xa B^T, xa (M, r) given (already scaled): the two-pass kernel's GEMM."""
    _check_base(x2, weight)
    validate.tensor(xa, "xa", dtypes=(x2.dtype,), ndim=2, contiguous=False)
    if xa.shape[0] != x2.shape[0]:
        raise ValueError(f"xa must have one row per row of x ({x2.shape[0]}); got {tuple(xa.shape)}")
    check_rank(xa.shape[1])
    _check_lora_b(lora_b, x2, weight, xa.shape[1])
    out = _output(out, (x2.shape[0], weight.shape[0]), x2, "out")
    return launch_epilogue(x2, weight, xa, lora_b, out)


def lora_backward(dy, x_in, xa, weight, lora_a, lora_b, scale, *, needs_dx=True, fused_dx=True):
    """(dx, dx_in, dA, dB) for y = x W^T + (s x_in A^T) B^T, given dy and xa = s x_in A^T.

    fused_dx (x_in is x): dx = dY W + G A in one fused kernel, G = s dY B computed on chip;
    dx_in is None. Otherwise (x_in = dropout(x)): dx = dY W and dx_in = G A, torch matmuls.
    """
    # BEGIN EXERCISE: fused_dx: dx, g = launch_fused(dy, W.t(), B.t(), A.t(), scale, ...) (g = s dY B); otherwise g
    #   = s dY B, dx = dY W, dx_in = g A with torch. Then dA = g^T x_in, dB = dY^T xa.
    # HINT: The LoRA backward: with G = s dY B, the input gradient is dY W + G A, and the adapter gradients
    #   are dA = G^T x_in and dB = dY^T xa; when x_in is x, the two dx terms can be fused in one kernel.
    # HINT: Fused path: allocate dx (rows x in_features) and g (rows x r), call launch_fused on dy with the
    #   transposed views of W, B, A and the scale. Otherwise compute g with torch, and dx and dx_in as two
    #   matmuls when dx is needed. Then the two adapter gradients.
    # HINT: `d_a = g.t() @ x_in` and `d_b = dy.t() @ xa` (xa = s x_in A^T, saved from the forward).
    g = None
    dx = dx_in = None
    if needs_dx and fused_dx:
        dx = torch.empty((dy.shape[0], weight.shape[1]), dtype=dy.dtype, device=dy.device)
        g = torch.empty((dy.shape[0], lora_a.shape[0]), dtype=dy.dtype, device=dy.device)
        # The transposes are views: the kernel reads them through their strides.
        launch_fused(dy, weight.t(), lora_b.t(), lora_a.t(), scale, dx, g, True)
    else:
        g = (dy @ lora_b) * scale
        if needs_dx:
            dx = dy @ weight
            dx_in = g @ lora_a
    d_a = g.t() @ x_in
    d_b = dy.t() @ xa
    return dx, dx_in, d_a, d_b
    # END EXERCISE
