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
