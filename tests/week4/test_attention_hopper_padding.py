"""Padding keys (key_lengths) in the Hopper attention rung's CUDA C, forward and backward, against float64 torch.

Batch b has keys 0 .. key_lengths[b] - 1 (clamped to [0, Sk]); the rest are padding that no query sees. Padding
keys inside Sk are real memory, so every test fills them with NaN and inf (K and V): whatever they hold must reach
no output, no gradient and no other batch element. The reference reads the clean tensors. The lengths cover the
kernel's edges: 0 (a batch element with no key: zeros, lse = -inf, zero gradients), 1, one short of a 128-key
tile, a whole tile, one past it, Sk - 1, Sk, and past Sk / negative (clamped), as int32 and int64.

On an H100/H200: the forward in every build (the default, overlap, persistent and dynamic: a staged V tile per
padded work tile, across the work tiles of a persistent block), Sq != Sk, more work tiles than SMs; the backward in
both dQ builds (all-padding key blocks leave early; border blocks zero their K/V rows), dk and dv exactly zero past
the lengths; the op's autograd and opcheck with key_lengths. Anywhere: bad key_lengths refused before any launch, with one
message on every path (the Hopper forward and backward, the Triton rungs: attention/padding_keys.py's one check).
"""
import math

import pytest
import torch

from course import runtime
from course.check import poisoned, random_tensor
from tests.week4.attention_helpers import BUILDS, PERSISTENT_BUILDS, assert_within
from week4_triton_dl.attention import hopper as hp
from week4_triton_dl.attention import hopper_backward as hb
from week4_triton_dl.attention import naive as an

DEVICE = runtime.DEVICE
HOPPER = runtime.on_gpu() and hp.device_refusal(torch.device("cuda")) is None
gpu = pytest.mark.gpu(reason="launches the sm_90a kernels")
hopper = pytest.mark.skipif(not HOPPER, reason="the attention_hopper rung needs an sm_90 GPU (H100/H200, sm_90a)")
DTYPES = [pytest.param(d, id=str(d).replace("torch.", "")) for d in hp.DTYPES]
MASKS = [pytest.param(False, id="full"), pytest.param(True, id="causal")]
LENGTHS_300 = [0, 1, 127, 128, 129, 299, 300, 1000, -3]  # Sk = 300: three key tiles (128, 128, 44)


def garbage_past(t, lengths):
    """A copy of k or v whose padding keys hold NaN and inf (the kernel must never let them through)."""
    bad = t.clone()
    for b, n in enumerate(lengths.tolist()):
        n = max(0, min(n, t.shape[2]))
        bad[b, :, n:] = math.nan
        bad[b, :, n::3] = math.inf
    return bad


def check_forward(B, H, Sq, Sk, D, dtype, causal, lengths, build):
    q, k, v = (random_tensor((B, H, S, D), dtype, DEVICE) for S in (Sq, Sk, Sk))
    out = poisoned((B, H, Sq, D), dtype, DEVICE)
    lse = poisoned((B, H, Sq), torch.float32, DEVICE)
    hp.attention_hopper_forward(q, garbage_past(k, lengths), garbage_past(v, lengths), causal, out=out, lse=lse,
                                key_lengths=lengths, **build)
    want, want_lse = an.attention_reference(q, k, v, causal, key_lengths=lengths, return_lse=True)
    bounds = an.attention_error_bounds(q, k, v, None, causal, key_lengths=lengths)
    assert_within(out, want, bounds["out"])
    assert_within(lse, want_lse, bounds["lse"], name="lse")  # -inf where a row has no key, as the reference
    return out


# --- the forward, on the GPU ------------------------------------------------------------------------------------

@gpu
@hopper
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("head_dim", hp.HEAD_DIMS)
@pytest.mark.parametrize("build", BUILDS)
def test_forward_padding_keys_match_float64(build, head_dim, causal, dtype):
    lengths = torch.tensor(LENGTHS_300, dtype=torch.int32, device=DEVICE)
    out = check_forward(len(LENGTHS_300), 2, 300, 300, head_dim, dtype, causal, lengths, build)
    assert (out[0] == 0).all() and (out[-1] == 0).all(), "no key (length 0, or negative): zeros, as SDPA"


