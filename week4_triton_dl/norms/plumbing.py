"""What every norm of this lesson shares, so that each norm's file holds only its kernels and math.

LayerNorm (layernorm.py, layernorm_backward.py), RMSNorm (rmsnorm.py) and the residual add fused
with RMSNorm (add_rmsnorm.py) all normalize rows of N elements (the last dimensions of x). Around
their kernels they need the same plumbing, and it lives here, once:

* Checks, run once per call and before any launch, each raising a ValueError or TypeError that
  names the argument: `check_rows` (x), `check_vector` (weight, bias), `check_stats` (the mean and
  rstd a forward saved), `check_eps`, `check_backward` (dy against x), `check_launch` (a
  launcher's kernel and launch options), and `check_call`, the few comparisons a public entry
  (`layer_norm`, `rms_norm`, `add_rms_norm`) affords per call: the one path every public norm
  validates through, device included.
* Rows of N: `normalized_shape_of`, `rows_of`, `as_rows` and `rows_view` turn a
  `normalized_shape` into M rows of N.
* Launch sizing, in plain Python (Triton's `next_power_of_2` and `cdiv` are jitted helpers that
  cost microseconds a call from the host): the accumulator type (`acc_type`, `acc_dtype`), warps
  (`warps_for`), rows per step of the persistent kernels (`fwd_block_m`, `bwd_block_m`), pipeline
  stages that fit in shared memory (`pipeline_stages`) and the persistent grid (`persistent_grid`:
  P programs, each owning a contiguous run of rows).
* Launch plans, computed once per shape and kept (`forward_plan`, `backward_plan`,
  `tuned_backward_plan`, `persistent_forward`): the hot path does a dict lookup instead of the
  arithmetic. A plan's key holds everything the launch depends on, so it also keys the compiled
  kernel in course.launch (which skips Triton's per-call work).
* The op a model calls (`entry`, `norm_function`, `register_autograd`): checks, rows, the
  registered op under torch.compile, an autograd Function in eager mode, or the forward alone
  when no gradient is needed. A norm hands in its forward, inference and backward as functions
  of one contract (below); rmsnorm.py and course/ops.py say why two paths.

The contract a norm's host functions follow (x contiguous, M rows of N, arguments checked):
    forward(x, *params, eps, M, N) -> (y, *stats)        (stats: per-row fp32 or fp64 values)
    infer(x, *params, eps, M, N) -> y                    (no statistics stored)
    backward(dy, x, params, stats, M, N) -> (dx, *dparams)   (None where a param is None)
"""
from __future__ import annotations

import math
import numbers

import torch

from course import ops, validate
from course.gpu import tl, ON_GPU, runtime
from course.launch import launch, next_power_of_2

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
MAX_PLANS = 4096  # distinct shapes kept per cache (varying batch x length): then start over


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
    if t.device != x.device:
        validate.same_device(x=x, **{name: t})
    return t


def check_stats(t, name: str, x: torch.Tensor) -> torch.Tensor:
    """Saved statistics (mean, rstd) of x: one value per row, in `acc_dtype(x.dtype)`."""
    validate.tensor(t, name, dtypes=(acc_dtype(x.dtype),))
    if t.shape != x.shape[:-1]:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {tuple(x.shape[:-1])} "
                         "(one value per row of x, as the forward returns it)")
    return t


def check_backward(dy, x) -> tuple[int, int]:
    """(rows, N) of x, with dy checked against it (same shape, dtype and device)."""
    M, N = check_rows(x)
    validate.tensor(dy, "dy", dtypes=DTYPES)
    validate.same_shape(dy=dy, x=x)
    validate.same_dtype(dy=dy, x=x)
    return M, N


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


