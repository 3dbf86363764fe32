"""Transfers, pinned memory and the memory footprint: the cost of getting data to the GPU.

What it teaches: a GPU kernel is only fast once its data is on the GPU. Vector add on the CPU
(torch, NumPy) against the same add on the GPU, timed with and without the copies between
host and device; the bandwidth of those copies from ordinary (pageable) host memory and from
pinned (page-locked) memory; and how much GPU memory is in use, seen by the driver
(`cudaMemGetInfo`, through `torch.cuda.mem_get_info` and Numba's `get_memory_info`) and by
torch's caching allocator (`memory_allocated`, `memory_reserved`), and why the two differ.

Cost model for n float32 elements:
* the add itself: 12n bytes of device memory traffic (read a, read b, write out), n FLOPs;
  at ~3 TB/s that is 4 ms per 2^30 elements.
* the transfers: 8n bytes host -> device (a and b) and 4n device -> host (out), over PCIe
  (H100 PCIe Gen5 x16: 64 GB/s per direction on paper; the bench measures it). That is
  ~50 to 100 times slower per byte than device memory, so a lone vector add that has to
  move its inputs in and its output out costs the transfers, not the add.
* pageable memory: the driver first copies the data into a pinned staging buffer of its
  own, then DMAs it; pinned memory is DMA'd directly, and only a copy from pinned memory
  can be asynchronous (`non_blocking=True`) and overlap with kernels (lesson: streams).

No kernels of its own: the GPU add is `torch.add`. The functions run on CPU tensors in
simulation (same results; the timings there mean nothing), the footprint needs a GPU.
"""
from __future__ import annotations

import os

import argparse

import numpy as np
import torch

from course import runtime
from course.bench import Benchmark, pow2_label
from course.check import random_tensor
from course.gpu import cuda

MIB = 2**20
SANITIZER_CASES: dict = {}  # no kernels here (torch.add and copies only)

# EXERCISE NOTE: No kernels to write here: the GPU add is torch.add. What you write is where the data
#   lives and how it moves: copies with non_blocking=True only from or to pinned memory, a
#   synchronisation before the host reads what an asynchronous device-to-host copy wrote, and what the
#   driver and torch's allocator say about GPU memory. The input checks are given.


# --- the add, on either side -------------------------------------------------------------------

def _host_tensor(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"{name} has dtype {str(x.dtype).replace('torch.', '')}; expected float32")
    if x.device.type != "cpu":
        raise ValueError(f"{name} is on {x.device}; this function starts from host (CPU) memory")
    if not x.is_contiguous():
        raise ValueError(f"{name} is not contiguous: pass .contiguous()")
    return x


def _same_shape(**tensors) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError("shapes must match: " + ", ".join(f"{k} {v}" for k, v in shapes.items()))


def add_cpu_torch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """a + b on the CPU with torch (all cores, vectorised): the host's own memory bandwidth."""
    a, b = _host_tensor(a, "a"), _host_tensor(b, "b")
    _same_shape(a=a, b=b)
    return torch.add(a, b, out=out)


