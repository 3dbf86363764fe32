"""week4_triton_dl.rope: rotary embedding against float64 torch, both layouts, offsets, gradients."""
import itertools
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
# What the default run keeps (the rest is marked slow; `pytest --slow` runs it all). On a GPU each
# dtype x head dim is its own compiled kernel, and the real sizes cost their float64 references:
# the default run takes fp32 on the small shapes in one layout with an offset and in the other
# without one, fp16 and bf16 on two of them (D = 2, the ragged D = 10), each real size once, one
# layout of the compile test and of the gradient matrices, the non-dense views (fused qkv,
# transposed, strided out) and opcheck in fp32; slow adds the products and fp64's opcheck.
SLOW = pytest.mark.slow
LARGE_DEFAULTS = {((2, 257, 8, 128), torch.float16, "bshd", 3), ((1, 33, 40, 96), torch.bfloat16, "bhsd", 0)}


def forward_default(dtype, shape, layout, offset):
    if shape[1] > 32:  # the real sizes
        return (shape, dtype, layout, offset) in LARGE_DEFAULTS
    if (layout, offset) == ("bhsd", 3):  # 16-bit: D = 2 and the ragged D = 10 (real head dims: the sizes above)
        return dtype == torch.float32 or shape in ((1, 1, 1, 2), (2, 5, 3, 10))
    return (layout, offset) == ("bshd", 0) and dtype == torch.float32


def cases(keep, dtypes, *axes):
    """dtype params x `axes` (lists of (value, id)) as pytest params, ids joined as stacked parametrize
    joins them; the cases `keep(dtype, *values)` rejects are marked slow."""
    params = []
    for d, *combo in itertools.product(dtypes, *axes):
        values = [d.values[0], *(value for value, _ in combo)]
        params.append(pytest.param(*values, id="-".join([d.id, *(i for _, i in combo)]),
                                   marks=[*d.marks, *([] if keep(*values) else [SLOW])]))
    return params


def make(shape, layout, dtype):
    B, S, H, D = shape
    dims = (B, H, S, D) if layout == "bhsd" else (B, S, H, D)
    return random_tensor(dims, dtype, DEVICE, scale=2.0)


def tables(positions, D):
    return rp.rope_tables(positions, D, device=DEVICE)


def reference(x, cos, sin, offset=0, layout="bhsd"):
    """The rotate-half formulas in float64 (same fp32 tables), rounded once to x's dtype."""
    return rp.rope_reference(x.double(), cos, sin, offset, layout).to(x.dtype)


@pytest.mark.parametrize("dtype, shape, layout, offset", cases(
    forward_default, MATRIX_DTYPES, [(s, str(s)) for s in SHAPES], [(lay, lay) for lay in LAYOUTS],
    [(0, "0"), (3, "3")]))
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
    assert yv.is_contiguous(), "the result is a new tensor, contiguous in the logical layout"
    assert y.is_contiguous()
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
@pytest.mark.parametrize("dtype, layout", cases(
    lambda dtype, layout: layout == "bhsd" or dtype == torch.float32, DTYPES, [(lay, lay) for lay in LAYOUTS]))
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


def test_gradcheck_registered_ops_float64():
    # The ops' autograd formulas: what a compiled graph differentiates (tiny: 2 x 8 launches each).
    q = make((1, 2, 1, 4), "bshd", torch.float64).requires_grad_(True)
    k = make((1, 2, 1, 4), "bshd", torch.float64).requires_grad_(True)
    cos, sin = tables(3, 4)
    assert torch.autograd.gradcheck(lambda q, k: rp.rope_qk_op(q, k, cos, sin, 1, "bshd"), (q, k))
    assert torch.autograd.gradcheck(lambda k: rp.rope_op(k, cos, sin, 1, "bshd"), (k,))


