"""week4_triton_dl.norms.add_rmsnorm: the residual add fused with RMSNorm, against float64 torch.

h = x + delta must be exactly torch's add (one rounding to the promoted dtype); y is held to
F.rms_norm of that h in float64, rounded once to its dtype (the tolerances of `assert_close`,
as the RMSNorm tests hold theirs). Gradients: dx = ddelta = dh + d(norm)/dh from float64 autograd
of the written-out reference, dw with RMSNorm's column-sum bound.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, dtype_params, random_tensor

ar = runtime.lesson("week4_triton_dl.norms.add_rmsnorm")
DEVICE = runtime.DEVICE
EPS = 1e-6
# (x dtype, delta dtype, out dtype): one dtype throughout, and a model's mixed case under
# autocast (fp32 residual stream, bf16 branch output, y in bf16 for the next matmul).
# bf16 runs on a GPU only: the kernel rounds h = x + delta to bf16 before it normalizes it, and the
# references model that rounding, which simulation (float32 inside: course.check.dtype_params) does not
# do; the mixed fp32 + fp16 -> fp16 case takes the same paths in simulation.
BF16_ONLY_ON_GPU = dtype_params([torch.bfloat16], bf16_in_sim=False)[0].marks
DTYPE_CASES = [
    pytest.param(torch.float32, torch.float32, None, id="fp32"),
    pytest.param(torch.float16, torch.float16, None, id="fp16"),
    pytest.param(torch.bfloat16, torch.bfloat16, None, id="bf16", marks=BF16_ONLY_ON_GPU),
    pytest.param(torch.float32, torch.float16, torch.float16, id="fp32+fp16->fp16"),
    pytest.param(torch.float32, torch.bfloat16, torch.bfloat16, id="fp32+bf16->bf16", marks=BF16_ONLY_ON_GPU),
]
SHAPES = [(1, 1), (3, 129), (2, 5, 300)]  # one element, a ragged row, a 3-D activation
# What the default run keeps (the rest is marked slow; `pytest --slow` runs it all). On a GPU each
# dtype combination x row width (its power of two) x HAS_WEIGHT is its own compiled kernel, so the
# tests share N = 129: every dtype combination on the ragged (3, 129) rows forward and, with a
# weight, in the gradients on (2, 7, 129) (fp32 also without one); the one-element and 3-D shapes
# in fp32; opcheck on those gradients' kernels (fp32 with and without a weight, the mixed fp32 +
# fp16 -> fp16 case) and the compile test on the fp32 ones. Slow adds the products, and opcheck
# with an fp64 delta.
SLOW = pytest.mark.slow


def case(*values, id, keep, marks=()):
    """One case of a sweep: marked slow unless the default run keeps it."""
    return pytest.param(*values, id=id, marks=[*marks, *([] if keep else [SLOW])])


def dtype_cases(keep):
    """DTYPE_CASES x the values `keep` is asked about, as (x, delta, out dtypes, value) params."""
    def params(values, ids):
        return [case(*p.values, value, id=f"{p.id}-{vid}", keep=keep(p.id, value), marks=p.marks)
                for p in DTYPE_CASES for value, vid in zip(values, ids)]
    return params


def column_sum_atol(terms, acc):
    """(M + 4) u max_j sum_i |term_ij| (Higham's recursive summation bound), as test_rmsnorm.py."""
    u = torch.finfo(acc).eps / 2
    return (terms.shape[0] + 4) * u * float(terms.sum(0).max()) + torch.finfo(acc).tiny


def reference(x, delta, w, out_dtype):
    """(h, y) as torch computes them, y from the rounded h in float64, rounded once."""
    h = x + delta
    y = F.rms_norm(h.double(), (h.shape[-1],), None if w is None else w.double(), EPS)
    return h, y.to(out_dtype or h.dtype)


@pytest.mark.parametrize("x_dtype, d_dtype, out_dtype, shape", dtype_cases(
    lambda dtypes, shape: dtypes == "fp32" or shape == (3, 129))(SHAPES, [str(s) for s in SHAPES]))
def test_forward_matches_torch(x_dtype, d_dtype, out_dtype, shape):
    x, delta = random_tensor(shape, x_dtype, DEVICE, scale=2.0), random_tensor(shape, d_dtype, DEVICE)
    w = random_tensor(shape[-1], x_dtype, DEVICE)
    h, y = ar.add_rms_norm(x, delta, w, EPS, out_dtype)
    want_h, want_y = reference(x, delta, w, out_dtype)
    assert h.shape == y.shape == x.shape and h.dtype == want_h.dtype and y.dtype == want_y.dtype
    assert torch.equal(h, want_h), "h must be torch's x + delta, rounded once"
    assert_close(y, want_y, name="y")


@pytest.mark.parametrize("x_dtype, d_dtype, out_dtype, affine", dtype_cases(
    lambda dtypes, affine: affine or dtypes == "fp32")([True, False], ["True", "False"]))
def test_gradients_match_float64(x_dtype, d_dtype, out_dtype, affine):
    shape = (2, 7, 129)
    x, delta = random_tensor(shape, x_dtype, DEVICE, scale=2.0), random_tensor(shape, d_dtype, DEVICE)
    w = random_tensor(shape[-1], x_dtype, DEVICE) if affine else None
    leaves = [t.clone().requires_grad_(True) for t in (x, delta) + ((w,) if affine else ())]
    h, y = ar.add_rms_norm(leaves[0], leaves[1], leaves[2] if affine else None, EPS, out_dtype)
    dh, dy = random_tensor(shape, h.dtype, DEVICE), random_tensor(shape, y.dtype, DEVICE)
    got = torch.autograd.grad((h, y), leaves, (dh, dy))
    # float64 autograd of the written-out op, from the same (rounded) h the kernel normalizes
    hd = (x.double() + delta.double()).to(h.dtype).double().requires_grad_(True)
    wd = w.double().requires_grad_(True) if affine else None
    yd = F.rms_norm(hd, (shape[-1],), wd, EPS)
    want = torch.autograd.grad((hd, yd), (hd,) + ((wd,) if affine else ()), (dh.double(), dy.double()))
    assert got[0].dtype == x_dtype and got[1].dtype == d_dtype
    assert_close(got[0], want[0].to(x_dtype), name="dx")
    assert_close(got[1], want[0].to(d_dtype), name="ddelta")
    if affine:
        hhat = F.rms_norm(hd.detach(), (shape[-1],), None, EPS)
        terms = (dy.double() * hhat).abs().reshape(-1, shape[-1])
        acc = torch.float32
        assert_close(got[2], want[1].to(x_dtype), atol=column_sum_atol(terms, acc) + float(want[1].abs().max())
                     * torch.finfo(x_dtype).eps, name="dw")


def test_float64_gradcheck():
    x, delta = (random_tensor((3, 17), torch.float64, DEVICE).requires_grad_(True) for _ in range(2))
    w = random_tensor(17, torch.float64, DEVICE).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b, c: ar.add_rms_norm(a, b, c, EPS), (x, delta, w))
    # only one of the two outputs used: the other's gradient is absent (None), not zero-filled by us
    assert torch.autograd.gradcheck(lambda a, b, c: ar.add_rms_norm(a, b, c, EPS)[1], (x, delta, w))
    assert torch.autograd.gradcheck(lambda a, b, c: ar.add_rms_norm(a, b, c, EPS)[0] * 2.0, (x, delta, w))


