"""Memory: what a tensor is (a view onto storage), what copies, and where the GPU memory goes.

What it teaches:
* a tensor is (storage, offset, shape, strides). `view`, `transpose`, slicing and `expand`
  make new tensors over the *same* storage (no bytes move); `contiguous()`, `reshape` of a
  non-contiguous tensor, `clone` and fancy indexing copy. Kernels that index memory as one
  dense row-major block need `is_contiguous()`, and a silent `.contiguous()` is a full copy.
* in-place ops save memory but bump the tensor's version counter; autograd checks the
  counter of every tensor it saved and refuses to use one that changed (the famous
  "modified by an inplace operation" error).
* pinned (page-locked) host memory lets `copy_(non_blocking=True)` run on a copy engine
  while the SMs compute: the transfer overlaps the work instead of preceding it.
* the caching allocator: `memory_allocated` (live tensors) vs `memory_reserved` (what the
  allocator holds from the driver); freed blocks are kept for reuse, not returned.
* activation checkpointing: keep only each block's input, recompute its insides in
  backward: less memory for about one more forward pass of compute.

Cost model: a copy of n bytes reads n and writes n (at ~3 TB/s device bandwidth on an
H100, vs ~25-50 GB/s over PCIe/host links for host-to-device).
"""
from __future__ import annotations

import time

import torch
import torch.nn as nn

from course import runtime


# EXERCISE NOTE: Without a GPU the measurements marked "GPU only" cannot run: their guard (_need_gpu) is
#   given, so on a laptop the tests check the refusal and skip the GPU tests; write them anyway and run
#   them on Colab. The idea behind all of it: a tensor is (storage, offset, shape, strides); ops that can
#   describe their result with new strides over the same storage are views (free), the others copy.

