"""LayerNorm against float64 torch: the forward and the op (week4_triton_dl.norms.layernorm), the backward's dx, dw, db
(week4_triton_dl.norms.layernorm_backward), stage 2 of dw and db (week4_triton_dl.norms.column_sums) and autograd."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor

ln = runtime.lesson("week4_triton_dl.norms.layernorm")
lnb = runtime.lesson("week4_triton_dl.norms.layernorm_backward")
nc = runtime.lesson("week4_triton_dl.norms.column_sums")
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16, torch.float64])
# The big shape matrices leave fp64 out: on a GPU every dtype is another set of compiles, and
# fp64 is there for gradcheck, which has its own tests (and a small fp64 matrix below).
MATRIX_DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16])
# Row widths: 1, primes, a power of two and its neighbours; wide rows only on the GPU (the
# interpreter runs every program in NumPy). One column: var = 0, rstd = 1/sqrt(eps) ~ 316 and dx
# is exactly 0; any inconsistency in computing g = dy * w shows at 316x (layernorm_backward._row_grads).
WIDTHS = [1, 7, 64, 127, 129] + runtime.pick(gpu=[4097, 8192], sim=[])
ROWS = [1, 3, 17]
# What the default run keeps (the rest is marked slow; `pytest --slow` runs it all). On a GPU each
# dtype x block width (the row's power of two) x kernel x launch option x class of the row count
# is its own compiled kernel: the default run takes widths 1 (one column) and 129 (ragged) in fp32
# and 129 in the 16-bit dtypes, on 17 rows (a row count of neither class; one row is the fp64
# gradcheck's (1, 1)), the row kernel on 129 (wide blocks: test_widest_one_block_rows); fp64 on 129
# (both forward kernels); the atomic backward on 129 in every dtype; no weight and bias, and both,
# in the forward, backward and (3, 7) gradcheck; the huge-value forward on every kernel in fp32 and
# on the persistent one in bf16; the looped, split and partial-buffer matrices, the other gradchecks
# and the 65k rows keep one case per dtype, path or option; slow adds the products.
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
EPS = 1e-5


def acc_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def make(rows, cols, dtype, *, affine=True):
    x = random_tensor((rows, cols), dtype, DEVICE, scale=2.0) + 0.5  # a non-zero mean to remove
    w = random_tensor(cols, dtype, DEVICE) if affine else None
    b = random_tensor(cols, dtype, DEVICE) if affine else None
    return x, w, b


def reference(x, w, b, eps=EPS):
    """F.layer_norm in float64, rounded once to x's dtype: the best a kernel can return."""
    d = lambda t: None if t is None else t.double()  # noqa: E731
    return F.layer_norm(x.double(), (x.shape[-1],), d(w), d(b), eps).to(x.dtype)


def reference_grads(x, w, b, dy, eps=EPS):
    """(dx, dw, db, dw_scale, db_scale) from float64 autograd; the scales feed the error model."""
    leaf = lambda t: None if t is None else t.detach().double().clone().requires_grad_(True)  # noqa: E731
    xr, wr, br = leaf(x), leaf(w), leaf(b)
    F.layer_norm(xr, (x.shape[-1],), wr, br, eps).backward(dy.double())
    xd = x.double()
    mean = xd.mean(-1, keepdim=True)
    rstd = (xd.var(-1, unbiased=False, keepdim=True) + eps).rsqrt()
    # A term dy * xhat is computed from x - mean, so its rounding error scales with
    # |dy| (|x| + |mean|) rstd, not with |dy * xhat| (which cancels to ~0 when N = 1).
    return (xr.grad, None if wr is None else wr.grad, None if br is None else br.grad,
            dy.double().abs() * (xd.abs() + mean.abs()) * rstd, dy.double())


