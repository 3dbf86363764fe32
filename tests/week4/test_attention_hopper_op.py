"""The Hopper attention as torch ops: course_attention_hopper::forward and ::backward (attention/hopper.py).

Two opaque custom ops with fake implementations, joined by the forward's autograd formula (it saves o and
lse and calls the backward op), so torch.compile traces a forward AND backward without a graph break and
without reading a data pointer (the backward's Python encodes TMA maps from them: it may run only at run
time). On the CPU the kernels are replaced by float64 stand-ins that keep their contracts
(tests/week4/hopper_stand_ins.py): `torch.library.opcheck` checks both ops' schemas, fakes (shapes, dtypes,
strides against the real body's), autograd registration and AOT dispatch; the compiled forward + backward
gives eager's bits. Without stand-ins the ops refuse the CPU naming the fallbacks, bad input first.
On an H100/H200 the compiled step runs the kernels and is checked against float64 autograd.
"""
import re

import pytest
import torch

from course import runtime
from tests.week4 import hopper_stand_ins
from tests.week4.attention_helpers import assert_within, qkv
from week4_triton_dl.attention import hopper as hp
from week4_triton_dl.attention import hopper_backward as hb
from week4_triton_dl.attention import naive as an

DEVICE = runtime.DEVICE
HOPPER = runtime.on_gpu() and hp.device_refusal(torch.device("cuda")) is None
FORWARD = torch.ops.course_attention_hopper.forward.default
BACKWARD = torch.ops.course_attention_hopper.backward.default
DTYPES = [pytest.param(d, id=str(d).replace("torch.", "")) for d in hp.DTYPES]
MASKS = [pytest.param(False, id="full"), pytest.param(True, id="causal")]


@pytest.fixture
def stand_ins(monkeypatch):
    return hopper_stand_ins.install(monkeypatch)


def backward_args(B, H, S, D, dtype, causal, scale, dense_do=True, seed=0):
    """(do, q, k, v, o, lse, causal, scale) as the forward's autograd formula passes them: o and lse of
    the float64 forward; dO dense, or a transposed view (as the gradient of a (B, S, H, D) layout arrives)."""
    torch.manual_seed(seed)
    q, k, v = qkv(B, H, S, S, D, dtype)
    o, lse = an.attention_reference(q, k, v, causal, scale, return_lse=True)
    do = (torch.randn(B, H, S, D) if dense_do else torch.randn(B, S, H, D).transpose(1, 2)).to(DEVICE, dtype)
    return do, q, k, v, o.to(dtype), lse.float(), causal, scale


# --- opcheck, with the kernels' stand-ins ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("head_dim", hp.HEAD_DIMS)
def test_opcheck_forward_with_autograd(head_dim, causal, dtype, stand_ins):
    """Schema, fake against the real body, autograd registration, AOT dispatch (static and dynamic shapes:
    the compiled backward through the backward op's fake, its gradients against eager's)."""
    q, k, v = qkv(2, 3, 37, 37, head_dim, dtype, requires_grad=True)
    torch.library.opcheck(FORWARD, (q, k, v, causal, head_dim**-0.5))
    assert stand_ins.calls > 0, "opcheck's AOT dispatch test must have run the backward"


@pytest.mark.parametrize("causal", MASKS)
def test_opcheck_forward_with_more_keys_than_queries(causal, stand_ins):
    """Sq != Sk: the forward takes it (top-left causal mask); the backward is built for Sq = Sk, so no grad."""
    q, k, v = qkv(1, 2, 5, 70, 64, torch.float16)
    torch.library.opcheck(FORWARD, (q, k, v, causal, 0.3))


@pytest.mark.parametrize("dense_do", [True, False], ids=["dense_do", "strided_do"])
@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("head_dim", hp.HEAD_DIMS)
def test_opcheck_backward(head_dim, causal, dense_do, stand_ins):
    """The backward op: fresh (dq, dk, dv) shaped like q, k, v; dO of any strides (the op makes it dense)."""
    args = backward_args(2, 2, 33, head_dim, torch.bfloat16, causal, 0.2, dense_do)
    torch.library.opcheck(BACKWARD, args)
    assert stand_ins.calls > 0


