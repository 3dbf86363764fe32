"""Exercise: autotune a row-sum kernel that accumulates with atomics, and an in-place axpy.
Same names as week4_triton_dl/autotuning.py. Check your work with
`pytest tests/week4/test_autotuning.py --impl=exercises`.

Suggested order: `row_sum_kernel` and `row_sum` (start with `config=`, no tuner);
`prune_row_sum_configs`; `make_row_sum_tuner` (triton.autotune with key, reset_to_zero,
prune_configs_by, do_bench); then `axpy_kernel`, `make_axpy_tuner` (restore_value) and `axpy_`.
The tests hand your tuners a scripted `do_bench`: the interpreter cannot time anything.
"""
from __future__ import annotations

import time

import torch

from course import runtime
from course import validate  # noqa: F401

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_GRID_Y = 65535


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, row_stride, n_rows_bucket,
                   BLOCK_N: tl.constexpr, SPLIT_COLS: tl.constexpr):
    """Program (row, part) sums columns [part * SPLIT_COLS, +SPLIT_COLS) of its row and
    atomic_adds the result into out[row]. n_rows_bucket is only there for the tuning key."""
    # TODO
    pass


@triton.jit
def axpy_kernel(y_ptr, x_ptr, a, n, BLOCK: tl.constexpr):
    """y += a * x, in place."""
    # TODO
    pass


def _cfg(block_n, split_cols, warps):
    return triton.Config({"BLOCK_N": block_n, "SPLIT_COLS": split_cols}, num_warps=warps)


ROW_SUM_CONFIGS = [
    _cfg(512, 512, 2),
    _cfg(1024, 1024, 4),
    _cfg(1024, 8192, 4),
    _cfg(2048, 16384, 8),
    _cfg(4096, 65536, 8),
    _cfg(4096, 1 << 24, 8),
    _cfg(8192, 1 << 24, 16),
]
AXPY_CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((512, 2), (1024, 4), (4096, 8))]


def prune_row_sum_configs(configs, named_args, **kwargs):
    """Keep only configs worth timing for named_args["n_cols"] (see the module docstring)."""
    raise NotImplementedError("not implemented yet: prune_row_sum_configs (week4 exercise)")


def host_do_bench(kernel_call, quantiles=None, reps=2):
    """A do_bench for the interpreter: a host clock (meaningless timings, working workflow)."""
    kernel_call()
    start = time.perf_counter()
    for _ in range(reps):
        kernel_call()
    ms = (time.perf_counter() - start) * 1e3 / reps
    return [ms, ms, ms] if quantiles else ms


def default_do_bench():
    return None if runtime.on_gpu() else host_do_bench


def make_row_sum_tuner(configs=None, *, key=("n_rows_bucket", "n_cols"), reset_to_zero=True, prune=True,
                       do_bench=None):
    """A fresh triton.autotune(...)(row_sum_kernel)."""
    raise NotImplementedError("not implemented yet: make_row_sum_tuner (week4 exercise)")


def make_axpy_tuner(configs=None, *, restore_value=True, do_bench=None):
    """A fresh triton.autotune(...)(axpy_kernel) keyed on n."""
    raise NotImplementedError("not implemented yet: make_axpy_tuner (week4 exercise)")


row_sum_tuned = None  # TODO: make_row_sum_tuner()
axpy_tuned = None     # TODO: make_axpy_tuner()


def rows_bucket(n_rows):
    return triton.next_power_of_2(max(n_rows, 1))


def row_sum(x, *, tuner=None, config=None):
    """x.sum(-1) in fp32 by the autotuned kernel (or by one given config)."""
    raise NotImplementedError("not implemented yet: row_sum (week4 exercise)")


def axpy_(y, x, a, *, tuner=None):
    """y += a * x in place, autotuned; returns y."""
    raise NotImplementedError("not implemented yet: axpy_ (week4 exercise)")


def row_sum_torch(x):
    return x.sum(-1, dtype=torch.float32)