def column_sum_atol(terms, dtype):
    """Error model for dw/db, column sums over M rows accumulated in fp32 (fp64 for fp64).

    Each term carries a few rounding errors (xhat from fp32 mean/rstd) and a recursive sum of M
    terms adds at most M more: |error| <= (M + 4) u max_j sum_i |term_ij| (Higham, Accuracy and
    Stability of Numerical Algorithms, 2nd ed., sec. 4.2), u the accumulator's unit roundoff,
    |term| bounded by `terms` (see reference_grads). A missing or doubled row is off by a whole
    term (~1): far outside this.
    """
    u = torch.finfo(acc_dtype(dtype)).eps / 2
    return (terms.shape[0] + 4) * u * float(terms.abs().sum(0).max()) + torch.finfo(acc_dtype(dtype)).tiny


def assert_grads(got, want, dtype, name):
    """got: (dx, dw, db) from the kernels; want: reference_grads(...)."""
    dx, dw, db = got
    rdx, rdw, rdb, dw_terms, db_terms = want
    assert_close(dx, rdx.to(dtype), name=f"{name} dx")
    for label, value, ref, terms in (("dw", dw, rdw, dw_terms), ("db", db, rdb, db_terms)):
        if ref is None:
            assert value is None, f"{name} {label}: expected None (no such parameter)"
        else:
            assert_close(value, ref.to(dtype), atol=column_sum_atol(terms, dtype), name=f"{name} {label}")


# -------------------------------------------------------------------------------------- forward
@pytest.mark.parametrize("dtype, rows, cols, kernel", list(matrix_cases(("persistent", "row"))))
def test_forward_matches_float64(dtype, rows, cols, kernel):
    x, w, b = make(rows, cols, dtype)
    out = poisoned((rows, cols), dtype, DEVICE)
    y, mean, rstd = ln.layer_norm_forward(x, w, b, EPS, out=out, kernel=kernel)
    assert y is out, "the launcher must write into the `out` it was given"
    assert_close(y, reference(x, w, b))
    xd = x.double()
    assert_close(mean, xd.mean(-1).to(acc_dtype(dtype)), name="mean")
    assert_close(rstd, (xd.var(-1, unbiased=False) + EPS).rsqrt().to(acc_dtype(dtype)), name="rstd")


@pytest.mark.parametrize("kernel, affine", [  # no parameter and both in the persistent kernel, the row kernel once
    case(k, a, id=f"{k}-{a}", keep=k == "persistent" and a != "weight" or k == "row" and a == "none")
    for k in ("persistent", "row") for a in ("none", "weight", "weight+bias")])
def test_forward_without_weight_or_bias(kernel, affine):
    x, w, b = make(5, 33, torch.float32)
    w = w if affine != "none" else None
    b = b if affine == "weight+bias" else None
    y, _, _ = ln.layer_norm_forward(x, w, b, EPS, kernel=kernel)
    assert_close(y, reference(x, w, b))


@pytest.mark.parametrize("block_m, num_programs, num_stages", [  # every split at 2 stages, 1 and 3 once
    case(m, p, s, keep=s == 2 or (m, p) == (8, 13)) for m in (1, 2, 8) for p in (1, 3, 13, 100) for s in (1, 2, 3)])
def test_persistent_forward_any_split_of_rows(block_m, num_programs, num_stages):
    # 13 rows: a prime, so runs of rows and steps of block_m never divide it evenly.
    x, w, b = make(13, 37, torch.float32)
    # `out` is the head of a taller poisoned buffer: a missing row mask writes into its tail (an
    # address inside a given tensor, which the interpreter's bounds check cannot flag).
    buffer = poisoned((13 + 8, 37), torch.float32, DEVICE)
    tail = buffer[13:].clone()
    y, mean, _ = ln.layer_norm_forward(x, w, b, EPS, kernel="persistent", block_m=block_m,
                                       num_programs=num_programs, num_stages=num_stages, out=buffer[:13])
    assert_close(y, reference(x, w, b))
    assert torch.equal(buffer[13:].view(torch.int32), tail.view(torch.int32)), \
        "rows past the last one were written: mask the rows of the last block"
    assert_close(mean, x.double().mean(-1).float(), name="mean")


def test_large_mean_does_not_cancel():
    # sum(x^2)/N - mean^2 would lose every digit here (mean 1e4, std 1); two passes do not.
    x = random_tensor((4, 300), torch.float32, DEVICE) + 1e4
    y, _, _ = ln.layer_norm_forward(x, None, None, EPS)
    assert_close(y, reference(x, None, None), atol=1e-3, rtol=1e-3)  # x itself is only known to 1e4 * 6e-8


