"""Exercise: the autograd graph, custom Functions, hooks. Same names as
week2_pytorch_optimizations/autograd_basics.py.

Check your work with `pytest tests/week2/test_autograd_basics.py --impl=exercises`. Each stub
raises NotImplementedError until you write it; delete that line when you do.
Rules of the house: reject non-tensors and non-floating tensors with a TypeError naming `x`;
compute float16/bfloat16 inputs in float32 and round once at the end (as a fused kernel does);
write every backward with torch ops on the saved tensors, so that double backward works too.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

GELU_K = math.sqrt(2.0 / math.pi)  # tanh-GELU: 0.5 x (1 + tanh(K (x + C x^3)))
GELU_C = 0.044715


def grad_fn_chain(t: torch.Tensor) -> list[str]:
    """Names of the backward nodes reachable from t.grad_fn, depth first, each node once.

    Hint: a stack starting at t.grad_fn; each node's `next_functions` is a tuple of
    (node or None, input index); push them reversed so the first input is visited first.
    Raise TypeError("t must be a torch.Tensor, ...") for anything else.
    """
    raise NotImplementedError("not implemented yet: grad_fn_chain (week2 exercise)")


def format_graph(t: torch.Tensor) -> str:
    """An indented tree of the backward graph; AccumulateGrad lines read '-> .grad of leaf (shape)'."""
    raise NotImplementedError("not implemented yet: format_graph (week2 exercise)")


class SiLUFunction(torch.autograd.Function):
    """silu(x) = x * sigmoid(x); d/dx = s (1 + x (1 - s)) with s = sigmoid(x)."""

    @staticmethod
    def forward(ctx, x):
        # TODO: save only x (ctx.save_for_backward), return x * sigmoid(x) computed in float32
        # for 16-bit inputs, cast back to x.dtype.
        raise NotImplementedError("not implemented yet: SiLUFunction.forward (week2 exercise)")

    @staticmethod
    def backward(ctx, grad_out):
        # TODO: recompute s = sigmoid(x) from the saved x; return grad_out * s * (1 + x * (1 - s)).
        raise NotImplementedError("not implemented yet: SiLUFunction.backward (week2 exercise)")


class GELUTanhFunction(torch.autograd.Function):
    """y = 0.5 x (1 + tanh(u)), u = K (x + C x^3);  dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) K (1 + 3 C x^2)."""

    @staticmethod
    def forward(ctx, x):
        raise NotImplementedError("not implemented yet: GELUTanhFunction.forward (week2 exercise)")

    @staticmethod
    def backward(ctx, grad_out):
        raise NotImplementedError("not implemented yet: GELUTanhFunction.backward (week2 exercise)")


def silu(x: torch.Tensor) -> torch.Tensor:
    """Validate x (TypeError naming x), then SiLUFunction.apply(x)."""
    raise NotImplementedError("not implemented yet: silu (week2 exercise)")


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """Validate x (TypeError naming x), then GELUTanhFunction.apply(x)."""
    raise NotImplementedError("not implemented yet: gelu_tanh (week2 exercise)")


def check_gradients(fn, x: torch.Tensor, *, double_backward: bool = True) -> bool:
    """Given (read it): gradcheck (and gradgradcheck) of fn at a float64 copy of x.

    gradcheck perturbs each input element by +-eps and compares the finite differences with the
    Jacobian your backward computes; it raises "Jacobian mismatch" when they differ. It runs in
    float64 because float32 finite differences are only good to about sqrt(eps32) ~ 3e-4.
    (It is given rather than a stub because a test hands it a deliberately wrong backward and
    expects gradcheck's own RuntimeError, and NotImplementedError is a RuntimeError too.)
    """
    x64 = x.detach().to(torch.float64).requires_grad_(True)
    ok = torch.autograd.gradcheck(fn, (x64,), eps=1e-6, atol=1e-5, rtol=1e-4)
    if double_backward:
        ok = ok and torch.autograd.gradgradcheck(fn, (x64,), eps=1e-6, atol=1e-5, rtol=1e-4)
    return ok


def saved_bytes(fn, x: torch.Tensor) -> int:
    """Bytes saved for backward by fn(x).sum(): count them in the pack hook of
    torch.autograd.graph.saved_tensors_hooks(pack, unpack), each storage once."""
    raise NotImplementedError("not implemented yet: saved_bytes (week2 exercise)")


def clamp_grad_hook(t: torch.Tensor, limit: float):
    """t.register_hook(...) that clamps the gradient to [-limit, limit]; ValueError if limit <= 0."""
    raise NotImplementedError("not implemented yet: clamp_grad_hook (week2 exercise)")


def record_activations(model: nn.Module, kinds=(nn.Linear,)):
    """Forward hooks on submodules of `kinds`: records[name] = (shape, mean, std); return (records, handles)."""
    raise NotImplementedError("not implemented yet: record_activations (week2 exercise)")


def record_grad_norms(model: nn.Module):
    """register_post_accumulate_grad_hook on each parameter: norms[name] = grad L2 norm; (norms, handles)."""
    raise NotImplementedError("not implemented yet: record_grad_norms (week2 exercise)")


def grad_mode_demo(model: nn.Module, x: torch.Tensor) -> dict:
    """{mode: {requires_grad, has_grad_fn, is_inference}} for "grad", "no_grad", "inference_mode",
    plus "inference_tensor_in_autograd": the first line of the RuntimeError raised when an
    inference-mode output is saved for backward (multiply it by a tensor that requires grad)."""
    raise NotImplementedError("not implemented yet: grad_mode_demo (week2 exercise)")
