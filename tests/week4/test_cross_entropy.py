"""week4_triton_dl.cross_entropy: CE on given logits, forward, backward and reductions, against float64 torch.

The fused linear + CE (fused_linear_cross_entropy.py) has its own tests:
test_fused_linear_cross_entropy.py, which holds its loss to the error model below. The helpers
both files use (tolerances, float64 references, inputs, the compile check) are in
cross_entropy_helpers.py.

Error model for the tolerances. The kernels accumulate in fp32 (fp64 for fp64 inputs): the
logsumexp of a V-wide row is off by a few units of fp32 (u = 2^-24) times log2(V) in relative
terms, so losses meet the float64 reference within the default fp32 tolerance. Gradients are
softmax - y, entries from ~1/V up to 1: they are compared with an absolute tolerance scaled by
the largest reference entry (a few units of the dtype's precision times that maximum), which a
wrong row, a missing 1/N or a wrong target would exceed by orders of magnitude.

At large magnitudes (logits ~1e4, where fp32's spacing is 2^-10 ~ 1e-3) the same model holds
because the kernels keep every quantity shifted by the row max m (see the module docstring):
* x_t - m is exact when x_t is within a factor 2 of m (Sterbenz), else one rounding: u |x_t - m|;
* log d, d = sum_j exp(x_j - m) in [1, V]: each exp is off by a few ulps plus the rounding of
  its argument (u |x_j - m| relative, on a term weighing exp(x_j - m)), and d sums V terms in
  V / BLOCK_V steps per lane and a log2(BLOCK_V) tree: log d is off by at most
  ~4u (log2 V + V / BLOCK_V + 4) in absolute terms;
* the loss is a sum of terms >= 0 (log d, -(x_t - m), the smoothing term), so its error is
  <= 8u * loss + 8u (log2 V + V / BLOCK_V + 4): `large_loss_tolerance` below;
* softmax = exp((x - hi) - lo) with hi + lo the float64 lse: x - hi is exact near the max, so
  each gradient entry is off by a few u times the incoming gradient: the usual grad_atol.
The version that computed lse - x_t in fp32 was off by ~1e-3 absolute there (2.4% of a small
loss, 2e-4 of the largest gradient entry): these bounds are 100-1000x tighter.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor, with_specials
from tests.week4.cross_entropy_helpers import (DEVICE, SLOW, U32, case, compile_and_compare, grad_atol,
                                               large_logits, large_loss_tolerance, make_targets,
                                               reference_grad, rtol_for)

ce = runtime.lesson("week4_triton_dl.cross_entropy")
kernels = runtime.lesson("week4_triton_dl.cross_entropy_kernels")  # tested through ce's launchers
DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16, torch.float64])
# (rows, classes): ones, primes, a vocabulary wider than the small block used below.
SHAPES = [(1, 1), (1, 7), (3, 17), (5, 300)] + runtime.pick(gpu=[(64, 32000), (8, 128256)], sim=[])
# What the default run keeps (the rest is marked slow; `pytest --slow` runs it all). On a GPU each
# dtype x block width (the vocabulary's power of two) x label smoothing x class of the row count
# and width (1, a multiple of 16, neither) is its own compiled kernel: the default run takes the
# one-element (1, 1) in fp32, every dtype on the ragged (5, 300) with a reduction (the one-launch
# kernel) and without (the loss kernel; bf16's runs on its LM-sized vocabulary, with the mean),
# fp32's sum in test_reductions_on_both_paths, and one case of each reduction-, path-, block-,
# gradcheck-, opcheck- and compile-matrix; slow adds the products, the other small shapes and fp32's
# LM-sized vocabulary.
LARGE_DEFAULTS = {(torch.bfloat16, (8, 128256), "mean")}


def logits_cases():
    for p in DTYPES:
        dtype = p.values[0]
        for shape in SHAPES:
            for reduction in ("mean", "sum", "none"):
                if shape[1] > 1000:
                    keep = (dtype, shape, reduction) in LARGE_DEFAULTS
                elif shape == (5, 300):
                    keep = reduction == "mean" or reduction == "none" and dtype != torch.bfloat16
                else:
                    keep = dtype == torch.float32 and reduction == "mean" and shape == (1, 1)
                yield case(dtype, shape, reduction, id=f"{p.id}-{shape}-{reduction}", keep=keep, marks=p.marks)


def test_the_launchers_run_the_kernels_beside_them():
    # cross_entropy.py imports its kernels relatively: a stub's launchers run the learner's kernels
    # (exercises/cross_entropy_kernels.py), a solution's the solution's.
    assert ce.cross_entropy_fwd_kernel is kernels.cross_entropy_fwd_kernel
    assert ce.cross_entropy_bwd_kernel is kernels.cross_entropy_bwd_kernel


# ------------------------------------------------------------------------------ CE on logits
@pytest.mark.parametrize("dtype, shape, reduction", list(logits_cases()))
def test_cross_entropy_matches_torch(dtype, shape, reduction):
    n, v = shape
    logits = random_tensor(shape, dtype, DEVICE, scale=3.0).requires_grad_()
    targets = make_targets(n, v)
    loss = ce.cross_entropy(logits, targets, reduction=reduction)
    (grad,) = torch.autograd.grad(loss.sum(), logits)
    want, want_grad = reference_grad(logits, targets, reduction=reduction)
    assert loss.dtype == dtype
    assert_close(loss, want.to(dtype), name="loss")
    assert_close(grad, want_grad.to(dtype), atol=grad_atol(want_grad, dtype), name="dlogits")


@pytest.mark.parametrize("label_smoothing, block_v", [case(s, b, keep=(s, b) in ((0.0, 16), (1.0, 64)))
                                                      for s in (0.0, 0.1, 1.0) for b in (16, 64)])
def test_many_chunks_and_label_smoothing(block_v, label_smoothing):
    # A small block makes the running max change between chunks; V = 301 leaves a ragged tail.
    logits = random_tensor((6, 301), torch.float32, DEVICE, scale=4.0)
    targets = make_targets(6, 301)
    loss, lse = ce.cross_entropy_forward(logits, targets, label_smoothing=label_smoothing, block_v=block_v)
    want = F.cross_entropy(logits.double(), targets, reduction="none", label_smoothing=label_smoothing)
    assert_close(loss, want.float(), name="loss rows")
    valid = targets != ce.IGNORE_INDEX
    # lse = m + log d, stored in float64 but made of fp32 parts: fp32's tolerance.
    assert lse.dtype == torch.float64
    assert_close(lse[valid], torch.logsumexp(logits.double(), -1)[valid], rtol=1.3e-6, atol=1e-5, name="lse")
    grad = torch.randn(6, device=DEVICE)
    out = poisoned((6, 301), torch.float32, DEVICE)
    got = ce.cross_entropy_backward(logits, targets, lse, grad, label_smoothing=label_smoothing, block_v=block_v,
                                    out=out)
    assert got is out
    x = logits.double().requires_grad_()
    F.cross_entropy(x, targets, reduction="none", label_smoothing=label_smoothing).backward(grad.double())
    assert_close(got, x.grad.float(), atol=grad_atol(x.grad, torch.float32))


@pytest.mark.parametrize("reduction", ["mean", pytest.param("sum", marks=SLOW), pytest.param("none", marks=SLOW)])
def test_gradcheck_float64(reduction):
    logits = random_tensor((4, 9), torch.float64, DEVICE).requires_grad_()
    targets = torch.tensor([3, ce.IGNORE_INDEX, 0, 8], device=DEVICE)
    assert torch.autograd.gradcheck(
        lambda x: ce.cross_entropy(x, targets, reduction=reduction, label_smoothing=0.2), (logits,))


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the NaN row, on purpose
@pytest.mark.parametrize("one_launch, reduction", [  # each path once, each reduction once
    case(one, r, id=f"{path}-{r}", keep=(one, r) in ((True, "mean"), (False, "sum")))
    for one, path in ((True, "one_launch"), (False, "two_launches")) for r in ("mean", "sum")])
def test_reductions_on_both_paths(monkeypatch, one_launch, reduction):
    # "mean" and "sum" reduce in the launch that makes the losses (cross_entropy_fwd_reduce_kernel,
    # the last program to finish sums); with ONE_LAUNCH_REDUCTION off (and while a CUDA graph is
    # captured) the losses, then the reduction. Both paths, at one size, with and without autograd:
    # ignored rows, smoothing, int32 and strided targets, strided rows, a NaN row, all rows ignored.
    monkeypatch.setattr(ce, "ONE_LAUNCH_REDUCTION", one_launch, raising=False)  # (a stub has one path)
    wide = random_tensor((6, 50), torch.float32, DEVICE, scale=3.0)
    logits = wide[:, :41]  # rows at stride 50
    targets = torch.tensor([0, 40, 7, ce.IGNORE_INDEX, 3, 19, 1, 1], device=DEVICE)[:6].int()
    for smoothing in (0.0, 0.1):
        leaf = logits.clone().requires_grad_()
        loss = ce.cross_entropy(leaf, targets, reduction=reduction, label_smoothing=smoothing)
        (grad,) = torch.autograd.grad(loss, leaf)
        want, want_grad = reference_grad(logits, targets.long(), reduction=reduction, label_smoothing=smoothing)
        assert_close(loss, want.float(), name="loss")
        assert_close(grad, want_grad.float(), atol=grad_atol(want_grad, torch.float32), name="dlogits")
        with torch.no_grad():
            assert_close(ce.cross_entropy(logits, targets[:], reduction=reduction, label_smoothing=smoothing),
                         want.float(), name="loss without autograd")
    nan_row = logits.clone()
    nan_row[2, 5] = math.nan
    assert torch.isnan(ce.cross_entropy(nan_row, targets, reduction=reduction))
    ignored = torch.full((6,), ce.IGNORE_INDEX, device=DEVICE)
    assert_close(ce.cross_entropy(logits, ignored, reduction=reduction),
                 F.cross_entropy(logits.double(), ignored, reduction=reduction).float())


def test_one_launch_reduction_is_reusable_and_matches_two_launches(monkeypatch):
    # The one-launch kernel's last program resets its ticket counter: a kernel that forgot would
    # reduce nothing on the second call, one that reduced before every row was written would
    # sum poison. So: more rows than one reduction step holds (REDUCE_BLOCK), the loss buffer
    # poisoned by a call on other logits first, the same call three times (bit-identical to the
    # two-launch path, which sums in the same order), then once more after a different-size call.
    n_rows = runtime.pick(gpu=3 * 4096 + 5, sim=37)
    logits = random_tensor((n_rows, 33), torch.float32, DEVICE, scale=2.0)
    targets = torch.randint(0, 33, (n_rows,), device=DEVICE)
    targets[::7] = ce.IGNORE_INDEX
    want = F.cross_entropy(logits.double(), targets, reduction="sum")
    monkeypatch.setattr(ce, "ONE_LAUNCH_REDUCTION", False, raising=False)
    two = ce.cross_entropy(logits, targets, reduction="sum")
    monkeypatch.setattr(ce, "ONE_LAUNCH_REDUCTION", True, raising=False)
    ce.cross_entropy(torch.full_like(logits, math.nan), targets, reduction="sum")
    for call in range(3):
        one = ce.cross_entropy(logits, targets, reduction="sum")
        assert torch.equal(one, two), (
            f"call {call + 2} in one launch gave {one.item()}, the two-launch path {two.item()}: does every "
            "row's loss reach the last program, and does that program set the ticket counter back to 0?")
    assert_close(one, want.float(), rtol=1e-5, name="sum of the rows")  # n_rows fp32 additions
    ce.cross_entropy(logits[:5], targets[:5])
    assert torch.equal(ce.cross_entropy(logits, targets, reduction="sum"), two)
    mean = ce.cross_entropy(logits, targets)  # the count of kept rows is made in the same launch
    assert_close(mean, F.cross_entropy(logits.double(), targets).float(), rtol=1e-5, name="mean")


@pytest.mark.gpu(reason="streams and CUDA graphs")
def test_one_launch_reduction_on_side_streams_and_in_a_cuda_graph():
    # Calls on two streams at once each draw from their own counter; a CUDA graph captures the
    # two-launch path (the one-launch counter would be shared by graphs replayed on two streams).
    logits = random_tensor((4099, 1000), torch.bfloat16, DEVICE)
    targets = torch.randint(0, 1000, (4099,), device=DEVICE)
    want = ce.cross_entropy(logits, targets)
    streams = [torch.cuda.Stream() for _ in range(2)]
    outs = []
    torch.cuda.synchronize()
    for _ in range(20):
        for stream in streams:
            with torch.cuda.stream(stream):
                outs.append(ce.cross_entropy(logits, targets))
    torch.cuda.synchronize()
    assert all(torch.equal(o, want) for o in outs)
    static_logits = logits.clone().requires_grad_()
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch.cuda.graph asks
        ce.cross_entropy(static_logits, targets).backward()
    torch.cuda.current_stream().wait_stream(side)
    static_logits.grad = None
    with torch.cuda.graph(graph):
        loss = ce.cross_entropy(static_logits, targets)
        loss.backward()
    for scale in (1.0, 2.0):
        with torch.no_grad():
            static_logits.copy_(logits * scale)
        graph.replay()
        torch.cuda.synchronize()
        ref = static_logits.detach().double().requires_grad_()
        ref_loss = F.cross_entropy(ref, targets)
        ref_loss.backward()
        assert_close(loss, ref_loss.to(torch.bfloat16), name=f"loss at scale {scale}")
        assert_close(static_logits.grad.float(), ref.grad.float(), atol=grad_atol(ref.grad, torch.bfloat16),
                     name="dlogits")
        static_logits.grad.zero_()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ignore_index_all_ignored_and_empty(reduction):
    logits = random_tensor((3, 5), torch.float32, DEVICE).requires_grad_()
    targets = torch.full((3,), ce.IGNORE_INDEX, device=DEVICE)
    loss = ce.cross_entropy(logits, targets, reduction=reduction)  # mean: 0 / 0, as torch: NaN
    want = F.cross_entropy(logits.detach().double(), targets, reduction=reduction)
    assert_close(loss, want.float())
    (grad,) = torch.autograd.grad(loss.sum(), logits)  # zero gradients, whatever the reduction
    assert_close(grad, torch.zeros_like(logits))
    with torch.no_grad():  # the no-autograd path gives the same
        assert_close(ce.cross_entropy(logits, targets, reduction=reduction), want.float())
    # A custom ignore_index that is also a real class: that class's rows are skipped.
    t = torch.tensor([2, 4, 2], device=DEVICE)
    assert_close(ce.cross_entropy(logits.detach(), t, ignore_index=2, reduction=reduction),
                 F.cross_entropy(logits.detach().double(), t, ignore_index=2, reduction=reduction).float())
    empty = torch.empty(0, 5, device=DEVICE)
    none = torch.empty(0, dtype=torch.long, device=DEVICE)
    assert_close(ce.cross_entropy(empty, none, reduction=reduction),
                 F.cross_entropy(empty.double(), none, reduction=reduction).float())


@pytest.mark.parametrize("reduction", ["mean", pytest.param("none", marks=SLOW)])
def test_int32_targets(reduction):
    logits = random_tensor((7, 45), torch.float32, DEVICE, scale=2.0).requires_grad_()
    targets = make_targets(7, 45).int()
    loss = ce.cross_entropy(logits, targets, reduction=reduction, label_smoothing=0.1)
    (grad,) = torch.autograd.grad(loss.sum(), logits)
    want, want_grad = reference_grad(logits, targets.long(), reduction=reduction, label_smoothing=0.1)
    assert_close(loss, want.float())
    assert_close(grad, want_grad.float(), atol=grad_atol(want_grad, torch.float32))


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # inf - inf in NumPy, on purpose
@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.bfloat16]))
def test_nan_and_inf_like_torch(dtype):
    logits = random_tensor((7, 40), dtype, DEVICE)
    logits[0] = with_specials(logits[0])  # NaN, +inf, -inf: NaN loss and gradient
    logits[1, 5] = math.nan
    logits[2] = -math.inf                 # all -inf: NaN
    logits[3, :20] = -math.inf            # masked prefix: finite
    logits[4, 7] = math.inf               # +inf: NaN
    logits[5, 11] = -math.inf             # target logit -inf: loss +inf
    targets = torch.tensor([1, 2, 3, 30, 4, 11, 0], device=DEVICE)
    logits.requires_grad_()
    loss = ce.cross_entropy(logits, targets, reduction="none")
    (grad,) = torch.autograd.grad(loss.sum(), logits)
    x = logits.detach().float().requires_grad_()
    want = F.cross_entropy(x, targets, reduction="none")
    want.sum().backward()
    assert_close(loss, want.to(dtype), name="loss")
    assert_close(grad, x.grad.to(dtype), atol=grad_atol(x.grad.nan_to_num(0.0, 0.0, 0.0), dtype), name="dlogits")


@pytest.mark.parametrize("reduction", ["mean", pytest.param("none", marks=SLOW)])
def test_non_dense_logits_and_targets(reduction):
    # Rows of a wider buffer (row stride > row length): read in place, the kernels take the stride.
    wide = random_tensor((4, 50), torch.float32, DEVICE, scale=2.0).requires_grad_()
    logits, targets = wide[:, :37], torch.tensor([0, 36, 5, 9], device=DEVICE)
    loss = ce.cross_entropy(logits, targets, reduction=reduction)
    (grad,) = torch.autograd.grad(loss.sum(), wide)
    want, want_grad = reference_grad(wide[:, :37], targets, reduction=reduction)
    assert_close(loss, want.float())
    assert_close(grad[:, :37], want_grad.float(), atol=grad_atol(want_grad, torch.float32))
    assert_close(grad[:, 37:], torch.zeros(4, 13, device=DEVICE))  # the columns outside the view
    # A transposed view (classes not at unit stride) is copied first, as torch's softmax does.
    base = random_tensor((37, 4), torch.float32, DEVICE, scale=2.0).requires_grad_()
    loss = ce.cross_entropy(base.t(), targets, reduction=reduction)
    (grad,) = torch.autograd.grad(loss.sum(), base)
    want, want_grad = reference_grad(base.t(), targets, reduction=reduction)
    assert_close(loss, want.float())
    assert_close(grad, want_grad.t().float(), atol=grad_atol(want_grad, torch.float32))
    # Targets taken with a stride (every other one of a longer tensor).
    every_other = torch.tensor([0, 1, 36, 2, 5, 3, 9, 4], device=DEVICE)[::2]
    assert_close(ce.cross_entropy(base.t().detach(), every_other, reduction=reduction),
                 F.cross_entropy(base.t().detach().double(), every_other, reduction=reduction).float())
    # The launchers index the classes at unit stride and say so.
    with pytest.raises(ValueError, match="unit stride"):
        ce.cross_entropy_forward(base.detach().t(), targets)


def test_out_of_range_targets_give_nan_rows_without_a_host_sync():
    # The public entry cannot raise on a target VALUE without a host sync: the kernels never
    # read it (no out-of-bounds access) and that row's loss and gradient are NaN.
    logits = random_tensor((4, 8), torch.float32, DEVICE).requires_grad_()
    targets = torch.tensor([0, 8, 2, -3], device=DEVICE)
    loss = ce.cross_entropy(logits, targets, reduction="none")
    good = torch.tensor([True, False, True, False], device=DEVICE)
    assert torch.isnan(loss[~good]).all()
    assert_close(loss[good], F.cross_entropy(logits[good].detach().double(), targets[good], reduction="none").float())
    (grad,) = torch.autograd.grad(loss.sum(), logits)
    assert torch.isnan(grad[~good]).all() and not torch.isnan(grad[good]).any()
    assert torch.isnan(ce.cross_entropy(logits.detach(), targets))  # and the mean
    with pytest.raises(ValueError, match=r"in \[0, 8\)"):  # the launcher checks values
        ce.cross_entropy_forward(logits.detach(), targets)


def bad_logit_inputs():
    ok = lambda *s: torch.randn(*(s or (4, 8)), device=DEVICE)  # noqa: E731
    t = lambda *v: torch.tensor(v or (0, 1, 2, 3), device=DEVICE)  # noqa: E731
    yield "not a tensor", TypeError, "logits must be a torch.Tensor", lambda: ([[1.0]], t(), {})
    yield "int logits", TypeError, "expected one of", lambda: (ok().long(), t(), {})
    yield "1-D logits", ValueError, "2 dimension", lambda: (ok(8), t(), {})
    yield "no classes", ValueError, "0 classes", lambda: (ok(4, 0), t(), {})
    yield "float targets", TypeError, "targets has dtype", lambda: (ok(), t().float(), {})
    yield "targets length", ValueError, "one per row", lambda: (ok(), t(0, 1), {})
    yield "2-D targets", ValueError, "1 dimension", lambda: (ok(), t().reshape(2, 2), {})
    yield "reduction", ValueError, "reduction must be", lambda: (ok(), t(), {"reduction": "avg"})
    yield "smoothing", ValueError, "label_smoothing", lambda: (ok(), t(), {"label_smoothing": 1.5})
    yield "ignore_index", TypeError, "ignore_index must be an int", lambda: (ok(), t(), {"ignore_index": -1.0})
    yield "wrong device", ValueError, "kernels run on", lambda: (torch.ones(4, 8, device="meta"), t(), {})
    yield "bool smoothing", ValueError, "label_smoothing", lambda: (ok(), t(), {"label_smoothing": True})


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_logit_inputs()])
def test_cross_entropy_rejects_bad_input(case, error, message, make):
    logits, targets, kwargs = make()
    with pytest.raises(error, match=message):
        ce.cross_entropy(logits, targets, **kwargs)


def bad_launcher_inputs():
    ok = lambda *s: torch.randn(*(s or (4, 8)), device=DEVICE)  # noqa: E731
    t = lambda *v: torch.tensor(v or (0, 1, 2, 3), device=DEVICE)  # noqa: E731
    yield "column stride", ValueError, "unit stride", lambda: (ok(8, 4).t(), t(), {})
    yield "target too big", ValueError, r"in \[0, 8\)", lambda: (ok(), t(0, 1, 8, 3), {})
    yield "negative target", ValueError, "found -1", lambda: (ok(), t(0, -1, 2, 3), {})
    yield "strided targets", ValueError, "not contiguous", lambda: (ok(), t(0, 0, 1, 0, 2, 0, 3, 0)[::2], {})
    yield "block_v", ValueError, "block_v", lambda: (ok(), t(), {"block_v": 48})


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_launcher_inputs()])
def test_launcher_rejects_bad_input_before_launch(case, error, message, make):
    logits, targets, kwargs = make()
    with pytest.raises(error, match=message):
        ce.cross_entropy_forward(logits, targets, **kwargs)


def test_backward_launcher_rejects_bad_grad():
    logits, targets = torch.randn(4, 8, device=DEVICE), torch.tensor([0, 1, 2, 3], device=DEVICE)
    _, lse = ce.cross_entropy_forward(logits, targets)
    with pytest.raises(ValueError, match="grad must be a scalar or have one element per row"):
        ce.cross_entropy_backward(logits, targets, lse, torch.ones(3, device=DEVICE))
    with pytest.raises(TypeError, match="lse has dtype"):
        ce.cross_entropy_backward(logits, targets, lse.float(), torch.ones((), device=DEVICE))
    with pytest.raises(ValueError, match="block_v"):
        ce.cross_entropy_forward(logits, targets, block_v=100)


# --------------------------------------------------------------------- precision at |x| ~ 1e4
@pytest.mark.parametrize("block_v, label_smoothing", [  # many chunks with and without smoothing, one block once
    case(b, s, id=f"{b}-{s}", keep=(b, s) in ((16, 0.0), (16, 0.1), (ce.BLOCK_V, 0.0)))
    for b in (16, ce.BLOCK_V) for s in (0.0, 0.1, 1.0)])
def test_cross_entropy_at_logits_near_1e4(block_v, label_smoothing):
    n, v = 8, 301
    x, t = large_logits(n, v)
    rtol, atol = large_loss_tolerance(v, block_v)
    loss, lse = ce.cross_entropy_forward(x, t, label_smoothing=label_smoothing, block_v=block_v)
    want = F.cross_entropy(x.double(), t, reduction="none", label_smoothing=label_smoothing)
    assert_close(loss, want.float(), rtol=rtol, atol=atol, name="loss rows")
    valid = t != ce.IGNORE_INDEX
    # lse in float64 keeps m + log d exactly: log d's error only, not fp32's 1e-3 spacing at 1e4.
    assert_close(lse[valid], torch.logsumexp(x.double(), -1)[valid], rtol=0, atol=atol, name="lse")
    grad = torch.rand(n, device=DEVICE) + 0.5
    dlogits = ce.cross_entropy_backward(x, t, lse, grad, label_smoothing=label_smoothing, block_v=block_v)
    xd = x.double().requires_grad_()
    F.cross_entropy(xd, t, reduction="none", label_smoothing=label_smoothing).backward(grad.double())
    assert_close(dlogits, xd.grad.float(), atol=grad_atol(xd.grad, torch.float32), name="dlogits")
    # The public entry, through autograd, with the mean.
    xl = x.clone().requires_grad_()
    mean = ce.cross_entropy(xl, t, label_smoothing=label_smoothing)
    (g,) = torch.autograd.grad(mean, xl)
    want_mean, want_g = reference_grad(x, t, label_smoothing=label_smoothing)
    # The mean adds the reduction's roundings: a sequential part (n rows) and a tree (log2 of its block).
    assert_close(mean, want_mean.float(), rtol=rtol + (n + 12) * U32, atol=atol, name="mean")
    assert_close(g, want_g.float(), atol=grad_atol(want_g, torch.float32), name="dlogits (mean)")


# ------------------------------------------------------------------ as a PyTorch op in a model
@pytest.mark.parametrize("label_smoothing", [0.0, pytest.param(0.1, marks=SLOW)])
@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.float64, marks=SLOW)],
                         ids=["float32", "float64"])
def test_opcheck_cross_entropy_ops(dtype, label_smoothing):
    # opcheck runs the op for real and on fake tensors, checks its schema (no mutation, no
    # aliasing), the autograd registration, and the compiler's dispatch paths.
    logits = random_tensor((5, 37), dtype, DEVICE, scale=2.0).requires_grad_(True)
    for targets in (make_targets(5, 37), make_targets(5, 37).int()):
        torch.library.opcheck(ce.cross_entropy_rows_op, (logits, targets, ce.IGNORE_INDEX, label_smoothing))
        _, lse = ce.cross_entropy_rows_op(logits.detach(), targets, ce.IGNORE_INDEX, label_smoothing)
        grad = random_tensor(5, dtype, DEVICE)
        torch.library.opcheck(ce.cross_entropy_rows_backward_op,
                              (grad, logits.detach(), targets, lse, ce.IGNORE_INDEX, label_smoothing))
    wide = random_tensor((5, 40), dtype, DEVICE).requires_grad_(True)  # a row-strided view too
    torch.library.opcheck(ce.cross_entropy_rows_op, (wide[:, :37], make_targets(5, 37), ce.IGNORE_INDEX, 0.0))


def test_eager_paths_and_the_registered_ops_agree():
    logits = random_tensor((6, 53), torch.float32, DEVICE, scale=2.0)
    targets = make_targets(6, 53)
    with torch.no_grad():
        plain = ce.cross_entropy(logits, targets, reduction="none", label_smoothing=0.1)  # kernels alone
    tracked = ce.cross_entropy(logits.clone().requires_grad_(), targets, reduction="none", label_smoothing=0.1)
    rows, _ = ce.cross_entropy_rows_op(logits, targets, ce.IGNORE_INDEX, 0.1)  # what torch.compile records
    assert torch.equal(plain, tracked.detach()) and torch.equal(plain, rows)
    with torch.no_grad():
        mean = ce.cross_entropy(logits, targets, label_smoothing=0.1)
    assert_close(mean, rows.sum() / (targets != ce.IGNORE_INDEX).sum())  # the reduction kernel vs torch's


def logits_model(x, w, t):
    """A model's last steps: a projection, torch ops on the logits, the registered cross-entropy."""
    logits = torch.tanh(x @ w.t()) * 4.0
    return ce.cross_entropy(logits, t, label_smoothing=0.1) + 0.01 * logits.square().mean()


