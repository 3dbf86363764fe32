"""week4_triton_dl.attention.forward: the forward-only FlashAttention rung against float64 torch.

Outputs are compared with `attention_reference` (softmax(QK^T scale + mask) V in float64) within
the element-wise bound of `attention_error_bounds` (attention/naive.py's error model: fp32 scores,
P rounded to the input dtype for P @ V, the final rounding), written into poisoned outputs so an
unwritten element fails. Every length is ragged against the interpreter's 32 x 16 tiles.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import dtype_params, poisoned, random_tensor, sweep
from tests.week4.attention_helpers import assert_within, qkv

ff = runtime.lesson("week4_triton_dl.attention.forward")
an = runtime.lesson("week4_triton_dl.attention.naive")
DEVICE = runtime.DEVICE
SLOW = pytest.mark.slow
# (Sq, Sk): one token, primes, more queries than keys and fewer (top-left causal), an exact multiple of
# both tile sizes; on the GPU also lengths past one 64-row tile, ragged.
RAGGED = [(1, 1), (37, 37), (20, 45), (50, 19)]
SHAPES = sweep(RAGGED + runtime.pick(gpu=[(300, 300), (129, 500)], sim=[]), [(64, 64)], unpack=True)
# The lesson's stages (`--stage N`): 1, the online softmax over the key blocks (full attention);
# 2, causal (the loop's bound and the diagonal block's mask).
stage = pytest.mark.stage
MASKS = [pytest.param(False, id="full", marks=stage(1)), pytest.param(True, id="causal", marks=stage(2))]


def check_forward(q, k, v, causal, sm_scale=None):
    out = poisoned(q.shape, q.dtype, DEVICE)
    got = ff.flash_attention_forward_only(q, k, v, causal, sm_scale, out=out)
    assert got is out, "the launcher must write into the `out` it was given"
    assert_within(got, an.attention_reference(q, k, v, causal, sm_scale),
                  an.attention_error_bounds(q, k, v, None, causal, sm_scale)["out"])


@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.float16, torch.bfloat16]))
@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("seq_q, seq_k", SHAPES)
def test_matches_float64(dtype, causal, seq_q, seq_k):
    check_forward(*qkv(1, 2, seq_q, seq_k, 32, dtype), causal)


@stage(2)
@pytest.mark.parametrize("head_dim", sweep([16, 128], [64]))
def test_head_dims(head_dim):
    check_forward(*qkv(1, 1, 37, 29, head_dim, torch.float16), True)


@stage(2)
def test_explicit_scale_and_batches():
    check_forward(*qkv(2, 3, 21, 19, 16, torch.float32), True, sm_scale=0.37)


@pytest.mark.parametrize("causal", MASKS)
def test_matches_torch_sdpa(causal):
    # The reference itself is F.scaled_dot_product_attention (top-left causal, scale=).
    q, k, v = qkv(2, 2, 9, 13, 16, torch.float32)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, scale=0.3)
    assert_within(ff.flash_attention_forward_only(q, k, v, causal, 0.3), want,
                  an.attention_error_bounds(q, k, v, None, causal, 0.3)["out"])


@stage(2)
def test_strided_inputs():
    # (B, S, 3, H, D) storage viewed as (B, H, S, D): the layout after a fused QKV projection. The
    # kernel takes strides, so nothing is copied; the output may be strided too.
    B, S, H, D = 2, 27, 3, 16
    base = random_tensor((B, S, 3, H, D), torch.float16, DEVICE)
    q, k, v = (base[:, :, i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    out = poisoned((B, S, H, D), torch.float16, DEVICE).transpose(1, 2)
    ff.flash_attention_forward_only(q, k, v, True, out=out)
    assert_within(out, an.attention_reference(q, k, v, True), an.attention_error_bounds(q, k, v, None, True)["out"])


@pytest.mark.parametrize("causal", MASKS)
def test_large_scores_stay_finite(causal):
    # Scores ~ 30 * 30 * sqrt(D) >= 3.6e3: exp() overflows unless the running max is subtracted
    # before every exponential.
    q, k, v = qkv(1, 1, 35, 35, 16, torch.float32)
    q, k = (q + 30.0).half(), (k + 30.0).half()
    v = v.half()
    out = ff.flash_attention_forward_only(q, k, v, causal)
    assert torch.isfinite(out).all()
    assert_within(out, an.attention_reference(q, k, v, causal), an.attention_error_bounds(q, k, v, None, causal)["out"])


@stage(1)
@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_nan_propagates_like_sdpa(where):
    # Non-causal: NaN in q row 5 spoils that row; in k row 5, every row of the head; in v[5, 3],
    # column 3 of every row of the head. Other heads stay clean.
    q, k, v = qkv(1, 2, 12, 12, 16, torch.float32)
    bound = an.attention_error_bounds(q, k, v)["out"]
    {"q": q, "k": k, "v": v}[where][0, 1, 5, 3] = math.nan
    got = ff.flash_attention_forward_only(q, k, v)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    rows = [5] if where == "q" else list(range(12))
    cols = [3] if where == "v" else list(range(16))
    expected_nan = torch.zeros_like(got, dtype=torch.bool)
    expected_nan[0, 1, torch.tensor(rows)[:, None], torch.tensor(cols)[None, :]] = True
    assert torch.equal(torch.isnan(got), expected_nan)
    assert_within(got, want, bound)


@stage(2)
def test_nan_key_with_causal_mask_reaches_only_later_queries():
    # A NaN key 7 is seen by queries 7.. only; earlier queries mask it with where(), not + -inf
    # (as torch's fused kernels do; its MATH backend adds a -inf bias and spoils every row).
    q, k, v = qkv(1, 1, 40, 40, 16, torch.float32)
    bound = an.attention_error_bounds(q, k, v, None, True)["out"]
    k[0, 0, 7, 0] = math.nan
    got = ff.flash_attention_forward_only(q, k, v, True)
    assert torch.isnan(got[0, 0, 7:]).all() and not torch.isnan(got[0, 0, :7]).any()
    assert_within(got, an.attention_reference(q, k, v, True), bound)


@stage(1)
def test_empty_inputs():
    for B, Sq, Sk in ((0, 4, 4), (1, 0, 4)):
        q, k, v = qkv(B, 2, Sq, Sk, 16, torch.float32)
        assert ff.flash_attention_forward_only(q, k, v).shape == (B, 2, Sq, 16)
    q, k, v = qkv(1, 2, 5, 0, 16, torch.float32)  # no keys: an empty sum, zeros, like SDPA
    out = ff.flash_attention_forward_only(q, k, v, out=poisoned((1, 2, 5, 16), torch.float32, DEVICE))
    assert torch.equal(out, torch.zeros_like(out))


def bad_inputs():
    def ok(*shape, dtype=torch.float32):
        return torch.ones(*(shape or (1, 2, 8, 16)), dtype=dtype, device=DEVICE)
    yield "not a tensor", TypeError, "q must be a torch.Tensor", lambda: ([[1.0]], ok(), ok(), {})
    yield "float64", TypeError, "expected one of", lambda: (ok(dtype=torch.float64), ok(dtype=torch.float64),
                                                           ok(dtype=torch.float64), {})
    yield "mixed dtypes", TypeError, "dtypes must match", lambda: (ok(), ok(), ok(dtype=torch.float16), {})
    yield "3-D", ValueError, "4 dimension", lambda: (ok(2, 8, 16), ok(), ok(), {})
    yield "head dim 96", ValueError, "head dimension", lambda: (ok(1, 2, 8, 96), ok(1, 2, 8, 96), ok(1, 2, 8, 96), {})
    yield "q k head dims", ValueError, "same head dimension", lambda: (ok(1, 2, 8, 32), ok(), ok(), {})
    yield "k v differ", ValueError, "same shape", lambda: (ok(), ok(), ok(1, 2, 9, 16), {})
    yield "batch differs", ValueError, "batch and heads", lambda: (ok(2, 2, 8, 16), ok(), ok(), {})
    yield "wrong device", ValueError, "kernels run on", lambda: (ok(), torch.ones(1, 2, 8, 16, device="meta"), ok(), {})
    yield "scale nan", ValueError, "sm_scale", lambda: (ok(), ok(), ok(), {"sm_scale": math.nan})
    yield "causal str", TypeError, "causal", lambda: (ok(), ok(), ok(), {"causal": "yes"})
    yield "out shape", ValueError, "out has shape", lambda: (ok(), ok(), ok(), {"out": ok(1, 2, 7, 16)})
    yield "out dtype", TypeError, "out has dtype", lambda: (ok(), ok(), ok(), {"out": ok(dtype=torch.float16)})


@stage(1)
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make):
    q, k, v, kwargs = make()
    with pytest.raises(error, match=message):
        ff.flash_attention_forward_only(q, k, v, **kwargs)
