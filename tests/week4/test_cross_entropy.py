"""week4_triton_dl.cross_entropy: CE on logits and the chunked linear + CE, against float64 torch.

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
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor, with_specials

ce = runtime.lesson("week4_triton_dl.cross_entropy")
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16, torch.float64])
# (rows, classes): ones, primes, a vocabulary wider than the small block used below.
SHAPES = [(1, 1), (1, 7), (3, 17), (5, 300)] + runtime.pick(gpu=[(64, 32000), (8, 128256)], sim=[])
# What the default run keeps (the rest is marked slow; `pytest --slow` runs it all). On a GPU each
# dtype x block width (the vocabulary's power of two) x label smoothing x class of the row count
# and width (1, a multiple of 16, neither) is its own compiled kernel: the default run takes the
# one-element (1, 1) in fp32, every dtype on the ragged (5, 300) with a reduction (the one-launch
# kernel) and without (the loss kernel; bf16's runs on its LM-sized vocabulary, with the mean),
# fp32's sum in test_reductions_on_both_paths, fp64's fused linear loss on two chunk sizes, and one
# case of each reduction-, path-, block-, gradcheck-, opcheck- and compile-matrix; slow adds the
# products, the other small shapes and fp32's LM-sized vocabulary.
SLOW = pytest.mark.slow
LARGE_DEFAULTS = {(torch.bfloat16, (8, 128256), "mean")}


def case(*values, id=None, keep, marks=()):
    """One case of a sweep: marked slow unless the default run keeps it."""
    return pytest.param(*values, id=id, marks=[*marks, *([] if keep else [SLOW])])


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


UNIT = {torch.float64: 2.0**-52, torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}


def grad_atol(ref, dtype, k=8):
    """k units of the gradient dtype's precision (fp32 at best: the kernel's arithmetic) times max |ref|."""
    unit = max(UNIT[dtype], UNIT[torch.float32]) if dtype != torch.float64 else UNIT[dtype]
    return k * unit * float(ref.detach().abs().max().clamp_min(1e-30))


def make_targets(n, v, ignore_some=True):
    t = torch.randint(0, v, (n,), device=DEVICE)
    if ignore_some and n > 2:
        t[1] = ce.IGNORE_INDEX
    return t


def reference_grad(logits, targets, **kwargs):
    x = logits.detach().double().requires_grad_()
    loss = F.cross_entropy(x, targets, **kwargs)
    (g,) = torch.autograd.grad(loss.sum(), x)
    return loss, g


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
    for launcher in (ce.cross_entropy_forward, ce.cross_entropy_fwd_grad):  # the launchers check values
        with pytest.raises(ValueError, match=r"in \[0, 8\)"):
            launcher(logits.detach(), targets)


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


@pytest.mark.parametrize("launcher", ["cross_entropy_forward", "cross_entropy_fwd_grad"])
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_launcher_inputs()])
def test_launchers_reject_bad_input_before_launch(launcher, case, error, message, make):
    logits, targets, kwargs = make()
    with pytest.raises(error, match=message):
        getattr(ce, launcher)(logits, targets, **kwargs)


def test_backward_launcher_rejects_bad_grad():
    logits, targets = torch.randn(4, 8, device=DEVICE), torch.tensor([0, 1, 2, 3], device=DEVICE)
    _, lse = ce.cross_entropy_forward(logits, targets)
    with pytest.raises(ValueError, match="grad must be a scalar or have one element per row"):
        ce.cross_entropy_backward(logits, targets, lse, torch.ones(3, device=DEVICE))
    with pytest.raises(TypeError, match="lse has dtype"):
        ce.cross_entropy_backward(logits, targets, lse.float(), torch.ones((), device=DEVICE))
    with pytest.raises(ValueError, match="block_v"):
        ce.cross_entropy_forward(logits, targets, block_v=100)


# ------------------------------------------------------------------------- fused linear + CE
def linear_inputs(n, d, v, dtype, requires_grad=True):
    h = random_tensor((n, d), dtype, DEVICE).requires_grad_(requires_grad)
    w = random_tensor((v, d), dtype, DEVICE, scale=d**-0.5).requires_grad_(requires_grad)
    return h, w, make_targets(n, v)


def linear_reference(h, w, t, **kwargs):
    hd, wd = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    loss = ce.linear_cross_entropy_torch(hd, wd, t, **kwargs)
    dh, dw = torch.autograd.grad(loss, (hd, wd))
    return loss, dh, dw


@pytest.mark.parametrize("dtype, reduction, chunk_size", [
    case(d, r, c, id=f"{str(d)[6:]}-{r}-{c}", keep=d == torch.float32 or c in (7, None))
    for d in (torch.float32, torch.float64) for r in ("mean", "sum") for c in (1, 7, 16, 50, 1000, None)])
def test_fused_linear_matches_torch(dtype, reduction, chunk_size):
    h, w, t = linear_inputs(50, 24, 301, dtype)
    loss = ce.fused_linear_cross_entropy(h, w, t, reduction=reduction, chunk_size=chunk_size, label_smoothing=0.1)
    dh, dw = torch.autograd.grad(loss, (h, w))
    want, want_dh, want_dw = linear_reference(h, w, t, reduction=reduction, label_smoothing=0.1)
    assert_close(loss, want.to(dtype), name="loss")
    # dh and dW are K-term sums (K = V for dh, N for dW) of fp32 products: an error of
    # ~sqrt(K) units per entry, well inside 8 units of the largest entry for these K.
    assert_close(dh, want_dh.to(dtype), atol=grad_atol(want_dh, dtype), name="dh")
    assert_close(dw, want_dw.to(dtype), atol=grad_atol(want_dw, dtype), name="dW")


# No gradcheck for the fused linear loss: gradcheck runs backward twice on one graph (its
# reentrancy check), and this backward runs once by design (it scales the gradients made in the
# forward in place, to hold no second V x d tensor). The float64 cases of the test above compare
# dh and dW with torch's float64 autograd at the default float64 tolerance instead.


def test_fused_linear_scales_by_grad_output_and_partial_grads():
    # On a GPU the sizes and chunks of test_fused_linear_matches_torch's fp64 cases (and their
    # smoothing): their kernels. In simulation, where nothing is compiled, smaller ones.
    n, d, v, chunk = runtime.pick(gpu=(50, 24, 301, 7), sim=(20, 8, 33, 6))
    h, w, t = linear_inputs(n, d, v, torch.float64)
    want, want_dh, want_dw = linear_reference(h, w, t, label_smoothing=0.1)
    loss = ce.fused_linear_cross_entropy(h, w, t, chunk_size=chunk, label_smoothing=0.1)
    (2.5 * loss).backward()  # the stored gradients are scaled by grad_output = 2.5
    assert_close(h.grad, 2.5 * want_dh)
    assert_close(w.grad, 2.5 * want_dw)
    # Only one input wants a gradient: the other is neither computed nor returned.
    h2 = h.detach().requires_grad_()
    (dh,) = torch.autograd.grad(ce.fused_linear_cross_entropy(h2, w.detach(), t, chunk_size=chunk,
                                                              label_smoothing=0.1), (h2,))
    assert_close(dh, want_dh)
    w2 = w.detach().requires_grad_()
    (dw,) = torch.autograd.grad(ce.fused_linear_cross_entropy(h.detach(), w2, t, chunk_size=chunk,
                                                              label_smoothing=0.1), (w2,))
    assert_close(dw, want_dw)
    with torch.no_grad():
        assert_close(ce.fused_linear_cross_entropy(h, w, t, label_smoothing=0.1), want)


def test_fused_linear_batched_shape_module_and_ignored_rows():
    h, w, _ = linear_inputs(12, 8, 29, torch.float32)
    h3 = h.detach().reshape(3, 4, 8).requires_grad_()
    t = torch.randint(0, 29, (3, 4), device=DEVICE)
    t[0, :2] = ce.IGNORE_INDEX
    loss = ce.FusedLinearCrossEntropy(chunk_size=5)(h3, w, t)
    dh, dw = torch.autograd.grad(loss, (h3, w))
    want, want_dh, want_dw = linear_reference(h3.reshape(12, 8), w, t.reshape(12))
    assert dh.shape == (3, 4, 8)
    assert_close(loss, want.float())
    assert_close(dh.reshape(12, 8), want_dh.float(), atol=grad_atol(want_dh, torch.float32))
    assert_close(dw, want_dw.float(), atol=grad_atol(want_dw, torch.float32))
    assert_close(dh[0, :2], torch.zeros(2, 8, device=DEVICE))  # ignored rows: no gradient


def test_fused_linear_all_ignored_and_empty():
    h, w, _ = linear_inputs(4, 3, 7, torch.float32)
    t = torch.full((4,), ce.IGNORE_INDEX, device=DEVICE)
    loss = ce.fused_linear_cross_entropy(h, w, t)
    assert math.isnan(loss.item())
    dh, dw = torch.autograd.grad(loss, (h, w))
    assert_close(dh, torch.zeros_like(dh))
    assert_close(dw, torch.zeros_like(dw))
    h0 = torch.empty(0, 3, device=DEVICE, requires_grad=True)
    t0 = torch.empty(0, dtype=torch.long, device=DEVICE)
    s = ce.fused_linear_cross_entropy(h0, w, t0, reduction="sum")
    assert s.item() == 0.0
    assert_close(torch.autograd.grad(s, w)[0], torch.zeros_like(w))


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_fused_linear_nan_like_torch():
    h, w, t = linear_inputs(6, 4, 10, torch.float32, requires_grad=False)
    h[2, 1] = math.nan
    w[3, 0] = math.inf
    got = ce.fused_linear_cross_entropy(h, w, t, reduction="sum")
    want = ce.linear_cross_entropy_torch(h, w, t, reduction="sum")
    assert_close(got, want)


def test_fused_linear_int32_targets_strided_h_and_out_of_range_targets():
    h, w, t = linear_inputs(10, 6, 23, torch.float32)
    want, want_dh, want_dw = linear_reference(h, w, t)
    h_t = h.detach().t().contiguous().t().requires_grad_()  # same values, column-major: not contiguous
    loss = ce.fused_linear_cross_entropy(h_t, w, t.int(), chunk_size=4)
    dh, dw = torch.autograd.grad(loss, (h_t, w))
    assert_close(loss, want.float())
    assert_close(dh, want_dh.float(), atol=grad_atol(want_dh, torch.float32))
    assert_close(dw, want_dw.float(), atol=grad_atol(want_dw, torch.float32))
    bad = t.clone()
    bad[0] = 23  # outside [0, V): no host sync to raise on it, so a NaN loss (and NaN grads), no wild read
    assert torch.isnan(ce.fused_linear_cross_entropy(h, w, bad, chunk_size=4))
    with torch.no_grad():
        assert torch.isnan(ce.fused_linear_cross_entropy(h, w, bad, chunk_size=4))


def test_fused_linear_backward_runs_once():
    h, w, t = linear_inputs(5, 4, 9, torch.float32)
    loss = ce.fused_linear_cross_entropy(h, w, t)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs once"):
        loss.backward()


def test_fused_linear_with_week3_triton_matmul():
    # fp16 through week 3's tl.dot kernel for the logits and dh; dW accumulates with torch.
    h, w, t = linear_inputs(40, 32, 70, torch.float16)
    loss = ce.fused_linear_cross_entropy(h, w, t, chunk_size=16, matmul="triton")
    dh, dw = torch.autograd.grad(loss, (h, w))
    want, want_dh, want_dw = linear_reference(h, w, t)
    # fp16 logits and fp16 gradients of the logits: each rounded once (2^-11), so a few fp16
    # units of the largest entry; dW adds one fp16 rounding per chunk (3 chunks here).
    assert_close(loss, want.half(), rtol=2e-3)
    assert_close(dh, want_dh.half(), atol=grad_atol(want_dh, torch.float16, k=4))
    assert_close(dw, want_dw.half(), atol=grad_atol(want_dw, torch.float16, k=8))


class LargestAllocation(TorchDispatchMode):
    """Records the largest storage (bytes) any aten op returns: views share their base's storage."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self.largest = max(self.largest, leaf.untyped_storage().nbytes())
        return out


