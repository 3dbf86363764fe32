"""week4_triton_dl.swiglu: silu(a) * b and its gradients against float64 torch, split and packed."""
import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor, with_specials

sw = runtime.lesson("week4_triton_dl.swiglu")
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16, torch.float64])
# The big shape matrices leave fp64 out: on a GPU every dtype is another set of compiles, and
# fp64 is there for gradcheck, which has its own tests (and a small fp64 matrix below).
MATRIX_DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16])
# 1-D, one element, primes, a width past one tile (1024), 3-D; a real MLP width on the GPU.
SHAPES = [(1,), (7,), (5, 1), (3, 127), (2, 1031), (2, 3, 129)] + runtime.pick(
    gpu=[(64, 14336), (4097, 11)], sim=[])
# What the default run keeps (the rest is marked slow; `pytest --slow` runs it all): every small
# shape in fp32 but the 1-D prime (one element is the 1-D case), two (a column, a 3-D ragged one)
# in the 16-bit dtypes; one real MLP size per test, in one dtype (their float64 references cost
# more than the kernels); the halves of one projection (non-dense views) and opcheck in fp32.
# Slow adds the other shapes in the other dtypes, the views in the other dtypes and fp64's opcheck.
SLOW = pytest.mark.slow
FP32_ONLY = [pytest.param(*d.values, id=d.id, marks=[*d.marks, *([] if d.id == "float32" else [SLOW])])
             for d in DTYPES]


def shape_cases(large_defaults):
    """Every dtype x shape; kept: the small shapes in fp32, two of them in 16-bit, `large_defaults`."""
    def keep(name, shape):
        if shape[0] * shape[-1] > 10000:  # the real MLP sizes
            return (name, shape) in large_defaults
        return name == "float32" and shape != (7,) or shape in ((5, 1), (2, 3, 129))
    return [pytest.param(d.values[0], shape, id=f"{d.id}-{shape}",
                         marks=[*d.marks, *([] if keep(d.id, shape) else [SLOW])])
            for d in MATRIX_DTYPES for shape in SHAPES]


def reference(a, b):
    """F.silu(a) * b in float64, rounded once to a's dtype."""
    return (F.silu(a.double()) * b.double()).to(a.dtype)


def reference_grads(a, b, dy):
    """torch's derivatives in float64: da = silu_backward(dy, a) * b, db = dy * silu(a).

    Autograd of F.silu(a) * b computes silu_backward(dy * b, a): for float64 inputs near the
    dtype's max, dy * b overflows to inf where the true da is finite. The bounded factor
    dy * silu'(a) first (silu' lies in [-0.1, 1.1]) overflows only where da itself does: the
    order the kernel uses. NaN and inf inputs give what torch's own silu_backward gives."""
    a64, b64, dy64 = a.double(), b.double(), dy.double()
    da = torch.ops.aten.silu_backward(dy64, a64) * b64
    db = dy64 * F.silu(a64)
    return da.to(a.dtype), db.to(a.dtype)


@pytest.mark.parametrize("dtype, shape", shape_cases({("bfloat16", (64, 14336))}))
def test_forward_matches_float64(dtype, shape):
    a, b = random_tensor(shape, dtype, DEVICE, scale=3.0), random_tensor(shape, dtype, DEVICE)
    out = poisoned(shape, dtype, DEVICE)
    assert sw.swiglu_forward(a, b, out=out) is out, "the launcher must write into the `out` it was given"
    assert_close(out, reference(a, b))


@pytest.mark.parametrize("dtype, shape", shape_cases({("float16", (4097, 11))}))
def test_backward_matches_float64(dtype, shape):
    a, b, dy = (random_tensor(shape, dtype, DEVICE, scale=3.0) for _ in range(3))
    da, db = poisoned(shape, dtype, DEVICE), poisoned(shape, dtype, DEVICE)
    got = sw.swiglu_backward(dy, a, b, da=da, db=db)
    assert got[0] is da and got[1] is db
    want = reference_grads(a, b, dy)
    assert_close(da, want[0], name="da")
    assert_close(db, want[1], name="db")