# ------------------------------------------------------------------------------------- backward
@pytest.mark.parametrize("dtype, rows, cols", list(matrix_cases()))
def test_backward_matches_float64(dtype, rows, cols):
    x, w, b = make(rows, cols, dtype)
    dy = random_tensor((rows, cols), dtype, DEVICE)
    _, mean, rstd = ln.layer_norm_forward(x, w, b, EPS)
    got = lnb.layer_norm_backward(dy, x, mean, rstd, w, True)
    assert_grads(got, reference_grads(x, w, b, dy), dtype, "partials")


@pytest.mark.parametrize("kernel", ["persistent", "row"])
@pytest.mark.parametrize("cols", [pytest.param(1, marks=SLOW), pytest.param(7, marks=SLOW), 129])
def test_float64_forward_and_backward(cols, kernel):
    x, w, b = make(5, cols, torch.float64)
    y, mean, rstd = ln.layer_norm_forward(x, w, b, EPS, kernel=kernel)
    assert_close(y, reference(x, w, b))
    dy = random_tensor((5, cols), torch.float64, DEVICE)
    assert_grads(lnb.layer_norm_backward(dy, x, mean, rstd, w, True), reference_grads(x, w, b, dy),
                 torch.float64, "float64")


@pytest.mark.parametrize("dtype, cols", [  # every dtype at 129
    case(d.values[0], cols, id=f"{d.id}-{cols}", keep=cols == 129, marks=d.marks)
    for d in DTYPES for cols in (1, 7, 129)])
def test_atomic_backward_matches_float64(dtype, cols):
    x, w, b = make(17, cols, dtype)
    dy = random_tensor((17, cols), dtype, DEVICE)
    _, mean, rstd = ln.layer_norm_forward(x, w, b, EPS)
    got = lnb.layer_norm_backward(dy, x, mean, rstd, w, True, kernel="atomic")
    assert_grads(got, reference_grads(x, w, b, dy), dtype, "atomic")


@pytest.mark.parametrize("block_m, num_partials, num_stages", [  # every size at 2 stages, 1 stage once
    case(m, p, s, keep=s == 2 or (m, p) == (4, 13)) for m in (1, 4) for p in (1, 2, 5, 13, 100) for s in (1, 2)])
def test_backward_any_partial_buffer_size(block_m, num_partials, num_stages):
    x, w, b = make(13, 37, torch.float32)
    dy = random_tensor((13, 37), torch.float32, DEVICE)
    _, mean, rstd = ln.layer_norm_forward(x, w, b, EPS)
    config = dict(block_m=block_m, num_partials=num_partials, num_stages=num_stages)
    got = lnb.layer_norm_backward(dy, x, mean, rstd, w, True, **config)
    assert_grads(got, reference_grads(x, w, b, dy), torch.float32, f"P={num_partials}")
    again = lnb.layer_norm_backward(dy, x, mean, rstd, w, True, **config)
    # Fixed partial rows, fixed order: the two-stage reduction gives the same bits every time.
    for first, second in zip(got, again):
        assert torch.equal(first, second), "the partials reduction must be deterministic"


@pytest.mark.parametrize("affine", ["none", pytest.param("weight", marks=SLOW), "weight+bias"])
def test_backward_without_weight_or_bias(affine):
    x, w, b = make(6, 20, torch.float32)
    w = w if affine != "none" else None
    b = b if affine == "weight+bias" else None
    dy = random_tensor((6, 20), torch.float32, DEVICE)
    _, mean, rstd = ln.layer_norm_forward(x, w, b, EPS)
    got = lnb.layer_norm_backward(dy, x, mean, rstd, w, b is not None)
    assert_grads(got, reference_grads(x, w, b, dy), torch.float32, affine)


@pytest.mark.parametrize("shape", [(1, 1), (3, 64), (100, 7), (33, 65)])
def test_column_sums(shape):
    partials = random_tensor(shape, torch.float32, DEVICE)
    got = nc.column_sums(partials, torch.float32)
    want = partials.double().sum(0)
    assert_close(got, want.float(), atol=column_sum_atol(partials.double(), torch.float32))