def test_chunked_path_never_allocates_the_full_logits():
    n, d, v, chunk = 48, 8, 257, 8
    h, w, t = linear_inputs(n, d, v, torch.float32)
    full_logits = n * v * 4
    with LargestAllocation() as torch_run:
        loss = ce.linear_cross_entropy_torch(h, w, t)
        torch.autograd.grad(loss, (h, w))
    assert torch_run.largest >= full_logits  # the check can see an N x V tensor when there is one
    with LargestAllocation() as fused_run:
        loss = ce.fused_linear_cross_entropy(h, w, t, chunk_size=chunk)
        torch.autograd.grad(loss, (h, w))
    # Nothing bigger than W (and dW) or one chunk of logits: C x V, never N x V.
    assert fused_run.largest <= max(chunk * v * 4, v * d * 4), fused_run.largest
    assert fused_run.largest < full_logits // 4


def bad_linear_inputs():
    f = lambda *s: torch.randn(*s, device=DEVICE)  # noqa: E731
    t = lambda n=4: torch.zeros(n, dtype=torch.long, device=DEVICE)  # noqa: E731
    yield "dtype mismatch", TypeError, "dtypes must match", lambda: (f(4, 3), f(5, 3).double(), t(), {})
    yield "hidden size", ValueError, "hidden size", lambda: (f(4, 3), f(5, 2), t(), {})
    yield "targets shape", ValueError, "targets has shape", lambda: (f(4, 3), f(5, 3), t(3), {})
    yield "reduction none", ValueError, "reduction must be", lambda: (f(4, 3), f(5, 3), t(), {"reduction": "none"})
    yield "chunk size", ValueError, "chunk_size", lambda: (f(4, 3), f(5, 3), t(), {"chunk_size": 0})
    yield "matmul", ValueError, "matmul must be", lambda: (f(4, 3), f(5, 3), t(), {"matmul": "cublas"})
    yield "triton fp32", TypeError, "fp16/bf16", lambda: (f(4, 3), f(5, 3), t(), {"matmul": "triton"})
    yield "no classes", ValueError, "0 rows", lambda: (f(4, 3), f(0, 3), t(), {})


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_linear_inputs()])
def test_fused_linear_rejects_bad_input(case, error, message, make):
    h, w, t, kwargs = make()
    with pytest.raises(error, match=message):
        ce.fused_linear_cross_entropy(h.requires_grad_(), w, t, **kwargs)


