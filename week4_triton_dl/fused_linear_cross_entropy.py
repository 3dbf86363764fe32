"""Fused linear + cross-entropy: the LM head's matmul chunked with the loss, so the N x V logits never exist.

Its benchmarks, chunk-size sweep and command line: cross_entropy_bench.py (`python -m
week4_triton_dl.cross_entropy_bench --sweep`). The row loss it is built on (the online logsumexp,
the loss kept shifted by the row max, the gradient sweep, launch plans, checks and the reduction
kernel) is cross_entropy.py: read it first.

A language model ends in loss = CE(h @ W^T, targets) (h: N tokens x d, W: the LM head, V x d).
cross_entropy.py makes the loss cheap on given logits, but the logits themselves are N x V: 2 GiB
at N = 8192, V = 128k in bf16, and eager torch holds three tensors of that size at its peak (the
log-probabilities, their gradient and the logits' gradient). Here they are never made.

What it teaches:
* `cross_entropy_fwd_grad_kernel`: forward and gradient in one program. Once the row's m and log d
  are known, a second sweep over the row writes (softmax - y) * scale straight over the logits, in
  place.
  This is only legal when nobody needs the logits afterwards, which is true inside...
* `FusedLinearCrossEntropy` (the idea of Liger Kernel, Hsu et al. 2024, "Liger Kernel:
  Efficient Triton Kernels for LLM Training", arXiv:2410.10989; this is our own code): rows of
  h are processed in chunks of C. Per chunk: logits_c = h_c @ W^T (C x V, a reusable buffer),
  the fused kernel turns them into dlogits_c in place, and at once dh_c = dlogits_c @ W and
  dW += dlogits_c^T @ h_c. The gradients are therefore finished during the forward pass; the
  backward only multiplies them by grad_output (a scalar: mean or sum reduction). The full
  N x V logits never exist: peak memory is W, dW, and one C x V buffer.

Precision is the row loss's (its docstring): the kernel's loss is kept shifted by the row max, and
its softmax is exp((x - m) - log d) straight from the forward's registers (no lse is stored).

Cost model (N rows, V classes, d hidden, itemsize s):
* 3 matmuls, 6 N V d FLOPs (the same as torch's h @ W^T plus its two backward matmuls): at
  N = 8192, V = 128k, d = 4096 that is 26 TFLOP, ~40 ms at bf16 peak, so it is compute-bound and
  the aim is "no slower than torch" while using a fraction of the memory. Extra traffic it pays:
  the C x V chunk is read twice and written once by the kernel (3 N V s over all chunks, ~6 GB,
  ~2 ms), and dW (V d s) is read and written once per chunk by the accumulating matmul:
  (N / C) * 2 V d s, ~17 GB at C = 1024 (~6 ms). Larger chunks cost memory, smaller chunks cost
  dW traffic: `python -m week4_triton_dl.cross_entropy_bench --sweep` measures the trade. Eager
  torch pays its own extra traffic instead: ~8 passes over N x V tensors (log_softmax, its
  backward, the zero-filled one-hot gradient), ~17 GB.
* memory above the inputs (h, W, targets), torch eager: 3 N V s at its peak (log-probabilities,
  their gradient and the logits' gradient, alive together in the backward; 5.9 GiB here);
  fused: V d s (dW) + C V s (the buffer) + N d s (dh): 1.3 GiB at C = 1024.

As a PyTorch op (the second half of the file). `fused_linear_cross_entropy` (and the module
`FusedLinearCrossEntropy`) is what a model calls. In eager mode it runs
`FusedLinearCrossEntropyFunction` (an autograd.Function whose backward scales the gradients made
in the forward, in place, so it runs once), or the bare chunk loop when nothing needs a gradient;
under torch.compile the registered op `torch.ops.course.fused_linear_cross_entropy`, so a model
using it compiles with no graph break. Like the row loss it never synchronises with the GPU: a
target outside [0, V) gives a NaN loss, and the launcher `cross_entropy_fwd_grad` checks the
targets with one sync and raises. The benchmark `fused_linear_ce_train_week4` times forward +
backward through this entry beside `F.cross_entropy((h @ W.T).float(), t)`, eager and compiled,
with peak memory.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from course import ops, runtime, validate
from course.gpu import triton, tl
from week4_triton_dl import cross_entropy as ce  # the row loss: launch plans, checks, the reduction

# The row loss's @triton.jit helpers, which the kernel below calls by name.
from week4_triton_dl.cross_entropy import row_logsumexp, row_loss, write_row_grad

DTYPES = ce.DTYPES
IGNORE_INDEX = ce.IGNORE_INDEX
BLOCK_V = ce.BLOCK_V
REDUCTIONS = ("mean", "sum")  # not "none": dW mixes every row, so each row's weight must be known in the forward
# Rows of h per chunk: the C x V logits buffer gets about this many bytes. 256 MiB = 1024 rows of
# a 128k bf16 vocabulary: with dW (V d s) the extra memory at d = 4096 is then ~1.3 GiB, under a
# quarter of eager torch's ~5.9 GiB; 2048 rows would be ~1.5 GiB (~0.26x) but re-read dW half as
# often. A prediction: the H100 chunk sweep decides (see the notes).
DEFAULT_CHUNK_BYTES = 256 << 20
MATMULS = ("torch", "triton")
NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)
# EXERCISE NOTE: Suggested order: `cross_entropy_fwd_grad_kernel` and `_forward_grad` (then the launcher
#   `cross_entropy_fwd_grad` runs), then the chunk loop `_linear_ce_chunks` behind `fused_linear_cross_entropy`
#   (Liger Kernel's idea: Hsu et al. 2024, arXiv:2410.10989). Given: the row loss of cross_entropy.py (its
#   solution: `row_logsumexp`, `row_loss`, `write_row_grad`, `ce.launch_plan`, `ce.reduce_losses`, ...), the
#   checked launcher, the registered op, the autograd.Function and the public entries, which call your hot path.
# EXERCISE NOTE: Precision, which the tests check at logits near 1e4: the row helpers keep the loss shifted by
#   the row max m; the gradient's softmax is exp((x - m) - log d), with m and log d still in registers.


# ------------------------------------------------------------------------------------ the kernel
@triton.jit
def cross_entropy_fwd_grad_kernel(logits_ptr, targets_ptr, loss_ptr, dlogits_ptr, scale_ptr, n_cols,
                                  row_stride, dlogits_row_stride, ignore_index, coef_ptr,
                                  FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    # Loss and gradient in one program: the second sweep over the row (often still in L2)
    # replaces a whole backward kernel, and dlogits may be the logits buffer itself.
    # BEGIN EXERCISE: the forward kernel's loss, then the gradient from the same registers: g = the scale read on the
    #   device (NaN for an out-of-range target, 0 for an ignored row) and write_row_grad with hi = row_max,
    #   lo = log_sum. dlogits may be the logits buffer: every warp must have read x[target] before any writes
    #   it (and say why in a comment)
    # HINT: Loss and gradient from one program: after the forward sweep, the row's max and log-sum are still
    #   in registers, so the softmax for the gradient needs no saved lse and no second kernel.
    # HINT: The forward kernel's lines (row, target, valid, in_range, row_logsumexp, row_loss stored); then
    #   a barrier; g = the device-side scale, NaN if not in_range, 0 if not valid; write_row_grad with hi =
    #   row_max and lo = log_sum.
    # HINT: `tl.debug_barrier()` before the gradient sweep: dlogits may alias the logits, and warps run
    #   independently, so every warp must have read x[target] before any writes it.
    row = tl.program_id(0).to(tl.int64)
    x_row = logits_ptr + row * row_stride
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target != ignore_index
    in_range = (target >= 0) & (target < n_cols)
    row_max, log_sum, shifted_sum = row_logsumexp(x_row, n_cols, FP64, SMOOTHING, BLOCK_V)
    tl.store(loss_ptr + row, row_loss(x_row, target, valid, in_range, row_max, log_sum, shifted_sum,
                                      n_cols, coef_ptr, SMOOTHING))
    # In place, the sweep below overwrites x[target]: every warp must have read it first. Warps
    # run independently, so a barrier orders "all reads of x[target]" before "any write".
    tl.debug_barrier()
    # d(scale * sum of losses)/dx; scale (1 / rows counted, or 1) is read on the device.
    g = tl.where(in_range, tl.load(scale_ptr).to(row_max.dtype), float("nan"))
    g = tl.where(valid, g, 0.0)
    # m and log d are still in registers: softmax = exp((x - m) - log d), the shifted form.
    write_row_grad(x_row, dlogits_ptr + row * dlogits_row_stride, target, row_max, log_sum, g, n_cols,
                   coef_ptr, SMOOTHING, BLOCK_V)
    # END EXERCISE


# ------------------------------------------------------------- the hot path (no checks here)


def _one(acc: torch.dtype, device) -> torch.Tensor:
    """A 0-d tensor holding 1 (the gradient scale of reduction "sum"), made per call: a cached one first made
    while CUDA graphs warm up would belong to their memory pool (cross_entropy.smoothing_coefficients)."""
    return torch.ones((), dtype=acc, device=device)


def _forward_grad(logits, targets, loss, dlogits, scale, ignore_index, label_smoothing, block_v=BLOCK_V, coef=None):
    """Per-row loss into `loss` and (softmax - y) * scale into `dlogits` (which may be `logits`); `coef`: the
    smoothing coefficients when the caller made them already (a chunk loop makes them once)."""
    # BEGIN EXERCISE: nothing to launch for 0 rows; cross_entropy_fwd_grad_kernel, one program per row (a plain launch is
    #   fine: it runs once per chunk of a large batch)
    # HINT: Only the early exit is yours here (the launch follows): a grid of zero programs is an invalid
    #   launch.
    # HINT: Unpack logits.shape, and return (loss, dlogits) unchanged when there are no rows.
    n_rows, n_cols = logits.shape
    if n_rows == 0:
        return loss, dlogits
    # END EXERCISE
    block, num_warps = ce.launch_plan(n_cols, block_v)
    acc = ce.acc_dtype(logits.dtype)
    cross_entropy_fwd_grad_kernel[(n_rows,)](logits, targets, loss, dlogits, scale, n_cols, logits.stride(0),
                                             dlogits.stride(0), ignore_index,
                                             ce.smoothing_coefficients(label_smoothing, n_cols, acc, logits.device)
                                             if coef is None else coef,
                                             FP64=acc == torch.float64, SMOOTHING=label_smoothing > 0,
                                             BLOCK_V=block, num_warps=num_warps)
    return loss, dlogits


def _linear_ce_chunks(h, weight, targets, ignore_index, reduction, label_smoothing, chunk_size, matmul,
                      need_dh, need_dw, block_v=BLOCK_V):
    """The chunk loop: (loss, dh or None, dW or None), the gradients for grad_output = 1."""
    # BEGIN EXERCISE: per-row losses, dh (if needed), dW zeros (if needed); one C x V logits buffer reused by every chunk
    #   (C from chunk_size or default_chunk_size); the mean's scale 1 / (rows counted) made on the device; per
    #   chunk: logits = h_c @ W^T (_mm), then without gradients the forward kernel only, else _forward_grad in
    #   place (the logits become dlogits), dh_c = dlogits @ W, dW += dlogits^T @ h_c; finally ce.reduce_losses
    # HINT: The point of the chunking is memory: the N x V logits never exist at once, only a C x V buffer
    #   that every chunk reuses; this region sets up the outputs (the loop follows).
    # HINT: n_rows from h, n_cols = vocabulary size from weight; per-row losses in ce.acc_dtype(h.dtype); dh
    #   empty when needed; dW zeros when needed (chunks add into it); for 0 rows return the reduced empty
    #   loss at once.
    # HINT: dW starts at `torch.zeros(...)`, not empty: every chunk accumulates `dW += dlogits^T @ h_c`.
    n_rows, n_cols = h.shape[0], weight.shape[0]
    acc = ce.acc_dtype(h.dtype)
    loss_rows = torch.empty(n_rows, dtype=acc, device=h.device)
    dh = torch.empty(h.shape, dtype=h.dtype, device=h.device) if need_dh else None
    dw = torch.zeros(weight.shape, dtype=weight.dtype, device=weight.device) if need_dw else None
    if n_rows == 0:
        return ce.reduce_losses(loss_rows, targets, ignore_index, reduction, h.dtype, need_count=False)[0], dh, dw
    # END EXERCISE
    chunk = max(1, min(chunk_size or default_chunk_size(n_rows, n_cols, h.element_size()), n_rows))
    # One buffer, reused by every chunk: the allocator sees C x V once, never N x V.
    buffer = torch.empty((chunk, n_cols), dtype=h.dtype, device=h.device)
    want_grad = need_dh or need_dw
    if want_grad:
        # d mean / d loss_i = 1 / (rows counted): counted on the device, no host sync.
        scale = (targets != ignore_index).sum(dtype=acc).reciprocal() if reduction == "mean" else _one(acc, h.device)
    coef = ce.smoothing_coefficients(label_smoothing, n_cols, acc, h.device)  # once for every chunk
    for start in range(0, n_rows, chunk):
        stop = min(start + chunk, n_rows)
        h_c, logits = h[start:stop], buffer[: stop - start]
        _mm(h_c, weight.t(), logits, matmul)
        if not want_grad:
            block, num_warps = ce.launch_plan(n_cols, block_v)
            ce.cross_entropy_fwd_kernel[(stop - start,)](
                logits, targets[start:stop], loss_rows[start:stop], loss_rows, n_cols, n_cols, ignore_index,
                coef, FP64=acc == torch.float64,
                SMOOTHING=label_smoothing > 0, STORE_LSE=False, BLOCK_V=block, num_warps=num_warps)
            continue
        # The logits become d loss / d logits in place: nobody else holds this buffer.
        _forward_grad(logits, targets[start:stop], loss_rows[start:stop], logits, scale, ignore_index,
                      label_smoothing, block_v, coef)
        if need_dh:
            _mm(logits, weight, dh[start:stop], matmul)
        if need_dw:
            # dW += dlogits^T @ h_c, accumulated in W's dtype: for bf16 that is one rounding per
            # chunk (N / C of them) where torch rounds once; an fp32 accumulator would double
            # dW's memory (and torch.addmm_ takes no mixed dtypes on every backend).
            dw.addmm_(logits.t(), h_c)
    return ce.reduce_losses(loss_rows, targets, ignore_index, reduction, h.dtype, need_count=False)[0], dh, dw


def _mm(a, b, out, matmul):
    if matmul == "triton":
        from week3_triton_kernels import matmul as week3_matmul  # fp16/bf16 tl.dot kernel of week 3
        return week3_matmul.matmul(a, b, out=out)
    return torch.mm(a, b, out=out)


def default_chunk_size(n_rows: int, n_classes: int, itemsize: int) -> int:
    """Rows per chunk so that the C x V logits buffer holds about DEFAULT_CHUNK_BYTES, in chunks of
    equal size: 8192 rows of a 50304 bf16 vocabulary are 4 chunks of 2048, not 3 of 2560 and a
    ragged 512 whose three matmuls run at a fraction of the GEMM rate (the capstone's profile:
    0.2 ms of a 19 ms step)."""
    most = max(1, DEFAULT_CHUNK_BYTES // max(1, n_classes * itemsize))
    if most >= 128:
        most -= most % 128  # whole 128-row tiles for the chunk matmuls
    if n_rows <= most:
        return max(1, n_rows)
    chunks = -(-n_rows // most)
    rows = -(-n_rows // chunks)  # the same number of chunks, as equal as they can be
    if rows >= 128:
        rows = min(most, -(-rows // 128) * 128)
    return rows


# ------------------------------------------------------------------------------ input checks
def _check_linear(h, weight, targets, chunk_size, matmul):
    validate.tensor(h, "h", dtypes=DTYPES, contiguous=False)
    validate.tensor(weight, "weight", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.same_dtype(h=h, weight=weight)
    if h.dim() < 1 or h.shape[-1] != weight.shape[1]:
        raise ValueError(f"h's last dimension must equal weight's columns (the hidden size): "
                         f"h is {tuple(h.shape)}, weight is {tuple(weight.shape)} (V x d)")
    if weight.shape[0] == 0:
        raise ValueError("weight has 0 rows: cross-entropy needs at least one class")
    validate.tensor(targets, "targets", dtypes=ce.TARGET_DTYPES, contiguous=False)
    if tuple(targets.shape) != tuple(h.shape[:-1]):
        raise ValueError(f"targets has shape {tuple(targets.shape)}; expected h's leading shape {tuple(h.shape[:-1])}")
    ce.check_same_device(h=h, weight=weight, targets=targets)
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int (rows per chunk) or None, got {chunk_size!r}")
    if matmul not in MATMULS:
        raise ValueError(f"matmul must be one of {list(MATMULS)}, got {matmul!r}")
    if matmul == "triton" and h.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"matmul='triton' (week 3's kernel) takes fp16/bf16, got {str(h.dtype).replace('torch.', '')}")


# ----------------------------------------------------------------------------------- launcher
def cross_entropy_fwd_grad(logits, targets, *, ignore_index=IGNORE_INDEX, label_smoothing=0.0, grad_scale=1.0,
                           out=None, block_v=BLOCK_V):
    """(per-row loss, dlogits) from ONE kernel: dlogits = d(grad_scale * sum_i loss_i)/d logits.

    `out=logits` writes the gradient over the logits, in place (the fused linear loss does that
    with each chunk); otherwise `out` (or a new tensor) receives it.
    """
    ce.check_logits(logits)
    label_smoothing = ce.check_options(ignore_index, "none", label_smoothing)
    ce.check_targets(targets, *logits.shape, ignore_index)
    ce.check_same_device(logits=logits, targets=targets)
    ce.check_block(block_v)
    if not isinstance(grad_scale, (int, float)) or isinstance(grad_scale, bool):
        raise TypeError(f"grad_scale must be a float, got {grad_scale!r}")
    if out is not logits:
        out = validate.output(out, logits, "out")
    acc = ce.acc_dtype(logits.dtype)
    loss = torch.empty(logits.shape[0], dtype=acc, device=logits.device)
    scale = torch.full((), float(grad_scale), dtype=acc, device=logits.device)
    return _forward_grad(logits, targets, loss, out, scale, ignore_index, label_smoothing, block_v)


# ------------------------------------------------------------------- the op torch.compile sees
@torch.library.custom_op(f"{NAMESPACE}::fused_linear_cross_entropy", mutates_args=())
def fused_linear_cross_entropy_op(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                                  ignore_index: int, reduction: str, label_smoothing: float,
                                  chunk_size: int | None, matmul: str, need_dh: bool,
                                  need_dw: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, dh, dW) of CE(h @ W^T) for grad_output = 1, computed chunk by chunk in the forward.

    dh / dW are empty when not asked for (an op returns tensors, never None). The autograd
    formula scales them by the incoming gradient; nothing is left to compute in the backward.
    """
    loss, dh, dw = _linear_ce_chunks(h, weight, targets, ignore_index, reduction, label_smoothing, chunk_size,
                                     matmul, need_dh, need_dw)
    return loss, (dh if dh is not None else h.new_empty(0)), (dw if dw is not None else weight.new_empty(0))


