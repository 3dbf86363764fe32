"""Every Numba kernel the tests launch, compiled to PTX for the GPU classes a learner has, without a GPU.

Week 1's kernels are `@cuda.jit` functions, typed when first launched: there is no signature to
compile from until a launch gives one. So the simulation run that records the Triton launches
(COURSE_RECORD_LAUNCHES, course/launch_record.py) records each Numba launch too, as one line
{"numba": true, "kernel": "module:name", "args": [...]}: each argument's Numba type as the
GPU would see it (`numba.typeof`: a NumPy array in the simulator, a device array on a GPU, both
`array(dtype, ndim, layout)`; a Python int is int64 either way). `python -m course compile-matrix`
then compiles each of them with `numba.cuda.compile_ptx(..., cc=...)` for every class of
`runtime.GPU_CLASSES` (cc 7.5 for Colab's T4 first).

That needs Numba's real CUDA target, not its simulator: the compile-only backend
(COURSE_BACKEND=compile) leaves NUMBA_ENABLE_CUDASIM unset, and the kernels stay dispatchers
whose Python function `compile_ptx` takes. No GPU or driver is needed; NVVM (libnvvm, from the
CUDA toolkit or the nvidia-cuda-nvcc wheel) is: where it is absent the check says so and is not
counted.

PTX is what Numba hands the driver, which assembles it for the GPU at load time: a kernel whose
PTX compiles for cc 7.5 loads on a T4. Shared memory and registers are not judged here (the
driver's assembler decides them); the CUDA C sources' `nvcc -cubin` test does that for week 1's
CUDA C.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import sys
import types

MARK = "numba"


# --------------------------------------------------------------------------- recording (simulation)
def _type_of(value):
    """A launch argument's Numba type as JSON: {"array": [dtype, ndim, layout]} or a scalar's name."""
    import numba

    value = getattr(value, "_ary", value)  # the simulator's device array (cuda.to_device) wraps NumPy's
    kind = numba.typeof(value)
    if isinstance(kind, numba.types.Array):
        return {"array": [str(kind.dtype), kind.ndim, kind.layout]}
    if isinstance(kind, (numba.types.Integer, numba.types.Float, numba.types.Boolean)):
        return str(kind)
    raise TypeError(f"an argument of Numba type {kind} cannot be recorded")


def reference(kernel, module_name: str) -> str | None:
    """Where `kernel` lives in its module, for a process that imports it: a module-level name, or
    an entry of a module-level dict (`_TILED[('padded', True, torch.float32)]`), key by its repr.
    Kernels made by a factory (`_tiled_kernel(pad, dtype)`) are found through the name they are
    bound to; None for one bound to nothing (made anew at each call)."""
    for name, value in vars(sys.modules[module_name]).items():
        if value is kernel:
            return name
        if isinstance(value, dict):
            for key, entry in value.items():
                if entry is kernel:
                    return f"{name}[{key!r}]"
    return None


def resolve(module, where: str):
    """The kernel `reference` named, in this process."""
    name, _, key = where.partition("[")
    value = getattr(module, name, None)
    if key:
        value = next((entry for k, entry in (value or {}).items() if repr(k) == key[:-1]), None)
    return value


def specialization(kernel, args: tuple) -> dict:
    """The recordable specialization of a launch of `kernel` (its Python function: `kernel.fn`)."""
    fn = kernel.fn
    where = reference(kernel, fn.__module__)
    if where is None:
        return {MARK: True, "kernel": f"{fn.__module__}:{fn.__qualname__}",
                "not_checked": "made anew at each call (bound to no module-level name): not compiled here"}
    return {MARK: True, "kernel": f"{fn.__module__}:{where}", "args": [_type_of(a) for a in args]}


def install(write, is_course_kernel) -> None:
    """Record each host launch of a course's Numba kernel in the simulator with `write(spec)`."""
    from numba.cuda.simulator import kernel as sim_kernel

    plain_call = sim_kernel.FakeCUDAKernel.__call__
    if getattr(plain_call, "_course_recorded", False):
        return

    def call(self, *args):
        # A device function, or a kernel called from inside one, is not a launch.
        if not (self._device or sim_kernel._kernel_context) and is_course_kernel(self.fn.__module__):
            try:
                spec = specialization(self, args)
                if self._fastmath:
                    spec["fastmath"] = True
            except (TypeError, ValueError) as error:
                spec = {MARK: True, "kernel": f"{self.fn.__module__}:{self.fn.__qualname__}",
                        "unrecordable": str(error)}
            write(spec)
        return plain_call(self, *args)

    call._course_recorded = True
    sim_kernel.FakeCUDAKernel.__call__ = call


# --------------------------------------------------------------------------- compiling (compile-only)
def signature(spec: dict) -> tuple:
    from numba import types

    found = []
    for arg in spec["args"]:
        if isinstance(arg, dict):
            dtype, ndim, layout = arg["array"]
            found.append(types.Array(getattr(types, dtype), ndim, layout))
        else:
            found.append(getattr(types, arg))
    return tuple(found)


