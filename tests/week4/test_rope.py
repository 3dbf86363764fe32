"""week4_triton_dl.rope: rotary embedding against float64 torch, both layouts, offsets, gradients."""
import math

import pytest
import torch

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor, with_specials

rp = runtime.lesson("week4_triton_dl.rope")
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16, torch.float64])
# The big shape matrices leave fp64 out: on a GPU every dtype is another set of compiles, and
# fp64 is there for gradcheck, which has its own tests (and a small fp64 matrix below).
MATRIX_DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16])
# (B, S, H, D): one of everything, primes, D/2 not a power of two, D = 2; a real size on the GPU.
SHAPES = [(1, 1, 1, 2), (2, 5, 3, 10), (1, 7, 4, 64), (3, 2, 1, 6)] + runtime.pick(
    gpu=[(2, 257, 8, 128), (1, 33, 40, 96)], sim=[])
LAYOUTS = ["bhsd", "bshd"]


def make(shape, layout, dtype):
    B, S, H, D = shape
    dims = (B, H, S, D) if layout == "bhsd" else (B, S, H, D)
    return random_tensor(dims, dtype, DEVICE, scale=2.0)


def tables(positions, D):
    return rp.rope_tables(positions, D, device=DEVICE)


def reference(x, cos, sin, offset=0, layout="bhsd"):
    """The rotate-half formulas in float64 (same fp32 tables), rounded once to x's dtype."""
    return rp.rope_reference(x.double(), cos, sin, offset, layout).to(x.dtype)


