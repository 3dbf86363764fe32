"""What a Triton kernel moves and computes, counted by the interpreter (simulation has no clock worth reading).

In simulation a kernel's time measures Python, but its traffic and arithmetic are the kernel's
own: `counting()` wraps the interpreter's builder for the duration of a `with` block and counts
* bytes loaded and stored: every active lane (mask true) of every tl.load / tl.store, block
  pointers and tensor descriptors included (they all reach the builder's masked load and store),
  at the element size of the pointer's type;
* FLOPs: tl.dot as 2 x M x N x K (batched dots times the batch); every floating-point add, sub,
  mul, div, exp, exp2, log, log2, sqrt, rsqrt, sin, cos, erf on a block as 1 per lane (padding lanes
  included: the GPU computes them too), fma as 2; comparisons, max/min, casts and reductions
  (tl.sum, tl.max) are not counted.
Bytes are what the kernel asks for, not what DRAM serves: a GPU's caches can turn a second read of
the same row into an L2 hit, so on a GPU the kernel moves at most this many bytes.

It wraps whatever the builder's methods are when the block is entered (course/sim_triton.py's
bounds-checked load and store included) and restores them on exit, so sim_triton is untouched.
"""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

_ELEMENTWISE = ("create_fadd", "create_fsub", "create_fmul", "create_fdiv", "create_precise_divf", "create_exp",
                "create_exp2", "create_log", "create_log2", "create_sqrt", "create_precise_sqrt", "create_rsqrt",
                "create_sin", "create_cos", "create_erf", "create_frem")


@dataclasses.dataclass
class Counts:
    loaded: int = 0    # bytes
    stored: int = 0    # bytes
    flops: int = 0
    dots: int = 0      # tl.dot calls (their FLOPs are in `flops`)
    launches: int = 0  # interpreted kernel launches

    def intensity(self) -> float | None:
        moved = self.loaded + self.stored
        return self.flops / moved if moved else None


def _lanes(mask) -> int:
    return int(np.count_nonzero(mask.data)) if mask is not None else 0


def _itemsize(handle) -> int:
    return int(np.asarray(handle.data).dtype.itemsize)


def _elements(handle) -> int:
    return int(np.asarray(handle.data).size)


@contextlib.contextmanager
def counting():
    """`with counting() as counts:` every interpreted Triton launch inside adds to `counts`."""
    from triton.runtime import interpreter

    builder, executor = interpreter.InterpreterBuilder, interpreter.GridExecutor
    counts = Counts()
    saved = {name: getattr(builder, name) for name in ("create_masked_load", "create_masked_store", "create_dot",
                                                        "create_fma", *_ELEMENTWISE) if hasattr(builder, name)}
    call = executor.__call__

    def load(self, ptrs, mask, other, *args, **kwargs):
        out = saved["create_masked_load"](self, ptrs, mask, other, *args, **kwargs)
        counts.loaded += _lanes(mask) * _itemsize(out)
        return out

    def store(self, ptrs, value, mask, *args, **kwargs):
        counts.stored += _lanes(mask) * _itemsize(value)
        return saved["create_masked_store"](self, ptrs, value, mask, *args, **kwargs)

    def dot(self, a, b, d, *args, **kwargs):
        a_shape, b_shape = np.shape(a.data), np.shape(b.data)
        batch = int(np.prod(a_shape[:-2])) if len(a_shape) > 2 else 1
        counts.flops += 2 * batch * a_shape[-2] * a_shape[-1] * b_shape[-1]
        counts.dots += 1
        return saved["create_dot"](self, a, b, d, *args, **kwargs)

    def fma(self, x, y, z):
        counts.flops += 2 * max(_elements(x), _elements(y), _elements(z))
        return saved["create_fma"](self, x, y, z)

    def elementwise(name):
        original = saved[name]

        def op(self, *operands):
            counts.flops += max(_elements(o) for o in operands)
            return original(self, *operands)
        return op

    def launch(self, *args, **kwargs):
        counts.launches += 1
        return call(self, *args, **kwargs)

    replaced = {"create_masked_load": load, "create_masked_store": store, "create_dot": dot, "create_fma": fma,
                **{name: elementwise(name) for name in _ELEMENTWISE if name in saved}}
    try:
        for name, fn in replaced.items():
            setattr(builder, name, fn)
        executor.__call__ = launch
        yield counts
    finally:
        for name, fn in saved.items():
            setattr(builder, name, fn)
        executor.__call__ = call