@pytest.mark.parametrize("causal", MASKS)
def test_opcheck_with_padding_keys(causal, stand_ins):
    """key_lengths (Tensor?) through both ops: schemas, fakes, autograd registration, AOT dispatch with the
    lengths saved for the backward (a batch element with no key included: zeros, zero gradients)."""
    q, k, v = qkv(3, 2, 37, 37, 64, torch.bfloat16, requires_grad=True)
    lengths = torch.tensor([37, 0, 20], device=DEVICE)
    torch.library.opcheck(FORWARD, (q, k, v, causal, 0.125, lengths))
    assert stand_ins.calls > 0, "opcheck's AOT dispatch test must have run the backward"
    do, q, k, v, o, lse, _, _ = backward_args(3, 2, 33, 64, torch.float16, causal, 0.2)
    torch.library.opcheck(BACKWARD, (do, q, k, v, o, lse, causal, 0.2, lengths))


def test_backward_fake_on_meta_tensors():
    do, q, k, v, o = (torch.empty(1, 2, 130, 128, dtype=torch.float16, device="meta") for _ in range(5))
    lse = torch.empty(1, 2, 130, dtype=torch.float32, device="meta")
    grads = BACKWARD(do, q, k, v, o, lse, True, 0.1)
    assert [(g.shape, g.dtype, g.is_contiguous()) for g in grads] == [(q.shape, q.dtype, True)] * 3


# --- torch.compile of forward + backward --------------------------------------------------------------------

