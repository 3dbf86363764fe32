"""JIT and compilation: TorchScript's two tracers, Dynamo's graph breaks, recompilation, Inductor's code.

What it teaches:
* `torch.jit.trace` runs the function once and records the ops it saw: Python control flow that
  depends on the data is frozen to the branch taken (a silent wrong answer on other inputs).
  `torch.jit.script` compiles the Python source instead, but only a subset of Python. Both are
  deprecated in favour of `torch.compile`, which traces bytecode (Dynamo), guards on what it
  assumed, and falls back to Python where it cannot trace (a *graph break*) instead of failing.
* `torch._dynamo.explain(fn)(*args)` counts the graphs and says why each break happened
  (`print`, `.item()` feeding Python control flow, unsupported calls).
* guards: a compiled function is specialized to its input shapes. A new shape recompiles;
  after the first recompile Dynamo marks the dimension dynamic ("automatic dynamic"), and
  `dynamic=True` asks for symbolic shapes from the start (one compile, possibly slower code).
* `generated_code` returns the source Inductor wrote: Triton kernels on a GPU (the same thing
  `TORCH_LOGS=output_code python script.py` prints), C++ on the CPU. Fused ops are one kernel
  named after them (`triton_poi_fused_mul_sin_...`).

Cost model: Dynamo's tracing costs milliseconds; Inductor's code generation costs seconds (more
on the CPU, where a C++ compiler runs). Every recompile pays it again.
"""
from __future__ import annotations

import warnings

import torch


# EXERCISE NOTE: Only `generated_code` runs Inductor (10-40 s of C++ code generation on a CPU, a few
#   seconds on a GPU); the others use Dynamo alone or a backend that only counts, and take milliseconds.

def branchy(x: torch.Tensor) -> torch.Tensor:
    """Data-dependent control flow: the branch depends on the values, not the shapes."""
    if x.sum() > 0:
        return x * 2
    return x - 10


def script_and_trace_demo() -> dict:
    """`trace` freezes the branch of its example input; `script` and `torch.compile` do not."""
    # BEGIN EXERCISE: trace branchy with the example input torch.ones(3) and script it; call both, and eager
    #   branchy, on -torch.ones(3); return {'eager', 'traced', 'scripted'}: the traced one recorded only the
    #   ops it saw. Silence the trace and the script in warnings.catch_warnings() + simplefilter('ignore'):
    #   the TracerWarning is exactly this bug
    # HINT: tracing runs the function once and records the ops that actually executed, so a Python `if` on
    #   tensor values is frozen to the branch the example took; scripting compiles the Python source,
    #   branches included.
    # HINT: build a positive and a negative input; inside a catch_warnings block that ignores warnings, trace
    #   with the positive example and script; return the three results on the negative input.
    # HINT: `torch.jit.trace(branchy, (pos,))`: the example input decides which branch is baked in.
    pos, neg = torch.ones(3), -torch.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarning (the frozen branch) and the deprecation notice
        traced = torch.jit.trace(branchy, (pos,))
        scripted = torch.jit.script(branchy)
    return {"eager": branchy(neg), "traced": traced(neg), "scripted": scripted(neg)}
    # END EXERCISE


def graph_breaks(fn, *args) -> dict:
    """Graphs, breaks and break reasons that Dynamo finds in `fn(*args)` (no code generation)."""
    # BEGIN EXERCISE: torch._dynamo.reset() first (forget earlier compiles), then out =
    #   torch._dynamo.explain(fn)(*args); return {'graph_count', 'graph_break_count', 'break_reasons': the
    #   first line of str(r.reason) for each break}
    # HINT: Dynamo's explain runs the function through the tracer without generating code and reports how
    #   many graphs it had to split it into and why; a reset first stops earlier compiles' caches from
    #   hiding breaks.
    # HINT: reset, call `torch._dynamo.explain(fn)(*args)`, and return its graph_count, graph_break_count and
    #   the first line of each break reason.
    # HINT: a reason may be an object with `.reason` or a plain string: `str(getattr(r, 'reason',
    #   r)).split('\n')[0]`.
    torch._dynamo.reset()
    out = torch._dynamo.explain(fn)(*args)
    return {"graph_count": out.graph_count, "graph_break_count": out.graph_break_count,
            "break_reasons": [str(getattr(r, "reason", r)).split("\n")[0] for r in out.break_reasons]}
    # END EXERCISE


def with_a_break(x: torch.Tensor) -> torch.Tensor:
    y = torch.sin(x)
    print("about to cos")  # a side effect Dynamo cannot put in a graph: one break here
    return torch.cos(y)


def count_compiles(fn, sizes, *, dynamic=None) -> int:
    """How many graphs `torch.compile(fn, dynamic=dynamic)` builds over inputs of these sizes.

    Uses a backend that only counts (no Inductor), so it is cheap enough for any machine.
    """
    # BEGIN EXERCISE: a backend that only counts: torch.compile(fn, backend=counting_backend,
    #   dynamic=dynamic), where counting_backend(gm, example_inputs) adds one and returns gm.forward; call
    #   it on torch.randn(n) for each size; torch._dynamo.reset() before and after
    # HINT: a custom backend is just a callable receiving the FX GraphModule Dynamo captured; counting its
    #   calls counts compilations, which shows recompiles on new shapes (static) versus one shape-generic
    #   graph (dynamic=True).
    # HINT: a nonlocal counter; a backend that increments it and returns gm.forward unchanged; reset;
    #   torch.compile with that backend and `dynamic`; call on randn of each size; reset again; return
    #   the count.
    # HINT: a backend must return a callable that runs the graph: `gm.forward` just runs it eagerly, so only
    #   the count changes.
    compiles = 0

    def counting_backend(gm, example_inputs):
        nonlocal compiles
        compiles += 1
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=counting_backend, dynamic=dynamic)
    for n in sizes:
        compiled(torch.randn(n))
    torch._dynamo.reset()
    return compiles
    # END EXERCISE


def generated_code(fn, *args) -> str:
    """The source Inductor generates for `fn(*args)`: Triton on a GPU, C++ on the CPU."""
    # BEGIN EXERCISE: run_and_get_code(torch.compile(fn), *args) (from torch._inductor.utils) runs it and
    #   returns the generated sources: join them with newlines; torch._dynamo.reset() before and after
    # HINT: Inductor writes source code (Triton kernels on a GPU, C++ on a CPU); run_and_get_code runs the
    #   compiled function and hands that source back.
    # HINT: import run_and_get_code from torch._inductor.utils; reset; take the second item of its result for
    #   `torch.compile(fn)` and the args; reset; join the sources with newlines.
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    _, codes = run_and_get_code(torch.compile(fn), *args)
    torch._dynamo.reset()
    return "\n".join(codes)
    # END EXERCISE
