"""Vector add, the "hello world" of GPU programming, in Numba and in CUDA C (PyCUDA).

What it teaches: the thread hierarchy (a grid of blocks of threads), turning a thread's
coordinates into an element index, guarding the last partial block, and the grid-stride loop.

Cost model for n float32 elements: 12n bytes (read a, read b, write out) and n FLOPs, so
1/12 FLOP per byte. An H100 does ~50 fp32 TFLOP/s and moves ~3 TB/s: the adds take
nanoseconds, the bytes take the time. Success is measured in GB/s against the copy
bandwidth of the same GPU, and the best a kernel can do is match a plain device copy.
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch

from course import interop, runtime, validate
from course.bench import Benchmark, c_function, pow2_label
from course.check import random_tensor
from course.gpu import cuda

# EXERCISE NOTE: The launchers' input checks (course.validate), the output allocation and the
#   early return on empty input (a grid of zero blocks is an invalid launch) are given: you write
#   the kernels, the grid sizes and the CUDA C bodies in kernels/vector_add.cu.

THREADS_PER_BLOCK = 256  # a multiple of the 32-thread warp; 256 keeps 8 warps per block
CUDA_SOURCE = Path(__file__).parent / "kernels" / "vector_add.cu"
NUMBA_DTYPES = (torch.float16, torch.float32, torch.float64, torch.int32, torch.int64)
CUDA_C_DTYPES = (torch.float32,)


# --- Numba kernels -----------------------------------------------------------------------

@cuda.jit
def add_kernel(a, b, out):
    """One thread per element."""
    # BEGIN EXERCISE: one thread per element: i = this thread's global index (cuda.grid(1)); skip
    #   threads past out.size (the last block is partly past the end)
    # HINT: Each thread owns exactly one element; its number across the whole grid is block * block size +
    #   lane, which Numba computes for you.
    # HINT: Two statements: get the global index, then a guarded store; the guard is needed because the grid
    #   is rounded up to whole blocks.
    # HINT: The guard: `if i < out.size:` around the add and store.
    i = cuda.grid(1)  # blockIdx.x * blockDim.x + threadIdx.x
    if i < out.size:  # the last block is partly past the end unless n divides evenly
        out[i] = a[i] + b[i]
    # END EXERCISE


@cuda.jit
def add_grid_stride_kernel(a, b, out):
    """A fixed grid walks the whole array: any n, launch size chosen for the GPU, not for n."""
    # BEGIN EXERCISE: the grid-stride loop: start = cuda.grid(1), stride = cuda.gridsize(1) (threads
    #   in the whole grid), loop over range(start, out.size, stride)
    # HINT: A grid smaller than the array walks it in strides of the whole grid's thread count, so each
    #   thread handles elements i, i+T, i+2T...; neighbouring threads still touch neighbouring addresses
    #   (coalesced).
    # HINT: Two names (first index, stride) and one Python `for` over range; no bounds check is needed
    #   because range stops at out.size.
    # HINT: The stride is `cuda.gridsize(1)`, not the block size: the whole grid advances together.
    start = cuda.grid(1)
    stride = cuda.gridsize(1)  # threads in the whole grid
    for i in range(start, out.size, stride):
        out[i] = a[i] + b[i]
    # END EXERCISE


# --- launchers -----------------------------------------------------------------------------

def _checked(a, b, out, dtypes):
    validate.tensor(a, "a", dtypes=dtypes)
    validate.tensor(b, "b", dtypes=dtypes)
    validate.same_dtype(a=a, b=b)
    validate.same_shape(a=a, b=b)
    return validate.output(out, a)


def _blocks_for(n: int) -> int:
    # BEGIN EXERCISE: how many blocks of THREADS_PER_BLOCK threads cover n elements: ceil(n / 256) in
    #   integer arithmetic (a partial last block counts)
    # HINT: Rounding down would leave the tail of the array without a thread; round up instead, using only
    #   integers (no float division or math.ceil on large n).
    # HINT: The classic ceiling division: add (divisor - 1) before the floor division.
    # HINT: `(n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK`
    return (n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
    # END EXERCISE


def vector_add_numba(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = a + b with one Numba thread per element (any shape; same shape and dtype)."""
    out = _checked(a, b, out, NUMBA_DTYPES)
    if out.numel() == 0:
        return out  # a grid of zero blocks is an invalid launch
    flat = [interop.to_numba(t.view(-1)) for t in (a, b, out)]
    add_kernel[_blocks_for(out.numel()), THREADS_PER_BLOCK](*flat)
    return out


def vector_add_numba_grid_stride(a: torch.Tensor, b: torch.Tensor,
                                 out: torch.Tensor | None = None) -> torch.Tensor:
    """out = a + b with a grid sized to the GPU (32 blocks per SM), each thread looping."""
    out = _checked(a, b, out, NUMBA_DTYPES)
    if out.numel() == 0:
        return out
    # Enough blocks to keep every SM's warp slots busy, no more: each extra block only adds
    # scheduling work, while the loop covers any n.
    # BEGIN EXERCISE: the grid of the grid-stride kernel: enough blocks for n (_blocks_for), but at most
    #   32 per SM (runtime.sm_count())
    # HINT: More blocks than the SMs can keep resident only add scheduling work; the grid-stride loop covers
    #   whatever the grid does not.
    # HINT: Take the smaller of the blocks needed for n and a per-SM cap times the SM count.
    # HINT: `min(_blocks_for(...), 32 * runtime.sm_count())`
    blocks = min(_blocks_for(out.numel()), 32 * runtime.sm_count())
    # END EXERCISE
    flat = [interop.to_numba(t.view(-1)) for t in (a, b, out)]
    add_grid_stride_kernel[blocks, THREADS_PER_BLOCK](*flat)
    return out


