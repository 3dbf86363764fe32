"""Sum reduction: one atomic per element, a shared-memory tree, and warp shuffles (CUDA C).

What it teaches: thousands of threads must agree on one number. Atomics on one address
serialise; a tree in shared memory halves the active threads each step (with a
__syncthreads between steps); warp shuffles do the first five steps inside a warp's
registers with no shared memory and no barrier. Every version sums many elements per
thread first (grid-stride), so the combining cost is paid once per thread, not per element.

Cost model: n float32 elements: 4n bytes read, n - 1 additions. Memory-bound; the best
version should read at the copy bandwidth (bytes counted: the input, read once).
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch

from course import interop, runtime, validate
from course.bench import Benchmark, pow2_label
from course.check import random_tensor
from course.gpu import cuda, float32

THREADS_PER_BLOCK = 256
CUDA_SOURCE = Path(__file__).parent / "kernels" / "reduction.cu"
DTYPES = (torch.float32,)

# EXERCISE NOTE: Each launcher returns a 0-d float32 tensor on the input's device: _checked gives it
#   zeroed (the kernels add into it), and skipping the launch on empty input is given.


@cuda.jit
def sum_atomic_kernel(x, out):
    """Every element is one atomic add on out[0]: correct, and as slow as a queue."""
    # BEGIN EXERCISE: one thread per element (guarded): cuda.atomic.add(out, 0, x[i]) (a plain
    #   out[0] += x[i] loses updates when threads really run at once)
    # HINT: `out[0] += v` is a read, an add and a write: two threads can read the same old value and one
    #   update is lost. An atomic makes the read-modify-write indivisible (and serialises every add on
    #   one address).
    # HINT: guarded global index, then one atomic add of this thread's element into index 0 of out.
    # HINT: `cuda.atomic.add(out, 0, x[i])`
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(out, 0, x[i])
    # END EXERCISE


@cuda.jit
def sum_shared_tree_kernel(x, out):
    """Per-thread partial sums (grid-stride), then a tree in shared memory, one atomic per block."""
    # BEGIN EXERCISE: partial = cuda.shared.array(THREADS_PER_BLOCK, float32); each thread sums its
    #   grid-stride elements in a float32 register, stores it at partial[threadIdx.x], cuda.syncthreads()
    # HINT: first shrink the work per block: each thread accumulates many elements in a register
    #   (grid-stride, so any n fits any grid), then publishes its partial sum to shared memory for the
    #   tree.
    # HINT: a shared float32 array of one slot per thread, a float32 accumulator starting at 0, a grid-stride
    #   `for`, one shared store, then a barrier so the tree sees every slot.
    # HINT: keep the accumulator `float32(0.0)`: a Python 0.0 would make it float64 in Numba.
    partial = cuda.shared.array(THREADS_PER_BLOCK, float32)
    tid = cuda.threadIdx.x
    acc = float32(0.0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        acc += x[i]
    partial[tid] = acc
    cuda.syncthreads()
    # END EXERCISE
    # Halve the active threads each step. Sequential addressing (tid + step, not 2 * tid)
    # keeps the active threads in whole warps and their shared reads in distinct banks.
    # BEGIN EXERCISE: the tree: step = THREADS_PER_BLOCK // 2, 1/4, ..., 1: threads tid < step add
    #   partial[tid + step] into partial[tid], cuda.syncthreads() after every step; thread 0 adds
    #   partial[0] to out[0] with one atomic
    # HINT: each step halves the active threads and adds the upper half of the slots onto the lower half
    #   (sequential addressing keeps active threads in whole warps and avoids bank conflicts); after
    #   log2(256) steps slot 0 holds the block's sum.
    # HINT: a while loop on step (half the block, then halving); inside: `if tid < step` add slot tid + step
    #   into slot tid, then a barrier on every thread (outside the if); finally thread 0 does one atomic
    #   add into out.
    # HINT: the barrier must be reached by all threads each step: `cuda.syncthreads()` sits outside `if tid <
    #   step`.
    step = THREADS_PER_BLOCK // 2
    while step > 0:
        if tid < step:
            partial[tid] += partial[tid + step]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        cuda.atomic.add(out, 0, partial[0])
    # END EXERCISE


def _checked(x):
    validate.tensor(x, "x", dtypes=DTYPES)
    return torch.zeros((), dtype=x.dtype, device=x.device)  # the atomics add into it


def _grid(n: int) -> int:
    # Enough blocks to fill every SM a few times over, then each thread loops.
    # BEGIN EXERCISE: the grid-stride grid: the blocks n needs, but at most 8 per SM (runtime.sm_count())
    #   and at least 1
    # HINT: the grid-stride kernel does not need a block per element block: cap the grid at a few blocks per
    #   SM, and never go to zero blocks.
    # HINT: clamp the usual ceiling division between 1 and 8 * runtime.sm_count() with max(1, min(...)).
    return max(1, min((n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, 8 * runtime.sm_count()))
    # END EXERCISE


def sum_atomic(x: torch.Tensor) -> torch.Tensor:
    """x.sum() (0-d float32 tensor) with one atomic add per element (Numba)."""
    out = _checked(x)
    if x.numel():
        # BEGIN EXERCISE: one thread per element: the blocks that cover n
        # HINT: the atomic kernel has no loop, so every element needs its own thread: round n up to whole
        #   blocks.
        # HINT: `(x.numel() + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK`
        blocks = (x.numel() + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
        # END EXERCISE
        sum_atomic_kernel[blocks, THREADS_PER_BLOCK](interop.to_numba(x.view(-1)), interop.to_numba(out.view(1)))
    return out


def sum_shared_tree(x: torch.Tensor) -> torch.Tensor:
    """x.sum() with grid-stride partial sums and a shared-memory tree per block (Numba)."""
    out = _checked(x)
    if x.numel():
        sum_shared_tree_kernel[_grid(x.numel()), THREADS_PER_BLOCK](
            interop.to_numba(x.view(-1)), interop.to_numba(out.view(1)))
    return out


@functools.cache
def _cuda_c_kernel():
    return interop.cuda_kernel(CUDA_SOURCE, "sum_warp_shuffle", "PPqi")


def sum_warp_shuffle(x: torch.Tensor) -> torch.Tensor:
    """x.sum() with `sum_warp_shuffle` (CUDA C): float4 loads, __shfl_down_sync, one atomic per block."""
    out = _checked(x)
    if x.numel():
        # BEGIN EXERCISE: float4 loads only when x is 16-byte aligned (vectorize 0 or 1); launch
        #   `sum_warp_shuffle` on the grid for n / 4 threads' worth of float4s (_grid), THREADS_PER_BLOCK
        #   threads: prepared_async_call(grid, block, None, x, out pointers, n, vectorize)
        # HINT: float4 loads need a 16-byte aligned base (a view like x[1:] is not); the kernel takes a flag
        #   and falls back to scalar loads, and since each thread loads 4 floats per step the grid is
        #   sized for n / 4 threads.
        # HINT: compute vectorize as 0/1 from x.data_ptr() % 16, then one prepared_async_call with an (x, 1)
        #   grid from _grid, a (THREADS_PER_BLOCK, 1, 1) block, stream None and the raw pointers, n and
        #   the flag.
        # HINT: the grid: `(_grid(x.numel() // 4 or 1), 1)` (the `or 1` keeps n < 4 launching).
        vectorize = int(x.data_ptr() % 16 == 0)  # a view like x[1:] cannot use float4 loads
        _cuda_c_kernel().prepared_async_call((_grid(x.numel() // 4 or 1), 1), (THREADS_PER_BLOCK, 1, 1), None,
                                             x.data_ptr(), out.data_ptr(), x.numel(), vectorize)
        # END EXERCISE
    return out


# BEGIN SOLUTION ONLY: the benchmarks (they measure the solution's kernels)
def _inputs(n: int):
    return (random_tensor(n, torch.float32, runtime.DEVICE),)


BENCHMARKS = [
    Benchmark(
        name="reduction_week1", title="Sum of a float32 vector: atomics, shared tree (Numba), warp shuffle (CUDA C)",
        sizes=[1 << 24, 1 << 26], sim_sizes=[1 << 10], size_label=pow2_label,
        make_inputs=_inputs,
        variants={"torch": torch.sum, "atomic": sum_atomic, "shared_tree": sum_shared_tree,
                  "warp_shuffle": sum_warp_shuffle},
        gpu_only=("warp_shuffle",),
        headline=("shared_tree", "warp_shuffle"),
        bytes=lambda n: 4 * n, flops=lambda n: n,
        notes="bytes = 4 n (the input, read once); FLOPs = n",
    ),
]
# END SOLUTION ONLY
