"""The Transformer feed-forward block with fusion: Linear + bias + GELU in one matmul epilogue,
and a SwiGLU MLP whose gate and up projections share one kernel that applies silu(g) * u.

Over 500 lines: two fused MLP lessons (the bias+GELU epilogue and the gate/up SwiGLU kernel) share
the matmul plumbing, their custom ops and backwards here; the holes carry their graded hints.

A Transformer MLP is two or three big matmuls with element-wise work between them. The matmuls
are compute-bound (cuBLAS runs them near peak); the element-wise ops are memory-bound, and in
eager PyTorch each one reads and writes an N x F intermediate in HBM. Fusion moves that
element-wise work into the matmul's *epilogue*: the fp32 accumulator tile is still in registers
when the matmul finishes, so applying bias, GELU or silu(g) * u there costs no memory traffic.

What it teaches:
* `linear_act`: activation(x @ W^T + b) with week 3's `matmul` epilogue (bias + relu / gelu /
  gelu_tanh / silu; `ACTIVATIONS` lists those both week 3's epilogue and the backward here know).
  Inference: one launch instead of two
  (matmul, then the activation), 2 N F s bytes saved.
  Training needs the pre-activation z = x W^T + b for the backward (act'(z)), and the epilogue
  writes only act(z). `LinearActFunction` therefore keeps just x, W, b and *recomputes* z in the
  backward (one extra matmul: 2 N F K FLOPs, +33% over forward + backward) instead of holding
  N x F activations between the passes: selective activation recomputation, traded explicitly.
  Its backward fuses dz = dy * act'(z) into one element-wise kernel (`act_backward_kernel`).
* `swiglu_gate_up_kernel`: a "dual GEMM". Each program loads a tile of x ONCE and multiplies it
  by a tile of W_gate and of W_up (two fp32 accumulators), and the epilogue writes
  h = silu(g) * u. g and u never touch HBM at inference; in training they are written beside h
  because the backward needs them.
* `swiglu_backward_kernel`: dg = dh * u * silu'(g) and du = dh * silu(g) in one pass, written
  side by side into one N x 2F buffer so that dx = [dg du] @ [W_gate; W_up] and
  dW_gate_up = [dg du]^T @ x are ONE matmul each (the weights are stored stacked, (2F, d)).

Bytes of activations moved (N tokens, model width d, hidden width F, itemsize s; the weights
are read once by every variant and left out):
* Linear + GELU forward: eager = matmul writes z (NF), gelu reads z, writes y (2NF): NK + 3NF;
  fused = NK + NF. Inference saves 2 N F s.
* SwiGLU forward: eager (three nn.Linear) = gate and up GEMMs read x twice and write g, u
  (2Nd + 2NF), silu reads g writes s (2NF), mul reads s, u writes h (3NF), down reads h writes
  out (NF + Nd): 3Nd + 8NF. Fused inference: x once, h written and read, out: 2Nd + 2NF;
  fused training: + g, u written: 2Nd + 4NF. At N = 8192, d = 4096, F = 14336 in bf16 that is
  2.1 GB against 0.6 GB: 1.5 GB, ~0.5 ms at 3 TB/s, beside ~4.5 ms of matmuls (6 N d F FLOPs
  = 2.9 TFLOP at ~650 TFLOP/s). Prediction: fusion is worth ~10%, and only if the dual-GEMM
  Triton kernel runs as fast as cuBLAS; week 3's Triton matmul reached 0.91-0.99x of cuBLAS on
  square shapes, so expect parity rather than a clear win: the gain in an MLP is memory (the
  intermediates not stored) more than time.
* Saved for the backward: eager SwiGLU keeps g, silu(g), u and h (4NF); the fused one g, u, h (3NF).

Dtypes: fp16 and bf16 (tensor cores; week 3's matmul takes only these); the SwiGLU kernels
also take fp32, computed with exact fp32 products (`input_precision="ieee"`, no TF32), for
the tests. Accumulation is fp32 everywhere. The benchmarks and the fused-vs-eager sweep:
fused_mlp_bench.py.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course import runtime, validate
from course.gpu import triton, tl
from week3_triton_kernels import matmul as week3_matmul

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
LINEAR_DTYPES = (torch.float16, torch.bfloat16)  # week 3's matmul: tensor-core dtypes only
# Activations with a backward here; `linear_act` offers those week 3's epilogue also has.
BACKWARD_ACTIVATIONS = {"relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
ACTIVATIONS = tuple(a for a in week3_matmul.ACTIVATIONS if a in BACKWARD_ACTIVATIONS)
ELEMENTWISE_BLOCK = 1024
INT32_MAX = 2**31 - 1


# ----------------------------------------------------------------------- element-wise kernels
@triton.jit
def _act_and_grad(z, ACTIVATION: tl.constexpr):
    """act'(z) for the activations of week 3's epilogue (z fp32)."""
    # BEGIN EXERCISE: grad = act'(z) by ACTIVATION: 1 relu (where(z <= 0, 0, 1): NaN passes dy through, as
    #   torch's relu), 2 gelu (erf): Phi(z) + z phi(z), 3 gelu_tanh: the derivative of z sigmoid(2u), u =
    #   sqrt(2/pi) (z + 0.044715 z^3), 4 silu: s (1 + z (1 - s)), s = sigmoid(z)
    # HINT: One closed-form derivative per activation, in fp32, chosen by a constexpr if/elif chain on
    #   ACTIVATION.
    # HINT: relu: `tl.where(z <= 0, 0.0, 1.0)` (NaN passes dy through); silu: `sig * (1.0 + z * (1.0 -
    #   sig))`.
    if ACTIVATION == 1:
        grad = tl.where(z <= 0, 0.0, 1.0)  # NaN <= 0 is false: NaN passes dy through, as torch's relu
    elif ACTIVATION == 2:
        # d/dz [z Phi(z)] = Phi(z) + z phi(z)
        cdf = 0.5 * (1.0 + tl.erf(z * 0.7071067811865476))
        pdf = 0.3989422804014327 * tl.exp(-0.5 * z * z)
        grad = cdf + z * pdf
    elif ACTIVATION == 3:
        # gelu_tanh(z) = z * sigmoid(2u), u = sqrt(2/pi) (z + 0.044715 z^3)
        u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
        sig = 1.0 / (1.0 + tl.exp(-2.0 * u))
        du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * z * z)
        grad = sig + z * 2.0 * sig * (1.0 - sig) * du
    else:
        sig = 1.0 / (1.0 + tl.exp(-z))
        grad = sig * (1.0 + z * (1.0 - sig))
    # END EXERCISE
    return grad


@triton.jit
def act_backward_kernel(dy_ptr, z_ptr, dz_ptr, n, ACTIVATION: tl.constexpr, BLOCK: tl.constexpr):
    # dz = dy * act'(z): one read of dy and z, one write of dz (eager autograd: the same
    # formula as 4-6 separate kernels, each through HBM).
    # BEGIN EXERCISE: dz = dy * act'(z) in one pass: this program's BLOCK offsets (int64), masked, dy and z
    #   read in fp32, dz written in its dtype
    # HINT: One pass instead of eager autograd's several: read dy and z once, write dz once (in fp32
    #   between).
    # HINT: vector_add's offsets and mask; `dz = dy * _act_and_grad(z, ACTIVATION)`, stored in dz's dtype.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(dy_ptr + offs, mask=mask).to(tl.float32)
    z = tl.load(z_ptr + offs, mask=mask).to(tl.float32)
    tl.store(dz_ptr + offs, (dy * _act_and_grad(z, ACTIVATION)).to(dz_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


@triton.jit
def swiglu_backward_kernel(dh_ptr, g_ptr, u_ptr, dgu_ptr, n, n_cols, BLOCK: tl.constexpr):
    """dgu[:, :F] = dh * u * silu'(g), dgu[:, F:] = dh * silu(g); dh, g, u are (N, F)."""
    # BEGIN EXERCISE: the SwiGLU gradient in one pass over (N, F): dg = dh * u * silu'(g), du = dh *
    #   silu(g), written side by side into the (N, 2F) buffer dgu (element (r, c) to (r, c) and (r, F + c))
    # HINT: Both gradients come from the same loads; side by side in (N, 2F), dx later is one matmul.
    # HINT: `row, col = offs // n_cols, offs % n_cols`; dg goes to row * 2F + col, du n_cols further on.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dh = tl.load(dh_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-g))
    silu = g * sig
    dsilu = sig * (1.0 + g * (1.0 - sig))
    # (N, F) element (r, c) lands at (r, c) and (r, F + c) of the (N, 2F) buffer.
    row, col = offs // n_cols, offs % n_cols
    out = dgu_ptr + row * (2 * n_cols) + col
    # dh * dsilu first (dsilu lies in [-0.1, 1.1]): dh * u overflows fp32 for u near bf16's max.
    tl.store(out, (dh * dsilu * u).to(dgu_ptr.dtype.element_ty), mask=mask)
    tl.store(out + n_cols, (dh * silu).to(dgu_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


# ------------------------------------------------------------------------ the dual GEMM
@triton.jit
def swiglu_gate_up_kernel(x_ptr, w_ptr, h_ptr, g_ptr, u_ptr, M, F, K,
                          stride_xm, stride_xk, stride_wf, stride_wk, stride_hm,
                          STORE_GU: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr):
    tl.static_assert(BLOCK_K >= 16, "tl.dot needs BLOCK_K >= 16")
    # BEGIN EXERCISE: the dual GEMM: week 3's tiled, grouped matmul with TWO accumulators fed by one x tile
    #   per K step (gate rows [0, F) and up rows [F, 2F) of w); epilogue on the fp32 accumulators: h =
    #   silu(g) * u, stored masked; g and u too when STORE_GU
    # HINT: Dual GEMM: each K step loads one x tile and feeds two tl.dot calls (gate and up accumulators).
    # HINT: Week 3's grouped, wrapped-offset K loop; `wu_ptrs = wg_ptrs + F * stride_wf` (W is (2F, K)).
    # HINT: Epilogue in fp32 registers: `h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u`; mask only the store.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(F, BLOCK_N)
    # Grouped ordering, as in week 3: concurrent programs share x and W panels in L2.
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # Rows and columns past M and F wrap around instead of being masked (loads stay unmasked);
    # the wrapped results are never stored.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % F
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    # W is (2F, K): the tile of W_gate^T is rows offs_n, the tile of W_up^T rows F + offs_n.
    wg_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wf
    wu_ptrs = wg_ptrs + F * stride_wf

    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        # One load of the x tile feeds both products: the second GEMM's x traffic is free.
        x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        wg = tl.load(wg_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        wu = tl.load(wu_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc_g = tl.dot(x, wg, acc_g, input_precision=INPUT_PRECISION)
        acc_u = tl.dot(x, wu, acc_u, input_precision=INPUT_PRECISION)
        x_ptrs += BLOCK_K * stride_xk
        wg_ptrs += BLOCK_K * stride_wk
        wu_ptrs += BLOCK_K * stride_wk

    # Epilogue, on the fp32 accumulators still in registers: h = silu(g) * u.
    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < F)
    offs = rows[:, None] * stride_hm + cols[None, :]
    tl.store(h_ptr + offs, h.to(h_ptr.dtype.element_ty), mask=mask)
    if STORE_GU:  # training: the backward needs g and u (rounded to the dtype, as torch stores them)
        tl.store(g_ptr + offs, acc_g.to(g_ptr.dtype.element_ty), mask=mask)
        tl.store(u_ptr + offs, acc_u.to(u_ptr.dtype.element_ty), mask=mask)

    # END EXERCISE

# Two fp32 accumulators double the registers of week 3's tiles: 128 x 128 x 2 fp32 over 256
# threads is 128 registers per thread for the accumulators alone, so the biggest tile here is
# 128 x 128 at 8 warps (week 3 went to 128 x 256).
AUTOTUNE_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=4, num_warps=8),
    # Every config above needs 144-240 KB of shared memory (compiled for sm_86, `python -m course
    # compile-matrix`): more than an RTX 30/40 or L4 block has (99 KB). This one fits there, in fp32 too.
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=3, num_warps=4),
]
SMALL_PROBLEM = 512 * 512
# A small output gives few tiles anyway: one small tile, not four compiles to time. Small also to
# compile: fp32's exact-product 128-wide dual tile took ~12 s to compile on the H100 host (test
# timing log, 2026-11-26), for outputs of a few hundred elements.
SMALL_CONFIG = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=2, num_warps=4)