@pytest.mark.parametrize("offset", [0, 3])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", MATRIX_DTYPES)
def test_forward_matches_float64(dtype, shape, layout, offset):
    x = make(shape, layout, dtype)
    cos, sin = tables(shape[1] + offset + 2, shape[3])
    out = poisoned(x.shape, dtype, DEVICE)
    assert rp.rope_forward(x, cos, sin, offset, layout, out=out) is out
    assert_close(out, reference(x, cos, sin, offset, layout))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_matches_complex_rotation(layout):
    # An independent statement of RoPE: pair i as the complex number x[i] + j x[i + D/2],
    # multiplied by exp(j m theta_i), theta_i = 10000^(-2i/D), angles in float64 from scratch.
    B, S, H, D = 2, 9, 3, 16
    x = make((B, S, H, D), layout, torch.float32)
    cos, sin = tables(S, D)
    got = rp.rope_forward(x, cos, sin, 0, layout)
    theta = 10000.0 ** (-torch.arange(D // 2, dtype=torch.float64, device=DEVICE) * 2 / D)
    angle = torch.arange(S, dtype=torch.float64, device=DEVICE)[:, None] * theta
    rot = torch.polar(torch.ones_like(angle), angle)[None, None] if layout == "bhsd" else \
        torch.polar(torch.ones_like(angle), angle)[None, :, None]
    z = torch.complex(x[..., :D // 2].double(), x[..., D // 2:].double()) * rot
    want = torch.cat([z.real, z.imag], dim=-1).float()
    assert_close(got, want)  # the fp32 tables differ from exact by ~6e-8 relative: far below tolerance


def test_scores_depend_on_relative_position_only():
    # <R(m) q, R(n) k> = <q, R(n - m) k>: shifting both positions by 7 leaves the score alone.
    D = 32
    q, k = make((1, 1, 4, D), "bhsd", torch.float64), make((1, 1, 4, D), "bhsd", torch.float64)
    cos, sin = tables(64, D)
    score = lambda m, n: (rp.rope_forward(q, cos, sin, m) * rp.rope_forward(k, cos, sin, n)).sum(-1)  # noqa: E731
    for m, n in ((0, 5), (3, 3), (20, 11)):
        # fp32 tables: each rotation is orthogonal to ~1e-7, so scores agree to ~1e-6 of |q||k|.
        assert_close(score(m, n), score(m + 7, n + 7), rtol=0, atol=1e-5 * float(q.norm() * k.norm()))


def test_inverse_undoes_forward():
    x = make((2, 5, 3, 12), "bshd", torch.float64)
    cos, sin = tables(5, 12)
    back = rp.rope_forward(rp.rope_forward(x, cos, sin, 0, "bshd"), cos, sin, 0, "bshd", inverse=True)
    # R(-t) R(t) = (cos^2 + sin^2) I, and the fp32 tables make cos^2 + sin^2 = 1 only to ~2^-23.
    assert_close(back, x, rtol=1e-6, atol=1e-6)


def test_layouts_and_views_agree():
    B, S, H, D = 2, 6, 3, 8
    x = make((B, S, H, D), "bshd", torch.float32)
    cos, sin = tables(S, D)
    y = rp.rope_forward(x, cos, sin, 0, "bshd")
    view = x.transpose(1, 2)  # (B, H, S, D) view of bshd memory: not contiguous, no copy needed
    yv = rp.rope_forward(view, cos, sin, 0, "bhsd")
    assert yv.stride() == view.stride(), "the output keeps the input's memory layout"
    assert torch.equal(yv, y.transpose(1, 2))
    assert torch.equal(rp.rope_forward(x.transpose(1, 2).contiguous(), cos, sin), y.transpose(1, 2))


def test_position_offset_is_a_slice_of_the_positions():
    # KV-cache decoding: tokens 5.. rotated with offset 5 equal the same tokens in a full pass.
    x = make((1, 9, 2, 16), "bhsd", torch.float32)
    cos, sin = tables(9, 16)
    full = rp.rope_forward(x, cos, sin)
    assert torch.equal(rp.rope_forward(x[:, :, 5:].contiguous(), cos, sin, 5), full[:, :, 5:])
    assert torch.equal(rp.rope_forward(x[:, :, 8:].contiguous(), cos, sin, 8), full[:, :, 8:])  # one token


def test_tables_are_fp32_half_width_from_fp64_angles():
    cos, sin = rp.rope_tables(100_000, 128)
    assert cos.dtype == torch.float32 and cos.shape == (100_000, 64) and sin.shape == cos.shape
    angle = torch.tensor(99_999.0, dtype=torch.float64) * 10000.0 ** (-2.0 / 128)
    # In fp32 this angle (~8.6e4 rad) would carry an error of ~0.004 rad; here it is exact to fp32 rounding.
    assert abs(float(cos[99_999, 1]) - math.cos(float(angle))) < 1e-7
    assert abs(float(sin[99_999, 1]) - math.sin(float(angle))) < 1e-7


# ------------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_matches_float64(dtype, layout):
    shape, offset = (2, 5, 3, 10), 2
    q, k = make(shape, layout, dtype), make((2, 5, 1, 10), layout, dtype)  # grouped-query: 1 k head
    cos, sin = tables(8, 10)
    ql, kl = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    qr, kr = q.double().requires_grad_(True), k.double().requires_grad_(True)
    dq, dk = random_tensor(q.shape, dtype, DEVICE), random_tensor(k.shape, dtype, DEVICE)
    yq, yk = rp.apply_rope(ql, kl, cos, sin, offset, layout)
    torch.autograd.backward((yq, yk), (dq, dk))
    torch.autograd.backward((rp.rope_reference(qr, cos, sin, offset, layout),
                             rp.rope_reference(kr, cos, sin, offset, layout)), (dq.double(), dk.double()))
    assert_close(ql.grad, qr.grad.to(dtype), name="dq")
    assert_close(kl.grad, kr.grad.to(dtype), name="dk")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gradcheck_float64(layout):
    # Small: gradcheck runs the kernels twice per input element (2 x 24 launches here).
    q = make((1, 2, 2, 4), layout, torch.float64).requires_grad_(True)
    k = make((1, 2, 1, 4), layout, torch.float64).requires_grad_(True)
    cos, sin = tables(5, 4)
    assert torch.autograd.gradcheck(lambda q, k: rp.apply_rope(q, k, cos, sin, 2, layout), (q, k))


def test_gradient_of_any_layout_reaches_the_kernel():
    # y.sum() sends back a stride-0 gradient; a transposed view sends a strided one.
    x = make((2, 4, 3, 8), "bshd", torch.float32).transpose(1, 2).requires_grad_(True)
    cos, sin = tables(4, 8)
    rp.rope(x, cos, sin).sum().backward()
    xr = x.detach().double().requires_grad_(True)
    rp.rope_reference(xr, cos, sin).sum().backward()
    assert_close(x.grad, xr.grad.float())


# ------------------------------------------------------------------------------ special values
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf * 0, in NumPy
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf_like_torch(dtype):
    x = with_specials(make((2, 4, 3, 8), "bhsd", dtype))
    cos, sin = tables(4, 8)
    # Position 0 has sin = 0: inf * 0 = NaN, as the reference gives; elsewhere NaN/inf spread
    # to both elements of their pair, and max-finite values may overflow to inf.
    assert_close(rp.rope_forward(x, cos, sin), reference(x, cos, sin))


def test_empty_inputs():
    cos, sin = tables(4, 8)
    for shape in ((0, 3, 4, 8), (2, 0, 4, 8), (2, 3, 0, 8)):
        x = torch.empty(shape, device=DEVICE)
        assert rp.rope_forward(x, cos, sin).shape == shape


# ----------------------------------------------------------------------------------- bad inputs
def bad_inputs():
    ok = lambda *s, dtype=torch.float32: torch.ones(*(s or (1, 2, 4, 8)), device=DEVICE, dtype=dtype)  # noqa: E731
    tab = lambda rows=4, half=4, dtype=torch.float32: torch.ones(rows, half, device=DEVICE, dtype=dtype)  # noqa: E731
    yield "not a tensor", TypeError, "must be a torch.Tensor", lambda: ([1.0], tab(), tab(), {})
    yield "integer dtype", TypeError, "expected one of", lambda: (ok().int(), tab(), tab(), {})
    yield "3-D", ValueError, "4 dimension", lambda: (ok(2, 4, 8), tab(), tab(), {})
    yield "odd head dim", ValueError, "must be even", lambda: (ok(1, 2, 4, 7), tab(half=3), tab(half=3), {})
    yield "head dim strided", ValueError, "must be contiguous", lambda: (ok(1, 2, 4, 16)[..., ::2], tab(), tab(), {})
    yield "wrong device", ValueError, "kernels run on", lambda: (
        torch.ones(1, 2, 4, 8, device="meta"), tab(), tab(), {})
    yield "fp64 table", TypeError, "cos has dtype", lambda: (ok(), tab(dtype=torch.float64), tab(), {})
    yield "table width", ValueError, "cos has shape", lambda: (ok(), tab(half=8), tab(half=8), {})
    yield "tables differ", ValueError, "same shape", lambda: (ok(), tab(), tab(rows=5), {})
    yield "too few positions", ValueError, "need tables", lambda: (ok(), tab(), tab(), {"position_offset": 1})
    yield "negative offset", ValueError, "position_offset", lambda: (ok(), tab(), tab(), {"position_offset": -1})
    yield "unknown layout", ValueError, "layout", lambda: (ok(), tab(), tab(), {"layout": "sbhd"})
    yield "out dtype", TypeError, "out has dtype", lambda: (ok(), tab(), tab(), {"out": ok().half()})


@pytest.mark.parametrize("case, error, message, make_args", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make_args):
    x, cos, sin, kwargs = make_args()
    with pytest.raises(error, match=message):
        rp.rope_forward(x, cos, sin, **kwargs)


def test_tables_reject_odd_head_dim():
    with pytest.raises(ValueError, match="head_dim"):
        rp.rope_tables(8, 7)