# ------------------------------------------------------------------- the fused-grad launcher
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
def test_fwd_grad_kernel_matches_torch(in_place, label_smoothing):
    # Loss and gradient in one kernel, as the fused linear loss runs it on each chunk (in place).
    logits = random_tensor((6, 301), torch.float32, DEVICE, scale=3.0)
    targets = make_targets(6, 301)
    scale = 1.0 / int((targets != ce.IGNORE_INDEX).sum())
    buffer = logits.clone()
    out = buffer if in_place else poisoned((6, 301), torch.float32, DEVICE)
    loss, dlogits = ce.cross_entropy_fwd_grad(buffer, targets, label_smoothing=label_smoothing, grad_scale=scale,
                                              out=out, block_v=64)
    assert dlogits is out
    want, want_grad = reference_grad(logits, targets, reduction="mean", label_smoothing=label_smoothing)
    want_rows = F.cross_entropy(logits.double(), targets, reduction="none", label_smoothing=label_smoothing)
    assert_close(loss, want_rows.float(), name="loss rows")
    assert_close(dlogits, want_grad.float(), atol=grad_atol(want_grad, torch.float32), name="dlogits")


# --------------------------------------------------------------------- precision at |x| ~ 1e4
U32 = 2.0**-24  # fp32's unit roundoff