@pytest.mark.parametrize("path", ["eager", "registered_op", "compiled"])
def test_an_unused_h_sends_no_residual_gradient(path, monkeypatch):
    # A model's final norm takes the last residual add and nothing reads its h: the backward gets
    # dh = None (the kernel skips that stream), not a zero tensor filled and read for nothing.
    seen = []
    backward = ar._backward

    def spy(dy, dh, *args):
        seen.append(dh)
        return backward(dy, dh, *args)
    monkeypatch.setattr(ar, "_backward", spy)
    torch._dynamo.reset()
    fn = {"eager": lambda a, b, c: ar.add_rms_norm(a, b, c, EPS)[1],
          "registered_op": lambda a, b, c: ar.add_rms_norm_op(a, b, c, EPS, None)[1],
          "compiled": torch.compile(lambda a, b, c: ar.add_rms_norm(a, b, c, EPS)[1], fullgraph=True,
                                    backend=runtime.pick(gpu="inductor", sim="aot_eager"))}[path]
    x, delta = (random_tensor((4, 16), torch.float32, DEVICE).requires_grad_(True) for _ in range(2))
    w = random_tensor(16, torch.float32, DEVICE).requires_grad_(True)
    got = torch.autograd.grad(fn(x, delta, w).square().sum(), (x, delta, w))
    leaves = [t.detach().clone().requires_grad_(True) for t in (x, delta, w)]
    want = torch.autograd.grad(ar.add_rms_norm_reference(*leaves[:2], leaves[2], EPS)[1].square().sum(), leaves)
    assert seen and all(dh is None for dh in seen)
    for name, g, r in zip(("dx", "ddelta", "dw"), got, want):
        assert_close(g, r, rtol=1e-5, atol=1e-5 * max(1.0, float(r.abs().max())), name=name)


