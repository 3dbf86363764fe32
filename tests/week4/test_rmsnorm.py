"""week4_triton_dl.norms.rmsnorm: forward, backward (dx, dw) and autograd against float64 torch."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor

rn = runtime.lesson("week4_triton_dl.norms.rmsnorm")
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16, torch.float64])
# The big shape matrices leave fp64 out: on a GPU every dtype is another set of compiles, and
# fp64 is there for gradcheck, which has its own tests (and a small fp64 matrix below).
MATRIX_DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16])
WIDTHS = [1, 7, 64, 127, 129] + runtime.pick(gpu=[4097, 8192], sim=[])
ROWS = [1, 3, 17]
# What the default run keeps (the rest is marked slow; `pytest --slow` runs it all). On a GPU each
# dtype x block width (the row's power of two) x kernel x launch option x class of the row count
# is its own compiled kernel: the default run takes widths 1 (one column) and 129 (ragged) in fp32
# and 129 in the 16-bit dtypes, on 17 rows (a row count of neither class; one row is the fp64
# gradcheck's (1, 1)), the row kernel on 129 (wide blocks: test_widest_one_block_rows); fp64 on 129
# (both forward kernels); the looped, split and partial-buffer matrices, the gradchecks and the 65k
# rows keep one case per dtype, path or option; slow adds the products.
SLOW = pytest.mark.slow


def case(*values, id=None, keep, marks=()):
    """One case of a sweep: marked slow unless the default run keeps it."""
    return pytest.param(*values, id=id, marks=[*marks, *([] if keep else [SLOW])])


def matrix_default(dtype, rows, cols, kernel=None):
    if kernel == "row" and cols != 129:
        return False
    return rows == 17 and (cols == 129 or dtype == torch.float32 and cols == 1)


def matrix_cases(kernels=(None,)):
    for d in MATRIX_DTYPES:
        for rows in ROWS:
            for cols in WIDTHS:
                for kernel in kernels:
                    values, ids = [d.values[0], rows, cols], [d.id, str(rows), str(cols)]
                    if kernel is not None:
                        values.append(kernel)
                        ids.append(kernel)
                    yield case(*values, id="-".join(ids), keep=matrix_default(d.values[0], rows, cols, kernel),
                               marks=d.marks)
EPS = 1e-6


def acc_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def make(rows, cols, dtype, *, affine=True):
    x = random_tensor((rows, cols), dtype, DEVICE, scale=2.0)
    return x, (random_tensor(cols, dtype, DEVICE) if affine else None)


def reference(x, w, eps=EPS):
    """F.rms_norm in float64, rounded once to x's dtype, with NaN/Inf as torch has them on a GPU.

    torch's CUDA kernel takes each row's moments with Welford's update, where an Inf meets
    inf - inf: a row holding a NaN or an Inf is NaN throughout. Its CPU path computes
    x * rsqrt(mean(x^2) + eps) instead, so an Inf gives rstd = 0 there: 0 beside the Inf, NaN at
    it. The kernels race the GPU one and are held to it on both backends (on a GPU the `where`
    below changes nothing: F.rms_norm already returns those NaNs).
    """
    xd = x.double()
    y = F.rms_norm(xd, (x.shape[-1],), None if w is None else w.double(), eps)
    row_has_special = ~torch.isfinite(xd).all(-1, keepdim=True)
    return torch.where(row_has_special, torch.full_like(y, math.nan), y).to(x.dtype)


def reference_grads(x, w, dy, eps=EPS):
    """(dx, dw, dw_scale) from float64 autograd; |dy * xhat| bounds each dw term (no cancellation)."""
    leaf = lambda t: None if t is None else t.detach().double().clone().requires_grad_(True)  # noqa: E731
    xr, wr = leaf(x), leaf(w)
    F.rms_norm(xr, (x.shape[-1],), wr, eps).backward(dy.double())
    xhat = F.rms_norm(x.double(), (x.shape[-1],), None, eps)
    return xr.grad, (None if wr is None else wr.grad), (dy.double() * xhat).abs()


def column_sum_atol(terms, dtype):
    """(M + 4) u max_j sum_i |term_ij|: M-term recursive summation plus a few roundings per term
    (Higham 2002, sec. 4.2), u the unit roundoff of the fp32 (fp64) accumulator."""
    u = torch.finfo(acc_dtype(dtype)).eps / 2
    return (terms.shape[0] + 4) * u * float(terms.sum(0).max()) + torch.finfo(acc_dtype(dtype)).tiny


def assert_grads(got, want, dtype, name):
    (dx, dw), (rdx, rdw, terms) = got, want
    assert_close(dx, rdx.to(dtype), name=f"{name} dx")
    if rdw is None:
        assert dw is None, f"{name}: no weight, so dw must be None"
    else:
        assert_close(dw, rdw.to(dtype), atol=column_sum_atol(terms, dtype), name=f"{name} dw")


# -------------------------------------------------------------------------------------- forward
@pytest.mark.parametrize("dtype, rows, cols, kernel", list(matrix_cases(("persistent", "row"))))
def test_forward_matches_float64(dtype, rows, cols, kernel):
    x, w = make(rows, cols, dtype)
    out = poisoned((rows, cols), dtype, DEVICE)
    y, rstd = rn.rms_norm_forward(x, w, EPS, out=out, kernel=kernel)
    assert y is out, "the launcher must write into the `out` it was given"
    assert_close(y, reference(x, w))
    want = (x.double().pow(2).mean(-1) + EPS).rsqrt().to(acc_dtype(dtype))
    assert_close(rstd, want, name="rstd")


@pytest.mark.parametrize("kernel", ["persistent", "row"])
def test_forward_without_weight(kernel):
    x, _ = make(5, 33, torch.float32)
    assert_close(rn.rms_norm_forward(x, None, EPS, kernel=kernel)[0], reference(x, None))


@pytest.mark.parametrize("block_m, num_programs, num_stages", [  # every split at 2 stages, 1 and 3 once
    case(m, p, s, keep=s == 2 or (m, p) == (8, 13)) for m in (1, 2, 8) for p in (1, 3, 13, 100) for s in (1, 2, 3)])
def test_persistent_forward_any_split_of_rows(block_m, num_programs, num_stages):
    x, w = make(13, 37, torch.float32)
    # `out` is the head of a taller poisoned buffer: a program that writes rows past the 13th (a
    # missing row mask) changes the tail. The interpreter's bounds check cannot see that write, as
    # the address is inside a tensor it was given.
    buffer = poisoned((13 + 8, 37), torch.float32, DEVICE)
    tail = buffer[13:].clone()
    y, _ = rn.rms_norm_forward(x, w, EPS, kernel="persistent", block_m=block_m, num_programs=num_programs,
                               num_stages=num_stages, out=buffer[:13])
    assert_close(y, reference(x, w))
    assert torch.equal(buffer[13:].view(torch.int32), tail.view(torch.int32)), \
        "rows past the last one were written: mask the rows of the last block"


@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.float16, torch.bfloat16, torch.float64]))
def test_default_eps_is_torchs(dtype):
    # eps=None: the epsilon of torch's compute type (fp32 for 16-bit inputs), as nn.RMSNorm.
    # Small inputs, so eps is a visible part of mean(x^2).
    x = random_tensor((4, 16), dtype, DEVICE, scale=1e-3)
    y, _ = rn.rms_norm_forward(x, None, None)
    assert_close(y, F.rms_norm(x.double(), (16,), None, rn.default_eps(dtype)).to(dtype))
    assert rn.default_eps(dtype) == torch.finfo(acc_dtype(dtype)).eps


# ------------------------------------------------------------------------------------- backward
@pytest.mark.parametrize("dtype, rows, cols", list(matrix_cases()))
def test_backward_matches_float64(dtype, rows, cols):
    x, w = make(rows, cols, dtype)
    dy = random_tensor((rows, cols), dtype, DEVICE)
    _, rstd = rn.rms_norm_forward(x, w, EPS)
    assert_grads(rn.rms_norm_backward(dy, x, rstd, w), reference_grads(x, w, dy), dtype, "partials")


@pytest.mark.parametrize("kernel", ["persistent", "row"])
@pytest.mark.parametrize("cols", [pytest.param(1, marks=SLOW), pytest.param(7, marks=SLOW), 129])
def test_float64_forward_and_backward(cols, kernel):
    x, w = make(5, cols, torch.float64)
    y, rstd = rn.rms_norm_forward(x, w, EPS, kernel=kernel)
    assert_close(y, reference(x, w))
    dy = random_tensor((5, cols), torch.float64, DEVICE)
    assert_grads(rn.rms_norm_backward(dy, x, rstd, w), reference_grads(x, w, dy), torch.float64, "float64")


@pytest.mark.parametrize("block_m, num_partials, num_stages", [  # every size at 2 stages, 1 stage once
    case(m, p, s, keep=s == 2 or (m, p) == (4, 13)) for m in (1, 4) for p in (1, 2, 5, 13, 100) for s in (1, 2)])
def test_backward_any_partial_buffer_size(block_m, num_partials, num_stages):
    x, w = make(13, 37, torch.float32)
    dy = random_tensor((13, 37), torch.float32, DEVICE)
    _, rstd = rn.rms_norm_forward(x, w, EPS)
    config = dict(block_m=block_m, num_partials=num_partials, num_stages=num_stages)
    got = rn.rms_norm_backward(dy, x, rstd, w, **config)
    assert_grads(got, reference_grads(x, w, dy), torch.float32, f"P={num_partials}")
    again = rn.rms_norm_backward(dy, x, rstd, w, **config)
    assert all(torch.equal(a, b) for a, b in zip(got, again)), "the partials reduction must be deterministic"


def test_backward_without_weight():
    x, _ = make(6, 20, torch.float32)
    dy = random_tensor((6, 20), torch.float32, DEVICE)
    _, rstd = rn.rms_norm_forward(x, None, EPS)
    assert_grads(rn.rms_norm_backward(dy, x, rstd, None), reference_grads(x, None, dy), torch.float32, "no weight")


# ------------------------------------------------------------------------------------- autograd
@pytest.mark.parametrize("shape, affine", [  # (3, 7) with and without a weight, the others with one
    case(shape, affine, id=f"shape{i}-{affine}", keep=i == 1 or affine)
    for i, shape in enumerate([(1, 1), (3, 7), (2, 2, 5)]) for affine in (False, True)])
def test_gradcheck_float64(shape, affine):
    x = random_tensor(shape, torch.float64, DEVICE).requires_grad_(True)
    n = shape[-1]
    params = [random_tensor(n, torch.float64, DEVICE).requires_grad_(True)] if affine else []
    assert torch.autograd.gradcheck(lambda x, *p: rn.rms_norm(x, (n,), *p, eps=EPS), (x, *params))


def test_autograd_through_functional_matches_torch():
    x, w = random_tensor((2, 3, 4, 6), torch.float32, DEVICE), random_tensor((4, 6), torch.float32, DEVICE)
    xl, wl = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    dy = random_tensor(x.shape, torch.float32, DEVICE)
    y = rn.rms_norm(xl, (4, 6), wl, EPS)
    y.backward(dy)
    assert_close(y, reference(x.reshape(6, 24), w.reshape(24)).reshape(x.shape))
    want = reference_grads(x.reshape(6, 24), w.reshape(24), dy.reshape(6, 24))
    assert_grads((xl.grad.reshape(6, 24), wl.grad.reshape(24)), want, torch.float32, "autograd")


def test_module_is_a_drop_in_for_nn_rmsnorm():
    for kwargs in ({}, {"eps": 1e-5}, {"elementwise_affine": False}):
        ours, theirs = rn.TritonRMSNorm((4, 6), **kwargs).to(DEVICE), nn.RMSNorm((4, 6), **kwargs).to(DEVICE)
        assert isinstance(ours, nn.RMSNorm)
        assert ours.state_dict().keys() == theirs.state_dict().keys()
        if theirs.weight is not None:
            assert torch.equal(ours.weight, torch.ones(4, 6, device=DEVICE))
            with torch.no_grad():
                theirs.weight.normal_()
            ours.load_state_dict(theirs.state_dict())
        x = random_tensor((3, 5, 4, 6), torch.float32, DEVICE)
        x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        y1, y2 = ours(x1), theirs(x2)
        assert_close(y1, y2, rtol=1e-5, atol=1e-5)  # two fp32 implementations, each a few ulp off
        y1.square().sum().backward()
        y2.square().sum().backward()
        assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-5, name="dx")
        if theirs.weight is not None:
            assert_close(ours.weight.grad, theirs.weight.grad, rtol=1e-5, atol=1e-4, name="dw")  # 15-row sums
    xt = random_tensor((3, 4, 6), torch.float32, DEVICE).transpose(1, 2)  # non-contiguous: copied first
    assert_close(rn.TritonRMSNorm(4).to(DEVICE)(xt), nn.RMSNorm(4).to(DEVICE)(xt), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------- special values
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf * 0, in NumPy
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf_like_torch(dtype):
    x, w = make(6, 40, dtype)
    x[0, 3] = math.nan      # NaN: sum of squares NaN, the whole row NaN
    x[1, 5] = math.inf      # the whole row NaN, as torch's CUDA kernel (see `reference`)
    x[2, 0] = -math.inf
    x[3, 7] = -0.0
    x[4] = 60000.0 if dtype == torch.float16 else 1e15  # large, finite; squares fit in fp32
    y, _ = rn.rms_norm_forward(x, w, EPS)
    assert_close(y, reference(x, w))


def test_empty_inputs():
    w = random_tensor(8, torch.float32, DEVICE)
    x = torch.empty(0, 8, device=DEVICE)
    y, rstd = rn.rms_norm_forward(x, w, EPS)
    assert y.shape == (0, 8) and rstd.shape == (0,)
    dx, dw = rn.rms_norm_backward(x, x, rstd, w)
    assert dx.shape == (0, 8) and torch.equal(dw, torch.zeros(8, device=DEVICE))


@pytest.mark.parametrize("dtype, cols", [pytest.param(torch.float32, 20011, marks=SLOW),
                                         (torch.bfloat16, rn.MAX_N)])
def test_widest_one_block_rows(dtype, cols):
    x, w = make(2, cols, dtype)
    dy = random_tensor((2, cols), dtype, DEVICE)
    y, rstd = rn.rms_norm_forward(x, w, EPS)
    assert_close(y, reference(x, w))
    assert_grads(rn.rms_norm_backward(dy, x, rstd, w), reference_grads(x, w, dy), dtype, "wide")


# A row wider than MAX_N is streamed in chunks. With block_n=16 the same loops run on rows of a
# few dozen columns (cheap in the interpreter): one chunk, a ragged last chunk, many chunks;
# several rows per program, so the dw partials are read back and added to (num_partials).
@pytest.mark.parametrize("dtype, cols, num_partials", [
    # fp32: every width with 2 partial rows, and 1 and 5 on the ragged 33; bf16, fp64: 33 with 2.
    case(d.values[0], cols, p, id=f"{d.id}-{cols}-{p}", marks=d.marks,
         keep=(cols == 33 or d.id == "float32") and (p == 2 or (cols, d.id) == (33, "float32")))
    for d in dtype_params([torch.float32, torch.bfloat16, torch.float64]) for cols in (1, 7, 16, 33, 100)
    for p in (1, 2, 5)])
def test_looped_kernels_match_float64(dtype, cols, num_partials):
    rows = 11
    x, w = make(rows, cols, dtype)
    dy = random_tensor((rows, cols), dtype, DEVICE)
    out = poisoned((rows, cols), dtype, DEVICE)
    y, rstd = rn.rms_norm_forward(x, w, EPS, kernel="looped", block_n=16, out=out)
    assert_close(y, reference(x, w), name="looped y")
    got = rn.rms_norm_backward(dy, x, rstd, w, kernel="looped", block_n=16, num_partials=num_partials)
    assert_grads(got, reference_grads(x, w, dy), dtype, f"looped P={num_partials}")
    again = rn.rms_norm_backward(dy, x, rstd, w, kernel="looped", block_n=16, num_partials=num_partials)
    assert all(torch.equal(a, b) for a, b in zip(got, again)), "the looped dw must be deterministic"


def test_looped_kernels_without_weight_and_with_special_values():
    x, _ = make(4, 40, torch.float32)
    x[1, 3], x[2, 39] = math.nan, math.inf
    y, rstd = rn.rms_norm_forward(x, None, EPS, kernel="looped", block_n=16)
    assert_close(y, reference(x, None))
    dy = random_tensor((4, 40), torch.float32, DEVICE)
    xf, _ = make(4, 40, torch.float32)
    _, rstd = rn.rms_norm_forward(xf, None, EPS, kernel="looped", block_n=16)
    assert_grads(rn.rms_norm_backward(dy, xf, rstd, None, kernel="looped", block_n=16),
                 reference_grads(xf, None, dy), torch.float32, "looped, no weight")


@pytest.mark.parametrize("cols", [pytest.param(65536, marks=SLOW), 65537])  # 2^16 and the prime above it
def test_rows_wider_than_a_block_work_everywhere(cols):
    # The defaults pick the looped kernels past MAX_N, through the launchers and the public op.
    x, w = make(2, cols, torch.float32)
    dy = random_tensor((2, cols), torch.float32, DEVICE)
    y, rstd = rn.rms_norm_forward(x, w, EPS)
    assert_close(y, reference(x, w))
    assert_grads(rn.rms_norm_backward(dy, x, rstd, w), reference_grads(x, w, dy), torch.float32, "65k")
    xl, wl = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    rn.rms_norm(xl, cols, wl, EPS).backward(dy)
    assert_grads((xl.grad, wl.grad), reference_grads(x, w, dy), torch.float32, "65k autograd")


# ------------------------------------------------------------------ as a PyTorch op in a model
@pytest.mark.parametrize("affine", [True, pytest.param(False, marks=SLOW)], ids=["affine", "no_affine"])
@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.float64, marks=SLOW)],
                         ids=["float32", "float64"])
def test_registered_op_passes_opcheck(dtype, affine):
    # Schema, fake (meta) function, autograd registration and AOT dispatch, as torch checks them.
    x, w = make(3, 12, dtype, affine=affine)
    x.requires_grad_(True)
    if w is not None:
        w.requires_grad_(True)
    torch.library.opcheck(rn.rms_norm_op, (x, w, EPS))
    dy = random_tensor((3, 12), dtype, DEVICE)
    _, rstd = rn.rms_norm_op(x.detach(), None if w is None else w.detach(), EPS)
    torch.library.opcheck(rn.rms_norm_backward_op, (dy, x.detach(), rstd, None if w is None else w.detach()))


def test_eager_paths_and_the_registered_op_agree():
    x, w = make(6, 24, torch.float32)
    with torch.no_grad():
        plain = rn.rms_norm(x, 24, w, EPS)  # no autograd: the launcher alone
    xl, wl = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    tracked = rn.rms_norm(xl, 24, wl, EPS)  # RMSNormFunction
    op = rn.rms_norm_op(x, w, EPS)[0]  # what torch.compile records
    assert torch.equal(plain, tracked.detach()) and torch.equal(plain, op)
    assert_close(plain, reference(x, w))


def block(norm):
    """A transformer block's residual path around the norm: torch ops on both sides of it."""
    def f(x, r, w):
        return (norm(x + r, w) * 2.0).sin()
    return f


