"""Triton kernels inside torch.compile: custom operators, fake tensors, autograd, no graph breaks.

`torch.compile` works in two stages. Dynamo reads the Python bytecode of your function and
records the torch operations it calls into a graph; anything it cannot follow ends the graph
(a *graph break*: the rest runs eagerly, and a second graph starts after it). Then a backend
(Inductor by default) compiles each graph, and to plan memory and fuse ops it runs the graph
first on *fake tensors*: tensors with a shape, dtype and device but no data.

A Triton launcher is Python that reaches for raw pointers (`x.data_ptr()`), and a fake tensor
has none. Three ways to hand one to the compiler:

* `torch.library.custom_op` (+ `register_fake`, + `register_autograd`): the op is OPAQUE. Dynamo
  records one node and never looks inside; the fake function tells the compiler the output
  shapes and dtypes without running the kernel; the autograd formula makes it differentiable.
  Works for any launcher, in the interpreter too. Inductor cannot fuse across the op: it is a
  wall, but a wall inside one graph, not a graph break. The course registers its week-4 ops
  this way; the example here is the real one, `cross_entropy.py`'s cross-entropy (read its
  section "the op torch.compile sees"), imported below rather than registered a second time:
  - `cross_entropy_rows` = `torch.ops.course.cross_entropy_rows(logits, targets, ignore_index,
    label_smoothing)` -> (loss per row, lse). Its fake returns two (N,) tensors in the dtypes
    the kernel writes (fp32 loss, float64 lse). Its autograd formula marks lse
    non-differentiable (a statistic, not a result), saves (logits, targets, lse) and calls...
  - `cross_entropy_rows_backward`, itself a custom op: the backward graph then holds one
    opaque node too, instead of a raw launch Dynamo would have to trace.
  - `cross_entropy_op` = `cross_entropy.cross_entropy`, the public entry a model calls. Under
    torch.compile (`course.ops.compiling()`) it calls the op and writes the reduction in torch
    ops, which Inductor fuses around the node; the mean divides by `(targets != ignore_index)
    .sum()`, a tensor, never `.item()` (a host sync would be a graph break). In eager mode it
    skips the op's dispatch (~8 us a call on the H100's host, course/ops.py) for an
    autograd.Function over the same launchers.
  Rules every registered op of the course follows: it returns tensors (never None, never an
  input or the same tensor twice: `torch.library.opcheck` checks it); optional tensors are
  `Tensor | None`; the name is f"{ops.namespace(__name__)}::name", so a learner's exercise copy
  registers under "course_exercises" beside the solution's "course" (torch refuses a name twice).
* `torch.library.triton_op` + `wrap_triton(kernel)[grid](...)`: the op is TRANSPARENT. Its body
  must be torch ops plus wrapped Triton launches; the compiler traces through it, derives the
  fake function itself, and Inductor sees the Triton kernel as a node it can schedule (it
  still does not fuse into it). Needs real `JITFunction`s: in the interpreter the kernel is an
  `InterpretedFunction`, which torch 2.11's `wrap_triton` refuses even in eager mode ("wrap_triton
  only works on functions annotated with triton.jit or triton.autotune"; torch 2.13 let an eager
  call through). So `bias_gelu_op` launches the kernel directly when not on a GPU: eagerly it
  then runs anywhere, and tracing it in the interpreter fails ("Cannot access data pointer of
  Tensor", checked with torch 2.11 / Triton 3.6): it compiles only on a GPU.
* No registration at all: Dynamo recognises a raw `kernel[grid](...)` launch of a `JITFunction`
  (since torch 2.3) and records it as a `triton_kernel_wrapper_mutation` node, so on a GPU a
  plain launcher often compiles with NO graph break. In the interpreter it does not: Dynamo
  does not know the `InterpretedFunction` and tries to trace the interpreter itself, and fails
  (checked with torch 2.11 / Triton 3.6: `torch._dynamo.explain` raises while running the
  interpreter's argument copies on fake tensors, `fullgraph=True` raises `Unsupported` on an
  `UntypedStorage.data_ptr` call). Autograd, fake-tensor shapes and export are yours to solve in
  that case; the registered ops above carry them.

`compile_report(fn, *args)` runs `torch._dynamo.explain` and says how many graphs and breaks a
function makes (or the error Dynamo hit): the tests use it to show "one graph, no break".

Both APIs exist in torch 2.11 (the GPU machine) and 2.13: `custom_op`, `register_fake`,
`register_autograd`, `opcheck` since 2.4, `triton_op` and `wrap_triton` since 2.6.
"""
from __future__ import annotations

import torch

