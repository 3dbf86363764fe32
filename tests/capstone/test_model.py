"""capstone.model: the fast model (course kernels) is the reference twin, up to float32 rounding.

Error model: both models compute in float32 from the same weights. The course kernels reorder
reductions (RMSNorm over d = 64, attention's online softmax over T = 32 keys, the chunked loss
over V = 256 classes, dW over B x T rows), each a few float32 roundings (2^-24 ~ 6e-8) of the
magnitudes summed; two layers of forward and backward compound that to ~1e-6 of a tensor's
largest value. The tolerances below (1e-4 relative plus 1e-5 of the largest magnitude, the
bound week 5's swap tests use) keep a 10x margin and are 100x under a real bug (a wrong eps
moves these N(0, 0.02) activations by ~1e-2; a wrong mask or a dropped term by O(1)).
"""
import dataclasses
import inspect
import re

import pytest
import torch

from course import runtime
from course.check import assert_close
from capstone import model as cm
from capstone import wgmma_ops
from capstone.train import Trainer
from week1_cuda_python import matmul_wgmma_fused as wf
from week5_integration.train import TrainConfig

DEVICE = runtime.DEVICE
RTOL, ATOL_OF_MAX = 1e-4, 1e-5


def close(got, want, name):
    assert_close(got, want, rtol=RTOL, atol=ATOL_OF_MAX * float(want.detach().abs().max()) + 1e-30, name=name)


@pytest.fixture(scope="module")
def twins():
    fast = cm.build("tiny", "fast", seed=3)
    return fast, cm.reference_twin(fast)