def check_launch(kernel, kernels: tuple, default: str, N: int, *, block_m=None, programs=None,
                 programs_name: str = "num_programs", num_warps=None, num_stages=None, block_n=None) -> str:
    """A launcher's kernel choice and launch options; returns the kernel that runs: `kernel`, or
    "looped" for rows wider than MAX_N, else `default`. Only "looped" streams a row in chunks."""
    if kernel is not None and kernel not in kernels:
        raise ValueError(f"kernel must be one of {kernels}, got {kernel!r}")
    check_positive_int(num_stages, "num_stages")
    check_power_of_two(block_m, "block_m", high=64)
    check_positive_int(programs, programs_name)
    check_power_of_two(num_warps, "num_warps", high=32)
    check_power_of_two(block_n, "block_n", low=16)
    kernel = kernel or ("looped" if N > MAX_N else default)
    if kernel != "looped" and N > MAX_N:
        raise ValueError(f"kernel={kernel!r} holds a row in one block, at most MAX_N = {MAX_N} columns; "
                         f"x has {N}: use kernel='looped' (the default for wide rows)")
    return kernel


def _elsewhere(t: torch.Tensor, x: torch.Tensor) -> bool:
    """Is t on another device than x (x being on the backend's)? Flags and an int, not `t.device !=
    x.device`, which builds two device objects per call; a meta tensor is neither CUDA nor CPU, and
    its get_device() is -1 like a CPU tensor's, hence both flags."""
    return t.is_cuda != ON_GPU or t.is_cpu == ON_GPU or t.get_device() != x.get_device()


def check_call(x, shape: tuple, weight=None, bias=None, residual=None) -> None:
    """The public entries' checks (layer_norm, rms_norm, add_rms_norm): a few comparisons per call,
    so that a call stays cheap; the course's full messages come from `validate` when one fails.
    `residual`: add_rms_norm's delta (a tensor), which must match x in shape and device."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    k = len(shape)
    if k == 1:
        if x.dim() < 1 or x.shape[-1] != shape[0]:
            raise ValueError(f"normalized_shape {shape} must be the last dimensions of x (shape {tuple(x.shape)})")
    elif k == 0 or x.dim() < k or tuple(x.shape[-k:]) != shape:
        raise ValueError(f"normalized_shape {shape} must be the last dimensions of x (shape {tuple(x.shape)})")
    # A meta tensor is neither CUDA nor CPU: both flags, so that it fails here and not in torch's storage code.
    if x.dtype not in DTYPES or x.is_cuda != ON_GPU or x.is_cpu == ON_GPU:
        validate.tensor(x, "x", dtypes=DTYPES, contiguous=False)
    if residual is not None:
        if residual.shape != x.shape:
            raise ValueError(f"x and delta must have one shape (a residual add), got {tuple(x.shape)} and "
                             f"{tuple(residual.shape)}")
        if residual.dtype not in DTYPES or _elsewhere(residual, x):
            validate.tensor(residual, "delta", dtypes=DTYPES, contiguous=False)
            validate.same_device(x=x, delta=residual)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.shape != shape:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} has shape {got}; expected normalized_shape {shape}")
        if t.dtype != x.dtype or _elsewhere(t, x):
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


# ------------------------------------------------------------------------------- launch plans
def forward_plan(cache: dict, key: tuple, N: int, dtype: torch.dtype, flags: tuple, row_kernel, looped_kernel,
                 kernel: str | None, block_n: int | None, num_warps: int | None, store_stats: bool):
    """(kernel, constexprs, launch options, key) of a row (one program per row) or looped forward
    for rows of N, kept in `cache` under `key`; constexprs = (*flags, BLOCK_N, ACC, STORE_STATS)."""
    if kernel == "looped" or (kernel is None and N > MAX_N):
        chosen, block, warps = looped_kernel, block_n or LOOP_BLOCK_N, 8
    else:
        block = next_power_of_2(N)
        chosen, warps = row_kernel, warps_for(block)
    plan = (chosen, (*flags, block, acc_type(dtype), store_stats), dict(num_warps=num_warps or warps), key)
    cache[key] = plan
    return plan


def backward_plan(cache: dict, key: tuple, M: int, N: int, dtype: torch.dtype, flags: tuple, partial_kernel,
                  looped_kernel, looped: bool, block_n: int | None, programs_per_sm: int, num_stages: int,
                  options: dict):
    """(kernel, programs P, rows per program, constexprs, launch options, key) of a backward whose
    dw (and db) are P partial rows summed by column_sums, kept in `cache` under `key`.
    The partial kernel's constexprs: (*flags, BLOCK_M, BLOCK_N, ACC, NUM_STAGES); the looped
    kernel's (one row a step, streamed in chunks): (*flags, BLOCK_N, ACC)."""
    if looped:
        rows_per_program, programs = persistent_grid(M, 1, programs_per_sm, None)
        plan = (looped_kernel, programs, rows_per_program, (*flags, block_n or LOOP_BLOCK_N, acc_type(dtype)),
                dict(num_warps=8, **options), key)
    else:
        block = next_power_of_2(N)
        block_m = min(bwd_block_m(block), next_power_of_2(M))
        rows_per_program, programs = persistent_grid(M, block_m, programs_per_sm, None)
        stages = pipeline_stages(num_stages, 2 * block_m * block * dtype.itemsize)
        plan = (partial_kernel, programs, rows_per_program, (*flags, block_m, block, acc_type(dtype), stages),
                dict(num_warps=warps_for(block_m * block), **options), key)
    if len(cache) > MAX_PLANS:
        cache.clear()
    cache[key] = plan
    return plan


