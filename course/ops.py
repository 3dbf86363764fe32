"""Kernels as PyTorch operators: the small pieces every registered op of the course shares.

A kernel becomes an op a model can use in two ways, and the course's ops offer both, on ONE
set of launchers (so both paths run the same kernels and the same backward):

* under `torch.compile`, a `torch.library.custom_op` (fake function + `register_autograd`):
  Dynamo records one node per call, the fake function gives the compiler shapes and dtypes
  without running anything, and Inductor fuses the torch code around it. `compiling()` says
  which path a call is on.
* in eager mode, a plain `torch.autograd.Function`, because a custom op's dispatch costs host
  time: measured on the H100 machine (torch 2.11, 2026-11-26, 8x768 bf16 RMSNorm forward):
  allocate + launch 22 us, through an autograd.Function 29 us, through `custom_op` 37 us,
  through `triton_op` 45 us, against 16 us for `F.rms_norm` (tools/probe_op_overhead.py).
  When no input needs a gradient the eager path skips autograd too (`needs_grad`).

`namespace(__name__)` keeps the solution's ops and an exercise copy's ops apart: torch refuses
to register one name twice, and the tests import both in one process.
"""
from __future__ import annotations

import torch


def namespace(module_name: str) -> str:
    """The torch.library namespace of a lesson module: "course", or "course_exercises" for a stub."""
    return "course_exercises" if ".exercises." in module_name else "course"


def compiling() -> bool:
    """True while Dynamo traces the call (torch.compile, torch.export): use the registered op."""
    return torch.compiler.is_compiling()


def needs_grad(a, b=None, c=None) -> bool:
    """Will autograd want a backward from this call? (grad mode on and some input requires grad)

    Fixed arity, no loop: this runs on every call of every op."""
    return torch.is_grad_enabled() and (a.requires_grad or (b is not None and b.requires_grad)
                                        or (c is not None and c.requires_grad))
