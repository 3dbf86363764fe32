"""The computation graph and autograd: what `loss.backward()` actually walks.

What it teaches:
* every tensor made by a differentiable op records the op that made it (`grad_fn`), and each
  `grad_fn` points at the ones before it (`next_functions`): the graph is built as the forward
  runs and freed as backward consumes it. `grad_fn_chain` and `format_graph` print it.
* a custom `torch.autograd.Function` is a forward and a hand-written backward. Writing
  SiLU and tanh-GELU by hand is the first step toward a fused kernel: one pass that keeps
  only `x` for backward instead of every intermediate the composed ops would save.
  `torch.autograd.gradcheck` (float64: its finite differences need the precision) checks
  the hand-written derivative against numerical differentiation.
* hooks: `Tensor.register_hook` sees (and may replace) a gradient as it flows back;
  module forward hooks see activations as they flow forward.
* `torch.no_grad` stops recording; `torch.inference_mode` also skips the version counters
  and view tracking, and its tensors can never enter autograd later.

Cost model of the fused activations: elementwise, so memory-bound. Composed eager SiLU
(`x * sigmoid(x)`) saves both x and sigmoid(x) for backward; the custom Function saves x only
and recomputes sigmoid in backward (one read of x instead of two saved tensors).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

GELU_K = math.sqrt(2.0 / math.pi)  # tanh-GELU: 0.5 x (1 + tanh(K (x + C x^3)))
GELU_C = 0.044715


def _floating(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise TypeError(f"{name} has dtype {str(x.dtype).replace('torch.', '')}; "
                        "autograd only differentiates floating-point tensors")
    return x


# EXERCISE NOTE: Rules of the house: reject non-tensors and non-floating tensors with a TypeError
#   naming `x` (_floating does it); compute float16/bfloat16 inputs in float32 and round once at the
#   end, as a fused kernel does (_opmath); write every backward with torch ops on the saved tensors,
#   so that double backward works too.

# --- inspecting the graph ---------------------------------------------------------------------

def grad_fn_chain(t: torch.Tensor) -> list[str]:
    """Names of the backward nodes reachable from `t.grad_fn`, depth first, each once.

    `(a * b).sum()` gives ['SumBackward0', 'MulBackward0', 'AccumulateGrad', 'AccumulateGrad']:
    AccumulateGrad is where a gradient lands in a leaf's `.grad`.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"t must be a torch.Tensor, got {type(t).__name__}")
    # BEGIN EXERCISE: walk the graph from t.grad_fn through each node's next_functions, depth first (first
    #   input first), each node once; collect type(node).__name__
    # HINT: the backward graph is a DAG of Node objects: each node's next_functions lists (node, input_nr)
    #   pairs for its inputs (None for inputs that need no gradient); a node reachable by two paths must
    #   be listed once.
    # HINT: an explicit stack seeded with t.grad_fn (none for a leaf), a `seen` set; pop, skip None/seen,
    #   record the class name, push the children.
    # HINT: push the children reversed (`reversed(node.next_functions)`) so the first input is popped, and
    #   visited, first.
    names, seen, stack = [], set(), [t.grad_fn] if t.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        # reversed: the first input is visited first, so the list reads like the forward code
        stack.extend(fn for fn, _ in reversed(node.next_functions) if fn is not None)
    return names
    # END EXERCISE


def format_graph(t: torch.Tensor) -> str:
    """The backward graph as an indented tree, with the shapes each node saved for backward."""
    # BEGIN EXERCISE: an indented tree of the backward graph from t.grad_fn (a leaf or no-grad tensor: a
    #   one-line note); each line the node's name and the shapes it saved for backward (its _saved_*
    #   attributes); AccumulateGrad lines read '-> .grad of leaf (shape)'
    # HINT: nodes expose what they saved for backward as attributes named `_saved_<name>`; AccumulateGrad is
    #   the node that writes a leaf's .grad, and its `.variable` is that leaf.
    # HINT: return a one-line note when t.grad_fn is None; otherwise a recursive walk(node, depth) appending
    #   one line per node (two spaces per depth level), then recursing into non-None children; join with
    #   newlines.
    # HINT: the saved shapes: `[n for n in dir(node) if n.startswith('_saved_')]`, keeping those whose value
    #   is a Tensor.
    if t.grad_fn is None:
        return f"(leaf or no grad: requires_grad={t.requires_grad})"
    lines = []

    def walk(node, depth):
        saved = [f"{name[len('_saved_'):]}{tuple(getattr(node, name).shape)}" for name in dir(node)
                 if name.startswith("_saved_") and isinstance(getattr(node, name, None), torch.Tensor)]
        extra = f"  saved: {', '.join(saved)}" if saved else ""
        if type(node).__name__ == "AccumulateGrad":
            extra = f"  -> .grad of leaf {tuple(node.variable.shape)}"
        lines.append("  " * depth + type(node).__name__ + extra)
        for child, _ in node.next_functions:
            if child is not None:
                walk(child, depth + 1)

    walk(t.grad_fn, 0)
    return "\n".join(lines)
    # END EXERCISE


