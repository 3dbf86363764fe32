"""week4_triton_dl.attention.tma: flash_tma, the forward through TMA tensor descriptors.

Outputs and log-sum-exp against float64 torch (`attention_reference`) within the element-wise
bound of `attention_error_bounds` (attention/naive.py's error model), written into poisoned
outputs so an unwritten element fails. The interpreter emulates TMA descriptors (zero-filled
loads and dropped stores out of bounds, as the hardware does), so these run on a CPU with 32 x 16
tiles, every length ragged against them; on an H100 they run the real copy engine with the
launch tile. What TMA cannot run is refused with the rung to use instead (tested), and the op
takes it to flash_blocked; the op runs flash_tma when asked by name (rung="flash_tma") and where
attention/dispatch.py's rule sends it.
bf16 runs on the GPU only (its rounding inside the kernel: simulation computes bf16 in float32; course.check.dtype_params).
"""
import math

import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor, sweep
from tests.week4.attention_helpers import assert_within, attention_op, qkv

tma = runtime.lesson("week4_triton_dl.attention.tma")
an = runtime.lesson("week4_triton_dl.attention.naive")
DEVICE = runtime.DEVICE
ON_HOPPER = runtime.on_gpu() and torch.cuda.get_device_capability(DEVICE) >= (9, 0)
# (Sq, Sk): one token, primes, more queries than keys and fewer (top-left causal), a multiple of both
# simulated tiles; on the GPU also past one 128-row tile, ragged.
RAGGED = [(1, 1), (37, 37), (20, 45), (50, 19)]
SHAPES = sweep(RAGGED + runtime.pick(gpu=[(300, 300), (129, 500)], sim=[]), [(64, 64)], unpack=True)
needs_tma = pytest.mark.skipif(runtime.on_gpu() and not ON_HOPPER,
                               reason="needs a real NVIDIA GPU (compute capability >= 9.0: TMA) or the interpreter")


def reference_lse(q, k, causal, sm_scale=None, key_lengths=None):
    """Each row's natural log-sum-exp of its scaled, masked scores, in float64 (-inf: no visible key)."""
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    Sq, Sk = s.shape[-2:]
    visible = torch.ones(Sq, Sk, dtype=torch.bool, device=s.device)
    if causal:
        visible = torch.tril(visible)
    visible = visible.expand(s.shape).clone()
    if key_lengths is not None:
        keys = torch.arange(Sk, device=s.device)
        visible &= (keys[None, :] < key_lengths[:, None].to(s.device))[:, None, None, :]
    return torch.logsumexp(s.masked_fill(~visible, -math.inf), dim=-1)


def check_forward(q, k, v, causal, sm_scale=None, key_lengths=None, clean_kv=None):
    """Run flash_tma into a poisoned out and check out and lse; `clean_kv`: the (k, v) the reference uses
    when k and v hold garbage past key_lengths (the reference would carry it: 0 * NaN in P @ V)."""
    out = poisoned(q.shape, q.dtype, DEVICE)
    got, lse = tma.flash_attention_tma_forward(q, k, v, causal, sm_scale, key_lengths=key_lengths, out=out)
    assert got is out, "the launcher must write into the `out` it was given"
    k, v = clean_kv or (k, v)
    want = an.attention_reference(q, k, v, causal, sm_scale, key_lengths=key_lengths)
    assert_within(got, want, an.attention_error_bounds(q, k, v, None, causal, sm_scale, key_lengths=key_lengths)["out"])
    # The log-sum-exp feeds the backward: fp32 sums of exp2 over Sk keys, scores from 16-bit inputs.
    want_lse = reference_lse(q, k, causal, sm_scale, key_lengths)
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:3]
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite) and (lse[~finite] == -math.inf).all()
    # error model: the fp32 score (D products of 16-bit values, each exact in fp32, summed: D * 2^-24
    # relative to sum |q||k| * scale) and the log of an fp32 sum of Sk terms (Sk * 2^-24 relative)
    scale = 1 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    magnitude = (q.double().abs() @ k.double().abs().transpose(-1, -2)).amax(-1) * scale
    bound = (q.shape[-1] + k.shape[2] + 8) * 2.0**-24 * (magnitude + want_lse.abs().where(finite, 0) + 1)
    assert_close((lse.double()[finite] - want_lse[finite]) / bound[finite], torch.zeros_like(bound[finite]),
                 rtol=0.0, atol=1.0, name="lse (in units of its error bound)")