def test_gradient_of_any_layout_reaches_the_kernel():
    # y.sum() sends back a stride-0 gradient; a transposed view sends a strided one.
    x = make((2, 4, 3, 8), "bshd", torch.float32).transpose(1, 2).requires_grad_(True)
    cos, sin = tables(4, 8)
    rp.rope(x, cos, sin).sum().backward()
    xr = x.detach().double().requires_grad_(True)
    rp.rope_reference(xr, cos, sin).sum().backward()
    assert_close(x.grad, xr.grad.float())


# ------------------------------------------------------------------- strided and non-dense inputs
def qkv_views_of(qkv, B, S, Hq, Hkv, D):
    """q and k as a model's qkv projection leaves them, layout bshd: strided, non-dense views.

    Hq == Hkv: `qkv.view(B, S, 3, H, D)`, q = [:, :, 0], k = [:, :, 1]; else (grouped-query
    attention) the column ranges [0, Hq D) and [Hq D, (Hq + Hkv) D) of one projection."""
    if Hq == Hkv:
        heads = qkv.view(B, S, 3, Hq, D)
        return heads[:, :, 0], heads[:, :, 1]
    return qkv[..., :Hq * D].view(B, S, Hq, D), qkv[..., Hq * D:(Hq + Hkv) * D].view(B, S, Hkv, D)


def qkv_views(B, S, Hq, Hkv, D, dtype, *, requires_grad=False):
    """(qkv, q, k): a fresh (B, S, (Hq + 2 Hkv) D) projection output and its q, k views."""
    qkv = random_tensor((B, S, (Hq + 2 * Hkv) * D), dtype, DEVICE, scale=2.0).requires_grad_(requires_grad)
    return (qkv, *qkv_views_of(qkv, B, S, Hq, Hkv, D))


@pytest.mark.parametrize("dtype, heads", cases(
    lambda dtype, heads: dtype == torch.float32, DTYPES, [((3, 3), "mha"), ((4, 2), "gqa")]))
def test_views_of_a_fused_qkv_buffer_forward_and_backward(dtype, heads):
    B, S, D, offset = 2, 5, 12, 3
    qkv, q, k = qkv_views(B, S, *heads, D, dtype, requires_grad=True)
    assert not q.is_contiguous() and not k.is_contiguous()
    cos, sin = tables(S + offset, D)
    yq, yk = rp.apply_rope(q, k, cos, sin, offset, "bshd")
    assert yq.is_contiguous() and yk.is_contiguous(), "results are dense in the logical layout (bshd)"
    assert_close(yq, reference(q.detach(), cos, sin, offset, "bshd"), name="q")
    assert_close(yk, reference(k.detach(), cos, sin, offset, "bshd"), name="k")
    dq, dk = random_tensor(yq.shape, dtype, DEVICE), random_tensor(yk.shape, dtype, DEVICE)
    torch.autograd.backward((yq, yk), (dq, dk))
    ref = qkv.detach().double().requires_grad_(True)
    rq, rk = qkv_views_of(ref, B, S, *heads, D)
    torch.autograd.backward((rp.rope_reference(rq, cos, sin, offset, "bshd"),
                             rp.rope_reference(rk, cos, sin, offset, "bshd")), (dq.double(), dk.double()))
    assert_close(qkv.grad, ref.grad.to(dtype), name="dqkv")


