"""bfloat16 in Triton's interpreter: bf16 storage, float32 arithmetic (installed by course.sim_triton).

Why: NumPy has no bfloat16, so Triton's interpreter (3.6, as 3.9) carries bf16 values as their raw
16-bit patterns (`_get_np_dtype`: `tl.bfloat16: np.dtype(np.uint16)`). Loads and stores copy the
bits faithfully, but everything that computes is wrong, silently:
  * `a + b` on two bf16 blocks is NumPy's uint16 addition of the bit patterns (`binary_op`);
  * `tl.dot` of bf16 blocks multiplies the bit patterns as integers (`create_dot`: `np.matmul(a.data,
    b.data, dtype=d.data.dtype)`), values ~1e10 for inputs ~1 (hence FlashAttention gradients of
    ~6e11 under bf16 autocast on a CPU);
  * float32 -> bf16 (`x.to(tl.bfloat16)`, `cast_impl`) truncates: `_convert_float(..., None)`
    rounds only when given RTNE, and `cast_impl` gives None.

What a GPU does with the course's kernels (and what a learner's kernel is written for): load bf16,
compute in float32 (`.to(tl.float32)`, tl.dot's float32 accumulator over exact bf16 products), and
round to bf16 (nearest, ties to even) on the store. So here, at each interpreted launch, every bf16
tensor argument is handed to the kernel as a float32 copy of its storage (exact: every bf16 is a
float32), views keeping their offsets and strides, and when the launch ends the copy is rounded to
bf16 (torch's conversion: nearest, ties to even) into the learner's tensor. Inside the kernel the
pointers are float32, so `.to(out_ptr.dtype.element_ty)` and `p.to(v.dtype)` keep float32: results
are at least as accurate as a GPU's, and within the bf16 tolerances the tests use for GPUs.

What is refused (TypeError, naming what to do instead), never computed wrong:
  * a bf16 type made inside a kernel (`.to(tl.bfloat16)`, `tl.zeros(..., tl.bfloat16)`): the
    interpreter cannot compute with it (InterpreterBuilder.get_bf16_ty raises);
  * a tensor argument reinterpreted as bf16 (`triton.reinterpret(x, tl.bfloat16)`), and a bf16
    argument whose memory another argument of another dtype also reaches (the widened copy would
    not see that argument's writes).
Differences from a GPU a learner could notice: an intermediate the kernel rounds to the pointer's
dtype on a GPU stays float32 here; a kernel that reads back, in the same launch, a bf16 value it
stored sees it unrounded.

Triton's private names used (pinned by tests/test_sim_bf16.py): GridExecutor._init_args_hst and
GridExecutor._restore_args_dev (their parameters args_dev, args_hst, kwargs, kwargs_hst), and
InterpreterBuilder.get_bf16_ty. Where a Triton lacks the first two, bf16 tensor arguments are
refused at launch instead (GridExecutor.__call__), and the correction is named in sim_triton.LOST.
"""
from __future__ import annotations

import dataclasses

import torch

NAMES = ("GridExecutor._init_args_hst", "GridExecutor._restore_args_dev", "InterpreterBuilder.get_bf16_ty")
RESTORE_PARAMETERS = ("args_dev", "args_hst", "kwargs", "kwargs_hst")

INSTEAD = ("use float32 or float16 in simulation (the Triton interpreter has no bfloat16 arithmetic), "
           "or run on a GPU for bfloat16")


class BF16InKernel(TypeError):
    """A kernel made a bfloat16 value, which Triton's interpreter cannot compute with."""


def _refusal(what: str) -> str:
    return f"{what}: {INSTEAD}."


def _is_bf16_wrapper(value) -> bool:
    """triton.reinterpret(x, tl.bfloat16): a TensorWrapper whose dtype is Triton's bf16."""
    import triton.language as tl

    return not isinstance(value, torch.Tensor) and hasattr(value, "base") and getattr(value, "dtype", None) == tl.bfloat16


