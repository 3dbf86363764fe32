"""Cross-entropy over a large vocabulary, on given logits, as the op a model calls: launch plans, the
hot path, checks, custom op and autograd around cross_entropy_kernels.py's kernels.

The kernels (the online logsumexp, its backward, the one-launch reduction), their precision at
large logits and their cost model are in cross_entropy_kernels.py; its benchmarks and command line
in cross_entropy_bench.py. The next step, the loss fused with the LM head's matmul so that the
logits never exist, is fused_linear_cross_entropy.py, built on the row helpers of the kernels and
on this file's `launch_plan`, `reduce_losses` and checks.

As a PyTorch op. `cross_entropy` is what a model calls. In eager
mode it runs `CrossEntropyFunction` (an autograd.Function: ~8 us cheaper per call than a custom
op's dispatch, see course/ops.py), or the bare launches when nothing needs a gradient; under
torch.compile it goes through the registered op `torch.ops.course.cross_entropy_rows` (+ its
backward op; the reduction stays torch code, which Inductor fuses), so a model using it compiles
with no graph break (`custom_ops.py` is the lesson on how). What keeps a call cheap: launch
settings are computed once per vocabulary size and cached (plain Python: no device tensor is kept
across calls where a CUDA graph's memory pool could own it, see `smoothing_coefficients`); the
losses, their sum and the mean's divisor come from one launch (`cross_entropy_fwd_reduce_kernel`:
the last row program to finish sums the rows and counts the kept ones, on the device), so the
public entry launches one kernel and never synchronises with the GPU. That has a consequence: a
target outside [0, V) cannot raise an exception without a host sync, so the kernels never read it
(no out-of-bounds access) and that row's loss and gradient are NaN (torch stops the whole CUDA
context with a device-side assert instead); the launchers (`cross_entropy_forward`, ...) check
the targets with one sync and raise. The benchmark `cross_entropy_train_week4` times forward +
backward through this entry (autograd and every launch included) beside
`F.cross_entropy(logits.float(), t)` as training code writes it, eager and compiled, with peak
memory; `cross_entropy_host_week4` is the host's cost per call at a decode-step size (8 x 50304),
where the GPU work is a few microseconds.

Arithmetic is fp32 for fp16/bf16/fp32 logits (fp64 for fp64, so gradcheck can run); the
loss is returned in the logits' dtype, as torch does. reduction "mean" divides by the number
of rows whose target is not ignore_index (NaN when there are none, as in torch).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course import ops, validate
from course.gpu import ON_GPU
from course.launch import current_stream, launch, stream_capturing  # stream getters: torch's C ones

# The kernels, from the module beside this one (a stub's own sibling, in exercises/, for a learner).
from .cross_entropy_kernels import (cross_entropy_bwd_kernel, cross_entropy_fwd_kernel, cross_entropy_fwd_reduce_kernel,
                                    cross_entropy_reduce_kernel, row_logsumexp, row_loss, sum_rows, write_row_grad)

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TARGET_DTYPES = (torch.int64, torch.int32)
IGNORE_INDEX = -100
REDUCTIONS = ("mean", "sum", "none")
# Chunk of a row that one loop step holds in registers. 4096 fp32 values over 8 warps is 16 per
# thread for each of the running max, running sum (and x-sum): few registers, many programs per SM.
BLOCK_V = 4096
# The reduction kernel: one program sums the per-row losses REDUCE_BLOCK at a time (8192 rows
# are 2 steps: one program's loop is latency-bound, ~1 us a step, so few wide steps).
REDUCE_BLOCK = 4096
# "mean" and "sum" take one launch (cross_entropy_fwd_reduce_kernel: the last program to finish
# reduces) instead of two. False: always two launches (the tests compare both paths). While a
# CUDA graph is being captured the two-launch path is taken too: the one-launch path keeps a
# counter per stream, and two graphs replayed at once on two streams would share it.
ONE_LAUNCH_REDUCTION = True
NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)
# EXERCISE NOTE: Suggested order: `row_logsumexp` and `row_loss` with `cross_entropy_fwd_kernel` (in
#   cross_entropy_kernels.py, your stub beside this one) and `_forward` here (then `cross_entropy(...,
#   reduction="none")` and `cross_entropy_forward` run); `sum_rows`, `reduce_losses` and the last-program
#   reduction of `cross_entropy_fwd_reduce_kernel` with `_forward_reduced` ("mean" and "sum" in one launch);
#   `write_row_grad` with `cross_entropy_bwd_kernel` and `_backward` (then with autograd). Given: launch plans,
#   the smoothing coefficients, the scratch counter, the checked launchers, the registered ops (custom_ops.py's
#   lesson; read them as its worked example), the autograd.Function and the public entry, which call your hot
#   path. The next exercise, the fused linear + loss built on these row helpers, is fused_linear_cross_entropy.py.



# ------------------------------------------------------------------------------- launch plans
# Computed once per vocabulary size and kept: the hot path does a dict lookup, not Triton's
# jitted helpers (triton.next_power_of_2 and triton.cdiv cost ~2 us each from Python).
_PLANS: dict = {}
_SCRATCH: dict = {}


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (n >= 1), in plain Python."""
    return 1 << (n - 1).bit_length()


