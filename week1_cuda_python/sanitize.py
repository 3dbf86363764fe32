"""compute-sanitizer over every week-1 kernel: the cases of the modules written before the
`SANITIZER_CASES` convention (vector_add, elementwise, matmul, reduction), and why they are sized
as they are; every other module lists its own. course/sanitizer_cases.py says what a case is and
why the tool finds what the tests cannot; the runner is the course's machinery:

    python -m course sanitize week1                     all cases, memcheck + racecheck
    python -m course sanitize week1 --list              the case names
    python -m course sanitize week1 --case NAME         one case, in this process
    python -m course sanitize week1 --only scan --tools memcheck --budget 120

The same command serves Nsight Compute (see `profile_ncu.sh`): `--launch BENCH` calls the variants
of a registered benchmark once each at one size, and `--ncu-table CSV` turns ncu's raw CSV export
into the markdown table `profiling_with_nsight.md` shows.
"""
from __future__ import annotations

from typing import Callable

import torch

from course import runtime
from course.check import random_tensor
from course.sanitizer_cases import TAIL_N, grid_stride_size, launch_case, vector


def _vector_add_cases(m) -> dict[str, Callable[[], None]]:
    n = TAIL_N
    return {
        "add_kernel": launch_case(m.vector_add_numba, lambda: vector(n), lambda: vector(n)),
        "add_grid_stride_kernel": launch_case(m.vector_add_numba_grid_stride,
                                          lambda: vector(grid_stride_size(32, 256)),
                                          lambda: vector(grid_stride_size(32, 256))),
        "vector_add_f32": launch_case(m.vector_add_cuda, lambda: vector(n), lambda: vector(n)),
        # 1003 = 250 float4 + 3: the vector kernel's scalar tail runs.
        "vector_add_f32x4": launch_case(m.vector_add_cuda_vec4, lambda: vector(1003), lambda: vector(1003)),
    }


def _elementwise_cases(m) -> dict[str, Callable[[], None]]:
    n = TAIL_N
    n_x4 = 2 * 1024 + 777  # 2 full blocks of 4 x 256 elements, then a block with a ragged 4th quarter
    stride_n = grid_stride_size(32, 256)
    matrix = lambda: random_tensor((37, 45), torch.float32, runtime.DEVICE)  # noqa: E731  partial 32 x 8 blocks
    return {
        "scale_kernel": launch_case(m.scale, lambda: vector(n), 2.0),
        "relu_kernel": launch_case(m.relu, lambda: vector(n)),
        "scale_x4_kernel": launch_case(m.scale_x4, lambda: vector(n_x4), 2.0),
        "relu_x4_kernel": launch_case(m.relu_x4, lambda: vector(n_x4)),
        "saxpy_kernel": launch_case(m.saxpy, 2.0, lambda: vector(n), lambda: vector(n)),
        "saxpy_grid_stride_kernel": launch_case(m.saxpy_grid_stride, 2.0, lambda: vector(stride_n),
                                            lambda: vector(stride_n)),
        "matrix_add_kernel": launch_case(m.matrix_add, matrix, matrix),
    }


def _matmul_cases(m) -> dict[str, Callable[[], None]]:
    # 130 x 20 @ 20 x 70: partial 16-tiles, 32-tiles and 128-tiles in M, N and K; two block
    # rows of the register-blocked kernels. The padded CUDA C rungs run on zero-padded copies.
    # (Smaller in simulation, where the sanitizer never runs and every thread is a Python thread.)
    m_, k_, n_ = runtime.pick(gpu=(130, 20, 70), sim=(37, 20, 29))
    a = lambda: random_tensor((m_, k_), torch.float32, runtime.DEVICE)  # noqa: E731
    b = lambda: random_tensor((k_, n_), torch.float32, runtime.DEVICE)  # noqa: E731
    kernels = {
        "matmul_numba_naive_kernel": m.matmul_numba_naive,
        "matmul_numba_tiled_kernel": m.matmul_numba_tiled,
        "matmul_numba_regblock_kernel": m.matmul_numba_regblock,
    }
    for rung, (kernel_name, *_rest) in m.CUDA_RUNGS.items():
        kernels[kernel_name] = getattr(m, f"matmul_cuda_{rung}")
    return {name: launch_case(fn, a, b) for name, fn in kernels.items()}


def _reduction_cases(m) -> dict[str, Callable[[], None]]:
    return {
        "sum_atomic_kernel": launch_case(m.sum_atomic, lambda: vector(TAIL_N)),
        # More elements than the capped grid (8 blocks per SM) has threads: the grid-stride loop runs.
        "sum_shared_tree_kernel": launch_case(m.sum_shared_tree, lambda: vector(grid_stride_size(8 * 2, 256))),
        "sum_warp_shuffle": launch_case(m.sum_warp_shuffle, lambda: vector(1003)),  # float4 + a tail of 3
        "sum_warp_shuffle[unaligned]": launch_case(m.sum_warp_shuffle, lambda: vector(1003, offset=1)),
    }


LOCAL_CASES: dict[str, Callable] = {
    "vector_add": _vector_add_cases,
    "elementwise": _elementwise_cases,
    "matmul": _matmul_cases,
    "reduction": _reduction_cases,
}