def tuned_backward_plan(plan, looped_kernel, M: int, dtype: torch.dtype, programs_per_sm: int,
                        num_stages_default: int, block_m, num_partials, num_warps, num_stages):
    """A backward plan with the sweep's overrides (not cached: key None, so not the fast launch path)."""
    kernel, programs, rows_per_program, constexprs, options, _ = plan
    if kernel is looped_kernel:  # only the program count and the warps change
        if num_partials:
            rows_per_program = -(-max(M, 1) // min(num_partials, max(M, 1)))
            programs = -(-max(M, 1) // rows_per_program)
        options = {**options, "num_warps": num_warps or options["num_warps"]}
        return kernel, programs, rows_per_program, constexprs, options, None
    *flags, default_block_m, block, acc, _ = constexprs
    block_m = min(block_m or default_block_m, next_power_of_2(M))
    rows_per_program, programs = persistent_grid(M, block_m, programs_per_sm, num_partials)
    stages = num_stages or pipeline_stages(num_stages_default, 2 * block_m * block * dtype.itemsize)
    return (kernel, programs, rows_per_program, (*flags, block_m, block, acc, stages),
            {**options, "num_warps": num_warps or warps_for(block_m * block)}, None)


def persistent_forward(M: int, N: int, itemsize: int, programs_per_sm: int, num_stages_default: int,
                       block_m, num_programs, num_warps, num_stages) -> tuple[int, int, dict]:
    """(programs, rows per program, constexprs BLOCK_M, BLOCK_N, NUM_STAGES and num_warps) of a
    persistent forward: P programs, each normalizing a run of rows, block_m rows a step."""
    block = next_power_of_2(N)
    block_m = min(block_m or fwd_block_m(block), next_power_of_2(M))
    rows_per_program, programs = persistent_grid(M, block_m, programs_per_sm, num_programs)
    return programs, rows_per_program, dict(
        BLOCK_M=block_m, BLOCK_N=block,
        NUM_STAGES=num_stages or pipeline_stages(num_stages_default, block_m * block * itemsize),
        num_warps=num_warps or warps_for(block_m * block))


def run(kernel, grid: tuple, key, args: tuple, options: dict) -> None:
    """Launch a plan: through course.launch's cache when it has a key, else the JIT path (a
    tuned plan of the sweep)."""
    if key is None:
        kernel[grid](*args, **options)
    else:
        launch(kernel, grid, key, args, **options)


def zeros_or_none(flag: bool, N: int, like: torch.Tensor):
    """A parameter's gradient over no rows: zeros, as in torch (None when there is no parameter)."""
    return torch.zeros(N, dtype=like.dtype, device=like.device) if flag else None


# ------------------------------------------------------------- the op a model calls
def norm_function(name: str, forward, backward):
    """The autograd Function eager mode calls for a norm (forward and backward of the contract in
    the module docstring), named `name` (what a profile shows: `<name>Backward`)."""

    def forward_(ctx, x, eps, M, N, dims, *params):
        y, *stats = forward(x, *params, eps, M, N)
        ctx.save_for_backward(x, *params, *stats)  # stats: a few bytes per row, not recomputed
        ctx.info = (len(params), M, N, dims)
        return y

    def backward_(ctx, dy):
        x, *saved = ctx.saved_tensors
        count, M, N, dims = ctx.info
        # Gradients can arrive with any strides (y.sum() gives an expanded tensor of ones).
        dx, *grads = backward(dy.contiguous(), x, saved[:count], saved[count:], M, N)
        shape = x.shape[x.dim() - dims:]  # the normalized shape: the parameters'
        return (dx, None, None, None, None, *(g if g is None else g.view(shape) for g in grads))

    return type(name, (torch.autograd.Function,), {
        "__doc__": "y = norm(x) for a contiguous x of M rows of N elements: eager mode's autograd node.",
        "forward": staticmethod(forward_), "backward": staticmethod(backward_)})


def register_autograd(op, backward_op, params: int) -> None:
    """The autograd formula of a registered norm op op(x, *params, eps) -> (y, *stats), whose
    backward is the registered op backward_op(dy, x, *stats, *params) -> (dx, *dparams), a
    dparam empty when its parameter is None (an op returns tensors, not None)."""

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], *inputs[1:1 + params], *output[1:])
        ctx.mark_non_differentiable(*output[1:])  # statistics for the backward, not results

    def formula(ctx, dy, *_dstats):
        x, *saved = ctx.saved_tensors
        given = saved[:params]
        dx, *grads = backward_op(dy, x, *saved[params:], *given)  # itself an op: one node in the backward graph
        return (dx, *(g if p is not None else None for g, p in zip(grads, given)), None)

    op.register_autograd(formula, setup_context=setup_context)


