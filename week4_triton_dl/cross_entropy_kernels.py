"""Cross-entropy's kernels: the loss in one read of each logits row, its gradient in one more read and one write.

The row loss of cross_entropy.py, which launches these kernels and makes them an op a model calls
(launch plans, checks, autograd: the op's half). fused_linear_cross_entropy.py calls the row
helpers (`row_logsumexp`, `row_loss`, `write_row_grad`) from its own kernel.

A language model ends in logits = h @ W^T (h: N tokens x d, W: the LM head, V x d) and
loss = CE(logits, targets). With N = 8192 tokens and V = 128k classes the logits alone are
N * V * 2 bytes = 2 GiB in bf16, and eager PyTorch keeps several tensors of that size alive at
once (logits, log_softmax output, its gradient, the logits' gradient): the loss, not the
model, sets the peak memory of a training step. These kernels compute the loss in one read of the
logits and its gradient in one more read and one write, keeping nothing of size N x V in between.

What it teaches:
* `cross_entropy_fwd_kernel`: one program per row streams the row in BLOCK_V chunks with a
  running max m and running sum d (d <- d * exp(m - m') + sum exp(x - m'), the online softmax
  of week 3), so logsumexp(x) = m + log d takes ONE read of the row. Label smoothing also needs
  sum_j (x_j - m), accumulated in the same pass.
* `cross_entropy_bwd_kernel`: d loss / d logits = (softmax(x) - y) * g, y the (smoothed)
  one-hot target and g the incoming gradient; softmax is recomputed from x and the saved lse,
  so nothing of size N x V is saved between forward and backward except the logits themselves.
* `cross_entropy_fwd_reduce_kernel`: the losses and their sum (or mean) in ONE launch: each row
  program takes a ticket from an atomic counter, and the program that draws the last one sums the
  rows (atomics and memory order: the pattern of CUDA's "threadFenceReduction" sample).

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

Cost model (N rows, V classes, itemsize s): the forward reads N V s; the backward reads N V s and
writes N V s. ~5 FLOPs per element: memory-bound, the yardstick is % of copy bandwidth.
"""
from __future__ import annotations