@pytest.mark.parametrize("dtype", [case(*p.values, id=p.id, keep=p.id == "float32", marks=p.marks)
                                   for p in dtype_params([torch.float32, torch.bfloat16])])
def test_model_with_cross_entropy_compiles_with_no_graph_break(dtype):
    # fullgraph=True raises on any graph break; on the GPU Inductor compiles the torch ops around
    # the registered op, in simulation aot_eager traces the same graphs (fake tensors, autograd).
    n, d, v = 12, 16, 37
    x = random_tensor((n, d), dtype, DEVICE)
    w = random_tensor((v, d), dtype, DEVICE, scale=d**-0.5)
    compile_and_compare(logits_model, [x, w], make_targets(n, v), dtype, rtol_for(dtype))


def test_compiled_graph_holds_the_op_not_its_kernels():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    n, d, v = 6, 8, 29
    x, w = random_tensor((n, d), torch.float32, DEVICE), random_tensor((v, d), torch.float32, DEVICE)
    torch._dynamo.reset()
    torch.compile(logits_model, backend=backend, fullgraph=True)(x, w, make_targets(n, v))
    assert len(graphs) == 1
    calls = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert any("cross_entropy_rows" in c and ce.NAMESPACE in c for c in calls), calls
    assert not any("triton" in c for c in calls), calls  # one opaque node, no raw launch