@fused_linear_cross_entropy_op.register_fake
def _fused_linear_cross_entropy_fake(h, weight, targets, ignore_index, reduction, label_smoothing, chunk_size,
                                     matmul, need_dh, need_dw):
    # dW has the weight's shape and dtype (the gradient autograd hands to W must), dh h's.
    return (h.new_empty(()), h.new_empty(h.shape) if need_dh else h.new_empty(0),
            weight.new_empty(weight.shape) if need_dw else weight.new_empty(0))


def _linear_setup_context(ctx, inputs, output):
    _, dh, dw = output
    ctx.mark_non_differentiable(dh, dw)
    ctx.save_for_backward(dh, dw)
    ctx.need = inputs[8], inputs[9]


def _linear_backward_formula(ctx, grad_loss, _grad_dh, _grad_dw):
    dh, dw = ctx.saved_tensors
    need_dh, need_dw = ctx.need
    # Out of place (the eager Function scales in place, see there): under torch.compile Inductor
    # writes the product into the saved buffer when nothing reads it afterwards.
    return ((dh * grad_loss.to(dh.dtype)) if need_dh else None, (dw * grad_loss.to(dw.dtype)) if need_dw else None,
            None, None, None, None, None, None, None, None)


fused_linear_cross_entropy_op.register_autograd(_linear_backward_formula, setup_context=_linear_setup_context)


