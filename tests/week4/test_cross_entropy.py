"""week4_triton_dl.cross_entropy: CE on logits and the chunked linear + CE, against float64 torch.

Error model for the tolerances. The kernels accumulate in fp32 (fp64 for fp64 inputs): the
logsumexp of a V-wide row is off by a few units of fp32 (u = 2^-24) times log2(V) in relative
terms, so losses meet the float64 reference within the default fp32 tolerance. Gradients are
softmax - y, entries from ~1/V up to 1: they are compared with an absolute tolerance scaled by
the largest reference entry (a few units of the dtype's precision times that maximum), which a
wrong row, a missing 1/N or a wrong target would exceed by orders of magnitude.
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
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
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


@pytest.mark.parametrize("block_v", [16, 64])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1, 1.0])
def test_many_chunks_and_label_smoothing(block_v, label_smoothing):
    # A small block makes the running max change between chunks; V = 301 leaves a ragged tail.
    logits = random_tensor((6, 301), torch.float32, DEVICE, scale=4.0)
    targets = make_targets(6, 301)
    loss, lse = ce.cross_entropy_forward(logits, targets, label_smoothing=label_smoothing, block_v=block_v)
    want = F.cross_entropy(logits.double(), targets, reduction="none", label_smoothing=label_smoothing)
    assert_close(loss, want.float(), name="loss rows")
    valid = targets != ce.IGNORE_INDEX
    assert_close(lse[valid], torch.logsumexp(logits.double(), -1)[valid].float(), name="lse")
    grad = torch.randn(6, device=DEVICE)
    out = poisoned((6, 301), torch.float32, DEVICE)
    got = ce.cross_entropy_backward(logits, targets, lse, grad, label_smoothing=label_smoothing, block_v=block_v,
                                    out=out)
    assert got is out
    x = logits.double().requires_grad_()
    F.cross_entropy(x, targets, reduction="none", label_smoothing=label_smoothing).backward(grad.double())
    assert_close(got, x.grad.float(), atol=grad_atol(x.grad, torch.float32))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradcheck_float64(reduction):
    logits = random_tensor((4, 9), torch.float64, DEVICE).requires_grad_()
    targets = torch.tensor([3, ce.IGNORE_INDEX, 0, 8], device=DEVICE)
    assert torch.autograd.gradcheck(
        lambda x: ce.cross_entropy(x, targets, reduction=reduction, label_smoothing=0.2), (logits,))


def test_ignore_index_all_ignored_and_empty():
    logits = random_tensor((3, 5), torch.float32, DEVICE).requires_grad_()
    targets = torch.full((3,), ce.IGNORE_INDEX, device=DEVICE)
    loss = ce.cross_entropy(logits, targets)  # 0 / 0, as torch: NaN, and zero gradients
    assert math.isnan(loss.item())
    (grad,) = torch.autograd.grad(loss, logits)
    assert_close(grad, torch.zeros_like(logits))
    # A custom ignore_index that is also a real class: that class's rows are skipped.
    t = torch.tensor([2, 4, 2], device=DEVICE)
    assert_close(ce.cross_entropy(logits.detach(), t, ignore_index=2),
                 F.cross_entropy(logits.detach().double(), t, ignore_index=2).float())
    empty = torch.empty(0, 5, device=DEVICE)
    none = torch.empty(0, dtype=torch.long, device=DEVICE)
    assert math.isnan(float(ce.cross_entropy(empty, none)))
    assert float(ce.cross_entropy(empty, none, reduction="sum")) == 0.0
    assert ce.cross_entropy(empty, none, reduction="none").shape == (0,)


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


def test_strided_rows():
    # Rows of a wider tensor (a row stride bigger than the row): unit stride is all it needs.
    wide = random_tensor((4, 50), torch.float32, DEVICE)
    logits, targets = wide[:, :37], torch.tensor([0, 36, 5, 9], device=DEVICE)
    assert_close(ce.cross_entropy(logits, targets), F.cross_entropy(logits.double(), targets).float())


def bad_logit_inputs():
    ok = lambda *s: torch.randn(*(s or (4, 8)), device=DEVICE)  # noqa: E731
    t = lambda *v: torch.tensor(v or (0, 1, 2, 3), device=DEVICE)  # noqa: E731
    yield "not a tensor", TypeError, "logits must be a torch.Tensor", lambda: ([[1.0]], t(), {})
    yield "int logits", TypeError, "expected one of", lambda: (ok().long(), t(), {})
    yield "1-D logits", ValueError, "2 dimension", lambda: (ok(8), t(), {})
    yield "no classes", ValueError, "0 classes", lambda: (ok(4, 0), t(), {})
    yield "column stride", ValueError, "unit stride", lambda: (ok(8, 4).t(), t(), {})
    yield "float targets", TypeError, "targets has dtype", lambda: (ok(), t().float(), {})
    yield "targets length", ValueError, "one per row", lambda: (ok(), t(0, 1), {})
    yield "target too big", ValueError, r"in \[0, 8\)", lambda: (ok(), t(0, 1, 8, 3), {})
    yield "negative target", ValueError, "found -1", lambda: (ok(), t(0, -1, 2, 3), {})
    yield "reduction", ValueError, "reduction must be", lambda: (ok(), t(), {"reduction": "avg"})
    yield "smoothing", ValueError, "label_smoothing", lambda: (ok(), t(), {"label_smoothing": 1.5})
    yield "ignore_index", TypeError, "ignore_index must be an int", lambda: (ok(), t(), {"ignore_index": -1.0})
    yield "wrong device", ValueError, "kernels run on", lambda: (torch.ones(4, 8, device="meta"), t(), {})


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_logit_inputs()])
def test_cross_entropy_rejects_bad_input(case, error, message, make):
    logits, targets, kwargs = make()
    with pytest.raises(error, match=message):
        ce.cross_entropy(logits, targets, **kwargs)


def test_backward_launcher_rejects_bad_grad():
    logits, targets = torch.randn(4, 8, device=DEVICE), torch.tensor([0, 1, 2, 3], device=DEVICE)
    _, lse = ce.cross_entropy_forward(logits, targets)
    with pytest.raises(ValueError, match="grad must be a scalar or have one element per row"):
        ce.cross_entropy_backward(logits, targets, lse, torch.ones(3, device=DEVICE))
    with pytest.raises(TypeError, match="lse has dtype"):
        ce.cross_entropy_backward(logits, targets, lse.double(), torch.ones((), device=DEVICE))
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


@pytest.mark.parametrize("chunk_size", [1, 7, 16, 50, 1000, None])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.float64]))
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
    h, w, t = linear_inputs(20, 8, 33, torch.float64)
    want, want_dh, want_dw = linear_reference(h, w, t)
    loss = ce.fused_linear_cross_entropy(h, w, t, chunk_size=6)
    (2.5 * loss).backward()  # the stored gradients are scaled by grad_output = 2.5
    assert_close(h.grad, 2.5 * want_dh)
    assert_close(w.grad, 2.5 * want_dw)
    # Only one input wants a gradient: the other is neither computed nor returned.
    h2 = h.detach().requires_grad_()
    (dh,) = torch.autograd.grad(ce.fused_linear_cross_entropy(h2, w.detach(), t, chunk_size=6), (h2,))
    assert_close(dh, want_dh)
    w2 = w.detach().requires_grad_()
    (dw,) = torch.autograd.grad(ce.fused_linear_cross_entropy(h.detach(), w2, t, chunk_size=6), (w2,))
    assert_close(dw, want_dw)
    with torch.no_grad():
        assert_close(ce.fused_linear_cross_entropy(h, w, t), want)


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
    yield "target range", ValueError, r"in \[0, 5\)", lambda: (f(4, 3), f(5, 3), t() + 5, {})


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_linear_inputs()])
def test_fused_linear_rejects_bad_input(case, error, message, make):
    h, w, t, kwargs = make()
    with pytest.raises(error, match=message):
        ce.fused_linear_cross_entropy(h.requires_grad_(), w, t, **kwargs)


# ---------------------------------------------------------------------------------- GPU only
@pytest.mark.gpu(reason="bf16 arithmetic and the LM-head sizes need the device")
@pytest.mark.parametrize("shape", [(512, 256, 32000), (300, 512, 50257)], ids=str)
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
