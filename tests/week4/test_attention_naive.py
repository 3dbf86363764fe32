"""week4_triton_dl.attention.naive: masked scores, then unfused attention, against float64 torch.

Tolerances come from the error model in `attention_error_bounds` (see its docstring): element-
wise bounds computed from the float64 magnitudes of the same inputs, so fp16 and fp32 get
bounds that fit their rounding and a wrong mask or scale still fails by orders of magnitude.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor

an = runtime.lesson("week4_triton_dl.attention.naive")
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16])
# (Sq, Sk): one token, a prime past one 16-wide block, more queries than keys and the reverse
# (causal is top-left aligned), all non-multiples of the blocks; long ones only on the GPU.
SHAPES = [(1, 1), (17, 17), (33, 20), (20, 47)] + runtime.pick(gpu=[(1000, 1000), (257, 4099)], sim=[])
# What the default run keeps (the rest is marked slow; `pytest --slow` runs it all). On a GPU each
# (dtype, causal, padded, head dim) is its own compiled kernel and the long shapes cost their
# float64 references: the default run takes each dtype with one mask (and padding) over the
# ragged shapes at D = 16, the one-token shape once, one long shape in the full attention (D = 64
# is in test_strided_inputs; test_large_scores_stay_finite runs fp32's kernels of the attention
# test), key padding with a fully masked row once (causal). Slow adds the product of dtype x mask x
# padding x head dim x shape.
SLOW = pytest.mark.slow
MASKS = ((False, "full"), (True, "causal"))
RAGGED = [(17, 17), (33, 20), (20, 47)]
# (dtype, causal, padded) combinations of the default run, and the cases each adds beyond the
# ragged shapes at D = 16 (the attention test has no padding: its combinations ignore it).
SCORE_DEFAULTS = {(torch.float32, False, False): [],
                  (torch.float32, True, True): [(1, 1, 16)],
                  (torch.float16, True, False): [],
                  (torch.bfloat16, False, True): []}
ATTENTION_DEFAULTS = {(torch.float32, False): [(1000, 1000, 16)],
                      (torch.float16, True): [],
                      (torch.bfloat16, True): []}


def kept(defaults, combo, seq_q, seq_k, head_dim):
    extra = defaults.get(combo)
    return extra is not None and ((seq_q, seq_k) in RAGGED and head_dim == 16 or (seq_q, seq_k, head_dim) in extra)


def case(*values, id, keep, marks=()):
    """One case of a sweep: marked slow unless the default run keeps it."""
    return pytest.param(*values, id=id, marks=[*marks, *([] if keep else [SLOW])])


def score_cases():
    for p in DTYPES:
        for causal, mask in MASKS:
            for padded, pad in ((False, "dense"), (True, "padded")):
                for seq_q, seq_k in SHAPES:
                    for head_dim in (16, 64):
                        combo = (p.values[0], causal, padded)
                        yield case(*combo, seq_q, seq_k, head_dim, id=f"{p.id}-{mask}-{pad}-{seq_q}-{seq_k}-{head_dim}",
                                   keep=kept(SCORE_DEFAULTS, combo, seq_q, seq_k, head_dim), marks=p.marks)


def attention_cases():
    for p in DTYPES:
        for causal, mask in MASKS:
            for seq_q, seq_k in SHAPES:
                for head_dim in (16, 64):
                    combo = (p.values[0], causal)
                    yield case(*combo, seq_q, seq_k, head_dim, id=f"{p.id}-{mask}-{seq_q}-{seq_k}-{head_dim}",
                               keep=kept(ATTENTION_DEFAULTS, combo, seq_q, seq_k, head_dim), marks=p.marks)


# The softmax of a row with no visible key is 0/0 (NaN) by design; the P @ V step never reads it.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


def qkv(B, H, Sq, Sk, D, dtype):
    return (random_tensor((B, H, Sq, D), dtype, DEVICE), random_tensor((B, H, Sk, D), dtype, DEVICE),
            random_tensor((B, H, Sk, D), dtype, DEVICE))


def assert_within(actual, expected, bound, name):
    """|actual - expected| <= bound element-wise; NaN must meet NaN and inf the same inf."""
    assert_close(actual.double() / bound, expected.double() / bound, rtol=0.0, atol=1.0,
                 name=f"{name} (in units of its error bound)")


def lengths_for(B, Sk, padded):
    if not padded:
        return None
    # one batch element with padding, one with none: the mask must follow the batch index
    return torch.tensor([max(Sk - 5, 1), Sk][:B], device=DEVICE)


@pytest.mark.parametrize("dtype, causal, padded, seq_q, seq_k, head_dim", list(score_cases()))
def test_scores_are_scaled_and_masked(dtype, causal, padded, seq_q, seq_k, head_dim):
    B = 2
    q, k, _ = qkv(B, 1, seq_q, seq_k, head_dim, dtype)
    lengths = lengths_for(B, seq_k, padded)
    out = poisoned((B, 1, seq_q, seq_k), torch.float32, DEVICE)
    got = an.scaled_masked_scores(q, k, causal, key_lengths=lengths, out=out)
    assert got is out, "the launcher must write into the `out` it was given"
    keep = an.allowed_keys(seq_q, seq_k, causal, lengths, batch=B, device=DEVICE)
    want = (q.double() @ k.double().transpose(-1, -2) / math.sqrt(head_dim)).masked_fill(~keep, -math.inf)
    bound = an.attention_error_bounds(q, k, k, None, causal, key_lengths=lengths)["scores"]
    assert_within(got, want, bound, "scores")


@pytest.mark.parametrize("dtype, causal, seq_q, seq_k, head_dim", list(attention_cases()))
def test_attention_naive_matches_float64(dtype, causal, seq_q, seq_k, head_dim):
    q, k, v = qkv(1, 3, seq_q, seq_k, head_dim, dtype)
    out = poisoned(q.shape, dtype, DEVICE)
    assert an.attention_naive(q, k, v, causal, out=out) is out
    bound = an.attention_error_bounds(q, k, v, None, causal)["out"]
    assert_within(out, an.attention_reference(q, k, v, causal), bound, "out")


def test_reference_is_torch_sdpa():
    # The float64 reference the tests trust is F.scaled_dot_product_attention (top-left causal).
    q, k, v = qkv(2, 2, 9, 13, 16, torch.float64)
    for causal in (False, True):
        assert_close(an.attention_reference(q, k, v, causal, 0.3),
                     F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3))


@pytest.mark.parametrize("causal", [pytest.param(False, marks=SLOW), True], ids=["full", "causal"])
def test_key_padding_and_fully_masked_rows_like_sdpa(causal):
    # key_lengths = 0 masks every key of that batch element: torch's SDPA returns zeros there.
    B, H, S, D = 3, 2, 11, 16
    q, k, v = qkv(B, H, S, S, D, torch.float32)
    lengths = torch.tensor([0, 4, S], device=DEVICE)
    got = an.attention_naive(q, k, v, causal, key_lengths=lengths)
    mask = an.allowed_keys(S, S, causal, lengths, batch=B, device=DEVICE)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    assert torch.equal(got[0], torch.zeros_like(got[0])), "a row with no visible key must be 0"
    bound = an.attention_error_bounds(q, k, v, None, causal, key_lengths=lengths)["out"]
    assert_within(got, want, bound, "out")


@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_nan_propagates_like_sdpa(where):
    q, k, v = qkv(1, 2, 12, 12, 16, torch.float32)
    bound = an.attention_error_bounds(q, k, v)["out"]
    {"q": q, "k": k, "v": v}[where][0, 1, 5, 3] = math.nan
    got = an.attention_naive(q, k, v)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    # NaN in a query spoils its own row; in a key, every row of that head (all attend to it);
    # in a value, column 3 of every row of that head. Head 0 is untouched.
    nan_rows = {"q": [5], "k": list(range(12)), "v": list(range(12))}[where]
    nan_cols = [3] if where == "v" else list(range(16))
    expected_nan = torch.zeros_like(got, dtype=torch.bool)
    expected_nan[0, 1, torch.tensor(nan_rows)[:, None], torch.tensor(nan_cols)[None, :]] = True
    assert torch.equal(torch.isnan(got), expected_nan)
    assert_within(got, want, bound, "out")


def test_large_scores_stay_finite():
    # Scores ~ 30 * 30 * 16 / 4 = 3.6e3: exp() overflows without the max subtraction of the softmax.
    # The shapes of the fp32 attention test (3 heads, D = 16, a ragged length): its kernels, on a GPU.
    q, k, v = qkv(1, 3, 20, 20, 16, torch.float32)
    q, k = q + 30.0, k + 30.0
    got = an.attention_naive(q, k, v)
    assert torch.isfinite(got).all()
    assert_within(got, an.attention_reference(q, k, v), an.attention_error_bounds(q, k, v)["out"], "out")


def test_strided_inputs():
    # (B, S, H, D) storage viewed as (B, H, S, D): the usual layout after a QKV projection; D = 64,
    # the default run's one case of it.
    B, S, H, D = 2, 19, 3, 64
    q, k, v = (random_tensor((B, S, H, D), torch.float16, DEVICE).transpose(1, 2) for _ in range(3))
    out = poisoned((B, S, H, D), torch.float16, DEVICE).transpose(1, 2)
    an.attention_naive(q, k, v, True, out=out)
    assert_within(out, an.attention_reference(q, k, v, True), an.attention_error_bounds(q, k, v, None, True)["out"],
                  "out")


def test_probs_times_values_reads_only_visible_keys():
    p = torch.rand(2, 1, 7, 9, device=DEVICE)
    p[:, :, :, 6:] = math.nan  # past key_lengths: must never be read
    v = random_tensor((2, 1, 9, 16), torch.float32, DEVICE)
    got = an.probs_times_values(p, v, key_lengths=torch.tensor([6, 0], device=DEVICE))
    want = p[0:1, :, :, :6].double() @ v[0:1, :, :6].double()
    assert_close(got[0:1], want.float(), rtol=1e-5, atol=1e-5)  # fp32 sums of 6 products
    assert torch.equal(got[1], torch.zeros_like(got[1]))


def test_empty_inputs():
    for B, Sq, Sk in ((0, 5, 5), (1, 0, 5)):
        q, k, v = qkv(B, 2, Sq, Sk, 16, torch.float32)
        assert an.attention_naive(q, k, v).shape == (B, 2, Sq, 16)
    q, k, v = qkv(1, 2, 5, 0, 16, torch.float32)  # no keys at all: every row is fully masked
    assert torch.equal(an.attention_naive(q, k, v), torch.zeros(1, 2, 5, 16, device=DEVICE))


def bad_inputs():
    def ok(*shape, dtype=torch.float32):
        return torch.ones(*(shape or (1, 2, 8, 16)), dtype=dtype, device=DEVICE)
    yield "not a tensor", TypeError, "must be a torch.Tensor", lambda: ([[1.0]], ok(), ok(), {})
    yield "integer dtype", TypeError, "expected one of", lambda: (ok(dtype=torch.int32), ok(), ok(), {})
    yield "mixed dtypes", TypeError, "dtypes must match", lambda: (ok(), ok(dtype=torch.float16), ok(), {})
    yield "3-D", ValueError, "4 dimension", lambda: (ok(2, 8, 16), ok(), ok(), {})
    yield "head dim 48", ValueError, "head dimension", lambda: (ok(1, 2, 8, 48), ok(1, 2, 8, 48), ok(1, 2, 8, 48), {})
    yield "k v differ", ValueError, "same shape", lambda: (ok(), ok(), ok(1, 2, 9, 16), {})
    yield "heads differ", ValueError, "batch and heads", lambda: (ok(), ok(1, 3, 8, 16), ok(1, 3, 8, 16), {})
    yield "wrong device", ValueError, "kernels run on", lambda: (torch.ones(1, 2, 8, 16, device="meta"), ok(), ok(), {})
    yield "scale <= 0", ValueError, "sm_scale", lambda: (ok(), ok(), ok(), {"sm_scale": -1.0})
    yield "scale str", TypeError, "sm_scale", lambda: (ok(), ok(), ok(), {"sm_scale": "0.1"})
    yield "causal int", TypeError, "causal", lambda: (ok(), ok(), ok(), {"causal": 1})
    float_lengths = torch.ones(1, device=DEVICE)
    two_lengths = torch.ones(2, dtype=torch.int32, device=DEVICE)
    yield "lengths float", TypeError, "key_lengths", lambda: (ok(), ok(), ok(), {"key_lengths": float_lengths})
    yield "lengths shape", ValueError, "one entry per batch", lambda: (ok(), ok(), ok(), {"key_lengths": two_lengths})
    yield "out wrong shape", ValueError, "out has shape", lambda: (ok(), ok(), ok(), {"out": ok(1, 2, 7, 16)})
    yield "out wrong dtype", TypeError, "out has dtype", lambda: (ok(), ok(), ok(), {"out": ok(dtype=torch.float16)})


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make):
    q, k, v, kwargs = make()
    with pytest.raises(error, match=message):
        an.attention_naive(q, k, v, **kwargs)


def test_scores_rejects_non_contiguous_out():
    q = torch.ones(1, 1, 8, 16, device=DEVICE)
    out = torch.empty(1, 1, 8, 8, device=DEVICE).transpose(2, 3)
    with pytest.raises(ValueError, match="not contiguous"):
        an.scaled_masked_scores(q, q, out=out)


@pytest.mark.gpu(reason="peak memory is measured by the CUDA caching allocator")
def test_naive_memory_is_the_score_matrix():
    # fp16, causal, D = 64 and a length of neither class: test_strided_inputs's kernels.
    B, H, S, D = 2, 8, 2047, 64
    q, k, v = qkv(B, H, S, S, D, torch.float16)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = an.attention_naive(q, k, v, True)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before - out.numel() * out.element_size()
    model = an.naive_scores_bytes(B, H, S, S)
    assert model <= extra <= model * 1.01 + (2 << 20), f"extra {extra} B, model {model} B"
