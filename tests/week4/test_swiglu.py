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


def reference(a, b):
    """F.silu(a) * b in float64, rounded once to a's dtype."""
    return (F.silu(a.double()) * b.double()).to(a.dtype)


def reference_grads(a, b, dy):
    ar, br = (t.detach().double().clone().requires_grad_(True) for t in (a, b))
    (F.silu(ar) * br).backward(dy.double())
    return ar.grad.to(a.dtype), br.grad.to(a.dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", MATRIX_DTYPES)
def test_forward_matches_float64(dtype, shape):
    a, b = random_tensor(shape, dtype, DEVICE, scale=3.0), random_tensor(shape, dtype, DEVICE)
    out = poisoned(shape, dtype, DEVICE)
    assert sw.swiglu_forward(a, b, out=out) is out, "the launcher must write into the `out` it was given"
    assert_close(out, reference(a, b))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", MATRIX_DTYPES)
def test_backward_matches_float64(dtype, shape):
    a, b, dy = (random_tensor(shape, dtype, DEVICE, scale=3.0) for _ in range(3))
    da, db = poisoned(shape, dtype, DEVICE), poisoned(shape, dtype, DEVICE)
    got = sw.swiglu_backward(dy, a, b, da=da, db=db)
    assert got[0] is da and got[1] is db
    want = reference_grads(a, b, dy)
    assert_close(da, want[0], name="da")
    assert_close(db, want[1], name="db")


@pytest.mark.parametrize("dtype", DTYPES)
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