@gpu
@hopper
@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("seq_q, seq_k", [(200, 300), (300, 129), (1, 257)])
@pytest.mark.parametrize("build", BUILDS)
def test_forward_padding_with_other_query_lengths(build, seq_q, seq_k, causal):
    lengths = torch.tensor([seq_k - 1, 0, 64, seq_k], dtype=torch.int64, device=DEVICE)
    check_forward(4, 3, seq_q, seq_k, 64, torch.bfloat16, causal, lengths, build)


@gpu
@hopper
@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("build", BUILDS)
def test_forward_padding_across_many_work_tiles(build, causal):
    # 96 x 2 heads x 3 query tiles = 576 work tiles: several per block of a persistent build, most of them padded
    # (their last V tile staged) and some not, so the staging barrier's phase runs on across a block's tiles.
    lengths = torch.randint(0, 400, (96,), generator=torch.Generator().manual_seed(7)).to(DEVICE)
    lengths[::5] = 257
    check_forward(96, 2, 257, 257, 64, torch.float16, causal, lengths, build)


@gpu
@hopper
@pytest.mark.parametrize("build", PERSISTENT_BUILDS)
def test_forward_padding_same_bits_in_every_build(build):
    # The builds differ in schedule only: the padded call gives the default build's bits.
    lengths = torch.tensor([5, 300, 130, 0], device=DEVICE)
    q, k, v = (random_tensor((4, 2, 300, 128), torch.bfloat16, DEVICE) for _ in range(3))
    k, v = garbage_past(k, lengths), garbage_past(v, lengths)
    want = hp.attention_hopper_forward(q, k, v, True, key_lengths=lengths)
    got = hp.attention_hopper_forward(q, k, v, True, key_lengths=lengths, **build)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@gpu
@hopper
def test_all_lengths_full_gives_the_unpadded_bits():
    q, k, v = (random_tensor((2, 2, 257, 64), torch.bfloat16, DEVICE) for _ in range(3))
    full = torch.full((2,), 257, dtype=torch.int32, device=DEVICE)
    padded, plain = hp.attention_hopper_forward(q, k, v, True, key_lengths=full), hp.attention_hopper_forward(q, k, v, True)
    assert torch.equal(padded[0], plain[0]) and torch.equal(padded[1], plain[1])


# --- the backward, on the GPU -----------------------------------------------------------------------------------

@gpu
@hopper
@pytest.mark.parametrize("dq_tma", [pytest.param(True, id="dq_tma"), pytest.param(False, id="dq_atomics")])
@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("D", hb.HEAD_DIMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_padding_keys_match_float64(dtype, D, causal, dq_tma):
    lengths = torch.tensor([0, 1, 63, 64, 65, 128, 200, 300, 1000], device=DEVICE)
    B, H, S, scale = len(lengths), 2, 300, D**-0.5
    q, k, v, do = (random_tensor((B, H, S, D), dtype, DEVICE) for _ in range(4))
    o, lse = hb.reference_forward(q, k, v, causal, scale, key_lengths=lengths)
    grads = tuple(poisoned(q.shape, dtype, DEVICE) for _ in range(3))
    acc = poisoned(q.shape, torch.float32, DEVICE)
    got = hb.attention_hopper_backward(q, garbage_past(k, lengths), garbage_past(v, lengths), o, do, lse, causal,
                                       scale, grads=grads, dq_accum=acc, dq_tma=dq_tma, key_lengths=lengths)
    bounds = an.attention_error_bounds(q, k, v, do, causal, scale, key_lengths=lengths)
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    wanted = torch.autograd.grad(an.attention_reference(qd, kd, vd, causal, scale, key_lengths=lengths),
                                 (qd, kd, vd), do.double())
    for name, g, w in zip(("dq", "dk", "dv"), got, wanted):
        assert_within(g, w, bounds[name], name)
    for b, n in enumerate(lengths.clamp(0, S).tolist()):  # padding keys: exactly zero, not merely small
        assert (got[1][b, :, n:] == 0).all() and (got[2][b, :, n:] == 0).all(), (b, n)


@gpu
@hopper
@pytest.mark.parametrize("causal", MASKS)
def test_op_autograd_with_padding_keys(causal):
    lengths = torch.tensor([100, 0, 257], device=DEVICE)
    q, k, v = (random_tensor((3, 2, 257, 64), torch.bfloat16, DEVICE).requires_grad_() for _ in range(3))
    do = random_tensor(q.shape, torch.bfloat16, DEVICE)
    hp.attention_hopper(q, k, v, causal, key_lengths=lengths).backward(do)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = an.attention_reference(qd, kd, vd, causal, key_lengths=lengths)
    wanted = torch.autograd.grad(want, (qd, kd, vd), do.double())
    bounds = an.attention_error_bounds(q.detach(), k.detach(), v.detach(), do, causal, key_lengths=lengths)
    for name, g, w in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), wanted):
        assert_within(g, w, bounds[name], name)


