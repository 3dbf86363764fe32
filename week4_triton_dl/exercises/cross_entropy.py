"""Exercise: cross-entropy with an online logsumexp, then the chunked, fused linear + cross-entropy.
Same names as week4_triton_dl/cross_entropy.py. Check your work with
`pytest tests/week4/test_cross_entropy.py --impl=exercises`.

Yours to write (each raises NotImplementedError until you do): the kernels, the hot-path
launch functions `_forward`, `_backward`, `_forward_grad`, `_reduce` and the chunk loop
`_linear_ce_chunks`, and the validated launchers `cross_entropy_forward`,
`cross_entropy_backward`, `cross_entropy_fwd_grad` (use the checks given below).
GIVEN, as in the solution: the launch plans and cached coefficients, the input checks, the
registered ops (`torch.ops.course_exercises.cross_entropy_rows`, its backward, and
`fused_linear_cross_entropy`: fake functions and autograd formulas), the autograd.Functions and
the public entries `cross_entropy` and `fused_linear_cross_entropy`, which call your hot path.
(Registering ops is the lesson of custom_ops.py; read these as its worked example.)

Suggested order: `_row_logsumexp` and `_row_loss` with `cross_entropy_fwd_kernel`, `_forward`
and `cross_entropy_forward`; `cross_entropy_reduce_kernel` and `_reduce` (then `cross_entropy`
runs without gradients); `_write_row_grad` with `cross_entropy_bwd_kernel`, `_backward` and
`cross_entropy_backward` (then with them); then `cross_entropy_fwd_grad_kernel`, `_forward_grad`
and the chunk loop `_linear_ce_chunks` behind `fused_linear_cross_entropy` (Liger Kernel's idea:
Hsu et al. 2024, arXiv:2410.10989).

Precision, which the tests check at logits near 1e4 (fp32's spacing there is ~1e-3): keep every
quantity shifted by the row max m. loss = log d - (x_t - m) (label smoothing:
log d - (1 - eps)(x_t - m) - eps * mean_j (x_j - m)); every term is >= 0, so nothing cancels.
Store lse = m + log d in float64, and in the backward split it per row into fp32 hi + lo:
softmax = exp((x - hi) - lo). The solution's module docstring explains why.
"""
from __future__ import annotations

import math  # noqa: F401  (your _reduce needs math.nan)

import torch
import torch.nn.functional as F

from course import ops, runtime  # runtime before triton: GPU or interpreter
from course import validate

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TARGET_DTYPES = (torch.int64, torch.int32)
IGNORE_INDEX = -100
REDUCTIONS = ("mean", "sum", "none")
BLOCK_V = 4096
DEFAULT_CHUNK_BYTES = 256 << 20
MATMULS = ("torch", "triton")
REDUCE_BLOCK = 4096
NAMESPACE = ops.namespace(__name__)  # "course_exercises": beside the solution's "course"


# ----------------------------------------------------------------------------------- kernels
@triton.jit
def _to_acc(x, FP64: tl.constexpr):
    """x in the accumulation dtype: fp32, or fp64 when FP64."""
    # TODO (a static `if FP64:` may re-assign a value of another dtype)
    pass


