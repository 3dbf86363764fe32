"""What LayerNorm and RMSNorm share: argument checks, launch sizing, and stage 2 of the weight gradient.

Every norm of this lesson normalizes rows of N elements (the last dimensions of x) and takes its
common pieces from here (`from week4_triton_dl import norm_common as nc`): layernorm.py (the
forward and the op), layernorm_backward.py, rmsnorm.py and add_rmsnorm.py.

* Checks, run once per call and before any launch, each raising a ValueError or TypeError that
  names the argument: `check_rows` (x), `check_vector` (weight, bias), `check_stats` (the mean and
  rstd a forward saved), `check_eps`, the launch options (`check_power_of_two`,
  `check_positive_int`), and `check_call`, the few comparisons the public entries (`layer_norm`,
  `rms_norm`) afford per call. `normalized_shape_of`, `rows_of`, `as_rows` and `rows_view` turn a
  `normalized_shape` into M rows of N.
* Launch sizing, in plain Python (Triton's `next_power_of_2` and `cdiv` are jitted helpers that
  cost microseconds a call from the host): the block (`next_power_of_2`), the accumulator type
  (`acc_type`, `acc_dtype`), warps (`warps_for`), rows per step of the persistent kernels
  (`fwd_block_m`, `bwd_block_m`), pipeline stages that fit in shared memory (`pipeline_stages`)
  and the persistent grid (`persistent_grid`: P programs, each owning a contiguous run of rows).
* Stage 2 of the two-stage weight-gradient reduction (`partial_sum_kernel`, `column_sums`). dw
  and db are column sums over every row. Stage 1 (layernorm_backward.py, rmsnorm.py) has each of
  P programs write the sums of its own rows into one row of a (P, N) fp32 "partials" buffer: no
  two programs write one address, so no atomics. Stage 2 sums the P rows of each column and
  rounds once to the weight's dtype. A program owns BLOCK_N columns and walks down the rows, so
  each tile row it loads is BLOCK_N contiguous floats (coalesced); fixed P and a fixed order give
  the same bits every run. Its cost: the buffer is P x N x 4 bytes, written once and read once.
"""
from __future__ import annotations

import math
import numbers

import torch

from course import runtime  # runtime before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.launch import launch
from course.runtime import ON_GPU

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Widest row held in one block of registers (as in week 3's softmax). The backward keeps x,
# dy, w and the two dw/db accumulators of a row live at once: past ~16k columns they no longer
# fit in registers and spill to local memory (correct, slower). Wider rows take the looped
# kernels, which stream each row in chunks of LOOP_BLOCK_N.
MAX_N = 32768
LOOP_BLOCK_N = 4096  # 16 elements per thread at 8 warps
PIPELINE_SMEM_BYTES = 128 * 1024  # of the H100's 227 KB per block; leaves room for reductions
# Programs per SM of the backward's stage 1, so rows per SM of the partials buffer: enough
# resident programs that one's loads are in flight while another reduces, and no more (each
# program adds a row of 4N bytes to the buffer). 2 won on the H100 (layernorm_backward.py).
BWD_PROGRAMS_PER_SM = 2
PARTIAL_BLOCK_P, PARTIAL_BLOCK_N = 32, 64  # stage-2 tile: 32 partial rows x 64 columns
# EXERCISE NOTE: `pytest tests/week4/test_layernorm.py --impl=exercises -k column_sums` checks stage 2
#   alone. Until you write it, your backward (exercises/layernorm_backward.py) runs on the solution's stage 2:
#   the two can be written in either order.


# ------------------------------------------------------------------------------------- checks
def check_rows(x: torch.Tensor, name: str = "x") -> tuple[int, int]:
    """(rows, N) of a contiguous x normalized over its last dimension (any N: wide rows loop)."""
    validate.tensor(x, name, dtypes=DTYPES)
    if x.dim() == 0:
        raise ValueError(f"{name} must have at least 1 dimension (normalized over the last one), got a scalar")
    n = x.shape[-1]
    return (x.numel() // n if n else math.prod(x.shape[:-1])), n


def check_vector(t, name: str, x: torch.Tensor):
    """weight/bias: None, or a contiguous (N,) tensor of x's dtype on x's device."""
    if t is None:
        return None
    validate.tensor(t, name, dtypes=DTYPES)
    if tuple(t.shape) != (x.shape[-1],):
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected ({x.shape[-1]},), the size "
                         f"of x's last dimension (x has shape {tuple(x.shape)})")
    if t.dtype != x.dtype:
        raise TypeError(f"{name} has dtype {str(t.dtype).replace('torch.', '')} but x has "
                        f"{str(x.dtype).replace('torch.', '')}: cast one of them (e.g. module.to(x.dtype))")
    return t


def check_stats(t, name: str, x: torch.Tensor) -> torch.Tensor:
    """Saved statistics (mean, rstd) of x: one value per row, in `acc_dtype(x.dtype)`."""
    validate.tensor(t, name, dtypes=(acc_dtype(x.dtype),))
    if t.shape != x.shape[:-1]:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {tuple(x.shape[:-1])} "
                         "(one value per row of x, as layer_norm_forward returns it)")
    return t