# ------------------------------------------------------------------------------ state kept across calls
def kept_tensors(*modules) -> dict:
    """{module.name: tensors} for every module-level dict, list or tensor that holds torch tensors."""
    found = {}
    for module in modules:
        for name, value in vars(module).items():
            items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
            tensors = [t for item in items for t in (item if isinstance(item, tuple) else (item,))
                       if isinstance(t, torch.Tensor)]
            if tensors:
                found[f"{module.__name__}.{name}"] = len(tensors)
    return found


def test_the_losses_keep_no_tensor_across_calls_but_the_scratch():
    """A tensor a lesson keeps across calls is born wherever its first call runs: during torch.compile's CUDA-graph
    warm-up it belongs to the graphs' memory pool, and the next recording fails ("Detected 1 tensor(s) in the
    cudagraph pool not tracked as outputs": the capstone's fast+compile+cudagraphs on an H100, 2026-12-07, from
    cached smoothing coefficients). So the loss modules keep none, except the one-launch reduction's scratch,
    which the compiled path never reaches (it runs the registered rows op) and CUDA graph capture avoids
    (one_launch)."""
    flce = runtime.lesson("week4_triton_dl.fused_linear_cross_entropy")
    n, d, v = 6, 8, 29
    logits = random_tensor((n, v), torch.float32, DEVICE).requires_grad_()
    for reduction in ("none", "sum"):
        ce.cross_entropy(logits, make_targets(n, v), reduction=reduction, label_smoothing=0.1).sum().backward()
    h = random_tensor((n, d), torch.float32, DEVICE).requires_grad_()
    w = random_tensor((v, d), torch.float32, DEVICE).requires_grad_()
    flce.fused_linear_cross_entropy(h, w, make_targets(n, v), reduction="sum", label_smoothing=0.1).backward()
    kept = kept_tensors(ce, flce)
    kept.pop(f"{ce.__name__}._SCRATCH", None)
    assert kept == {}