def entry(x, normalized_shape, params: tuple, eps, default_eps, *, op, function, infer):
    """A norm's public entry, as torch's functional form takes it (`default_eps(dtype)`: eps=None's
    value, or None where eps=None is an error): checks, then the registered
    `op` on (rows, N) views under torch.compile (the compiler sees one node), `function` (the
    autograd Function) when a gradient is needed, else `infer` alone. A non-contiguous x or
    parameter is copied first, as torch's own kernels do."""
    shape = normalized_shape_of(normalized_shape)
    check_call(x, shape, *params)
    if eps is None and default_eps is not None:
        eps = default_eps(x.dtype)
    elif not (type(eps) is float and 0 <= eps < math.inf):
        eps = check_eps(eps)
    if ops.compiling():
        x2 = as_rows(x, shape)
        n = x2.shape[1]
        flat = [p if p is None or p.dim() == 1 else p.reshape(n) for p in params]
        return op(x2, *flat, eps)[0].view(x.shape)
    if not x.is_contiguous():
        x = x.contiguous()
    for p in params:  # a loop with no generator on the common path: this runs on every call
        if p is not None and not p.is_contiguous():
            params = tuple(q if q is None else q.contiguous() for q in params)
            break
    M, N = rows_of(x, shape)
    if ops.needs_grad(x, *params):
        return function.apply(x, eps, M, N, len(shape), *params)
    return infer(x, *params, eps, M, N)