# ------------------------------------------------------------------------------------- autograd
@pytest.mark.parametrize("shape, affine", [  # (3, 7) with and without both, the others with both
    case(shape, affine, id=f"shape{i}-{affine}", keep=affine == "weight+bias" or i == 1 and affine == "none")
    for i, shape in enumerate([(1, 1), (3, 7), (2, 2, 5)]) for affine in ("none", "weight", "weight+bias")])
def test_gradcheck_float64(shape, affine):
    x = random_tensor(shape, torch.float64, DEVICE).requires_grad_(True)
    n = shape[-1]
    params = []
    if affine != "none":
        params.append(random_tensor(n, torch.float64, DEVICE).requires_grad_(True))
    if affine == "weight+bias":
        params.append(random_tensor(n, torch.float64, DEVICE).requires_grad_(True))

    def fn(x, *p):
        return ln.layer_norm(x, (n,), *p, eps=EPS)

    assert torch.autograd.gradcheck(fn, (x, *params))


def test_autograd_through_functional_matches_torch():
    # Two normalized dimensions, flattened into rows of 4 x 6 = 24, and a 3-D batch: 6 rows.
    x, w, b = (random_tensor(s, torch.float32, DEVICE) for s in ((2, 3, 4, 6), (4, 6), (4, 6)))
    leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
    dy = random_tensor(x.shape, torch.float32, DEVICE)
    y = ln.layer_norm(leaves[0], (4, 6), leaves[1], leaves[2], EPS)
    y.backward(dy)
    assert_close(y, reference(x.reshape(6, 24), w.reshape(24), b.reshape(24)).reshape(x.shape))
    got = (leaves[0].grad.reshape(6, 24), leaves[1].grad.reshape(24), leaves[2].grad.reshape(24))
    want = reference_grads(x.reshape(6, 24), w.reshape(24), b.reshape(24), dy.reshape(6, 24))
    assert_grads(got, want, torch.float32, "autograd")


def test_module_is_a_drop_in_for_nn_layernorm():
    ours, theirs = ln.TritonLayerNorm((4, 6), eps=1e-6), nn.LayerNorm((4, 6), eps=1e-6)
    ours, theirs = ours.to(DEVICE), theirs.to(DEVICE)
    assert isinstance(ours, nn.LayerNorm)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert torch.equal(ours.weight, torch.ones(4, 6, device=DEVICE))
    assert torch.equal(ours.bias, torch.zeros(4, 6, device=DEVICE))
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    ours.load_state_dict(theirs.state_dict())
    x = random_tensor((3, 5, 4, 6), torch.float32, DEVICE)
    assert_close(ours(x), theirs(x))
    # A non-contiguous input works (copied first, as torch's own kernel does).
    xt = random_tensor((3, 4, 6), torch.float32, DEVICE).transpose(1, 2)
    lin = ln.TritonLayerNorm(4).to(DEVICE)
    assert_close(lin(xt), nn.LayerNorm(4).to(DEVICE)(xt))
    for kwargs in ({"elementwise_affine": False}, {"bias": False}):
        a, b = ln.TritonLayerNorm(6, **kwargs).to(DEVICE), nn.LayerNorm(6, **kwargs).to(DEVICE)
        assert a.state_dict().keys() == b.state_dict().keys()
        assert_close(a(x), b(x))


def test_module_gradients_match_nn_layernorm():
    ours, theirs = ln.TritonLayerNorm(24).to(DEVICE), nn.LayerNorm(24).to(DEVICE)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    ours.load_state_dict(theirs.state_dict())
    x = random_tensor((4, 5, 24), torch.float32, DEVICE)
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ours(x1).square().sum().backward()
    theirs(x2).square().sum().backward()
    assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-5, name="dx")  # two fp32 implementations
    assert_close(ours.weight.grad, theirs.weight.grad, rtol=1e-5, atol=1e-4, name="dw")  # 20-row sums
    assert_close(ours.bias.grad, theirs.bias.grad, rtol=1e-5, atol=1e-4, name="db")


