"""Cross-entropy over a large vocabulary: an online-logsumexp kernel, then the fused linear + loss.

Its benchmarks, chunk-size sweep and command line: cross_entropy_bench.py (`python -m
week4_triton_dl.cross_entropy_bench --sweep`). Over 500 lines: two ops (the row loss and the fused
linear + loss), each with its kernels, launchers and custom-op and autograd glue.

A language model ends in logits = h @ W^T (h: N tokens x d, W: the LM head, V x d) and
loss = CE(logits, targets). With N = 8192 tokens and V = 128k classes the logits alone are
N * V * 2 bytes = 2 GiB in bf16, and eager PyTorch keeps several tensors of that size alive at
once (logits, log_softmax output, its gradient, the logits' gradient): the loss, not the
model, sets the peak memory of a training step.

What it teaches:
* `cross_entropy_fwd_kernel`: one program per row streams the row in BLOCK_V chunks with a
  running max m and running sum d (d <- d * exp(m - m') + sum exp(x - m'), the online softmax
  of week 3), so logsumexp(x) = m + log d takes ONE read of the row. Label smoothing also needs
  sum_j (x_j - m), accumulated in the same pass.
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

Precision at large logits (a finding of the course's audit: at logits of +-1e4 the first
version was 2.4% off torch). Computed as lse - x[target], the loss subtracts two numbers near
1e4 whose fp32 spacing is 2^-10 ~ 1e-3: a small loss (a confident, correct prediction) carries
an absolute error of that size. Every quantity is therefore kept SHIFTED by the row max m,
where it is small and exact:
  loss = log d - (x_t - m)                            (log d in [0, log V]; x_t - m <= 0, and
                                                       exact when x_t is within 2x of m)
  smoothed: log d - (1 - eps)(x_t - m) - eps * mean_j (x_j - m)
Every term is >= 0, so nothing cancels: the loss keeps fp32's relative precision at any
magnitude. sum_j (x_j - m) is accumulated shifted by each lane's running max (when that max
rises by delta, the n terms already summed each drop by delta: the additive twin of d's rescale).
The backward needs softmax = exp(x - lse) with lse = m + log d; one fp32 lse carries the same
1e-3 rounding at 1e4, so lse is stored in float64 (8 bytes a row, N of them) and each row splits
it once into fp32 hi + lo: exp((x - hi) - lo), where x - hi is exact near the max.

Cost model (N rows, V classes, d hidden, itemsize s):
* plain CE on given logits: forward reads N V s; backward reads N V s and writes N V s.
  ~5 FLOPs per element: memory-bound, the yardstick is % of copy bandwidth.
* fused linear CE: 3 matmuls, 6 N V d FLOPs (the same as torch's h @ W^T plus its two
  backward matmuls): at N = 8192, V = 128k, d = 4096 that is 26 TFLOP, ~40 ms at bf16 peak,
  so it is compute-bound and the aim is "no slower than torch" while using a fraction of the
  memory. Extra traffic it pays: the C x V chunk is read twice and written once by the kernel
  (3 N V s over all chunks, ~6 GB, ~2 ms), and dW (V d s) is read and written once per
  chunk by the accumulating matmul: (N / C) * 2 V d s, ~17 GB at C = 1024 (~6 ms). Larger
  chunks cost memory, smaller chunks cost dW traffic: `python -m week4_triton_dl.cross_entropy_bench
  --sweep` measures the trade. Eager torch pays its own extra traffic instead: ~8 passes over
  N x V tensors (log_softmax, its backward, the zero-filled one-hot gradient), ~17 GB.
* memory above the inputs (h, W, targets), torch eager: 3 N V s at its peak (log-probabilities,
  their gradient and the logits' gradient, alive together in the backward; 5.9 GiB here);
  fused: V d s (dW) + C V s (the buffer) + N d s (dh): 1.3 GiB at C = 1024.

As a PyTorch op (the second half of the file). `cross_entropy` and `fused_linear_cross_entropy`
are what a model calls. In eager mode they run `CrossEntropyFunction` /
`FusedLinearCrossEntropyFunction` (autograd.Functions: ~8 us cheaper per call than a custom op's
dispatch, see course/ops.py), or the bare launches when nothing needs a gradient; under
torch.compile they go through the registered ops `torch.ops.course.cross_entropy_rows` (+ its
backward op; the reduction stays torch code, which Inductor fuses) and
`torch.ops.course.fused_linear_cross_entropy`, so a model using them compiles with no graph
break (`custom_ops.py` is the lesson on how). What keeps a call cheap: launch settings and the
smoothing coefficients are computed once per vocabulary size and cached; the losses, their sum
and the mean's divisor come from one launch (`cross_entropy_fwd_reduce_kernel`: the last row
program to finish sums the rows and counts the kept ones, on the device), so the public entries
launch one kernel and never synchronise with the GPU. That has a consequence: a target outside
[0, V) cannot raise an exception without a host sync, so the kernels never read it (no
out-of-bounds access) and that row's loss and gradient are NaN (torch stops the whole CUDA
context with a device-side assert instead); the launchers (`cross_entropy_forward`, ...) check
the targets with one sync and raise. The benchmarks `cross_entropy_train_week4` and
`fused_linear_ce_train_week4` time forward + backward through these entries (autograd and every
launch included) beside `F.cross_entropy(logits.float(), t)` as training code writes it, eager
and compiled, with peak memory; `cross_entropy_host_week4` is the host's cost per call at a
decode-step size (8 x 50304), where the GPU work is a few microseconds.

Arithmetic is fp32 for fp16/bf16/fp32 logits (fp64 for fp64, so gradcheck can run); the
loss is returned in the logits' dtype, as torch does. reduction "mean" divides by the number
of rows whose target is not ignore_index (NaN when there are none, as in torch).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course import ops, runtime  # runtime before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.launch import current_stream, launch, stream_capturing  # stream getters: torch's C ones
from course.runtime import ON_GPU

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
# The reduction kernel: one program sums the per-row losses REDUCE_BLOCK at a time (8192 rows
# are 2 steps: one program's loop is latency-bound, ~1 us a step, so few wide steps).
REDUCE_BLOCK = 4096
# "mean" and "sum" take one launch (cross_entropy_fwd_reduce_kernel: the last program to finish
# reduces) instead of two. False: always two launches (the tests compare both paths). While a
# CUDA graph is being captured the two-launch path is taken too: the one-launch path keeps a
# counter per stream, and two graphs replayed at once on two streams would share it.
ONE_LAUNCH_REDUCTION = True
NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)
# EXERCISE NOTE: Suggested order: `_row_logsumexp` and `_row_loss` with `cross_entropy_fwd_kernel` and
#   `_forward` (then `cross_entropy(..., reduction="none")` and `cross_entropy_forward` run); `_sum_rows`,
#   `_reduce` and the last-program reduction of `cross_entropy_fwd_reduce_kernel` with `_forward_reduced`
#   ("mean" and "sum" in one launch); `_write_row_grad` with `cross_entropy_bwd_kernel` and `_backward`
#   (then with autograd); then `cross_entropy_fwd_grad_kernel`, `_forward_grad` and the chunk loop
#   `_linear_ce_chunks` behind `fused_linear_cross_entropy` (Liger Kernel's idea: Hsu et al. 2024,
#   arXiv:2410.10989). Given: launch plans, cached coefficients, the scratch counter, the checked
#   launchers, the registered ops (custom_ops.py's lesson; read them as its worked example), the
#   autograd.Functions and the public entries, which call your hot path.
# EXERCISE NOTE: Precision, which the tests check at logits near 1e4 (fp32's spacing there is ~1e-3): keep
#   every quantity shifted by the row max m: loss = log d - (x_t - m), every term >= 0, so nothing cancels.
#   Store lse = m + log d in float64, and in the backward split it per row into hi + lo of the accumulation
#   dtype: softmax = exp((x - hi) - lo). The module docstring of the solution says why.


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
    """(m, log d, sum_j (x_j - m)) of one row in ONE read: m the row max, d = sum_j exp(x_j - m).

    logsumexp = m + log d; the third value (for label smoothing) is 0 unless SMOOTHING.
    """
    # BEGIN EXERCISE: per lane (vectors of BLOCK_V in the accumulation dtype: _to_acc): running max m, running sum d,
    #   and for SMOOTHING the shifted x-sum s and count n; for each masked chunk (other=-inf): m_new = max(m, x),
    #   shift by m_new (by 0 where it is -inf: -inf - -inf is NaN), d = d * exp(m - shift) + exp(x - shift);
    #   then row_max = max of m, log_sum = log(sum of d * exp(m - row_max)), shifted_sum = sum_j (x_j - row_max)
    #   (0 without SMOOTHING); return the three
    cols = tl.arange(0, BLOCK_V)
    # Per-lane running max, sum, shifted x-sum and count: no cross-lane reduction inside the loop.
    m = _to_acc(tl.full([BLOCK_V], -float("inf"), tl.float32), FP64)
    d = _to_acc(tl.zeros([BLOCK_V], tl.float32), FP64)
    s = _to_acc(tl.zeros([BLOCK_V], tl.float32), FP64)
    n = _to_acc(tl.zeros([BLOCK_V], tl.float32), FP64)
    for start in range(0, n_cols, BLOCK_V):
        offs = start + cols
        mask = offs < n_cols
        x = _to_acc(tl.load(x_row + offs, mask=mask, other=-float("inf")), FP64)
        m_new = tl.maximum(m, x)
        # A lane that has seen only -inf keeps m = -inf; shifting by -inf would make
        # -inf - -inf = NaN, so shift by 0 there (its terms are exp(-inf) = 0 anyway).
        shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        d = d * tl.exp(m - shift) + tl.exp(x - shift)
        if SMOOTHING:
            # s = sum of (x - shift) over this lane's n elements so far, every term <= 0. When the
            # lane's max rises, each of the n terms drops by the rise: s + n * (old - new shift).
            s += n * (tl.where(m == -float("inf"), 0.0, m) - shift) + tl.where(mask, x - shift, 0.0)
            n += tl.where(mask, 1.0, 0.0)
        m = m_new
    row_max = tl.max(m, axis=0)
    # NaN anywhere, +inf, or an all -inf row give NaN here: what torch's log_softmax gives.
    log_sum = tl.log(tl.sum(d * tl.exp(m - row_max), axis=0))
    if SMOOTHING:
        # Each lane's terms moved from its own max to the row's: n * (m_lane - row_max) more, <= 0.
        lane = s + tl.where(n > 0, n * (tl.where(m == -float("inf"), 0.0, m) - row_max), 0.0)
        shifted_sum = tl.sum(lane, axis=0)
    else:
        shifted_sum = tl.zeros_like(log_sum)
    return row_max, log_sum, shifted_sum
    # END EXERCISE


@triton.jit
def _row_loss(x_row, target, valid, in_range, row_max, log_sum, shifted_sum, n_cols, coef_ptr,
              SMOOTHING: tl.constexpr):
    """The row's loss from its shifted statistics: every term >= 0, so nothing cancels."""
    # BEGIN EXERCISE: x_t read at the target (column 0 for an ignored or out-of-range target: never a wild read),
    #   shifted: t_shift = x_t - row_max; loss = log_sum - t_shift, or with SMOOTHING log_sum - (1 - eps) t_shift
    #   - eps shifted_sum / n_cols (coef_ptr holds [1 - eps, eps, eps / V]); NaN where the target is out of
    #   range, 0 where ignored
    # An ignored row's target (-100) is no address, nor is a target outside [0, V): read column 0
    # instead, and discard it.
    x_t = tl.load(x_row + tl.where(valid & in_range, target, 0)).to(row_max.dtype)
    # x_t - m <= 0, exact when x_t is within a factor 2 of m (Sterbenz), one rounding otherwise.
    t_shift = x_t - row_max
    if SMOOTHING:
        # (1 - eps)(lse - x_t) + eps (lse - mean_j x_j), torch's label smoothing, written shifted.
        loss = log_sum - tl.load(coef_ptr) * t_shift - tl.load(coef_ptr + 1) * (shifted_sum / n_cols)
    else:
        loss = log_sum - t_shift
    loss = tl.where(in_range, loss, float("nan"))  # a target outside [0, V): NaN, not a wild read
    return tl.where(valid, loss, 0.0)
    # END EXERCISE


