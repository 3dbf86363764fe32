"""Triton kernels inside torch.compile: custom operators, fake tensors, autograd, no graph breaks.

`torch.compile` works in two stages. Dynamo reads the Python bytecode of your function and
records the torch operations it calls into a graph; anything it cannot follow ends the graph
(a *graph break*: the rest runs eagerly, and a second graph starts after it). Then a backend
(Inductor by default) compiles each graph, and to plan memory and fuse ops it runs the graph
first on *fake tensors*: tensors with a shape, dtype and device but no data.

A Triton launcher is Python that reaches for raw pointers (`x.data_ptr()`), and a fake tensor
has none. Three ways to hand one to the compiler, all in this file:

* `torch.library.custom_op` (+ `register_fake`, + `register_autograd`): the op is OPAQUE. Dynamo
  records one node `torch.ops.week4.cross_entropy_rows(...)` and never looks inside; the fake
  function tells the compiler the output shapes and dtypes without running the kernel; the
  autograd formula (here: a second custom op launching the backward kernel) makes it
  differentiable. Works for any launcher, in the interpreter too. Inductor cannot fuse
  across the op: it is a wall, but a wall inside one graph, not a graph break.
* `torch.library.triton_op` + `wrap_triton(kernel)[grid](...)`: the op is TRANSPARENT. Its body
  must be torch ops plus wrapped Triton launches; the compiler traces through it, derives the
  fake function itself, and Inductor sees the Triton kernel as a node it can schedule (it
  still does not fuse into it). Needs real `JITFunction`s: under the interpreter the kernel is
  an `InterpretedFunction` and tracing fails (checked: "Cannot access data pointer of Tensor"),
  so `bias_gelu_op` compiles only on a GPU; called eagerly it runs anywhere.
* No registration at all: Dynamo recognises a raw `kernel[grid](...)` launch of a `JITFunction`
  (since torch 2.3) and records it as a `triton_kernel_wrapper_mutation` node, so on a GPU a
  plain launcher often compiles with NO graph break. In the interpreter it does not: Dynamo
  does not know the `InterpretedFunction` and tries to trace the interpreter itself, and fails
  (checked with torch 2.13 / Triton 3.9: `torch._dynamo.explain` raises, `fullgraph=True`
  raises `Unsupported`). Autograd, fake-tensor shapes and export are yours to solve in that
  case; the registered ops above carry them.

`compile_report(fn, *args)` runs `torch._dynamo.explain` and says how many graphs and breaks a
function makes (or the error Dynamo hit): the tests use it to show "one graph, no break".

Both APIs exist in torch 2.11 (the GPU machine) and 2.13 (here): `custom_op`, `register_fake`,
`register_autograd`, `opcheck` since 2.4, `triton_op` and `wrap_triton` since 2.6.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before triton: chooses the GPU or the Triton interpreter
from week3_triton_kernels import fused_elementwise
from week4_triton_dl import cross_entropy as ce

import triton  # noqa: E402  (after course.runtime on purpose)

# One namespace per copy of this file: the solution and an exercise copy of it can then both be
# imported in one process without registering the same op name twice (which torch refuses).
NAMESPACE = "week4_exercises" if ".exercises." in __name__ else "week4"


# ------------------------------------------------------------- custom_op: opaque to the compiler
@torch.library.custom_op(f"{NAMESPACE}::cross_entropy_rows", mutates_args=())
def cross_entropy_rows(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int,
                       label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row loss and logsumexp of the week 4 kernel: (N,) each, fp32 (fp64 for fp64)."""
    return ce.cross_entropy_forward(logits, targets, ignore_index=ignore_index, label_smoothing=label_smoothing)


@cross_entropy_rows.register_fake
def _cross_entropy_rows_fake(logits, targets, ignore_index, label_smoothing):
    # Shapes and dtypes only: what the compiler needs to plan, without running the kernel.
    torch._check(logits.dim() == 2, lambda: "logits must be (N, V)")
    torch._check(targets.shape == logits.shape[:1], lambda: "targets must be (N,)")
    acc = torch.float64 if logits.dtype == torch.float64 else torch.float32
    return logits.new_empty(logits.shape[:1], dtype=acc), logits.new_empty(logits.shape[:1], dtype=acc)


@torch.library.custom_op(f"{NAMESPACE}::cross_entropy_rows_backward", mutates_args=())
def cross_entropy_rows_backward(logits: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor,
                                grad: torch.Tensor, ignore_index: int, label_smoothing: float) -> torch.Tensor:
    """d(sum_i grad_i loss_i)/d logits = (softmax - y) * grad_i, from the saved lse."""
    return ce.cross_entropy_backward(logits, targets, lse, grad.contiguous(), ignore_index=ignore_index,
                                     label_smoothing=label_smoothing)


@cross_entropy_rows_backward.register_fake
def _cross_entropy_rows_backward_fake(logits, targets, lse, grad, ignore_index, label_smoothing):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output):
    logits, targets, ignore_index, label_smoothing = inputs
    _, lse = output
    ctx.mark_non_differentiable(lse)  # a statistic for the backward, not a result to differentiate
    ctx.save_for_backward(logits, targets, lse)
    ctx.options = (ignore_index, label_smoothing)