@pytest.mark.parametrize("dtype", FP32_ONLY)
def test_halves_of_one_projection(dtype):
    # h = [gate | up] from one fused matmul: a and b are views with rows strided by 2N.
    h = random_tensor((2, 3, 2 * 37), dtype, DEVICE, scale=3.0)
    a, b = h.chunk(2, dim=-1)
    assert not a.is_contiguous()
    assert_close(sw.swiglu_forward(a, b), reference(a, b))
    assert_close(sw.swiglu_packed_forward(h), reference(a, b))
    dy = random_tensor((2, 3, 37), dtype, DEVICE)
    dh = sw.swiglu_packed_backward(dy, h)
    da, db = reference_grads(a, b, dy)
    assert dh.shape == h.shape
    assert_close(dh, torch.cat([da, db], dim=-1), name="dh = [da | db]")


def test_autograd_functions_match_torch():
    a, b = random_tensor((4, 33), torch.float32, DEVICE, scale=3.0), random_tensor((4, 33), torch.float32, DEVICE)
    al, bl = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    sw.swiglu(al, bl).square().sum().backward()
    ar, br = a.double().requires_grad_(True), b.double().requires_grad_(True)
    (F.silu(ar) * br).square().sum().backward()
    assert_close(al.grad, ar.grad.float(), name="da")
    assert_close(bl.grad, br.grad.float(), name="db")
    h = torch.cat([a, b], dim=-1).requires_grad_(True)
    sw.swiglu_packed(h).square().sum().backward()
    assert_close(h.grad, torch.cat([ar.grad, br.grad], dim=-1).float(), name="dh")
    # A stride-0 gradient (from .sum()) goes through too.
    hl = h.detach().clone().requires_grad_(True)
    sw.swiglu_packed(hl).sum().backward()
    ref = h.detach().double().requires_grad_(True)
    (F.silu(ref[:, :33]) * ref[:, 33:]).sum().backward()
    assert_close(hl.grad, ref.grad.float(), name="dh from sum()")


def test_gradcheck_float64():
    a = random_tensor((3, 5), torch.float64, DEVICE, scale=3.0).requires_grad_(True)
    b = random_tensor((3, 5), torch.float64, DEVICE).requires_grad_(True)
    assert torch.autograd.gradcheck(sw.swiglu, (a, b))
    h = random_tensor((2, 8), torch.float64, DEVICE, scale=3.0).requires_grad_(True)
    assert torch.autograd.gradcheck(sw.swiglu_packed, (h,))
    # The registered ops' autograd formulas: what a compiled graph differentiates.
    assert torch.autograd.gradcheck(sw.swiglu_op, (a, b))
    assert torch.autograd.gradcheck(sw.swiglu_packed_op, (h,))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf * 0, in NumPy
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf_like_torch(dtype):
    a = with_specials(random_tensor(301, dtype, DEVICE, scale=3.0))
    b = with_specials(random_tensor(301, dtype, DEVICE)).roll(3)  # specials meet ordinary values too
    # silu(-inf) = -inf / inf = NaN, silu(+inf) = inf, silu(-max) = -0: torch's formula, exactly.
    assert_close(sw.swiglu_forward(a, b), reference(a, b))
    dy = random_tensor(301, dtype, DEVICE)
    da, db = sw.swiglu_backward(dy, a, b)
    want = reference_grads(a, b, dy)
    assert_close(da, want[0], name="da")
    assert_close(db, want[1], name="db")


def test_large_negative_gate_is_zero_not_nan():
    # exp(-a) overflows to inf for a < -88 in fp32; a / inf must give -0, not NaN.
    a = torch.tensor([-100.0, -1000.0, 100.0], device=DEVICE)
    b = torch.ones(3, device=DEVICE)
    assert_close(sw.swiglu_forward(a, b), F.silu(a) * b)


