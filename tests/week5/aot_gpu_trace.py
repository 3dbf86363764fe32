"""Trace the GPU branch of aot_package's triton_ops on a machine WITHOUT a GPU (run as a script).

    python tests/week5/aot_gpu_trace.py     (test_aot_package.py runs it in a fresh process)

course.runtime is told there is a GPU while it chooses its backend, so the course's kernels are
real JITFunctions (not interpreted ones, which wrap_triton refuses), then torch learns the truth
again, so that fake CUDA tensors need no driver. Each op's body is traced under functionalization
(what AOTInductor does to a triton_op), and Triton's frontend compiles every kernel to TTIR for
sm_90 (a stand-in driver names the target): the launch's arguments bind to the kernel's
parameters, the constexprs exist, and the mutation analysis finds only the outputs written.
Prints one line per op, "OP ok WRITTEN" or "OP FAILED ...", and exits 1 on any failure.
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

from week5_integration import aot_package as ap  # noqa: E402

assert runtime.BACKEND == "gpu", runtime.BACKEND
triton.runtime.driver._active = types.SimpleNamespace(get_current_target=lambda: GPUTarget("cuda", 90, 32))
mode = FakeTensorMode(allow_non_fake_inputs=True)


def fake(*shape, dtype=torch.bfloat16):
    with mode:
        return torch.empty(*shape, device="cuda", dtype=dtype)


def body(op):
    """The function a triton_op was made from (its eager wrapper turns wrap_triton off)."""
    return next(c.cell_contents for c in op._init_fn.__closure__ if callable(c.cell_contents))


B, T, H, D = 2, 7, 12, 64  # GPT-2 small's heads; T odd: ragged tiles
x, w = fake(B, T, H * D), fake(H * D)
qkv = fake(B, T, 3, H, D)  # q, k, v: strided views of one projection, as the model makes them
q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
cos, sin = fake(T, D // 2, dtype=torch.float32), fake(T, D // 2, dtype=torch.float32)
CASES = {"aot_rms_norm": (lambda x, w: body(ap.aot_rms_norm)(x, w, 1e-5), (x, w)),
         "aot_add_rms_norm": (lambda x, w: body(ap.aot_add_rms_norm)(x, x, w, 1e-5), (x, w)),
         "aot_rope": (lambda q, k, c, s: body(ap.aot_rope)(q, k, c, s), (q, k, cos, sin)),
         "aot_causal_attention": (lambda q, k, v: body(ap.aot_causal_attention)(q, k, v), (q, k, v)),
         "aot_swiglu": (lambda h: body(ap.aot_swiglu)(h), (fake(B, T, 2 * 2048),))}
failed = 0
for name, (fn, args) in CASES.items():
    try:
        graph = make_fx(torch.func.functionalize(fn), tracing_mode="fake")(*args).graph
        launches = [n for n in graph.nodes if n.target is torch.ops.higher_order.triton_kernel_wrapper_functional]
        assert len(launches) == 1, f"{len(launches)} kernel launches traced"
        print(name, "ok", sorted(launches[0].kwargs["tensors_to_clone"]))
    except Exception as error:  # report every op, then fail
        failed += 1
        print(name, "FAILED", f"{type(error).__name__}: {error}"[:500])
sys.exit(1 if failed else 0)
