"""Handing torch tensors to Numba and to CUDA C (PyCUDA), and compiling CUDA C with nvcc.

torch owns the memory in this course; the other tools borrow it without copying.
"""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import torch

from course import runtime


def to_numba(t: torch.Tensor):
    """A Numba device array over `t`'s memory (no copy), or its NumPy view in simulation."""
    if not runtime.on_gpu():
        return t.detach().numpy()  # the simulator's "device arrays" are NumPy arrays
    from numba import cuda

    # sync=False: by default Numba synchronises the stream torch names in the array
    # interface, which stalls the host on every launch. Both libraries queue on the
    # default stream here, so their work is already ordered.
    return cuda.as_cuda_array(t.detach(), sync=False)


def cuda_module(path: Path, defines: tuple[str, ...] = ()):
    """Compile a .cu file with nvcc for this GPU and load it with PyCUDA, once per process and
    `defines` (extra nvcc options, e.g. ("-DTILE64_ROWS=16",) for one point of a sweep): every
    caller gets the same module, so a `__constant__` it fills is the one the kernels read."""
    return _compiled(Path(path).resolve(), tuple(defines))


@functools.cache
def _compiled(path: Path, defines: tuple[str, ...]):
    runtime.pycuda_driver()
    from pycuda.compiler import SourceModule

    major, minor = runtime.capability()
    return SourceModule(path.read_text(), arch=f"sm_{major}{minor}", no_extern_c=True,
                        options=["-O3", "-lineinfo", *defines], include_dirs=[str(path.parent)])


def cuda_kernel(path: Path, name: str, signature: str, defines: tuple[str, ...] = ()):
    """Kernel `name` of the .cu file `path` (compiled by `cuda_module`), prepared with PyCUDA's
    argument `signature` ("PPPq": three pointers and an int64; "i": int32): `prepare` fixes the
    argument types once, so each `prepared_async_call` packs its arguments without inspecting
    Python objects (a few microseconds instead of tens)."""
    kernel = cuda_module(path, defines).get_function(name)
    kernel.prepare(signature)
    return kernel


def nvcc_compile(path: Path, arch: str, out_dir: Path, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`nvcc -cubin` for one architecture: checks a .cu file compiles, no GPU needed. `flags`: more nvcc
    options, e.g. the -I of a header folder that a lesson's launcher names in its own nvcc command."""
    nvcc = runtime.nvcc_path()
    if nvcc is None:
        raise RuntimeError("nvcc is not on PATH")
    cubin = Path(out_dir) / f"{Path(path).stem}.{arch}.cubin"
    command = [nvcc, "-cubin", f"-arch={arch}", "-O3", "-Werror", "all-warnings", *flags, "-o", str(cubin), str(path)]
    return subprocess.run(command, capture_output=True, text=True)