# ------------------------------------------------------------------- the op eager mode calls
class FusedLinearCrossEntropyFunction(torch.autograd.Function):
    """Loss of h @ W^T without the N x V logits; gradients finished in the forward pass."""

    @staticmethod
    def forward(ctx, h, weight, targets, ignore_index, reduction, label_smoothing, chunk_size, matmul):
        need_dh, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        loss, dh, dw = _linear_ce_chunks(h, weight, targets, ignore_index, reduction, label_smoothing, chunk_size,
                                         matmul, need_dh, need_dw)
        ctx.grads = (dh, dw)
        return loss

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


# ----------------------------------------------------------------------------- public entries
def fused_linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                               ignore_index: int = IGNORE_INDEX, reduction: str = "mean",
                               label_smoothing: float = 0.0, chunk_size: int | None = None,
                               matmul: str = "torch") -> torch.Tensor:
    """F.cross_entropy(h @ weight.T, targets) in row chunks, never holding the N x V logits.

    h: (..., d); weight: (V, d); targets: h's leading shape. reduction "mean" or
    "sum" ("none" cannot be: dW = sum_i g_i dlogits_i^T h_i needs the per-row g_i, unknown in the
    forward). chunk_size: rows per chunk (default: a ~DEFAULT_CHUNK_BYTES logits buffer).
    matmul: "torch" or "triton" (week 3's kernel for the logits and dh; dW always accumulates
    with torch.addmm_). A target outside [0, V) gives a NaN loss (no host sync). Eager calls
    run `FusedLinearCrossEntropyFunction`; under torch.compile, the registered op
    `torch.ops.course.fused_linear_cross_entropy`.
    """
    _check_linear(h, weight, targets, chunk_size, matmul)
    label_smoothing = ce.check_options(ignore_index, reduction, label_smoothing, allowed=REDUCTIONS)
    h2, t1 = h.reshape(-1, h.shape[-1]), targets.reshape(-1).contiguous()  # a view when already contiguous
    need_dh, need_dw = ops.needs_grad(h), ops.needs_grad(weight)
    if ops.compiling():
        return fused_linear_cross_entropy_op(h2, weight, t1, ignore_index, reduction, label_smoothing, chunk_size,
                                             matmul, need_dh, need_dw)[0]
    if need_dh or need_dw:
        return FusedLinearCrossEntropyFunction.apply(h2, weight, t1, ignore_index, reduction, label_smoothing,
                                                     chunk_size, matmul)
    return _linear_ce_chunks(h2, weight, t1, ignore_index, reduction, label_smoothing, chunk_size, matmul,
                             False, False)[0]