def batch(cfg, b=2, t=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    t = t or cfg.max_seq_len
    x = torch.randint(0, cfg.vocab_size, (b, t), generator=gen)
    y = torch.randint(0, cfg.vocab_size, (b, t), generator=gen)
    return x.to(DEVICE), y.to(DEVICE)


def test_presets_and_the_headline_size():
    assert cm.count_parameters("gpt2_124m") == pytest.approx(124e6, rel=0.01)
    big = cm.preset("gpt2_124m")
    assert (big.n_layers, big.d_model, big.n_heads, big.max_seq_len) == (12, 768, 12, 1024)
    assert big.vocab_size % 64 == 0 and big.vocab_size >= 50257  # GPT-2's vocabulary, padded
    for name in cm.PRESETS:  # every preset reads the byte corpus
        assert cm.preset(name).vocab_size >= 256


def test_twin_has_the_same_weights_and_only_torch_ops(twins):
    fast, ref = twins
    assert fast.ops.name == "fast" and ref.ops.name == "reference"
    assert fast.state_dict().keys() == ref.state_dict().keys()
    for (name, a), b in zip(fast.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), name
    assert ref.head.weight is ref.tok.weight  # tying survives the copy
    assert all(f.__module__ == "week5_integration.model" for f in
               (ref.ops.norm, ref.ops.rope, ref.ops.attention, ref.ops.swiglu, ref.ops.linear_cross_entropy))


def test_ladder_adds_one_group_at_a_time():
    rungs = cm.ladder()
    assert [r.name for r in rungs] == ["eager", "+flash_attention", "+fused_norm_rope_swiglu", "+fused_ce",
                                       "+swiglu_gemm", "+residual_gemm", "+norm_gemm"]
    full, torch_ops = cm.fused_gemm_ops(), cm.TORCH_OPS
    fields = [f.name for f in dataclasses.fields(torch_ops) if f.name != "name"]
    swapped = [{f for f in fields if getattr(r, f) is getattr(full, f) and getattr(full, f) is not getattr(torch_ops, f)}
               for r in rungs]
    # "add_norm": the residual add fused with the norm after it, the norm kernel's second form
    fast = {"attention", "norm", "add_norm", "rope", "swiglu", "linear_cross_entropy"}
    assert swapped == [set(), {"attention"}, {"attention", "norm", "add_norm", "rope", "swiglu"}, fast,
                       fast | {"linear_swiglu"}, fast | {"linear_swiglu", "linear_residual"},
                       fast | {"linear_swiglu", "linear_residual", "norm_linear"}]
    # `fast` is the +fused_ce rung (the ops a swiglu model calls): the fused GEMMs come after it
    assert all(getattr(rungs[3], f) is getattr(cm.fast_ops(), f) for f in fast)


def test_logits_match(twins):
    fast, ref = twins
    x, _ = batch(fast.cfg, b=2, t=fast.cfg.max_seq_len)
    with torch.no_grad():
        got, want = fast(x), ref(x)
    assert got.shape == (2, fast.cfg.max_seq_len, fast.cfg.vocab_size) and bool(torch.isfinite(got).all())
    close(got, want, "logits")


def test_loss_and_every_gradient_match(twins):
    fast, ref = twins
    # >= 2 layers: the fast model defers block 0's last residual add into block 1's norm1, and the
    # last block's into norm_f (add_norm); the twin adds where a torch model does
    assert fast.cfg.n_layers >= 2 and fast.ops.add_norm is not None and ref.ops.add_norm is None
    x, y = batch(fast.cfg, b=2, t=24, seed=1)  # 24: not a multiple of the 16/32-row tiles
    for model in (fast, ref):
        model.zero_grad(set_to_none=True)
    want = ref.loss(x, y)
    want.backward()
    got = fast.loss(x, y)
    got.backward()
    close(got.detach(), want.detach(), "loss")
    for (name, p), q in zip(ref.named_parameters(), fast.parameters()):
        assert q.grad is not None and p.grad is not None, name
        close(q.grad, p.grad, f"grad of {name}")


@pytest.mark.parametrize("rung", ["+swiglu_gemm", "+residual_gemm", "+norm_gemm"])
def test_fused_gemm_rungs_match_the_twin(rung):
    """Each rung past `fast` (issue 32's fused GEMMs): loss, logits and every gradient as the twin's.
    Same error model: the fused GEMMs reorder nothing but the K sums of the matmuls they replace."""
    ops = next(r for r in cm.ladder() if r.name == rung)
    model = cm.build("tiny", ops, seed=3)
    ref = cm.reference_twin(model)
    x, y = batch(model.cfg, b=2, t=24, seed=1)
    want = ref.loss(x, y)
    want.backward()
    got = model.loss(x, y)
    got.backward()
    close(got.detach(), want.detach(), "loss")
    for (name, p), q in zip(ref.named_parameters(), model.parameters()):
        assert q.grad is not None and p.grad is not None, name
        close(q.grad, p.grad, f"grad of {name}")
    with torch.no_grad():
        close(model(x), ref(x), "logits")


# Error model of the fused GEMMs against `fast` under bf16 autocast (the GPU's step; the test above is
# float32's, where the autocast casts never run). Same weights, same kernels but the GEMMs: the fused model
# rounds differently at two kinds of site, each one bf16 rounding (2^-9 relative) of a tensor the next
# layers carry with gain ~1: SwiGLU from the fp32 accumulator (fast rounds [g | u] to bf16 first), once a
# layer, and the residual add of the unrounded product (fast adds the bf16 GEMM output), twice a layer;
# the backward rounds at as many sites again. So at most 2 x 3 L x 2^-9 = 0.023 (L = 2) of a tensor's norm
# even if every rounding adds up (seen on the CPU: <= 0.0053, fast vs the eager twin 0.0057): bound 2^-5
# per tensor. The loss: 2^-8 of it (both round it to bf16). What this test is for: the autocast path
# (the casts the float32 test never runs; a lost residual or a gradient cast to the wrong tensor is O(1)).
# Small math errors are the float32 test's: at this init silu(g) u ~ g u / 2 is nearly symmetric, so even
# swapping gate and up moves the bf16 gradients by only ~0.03 (caught, barely), a residual scaled by
# 1 + 2^-6 by ~0.03 (caught). The residual stream must stay fp32 through the fused adds (week 4's
# epilogue writes the residual's dtype): rounded to bf16 at each add it moves the gradients by ~0.008,
# under any honest norm bound, so the test reads the stream's dtype at every block's output.
REL_NORM_FUSED, REL_LOSS_FUSED = 2.0**-5, 2.0**-8


@pytest.mark.parametrize("rung", ["+swiglu_gemm", "+residual_gemm", "+norm_gemm"])
def test_fused_gemm_rungs_match_fast_under_bf16(rung):
    """Each rung past `fast` against fast under bf16 autocast: loss, logits, every gradient, and the
    residual stream's dtype at every block's output (fp32, as fast's and the twin's)."""
    ops = next(r for r in cm.ladder() if r.name == rung)
    model, base = cm.build("tiny", ops, seed=3), cm.build("tiny", "fast", seed=3)
    x, y = batch(model.cfg, b=2, t=24, seed=1)
    stream = []
    hooks = [b.register_forward_hook(lambda _m, _i, out: stream.append(out[0].dtype)) for b in model.blocks]
    try:
        got = bf16_loss_and_grads(model, x, y)
    finally:
        for h in hooks:
            h.remove()
    want = bf16_loss_and_grads(base, x, y)
    assert stream and set(stream) == {torch.float32}, f"residual stream dtypes {stream}"
    assert abs(float(got[0]) - float(want[0])) <= REL_LOSS_FUSED * abs(float(want[0])), (got[0], want[0])
    for name, a, b in [("logits", got[1], want[1])] + [(f"grad of {n}", got[2][n], want[2][n]) for n in want[2]]:
        assert bool(torch.isfinite(a).all()), name
        err = float((a - b).norm() / b.norm())
        assert err <= REL_NORM_FUSED, f"{name}: relative error {err:.4f} > {REL_NORM_FUSED}"


# --- wgmma_gemms: week 1's CUDA C fused GEMMs (capstone/wgmma_ops.py) -------------------------------
WGMMA_WHY = wgmma_ops.unsupported()


def test_wgmma_gemms_is_fast_with_week1s_swiglu_and_residual_gemms():
    ops, fast = cm.resolve_ops("wgmma_gemms"), cm.fast_ops()
    assert ops.name == "wgmma_gemms" and "wgmma_gemms" in cm.OPS_NAMES
    assert ops.linear_swiglu is wgmma_ops.linear_swiglu and ops.linear_residual is wgmma_ops.linear_residual
    assert ops.norm_linear is None  # week 1 has no norm prologue (and week 4's would take the up GEMM)
    for f in ("attention", "rope", "swiglu", "linear_cross_entropy", "add_norm"):
        assert getattr(ops, f) is getattr(fast, f), f
    assert ops.norm.__name__ == f"{fast.norm.__name__}_in_stream_dtype"
    # the adapters call week 1's ops (the registered course::wgmma_linear_* ops), not week 4's
    assert "wf.linear_swiglu(" in inspect.getsource(wgmma_ops.linear_swiglu)
    assert "wf.linear_residual(" in inspect.getsource(wgmma_ops.linear_residual)
    # a sibling of the ladder, not a rung of it: the ladder is unchanged
    assert "wgmma_gemms" not in [r.name for r in cm.ladder()]


@pytest.mark.parametrize("capability, on_gpu, nvcc, want", [
    (None, False, "nvcc", "no GPU"), ((8, 0), True, "nvcc", r"compute capability 8\.0"),
    ((9, 0), True, None, "nvcc"), ((9, 0), True, "nvcc", None)])
def test_wgmma_gemms_say_why_they_cannot_run(capability, on_gpu, nvcc, want, monkeypatch):
    monkeypatch.setattr(runtime, "on_gpu", lambda: on_gpu)
    monkeypatch.setattr(runtime, "capability", lambda device=None: capability)
    monkeypatch.setattr(runtime, "nvcc_path", lambda: nvcc)
    why = wgmma_ops.unsupported()
    assert (why is None) if want is None else re.search(want, why), why


def week1_stand_in(x, w, epilogue="none", extra=None, out=None, blocks=None):
    """week 1's launch_fused without the GPU: its own checks (2-D, fp16/bf16, shapes, dtypes, the TMA's
    alignment), then C = epilogue(x @ w.T) accumulated in fp32 and rounded once, as the kernel does."""
    out, *_ = wf._checked(x, w, epilogue, extra, out)
    return out.copy_(wf.reference(x.float(), w.float(), epilogue, None if extra is None else extra.float()))


def bf16_loss_and_grads(model, x, y):
    model.zero_grad(set_to_none=True)
    with torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16):
        loss = model.loss(x, y)
        with torch.no_grad():
            logits = model(x).float()
    loss.backward()
    return loss.detach().float(), logits, {n: p.grad.float() for n, p in model.named_parameters()}