@pytest.mark.parametrize("dtype", [case(*p.values, id=p.id, keep=p.id == "float32", marks=p.marks)
                                   for p in dtype_params([torch.float32, torch.bfloat16])])
def test_compiles_with_no_graph_break(dtype):
    # fullgraph=True raises on any graph break; on the GPU Inductor compiles the torch ops around
    # the registered op, in simulation aot_eager traces the same graphs (fake tensors, autograd).
    torch._dynamo.reset()
    ours = block(lambda h, w: rn.rms_norm(h, (h.shape[-1],), w, EPS))
    compiled = torch.compile(ours, fullgraph=True, backend=runtime.pick(gpu="inductor", sim="aot_eager"))
    x, w = make(64, 96, dtype)
    r = random_tensor(x.shape, dtype, DEVICE)
    leaves = [t.clone().requires_grad_(True) for t in (x, r, w)]
    y = compiled(*leaves)
    dy = random_tensor(y.shape, dtype, DEVICE)
    grads = torch.autograd.grad(y, leaves, dy)
    eager_leaves = [t.clone().requires_grad_(True) for t in (x, r, w)]
    y_eager = ours(*eager_leaves)
    eager_grads = torch.autograd.grad(y_eager, eager_leaves, dy)
    # The same kernels: only the torch ops around them may round differently once fused.
    assert_close(y, y_eager, rtol=2 * rn_rtol(dtype), atol=1e-5)
    for name, got, want in zip(("dx", "dr", "dw"), grads, eager_grads):
        assert_close(got, want, rtol=4 * rn_rtol(dtype), atol=64 * 4 * rn_rtol(dtype) * float(want.abs().max()),
                     name=name)