# ------------------------------------------------------------------------------- special values
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf, in NumPy
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf_rows_like_torch(dtype):
    x, w, b = make(7, 40, dtype)
    x[0, 3] = math.nan                # one NaN: its row's mean is NaN, so the whole row is
    x[1, 5] = math.inf                # inf - inf = NaN in the variance: the whole row is NaN
    x[2, 0] = -math.inf
    x[3, 7] = -0.0                    # an ordinary zero
    # Large but finite: stays finite (fp16's max squared is 4e9, fine in fp32; bf16's max would
    # overflow fp32's squares, as it would in torch's fp32 kernel, so 1e15 stands in for it).
    x[4] = 60000.0 if dtype == torch.float16 else 1e15
    x[4, ::2] *= -1
    y, _, _ = ln.layer_norm_forward(x, w, b, EPS)
    assert_close(y, reference(x, w, b))


def test_nan_row_in_backward_like_torch():
    # 20 columns: on a GPU the kernels of test_backward_without_weight_or_bias (6 rows of 20).
    x, w, b = make(5, 20, torch.float32)
    x[2, 4] = math.nan
    dy = random_tensor((5, 20), torch.float32, DEVICE)
    _, mean, rstd = ln.layer_norm_forward(x, w, b, EPS)
    dx, dw, db = lnb.layer_norm_backward(dy, x, mean, rstd, w, True)
    rdx, rdw, rdb, _, db_terms = reference_grads(x, w, b, dy)
    assert_close(dx, rdx.float(), name="dx")   # NaN row 2, the other rows untouched
    assert_close(dw, rdw.float(), name="dw")   # every column meets row 2's NaN
    assert_close(db, rdb.float(), atol=column_sum_atol(db_terms, torch.float32), name="db")  # dy only


def test_empty_inputs():
    w, b = (random_tensor(8, torch.float32, DEVICE) for _ in range(2))
    x = torch.empty(0, 8, device=DEVICE)
    y, mean, rstd = ln.layer_norm_forward(x, w, b, EPS)
    assert y.shape == (0, 8) and mean.shape == (0,) and rstd.shape == (0,)
    dx, dw, db = lnb.layer_norm_backward(x, x, mean, rstd, w, True)
    assert dx.shape == (0, 8)
    assert torch.equal(dw, torch.zeros(8, device=DEVICE)) and torch.equal(db, torch.zeros(8, device=DEVICE))
    m = ln.TritonLayerNorm(8).to(DEVICE)
    m(torch.empty(2, 0, 8, device=DEVICE, requires_grad=True)).sum().backward()
    assert torch.equal(m.weight.grad, torch.zeros(8, device=DEVICE))


@pytest.mark.parametrize("dtype, cols", [pytest.param(torch.float32, 20011, marks=SLOW),
                                         (torch.bfloat16, ln.MAX_N)])
def test_widest_one_block_rows(dtype, cols):
    x, w, b = make(2, cols, dtype)
    dy = random_tensor((2, cols), dtype, DEVICE)
    y, mean, rstd = ln.layer_norm_forward(x, w, b, EPS)
    assert_close(y, reference(x, w, b))
    assert_grads(lnb.layer_norm_backward(dy, x, mean, rstd, w, True), reference_grads(x, w, b, dy), dtype, "wide")


# Rows wider than MAX_N are streamed in chunks. block_n=16 runs the same loops on rows of a few
# dozen columns: one chunk, a ragged last chunk, many chunks; several rows per program, so the
# dw/db partials are read back and added to.
@pytest.mark.parametrize("dtype, cols, num_partials", [
    # fp32: every width with 2 partial rows, and 1 and 5 on the ragged 33; bf16, fp64: 33 with 2.
    case(d.values[0], cols, p, id=f"{d.id}-{cols}-{p}", marks=d.marks,
         keep=(cols == 33 or d.id == "float32") and (p == 2 or (cols, d.id) == (33, "float32")))
    for d in dtype_params([torch.float32, torch.bfloat16, torch.float64]) for cols in (1, 7, 16, 33, 100)
    for p in (1, 2, 5)])
