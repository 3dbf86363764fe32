"""capstone.attention_ops: fast with its attention forced (SDPA, week 4's Triton, week 4's CUDA C Hopper kernels).

Without an H100 the Hopper kernels are replaced by stand-ins that keep their contracts (dense 16-bit
(B, H, S, D) tensors, week 4's own checks) and compute in float64 from the same bf16 inputs, then round
once, as the kernels' fp32 accumulators nearly do (tests/week4/hopper_stand_ins.py). That tests what the
capstone adds: the adapter's layout and dtype handling, the fallbacks, the compiled step through week 4's
op pair (forward and backward ops), and the whole model's loss and gradients against fast's. The GPU-marked tests run the kernels themselves.

Error model. Rounding a float64 value to bf16 moves it by at most 2^-9 of itself, so the adapter's
output and gradients are within 2^-8 of the float64 reference element-wise (a wrong layout, a swapped
k and v or a lost causal mask moves them by O(1)). The model against fast (week 4's Triton attention,
which rounds P to bf16 before P V and dS before dS K): both run the same bf16 autocast model and differ
only inside attention: per layer, o and dq, dk, dv each differ by a few bf16 roundings (2^-9 relative),
carried by the next layers with gain ~1 (residual branches, N(0, 0.02) weights). Two layers, four such
tensors each: at most ~8 x 2 x 2^-9 = 2^-5 of a tensor's norm if every rounding adds up; the bound is
2^-4 per tensor and 2^-8 of the loss (wgmma_gemms' bounds, tests/capstone/test_model.py, whose sites
are of the same kind). A wrong scale or mask moves them by O(1).
"""
import dataclasses
import re

import pytest
import torch
import torch.nn.functional as F

from capstone import attention_ops as ao
from capstone import model as cm
from capstone.train import Trainer
from course import runtime
from tests.week4 import hopper_stand_ins
from week4_triton_dl.attention import dispatch, flash_attention
from week4_triton_dl.attention import hopper as hp
from week5_integration import kernels
from week5_integration import model as m
from week5_integration.train import TrainConfig

DEVICE = runtime.DEVICE
HOPPER_WHY = ao.unsupported()
CONFIG = cm.preset("tiny", n_heads=1)  # head dim 64: one the Hopper kernels take (tiny's 32 is not)
REL_ELEMENT, REL_NORM, REL_LOSS = 2.0**-8, 2.0**-4, 2.0**-8


@pytest.fixture
def stand_ins(monkeypatch):
    """The Hopper kernels replaced (forward launch, backward), this machine taken for an H100 by week 4's
    device check (tests/week4/hopper_stand_ins.py); returns the backward's stand-in (its call count)."""
    return hopper_stand_ins.install(monkeypatch)


def model_qkv(B=2, H=2, T=40, D=64, dtype=torch.bfloat16, seed=0):
    """q, k, v as the model passes them: (B, H, T, D) views of one (B, T, 3 H D) projection (v not dense)."""
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(B, T, 3 * H * D, generator=gen).to(device=DEVICE, dtype=dtype).requires_grad_()
    q, k, v = qkv.view(B, T, 3, H, D).unbind(2)
    return qkv, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def float64_reference(q, k, v, do):
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    o = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
    return (o, *torch.autograd.grad(o, (qd, kd, vd), do.double()))


def assert_within_rounding(got, want, name):
    err = (got.double() - want).abs() - REL_ELEMENT * want.abs()
    assert bool((err <= 1e-30).all()), f"{name}: {float(err.max()):.3g} past 2^-8 relative"


# ---------------------------------------------------------------------------------------------- the ops
def test_attention_ops_are_fast_with_only_the_attention_changed():
    fast = cm.fast_ops()
    want = {"sdpa_attention": m.torch_attention, "triton_attention": ao.triton_attention,
            "hopper_attention": ao.hopper_attention}
    assert set(cm.ATTENTION_OPS) == set(want) and set(cm.ATTENTION_OPS) <= set(cm.OPS_NAMES)
    for name, attention in want.items():
        ops = cm.resolve_ops(name)
        assert ops.name == name and ops.attention is attention
        for field in dataclasses.fields(m.Ops):
            if field.name not in ("name", "attention"):
                assert getattr(ops, field.name) is getattr(fast, field.name), (name, field.name)
    with pytest.raises(ValueError, match="kind must be one of"):
        ao.attention_ops(fast, "cudnn")


@pytest.mark.parametrize("capability, on_gpu, missing, want", [
    (None, False, None, "no GPU"), ((8, 0), True, None, r"compute capability 8\.0"),
    ((12, 0), True, None, r"compute capability 12\.0"), ((9, 0), True, "ninja is not installed", "ninja"),
    ((9, 0), True, None, None)])
