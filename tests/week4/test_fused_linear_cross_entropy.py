"""week4_triton_dl.fused_linear_cross_entropy: the chunked linear + CE and its fused kernel, against float64 torch.

The error model is test_cross_entropy.py's (the row loss's kernels accumulate in fp32, fp64 for
fp64 inputs; losses meet the float64 reference within the default tolerance, gradients within a
few units of their dtype's precision times the largest reference entry; at logits ~1e4 the loss's
error is <= 8u * loss + 8u (log2 V + V / BLOCK_V + 4), `large_loss_tolerance`); the helpers both files use are in
cross_entropy_helpers.py. What this file adds: dh = dlogits @ W and
dW = dlogits^T @ h are fp32 (or bf16) matmuls of those gradients, whose bounds each test states,
and dW accumulated in W's dtype adds one rounding per chunk.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor
from tests.week4.cross_entropy_helpers import (DEVICE, SLOW, U32, case, compile_and_compare, grad_atol,
                                               large_logits, large_loss_tolerance, make_targets,
                                               reference_grad, rtol_for)

flce = runtime.lesson("week4_triton_dl.fused_linear_cross_entropy")
# What the default run keeps (the rest is marked slow; `pytest --slow` runs it all): fp32 at every
# chunk size, fp64 on two (7 rows and the default), and one case of each opcheck and compile matrix.


# ------------------------------------------------------ loss and gradient in one kernel
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
def test_fwd_grad_kernel_matches_torch(in_place, label_smoothing):
    # Loss and gradient in one kernel, as the fused linear loss runs it on each chunk (in place).
    logits = random_tensor((6, 301), torch.float32, DEVICE, scale=3.0)
    targets = make_targets(6, 301)
    scale = 1.0 / int((targets != flce.IGNORE_INDEX).sum())
    buffer = logits.clone()
    out = buffer if in_place else poisoned((6, 301), torch.float32, DEVICE)
    loss, dlogits = flce.cross_entropy_fwd_grad(buffer, targets, label_smoothing=label_smoothing, grad_scale=scale,
                                                out=out, block_v=64)
    assert dlogits is out
    want, want_grad = reference_grad(logits, targets, reduction="mean", label_smoothing=label_smoothing)
    want_rows = F.cross_entropy(logits.double(), targets, reduction="none", label_smoothing=label_smoothing)
    assert_close(loss, want_rows.float(), name="loss rows")
    assert_close(dlogits, want_grad.float(), atol=grad_atol(want_grad, torch.float32), name="dlogits")


def bad_launcher_inputs():  # test_cross_entropy.py gives cross_entropy_forward the same
    ok = lambda *s: torch.randn(*(s or (4, 8)), device=DEVICE)  # noqa: E731
    t = lambda *v: torch.tensor(v or (0, 1, 2, 3), device=DEVICE)  # noqa: E731
    yield "column stride", ValueError, "unit stride", lambda: (ok(8, 4).t(), t(), {})
    yield "target too big", ValueError, r"in \[0, 8\)", lambda: (ok(), t(0, 1, 8, 3), {})
    yield "negative target", ValueError, "found -1", lambda: (ok(), t(0, -1, 2, 3), {})
    yield "strided targets", ValueError, "not contiguous", lambda: (ok(), t(0, 0, 1, 0, 2, 0, 3, 0)[::2], {})
    yield "block_v", ValueError, "block_v", lambda: (ok(), t(), {"block_v": 48})


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_launcher_inputs()])
def test_fwd_grad_launcher_rejects_bad_input_before_launch(case, error, message, make):
    logits, targets, kwargs = make()
    with pytest.raises(error, match=message):
        flce.cross_entropy_fwd_grad(logits, targets, **kwargs)


# ------------------------------------------------------------------------- fused linear + CE
def linear_inputs(n, d, v, dtype, requires_grad=True):
    h = random_tensor((n, d), dtype, DEVICE).requires_grad_(requires_grad)
    w = random_tensor((v, d), dtype, DEVICE, scale=d**-0.5).requires_grad_(requires_grad)
    return h, w, make_targets(n, v)


def linear_reference(h, w, t, **kwargs):
    hd, wd = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    loss = flce.linear_cross_entropy_torch(hd, wd, t, **kwargs)
    dh, dw = torch.autograd.grad(loss, (hd, wd))
    return loss, dh, dw


@pytest.mark.parametrize("dtype, reduction, chunk_size", [
    case(d, r, c, id=f"{str(d)[6:]}-{r}-{c}", keep=d == torch.float32 or c in (7, None))
    for d in (torch.float32, torch.float64) for r in ("mean", "sum") for c in (1, 7, 16, 50, 1000, None)])
def test_fused_linear_matches_torch(dtype, reduction, chunk_size):
    h, w, t = linear_inputs(50, 24, 301, dtype)
    loss = flce.fused_linear_cross_entropy(h, w, t, reduction=reduction, chunk_size=chunk_size, label_smoothing=0.1)
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
    loss = flce.fused_linear_cross_entropy(h, w, t, chunk_size=chunk, label_smoothing=0.1)
    (2.5 * loss).backward()  # the stored gradients are scaled by grad_output = 2.5
    assert_close(h.grad, 2.5 * want_dh)
    assert_close(w.grad, 2.5 * want_dw)
    # Only one input wants a gradient: the other is neither computed nor returned.
    h2 = h.detach().requires_grad_()
    (dh,) = torch.autograd.grad(flce.fused_linear_cross_entropy(h2, w.detach(), t, chunk_size=chunk,
                                                                label_smoothing=0.1), (h2,))
    assert_close(dh, want_dh)
    w2 = w.detach().requires_grad_()
    (dw,) = torch.autograd.grad(flce.fused_linear_cross_entropy(h.detach(), w2, t, chunk_size=chunk,
                                                                label_smoothing=0.1), (w2,))
    assert_close(dw, want_dw)
    with torch.no_grad():
        assert_close(flce.fused_linear_cross_entropy(h, w, t, label_smoothing=0.1), want)


def test_fused_linear_batched_shape_module_and_ignored_rows():
    h, w, _ = linear_inputs(12, 8, 29, torch.float32)
    h3 = h.detach().reshape(3, 4, 8).requires_grad_()
    t = torch.randint(0, 29, (3, 4), device=DEVICE)
    t[0, :2] = flce.IGNORE_INDEX
    loss = flce.FusedLinearCrossEntropy(chunk_size=5)(h3, w, t)
    dh, dw = torch.autograd.grad(loss, (h3, w))
    want, want_dh, want_dw = linear_reference(h3.reshape(12, 8), w, t.reshape(12))
    assert dh.shape == (3, 4, 8)
    assert_close(loss, want.float())
    assert_close(dh.reshape(12, 8), want_dh.float(), atol=grad_atol(want_dh, torch.float32))
    assert_close(dw, want_dw.float(), atol=grad_atol(want_dw, torch.float32))
    assert_close(dh[0, :2], torch.zeros(2, 8, device=DEVICE))  # ignored rows: no gradient


def test_fused_linear_all_ignored_and_empty():
    h, w, _ = linear_inputs(4, 3, 7, torch.float32)
    t = torch.full((4,), flce.IGNORE_INDEX, device=DEVICE)
    loss = flce.fused_linear_cross_entropy(h, w, t)
    assert math.isnan(loss.item())
    dh, dw = torch.autograd.grad(loss, (h, w))
    assert_close(dh, torch.zeros_like(dh))
    assert_close(dw, torch.zeros_like(dw))
    h0 = torch.empty(0, 3, device=DEVICE, requires_grad=True)
    t0 = torch.empty(0, dtype=torch.long, device=DEVICE)
    s = flce.fused_linear_cross_entropy(h0, w, t0, reduction="sum")
    assert s.item() == 0.0
    assert_close(torch.autograd.grad(s, w)[0], torch.zeros_like(w))


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_fused_linear_nan_like_torch():
    h, w, t = linear_inputs(6, 4, 10, torch.float32, requires_grad=False)
    h[2, 1] = math.nan
    w[3, 0] = math.inf
    got = flce.fused_linear_cross_entropy(h, w, t, reduction="sum")
    want = flce.linear_cross_entropy_torch(h, w, t, reduction="sum")
    assert_close(got, want)


def test_fused_linear_int32_targets_strided_h_and_out_of_range_targets():
    h, w, t = linear_inputs(10, 6, 23, torch.float32)
    want, want_dh, want_dw = linear_reference(h, w, t)
    h_t = h.detach().t().contiguous().t().requires_grad_()  # same values, column-major: not contiguous
    loss = flce.fused_linear_cross_entropy(h_t, w, t.int(), chunk_size=4)
    dh, dw = torch.autograd.grad(loss, (h_t, w))
    assert_close(loss, want.float())
    assert_close(dh, want_dh.float(), atol=grad_atol(want_dh, torch.float32))
    assert_close(dw, want_dw.float(), atol=grad_atol(want_dw, torch.float32))
    bad = t.clone()
    bad[0] = 23  # outside [0, V): no host sync to raise on it, so a NaN loss (and NaN grads), no wild read
    assert torch.isnan(flce.fused_linear_cross_entropy(h, w, bad, chunk_size=4))
    with torch.no_grad():
        assert torch.isnan(flce.fused_linear_cross_entropy(h, w, bad, chunk_size=4))


def test_fused_linear_backward_runs_once():
    h, w, t = linear_inputs(5, 4, 9, torch.float32)
    loss = flce.fused_linear_cross_entropy(h, w, t)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs once"):
        loss.backward()


def test_fused_linear_with_week3_triton_matmul():
    # fp16 through week 3's tl.dot kernel for the logits and dh; dW accumulates with torch.
    h, w, t = linear_inputs(40, 32, 70, torch.float16)
    loss = flce.fused_linear_cross_entropy(h, w, t, chunk_size=16, matmul="triton")
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
        loss = flce.linear_cross_entropy_torch(h, w, t)
        torch.autograd.grad(loss, (h, w))
    assert torch_run.largest >= full_logits  # the check can see an N x V tensor when there is one
    with LargestAllocation() as fused_run:
        loss = flce.fused_linear_cross_entropy(h, w, t, chunk_size=chunk)
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
        flce.fused_linear_cross_entropy(h.requires_grad_(), w, t, **kwargs)


# --------------------------------------------------------------------- precision at |x| ~ 1e4
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_fwd_grad_kernel_at_logits_near_1e4(label_smoothing):
    n, v = 8, 301
    x, t = large_logits(n, v)
    rtol, atol = large_loss_tolerance(v, 64)
    buffer = x.clone()
    loss, dlogits = flce.cross_entropy_fwd_grad(buffer, t, label_smoothing=label_smoothing, grad_scale=0.25,
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
    t[n // 2] = flce.IGNORE_INDEX
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
    got = flce.fused_linear_cross_entropy(h.detach()[small], w.detach(), t[small], reduction="sum", chunk_size=5,
                                          label_smoothing=label_smoothing)
    want_small = flce.linear_cross_entropy_torch(h.detach()[small].double(), w.detach().double(), t[small],
                                                 reduction="sum", label_smoothing=label_smoothing)
    assert_close(got, want_small.float(), rtol=(n + 20) * U32, atol=n * atol, name="sum of the small losses")
    loss = flce.fused_linear_cross_entropy(h, w, t, chunk_size=7, label_smoothing=label_smoothing)
    dh, dw = torch.autograd.grad(loss, (h, w))
    want, want_dh, want_dw = linear_reference(h, w, t, label_smoothing=label_smoothing)
    assert_close(loss, want.float(), rtol=(n + 20) * U32, atol=atol, name="mean")
    # dh = dlogits @ W and dW = dlogits^T @ h: dlogits off by a few u times its scale g = 1/n,
    # then one fp32 matmul (|error| <= K u sum |a||b|, K = V or n terms). Bound: 8u g (|W| summed
    # over the V classes) for dh, and the same over the n rows with |h| for dW, plus the
    # reference's own size in fp32 units (grad_atol).
    g = 1.0 / int((t != flce.IGNORE_INDEX).sum())
    dh_atol = 8 * U32 * g * float(w.detach().abs().sum(0).max()) + grad_atol(want_dh, torch.float32)
    dw_atol = 8 * U32 * g * float(h.detach().abs().sum(0).max()) + grad_atol(want_dw, torch.float32)
    assert_close(dh, want_dh.float(), atol=dh_atol, name="dh")
    assert_close(dw, want_dw.float(), atol=dw_atol, name="dW")


# ------------------------------------------------------------------ as a PyTorch op in a model
@pytest.mark.parametrize("need", [(True, True), (True, False), (False, True)], ids=["dh_dw", "dh", "dw"])
@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.float64, marks=SLOW)],
                         ids=["float32", "float64"])
def test_opcheck_fused_linear_op(dtype, need):
    h, w, t = linear_inputs(9, 6, 41, dtype, requires_grad=False)
    h.requires_grad_(need[0])
    w.requires_grad_(need[1])
    for reduction, chunk in (("mean", 4), ("sum", None)):
        torch.library.opcheck(flce.fused_linear_cross_entropy_op,
                              (h, w, t, flce.IGNORE_INDEX, reduction, 0.1, chunk, "torch", *need))
    loss, dh, dw = flce.fused_linear_cross_entropy_op(h, w, t, flce.IGNORE_INDEX, "mean", 0.0, 4, "torch", *need)
    assert dh.shape == (h.shape if need[0] else (0,)) and dw.shape == (w.shape if need[1] else (0,))
    assert dw.dtype == w.dtype and loss.shape == () and loss.dtype == dtype


def test_eager_paths_and_the_registered_op_agree():
    # No autograd, the Function, the op: one loss, the same gradients.
    h, w, t = linear_inputs(11, 6, 41, torch.float32)
    with torch.no_grad():
        plain = flce.fused_linear_cross_entropy(h, w, t, chunk_size=4)
    tracked = flce.fused_linear_cross_entropy(h, w, t, chunk_size=4)
    dh, dw = torch.autograd.grad(tracked, (h, w))
    loss, op_dh, op_dw = flce.fused_linear_cross_entropy_op(h.detach(), w.detach(), t, flce.IGNORE_INDEX, "mean",
                                                            0.0, 4, "torch", True, True)
    assert torch.equal(plain, tracked.detach()) and torch.equal(plain, loss)
    assert torch.equal(dh, op_dh) and torch.equal(dw, op_dw)



def lm_head(x, w, t):
    """An LM head: a final norm in torch ops, then the fused linear + loss (the logits never exist)."""
    h = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6)
    return flce.fused_linear_cross_entropy(h, w, t, chunk_size=5, label_smoothing=0.1)


@pytest.mark.parametrize("dtype", [case(*p.values, id=p.id, keep=p.id == "float32", marks=p.marks)
                                   for p in dtype_params([torch.float32, torch.bfloat16])])
def test_lm_head_with_fused_linear_loss_compiles_with_no_graph_break(dtype):
    n, d, v = 12, 16, 37
    x = random_tensor((n, d), dtype, DEVICE)
    w = random_tensor((v, d), dtype, DEVICE, scale=d**-0.5)
    compile_and_compare(lm_head, [x, w], make_targets(n, v), dtype, rtol_for(dtype))


def test_compiled_graph_holds_the_op_not_its_kernels():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    n, d, v = 6, 8, 29
    x, w = random_tensor((n, d), torch.float32, DEVICE), random_tensor((v, d), torch.float32, DEVICE)
    torch._dynamo.reset()
    torch.compile(lm_head, backend=backend, fullgraph=True)(x, w, make_targets(n, v))
    assert len(graphs) == 1
    calls = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert any("fused_linear_cross_entropy" in c and flce.NAMESPACE in c for c in calls), calls
    assert not any("triton" in c for c in calls), calls  # one opaque node, no raw launch



# ---------------------------------------------------------------------------------- GPU only
@pytest.mark.gpu(reason="bf16 arithmetic and the LM-head sizes need the device")
@pytest.mark.parametrize("shape", [(512, 256, 32000), pytest.param((300, 512, 50257), marks=SLOW)], ids=str)
def test_fused_linear_bf16_against_float64(shape):
    n, d, v = shape
    h, w, t = linear_inputs(n, d, v, torch.bfloat16)
    chunk = 128
    loss = flce.fused_linear_cross_entropy(h, w, t, chunk_size=chunk)
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
    eager = flce.loss_and_grads(flce.linear_cross_entropy_torch)
    fused = flce.loss_and_grads(lambda a, b, c: flce.fused_linear_cross_entropy(a, b, c, chunk_size=512))
    eager(h, w, t), fused(h, w, t)  # warm-up: cuBLAS workspaces and compiled kernels are not the loss's
    torch_mib = flce.peak_memory_mib(eager, h, w, t)
    fused_mib = flce.peak_memory_mib(fused, h, w, t)
    assert fused_mib <= torch_mib / 4, (fused_mib, torch_mib)