def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when `a` and `b` are windows onto the same memory (one is a view of the other)."""
    # BEGIN EXERCISE: compare where their storages start: t.untyped_storage().data_ptr() (not t.data_ptr():
    #   that is where the first element is, which moves with a slice's offset)
    # HINT: a view is a new (offset, shape, strides) over the same storage: two tensors share memory exactly
    #   when their storages are the same, wherever their first elements sit.
    # HINT: `a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()`
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    # END EXERCISE


def layout(t: torch.Tensor) -> dict:
    return {"shape": tuple(t.shape), "stride": t.stride(), "offset": t.storage_offset(),
            "contiguous": t.is_contiguous()}


def views_and_copies(device=None) -> dict:
    """For common ops on a (4, 6) tensor: does the result share storage, is it contiguous?"""
    device = runtime.DEVICE if device is None else device
    # BEGIN EXERCISE: x = torch.arange(24.0).reshape(4, 6) on device, t = x.t(); return {name: {'view':
    #   shares_storage(y, x), **layout(y)}} with exactly these names and ops: 'view(6, 4)', 'x[1:3]', 'x[:,
    #   ::2]', 't()', 'expand' (x[:1].expand(4, 6)), 'reshape (contiguous input)' (x.reshape(24)), 'reshape
    #   (transposed input)' (t.reshape(24)), 't().contiguous()', 'clone', 'x[[0, 2]] (index)'. Before
    #   running it, predict which six are views, and the strides of t() and of expand
    # HINT: an op is a view when its result is expressible as new strides over the same storage: slicing,
    #   transpose and expand are (expand uses stride 0); an index list, clone and contiguous() copy.
    # HINT: a dict {name: result tensor} built from x and t, then one comprehension that applies
    #   shares_storage(y, x) and layout(y) to each entry.
    x = torch.arange(24.0, device=device).reshape(4, 6)
    t = x.t()
    ops = {
        "view(6, 4)": x.view(6, 4),
        "x[1:3]": x[1:3],
        "x[:, ::2]": x[:, ::2],
        "t()": t,
        "expand": x[:1].expand(4, 6),
        "reshape (contiguous input)": x.reshape(24),
        "reshape (transposed input)": t.reshape(24),  # cannot be a view: rows are not adjacent
        "t().contiguous()": t.contiguous(),
        "clone": x.clone(),
        "x[[0, 2]] (index)": x[[0, 2]],
    }
    return {name: {"view": shares_storage(y, x), **layout(y)} for name, y in ops.items()}
    # END EXERCISE


def view_fails_on_transposed(device=None) -> str:
    """`.view` never copies, so it refuses strides it cannot express; the message says so."""
    device = runtime.DEVICE if device is None else device
    # BEGIN EXERCISE: call .view(24) on the transposed (4, 6) arange and return the first line of the
    #   RuntimeError it raises; if none is raised, raise AssertionError
    # HINT: .view never copies: the transposed (4, 6) tensor's elements are not in row order in memory, so no
    #   single stride lists them and view refuses (reshape would copy instead).
    # HINT: try: t.view(24) / except RuntimeError as error: return its first line; after the try, raise.
    t = torch.arange(24.0, device=device).reshape(4, 6).t()
    try:
        t.view(24)
    except RuntimeError as error:
        return str(error).split("\n")[0]
    raise AssertionError("view of a transposed tensor unexpectedly worked")
    # END EXERCISE


def inplace_breaks_autograd(device=None) -> dict:
    """sigmoid saves its output for backward; changing that output in place invalidates it."""
    device = runtime.DEVICE if device is None else device
    # BEGIN EXERCISE: y = sigmoid(x) (its backward uses y itself, so autograd saved y); read y._version,
    #   y.mul_(2), read it again, try y.sum().backward() and catch the RuntimeError; then the fix: a fresh
    #   y, backward of (y * 2).sum() out of place. Return {'version_before', 'version_after', 'error' (its
    #   first line, or None), 'grad_out_of_place' (x.grad after the fix, detached)}
    # HINT: autograd saves y for sigmoid's backward (dy/dx = y (1 - y)) and records its version counter; an
    #   in-place op bumps the counter, and backward refuses a saved tensor that changed since.
    # HINT: y._version before and after y.mul_(2); backward inside try/except RuntimeError; then x.grad = None,
    #   a fresh y = torch.sigmoid(x) and (y * 2).sum().backward().
    x = torch.randn(5, device=device, requires_grad=True)
    y = torch.sigmoid(x)  # backward uses y: d sigmoid = y (1 - y)
    before = y._version
    y.mul_(2)  # same storage, version counter + 1
    after = y._version
    try:
        y.sum().backward()
        message = None
    except RuntimeError as error:
        message = str(error).split("\n")[0]
    # The fix: out of place (y = y * 2) costs one more tensor but keeps the saved one intact.
    x.grad = None
    y_ok = torch.sigmoid(x)
    (y_ok * 2).sum().backward()
    return {"version_before": before, "version_after": after, "error": message,
            "grad_out_of_place": x.grad.detach().clone()}
    # END EXERCISE


def _need_gpu(what: str) -> None:
    if not runtime.on_gpu():
        raise ValueError(f"{what} needs a CUDA GPU; this run uses {runtime.DEVICE}")


def _cuda_ms(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def pinned_transfer_overlap(mib: int = 256, matmul_n: int = 4096, reps: int = 5) -> dict:
    """Host-to-device copy from pageable vs pinned memory, and a pinned copy overlapped with compute.

    Returns the median ms of: a pageable copy, a pinned copy, the compute alone (a chain of
    bf16 matmuls sized to take about as long as the copy), both one after the other, and
    both at once (the copy on a side stream with non_blocking=True). Also, from CUDA events,
    the share of the shorter of copy and compute that ran during the other, with the copy on a
    side stream (`event_overlap_side_stream`, near 1) and on the compute's stream
    (`event_overlap_same_stream`, 0). GPU only.
    """
    _need_gpu("pinned_transfer_overlap")
    # BEGIN EXERCISE: a mib-sized host tensor, pageable and pinned, its device destination, a bf16 matrix
    #   for the compute and a side stream; median ms (of reps, after a warm-up) of a pageable copy, a
    #   pinned copy (non_blocking=True) and the compute alone: k chained matmuls about as long as the copy
    # HINT: a pageable copy is staged through a pinned bounce buffer by the driver, so it is slower and
    #   blocks the host; pinned memory lets a copy engine DMA it while the SMs compute.
    # HINT: median(fn): one warm-up call, then the middle of `reps` _cuda_ms(fn) timings; k = copy_pinned /
    #   (one matmul's ms), at least 1; `compute()` runs `a @ a` k times.
    # HINT: `pinned = pageable.pin_memory()`
    n = mib * 2**20 // 4
    pageable = torch.randn(n)
    pinned = pageable.pin_memory()
    dst = torch.empty(n, device="cuda")
    a = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()

    def median(fn):
        fn()
        return sorted(_cuda_ms(fn) for _ in range(reps))[reps // 2]

    copy_pageable = median(lambda: dst.copy_(pageable))
    copy_pinned = median(lambda: dst.copy_(pinned, non_blocking=True))
    one_mm = median(lambda: a @ a)
    k = max(1, round(copy_pinned / max(one_mm, 1e-3)))  # make compute about as long as the copy

    def compute():
        for _ in range(k):
            a @ a

    compute_ms = median(compute)
    # END EXERCISE

    # BEGIN EXERCISE: serial(): the pinned copy then the compute, on one stream; overlapped(): the copy on
    #   the side stream (after it waits for the current one), the compute on the current stream, then
    #   the current stream waits for the side one
    # HINT: work on one stream runs in order; two streams may run at once. Each wait_stream is an
    #   ordering edge: the copy must not start before earlier work, nor its result be used before it ends.
    # HINT: `with torch.cuda.stream(side): dst.copy_(pinned, non_blocking=True)`
    def serial():
        dst.copy_(pinned, non_blocking=True)
        compute()

    def overlapped():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            dst.copy_(pinned, non_blocking=True)  # a copy engine moves it; the SMs stay free
        compute()
        torch.cuda.current_stream().wait_stream(side)
    # END EXERCISE

    # BEGIN EXERCISE: intervals_overlap(copy_stream): CUDA events around the copy (on copy_stream) and
    #   around the compute (on the current stream), all timed from one start event; the overlap of the two
    #   intervals over the shorter one
    # HINT: wall-clock times say "faster", events say "at the same time": each event is stamped when its
    #   stream reaches it, so the two [start, end] intervals can be intersected.
    # HINT: `both = max(0.0, min(copy_end, compute_end) - max(copy_start, compute_start))`, with
    #   start.elapsed_time(event) for each stamp, after torch.cuda.synchronize().
    def intervals_overlap(copy_stream) -> float:
        """How much of the shorter of copy and compute ran while the other ran, from CUDA events.

        Wall times say "faster"; events say "at the same time", and they stay true when another
        process shares the GPU (that only stretches both intervals)."""
        main = torch.cuda.current_stream()
        start, c0, c1, m0, m1 = (torch.cuda.Event(enable_timing=True) for _ in range(5))
        start.record(main)
        copy_stream.wait_stream(main)
        with torch.cuda.stream(copy_stream):
            c0.record()
            dst.copy_(pinned, non_blocking=True)
            c1.record()
        m0.record(main)
        compute()
        m1.record(main)
        main.wait_stream(copy_stream)
        torch.cuda.synchronize()
        copy_span = (start.elapsed_time(c0), start.elapsed_time(c1))
        compute_span = (start.elapsed_time(m0), start.elapsed_time(m1))
        both = max(0.0, min(copy_span[1], compute_span[1]) - max(copy_span[0], compute_span[0]))
        return both / max(min(copy_span[1] - copy_span[0], compute_span[1] - compute_span[0]), 1e-6)
    # END EXERCISE

    # BEGIN EXERCISE: the median ms of serial and overlapped, the median event overlap with the copy on the
    #   side stream and on the current one (one warm-up first), and the dict the docstring lists (GB/s,
    #   hidden_fraction = (serial - overlapped) / the shorter of copy and compute)
    # HINT: on the compute's own stream the copy waits for the compute: an overlap near 0, the control
    #   experiment for the side stream's near 1.
    # HINT: `gbps = mib * 2**20 / (ms * 1e-3) / 1e9`
    serial_ms, overlapped_ms = median(serial), median(overlapped)
    intervals_overlap(side)  # warm-up
    overlap_side = sorted(intervals_overlap(side) for _ in range(reps))[reps // 2]
    overlap_same = sorted(intervals_overlap(torch.cuda.current_stream()) for _ in range(reps))[reps // 2]
    gbps = lambda ms: mib * 2**20 / (ms * 1e-3) / 1e9  # noqa: E731
    return {"mib": mib, "pageable_ms": copy_pageable, "pinned_ms": copy_pinned,
            "pageable_gbps": gbps(copy_pageable), "pinned_gbps": gbps(copy_pinned),
            "compute_ms": compute_ms, "serial_ms": serial_ms, "overlapped_ms": overlapped_ms,
            "hidden_fraction": (serial_ms - overlapped_ms) / min(copy_pinned, compute_ms),
            "event_overlap_side_stream": overlap_side, "event_overlap_same_stream": overlap_same}
    # END EXERCISE


def caching_allocator_demo(mib: int = 64) -> dict:
    """memory_allocated vs memory_reserved around one allocation, its free, and empty_cache."""
    _need_gpu("caching_allocator_demo")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    # empty_cache returns only wholly free segments: a segment that still holds a live tensor keeps
    # its free part, and a request that fits in there reserves nothing new (then "reserved" cannot
    # show the cache at work). So ask for more than the largest such free block.
    free_blocks = [block["size"] for segment in torch.cuda.memory_snapshot() for block in segment["blocks"]
                   if block["state"] == "inactive"]
    mib = max(mib, -(-max(free_blocks, default=0) // 2**20) + 2)
    return {"mib": mib, **allocator_readings(mib)}


def allocator_readings(mib: int) -> dict:
    """The readings of `caching_allocator_demo` for one mib-sized tensor (caches emptied first)."""
    # BEGIN EXERCISE: memory_allocated and memory_reserved (MiB above the start) with a mib-sized tensor
    #   alive, after del, after torch.cuda.empty_cache(); plus num_alloc_retries and the current segment
    #   count from torch.cuda.memory_stats()
    # HINT: PyTorch's caching allocator keeps freed blocks reserved for reuse: del lowers memory_allocated at
    #   once, memory_reserved only after torch.cuda.empty_cache() hands the segment back to the driver.
    # HINT: take both readings before, then with the tensor alive, after del, after empty_cache (each minus the
    #   start, in MiB); `torch.cuda.memory_stats()` has 'num_alloc_retries' and 'segment.all.current'.
    mb = lambda b: b / 2**20  # noqa: E731
    base_alloc, base_res = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    x = torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")
    held = (mb(torch.cuda.memory_allocated() - base_alloc), mb(torch.cuda.memory_reserved() - base_res))
    del x
    freed = (mb(torch.cuda.memory_allocated() - base_alloc), mb(torch.cuda.memory_reserved() - base_res))
    torch.cuda.empty_cache()
    emptied = (mb(torch.cuda.memory_allocated() - base_alloc), mb(torch.cuda.memory_reserved() - base_res))
    stats = torch.cuda.memory_stats()
    return {"allocated_reserved_mib_live": held, "after_del": freed, "after_empty_cache": emptied,
            "num_alloc_retries": stats.get("num_alloc_retries", 0),
            "segments": stats.get("segment.all.current", 0)}
    # END EXERCISE


def saved_activation_bytes(model: nn.Module, x: torch.Tensor, loss_fn=None) -> int:
    """Bytes of tensors saved for backward by one forward (storage counted once); any device.

    What activation checkpointing cuts, measured with saved-tensor hooks instead of the GPU
    allocator, so the CPU can show it too. Parameters that are saved are not counted.
    """
    # BEGIN EXERCISE: count in the pack hook of torch.autograd.graph.saved_tensors_hooks the bytes of each
    #   storage saved for backward by one forward (and loss_fn(out) when given), each storage once,
    #   parameters not counted
    # HINT: saved_tensors_hooks(pack, unpack) calls pack on every tensor autograd saves for backward: the
    #   activations a forward keeps alive, what checkpointing trades for recomputation.
    # HINT: pack adds t.untyped_storage().nbytes() once per storage data_ptr (a set of seen pointers, the
    #   parameters' pointers excluded) and returns t; unpack returns t unchanged.
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen, total = set(), 0

    def pack(t):
        nonlocal total
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params and ptr not in seen:
            seen.add(ptr)
            total += t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
        if loss_fn is not None:
            loss_fn(out)
    return total
    # END EXERCISE


def checkpointing_peak_memory(cfg=None, batch: int | None = None) -> dict:
    """Peak memory of a GPT training step with and without activation checkpointing.

    Returns {"plain_mib", "checkpointed_mib", "plain_ms", "checkpointed_ms", "grad_rel_err"}:
    peak = torch.cuda.max_memory_allocated during forward + backward, above the weights.
    GPU only (see `saved_activation_bytes` for the same effect on any device).
    """
    _need_gpu("checkpointing_peak_memory")
    # BEGIN EXERCISE: one GPT training step (models.GPT(cfg, checkpoint_blocks=...), models.gpt_batch,
    #   models.gpt_loss) with and without activation checkpointing: peak torch.cuda.max_memory_allocated
    #   above the weights (after a warm-up step, reset_peak_memory_stats), the median step ms, and the
    #   relative difference of the two gradients
    # HINT: checkpointing keeps only each block's input and recomputes the rest in backward: peak memory falls,
    #   the step gets slower by about one more forward, and the gradients stay the same up to rounding.
    # HINT: for each of (plain, checkpointed): a model seeded the same, one warm-up step, empty_cache,
    #   reset_peak_memory_stats, one step, torch.cuda.max_memory_allocated() minus the base; then the medians
    #   and the gradients' relative difference (norm of the difference over the norm).
    from week2_pytorch_optimizations import models

    cfg = cfg or models.GPT_BENCH
    batch = batch or 16
    x, y = models.gpt_batch(cfg, batch, "cuda", generator=torch.Generator().manual_seed(0))
    out, grads = {}, {}
    for label, ckpt in (("plain", False), ("checkpointed", True)):
        torch.manual_seed(0)
        model = models.GPT(cfg, checkpoint_blocks=ckpt).cuda()

        def step():
            model.zero_grad(set_to_none=True)
            models.gpt_loss(model(x), y).backward()

        step()
        torch.cuda.synchronize()
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        out[f"{label}_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        out[f"{label}_ms"] = sorted(_cuda_ms(step) for _ in range(5))[2]
        grads[label] = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        del model
    diff = (grads["plain"] - grads["checkpointed"]).norm() / grads["plain"].norm()
    out["grad_rel_err"] = float(diff)
    return out
    # END EXERCISE