@needs_tma
@pytest.mark.parametrize("dtype", dtype_params([torch.float16, torch.bfloat16]))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q, seq_k", SHAPES)
def test_matches_float64(dtype, causal, seq_q, seq_k):
    check_forward(*qkv(1, 2, seq_q, seq_k, 32, dtype), causal)


@needs_tma
@pytest.mark.parametrize("head_dim", sweep([16, 128], [64]))
def test_head_dims(head_dim):
    check_forward(*qkv(1, 1, 37, 29, head_dim, torch.float16), True)


@needs_tma
def test_explicit_scale_and_batches():
    # Several batches and heads: each tile's box is [1, 1, rows, D] at (b, h), so a tile past the end of
    # one head reads zeros, never the next head's rows.
    check_forward(*qkv(2, 3, 21, 19, 16, torch.float16), True, sm_scale=0.37)


@needs_tma
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_key_padding_with_garbage_and_empty_rows(causal):
    # Padding keys inside S are real memory here (TMA zero-fills only past S): NaN in their K and V
    # must not reach any output. key_lengths 0 makes every row of batch 1 empty: zeros, lse -inf.
    q, k, v = qkv(3, 2, 23, 23, 16, torch.float16)
    lengths = torch.tensor([17, 0, 23], device=DEVICE)
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 17:] = math.nan
    v2[0, :, 17:] = math.nan
    check_forward(q, k2, v2, causal, key_lengths=lengths, clean_kv=(k, v))
    out, lse = tma.flash_attention_tma_forward(q, k2, v2, causal, key_lengths=lengths)
    assert torch.equal(out[1], torch.zeros_like(out[1])) and (lse[1] == -math.inf).all()


@needs_tma
def test_transposed_layout_read_in_place():
    # (B, S, H, D) storage viewed as (B, H, S, D): the 4-D descriptors walk its strides, nothing is
    # copied, and the output goes out through its own (transposed) descriptor.
    B, S, H, D = 2, 27, 3, 16
    q, k, v = (random_tensor((B, S, H, D), torch.float16, DEVICE).transpose(1, 2) for _ in range(3))
    out = poisoned((B, S, H, D), torch.float16, DEVICE).transpose(1, 2)
    assert not q.is_contiguous() and tma.tma_eligible(q, k, v, out)
    tma.flash_attention_tma_forward(q, k, v, True, out=out)
    assert_within(out, an.attention_reference(q, k, v, True), an.attention_error_bounds(q, k, v, None, True)["out"])


@needs_tma
@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_nan_propagates_like_sdpa(where):
    q, k, v = qkv(1, 2, 12, 12, 16, torch.float16)
    bound = an.attention_error_bounds(q, k, v)["out"]
    {"q": q, "k": k, "v": v}[where][0, 1, 5, 3] = math.nan
    got, _ = tma.flash_attention_tma_forward(q, k, v)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert_within(got, want, bound)


@needs_tma
def test_large_scores_stay_finite():
    q, k, v = qkv(1, 1, 35, 35, 16, torch.float32)
    q, k, v = (q + 30.0).half(), (k + 30.0).half(), v.half()
    check_forward(q, k, v, True)


@needs_tma
def test_empty_inputs():
    for B, Sq, Sk in ((0, 4, 4), (1, 0, 4)):
        q, k, v = qkv(B, 2, Sq, Sk, 16, torch.float16)
        out, lse = tma.flash_attention_tma_forward(q, k, v)
        assert out.shape == (B, 2, Sq, 16) and lse.shape == (B, 2, Sq)
    q, k, v = qkv(1, 2, 5, 0, 16, torch.float16)  # no keys: zeros, like SDPA
    out, lse = tma.flash_attention_tma_forward(q, k, v, out=poisoned((1, 2, 5, 16), torch.float16, DEVICE))
    assert torch.equal(out, torch.zeros_like(out)) and (lse == -math.inf).all()