def _walk(value, visit):
    """`value` with each tensor t inside it (tuples, TensorDescriptor bases) replaced by visit(t)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    if isinstance(value, tuple):
        items = [_walk(item, visit) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, TensorDescriptor):
        return dataclasses.replace(value, base=_walk(value.base, visit))
    if hasattr(value, "data_ptr"):
        return visit(value)
    return value


def widen(kernel: str, args_hst: list, kwargs_hst: dict):
    """(args, kwargs, record): the host arguments with each bf16 tensor replaced by a float32 view
    of a float32 copy of its storage; `record` is what `narrow` needs to round the copies back."""
    seen: list = []
    _walk((tuple(args_hst), tuple(kwargs_hst.values())), lambda t: seen.append(t) or t)
    for t in seen:
        if _is_bf16_wrapper(t):
            raise TypeError(_refusal(f"Triton kernel `{kernel}` was given a tensor reinterpreted as bfloat16"))
    bf16 = [t for t in seen if isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16]
    if not bf16:
        return args_hst, kwargs_hst, None
    storages = {t.untyped_storage().data_ptr() for t in bf16 if t.numel()}
    for t in seen:
        wrapper = not isinstance(t, torch.Tensor)  # triton.reinterpret's TensorWrapper: its base's memory
        base = getattr(t, "base", t) if wrapper else t
        if (isinstance(base, torch.Tensor) and base.numel() and (wrapper or base.dtype != torch.bfloat16)
                and base.untyped_storage().data_ptr() in storages):
            raise TypeError(_refusal(
                f"Triton kernel `{kernel}` was given a bfloat16 tensor and a {base.dtype} tensor that share "
                f"memory; in simulation a bf16 argument is computed on in a float32 copy, which cannot "
                f"share memory with another dtype. Pass separate tensors; or, for bf16 itself"))
    copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # storage -> (its bf16 elements, float32 copy)
    for t in bf16:
        storage = t.untyped_storage()
        if storage.data_ptr() not in copies:
            flat = torch.empty(0, dtype=torch.bfloat16).set_(storage)
            copies[storage.data_ptr()] = (flat, flat.float())
    originals: dict[int, torch.Tensor] = {}  # id(float32 view) -> the bf16 tensor it stands for

    def to_float32(t):
        if not (isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16):
            return t
        wide = copies[t.untyped_storage().data_ptr()][1]
        view = torch.empty(0, dtype=torch.float32).set_(wide.untyped_storage(), t.storage_offset(), t.size(), t.stride())
        originals[id(view)] = t
        return view

    args = list(_walk(tuple(args_hst), to_float32))
    kwargs = dict(zip(kwargs_hst, _walk(tuple(kwargs_hst.values()), to_float32)))
    return args, kwargs, (copies, originals)


def narrow(record, args_hst: list, kwargs_hst: dict):
    """Round each float32 copy to bf16 (nearest, ties to even) into the learner's storage; returns
    the host arguments with the bf16 tensors back in place of their float32 views."""
    copies, originals = record
    for flat, wide in copies.values():
        # only the elements the kernel changed: the others keep their bits (a NaN's payload too)
        changed = wide.view(torch.int32) != flat.float().view(torch.int32)
        flat[changed] = wide[changed].bfloat16()

    def back(t):
        return originals.get(id(t), t)

    return list(_walk(tuple(args_hst), back)), dict(zip(kwargs_hst, _walk(tuple(kwargs_hst.values()), back)))


def refuse_bf16_arguments(kernel: str, args, kwargs) -> None:
    """The fallback where the widening cannot be installed: bf16 tensor arguments are refused."""
    seen: list = []
    _walk((tuple(args), tuple(kwargs.values())), lambda t: seen.append(t) or t)
    if any(_is_bf16_wrapper(t) or getattr(t, "dtype", None) == torch.bfloat16 for t in seen):
        raise TypeError(_refusal(f"Triton kernel `{kernel}` was given a bfloat16 tensor, and this Triton's "
                                 f"interpreter computes bf16 on raw bits (the course's bf16 correction is off)"))


def patch(interpreter) -> dict[str, str]:
    """Install the widening (or, failing that, the refusal) on `interpreter`; returns what is off."""
    import inspect

    lost = {}
    executor, builder = getattr(interpreter, "GridExecutor", None), getattr(interpreter, "InterpreterBuilder", None)
    init_args = getattr(executor, "_init_args_hst", None) if executor is not None else None
    restore = getattr(executor, "_restore_args_dev", None)
    restore_ok = restore is not None and list(inspect.signature(restore).parameters)[1:5] == list(RESTORE_PARAMETERS)
    if init_args is not None and restore_ok:
        def _init_args_hst(self, args_dev, kwargs):
            args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
            args_hst, kwargs_hst, record = widen(getattr(self.fn, "__name__", "?"), args_hst, kwargs_hst)
            self._course_bf16 = getattr(self, "_course_bf16", []) + [(id(args_hst), record)]
            return args_hst, kwargs_hst

        def _restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
            pending = getattr(self, "_course_bf16", [])
            record = next((r for key, r in pending if key == id(args_hst)), None)
            self._course_bf16 = [(key, r) for key, r in pending if key != id(args_hst)]
            if record is not None:
                args_hst, kwargs_hst = narrow(record, args_hst, kwargs_hst)
            return restore(self, args_dev, args_hst, kwargs, kwargs_hst)

        executor._init_args_hst, executor._restore_args_dev = _init_args_hst, _restore_args_dev
    else:
        why = ("missing GridExecutor._init_args_hst" if init_args is None else
               "missing GridExecutor._restore_args_dev" if restore is None else
               f"GridExecutor._restore_args_dev's parameters are not {', '.join(RESTORE_PARAMETERS)}")
        lost["bf16 as float32 arithmetic (bf16 tensor arguments are refused at launch)"] = why
        call = getattr(executor, "__call__", None) if executor is not None else None
        if call is not None:
            def __call__(self, *args, **kwargs):
                refuse_bf16_arguments(getattr(getattr(self, "fn", None), "__name__", "?"), args, kwargs)
                return call(self, *args, **kwargs)

            executor.__call__ = __call__
    get_bf16_ty = getattr(builder, "get_bf16_ty", None) if builder is not None else None
    if get_bf16_ty is None:
        lost["refusal of bf16 values made inside a kernel (they would compute on raw bits)"] = \
            "missing InterpreterBuilder.get_bf16_ty"
    else:
        def refuse_bf16_type(self):
            raise BF16InKernel(_refusal(
                "a Triton kernel made a bfloat16 value (`.to(tl.bfloat16)`, or a bf16 dtype given to tl.zeros, "
                "tl.full, tl.dot...), which the Triton interpreter would compute on as raw 16-bit integers. In "
                "simulation bf16 tensors reach a kernel as float32, so convert to the pointer's type instead "
                "(`x.to(out_ptr.dtype.element_ty)`); for bf16 arithmetic inside a kernel"))

        refuse_bf16_type.__wrapped__ = get_bf16_ty
        builder.get_bf16_ty = refuse_bf16_type
    return lost
