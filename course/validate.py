"""Guards every launcher calls before it launches anything.

A kernel given the wrong thing does not fail politely: it reads past the end of a buffer,
reinterprets bf16 bits as fp32, or strides through a transposed view as if it were
contiguous. So each launcher checks its arguments first and raises a sentence a learner
can act on: which argument, what it was, what was expected.
"""
from __future__ import annotations

import torch

from course import runtime


def tensor(x, name: str, *, dtypes=None, ndim: int | None = None, contiguous: bool = True) -> torch.Tensor:
    """Check that `x` is a tensor the kernels of this backend can read; return it."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if dtypes is not None and x.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} has dtype {str(x.dtype).replace('torch.', '')}; expected one of: {allowed}")
    if x.device.type != runtime.DEVICE.type:
        raise ValueError(f"{name} is on {x.device}, but kernels run on {runtime.DEVICE} "
                         f"({runtime.BACKEND} backend): move it with .to({str(runtime.DEVICE)!r})")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(x.shape)}")
    if contiguous and not x.is_contiguous():
        raise ValueError(f"{name} is not contiguous (strides {x.stride()} for shape {tuple(x.shape)}): "
                         "pass .contiguous(), the kernel indexes memory as one dense row-major block")
    return x


def same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"shapes must match (no broadcasting here): {listed}")


def same_dtype(**tensors: torch.Tensor) -> None:
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"{name} {str(d).replace('torch.', '')}" for name, d in dtypes.items())
        raise TypeError(f"dtypes must match: {listed}")


def output(out, like: torch.Tensor, name: str = "out") -> torch.Tensor:
    """`out` if given (checked against `like`), else a fresh tensor shaped like `like`."""
    if out is None:
        return torch.empty_like(like, memory_format=torch.contiguous_format)
    tensor(out, name, dtypes=(like.dtype,))
    if out.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(out.shape)}; expected {tuple(like.shape)}")
    return out