def _shared_bytes(config, itemsize: int) -> int:
    """Pipeline buffers of one block: num_stages x (an x tile and the gate and up tiles of w)."""
    k = config.kwargs
    return config.num_stages * (k["BLOCK_M"] * k["BLOCK_K"] + 2 * k["BLOCK_K"] * k["BLOCK_N"]) * itemsize


def _prune_configs(configs, named_args, **kwargs):
    if named_args["M"] * named_args["F"] <= SMALL_PROBLEM:
        return [SMALL_CONFIG]
    # Only configs whose buffers fit this GPU's shared memory are compiled and timed (the autotuner
    # would drop the others at launch, after compiling each for nothing).
    itemsize = named_args["x_ptr"].element_size()
    fitting = [c for c in configs if _shared_bytes(c, itemsize) <= runtime.shared_memory_per_block()]
    return fitting or [min(configs, key=lambda c: _shared_bytes(c, itemsize))]


swiglu_gate_up_kernel_autotuned = triton.autotune(
    configs=AUTOTUNE_CONFIGS, key=["M", "F", "K", "STORE_GU"],
    prune_configs_by={"early_config_prune": _prune_configs})(swiglu_gate_up_kernel)
SIM_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}


# ------------------------------------------------------------------------------- launchers
def _check_int32_span(t, name):
    if t.numel() and max((s - 1) * st for s, st in zip(t.shape, t.stride())) > INT32_MAX:
        raise ValueError(f"{name} spans more than 2^31 elements: the kernel's offsets are int32")


