"""Autotuning in Triton: config spaces, keys, pruning, kernels that write in place, and caches.

No tile size, warp count or pipeline depth is best for every shape and GPU. `@triton.autotune`
compiles and times each `triton.Config` the first time it sees a new *key* and then reuses the
winner. This module is a small tunable kernel and the tools to watch the tuner at work.

The workflow, in the order you meet it:
* The space: `triton.Config({"BLOCK_N": 1024, "SPLIT_COLS": 8192}, num_warps=4, num_stages=...)`.
  Each config is one compile (~0.5-2 s on a GPU) plus a timing run (`do_bench`: warm-up, then
  repeated launches timed with CUDA events; median of them). Keep spaces small: 4-10 configs.
* The key: `key=["n_rows_bucket", "n_cols"]` names kernel ARGUMENTS; when the tuple of their
  values is new, every config is timed again. Triton also appends the dtype of every tensor
  argument, so fp32 and bf16 tune separately. A key on a value that changes every call (the
  number of tokens in a batch) retunes every call: bucket it (here n_rows rounded up to a power
  of two, passed as an extra argument used only by the key). Triton 3.9 rejects key names that
  are not arguments (ValueError at decoration); Triton 3.6 silently ignores them, so a typo
  there means "tune once, never again".
  (Recompilation is a separate mechanism: integer arguments are specialised on "== 1" and
  "divisible by 16", so a new shape may recompile the chosen config without retuning.)
* Pruning: `prune_configs_by={"early_config_prune": fn}` gets (configs, named_args, **kwargs)
  and returns the configs worth timing for this call: here a 4096-wide block for a 100-column
  row, or a split into more than 65535 programs (the grid's y limit), are dropped before any
  compile. ("perf_model" + "top_k" rank configs by a cost model and time only the best k.)
  One config left: Triton 3.9 takes it untimed; Triton 3.6 still times it once
  (triton-lang/triton#10413 removed that).
* Kernels that write in place: every config runs several times while being timed, so a kernel
  that accumulates (`atomic_add` into `out`) or updates its input (`y += a * x`) would return
  garbage after tuning. `reset_to_zero=["out_ptr"]` zeroes those arguments before each timed
  run (and once more before the real run); `restore_value=["y_ptr"]` snapshots them and puts
  them back after each timed run. `row_sum_kernel` needs the first, `axpy_kernel` the second;
  the tests show the wrong answers without them.
* Caches: the winner per key lives in the Autotuner object (`.cache`, for this process);
  `best_config` is the config of the last call and `configs_timings` the timings of the last
  tuning. Compiled kernels live in Triton's on-disk cache (`TRITON_CACHE_DIR`, default
  ~/.triton/cache), so a second process skips compiling but still re-TIMES every config unless
  `TRITON_CACHE_AUTOTUNING=1` (or `cache_results=True`) also stores the timings on disk.
  `TRITON_PRINT_AUTOTUNING=1` prints each tuning: the key, the time it took, the winner.
* The interpreter (`TRITON_INTERPRET=1`) has no device clock. In Triton 3.6 (and 3.9), a tuner with more
  than one config left after pruning fails on its first call ("0 active drivers": there is no
  GPU driver to ask for a benchmarker); one config left means no timing and it just runs. So
  this module passes `do_bench=` a host-clock timer in simulation: the workflow runs, the
  timings mean nothing, and the tests inject scripted timings to check the logic exactly.
  Disk caching of timings is switched off in the interpreter.

Cost model of the kernel (`row_sum`: out[r] = sum_c x[r, c]): reads rows x cols x itemsize
bytes, writes rows x 4; one add per element: memory-bound, % of copy is the yardstick. The
choice the tuner makes is between parallelism and overhead: one program per row is enough for
4096 rows (132 SMs, many programs each), but 64 rows of 262144 would occupy 64 programs on 132
SMs, so rows are split across programs (SPLIT_COLS) whose partial sums meet in `out` through
atomics.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import torch

from course import runtime, validate
from course.bench import Benchmark
from course.check import random_tensor
from course.gpu import triton, tl

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_GRID_Y = 65535  # CUDA's limit on the second grid dimension


# ----------------------------------------------------------------------------------- kernels
@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, row_stride, n_rows_bucket,
                   BLOCK_N: tl.constexpr, SPLIT_COLS: tl.constexpr):
    # n_rows_bucket is not used here: it exists so that the autotuner's key can name it.
    # BEGIN EXERCISE: split-K over programs: program (row, part) sums columns [part * SPLIT_COLS, +
    #   SPLIT_COLS) of its row in BLOCK_N steps (fp32, masked to the part), then tl.atomic_add of its
    #   partial into out[row]: several programs meet there, so out must start at zero
    # HINT: Split the row across several programs so short-and-wide inputs still fill the GPU; each program
    #   sums its share and the partial sums meet through an atomic add.
    # HINT: row from program_id(0), first/last columns of the share from program_id(1) and SPLIT_COLS
    #   (capped at n_cols); a loop in BLOCK_N steps accumulating masked fp32 loads into a vector; one
    #   reduction, one atomic.
    # HINT: `tl.atomic_add(out_ptr + row, tl.sum(acc, axis=0))`; mask with `offs < last`, not `< n_cols`, or
    #   two shares count the same columns.
    row = tl.program_id(0).to(tl.int64)
    first = tl.program_id(1) * SPLIT_COLS  # this program's share of the row
    last = tl.minimum(first + SPLIT_COLS, n_cols)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(first, last, BLOCK_N):
        offs = start + cols
        acc += tl.load(x_ptr + row * row_stride + offs, mask=offs < last, other=0.0).to(tl.float32)
    # Partial sums of one row from several programs meet here: out must start at zero.
    tl.atomic_add(out_ptr + row, tl.sum(acc, axis=0))
    # END EXERCISE


@triton.jit
def axpy_kernel(y_ptr, x_ptr, a, n, BLOCK: tl.constexpr):
    # y += a * x, in place: run twice, it adds twice.
    # BEGIN EXERCISE: y += a * x, in place, masked to n (int64 offsets)
    # HINT: A tiny elementwise kernel whose point is that it changes y in place: running it twice adds
    #   twice, which matters to the autotuner.
    # HINT: Offsets in int64 from the program id, mask offs < n, load y and x, store y + a * x back into y.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, y + a * x, mask=mask)
    # END EXERCISE


# ------------------------------------------------------------------------------ the spaces
def _cfg(block_n, split_cols, warps):
    return triton.Config({"BLOCK_N": block_n, "SPLIT_COLS": split_cols}, num_warps=warps)


# From "many small programs" to "one program per row". 2^24 columns covers any row we tune for.
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
    """Drop configs that cannot help this call: blocks wider than the row, grids too tall."""
    # BEGIN EXERCISE: keep only configs worth timing for named_args['n_cols']: no block wider than the row
    #   needs (keep at least the narrowest), no grid taller than MAX_GRID_Y, and one of each set that
    #   behaves identically (splits the row never reaches); never return an empty list
    # HINT: Pruning saves benchmarking time: a block wider than the row only loads masked lanes, a grid
    #   taller than the hardware limit fails to launch, and configs that differ only in an unreachable split
    #   time the same thing.
    # HINT: Filter by BLOCK_N <= the next power of two of n_cols (but never below the narrowest config) and
    #   cdiv(n_cols, SPLIT_COLS) <= MAX_GRID_Y; deduplicate on (BLOCK_N, min(SPLIT_COLS, n_cols),
    #   num_warps); fall back to the narrowest config if nothing is left.
    # HINT: `return unique or [min(configs, key=lambda c: c.kwargs["BLOCK_N"])]` (an empty list would make
    #   the autotuner fail).
    n_cols = named_args["n_cols"]
    widest_useful = max(triton.next_power_of_2(max(n_cols, 1)), min(c.kwargs["BLOCK_N"] for c in configs))
    kept = [c for c in configs
            if c.kwargs["BLOCK_N"] <= widest_useful and triton.cdiv(n_cols, c.kwargs["SPLIT_COLS"]) <= MAX_GRID_Y]
    # Configs that differ only in splits the row never reaches behave identically: keep one.
    seen, unique = set(), []
    for c in kept:
        key = (c.kwargs["BLOCK_N"], min(c.kwargs["SPLIT_COLS"], max(n_cols, 1)), c.num_warps)
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique or [min(configs, key=lambda c: c.kwargs["BLOCK_N"])]
    # END EXERCISE


def host_do_bench(kernel_call, quantiles=None, reps: int = 2):
    """A do_bench for the interpreter: a host clock (meaningless timings, working workflow)."""
    kernel_call()
    start = time.perf_counter()
    for _ in range(reps):
        kernel_call()
    ms = (time.perf_counter() - start) * 1e3 / reps
    return [ms, ms, ms] if quantiles else ms


def default_do_bench():
    """None on a GPU (Triton's own: CUDA events, median); the host clock in simulation."""
    return None if runtime.on_gpu() else host_do_bench


def make_row_sum_tuner(configs=None, *, key=("n_rows_bucket", "n_cols"), reset_to_zero=True, prune=True,
                       do_bench=None):
    """A fresh Autotuner around `row_sum_kernel` (its own cache). The tests build several."""
    # BEGIN EXERCISE: triton.autotune(...)(row_sum_kernel) with the key, reset_to_zero=['out_ptr'] (every
    #   timed run adds into out: atomics), prune_configs_by with prune_row_sum_configs, and do_bench
    #   (default_do_bench() when None)
    # HINT: The autotuner runs the kernel many times per config; with atomic adds every timed run adds into
    #   out, so out must be zeroed before each one, and the result cached per key.
    # HINT: `triton.autotune(configs=..., key=..., reset_to_zero=..., prune_configs_by={...}, do_bench=...)`
    #   applied to row_sum_kernel; honour the reset_to_zero/prune flags by passing None when they are off.
    # HINT: `prune_configs_by={"early_config_prune": prune_row_sum_configs}`
    return triton.autotune(
        configs=list(configs or ROW_SUM_CONFIGS), key=list(key),
        reset_to_zero=["out_ptr"] if reset_to_zero else None,
        prune_configs_by={"early_config_prune": prune_row_sum_configs} if prune else None,
        do_bench=do_bench or default_do_bench())(row_sum_kernel)
    # END EXERCISE


def make_axpy_tuner(configs=None, *, restore_value=True, do_bench=None):
    # BEGIN EXERCISE: triton.autotune(...)(axpy_kernel) keyed on n, with restore_value=['y_ptr'] (a timed
    #   run changes y in place: each trial must start from the same y) and do_bench
    # HINT: axpy writes y in place, so each timed trial would start from a different y: ask the autotuner to
    #   save y and restore it after every trial.
    # HINT: triton.autotune(...)(axpy_kernel) keyed on ["n"], restore_value=["y_ptr"] when asked (None
    #   otherwise), do_bench defaulting to default_do_bench().
    return triton.autotune(configs=list(configs or AXPY_CONFIGS), key=["n"],
                           restore_value=["y_ptr"] if restore_value else None,
                           do_bench=do_bench or default_do_bench())(axpy_kernel)
    # END EXERCISE


_TUNERS: dict = {}  # the module's own tuners, built on first use; each keeps its cache for the process


def default_tuner(which: str):
    """The module's tuner of `which` ("row_sum" or "axpy"), made by make_row_sum_tuner/make_axpy_tuner."""
    tuner = _TUNERS.get(which)
    if tuner is None:
        tuner = _TUNERS[which] = make_row_sum_tuner() if which == "row_sum" else make_axpy_tuner()
    return tuner


# ------------------------------------------------------------------------------- launchers
def rows_bucket(n_rows: int) -> int:
    """The tuning key's stand-in for n_rows: the next power of two (so 1000 and 1024 share a tuning)."""
    return triton.next_power_of_2(max(n_rows, 1))


def row_sum(x: torch.Tensor, *, tuner=None, config: dict | None = None) -> torch.Tensor:
    """x.sum(-1) for a 2-D x, in fp32 (the accumulation dtype), by the autotuned kernel.

    `tuner`: an Autotuner from `make_row_sum_tuner` (default: the module's). `config`: skip
    tuning and run {"BLOCK_N", "SPLIT_COLS", "num_warps"} as given.
    """
    validate.tensor(x, "x", dtypes=DTYPES, ndim=2, contiguous=False)
    if x.shape[1] > 1 and x.stride(1) != 1:
        raise ValueError(f"x must have unit stride along its rows (strides {x.stride()}): pass .contiguous()")
    n_rows, n_cols = x.shape
    # Zeroed here, not only by reset_to_zero: that hook runs while tuning, not on cached calls.
    out = torch.zeros(n_rows, dtype=torch.float32, device=x.device)
    if n_rows == 0 or n_cols == 0:
        return out
    grid = lambda meta: (n_rows, triton.cdiv(n_cols, meta["SPLIT_COLS"]))  # noqa: E731
    args = (x, out, n_rows, n_cols, x.stride(0), rows_bucket(n_rows))
    if config is not None:
        _check_config(config, n_cols)
        row_sum_kernel[grid](*args, **config)
    else:
        (tuner or default_tuner("row_sum"))[grid](*args)
    return out


def _check_config(config, n_cols):
    if set(config) - {"BLOCK_N", "SPLIT_COLS", "num_warps"} or not {"BLOCK_N", "SPLIT_COLS"} <= set(config):
        raise ValueError(f"config must give BLOCK_N and SPLIT_COLS (and optionally num_warps), got {config!r}")
    b, s = config["BLOCK_N"], config["SPLIT_COLS"]
    if not isinstance(b, int) or b < 16 or b & (b - 1) or not isinstance(s, int) or s < b or s % b:
        raise ValueError(f"BLOCK_N must be a power of two >= 16 and SPLIT_COLS a multiple of it, got {b!r}, {s!r}")
    if triton.cdiv(n_cols, s) > MAX_GRID_Y:
        raise ValueError(f"SPLIT_COLS={s} splits {n_cols} columns into more than {MAX_GRID_Y} programs")


def axpy_(y: torch.Tensor, x: torch.Tensor, a: float, *, tuner=None) -> torch.Tensor:
    """y += a * x in place (fp32, same shape), autotuned; returns y."""
    validate.tensor(y, "y", dtypes=(torch.float32,))
    validate.tensor(x, "x", dtypes=(torch.float32,))
    validate.same_shape(y=y, x=x)
    if not isinstance(a, (int, float)):
        raise TypeError(f"a must be a Python number, got {type(a).__name__}")
    n = y.numel()
    if n:
        (tuner or default_tuner("axpy"))[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](y, x, float(a), n)
    return y


def row_sum_torch(x):
    return x.sum(-1, dtype=torch.float32)


# ------------------------------------------------------------------------------ the report
REPORT_SHAPES = [(4096, 4096), (16384, 1024), (256, 65536), (64, 262144), (8, 1 << 20), (1000, 1000)]


def _gbps(rows, cols, itemsize, ms):
    return (rows * cols * itemsize + rows * 4) / (ms * 1e-3) / 1e9


def report(shapes=None, dtypes=None, out=sys.stdout) -> None:
    """Per shape: every config the tuner timed (ms, GB/s), the winner, and what retriggers tuning."""
    shapes = shapes or runtime.pick(gpu=REPORT_SHAPES, sim=[(8, 300), (2, 5000)])
    dtypes = dtypes or runtime.pick(gpu=[torch.float32, torch.bfloat16], sim=[torch.float32])
    where = torch.cuda.get_device_name() if runtime.on_gpu() else "SIMULATION (host-clock timings: meaningless)"
    print(f"row_sum autotuning report, {where}, triton {triton.__version__}", file=out)
    for dtype in dtypes:
        itemsize = torch.empty((), dtype=dtype).element_size()
        for rows, cols in shapes:
            tuner = make_row_sum_tuner()
            x = random_tensor((rows, cols), dtype, runtime.DEVICE)
            start = time.perf_counter()
            got = row_sum(x, tuner=tuner)
            first_s = time.perf_counter() - start
            err = float((got.double() - x.double().sum(-1)).abs().max())
            timings = getattr(tuner, "configs_timings", None)
            what = (f"compiled and timed {len(timings)} configs" if timings else
                    "one config left after pruning: nothing to time")
            print(f"\n{str(dtype).replace('torch.', '')} {rows} x {cols}: first call {first_s:.2f} s ({what}); "
                  f"max |error| {err:.2e}", file=out)
            timings = timings or {tuner.best_config: [float("nan")] * 3}
            for config, t in sorted(timings.items(), key=lambda kv: kv[1][0] if isinstance(kv[1], list) else kv[1]):
                ms = t[0] if isinstance(t, list) else t
                mark = "  <- chosen" if config == tuner.best_config else ""
                print(f"  BLOCK_N={config.kwargs['BLOCK_N']:>5} SPLIT_COLS={config.kwargs['SPLIT_COLS']:>8} "
                      f"warps={config.num_warps:>2}: {ms:9.4f} ms {_gbps(rows, cols, itemsize, ms):7.0f} GB/s{mark}",
                      file=out)
            before = len(tuner.cache)
            row_sum(random_tensor((max(1, rows - 1), cols), dtype, runtime.DEVICE), tuner=tuner)
            same_bucket = len(tuner.cache) - before
            row_sum(random_tensor((rows, cols + 1), dtype, runtime.DEVICE), tuner=tuner)
            print(f"  then {max(1, rows - 1)} x {cols} (row bucket {rows_bucket(rows)} -> "
                  f"{rows_bucket(max(1, rows - 1))}): {same_bucket} new tuning(s); {rows} x {cols + 1} "
                  f"(new n_cols): {len(tuner.cache) - before - same_bucket}", file=out)
            del x


def disk_cache_demo(out=sys.stdout) -> None:
    """Two fresh processes tune the same kernel with TRITON_CACHE_AUTOTUNING=1 and one cache dir."""
    import tempfile

    if not runtime.on_gpu():
        print("\n(disk cache demo skipped: Triton does not cache autotuning in the interpreter)", file=out)
        return
    print("", file=out)
    code = ("import time; from course import runtime; import torch; from week4_triton_dl import autotuning as at; "
            "x = torch.randn(256, 65536, device='cuda'); t = time.perf_counter(); at.row_sum(x); "
            "torch.cuda.synchronize(); print(f'{time.perf_counter() - t:.2f}')")
    runs = (("cold: nothing cached", "1"), ("kernels and timings cached (TRITON_CACHE_AUTOTUNING=1)", "1"),
            ("kernels cached, timings not (TRITON_CACHE_AUTOTUNING=0)", "0"))
    with tempfile.TemporaryDirectory() as cache_dir:
        for label, flag in runs:
            env = dict(os.environ, TRITON_CACHE_DIR=cache_dir, TRITON_CACHE_AUTOTUNING=flag)
            seconds = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                     check=True).stdout.strip()
            print(f"disk cache, new process, {label}: first call {seconds} s", file=out)