def _backward(ctx, grad_loss, _grad_lse):
    logits, targets, lse = ctx.saved_tensors
    ignore_index, label_smoothing = ctx.options
    # The backward is itself a custom op: under torch.compile the backward graph holds one
    # opaque node too, instead of breaking on a raw launch.
    dlogits = cross_entropy_rows_backward(
        logits, targets, lse, grad_loss, ignore_index, label_smoothing)
    return dlogits, None, None, None


cross_entropy_rows.register_autograd(_backward, setup_context=_setup_context)


def cross_entropy_op(logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = ce.IGNORE_INDEX,
                     reduction: str = "mean", label_smoothing: float = 0.0) -> torch.Tensor:
    """F.cross_entropy through the registered op: the reduction is plain torch, which compiles."""
    if reduction not in ce.REDUCTIONS:
        raise ValueError(f"reduction must be one of {list(ce.REDUCTIONS)}, got {reduction!r}")
    loss_rows, _ = cross_entropy_rows(logits, targets, ignore_index, float(label_smoothing))
    if reduction == "none":
        return loss_rows.to(logits.dtype)
    total = loss_rows.sum()
    if reduction == "mean":
        # No .item(): a host sync would be a graph break. 0 / 0 = NaN when every row is ignored, as torch.
        total = total / (targets != ignore_index).sum()
    return total.to(logits.dtype)


# ------------------------------------------------------- triton_op: transparent to the compiler
@torch.library.triton_op(f"{NAMESPACE}::bias_gelu", mutates_args=())
def bias_gelu_op(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x + bias) (exact erf), launching week 3's `bias_gelu_kernel` through wrap_triton."""
    _check_bias_gelu(x, bias)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    n = x.numel()
    if n:
        block = fused_elementwise.BLOCK_SIZE
        # wrap_triton: under tracing this records the launch as a graph node the compiler can see
        # (its grid, its arguments); in eager mode it is the plain launch.
        torch.library.wrap_triton(fused_elementwise.bias_gelu_kernel)[(triton.cdiv(n, block),)](
            x, bias, out, n, x.shape[-1], TANH=False, BLOCK_SIZE=block)  # default num_warps (4), as week 3
    return out


def _check_bias_gelu(x, bias):
    # The checks a launcher makes, written with torch._check_* so that they also work on fake
    # tensors while the compiler traces (they raise ValueError / TypeError like course.validate).
    torch._check_type(x.dtype in fused_elementwise.DTYPES and x.dtype == bias.dtype,
                      lambda: f"x and bias must share one of fp16/bf16/fp32, got {x.dtype} and {bias.dtype}")
    torch._check_value(x.dim() >= 1 and bias.dim() == 1 and bias.shape[0] == x.shape[-1],
                       lambda: f"bias must be 1-D with x's last dimension {tuple(x.shape)[-1:]}, got {tuple(bias.shape)}")
    torch._check_value(x.is_contiguous() and bias.is_contiguous(), lambda: "x and bias must be contiguous")


def _bias_gelu_setup(ctx, inputs, output):
    x, bias = inputs
    ctx.save_for_backward(x, bias)


def _bias_gelu_backward(ctx, grad):
    # Plain torch ops: the compiler fuses these itself. d/dh gelu(h) = Phi(h) + h phi(h).
    x, bias = ctx.saved_tensors
    h = (x + bias).float()
    dgelu = 0.5 * (1.0 + torch.erf(h * 0.7071067811865476)) + h * 0.3989422804014327 * torch.exp(-0.5 * h * h)
    dh = (grad.float() * dgelu).to(x.dtype)
    return dh, dh.reshape(-1, x.shape[-1]).sum(0, dtype=torch.float32).to(bias.dtype)


bias_gelu_op.register_autograd(_bias_gelu_backward, setup_context=_bias_gelu_setup)


def raw_bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The unregistered launcher of week 3, for comparison: no fake function, no autograd."""
    return fused_elementwise.bias_gelu(x, bias)


# ------------------------------------------------------------------------------------ tooling
def compile_report(fn, *args) -> dict:
    """What Dynamo makes of fn(*args): {"graphs", "graph_breaks", "break_reasons", "error"}.

    `torch._dynamo.explain` traces without compiling (no Inductor: a second or two), so it is
    the cheap way to ask "does this break the graph?" before paying for a compile.
    """
    torch._dynamo.reset()
    try:
        explained = torch._dynamo.explain(fn)(*args)
    except Exception as error:  # Dynamo could not trace it at all
        return {"graphs": None, "graph_breaks": None, "break_reasons": [],
                "error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
    return {"graphs": explained.graph_count, "graph_breaks": explained.graph_break_count,
            "break_reasons": [str(getattr(b, "reason", b))[:300] for b in explained.break_reasons],
            "error": None}


def loss_head(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """A small model tail to compile: logits = h W^T, then the registered cross-entropy."""
    return cross_entropy_op(h @ weight.t(), targets, label_smoothing=0.1)


def mlp_tail(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """torch ops around the triton_op: the compiler sees and schedules the wrapped kernel."""
    return (bias_gelu_op(x * 2.0, bias) + 1.0).sum(-1)


def raw_tail(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The same tail with the raw, unregistered launch."""
    return (raw_bias_gelu(x * 2.0, bias) + 1.0).sum(-1)