def swiglu_gate_up(x: torch.Tensor, w_gate_up: torch.Tensor, *, store_gu: bool = False,
                   out: torch.Tensor | None = None):
    """h = silu(x @ W_gate^T) * (x @ W_up^T) in one kernel; W_gate, W_up stacked in w_gate_up (2F, d).

    Returns h (N, F) (written into `out` if given), or (h, g, u) with store_gu=True (what the
    backward needs).
    """
    validate.tensor(x, "x", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.tensor(w_gate_up, "w_gate_up", dtypes=DTYPES, ndim=2, contiguous=False)
    runtime.require_bf16_tensor_cores(x.dtype, "swiglu_gate_up (tl.dot)")  # before launch: a T4 refuses bf16
    validate.same_dtype(x=x, w_gate_up=w_gate_up)
    if w_gate_up.shape[1] != x.shape[1]:
        raise ValueError(f"w_gate_up has {w_gate_up.shape[1]} columns; expected x's {x.shape[1]} (the model width)")
    if w_gate_up.shape[0] % 2:
        raise ValueError(f"w_gate_up must stack W_gate and W_up (2F rows), got an odd {w_gate_up.shape[0]} rows")
    _check_int32_span(x, "x")
    _check_int32_span(w_gate_up, "w_gate_up")
    M, K = x.shape
    Fh = w_gate_up.shape[0] // 2
    if out is None:
        h = torch.empty((M, Fh), dtype=x.dtype, device=x.device)
    else:
        h = validate.tensor(out, "out", dtypes=(x.dtype,), ndim=2)
        if tuple(out.shape) != (M, Fh):
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {(M, Fh)}")
    g = torch.empty_like(h) if store_gu else h
    u = torch.empty_like(h) if store_gu else h
    if M and Fh:
        if K == 0:  # empty sums: g = u = 0, h = silu(0) * 0 = 0
            for t in {id(h): h, id(g): g, id(u): u}.values():
                t.zero_()
        else:
            _launch_gate_up(x, w_gate_up, h, g, u, M, Fh, K, store_gu)
    return (h, g, u) if store_gu else h


def _launch_gate_up(x, w, h, g, u, M, Fh, K, store_gu):
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(Fh, meta["BLOCK_N"]),)  # noqa: E731
    args = (x, w, h, g, u, M, Fh, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1), h.stride(0))
    meta = dict(STORE_GU=store_gu, INPUT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32")
    if runtime.on_gpu():
        swiglu_gate_up_kernel_autotuned[grid](*args, **meta)
    else:  # the interpreter cannot time configs; one small tile
        swiglu_gate_up_kernel[grid](*args, **meta, **SIM_CONFIG)


def swiglu_backward(dh: torch.Tensor, g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """[dg du] (N, 2F) from dh, g, u (N, F): the SwiGLU gradient, one pass."""
    for name, t in (("dh", dh), ("g", g), ("u", u)):
        validate.tensor(t, name, dtypes=DTYPES, ndim=2)
    validate.same_shape(dh=dh, g=g, u=u)
    validate.same_dtype(dh=dh, g=g, u=u)
    n_rows, n_cols = g.shape
    dgu = torch.empty((n_rows, 2 * n_cols), dtype=g.dtype, device=g.device)
    n = g.numel()
    if n:
        swiglu_backward_kernel[(triton.cdiv(n, ELEMENTWISE_BLOCK),)](dh, g, u, dgu, n, n_cols,
                                                                    BLOCK=ELEMENTWISE_BLOCK, num_warps=4)
    return dgu


def act_backward(dy: torch.Tensor, z: torch.Tensor, activation: str) -> torch.Tensor:
    """dz = dy * act'(z), element-wise, one pass."""
    validate.tensor(dy, "dy", dtypes=DTYPES)
    validate.tensor(z, "z", dtypes=DTYPES)
    validate.same_shape(dy=dy, z=z)
    validate.same_dtype(dy=dy, z=z)
    if activation not in BACKWARD_ACTIVATIONS:
        raise ValueError(f"activation must be one of {list(BACKWARD_ACTIVATIONS)}, got {activation!r}")
    dz = torch.empty_like(z)
    n = z.numel()
    if n:
        act_backward_kernel[(triton.cdiv(n, ELEMENTWISE_BLOCK),)](dy, z, dz, n, ACTIVATION=BACKWARD_ACTIVATIONS[activation],
                                                                 BLOCK=ELEMENTWISE_BLOCK, num_warps=4)
    return dz


# ------------------------------------------------------------------------- Linear + activation
def _check_linear(x, weight, bias, activation):
    validate.tensor(x, "x", dtypes=LINEAR_DTYPES)
    validate.tensor(weight, "weight", dtypes=LINEAR_DTYPES, ndim=2)
    validate.same_dtype(x=x, weight=weight)
    if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x's last dimension must equal weight's columns (in_features): "
                         f"x is {tuple(x.shape)}, weight is {tuple(weight.shape)} (out x in)")
    if bias is not None:
        validate.tensor(bias, "bias", dtypes=LINEAR_DTYPES, ndim=1)
        validate.same_dtype(x=x, bias=bias)
        if bias.shape[0] != weight.shape[0]:
            raise ValueError(f"bias has {bias.shape[0]} elements; expected out_features = {weight.shape[0]}")
    if activation not in ACTIVATIONS:
        missing = "" if activation not in BACKWARD_ACTIVATIONS else " (week 3's matmul epilogue lacks it)"
        raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, got {activation!r}{missing}")


class LinearActFunction(torch.autograd.Function):
    """Forward: one fused launch. Backward: z recomputed (bias fused), dz by one element-wise kernel."""

    @staticmethod
    def forward(ctx, x2, weight, bias, activation):
        ctx.save_for_backward(x2, weight, bias)
        ctx.activation = activation
        return week3_matmul.matmul(x2, weight.t(), bias, activation)

    @staticmethod
    def backward(ctx, dy):
        # BEGIN EXERCISE: the backward recomputes the pre-activation z (week 3's matmul with the bias, no
        #   activation) instead of saving it; dz = act_backward(dy, z); then dx, dw and db (summed in fp32)
        #   for the inputs that need them
        # HINT: Recompute z (matmul with the bias, no activation) rather than saving N x F activations.
        # HINT: dz = act_backward(dy, z, ...); then `dz @ weight`, `dz.t() @ x2`, and dz's fp32 row sum for
        #   db.
        x2, weight, bias = ctx.saved_tensors
        z = week3_matmul.matmul(x2, weight.t(), bias)  # the pre-activation, recomputed
        dz = act_backward(dy.contiguous(), z, ctx.activation)
        dx = dz @ weight if ctx.needs_input_grad[0] else None
        dw = dz.t() @ x2 if ctx.needs_input_grad[1] else None
        db = dz.sum(0, dtype=torch.float32).to(dz.dtype) if bias is not None and ctx.needs_input_grad[2] else None
        return dx, dw, db, None
        # END EXERCISE


def linear_act(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               activation: str = "gelu") -> torch.Tensor:
    """activation(F.linear(x, weight, bias)) with the bias and activation in the matmul epilogue."""
    _check_linear(x, weight, bias, activation)
    x2 = x.reshape(-1, x.shape[-1])
    y = LinearActFunction.apply(x2, weight, bias, activation)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def linear_act_torch(x, weight, bias=None, activation="gelu"):
    """The eager pair the fused launch replaces: F.linear, then the activation (a second kernel)."""
    z = F.linear(x, weight, bias)
    if activation == "relu":
        return torch.relu(z)
    if activation == "silu":
        return F.silu(z)
    return F.gelu(z, approximate="tanh" if activation == "gelu_tanh" else "none")


# ------------------------------------------------------------------------------ SwiGLU MLP
def _check_mlp(x, w_gate_up, w_down):
    validate.tensor(x, "x", dtypes=DTYPES)
    validate.tensor(w_gate_up, "w_gate_up", dtypes=DTYPES, ndim=2)
    validate.tensor(w_down, "w_down", dtypes=DTYPES, ndim=2)
    validate.same_dtype(x=x, w_gate_up=w_gate_up, w_down=w_down)
    d = x.shape[-1] if x.dim() else -1
    if w_gate_up.shape[1] != d or w_gate_up.shape[0] % 2:
        raise ValueError(f"w_gate_up must be (2F, d) with d = x's last dimension {d}; got {tuple(w_gate_up.shape)}")
    if tuple(w_down.shape) != (d, w_gate_up.shape[0] // 2):
        raise ValueError(f"w_down must be (d, F) = {(d, w_gate_up.shape[0] // 2)}; got {tuple(w_down.shape)}")


class SwiGLUMLPFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2, w_gate_up, w_down):
        h, g, u = swiglu_gate_up(x2, w_gate_up, store_gu=True)
        ctx.save_for_backward(x2, w_gate_up, w_down, g, u, h)
        return h @ w_down.t()

    @staticmethod
    def backward(ctx, dout):
        # BEGIN EXERCISE: the backward: dh = dout W_down, dgu = swiglu_backward(dh, g, u), then dx and
        #   dW_gate_up each in ONE matmul of [dg du], and dW_down = dout^T h
        # HINT: Backprop out = h W_down^T, then h = silu(g) u, then [g u] = x [Wg; Wu]^T, each one matmul.
        # HINT: dh = dout @ w_down; dgu = swiglu_backward(dh, g, u); `dx = dgu @ w_gate_up`; dW = dgu.t() @
        #   x2.
        x2, w_gate_up, w_down, g, u, h = ctx.saved_tensors
        dout = dout.contiguous()
        dh = dout @ w_down
        dgu = swiglu_backward(dh, g, u)
        dx = dgu @ w_gate_up if ctx.needs_input_grad[0] else None        # [dg du] @ [Wg; Wu]: one matmul
        dw_gate_up = dgu.t() @ x2 if ctx.needs_input_grad[1] else None   # (2F, d) in one matmul
        dw_down = dout.t() @ h if ctx.needs_input_grad[2] else None
        return dx, dw_gate_up, dw_down
        # END EXERCISE


def swiglu_mlp(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """(silu(x Wg^T) * (x Wu^T)) Wd^T; w_gate_up = [Wg; Wu] (2F, d), w_down (d, F); x (..., d)."""
    _check_mlp(x, w_gate_up, w_down)
    x2 = x.reshape(-1, x.shape[-1])
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, w_gate_up, w_down)):
        out = SwiGLUMLPFunction.apply(x2, w_gate_up, w_down)
    else:  # inference: g and u are never written
        out = swiglu_gate_up(x2, w_gate_up) @ w_down.t()
    return out.reshape(x.shape)


