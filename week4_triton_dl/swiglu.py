"""SwiGLU in Triton: y = silu(a) * b, forward and backward each one fused pass.

The gated MLP of LLaMA-style models is down(silu(gate(x)) * up(x)) (Shazeer 2020, "GLU Variants
Improve Transformer"). Between the matmuls sits y = silu(a) * b with silu(a) = a * sigmoid(a):
element-wise, a handful of FLOPs per element, so its speed is its bytes.

Inputs: two tensors a (the gate) and b (the up projection), (..., N) each. Models that fuse
the two projections into one matmul produce h = [a | b] of shape (..., 2N); its halves
h[..., :N] and h[..., N:] are views whose rows are strided by 2N. The kernels take a row
stride per tensor, so those views are read in place (no `.contiguous()` copies), and
`swiglu_packed(h)` writes the backward straight into one dh = [da | db] of h's shape: the
layout the fused projection's weight gradient wants, where autograd through `h.chunk(2, -1)`
would allocate da and db and then copy them into dh.

Backward, with s = sigmoid(a):
    db = dy * silu(a) = dy * a * s
    da = dy * b * s * (1 + a * (1 - s))      (d silu / da, the formula torch's silu_backward uses)
s is recomputed from a, not saved: recomputing costs a few FLOPs, saving it would cost bytes.

Cost model (n = elements of y, itemsize s):
* forward, fused: read a, b, write y: 3ns. Eager `F.silu(a) * b`: silu reads a, writes t (2ns);
  mul reads t, b, writes y (3ns): 5ns, predicted 5/3 = 1.67x slower.
* backward, fused: read dy, a, b, write da, db: 5ns. Eager autograd: dy * b (3ns), silu_backward
  (3ns), dy * t (3ns, t saved by the forward): 9ns, predicted 1.8x slower.
~8 FLOPs per element (exp, add, div, muls) against 6 bytes in bf16: memory-bound.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course import runtime  # before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.bench import Benchmark
from course.check import random_tensor

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TILE = 2048  # elements per program: 16 per thread at 4 warps (2 x 16-byte loads in bf16)


@triton.jit
def _tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    return rows[:, None], cols[None, :], mask


@triton.jit
def swiglu_fwd_kernel(a_ptr, b_ptr, y_ptr, M, N, stride_a, stride_b, stride_y,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    rows, cols, mask = _tile(M, N, BLOCK_M, BLOCK_N)
    a = tl.load(a_ptr + rows * stride_a + cols, mask=mask, other=0.0).to(ACC)
    b = tl.load(b_ptr + rows * stride_b + cols, mask=mask, other=0.0).to(ACC)
    s = 1.0 / (1.0 + tl.exp(-a))  # a = -inf: s = 0 and a * s = NaN, as torch's silu gives
    tl.store(y_ptr + rows * stride_y + cols, (a * s * b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def swiglu_bwd_kernel(dy_ptr, a_ptr, b_ptr, da_ptr, db_ptr, M, N,
                      stride_dy, stride_a, stride_b, stride_da, stride_db,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    rows, cols, mask = _tile(M, N, BLOCK_M, BLOCK_N)
    dy = tl.load(dy_ptr + rows * stride_dy + cols, mask=mask, other=0.0).to(ACC)
    a = tl.load(a_ptr + rows * stride_a + cols, mask=mask, other=0.0).to(ACC)
    b = tl.load(b_ptr + rows * stride_b + cols, mask=mask, other=0.0).to(ACC)
    s = 1.0 / (1.0 + tl.exp(-a))  # recomputed: cheaper than saving sigmoid(a) in the forward
    # dy * silu(a), silu first: (dy * a) * s would overflow to inf * 0 = NaN for a = -max.
    tl.store(db_ptr + rows * stride_db + cols, (dy * (a * s)).to(db_ptr.dtype.element_ty), mask=mask)
    da = dy * b * (s * (1.0 + a * (1.0 - s)))
    tl.store(da_ptr + rows * stride_da + cols, da.to(da_ptr.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------------- launchers
def _rows(t: torch.Tensor, name: str) -> torch.Tensor:
    """t as (rows, N) with evenly strided rows and a contiguous last dimension, or a clear error."""
    n = t.shape[-1]
    try:
        rows = t.view(-1, n)
    except RuntimeError:
        rows = None
    if rows is None or (n > 1 and rows.stride(1) != 1):
        raise ValueError(f"{name} (shape {tuple(t.shape)}, strides {t.stride()}) must be a tensor whose "
                         "last dimension is contiguous and whose rows are evenly strided: contiguous, "
                         "or a slice of the last dimension of a contiguous tensor (h[..., :N]); "
                         "pass .contiguous()")
    return rows


def _config(M: int, N: int):
    block_n = min(triton.next_power_of_2(N), 1024)
    block_m = min(max(1, TILE // block_n), triton.next_power_of_2(M))
    return block_m, block_n, (triton.cdiv(M, block_m), triton.cdiv(N, block_n))


def _acc(dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def _check_pair(a, b):
    validate.tensor(a, "a", dtypes=DTYPES, contiguous=False)
    validate.tensor(b, "b", dtypes=DTYPES, contiguous=False)
    validate.same_shape(a=a, b=b)
    validate.same_dtype(a=a, b=b)
    if a.dim() == 0:
        raise ValueError("a and b must have at least 1 dimension (N, the last), got scalars")


def _check_out(t, name: str, like: torch.Tensor) -> torch.Tensor:
    if t is None:
        return torch.empty_like(like, memory_format=torch.contiguous_format)
    validate.tensor(t, name, dtypes=(like.dtype,), contiguous=False)
    if t.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {tuple(like.shape)}")
    return t


def swiglu_forward(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(a) * b, fused. a, b: same shape and dtype; rows may be strided (views of h)."""
    _check_pair(a, b)
    out = _check_out(out, "out", a)
    if a.numel() == 0:
        return out
    a2, b2, y2 = _rows(a, "a"), _rows(b, "b"), _rows(out, "out")
    M, N = a2.shape
    block_m, block_n, grid = _config(M, N)
    swiglu_fwd_kernel[grid](a2, b2, y2, M, N, a2.stride(0), b2.stride(0), y2.stride(0),
                            BLOCK_M=block_m, BLOCK_N=block_n, ACC=_acc(a.dtype), num_warps=4)
    return out