# --- custom autograd Functions ----------------------------------------------------------------

def _opmath(x: torch.Tensor) -> torch.Tensor:
    """float32 for the 16-bit types, as torch's own kernels compute ("opmath").

    Composed in bf16, tanh-GELU loses everything for x < about -3: 1 + tanh(u) cancels to 0
    where the true value is ~1e-3. A fused kernel loads bf16, computes in float32 and
    rounds once on the store; these Functions do the same.
    """
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


class SiLUFunction(torch.autograd.Function):
    """silu(x) = x * sigmoid(x); d/dx = s (1 + x (1 - s)) with s = sigmoid(x)."""

    @staticmethod
    def forward(ctx, x):
        # BEGIN EXERCISE: save only x (ctx.save_for_backward; sigmoid is recomputed in backward: FLOPs for
        #   memory); return x * sigmoid(x) computed in float32 for 16-bit inputs (_opmath), cast back to
        #   x.dtype
        # HINT: what forward saves is what backward can use, and saved tensors live until backward: saving
        #   only x and recomputing sigmoid trades a few FLOPs for a whole activation of memory.
        # HINT: save x on ctx, upcast 16-bit inputs with _opmath, compute x * sigmoid(x) in that precision,
        #   cast back to x.dtype.
        # HINT: `ctx.save_for_backward(x)` and nothing else.
        ctx.save_for_backward(x)  # only x: sigmoid is recomputed, trading FLOPs for memory
        xf = _opmath(x)
        return (xf * torch.sigmoid(xf)).to(x.dtype)
        # END EXERCISE

    @staticmethod
    def backward(ctx, grad_out):
        # BEGIN EXERCISE: recompute s = sigmoid(x) from the saved x; return grad_out * s * (1 + x * (1 -
        #   s)), with torch ops (so that double backward works too)
        # HINT: d/dx [x * s(x)] = s + x * s * (1 - s) = s * (1 + x * (1 - s)); s is recomputed from the saved
        #   x. Using torch ops keeps backward itself differentiable (double backward).
        # HINT: unpack ctx.saved_tensors, upcast, recompute s, return grad_out times the derivative, cast to
        #   x.dtype.
        # HINT: `grad_out * (s * (1 + xf * (1 - s)))`
        (x,) = ctx.saved_tensors
        xf = _opmath(x)
        s = torch.sigmoid(xf)
        # Written with differentiable torch ops, so double backward (gradgradcheck) works too.
        return (grad_out * (s * (1 + xf * (1 - s)))).to(x.dtype)
        # END EXERCISE


class GELUTanhFunction(torch.autograd.Function):
    """The tanh approximation of GELU used by GPT-2, forward and backward by hand.

    y = 0.5 x (1 + t), t = tanh(u), u = K (x + C x^3)
    dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) K (1 + 3 C x^2)
    """

    @staticmethod
    def forward(ctx, x):
        # BEGIN EXERCISE: save x; return 0.5 x (1 + tanh(K (x + C x^3))) (GELU_K, GELU_C) in float32 for
        #   16-bit inputs, cast back
        # HINT: the tanh approximation of GELU: 0.5 x (1 + tanh(K (x + C x^3))); computing it in float32 for
        #   16-bit inputs avoids the cubic's rounding; only x is saved.
        # HINT: save x, upcast with _opmath, one expression with GELU_K and GELU_C, cast back to x.dtype.
        ctx.save_for_backward(x)
        xf = _opmath(x)
        return (0.5 * xf * (1 + torch.tanh(GELU_K * (xf + GELU_C * xf * xf * xf)))).to(x.dtype)
        # END EXERCISE

    @staticmethod
    def backward(ctx, grad_out):
        # BEGIN EXERCISE: dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) K (1 + 3 C x^2), t recomputed from the saved
        #   x; grad_out * dy/dx
        # HINT: with t = tanh(u), u = K (x + C x^3): the product rule on 0.5 x (1 + t) gives 0.5 (1 + t) +
        #   0.5 x t', and t' = (1 - t^2) K (1 + 3 C x^2).
        # HINT: unpack and upcast x, recompute t, build dydx from the formula, return grad_out * dydx in
        #   grad_out's dtype.
        # HINT: `dydx = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * GELU_C * x * x)`
        (x,) = ctx.saved_tensors
        x = _opmath(x)
        t = torch.tanh(GELU_K * (x + GELU_C * x * x * x))
        dydx = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * GELU_C * x * x)
        return (grad_out * dydx).to(grad_out.dtype)
        # END EXERCISE


