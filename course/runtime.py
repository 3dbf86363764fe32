"""Where the course's kernels run: a real NVIDIA GPU, or a simulation on the CPU.

Import this module before `triton` or `numba`. Both libraries read their switches once,
at import (Numba) or when a kernel is decorated (Triton), so the choice must be made first;
in simulation, importing it after either of them raises a RuntimeError that says so
(`import course` alone does not import it: `from course import runtime` does):

* ``gpu``: `torch.cuda.is_available()`; kernels run on the device, tensors live on ``cuda``.
* ``sim``: no GPU. Triton kernels run in the Triton interpreter (``TRITON_INTERPRET=1``) on
  CPU tensors and Numba kernels in Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).
  The results are the same function; the timings mean nothing.

* ``compile``: no GPU and no interpreter, nothing launches. Triton kernels stay GPU kernels
  (`JITFunction`s) so that `triton.compile` can build them, without a GPU, for any GPU class of
  `GPU_CLASSES` (`python -m course compile-matrix`); tensors live on the CPU.

``COURSE_BACKEND=gpu|sim|compile|auto`` (or ``python -m course --backend ...``) overrides the
choice; ``sim`` on a GPU machine is handy for stepping through a Triton kernel with pdb.
"""
from __future__ import annotations

import atexit
import functools
import importlib
import os
import shutil
import sys
from dataclasses import dataclass

import torch

BACKEND_ENV = "COURSE_BACKEND"
IMPL_ENV = "COURSE_IMPL"  # "solutions" (default) or "exercises": which code `lesson()` loads


def _choose_backend() -> str:
    wanted = os.environ.get(BACKEND_ENV, "auto").strip().lower()
    if wanted not in ("auto", "gpu", "sim", "compile"):
        raise ValueError(f"{BACKEND_ENV} must be 'gpu', 'sim', 'compile' or 'auto', not {wanted!r}")
    has_gpu = torch.cuda.is_available()
    if wanted == "gpu" and not has_gpu:
        raise RuntimeError(f"{BACKEND_ENV}=gpu, but torch sees no CUDA GPU on this machine")
    if wanted == "auto":
        return "gpu" if has_gpu else "sim"
    return wanted


def _triton_made_for_gpu() -> list[str]:
    """What Triton made for a GPU before the interpreter was switched on: 'module.name's.

    `triton.jit` picks, when it decorates a function, between a GPU kernel (`JITFunction`) and an
    interpreted one (`TRITON_INTERPRET=1`). That includes Triton's own library (`tl.max`,
    `tl.sum`, `tl.cdiv`... are @triton.jit functions, decorated when `triton.language` is first
    imported). Launched where there is no GPU, a GPU kernel fails deep inside Triton with
    "0 active drivers ([]). There should only be one."; an interpreted kernel that calls a GPU
    library function fails with "Cannot call @triton.jit'd outside of the scope of a kernel".
    Only module-level names are looked at (where kernels live, and where a script or notebook
    defines them); torch's own modules are left alone.
    """
    jit = sys.modules.get("triton.runtime.jit")
    if jit is None or os.environ.get("TRITON_INTERPRET") == "1":
        return []
    gpu_kernel, wrapper = jit.JITFunction, jit.KernelInterface
    language = sys.modules.get("triton.language")
    found = ["triton.language"] if language is not None and any(
        isinstance(value, gpu_kernel) for value in vars(language).values()) else []
    seen = set()
    for module_name, module in list(sys.modules.items()):
        if module_name.split(".")[0] in ("triton", "torch"):
            continue
        try:
            names = list(vars(module).items())
        except TypeError:  # a stand-in without __dict__
            continue
        for name, value in names:
            for _ in range(8):  # autotune(heuristics(jit(f))): unwrap to the function itself
                if isinstance(value, gpu_kernel):
                    if id(value) not in seen:  # __main__ is also __mp_main__
                        seen.add(id(value))
                        found.append(f"{module_name}.{name}")
                    break
                value = getattr(value, "fn", None) if isinstance(value, wrapper) else None
                if value is None:
                    break
    return found