def test_inference_path_and_registered_op_agree():
    x, delta = random_tensor((6, 40), torch.float32, DEVICE), random_tensor((6, 40), torch.float32, DEVICE)
    w = random_tensor(40, torch.float32, DEVICE)
    with torch.no_grad():
        plain = ar.add_rms_norm(x, delta, w, EPS)
    tracked = ar.add_rms_norm(x.clone().requires_grad_(True), delta, w, EPS)
    op = ar.add_rms_norm_op(x, delta, w, EPS, None)
    for a, b, c in zip(plain, tracked, op):
        assert torch.equal(a, b.detach()) and torch.equal(a, c)


def test_rows_wider_than_a_block_take_the_two_op_path():
    cols = ar.MAX_N + 37
    x, delta = random_tensor((2, cols), torch.float32, DEVICE), random_tensor((2, cols), torch.float32, DEVICE)
    w = random_tensor(cols, torch.float32, DEVICE)
    h, y = ar.add_rms_norm(x, delta, w, EPS)
    want_h, want_y = reference(x, delta, w, None)
    assert torch.equal(h, want_h)
    assert_close(y, want_y)


def test_nan_and_inf_like_torch():
    x, delta = random_tensor((4, 33), torch.float32, DEVICE), random_tensor((4, 33), torch.float32, DEVICE)
    x[0, 3], delta[1, 5], x[2, 0] = math.nan, math.inf, -math.inf
    w = random_tensor(33, torch.float32, DEVICE)
    h, y = ar.add_rms_norm(x, delta, w, EPS)
    want_h, want_y = reference(x, delta, w, None)
    assert torch.equal(h.isnan(), want_h.isnan()) and torch.equal(h.nan_to_num(), want_h.nan_to_num())
    # a row holding a NaN or an Inf is NaN throughout, as torch's CUDA RMSNorm returns it
    assert y[:3].isnan().all() and torch.isfinite(y[3]).all()
    assert_close(y[3], want_y[3])


def test_empty_rows():
    x = torch.empty(0, 8, device=DEVICE)
    h, y = ar.add_rms_norm(x, x.clone(), None, EPS)
    assert h.shape == y.shape == (0, 8)


@pytest.mark.parametrize("affine, d_dtype, out_dtype", [
    case(affine, d, out, id=f"{'affine' if affine else 'no_weight'}-{name}", keep=keep)
    for affine, d, out, name, keep in (
        (True, torch.float32, None, "fp32", True), (False, torch.float32, None, "fp32", True),
        (True, torch.float16, torch.float16, "fp32+fp16->fp16", True),
        (False, torch.float16, torch.float16, "fp32+fp16->fp16", False),
        (True, torch.float64, torch.float32, "fp32+fp64->fp32", False),
        (False, torch.float64, torch.float32, "fp32+fp64->fp32", False))])