def test_refuses_what_tma_cannot_run_and_flash_blocked_takes_it(monkeypatch):
    # fp32 (TMA here is the 16-bit tensor-core path), strides TMA cannot walk, a GPU older than sm_90:
    # each refused before any launch, saying why and which rung to use; that rung's entry
    # (flash_attention_forward, which runs flash_tma itself where the rule says so) gets the right answer.
    fa = attention_op()
    q, k, v = qkv(1, 2, 19, 19, 16, torch.float32)
    assert not tma.tma_eligible(q, k, v)
    with pytest.raises(TypeError, match=r"fp16 or bf16.*flash_blocked rung takes fp32"):
        tma.flash_attention_tma_forward(q, k, v, True)
    with pytest.raises(TypeError, match=r'flash_attention\(rung="flash_tma"\) takes fp16 or bf16'):
        fa.flash_attention(q, k, v, True, rung="flash_tma")
    out, _ = fa.flash_attention_forward(q, k, v, True)
    assert_within(out, an.attention_reference(q, k, v, True), an.attention_error_bounds(q, k, v, None, True)["out"])
    # A head dim slice of a wider buffer one element in: neither the row stride (17 elements) nor the
    # base address is a multiple of 16 bytes.
    base = random_tensor((1, 2, 19, 17), torch.float16, DEVICE)
    q = base[..., 1:]
    assert not tma.tma_eligible(q, q, q)
    with pytest.raises(ValueError, match=r"q has strides \(646, 323, 17, 1\).*16 bytes"):
        tma.flash_attention_tma_forward(q, q, q)
    with pytest.raises(ValueError, match=r"q has strides \(646, 323, 17, 1\).*16 bytes"):
        fa.flash_attention_forward(q, q, q, rung="flash_tma")
    out, _ = fa.flash_attention_forward(q, q, q)
    assert_within(out, an.attention_reference(q, q, q, False), an.attention_error_bounds(q, q, q)["out"])
    q, k, v = qkv(1, 2, 19, 19, 16, torch.float16)
    monkeypatch.setattr(runtime, "capability", lambda device=None: (8, 0))  # an A100: no TMA engine
    with pytest.raises(RuntimeError, match=r"compute capability >= 9.0.*is 8.0.*flash_blocked"):
        tma.flash_attention_tma_forward(q, k, v)
    assert not tma.tma_eligible(q, k, v)  # so the op keeps flash_blocked on such a GPU


def test_the_op_names_its_rungs_by_what_they_are():
    fa = attention_op()
    q, k, v = qkv(1, 2, 8, 8, 16, torch.float16)
    with pytest.raises(ValueError, match=r"rung must be one of 'flash_blocked', 'flash_tma', 'flash_hopper', got 'rung4'"):
        fa.flash_attention(q, k, v, rung="rung4")
    with pytest.raises(ValueError, match=r"config BLOCK_M must be a power of two"):
        fa.flash_attention(q, k, v, rung="flash_blocked", tile={"BLOCK_M": 24, "BLOCK_N": 16})


def test_rejects_bad_input_before_launch():
    ok = torch.ones(1, 2, 8, 16, dtype=torch.float16, device=DEVICE)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        tma.flash_attention_tma_forward([[1.0]], ok, ok)
    with pytest.raises(ValueError, match="head dimension"):
        bad = torch.ones(1, 2, 8, 96, dtype=torch.float16, device=DEVICE)
        tma.flash_attention_tma_forward(bad, bad, bad)
    with pytest.raises(ValueError, match="out has shape"):
        tma.flash_attention_tma_forward(ok, ok, ok, out=torch.ones(1, 2, 7, 16, dtype=torch.float16, device=DEVICE))