def test_looped_kernels_match_float64(dtype, cols, num_partials):
    rows = 11
    x, w, b = make(rows, cols, dtype)
    dy = random_tensor((rows, cols), dtype, DEVICE)
    out = poisoned((rows, cols), dtype, DEVICE)
    y, mean, rstd = ln.layer_norm_forward(x, w, b, EPS, kernel="looped", block_n=16, out=out)
    assert_close(y, reference(x, w, b), name="looped y")
    got = lnb.layer_norm_backward(dy, x, mean, rstd, w, True, kernel="looped", block_n=16, num_partials=num_partials)
    assert_grads(got, reference_grads(x, w, b, dy), dtype, f"looped P={num_partials}")
    again = lnb.layer_norm_backward(dy, x, mean, rstd, w, True, kernel="looped", block_n=16, num_partials=num_partials)
    assert all(torch.equal(a, b) for a, b in zip(got, again)), "the looped dw/db must be deterministic"


@pytest.mark.parametrize("cols", [pytest.param(65536, marks=SLOW), 65537])  # 2^16 and the prime above it
def test_rows_wider_than_a_block_work_everywhere(cols):
    x, w, b = make(2, cols, torch.float32)
    dy = random_tensor((2, cols), torch.float32, DEVICE)
    y, mean, rstd = ln.layer_norm_forward(x, w, b, EPS)
    assert_close(y, reference(x, w, b))
    assert_grads(lnb.layer_norm_backward(dy, x, mean, rstd, w, True), reference_grads(x, w, b, dy), torch.float32, "65k")
    leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
    ln.layer_norm(leaves[0], cols, leaves[1], leaves[2], EPS).backward(dy)
    assert_grads(tuple(t.grad for t in leaves), reference_grads(x, w, b, dy), torch.float32, "65k autograd")


# ------------------------------------------------------------------------- extreme magnitudes
@pytest.mark.parametrize("dtype, kernel", [  # every kernel in fp32, bf16 on the persistent one
    case(d.values[0], k, id=f"{d.id}-{k}", keep=d.id == "float32" or k == "persistent", marks=d.marks)
    for d in dtype_params([torch.float32, torch.bfloat16]) for k in ("row", "persistent", "looped")])
def test_huge_values_whose_squares_overflow(dtype, kernel):
    # |x - mean| ~ 1e20: (x - mean)^2 ~ 1e40 overflows fp32 although the variance is ~1e40 / N
    # ... which also overflows; what matters is y = (x - mean) / std, all of order 1. A naive
    # kernel returns rstd = 1/sqrt(inf) = 0 and a row of zeros (torch's fp32 kernel does).
    x = (random_tensor((5, 48), torch.float32, DEVICE) * 3e19).to(dtype)
    x[4] = (random_tensor(48, torch.float32, DEVICE) * 1e30).to(dtype)
    w, b = random_tensor(48, dtype, DEVICE), random_tensor(48, dtype, DEVICE)
    extra = {"block_n": 16} if kernel == "looped" else {}
    y, _, rstd = ln.layer_norm_forward(x, w, b, EPS, kernel=kernel, **extra)
    assert_close(y, reference(x, w, b), name=f"{kernel} y")
    want = (x.double().var(-1, unbiased=False) + EPS).rsqrt()
    assert_close(rstd, want.to(torch.float32), rtol=1e-5, atol=0.0, name="rstd")


@pytest.mark.parametrize("kernel", ["row", "looped"])
def test_huge_values_backward(kernel):
    x, w, b = make(4, 40, torch.float32)
    x = x * 4e19
    dy = random_tensor((4, 40), torch.float32, DEVICE)
    extra = {"block_n": 16} if kernel == "looped" else {}
    _, mean, rstd = ln.layer_norm_forward(x, w, b, EPS, kernel=kernel, **extra)
    got = lnb.layer_norm_backward(dy, x, mean, rstd, w, True, kernel="looped" if kernel == "looped" else None, **extra)
    assert_grads(got, reference_grads(x, w, b, dy), torch.float32, "huge")


# ------------------------------------------------------------------ as a PyTorch op in a model
@pytest.mark.parametrize("affine", [True, pytest.param(False, marks=SLOW)], ids=["affine", "no_affine"])
@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.float64, marks=SLOW)],
                         ids=["float32", "float64"])