@triton.jit
def _write_row_grad(x_row, g_row, target, hi, lo, g, n_cols, coef_ptr,
                    SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """g_row[j] = (softmax(x)_j - y_j) * g, softmax = exp((x - hi) - lo) with hi + lo = lse."""
    # BEGIN EXERCISE: chunk by chunk: p = exp((x - hi) - lo), y = 1 - eps at the target (+ eps / V everywhere with
    #   SMOOTHING), g_row = (p - y) * g stored masked in g_row's dtype
    cols = tl.arange(0, BLOCK_V)
    on_target = tl.load(coef_ptr)        # 1 - eps
    off_target = tl.load(coef_ptr + 2)   # eps / V
    for start in range(0, n_cols, BLOCK_V):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(hi.dtype)
        # x - hi is exact near the max (Sterbenz), where softmax is large; far below it, the
        # rounding of x - hi moves exp by a relative |x - hi| * 2^-24 of a value ~exp(x - hi).
        p = tl.exp((x - hi) - lo)
        y = tl.where(offs == target, on_target, 0.0)
        if SMOOTHING:
            y += off_target
        # g = 0 on ignored rows: their gradient is 0 (NaN if the row holds NaN, as in torch).
        tl.store(g_row + offs, ((p - y) * g).to(g_row.dtype.element_ty), mask=mask)
    # END EXERCISE


@triton.jit
def cross_entropy_fwd_kernel(logits_ptr, targets_ptr, loss_ptr, lse_ptr, n_cols, row_stride,
                             ignore_index, coef_ptr, FP64: tl.constexpr, SMOOTHING: tl.constexpr,
                             STORE_LSE: tl.constexpr, BLOCK_V: tl.constexpr):
    # BEGIN EXERCISE: one program per row (an int64 row index: row * stride passes 2^31); the target, valid (not
    #   ignore_index) and in range; _row_logsumexp, then the row's loss (_row_loss) stored; with STORE_LSE,
    #   lse = row_max + log_sum added in float64 (exact) and stored
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride passes 2^31 at 8192 x 128k
    x_row = logits_ptr + row * row_stride
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target != ignore_index
    in_range = (target >= 0) & (target < n_cols)
    row_max, log_sum, shifted_sum = _row_logsumexp(x_row, n_cols, FP64, SMOOTHING, BLOCK_V)
    tl.store(loss_ptr + row, _row_loss(x_row, target, valid, in_range, row_max, log_sum, shifted_sum,
                                       n_cols, coef_ptr, SMOOTHING))
    if STORE_LSE:  # only a backward needs it: without one, neither the store nor the buffer
        # lse = m + log d in float64, where the sum of two fp32 values is exact: the backward's
        # softmax then keeps fp32 precision at any magnitude (see the module docstring).
        tl.store(lse_ptr + row, row_max.to(tl.float64) + log_sum.to(tl.float64))
    # END EXERCISE


@triton.jit
def cross_entropy_bwd_kernel(logits_ptr, targets_ptr, lse_ptr, grad_ptr, dlogits_ptr, n_cols,
                             row_stride, dlogits_row_stride, grad_stride, ignore_index, coef_ptr,
                             FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    # BEGIN EXERCISE: split the float64 lse once: hi = lse in the accumulation dtype, lo = (lse - hi) in it; the incoming
    #   gradient g read at row * grad_stride (0: one scalar for every row), NaN for an out-of-range target, 0
    #   for an ignored row; then _write_row_grad
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(targets_ptr + row).to(tl.int64)
    # The float64 lse, split once per row into hi + lo of the accumulation dtype (lo = 0 in fp64).
    lse = tl.load(lse_ptr + row)
    hi = _to_acc(lse, FP64)
    lo = _to_acc(lse - hi.to(tl.float64), FP64)
    # The incoming gradient is read on the device (no host sync to learn its value); grad_stride
    # is 0 for one scalar shared by every row, or the stride of a per-row gradient (reduction
    # "none"; an expanded one has stride 0 too, and is read without being copied).
    g = tl.load(grad_ptr + row * grad_stride).to(hi.dtype)
    g = tl.where((target >= 0) & (target < n_cols), g, float("nan"))
    g = tl.where(target != ignore_index, g, 0.0)
    _write_row_grad(logits_ptr + row * row_stride, dlogits_ptr + row * dlogits_row_stride, target, hi, lo, g,
                    n_cols, coef_ptr, SMOOTHING, BLOCK_V)
    # END EXERCISE


@triton.jit
def cross_entropy_fwd_grad_kernel(logits_ptr, targets_ptr, loss_ptr, dlogits_ptr, scale_ptr, n_cols,
                                  row_stride, dlogits_row_stride, ignore_index, coef_ptr,
                                  FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    # Loss and gradient in one program: the second sweep over the row (often still in L2)
    # replaces a whole backward kernel, and dlogits may be the logits buffer itself.
    # BEGIN EXERCISE: the forward kernel's loss, then the gradient from the same registers: g = the scale read on the
    #   device (NaN for an out-of-range target, 0 for an ignored row) and _write_row_grad with hi = row_max,
    #   lo = log_sum. dlogits may be the logits buffer: every warp must have read x[target] before any writes
    #   it (and say why in a comment)
    row = tl.program_id(0).to(tl.int64)
    x_row = logits_ptr + row * row_stride
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target != ignore_index
    in_range = (target >= 0) & (target < n_cols)
    row_max, log_sum, shifted_sum = _row_logsumexp(x_row, n_cols, FP64, SMOOTHING, BLOCK_V)
    tl.store(loss_ptr + row, _row_loss(x_row, target, valid, in_range, row_max, log_sum, shifted_sum,
                                       n_cols, coef_ptr, SMOOTHING))
    # In place, the sweep below overwrites x[target]: every warp must have read it first. Warps
    # run independently, so a barrier orders "all reads of x[target]" before "any write".
    tl.debug_barrier()
    # d(scale * sum of losses)/dx; scale (1 / rows counted, or 1) is read on the device.
    g = tl.where(in_range, tl.load(scale_ptr).to(row_max.dtype), float("nan"))
    g = tl.where(valid, g, 0.0)
    # m and log d are still in registers: softmax = exp((x - m) - log d), the shifted form.
    _write_row_grad(x_row, dlogits_ptr + row * dlogits_row_stride, target, row_max, log_sum, g, n_cols,
                    coef_ptr, SMOOTHING, BLOCK_V)
    # END EXERCISE


@triton.jit
def _sum_rows(loss_rows_ptr, targets_ptr, n_rows, ignore_index, BLOCK: tl.constexpr):
    """(sum of the per-row losses, rows counted), BLOCK rows a step, always in the same order."""
    # BEGIN EXERCISE: BLOCK rows a step, in order: the masked per-row losses added into a [BLOCK] vector (read with
    #   cache_modifier=".cg": from L2, which other programs' stores reach; an SM's L1 is not kept coherent),
    #   and 1 for each target that is not ignore_index into another; return both summed
    offs = tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], loss_rows_ptr.dtype.element_ty)
    count = tl.zeros([BLOCK], loss_rows_ptr.dtype.element_ty)
    for start in range(0, n_rows, BLOCK):
        idx = start + offs
        mask = idx < n_rows
        # .cg: read from L2, never from this SM's L1, which is not kept coherent with the stores
        # other programs of the same launch made (cross_entropy_fwd_reduce_kernel).
        total += tl.load(loss_rows_ptr + idx, mask=mask, other=0.0, cache_modifier=".cg")
        t = tl.load(targets_ptr + idx, mask=mask, other=ignore_index)
        count += tl.where(t != ignore_index, 1.0, 0.0)
    return tl.sum(total, axis=0), tl.sum(count, axis=0)
    # END EXERCISE


@triton.jit
def cross_entropy_reduce_kernel(loss_rows_ptr, targets_ptr, out_ptr, count_ptr, n_rows, ignore_index,
                                MEAN: tl.constexpr, STORE_COUNT: tl.constexpr, BLOCK: tl.constexpr):
    """One program: out = sum of the per-row losses (/ rows counted, for MEAN), count = rows counted.

    One launch instead of torch's four (compare, count, sum, divide), and no host sync: the
    divisor is counted here, on the device. 0 / 0 = NaN when every row is ignored, as in torch.
    """
    result, counted = _sum_rows(loss_rows_ptr, targets_ptr, n_rows, ignore_index, BLOCK)
    if MEAN:
        result = result / counted
    tl.store(out_ptr, result.to(out_ptr.dtype.element_ty))
    if STORE_COUNT:  # for a backward (the mean's gradient divides by it)
        tl.store(count_ptr, counted)


@triton.jit
def cross_entropy_fwd_reduce_kernel(logits_ptr, targets_ptr, loss_rows_ptr, lse_ptr, out_ptr, count_ptr, ticket_ptr,
                                    n_rows, n_cols, row_stride, ignore_index, coef_ptr, FP64: tl.constexpr,
                                    SMOOTHING: tl.constexpr, STORE_LSE: tl.constexpr, MEAN: tl.constexpr,
                                    BLOCK_V: tl.constexpr, BLOCK: tl.constexpr):
    """cross_entropy_fwd_kernel and cross_entropy_reduce_kernel in ONE launch, for "mean" and "sum".

    Each program writes its row's loss, then takes a ticket (an atomic counter). The program that
    draws the last ticket knows every other row's loss is written: it sums them in row order
    (the same order, so the same bits, as the two-launch path) and sets the counter back to 0
    for the next call. One launch saves the host ~8 us on the H100 machine, most of a small call.
    """
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride passes 2^31 at 8192 x 128k
    x_row = logits_ptr + row * row_stride
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target != ignore_index
    in_range = (target >= 0) & (target < n_cols)
    row_max, log_sum, shifted_sum = _row_logsumexp(x_row, n_cols, FP64, SMOOTHING, BLOCK_V)
    tl.store(loss_rows_ptr + row, _row_loss(x_row, target, valid, in_range, row_max, log_sum, shifted_sum,
                                            n_cols, coef_ptr, SMOOTHING))
    if STORE_LSE:
        tl.store(lse_ptr + row, row_max.to(tl.float64) + log_sum.to(tl.float64))
    # BEGIN EXERCISE: every thread's stores before the ticket (tl.debug_barrier), then ticket = tl.atomic_add(ticket_ptr, 1,
    #   sem="acq_rel", scope="gpu"); the program that draws n_rows - 1 sums the rows (_sum_rows), divides for
    #   MEAN, stores out (and count with STORE_LSE) and sets the counter back to 0
    # Every thread's store happens before the ticket (the barrier), and the ticket is a release:
    # whoever draws the last one sees all the stores (the acquire half). The pattern of CUDA's
    # "threadFenceReduction" sample, with the fence folded into the atomic's semantics.
    tl.debug_barrier()
    ticket = tl.atomic_add(ticket_ptr, 1, sem="acq_rel", scope="gpu")
    if ticket == n_rows - 1:
        result, counted = _sum_rows(loss_rows_ptr, targets_ptr, n_rows, ignore_index, BLOCK)
        if MEAN:
            result = result / counted  # 0 / 0 = NaN when every row is ignored, as in torch
        tl.store(out_ptr, result.to(out_ptr.dtype.element_ty))
        if STORE_LSE:
            tl.store(count_ptr, counted)
        tl.atomic_xchg(ticket_ptr, 0, sem="relaxed", scope="gpu")  # ready for the next call on this stream
    # END EXERCISE


# ------------------------------------------------------------------------------- launch plans
# Computed once per vocabulary size and kept: the hot path does a dict lookup, not Triton's
# jitted helpers (triton.next_power_of_2 and triton.cdiv cost ~2 us each from Python).
_PLANS: dict = {}
_COEFFICIENTS: dict = {}
_ONES: dict = {}
_SCRATCH: dict = {}


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
    1/V before an fp64 kernel ever sees them. Cached: built per call, it would cost a
    host-to-device copy on every call.
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
    # BEGIN EXERCISE: loss (n_rows, accumulation dtype) and, with need_lse, lse (float64) allocated; nothing to launch
    #   for 0 rows; _plan(n_cols, block_v) gives BLOCK_V and num_warps; one launch of cross_entropy_fwd_kernel
    #   per row through course.launch, with a key that pins every specialization (dtypes, ints, constexprs);
    #   without need_lse pass the loss buffer as lse_ptr (it is never written)
    n_rows, n_cols = logits.shape
    acc = _acc_torch(logits.dtype)
    loss = torch.empty(n_rows, dtype=acc, device=logits.device)
    lse = torch.empty(n_rows, dtype=torch.float64, device=logits.device) if need_lse else None
    if n_rows == 0:
        return loss, lse
    # END EXERCISE
    block, num_warps = _plan(n_cols, block_v)
    row_stride, smoothing = logits.stride(0), label_smoothing > 0
    # The key pins what the compiled kernel is specialized on (course.launch): dtypes, the int
    # arguments' values, the constexprs.
    key = (logits.dtype, targets.dtype, n_cols, row_stride, ignore_index, smoothing, need_lse, block)
    launch(cross_entropy_fwd_kernel, (n_rows,), key,
           (logits, targets, loss, loss if lse is None else lse, n_cols, row_stride, ignore_index,
            _coefficients(label_smoothing, n_cols, acc, logits.device), acc == torch.float64, smoothing,
            need_lse, block), num_warps=num_warps)
    return loss, lse


def _backward(grad, logits, targets, lse, ignore_index, label_smoothing, out=None, block_v=BLOCK_V):
    """dlogits = (softmax - y) * grad, grad a scalar or one value per row (any stride)."""
    # BEGIN EXERCISE: dlogits (or out) of the logits' shape and dtype; nothing to launch for 0 rows; grad's stride 0 for a
    #   scalar; cross_entropy_bwd_kernel, one program per row, through course.launch
    n_rows, n_cols = logits.shape
    dlogits = torch.empty((n_rows, n_cols), dtype=logits.dtype, device=logits.device) if out is None else out
    if n_rows == 0:
        return dlogits
    # END EXERCISE
    block, num_warps = _plan(n_cols, block_v)
    acc = _acc_torch(logits.dtype)
    row_stride, out_stride, grad_stride = logits.stride(0), dlogits.stride(0), grad.stride(0) if grad.dim() else 0
    smoothing = label_smoothing > 0
    key = (logits.dtype, targets.dtype, grad.dtype, dlogits.dtype, n_cols, row_stride, out_stride, grad_stride,
           ignore_index, smoothing, block)
    launch(cross_entropy_bwd_kernel, (n_rows,), key,
           (logits, targets, lse, grad, dlogits, n_cols, row_stride, out_stride, grad_stride, ignore_index,
            _coefficients(label_smoothing, n_cols, acc, logits.device), acc == torch.float64, smoothing, block),
           num_warps=num_warps)
    return dlogits


def _forward_grad(logits, targets, loss, dlogits, scale, ignore_index, label_smoothing, block_v=BLOCK_V):
    """Per-row loss into `loss` and (softmax - y) * scale into `dlogits` (which may be `logits`)."""
    # BEGIN EXERCISE: nothing to launch for 0 rows; cross_entropy_fwd_grad_kernel, one program per row (a plain launch is
    #   fine: it runs once per chunk of a large batch)
    n_rows, n_cols = logits.shape
    if n_rows == 0:
        return loss, dlogits
    # END EXERCISE
    block, num_warps = _plan(n_cols, block_v)
    acc = _acc_torch(logits.dtype)
    cross_entropy_fwd_grad_kernel[(n_rows,)](logits, targets, loss, dlogits, scale, n_cols, logits.stride(0),
                                             dlogits.stride(0), ignore_index,
                                             _coefficients(label_smoothing, n_cols, acc, logits.device),
                                             FP64=acc == torch.float64, SMOOTHING=label_smoothing > 0,
                                             BLOCK_V=block, num_warps=num_warps)
    return loss, dlogits


def _reduce(loss_rows, targets, ignore_index, reduction, dtype, need_count=True):
    """(loss in `dtype`, rows counted or None): the reduction of the per-row losses, no host sync."""
    # BEGIN EXERCISE: "none": the rows in `dtype`; else a 0-d out (and a count when need_count); no rows: out is 0 (sum) or
    #   NaN (mean, 0 / 0 as torch) without a launch; else ONE program of cross_entropy_reduce_kernel
    #   (REDUCE_BLOCK rows a step) through course.launch. No host sync anywhere
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


def _scratch(logits, n_rows: int, acc: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
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
    # BEGIN EXERCISE: the counter and loss buffer from _scratch; a 0-d out in the logits' dtype; lse (float64, n_rows) and a
    #   0-d count in the accumulation dtype when need_lse; one launch of cross_entropy_fwd_reduce_kernel (grid:
    #   one program per row) through course.launch, keyed like _forward's plus the reduction
    n_rows, n_cols = logits.shape
    acc = _acc_torch(logits.dtype)
    device = logits.device
    ticket, loss_rows = _scratch(logits, n_rows, acc)
    out = torch.empty((), dtype=logits.dtype, device=device)
    lse = torch.empty(n_rows, dtype=torch.float64, device=device) if need_lse else None
    count = torch.empty((), dtype=acc, device=device) if need_lse else None
    block, num_warps = _plan(n_cols, block_v)
    row_stride, smoothing, mean = logits.stride(0), label_smoothing > 0, reduction == "mean"
    key = (logits.dtype, targets.dtype, n_rows, n_cols, row_stride, ignore_index, smoothing, need_lse, mean, block)
    launch(cross_entropy_fwd_reduce_kernel, (n_rows,), key,
           (logits, targets, loss_rows, out if lse is None else lse, out, out if count is None else count,
            ticket, n_rows, n_cols, row_stride, ignore_index,
            _coefficients(label_smoothing, n_cols, acc, device), acc == torch.float64, smoothing, need_lse, mean,
            block, REDUCE_BLOCK), num_warps=num_warps)
    return out, lse, count
    # END EXERCISE


def _one_launch(logits, reduction) -> bool:
    return (ONE_LAUNCH_REDUCTION and reduction != "none" and logits.shape[0] > 0
            and not (ON_GPU and stream_capturing()))


def _linear_ce_chunks(h, weight, targets, ignore_index, reduction, label_smoothing, chunk_size, matmul,
                      need_dh, need_dw, block_v=BLOCK_V):
    """The chunk loop: (loss, dh or None, dW or None), the gradients for grad_output = 1."""
    # BEGIN EXERCISE: per-row losses, dh (if needed), dW zeros (if needed); one C x V logits buffer reused by every chunk
    #   (C from chunk_size or default_chunk_size); the mean's scale 1 / (rows counted) made on the device; per
    #   chunk: logits = h_c @ W^T (_mm), then without gradients the forward kernel only, else _forward_grad in
    #   place (the logits become dlogits), dh_c = dlogits @ W, dW += dlogits^T @ h_c; finally _reduce
    n_rows, n_cols = h.shape[0], weight.shape[0]
    acc = _acc_torch(h.dtype)
    loss_rows = torch.empty(n_rows, dtype=acc, device=h.device)
    dh = torch.empty(h.shape, dtype=h.dtype, device=h.device) if need_dh else None
    dw = torch.zeros(weight.shape, dtype=weight.dtype, device=weight.device) if need_dw else None
    if n_rows == 0:
        return _reduce(loss_rows, targets, ignore_index, reduction, h.dtype, need_count=False)[0], dh, dw
    # END EXERCISE
    chunk = max(1, min(chunk_size or default_chunk_size(n_rows, n_cols, h.element_size()), n_rows))
    # One buffer, reused by every chunk: the allocator sees C x V once, never N x V.
    buffer = torch.empty((chunk, n_cols), dtype=h.dtype, device=h.device)
    want_grad = need_dh or need_dw
    if want_grad:
        # d mean / d loss_i = 1 / (rows counted): counted on the device, no host sync.
        scale = (targets != ignore_index).sum(dtype=acc).reciprocal() if reduction == "mean" else _one(acc, h.device)
    for start in range(0, n_rows, chunk):
        stop = min(start + chunk, n_rows)
        h_c, logits = h[start:stop], buffer[: stop - start]
        _mm(h_c, weight.t(), logits, matmul)
        if not want_grad:
            block, num_warps = _plan(n_cols, block_v)
            cross_entropy_fwd_kernel[(stop - start,)](
                logits, targets[start:stop], loss_rows[start:stop], loss_rows, n_cols, n_cols, ignore_index,
                _coefficients(label_smoothing, n_cols, acc, h.device), FP64=acc == torch.float64,
                SMOOTHING=label_smoothing > 0, STORE_LSE=False, BLOCK_V=block, num_warps=num_warps)
            continue
        # The logits become d loss / d logits in place: nobody else holds this buffer.
        _forward_grad(logits, targets[start:stop], loss_rows[start:stop], logits, scale, ignore_index,
                      label_smoothing, block_v)
        if need_dh:
            _mm(logits, weight, dh[start:stop], matmul)
        if need_dw:
            # dW += dlogits^T @ h_c, accumulated in W's dtype: for bf16 that is one rounding per
            # chunk (N / C of them) where torch rounds once; an fp32 accumulator would double
            # dW's memory (and torch.addmm_ takes no mixed dtypes on every backend).
            dw.addmm_(logits.t(), h_c)
    return _reduce(loss_rows, targets, ignore_index, reduction, h.dtype, need_count=False)[0], dh, dw


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
            and logits.dtype in DTYPES and logits.shape[1] > 0
            and logits.is_cuda == ON_GPU and logits.is_cpu != ON_GPU  # (a meta tensor is neither)
            and targets.dtype in TARGET_DTYPES and targets.dim() == 1 and targets.shape[0] == logits.shape[0]
            and targets.get_device() == logits.get_device()):  # get_device(): an int, no device object
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
    """Per-row loss (fp32, fp64 for fp64 logits) and logsumexp (float64): the kernel, no reduction.

    logits: (N, V), rows at any stride, classes at unit stride. The launcher checks everything,
    the target values included (one host sync), and raises before launching.
    """
    _check_logits(logits)
    label_smoothing = _check_options(ignore_index, "none", label_smoothing)
    _check_targets(targets, *logits.shape, ignore_index)
    _check_same_device(logits=logits, targets=targets)
    _check_block(block_v)
    return _forward(logits, targets, ignore_index, label_smoothing, block_v)


def cross_entropy_backward(logits, targets, lse, grad, *, grad_scale=1.0, ignore_index=IGNORE_INDEX,
                           label_smoothing=0.0, out=None, block_v=BLOCK_V):
    """dlogits = (softmax(logits) - y) * grad * grad_scale; `grad` is per row (N,) or one scalar.

    lse: the float64 logsumexp `cross_entropy_forward` returned.
    """
    _check_logits(logits)
    label_smoothing = _check_options(ignore_index, "none", label_smoothing)
    n_rows, n_cols = logits.shape
    _check_targets(targets, n_rows, n_cols, ignore_index)
    validate.tensor(lse, "lse", dtypes=(torch.float64,), ndim=1)
    if lse.shape[0] != n_rows:
        raise ValueError(f"lse has {lse.shape[0]} elements; expected one per row ({n_rows})")
    validate.tensor(grad, "grad", dtypes=DTYPES, contiguous=False)
    if grad.numel() not in (1, n_rows) or grad.dim() > 1:
        raise ValueError(f"grad must be a scalar or have one element per row ({n_rows}), got {tuple(grad.shape)}")
    _check_same_device(logits=logits, targets=targets, lse=lse, grad=grad)
    _check_block(block_v)
    out = validate.output(out, logits, "out")
    grad = grad.reshape(()) if grad.numel() == 1 and n_rows != 1 else grad
    if grad_scale != 1.0:
        grad = grad.to(_acc_torch(logits.dtype)) * grad_scale
    return _backward(grad, logits, targets, lse, ignore_index, label_smoothing, out=out, block_v=block_v)


def cross_entropy_fwd_grad(logits, targets, *, ignore_index=IGNORE_INDEX, label_smoothing=0.0, grad_scale=1.0,
                           out=None, block_v=BLOCK_V):
    """(per-row loss, dlogits) from ONE kernel: dlogits = d(grad_scale * sum_i loss_i)/d logits.

    `out=logits` writes the gradient over the logits, in place (the fused linear loss does that
    with each chunk); otherwise `out` (or a new tensor) receives it.
    """
    _check_logits(logits)
    label_smoothing = _check_options(ignore_index, "none", label_smoothing)
    _check_targets(targets, *logits.shape, ignore_index)
    _check_same_device(logits=logits, targets=targets)
    _check_block(block_v)
    if not isinstance(grad_scale, (int, float)) or isinstance(grad_scale, bool):
        raise TypeError(f"grad_scale must be a float, got {grad_scale!r}")
    if out is not logits:
        out = validate.output(out, logits, "out")
    acc = _acc_torch(logits.dtype)
    loss = torch.empty(logits.shape[0], dtype=acc, device=logits.device)
    scale = torch.full((), float(grad_scale), dtype=acc, device=logits.device)
    return _forward_grad(logits, targets, loss, out, scale, ignore_index, label_smoothing, block_v)


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
        if _one_launch(logits, reduction):  # the losses and their reduction in one launch
            loss, lse, count = _forward_reduced(logits, targets, ignore_index, label_smoothing, reduction, True)
        else:
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
    if _one_launch(logits, reduction):
        return _forward_reduced(logits, targets, ignore_index, label_smoothing, reduction, False)[0]
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


# ------------------------------------------------------------------------- the code behind each entry
# What `cross_entropy` and `fused_linear_cross_entropy` run, kernels to autograd: the benchmarks
# (cross_entropy_bench.py) count its lines beside each variant (`Benchmark.sources`).
CROSS_ENTROPY_CODE = (cross_entropy_fwd_reduce_kernel, cross_entropy_bwd_kernel, _sum_rows, _row_logsumexp, _row_loss,
                      _write_row_grad, _forward_reduced, _scratch, _backward, CrossEntropyFunction.forward,
                      CrossEntropyFunction.backward, cross_entropy)
FUSED_LINEAR_CE_CODE = (cross_entropy_fwd_grad_kernel, _row_logsumexp, _row_loss, _write_row_grad,
                        cross_entropy_reduce_kernel, _forward_grad, _reduce, _linear_ce_chunks,
                        FusedLinearCrossEntropyFunction.forward, FusedLinearCrossEntropyFunction.backward,
                        fused_linear_cross_entropy)