@functools.cache
def _cuda_c_kernel(name: str):
    # `prepare` fixes the argument types (3 pointers, one int64) once, so each call packs
    # them without inspecting Python objects: a few microseconds instead of tens.
    return interop.cuda_kernel(CUDA_SOURCE, name, "PPPq")


def _launch_cuda_c(kernel_name: str, a, b, out, elements_per_thread: int) -> None:
    n = out.numel()
    # BEGIN EXERCISE: the grid: threads = ceil(n / elements_per_thread) (each moves that many
    #   elements), grid = (blocks for those threads, at least 1; 1) as PyCUDA's (x, y) tuple
    # HINT: Each thread moves elements_per_thread elements, so the number of threads needed is n divided by
    #   that (rounded up), and blocks follow from threads, not from n.
    # HINT: Two lines: a ceiling division for threads, then a (blocks, 1) tuple; keep at least one block so n
    #   < 4 still launches.
    # HINT: `grid = (max(1, _blocks_for(threads)), 1)`
    threads = (n + elements_per_thread - 1) // elements_per_thread
    grid = (max(1, _blocks_for(threads)), 1)
    # END EXERCISE
    # Stream None is CUDA's legacy default stream, the one torch queues on by default,
    # so this kernel runs after the torch work that produced a and b.
    _cuda_c_kernel(kernel_name).prepared_async_call(grid, (THREADS_PER_BLOCK, 1, 1), None,
                                                    a.data_ptr(), b.data_ptr(), out.data_ptr(), n)


def vector_add_cuda(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = a + b with the CUDA C kernel `vector_add_f32` (float32), one thread per element."""
    out = _checked(a, b, out, CUDA_C_DTYPES)
    if out.numel() == 0:
        return out
    _launch_cuda_c("vector_add_f32", a, b, out, elements_per_thread=1)
    return out


def vector_add_cuda_vec4(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = a + b with `vector_add_f32x4`: 16-byte float4 loads and stores."""
    out = _checked(a, b, out, CUDA_C_DTYPES)
    if out.numel() == 0:
        return out
    # BEGIN EXERCISE: float4 accesses need 16-byte aligned pointers (t.data_ptr() % 16): launch
    #   vector_add_f32x4 with 4 elements per thread when a, b and out all are, else vector_add_f32
    # HINT: A float4 load reads 16 bytes at once and faults on an address that is not a multiple of 16; a
    #   slice such as x[1:] starts 4 bytes into its allocation.
    # HINT: An if/else: test the address of all three tensors, then call _launch_cuda_c with the scalar
    #   kernel name and 1, or the float4 name and 4.
    # HINT: The test: `any(t.data_ptr() % 16 for t in (a, b, out))` means the scalar path.
    if any(t.data_ptr() % 16 for t in (a, b, out)):
        # A view that starts mid-allocation (x[1:]) is not 16-byte aligned, and a float4
        # access there faults. The scalar kernel gives the same answer.
        _launch_cuda_c("vector_add_f32", a, b, out, elements_per_thread=1)
    else:
        _launch_cuda_c("vector_add_f32x4", a, b, out, elements_per_thread=4)
    # END EXERCISE
    return out


# --- benchmark -------------------------------------------------------------------------------

# BEGIN SOLUTION ONLY: the benchmarks (they measure the solution's kernels)
def _inputs(n: int):
    device = runtime.DEVICE
    return (random_tensor(n, torch.float32, device), random_tensor(n, torch.float32, device),
            torch.empty(n, device=device))


BENCHMARKS = [
    Benchmark(
        name="vector_add_week1",
        title="Vector add, float32 (Numba and CUDA C)",
        sizes=[1 << 20, 1 << 24, 1 << 26, 1 << 28],
        sim_sizes=[1 << 10],
        size_label=pow2_label,
        make_inputs=_inputs,
        variants={
            "torch": lambda a, b, out: torch.add(a, b, out=out),
            "numba": vector_add_numba,
            "numba_grid_stride": vector_add_numba_grid_stride,
            "cuda_c": vector_add_cuda,
            "cuda_c_vec4": vector_add_cuda_vec4,
        },
        gpu_only=("cuda_c", "cuda_c_vec4"),
        headline=("numba", "numba_grid_stride", "cuda_c", "cuda_c_vec4"),
        sources={  # the kernel and its launcher, for the "LoC" column
            "numba": [add_kernel, vector_add_numba],
            "numba_grid_stride": [add_grid_stride_kernel, vector_add_numba_grid_stride],
            "cuda_c": [c_function(CUDA_SOURCE, "vector_add_f32"), vector_add_cuda, _launch_cuda_c],
            "cuda_c_vec4": [c_function(CUDA_SOURCE, "vector_add_f32x4"), vector_add_cuda_vec4, _launch_cuda_c],
        },
        bytes=lambda n: 3 * 4 * n,
        flops=lambda n: n,
        compute_dtype=torch.float32,
        notes="bytes = 3 x 4 x n (read a, read b, write out); FLOPs = n",
    ),
]
# END SOLUTION ONLY