def large_loss_tolerance(v, block_v=ce.BLOCK_V):
    """(rtol, atol) of the module docstring's model: 8u * loss + 8u (log2 V + V / BLOCK_V + 4)."""
    return 8 * U32, 8 * U32 * (math.log2(v) + v / min(block_v, 2 ** math.ceil(math.log2(v))) + 4)


def large_logits(n, v):
    """The realistic case: three logits per row near 1e4 (1e4 + N(0, 1)), the rest N(0, 10) far
    below, at columns that cross block edges; a row of +-1e4 only; a row all near 1e4 (a large
    shift of ordinary logits: the loss is ~log V, and CE is shift-invariant). Targets: the top
    logit, a near one, a far one, an ignored row."""
    x = random_tensor((n, v), torch.float32, DEVICE, scale=10.0)
    near = [2, v // 2, v - 1]
    x[:, near] = 1e4 + random_tensor((n, 3), torch.float32, DEVICE)
    x[-2] = 1e4 + random_tensor(v, torch.float32, DEVICE)
    x[-1] = 1e4 * torch.sign(random_tensor(v, torch.float32, DEVICE))
    t = torch.randint(0, v, (n,), device=DEVICE)
    t[0] = near[int(x[0, near].argmax())]  # the largest logit: a loss of ~0.1-1, where 1e-3 errors showed
    t[1] = near[0]
    t[2] = 5  # far below: a loss of ~1e4
    t[3] = ce.IGNORE_INDEX
    t[-1] = int((x[-1] > 0).nonzero()[0])  # one of the +1e4 entries: loss = log(count of them)
    return x, t


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


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_fwd_grad_kernel_at_logits_near_1e4(label_smoothing):
    n, v = 8, 301
    x, t = large_logits(n, v)
    rtol, atol = large_loss_tolerance(v, 64)
    buffer = x.clone()
    loss, dlogits = ce.cross_entropy_fwd_grad(buffer, t, label_smoothing=label_smoothing, grad_scale=0.25,
                                              out=buffer, block_v=64)  # in place, as in the chunk loop
    want = F.cross_entropy(x.double(), t, reduction="none", label_smoothing=label_smoothing)
    assert_close(loss, want.float(), rtol=rtol, atol=atol, name="loss rows")
    xd = x.double().requires_grad_()
    (0.25 * F.cross_entropy(xd, t, reduction="none", label_smoothing=label_smoothing).sum()).backward()
    assert_close(dlogits, xd.grad.float(), atol=grad_atol(xd.grad, torch.float32), name="dlogits")


def large_linear_inputs(n, d, v):
    """h, W whose products are exact in fp32 (and TF32): h holds integers in [-3, 3] with
    h[:, 0] = 100; W multiples of 1/8 in [-2, 2], W[:, 0] = 100 + k/8 for three classes (logits
    ~1e4 + tens) and integers in [-20, 20] for the rest (logits within ~2000 of 0). Every partial
    sum is a multiple of 1/8 below 2^14: exact, so the float64 reference sees the very logits the
    kernel sees, and only the loss's own arithmetic is measured."""
    h = torch.randint(-3, 4, (n, d), device=DEVICE).float()
    h[:, 0] = 100.0
    w = torch.randint(-16, 17, (v, d), device=DEVICE).float() / 8
    w[:, 0] = torch.randint(-20, 21, (v,), device=DEVICE).float()
    near = torch.tensor([1, v // 2, v - 2], device=DEVICE)
    w[near, 0] = 100.0 + torch.randint(-8, 9, (3,), device=DEVICE).float() / 8
    t = torch.randint(0, v, (n,), device=DEVICE)
    logits = h @ w.t()
    t[: n // 2] = logits[: n // 2].argmax(-1)  # half the rows: the top logit, a small loss
    t[n // 2] = ce.IGNORE_INDEX
    return h.requires_grad_(), w.requires_grad_(), t


# Smoothing at |x| ~ 1e4 in the kernel the chunks run is test_fwd_grad_kernel_at_logits_near_1e4's.
@pytest.mark.parametrize("label_smoothing", [0.0, pytest.param(0.1, marks=SLOW)])
def test_fused_linear_at_logits_near_1e4(label_smoothing):
    n, d, v = 24, 8, 301
    h, w, t = large_linear_inputs(n, d, v)
    assert float((h.detach() @ w.detach().t()).max()) > 9000  # the regime this test is about
    rtol, atol = large_loss_tolerance(v)
    # The loss: the row model, summed over rows (each row's error adds; the sum adds one rounding
    # per row and a tree of log2(4096) levels). The small losses (top-logit targets, the first
    # half) alone first, where an error of fp32's 1e-3 spacing at 1e4 would show; then the mean.
    small = slice(0, n // 2)
    got = ce.fused_linear_cross_entropy(h.detach()[small], w.detach(), t[small], reduction="sum", chunk_size=5,
                                        label_smoothing=label_smoothing)
    want_small = ce.linear_cross_entropy_torch(h.detach()[small].double(), w.detach().double(), t[small],
                                               reduction="sum", label_smoothing=label_smoothing)
    assert_close(got, want_small.float(), rtol=(n + 20) * U32, atol=n * atol, name="sum of the small losses")
    loss = ce.fused_linear_cross_entropy(h, w, t, chunk_size=7, label_smoothing=label_smoothing)
    dh, dw = torch.autograd.grad(loss, (h, w))
    want, want_dh, want_dw = linear_reference(h, w, t, label_smoothing=label_smoothing)
    assert_close(loss, want.float(), rtol=(n + 20) * U32, atol=atol, name="mean")
    # dh = dlogits @ W and dW = dlogits^T @ h: dlogits off by a few u times its scale g = 1/n,
    # then one fp32 matmul (|error| <= K u sum |a||b|, K = V or n terms). Bound: 8u g (|W| summed
    # over the V classes) for dh, and the same over the n rows with |h| for dW, plus the
    # reference's own size in fp32 units (grad_atol).
    g = 1.0 / int((t != ce.IGNORE_INDEX).sum())
    dh_atol = 8 * U32 * g * float(w.detach().abs().sum(0).max()) + grad_atol(want_dh, torch.float32)
    dw_atol = 8 * U32 * g * float(h.detach().abs().sum(0).max()) + grad_atol(want_dw, torch.float32)
    assert_close(dh, want_dh.float(), atol=dh_atol, name="dh")
    assert_close(dw, want_dw.float(), atol=dw_atol, name="dW")


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


@pytest.mark.parametrize("need", [(True, True), (True, False), (False, True)], ids=["dh_dw", "dh", "dw"])
@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.float64, marks=SLOW)],
                         ids=["float32", "float64"])
def test_opcheck_fused_linear_op(dtype, need):
    h, w, t = linear_inputs(9, 6, 41, dtype, requires_grad=False)
    h.requires_grad_(need[0])
    w.requires_grad_(need[1])
    for reduction, chunk in (("mean", 4), ("sum", None)):
        torch.library.opcheck(ce.fused_linear_cross_entropy_op,
                              (h, w, t, ce.IGNORE_INDEX, reduction, 0.1, chunk, "torch", *need))
    loss, dh, dw = ce.fused_linear_cross_entropy_op(h, w, t, ce.IGNORE_INDEX, "mean", 0.0, 4, "torch", *need)
    assert dh.shape == (h.shape if need[0] else (0,)) and dw.shape == (w.shape if need[1] else (0,))
    assert dw.dtype == w.dtype and loss.shape == () and loss.dtype == dtype


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
    # The fused linear loss: no autograd, the Function, the op: one loss, the same gradients.
    h, w, t = linear_inputs(11, 6, 41, torch.float32)
    with torch.no_grad():
        plain = ce.fused_linear_cross_entropy(h, w, t, chunk_size=4)
    tracked = ce.fused_linear_cross_entropy(h, w, t, chunk_size=4)
    dh, dw = torch.autograd.grad(tracked, (h, w))
    loss, op_dh, op_dw = ce.fused_linear_cross_entropy_op(h.detach(), w.detach(), t, ce.IGNORE_INDEX, "mean", 0.0,
                                                          4, "torch", True, True)
    assert torch.equal(plain, tracked.detach()) and torch.equal(plain, loss)
    assert torch.equal(dh, op_dh) and torch.equal(dw, op_dw)


def logits_model(x, w, t):
    """A model's last steps: a projection, torch ops on the logits, the registered cross-entropy."""
    logits = torch.tanh(x @ w.t()) * 4.0
    return ce.cross_entropy(logits, t, label_smoothing=0.1) + 0.01 * logits.square().mean()


def lm_head(x, w, t):
    """An LM head: a final norm in torch ops, then the fused linear + loss (the logits never exist)."""
    h = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6)
    return ce.fused_linear_cross_entropy(h, w, t, chunk_size=5, label_smoothing=0.1)


def compile_and_compare(fn, leaves, t, dtype, rtol):
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend=runtime.pick(gpu="inductor", sim="aot_eager"))
    ours = [x.clone().requires_grad_(True) for x in leaves]
    loss = compiled(*ours, t)
    grads = torch.autograd.grad(loss, ours)
    eager = [x.clone().requires_grad_(True) for x in leaves]
    want = fn(*eager, t)
    want_grads = torch.autograd.grad(want, eager)
    # The same kernels: only the torch ops around them may round differently once fused.
    assert_close(loss, want, rtol=2 * rtol, atol=1e-5, name="loss")
    for got, ref in zip(grads, want_grads):
        assert_close(got, ref, rtol=4 * rtol, atol=16 * rtol * float(ref.abs().max()), name="grad")


@pytest.mark.parametrize("dtype", [case(*p.values, id=p.id, keep=p.id == "float32", marks=p.marks)
                                   for p in dtype_params([torch.float32, torch.bfloat16])])
def test_model_with_cross_entropy_compiles_with_no_graph_break(dtype):
    # fullgraph=True raises on any graph break; on the GPU Inductor compiles the torch ops around
    # the registered op, in simulation aot_eager traces the same graphs (fake tensors, autograd).
    n, d, v = 12, 16, 37
    x = random_tensor((n, d), dtype, DEVICE)
    w = random_tensor((v, d), dtype, DEVICE, scale=d**-0.5)
    compile_and_compare(logits_model, [x, w], make_targets(n, v), dtype, rtol_for(dtype))


@pytest.mark.parametrize("dtype", [case(*p.values, id=p.id, keep=p.id == "float32", marks=p.marks)
                                   for p in dtype_params([torch.float32, torch.bfloat16])])
def test_lm_head_with_fused_linear_loss_compiles_with_no_graph_break(dtype):
    n, d, v = 12, 16, 37
    x = random_tensor((n, d), dtype, DEVICE)
    w = random_tensor((v, d), dtype, DEVICE, scale=d**-0.5)
    compile_and_compare(lm_head, [x, w], make_targets(n, v), dtype, rtol_for(dtype))


def rtol_for(dtype):
    return {torch.float32: 1.3e-6, torch.bfloat16: 1.6e-2}[dtype]


def test_compiled_graphs_hold_the_ops_not_their_kernels():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    n, d, v = 6, 8, 29
    x, w = random_tensor((n, d), torch.float32, DEVICE), random_tensor((v, d), torch.float32, DEVICE)
    t = make_targets(n, v)
    for fn, name in ((logits_model, "cross_entropy_rows"), (lm_head, "fused_linear_cross_entropy")):
        torch._dynamo.reset()
        graphs.clear()
        torch.compile(fn, backend=backend, fullgraph=True)(x, w, t)
        assert len(graphs) == 1
        calls = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
        assert any(name in c and ce.NAMESPACE in c for c in calls), calls
        assert not any("triton" in c for c in calls), calls  # one opaque node, no raw launch


# ---------------------------------------------------------------------------------- GPU only
@pytest.mark.gpu(reason="bf16 arithmetic and the LM-head sizes need the device")
@pytest.mark.parametrize("shape", [(512, 256, 32000), pytest.param((300, 512, 50257), marks=SLOW)], ids=str)
def test_fused_linear_bf16_against_float64(shape):
    n, d, v = shape
    h, w, t = linear_inputs(n, d, v, torch.bfloat16)
    chunk = 128
    loss = ce.fused_linear_cross_entropy(h, w, t, chunk_size=chunk)
    dh, dw = torch.autograd.grad(loss, (h, w))
    want, want_dh, want_dw = linear_reference(h, w, t)
    assert_close(loss, want.bfloat16(), name="loss")
    # bf16 logits and bf16 gradients (2^-8 relative each, as torch's own bf16 path), and dW
    # accumulates in bf16: one extra rounding per chunk.
    n_chunks = math.ceil(n / chunk)
    assert_close(dh, want_dh.bfloat16(), atol=grad_atol(want_dh, torch.bfloat16, k=2), name="dh")
    assert_close(dw, want_dw.bfloat16(), atol=grad_atol(want_dw, torch.bfloat16, k=2 + n_chunks), name="dW")


@pytest.mark.gpu(reason="peak memory is read from the CUDA caching allocator")
def test_fused_linear_peak_memory_under_a_quarter_of_torch():
    h, w, t = linear_inputs(4096, 1024, 32768, torch.bfloat16)
    eager = ce.loss_and_grads(ce.linear_cross_entropy_torch)
    fused = ce.loss_and_grads(lambda a, b, c: ce.fused_linear_cross_entropy(a, b, c, chunk_size=512))
    eager(h, w, t), fused(h, w, t)  # warm-up: cuBLAS workspaces and compiled kernels are not the loss's
    torch_mib = ce.peak_memory_mib(eager, h, w, t)
    fused_mib = ce.peak_memory_mib(fused, h, w, t)
    assert fused_mib <= torch_mib / 4, (fused_mib, torch_mib)
