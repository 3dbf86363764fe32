"""RMSNorm in Triton, forward and backward, wired into autograd as a drop-in `nn.RMSNorm`.

y = x * rstd * w over the last dimension, rstd = 1 / sqrt(mean(x^2) + eps): LayerNorm without
the mean subtraction and without the bias (LLaMA, Mistral, Qwen, Gemma all use it). Diff this
file against `layernorm.py`: the kernels are the same shape with one reduction fewer per row.

What it teaches (beyond layernorm.py, whose two-stage dw reduction and partials buffer this
module reuses: `layernorm.column_sums`):
* the forward saves only rstd (4 bytes per row);
* backward, with xhat = x * rstd and g = dy * w:
      dx = rstd * (g - xhat * mean(g * xhat))     (one row reduction instead of two)
      dw = sum over rows of dy * xhat              (the column reduction, via partials)
* eps: `nn.RMSNorm(eps=None)` uses the machine epsilon of the type torch computes in (fp32
  for fp16/bf16/fp32 inputs, fp64 for fp64), not that of x's dtype: `default_eps` matches it.
* which torch to race: written out in eager ops (as many models still do: upcast, pow, mean,
  rsqrt, mul, mul, downcast) RMSNorm is ~7 kernels and ~40 bytes per bf16 element against
  the fused kernel's 4; `torch.nn.RMSNorm` dispatches to a
  fused CUDA kernel (`aten._fused_rms_norm`, torch >= 2.9 when weight and x share a dtype),
  which moves the minimum 2MNs. The benchmark times both, and torch.compile of the written-out
  form.

Cost model (M rows, N columns, itemsize s), the minimum traffic:
* forward: read x, write y: 2MNs (+ w: Ns, rstd: 4M). ~4 FLOPs per element: memory-bound.
* backward: read x, dy, write dx: 3MNs (+ rstd, w, dw), plus the (P, N) fp32 partials
  (4PN bytes written and read again). torch's fused backward computes dw in a second kernel
  that reads x and dy again: ~5MNs.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from course import runtime  # before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.bench import Benchmark
from course.check import random_tensor
from week4_triton_dl import layernorm as ln  # shared checks, launch sizing and the stage-2 sum

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

DTYPES = ln.DTYPES
MAX_N = ln.MAX_N
KERNELS_FORWARD = ("persistent", "row")
FWD_PROGRAMS_PER_SM = 4
BWD_PROGRAMS_PER_SM = 2
FWD_NUM_STAGES = 2  # loop steps in flight (tl.range num_stages), as in layernorm.py
BWD_NUM_STAGES = 2
# The H100 run (results/rmsnorm_fwd_week4.md, 2026-11-23): the row kernel ~95% of copy at every
# size, the persistent one 61-90%: the row kernel is the default, as in layernorm.py.
FORWARD_KERNEL = "row"


# ------------------------------------------------------------------------------------ forward
@triton.jit
def _rstd(x, N, eps, AXIS: tl.constexpr):
    """1 / sqrt(mean(x^2) + eps) along AXIS, NaN for a row holding a NaN or an Inf.

    Mathematically an Inf makes rstd = 1/sqrt(inf) = 0: the row's finite entries become 0 and the
    Inf itself NaN (inf * 0), which is what torch computes on the CPU. torch's CUDA kernel (what
    F.rms_norm and nn.RMSNorm run on a GPU) takes the row's moments with Welford's update, where
    the Inf meets inf - inf: the whole row comes out NaN. We race that kernel, so we match it.
    x - x is 0 for every finite x and NaN for +-Inf: added to the squares it turns the sum NaN
    exactly for those rows, for one add per element and no second reduction. (A finite row whose
    squares overflow still gets rstd = 0, y = 0.)
    """
    return 1.0 / tl.sqrt(tl.sum(x * x + (x - x), axis=AXIS) / N + eps)


@triton.jit
def rmsnorm_fwd_row_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, N, eps,
                           HAS_WEIGHT: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(ACC)  # padding adds 0 to sum x^2
    rstd = _rstd(x, N, eps, 0)
    y = x * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def rmsnorm_fwd_persistent_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, M, N, rows_per_program, eps,
                                  HAS_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr,
                                  BLOCK_N: tl.constexpr, ACC: tl.constexpr, NUM_STAGES: tl.constexpr):
    first = tl.program_id(0).to(tl.int64) * rows_per_program
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    if HAS_WEIGHT:  # once per program, not once per row
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    for step in tl.range(0, rows_per_program, BLOCK_M, num_stages=NUM_STAGES):
        rows = first + step + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        offsets = rows[:, None] * N + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(ACC)
        rstd = _rstd(x, N, eps, 1)
        y = x * rstd[:, None]
        if HAS_WEIGHT:
            y = y * w[None, :]
        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(rstd_ptr + rows, rstd, mask=row_mask)


# ----------------------------------------------------------------------------------- backward
@triton.jit
def rmsnorm_bwd_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_partial_ptr,
                       M, N, rows_per_program, HAS_WEIGHT: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr,
                       NUM_STAGES: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    first = pid * rows_per_program
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)  # this program's share of dw, in registers
    for step in tl.range(0, rows_per_program, BLOCK_M, num_stages=NUM_STAGES):
        rows = first + step + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        offsets = rows[:, None] * N + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(ACC)
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        xhat = x * rstd[:, None]
        if HAS_WEIGHT:
            g = dy * w[None, :]
        else:
            g = dy
        c1 = tl.sum(xhat * g, axis=1) / N  # mean(g * xhat): the only row reduction
        dx = (g - xhat * c1[:, None]) * rstd[:, None]
        tl.store(dx_ptr + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            dw_acc += dy * xhat
    if HAS_WEIGHT:  # one partials row per program: no atomics (see layernorm.py)
        tl.store(dw_partial_ptr + pid * N + cols, tl.sum(dw_acc, axis=0), mask=col_mask)


# ---------------------------------------------------------------------------------- launchers
def default_eps(dtype: torch.dtype) -> float:
    """What torch uses for eps=None: the epsilon of its compute type (fp32 for 16-bit inputs)."""
    return torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps


def rms_norm_forward(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float | None = None, *,
                     out: torch.Tensor | None = None, kernel: str | None = None,
                     block_m: int | None = None, num_programs: int | None = None,
                     num_warps: int | None = None, num_stages: int | None = None):
    """RMSNorm over the last dimension of a contiguous x: returns (y, rstd), rstd per row."""
    M, N = ln._check_rows(x)
    weight = ln._check_vector(weight, "weight", x)
    eps = default_eps(x.dtype) if eps is None else ln._check_eps(eps)
    kernel = FORWARD_KERNEL if kernel is None else kernel
    ln._check_positive_int(num_stages, "num_stages")
    if kernel not in KERNELS_FORWARD:
        raise ValueError(f"kernel must be one of {KERNELS_FORWARD}, got {kernel!r}")
    ln._check_power_of_two(block_m, "block_m", high=64)
    ln._check_positive_int(num_programs, "num_programs")
    ln._check_power_of_two(num_warps, "num_warps", high=32)
    out = validate.output(out, x)
    rstd = torch.empty(x.shape[:-1], dtype=ln._acc_torch(x.dtype), device=x.device)
    if M == 0 or N == 0:
        return out, rstd.fill_(math.nan)
    block_n = triton.next_power_of_2(N)
    common = dict(HAS_WEIGHT=weight is not None, BLOCK_N=block_n, ACC=ln._acc(x.dtype))
    w = weight if weight is not None else x  # a dummy pointer, never read without HAS_WEIGHT
    if kernel == "row":
        rmsnorm_fwd_row_kernel[(M,)](x, w, out, rstd, N, eps, num_warps=num_warps or ln._num_warps(block_n),
                                     **common)
        return out, rstd
    block_m = min(block_m or ln._default_block_m(block_n), triton.next_power_of_2(M))
    rows_per_program, programs = ln._programs(M, block_m, FWD_PROGRAMS_PER_SM, num_programs)
    rmsnorm_fwd_persistent_kernel[(programs,)](x, w, out, rstd, M, N, rows_per_program, eps, BLOCK_M=block_m,
                                               NUM_STAGES=num_stages or ln._stages(
                                                   FWD_NUM_STAGES, block_m * block_n * x.element_size()),
                                               num_warps=num_warps or ln._num_warps(block_m * block_n), **common)
    return out, rstd


def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor,
                      weight: torch.Tensor | None = None, *, block_m: int | None = None,
                      num_partials: int | None = None, num_warps: int | None = None,
                      num_stages: int | None = None):
    """Gradients of RMSNorm: returns (dx, dweight or None); dw by the two-stage reduction."""
    M, N = ln._check_rows(x)
    validate.tensor(dy, "dy", dtypes=DTYPES)
    validate.same_shape(dy=dy, x=x)
    validate.same_dtype(dy=dy, x=x)
    rstd = ln._check_stats(rstd, "rstd", x)
    weight = ln._check_vector(weight, "weight", x)
    ln._check_power_of_two(block_m, "block_m", high=64)
    ln._check_positive_int(num_partials, "num_partials")
    ln._check_power_of_two(num_warps, "num_warps", high=32)
    ln._check_positive_int(num_stages, "num_stages")
    has_weight = weight is not None
    dx = torch.empty_like(x)
    if M == 0 or N == 0:
        return dx, (torch.zeros(N, dtype=x.dtype, device=x.device) if has_weight else None)
    block_n = triton.next_power_of_2(N)
    block_m = min(block_m or ln._default_block_m(block_n), triton.next_power_of_2(M))
    rows_per_program, programs = ln._programs(M, block_m, BWD_PROGRAMS_PER_SM, num_partials)
    stages = num_stages or ln._stages(BWD_NUM_STAGES, 2 * block_m * block_n * x.element_size())  # x and dy
    dw_partial = (torch.empty((programs, N), dtype=ln._acc_torch(x.dtype), device=x.device)
                  if has_weight else dx)
    rmsnorm_bwd_kernel[(programs,)](dy, x, weight if has_weight else x, rstd, dx, dw_partial, M, N,
                                    rows_per_program, HAS_WEIGHT=has_weight, BLOCK_M=block_m,
                                    BLOCK_N=block_n, ACC=ln._acc(x.dtype),
                                    NUM_STAGES=stages,
                                    num_warps=num_warps or ln._num_warps(block_m * block_n))
    return dx, (ln.column_sums(dw_partial, x.dtype) if has_weight else None)


# ----------------------------------------------------------------------------------- autograd
class RMSNormFunction(torch.autograd.Function):
    """y = rms_norm(x) over the last dimension; backward by `rmsnorm_bwd_kernel`."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = rms_norm_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = rms_norm_backward(dy.contiguous(), x, rstd, weight)
        return dx, dw, None