@pytest.mark.parametrize("dtype", cases(lambda dtype: dtype == torch.float32, DTYPES))
def test_transposed_views_forward_and_backward(dtype):
    # bhsd views of bshd memory (what `.transpose(1, 2)` of a projection gives), rotated as bhsd.
    B, S, Hq, Hkv, D = 2, 6, 3, 1, 8
    qm = random_tensor((B, S, Hq, D), dtype, DEVICE, scale=2.0).requires_grad_(True)
    km = random_tensor((B, S, Hkv, D), dtype, DEVICE, scale=2.0).requires_grad_(True)
    q, k = qm.transpose(1, 2), km.transpose(1, 2)
    cos, sin = tables(S, D)
    yq, yk = rp.apply_rope(q, k, cos, sin, 0, "bhsd")
    assert yq.is_contiguous() and yk.is_contiguous()
    assert_close(yq, reference(q.detach(), cos, sin), name="q")
    assert_close(yk, reference(k.detach(), cos, sin), name="k")
    # Gradients of another layout again: transposed views of bshd memory.
    dq = random_tensor((B, S, Hq, D), dtype, DEVICE).transpose(1, 2)
    dk = random_tensor((B, S, Hkv, D), dtype, DEVICE).transpose(1, 2)
    torch.autograd.backward((yq, yk), (dq, dk))
    rq, rk = (t.detach().double().requires_grad_(True) for t in (q, k))
    torch.autograd.backward((rp.rope_reference(rq, cos, sin), rp.rope_reference(rk, cos, sin)),
                            (dq.double(), dk.double()))
    assert_close(qm.grad, rq.grad.transpose(1, 2).to(dtype), name="dq")
    assert_close(km.grad, rk.grad.transpose(1, 2).to(dtype), name="dk")


def test_gradients_with_a_strided_last_dimension_are_copied_once():
    # A gradient whose head dimension is strided (here: a transposed square) cannot be read by the
    # kernel in place: the backward copies it (the one copy it ever makes), then rotates.
    q = make((1, 3, 2, 4), "bhsd", torch.float32).requires_grad_(True)
    k = make((1, 3, 2, 4), "bhsd", torch.float32).requires_grad_(True)
    cos, sin = tables(3, 4)
    yq, yk = rp.apply_rope(q, k, cos, sin)
    dq = random_tensor((1, 2, 4, 3), torch.float32, DEVICE).transpose(-1, -2)  # last stride 3
    dk = random_tensor((1, 2, 4, 3), torch.float32, DEVICE).transpose(-1, -2)
    assert dq.stride(-1) != 1
    gq, gk = torch.autograd.grad((yq, yk), (q, k), (dq, dk))
    rq = q.detach().double().requires_grad_(True)
    rk = k.detach().double().requires_grad_(True)
    want = torch.autograd.grad((rp.rope_reference(rq, cos, sin), rp.rope_reference(rk, cos, sin)),
                               (rq, rk), (dq.double(), dk.double()))
    assert_close(gq, want[0].float(), name="dq")
    assert_close(gk, want[1].float(), name="dk")
    # y.sum(): stride-0 gradients of ones, through the one-launch path.
    q.grad = k.grad = None
    yq, yk = rp.apply_rope(q, k, cos, sin)
    (yq.sum() + yk.sum()).backward()
    rq.grad = rk.grad = None
    (rp.rope_reference(rq, cos, sin).sum() + rp.rope_reference(rk, cos, sin).sum()).backward()
    assert_close(q.grad, rq.grad.float(), name="dq from sum()")
    assert_close(k.grad, rk.grad.float(), name="dk from sum()")


@pytest.mark.parametrize("dtype", cases(lambda dtype: dtype == torch.float32, DTYPES))
def test_out_of_another_layout(dtype):
    # out with the other memory order (a transposed view), and out as a strided slice of a cache.
    B, S, H, D = 2, 5, 3, 8
    x = make((B, S, H, D), "bhsd", dtype)
    cos, sin = tables(S, D)
    want = reference(x, cos, sin)
    out = poisoned((B, S, H, D), dtype, DEVICE).transpose(1, 2)
    assert rp.rope_forward(x, cos, sin, 0, "bhsd", out=out) is out
    assert_close(out, want)
    cache = poisoned((B, H, S + 4, D), dtype, DEVICE)
    rp.rope_forward(x, cos, sin, 0, "bhsd", out=cache[:, :, 2:2 + S])
    assert_close(cache[:, :, 2:2 + S], want)


def test_gradcheck_through_qkv_views_float64():
    B, S, H, D = 1, 2, 2, 2
    cos, sin = tables(S + 1, D)
    qkv = random_tensor((B, S, 3 * H * D), torch.float64, DEVICE).requires_grad_(True)
    f = lambda t: rp.apply_rope(*qkv_views_of(t, B, S, H, H, D), cos, sin, 1, "bshd")  # noqa: E731
    assert torch.autograd.gradcheck(f, (qkv,))


