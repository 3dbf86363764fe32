"""Exercise: transfers, pinned memory, memory footprint. Same names as week1_cuda_python/transfers.py.

Check your work with `pytest tests/week1/test_transfers.py --impl=exercises`.
No kernels to write here: the GPU add is torch.add. What you write is where the data lives
and how it moves: host tensors validated (float32, on the CPU, contiguous, same shape), copies
with `non_blocking=True` only from/to pinned memory, and a synchronisation before the host
reads what an asynchronous device-to-host copy wrote.
"""
from __future__ import annotations

import os

import numpy as np  # noqa: F401
import torch  # noqa: F401

from course import runtime  # noqa: F401  before numba: GPU or CUDA simulator

from numba import cuda  # noqa: E402,F401

MIB = 2**20
SANITIZER_CASES: dict = {}


def add_cpu_torch(a, b, out=None):
    """a + b on the CPU with torch (check: float32 host tensors of one shape)."""
    raise NotImplementedError("not implemented yet: add_cpu_torch (week1 exercise)")


def add_cpu_numpy(a, b, out=None):
    """a + b with NumPy; TypeError unless both are float32 numpy arrays."""
    raise NotImplementedError("not implemented yet: add_cpu_numpy (week1 exercise)")


def add_gpu_with_transfers(a, b, out=None, *, workspace=None):
    """Host tensors a, b -> device, torch.add there, sum -> host `out` (allocated if None)."""
    raise NotImplementedError("not implemented yet: add_gpu_with_transfers (week1 exercise)")


def host_buffer(n, *, pinned):
    """n float32 on the host; .pin_memory() when `pinned` and runtime.on_gpu()."""
    raise NotImplementedError("not implemented yet: host_buffer (week1 exercise)")


def h2d(host, device):
    """device.copy_(host), non-blocking when host is pinned; return device."""
    raise NotImplementedError("not implemented yet: h2d (week1 exercise)")


def d2h(device, host):
    """host.copy_(device), non-blocking when host is pinned; return host."""
    raise NotImplementedError("not implemented yet: d2h (week1 exercise)")


def process_memory_used():
    """Given (not an exercise): this process's bytes of GPU memory from NVML, None if unknown."""
    try:
        import pynvml
        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(runtime.DEVICE).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:
        return None
    used = [p.usedGpuMemory for p in processes if p.pid == os.getpid()]
    return used[0] if used and used[0] is not None else None


def memory_snapshot(stage):
    """{"stage", "driver_free", "driver_total", "process_used", "numba_free", "numba_total",
    "torch_allocated", "torch_reserved", "not_torch"}: torch.cuda.mem_get_info, process_memory_used(),
    cuda.current_context().get_memory_info(), torch.cuda.memory_allocated / memory_reserved."""
    raise NotImplementedError("not implemented yet: memory_snapshot (week1 exercise)")


def memory_footprint(nbytes=256 * MIB):
    """Six snapshots: start, after torch.empty(nbytes), after del, after torch.cuda.empty_cache(),
    after a Numba cuda.device_array of nbytes, after deleting it and calling flush_numba_frees().
    RuntimeError("... needs a GPU ...") in simulation."""
    raise NotImplementedError("not implemented yet: memory_footprint (week1 exercise)")


def flush_numba_frees():
    """Given (not an exercise): free now what Numba queued. A dead Numba device array's cuMemFree
    waits in its memory manager's queue (flushed every 10 frees or 20% of the GPU's memory);
    cuda.current_context().deallocations is another queue (streams, events, modules)."""
    context = cuda.current_context()
    context.memory_manager.deallocations.clear()
    context.deallocations.clear()


def footprint_table(rows):
    """Markdown, MiB with thousands separators: 'GPU memory in MiB (total 2,048 MiB)' then
    '| stage | driver free | this process | torch allocated | torch reserved | not torch ... |' rows
    ('-' where a value is None)."""
    raise NotImplementedError("not implemented yet: footprint_table (week1 exercise)")