# Error model (both models under bf16 autocast, same fp32 weights). They differ by where bf16 rounding
# happens: the wgmma model's residual stream is rounded to bf16 at each of the 2 L = 4 adds (the base
# keeps it fp32), its SwiGLU reads the fp32 accumulator (the base rounds [g | u] to bf16 first), and its
# stream's gradient is summed in bf16. Each is one rounding, 2^-9 relative, of a tensor that the next
# layers carry with gain ~1 (residual branches, N(0, 0.02) weights): about ten such sites, so at most
# ~10 x 2^-9 = 2^-5.7 of a tensor's norm even if they all add up (seen: <= 0.008 on the CPU). Bound:
# 2^-4 (0.0625) of the base's norm, per tensor (logits, every gradient), and 2^-8 of the loss; a wrong
# layout (gate and up swapped), a lost residual or a wrong cast moves them by O(1).
REL_NORM, REL_LOSS = 2.0**-4, 2.0**-8


@pytest.mark.parametrize("base, kernel", [
    ("reference", "stand-in"), ("fast", "stand-in"),
    pytest.param("fast", "wgmma", marks=pytest.mark.gpu(reason="launches week 1's sm_90a kernels"))])
def test_wgmma_gemms_model_matches_its_base_under_bf16(base, kernel, monkeypatch):
    """The wgmma model (base's ops + wgmma_ops' adapters) against the base model, same weights, bf16
    autocast: loss, logits and every gradient. `stand-in`: week 1's launch replaced by its checks and a
    torch GEMM (the adapters, the [W_g; W_u] layout, the bf16 stream, the ops' backward: anywhere);
    `wgmma`: the sm_90a kernels themselves."""
    if kernel == "wgmma" and WGMMA_WHY:
        pytest.skip(WGMMA_WHY)
    if kernel == "stand-in":
        monkeypatch.setattr(wf, "launch_fused", week1_stand_in)
    base_ops = cm.resolve_ops(base)
    model = cm.build("tiny", wgmma_ops.wgmma_gemm_ops(base_ops), seed=3)
    ref = cm.build("tiny", base_ops, seed=3)
    x, y = batch(model.cfg, b=2, t=24, seed=1)
    got, want = bf16_loss_and_grads(model, x, y), bf16_loss_and_grads(ref, x, y)
    assert abs(float(got[0]) - float(want[0])) <= REL_LOSS * abs(float(want[0])), (got[0], want[0])
    for name, a, b in [("logits", got[1], want[1])] + [(f"grad of {n}", got[2][n], want[2][n]) for n in want[2]]:
        assert bool(torch.isfinite(a).all()), name
        err = float((a - b).norm() / b.norm())
        assert err <= REL_NORM, f"{name}: relative error {err:.4f} > {REL_NORM}"