def test_q_and_k_that_cannot_share_a_launch_take_two():
    # Different dtypes (or lengths, batches, head dims): apply_rope rotates them one at a time.
    q = make((1, 4, 2, 8), "bhsd", torch.float32)
    k = make((1, 4, 1, 8), "bhsd", torch.float64)
    cos, sin = tables(4, 8)
    yq, yk = rp.apply_rope(q, k, cos, sin)
    assert yq.dtype == torch.float32 and yk.dtype == torch.float64
    assert_close(yq, reference(q, cos, sin), name="q")
    assert_close(yk, reference(k, cos, sin), name="k")


# ------------------------------------------------------------------ as a PyTorch op in a model
@pytest.mark.parametrize("dtype, layout", [pytest.param(torch.float32, "bshd", id="float32-bshd"),
                                           pytest.param(torch.float64, "bhsd", id="float64-bhsd", marks=SLOW)])
def test_registered_ops_pass_opcheck(dtype, layout):
    # Schema, fake (meta) functions, autograd registration and AOT dispatch, as torch checks them.
    cos, sin = tables(4, 8)
    q = make((1, 2, 3, 8), layout, dtype).requires_grad_(True)
    k = make((1, 2, 1, 8), layout, dtype).requires_grad_(True)
    rp.rope_qk_op(q.detach(), k.detach(), cos, sin, 1, layout)  # a plain call first: errors as themselves
    torch.library.opcheck(rp.rope_qk_op, (q, k, cos, sin, 1, layout))
    torch.library.opcheck(rp.rope_op, (q, cos, sin, 2, layout))
    dq, dk = random_tensor(q.shape, dtype, DEVICE), random_tensor(k.shape, dtype, DEVICE)
    torch.library.opcheck(rp.rope_qk_backward_op, (dq, dk, cos, sin, 1, layout))
    torch.library.opcheck(rp.rope_backward_op, (dq, cos, sin, 1, layout))


def test_registered_ops_pass_opcheck_on_views():
    # Non-dense views of a fused projection (both layouts), and stride-0 gradients.
    cos, sin = tables(4, 8)
    for layout in LAYOUTS:
        qkv, q, k = qkv_views(1, 2, 2, 2, 8, torch.float32, requires_grad=True)
        if layout == "bhsd":
            q, k = q.transpose(1, 2), k.transpose(1, 2)
        torch.library.opcheck(rp.rope_qk_op, (q, k, cos, sin, 0, layout))
    ones = torch.ones((), device=DEVICE).expand(q.shape)
    torch.library.opcheck(rp.rope_qk_backward_op, (ones, ones, cos, sin, 0, "bhsd"))


def test_eager_paths_and_the_registered_ops_agree():
    q, k = make((2, 5, 3, 8), "bhsd", torch.float32), make((2, 5, 1, 8), "bhsd", torch.float32)
    cos, sin = tables(7, 8)
    with torch.no_grad():
        plain = rp.apply_rope(q, k, cos, sin, 2)  # no autograd: the hot path alone
    ql, kl = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    tracked = rp.apply_rope(ql, kl, cos, sin, 2)  # RoPEQKFunction
    op = rp.rope_qk_op(q, k, cos, sin, 2, "bhsd")  # what torch.compile records
    for a, b, c in zip(plain, tracked, op):
        assert torch.equal(a, b.detach()) and torch.equal(a, c)
    assert torch.equal(rp.rope(q, cos, sin, 2), plain[0]) and torch.equal(rp.rope_op(q, cos, sin, 2, "bhsd"), plain[0])
    assert_close(plain[0], reference(q, cos, sin, 2), name="q")
    # The two backward paths (the Function's, the op's autograd formula) give the same gradients.
    dq, dk = random_tensor(q.shape, torch.float32, DEVICE), random_tensor(k.shape, torch.float32, DEVICE)
    by_function = torch.autograd.grad(tracked, (ql, kl), (dq, dk))
    qo, ko = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    by_op = torch.autograd.grad(rp.rope_qk_op(qo, ko, cos, sin, 2, "bhsd"), (qo, ko), (dq, dk))
    assert all(torch.equal(a, b) for a, b in zip(by_function, by_op))