def test_empty_inputs():
    for shape in ((0,), (3, 0), (0, 5)):
        a = torch.empty(shape, device=DEVICE)
        assert sw.swiglu_forward(a, a).shape == shape
        da, db = sw.swiglu_backward(a, a, a)
        assert da.shape == shape and db.shape == shape


# ------------------------------------------------------------------- strided and non-dense inputs
@pytest.mark.parametrize("dtype", FP32_ONLY)
def test_halves_of_h_through_the_public_entries(dtype):
    # a, b = h.chunk(2, -1): views with rows strided by 2N, read in place, forward and backward.
    h = random_tensor((2, 3, 2 * 37), dtype, DEVICE, scale=3.0).requires_grad_(True)
    a, b = h.chunk(2, dim=-1)
    y = sw.swiglu(a, b)
    assert y.is_contiguous() and y.shape == a.shape
    assert_close(y, reference(a.detach(), b.detach()))
    dy = random_tensor(y.shape, dtype, DEVICE)
    y.backward(dy)
    want = torch.cat(reference_grads(a, b, dy), dim=-1)
    assert_close(h.grad, want, name="dh through swiglu(a, b)")
    h.grad = None
    y = sw.swiglu_packed(h)
    assert y.is_contiguous()
    assert_close(y, reference(a.detach(), b.detach()), name="swiglu_packed")
    y.backward(dy)
    assert_close(h.grad, want, name="dh through swiglu_packed")


def test_stride_zero_gradients():
    a = random_tensor((5, 33), torch.float32, DEVICE, scale=3.0).requires_grad_(True)
    b = random_tensor((5, 33), torch.float32, DEVICE).requires_grad_(True)
    # y.sum(): a gradient of ones expanded from a scalar, strides (0, 0): copied once, then read.
    sw.swiglu(a, b).sum().backward()
    want = reference_grads(a, b, torch.ones(5, 33, device=DEVICE))
    assert_close(a.grad, want[0], name="da from sum()")
    assert_close(b.grad, want[1], name="db from sum()")
    # One row broadcast over the tokens, strides (0, 1): read in place.
    dy = random_tensor(33, torch.float32, DEVICE).expand(5, 33)
    got = torch.autograd.grad(sw.swiglu(a, b), (a, b), dy)
    want = reference_grads(a, b, dy.contiguous())
    assert_close(got[0], want[0], name="da, broadcast row")
    assert_close(got[1], want[1], name="db, broadcast row")


def test_transposed_views_are_copied_by_the_public_entries():
    # The launchers refuse a strided last dimension (test_rejects_bad_input_before_launch); the
    # public entries, like torch's own kernels, copy such inputs (and rows not evenly strided).
    at = random_tensor((33, 5), torch.float32, DEVICE, scale=3.0).requires_grad_(True)
    bt = random_tensor((33, 5), torch.float32, DEVICE).requires_grad_(True)
    a, b = at.t(), bt.t()
    y = sw.swiglu(a, b)
    assert_close(y, reference(a.detach(), b.detach()))
    dy = random_tensor(y.shape, torch.float32, DEVICE)
    y.backward(dy)
    want = reference_grads(a, b, dy)
    assert_close(at.grad, want[0].t(), name="da")
    assert_close(bt.grad, want[1].t(), name="db")
    h = random_tensor((3, 4, 16), torch.float32, DEVICE, scale=3.0).transpose(0, 1)  # rows not evenly strided
    assert_close(sw.swiglu_packed(h), reference(*h.chunk(2, dim=-1)), name="swiglu_packed of a transposed h")
    with pytest.raises(ValueError, match="evenly strided"):
        sw.swiglu_packed_forward(h)


# ------------------------------------------------------------------ as a PyTorch op in a model
@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.float64, marks=SLOW)],
                         ids=["float32", "float64"])
