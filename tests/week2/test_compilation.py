"""week2_pytorch_optimizations.compilation: trace vs script, graph breaks, recompiles, generated code.

Only `test_generated_code_fuses_the_elementwise_ops` runs Inductor (the CPU run's third and last
torch.compile code generation); the others use Dynamo alone, which takes milliseconds.
"""
import torch

from course import runtime
from course.check import assert_close, random_tensor

comp = runtime.lesson("week2_pytorch_optimizations.compilation")


def test_trace_freezes_the_branch_and_script_does_not():
    r = comp.script_and_trace_demo()
    assert_close(r["scripted"], r["eager"])
    assert_close(r["eager"], torch.full((3,), -11.0))  # -1 - 10
    assert_close(r["traced"], torch.full((3,), -2.0))  # -1 * 2: the branch of the example input, frozen


def test_explain_finds_the_print():
    r = comp.graph_breaks(comp.with_a_break, torch.randn(4))
    assert r["graph_count"] == 2 and r["graph_break_count"] == 1
    assert r["break_reasons"], r
    clean = comp.graph_breaks(lambda x: torch.cos(torch.sin(x)), torch.randn(4))
    assert clean["graph_count"] == 1 and clean["graph_break_count"] == 0


def test_recompiles_on_new_shapes_unless_dynamic():
    fn = lambda x: torch.sin(x) * 2  # noqa: E731
    sizes = [4, 8, 16, 8]
    assert comp.count_compiles(fn, sizes, dynamic=False) == 3  # one per distinct shape
    assert comp.count_compiles(fn, sizes) == 2  # static first, then automatic dynamic covers the rest
    assert comp.count_compiles(fn, sizes, dynamic=True) == 1


def test_generated_code_fuses_the_elementwise_ops():
    x = random_tensor(37, torch.float32, runtime.DEVICE)
    code = comp.generated_code(lambda t: torch.sin(t) * 2 + 1, x)
    kernel = "triton_poi_fused" if runtime.on_gpu() else "cpp_fused"
    assert kernel in code and "sin" in code, code[:2000]
