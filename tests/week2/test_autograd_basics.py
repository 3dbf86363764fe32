"""week2_pytorch_optimizations.autograd_basics: graph inspection, custom Functions, hooks, grad modes."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, random_tensor, with_specials

ab = runtime.lesson("week2_pytorch_optimizations.autograd_basics")
DEVICE = runtime.DEVICE

ACTIVATIONS = {
    "silu": (lambda: ab.silu, lambda x: F.silu(x)),
    "gelu_tanh": (lambda: ab.gelu_tanh, lambda x: F.gelu(x, approximate="tanh")),
}
SIZES = [1, 7, 127, 1025, runtime.pick(gpu=(1 << 20) + 3, sim=4099)]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def test_grad_fn_chain_lists_the_backward_graph():
    a = torch.randn(3, requires_grad=True, device=DEVICE)
    b = torch.randn(3, requires_grad=True, device=DEVICE)
    assert ab.grad_fn_chain((a * b).sum()) == ["SumBackward0", "MulBackward0", "AccumulateGrad", "AccumulateGrad"]
    assert ab.grad_fn_chain(a.detach() * 2) == []  # nothing recorded: no input requires grad
    text = ab.format_graph(torch.tanh(a @ b))
    assert "TanhBackward0" in text and "DotBackward0" in text and "-> .grad of leaf (3,)" in text


def test_grad_fn_chain_rejects_non_tensors():
    with pytest.raises(TypeError, match="t must be a torch.Tensor"):
        ab.grad_fn_chain([1.0])


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_custom_function_matches_torch_forward_and_backward(name, dtype, n):
    ours, reference = ACTIVATIONS[name][0](), ACTIVATIONS[name][1]
    x = random_tensor(n, dtype, DEVICE, scale=3.0)
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y1, y2 = ours(x1), reference(x2)
    # Both compute 16-bit inputs in float32 and round once, so default tolerances hold.
    assert_close(y1, y2, name="forward")
    g = random_tensor(n, dtype, DEVICE)
    y1.backward(g)
    y2.backward(g)
    # The backward formulas are algebraically equal but not written identically.
    assert_close(x1.grad, x2.grad, name="grad")


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_custom_function_passes_gradcheck_in_float64(name):
    fn = ACTIVATIONS[name][0]()
    x = random_tensor((4, 5), torch.float64, DEVICE, scale=2.0)
    assert ab.check_gradients(fn, x)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_gradcheck_catches_a_wrong_backward(name):
    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return ACTIVATIONS[name][1](x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * torch.sigmoid(x)  # forgot the product rule

    with pytest.raises(RuntimeError, match="Jacobian mismatch"):
        ab.check_gradients(Wrong.apply, random_tensor(6, torch.float64, DEVICE), double_backward=False)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_nan_and_inf_propagate_like_torch(name):
    ours, reference = ACTIVATIONS[name][0](), ACTIVATIONS[name][1]
    x = with_specials(random_tensor(257, torch.float32, DEVICE))
    assert_close(ours(x), reference(x))


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_empty_input(name):
    x = torch.empty(0, device=DEVICE, requires_grad=True)
    y = ACTIVATIONS[name][0]()(x)
    y.sum().backward()
    assert y.shape == (0,) and x.grad.shape == (0,)


@pytest.mark.parametrize("bad, error", [([1.0, 2.0], TypeError), (torch.arange(3), TypeError)])
def test_bad_input_is_named(bad, error):
    with pytest.raises(error, match="x "):
        ab.silu(bad)
    with pytest.raises(error, match="x "):
        ab.gelu_tanh(bad)


def test_custom_silu_saves_less_for_backward_than_composed_ops():
    x = random_tensor(1000, torch.float32, DEVICE)
    composed = ab.saved_bytes(lambda t: t * torch.sigmoid(t), x)
    ours = ab.saved_bytes(ab.silu, x)
    assert ours == 4000 and composed == 8000  # x only, against x and sigmoid(x)


def test_clamp_grad_hook_replaces_the_gradient():
    x = torch.tensor([1.0, -2.0, 3.0], device=DEVICE, requires_grad=True)
    handle = ab.clamp_grad_hook(x, 0.5)
    (x * torch.tensor([10.0, -10.0, 0.1], device=DEVICE)).sum().backward()
    assert_close(x.grad, torch.tensor([0.5, -0.5, 0.1], device=DEVICE))
    handle.remove()
    x.grad = None
    (x * 10).sum().backward()
    assert_close(x.grad, torch.full((3,), 10.0, device=DEVICE))
    with pytest.raises(ValueError, match="limit"):
        ab.clamp_grad_hook(x, 0)


def test_forward_and_grad_hooks_record_and_detach():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(DEVICE)
    records, handles = ab.record_activations(model)
    norms, grad_handles = ab.record_grad_norms(model)
    x = random_tensor((5, 4), torch.float32, DEVICE)
    model(x).pow(2).sum().backward()
    assert set(records) == {"0", "2"} and records["0"][0] == (5, 8) and records["2"][0] == (5, 2)
    assert set(norms) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert norms["2.weight"] == pytest.approx(model[2].weight.grad.norm().item())
    for h in handles + grad_handles:
        h.remove()
    records.clear()
    model(x)
    assert records == {}


def test_grad_modes():
    model = nn.Linear(4, 3).to(DEVICE)
    result = ab.grad_mode_demo(model, random_tensor((2, 4), torch.float32, DEVICE))
    assert result["grad"] == {"requires_grad": True, "has_grad_fn": True, "is_inference": False}
    assert result["no_grad"] == {"requires_grad": False, "has_grad_fn": False, "is_inference": False}
    assert result["inference_mode"] == {"requires_grad": False, "has_grad_fn": False, "is_inference": True}
    assert "Inference tensors cannot be saved for backward" in result["inference_tensor_in_autograd"]


def _bf16_values(low: float, high: float) -> torch.Tensor:
    """Every bfloat16 number in [low, high], ascending (32945 of the 65536 bit patterns lie in [-3.75, 3])."""
    bits = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16)
    values = bits.view(torch.bfloat16)
    values = values[torch.isfinite(values)]
    return values[(values >= low) & (values <= high)].unique().to(DEVICE)


def assert_rounded_once(got, true, rel_err, name):
    """got (bf16) is `true` (float64) computed with relative error <= rel_err, then rounded ONCE to bf16.

    Rounding once to nearest adds at most half a unit in the last place of the result: |got - true|
    <= ulp(true) / 2 + rel_err |true|, with ulp(v) = 2^(floor(log2 |v|) - 7) for bf16's 8 significant
    bits. Computing in bf16 rounds every intermediate: in the cancelling regions below that loses every
    digit (1 + tanh(u) rounds to 0), and elsewhere two roundings reach about one whole ulp.
    """
    true = true.double()
    ulp = torch.exp2(torch.floor(torch.log2(true.abs().clamp_min(torch.finfo(torch.bfloat16).tiny))) - 7)
    bound = ulp / 2 + rel_err * true.abs()
    error = (got.double() - true).abs()
    bad = error > bound
    assert not bool(bad.any()), (f"{name}: {int(bad.sum())} of {got.numel()} bf16 results are not the float64 "
                                 f"value rounded once, e.g. got {got[bad][:4].tolist()} for {true[bad][:4].tolist()}")


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_bfloat16_inputs_are_computed_in_float32_and_rounded_once(name):
    # The lesson's rule: 16-bit inputs are computed in float32 and rounded once at the end (_opmath),
    # as a fused kernel does. For tanh-GELU left of x = -3 this is what keeps any digit at all:
    # composed in bf16, 1 + tanh(u) cancels to 0 where the true value is ~1e-3 (autograd_basics._opmath).
    # Every bf16 value in [-3.75, 3], on the CPU as on a GPU. Error of the float32 evaluation, relative:
    # a few units of fp32 roundoff (u = 2^-24) in x^3, u, tanh and the products, and for GELU the
    # cancellation in 1 + t (absolute error ~2u from tanh's last bit), which the small 1 + t amplifies:
    # rel_err = (8 + 6 |u|) 2^-24 + 4 2^-24 / (1 + t), at most ~5e-4 at x = -3.75, far below bf16's
    # half ulp of 2^-9 to 2^-8 relative, so the bound above is the rounding's with a small margin.
    x = _bf16_values(-3.75, 3.0)
    xd = x.double()
    if name == "silu":
        s = torch.sigmoid(xd)
        y, dydx = xd * s, s * (1 + xd * (1 - s))
        rel_err = torch.full_like(xd, 16 * 2.0**-24)
    else:
        u = ab.GELU_K * (xd + ab.GELU_C * xd**3)
        t = torch.tanh(u)
        y = 0.5 * xd * (1 + t)
        dydx = 0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * ab.GELU_K * (1 + 3 * ab.GELU_C * xd * xd)
        rel_err = (8 + 6 * u.abs()) * 2.0**-24 + 4 * 2.0**-24 / (1 + t)
    leaf = x.clone().requires_grad_(True)
    out = ACTIVATIONS[name][0]()(leaf)
    assert out.dtype == torch.bfloat16
    assert_rounded_once(out.detach(), y, rel_err, f"{name} forward")
    g = random_tensor(x.shape, torch.bfloat16, DEVICE)
    out.backward(g)
    assert leaf.grad.dtype == torch.bfloat16
    # the derivative near its zero crossing (GELU's at x ~ -0.75) cancels too: an absolute term of
    # a few fp32 units of the summed terms' size (<= 1.5 |g|) covers it
    grad_err = rel_err + 8 * 2.0**-24 * 1.5 / (g.double() * dydx).abs().clamp_min(1e-30) * g.double().abs()
    assert_rounded_once(leaf.grad, g.double() * dydx, grad_err, f"{name} backward")
