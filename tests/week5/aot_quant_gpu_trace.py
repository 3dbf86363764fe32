"""The GPU side of aot_quant on a machine WITHOUT a GPU (run as a script; test_aot_quant.py runs it).

    python tests/week5/aot_quant_gpu_trace.py

As aot_gpu_trace.py does for aot_package's ops: course.runtime is told there is a GPU while it
chooses its backend (the kernels are JITFunctions), then torch learns the truth again, so that
fake CUDA tensors need no driver; a stand-in driver names sm_90 and an H100's 132 SMs.
1. `aot_int8_linear`'s GPU body (the quantization lesson's int8_matmul_kernel through
   wrap_triton), traced under functionalization with GPT-2's qkv shape: one launch, which
   Triton's frontend compiles to TTIR; the mutation analysis finds y alone written.
2. The fp8 twin of the tiny capstone model (`aot_quant.fp8_model`, bf16), its weights and buffers
   replaced by fake CUDA tensors, exported by `aot_package.export_programs`: the graphs torch.export
   records for the fp8 package, with no fp8 tensor core in sight (export needs shapes, not values).
Prints "aot_int8_linear ok WRITTEN", then "fp8 GRAPH scaled_mm=N float8_buffers=N course_ops=[...]"
per graph, or "... FAILED ..."; exits 1 on any failure.
"""
import sys
import types

import torch

_available = torch.cuda.is_available
torch.cuda.is_available = lambda: True  # course.runtime picks the GPU backend: JIT kernels
from course import runtime  # noqa: E402
torch.cuda.is_available = _available  # fake CUDA tensors then need no driver

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from capstone import model as cm  # noqa: E402
from week5_integration import aot_package as ap  # noqa: E402
from week5_integration import aot_quant as aq  # noqa: E402

assert runtime.BACKEND == "gpu", runtime.BACKEND
triton.runtime.driver._active = types.SimpleNamespace(get_current_target=lambda: GPUTarget("cuda", 90, 32))
runtime.sm_count = lambda: 132  # the int8 tile heuristic asks for the SM count: an H100's
mode = FakeTensorMode(allow_non_fake_inputs=True)
failed = 0


def fake_cuda(t: torch.Tensor, fake_mode) -> torch.Tensor:
    with fake_mode:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")


def body(op):
    """The function a triton_op was made from (its eager wrapper turns wrap_triton off)."""
    return next(c.cell_contents for c in op._init_fn.__closure__ if callable(c.cell_contents))


try:
    x = fake_cuda(torch.empty(2, 7, 768, dtype=torch.bfloat16), mode)  # T = 7: a ragged 16-row tile
    q = fake_cuda(torch.empty(2304, 768, dtype=torch.int8), mode)
    s = fake_cuda(torch.empty(2304, dtype=torch.float32), mode)
    graph = make_fx(torch.func.functionalize(lambda x, q, s: body(aq.aot_int8_linear)(x, q, s)),
                    tracing_mode="fake")(x, q, s).graph
    launches = [n for n in graph.nodes if n.target is torch.ops.higher_order.triton_kernel_wrapper_functional]
    assert len(launches) == 1, f"{len(launches)} kernel launches traced"
    print("aot_int8_linear ok", sorted(launches[0].kwargs["tensors_to_clone"]))
except Exception as error:
    failed += 1
    print("aot_int8_linear FAILED", f"{type(error).__name__}: {error}"[:500])

try:
    model = aq.fp8_model(cm.build("tiny", "fast", device="cpu", dtype=torch.bfloat16)).eval()
    fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
    for module in model.modules():  # every weight and buffer a fake CUDA tensor of its shape and dtype
        for name, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[name] = torch.nn.Parameter(fake_cuda(p.detach(), fake_mode), requires_grad=False)
        for name, b in list(module._buffers.items()):
            if b is not None:
                module._buffers[name] = fake_cuda(b, fake_mode)
    with fake_mode:
        programs = ap.export_programs(model, max_batch=4, max_len=32)
    for name, program in programs.items():
        nodes = [n for n in program.graph.nodes if n.op == "call_function"]
        scaled = sum(n.target is torch.ops.aten._scaled_mm.default for n in nodes)
        float8 = sum(t.dtype == torch.float8_e4m3fn for t in program.state_dict.values())
        course = sorted({str(n.target).split(".")[1] for n in nodes if str(n.target).startswith("course.")})
        print(f"fp8 {name} scaled_mm={scaled} float8_buffers={float8} course_ops={course}")
except Exception as error:
    failed += 1
    print("fp8 FAILED", f"{type(error).__name__}: {error}"[:800])
sys.exit(1 if failed else 0)