def swiglu_mlp_torch(x, w_gate_up, w_down):
    """The eager module's arithmetic: three F.linear (gate, up, down), silu, multiply."""
    w_gate, w_up = w_gate_up.chunk(2, dim=0)
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


class SwiGLUMLP(torch.nn.Module):
    """A Llama-style feed-forward block: d -> 2F (gate, up) -> silu(gate) * up -> d, no biases."""

    def __init__(self, d_model: int, d_hidden: int, *, device=None, dtype=None):
        super().__init__()
        self.w_gate_up = torch.nn.Parameter(torch.empty(2 * d_hidden, d_model, device=device, dtype=dtype))
        self.w_down = torch.nn.Parameter(torch.empty(d_model, d_hidden, device=device, dtype=dtype))
        torch.nn.init.normal_(self.w_gate_up, std=d_model ** -0.5)
        torch.nn.init.normal_(self.w_down, std=d_hidden ** -0.5)

    def forward(self, x):
        return swiglu_mlp(x, self.w_gate_up, self.w_down)


class SwiGLUMLPTorch(torch.nn.Module):
    """The unfused reference module: gate, up and down nn.Linear layers, as in most model code."""

    def __init__(self, d_model: int, d_hidden: int, *, device=None, dtype=None):
        super().__init__()
        kw = dict(bias=False, device=device, dtype=dtype)
        self.gate = torch.nn.Linear(d_model, d_hidden, **kw)
        self.up = torch.nn.Linear(d_model, d_hidden, **kw)
        self.down = torch.nn.Linear(d_hidden, d_model, **kw)

    @classmethod
    def from_fused(cls, fused: SwiGLUMLP) -> "SwiGLUMLPTorch":
        d_hidden, d_model = fused.w_down.shape[1], fused.w_down.shape[0]
        module = cls(d_model, d_hidden, device=fused.w_down.device, dtype=fused.w_down.dtype)
        w_gate, w_up = fused.w_gate_up.detach().chunk(2, dim=0)
        with torch.no_grad():
            module.gate.weight.copy_(w_gate)
            module.up.weight.copy_(w_up)
            module.down.weight.copy_(fused.w_down.detach())
        return module

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


