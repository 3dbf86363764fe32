"""Cross-entropy over a large vocabulary: an online-logsumexp kernel, then the fused linear + loss.

A language model ends in logits = h @ W^T (h: N tokens x d, W: the LM head, V x d) and
loss = CE(logits, targets). With N = 8192 tokens and V = 128k classes the logits alone are
N * V * 2 bytes = 2 GiB in bf16, and eager PyTorch keeps several tensors of that size alive at
once (logits, log_softmax output, its gradient, the logits' gradient): the loss, not the
model, sets the peak memory of a training step.

What it teaches:
* `cross_entropy_fwd_kernel`: one program per row streams the row in BLOCK_V chunks with a
  running max m and running sum d (d <- d * exp(m - m') + sum exp(x - m'), the online softmax
  of week 3), so logsumexp(x) = m + log d takes ONE read of the row; the loss is
  lse - x[target]. Label smoothing also needs sum_j x_j, accumulated in the same pass.
* `cross_entropy_bwd_kernel`: d loss / d logits = (softmax(x) - y) * g, y the (smoothed)
  one-hot target and g the incoming gradient; softmax is recomputed from x and the saved lse,
  so nothing of size N x V is saved between forward and backward except the logits themselves.
* `cross_entropy_fwd_grad_kernel`: forward and gradient in one program. Once lse is known, a
  second sweep over the row writes (softmax - y) * scale straight over the logits, in place.
  This is only legal when nobody needs the logits afterwards, which is true inside...
* `FusedLinearCrossEntropy` (the idea of Liger Kernel, Hsu et al. 2024, "Liger Kernel:
  Efficient Triton Kernels for LLM Training", arXiv:2410.10989; this is our own code): rows of
  h are processed in chunks of C. Per chunk: logits_c = h_c @ W^T (C x V, a reusable buffer),
  the fused kernel turns them into dlogits_c in place, and at once dh_c = dlogits_c @ W and
  dW += dlogits_c^T @ h_c. The gradients are therefore finished during the forward pass; the
  backward only multiplies them by grad_output (a scalar: mean or sum reduction). The full
  N x V logits never exist: peak memory is W, dW, and one C x V buffer.

Cost model (N rows, V classes, d hidden, itemsize s):
* plain CE on given logits: forward reads N V s; backward reads N V s and writes N V s.
  ~5 FLOPs per element: memory-bound, the yardstick is % of copy bandwidth.
* fused linear CE: 3 matmuls, 6 N V d FLOPs (the same as torch's h @ W^T plus its two
  backward matmuls): at N = 8192, V = 128k, d = 4096 that is 26 TFLOP, ~40 ms at bf16 peak,
  so it is compute-bound and the aim is "no slower than torch" while using a fraction of the
  memory. Extra traffic it pays: the C x V chunk is read twice and written once by the kernel
  (3 N V s over all chunks, ~6 GB, ~2 ms), and dW (V d s) is read and written once per
  chunk by the accumulating matmul: (N / C) * 2 V d s, ~17 GB at C = 1024 (~6 ms). Larger
  chunks cost memory, smaller chunks cost dW traffic: `python -m week4_triton_dl.cross_entropy
  --sweep` measures the trade. Eager torch pays its own extra traffic instead: ~8 passes over
  N x V tensors (log_softmax, its backward, the zero-filled one-hot gradient), ~17 GB.
* memory above the inputs (h, W, targets), torch eager: 3 N V s at its peak (log-probabilities,
  their gradient and the logits' gradient, alive together in the backward; 5.9 GiB here);
  fused: V d s (dW) + C V s (the buffer) + N d s (dh): 1.3 GiB at C = 1024.

Arithmetic is fp32 for fp16/bf16/fp32 logits (fp64 for fp64, so gradcheck can run); the
loss is returned in the logits' dtype, as torch does. reduction "mean" divides by the number
of rows whose target is not ignore_index (NaN when there are none, as in torch).
"""
from __future__ import annotations

import math

import torch

from course import runtime  # before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.bench import Benchmark
from course.check import random_tensor

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TARGET_DTYPES = (torch.int64, torch.int32)
IGNORE_INDEX = -100
REDUCTIONS = ("mean", "sum", "none")
# Chunk of a row that one loop step holds in registers. 4096 fp32 values over 8 warps is 16 per
# thread for each of the running max, running sum (and x-sum): few registers, many programs per SM.
BLOCK_V = 4096
# Rows of h per chunk of the fused linear loss: the C x V logits buffer gets about this many bytes.
# 256 MiB = 1024 rows of a 128k bf16 vocabulary: with dW (V d s) the extra memory at d = 4096 is
# then ~1.3 GiB, under a quarter of eager torch's ~5.9 GiB; 2048 rows would be ~1.5 GiB (~0.26x)
# but re-read dW half as often. A prediction: the H100 chunk sweep decides (see the notes).
DEFAULT_CHUNK_BYTES = 256 << 20
MATMULS = ("torch", "triton")