def _enter_simulation() -> None:
    numba_cuda = sys.modules.get("numba.cuda")
    if numba_cuda is not None and not os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        raise RuntimeError(
            "numba was imported before course.runtime, so its CUDA simulator cannot be turned "
            "on any more: take numba from the course (`from course.gpu import cuda`), or import "
            "course.runtime (`from course import runtime`) first")
    early = _triton_made_for_gpu()
    if early:
        kernels = [name for name in early if name != "triton.language"]
        what = (f"Triton kernel(s) {', '.join(kernels)} were defined (@triton.jit)" if kernels else
                "triton was imported")
        raise RuntimeError(
            f"{what} before course.runtime was imported, so Triton made GPU code (of your kernels "
            "and of its own library: tl.max, tl.sum, ...), and this machine has no GPU: a launch "
            "would fail with \"0 active drivers ([]). There should only be one.\" (or \"Cannot "
            "call @triton.jit'd outside of the scope of a kernel\"). Import triton through the "
            "course (`from course.gpu import triton, tl`), or put `from course import runtime` above "
            "`import triton` and every @triton.jit, at the top of the file or notebook, and run it "
            "again in a fresh process (restart the notebook's kernel); or set TRITON_INTERPRET=1 "
            "before Python starts.")
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    # Bounds-checked loads/stores (an unmasked tail fails its test instead of aborting Python)
    # and a once-rounded tl.fma in Triton's interpreter: see course/sim_triton.py.
    from course import sim_triton
    sim_triton.install()


