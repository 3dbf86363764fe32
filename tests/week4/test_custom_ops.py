"""week4_triton_dl.custom_ops: Triton kernels registered as torch ops, under torch.compile.

Compiling costs 10-40 s per graph on a 2-core CPU, so only ONE test here compiles with Inductor
on the CPU (the custom-op cross-entropy, forward and backward). The other "does it break the
graph?" questions are answered by `torch._dynamo.explain` (tracing only, no Inductor: ~1 s),
and the compiles that need real Triton kernels (triton_op, the raw launch) are GPU-only. What
the interpreter does with them is checked too (torch 2.11 / Triton 3.6, the GPU image's pair).
The cross-entropy op is cross_entropy.py's own (tests/week4/test_cross_entropy.py tests it in
depth); here it stands for "a custom op", beside the triton_op and the raw launch.
"""
import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, random_tensor

co = runtime.lesson("week4_triton_dl.custom_ops")
ce = co.ce  # the cross-entropy module the lesson imports (the solution's, in both copies)
DEVICE = runtime.DEVICE


def head_inputs(n=12, d=8, v=30, dtype=torch.float32):
    h = random_tensor((n, d), dtype, DEVICE).requires_grad_()
    w = random_tensor((v, d), dtype, DEVICE, scale=d**-0.5).requires_grad_()
    t = torch.randint(0, v, (n,), device=DEVICE)
    t[3] = -100
    return h, w, t


def reference_head(h, w, t):
    hd, wd = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    loss = F.cross_entropy(hd @ wd.t(), t, label_smoothing=0.1)
    return loss, torch.autograd.grad(loss, (hd, wd))


# ----------------------------------------------------------------- custom_op: eager behaviour
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_op_matches_torch(reduction):
    logits = random_tensor((9, 40), torch.float32, DEVICE, scale=3.0).requires_grad_()
    targets = torch.randint(0, 40, (9,), device=DEVICE)
    targets[0] = -100
    loss = co.cross_entropy_op(logits, targets, reduction=reduction, label_smoothing=0.05)
    (grad,) = torch.autograd.grad(loss.sum(), logits)
    x = logits.detach().double().requires_grad_()
    want = F.cross_entropy(x, targets, reduction=reduction, label_smoothing=0.05)
    want.sum().backward()
    assert_close(loss, want.float())
    # softmax - y: entries up to 1, fp32 arithmetic: 8 fp32 units of the largest entry.
    assert_close(grad, x.grad.float(), atol=8 * 2.0**-23 * float(x.grad.abs().max()))


def test_cross_entropy_op_gradcheck_and_all_ignored():
    logits = random_tensor((4, 6), torch.float64, DEVICE).requires_grad_()
    targets = torch.tensor([1, -100, 5, 0], device=DEVICE)
    assert torch.autograd.gradcheck(lambda x: co.cross_entropy_op(x, targets, label_smoothing=0.2), (logits,))
    ignored = torch.full((4,), -100, device=DEVICE)
    assert torch.isnan(co.cross_entropy_op(logits, ignored))  # 0 / 0, as torch


def test_the_custom_op_is_cross_entropys_own():
    # One registration, in cross_entropy.py: this lesson shows it, it does not copy it.
    assert co.cross_entropy_rows is ce.cross_entropy_rows_op
    assert co.cross_entropy_rows_backward is ce.cross_entropy_rows_backward_op
    assert co.cross_entropy_op is ce.cross_entropy
    assert hasattr(getattr(torch.ops, ce.NAMESPACE), "cross_entropy_rows")  # torch.ops.course.cross_entropy_rows