def graphs_of(fn, *args):
    """fn compiled with fullgraph=True (a graph break raises) through AOTAutograd, eager kernels: (result,
    the forward graph's op targets, the backward graph's op targets)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    seen = {}

    def keep(name):
        def compiler(gm, example_inputs):
            seen[name] = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
            return make_boxed_func(gm.forward)
        return compiler

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))
    return torch.compile(fn, backend=backend, fullgraph=True)(*args), seen


@pytest.mark.parametrize("causal", MASKS)
def test_compiled_forward_and_backward_match_eager(causal, stand_ins):
    """One graph each way (fullgraph), the kernels' ops as single nodes, the backward's Python never run at
    trace time (it would fail on fake tensors); eager's bits, gradients included. dO arrives strided (the
    loss reads o as (B, S, H, D)): the backward op makes it dense."""
    q, k, v = qkv(2, 2, 40, 40, 64, torch.bfloat16, requires_grad=True)
    w = torch.randn(2, 40, 2, 64).to(DEVICE, torch.bfloat16)

    def loss(q, k, v):
        o = hp.attention_hopper(q, k, v, causal)
        return (o.transpose(1, 2).float() * w.float()).sum()

    want = loss(q, k, v)
    want_grads = torch.autograd.grad(want, (q, k, v))
    assert stand_ins.calls == 1
    got, seen = graphs_of(loss, q, k, v)
    assert stand_ins.calls == 1, "tracing must not run the backward"
    got_grads = torch.autograd.grad(got, (q, k, v))
    assert stand_ins.calls == 2
    assert torch.equal(got, want)
    for name, a, b in zip(("dq", "dk", "dv"), got_grads, want_grads):
        assert torch.equal(a, b), name
    assert sum("course_attention_hopper.forward" in t for t in seen["forward"]) == 1, seen["forward"]
    assert sum("course_attention_hopper.backward" in t for t in seen["backward"]) == 1, seen["backward"]
    assert not any("course_attention_hopper.forward" in t for t in seen["backward"]), "no recomputed forward"


def test_compiled_step_has_no_graph_break(stand_ins):
    q, k, v = qkv(1, 2, 16, 16, 128, torch.float16, requires_grad=True)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lambda q, k, v: hp.attention_hopper(q, k, v, True).sum())(q, k, v)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons


# --- without stand-ins: checks first, then the refusal naming the fallback ---------------------------------

def test_raw_forward_op_checks_before_any_launch(monkeypatch):
    monkeypatch.setattr(hp, "launch", lambda *a: pytest.fail("launched despite bad input"))
    q, k, v = (torch.zeros(1, 2, 8, 64, dtype=torch.float16) for _ in range(3))
    with pytest.raises(ValueError, match="head dimension D = 32"):
        FORWARD(q[..., :32].contiguous(), k[..., :32].contiguous(), v[..., :32].contiguous(), False, 0.1)
    with pytest.raises(ValueError, match="scale must be a finite number > 0"):
        FORWARD(q, k, v, False, -1.0)


def test_raw_forward_op_refuses_the_cpu_naming_the_fallback():
    q, k, v = (torch.zeros(1, 2, 8, 64, dtype=torch.float16) for _ in range(3))
    with pytest.raises(runtime.NotOnThisGpu, match=re.escape(hp.FALLBACK)):
        FORWARD(q, k, v, False, 0.1)


def test_backward_op_checks_before_any_launch(monkeypatch):
    monkeypatch.setattr(hb, "load_extension", lambda *a: pytest.fail("built despite bad input"))
    do, q, k, v, o, lse, causal, scale = backward_args(1, 2, 8, 64, torch.float16, True, 0.125)
    with pytest.raises(TypeError, match="lse has dtype float16"):
        BACKWARD(do, q, k, v, o, lse.half(), causal, scale)
    with pytest.raises(ValueError, match="head dim 32"):
        BACKWARD(*(t[..., :32].contiguous() for t in (do, q, k, v, o)), lse, causal, scale)
    with pytest.raises(ValueError, match="scale must be a finite number > 0"):
        BACKWARD(do, q, k, v, o, lse, causal, float("nan"))
    if DEVICE.type == "cpu":  # valid input on the CPU: the refusal, naming the Triton backward
        with pytest.raises(runtime.NotOnThisGpu, match=re.escape(hb.FALLBACK)):
            BACKWARD(do, q, k, v, o, lse, causal, scale)


# --- on an H100/H200 -------------------------------------------------------------------------------------------

@pytest.mark.gpu(reason="launches the sm_90a forward and backward kernels")
@pytest.mark.skipif(not HOPPER, reason="the Hopper attention needs an sm_90 GPU (H100/H200, sm_90a)")
@pytest.mark.parametrize("causal", MASKS)
def test_compiled_step_on_the_kernels_matches_float64(causal):
    """torch.compile (Inductor, fullgraph) of forward + backward through the two ops, on the kernels: o and
    the gradients against float64 autograd within naive.py's error bounds (dO = w exactly: d(sum o w)/do)."""
    torch._dynamo.reset()
    B, H, S, D, dtype, scale = 2, 3, 300, 128, torch.bfloat16, 128**-0.5
    q, k, v = qkv(B, H, S, S, D, dtype, requires_grad=True)
    w = torch.randn(B, S, H, D, device=DEVICE).to(dtype).transpose(1, 2)  # a strided dO

    def step(q, k, v):
        o = hp.attention_hopper(q, k, v, causal)
        return o, (o.float() * w.float()).sum()

    o, loss = torch.compile(step, fullgraph=True)(q, k, v)
    grads = torch.autograd.grad(loss, (q, k, v))  # the compiled backward graph: the backward op
    bounds = an.attention_error_bounds(q, k, v, w, causal, scale)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = an.attention_reference(qd, kd, vd, causal, scale)
    assert_within(o, want, bounds["out"])
    for name, g, ref in zip(("dq", "dk", "dv"), grads, torch.autograd.grad(want, (qd, kd, vd), w.double())):
        assert g.dtype == dtype and g.shape == ref.shape
        assert_within(g, ref, bounds[name], name)
