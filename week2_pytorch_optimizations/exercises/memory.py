"""Exercise: views and copies, in-place ops and autograd, pinned memory, the caching allocator,
activation checkpointing. Same names as week2_pytorch_optimizations/memory.py.

Check your work with `pytest tests/week2/test_memory.py --impl=exercises`. Each stub raises
NotImplementedError until you write it; delete that line when you do. Without a GPU the three
measurements marked "GPU only" cannot run: their guard (`_need_gpu`) is given, so on a laptop
the tests check the refusal and skip the GPU tests; write them anyway and run them on Colab.

The idea behind all of it: a tensor is (storage, offset, shape, strides). Ops that can describe
their result with new strides over the same storage are views (free); the others copy (a full
read + write of the tensor). Autograd keeps some tensors for backward, and those saved bytes are
what activation checkpointing trades for recomputation.
"""
from __future__ import annotations

import time

import torch
import torch.nn as nn

from course import runtime


# --- views and copies ---------------------------------------------------------------------------

def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when `a` and `b` are windows onto the same memory (one is a view of the other).

    Compare where their storages start: `t.untyped_storage().data_ptr()`. (Not `t.data_ptr()`:
    that is where the tensor's first element is, which moves with the offset of a slice.)
    """
    raise NotImplementedError("not implemented yet: shares_storage (week2 exercise)")


def layout(t: torch.Tensor) -> dict:
    """Given: what a tensor is besides its storage."""
    return {"shape": tuple(t.shape), "stride": t.stride(), "offset": t.storage_offset(),
            "contiguous": t.is_contiguous()}


def views_and_copies(device=None) -> dict:
    """For common ops on x = torch.arange(24.0).reshape(4, 6): does the result share x's storage?

    Return {name: {"view": shares_storage(y, x), **layout(y)}} with exactly these names and ops
    (t = x.t()): "view(6, 4)", "x[1:3]", "x[:, ::2]", "t()", "expand" (x[:1].expand(4, 6)),
    "reshape (contiguous input)" (x.reshape(24)), "reshape (transposed input)" (t.reshape(24)),
    "t().contiguous()", "clone", "x[[0, 2]] (index)". Build x on `device` (default
    runtime.DEVICE). Before running it, predict which six are views, and the strides of t()
    and of expand.
    """
    raise NotImplementedError("not implemented yet: views_and_copies (week2 exercise)")


def view_fails_on_transposed(device=None) -> str:
    """Call `.view(24)` on the transposed (4, 6) arange and return the first line of the
    RuntimeError it raises (`.view` never copies, so it refuses strides it cannot express).
    If no error is raised, raise AssertionError."""
    raise NotImplementedError("not implemented yet: view_fails_on_transposed (week2 exercise)")


# --- in-place ops and the version counter -------------------------------------------------------

def inplace_breaks_autograd(device=None) -> dict:
    """Show autograd's version counter catching an in-place write to a saved tensor.

    x = randn(5, requires_grad=True); y = torch.sigmoid(x) (its backward uses y itself:
    d sigmoid = y (1 - y), so autograd saved y). Read `y._version`, do `y.mul_(2)`, read it
    again, then try `y.sum().backward()` and catch the RuntimeError. Then the fix: a fresh
    y = sigmoid(x), backward of `(y * 2).sum()` (out of place).
    Return {"version_before", "version_after", "error" (first line of the message, or None),
            "grad_out_of_place" (x.grad after the fix, detached)}.
    """
    raise NotImplementedError("not implemented yet: inplace_breaks_autograd (week2 exercise)")


# --- GPU-only measurements ----------------------------------------------------------------------

def _need_gpu(what: str) -> None:
    if not runtime.on_gpu():
        raise ValueError(f"{what} needs a CUDA GPU; this run uses {runtime.DEVICE}")


def _cuda_ms(fn) -> float:
    """Given: wall time of fn() in ms, with the GPU drained before and after."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def pinned_transfer_overlap(mib: int = 256, matmul_n: int = 4096, reps: int = 5) -> dict:
    """GPU only. Host-to-device copies from pageable vs pinned memory, then a pinned copy overlapped
    with compute.

    Write: a float32 host tensor of `mib` MiB (`torch.randn`), its pinned copy (`.pin_memory()`),
    a device destination, a bf16 (matmul_n x matmul_n) matrix `a` and a side `torch.cuda.Stream()`.
    Time each of these with the median of `reps` calls of `_cuda_ms` (after one warm-up call):
    `dst.copy_(pageable)`; `dst.copy_(pinned, non_blocking=True)`; `a @ a` repeated k times, k
    chosen so that it takes about as long as the pinned copy ("compute"); the copy then the
    compute ("serial"); and both at once ("overlapped"): `side.wait_stream(current stream)`, the
    copy inside `with torch.cuda.stream(side)`, the compute on the current stream, then
    `current_stream().wait_stream(side)`.
    Return {"mib", "pageable_ms", "pinned_ms", "pageable_gbps", "pinned_gbps", "compute_ms",
            "serial_ms", "overlapped_ms", "hidden_fraction"}: GB/s = mib * 2**20 bytes / seconds / 1e9,
    hidden_fraction = (serial - overlapped) / min(pinned_ms, compute_ms).
    """
    _need_gpu("pinned_transfer_overlap")
    raise NotImplementedError("not implemented yet: pinned_transfer_overlap (week2 exercise)")


def caching_allocator_demo(mib: int = 64) -> dict:
    """GPU only. `torch.cuda.memory_allocated()` (live tensors) vs `memory_reserved()` (what the
    caching allocator holds from the driver) around one allocation.

    Synchronize and `torch.cuda.empty_cache()` first, read both as the baseline, then allocate a
    `mib` MiB uint8 tensor, `del` it, and call `torch.cuda.empty_cache()`. Return, in MiB above
    the baseline, (allocated, reserved) pairs: {"allocated_reserved_mib_live", "after_del",
    "after_empty_cache"}, plus "num_alloc_retries" and "segments" ("segment.all.current") from
    `torch.cuda.memory_stats()`.
    """
    _need_gpu("caching_allocator_demo")
    raise NotImplementedError("not implemented yet: caching_allocator_demo (week2 exercise)")


# --- activation checkpointing -------------------------------------------------------------------

def saved_activation_bytes(model: nn.Module, x: torch.Tensor, loss_fn=None) -> int:
    """Bytes of tensors that autograd saves for backward during `model(x)` (and `loss_fn(out)`
    when given); any device.

    Run the forward inside `torch.autograd.graph.saved_tensors_hooks(pack, unpack)`: `pack(t)` is
    called for every tensor saved for backward (return t unchanged; `unpack` is `lambda t: t`).
    Count each storage once, by `t.untyped_storage().data_ptr()`, with its full size
    `t.untyped_storage().nbytes()`, and skip the storages of `model.parameters()`: weights exist
    anyway, activations are what checkpointing saves. A bias-free Linear(8, 8) on a (4, 8) input
    saves only the input: 128 bytes.
    """
    raise NotImplementedError("not implemented yet: saved_activation_bytes (week2 exercise)")


def checkpointing_peak_memory(cfg=None, batch: int | None = None) -> dict:
    """GPU only. Peak memory and time of a GPT forward + backward without and with activation
    checkpointing (`models.GPT(cfg, checkpoint_blocks=ckpt)`).

    Defaults: cfg = models.GPT_BENCH, batch = 16 (`from week2_pytorch_optimizations import models`;
    `models.gpt_batch(cfg, batch, "cuda", generator=torch.Generator().manual_seed(0))`). For each
    of plain and checkpointed (same seed for the weights): run one step to warm up, zero the
    grads, `torch.cuda.empty_cache()`, take `base = memory_allocated()`, `reset_peak_memory_stats()`,
    run a step; peak = `max_memory_allocated() - base`. Time the step with the median of 5 `_cuda_ms`.
    Return {"plain_mib", "checkpointed_mib", "plain_ms", "checkpointed_ms", "grad_rel_err"}:
    the norm-wise relative difference of all gradients, concatenated.
    """
    _need_gpu("checkpointing_peak_memory")
    raise NotImplementedError("not implemented yet: checkpointing_peak_memory (week2 exercise)")