@needs_tma
def test_the_op_runs_flash_tma_by_name_forward_and_backward(monkeypatch):
    # flash_attention (the op a model calls) with rung="flash_tma" sends its forward to the TMA kernel
    # (watched, not steered: the spy counts calls) with the tile asked for, and the backward still gets
    # a correct log-sum-exp from it. Where the rule sends it unasked: test_the_dispatch_rule.
    fa = attention_op()
    calls = []
    real = fa.forwards["flash_tma"]
    monkeypatch.setitem(fa.forwards, "flash_tma",
                        real._replace(launch=lambda *a, **kw: calls.append(a[6]) or real.launch(*a, **kw)))
    dtype = runtime.pick(gpu=torch.bfloat16, sim=torch.float16)
    tile = runtime.pick(gpu={"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2},
                        sim={"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2})
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, runtime.pick(gpu=150, sim=37), runtime.pick(gpu=150, sim=37), 64,
                                                 dtype))
    out = fa.flash_attention(q, k, v, True, rung="flash_tma", tile=tile)
    assert calls == [tile]
    do = random_tensor(out.shape, out.dtype, DEVICE)
    grads = torch.autograd.grad(out, (q, k, v), do)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(an.attention_reference(qd, kd, vd, True), (qd, kd, vd), do.double())
    bounds = an.attention_error_bounds(q, k, v, do, True)
    for name, got, ref in zip(("dq", "dk", "dv"), grads, want):
        assert_within(got, ref, bounds[name], name)


def test_the_dispatch_rule():
    # The rule (attention/dispatch.py) on this machine, asked without launching anything: the committed
    # table's rung with its tile (flash_tma) or build (flash_hopper) where the table was measured on this
    # GPU and the problem is large enough; flash_blocked below MIN_TMA_SCORES, for fp32, in the interpreter,
    # on another GPU. Rows keyed (head dim, causal, band) or, written before the bands, (head dim, causal).
    from week4_triton_dl.attention import dispatch, hopper

    record = dispatch.TABLE.record()
    assert record is not None, "results/dispatch_attention.json: the sweep's table is committed"
    for row in record["rows"]:  # the table names rungs by what they are, and a flash_tma row its tile
        assert row["rung"] in dispatch.RUNGS, row
        measured = row["measured"]  # the fastest forward (a Hopper build too), where it beats flash_blocked by the margin
        builds = measured.get("flash_hopper_builds") or (
            {"default": {"ms": measured["flash_hopper_ms"]}} if "flash_hopper_ms" in measured else {})
        times = {("flash_tma", None): measured["flash_tma_ms"],
                 **{("flash_hopper", label): build["ms"] for label, build in builds.items()}}
        fastest = min(times, key=times.get)
        named = (row["rung"], hopper.build_label(row.get("build")) if row["rung"] == "flash_hopper" else None)
        assert named == (fastest if measured["flash_blocked_ms"] / times[fastest] >= dispatch.MARGIN
                         else ("flash_blocked", None)), row
        assert (row["tile"] is not None) == (row["rung"] == "flash_tma"), row
        assert "build" not in row or row["rung"] == "flash_hopper", row
    measured_here = runtime.on_gpu() and record["machine"]["gpu"] == runtime.describe()["gpu"]
    seqs = {dispatch.seq_band(1024): 1024, dispatch.seq_band(16384): 16384}
    for row in record["rows"]:
        head_dim, causal, *band = row["key"]
        for seq in ([seqs[band[0]]] if band else seqs.values()):  # a row without a band applies at every S
            big = qkv(1, max(1, 4096 // seq), seq, seq, head_dim, torch.bfloat16)  # >= 2^22 scores: MIN_TMA_SCORES
            eligible = dispatch.FORWARDS[row["rung"]].eligible(*big)
            setting = row["tile"] if row["rung"] != "flash_hopper" or "build" not in row else \
                {**dict.fromkeys(hopper.BUILD_FLAGS, False), **row["build"]}
            want = (row["rung"], setting) if measured_here and eligible else ("flash_blocked", None)
            assert dispatch.choose(*big, causal) == want, (row["key"], seq)
            small = qkv(1, 4, 512, 1024, head_dim, torch.bfloat16)  # host-paced: under MIN_TMA_SCORES
            assert dispatch.choose(*small, causal) == ("flash_blocked", None)
    assert dispatch.choose(*qkv(1, 4, 1024, 1024, 128, torch.float32), False) == ("flash_blocked", None)


def test_a_padded_call_runs_the_rules_choice_with_its_key_lengths(monkeypatch):
    # Every rung masks padding keys (flash_hopper too, in its kernel): where the rule names flash_hopper, a call
    # with key_lengths runs it as one without does, and the lengths reach its launcher.
    from course.dispatch import Choice
    from week4_triton_dl.attention import dispatch

    ran = []
    everywhere = lambda *args, **kwargs: True  # noqa: E731
    forwards = {"flash_blocked": dispatch.Rung(lambda *args: ran.append(("flash_blocked", args[5])), everywhere,
                                               everywhere),
                "flash_hopper": dispatch.Rung(lambda *args: ran.append(("flash_hopper", args[5])), everywhere,
                                              everywhere)}
    monkeypatch.setattr(dispatch, "choose", lambda *args, **kwargs: Choice("flash_hopper"))
    q, k, v = qkv(2, 1, 8, 8, 64, torch.float16)
    lengths = torch.tensor([8, 5])
    dispatch.forward(q, k, v, False, 0.125, lengths, forwards=forwards)
    dispatch.forward(q, k, v, False, 0.125, None, forwards=forwards)
    assert ran == [("flash_hopper", lengths), ("flash_hopper", None)]