@contextlib.contextmanager
def device_functions_for(cc: tuple[int, int]):
    """Let a kernel that calls a `@cuda.jit(device=True)` function compile without a GPU.

    numba-cuda 0.30.4 types such a call with `CUDADispatcher.compile_device`, which asks the
    driver for the current device's compute capability (`get_current_device()`, as imported into
    numba.cuda.dispatcher) even inside `compile_ptx(..., cc=...)`, and fails with "Error at driver
    init" where there is none. For the compile it is answered with `cc`. The device function is
    compiled once per argument types and kept (its LLVM IR is linked into each kernel, and NVVM
    then compiles the whole for the kernel's cc). A numba-cuda that moves the name fails
    tests/test_compile_matrix.py::test_numba_kernels_compile_to_ptx_for_every_class (week 1's
    Blelloch scan calls the device function `padded`), which pins this dependency."""
    from numba.cuda import dispatcher

    plain = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=tuple(cc))
    try:
        yield
    finally:
        dispatcher.get_current_device = plain


def nvvm_missing() -> str | None:
    """Why Numba cannot compile PTX here (no NVVM), or None."""
    try:
        from numba.cuda.cudadrv.nvvm import NVVM
        NVVM()
    except Exception as error:  # NvvmSupportError and the loader's own errors
        return f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return None


def numpy_row_stack_alias() -> None:
    """numba-cuda 0.30.4 registers an overload of `np.row_stack` when its array typing is first loaded
    (numba/cuda/np/arrayobj.py); numpy 2.4, the GPU image's and what `pip install` gives a learner
    today, removed that alias of `np.vstack`. Every `compile_ptx` then failed there with "module 'numpy'
    has no attribute 'row_stack'" (H200, 2026-12-06); the alias is put back, in this process only."""
    import numpy
    if not hasattr(numpy, "row_stack"):
        numpy.row_stack = numpy.vstack


def compile_all(specs: list[dict], gpus) -> dict:
    """{"kernels", "specializations", "targets", "compiled", "failed", "failures", "not_launched", ...}:
    each distinct recorded Numba specialization compiled to PTX for each class of `gpus`."""
    import numba
    from numba import cuda

    specs = [s for s in specs if s.get(MARK)]
    skipped = sorted({f"{s['kernel']} ({s['not_checked']})" for s in specs if "not_checked" in s})
    specs = [s for s in specs if "not_checked" not in s]
    distinct = {}
    for spec in specs:
        distinct.setdefault(repr((spec["kernel"], spec.get("args"), spec.get("fastmath"))), spec)
    result = {"kernels": len({s["kernel"] for s in specs}), "specializations": len(distinct), "not_compiled": skipped,
              "targets": [g.arch for g in gpus], "compiled": 0, "failed": 0, "failures": [],
              "numba_cuda": f"numba-cuda {importlib.metadata.version('numba-cuda')}, numba {numba.__version__}"}
    missing = nvvm_missing() if specs else None
    if missing:
        result["not_checked"] = f"no NVVM on this machine ({missing})"
        return result
    numpy_row_stack_alias()
    modules = {}
    for spec in distinct.values():
        module_name, _, name = spec["kernel"].partition(":")
        if "unrecordable" in spec:
            result["failed"] += len(gpus)
            result["failures"].append(f"{spec['kernel']}: not recorded: {spec['unrecordable']}")
            continue
        module = modules.setdefault(module_name, importlib.import_module(module_name))
        fn = getattr(resolve(module, name), "py_func", None)
        if fn is None:
            raise LookupError(f"{spec['kernel']} is not a module-level @cuda.jit kernel under COURSE_BACKEND=compile")
        for gpu in gpus:
            try:
                with device_functions_for(gpu.capability):
                    cuda.compile_ptx(fn, signature(spec), cc=gpu.capability, fastmath=bool(spec.get("fastmath")))
                result["compiled"] += 1
            except Exception as error:  # a kernel that does not compile would not launch either
                result["failed"] += 1
                result["failures"].append(f"{spec['kernel']} {spec['args']} for {gpu.arch}: "
                                          f"{type(error).__name__}: {str(error)[:300]}")
    # Module-level kernels of the same modules that no test launched: not checked, and said so.
    launched = {s["kernel"] for s in specs}
    from numba.cuda.dispatcher import CUDADispatcher
    result["not_launched"] = sorted(
        f"{module_name}:{name}" for module_name, module in modules.items() for name, value in vars(module).items()
        if isinstance(value, CUDADispatcher) and not value.targetoptions.get("device")
        and getattr(value.py_func, "__module__", None) == module_name and f"{module_name}:{name}" not in launched)
    return result


def summary(result: dict) -> str:
    head = (f"Numba: {result['kernels']} kernels, {result['specializations']} specializations recorded, compiled to "
            f"PTX for {', '.join(result['targets'])}")
    if "not_checked" in result:
        return f"{head}: not checked, {result['not_checked']}"
    return (f"{head}: {result['compiled']} compile, {result['failed']} FAIL"
            + (f"; not launched by any test (not checked): {', '.join(result['not_launched'])}"
               if result.get("not_launched") else "")
            + (f"; launched, not compiled: {', '.join(result['not_compiled'])}" if result.get("not_compiled") else ""))
