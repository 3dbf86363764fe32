"""Exercise: cross-entropy with an online logsumexp, then the chunked, fused linear + cross-entropy.
Same names as week4_triton_dl/cross_entropy.py. Check your work with
`pytest tests/week4/test_cross_entropy.py --impl=exercises`.

Suggested order: `_row_logsumexp` and `_row_loss` with `cross_entropy_fwd_kernel` and
`cross_entropy_forward`; `_write_row_grad` with `cross_entropy_bwd_kernel` and
`cross_entropy_backward`; `CrossEntropyFunction` and `cross_entropy`; then
`cross_entropy_fwd_grad_kernel` and the chunk loop `_linear_ce_chunks` behind
`fused_linear_cross_entropy` (Liger Kernel's idea: Hsu et al. 2024, arXiv:2410.10989).
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TARGET_DTYPES = (torch.int64, torch.int32)
IGNORE_INDEX = -100
REDUCTIONS = ("mean", "sum", "none")
BLOCK_V = 4096
DEFAULT_CHUNK_BYTES = 256 << 20
MATMULS = ("torch", "triton")


@triton.jit
def _to_acc(x, FP64: tl.constexpr):
    """x in the accumulation dtype: fp32, or fp64 when FP64."""
    # TODO (a static `if FP64:` may re-assign a value of another dtype)
    pass


@triton.jit
def _row_logsumexp(x_row, n_cols, FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """(logsumexp of the row, sum of the row) in ONE read: running max m and sum d per lane."""
    # TODO: m <- max(m, x); d <- d * exp(m_old - m_new) + exp(x - m_new) (shift by 0 while a lane
    # has seen only -inf); if SMOOTHING also sum x; at the end lse = M + log(sum d * exp(m - M)).
    pass


@triton.jit
def _row_loss(x_row, target, valid, lse, x_sum, n_cols, coef_ptr, SMOOTHING: tl.constexpr):
    """lse - x[target] (smoothed: lse - (1-eps) x[target] - eps mean(x)); 0 where not valid."""
    # TODO: coef_ptr holds [1 - eps, eps, eps / V, grad_scale]; never load x[-100].
    pass


@triton.jit
def _write_row_grad(x_row, g_row, target, lse, g, n_cols, coef_ptr,
                    SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """g_row[j] = (exp(x_j - lse) - y_j) * g with y the (smoothed) one-hot target."""
    # TODO
    pass


@triton.jit
def cross_entropy_fwd_kernel(logits_ptr, targets_ptr, loss_ptr, lse_ptr, n_cols, row_stride,
                             ignore_index, coef_ptr,
                             FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """One program per row: store the row's loss and its logsumexp."""
    # TODO
    pass


@triton.jit
def cross_entropy_bwd_kernel(logits_ptr, targets_ptr, lse_ptr, grad_ptr, dlogits_ptr, n_cols,
                             row_stride, dlogits_row_stride, ignore_index, coef_ptr,
                             GRAD_PER_ROW: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """One program per row: dlogits = (softmax - y) * grad[row or 0] * grad_scale."""
    # TODO
    pass


@triton.jit
def cross_entropy_fwd_grad_kernel(logits_ptr, targets_ptr, loss_ptr, dlogits_ptr, n_cols, row_stride,
                                  dlogits_row_stride, ignore_index, coef_ptr,
                                  FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """Loss AND gradient in one program; dlogits may be the logits buffer itself (in place)."""
    # TODO: read the target logit before the gradient sweep overwrites it.
    pass


def cross_entropy_forward(logits, targets, *, ignore_index=IGNORE_INDEX, label_smoothing=0.0, block_v=BLOCK_V):
    """Per-row loss and logsumexp (fp32, fp64 for fp64 logits), no reduction."""
    raise NotImplementedError("not implemented yet: cross_entropy_forward (week4 exercise)")


def cross_entropy_backward(logits, targets, lse, grad, *, grad_scale=1.0, ignore_index=IGNORE_INDEX,
                           label_smoothing=0.0, out=None, block_v=BLOCK_V):
    """dlogits = (softmax(logits) - y) * grad * grad_scale; grad per row (N,) or one scalar."""
    raise NotImplementedError("not implemented yet: cross_entropy_backward (week4 exercise)")


def cross_entropy(logits, targets, *, ignore_index=IGNORE_INDEX, reduction="mean", label_smoothing=0.0):
    """F.cross_entropy(logits, targets, ...) for logits (N, V), with autograd."""
    raise NotImplementedError("not implemented yet: cross_entropy (week4 exercise)")


def cross_entropy_torch(logits, targets, *, ignore_index=IGNORE_INDEX, reduction="mean", label_smoothing=0.0):
    """The reference, in float64, rounded once to the logits' dtype."""
    loss = torch.nn.functional.cross_entropy(logits.double(), targets.long(), ignore_index=ignore_index,
                                             reduction=reduction, label_smoothing=label_smoothing)
    return loss.to(logits.dtype)


def default_chunk_size(n_rows, n_classes, itemsize):
    """Rows per chunk so that the C x V logits buffer holds about DEFAULT_CHUNK_BYTES."""
    rows = max(1, DEFAULT_CHUNK_BYTES // max(1, n_classes * itemsize))
    if rows >= 128:
        rows -= rows % 128
    return max(1, min(rows, n_rows))


def fused_linear_cross_entropy(h, weight, targets, *, ignore_index=IGNORE_INDEX, reduction="mean",
                               label_smoothing=0.0, chunk_size=None, matmul="torch"):
    """F.cross_entropy(h @ weight.T, targets) in row chunks, never holding the N x V logits."""
    raise NotImplementedError("not implemented yet: fused_linear_cross_entropy (week4 exercise)")


class FusedLinearCrossEntropy(torch.nn.Module):
    """Loss module: forward(h, weight, targets) = CE(h @ weight.T, targets), chunked and fused."""

    def __init__(self, ignore_index=IGNORE_INDEX, reduction="mean", label_smoothing=0.0, chunk_size=None,
                 matmul="torch"):
        super().__init__()
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, float(label_smoothing)
        self.chunk_size, self.matmul = chunk_size, matmul

    def forward(self, h, weight, targets):
        return fused_linear_cross_entropy(h, weight, targets, ignore_index=self.ignore_index,
                                          reduction=self.reduction, label_smoothing=self.label_smoothing,
                                          chunk_size=self.chunk_size, matmul=self.matmul)


def linear_cross_entropy_torch(h, weight, targets, *, ignore_index=IGNORE_INDEX, reduction="mean",
                               label_smoothing=0.0):
    """What the fused version replaces: the full N x V logits, then F.cross_entropy."""
    logits = h.reshape(-1, h.shape[-1]) @ weight.t()
    return torch.nn.functional.cross_entropy(logits, targets.reshape(-1).long(), ignore_index=ignore_index,
                                             reduction=reduction, label_smoothing=label_smoothing)


def peak_memory_mib(fn, *args):
    """Peak device memory allocated by fn(*args) above what was allocated before (GPU only)."""
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
    """fn(h, weight, targets) -> (loss, dh, dW): one forward + backward."""
    def run(h, weight, targets):
        loss = loss_fn(h, weight, targets)
        dh, dw = torch.autograd.grad(loss, (h, weight))
        return loss, dh, dw
    return run