def test_wgmma_adapters_refuse_bad_input():
    x = torch.zeros(2, 4, 64, device=DEVICE)
    w = torch.zeros(128, 64, device=DEVICE)
    with pytest.raises(TypeError, match="fp16/bf16 operands.*autocast"):
        wgmma_ops.linear_swiglu(x, w)  # fp32 without autocast: week 1's kernels have no fp32 path
    xb, wb = x.bfloat16(), w.bfloat16()
    with pytest.raises(ValueError, match=r"\(N, K = x.shape\[-1\] = 64\)"):
        wgmma_ops.linear_swiglu(xb, wb[:, :32])
    with pytest.raises(ValueError, match="stack"):
        wgmma_ops.linear_swiglu(xb, wb[:127])
    with pytest.raises(ValueError, match=r"residual must have shape \(2, 4, 128\)"):
        wgmma_ops.linear_residual(xb, wb, torch.zeros(2, 4, 64, device=DEVICE, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="at least 2 dimensions"):
        wgmma_ops.linear_residual(xb[0, 0], wb, xb)


def test_one_optimizer_step_matches():
    # amp=False: the error model above is float32's. Under bf16 autocast (the GPU default) the two
    # models' gradients differ by ~1e-2 relative, and AdamW's first step (~lr sign(g)) flips for
    # the weights whose |g| is below that (~1% if g is roughly normal): far more than allowed below.
    tc = TrainConfig(steps=1, batch=2, seq_len=32, warmup=1, corpus_bytes=1 << 14, amp=False)
    fast, ref = Trainer("tiny", tc, ops="fast"), Trainer("tiny", tc, ops="reference")
    start = fast.parameters_flat()
    assert torch.equal(start, ref.parameters_flat())  # same seed: same initial weights
    got, want = fast.run(), ref.run()
    assert_close(torch.tensor(got[0]["loss"]), torch.tensor(want[0]["loss"]), rtol=RTOL, atol=0, name="loss")
    assert_close(torch.tensor(got[0]["grad_norm"]), torch.tensor(want[0]["grad_norm"]), rtol=RTOL, atol=0,
                 name="gradient norm")
    # AdamW's first step moves each weight by ~lr * sign(g) (m / sqrt(v) = g / |g|): a gradient
    # error e of a weight with |g| >> eps changes the update by ~0; |g| ~ eps = 1e-8 is where
    # rounding can flip a step, so compare the updates with lr-scaled absolute slack on few weights.
    moved_fast, moved_ref = fast.parameters_flat() - start, ref.parameters_flat() - start
    assert float(moved_ref.abs().max()) > 0.5 * tc.lr  # the step did move the weights
    wrong = (moved_fast - moved_ref).abs() > 1e-3 * tc.lr
    assert int(wrong.sum()) <= max(1, moved_ref.numel() // 10_000), f"{int(wrong.sum())} updates differ"


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="config must be one of"):
        cm.preset("gpt5")
    with pytest.raises(ValueError, match="vocab_size must be >= 256"):
        cm.preset(cm.GPTConfig(vocab_size=96, max_seq_len=32, d_model=32, n_heads=2, n_layers=1))
    with pytest.raises(ValueError, match="ops must be one of"):
        cm.build("tiny", "cuda_c")
    with pytest.raises(TypeError, match="model must be a week5 GPT"):
        cm.reference_twin(torch.nn.Linear(2, 2))
    model = cm.build("tiny", "reference")
    with pytest.raises(ValueError, match="exceed max_seq_len"):
        model(torch.zeros(1, model.cfg.max_seq_len + 1, dtype=torch.int64, device=DEVICE))
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.zeros(1, 4, device=DEVICE))