def test_registered_op_passes_opcheck(dtype, affine):
    x, w, b = make(3, 12, dtype, affine=affine)
    leaves = [t if t is None else t.clone().requires_grad_(True) for t in (x, w, b)]
    torch.library.opcheck(ln.layer_norm_op, (*leaves, EPS))
    _, mean, rstd = ln.layer_norm_op(x, w, b, EPS)
    dy = random_tensor((3, 12), dtype, DEVICE)
    torch.library.opcheck(ln.layer_norm_backward_op, (dy, x, mean, rstd, w, b))


def test_eager_paths_and_the_registered_op_agree():
    x, w, b = make(6, 24, torch.float32)
    with torch.no_grad():
        plain = ln.layer_norm(x, 24, w, b, EPS)
    leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
    tracked = ln.layer_norm(leaves[0], 24, leaves[1], leaves[2], EPS)
    op = ln.layer_norm_op(x, w, b, EPS)[0]
    assert torch.equal(tracked.detach(), op), "the autograd Function and the op run one kernel"
    # The no-grad path runs the kernel compiled without the statistics' stores; the compiler may
    # contract a*b+c into an FMA differently there: within 4 units of fp32 roundoff of the row scale.
    assert_close(plain, op, rtol=0.0, atol=4 * 2.0**-24 * float(op.abs().max()), name="no-grad path")
    assert_close(plain, reference(x, w, b))


@pytest.mark.parametrize("dtype", [case(*p.values, id=p.id, keep=p.id == "float32", marks=p.marks)
                                   for p in dtype_params([torch.float32, torch.bfloat16])])
def test_compiles_with_no_graph_break(dtype):
    torch._dynamo.reset()

    def ours(x, r, w, b):
        return (ln.layer_norm(x + r, (x.shape[-1],), w, b, EPS) * 2.0).sin()
    compiled = torch.compile(ours, fullgraph=True, backend=runtime.pick(gpu="inductor", sim="aot_eager"))
    x, w, b = make(64, 96, dtype)
    r = random_tensor(x.shape, dtype, DEVICE)
    leaves = [t.clone().requires_grad_(True) for t in (x, r, w, b)]
    y = compiled(*leaves)
    dy = random_tensor(y.shape, dtype, DEVICE)
    grads = torch.autograd.grad(y, leaves, dy)
    eager_leaves = [t.clone().requires_grad_(True) for t in (x, r, w, b)]
    y_eager = ours(*eager_leaves)
    eager_grads = torch.autograd.grad(y_eager, eager_leaves, dy)
    rtol = {torch.float32: 1.3e-6, torch.bfloat16: 1.6e-2}[dtype]
    assert_close(y, y_eager, rtol=2 * rtol, atol=1e-5)
    for name, got, want in zip(("dx", "dr", "dw", "db"), grads, eager_grads):
        assert_close(got, want, rtol=4 * rtol, atol=64 * 4 * rtol * float(want.abs().max()), name=name)


# ---------------------------------------------------------------------------------- bad inputs
def bad_forward_inputs():
    ok = lambda *shape: torch.ones(*(shape or (4, 8)), device=DEVICE)  # noqa: E731
    vec = lambda n=8, dtype=torch.float32: torch.ones(n, device=DEVICE, dtype=dtype)  # noqa: E731
    yield "not a tensor", TypeError, "must be a torch.Tensor", lambda: ([[1.0]], None, None, {})
    yield "integer dtype", TypeError, "expected one of", lambda: (ok().int(), None, None, {})
    yield "scalar", ValueError, "at least 1 dimension", lambda: (torch.tensor(1.0, device=DEVICE), None, None, {})
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(8, 4).t(), None, None, {})
    yield "wrong device", ValueError, "kernels run on", lambda: (torch.ones(4, 8, device="meta"), None, None, {})
    yield "weight wrong shape", ValueError, "weight has shape", lambda: (ok(), vec(7), None, {})
    yield "bias wrong shape", ValueError, "bias has shape", lambda: (ok(), vec(), vec(9), {})
    yield "weight dtype", TypeError, "weight has dtype", lambda: (ok(), vec(dtype=torch.float16), None, {})
    yield "bias dtype", TypeError, "bias has dtype", lambda: (ok(), None, vec(dtype=torch.float64), {})
    yield "row kernel, too wide", ValueError, "use kernel='looped'", lambda: (ok(1, ln.MAX_N + 1), None, None,
                                                                          {"kernel": "row"})
    yield "negative eps", ValueError, "eps", lambda: (ok(), None, None, {"eps": -1.0})
    yield "out shape", ValueError, "out has shape", lambda: (ok(), None, None, {"out": ok(4, 7)})
    yield "unknown kernel", ValueError, "kernel must be", lambda: (ok(), None, None, {"kernel": "fast"})
    yield "block_m not 2^k", ValueError, "block_m", lambda: (ok(), None, None, {"block_m": 3})
    yield "num_programs 0", ValueError, "num_programs", lambda: (ok(), None, None, {"num_programs": 0})


