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
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    _, codes = run_and_get_code(torch.compile(fn), *args)
    torch._dynamo.reset()
    return "\n".join(codes)
    # END EXERCISE