# ----------------------------------------------------------------------------------- kernels
@triton.jit
def _to_acc(x, FP64: tl.constexpr):
    """The accumulation dtype: fp32, or fp64 for fp64 logits (FP64 is resolved while compiling)."""
    y = x.to(tl.float32)
    if FP64:
        y = x.to(tl.float64)
    return y


@triton.jit
def _row_logsumexp(x_row, n_cols, FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """Online logsumexp of one row (and the row's sum, for label smoothing), one read of x."""
    cols = tl.arange(0, BLOCK_V)
    # Per-lane running max and sum: no cross-lane reduction inside the loop, one at the end.
    m = _to_acc(tl.full([BLOCK_V], -float("inf"), tl.float32), FP64)
    d = _to_acc(tl.zeros([BLOCK_V], tl.float32), FP64)
    s = _to_acc(tl.zeros([BLOCK_V], tl.float32), FP64)
    for start in range(0, n_cols, BLOCK_V):
        offs = start + cols
        mask = offs < n_cols
        x = _to_acc(tl.load(x_row + offs, mask=mask, other=-float("inf")), FP64)
        m_new = tl.maximum(m, x)
        # A lane that has seen only -inf keeps m = -inf; shifting by -inf would make
        # -inf - -inf = NaN, so shift by 0 there (its terms are exp(-inf) = 0 anyway).
        shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        d = d * tl.exp(m - shift) + tl.exp(x - shift)
        m = m_new
        if SMOOTHING:
            s += tl.where(mask, x, 0.0)
    row_max = tl.max(m, axis=0)
    # NaN anywhere, +inf, or an all -inf row give NaN here: what torch's log_softmax gives.
    lse = row_max + tl.log(tl.sum(d * tl.exp(m - row_max), axis=0))
    return lse, tl.sum(s, axis=0)


@triton.jit
def _row_loss(x_row, target, valid, lse, x_sum, n_cols, coef_ptr, SMOOTHING: tl.constexpr):
    # An ignored row's target (-100) is no address: read column 0 instead, and discard it.
    x_t = tl.load(x_row + tl.where(valid, target, 0)).to(lse.dtype)
    if SMOOTHING:
        # (1 - eps) * (lse - x_t) + eps * (lse - mean_j x_j): torch's label smoothing.
        loss = lse - tl.load(coef_ptr) * x_t - tl.load(coef_ptr + 1) * (x_sum / n_cols)
    else:
        loss = lse - x_t
    return tl.where(valid, loss, 0.0)


@triton.jit
def _write_row_grad(x_row, g_row, target, lse, g, n_cols, coef_ptr,
                    SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """g_row[j] = (softmax(x)_j - y_j) * g, y the (smoothed) one-hot target; x read again."""
    cols = tl.arange(0, BLOCK_V)
    on_target = tl.load(coef_ptr)        # 1 - eps
    off_target = tl.load(coef_ptr + 2)   # eps / V
    for start in range(0, n_cols, BLOCK_V):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(lse.dtype)
        p = tl.exp(x - lse)
        y = tl.where(offs == target, on_target, 0.0)
        if SMOOTHING:
            y += off_target
        # g = 0 on ignored rows: their gradient is 0 (NaN if the row holds NaN, as in torch).
        tl.store(g_row + offs, ((p - y) * g).to(g_row.dtype.element_ty), mask=mask)


@triton.jit
def cross_entropy_fwd_kernel(logits_ptr, targets_ptr, loss_ptr, lse_ptr, n_cols, row_stride,
                             ignore_index, coef_ptr,
                             FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride passes 2^31 at 8192 x 128k
    x_row = logits_ptr + row * row_stride
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target != ignore_index
    lse, x_sum = _row_logsumexp(x_row, n_cols, FP64, SMOOTHING, BLOCK_V)
    tl.store(loss_ptr + row, _row_loss(x_row, target, valid, lse, x_sum, n_cols, coef_ptr, SMOOTHING))
    tl.store(lse_ptr + row, lse)


@triton.jit
def cross_entropy_bwd_kernel(logits_ptr, targets_ptr, lse_ptr, grad_ptr, dlogits_ptr, n_cols,
                             row_stride, dlogits_row_stride, ignore_index, coef_ptr,
                             GRAD_PER_ROW: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(targets_ptr + row).to(tl.int64)
    lse = tl.load(lse_ptr + row)
    # The incoming gradient is read on the device: no host sync to learn its value.
    if GRAD_PER_ROW:
        g = tl.load(grad_ptr + row)
    else:
        g = tl.load(grad_ptr)
    g = tl.where(target != ignore_index, g.to(lse.dtype) * tl.load(coef_ptr + 3), 0.0)
    _write_row_grad(logits_ptr + row * row_stride, dlogits_ptr + row * dlogits_row_stride, target, lse, g,
                    n_cols, coef_ptr, SMOOTHING, BLOCK_V)


@triton.jit
def cross_entropy_fwd_grad_kernel(logits_ptr, targets_ptr, loss_ptr, dlogits_ptr, n_cols, row_stride,
                                  dlogits_row_stride, ignore_index, coef_ptr,
                                  FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    # Loss and gradient in one program: the second sweep over the row (often still in L2)
    # replaces a whole backward kernel, and dlogits may be the logits buffer itself.
    row = tl.program_id(0).to(tl.int64)
    x_row = logits_ptr + row * row_stride
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target != ignore_index
    lse, x_sum = _row_logsumexp(x_row, n_cols, FP64, SMOOTHING, BLOCK_V)
    tl.store(loss_ptr + row, _row_loss(x_row, target, valid, lse, x_sum, n_cols, coef_ptr, SMOOTHING))
    # In place, the sweep below overwrites x[target]: every warp must have read it first. Warps
    # run independently, so a barrier orders "all reads of x[target]" before "any write".
    tl.debug_barrier()
    g = tl.where(valid, tl.load(coef_ptr + 3), 0.0)
    _write_row_grad(x_row, dlogits_ptr + row * dlogits_row_stride, target, lse, g, n_cols, coef_ptr,
                    SMOOTHING, BLOCK_V)


# ------------------------------------------------------------------------------ input checks
def _acc_torch(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _coefficients(label_smoothing, n_cols, grad_scale, dtype, device):
    """[1 - eps, eps, eps / V, grad_scale] in the accumulation dtype.

    Passed as a tensor, not as Python floats: Triton types float arguments as fp32, which would
    round 0.9 or 1/N before an fp64 kernel ever sees them.
    """
    eps = label_smoothing
    return torch.tensor([1.0 - eps, eps, eps / n_cols, grad_scale], dtype=_acc_torch(dtype), device=device)


def _num_warps(block):
    return max(4, min(16, block // (32 * 16)))


def _block(n_cols, block_v):
    if not isinstance(block_v, int) or block_v < 16 or block_v & (block_v - 1):
        raise ValueError(f"block_v must be a power of two >= 16, got {block_v!r}")
    return min(block_v, max(16, triton.next_power_of_2(n_cols)))


def _check_options(ignore_index, reduction, label_smoothing, allowed=REDUCTIONS):
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"ignore_index must be an int, got {ignore_index!r}")
    if reduction not in allowed:
        raise ValueError(f"reduction must be one of {list(allowed)}, got {reduction!r}")
    if not isinstance(label_smoothing, (int, float)) or not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be a float in [0, 1], got {label_smoothing!r}")
    return float(label_smoothing)


def _check_targets(targets, n_rows, n_cols, ignore_index, name="targets"):
    """Validate class indices; return how many rows count (target != ignore_index).

    One small reduction and ONE host sync: an index past V would make the kernel read outside
    the row (on a GPU, an illegal address that kills the process), so it is refused here.
    """
    validate.tensor(targets, name, dtypes=TARGET_DTYPES, ndim=1)
    if targets.shape[0] != n_rows:
        raise ValueError(f"{name} has {targets.shape[0]} elements; expected one per row ({n_rows})")
    if n_rows == 0:
        return 0
    valid = targets != ignore_index
    bad = valid & ((targets < 0) | (targets >= n_cols))
    n_bad, n_valid = torch.stack([bad.sum(), valid.sum()]).tolist()
    if n_bad:
        first = int(targets[bad][0])
        raise ValueError(f"{name} must be class indices in [0, {n_cols}) or ignore_index={ignore_index}; "
                         f"found {first} ({n_bad} bad)")
    return int(n_valid)


def _check_logits(logits):
    validate.tensor(logits, "logits", dtypes=DTYPES, ndim=2, contiguous=False)
    if logits.stride(-1) != 1:
        raise ValueError(f"logits must have unit stride along the classes (strides {logits.stride()}): "
                         "pass .contiguous()")
    if logits.shape[1] == 0:
        raise ValueError("logits has 0 classes: cross-entropy needs at least one")


# ------------------------------------------------------------------------- plain cross-entropy
def cross_entropy_forward(logits, targets, *, ignore_index=IGNORE_INDEX, label_smoothing=0.0, block_v=BLOCK_V):
    """Per-row loss and logsumexp (both in fp32, fp64 for fp64 logits): the kernel, no reduction."""
    _check_logits(logits)
    label_smoothing = _check_options(ignore_index, "none", label_smoothing)
    _check_targets(targets, *logits.shape, ignore_index)
    return _launch_forward(logits, targets, ignore_index, label_smoothing, block_v)


def _launch_forward(logits, targets, ignore_index, label_smoothing, block_v=BLOCK_V):
    n_rows, n_cols = logits.shape
    acc = _acc_torch(logits.dtype)
    loss = torch.empty(n_rows, dtype=acc, device=logits.device)
    lse = torch.empty(n_rows, dtype=acc, device=logits.device)
    if n_rows == 0:
        return loss, lse
    block = _block(n_cols, block_v)
    coef = _coefficients(label_smoothing, n_cols, 1.0, logits.dtype, logits.device)
    cross_entropy_fwd_kernel[(n_rows,)](logits, targets, loss, lse, n_cols, logits.stride(0), ignore_index,
                                        coef, FP64=logits.dtype == torch.float64, SMOOTHING=label_smoothing > 0,
                                        BLOCK_V=block, num_warps=_num_warps(block))
    return loss, lse


def cross_entropy_backward(logits, targets, lse, grad, *, grad_scale=1.0, ignore_index=IGNORE_INDEX,
                           label_smoothing=0.0, out=None, block_v=BLOCK_V):
    """dlogits = (softmax(logits) - y) * grad * grad_scale; `grad` is per row (N,) or one scalar."""
    _check_logits(logits)
    label_smoothing = _check_options(ignore_index, "none", label_smoothing)
    n_rows, n_cols = logits.shape
    validate.tensor(targets, "targets", dtypes=TARGET_DTYPES, ndim=1)
    validate.tensor(lse, "lse", dtypes=(_acc_torch(logits.dtype),), ndim=1)
    validate.tensor(grad, "grad", dtypes=DTYPES)
    if grad.numel() not in (1, n_rows) or grad.dim() > 1:
        raise ValueError(f"grad must be a scalar or have one element per row ({n_rows}), got {tuple(grad.shape)}")
    out = validate.output(out, logits, "out")
    if n_rows == 0:
        return out
    block = _block(n_cols, block_v)
    coef = _coefficients(label_smoothing, n_cols, float(grad_scale), logits.dtype, logits.device)
    cross_entropy_bwd_kernel[(n_rows,)](logits, targets, lse, grad, out, n_cols, logits.stride(0), out.stride(0),
                                        ignore_index, coef,
                                        GRAD_PER_ROW=grad.dim() == 1 and grad.numel() == n_rows,
                                        SMOOTHING=label_smoothing > 0, BLOCK_V=block, num_warps=_num_warps(block))
    return out


def _reduce(loss_rows, reduction, n_valid, dtype):
    if reduction == "none":
        return loss_rows.to(dtype)
    total = loss_rows.sum()
    if reduction == "mean":
        total = total / n_valid if n_valid else total * math.nan  # 0/0 = NaN, as torch
    return total.to(dtype)


class CrossEntropyFunction(torch.autograd.Function):
    """CE on given logits: the forward kernel saves lse (N values), the backward kernel recomputes softmax."""

    @staticmethod
    def forward(ctx, logits, targets, ignore_index, reduction, label_smoothing):
        n_valid = _check_targets(targets, *logits.shape, ignore_index)
        loss_rows, lse = _launch_forward(logits, targets, ignore_index, label_smoothing)
        ctx.save_for_backward(logits, targets, lse)
        ctx.options = (ignore_index, reduction, label_smoothing, n_valid)
        return _reduce(loss_rows, reduction, n_valid, logits.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        logits, targets, lse = ctx.saved_tensors
        ignore_index, reduction, label_smoothing, n_valid = ctx.options
        scale = 1.0 / n_valid if reduction == "mean" and n_valid else (0.0 if reduction == "mean" else 1.0)
        dlogits = cross_entropy_backward(logits, targets, lse, grad_output.contiguous(), grad_scale=scale,
                                         ignore_index=ignore_index, label_smoothing=label_smoothing)
        return dlogits, None, None, None, None


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = IGNORE_INDEX,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> torch.Tensor:
    """F.cross_entropy(logits, targets, ...) for logits (N, V), targets (N,), with autograd."""
    _check_logits(logits)
    _check_options(ignore_index, reduction, label_smoothing)
    return CrossEntropyFunction.apply(logits, targets, ignore_index, reduction, float(label_smoothing))


def cross_entropy_torch(logits, targets, *, ignore_index=IGNORE_INDEX, reduction="mean", label_smoothing=0.0):
    """The reference, in float64, rounded once to the logits' dtype."""
    loss = torch.nn.functional.cross_entropy(logits.double(), targets.long(), ignore_index=ignore_index,
                                             reduction=reduction, label_smoothing=label_smoothing)
    return loss.to(logits.dtype)


# --------------------------------------------------------------------- fused linear + loss
def default_chunk_size(n_rows: int, n_classes: int, itemsize: int) -> int:
    """Rows per chunk so that the C x V logits buffer holds about DEFAULT_CHUNK_BYTES."""
    rows = max(1, DEFAULT_CHUNK_BYTES // max(1, n_classes * itemsize))
    if rows >= 128:
        rows -= rows % 128  # whole 128-row tiles for the chunk matmuls
    return max(1, min(rows, n_rows))


def _check_linear(h, weight, targets, chunk_size, matmul):
    validate.tensor(h, "h", dtypes=DTYPES)
    validate.tensor(weight, "weight", dtypes=DTYPES, ndim=2)
    validate.same_dtype(h=h, weight=weight)
    if h.dim() < 1 or h.shape[-1] != weight.shape[1]:
        raise ValueError(f"h's last dimension must equal weight's columns (the hidden size): "
                         f"h is {tuple(h.shape)}, weight is {tuple(weight.shape)} (V x d)")
    if weight.shape[0] == 0:
        raise ValueError("weight has 0 rows: cross-entropy needs at least one class")
    validate.tensor(targets, "targets", dtypes=TARGET_DTYPES)
    if tuple(targets.shape) != tuple(h.shape[:-1]):
        raise ValueError(f"targets has shape {tuple(targets.shape)}; expected h's leading shape {tuple(h.shape[:-1])}")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int (rows per chunk) or None, got {chunk_size!r}")
    if matmul not in MATMULS:
        raise ValueError(f"matmul must be one of {list(MATMULS)}, got {matmul!r}")
    if matmul == "triton" and h.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"matmul='triton' (week 3's kernel) takes fp16/bf16, got {str(h.dtype).replace('torch.', '')}")


def _mm(a, b, out, matmul):
    if matmul == "triton":
        from week3_triton_kernels import matmul as week3_matmul  # fp16/bf16 tl.dot kernel of week 3
        return week3_matmul.matmul(a, b, out=out)
    return torch.mm(a, b, out=out)


def _linear_ce_chunks(h, weight, targets, n_valid, *, ignore_index, reduction, label_smoothing, chunk_size,
                      matmul, need_dh, need_dw, block_v=BLOCK_V):
    """The chunk loop: per-row losses, and (if asked) dh and dW for grad_output = 1."""
    n_rows, n_cols = h.shape[0], weight.shape[0]
    chunk = chunk_size or default_chunk_size(n_rows, n_cols, h.element_size())
    chunk = max(1, min(chunk, n_rows))
    acc = _acc_torch(h.dtype)
    loss_rows = torch.empty(n_rows, dtype=acc, device=h.device)
    dh = torch.empty_like(h) if need_dh else None
    dw = torch.zeros_like(weight) if need_dw else None
    if n_rows == 0:
        return loss_rows, dh, dw
    # One buffer, reused by every chunk: the allocator sees C x V once, never N x V.
    buffer = torch.empty((chunk, n_cols), dtype=h.dtype, device=h.device)
    lse = torch.empty(chunk, dtype=acc, device=h.device)
    grad_scale = (1.0 / n_valid if n_valid else 0.0) if reduction == "mean" else 1.0
    coef = _coefficients(label_smoothing, n_cols, grad_scale, h.dtype, h.device)
    want_grad = need_dh or need_dw
    block = _block(n_cols, block_v)
    meta = dict(FP64=h.dtype == torch.float64, SMOOTHING=label_smoothing > 0, BLOCK_V=block, num_warps=_num_warps(block))
    for start in range(0, n_rows, chunk):
        stop = min(start + chunk, n_rows)
        h_c, logits = h[start:stop], buffer[: stop - start]
        _mm(h_c, weight.t(), logits, matmul)
        if not want_grad:
            cross_entropy_fwd_kernel[(stop - start,)](logits, targets[start:stop], loss_rows[start:stop], lse,
                                                      n_cols, n_cols, ignore_index, coef, **meta)
            continue
        # The logits become d loss / d logits in place: nobody else holds this buffer.
        cross_entropy_fwd_grad_kernel[(stop - start,)](logits, targets[start:stop], loss_rows[start:stop], logits,
                                                       n_cols, n_cols, n_cols, ignore_index, coef, **meta)
        if need_dh:
            _mm(logits, weight, dh[start:stop], matmul)
        if need_dw:
            # dW += dlogits^T @ h_c, accumulated in W's dtype: for bf16 that is one rounding per
            # chunk (N / C of them) where torch rounds once; an fp32 accumulator would double
            # dW's memory (and torch.addmm_ takes no mixed dtypes on every backend).
            dw.addmm_(logits.t(), h_c)
    return loss_rows, dh, dw


class FusedLinearCrossEntropyFunction(torch.autograd.Function):
    """Loss of h @ W^T without the N x V logits; gradients finished in the forward pass."""

    @staticmethod
    def forward(ctx, h, weight, targets, ignore_index, reduction, label_smoothing, chunk_size, matmul):
        need_dh, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        n_valid = _check_targets(targets, h.shape[0], weight.shape[0], ignore_index)
        loss_rows, dh, dw = _linear_ce_chunks(h, weight, targets, n_valid, ignore_index=ignore_index,
                                              reduction=reduction, label_smoothing=label_smoothing,
                                              chunk_size=chunk_size, matmul=matmul, need_dh=need_dh,
                                              need_dw=need_dw)
        ctx.grads = (dh, dw)
        return _reduce(loss_rows, reduction, n_valid, h.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        if ctx.grads is None:
            raise RuntimeError("FusedLinearCrossEntropy's backward runs once per forward: its gradients were "
                               "computed in the forward pass and are scaled in place (no retain_graph)")
        dh, dw = ctx.grads
        ctx.grads = None  # free them with the graph, and refuse a second backward
        # Scaling in place: an out-of-place product would hold a second V x d tensor.
        if dh is not None:
            dh.mul_(grad_output.to(dh.dtype))
        if dw is not None:
            dw.mul_(grad_output.to(dw.dtype))
        return dh, dw, None, None, None, None, None, None


def fused_linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                               ignore_index: int = IGNORE_INDEX, reduction: str = "mean",
                               label_smoothing: float = 0.0, chunk_size: int | None = None,
                               matmul: str = "torch") -> torch.Tensor:
    """F.cross_entropy(h @ weight.T, targets) in row chunks, never holding the N x V logits.

    h: (..., d); weight: (V, d); targets: h's leading shape. reduction "mean" or "sum" ("none"
    cannot be: dW = sum_i g_i dlogits_i^T h_i needs the per-row g_i, unknown in the forward).
    chunk_size: rows per chunk (default: a ~DEFAULT_CHUNK_BYTES logits buffer). matmul: "torch"
    or "triton" (week 3's kernel for the logits and dh; dW always accumulates with torch.addmm_).
    """
    _check_linear(h, weight, targets, chunk_size, matmul)
    label_smoothing = _check_options(ignore_index, reduction, label_smoothing, allowed=("mean", "sum"))
    h2, t1 = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
    if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
        return FusedLinearCrossEntropyFunction.apply(h2, weight, t1, ignore_index, reduction, label_smoothing,
                                                     chunk_size, matmul)
    n_valid = _check_targets(t1, h2.shape[0], weight.shape[0], ignore_index)
    loss_rows, _, _ = _linear_ce_chunks(h2, weight, t1, n_valid, ignore_index=ignore_index, reduction=reduction,
                                        label_smoothing=label_smoothing, chunk_size=chunk_size, matmul=matmul,
                                        need_dh=False, need_dw=False)
    return _reduce(loss_rows, reduction, n_valid, h.dtype)


class FusedLinearCrossEntropy(torch.nn.Module):
    """Loss module: forward(h, weight, targets) = CE(h @ weight.T, targets), chunked and fused.

    The weight is an argument, not a parameter: the LM head (often tied to the embedding)
    belongs to the model; this module only replaces `F.cross_entropy(F.linear(h, W), t)`.
    """

    def __init__(self, ignore_index: int = IGNORE_INDEX, reduction: str = "mean", label_smoothing: float = 0.0,
                 chunk_size: int | None = None, matmul: str = "torch"):
        super().__init__()
        _check_options(ignore_index, reduction, label_smoothing, allowed=("mean", "sum"))
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, float(label_smoothing)
        self.chunk_size, self.matmul = chunk_size, matmul

    def forward(self, h, weight, targets):
        return fused_linear_cross_entropy(h, weight, targets, ignore_index=self.ignore_index,
                                          reduction=self.reduction, label_smoothing=self.label_smoothing,
                                          chunk_size=self.chunk_size, matmul=self.matmul)

    def extra_repr(self):
        return f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, chunk_size={self.chunk_size}"


def linear_cross_entropy_torch(h, weight, targets, *, ignore_index=IGNORE_INDEX, reduction="mean",
                               label_smoothing=0.0):
    """What the fused version replaces: the full N x V logits, then F.cross_entropy."""
    logits = h.reshape(-1, h.shape[-1]) @ weight.t()
    return torch.nn.functional.cross_entropy(logits, targets.reshape(-1).long(), ignore_index=ignore_index,
                                             reduction=reduction, label_smoothing=label_smoothing)


# ------------------------------------------------------------------------- memory measurement
def peak_memory_mib(fn, *args) -> float:
    """Peak device memory allocated by fn(*args) ABOVE what was allocated before (GPU only).

    The inputs are therefore not counted; everything fn creates and keeps (outputs, gradients)
    and everything it frees on the way (temporaries) is.
    """
    if not runtime.on_gpu():
        raise RuntimeError("peak_memory_mib reads the CUDA caching allocator: it needs a GPU")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = fn(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del result
    return peak / 2**20


def loss_and_grads(loss_fn):
    """fn(h, weight, targets) -> (loss, dh, dW): one forward + backward, grads not accumulated."""
    def run(h, weight, targets):
        loss = loss_fn(h, weight, targets)
        dh, dw = torch.autograd.grad(loss, (h, weight))
        return loss, dh, dw
    return run


# ---------------------------------------------------------------------------------- benchmarks
def _itemsize(dtype):
    return torch.empty((), dtype=dtype).element_size()


def _linear_inputs(size):
    n, d, v, dtype = size
    dev = runtime.DEVICE
    h = random_tensor((n, d), dtype, dev).requires_grad_()
    w = random_tensor((v, d), dtype, dev, scale=d ** -0.5).requires_grad_()
    return h, w, torch.randint(0, v, (n,), device=dev)


_compiled = {}


def _torch_compiled(h, w, t):
    if "linear_ce" not in _compiled:
        _compiled["linear_ce"] = torch.compile(loss_and_grads(linear_cross_entropy_torch))
    return _compiled["linear_ce"](h, w, t)


def _logits_inputs(size):
    n, v, dtype = size
    return (random_tensor((n, v), dtype, runtime.DEVICE, scale=2.0).requires_grad_(),
            torch.randint(0, v, (n,), device=runtime.DEVICE))


def _ce_fwd_bwd(fn):
    def run(logits, targets):
        loss = fn(logits, targets)
        return torch.autograd.grad(loss, (logits,))
    return run


def _ce_compiled(logits, targets):
    if "ce" not in _compiled:
        _compiled["ce"] = torch.compile(_ce_fwd_bwd(torch.nn.functional.cross_entropy))
    return _compiled["ce"](logits, targets)


VOCAB = 128256  # Llama 3's vocabulary: "128k", and not a power of two
BENCHMARKS = [
    Benchmark(
        name="fused_ce_week4",
        title="Linear + cross-entropy, forward + backward, bf16 (N=8192 tokens, V=128256)",
        sizes=[(8192, 2048, VOCAB, torch.bfloat16), (8192, 4096, VOCAB, torch.bfloat16)],
        sim_sizes=[(64, 32, 300, torch.float32)],
        size_label=lambda s: f"N={s[0]} d={s[1]} V={s[2]}",
        make_inputs=_linear_inputs,
        variants={
            "torch": loss_and_grads(linear_cross_entropy_torch),
            "torch_compile": _torch_compiled,
            "fused": loss_and_grads(fused_linear_cross_entropy),
        },
        gpu_only=("torch_compile",),
        headline=("fused",),
        sources={"fused": [cross_entropy_fwd_grad_kernel, _row_logsumexp, _row_loss, _write_row_grad,
                           _linear_ce_chunks, FusedLinearCrossEntropyFunction.forward,
                           FusedLinearCrossEntropyFunction.backward, fused_linear_cross_entropy]},
        bytes=lambda s: 2 * (s[0] * s[1] + s[2] * s[1]) * _itemsize(s[3]),
        flops=lambda s: 6 * s[0] * s[1] * s[2],
        compute_dtype=torch.bfloat16,
        notes="forward + backward of CE(h @ W^T, t), mean; flops = 6 N d V (logits, dh, dW matmuls); bytes = "
              "read h, W and write dh, dW once (the minimum). Peak MiB is the memory above the inputs; the "
              "chunk-size trade-off: `python -m week4_triton_dl.cross_entropy --sweep`.",
    ),
    Benchmark(
        name="cross_entropy_week4",
        title="Cross-entropy on given logits, forward + backward",
        sizes=[(8192, VOCAB, torch.bfloat16), (8192, VOCAB, torch.float32), (32768, 32000, torch.bfloat16)],
        sim_sizes=[(16, 300, torch.float32)],
        size_label=lambda s: f"{s[0]}x{s[1]} {str(s[2]).replace('torch.', '')}",
        make_inputs=_logits_inputs,
        variants={
            "torch": _ce_fwd_bwd(torch.nn.functional.cross_entropy),
            "torch_compile": _ce_compiled,
            "triton": _ce_fwd_bwd(cross_entropy),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        sources={"triton": [cross_entropy_fwd_kernel, cross_entropy_bwd_kernel, _row_logsumexp, _row_loss,
                            _write_row_grad, _launch_forward, cross_entropy_backward, CrossEntropyFunction.forward,
                            CrossEntropyFunction.backward]},
        bytes=lambda s: 3 * s[0] * s[1] * _itemsize(s[2]),
        flops=lambda s: 0,
        notes="bytes = 3 N V s: read the logits in the forward, read them and write their gradient in the "
              "backward (the minimum for a separate forward and backward)",
    ),
]


# ---------------------------------------------------------------------------------- the sweep
def _time_ms(fn, *args):
    from course.bench import time_call
    return time_call(fn, [args]).median_ms


def _max_rel_err(got, want):
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def sweep(n=None, v=None, ds=None, dtype=None, chunks=None) -> None:
    """Chunk-size sweep of the fused linear CE beside torch and torch.compile: ms, peak MiB, error.

    On the H100 (~1-2 min, most of it torch.compile's first call): N = 8192, V = 128256,
    d = 2048 and 4096, bf16. In simulation: tiny sizes, to show the table; memory is '-'.
    """
    gpu = runtime.on_gpu()
    n = n or runtime.pick(gpu=8192, sim=64)
    v = v or runtime.pick(gpu=VOCAB, sim=300)
    ds = ds or runtime.pick(gpu=[4096, 2048], sim=[32])
    dtype = dtype or runtime.pick(gpu=torch.bfloat16, sim=torch.float32)
    chunks = chunks or runtime.pick(gpu=[256, 512, 1024, 2048, 4096, 8192], sim=[16, 64])
    print(f"fused linear cross-entropy, forward + backward, N={n} V={v} {str(dtype).replace('torch.', '')}, "
          f"{'GPU: ' + torch.cuda.get_device_name() if gpu else 'SIMULATION (times measure Python)'}")
    print("peak MiB = memory allocated above the inputs (h, W, targets) at the peak; err = max |diff| / max |ref|")
    head = f"{'d':>5} {'variant':<26} {'ms':>9} {'peak MiB':>9} {'loss err':>9} {'dh err':>9} {'dW err':>9}"
    for d in ds:
        h, w, t = _linear_inputs((n, d, v, dtype))
        ref = loss_and_grads(linear_cross_entropy_torch)(h, w, t)
        rows = [("torch", loss_and_grads(linear_cross_entropy_torch))]
        if gpu:
            rows.append(("torch_compile", _torch_compiled))
        default = default_chunk_size(n, v, _itemsize(dtype))
        for c in chunks:
            rows.append((f"fused chunk={c}{' (default)' if c == default else ''}",
                         loss_and_grads(lambda a, b, c_, c=c: fused_linear_cross_entropy(a, b, c_, chunk_size=c))))
        print(head)
        for label, fn in rows:
            got = fn(h, w, t)
            errs = [_max_rel_err(g, r) for g, r in zip(got, ref)]
            del got
            peak = f"{peak_memory_mib(fn, h, w, t):9.0f}" if gpu else f"{'-':>9}"
            print(f"{d:>5} {label:<26} {_time_ms(fn, h, w, t):9.3f} {peak} "
                  + " ".join(f"{e:9.2e}" for e in errs), flush=True)
        del h, w, t, ref
        if gpu:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="chunk-size sweep: ms, peak MiB, error vs torch")
    args = parser.parse_args()
    if args.sweep:
        sweep()
    else:
        parser.print_help()