def rn_rtol(dtype):
    return {torch.float32: 1.3e-6, torch.bfloat16: 1.6e-2}[dtype]


def test_compiled_graph_holds_the_op_not_its_kernels():
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    f = torch.compile(block(lambda h, w: rn.rms_norm(h, (h.shape[-1],), w, EPS)), backend=backend, fullgraph=True)
    x, w = make(4, 16, torch.float32)
    f(x, random_tensor(x.shape, torch.float32, DEVICE), w)
    assert len(graphs) == 1
    targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert any("rms_norm" in t and rn.NAMESPACE in t for t in targets), targets


# ---------------------------------------------------------------------------------- bad inputs
def bad_inputs():
    ok = lambda *shape: torch.ones(*(shape or (4, 8)), device=DEVICE)  # noqa: E731
    vec = lambda n=8, dtype=torch.float32: torch.ones(n, device=DEVICE, dtype=dtype)  # noqa: E731
    yield "not a tensor", TypeError, "must be a torch.Tensor", lambda: ([[1.0]], None, {})
    yield "integer dtype", TypeError, "expected one of", lambda: (ok().long(), None, {})
    yield "scalar", ValueError, "at least 1 dimension", lambda: (torch.tensor(1.0, device=DEVICE), None, {})
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(8, 4).t(), None, {})
    yield "wrong device", ValueError, "kernels run on", lambda: (torch.ones(4, 8, device="meta"), None, {})
    yield "weight wrong shape", ValueError, "weight has shape", lambda: (ok(), vec(9), {})
    yield "weight dtype", TypeError, "weight has dtype", lambda: (ok(), vec(dtype=torch.float64), {})
    yield "row kernel, too wide", ValueError, "use kernel='looped'", lambda: (ok(1, rn.MAX_N + 1), None, {"kernel": "row"})
    yield "nan eps", ValueError, "eps", lambda: (ok(), None, {"eps": math.nan})
    yield "unknown kernel", ValueError, "kernel must be", lambda: (ok(), None, {"kernel": "fast"})
    yield "num_warps not 2^k", ValueError, "num_warps", lambda: (ok(), None, {"num_warps": 6})