def test_opcheck_fake_schema_and_autograd_registration():
    # torch.library.opcheck runs the op for real and on fake tensors, checks the schema
    # (mutation, aliasing), the autograd registration and the compiler's dispatch paths.
    logits = random_tensor((6, 11), torch.float32, DEVICE).requires_grad_()
    targets = torch.randint(0, 11, (6,), device=DEVICE)
    _, lse = co.cross_entropy_rows(logits, targets, -100, 0.1)  # it must run eagerly before anything else
    assert lse.dtype == torch.float64  # m + log d, held exactly (see cross_entropy.py's docstring)
    torch.library.opcheck(co.cross_entropy_rows, (logits, targets, -100, 0.1))
    torch.library.opcheck(co.cross_entropy_rows_backward,
                          (torch.ones(6, device=DEVICE), logits.detach(), targets, lse, -100, 0.1))


def test_cross_entropy_op_rejects_bad_input():
    logits, targets = torch.randn(3, 5, device=DEVICE), torch.tensor([0, 1, 2], device=DEVICE)
    with pytest.raises(ValueError, match="reduction must be"):
        co.cross_entropy_op(logits, targets, reduction="avg")
    with pytest.raises(ValueError, match="one per row"):
        co.cross_entropy_op(logits, targets[:2])  # shapes are checked before any launch
    # A target VALUE outside [0, V) cannot raise without a host sync (which a compiled graph, and
    # a CUDA graph above all, cannot hold): the kernel never reads it, and the row's loss is NaN.
    bad = torch.tensor([0, 1, 5], device=DEVICE)
    assert torch.isnan(co.cross_entropy_op(logits, bad))
    assert_close(co.cross_entropy_op(logits, bad, reduction="none")[:2],
                 F.cross_entropy(logits[:2].double(), bad[:2], reduction="none").float())
    with pytest.raises(ValueError, match=r"in \[0, 5\)"):
        ce.cross_entropy_forward(logits, bad)  # the validated launcher checks values (one sync)


# ---------------------------------------------------------------- custom_op under compile
def test_custom_op_makes_one_graph_without_breaks():
    inputs = head_inputs()
    co.loss_head(*inputs)  # eagerly first: the compiler's verdict means little if this fails
    report = co.compile_report(co.loss_head, *inputs)
    assert report["error"] is None, report
    assert (report["graphs"], report["graph_breaks"]) == (1, 0), report


def test_compiled_fullgraph_matches_eager_forward_and_backward():
    # The one Inductor compile of this file (~10 s on 2 CPU cores): forward and backward graphs,
    # each holding one opaque custom-op node around which Inductor compiles the matmuls.
    torch._dynamo.reset()
    h, w, t = head_inputs()
    co.loss_head(h, w, t)  # eagerly first
    compiled = torch.compile(co.loss_head, fullgraph=True)
    loss = compiled(h, w, t)
    dh, dw = torch.autograd.grad(loss, (h, w))
    want, (want_dh, want_dw) = reference_head(h, w, t)
    assert_close(loss, want.float())
    for got, ref in ((dh, want_dh), (dw, want_dw)):
        assert_close(got, ref.float(), atol=16 * 2.0**-23 * float(ref.abs().max()))


# -------------------------------------------------------------------------------- triton_op
def test_triton_op_eager_matches_week3_kernel_and_gradients():
    x = random_tensor((5, 33), torch.float32, DEVICE).requires_grad_()
    b = random_tensor(33, torch.float32, DEVICE).requires_grad_()
    y = co.bias_gelu_op(x, b)
    assert_close(y, co.raw_bias_gelu(x.detach(), b.detach()), rtol=0, atol=0)  # the same kernel
    grad = random_tensor((5, 33), torch.float32, DEVICE)
    got = torch.autograd.grad(y, (x, b), grad)
    xd, bd = x.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    want = F.gelu(xd + bd)
    want_grads = torch.autograd.grad(want, (xd, bd), grad.double())
    assert_close(y, want.float())
    # db sums 5 rows of fp32 products: a few fp32 units of the largest entry.
    for g, ref in zip(got, want_grads):
        assert_close(g, ref.float(), atol=8 * 2.0**-23 * float(ref.abs().max()))


