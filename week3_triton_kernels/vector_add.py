"""Vector add in Triton: week 1's kernel again, written per *block* instead of per thread.

A Triton program handles BLOCK_SIZE elements at once: `tl.arange` gives the block's offsets,
a mask switches off the lanes past the end, and the compiler picks the thread layout and the
vector width of the loads (16-byte accesses where alignment allows, what week 1's float4
kernel did by hand).

Cost model (as in week 1): 3 * itemsize * n bytes, n FLOPs; memory-bound at any size.
"""
from __future__ import annotations

import torch

from course import validate
from course.bench import Benchmark, pow2_label
from course.check import random_tensor
from course.gpu import triton, tl, DEVICE

BLOCK_SIZE = 1024  # 4 warps x 32 threads x 8 elements: two 16-byte fp32 accesses per thread
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: program pid adds elements pid * BLOCK_SIZE .. + BLOCK_SIZE - 1: offsets from
    #   tl.program_id(0) (int64 before multiplying: past 2^31 elements it overflows) and tl.arange, a mask
    #   for offsets < n, masked loads of a and b, a masked store of their sum
    # HINT: Each program owns one contiguous block of BLOCK_SIZE elements; the block's position comes from
    #   the program id, and a mask keeps the last, partial block from touching memory past n.
    # HINT: Three steps: offsets = start of this block + tl.arange(0, BLOCK_SIZE); mask = offsets < n; load
    #   a and b with that mask, store a + b with the same mask.
    # HINT: The line that matters: `offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)`
    #   (int64 first, or the product wraps).
    pid = tl.program_id(axis=0)
    # int64 before multiplying: pid * BLOCK_SIZE overflows int32 past 2^31 elements.
    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n  # the last program reaches past the end unless n divides evenly
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a + b, mask=mask)
    # END EXERCISE


def vector_add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = a + b (any shape; a, b and out of the same shape and floating dtype)."""
    validate.tensor(a, "a", dtypes=DTYPES)
    validate.tensor(b, "b", dtypes=DTYPES)
    validate.same_dtype(a=a, b=b)
    validate.same_shape(a=a, b=b)
    out = validate.output(out, a)
    n = out.numel()
    if n == 0:
        return out  # a grid of zero programs is an invalid launch
    # BEGIN EXERCISE: the launch: a 1-D grid of cdiv(n, BLOCK_SIZE) programs running add_kernel (BLOCK_SIZE
    #   is a constexpr; num_warps=4)
    # HINT: The grid is how many programs run: enough blocks of BLOCK_SIZE to cover all n elements, rounding
    #   up.
    # HINT: A 1-tuple grid, then `kernel[grid](...)` with the tensors, n, and BLOCK_SIZE/num_warps as
    #   keyword arguments.
    grid = (triton.cdiv(n, BLOCK_SIZE),)
    add_kernel[grid](a, b, out, n, BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
    # END EXERCISE
    return out


# BEGIN SOLUTION ONLY: the benchmarks, sweep and command line (they measure the solution's kernels)
def _inputs(n: int, dtype=torch.float32):
    device = DEVICE
    return random_tensor(n, dtype, device), random_tensor(n, dtype, device), torch.empty(n, dtype=dtype, device=device)


BENCHMARKS = [
    Benchmark(
        name="vector_add_week3",
        title="Vector add, float32 (Triton)",
        sizes=[1 << 20, 1 << 24, 1 << 26, 1 << 28],
        sim_sizes=[1 << 12],
        size_label=pow2_label,
        make_inputs=_inputs,
        variants={
            "torch": lambda a, b, out: torch.add(a, b, out=out),
            "triton": vector_add,
        },
        headline=("triton",),
        sources={"triton": [add_kernel, vector_add]},
        bytes=lambda n: 3 * 4 * n,
        flops=lambda n: n,
        compute_dtype=torch.float32,
        notes="bytes = 3 x 4 x n (read a, read b, write out); FLOPs = n",
    ),
]
# END SOLUTION ONLY