from course import ops, runtime
from week3_triton_kernels import fused_elementwise
from week4_triton_dl import cross_entropy as ce

NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)


# ------------------------------------------------------------- custom_op: opaque to the compiler
# The course's registered cross-entropy, as a model uses it (see the docstring and cross_entropy.py).
cross_entropy_rows = ce.cross_entropy_rows_op                    # torch.ops.course.cross_entropy_rows
cross_entropy_rows_backward = ce.cross_entropy_rows_backward_op  # torch.ops.course.cross_entropy_rows_backward
cross_entropy_op = ce.cross_entropy                              # the public entry: op when compiling


# ------------------------------------------------------- triton_op: transparent to the compiler
@torch.library.triton_op(f"{NAMESPACE}::bias_gelu", mutates_args=())
def bias_gelu_op(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """gelu(x + bias) (exact erf), launching week 3's `bias_gelu_kernel` through wrap_triton."""
    _check_bias_gelu(x, bias)
    # BEGIN EXERCISE: allocate out (contiguous) and launch week 3's fused_elementwise.bias_gelu_kernel
    #   (TANH=False, its BLOCK_SIZE, grid ceil(n / block) in integers) through torch.library.wrap_triton on
    #   a GPU, so that the compiler sees the launch; in the interpreter torch 2.11's wrap_triton refuses
    #   interpreted kernels: launch directly there (runtime.on_gpu() says which); nothing to launch for an
    #   empty x
    # HINT: A triton_op body is what torch.compile traces: the launch must go through wrap_triton so the
    #   compiler sees the kernel and its grid; only the interpreter needs a direct launch.
    # HINT: Allocate a contiguous out like x; if x is non-empty: grid of ceil(n / BLOCK_SIZE) computed with
    #   integer arithmetic, then `if runtime.on_gpu():` launch wrap_triton(kernel)[grid](...) else
    #   kernel[grid](...); n_cols is x.shape[-1], TANH=False.
    # HINT: `torch.library.wrap_triton(fused_elementwise.bias_gelu_kernel)[grid](x, bias, out, n,
    #   x.shape[-1], TANH=False, BLOCK_SIZE=block)`
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    n = x.numel()
    if n:
        block = fused_elementwise.BLOCK_SIZE
        grid = (-(-n // block),)  # ceil(n / block) in integers: triton.cdiv is a jitted helper (~2 us)
        if runtime.on_gpu():
            # wrap_triton: under tracing this records the launch as a graph node the compiler can
            # see (its grid, its arguments); in eager mode it is the plain launch.
            torch.library.wrap_triton(fused_elementwise.bias_gelu_kernel)[grid](
                x, bias, out, n, x.shape[-1], TANH=False, BLOCK_SIZE=block)  # default num_warps (4), as week 3
        else:
            # In the interpreter the kernel is an InterpretedFunction, which torch 2.11's
            # wrap_triton refuses even in eager mode: launch it directly. Eager calls then work
            # everywhere; tracing this op still needs a GPU (see the module docstring).
            fused_elementwise.bias_gelu_kernel[grid](x, bias, out, n, x.shape[-1], TANH=False, BLOCK_SIZE=block)
    return out
    # END EXERCISE


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
    # BEGIN EXERCISE: the backward in plain torch ops (the compiler fuses them): dh = grad * gelu'(x + bias)
    #   with gelu'(h) = Phi(h) + h phi(h), computed in fp32 and rounded to x's dtype; dbias = dh summed over
    #   every row, in fp32, in bias's dtype
    # HINT: The backward is the chain rule through gelu: dh = grad * gelu'(h) with h = x + bias; bias was
    #   broadcast over rows, so its gradient sums dh over them.
    # HINT: Recompute h from the saved x and bias in fp32; gelu' = Phi(h) + h * phi(h) (Phi from erf, phi =
    #   exp(-h^2/2) / sqrt(2 pi)); dh in x's dtype; dbias = dh reshaped to (-1, cols) summed over dim 0 with
    #   an fp32 accumulator, cast to bias's dtype.
    # HINT: `dgelu = 0.5 * (1 + torch.erf(h / sqrt 2)) + h * 0.39894228 * torch.exp(-0.5 * h * h)`
    x, bias = ctx.saved_tensors
    h = (x + bias).float()
    dgelu = 0.5 * (1.0 + torch.erf(h * 0.7071067811865476)) + h * 0.3989422804014327 * torch.exp(-0.5 * h * h)
    dh = (grad.float() * dgelu).to(x.dtype)
    return dh, dh.reshape(-1, x.shape[-1]).sum(0, dtype=torch.float32).to(bias.dtype)
    # END EXERCISE


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