@gpu
@hopper
def test_opcheck_with_padding_keys():
    lengths = torch.tensor([9, 0], dtype=torch.int32, device=DEVICE)
    q, k, v = (random_tensor((2, 2, 129, 64), torch.float16, DEVICE) for _ in range(3))
    torch.library.opcheck(hp.forward_op, (q, k, v, True, 0.125, lengths))


@gpu
@hopper
def test_compiled_call_with_padding_keys_has_no_graph_break():
    lengths = torch.tensor([3, 129], device=DEVICE)
    q, k, v = (random_tensor((2, 2, 129, 64), torch.bfloat16, DEVICE) for _ in range(3))
    compiled = torch.compile(lambda q, k, v, n: hp.attention_hopper(q, k, v, True, key_lengths=n), fullgraph=True)
    assert torch.equal(compiled(q, k, v, lengths), hp.attention_hopper(q, k, v, True, key_lengths=lengths))


# --- anywhere: bad key_lengths refused before any launch --------------------------------------------------------

@pytest.mark.parametrize("lengths, error, message", [
    ([3, 4], TypeError, "key_lengths must be a torch.Tensor"),
    (torch.tensor([3.0, 4.0]), TypeError, "key_lengths has dtype float32; expected int32 or int64"),
    (torch.tensor([3, 4, 5]), ValueError, r"key_lengths must have shape \(B,\) = \(2,\)"),
    (torch.tensor([[3, 4]]), ValueError, r"key_lengths must have shape \(B,\) = \(2,\)"),
    (torch.tensor([3, 0, 4, 0])[::2], ValueError, "key_lengths must be a contiguous tensor"),
])
def test_bad_key_lengths_refused_before_launch(lengths, error, message, monkeypatch):
    launched = []
    monkeypatch.setattr(hp, "launch", lambda *args, **kwargs: launched.append(args))
    q = torch.zeros(2, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(error, match=message):
        hp.attention_hopper_forward(q, q, q, key_lengths=lengths)
    with pytest.raises(error, match=message):
        hp.check_inputs(q, q, q, False, None, lengths)
    assert not launched


def test_backward_refuses_bad_key_lengths_before_launch():
    q = torch.zeros(2, 2, 8, 64, dtype=torch.float16, device=DEVICE)
    lse = torch.zeros(2, 2, 8, device=DEVICE)
    with pytest.raises(ValueError, match=r"key_lengths must have shape \(B,\) = \(2,\)"):
        hb.check_inputs(q, q, q, q, q, lse, False, 0.125, torch.tensor([1, 2, 3], device=DEVICE))
    with pytest.raises(TypeError, match="key_lengths"):
        hb.check_inputs(q, q, q, q, q, lse, False, 0.125, torch.tensor([1.0, 2.0], device=DEVICE))


def bad_key_lengths():
    """(id, key_lengths, error) of every fault padding_keys.check_key_lengths names, for B = 2 on DEVICE."""
    yield "list", [3, 4], TypeError
    yield "float32", torch.tensor([3.0, 4.0], device=DEVICE), TypeError
    yield "three_entries", torch.tensor([3, 4, 5], device=DEVICE), ValueError
    yield "2d", torch.tensor([[3, 4]], device=DEVICE), ValueError
    yield "another_device", torch.zeros(2, dtype=torch.int32, device="meta"), ValueError
    yield "strided", torch.tensor([3, 0, 4, 0], dtype=torch.int32, device=DEVICE)[::2], ValueError


def refusals(lengths, monkeypatch):
    """{path: the exception} of each entry that takes key_lengths (fp16, D = 64: inputs every path takes), the
    launches stood in for by failures: the Hopper forward and backward, the Triton rungs (week 4's op on its quick
    check and on its full one, the Triton backward, the naive attention)."""
    from week4_triton_dl.attention import backward as fab
    from week4_triton_dl.attention import op as op_module

    def no_launch(*args, **kwargs):
        pytest.fail("launched despite bad key_lengths")

    monkeypatch.setattr(hp, "launch", no_launch)
    monkeypatch.setattr(hb, "load_extension", no_launch)
    monkeypatch.setattr(op_module.dispatch, "forward", no_launch)
    monkeypatch.setattr(fab, "launch_backward", no_launch)
    q = torch.zeros(2, 2, 8, 64, dtype=torch.float16, device=DEVICE)
    lse = torch.zeros(2, 2, 8, device=DEVICE)
    calls = {
        "hopper forward": lambda: hp.attention_hopper_forward(q, q, q, key_lengths=lengths),
        "hopper op entry": lambda: hp.attention_hopper(q, q, q, key_lengths=lengths),
        "hopper backward": lambda: hb.attention_hopper_backward(q, q, q, q, q, lse, False, 0.125, key_lengths=lengths),
        "triton op (quick check)": lambda: op_module.flash_attention(q, q, q, key_lengths=lengths),
        "triton forward (full check)": lambda: op_module.flash_attention_forward(q, q, q, key_lengths=lengths),
        "triton backward": lambda: fab.flash_attention_backward(q, q, q, q, q, lse, key_lengths=lengths),
        "naive": lambda: an.attention_naive(q, q, q, key_lengths=lengths),
    }
    caught = {}
    for path, call in calls.items():
        with pytest.raises((TypeError, ValueError)) as refused:
            call()
        caught[path] = refused.value
    return caught


@pytest.mark.parametrize("lengths, error", [pytest.param(*case[1:], id=case[0]) for case in bad_key_lengths()])
def test_every_path_refuses_bad_key_lengths_with_one_message(lengths, error, monkeypatch):
    """One check (attention/padding_keys.py) on every path: the Hopper forward, the Hopper backward and the Triton
    rungs refuse the same bad key_lengths with the same error and message, naming key_lengths, before any launch."""
    caught = refusals(lengths, monkeypatch)
    messages = {path: f"{type(e).__name__}: {e}" for path, e in caught.items()}
    assert len(set(messages.values())) == 1, messages
    assert all(type(e) is error for e in caught.values()), messages
    assert str(caught["naive"]).startswith("key_lengths "), messages


def test_reference_forward_hides_padding_keys():
    # The backward tests' o and lse: padding keys never read (NaN there stays out), a row with no key 0 and -inf.
    q, k, v = (torch.randn(2, 1, 7, 64, dtype=torch.float64) for _ in range(3))
    lengths = torch.tensor([4, 0])
    o, lse = hb.reference_forward(q, garbage_past(k, lengths), garbage_past(v, lengths), True, 0.125, lengths)
    want, want_lse = an.attention_reference(q, k, v, True, 0.125, key_lengths=lengths, return_lse=True)
    assert torch.allclose(o.double(), want, atol=1e-12) and torch.equal(torch.isinf(lse), torch.isinf(want_lse))
    assert (o[1] == 0).all() and (lse[1] == -math.inf).all()