def test_registered_ops_pass_opcheck(dtype):
    # Schema, fake (meta) functions, autograd registration and AOT dispatch, as torch checks them.
    a = random_tensor((3, 12), dtype, DEVICE, scale=3.0).requires_grad_(True)
    b = random_tensor((3, 12), dtype, DEVICE).requires_grad_(True)
    h = random_tensor((3, 24), dtype, DEVICE, scale=3.0).requires_grad_(True)
    dy = random_tensor((3, 12), dtype, DEVICE)
    sw.swiglu_op(a.detach(), b.detach())  # a plain call first: errors surface as themselves
    torch.library.opcheck(sw.swiglu_op, (a, b))
    torch.library.opcheck(sw.swiglu_op, h.chunk(2, dim=-1))  # strided rows
    torch.library.opcheck(sw.swiglu_backward_op, (dy, a.detach(), b.detach()))
    torch.library.opcheck(sw.swiglu_packed_op, (h,))
    torch.library.opcheck(sw.swiglu_packed_backward_op, (dy, h.detach()))
    ones = torch.ones((), device=DEVICE).expand(3, 12)  # y.sum()'s gradient
    torch.library.opcheck(sw.swiglu_packed_backward_op, (ones, h.detach()))


def test_eager_paths_and_the_registered_ops_agree():
    h = random_tensor((6, 2 * 20), torch.float32, DEVICE, scale=3.0)
    a, b = h.chunk(2, dim=-1)
    with torch.no_grad():
        plain = sw.swiglu(a, b)  # no autograd: the launch alone
        plain_packed = sw.swiglu_packed(h)
    hl = h.clone().requires_grad_(True)
    tracked = sw.swiglu(*hl.chunk(2, dim=-1))  # SwiGLUFunction
    tracked_packed = sw.swiglu_packed(hl)  # SwiGLUPackedFunction
    for got in (tracked.detach(), tracked_packed.detach(), sw.swiglu_op(a, b), sw.swiglu_packed_op(h), plain_packed):
        assert torch.equal(got, plain)
    assert_close(plain, reference(a, b))
    dy = random_tensor(plain.shape, torch.float32, DEVICE)
    by_function = torch.autograd.grad(tracked_packed, hl, dy)[0]
    ho = h.clone().requires_grad_(True)
    by_op = torch.autograd.grad(sw.swiglu_packed_op(ho), ho, dy)[0]
    assert torch.equal(by_function, by_op)
    assert torch.equal(torch.cat(sw.swiglu_backward_op(dy, a, b), dim=-1), by_op)


def mlp(packed: bool, act_split, act_packed):
    """A gated MLP: one up projection to [gate | up], SwiGLU, the down projection."""
    def f(x, w_up, w_down):
        h = x @ w_up
        y = act_packed(h) if packed else act_split(*h.chunk(2, dim=-1))
        return (y @ w_down).tanh()
    return f


def _torch_packed(h):
    g, u = h.chunk(2, dim=-1)
    return F.silu(g) * u


@pytest.mark.parametrize("packed", [False, True], ids=["swiglu", "swiglu_packed"])
def test_compiles_with_no_graph_break(packed):
    # fullgraph=True raises on any graph break; on the GPU Inductor compiles the matmuls around
    # the registered op, in simulation aot_eager traces the same graphs (fake tensors, autograd).
    torch._dynamo.reset()
    ours = mlp(packed, sw.swiglu, sw.swiglu_packed)
    x = random_tensor((6, 16), torch.float32, DEVICE)
    w_up = random_tensor((16, 2 * 24), torch.float32, DEVICE, scale=0.5)
    w_down = random_tensor((24, 16), torch.float32, DEVICE, scale=0.25)
    eager_leaves = [t.clone().requires_grad_(True) for t in (x, w_up, w_down)]
    y_eager = ours(*eager_leaves)
    dy = random_tensor(y_eager.shape, torch.float32, DEVICE)
    eager_grads = torch.autograd.grad(y_eager, eager_leaves, dy)
    compiled = torch.compile(ours, fullgraph=True, backend=runtime.pick(gpu="inductor", sim="aot_eager"))
    leaves = [t.clone().requires_grad_(True) for t in (x, w_up, w_down)]
    y = compiled(*leaves)
    grads = torch.autograd.grad(y, leaves, dy)
    # The same kernels: only the torch ops around them may round differently once fused.
    assert_close(y, y_eager, rtol=1e-5, atol=1e-5)
    for name, got, want in zip(("dx", "dw_up", "dw_down"), grads, eager_grads):
        assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()), name=name)
    ref_leaves = [t.double().requires_grad_(True) for t in (x, w_up, w_down)]
    y_ref = mlp(packed, lambda g, u: F.silu(g) * u, _torch_packed)(*ref_leaves)
    # fp32 matmuls around the op: a few ulps of their sums, not of each element.
    assert_close(y, y_ref.float(), rtol=1e-5, atol=1e-5, name="y vs float64")
    for name, got, want in zip(("dx", "dw_up", "dw_down"), grads, torch.autograd.grad(y_ref, ref_leaves, dy.double())):
        assert_close(got, want.float(), rtol=1e-5, atol=1e-5 * float(want.abs().max()), name=f"{name} vs float64")