# ------------------------------------------------------------------------------ byte counts
def activation_bytes(n: int, d: int, f: int, itemsize: int) -> dict:
    # BEGIN EXERCISE: count the activation bytes of one forward yourself first (the module docstring has the
    #   counts): keys linear_gelu_torch, linear_gelu_fused, swiglu_torch, swiglu_fused_inference,
    #   swiglu_fused_training
    # HINT: Count each N x d or N x F tensor written or read in HBM per variant; weights are left out.
    # HINT: e.g. eager linear+gelu: read x (Nd), write z, read z, write y (3NF); all times the itemsize.
    """Activation traffic (bytes) of one forward, per the counts in the module docstring."""
    s = itemsize
    return {
        "linear_gelu_torch": (n * d + 3 * n * f) * s,
        "linear_gelu_fused": (n * d + n * f) * s,
        "swiglu_torch": (3 * n * d + 8 * n * f) * s,
        "swiglu_fused_inference": (2 * n * d + 2 * n * f) * s,
        "swiglu_fused_training": (2 * n * d + 4 * n * f) * s,
    }
    # END EXERCISE


# ------------------------------------------------------------------------- the code behind each entry
# What `linear_act` and `swiglu_mlp` run (inference, training): the benchmarks (fused_mlp_bench.py)
# count its lines beside each variant (`Benchmark.sources`; week 3's matmul kernel not included).
LINEAR_ACT_CODE = (linear_act, LinearActFunction.forward)
SWIGLU_MLP_CODE = (swiglu_gate_up_kernel, _launch_gate_up, swiglu_gate_up, swiglu_mlp)
SWIGLU_MLP_TRAIN_CODE = SWIGLU_MLP_CODE + (swiglu_backward_kernel, swiglu_backward, SwiGLUMLPFunction.forward,
                                           SwiGLUMLPFunction.backward)