def swiglu_backward(dy: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                    da: torch.Tensor | None = None, db: torch.Tensor | None = None):
    """(da, db) of y = silu(a) * b, one fused pass; da/db may be given (e.g. halves of one dh)."""
    _check_pair(a, b)
    validate.tensor(dy, "dy", dtypes=DTYPES, contiguous=False)
    validate.same_shape(dy=dy, a=a)
    validate.same_dtype(dy=dy, a=a)
    da, db = _check_out(da, "da", a), _check_out(db, "db", a)
    if a.numel() == 0:
        return da, db
    dy2, a2, b2 = _rows(dy, "dy"), _rows(a, "a"), _rows(b, "b")
    da2, db2 = _rows(da, "da"), _rows(db, "db")
    M, N = a2.shape
    block_m, block_n, grid = _config(M, N)
    swiglu_bwd_kernel[grid](dy2, a2, b2, da2, db2, M, N, dy2.stride(0), a2.stride(0), b2.stride(0),
                            da2.stride(0), db2.stride(0), BLOCK_M=block_m, BLOCK_N=block_n,
                            ACC=_acc(a.dtype), num_warps=4)
    return da, db


def _halves(h: torch.Tensor):
    validate.tensor(h, "h", dtypes=DTYPES, contiguous=False)
    if h.dim() == 0 or h.shape[-1] % 2:
        raise ValueError(f"h must be (..., 2N) with [gate | up] halves; got shape {tuple(h.shape)}")
    n = h.shape[-1] // 2
    return h[..., :n], h[..., n:]


def swiglu_packed_forward(h: torch.Tensor) -> torch.Tensor:
    """silu(h[..., :N]) * h[..., N:] for h = [gate | up] of shape (..., 2N)."""
    a, b = _halves(h)
    return swiglu_forward(a, b)


def swiglu_packed_backward(dy: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """dh = [da | db], h's shape, written in one pass (no concatenation afterwards)."""
    a, b = _halves(h)
    dh = torch.empty_like(h, memory_format=torch.contiguous_format)
    n = a.shape[-1]
    swiglu_backward(dy, a, b, da=dh[..., :n], db=dh[..., n:])
    return dh


# ----------------------------------------------------------------------------------- autograd
def _dense_rows(dy: torch.Tensor) -> torch.Tensor:
    """Gradients arrive in any layout (y.sum() gives stride-0 ones): copy only if needed."""
    try:
        _rows(dy, "dy")
        return dy
    except ValueError:
        return dy.contiguous()


class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)  # not silu(a): the backward recomputes it
        return swiglu_forward(a, b)

    @staticmethod
    def backward(ctx, dy):
        a, b = ctx.saved_tensors
        return swiglu_backward(_dense_rows(dy), a, b)


class SwiGLUPackedFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        ctx.save_for_backward(h)
        return swiglu_packed_forward(h)

    @staticmethod
    def backward(ctx, dy):
        (h,) = ctx.saved_tensors
        return swiglu_packed_backward(_dense_rows(dy), h)


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """F.silu(a) * b, differentiable, forward and backward each one Triton kernel."""
    return SwiGLUFunction.apply(a, b)


def swiglu_packed(h: torch.Tensor) -> torch.Tensor:
    """F.silu(a) * b with (a, b) = h.chunk(2, -1), differentiable; the gradient is one dh."""
    return SwiGLUPackedFunction.apply(h)


# ---------------------------------------------------------------------------- torch references
def swiglu_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The eager expression the kernel replaces."""
    return F.silu(a) * b


def torch_backward(dy, a, b, t):
    """What autograd runs for F.silu(a) * b: two muls and silu_backward, t = silu(a) saved."""
    return torch.ops.aten.silu_backward(dy * b, a), dy * t


def torch_backward_recompute(dy, a, b):
    """The same gradients recomputing silu(a), the form torch.compile fuses into one kernel."""
    return torch.ops.aten.silu_backward(dy * b, a), dy * F.silu(a)


# ---------------------------------------------------------------------------------- benchmarks
# (M tokens, N hidden): 14336 is LLaMA-3-8B's MLP width. bf16 on the GPU, the last is the headline.
SIZES = [(8192, 4096), (8192, 14336)]
SIM_SIZES = [(16, 96)]
_compiled: dict = {}


def bench_dtype() -> torch.dtype:
    """bf16 on GPUs with bf16 hardware (sm_80+), fp16 on older ones (Colab's T4), fp32 simulated."""
    if not runtime.on_gpu():
        return torch.float32
    return torch.bfloat16 if torch.cuda.get_device_capability()[0] >= 8 else torch.float16


def _compile(fn):
    def run(*args):
        if fn not in _compiled:  # compiled on the first (warm-up) call, never inside the timing
            _compiled[fn] = torch.compile(fn, dynamic=False)
        return _compiled[fn](*args)
    return run


_compiled_forward = _compile(swiglu_reference)
_compiled_backward = _compile(torch_backward_recompute)


def _forward_inputs(size):
    M, N = size
    h = random_tensor((M, 2 * N), bench_dtype(), runtime.DEVICE)
    a, b = h.chunk(2, dim=-1)  # views of one fused projection's output, rows strided by 2N
    return a, b, h


def _backward_inputs(size):
    a, b, h = _forward_inputs(size)
    return random_tensor(a.shape, a.dtype, runtime.DEVICE), a, b, h, F.silu(a)


def _itemsize():
    return bench_dtype().itemsize


BENCHMARKS = [
    Benchmark(
        name="swiglu_week4",
        title="SwiGLU forward silu(a) * b, a and b halves of one (M, 2N) tensor, "
              "bf16 (fp16 before sm_80, fp32 in simulation)",
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_forward_inputs,
        variants={
            "torch": lambda a, b, h: swiglu_reference(a, b),
            "torch_compile": lambda a, b, h: _compiled_forward(a, b),
            "triton": lambda a, b, h: swiglu_forward(a, b),
            "triton_packed": lambda a, b, h: swiglu_packed_forward(h),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=lambda s: 3 * s[0] * s[1] * _itemsize(),
        flops=lambda s: 8 * s[0] * s[1],
        notes="bytes = read a, b + write y; eager torch moves 5 x M x N x s (silu, then mul)",
    ),
    Benchmark(
        name="swiglu_bwd_week4",
        title="SwiGLU backward (da, db), bf16 (fp16 before sm_80, fp32 in simulation)",
        sizes=SIZES, sim_sizes=SIM_SIZES, size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_backward_inputs,
        variants={
            "torch": lambda dy, a, b, h, t: torch_backward(dy, a, b, t),
            "torch_compile": lambda dy, a, b, h, t: _compiled_backward(dy, a, b),
            "triton": lambda dy, a, b, h, t: swiglu_backward(dy, a, b),
            "triton_packed": lambda dy, a, b, h, t: swiglu_packed_backward(dy, h),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        bytes=lambda s: 5 * s[0] * s[1] * _itemsize(),
        flops=lambda s: 12 * s[0] * s[1],
        notes="bytes = read dy, a, b + write da, db; eager autograd moves 9 x M x N x s "
              "(dy * b, silu_backward, dy * silu(a) saved by the forward)",
    ),
]