# BEGIN SOLUTION ONLY: the benchmarks, sweep and command line (they measure the solution's kernels)
# ---------------------------------------------------------------------------------- benchmarks
def _inputs(size):
    rows, cols, dtype = size
    return (random_tensor((rows, cols), dtype, runtime.DEVICE),)


BENCHMARKS = [
    Benchmark(
        name="row_sum_autotune_week4",
        title="Row sum: autotuned split vs one fixed config vs torch.sum",
        sizes=[(r, c, torch.float32) for r, c in REPORT_SHAPES[:5]],
        sim_sizes=[(8, 300, torch.float32)],
        size_label=lambda s: f"{s[0]}x{s[1]}",
        make_inputs=_inputs,
        variants={
            "torch": row_sum_torch,
            "triton_autotuned": row_sum,
            "triton_one_program_per_row": lambda x: row_sum(x, config={"BLOCK_N": 4096, "SPLIT_COLS": 1 << 24,
                                                                       "num_warps": 8}),
        },
        headline=("triton_autotuned",),
        sources={"triton_autotuned": [row_sum_kernel, row_sum, prune_row_sum_configs, make_row_sum_tuner]},
        bytes=lambda s: s[0] * s[1] * 4 + s[0] * 4,
        notes="bytes = read x once, write one fp32 per row; the first (untimed) call tunes",
    ),
]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", action="store_true",
                        help="tune row_sum per shape; print every config's timing and the choice")
    parser.add_argument("--no-disk-demo", action="store_true", help="skip the two-process disk cache demo")
    args = parser.parse_args()
    if args.report:
        report()
        if not args.no_disk_demo:
            disk_cache_demo()
    else:
        parser.print_help()
# END SOLUTION ONLY
