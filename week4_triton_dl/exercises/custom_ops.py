"""Exercise: register a Triton kernel as a torch op that torch.compile can trace.
Same names as week4_triton_dl/custom_ops.py. Check your work with
`pytest tests/week4/test_custom_ops.py --impl=exercises`.

The custom_op half of the lesson is cross_entropy.py's registered cross-entropy, GIVEN here as in
the solution (imported, not registered twice): read its section "the op torch.compile sees"
(fake functions, an autograd formula that calls a second op, a non-differentiable lse output),
and `cross_entropy.cross_entropy`, which calls the op under torch.compile and a cheaper
autograd.Function in eager mode. `compile_report` and the small model tails are given too.

Yours: `bias_gelu_op` as a `torch.library.triton_op` launching week 3's
`fused_elementwise.bias_gelu_kernel` through `torch.library.wrap_triton` on a GPU (in the
interpreter torch 2.11's wrap_triton refuses interpreted kernels: launch the kernel directly
there, `runtime.on_gpu()` says which), with input checks written with `torch._check_value` /
`torch._check_type` (they also run on fake tensors) and a `register_autograd` backward in torch
ops. Name it f"{NAMESPACE}::bias_gelu".
"""
from __future__ import annotations

import torch

from course import ops, runtime  # noqa: F401  runtime before triton: GPU or interpreter
from week3_triton_kernels import fused_elementwise
from week4_triton_dl import cross_entropy as ce  # the solution's registered ops: given

NAMESPACE = ops.namespace(__name__)  # "course_exercises": beside the solution's "course"

# ------------------------------------------------------------- custom_op: opaque to the compiler
cross_entropy_rows = ce.cross_entropy_rows_op                    # torch.ops.course.cross_entropy_rows
cross_entropy_rows_backward = ce.cross_entropy_rows_backward_op  # torch.ops.course.cross_entropy_rows_backward
cross_entropy_op = ce.cross_entropy                              # the public entry: op when compiling


# ------------------------------------------------------- triton_op: transparent to the compiler
def bias_gelu_op(x, bias):
    """gelu(x + bias) (exact erf) as a triton_op launching fused_elementwise.bias_gelu_kernel via wrap_triton."""
    raise NotImplementedError("not implemented yet: bias_gelu_op (week4 exercise)")


def raw_bias_gelu(x, bias):
    """The unregistered launcher of week 3, for comparison."""
    return fused_elementwise.bias_gelu(x, bias)


# ------------------------------------------------------------------------------------ tooling
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
    """A small model tail to compile: logits = h W^T, then the registered cross-entropy."""
    return cross_entropy_op(h @ weight.t(), targets, label_smoothing=0.1)


def mlp_tail(x, bias):
    """torch ops around the triton_op: the compiler sees and schedules the wrapped kernel."""
    return (bias_gelu_op(x * 2.0, bias) + 1.0).sum(-1)


def raw_tail(x, bias):
    """The same tail with the raw, unregistered launch."""
    return (raw_bias_gelu(x * 2.0, bias) + 1.0).sum(-1)