def _enter_compile_only() -> None:
    """Kernels stay GPU kernels: Triton must not have been switched to its interpreter."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        if "triton.runtime.jit" in sys.modules:
            raise RuntimeError(f"{BACKEND_ENV}=compile needs Triton's GPU kernels, and triton was imported with "
                               "TRITON_INTERPRET=1: start a fresh process without it")
        del os.environ["TRITON_INTERPRET"]
    # Numba's real CUDA target, not its simulator: `numba.cuda.compile_ptx` (course/numba_ptx.py).
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        if "numba.cuda" in sys.modules:
            raise RuntimeError(f"{BACKEND_ENV}=compile needs Numba's CUDA target, and numba.cuda was imported with "
                               "NUMBA_ENABLE_CUDASIM=1: start a fresh process without it")
        del os.environ["NUMBA_ENABLE_CUDASIM"]


BACKEND = _choose_backend()
if BACKEND == "sim":
    _enter_simulation()
elif BACKEND == "compile":
    _enter_compile_only()

DEVICE = torch.device("cuda" if BACKEND == "gpu" else "cpu")
# on_gpu() as a constant: a launcher that checks it on every call reads a global, calls nothing.
ON_GPU = BACKEND == "gpu"


def on_gpu() -> bool:
    return BACKEND == "gpu"


@functools.cache
def _capability_of(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def capability(device=None) -> tuple[int, int] | None:
    """(major, minor) compute capability of the GPU `device` (default: the current one), or None
    in simulation, where the interpreters emulate every construct. Asked of the driver once per
    device, so a launcher may ask on every call (a dictionary lookup)."""
    if not ON_GPU:
        return None
    index = None if device is None else torch.device(device).index
    return _capability_of(torch.cuda.current_device() if index is None else index)


def has_capability(minimum: tuple[int, int], device=None, *, instead: str | None = None) -> bool:
    """Whether `device` can run what needs compute capability `minimum` (sm_90 for TMA and wgmma,
    sm_89 for fp8 tensor cores, sm_80 for bf16 tensor cores); always True in simulation.

    A caller that picks a rung by the answer names what runs below `minimum` in `instead` (the rung,
    by what it is: "the persistent rung (matmul_persistent_kernel)"): the compile matrix's README
    table says it for each GPU class the answer would be no (course/launch_record.py records it)."""
    found = capability(device)
    return found is None or found >= tuple(minimum)


class NotOnThisGpu(RuntimeError):
    """A launcher refused this GPU before any launch; the message names what to use instead.
    The tests skip with that message (tests/conftest.py): the lesson does not run there."""


def require_capability(minimum: tuple[int, int], what: str, instead: str, device=None) -> None:
    """NotOnThisGpu (a RuntimeError) naming `what`, this GPU and `instead` (what to use here) when
    the GPU is older than `minimum`; nothing in simulation."""
    if not has_capability(minimum, device):
        major, minor = capability(device)
        name = torch.cuda.get_device_name(DEVICE if device is None else device) if ON_GPU else "simulated"
        raise NotOnThisGpu(f"{what} needs compute capability >= {minimum[0]}.{minimum[1]}; this GPU "
                           f"({name}) is {major}.{minor}: {instead}")


# What a T4 (sm_75) does with a bf16 tl.dot, measured with Triton 3.6 (`triton.compile(ASTSource(...),
# target=GPUTarget("cuda", 75, 32))` of a 64 x 64 tl.dot, CPU only): it COMPILES, without error or
# warning, and the PTX has no mma instruction and no bf16 conversion: bf16 is widened to fp32 with
# integer shifts (cvt.u32.u16) and the dot becomes 2,048 fma.rn.f32 per thread. For sm_80 the same
# kernel is mma.sync.m16n8k16...bf16. Triton 3.9.0 compiles both the same way. (Both give a float16
# tl.dot on sm_75 the same FMA loop: they emit mma for sm_80 and newer only.) So nothing stops a
# bf16 launch on a T4: it would run as emulated bf16, a path no test or tolerance of the course has
# checked on that GPU. The launchers refuse it before launch instead, naming float16, the 16-bit
# dtype a T4 computes natively.
BF16_MINIMUM = (8, 0)
BF16_INSTEAD = "use float16 (a T4 has neither bf16 tensor cores nor bf16 arithmetic: Triton would emulate bf16)"


def bf16_refusal(what: str) -> tuple[str, str]:
    """(what, instead) of the refusal `require_bf16_tensor_cores` raises: also the compile matrix's
    reason for the bf16 launches it derives (course/launch_record.py)."""
    return f"{what} in bfloat16 (bf16 tensor cores)", BF16_INSTEAD


def require_bf16_tensor_cores(dtype, what: str, device=None) -> None:
    """For a launcher whose kernel has a `tl.dot`: refuse bfloat16 on a GPU without bf16 tensor
    cores (the T4, sm_75; see the note above), naming float16 instead. Nothing for other dtypes,
    or in simulation. One call per public op, before any launch."""
    if dtype == torch.bfloat16:
        require_capability(BF16_MINIMUM, *bf16_refusal(what), device)


def pick(gpu, sim):
    """`gpu` on real hardware, `sim` in simulation: for sizes, which shrink in simulation."""
    return gpu if on_gpu() else sim


def lesson(module: str):
    """Import a lesson module, or its exercise stub when COURSE_IMPL=exercises.

    ``lesson("week1_cuda_python.vector_add")`` gives ``week1_cuda_python.exercises.vector_add``
    under ``pytest --impl=exercises``: the same tests then check the learner's code. The week's
    exercises/ mirrors the week: ``week4_triton_dl.norms.rmsnorm`` ->
    ``week4_triton_dl.exercises.norms.rmsnorm``.
    """
    impl = os.environ.get(IMPL_ENV, "solutions")
    if impl not in ("solutions", "exercises"):
        raise ValueError(f"{IMPL_ENV} must be 'solutions' or 'exercises', not {impl!r}")
    if impl == "exercises":
        week, _, name = module.partition(".")
        module = f"{week}.exercises.{name}"
    return importlib.import_module(module)


_pycuda_context = None


def pycuda_driver():
    """`pycuda.driver`, running in the same CUDA context as torch, Triton and Numba.

    `import pycuda.autoinit` would create a second, private context: Numba then finds no
    context of its own and torch's tensors are not visible to it. Retaining the device's
    *primary* context (the one the runtime API, and so torch, uses) shares everything.
    """
    global _pycuda_context
    if not on_gpu():
        raise RuntimeError("PyCUDA launches need a real NVIDIA GPU and its driver; "
                           f"this run uses the {BACKEND!r} backend")
    import pycuda.driver as drv

    if _pycuda_context is None:
        torch.cuda.init()  # makes torch create the primary context first
        drv.init()
        _pycuda_context = drv.Device(torch.cuda.current_device()).retain_primary_context()
        _pycuda_context.push()
        atexit.register(_pycuda_context.pop)
    return drv


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


def _version(module: str) -> str | None:
    try:
        mod = importlib.import_module(module)
    except Exception:  # an optional tool that is absent or cannot load here
        return None
    version = getattr(mod, "__version__", None) or getattr(mod, "VERSION_TEXT", None)
    return str(version) if version is not None else "installed"


def describe() -> dict:
    """What runs the kernels: the facts that go into every results file."""
    info = {
        "backend": BACKEND,
        "device": str(DEVICE),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "triton": _version("triton"),
        "numba": _version("numba"),
        "numba_cuda": _version("numba_cuda"),
        "numpy": _version("numpy"),
        "pycuda": _version("pycuda") if on_gpu() else None,
        "nvcc": nvcc_path(),
    }
    if on_gpu():
        props = torch.cuda.get_device_properties(DEVICE)
        info.update({
            "gpu": props.name,
            "compute_capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "l2_cache_mib": round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
            "cuda_runtime": torch.version.cuda,
        })
    else:
        info["gpu"] = None
    return info


@dataclass(frozen=True)
class GpuClass:
    """One class of GPU a learner has: what a kernel's launch must fit in there.

    `shared_per_block`: the opt-in maximum of shared memory one block may use (bytes);
    `registers_per_block`: 32-bit registers one block may use (registers per thread x threads);
    `bf16_dot`, `fp8_dot`, `tma`: whether its tensor cores take bf16 / fp8 and it has a TMA engine
    (a bf16 `tl.dot` compiles on sm_75 too, to emulated bf16 and FMAs: launchers refuse it there,
    `require_bf16_tensor_cores`)."""
    name: str
    capability: tuple[int, int]
    shared_per_block: int
    registers_per_block: int = 65536
    bf16_dot: bool = True
    fp8_dot: bool = False
    tma: bool = False

    @property
    def arch(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"


# The GPUs the course's learners have (CUDA C Programming Guide, "Technical Specifications per
# Compute Capability": shared memory per block, opt-in; 64K registers per block on all of them).
GPU_CLASSES = (
    GpuClass("T4", (7, 5), 64 * 1024, bf16_dot=False),
    GpuClass("A100", (8, 0), 163 * 1024),
    GpuClass("RTX 30 / A10", (8, 6), 99 * 1024),
    GpuClass("L4 / RTX 40", (8, 9), 99 * 1024, fp8_dot=True),
    GpuClass("H100", (9, 0), 227 * 1024, fp8_dot=True, tma=True),
)


def gpu_class(cap: tuple[int, int] | None = None) -> GpuClass | None:
    """The class of a GPU of compute capability `cap` (default: this one's, or the pretended one's):
    the newest class not newer than it; None in simulation or for a GPU older than sm_75."""
    cap = capability() if cap is None else tuple(cap)
    if cap is None:
        return None
    older = [c for c in GPU_CLASSES if c.capability <= cap]
    return older[-1] if older else None


def shared_memory_per_block() -> int:
    """Bytes of shared memory one block may use on this GPU: the opt-in maximum (227 KB on an
    H100, 64 KB on a T4), what a kernel's pipeline buffers must fit in; off a GPU, that of the
    class `capability()` pretends (the compile matrix, tests), else 2^30: nothing limits the
    interpreter."""
    if not on_gpu():
        pretended = gpu_class()
        return pretended.shared_per_block if pretended is not None else 1 << 30
    props = torch.cuda.get_device_properties(DEVICE)
    return int(getattr(props, "shared_memory_per_block_optin", 0) or 232448)


@functools.cache
def _sm_count_of(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count() -> int:
    """Multiprocessors to fill (of the current GPU); a small stand-in in simulation, where there are
    none. Asked of torch once per device, so a persistent kernel's launcher may ask on every call."""
    return _sm_count_of(torch.cuda.current_device()) if on_gpu() else 2


if BACKEND == "sim" and os.environ.get("COURSE_RECORD_LAUNCHES"):
    # Every launch's specialization and the capability questions its launcher asked, for the
    # compile matrix (course/launch_record.py); last, once has_capability and the rest exist.
    from course import launch_record
    launch_record.install(os.environ["COURSE_RECORD_LAUNCHES"], sys.modules[__name__])