def check_eps(eps) -> float:
    """eps as a float: a finite real number >= 0 (ValueError otherwise)."""
    if not isinstance(eps, numbers.Real) or isinstance(eps, bool) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite real number >= 0, got {eps!r}")
    return float(eps)


def check_power_of_two(value, name: str, *, low: int = 1, high: int | None = None):
    """A launch option: None (the default), or a power of two in [low, high]; ValueError naming it."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < low or value & (value - 1) \
            or (high is not None and value > high):
        bound = f" and <= {high}" if high is not None else ""
        raise ValueError(f"{name} must be a power of two >= {low}{bound}, got {value!r}")


def check_positive_int(value, name: str):
    """A launch option: None (the default), or an int >= 1; ValueError naming it."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_call(x, shape: tuple, weight=None, bias=None) -> None:
    """The public entries' checks (layer_norm, rms_norm): a few comparisons per call, so that a
    call stays cheap; the course's full messages come from `validate` when one fails."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    k = len(shape)
    if k == 1:
        if x.dim() < 1 or x.shape[-1] != shape[0]:
            raise ValueError(f"normalized_shape {shape} must be the last dimensions of x (shape {tuple(x.shape)})")
    elif k == 0 or x.dim() < k or tuple(x.shape[-k:]) != shape:
        raise ValueError(f"normalized_shape {shape} must be the last dimensions of x (shape {tuple(x.shape)})")
    if x.dtype not in DTYPES or x.is_cuda != ON_GPU or x.is_cpu == ON_GPU:  # a meta tensor is neither
        validate.tensor(x, "x", dtypes=DTYPES, contiguous=False)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.shape != shape:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} has shape {got}; expected normalized_shape {shape}")
        if t.dtype != x.dtype or t.get_device() != x.get_device():
            check_vector(t.reshape(-1), name, x.reshape(-1, t.numel()) if t.numel() else x)



# ------------------------------------------------------------------------------- rows of N
def _normalized_shape(normalized_shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(n) for n in normalized_shape)


def normalized_shape_of(normalized_shape) -> tuple[int, ...]:
    """normalized_shape as a tuple of ints; an int or a 1-tuple of an int (the common case) fast."""
    kind = type(normalized_shape)
    if kind is int:
        return (normalized_shape,)
    if kind is tuple and len(normalized_shape) == 1 and type(normalized_shape[0]) is int:
        return normalized_shape
    return _normalized_shape(normalized_shape)


def as_rows(x: torch.Tensor, shape: tuple) -> torch.Tensor:
    """x as a contiguous (rows, prod(shape)) tensor: a view when x is contiguous, else a copy
    (as torch's own norm kernels make)."""
    n = shape[0] if len(shape) == 1 else math.prod(shape)
    if n:
        return x.contiguous().view(-1, n)
    return x.reshape(math.prod(x.shape[:x.dim() - len(shape)]), 0)


def rows_of(x: torch.Tensor, shape: tuple) -> tuple[int, int]:
    """(M, N): rows and row length of x normalized over its trailing `shape` (any N, even 0)."""
    n = shape[0] if len(shape) == 1 else math.prod(shape)
    if n:
        return x.numel() // n, n
    return math.prod(x.shape[:x.dim() - len(shape)]), 0


def rows_view(t: torch.Tensor, M: int, N: int) -> torch.Tensor:
    """t (contiguous, last dimension N) as (M, N), also when N = 0 (view(-1, 0) is ambiguous)."""
    return t.view(M, N) if N else t.reshape(M, 0)


# ------------------------------------------------------------------------------ launch sizing
def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1), in plain Python: `triton.next_power_of_2` is a
    jitted helper that costs microseconds per call from the host."""
    return 1 << (n - 1).bit_length() if n > 1 else 1


def acc_type(dtype: torch.dtype):
    """Arithmetic type: fp64 for fp64 inputs (gradcheck), fp32 for everything else."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """`acc_type` as a torch dtype: what the statistics (mean, rstd) and partial sums are stored in."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def warps_for(elements: int) -> int:
    """Warps for a program that holds `elements` values of each tensor (4 to 16)."""
    # ~16 values per thread per tensor: registers stay low enough for several programs per SM.
    return max(4, min(16, next_power_of_2(max(elements, 1)) // 512))


def pipeline_stages(wanted: int, step_bytes: int) -> int:
    """`wanted` pipeline stages if their shared-memory buffers fit the budget, else none."""
    return wanted if wanted * step_bytes <= PIPELINE_SMEM_BYTES else 1


def fwd_block_m(block_n: int) -> int:
    """Rows per step of the persistent forward for rows of `block_n` (padded) elements."""
    # Rows of 1024+ fill a program on their own; narrower rows are packed up to ~1k elements.
    return max(1, min(64, 1024 // block_n))


def bwd_block_m(block_n: int) -> int:
    """Rows per step of the persistent backward for rows of `block_n` (padded) elements."""
    # The backward streams x and dy: ~4k elements per step keep enough loads in flight.
    return max(1, min(64, 4096 // block_n))


def persistent_grid(M: int, block_m: int, programs_per_sm: int, num_programs: int | None) -> tuple[int, int]:
    """(rows per program, programs): P programs covering M rows, rows a multiple of block_m."""
    steps = -(-M // block_m)
    wanted = num_programs if num_programs is not None else runtime.sm_count() * programs_per_sm
    programs = max(1, min(wanted, steps))
    rows_per_program = max(1, -(-steps // programs)) * block_m  # >= 1 also for M = 0
    return rows_per_program, max(1, -(-M // rows_per_program))


# ---------------------------------------------------- stage 2 of the weight-gradient reduction
@triton.jit
def partial_sum_kernel(partial_ptr, out_ptr, P, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    # Stage 2: column sums of the (P, N) partials. Each program owns BLOCK_N columns and walks
    # down all P rows; a tile row is BLOCK_N contiguous floats, so the loads coalesce.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    # BEGIN EXERCISE: stage 2: a [BLOCK_P, BLOCK_N] accumulator in the partials' dtype (fp32); walk down the P rows
    #   BLOCK_P at a time (rows masked against P, int64 offsets), adding tiles element-wise; then tl.sum(axis=0)
    #   stored masked in out's dtype (rounded once)
    # HINT: Stage 2 of the split reduction: each program owns BLOCK_N columns and sums the P partial rows,
    #   keeping a 2-D tile accumulator so the loop only adds element-wise and reduces once at the end.
    # HINT: acc = zeros [BLOCK_P, BLOCK_N] in the partials' dtype; loop start over range(0, P, BLOCK_P):
    #   rows = start + arange, mask rows < P and the column mask, load with other=0 and add; after the loop
    #   tl.sum over axis 0 and one masked store.
    # HINT: Index with `rows[:, None].to(tl.int64) * N + cols[None, :]`: P * N can pass 2^31.
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=partial_ptr.dtype.element_ty)
    for start in range(0, P, BLOCK_P):
        rows = start + tl.arange(0, BLOCK_P)
        mask = (rows < P)[:, None] & col_mask[None, :]
        acc += tl.load(partial_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=col_mask)
    # END EXERCISE


def column_sums(partials: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Stage 2: sum a (P, N) partials buffer over its rows, rounded once to `dtype`."""
    P, N = partials.shape
    out = torch.empty(N, dtype=dtype, device=partials.device)
    if N == 0:
        return out
    if P == 0:
        return out.zero_()
    launch(partial_sum_kernel, (-(-N // PARTIAL_BLOCK_N),), (P, N, partials.dtype, dtype),
           (partials, out, P, N, PARTIAL_BLOCK_P, PARTIAL_BLOCK_N), num_warps=4)
    return out