def test_hopper_attention_says_why_it_cannot_run(capability, on_gpu, missing, want, monkeypatch):
    """The reason names sm_90a and the fallback (week 4's Triton attention), the repo's refusal pattern."""
    monkeypatch.setattr(runtime, "on_gpu", lambda: on_gpu)
    monkeypatch.setattr(runtime, "capability", lambda device=None: capability)
    monkeypatch.setattr(hp, "toolchain_missing", lambda: missing)
    why = ao.unsupported()
    if want is None:
        assert why is None
        return
    assert re.search(want, why) and "week4_triton_dl.attention.flash_attention" in why, why
    assert "sm_90a" in why, why


# ------------------------------------------------------------------------------------ the Hopper adapter
def test_hopper_adapter_on_the_models_views_matches_float64(stand_ins):
    """Eager: week 4's op (forward and its autograd's backward) on the model's strided views, made dense."""
    _, q, k, v = model_qkv()
    out = ao.hopper_attention(q, k, v, True)
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(DEVICE, torch.bfloat16)
    grads = torch.autograd.grad(out, (q, k, v), do)
    want = float64_reference(q, k, v, do)
    for name, a, b in zip(("o", "dq", "dk", "dv"), (out, *grads), want):
        assert a.dtype == torch.bfloat16 and a.shape == b.shape, name
        assert_within_rounding(a, b, name)
    assert stand_ins.calls == 1


def test_hopper_adapter_compiles_with_its_backward(stand_ins):
    """Under torch.compile the adapter runs week 4's op pair: AOTAutograd traces the backward as one opaque
    node, course_attention_hopper::backward (whose Python reads data pointers only at run time). Same bits
    as eager: the same stand-ins run either way."""
    torch._dynamo.reset()
    qkv, q, _, _ = model_qkv(seed=2)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(3)).to(DEVICE, torch.bfloat16)

    def loss(qkv_):
        B, T, _ = qkv_.shape
        q_, k_, v_ = (t.transpose(1, 2) for t in qkv_.view(B, T, 3, 2, 64).unbind(2))
        return (ao.hopper_attention(q_, k_, v_, True).float() * do.float()).sum()

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    eager_grad = torch.autograd.grad(loss(qkv), qkv)[0]
    got = compiled(qkv)
    compiled_grad = torch.autograd.grad(got, qkv)[0]
    assert torch.equal(got, loss(qkv)) and torch.equal(compiled_grad, eager_grad)
    assert stand_ins.calls == 2  # the eager backward, then the compiled one: the kernels ran both times


def test_hopper_adapter_refuses_bad_input_before_any_launch(monkeypatch):
    monkeypatch.setattr(hp, "launch", lambda *a, **k: pytest.fail("launched"))
    monkeypatch.setattr(hp, "device_refusal", lambda device: None)
    _, q, k, v = model_qkv(dtype=torch.float32)
    with pytest.raises(TypeError, match="float16/bfloat16.*autocast"):
        ao.hopper_attention(q, k, v, True)  # fp32 with autocast off: the kernels have no fp32 path
    _, q, k, v = model_qkv(D=32)
    with pytest.raises(ValueError, match="head dimension D = 32"):
        ao.hopper_attention(q, k, v, True)


def test_hopper_adapter_refuses_this_machine_naming_the_fallback():
    """No stand-in: off an sm_90 GPU week 4's op refuses before any launch, naming the Triton attention."""
    if HOPPER_WHY is None:
        pytest.skip("this machine runs the Hopper kernels")
    _, q, k, v = model_qkv()
    with pytest.raises(runtime.NotOnThisGpu, match=re.escape(hp.FALLBACK)):
        ao.hopper_attention(q, k, v, True)


def test_kv_cache_calls_go_to_fasts_attention_counted(monkeypatch):
    """Tq != Tk (the KV cache): the kernels' causal mask is top-left aligned, so fast's attention takes the
    call (which hands it to SDPA and counts it); nothing is launched in the Hopper kernels' name."""
    monkeypatch.setattr(hp, "launch", lambda *a, **k: pytest.fail("launched"))
    kernels.reset_fallbacks()
    q = torch.randn(1, 2, 1, 64, device=DEVICE, dtype=torch.bfloat16)
    k = v = torch.randn(1, 2, 9, 64, device=DEVICE, dtype=torch.bfloat16)
    for attention in (ao.hopper_attention, ao.triton_attention):
        assert torch.equal(attention(q, k, v, True), m.torch_attention(q, k, v, True))
    assert sum(n for (op, _), n in kernels.FALLBACKS.items() if op == "attention") == 2


def test_triton_attention_forces_flash_blocked(monkeypatch):
    """The forced Triton attention names the rung; here (no GPU) the rule picks the same, so the same bits."""
    asked = []
    resolve = dispatch.resolve
    monkeypatch.setattr(dispatch, "resolve", lambda rung, *a, **k: asked.append(rung) or resolve(rung, *a, **k))
    _, q, k, v = model_qkv(dtype=torch.float32, T=24, D=32)
    got = ao.triton_attention(q, k, v, True)
    assert asked == ["flash_blocked"]
    assert torch.equal(got, flash_attention(q, k, v, causal=True))


