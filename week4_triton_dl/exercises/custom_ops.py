"""Exercise: register Triton kernels as torch ops so that torch.compile keeps one graph.
Same names as week4_triton_dl/custom_ops.py. Check your work with
`pytest tests/week4/test_custom_ops.py --impl=exercises`.

Suggested order: turn `cross_entropy_rows` and `cross_entropy_rows_backward` into
`torch.library.custom_op`s (name them f"{NAMESPACE}::..."), give them `register_fake`
functions, connect them with `register_autograd` (mark the lse output non-differentiable), then
write `cross_entropy_op` with a sync-free mean; then `bias_gelu_op` as a
`torch.library.triton_op` launching week 3's `bias_gelu_kernel` through
`torch.library.wrap_triton`. `compile_report` tells you whether Dynamo made one graph.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from week3_triton_kernels import fused_elementwise
from week4_triton_dl import cross_entropy as ce  # the solution's kernels: this exercise is the registration

import triton  # noqa: E402, F401

NAMESPACE = "week4_exercises" if ".exercises." in __name__ else "week4"


def cross_entropy_rows(logits, targets, ignore_index, label_smoothing):
    """Per-row loss and logsumexp: ce.cross_entropy_forward, as a custom op."""
    raise NotImplementedError("not implemented yet: cross_entropy_rows (week4 exercise)")


def cross_entropy_rows_backward(logits, targets, lse, grad, ignore_index, label_smoothing):
    """dlogits from the saved lse: ce.cross_entropy_backward, as a custom op."""
    raise NotImplementedError("not implemented yet: cross_entropy_rows_backward (week4 exercise)")


def cross_entropy_op(logits, targets, *, ignore_index=ce.IGNORE_INDEX, reduction="mean", label_smoothing=0.0):
    """F.cross_entropy through the registered op; the reduction in torch ops, no .item()."""
    raise NotImplementedError("not implemented yet: cross_entropy_op (week4 exercise)")


def bias_gelu_op(x, bias):
    """gelu(x + bias) as a triton_op launching fused_elementwise.bias_gelu_kernel via wrap_triton."""
    raise NotImplementedError("not implemented yet: bias_gelu_op (week4 exercise)")


def raw_bias_gelu(x, bias):
    """The unregistered launcher of week 3, for comparison."""
    return fused_elementwise.bias_gelu(x, bias)


def compile_report(fn, *args):
    """What Dynamo makes of fn(*args): {"graphs", "graph_breaks", "break_reasons", "error"}."""
    torch._dynamo.reset()
    try:
        explained = torch._dynamo.explain(fn)(*args)
    except Exception as error:
        return {"graphs": None, "graph_breaks": None, "break_reasons": [],
                "error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
    return {"graphs": explained.graph_count, "graph_breaks": explained.graph_break_count,
            "break_reasons": [str(getattr(b, "reason", b))[:300] for b in explained.break_reasons],
            "error": None}


def loss_head(h, weight, targets):
    return cross_entropy_op(h @ weight.t(), targets, label_smoothing=0.1)


def mlp_tail(x, bias):
    return (bias_gelu_op(x * 2.0, bias) + 1.0).sum(-1)


def raw_tail(x, bias):
    return (raw_bias_gelu(x * 2.0, bias) + 1.0).sum(-1)