@triton.jit
def _row_logsumexp(x_row, n_cols, FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """(m, log d, sum_j (x_j - m)) of one row in ONE read: m the row max, d = sum_j exp(x_j - m)."""
    # TODO: per lane, m <- max(m, x); d <- d * exp(m_old - m_new) + exp(x - m_new) (shift by 0
    # while a lane has seen only -inf); if SMOOTHING also s = sum of (x - m_lane) over the lane's
    # n elements: when m_lane rises, s += n * (m_old - m_new). At the end, with M = max of m:
    # log d = log(sum d * exp(m - M)), and sum (x - M) = sum (s + n * (m - M)). Return zeros for
    # the third value when not SMOOTHING.
    pass


@triton.jit
def _row_loss(x_row, target, valid, in_range, row_max, log_sum, shifted_sum, n_cols, coef_ptr,
              SMOOTHING: tl.constexpr):
    """log d - (x_t - m) (smoothed: - (1 - eps)(x_t - m) - eps mean(x - m)).

    NaN where not in_range, 0 where not valid.
    """
    # TODO: coef_ptr holds [1 - eps, eps, eps / V]; never load x[-100] or any target outside [0, V).
    pass


@triton.jit
def _write_row_grad(x_row, g_row, target, hi, lo, g, n_cols, coef_ptr,
                    SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """g_row[j] = (exp((x_j - hi) - lo) - y_j) * g with y the (smoothed) one-hot target; hi + lo = lse."""
    # TODO
    pass


@triton.jit
def cross_entropy_fwd_kernel(logits_ptr, targets_ptr, loss_ptr, lse_ptr, n_cols, row_stride,
                             ignore_index, coef_ptr, FP64: tl.constexpr, SMOOTHING: tl.constexpr,
                             STORE_LSE: tl.constexpr, BLOCK_V: tl.constexpr):
    """One program per row: store the row's loss and (if STORE_LSE) its logsumexp (float64: m + log d)."""
    # TODO
    pass


@triton.jit
def cross_entropy_bwd_kernel(logits_ptr, targets_ptr, lse_ptr, grad_ptr, dlogits_ptr, n_cols,
                             row_stride, dlogits_row_stride, grad_stride, ignore_index, coef_ptr,
                             FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """One program per row: dlogits = (softmax - y) * grad[row * grad_stride].

    0 on ignored rows, NaN on rows whose target is outside [0, V).
    """
    # TODO: split the float64 lse once: hi = lse in the accumulation dtype, lo = (lse - hi) in it.
    pass


@triton.jit
def cross_entropy_fwd_grad_kernel(logits_ptr, targets_ptr, loss_ptr, dlogits_ptr, scale_ptr, n_cols,
                                  row_stride, dlogits_row_stride, ignore_index, coef_ptr,
                                  FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """Loss AND gradient (times scale_ptr[0]) in one program; dlogits may be the logits buffer itself."""
    # TODO: read the target logit before the gradient sweep overwrites it (and say why a
    # barrier is needed between the two).
    pass


@triton.jit
def cross_entropy_reduce_kernel(loss_rows_ptr, targets_ptr, out_ptr, count_ptr, n_rows, ignore_index,
                                MEAN: tl.constexpr, STORE_COUNT: tl.constexpr, BLOCK: tl.constexpr):
    """One program: out = sum of the per-row losses (/ rows counted, for MEAN).

    count = rows counted (stored if STORE_COUNT): the divisor never leaves the device.
    """
    # TODO
    pass


# ------------------------------------------------------------------------------- launch plans
# Computed once per vocabulary size and kept: the hot path does a dict lookup, not Triton's
# jitted helpers (triton.next_power_of_2 and triton.cdiv cost ~2 us each from Python).
_PLANS: dict = {}
_COEFFICIENTS: dict = {}
_ONES: dict = {}


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (n >= 1), in plain Python."""
    return 1 << (n - 1).bit_length()


def _num_warps(block):
    return max(4, min(16, block // (32 * 16)))


def _plan(n_cols: int, block_v: int = BLOCK_V) -> tuple[int, int]:
    """(BLOCK_V, num_warps) for rows of n_cols classes: a block no wider than the row needs."""
    key = (n_cols, block_v)
    plan = _PLANS.get(key)
    if plan is None:
        block = min(block_v, max(16, next_power_of_2(n_cols)))
        plan = _PLANS[key] = (block, _num_warps(block))
    return plan


def _acc_torch(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _coefficients(label_smoothing: float, n_cols: int, acc: torch.dtype, device) -> torch.Tensor:
    """[1 - eps, eps, eps / V] in the accumulation dtype, made once per (eps, V, dtype, device).

    A tensor, not Python floats: Triton types float arguments as fp32, which would round 0.9 or
    1/V before an fp64 kernel ever sees them. Cached: building it per call is a host-to-device
    copy (~10 us) on every call.
    """
    key = (label_smoothing, n_cols, acc, device)
    coef = _COEFFICIENTS.get(key)
    if coef is None:
        eps = label_smoothing
        coef = _COEFFICIENTS[key] = torch.tensor([1.0 - eps, eps, eps / n_cols], dtype=acc, device=device)
    return coef


def _one(acc: torch.dtype, device) -> torch.Tensor:
    """A cached 1-element tensor holding 1 (the gradient scale of reduction "sum")."""
    key = (acc, device)
    one = _ONES.get(key)
    if one is None:
        one = _ONES[key] = torch.ones((), dtype=acc, device=device)
    return one


# ------------------------------------------------------------- the hot path (no checks here)
def _forward(logits, targets, ignore_index, label_smoothing, block_v=BLOCK_V, need_lse=True):
    """(loss per row, lse or None) of (N, V) logits with unit column stride: accumulation dtype, float64."""
    raise NotImplementedError("not implemented yet: _forward (week4 exercise)")


def _backward(grad, logits, targets, lse, ignore_index, label_smoothing, out=None, block_v=BLOCK_V):
    """dlogits = (softmax - y) * grad, grad a scalar or one value per row (any stride)."""
    raise NotImplementedError("not implemented yet: _backward (week4 exercise)")


def _forward_grad(logits, targets, loss, dlogits, scale, ignore_index, label_smoothing, block_v=BLOCK_V):
    """Per-row loss into `loss` and (softmax - y) * scale into `dlogits` (which may be `logits`)."""
    raise NotImplementedError("not implemented yet: _forward_grad (week4 exercise)")


def _reduce(loss_rows, targets, ignore_index, reduction, dtype, need_count=True):
    """(loss in `dtype`, rows counted or None): the reduction of the per-row losses, no host sync."""
    raise NotImplementedError("not implemented yet: _reduce (week4 exercise)")


def _linear_ce_chunks(h, weight, targets, ignore_index, reduction, label_smoothing, chunk_size, matmul,
                      need_dh, need_dw, block_v=BLOCK_V):
    """The chunk loop: (loss, dh or None, dW or None), the gradients for grad_output = 1."""
    raise NotImplementedError("not implemented yet: _linear_ce_chunks (week4 exercise)")


def _mm(a, b, out, matmul):
    if matmul == "triton":
        from week3_triton_kernels import matmul as week3_matmul  # fp16/bf16 tl.dot kernel of week 3
        return week3_matmul.matmul(a, b, out=out)
    return torch.mm(a, b, out=out)


def default_chunk_size(n_rows: int, n_classes: int, itemsize: int) -> int:
    """Rows per chunk so that the C x V logits buffer holds about DEFAULT_CHUNK_BYTES."""
    rows = max(1, DEFAULT_CHUNK_BYTES // max(1, n_classes * itemsize))
    if rows >= 128:
        rows -= rows % 128  # whole 128-row tiles for the chunk matmuls
    return max(1, min(rows, n_rows))


# ------------------------------------------------------------------------------ input checks
def _check_block(block_v):
    if isinstance(block_v, bool) or not isinstance(block_v, int) or block_v < 16 or block_v & (block_v - 1):
        raise ValueError(f"block_v must be a power of two >= 16, got {block_v!r}")


def _check_options(ignore_index, reduction, label_smoothing, allowed=REDUCTIONS):
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"ignore_index must be an int, got {ignore_index!r}")
    if reduction not in allowed:
        raise ValueError(f"reduction must be one of {list(allowed)}, got {reduction!r}")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) \
            or not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be a float in [0, 1], got {label_smoothing!r}")
    return float(label_smoothing)


def _check_targets(targets, n_rows, n_cols, ignore_index, name="targets"):
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


def _check_logits(logits, unit_stride=True):
    validate.tensor(logits, "logits", dtypes=DTYPES, ndim=2, contiguous=False)
    if unit_stride and logits.stride(-1) != 1 and logits.shape[1] > 1:
        raise ValueError(f"logits must have unit stride along the classes (strides {logits.stride()}): "
                         "pass .contiguous()")
    if logits.shape[1] == 0:
        raise ValueError("logits has 0 classes: cross-entropy needs at least one")


def _check_same_device(**tensors):
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        raise ValueError("tensors must be on one device: " + ", ".join(f"{k} on {v}" for k, v in devices.items()))


def check_call(logits, targets, ignore_index, reduction, label_smoothing) -> None:
    """The public entry's checks: a few comparisons per call; on failure, the course's messages."""
    if not (isinstance(logits, torch.Tensor) and isinstance(targets, torch.Tensor) and logits.dim() == 2
            and logits.dtype in DTYPES and logits.shape[1] > 0 and logits.device.type == runtime.DEVICE.type
            and targets.dtype in TARGET_DTYPES and targets.dim() == 1 and targets.shape[0] == logits.shape[0]
            and targets.device == logits.device):
        _check_logits(logits, unit_stride=False)
        validate.tensor(targets, "targets", dtypes=TARGET_DTYPES, ndim=1, contiguous=False)
        if targets.shape[0] != logits.shape[0]:
            raise ValueError(f"targets has {targets.shape[0]} elements; expected one per row ({logits.shape[0]})")
        _check_same_device(logits=logits, targets=targets)
    if not (type(ignore_index) is int and reduction in REDUCTIONS and type(label_smoothing) in (float, int)
            and 0.0 <= label_smoothing <= 1.0):
        _check_options(ignore_index, reduction, label_smoothing)


# ---------------------------------------------------------------------------------- launchers
def cross_entropy_forward(logits, targets, *, ignore_index=IGNORE_INDEX, label_smoothing=0.0, block_v=BLOCK_V):
    """Per-row loss (fp32, fp64 for fp64 logits) and logsumexp (float64); checks everything first."""
    raise NotImplementedError("not implemented yet: cross_entropy_forward (week4 exercise)")


def cross_entropy_backward(logits, targets, lse, grad, *, grad_scale=1.0, ignore_index=IGNORE_INDEX,
                           label_smoothing=0.0, out=None, block_v=BLOCK_V):
    """dlogits = (softmax(logits) - y) * grad * grad_scale; `grad` is per row (N,) or one scalar."""
    raise NotImplementedError("not implemented yet: cross_entropy_backward (week4 exercise)")


def cross_entropy_fwd_grad(logits, targets, *, ignore_index=IGNORE_INDEX, label_smoothing=0.0, grad_scale=1.0,
                           out=None, block_v=BLOCK_V):
    """(per-row loss, dlogits) from ONE kernel; `out=logits` writes the gradient in place."""
    raise NotImplementedError("not implemented yet: cross_entropy_fwd_grad (week4 exercise)")


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
    return logits.new_empty(rows, dtype=_acc_torch(logits.dtype)), logits.new_empty(rows, dtype=torch.float64)


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
class CrossEntropyFunction(torch.autograd.Function):
    """CE on given logits: the forward kernel saves lse (N values), the backward kernel recomputes softmax."""

    @staticmethod
    def forward(ctx, logits, targets, ignore_index, reduction, label_smoothing):
        loss_rows, lse = _forward(logits, targets, ignore_index, label_smoothing)
        loss, count = _reduce(loss_rows, targets, ignore_index, reduction, logits.dtype)
        ctx.save_for_backward(logits, targets, lse, count)
        ctx.options = (ignore_index, reduction, label_smoothing)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        logits, targets, lse, count = ctx.saved_tensors
        ignore_index, reduction, label_smoothing = ctx.options
        grad = grad_output / count if reduction == "mean" else grad_output  # the count never left the GPU
        return _backward(grad, logits, targets, lse, ignore_index, label_smoothing), None, None, None, None


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
    loss_rows = _forward(logits, targets, ignore_index, label_smoothing, need_lse=False)[0]
    return _reduce(loss_rows, targets, ignore_index, reduction, logits.dtype, need_count=False)[0]


def cross_entropy_torch(logits, targets, *, ignore_index=IGNORE_INDEX, reduction="mean", label_smoothing=0.0):
    """The reference, in float64, rounded once to the logits' dtype."""
    loss = F.cross_entropy(logits.double(), targets.long(), ignore_index=ignore_index, reduction=reduction,
                           label_smoothing=label_smoothing)
    return loss.to(logits.dtype)


# --------------------------------------------------------------------- fused linear + loss
def _check_linear(h, weight, targets, chunk_size, matmul):
    validate.tensor(h, "h", dtypes=DTYPES, contiguous=False)
    validate.tensor(weight, "weight", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.same_dtype(h=h, weight=weight)
    if h.dim() < 1 or h.shape[-1] != weight.shape[1]:
        raise ValueError(f"h's last dimension must equal weight's columns (the hidden size): "
                         f"h is {tuple(h.shape)}, weight is {tuple(weight.shape)} (V x d)")
    if weight.shape[0] == 0:
        raise ValueError("weight has 0 rows: cross-entropy needs at least one class")
    validate.tensor(targets, "targets", dtypes=TARGET_DTYPES, contiguous=False)
    if tuple(targets.shape) != tuple(h.shape[:-1]):
        raise ValueError(f"targets has shape {tuple(targets.shape)}; expected h's leading shape {tuple(h.shape[:-1])}")
    _check_same_device(h=h, weight=weight, targets=targets)
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int (rows per chunk) or None, got {chunk_size!r}")
    if matmul not in MATMULS:
        raise ValueError(f"matmul must be one of {list(MATMULS)}, got {matmul!r}")
    if matmul == "triton" and h.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"matmul='triton' (week 3's kernel) takes fp16/bf16, got {str(h.dtype).replace('torch.', '')}")


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
    label_smoothing = _check_options(ignore_index, reduction, label_smoothing, allowed=("mean", "sum"))
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