def test_registered_ops_pass_opcheck(affine, d_dtype, out_dtype):
    # On a GPU (14, 129), the rows of test_gradients_match_float64: its kernels. In simulation,
    # where nothing is compiled, 3 x 12 (the interpreter's work grows with the block).
    M, N = runtime.pick(gpu=(14, 129), sim=(3, 12))
    x = random_tensor((M, N), torch.float32, DEVICE).requires_grad_(True)
    delta = random_tensor((M, N), d_dtype, DEVICE).requires_grad_(True)
    w = random_tensor(N, torch.float32, DEVICE).requires_grad_(True) if affine else None
    torch.library.opcheck(ar.add_rms_norm_op, (x, delta, w, EPS, out_dtype))
    h, y, rstd = ar.add_rms_norm_op(x.detach(), delta.detach(), None if w is None else w.detach(), EPS, out_dtype)
    dy, dh = random_tensor(y.shape, y.dtype, DEVICE), random_tensor(h.shape, h.dtype, DEVICE)
    torch.library.opcheck(ar.add_rms_norm_backward_op,
                          (dy, dh, h, rstd, None if w is None else w.detach(), x.dtype, delta.dtype))


def test_a_block_of_it_compiles_with_no_graph_break():
    torch._dynamo.reset()

    def block(x, a, w):  # residual add + norm, then torch ops on both outputs
        h, y = ar.add_rms_norm(x, a, w, EPS)
        return h + y.sin()
    compiled = torch.compile(block, fullgraph=True, backend=runtime.pick(gpu="inductor", sim="aot_eager"))
    # On a GPU test_gradients_match_float64's fp32 shape: its kernels (in simulation a smaller one).
    shape = runtime.pick(gpu=(2, 7, 129), sim=(16, 64))
    x, a = random_tensor(shape, torch.float32, DEVICE), random_tensor(shape, torch.float32, DEVICE)
    w = random_tensor(shape[-1], torch.float32, DEVICE)
    leaves = [t.clone().requires_grad_(True) for t in (x, a, w)]
    out = compiled(*leaves)
    grads = torch.autograd.grad(out, leaves, torch.ones_like(out))
    eager = [t.clone().requires_grad_(True) for t in (x, a, w)]
    want = torch.autograd.grad(block(*eager), eager, torch.ones_like(out))
    for name, got, ref in zip(("dx", "da", "dw"), grads, want):
        assert_close(got, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(ref.abs().max())), name=name)


@pytest.mark.parametrize("case, error, message, make_args", [
    pytest.param("not a tensor", TypeError, "must be tensors", lambda: ([[1.0]], torch.ones(1, 1), None, {}), id="list"),
    pytest.param("shapes differ", ValueError, "one shape", lambda: (torch.ones(2, 8), torch.ones(2, 4), None, {}),
                 id="shapes"),
    pytest.param("integer", TypeError, "expected one of", lambda: (torch.ones(2, 8).long(), torch.ones(2, 8).long(),
                                                                   None, {}), id="integer"),
    pytest.param("weight shape", ValueError, "weight has shape", lambda: (torch.ones(2, 8), torch.ones(2, 8),
                                                                          torch.ones(9), {}), id="weight"),
    pytest.param("out_dtype", TypeError, "out_dtype", lambda: (torch.ones(2, 8), torch.ones(2, 8), None,
                                                               {"out_dtype": torch.int32}), id="out_dtype"),
    pytest.param("eps", ValueError, "eps", lambda: (torch.ones(2, 8), torch.ones(2, 8), None, {"eps": -1.0}), id="eps"),
])
def test_rejects_bad_input_before_launch(case, error, message, make_args):
    x, delta, w, kwargs = make_args()
    move = lambda t: t.to(DEVICE) if isinstance(t, torch.Tensor) else t  # noqa: E731
    with pytest.raises(error, match=message):
        ar.add_rms_norm(move(x), move(delta), move(w), **kwargs)


@pytest.mark.parametrize("which", ["x", "delta", "weight"])
def test_public_add_rms_norm_names_the_device_it_runs_on(which):
    """Through the norms' one check (plumbing.check_call): a tensor on another device (meta) is refused
    before any launch, with the device the kernels run on."""
    args = {"x": torch.ones(4, 8, device=DEVICE), "delta": torch.ones(4, 8, device=DEVICE),
            "weight": torch.ones(8, device=DEVICE)}
    args[which] = torch.ones(args[which].shape, device="meta")
    with pytest.raises(ValueError, match="kernels run on|device"):
        ar.add_rms_norm(args["x"], args["delta"], args["weight"])