def _num_warps(block):
    return max(4, min(16, block // (32 * 16)))


def launch_plan(n_cols: int, block_v: int = BLOCK_V) -> tuple[int, int]:
    """(BLOCK_V, num_warps) for rows of n_cols classes: a block no wider than the row needs."""
    key = (n_cols, block_v)
    plan = _PLANS.get(key)
    if plan is None:
        block = min(block_v, max(16, next_power_of_2(n_cols)))
        plan = _PLANS[key] = (block, _num_warps(block))
    return plan


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The accumulation dtype of the kernels (and of the per-row losses): fp32, or fp64 for fp64 logits."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def smoothing_coefficients(label_smoothing: float, n_cols: int, acc: torch.dtype, device) -> torch.Tensor:
    """[1 - eps, eps, eps / V] in the accumulation dtype, made on the device for this call.

    A tensor, not Python floats: Triton types float arguments as fp32, which would round 0.9 or
    1/V before an fp64 kernel ever sees them. Filled on the device (`fill_` takes the value as a
    double kernel argument): no host-to-device copy, so a CUDA graph can capture it. Not cached: a
    tensor first made while torch.compile's CUDA graphs warm up belongs to their memory pool, and
    kept past the call it stops the next recording ("Detected 1 tensor(s) in the cudagraph pool not
    tracked as outputs": the capstone's fast+compile+cudagraphs on an H100, 2026-12-07). Three fill
    launches per call (the gradient kernel reads 1 - eps even without smoothing); a loop over chunks
    makes them once (fused_linear_cross_entropy.py).
    """
    coef = torch.empty(3, dtype=acc, device=device)
    for i, value in enumerate((1.0 - label_smoothing, label_smoothing, label_smoothing / n_cols)):
        coef[i].fill_(value)
    return coef


# ------------------------------------------------------------- the hot path (no checks here)
def _forward(logits, targets, ignore_index, label_smoothing, block_v=BLOCK_V, need_lse=True):
    """(loss per row, lse or None) of (N, V) logits with unit column stride: accumulation dtype, float64."""
    # BEGIN EXERCISE: loss (n_rows, accumulation dtype) and, with need_lse, lse (float64) allocated; nothing to launch
    #   for 0 rows; launch_plan(n_cols, block_v) gives BLOCK_V and num_warps; one launch of cross_entropy_fwd_kernel
    #   per row through course.launch, with a key that pins every specialization (dtypes, ints, constexprs);
    #   without need_lse pass the loss buffer as lse_ptr (it is never written)
    # HINT: Only the buffers are yours here (the launch follows the region): the per-row losses live in the
    #   accumulation dtype, the lse in float64 for the backward's precision.
    # HINT: Read n_rows, n_cols from logits.shape; acc = acc_dtype(logits.dtype); torch.empty for loss (acc)
    #   and, if need_lse, lse (float64) on the logits' device; return early with both when there are no rows
    #   (a zero grid is an invalid launch).
    n_rows, n_cols = logits.shape
    acc = acc_dtype(logits.dtype)
    loss = torch.empty(n_rows, dtype=acc, device=logits.device)
    lse = torch.empty(n_rows, dtype=torch.float64, device=logits.device) if need_lse else None
    if n_rows == 0:
        return loss, lse
    # END EXERCISE
    block, num_warps = launch_plan(n_cols, block_v)
    row_stride, smoothing = logits.stride(0), label_smoothing > 0
    # The key pins what the compiled kernel is specialized on (course.launch): dtypes, the int
    # arguments' values, the constexprs.
    key = (logits.dtype, targets.dtype, n_cols, row_stride, ignore_index, smoothing, need_lse, block)
    launch(cross_entropy_fwd_kernel, (n_rows,), key,
           (logits, targets, loss, loss if lse is None else lse, n_cols, row_stride, ignore_index,
            smoothing_coefficients(label_smoothing, n_cols, acc, logits.device), acc == torch.float64, smoothing,
            need_lse, block), num_warps=num_warps)
    return loss, lse


def _backward(grad, logits, targets, lse, ignore_index, label_smoothing, out=None, block_v=BLOCK_V):
    """dlogits = (softmax - y) * grad, grad a scalar or one value per row (any stride)."""
    # BEGIN EXERCISE: dlogits (or out) of the logits' shape and dtype; nothing to launch for 0 rows; grad's stride 0 for a
    #   scalar; cross_entropy_bwd_kernel, one program per row, through course.launch
    # HINT: Only the output buffer is yours here (the launch follows the region): a caller may pass `out` to
    #   reuse memory.
    # HINT: dlogits = a new empty tensor of the logits' shape and dtype on its device, unless out was given;
    #   return it at once when there are no rows.
    n_rows, n_cols = logits.shape
    dlogits = torch.empty((n_rows, n_cols), dtype=logits.dtype, device=logits.device) if out is None else out
    if n_rows == 0:
        return dlogits
    # END EXERCISE
    block, num_warps = launch_plan(n_cols, block_v)
    acc = acc_dtype(logits.dtype)
    row_stride, out_stride, grad_stride = logits.stride(0), dlogits.stride(0), grad.stride(0) if grad.dim() else 0
    smoothing = label_smoothing > 0
    key = (logits.dtype, targets.dtype, grad.dtype, dlogits.dtype, n_cols, row_stride, out_stride, grad_stride,
           ignore_index, smoothing, block)
    launch(cross_entropy_bwd_kernel, (n_rows,), key,
           (logits, targets, lse, grad, dlogits, n_cols, row_stride, out_stride, grad_stride, ignore_index,
            smoothing_coefficients(label_smoothing, n_cols, acc, logits.device), acc == torch.float64, smoothing, block),
           num_warps=num_warps)
    return dlogits


def reduce_losses(loss_rows, targets, ignore_index, reduction, dtype, need_count=True):
    """(loss in `dtype`, rows counted or None): the reduction of the per-row losses, no host sync."""
    # BEGIN EXERCISE: "none": the rows in `dtype`; else a 0-d out (and a count when need_count); no rows: out is 0 (sum) or
    #   NaN (mean, 0 / 0 as torch) without a launch; else ONE program of cross_entropy_reduce_kernel
    #   (REDUCE_BLOCK rows a step) through course.launch. No host sync anywhere
    # HINT: Reducing on the device keeps the loss a tensor that never forces a host sync; the edge cases
    #   must match torch: 'none' returns the rows, an empty batch gives 0 for sum and NaN (0 / 0) for mean.
    # HINT: Return early for 'none'; allocate a 0-d out in dtype and a 0-d count (loss dtype) when asked;
    #   for 0 rows fill them and return; otherwise one launch of cross_entropy_reduce_kernel with grid (1,)
    #   and a key of every specialising value.
    # HINT: `out.fill_(math.nan if reduction == "mean" else 0.0)` for the empty batch: no launch.
    if reduction == "none":
        return loss_rows.to(dtype), None
    n_rows = loss_rows.shape[0]
    out = torch.empty((), dtype=dtype, device=loss_rows.device)
    count = torch.empty((), dtype=loss_rows.dtype, device=loss_rows.device) if need_count else None
    if n_rows == 0:  # no rows: sum 0, mean 0 / 0 = NaN (as torch); nothing to launch on
        return out.fill_(math.nan if reduction == "mean" else 0.0), (count.zero_() if need_count else None)
    mean = reduction == "mean"
    key = (loss_rows.dtype, targets.dtype, dtype, n_rows, ignore_index, mean, need_count)
    launch(cross_entropy_reduce_kernel, (1,), key,
           (loss_rows, targets, out, out if count is None else count, n_rows, ignore_index, mean, need_count,
            REDUCE_BLOCK), num_warps=8)
    return out, count
    # END EXERCISE


def scratch(logits, n_rows: int, acc: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(ticket, loss_rows) for cross_entropy_fwd_reduce_kernel, kept per (device, stream, dtype).

    ticket: the int32 counter the kernel's programs draw from, made zero once; the last program
    sets it back to zero. loss_rows: room for the per-row losses, which only that launch reads, so
    it is reused (grown when a call has more rows) instead of allocated per call. Calls on one
    stream run one after another, so they can share both; another stream gets its own.
    """
    index = logits.get_device()  # an int (-1 on the CPU): no device object
    key = (index, current_stream(index) if ON_GPU else None, acc)
    kept = _SCRATCH.get(key)
    if kept is None or kept[1].shape[0] < n_rows:
        ticket = kept[0] if kept is not None else torch.zeros(1, dtype=torch.int32, device=logits.device)
        # Growing while an earlier call on this stream is still running is safe: the old buffer
        # goes back to torch's caching allocator, which reuses it only in stream order.
        kept = _SCRATCH[key] = (ticket, torch.empty(max(n_rows, 1024), dtype=acc, device=logits.device))
    return kept


def _forward_reduced(logits, targets, ignore_index, label_smoothing, reduction, need_lse, block_v=BLOCK_V):
    """(loss in logits' dtype, lse or None, count or None), reduction "mean" or "sum", n_rows >= 1:
    the per-row losses and their reduction in one launch (cross_entropy_fwd_reduce_kernel)."""
    # BEGIN EXERCISE: the counter and loss buffer from scratch; a 0-d out in the logits' dtype; lse (float64, n_rows) and a
    #   0-d count in the accumulation dtype when need_lse; one launch of cross_entropy_fwd_reduce_kernel (grid:
    #   one program per row) through course.launch, keyed like _forward's plus the reduction
    # HINT: One launch computes every row's loss and the reduction (the last-ticket pattern in the kernel);
    #   the host only allocates and launches, never syncs.
    # HINT: ticket and loss_rows from scratch; 0-d out in logits' dtype; lse and a 0-d count only if
    #   need_lse; launch_plan for block and num_warps; a key naming dtypes, sizes, strides, ignore_index and
    #   the constexpr flags; grid (n_rows,); unused pointer slots get `out` as a placeholder.
    # HINT: `launch(cross_entropy_fwd_reduce_kernel, (n_rows,), key, (...), num_warps=num_warps)` with
    #   arguments in the kernel's signature order.
    n_rows, n_cols = logits.shape
    acc = acc_dtype(logits.dtype)
    device = logits.device
    ticket, loss_rows = scratch(logits, n_rows, acc)
    out = torch.empty((), dtype=logits.dtype, device=device)
    lse = torch.empty(n_rows, dtype=torch.float64, device=device) if need_lse else None
    count = torch.empty((), dtype=acc, device=device) if need_lse else None
    block, num_warps = launch_plan(n_cols, block_v)
    row_stride, smoothing, mean = logits.stride(0), label_smoothing > 0, reduction == "mean"
    key = (logits.dtype, targets.dtype, n_rows, n_cols, row_stride, ignore_index, smoothing, need_lse, mean, block)
    launch(cross_entropy_fwd_reduce_kernel, (n_rows,), key,
           (logits, targets, loss_rows, out if lse is None else lse, out, out if count is None else count,
            ticket, n_rows, n_cols, row_stride, ignore_index,
            smoothing_coefficients(label_smoothing, n_cols, acc, device), acc == torch.float64, smoothing, need_lse, mean,
            block, REDUCE_BLOCK), num_warps=num_warps)
    return out, lse, count
    # END EXERCISE


def one_launch(logits, reduction) -> bool:
    return (ONE_LAUNCH_REDUCTION and reduction != "none" and logits.shape[0] > 0
            and not (ON_GPU and stream_capturing()))


# ------------------------------------------------------------------------------ input checks
def check_block(block_v) -> None:
    """block_v (the chunk of a row one loop step holds) must be a power of two >= 16."""
    if isinstance(block_v, bool) or not isinstance(block_v, int) or block_v < 16 or block_v & (block_v - 1):
        raise ValueError(f"block_v must be a power of two >= 16, got {block_v!r}")


def check_options(ignore_index, reduction, label_smoothing, allowed=REDUCTIONS) -> float:
    """Check F.cross_entropy's options (reduction one of `allowed`); return label_smoothing as a float."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"ignore_index must be an int, got {ignore_index!r}")
    if reduction not in allowed:
        raise ValueError(f"reduction must be one of {list(allowed)}, got {reduction!r}")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) \
            or not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be a float in [0, 1], got {label_smoothing!r}")
    return float(label_smoothing)


def check_targets(targets, n_rows, n_cols, ignore_index, name="targets"):
    """Validate class indices (for the launchers); return how many rows count.

    One small reduction and ONE host sync: the kernels never read outside a row (a bad target
    gives a NaN row), but a launcher is where a learner wants the clear message.
    """
    _check_target_tensor(targets, n_rows, name)
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


def _check_target_tensor(targets, n_rows, name="targets"):
    validate.tensor(targets, name, dtypes=TARGET_DTYPES, ndim=1)
    if targets.shape[0] != n_rows:
        raise ValueError(f"{name} has {targets.shape[0]} elements; expected one per row ({n_rows})")


def check_logits(logits, unit_stride=True) -> None:
    """(N, V) logits of a supported dtype with V >= 1; with unit_stride, classes at unit stride (the kernels')."""
    validate.tensor(logits, "logits", dtypes=DTYPES, ndim=2, contiguous=False)
    if unit_stride and logits.stride(-1) != 1 and logits.shape[1] > 1:
        raise ValueError(f"logits must have unit stride along the classes (strides {logits.stride()}): "
                         "pass .contiguous()")
    if logits.shape[1] == 0:
        raise ValueError("logits has 0 classes: cross-entropy needs at least one")


def check_same_device(**tensors) -> None:
    """All the named tensors on one device; the message names each one's."""
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        raise ValueError("tensors must be on one device: " + ", ".join(f"{k} on {v}" for k, v in devices.items()))


def check_call(logits, targets, ignore_index, reduction, label_smoothing) -> None:
    """The public entry's checks: a few comparisons per call; on failure, the course's messages."""
    if not (isinstance(logits, torch.Tensor) and isinstance(targets, torch.Tensor) and logits.dim() == 2
            and logits.dtype in DTYPES and logits.shape[1] > 0
            and logits.is_cuda == ON_GPU and logits.is_cpu != ON_GPU  # (a meta tensor is neither)
            and targets.dtype in TARGET_DTYPES and targets.dim() == 1 and targets.shape[0] == logits.shape[0]
            and targets.get_device() == logits.get_device()):  # get_device(): an int, no device object
        check_logits(logits, unit_stride=False)
        validate.tensor(targets, "targets", dtypes=TARGET_DTYPES, ndim=1, contiguous=False)
        if targets.shape[0] != logits.shape[0]:
            raise ValueError(f"targets has {targets.shape[0]} elements; expected one per row ({logits.shape[0]})")
        check_same_device(logits=logits, targets=targets)
    if not (type(ignore_index) is int and reduction in REDUCTIONS and type(label_smoothing) in (float, int)
            and 0.0 <= label_smoothing <= 1.0):
        check_options(ignore_index, reduction, label_smoothing)


# ---------------------------------------------------------------------------------- launchers
def cross_entropy_forward(logits, targets, *, ignore_index=IGNORE_INDEX, label_smoothing=0.0, block_v=BLOCK_V):
    """Per-row loss (fp32, fp64 for fp64 logits) and logsumexp (float64): the kernel, no reduction.

    logits: (N, V), rows at any stride, classes at unit stride. The launcher checks everything,
    the target values included (one host sync), and raises before launching.
    """
    check_logits(logits)
    label_smoothing = check_options(ignore_index, "none", label_smoothing)
    check_targets(targets, *logits.shape, ignore_index)
    check_same_device(logits=logits, targets=targets)
    check_block(block_v)
    return _forward(logits, targets, ignore_index, label_smoothing, block_v)


def cross_entropy_backward(logits, targets, lse, grad, *, grad_scale=1.0, ignore_index=IGNORE_INDEX,
                           label_smoothing=0.0, out=None, block_v=BLOCK_V):
    """dlogits = (softmax(logits) - y) * grad * grad_scale; `grad` is per row (N,) or one scalar.

    lse: the float64 logsumexp `cross_entropy_forward` returned.
    """
    check_logits(logits)
    label_smoothing = check_options(ignore_index, "none", label_smoothing)
    n_rows, n_cols = logits.shape
    check_targets(targets, n_rows, n_cols, ignore_index)
    validate.tensor(lse, "lse", dtypes=(torch.float64,), ndim=1)
    if lse.shape[0] != n_rows:
        raise ValueError(f"lse has {lse.shape[0]} elements; expected one per row ({n_rows})")
    validate.tensor(grad, "grad", dtypes=DTYPES, contiguous=False)
    if grad.numel() not in (1, n_rows) or grad.dim() > 1:
        raise ValueError(f"grad must be a scalar or have one element per row ({n_rows}), got {tuple(grad.shape)}")
    check_same_device(logits=logits, targets=targets, lse=lse, grad=grad)
    check_block(block_v)
    out = validate.output(out, logits, "out")
    grad = grad.reshape(()) if grad.numel() == 1 and n_rows != 1 else grad
    if grad_scale != 1.0:
        grad = grad.to(acc_dtype(logits.dtype)) * grad_scale
    return _backward(grad, logits, targets, lse, ignore_index, label_smoothing, out=out, block_v=block_v)


# ------------------------------------------------------------------- the op torch.compile sees
@torch.library.custom_op(f"{NAMESPACE}::cross_entropy_rows", mutates_args=())
def cross_entropy_rows_op(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int,
                          label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss per row, lse) of (N, V) logits: the forward kernel as a registered op (see cross_entropy)."""
    return _forward(logits, targets, ignore_index, label_smoothing)


@cross_entropy_rows_op.register_fake
def _cross_entropy_rows_fake(logits, targets, ignore_index, label_smoothing):
    # Shapes and dtypes only: what the compiler plans with, without running a kernel.
    rows = logits.shape[:1]
    return logits.new_empty(rows, dtype=acc_dtype(logits.dtype)), logits.new_empty(rows, dtype=torch.float64)


@torch.library.custom_op(f"{NAMESPACE}::cross_entropy_rows_backward", mutates_args=())
def cross_entropy_rows_backward_op(grad: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor,
                                   lse: torch.Tensor, ignore_index: int, label_smoothing: float) -> torch.Tensor:
    """d(sum_i grad_i loss_i)/d logits = (softmax - y) * grad_i, from the saved lse."""
    return _backward(grad, logits, targets, lse, ignore_index, label_smoothing)


@cross_entropy_rows_backward_op.register_fake
def _cross_entropy_rows_backward_fake(grad, logits, targets, lse, ignore_index, label_smoothing):
    return logits.new_empty(logits.shape)  # contiguous, whatever the logits' row stride


def _rows_setup_context(ctx, inputs, output):
    logits, targets, ignore_index, label_smoothing = inputs
    lse = output[1]
    ctx.mark_non_differentiable(lse)  # a statistic for the backward, not a result to differentiate
    ctx.save_for_backward(logits, targets, lse)
    ctx.options = (ignore_index, label_smoothing)


def _rows_backward_formula(ctx, grad_loss, _grad_lse):
    logits, targets, lse = ctx.saved_tensors
    # Itself an op: the backward graph holds one opaque node too, not a raw launch.
    dlogits = cross_entropy_rows_backward_op(grad_loss, logits, targets, lse, *ctx.options)
    return dlogits, None, None, None


cross_entropy_rows_op.register_autograd(_rows_backward_formula, setup_context=_rows_setup_context)

# ------------------------------------------------------------------- the op eager mode calls
class CrossEntropyFunction(torch.autograd.Function):
    """CE on given logits: the forward kernel saves lse (N values), the backward kernel recomputes softmax."""

    @staticmethod
    def forward(ctx, logits, targets, ignore_index, reduction, label_smoothing):
        if one_launch(logits, reduction):  # the losses and their reduction in one launch
            loss, lse, count = _forward_reduced(logits, targets, ignore_index, label_smoothing, reduction, True)
        else:
            loss_rows, lse = _forward(logits, targets, ignore_index, label_smoothing)
            loss, count = reduce_losses(loss_rows, targets, ignore_index, reduction, logits.dtype)
        ctx.save_for_backward(logits, targets, lse, count)
        ctx.options = (ignore_index, reduction, label_smoothing)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        logits, targets, lse, count = ctx.saved_tensors
        ignore_index, reduction, label_smoothing = ctx.options
        grad = grad_output / count if reduction == "mean" else grad_output  # the count never left the GPU
        return _backward(grad, logits, targets, lse, ignore_index, label_smoothing), None, None, None, None


# ----------------------------------------------------------------------------- public entries
def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = IGNORE_INDEX,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> torch.Tensor:
    """F.cross_entropy(logits, targets, ...) for logits (N, V), targets (N,), with autograd.

    Rows may have any stride (a slice of a wider buffer is read in place); logits whose classes
    are not at unit stride (a transposed view) are copied first, as torch's softmax kernel does.
    A target outside [0, V) (and not ignore_index) gives that row a NaN loss and gradient: no
    host sync, no out-of-bounds read (the launchers raise instead). Eager calls run
    `CrossEntropyFunction` (or the kernels alone when no gradient is needed); under
    torch.compile, the registered op `torch.ops.course.cross_entropy_rows` and torch's reduction.
    """
    check_call(logits, targets, ignore_index, reduction, label_smoothing)
    if logits.stride(1) != 1 and logits.shape[1] > 1:
        logits = logits.contiguous()
    if not targets.is_contiguous():  # the kernels read one target per row at unit stride
        targets = targets.contiguous()
    label_smoothing = float(label_smoothing)
    if ops.compiling():
        loss_rows = cross_entropy_rows_op(logits, targets, ignore_index, label_smoothing)[0]
        if reduction == "none":
            return loss_rows.to(logits.dtype)
        total = loss_rows.sum()
        if reduction == "mean":
            total = total / (targets != ignore_index).sum()  # a tensor: no .item(), 0 / 0 = NaN as torch
        return total.to(logits.dtype)
    if ops.needs_grad(logits):
        return CrossEntropyFunction.apply(logits, targets, ignore_index, reduction, label_smoothing)
    # No autograd: neither lse nor the count is stored (two allocations fewer, a few us of host time each).
    if one_launch(logits, reduction):
        return _forward_reduced(logits, targets, ignore_index, label_smoothing, reduction, False)[0]
    loss_rows = _forward(logits, targets, ignore_index, label_smoothing, need_lse=False)[0]
    return reduce_losses(loss_rows, targets, ignore_index, reduction, logits.dtype, need_count=False)[0]


def cross_entropy_torch(logits, targets, *, ignore_index=IGNORE_INDEX, reduction="mean", label_smoothing=0.0):
    """The reference, in float64, rounded once to the logits' dtype."""
    loss = F.cross_entropy(logits.double(), targets.long(), ignore_index=ignore_index, reduction=reduction,
                           label_smoothing=label_smoothing)
    return loss.to(logits.dtype)


# ------------------------------------------------------------------------- the code behind each entry
# What `cross_entropy` runs, kernels to autograd: the benchmarks (cross_entropy_bench.py) count its
# lines beside each variant (`Benchmark.sources`).
CROSS_ENTROPY_CODE = (cross_entropy_fwd_reduce_kernel, cross_entropy_bwd_kernel, sum_rows, row_logsumexp, row_loss,
                      write_row_grad, _forward_reduced, scratch, _backward, CrossEntropyFunction.forward,
                      CrossEntropyFunction.backward, cross_entropy)