def silu(x: torch.Tensor) -> torch.Tensor:
    """SiLU through the hand-written Function (matches torch.nn.functional.silu)."""
    return SiLUFunction.apply(_floating(x, "x"))


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh-GELU through the hand-written Function (matches F.gelu(x, approximate='tanh'))."""
    return GELUTanhFunction.apply(_floating(x, "x"))


def check_gradients(fn, x: torch.Tensor, *, double_backward: bool = True) -> bool:
    """gradcheck (and gradgradcheck) of `fn` at a float64 copy of `x`; raises on a wrong backward.

    Finite differences in float32 have errors around sqrt(eps32) ~ 3e-4, larger than the
    tolerance gradcheck needs, so the check always runs in float64.
    """
    x64 = _floating(x, "x").detach().to(torch.float64).requires_grad_(True)
    ok = torch.autograd.gradcheck(fn, (x64,), eps=1e-6, atol=1e-5, rtol=1e-4)
    if double_backward:
        ok = ok and torch.autograd.gradgradcheck(fn, (x64,), eps=1e-6, atol=1e-5, rtol=1e-4)
    return ok


def saved_bytes(fn, x: torch.Tensor) -> int:
    """Bytes of tensors that the graph of `fn(x).sum()` keeps for backward (saved-tensor hooks).

    Compare `lambda x: x * torch.sigmoid(x)` (saves x and sigmoid(x)) with `silu` (saves x).
    Storage shared between saved tensors (x saved twice) is counted once.
    """
    # BEGIN EXERCISE: count in the pack hook of torch.autograd.graph.saved_tensors_hooks(pack, unpack) the
    #   bytes of each tensor saved while building fn(x).sum() (x a fresh leaf that requires grad), each
    #   storage once
    # HINT: saved_tensors_hooks calls pack(t) for every tensor autograd saves while the graph is built, so
    #   counting bytes there measures exactly what backward will keep; the same storage can be saved
    #   twice (x by two ops) and must count once.
    # HINT: a set of keys and a running total; pack(t) adds t.numel() * t.element_size() for unseen keys and
    #   returns t unchanged; make x a fresh leaf requiring grad; run fn(x).sum() inside the hooks context
    #   with an identity unpack.
    # HINT: a key per saved tensor: `(t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))`.
    storages, total = set(), 0

    def pack(t):
        nonlocal total
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key not in storages:
            storages.add(key)
            total += t.numel() * t.element_size()
        return t

    x = _floating(x, "x").detach().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x).sum()
    return total
    # END EXERCISE


# --- hooks -------------------------------------------------------------------------------------

def clamp_grad_hook(t: torch.Tensor, limit: float):
    """Clamp the gradient flowing into `t` to [-limit, limit]; returns the hook's handle.

    The hook runs during backward, before the gradient is used further down the graph
    (or accumulated into `.grad` for a leaf): returning a tensor replaces the gradient.
    """
    if limit <= 0:
        raise ValueError(f"limit must be positive, got {limit}")
    # BEGIN EXERCISE: a tensor hook (t.register_hook) that returns the gradient clamped to [-limit, limit]:
    #   the returned tensor replaces it; return the handle
    # HINT: a tensor hook runs on the gradient flowing into that tensor during backward; if it returns a
    #   tensor, that tensor replaces the gradient (the clipping happens inside backward).
    # HINT: one line: register a lambda that clamps its argument to [-limit, limit] and return the handle
    #   register_hook gives.
    # HINT: `t.register_hook(lambda g: g.clamp(-limit, limit))`
    return t.register_hook(lambda g: g.clamp(-limit, limit))
    # END EXERCISE


def record_activations(model: nn.Module, kinds=(nn.Linear,)):
    """Forward hooks on every submodule of the given kinds: returns (records, handles).

    `records[name]` is the (shape, mean, std) of that module's output on the last forward;
    remove the hooks with `for h in handles: h.remove()` (forgotten hooks leak and slow down).
    """
    # BEGIN EXERCISE: a forward hook (register_forward_hook) on every submodule of the given kinds:
    #   records[name] = (output shape, mean, std) of its output (detached; std 0 for one element); return
    #   (records, handles)
    # HINT: a forward hook sees (module, inputs, output) after each forward; record statistics of the
    #   detached output so the hook adds nothing to the graph.
    # HINT: loop named_modules(), filter with isinstance(module, kinds), define a hook that stores (shape,
    #   mean, std) under its name, keep every handle returned by register_forward_hook.
    # HINT: bind the loop variable as a default argument (`def hook(mod, inputs, output, name=name)`):
    #   otherwise every hook sees the last name.
    records, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, kinds):
            def hook(mod, inputs, output, name=name):
                out = output.detach().float()
                records[name] = (tuple(output.shape), out.mean().item(), out.std().item() if out.numel() > 1 else 0.0)
            handles.append(module.register_forward_hook(hook))
    return records, handles
    # END EXERCISE


def record_grad_norms(model: nn.Module):
    """A post-accumulate-grad hook on each parameter: returns (norms, handles).

    `norms[name]` is the L2 norm of that parameter's gradient after the last backward.
    (Per-parameter hooks like this are how optimizers overlap their step with backward.)
    """
    # BEGIN EXERCISE: register_post_accumulate_grad_hook on each parameter that requires grad: norms[name] =
    #   the L2 norm of its .grad after backward; return (norms, handles)
    # HINT: register_post_accumulate_grad_hook fires once a parameter's .grad is final for this backward (all
    #   contributions summed), the point where a fused optimizer could update that parameter.
    # HINT: loop named_parameters(), skip those not requiring grad, register a hook taking the parameter that
    #   stores param.grad.norm().item() under its name; collect the handles.
    # HINT: again bind `name=name` in the lambda's defaults, or all hooks write the last name.
    norms, handles = {}, []
    for name, p in model.named_parameters():
        if p.requires_grad:
            handles.append(p.register_post_accumulate_grad_hook(
                lambda param, name=name: norms.__setitem__(name, param.grad.norm().item())))
    return norms, handles
    # END EXERCISE


# --- grad modes --------------------------------------------------------------------------------

def grad_mode_demo(model: nn.Module, x: torch.Tensor) -> dict:
    """What the output of `model(x)` carries in each grad mode.

    Returns {mode: {"requires_grad", "has_grad_fn", "is_inference"}} for "grad",
    "no_grad" and "inference_mode", and "inference_tensor_in_autograd": the error text
    autograd raises when an inference-mode tensor is later saved for backward.
    """
    # BEGIN EXERCISE: run the model in each mode (grad, torch.no_grad, torch.inference_mode) and record
    #   requires_grad, has_grad_fn and is_inference of the output; then save the inference-mode output for
    #   backward (multiply it by a tensor that requires grad, backward) and record the first line of the
    #   RuntimeError autograd raises
    # HINT: no_grad records no graph but leaves tensors ordinary; inference_mode also marks the outputs as
    #   inference tensors, which autograd refuses to save for backward later.
    # HINT: three runs (plain, `with torch.no_grad()`, `with torch.inference_mode()`), each recording
    #   requires_grad, grad_fn is not None and is_inference(); then a try: multiply the inference output
    #   by a ones tensor requiring grad and backward, except RuntimeError recording its first line.
    # HINT: the forbidden save: `(inf_out * w).sum().backward()` with `w = torch.ones_like(inf_out,
    #   requires_grad=True)`.
    result = {}
    out = model(x)
    result["grad"] = {"requires_grad": out.requires_grad, "has_grad_fn": out.grad_fn is not None,
                      "is_inference": out.is_inference()}
    with torch.no_grad():
        out = model(x)
    result["no_grad"] = {"requires_grad": out.requires_grad, "has_grad_fn": out.grad_fn is not None,
                         "is_inference": out.is_inference()}
    with torch.inference_mode():
        inf_out = model(x)
    result["inference_mode"] = {"requires_grad": inf_out.requires_grad, "has_grad_fn": inf_out.grad_fn is not None,
                                "is_inference": inf_out.is_inference()}
    try:
        w = torch.ones_like(inf_out, requires_grad=True)
        (inf_out * w).sum().backward()  # mul saves inf_out for w's gradient: not allowed
        result["inference_tensor_in_autograd"] = None
    except RuntimeError as error:
        result["inference_tensor_in_autograd"] = str(error).split("\n")[0]
    return result
    # END EXERCISE
