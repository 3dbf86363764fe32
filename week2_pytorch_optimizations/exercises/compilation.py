"""Exercise: TorchScript's trace vs script, Dynamo's graph breaks and recompiles, Inductor's code.
Same names as week2_pytorch_optimizations/compilation.py.

Check your work with `pytest tests/week2/test_compilation.py --impl=exercises`. Each stub raises
NotImplementedError until you write it; delete that line when you do. Only `generated_code`
runs Inductor (10-40 s of C++ code generation on a CPU, a few seconds on a GPU); the others
use Dynamo alone or a backend that only counts, and take milliseconds.
"""
from __future__ import annotations

import warnings  # noqa: F401  (torch.jit warns twice; silence it with warnings.catch_warnings)

import torch


def branchy(x: torch.Tensor) -> torch.Tensor:
    """Given: data-dependent control flow; the branch depends on the values, not the shapes."""
    if x.sum() > 0:
        return x * 2
    return x - 10


def with_a_break(x: torch.Tensor) -> torch.Tensor:
    """Given: a function with one side effect Dynamo cannot put in a graph."""
    y = torch.sin(x)
    print("about to cos")
    return torch.cos(y)


def script_and_trace_demo() -> dict:
    """What `torch.jit.trace` and `torch.jit.script` make of `branchy`.

    Trace `branchy` with the example input `torch.ones(3)` and script it; call both, and eager
    `branchy`, on `-torch.ones(3)`. Return {"eager", "traced", "scripted"}: the three results.
    The traced one recorded only the ops it saw (x * 2) and gives -2 where eager gives -11.
    Wrap the trace and the script in `warnings.catch_warnings()` + `simplefilter("ignore")`:
    the TracerWarning you silence is exactly this bug, and TorchScript is deprecated.
    """
    raise NotImplementedError("not implemented yet: script_and_trace_demo (week2 exercise)")


def graph_breaks(fn, *args) -> dict:
    """Ask Dynamo where `fn(*args)` breaks into several graphs, without generating any code.

    `torch._dynamo.reset()` first (forget earlier compiles), then
    `out = torch._dynamo.explain(fn)(*args)`. Return {"graph_count": out.graph_count,
    "graph_break_count": out.graph_break_count, "break_reasons": [the first line of
    str(r.reason) for each r in out.break_reasons]}. `with_a_break` gives 2 graphs, 1 break.
    """
    raise NotImplementedError("not implemented yet: graph_breaks (week2 exercise)")


def count_compiles(fn, sizes, *, dynamic=None) -> int:
    """How many graphs `torch.compile(fn, backend=..., dynamic=dynamic)` builds when called on
    `torch.randn(n)` for each n in `sizes`.

    Write a backend that only counts: `def counting_backend(gm, example_inputs)` adds one to a
    counter and returns `gm.forward` (runs the graph as is, no Inductor). `torch._dynamo.reset()`
    before and after, so earlier compiles do not leak in. Predict before you run it, for sizes
    [4, 8, 16, 8]: dynamic=False, None (the default: automatic dynamic after one recompile) and
    True.
    """
    raise NotImplementedError("not implemented yet: count_compiles (week2 exercise)")


def generated_code(fn, *args) -> str:
    """The source Inductor writes for `torch.compile(fn)(*args)`: Triton on a GPU, C++ on a CPU.

    `from torch._inductor.utils import run_and_get_code`; `_, codes = run_and_get_code(compiled,
    *args)` runs it and returns the list of generated sources; join them with newlines.
    `torch._dynamo.reset()` before and after. Look for one fused kernel (`triton_poi_fused_...` /
    `cpp_fused_...`) for `sin(t) * 2 + 1`: three ops, one read of t, one write.
    """
    raise NotImplementedError("not implemented yet: generated_code (week2 exercise)")
