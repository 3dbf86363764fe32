"""What a sanitizer case is written with: one small launch, sizes that leave partial blocks, a sync.

A kernel can give the right answer and still be wrong: a thread that writes one element past the
end of a buffer usually lands in memory nobody checks, and a missing `__syncthreads()` is a race
that loses only when the warps happen to be scheduled badly. NVIDIA's `compute-sanitizer` runs a
program with every memory access instrumented (memcheck: out-of-bounds and misaligned accesses;
racecheck: shared-memory hazards). A kernel module lists `SANITIZER_CASES`, {name: a function that
launches the kernel once, small, and synchronizes}, and `python -m course sanitize week1` runs each
case in its own process under each tool (the runner is the course's machinery: classroom/sanitize.py).

The helpers below make a case: sizes with a ragged last block (TAIL_N, grid_stride_size), inputs
(vector, also unaligned), and the synchronization without which a fault would surface nowhere.
"""
from __future__ import annotations

from typing import Callable

import torch

from course import runtime
from course.check import random_tensor

# 3 full blocks of 256 threads and one element: 255 idle threads in the last block, whose writes
# would land 1 KB past the end, beyond any rounding of the allocation, if a guard were missing.
TAIL_N = 3 * 256 + 1


def synchronize() -> None:
    """Wait for the GPU (nothing to wait for in simulation)."""
    # Kernel launches are asynchronous: without this the process could exit before the
    # launch ran, and a fault would surface nowhere.
    if runtime.on_gpu():
        torch.cuda.synchronize()


def vector(n: int, offset: int = 0) -> torch.Tensor:
    """n random float32 values; offset > 0 gives a view that starts mid-allocation (unaligned)."""
    return random_tensor(n + offset, torch.float32, runtime.DEVICE)[offset:]


def launch_case(fn: Callable, *args) -> Callable[[], None]:
    """A case: call `fn(*make())` for the argument makers in `args` (a value that is not
    callable is passed as it is), then synchronize."""
    def run() -> None:
        fn(*(make() if callable(make) else make for make in args))
        synchronize()
    return run


def grid_stride_size(blocks_per_sm: int, threads: int) -> int:
    """More elements than a grid capped at `blocks_per_sm` blocks of `threads` per SM has threads,
    plus a partial block: every thread loops at least once more, and the last trip is ragged.
    Tiny in simulation (no sanitizer there)."""
    return runtime.pick(gpu=blocks_per_sm * runtime.sm_count() * threads + 1001, sim=1000)
