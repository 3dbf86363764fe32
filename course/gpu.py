"""The one import line of a kernel lesson: the GPU libraries, after the backend is chosen.

    from course.gpu import triton, tl, DEVICE        # a Triton lesson
    from course.gpu import cuda, float32, DEVICE     # a Numba lesson (numba.cuda, numba.float32)

Triton and Numba read their switches once (Numba at import, Triton when a kernel is
decorated), so `course.runtime` must choose the GPU or the simulation before either is
imported. This module does it in that order, so a lesson needs no "import runtime first"
comment and no linter exception for imports after it. Numba is imported only when `cuda`
or one of its scalar types (`float32`, `int32`, ...: the dtypes of `cuda.shared.array` and
`cuda.local.array`) is asked for: a Triton lesson does not pay for it.
"""
from __future__ import annotations

from course import runtime  # first: chooses the GPU, the simulation or compile-only
from course.runtime import BACKEND, DEVICE, ON_GPU

import triton
import triton.language as tl

# Numba's scalar types a kernel names (numba.float32 is the type of a shared-memory array).
NUMBA_TYPES = ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
               "uint32", "uint64", "boolean")

__all__ = ["triton", "tl", "cuda", "DEVICE", "ON_GPU", "BACKEND", "runtime", *NUMBA_TYPES]


def __getattr__(name: str):
    # `from course.gpu import cuda` lands here (module-level __getattr__, PEP 562): Numba's
    # CUDA module, imported now, after the backend's environment switches are set.
    if name == "cuda":
        from numba import cuda

        return cuda
    if name in NUMBA_TYPES:
        import numba

        return getattr(numba, name)
    raise AttributeError(f"module 'course.gpu' has no attribute {name!r}")