def rms_norm(x: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
             eps: float | None = None) -> torch.Tensor:
    """`torch.nn.functional.rms_norm`, computed by the Triton kernels, differentiable."""
    shape = ln._normalized_shape(normalized_shape)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    k = len(shape)
    if k == 0 or x.dim() < k or tuple(x.shape[-k:]) != shape:
        raise ValueError(f"normalized_shape {shape} must be the last dimensions of x (shape {tuple(x.shape)})")
    if weight is not None and (not isinstance(weight, torch.Tensor) or tuple(weight.shape) != shape):
        got = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ValueError(f"weight has shape {got}; expected normalized_shape {shape}")
    n = math.prod(shape)
    x2 = x.contiguous().reshape(*x.shape[:x.dim() - k], n)
    w = weight.reshape(n) if weight is not None else None
    return RMSNormFunction.apply(x2, w, eps).reshape(x.shape)


class TritonRMSNorm(nn.RMSNorm):
    """`nn.RMSNorm` with the Triton kernels: same arguments, parameters, init and state_dict."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)


# ------------------------------------------------------------------------- torch references
def rms_norm_unfused(x: torch.Tensor, weight: torch.Tensor | None, eps: float | None = None) -> torch.Tensor:
    """RMSNorm as many model files write it (fp32 math, round once): ~6 eager kernels."""
    eps = default_eps(x.dtype) if eps is None else eps
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(x.dtype)


def rms_norm_backward_unfused(dy, x, rstd, weight):
    """The backward formula in eager ops: what autograd runs for the written-out forward."""
    xf, dyf = x.float(), dy.float()
    r = rstd.float().reshape(*x.shape[:-1], 1)
    xhat = xf * r
    g = dyf * weight.float()
    dx = (g - xhat * (g * xhat).mean(-1, keepdim=True)) * r
    dw = (dyf * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dw.to(weight.dtype)


# ---------------------------------------------------------------------------------- benchmarks
EPS = 1e-6
SIZES = ln.SIZES
SIM_SIZES = ln.SIM_SIZES
# torch >= 2.9 runs nn.RMSNorm's backward as this one op on CUDA (dx kernel + dw kernel); it
# has no CPU kernel, so in simulation the eager formula stands in.
def _has_op(name: str, arguments: list) -> bool:
    """Does this torch have aten.<name> with exactly these arguments (its schema, not a call)?"""
    if not hasattr(torch.ops.aten, name):
        return False
    return [a.name for a in getattr(torch.ops.aten, name).default._schema.arguments] == arguments


HAS_FUSED_BACKWARD = (runtime.on_gpu()
                      and _has_op("_fused_rms_norm", ["input", "normalized_shape", "weight", "eps"])
                      and _has_op("_fused_rms_norm_backward",
                                  ["grad_out", "input", "normalized_shape", "rstd", "weight", "output_mask"]))


def torch_forward(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, EPS)


def torch_backward(dy, x, rstd_t, w):
    if HAS_FUSED_BACKWARD:
        return torch.ops.aten._fused_rms_norm_backward(dy, x, [x.shape[-1]], rstd_t, w, [True, True])
    return rms_norm_backward_unfused(dy, x, rstd_t, w)


def torch_unfused_forward(x, w):
    return rms_norm_unfused(x, w, EPS)


_compiled_forward = ln._compile(torch_unfused_forward)
_compiled_backward = ln._compile(rms_norm_backward_unfused)


def _forward_inputs(size):
    M, N = size
    dtype = ln.bench_dtype()
    return random_tensor((M, N), dtype, runtime.DEVICE), random_tensor(N, dtype, runtime.DEVICE)


def _torch_rstd(x, w):
    if HAS_FUSED_BACKWARD:
        return torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], w, EPS)[1]
    return torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS)


def _backward_inputs(size):
    x, w = _forward_inputs(size)
    dy = random_tensor(x.shape, x.dtype, runtime.DEVICE)
    _, rstd = rms_norm_forward(x, w, EPS)
    return dy, x, w, _torch_rstd(x, w), rstd


BENCHMARKS = [
    Benchmark(
        name="rmsnorm_fwd_week4",
        title="RMSNorm forward, bf16 (fp16 before sm_80, fp32 in simulation), rows x N",
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_forward_inputs,
        variants={
            "torch": torch_forward,
            "torch_unfused": torch_unfused_forward,
            "torch_compile": _compiled_forward,
            "triton": lambda x, w: rms_norm_forward(x, w, EPS)[0],  # FORWARD_KERNEL: row
            "triton_persistent": lambda x, w: rms_norm_forward(x, w, EPS, kernel="persistent")[0],
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=lambda s: 2 * s[0] * s[1] * ln._itemsize() + s[1] * ln._itemsize() + 4 * s[0],
        flops=lambda s: 4 * s[0] * s[1],
        notes="bytes = read x + write y (+ w, rstd); torch = F.rms_norm (nn.RMSNorm), fused on "
              "CUDA in torch >= 2.9; torch_unfused = the written-out formula in eager ops; "
              "torch_compile = torch.compile of the written-out formula",
    ),
    Benchmark(
        name="rmsnorm_bwd_week4",
        title="RMSNorm backward (dx, dw), bf16 (fp16 before sm_80, fp32 in simulation), rows x N",
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_backward_inputs,
        variants={
            "torch": lambda dy, x, w, rt, r: torch_backward(dy, x, rt, w),
            "torch_unfused": lambda dy, x, w, rt, r: rms_norm_backward_unfused(dy, x, r, w),
            "torch_compile": lambda dy, x, w, rt, r: _compiled_backward(dy, x, r, w),
            "triton": lambda dy, x, w, rt, r: rms_norm_backward(dy, x, r, w),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=lambda s: 3 * s[0] * s[1] * ln._itemsize() + 2 * s[1] * ln._itemsize() + 4 * s[0],
        flops=lambda s: 8 * s[0] * s[1],
        notes=("bytes = read x, dy + write dx (+ rstd, w, dw); partials not counted; torch = "
               + ("aten._fused_rms_norm_backward (what nn.RMSNorm's backward runs)" if HAS_FUSED_BACKWARD
                  else "the eager formula (this torch has no fused RMSNorm backward)")),
    ),
]


# -------------------------------------------------------------------------------------- sweep
def sweep(M: int, N: int, dtype: torch.dtype) -> None:
    """Time each launch configuration at one shape and print a table (for the GPU)."""
    from course import bench

    sms = runtime.sm_count()
    x, w = random_tensor((M, N), dtype, runtime.DEVICE), random_tensor(N, dtype, runtime.DEVICE)
    dy = random_tensor((M, N), dtype, runtime.DEVICE)
    _, rstd = rms_norm_forward(x, w, EPS)
    rstd_t = _torch_rstd(x, w)
    copy = bench.copy_bandwidth_gbps()
    fwd_bytes, bwd_bytes = 2 * M * N * x.element_size(), 3 * M * N * x.element_size()
    per_sm = runtime.pick(gpu=(1, 2, 4), sim=(1, 2))
    fwd = lambda **kw: ln.timed(lambda: rms_norm_forward(x, w, EPS, **kw))  # noqa: E731
    bwd = lambda **kw: ln.timed(lambda: rms_norm_backward(dy, x, rstd, w, **kw))  # noqa: E731

    rows = [("forward", "torch F.rms_norm", "-", "-", "-", "-", ln.timed(lambda: torch_forward(x, w)), fwd_bytes),
            ("forward", f"default ({FORWARD_KERNEL})", "-", "-", "-", "-", fwd(), fwd_bytes)]
    for nw in runtime.pick(gpu=(4, 8, 16), sim=(4,)):
        rows.append(("forward", "row", nw, 1, "-", M, fwd(kernel="row", num_warps=nw), fwd_bytes))
    for nw, bm, stages in ln.sweep_configs(N, x.element_size(), 1):
        for k in per_sm:
            rows.append(("forward", "persistent", nw, bm, stages, k * sms, fwd(
                kernel="persistent", block_m=bm, num_programs=k * sms, num_warps=nw, num_stages=stages), fwd_bytes))
    torch_label = "torch " + ("_fused_rms_norm_backward" if HAS_FUSED_BACKWARD else "eager formula")
    rows += [("backward", torch_label, "-", "-", "-", "-", ln.timed(lambda: torch_backward(dy, x, rstd_t, w)),
              bwd_bytes),
             ("backward", "default (partial)", "-", "-", "-", "-", bwd(), bwd_bytes)]
    for nw, bm, stages in ln.sweep_configs(N, x.element_size(), 2):
        for k in per_sm:
            rows.append(("backward", "partial", nw, bm, stages, k * sms, bwd(
                block_m=bm, num_partials=k * sms, num_warps=nw, num_stages=stages), bwd_bytes))
    ln.print_sweep(f"RMSNorm {M}x{N} {str(dtype).replace('torch.', '')}, {sms} SMs, copy {copy:.0f} GB/s",
                   rows, copy)


if __name__ == "__main__":
    ln._sweep_cli("week4_triton_dl.rmsnorm", sweep)