def test_compiled_graph_holds_the_ops_not_their_kernels():
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    x = random_tensor((4, 8), torch.float32, DEVICE)
    w_up, w_down = random_tensor((8, 2 * 12), torch.float32, DEVICE), random_tensor((12, 8), torch.float32, DEVICE)
    for packed, name in ((False, "swiglu"), (True, "swiglu_packed")):
        graphs.clear()
        torch.compile(mlp(packed, sw.swiglu, sw.swiglu_packed), backend=backend, fullgraph=True)(x, w_up, w_down)
        assert len(graphs) == 1
        targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
        assert sum(t.endswith(f"{sw.NAMESPACE}.{name}.default") for t in targets) == 1, targets


# ---------------------------------------------------------------------------------- bad inputs
def bad_inputs():
    ok = lambda *s, dtype=torch.float32: torch.ones(*(s or (4, 8)), device=DEVICE, dtype=dtype)  # noqa: E731
    yield "not a tensor", TypeError, "must be a torch.Tensor", lambda: ([1.0], ok(), {})
    yield "integer dtype", TypeError, "expected one of", lambda: (ok().int(), ok().int(), {})
    yield "dtype mismatch", TypeError, "dtypes must match", lambda: (ok(), ok(dtype=torch.float16), {})
    yield "shape mismatch", ValueError, "shapes must match", lambda: (ok(), ok(4, 7), {})
    yield "scalar", ValueError, "at least 1 dimension", lambda: (torch.tensor(1.0, device=DEVICE),
                                                                 torch.tensor(1.0, device=DEVICE), {})
    yield "last dim strided", ValueError, "last dimension is contiguous", lambda: (ok(8, 4).t(), ok(8, 4).t(), {})
    yield "rows not evenly strided", ValueError, "evenly strided", lambda: (
        ok(3, 4, 8).transpose(0, 1), ok(3, 4, 8).transpose(0, 1), {})
    yield "wrong device", ValueError, "kernels run on", lambda: (torch.ones(4, 8, device="meta"), ok(), {})
    yield "out shape", ValueError, "out has shape", lambda: (ok(), ok(), {"out": ok(4, 7)})


@pytest.mark.parametrize("case, error, message, make_args", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make_args):
    a, b, kwargs = make_args()
    with pytest.raises(error, match=message):
        sw.swiglu_forward(a, b, **kwargs)


def test_backward_and_packed_reject_bad_input():
    ok = torch.ones(4, 8, device=DEVICE)
    with pytest.raises(ValueError, match="shapes must match"):
        sw.swiglu_backward(torch.ones(4, 7, device=DEVICE), ok, ok)
    with pytest.raises(TypeError, match="dtypes must match"):
        sw.swiglu_backward(ok.half(), ok, ok)
    with pytest.raises(ValueError, match="2N"):
        sw.swiglu_packed_forward(torch.ones(4, 7, device=DEVICE))
