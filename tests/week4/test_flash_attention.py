"""week4_triton_dl.attention.flash: the fused forward, and the op (forward + backward) against float64 torch.

Outputs, log-sum-exp and gradients are compared with `attention_reference` (softmax(QK^T scale
+ mask) V in float64, and float64 autograd of it) within the element-wise bounds of the error
model in `attention_error_bounds` (its docstring states it: fp32 scores, P rounded to the input
dtype for P @ V and dS for dQ/dK, final rounding). gradcheck runs on the float64 kernels. The
backward's launcher alone (strategies, block shapes, bad outputs): test_flash_attention_backward.py;
the forward-only rung: test_flash_attention_forward.py.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor
from course.gpu import triton
from tests.week4.attention_helpers import assert_within, attention_op, qkv
# The backward and the launch plans that fa calls (the solutions', under --impl=exercises too: the
# backward's own exercise is checked by test_flash_attention_backward.py).
from week4_triton_dl.attention import backward as fab
from week4_triton_dl.attention import op as op_module
from week4_triton_dl.attention import plans as plans

blocked = runtime.lesson("week4_triton_dl.attention.flash")  # the flash_blocked rung: your kernel with --impl=exercises
fa = attention_op()  # the op a model calls, over that rung
an = runtime.lesson("week4_triton_dl.attention.naive")
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16])
# (Sq, Sk), none a multiple of the simulator's 16/32 blocks except 64: one token, primes, more
# queries than keys and fewer (top-left causal), an exact multiple; long ones on the GPU only
# (there the autotuned kernels with 64/128 blocks run: 1000 and 4097 leave ragged last blocks).
# On the GPU, lengths up to 512 run one small config (no autotuning, see SHORT_SEQUENCE);
# the long ones, which go through the autotuner, are in test_long_sequences_autotuned.
FWD_SHAPES = [(1, 1), (37, 37), (20, 45), (50, 19), (64, 64)] + runtime.pick(gpu=[(300, 300), (129, 500)], sim=[])
BWD_SHAPES = [(37, 37), (20, 45), (50, 19)] + runtime.pick(gpu=[(300, 300), (500, 129)], sim=[])
# D = 128 costs no more than 64 in the interpreter per block, but the matrix of cases is long:
# in simulation it runs on the two ragged shapes, on the GPU on all of them.
WIDE_SHAPES = runtime.pick(gpu=FWD_SHAPES, sim=[(37, 37), (50, 19)])
# What the default run keeps (the rest of each sweep is marked slow; `pytest --slow` runs it all).
# On a GPU each (dtype, causal, key padding, head dim) is its own set of compiled kernels, and so is
# each class of the integer arguments (1, a multiple of 16, neither: n_heads, lengths, strides), so
# the tests share shapes: two heads (HEADS) and ragged lengths wherever they can. The default run
# takes each dtype with one mask and head dim (fp32 full at D = 16, where fp32's true-fp32 products
# are cheapest to compile and the other fp32 tests live; fp16 and bf16 causal at D = 64) over every
# ragged length, forward and backward; D = 128 once (fp16, causal, the forward; its backward
# kernels are slow); the block-multiple length once (fp16, causal; one token is
# test_batch_one_single_token_and_empty's); single cases of the block-shape, strategy, float64,
# gradcheck, opcheck and compile matrices, each on the kernels of another test where one fits: the
# strided and hot-path tests run the sweep's fp16 / bf16 kernels, opcheck, the backward file's
# strategy test's forward and the padding tests the key-padding test's fp32 ones, the float64 forward the
# gradcheck's. Slow adds the dtype x mask x head dim x length product and the other cases of
# those matrices.
SLOW = pytest.mark.slow
MASKS = ((False, "full"), (True, "causal"))
DEFAULT_MASKS = {torch.float32: False, torch.float16: True, torch.bfloat16: True}
DEFAULT_HEAD_DIMS = {torch.float32: 16, torch.float16: 64, torch.bfloat16: 64}
# Every test that means to share the sweep's kernels uses this many heads: on a GPU two (n_heads
# neither 1 nor a multiple of 16, as in the tests that need several heads); in simulation nothing
# is compiled, so one (half the interpreted work).
HEADS = runtime.pick(gpu=2, sim=1)


def case(*values, id, keep, marks=()):
    """One case of a sweep: marked slow unless the default run keeps it."""
    return pytest.param(*values, id=id, marks=[*marks, *([] if keep else [SLOW])])


def default_mask(dtype, causal):
    return DEFAULT_MASKS[dtype] == causal


def forward_cases():
    for p in DTYPES:
        dtype = p.values[0]
        for causal, mask in MASKS:
            for head_dim, shapes in ((16, FWD_SHAPES), (64, FWD_SHAPES), (128, WIDE_SHAPES)):
                for seq_q, seq_k in shapes:
                    edge = (seq_q, seq_k) in ((1, 1), (64, 64))  # each its own specialization
                    if head_dim == 128:
                        keep = dtype == torch.float16 and causal and (seq_q, seq_k) == (37, 37)
                    else:  # one token: test_batch_one_single_token_and_empty
                        keep = (default_mask(dtype, causal) and head_dim == DEFAULT_HEAD_DIMS[dtype]
                                and (not edge or dtype == torch.float16 and seq_q == 64))
                    yield case(dtype, causal, head_dim, seq_q, seq_k, id=f"{p.id}-{mask}-{head_dim}-{seq_q}-{seq_k}",
                               keep=keep, marks=p.marks)


def backward_cases():
    for p in DTYPES:
        dtype = p.values[0]
        for causal, mask in MASKS:
            for seq_q, seq_k in BWD_SHAPES:
                for head_dim in [16, 64] + runtime.pick(gpu=[128], sim=[]):
                    keep = default_mask(dtype, causal) and head_dim == DEFAULT_HEAD_DIMS[dtype]
                    yield case(dtype, causal, seq_q, seq_k, head_dim, id=f"{p.id}-{mask}-{seq_q}-{seq_k}-{head_dim}",
                               keep=keep, marks=p.marks)


def reference_grads(q, k, v, do, causal, sm_scale=None, key_lengths=None):
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = an.attention_reference(qd, kd, vd, causal, sm_scale, key_lengths=key_lengths)
    return torch.autograd.grad(out, (qd, kd, vd), do.double())


def check_grads(grads, q, k, v, do, causal, sm_scale=None, key_lengths=None):
    bounds = an.attention_error_bounds(q, k, v, do, causal, sm_scale, key_lengths=key_lengths)
    for name, got, want in zip(("dq", "dk", "dv"), grads, reference_grads(q, k, v, do, causal, sm_scale, key_lengths)):
        assert got.dtype == q.dtype and got.shape == want.shape
        assert_within(got, want, bounds[name], name)


# ------------------------------------------------------------------------------ forward
@pytest.mark.parametrize("dtype, causal, head_dim, seq_q, seq_k", list(forward_cases()))
def test_forward_and_lse_match_float64(dtype, causal, seq_q, seq_k, head_dim):
    q, k, v = qkv(1, HEADS, seq_q, seq_k, head_dim, dtype)
    out = poisoned(q.shape, dtype, DEVICE)
    got, lse = fa.flash_attention_forward(q, k, v, causal, out=out)
    assert got is out, "the launcher must write into the `out` it was given"
    want, want_lse = an.attention_reference(q, k, v, causal, return_lse=True)
    bounds = an.attention_error_bounds(q, k, v, None, causal)
    assert_within(got, want, bounds["out"], "out")
    assert_within(lse, want_lse, bounds["lse"], "lse")


@pytest.mark.parametrize("causal", [pytest.param(False, marks=SLOW), True], ids=["full", "causal"])
def test_float64_forward_and_explicit_scale(causal):
    # test_gradcheck_float64's shapes and key padding: on a GPU the one fp64 forward kernel of both.
    q, k, v = qkv(2, 1, 19, 23, 16, torch.float64)
    lengths = torch.tensor([23, 9], device=DEVICE)
    got, lse = fa.flash_attention_forward(q, k, v, causal, 0.37, key_lengths=lengths)
    want, want_lse = an.attention_reference(q, k, v, causal, 0.37, key_lengths=lengths, return_lse=True)
    bounds = an.attention_error_bounds(q, k, v, None, causal, 0.37, key_lengths=lengths)
    assert_within(got, want, bounds["out"], "out")
    assert_within(lse, want_lse, bounds["lse"], "lse")


def test_reference_is_torch_sdpa():
    # What the tests trust is F.scaled_dot_product_attention itself (top-left causal, scale=).
    q, k, v = qkv(2, 2, 9, 13, 16, torch.float64)
    for causal in (False, True):
        assert_close(an.attention_reference(q, k, v, causal, 0.3),
                     F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3))


@pytest.mark.parametrize("block_m, block_n", [pytest.param(16, 16, marks=SLOW), (16, 32),
                                              pytest.param(32, 16, marks=SLOW), (64, 16)])
@pytest.mark.parametrize("causal", [pytest.param(False, marks=SLOW), True], ids=["full", "causal"])
def test_forward_block_shapes(causal, block_m, block_n):
    # The causal split into unmasked and diagonal key blocks must hold whichever tile is larger.
    q, k, v = qkv(1, 2, 45, 38, 32, torch.float16)
    got, _ = fa.flash_attention_forward(q, k, v, causal, config={"BLOCK_M": block_m, "BLOCK_N": block_n})
    assert_within(got, an.attention_reference(q, k, v, causal),
                  an.attention_error_bounds(q, k, v, None, causal)["out"], "out")


# ------------------------------------------------------------------------------ backward
@pytest.mark.parametrize("dtype, causal, seq_q, seq_k, head_dim", list(backward_cases()))
def test_gradients_match_float64(dtype, causal, seq_q, seq_k, head_dim):
    q, k, v = qkv(1, HEADS, seq_q, seq_k, head_dim, dtype, requires_grad=True)
    out = fa.flash_attention(q, k, v, causal)
    do = random_tensor(out.shape, dtype, DEVICE)
    out.backward(do)
    check_grads((q.grad, k.grad, v.grad), q, k, v, do, causal)


@pytest.mark.parametrize("dtype, causal", [case(p.values[0], c, id=f"{p.id}-{m}", keep=False, marks=p.marks)
                                           for p in DTYPES for c, m in MASKS])
def test_gradients_head_dim_128(dtype, causal):
    # One shape at D = 128 in simulation (the parametrized test above adds it on the GPU).
    q, k, v = qkv(1, HEADS, 29, 35, 128, dtype, requires_grad=True)
    out = fa.flash_attention(q, k, v, causal)
    do = random_tensor(out.shape, dtype, DEVICE)
    check_grads(torch.autograd.grad(out, (q, k, v), do), q, k, v, do, causal)


@pytest.mark.parametrize("strategy, causal, padded", [
    pytest.param("split", False, False, marks=SLOW), ("split", True, True),
    pytest.param("atomic", True, False, marks=SLOW), pytest.param("atomic", False, True, marks=SLOW)])
def test_gradcheck_float64(strategy, causal, padded):
    # fast_mode checks v^T J u for random u, v against finite differences: the full Jacobian
    # would take ~1000 interpreted forward calls here.
    q, k, v = qkv(2, 1, 19, 23, 16, torch.float64, requires_grad=True)
    lengths = torch.tensor([23, 9], device=DEVICE) if padded else None
    assert torch.autograd.gradcheck(
        lambda q, k, v: fa.flash_attention(q, k, v, causal, key_lengths=lengths, strategy=strategy),
        (q, k, v), fast_mode=True)


# Long sequences go through the autotuner (every config of the (dtype, D, causal) key is compiled
# and timed once: ~20 compiles per case), so the GPU cases are a curated few, not a full grid.
LONG_CASES = [
    pytest.param(torch.bfloat16, 128, True, 4097, 4097, "split", id="bf16-d128-causal-4097"),
    pytest.param(torch.bfloat16, 128, False, 129, 2055, "atomic", id="bf16-d128-full-129x2055-atomic"),
    pytest.param(torch.bfloat16, 64, True, 1000, 1000, "split", id="bf16-d64-causal-1000"),
    pytest.param(torch.float16, 128, False, 1000, 1000, "split", id="fp16-d128-full-1000"),
    pytest.param(torch.float16, 64, True, 2055, 129, "split", id="fp16-d64-causal-2055x129"),
]


@pytest.mark.slow
@pytest.mark.gpu(reason="long sequences through the autotuner: the interpreter would take minutes per case")
@pytest.mark.parametrize("dtype, head_dim, causal, seq_q, seq_k, strategy", LONG_CASES)
def test_long_sequences_autotuned(dtype, head_dim, causal, seq_q, seq_k, strategy):
    q, k, v = qkv(2, 3, seq_q, seq_k, head_dim, dtype, requires_grad=True)
    out = fa.flash_attention(q, k, v, causal, strategy=strategy)
    do = random_tensor(out.shape, dtype, DEVICE)
    grads = torch.autograd.grad(out, (q, k, v), do)
    assert_within(out, an.attention_reference(q, k, v, causal),
                  an.attention_error_bounds(q, k, v, None, causal)["out"], "out")
    check_grads(grads, q, k, v, do, causal)


# ------------------------------------------------------------------------------ masks, specials
@pytest.mark.parametrize("causal", [pytest.param(False, marks=SLOW), True], ids=["full", "causal"])
def test_key_padding_and_fully_masked_rows_like_sdpa(causal):
    # key_lengths[0] = 0: every key of batch 0 is padding. torch's SDPA gives zeros there (not
    # NaN); so does the fused kernel (l = 0 -> out 0, lse -inf), with zero gradients. Two heads:
    # the kernels test_eager_paths_and_the_registered_op_agree runs too (fp32, D = 16, key lengths).
    B, H, S, D = 3, 2, 21, 16
    q, k, v = qkv(B, H, S, S, D, torch.float32, requires_grad=True)
    lengths = torch.tensor([0, 6, S], device=DEVICE)
    out = fa.flash_attention(q, k, v, causal, key_lengths=lengths)
    mask = an.allowed_keys(S, S, causal, lengths, batch=B, device=DEVICE)
    want = F.scaled_dot_product_attention(q.detach().double(), k.detach().double(), v.detach().double(),
                                          attn_mask=mask)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert_within(out, want, an.attention_error_bounds(q, k, v, None, causal, key_lengths=lengths)["out"], "out")
    _, lse = fa.flash_attention_forward(q.detach(), k.detach(), v.detach(), causal, key_lengths=lengths)
    assert torch.equal(lse[0], torch.full_like(lse[0], -math.inf))
    do = random_tensor(out.shape, torch.float32, DEVICE)
    grads = torch.autograd.grad(out, (q, k, v), do)
    for g in grads:
        assert torch.equal(g[0], torch.zeros_like(g[0])), "no visible key: no gradient"
    assert torch.equal(grads[1][1, :, 6:], torch.zeros_like(grads[1][1, :, 6:])), "padding keys get dK = 0"
    check_grads(grads, q, k, v, do, causal, key_lengths=lengths)


def test_padding_may_hold_garbage():
    # Keys past key_lengths are never used: NaN or inf there must not leak into anything (queries
    # 17.. would see them through the causal mask). The key-padding test's kernel, on a GPU.
    q, k, v = qkv(1, HEADS, 30, 30, 16, torch.float32)
    lengths = torch.tensor([17], device=DEVICE)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 17:] = math.nan
    v2[:, :, 17:] = math.inf
    got, _ = fa.flash_attention_forward(q, k2, v2, True, key_lengths=lengths)
    assert_within(got, an.attention_reference(q, k, v, True, key_lengths=lengths),
                  an.attention_error_bounds(q, k, v, None, True, key_lengths=lengths)["out"], "out")


@pytest.mark.parametrize("causal, dtype", [case(c, p.values[0], id=f"{m}-{p.id}", keep=default_mask(p.values[0], c),
                                                 marks=p.marks) for c, m in MASKS for p in DTYPES])
def test_large_scores_stay_finite(causal, dtype):
    # Scores ~ 30 * 30 * sqrt(D) >= 3.6e3: exp() overflows unless the running max is subtracted
    # before every exponential, and rescaling must not produce inf - inf. Each dtype at the sweep's
    # head dim and heads: its kernels.
    q, k, v = qkv(1, HEADS, 35, 35, DEFAULT_HEAD_DIMS[dtype], torch.float32, requires_grad=False)
    q, k, v = (q + 30.0).to(dtype), (k + 30.0).to(dtype), v.to(dtype)
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    out = fa.flash_attention(q, k, v, causal)
    do = random_tensor(out.shape, dtype, DEVICE)
    grads = torch.autograd.grad(out, (q, k, v), do)
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)
    assert_within(out, an.attention_reference(q, k, v, causal),
                  an.attention_error_bounds(q, k, v, None, causal)["out"], "out")
    check_grads(grads, q, k, v, do, causal)


@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_nan_propagates_like_sdpa(where):
    # Non-causal: every backend of torch agrees. NaN in q row 5 spoils that row; in k row 5,
    # every row of the head; in v[5, 3], column 3 of every row of the head.
    q, k, v = qkv(1, 2, 12, 12, 16, torch.float32)
    bound = an.attention_error_bounds(q, k, v)["out"]
    {"q": q, "k": k, "v": v}[where][0, 1, 5, 3] = math.nan
    got, _ = fa.flash_attention_forward(q, k, v)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    rows = [5] if where == "q" else list(range(12))
    cols = [3] if where == "v" else list(range(16))
    expected_nan = torch.zeros_like(got, dtype=torch.bool)
    expected_nan[0, 1, torch.tensor(rows)[:, None], torch.tensor(cols)[None, :]] = True
    assert torch.equal(torch.isnan(got), expected_nan)
    assert_within(got, want, bound, "out")


def test_nan_key_with_causal_mask_reaches_only_later_queries():
    # A NaN key 7 is seen by queries 7.. only; earlier queries mask it out (where(), not + -inf),
    # as torch's fused CPU and FlashAttention kernels do. (torch's MATH backend adds a -inf
    # bias, NaN + -inf = NaN, and so spoils every row: backends differ here.) Other heads: no NaN.
    q, k, v = qkv(1, HEADS, 40, 40, 16, torch.float32)
    bound = an.attention_error_bounds(q, k, v, None, True)["out"]
    k[0, 0, 7, 0] = math.nan
    got, _ = fa.flash_attention_forward(q, k, v, True)
    assert torch.isnan(got[0, 0, 7:]).all() and not torch.isnan(got[0, 0, :7]).any()
    assert not torch.isnan(got[0, 1:]).any()
    assert_within(got, an.attention_reference(q, k, v, True), bound, "out")


# ------------------------------------------------------------------------------ layouts, sizes
def test_strided_inputs_and_gradient():
    # (B, S, H, D) storage viewed as (B, H, S, D), the layout after a fused QKV projection, and a
    # non-contiguous upstream gradient: strides are passed to the kernels, nothing is copied. On a
    # GPU the kernels of the fp16 sweep (n_heads and strides of the same classes).
    B, S, H, D = 2, 27, 3, 64
    base = random_tensor((B, S, 3, H, D), torch.float16, DEVICE).requires_grad_(True)
    q, k, v = (base[:, :, i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    out = fa.flash_attention(q, k, v, True)
    do = random_tensor((B, S, H, D), torch.float16, DEVICE).transpose(1, 2)
    (grad,) = torch.autograd.grad(out, base, do)
    bounds = an.attention_error_bounds(q, k, v, do, True)
    assert_within(out, an.attention_reference(q, k, v, True), bounds["out"], "out")
    want = reference_grads(q, k, v, do, True)
    for i, name in enumerate(("dq", "dk", "dv")):
        assert_within(grad[:, :, i].transpose(1, 2), want[i], bounds[name], name)


def test_batch_one_single_token_and_empty():
    q, k, v = qkv(1, 1, 1, 1, 16, torch.float32, requires_grad=True)
    out = fa.flash_attention(q, k, v, True)
    assert_close(out, v.detach())  # one key: softmax = 1
    for B, Sq, Sk in ((0, 4, 4), (1, 0, 4)):
        q, k, v = qkv(B, 2, Sq, Sk, 16, torch.float32, requires_grad=True)
        out = fa.flash_attention(q, k, v)
        assert out.shape == (B, 2, Sq, 16)
        grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    q, k, v = qkv(1, 2, 5, 0, 16, torch.float32, requires_grad=True)  # no keys: zeros, like SDPA
    out = fa.flash_attention(q, k, v)
    assert torch.equal(out, torch.zeros_like(out))
    dq, _, _ = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert torch.equal(dq, torch.zeros_like(dq))


def bad_inputs():
    def ok(*shape, dtype=torch.float32):
        return torch.ones(*(shape or (1, 2, 8, 16)), dtype=dtype, device=DEVICE)
    yield "not a tensor", TypeError, "must be a torch.Tensor", lambda: ([[1.0]], ok(), ok(), {})
    yield "integer dtype", TypeError, "expected one of", lambda: (ok(dtype=torch.int64), ok(), ok(), {})
    yield "mixed dtypes", TypeError, "dtypes must match", lambda: (ok(), ok(), ok(dtype=torch.float64), {})
    yield "3-D", ValueError, "4 dimension", lambda: (ok(2, 8, 16), ok(), ok(), {})
    yield "head dim 96", ValueError, "head dimension", lambda: (ok(1, 2, 8, 96), ok(1, 2, 8, 96), ok(1, 2, 8, 96), {})
    yield "head dim 256", ValueError, "head dimension", lambda: (ok(1, 1, 8, 256), ok(1, 1, 8, 256),
                                                                 ok(1, 1, 8, 256), {})
    yield "q k head dims", ValueError, "same head dimension", lambda: (ok(1, 2, 8, 32), ok(), ok(), {})
    yield "k v differ", ValueError, "same shape", lambda: (ok(), ok(), ok(1, 2, 9, 16), {})
    yield "batch differs", ValueError, "batch and heads", lambda: (ok(2, 2, 8, 16), ok(), ok(), {})
    yield "wrong device", ValueError, "kernels run on", lambda: (ok(), torch.ones(1, 2, 8, 16, device="meta"), ok(), {})
    yield "scale nan", ValueError, "sm_scale", lambda: (ok(), ok(), ok(), {"sm_scale": math.nan})
    yield "causal str", TypeError, "causal", lambda: (ok(), ok(), ok(), {"causal": "yes"})
    lengths_2d = torch.ones(1, 1, dtype=torch.int32, device=DEVICE)
    yield "lengths 2-D", ValueError, r"key_lengths must have shape \(B,\)", lambda: (ok(), ok(), ok(), {"key_lengths": lengths_2d})
    yield "strategy", ValueError, "strategy", lambda: (ok(), ok(), ok(), {"strategy": "fast"})


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make):
    q, k, v, kwargs = make()
    with pytest.raises(error, match=message):
        fa.flash_attention(q, k, v, **kwargs)


def test_forward_rejects_bad_outputs_and_configs():
    # (the backward launcher's: test_flash_attention_backward.py)
    q, k, v = qkv(1, 2, 12, 12, 16, torch.float32)
    with pytest.raises(ValueError, match="out has shape"):
        fa.flash_attention_forward(q, k, v, out=torch.empty(1, 2, 7, 16, device=DEVICE))
    with pytest.raises(ValueError, match="power of two"):
        fa.flash_attention_forward(q, k, v, config={"BLOCK_M": 24, "BLOCK_N": 16})


# ------------------------------------------------------------------ as a PyTorch op in a model
def fused_qkv(B, S, H, D, dtype):
    """q, k, v as a fused QKV projection leaves them: (B, S, 3, H, D) storage, (B, H, S, D) views."""
    base = random_tensor((B, S, 3, H, D), dtype, DEVICE).requires_grad_(True)
    return base, tuple(base[:, :, i].transpose(1, 2) for i in range(3))


def gradient(layout, B, H, S, D, dtype):
    """dO as autograd may hand it over: dense, transposed, or broadcast (stride 0, as from .sum())."""
    if layout == "transposed":
        return random_tensor((B, S, H, D), dtype, DEVICE).transpose(1, 2)
    if layout == "expanded":
        return random_tensor((1, 1, 1, D), dtype, DEVICE).expand(B, H, S, D)
    return random_tensor((B, H, S, D), dtype, DEVICE)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "expanded"])
@pytest.mark.parametrize("path", ["function", "op"])
def test_fused_qkv_views_and_any_gradient_layout(path, layout):
    # Strides go to the kernels: nothing is copied, neither the views nor dO, on either path.
    B, S, H, D = 2, 21, 2, 16
    base, (q, k, v) = fused_qkv(B, S, H, D, torch.float32)
    assert not q.is_contiguous()
    if path == "function":
        out = fa.flash_attention(q, k, v, True)
    else:
        out = fa.flash_attention_op(q, k, v, True, 1 / math.sqrt(D), None)[0]
    do = gradient(layout, B, H, S, D, torch.float32)
    (grad,) = torch.autograd.grad(out, base, do)
    bounds = an.attention_error_bounds(q, k, v, do, True)
    assert_within(out, an.attention_reference(q, k, v, True), bounds["out"], "out")
    with torch.no_grad():
        assert torch.equal(fa.flash_attention(q, k, v, True), out), "no-grad path: the same kernel"
    for i, (name, want) in enumerate(zip(("dq", "dk", "dv"), reference_grads(q, k, v, do, True))):
        assert_within(grad[:, :, i].transpose(1, 2), want, bounds[name], name)


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.float64, marks=SLOW)],
                         ids=["float32", "float64"])
@pytest.mark.parametrize("causal, padded, strategy", [
    pytest.param(False, False, "split", marks=SLOW, id="full"), pytest.param(True, True, "split", id="causal-padded"),
    pytest.param(True, True, "atomic", marks=SLOW, id="causal-padded-atomic")])
def test_registered_ops_pass_opcheck(dtype, causal, padded, strategy):
    # Schema, fake functions (shapes, strides, dtypes), autograd registration and AOT dispatch,
    # as torch checks them; q, k, v are views of a fused buffer, dO is transposed. fp32, causal,
    # padded, split: on a GPU the kernels of test_key_padding_and_fully_masked_rows_like_sdpa.
    B, Sq, Sk, H, D = 2, 17, 29, HEADS, 16
    q = random_tensor((B, Sq, H, D), dtype, DEVICE).transpose(1, 2).requires_grad_(True)
    _, (_, k, v) = fused_qkv(B, Sk, H, D, dtype)
    k, v = k.detach().requires_grad_(True), v.detach().requires_grad_(True)
    lengths = torch.tensor([Sk, 11], device=DEVICE) if padded else None
    scale = 0.3
    torch.library.opcheck(fa.flash_attention_op, (q, k, v, causal, scale, lengths, strategy))
    out, lse = fa.flash_attention_op(q.detach(), k.detach(), v.detach(), causal, scale, lengths, strategy)
    do = random_tensor((B, Sq, H, D), dtype, DEVICE).transpose(1, 2)
    torch.library.opcheck(fa.flash_attention_backward_op,
                          (do, q.detach(), k.detach(), v.detach(), out, lse, causal, scale, lengths, strategy))


def test_eager_paths_and_the_registered_op_agree():
    q, k, v = qkv(2, 2, 21, 30, 16, torch.float32)
    lengths = torch.tensor([30, 13], device=DEVICE)
    with torch.no_grad():
        plain = fa.flash_attention(q, k, v, True, key_lengths=lengths)  # the forward alone
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    tracked = fa.flash_attention(*leaves, True, key_lengths=lengths)  # FlashAttentionFunction
    op_leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    op = fa.flash_attention_op(*op_leaves, True, 1 / math.sqrt(16), lengths)[0]  # what torch.compile records
    assert torch.equal(plain, tracked.detach()) and torch.equal(plain, op.detach())
    do = random_tensor(plain.shape, torch.float32, DEVICE)
    grads = torch.autograd.grad(tracked, leaves, do)
    assert all(torch.equal(a, b) for a, b in zip(grads, torch.autograd.grad(op, op_leaves, do)))
    check_grads(grads, q, k, v, do, True, key_lengths=lengths)


def attention_block(attention, heads):
    """x -> fused QKV projection -> attention on (B, H, S, D) views -> output projection."""
    def f(x, w_qkv, w_out):
        B, S, E = x.shape
        q, k, v = (x @ w_qkv).view(B, S, 3, heads, E // heads).unbind(2)
        out = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return out.transpose(1, 2).reshape(B, S, E) @ w_out
    return f


@pytest.mark.parametrize("dtype", [case(*p.values, id=p.id, keep=p.id == "float32", marks=p.marks)
                                   for p in dtype_params([torch.float32, torch.bfloat16])])
def test_attention_block_compiles_with_no_graph_break(dtype):
    # fullgraph=True raises on any graph break; on the GPU Inductor compiles the projections around
    # the registered op, in simulation aot_eager traces the same graphs (fake tensors, autograd).
    torch._dynamo.reset()
    B, S, H, D = 2, 24, 2, 16
    ours = attention_block(lambda q, k, v: fa.flash_attention(q, k, v, True), H)
    compiled = torch.compile(ours, fullgraph=True, backend=runtime.pick(gpu="inductor", sim="aot_eager"))
    inputs = (random_tensor((B, S, H * D), dtype, DEVICE), random_tensor((H * D, 3 * H * D), dtype, DEVICE) * 0.2,
              random_tensor((H * D, H * D), dtype, DEVICE) * 0.2)
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    y = compiled(*leaves)
    dy = random_tensor(y.shape, dtype, DEVICE)
    grads = torch.autograd.grad(y, leaves, dy)
    eager_leaves = [t.clone().requires_grad_(True) for t in inputs]
    y_eager = ours(*eager_leaves)
    eager_grads = torch.autograd.grad(y_eager, eager_leaves, dy)
    # The same kernels: only the matmuls and copies around them may round differently once compiled.
    eps = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}[dtype]
    assert_close(y, y_eager, rtol=4 * eps, atol=4 * eps * float(y_eager.detach().abs().max()))
    for name, got, want in zip(("dx", "dw_qkv", "dw_out"), grads, eager_grads):
        assert_close(got, want, rtol=8 * eps, atol=8 * eps * float(want.abs().max()), name=name)
    qd = [t.detach().double().requires_grad_(True) for t in inputs]
    want = attention_block(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), H)(*qd)
    assert_close(y_eager.double(), want, rtol=16 * eps, atol=16 * eps * float(want.detach().abs().max()),
                 name="vs sdpa")


def test_compiled_graph_holds_the_op_not_its_kernels():
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    f = torch.compile(attention_block(lambda q, k, v: fa.flash_attention(q, k, v, True), 2),
                      backend=backend, fullgraph=True)
    f(random_tensor((1, 16, 32), torch.float32, DEVICE), random_tensor((32, 96), torch.float32, DEVICE),
      random_tensor((32, 32), torch.float32, DEVICE))
    assert len(graphs) == 1
    targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert any("flash_attention" in t and fa.namespace in t for t in targets), targets


def test_hot_path_skips_checks_helpers_and_the_autotuner(monkeypatch):
    # After the first call of a shape: no full argument check, no triton.cdiv / next_power_of_2
    # (jitted helpers, ~2 us each from Python), no autotuner run, forward and backward alike. On
    # the GPU this shape goes through the autotuner once (bucket 1024 > SHORT_SEQUENCE), here
    # with one config per autotuner and fresh plan tables: the hot path is the same whichever
    # configs were tried, and the full lists cost ~27 compiles and timings (~40 s on an H100).
    # test_long_sequences_autotuned (slow) tunes over the full lists. With one config the autotuner
    # compiles the very kernels the bf16 sweep compiled (that config, HEADS, lengths of one class).
    B, H, S, D, dtype = runtime.pick(gpu=(1, HEADS, 1000, 64, torch.bfloat16), sim=(1, 2, 40, 16, torch.float32))
    if runtime.on_gpu():
        for module, name, config in ((blocked, "flash_attention_fwd_autotuned", "SMALL_FWD"),
                                     (fab, "flash_attention_bwd_dkdv_autotuned", "SMALL_BWD_KV"),
                                     (fab, "flash_attention_bwd_dq_autotuned", "SMALL_BWD_Q")):
            if hasattr(module, name) and hasattr(module, config):
                monkeypatch.setattr(getattr(module, name), "configs", [getattr(module, config)])
        for name in ("AUTOTUNED", "PLANS"):  # this test's choices are not kept for later tests
            monkeypatch.setattr(plans, name, {})
    q, k, v = qkv(B, H, S, S, D, dtype, requires_grad=True)
    do = random_tensor(q.shape, dtype, DEVICE)
    first = fa.flash_attention(q, k, v, True)
    first_grads = torch.autograd.grad(first, (q, k, v), do)

    def refuse(*args, **kwargs):
        raise AssertionError("called on the hot path")
    for module, name in ((triton, "cdiv"), (triton, "next_power_of_2")):
        monkeypatch.setattr(module, name, refuse)
    for module in (op_module, blocked, fab, plans):  # the full check, wherever a module holds it
        for name in ("check_inputs", "check_attention_inputs"):
            monkeypatch.setattr(module, name, refuse, raising=False)
    for module, name in ((blocked, "flash_attention_fwd_autotuned"), (fab, "flash_attention_bwd_dkdv_autotuned"),
                         (fab, "flash_attention_bwd_dq_autotuned")):
        if hasattr(module, name):  # (an exercise solution may launch without the autotuner)
            monkeypatch.setattr(getattr(module, name), "run", refuse)
    again = fa.flash_attention(q, k, v, True)
    assert torch.equal(first, again)
    assert all(torch.equal(a, b) for a, b in zip(first_grads, torch.autograd.grad(again, (q, k, v), do)))
    if runtime.on_gpu() and blocked.launch_plan is plans.launch_plan:  # (an exercise may plan its own way)
        assert {key[0] for key in plans.AUTOTUNED} >= {"fwd", "kv", "q"}, "the autotuner's choices are kept"