def test_triton_op_rejects_bad_input():
    x = torch.randn(4, 8, device=DEVICE)
    with pytest.raises(ValueError, match="bias must be 1-D"):
        co.bias_gelu_op(x, torch.randn(7, device=DEVICE))
    with pytest.raises(TypeError, match="must share one of"):
        co.bias_gelu_op(x, torch.randn(8, device=DEVICE).double())
    with pytest.raises(ValueError, match="contiguous"):
        co.bias_gelu_op(torch.randn(8, 4, device=DEVICE).t(), torch.randn(8, device=DEVICE))


@pytest.mark.gpu(reason="wrap_triton traces real JITFunctions; the interpreter's InterpretedFunction "
                        "fails under tracing ('Cannot access data pointer of Tensor')")
def test_triton_op_compiles_without_breaks():
    x, b = random_tensor((64, 256), torch.bfloat16, DEVICE), random_tensor(256, torch.bfloat16, DEVICE)
    co.mlp_tail(x, b)  # eagerly first
    report = co.compile_report(co.mlp_tail, x, b)
    assert (report["graphs"], report["graph_breaks"], report["error"]) == (1, 0, None), report
    torch._dynamo.reset()
    assert_close(torch.compile(co.mlp_tail, fullgraph=True)(x, b), co.mlp_tail(x, b))


@pytest.mark.skipif(runtime.on_gpu(), reason="what the compiler does with the interpreter's kernels")
def test_triton_op_in_the_interpreter_runs_eagerly_but_cannot_be_traced():
    # Eagerly the op launches the kernel itself (torch 2.11's wrap_triton refuses interpreted
    # kernels). Traced, the op's body runs on fake tensors, and the interpreter needs data.
    x, b = random_tensor((4, 16), torch.float32, DEVICE), random_tensor(16, torch.float32, DEVICE)
    assert_close(co.bias_gelu_op(x, b), co.raw_bias_gelu(x, b), rtol=0, atol=0)
    report = co.compile_report(co.mlp_tail, x, b)
    assert report["error"] is not None and "fake tensor" in report["error"], report
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError, match="Cannot access data pointer"):
        torch.compile(co.mlp_tail, fullgraph=True, backend="aot_eager")(x, b)
    torch._dynamo.reset()


# ------------------------------------------------------------------------- no registration
@pytest.mark.gpu(reason="Dynamo captures raw launches of real Triton JITFunctions only")
def test_raw_launch_on_gpu_is_captured_without_breaks():
    # Prediction: Dynamo records `bias_gelu_kernel[grid](...)` as a triton_kernel_wrapper node.
    x, b = random_tensor((64, 256), torch.bfloat16, DEVICE), random_tensor(256, torch.bfloat16, DEVICE)
    report = co.compile_report(co.raw_tail, x, b)
    assert (report["graphs"], report["graph_breaks"], report["error"]) == (1, 0, None), report
    torch._dynamo.reset()
    assert_close(torch.compile(co.raw_tail, fullgraph=True)(x, b), co.raw_tail(x, b))


@pytest.mark.skipif(runtime.on_gpu(), reason="what Dynamo does with the interpreter; the GPU test above "
                                             "covers real kernels")
@pytest.mark.filterwarnings("ignore::UserWarning")  # Dynamo's "does not know how to trace" warnings
def test_raw_launch_in_the_interpreter_cannot_be_traced():
    x, b = random_tensor((4, 16), torch.float32, DEVICE), random_tensor(16, torch.float32, DEVICE)
    # Dynamo steps into the interpreter's Python and fails there (torch 2.11: explain raises on
    # the interpreter's argument copies run on fake tensors; fullgraph=True raises Unsupported).
    report = co.compile_report(co.raw_tail, x, b)
    assert report["error"] is not None, report
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(co.raw_tail, fullgraph=True, backend="aot_eager")(x, b)
    torch._dynamo.reset()
    # ... while the same kernel behind triton_op runs eagerly, and behind custom_op
    # (the cross-entropy above) compiles: registration is what makes a launcher portable.
    assert_close(co.bias_gelu_op(x, b), co.raw_bias_gelu(x, b), rtol=0, atol=0)