@pytest.mark.parametrize("case, error, message, make_args", [pytest.param(*c, id=c[0]) for c in bad_forward_inputs()])
def test_forward_rejects_bad_input_before_launch(case, error, message, make_args):
    x, w, b, kwargs = make_args()
    with pytest.raises(error, match=message):
        ln.layer_norm_forward(x, w, b, **kwargs)


def bad_backward_inputs():
    x = lambda: torch.ones(4, 8, device=DEVICE)  # noqa: E731
    stat = lambda n=4, dtype=torch.float32: torch.ones(n, device=DEVICE, dtype=dtype)  # noqa: E731
    yield "dy shape", ValueError, "shapes must match", lambda: (x()[:, :7].contiguous(), x(), stat(), stat(), {})
    yield "dy dtype", TypeError, "dtypes must match", lambda: (x().half(), x(), stat(), stat(), {})
    yield "mean shape", ValueError, "mean has shape", lambda: (x(), x(), stat(5), stat(), {})
    yield "rstd dtype", TypeError, "rstd has dtype", lambda: (x(), x(), stat(), stat(dtype=torch.float16), {})
    yield "unknown kernel", ValueError, "kernel must be", lambda: (x(), x(), stat(), stat(), {"kernel": "x"})
    yield "num_partials 0", ValueError, "num_partials", lambda: (x(), x(), stat(), stat(), {"num_partials": 0})


@pytest.mark.parametrize("case, error, message, make_args", [pytest.param(*c, id=c[0]) for c in bad_backward_inputs()])
def test_backward_rejects_bad_input_before_launch(case, error, message, make_args):
    dy, x, mean, rstd, kwargs = make_args()
    with pytest.raises(error, match=message):
        lnb.layer_norm_backward(dy, x, mean, rstd, **kwargs)


def test_functional_checks_normalized_shape():
    x = torch.ones(2, 3, 4, device=DEVICE)
    with pytest.raises(ValueError, match="normalized_shape"):
        ln.layer_norm(x, (3,))
    with pytest.raises(ValueError, match="weight has shape"):
        ln.layer_norm(x, (3, 4), torch.ones(12, device=DEVICE))


def test_public_layer_norm_names_the_device_it_runs_on():
    """The public entry checks the device itself: a meta tensor (is_cuda and is_cpu both false) used
    to pass its cheap check and fail inside torch's storage code ('Cannot copy out of meta tensor')."""
    with pytest.raises(ValueError, match="kernels run on"):
        ln.layer_norm(torch.ones(4, 8, device="meta"), (8,))


@pytest.mark.parametrize("which", ["weight", "bias"])
def test_public_layer_norm_names_the_device_of_a_parameter(which):
    """A parameter on another device (meta: neither CUDA nor CPU) is refused before any launch, with
    the device the kernels run on, whatever device x is on (get_device() is -1 for both CPU and meta)."""
    x, ok = torch.ones(4, 8, device=DEVICE), torch.ones(8, device=DEVICE)
    params = {"weight": ok, "bias": ok, which: torch.ones(8, device="meta")}
    with pytest.raises(ValueError, match="kernels run on|device"):
        ln.layer_norm(x, (8,), params["weight"], params["bias"])