# ------------------------------------------------------------------------------------------ the model
def bf16_loss_and_grads(model, x, y):
    model.zero_grad(set_to_none=True)
    with torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16):
        loss = model.loss(x, y)
    loss.backward()
    return loss.detach().float(), {n: p.grad.float() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kernel", ["stand-in", pytest.param("hopper", marks=pytest.mark.gpu(
    reason="launches week 4's sm_90a attention kernels"))])
def test_hopper_attention_model_matches_fast_under_bf16(kernel, request):
    """The whole model with the Hopper attention against fast (week 4's Triton attention), same weights, bf16
    autocast: the loss and every gradient (the error model above)."""
    if kernel == "hopper" and HOPPER_WHY:
        pytest.skip(HOPPER_WHY)
    if kernel == "stand-in":
        request.getfixturevalue("stand_ins")
    model, fast = cm.build(CONFIG, "hopper_attention", seed=3), cm.build(CONFIG, "fast", seed=3)
    gen = torch.Generator().manual_seed(1)
    x, y = (torch.randint(0, CONFIG.vocab_size, (2, 32), generator=gen).to(DEVICE) for _ in range(2))
    (got, got_grads), (want, want_grads) = bf16_loss_and_grads(model, x, y), bf16_loss_and_grads(fast, x, y)
    assert abs(float(got) - float(want)) <= REL_LOSS * abs(float(want)), (got, want)
    for name in want_grads:
        a, b = got_grads[name], want_grads[name]
        assert bool(torch.isfinite(a).all()), name
        err = float((a - b).norm() / b.norm())
        assert err <= REL_NORM, f"grad of {name}: relative error {err:.4f} > {REL_NORM}"


@pytest.mark.gpu(reason="CUDA graphs and week 4's sm_90a attention kernels")
def test_hopper_attention_cuda_graph_step_matches_eager():
    """hopper_attention+compile+cudagraphs as capstone.measure runs it: the compiled op pair replayed in CUDA
    graphs follows the eager step (bf16: tests/capstone/test_train.py's bounds for the same comparison)."""
    if HOPPER_WHY:
        pytest.skip(HOPPER_WHY)
    tc = TrainConfig(steps=6, batch=2, seq_len=32, warmup=2, corpus_bytes=1 << 14)
    runs = []
    for compile in (False, "reduce-overhead"):
        trainer = Trainer(CONFIG, tc, ops="hopper_attention", compile=compile)
        runs.append((trainer.run(), trainer.parameters_flat()))
    (eager, eager_params), (graphed, graphed_params) = runs
    # A shared loss tensor would show the last step's value at every step of a flush group (six steps: one
    # group). Two honest steps may log the same value, though: the loss is bf16 (1/32 apart near 5) and moves
    # ~0.1 a step (an H100 run logged 5 distinct of 6), so the check is "not one value", then step by step.
    assert len({r["loss"] for r in graphed}) > 1, "every step must log its own loss, not the last step's"
    for a, b in zip(eager, graphed):
        assert abs(a["loss"] - b["loss"]) <= 2e-2 * abs(a["loss"]), (a, b)
    assert (graphed_params - eager_params).abs().max() <= 1e-2 * eager_params.abs().max()


# ------------------------------------------------------------------------------------ which attention ran
def test_describe_names_the_attention_each_model_runs(monkeypatch):
    shape, dtype = (2, 2, 32, 64), torch.float32
    assert ao.describe(ao.hopper_attention, shape, dtype) == "CUDA C flash_hopper fwd + bwd: forced"
    assert ao.describe(ao.triton_attention, shape, dtype) == "Triton flash_blocked: forced"
    assert ao.describe(m.torch_attention, shape, dtype).startswith("SDPA ")
    assert ao.describe(kernels.course_attention, shape, dtype) == "Triton flash_blocked: dispatch rule"
    # fast's label is the dispatch's own answer: were the table to name the Hopper forward, the label says so
    monkeypatch.setattr(dispatch, "choose", lambda *a, **k: dispatch.Choice("flash_hopper"))
    assert ao.describe(kernels.course_attention, shape, dtype) == "CUDA C flash_hopper fwd, Triton bwd: dispatch rule"
    overlap = {"overlap": True, "persistent": False}  # a table row naming a build: the label names it
    monkeypatch.setattr(dispatch, "choose", lambda *a, **k: dispatch.Choice("flash_hopper", overlap))
    assert ao.describe(kernels.course_attention, shape, dtype) == \
        "CUDA C flash_hopper (overlap) fwd, Triton bwd: dispatch rule"