from course.gpu import tl, triton

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
def row_logsumexp(x_row, n_cols, FP64: tl.constexpr, SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """(m, log d, sum_j (x_j - m)) of one row in ONE read: m the row max, d = sum_j exp(x_j - m).

    logsumexp = m + log d; the third value (for label smoothing) is 0 unless SMOOTHING.
    """
    # BEGIN EXERCISE: per lane (vectors of BLOCK_V in the accumulation dtype: _to_acc): running max m, running sum d,
    #   and for SMOOTHING the shifted x-sum s and count n; for each masked chunk (other=-inf): m_new = max(m, x),
    #   shift by m_new (by 0 where it is -inf: -inf - -inf is NaN), d = d * exp(m - shift) + exp(x - shift);
    #   then row_max = max of m, log_sum = log(sum of d * exp(m - row_max)), shifted_sum = sum_j (x_j - row_max)
    #   (0 without SMOOTHING); return the three
    # HINT: A 128k-wide vocabulary row does not fit one block, so compute logsumexp online in one read: keep
    #   a running max and a sum of exp(x - max), rescaling the sum whenever the max grows (week 3's
    #   softmax_online_kernel).
    # HINT: Per-lane vectors m, d (and s, n for SMOOTHING) made with _to_acc; a loop over BLOCK_V chunks
    #   loading with other=-inf; update d with the rescale, then m = m_new; after the loop reduce the lanes
    #   against the row's max; without SMOOTHING the third value is zeros_like(log_sum).
    # HINT: `shift = tl.where(m_new == -float("inf"), 0.0, m_new)`; `d = d * tl.exp(m - shift) + tl.exp(x -
    #   shift)`; finally `log_sum = tl.log(tl.sum(d * tl.exp(m - row_max), axis=0))`.
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
def row_loss(x_row, target, valid, in_range, row_max, log_sum, shifted_sum, n_cols, coef_ptr,
             SMOOTHING: tl.constexpr):
    """The row's loss from its shifted statistics: every term >= 0, so nothing cancels."""
    # BEGIN EXERCISE: x_t read at the target (column 0 for an ignored or out-of-range target: never a wild read),
    #   shifted: t_shift = x_t - row_max; loss = log_sum - t_shift, or with SMOOTHING log_sum - (1 - eps) t_shift
    #   - eps shifted_sum / n_cols (coef_ptr holds [1 - eps, eps, eps / V]); NaN where the target is out of
    #   range, 0 where ignored
    # HINT: Write the loss in shifted form: lse - x_t = log_sum - (x_t - row_max); both terms are small and
    #   never cancel catastrophically, unlike lse and x_t separately at large magnitudes.
    # HINT: Read x at the target only where the target is valid and in range (else column 0, so no wild
    #   address); t_shift = x_t - row_max; the plain or the smoothed formula (coefficients loaded from
    #   coef_ptr); then NaN where not in range and 0 where ignored, with two tl.where.
    # HINT: `x_t = tl.load(x_row + tl.where(valid & in_range, target, 0))`
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
def write_row_grad(x_row, g_row, target, hi, lo, g, n_cols, coef_ptr,
                   SMOOTHING: tl.constexpr, BLOCK_V: tl.constexpr):
    """g_row[j] = (softmax(x)_j - y_j) * g, softmax = exp((x - hi) - lo) with hi + lo = lse."""
    # BEGIN EXERCISE: chunk by chunk: p = exp((x - hi) - lo), y = 1 - eps at the target (+ eps / V everywhere with
    #   SMOOTHING), g_row = (p - y) * g stored masked in g_row's dtype
    # HINT: d loss / d x_j = softmax(x)_j - y_j, times the incoming gradient; the softmax is recomputed from
    #   the saved lse, split into hi + lo so the subtraction keeps fp32 accuracy.
    # HINT: Load the two coefficients (1 - eps and eps / V) once; loop over BLOCK_V chunks: load x masked, p
    #   = exp of the shifted x, y = on_target where offs == target (plus off_target everywhere when
    #   SMOOTHING), store (p - y) * g masked.
    # HINT: `p = tl.exp((x - hi) - lo)`: subtract hi first (exact near the max), then the small lo.
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
    #   ignore_index) and in range; row_logsumexp, then the row's loss (row_loss) stored; with STORE_LSE,
    #   lse = row_max + log_sum added in float64 (exact) and stored
    # HINT: One program per row: the two helpers above do the work; this kernel only finds the row, reads
    #   its target and classifies it.
    # HINT: int64 row from program_id(0); row base pointer; target (int64); valid = target != ignore_index;
    #   in_range = 0 <= target < n_cols; row_logsumexp, row_loss stored at loss_ptr + row; with STORE_LSE
    #   also the lse.
    # HINT: Store lse as `row_max.to(tl.float64) + log_sum.to(tl.float64)`: the sum of two fp32 values is
    #   exact in float64.
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride passes 2^31 at 8192 x 128k
    x_row = logits_ptr + row * row_stride
    target = tl.load(targets_ptr + row).to(tl.int64)
    valid = target != ignore_index
    in_range = (target >= 0) & (target < n_cols)
    row_max, log_sum, shifted_sum = row_logsumexp(x_row, n_cols, FP64, SMOOTHING, BLOCK_V)
    tl.store(loss_ptr + row, row_loss(x_row, target, valid, in_range, row_max, log_sum, shifted_sum,
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
    #   for an ignored row; then write_row_grad
    # HINT: The backward needs the per-row lse and the incoming gradient; everything else is write_row_grad.
    #   The gradient must be read on the device (no host sync), with stride 0 meaning one scalar for all
    #   rows.
    # HINT: int64 row; target; lse loaded and split: hi = _to_acc(lse, FP64), lo = _to_acc(lse - hi in
    #   float64, FP64); g loaded at row * grad_stride; NaN for an out-of-range target, 0 for an ignored one
    #   (two tl.where); call write_row_grad with the row pointers.
    # HINT: `lo = _to_acc(lse - hi.to(tl.float64), FP64)`
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
    write_row_grad(logits_ptr + row * row_stride, dlogits_ptr + row * dlogits_row_stride, target, hi, lo, g,
                   n_cols, coef_ptr, SMOOTHING, BLOCK_V)
    # END EXERCISE


@triton.jit
def sum_rows(loss_rows_ptr, targets_ptr, n_rows, ignore_index, BLOCK: tl.constexpr):
    """(sum of the per-row losses, rows counted), BLOCK rows a step, always in the same order."""
    # BEGIN EXERCISE: BLOCK rows a step, in order: the masked per-row losses added into a [BLOCK] vector (read with
    #   cache_modifier=".cg": from L2, which other programs' stores reach; an SM's L1 is not kept coherent),
    #   and 1 for each target that is not ignore_index into another; return both summed
    # HINT: A deterministic reduction: one program walks all rows in a fixed order, so the sum is
    #   bit-identical from run to run (atomics would not be). The rows were just written by other programs,
    #   so read them from L2.
    # HINT: Two [BLOCK] accumulators (loss total and count) in the loss dtype; loop over BLOCK rows at a
    #   time with a mask; add the masked losses; load targets (other=ignore_index) and add 1 where not
    #   ignored; return both reduced with tl.sum.
    # HINT: `tl.load(loss_rows_ptr + idx, mask=mask, other=0.0, cache_modifier=".cg")`: .cg bypasses the
    #   SM's non-coherent L1.
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
    result, counted = sum_rows(loss_rows_ptr, targets_ptr, n_rows, ignore_index, BLOCK)
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
    row_max, log_sum, shifted_sum = row_logsumexp(x_row, n_cols, FP64, SMOOTHING, BLOCK_V)
    tl.store(loss_rows_ptr + row, row_loss(x_row, target, valid, in_range, row_max, log_sum, shifted_sum,
                                           n_cols, coef_ptr, SMOOTHING))
    if STORE_LSE:
        tl.store(lse_ptr + row, row_max.to(tl.float64) + log_sum.to(tl.float64))
    # BEGIN EXERCISE: every thread's stores before the ticket (tl.debug_barrier), then ticket = tl.atomic_add(ticket_ptr, 1,
    #   sem="acq_rel", scope="gpu"); the program that draws n_rows - 1 sums the rows (sum_rows), divides for
    #   MEAN, stores out (and count with STORE_LSE) and sets the counter back to 0
    # HINT: The last program to finish does the reduction: every program takes a ticket from an atomic
    #   counter after its store; whoever draws n_rows - 1 knows all the other rows are written
    #   (release/acquire ordering).
    # HINT: A barrier so all threads' stores precede the ticket; an atomic_add on the counter with acq_rel
    #   semantics at gpu scope; `if ticket == n_rows - 1:` call sum_rows, divide by the count for MEAN,
    #   store out (and count), reset the counter to 0 for the next call.
    # HINT: `ticket = tl.atomic_add(ticket_ptr, 1, sem="acq_rel", scope="gpu")`, after `tl.debug_barrier()`.
    # Every thread's store happens before the ticket (the barrier), and the ticket is a release:
    # whoever draws the last one sees all the stores (the acquire half). The pattern of CUDA's
    # "threadFenceReduction" sample, with the fence folded into the atomic's semantics.
    tl.debug_barrier()
    ticket = tl.atomic_add(ticket_ptr, 1, sem="acq_rel", scope="gpu")
    if ticket == n_rows - 1:
        result, counted = sum_rows(loss_rows_ptr, targets_ptr, n_rows, ignore_index, BLOCK)
        if MEAN:
            result = result / counted  # 0 / 0 = NaN when every row is ignored, as in torch
        tl.store(out_ptr, result.to(out_ptr.dtype.element_ty))
        if STORE_LSE:
            tl.store(count_ptr, counted)
        tl.atomic_xchg(ticket_ptr, 0, sem="relaxed", scope="gpu")  # ready for the next call on this stream
    # END EXERCISE