def test_smoothing_coefficients_are_exact_in_each_accumulation_dtype():
    # fp64 kernels read the double values themselves (a Python float argument would reach Triton as fp32), fp32
    # ones their fp32 roundings; with no smoothing [1, 0, 0] (the gradient kernel reads 1 - eps either way).
    for eps, n_cols in ((0.1, 7), (0.0, 7)):
        want = [1.0 - eps, eps, eps / n_cols]
        assert ce.smoothing_coefficients(eps, n_cols, torch.float64, DEVICE).tolist() == want
        assert torch.equal(ce.smoothing_coefficients(eps, n_cols, torch.float32, DEVICE).cpu(),
                           torch.tensor(want, dtype=torch.float32))


@pytest.mark.gpu(reason="torch.compile's CUDA graphs (mode='reduce-overhead') exist only on a GPU")
@pytest.mark.parametrize("loss", ["cross_entropy", "fused_linear_cross_entropy"])
def test_losses_under_cuda_graphs_from_a_fresh_compile_state(loss):
    """The loss compiled with mode="reduce-overhead" in a fresh compile state, so that the loss's first call runs
    inside the CUDA graphs' warm-up: every step, recorded or replayed, matches the eager loss and gradient."""
    flce = runtime.lesson("week4_triton_dl.fused_linear_cross_entropy")
    n, d, v = 64, 32, 101
    h = random_tensor((n, d), torch.float32, DEVICE)
    w = random_tensor((v, d), torch.float32, DEVICE, scale=d**-0.5)
    t = make_targets(n, v)

    def step(h, w, t):
        if loss == "cross_entropy":
            return ce.cross_entropy(h @ w.t(), t, label_smoothing=0.1)
        return flce.fused_linear_cross_entropy(h, w, t, reduction="sum", label_smoothing=0.1)

    torch._dynamo.reset()
    compiled = torch.compile(step, mode="reduce-overhead")
    want_h = h.detach().clone().requires_grad_()
    want = step(want_h, w, t)
    want.backward()
    for _ in range(4):  # warm-up, recording, replays
        got_h = h.detach().clone().requires_grad_()
        got = compiled(got_h, w, t)
        got.backward()
        assert_close(got.detach(), want.detach(), rtol=rtol_for(torch.float32), atol=0)
        assert_close(got_h.grad, want_h.grad, rtol=0, atol=grad_atol(want_h.grad, torch.float32))
    torch._dynamo.reset()