H, D = 2, 8


def reference_pair(q, k, cos, sin, offset, layout):
    return rp.rope_reference(q, cos, sin, offset, layout), rp.rope_reference(k, cos, sin, offset, layout)


def attention_prologue(rotate, layout):
    """A model's attention up to the scores: qkv projection, split into heads, RoPE, q k^T."""
    def f(x, w, cos, sin):
        B, S, _ = x.shape
        heads = (x @ w).view(B, S, 3, H, D)
        q, k = heads[:, :, 0], heads[:, :, 1]  # non-dense (B, S, H, D) views
        if layout == "bhsd":
            q, k = q.transpose(1, 2), k.transpose(1, 2)
        q, k = rotate(q, k, cos, sin, 0, layout)
        if layout == "bshd":
            q, k = q.transpose(1, 2), k.transpose(1, 2)
        return (q @ k.transpose(-1, -2)).sin() * 0.5
    return f


@pytest.mark.parametrize("layout", ["bhsd", pytest.param("bshd", marks=SLOW)])
def test_compiles_with_no_graph_break(layout):
    # fullgraph=True raises on any graph break; on the GPU Inductor compiles the torch ops around
    # the registered op, in simulation aot_eager traces the same graphs (fake tensors, autograd).
    torch._dynamo.reset()
    ours = attention_prologue(rp.apply_rope, layout)
    x = random_tensor((2, 5, 16), torch.float32, DEVICE)
    w = random_tensor((16, 3 * H * D), torch.float32, DEVICE, scale=0.25)
    cos, sin = tables(5, D)
    eager_leaves = [t.clone().requires_grad_(True) for t in (x, w)]
    y_eager = ours(*eager_leaves, cos, sin)
    dy = random_tensor(y_eager.shape, torch.float32, DEVICE)
    eager_grads = torch.autograd.grad(y_eager, eager_leaves, dy)
    compiled = torch.compile(ours, fullgraph=True, backend=runtime.pick(gpu="inductor", sim="aot_eager"))
    leaves = [t.clone().requires_grad_(True) for t in (x, w)]
    y = compiled(*leaves, cos, sin)
    grads = torch.autograd.grad(y, leaves, dy)
    # The same kernels: only the torch ops around them may round differently once fused.
    assert_close(y, y_eager, rtol=1e-5, atol=1e-5)
    for name, got, want in zip(("dx", "dw"), grads, eager_grads):
        assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()), name=name)
    # ... and both match the rotate-half formula in float64.
    ref_leaves = [t.double().requires_grad_(True) for t in (x, w)]
    y_ref = attention_prologue(reference_pair, layout)(*ref_leaves, cos, sin)
    # fp32 matmuls around the op: a few ulps of their sums, not of each element.
    assert_close(y, y_ref.float(), rtol=1e-5, atol=1e-5, name="y vs float64")
    for name, got, want in zip(("dx", "dw"), grads, torch.autograd.grad(y_ref, ref_leaves, dy.double())):
        assert_close(got, want.float(), rtol=1e-5, atol=1e-5 * float(want.abs().max()), name=f"{name} vs float64")


def test_compiled_graph_holds_the_op_not_its_kernels():
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    f = torch.compile(attention_prologue(rp.apply_rope, "bshd"), backend=backend, fullgraph=True)
    x = random_tensor((1, 4, 16), torch.float32, DEVICE)
    w = random_tensor((16, 3 * H * D), torch.float32, DEVICE)
    cos, sin = tables(4, D)
    f(x, w, cos, sin)
    assert len(graphs) == 1
    targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert sum("rope_qk" in t and rp.NAMESPACE in t for t in targets) == 1, targets


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