class FusedLinearCrossEntropy(torch.nn.Module):
    """Loss module: forward(h, weight, targets) = CE(h @ weight.T, targets), chunked and fused.

    The weight is an argument, not a parameter: the LM head (often tied to the embedding)
    belongs to the model; this module only replaces `F.cross_entropy(F.linear(h, W), t)`.
    """

    def __init__(self, ignore_index: int = IGNORE_INDEX, reduction: str = "mean", label_smoothing: float = 0.0,
                 chunk_size: int | None = None, matmul: str = "torch"):
        super().__init__()
        ce.check_options(ignore_index, reduction, label_smoothing, allowed=REDUCTIONS)
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
    return F.cross_entropy(logits, targets.reshape(-1).long(), ignore_index=ignore_index,
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



# ------------------------------------------------------------------------- the code behind the entry
# What `fused_linear_cross_entropy` runs, kernels to autograd (the row loss's helpers included): the
# benchmarks (cross_entropy_bench.py) count its lines beside each variant (`Benchmark.sources`).
FUSED_LINEAR_CE_CODE = (cross_entropy_fwd_grad_kernel, row_logsumexp, row_loss, write_row_grad,
                        ce.cross_entropy_reduce_kernel, _forward_grad, ce.reduce_losses, _linear_ce_chunks,
                        FusedLinearCrossEntropyFunction.forward, FusedLinearCrossEntropyFunction.backward,
                        fused_linear_cross_entropy)
