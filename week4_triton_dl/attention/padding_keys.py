"""Padding keys: the one check of `key_lengths`, the argument every week-4 attention rung takes.

    key_lengths: (B,) int32 or int64, contiguous, on q's device, or None (no padding)

Batch element b has keys 0 .. key_lengths[b] - 1, clamped to [0, Sk] (naive.allowed_keys is the mask); the
keys past it are padding, which no query sees. Every kernel reads the tensor as it is, entry b at
`key_lengths + b` in int32 or int64 (plans.visible_key_count, naive.py's two kernels, the Hopper kernels'
AhKeys), so a strided view, another device or another dtype would be read as the wrong numbers, not refused.
The Triton launchers (naive.check_attention_inputs, which plans.check_inputs and op.py's quick check reach),
the Hopper forward (hopper.check_inputs) and the Hopper backward (hopper_backward.check_inputs) call
`check_key_lengths` before any launch, so one bad tensor gets one message on every path. The CUDA C bindings
check again (kernels/attention_hopper_key_lengths.h): a caller of the raw op gets a C++ error instead.

A module of its own, torch alone imported: hopper.py and hopper_backward.py (the CUDA C rung's host side) use
it without importing Triton, and neither imports the other.
"""
from __future__ import annotations

import torch

KEY_LENGTH_DTYPES = (torch.int32, torch.int64)  # the kernels read either as it is: no conversion launch


def check_key_lengths(key_lengths, q, q_name: str = "q") -> None:
    """Refuse a `key_lengths` no kernel can read for `q` (a checked (B, ...) tensor: its batch and device;
    `q_name` names it in the messages): TypeError / ValueError naming key_lengths and what it must be.
    Shapes, dtypes and devices only, never the data: torch.compile runs it on fake tensors."""
    if key_lengths is None:
        return
    if not isinstance(key_lengths, torch.Tensor):
        raise TypeError(f"key_lengths must be a torch.Tensor (B,) of int32 or int64, or None; got "
                        f"{type(key_lengths).__name__}")
    if key_lengths.dtype not in KEY_LENGTH_DTYPES:
        raise TypeError(f"key_lengths has dtype {str(key_lengths.dtype).replace('torch.', '')}; expected int32 or "
                        "int64 (the keys of each batch element)")
    batch = q.shape[0]
    if key_lengths.dim() != 1 or key_lengths.shape[0] != batch:
        raise ValueError(f"key_lengths must have shape (B,) = ({batch},), one entry per batch element; got "
                         f"{tuple(key_lengths.shape)}")
    if key_lengths.device != q.device:
        raise ValueError(f"key_lengths must be on {q_name}'s device {q.device} (the kernels read it there); got one "
                         f"on {key_lengths.device}: move it with .to({q_name}.device)")
    if not key_lengths.is_contiguous():
        raise ValueError(f"key_lengths must be a contiguous tensor (the kernels read entry b at key_lengths + b); "
                         f"got strides {key_lengths.stride()}: pass .contiguous()")