@pytest.mark.parametrize("case, error, message, make_args", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_forward_rejects_bad_input_before_launch(case, error, message, make_args):
    x, w, kwargs = make_args()
    with pytest.raises(error, match=message):
        rn.rms_norm_forward(x, w, **kwargs)


def test_backward_rejects_bad_input_before_launch():
    x, r = torch.ones(4, 8, device=DEVICE), torch.ones(4, device=DEVICE)
    with pytest.raises(ValueError, match="shapes must match"):
        rn.rms_norm_backward(torch.ones(4, 7, device=DEVICE), x, r)
    with pytest.raises(ValueError, match="rstd has shape"):
        rn.rms_norm_backward(x, x, torch.ones(3, device=DEVICE))
    with pytest.raises(TypeError, match="weight has dtype"):
        rn.rms_norm_backward(x, x, r, torch.ones(8, device=DEVICE, dtype=torch.float16))
    with pytest.raises(ValueError, match="num_partials"):
        rn.rms_norm_backward(x, x, r, num_partials=-1)


def test_functional_checks_normalized_shape():
    with pytest.raises(ValueError, match="normalized_shape"):
        rn.rms_norm(torch.ones(2, 3, 4, device=DEVICE), (3,))


def test_public_rms_norm_names_the_device_it_runs_on():
    """As layer_norm: a meta tensor is refused with the device the kernels run on, before any copy."""
    with pytest.raises(ValueError, match="kernels run on"):
        rn.rms_norm(torch.ones(4, 8, device="meta"), (8,))