def add_cpu_numpy(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a + b with NumPy (one core)."""
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, np.ndarray) or x.dtype != np.float32:
            raise TypeError(f"{name} must be a float32 numpy array, got {type(x).__name__} "
                            f"{getattr(x, 'dtype', '')}")
    if a.shape != b.shape:
        raise ValueError(f"shapes must match: a {a.shape}, b {b.shape}")
    return np.add(a, b, out=out)


def add_gpu_with_transfers(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *,
                           workspace: tuple | None = None) -> torch.Tensor:
    """a + b for host tensors, computed on the GPU: copy a and b in, add, copy the sum back.

    `workspace` = three device tensors shaped like `a` to reuse (else fresh ones, which the
    caching allocator hands out cheaply after the first call). With pinned `a`, `b`, `out`
    the copies are asynchronous DMA; with pageable ones the driver stages them.
    """
    a, b = _host_tensor(a, "a"), _host_tensor(b, "b")
    _same_shape(a=a, b=b)
    if out is None:
        out = torch.empty(a.shape, dtype=a.dtype, pin_memory=a.is_pinned())
    _host_tensor(out, "out")
    _same_shape(a=a, out=out)
    if workspace is None:
        workspace = tuple(torch.empty(a.shape, device=runtime.DEVICE) for _ in range(3))
    da, db, dout = workspace
    # BEGIN EXERCISE: a and b into da, db (non_blocking only when a, b and out are all pinned), torch.add on
    #   the device into dout, dout back into `out`; a pinned copy back returns before the bytes arrive:
    #   on a GPU, synchronise the current stream before the host reads `out`
    # HINT: a copy from pageable memory has to be staged by the driver and blocks the host; only page-locked
    #   (pinned) memory can be copied by DMA asynchronously, which is why non_blocking is only used when
    #   all three host tensors are pinned.
    # HINT: one `pinned` flag; two copy_ calls in, torch.add with out=dout, one copy_ back; then, on a GPU
    #   with pinned memory, synchronise the current stream.
    # HINT: without `torch.cuda.current_stream().synchronize()` the host could read `out` before the
    #   non-blocking D2H copy has landed.
    pinned = a.is_pinned() and b.is_pinned() and out.is_pinned()
    da.copy_(a, non_blocking=pinned)
    db.copy_(b, non_blocking=pinned)
    torch.add(da, db, out=dout)
    out.copy_(dout, non_blocking=pinned)
    if pinned and runtime.on_gpu():
        # A non-blocking copy to the host returns before the bytes arrive: reading `out`
        # now would read stale memory. Wait for the stream.
        torch.cuda.current_stream().synchronize()
    # END EXERCISE
    return out


# --- copies -------------------------------------------------------------------------------------

def host_buffer(n: int, *, pinned: bool) -> torch.Tensor:
    """n float32 in host memory; page-locked if `pinned` (on a GPU machine; plain elsewhere)."""
    # BEGIN EXERCISE: torch.empty on the host, page-locked with .pin_memory() when `pinned` and there is a
    #   GPU (runtime.on_gpu()): without a driver there is nothing to pin for
    # HINT: pinning asks the CUDA driver to page-lock the memory; on a machine without a GPU there is no
    #   driver, so return plain memory.
    # HINT: allocate n float32 on the host, then a conditional expression returning `t.pin_memory()` or t.
    # HINT: the condition: `pinned and runtime.on_gpu()`.
    t = torch.empty(n, dtype=torch.float32)
    return t.pin_memory() if pinned and runtime.on_gpu() else t
    # END EXERCISE


def h2d(host: torch.Tensor, device: torch.Tensor) -> torch.Tensor:
    """host -> device copy; asynchronous (returns at once) when `host` is pinned."""
    # BEGIN EXERCISE: device.copy_ from host, non_blocking exactly when host is pinned; return device
    # HINT: an H2D copy from pinned memory can be asynchronous; from pageable memory torch must block, so tie
    #   non_blocking to the host tensor's pinned state.
    # HINT: one line: `device.copy_(host, non_blocking=...)` returns the destination.
    return device.copy_(host, non_blocking=host.is_pinned())
    # END EXERCISE


def d2h(device: torch.Tensor, host: torch.Tensor) -> torch.Tensor:
    """device -> host copy; asynchronous when `host` is pinned (synchronise before reading it)."""
    # BEGIN EXERCISE: host.copy_ from device, non_blocking exactly when host is pinned; return host
    # HINT: the mirror of h2d: the host tensor is the destination, and its pinned state decides whether the
    #   copy may return early.
    # HINT: `return host.copy_(device, non_blocking=host.is_pinned())`
    return host.copy_(device, non_blocking=host.is_pinned())
    # END EXERCISE


# --- memory footprint ---------------------------------------------------------------------------

def process_memory_used() -> int | None:
    """Bytes of GPU memory the driver holds for THIS process (NVML), None where NVML cannot say.

    `cudaMemGetInfo`'s free memory is the whole GPU's: another process allocating at the same
    moment (another notebook, `pytest -n 8`) moves it too. NVML lists each process's share:
    its CUDA context plus every allocation, whoever in the process made it (torch, Numba, ...).
    """
    try:
        import pynvml
        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(runtime.DEVICE).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:  # no NVML library or binding (pip install nvidia-ml-py), or not allowed here
        return None
    used = [p.usedGpuMemory for p in processes if p.pid == os.getpid()]
    return used[0] if used and used[0] is not None else None


def memory_snapshot(stage: str) -> dict:
    """What the driver and torch's allocator say about GPU memory right now."""
    # BEGIN EXERCISE: {"stage", "driver_free", "driver_total" (torch.cuda.mem_get_info), "process_used"
    #   (process_memory_used()), "numba_free", "numba_total" (cuda.current_context().get_memory_info()),
    #   "torch_allocated", "torch_reserved" (torch.cuda.memory_allocated / memory_reserved), "not_torch"
    #   (in use on the GPU but not reserved by torch: total - free - reserved)}
    # HINT: three views of the same GPU memory: the driver's free/total (whole GPU), torch's allocator
    #   (allocated: live tensors; reserved: live + cached), and Numba's context (the same driver
    #   numbers); what torch has not reserved but is in use is the CUDA context and other libraries.
    # HINT: unpack mem_get_info and Numba's get_memory_info, then return one dict with the stage, the driver
    #   numbers, process_memory_used(), the Numba numbers, allocated/reserved from torch, and the
    #   difference.
    # HINT: `not_torch = total - free - torch.cuda.memory_reserved(runtime.DEVICE)`
    free, total = torch.cuda.mem_get_info(runtime.DEVICE)  # cudaMemGetInfo: the whole GPU
    numba_free, numba_total = cuda.current_context().get_memory_info()  # cuMemGetInfo: the same
    return {
        "stage": stage,
        "driver_free": free, "driver_total": total,
        "process_used": process_memory_used(),  # this process's share of the GPU (NVML)
        "numba_free": numba_free, "numba_total": numba_total,
        # Bytes in live tensors, and bytes torch holds from the driver (live + cached).
        "torch_allocated": torch.cuda.memory_allocated(runtime.DEVICE),
        "torch_reserved": torch.cuda.memory_reserved(runtime.DEVICE),
        # Everything else in use on the GPU: the CUDA context itself (code, stacks, heaps),
        # Numba's and other libraries' allocations, other processes.
        "not_torch": total - free - torch.cuda.memory_reserved(runtime.DEVICE),
    }
    # END EXERCISE


def memory_footprint(nbytes: int = 256 * MIB) -> list[dict]:
    """Snapshots around a torch allocation of `nbytes`, its release, and a Numba allocation.

    What to look for: `del` returns the tensor's bytes to torch's cache, not to the driver
    (allocated drops, reserved and the driver's free do not) until `empty_cache()`; Numba's
    allocator is invisible to torch's counters but not to the driver.
    """
    if not runtime.on_gpu():
        raise RuntimeError("memory_footprint needs a GPU: device memory does not exist in simulation")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0 or nbytes % 4:
        raise ValueError(f"nbytes must be a positive multiple of 4, got {nbytes!r}")
    cuda.current_context()  # Numba's context set up now, so its start-up is not counted below
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # start from a cache holding nothing we could be handed back
    # BEGIN EXERCISE: six snapshots: start; after torch.empty of nbytes; after del (back in torch's
    #   cache); after torch.cuda.empty_cache(); after a Numba cuda.device_array of nbytes; after deleting
    #   it and flush_numba_frees()
    # HINT: the experiment shows the caching allocator at work: freeing a tensor returns its memory to
    #   torch's cache, not to the driver, until empty_cache(); Numba frees lazily, so its deallocations
    #   must be flushed before measuring.
    # HINT: a list starting with the start snapshot; then allocate / del / empty_cache / Numba device_array /
    #   del + flush, appending a labelled snapshot after each step (six in all).
    # HINT: sizes are in float32 elements: `nbytes // 4`.
    rows = [memory_snapshot("start")]
    x = torch.empty(nbytes // 4, dtype=torch.float32, device=runtime.DEVICE)
    rows.append(memory_snapshot(f"torch.empty: {nbytes / MIB:g} MiB"))
    del x
    rows.append(memory_snapshot("del: back in torch's cache"))
    torch.cuda.empty_cache()
    rows.append(memory_snapshot("torch.cuda.empty_cache()"))
    y = cuda.device_array(nbytes // 4, dtype=np.float32)
    rows.append(memory_snapshot(f"numba device_array: {nbytes / MIB:g} MiB"))
    del y
    flush_numba_frees()
    rows.append(memory_snapshot("del + Numba deallocations flushed"))
    # END EXERCISE
    return rows


def flush_numba_frees() -> None:
    """Release, now, the device memory Numba has queued for freeing.

    Numba does not call cuMemFree when a device array dies: it queues the free and flushes the
    queue only when it holds more than 10 frees or 20% of the GPU's memory
    (NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT / _RATIO), or an allocation fails. cuMemFree
    synchronises the device, so batching keeps it off the path of asynchronous work; the price
    is that a `del` alone gives nothing back to the driver. The queue of device arrays belongs to
    the context's memory manager (Numba's default EMM plugin, NumbaCUDAMemoryManager, in
    numba-cuda 0.30); `cuda.current_context().deallocations` is a second queue, for streams,
    events and modules, and flushing only that one frees no array memory.
    """
    context = cuda.current_context()
    context.memory_manager.deallocations.clear()
    context.deallocations.clear()


def footprint_table(rows: list[dict]) -> str:
    """The snapshots as a markdown table in MiB."""
    head = ["stage", "driver free", "this process", "torch allocated", "torch reserved",
            "not torch (context, Numba, ...)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["stage"]] + ["-" if r.get(k) is None else f"{r[k] / MIB:,.0f}"
                                for k in ("driver_free", "process_used", "torch_allocated", "torch_reserved", "not_torch")]
        lines.append("| " + " | ".join(cells) + " |")
    total = rows[0]["driver_total"] / MIB if rows else 0
    return f"GPU memory in MiB (total {total:,.0f} MiB):\n\n" + "\n".join(lines) + "\n"


# --- benchmarks ---------------------------------------------------------------------------------

# BEGIN SOLUTION ONLY: the benchmarks (they measure the solution's copies)
def _copy_inputs(n: int):
    device = runtime.DEVICE
    src = random_tensor(n, torch.float32, "cpu")
    return (src, host_buffer(n, pinned=True).copy_(src), torch.empty(n, device=device),
            host_buffer(n, pinned=False), host_buffer(n, pinned=True))


def _add_inputs(n: int):
    device = runtime.DEVICE
    a, b = random_tensor(n, torch.float32, "cpu"), random_tensor(n, torch.float32, "cpu")
    pinned = [host_buffer(n, pinned=True).copy_(t) for t in (a, b)] + [host_buffer(n, pinned=True)]
    workspace = [torch.empty(n, device=device) for _ in range(3)]
    return (a, b, torch.empty(n), *pinned, *workspace)


def _gpu_add_only(a, b, out, pa, pb, pout, da, db, dout):
    return torch.add(da, db, out=dout)


def _gpu_add_pageable(a, b, out, pa, pb, pout, da, db, dout):
    return add_gpu_with_transfers(a, b, out, workspace=(da, db, dout))


def _gpu_add_pinned(a, b, out, pa, pb, pout, da, db, dout):
    return add_gpu_with_transfers(pa, pb, pout, workspace=(da, db, dout))


# The host-side variants (CPU adds, pageable copies) block the host; the CUDA events that time
# them are then recorded on an idle GPU, so they measure the host's wall time.
BENCHMARKS = [
    Benchmark(
        name="transfers_week1",
        title="Host <-> device copies, float32: pageable vs pinned host memory",
        sizes=[1 << 16, 1 << 20, 1 << 24, 1 << 26], sim_sizes=[1 << 10], size_label=pow2_label,
        make_inputs=_copy_inputs,
        variants={
            "torch": lambda src, pin, dev, out, pout: dev.copy_(src),  # H2D, pageable: what .to("cuda") does
            "h2d_pinned": lambda src, pin, dev, out, pout: dev.copy_(pin, non_blocking=True),
            "d2h_pageable": lambda src, pin, dev, out, pout: out.copy_(dev),
            "d2h_pinned": lambda src, pin, dev, out, pout: pout.copy_(dev, non_blocking=True),
        },
        headline=("h2d_pinned", "d2h_pageable", "d2h_pinned"),
        bytes=lambda n: 4 * n,
        notes="bytes = 4n, each copied once; 'torch' is dev.copy_(pageable host tensor); "
              "'% of copy' compares PCIe with device memory",
    ),
    Benchmark(
        name="add_transfers_week1",
        title="Vector add, float32: CPU (torch, NumPy) vs GPU with and without the transfers",
        sizes=[1 << 20, 1 << 24, 1 << 26], sim_sizes=[1 << 10], size_label=pow2_label,
        make_inputs=_add_inputs,
        variants={
            "torch": _gpu_add_only,
            "gpu_with_pageable_copies": _gpu_add_pageable,
            "gpu_with_pinned_copies": _gpu_add_pinned,
            "cpu_torch": lambda a, b, out, *rest: torch.add(a, b, out=out),
            "cpu_numpy": lambda a, b, out, *rest: np.add(a.numpy(), b.numpy(), out=out.numpy()),
        },
        headline=("gpu_with_pageable_copies", "gpu_with_pinned_copies", "cpu_torch", "cpu_numpy"),
        bytes=lambda n: 3 * 4 * n,
        flops=lambda n: n,
        notes="bytes = 12n, the add's own traffic; 'torch' is torch.add on the GPU, data already there; "
              "the copy variants also move 8n bytes in and 4n out over PCIe",
    ),
]
# END SOLUTION ONLY


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="GPU memory footprint (python -m week1_cuda_python.transfers)")
    parser.add_argument("--mib", type=int, default=256, help="size of the test allocation in MiB")
    args = parser.parse_args(argv)
    if not runtime.on_gpu():
        print("simulation: there is no device memory to look at; the copy timings are in "
              "`python -m course bench week1 --only transfers_week1 add_transfers_week1`")
        return 0
    print(footprint_table(memory_footprint(args.mib * MIB)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
