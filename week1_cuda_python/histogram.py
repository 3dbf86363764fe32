"""Histogram: global atomics, shared-memory privatization, per-warp and per-lane sub-histograms.

What it teaches: atomics, and where contention comes from. Counting n values into `bins`
counters means many threads adding to the same few addresses at once. An atomic add on one
address is a queue (the hardware does them one after the other), so the kernels differ in
WHERE the queues are and HOW MANY threads stand in each:

  rung                          where the increments go                 who competes for a counter
  histogram_*_global            global memory (atomics in the L2)       every thread of the GPU
  histogram_*_shared            a per-block copy in shared memory       the threads of one block
  histogram_cuda_per_warp       one copy per warp                       the 32 lanes of one warp
  histogram_cuda_per_lane       32 copies, lane l in bank l             nobody inside a warp

Skewed data (every value equal) is the worst case for the first three and no worse than
uniform data for the last. The fast rungs also load 16-byte vectors (16 uint8 values per
load) and keep several loads in flight per thread.

Cost model: n * itemsize bytes read (the input, once), 4 * bins bytes written; no FLOPs (one
increment per element). 2^28 uint8 values are 256 MiB: ~90 us at 3 TB/s, i.e. about 3 * 10^12
increments per second: 10+ per clock on every one of the H100's 132 SMs, which only
conflict-free shared-memory atomics can sustain.

Semantics: x is 1-D uint8 or int32; counts (int32, length bins) where counts[b] = #{i : x[i] == b}.
Values outside [0, bins) are NOT counted (like torch.histc, which ignores values outside
[min, max]; torch.bincount would instead grow the output or refuse negatives): no extra pass
over the data to check them. `python -m week1_cuda_python.histogram --sweep` (GPU) times the
launch shapes of the two fast rungs.
"""
from __future__ import annotations

import functools
import math
import sys
from pathlib import Path
from typing import Callable

import torch

from course import interop, runtime, validate
from course.bench import Benchmark, pow2_label
from course.gpu import cuda, int32

# EXERCISE NOTE: Each launcher's checks (_checked: bins, the shared-memory limit, `out` zeroed, since
#   the kernels add into it) and the early return on empty x are given: you write the kernels, where
#   the counters live, and the launches (grid, dynamic shared memory). Values outside [0, bins) are
#   not counted.

CUDA_SOURCE = Path(__file__).parent / "kernels" / "histogram.cu"
DTYPES = (torch.uint8, torch.int32)
THREADS = 256                # rungs 1 and 2
BLOCKS_PER_SM = 4            # grid-stride rungs: enough blocks to fill every SM, no more
MAX_SHARED_BINS = 12288      # 48 KiB of int32 counters per block (MAX_SHARED_BINS in histogram.cu)
MAX_ELEMENTS = 2**31 - 1     # counts are int32: one bin could hold every element
# Per-warp / per-lane rungs: block shape and vectors per load batch (HISTOGRAM_UNROLL in
# histogram.cu); the --sweep times alternatives.
PRIVATE_THREADS = 512
PRIVATE_BLOCKS_PER_SM = 4
HISTOGRAM_UNROLL = 2
NUMBA_LAUNCHERS = ("histogram_numba_global", "histogram_numba_shared")
CUDA_C_LAUNCHERS = ("histogram_cuda_global", "histogram_cuda_shared", "histogram_cuda_per_warp",
                    "histogram_cuda_per_lane")
# Launchers whose counters live in shared memory, so bins <= MAX_SHARED_BINS.
SHARED_MEMORY_LAUNCHERS = ("histogram_numba_shared", "histogram_cuda_shared", "histogram_cuda_per_warp",
                           "histogram_cuda_per_lane")
_SUFFIX = {torch.uint8: "u8", torch.int32: "i32"}


# --- Numba kernels -------------------------------------------------------------------------------

@cuda.jit
def histogram_global_kernel(x, counts):
    """One thread per element, one atomic add in global memory per element."""
    # BEGIN EXERCISE: one thread per element (guarded): cuda.atomic.add(counts, value, 1) when
    #   0 <= value < counts.size
    # HINT: many threads hit the same bin at once, so the increment must be atomic; values outside [0, bins)
    #   are ignored rather than written out of bounds.
    # HINT: guarded global index, load the value, a second guard on its range, then one atomic add of 1 at
    #   index `value`.
    # HINT: the range guard: `value >= 0 and value < counts.size`.
    i = cuda.grid(1)
    if i < x.size:
        value = x[i]
        if value >= 0 and value < counts.size:  # out-of-range values are not counted
            cuda.atomic.add(counts, value, 1)
    # END EXERCISE


@cuda.jit
def histogram_shared_kernel(x, counts):
    """A per-block histogram in (dynamic) shared memory, merged into `counts` once per block."""
    # BEGIN EXERCISE: block_counts = cuda.shared.array(0, int32) (dynamic: sized by the launch); zero it
    #   (threads striding over the bins), cuda.syncthreads(), grid-stride over x with shared atomics,
    #   cuda.syncthreads(), add each nonzero counter to `counts` with one global atomic
    # HINT: a private histogram per block in shared memory turns most atomics into fast on-SM ones that only
    #   this block competes for; the global histogram then gets one atomic per nonzero bin per block.
    # HINT: dynamic shared int32 array (size 0 in the kernel, set at launch); zero it with a block-stride
    #   loop over bins; barrier; grid-stride loop over x with range-checked shared atomics; barrier;
    #   block-stride loop over bins adding nonzero counts to `counts`.
    # HINT: two barriers: after zeroing (nobody counts into an unzeroed bin) and before merging (every count
    #   is in).
    block_counts = cuda.shared.array(0, int32)  # size set at launch: bins * 4 bytes
    bins = counts.size
    tid = cuda.threadIdx.x
    for b in range(tid, bins, cuda.blockDim.x):
        block_counts[b] = 0
    cuda.syncthreads()
    # Grid-stride: a few blocks per SM walk the whole input, neighbours reading neighbours.
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        value = x[i]
        if value >= 0 and value < bins:
            cuda.atomic.add(block_counts, value, 1)  # in the SM: fast, and only this block competes
    cuda.syncthreads()
    for b in range(tid, bins, cuda.blockDim.x):
        if block_counts[b] != 0:
            cuda.atomic.add(counts, b, block_counts[b])
    # END EXERCISE


# --- launchers ---------------------------------------------------------------------------------

def _checked(x, bins, out, launcher: str) -> torch.Tensor:
    """Validate x, bins and `out`; return `out` (or a new int32 tensor) filled with zeros."""
    validate.tensor(x, "x", dtypes=DTYPES, ndim=1)
    if not isinstance(bins, int) or isinstance(bins, bool):
        raise TypeError(f"bins must be an int, got {type(bins).__name__}")
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    if launcher in SHARED_MEMORY_LAUNCHERS and bins > MAX_SHARED_BINS:
        raise ValueError(f"bins = {bins}: {launcher} keeps the counters in 48 KiB of shared memory, "
                         f"at most {MAX_SHARED_BINS} bins; use histogram_cuda_global for more")
    if x.numel() > MAX_ELEMENTS:
        raise ValueError(f"x has {x.numel()} elements; int32 counts hold at most {MAX_ELEMENTS}")
    if out is None:
        return torch.zeros(bins, dtype=torch.int32, device=x.device)
    validate.tensor(out, "out", dtypes=(torch.int32,), ndim=1)
    if out.numel() != bins:
        raise ValueError(f"out has shape {tuple(out.shape)}; expected ({bins},), one counter per bin")
    return out.zero_()  # the kernels add into it


def _grid(n: int, threads: int, blocks_per_sm: int) -> int:
    return max(1, min(math.ceil(n / threads), blocks_per_sm * runtime.sm_count()))


def histogram_numba_global(x: torch.Tensor, bins: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Counts of x's values in [0, bins) (int32), one global atomic per element (Numba)."""
    out = _checked(x, bins, out, "histogram_numba_global")
    if x.numel():
        # BEGIN EXERCISE: launch histogram_global_kernel, one thread per element in blocks of THREADS
        # HINT: no loop in the global kernel: one thread per element, so the grid is n rounded up to whole
        #   blocks of THREADS.
        # HINT: Numba launch `kernel[blocks, THREADS](...)` with both tensors through interop.to_numba.
        histogram_global_kernel[math.ceil(x.numel() / THREADS), THREADS](interop.to_numba(x), interop.to_numba(out))
        # END EXERCISE
    return out


def histogram_numba_shared(x: torch.Tensor, bins: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Counts of x's values in [0, bins), through a per-block shared-memory histogram (Numba)."""
    out = _checked(x, bins, out, "histogram_numba_shared")
    if x.numel():
        # Launch configuration [blocks, threads, stream, dynamic shared bytes]; stream 0 is the
        # default stream torch queues on.
        # BEGIN EXERCISE: launch histogram_shared_kernel on _grid(n, THREADS, BLOCKS_PER_SM) blocks with
        #   kernel[blocks, THREADS, 0, shared bytes]: the last number sizes the dynamic shared array, in
        #   bytes (one int32 counter per bin)
        # HINT: dynamic shared memory is sized at launch, in bytes: the fourth launch-config item; one int32
        #   per bin is 4 bytes each.
        # HINT: `histogram_shared_kernel[_grid(n, THREADS, BLOCKS_PER_SM), THREADS, 0, 4 * bins](...)`
        histogram_shared_kernel[_grid(x.numel(), THREADS, BLOCKS_PER_SM), THREADS, 0, 4 * bins](
            interop.to_numba(x), interop.to_numba(out))
        # END EXERCISE
    return out


@functools.cache
def _cuda_c_kernel(rung: str, dtype: torch.dtype, defines: tuple[str, ...] = ()):
    """`histogram_<rung>_<dtype>`; `defines` (-DHISTOGRAM_UNROLL=...) for the sweep."""
    signature = "PPqi" if rung in ("global", "shared") else "PPqiii"
    return interop.cuda_kernel(CUDA_SOURCE, f"histogram_{rung}_{_SUFFIX[dtype]}", signature, defines)


def histogram_cuda_global(x: torch.Tensor, bins: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Counts with `histogram_global_*` (CUDA C): one global atomicAdd per element."""
    out = _checked(x, bins, out, "histogram_cuda_global")
    n = x.numel()
    if n:
        # Stream None: the legacy default stream that torch queues on, so ordering holds.
        # BEGIN EXERCISE: launch `histogram_global_*` (_cuda_c_kernel("global", dtype)) with one thread per
        #   element: prepared_async_call(grid, (THREADS, 1, 1), None, x, out pointers, n, bins)
        # HINT: the CUDA C global kernel is the same one-thread-per-element launch, through PyCUDA's prepared
        #   call: a 2-D grid tuple, a 3-D block tuple and stream None.
        # HINT: grid `(math.ceil(n / THREADS), 1)`, then the pointers via data_ptr(), n and bins in the
        #   prepared order.
        _cuda_c_kernel("global", x.dtype).prepared_async_call(
            (math.ceil(n / THREADS), 1), (THREADS, 1, 1), None, x.data_ptr(), out.data_ptr(), n, bins)
        # END EXERCISE
    return out


def histogram_cuda_shared(x: torch.Tensor, bins: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Counts with `histogram_shared_*` (CUDA C): a per-block histogram in shared memory."""
    out = _checked(x, bins, out, "histogram_cuda_shared")
    n = x.numel()
    if n:
        # BEGIN EXERCISE: launch `histogram_shared_*` on the grid-stride grid (_grid) with shared_size = the
        #   dynamic shared memory in bytes (one int per bin)
        # HINT: PyCUDA passes the dynamic shared memory size as a keyword of the call, in bytes; the kernel
        #   grid-strides, so the grid comes from _grid.
        # HINT: prepared_async_call((_grid(...), 1), (THREADS, 1, 1), None, pointers, n, bins,
        #   shared_size=...)
        # HINT: `shared_size=4 * bins`
        _cuda_c_kernel("shared", x.dtype).prepared_async_call(
            (_grid(n, THREADS, BLOCKS_PER_SM), 1), (THREADS, 1, 1), None, x.data_ptr(), out.data_ptr(), n, bins,
            shared_size=4 * bins)
        # END EXERCISE
    return out


def copies_for(rung: str, bins: int, threads: int = PRIVATE_THREADS) -> int:
    """How many sub-histograms fit: one per warp (per_warp) or per lane (per_lane, at most 32)."""
    wanted = threads // 32 if rung == "per_warp" else 32
    return max(1, min(wanted, MAX_SHARED_BINS // bins))


def _private(rung: str, x, out, bins: int, threads: int = PRIVATE_THREADS,
             blocks_per_sm: int = PRIVATE_BLOCKS_PER_SM, defines: tuple[str, ...] = ()) -> torch.Tensor:
    n = x.numel()
    if n == 0:
        return out
    # BEGIN EXERCISE: the launch shape: copies = copies_for(rung, bins, threads) sub-histograms; 16-byte
    #   vector loads only when x is 16-byte aligned (vectorize 0 or 1); a vector holds 16 // itemsize
    #   elements, and the grid (_grid) counts threads for vectors, not elements
    # HINT: several sub-histogram copies spread contention for hot bins; 16-byte loads need an aligned base;
    #   and since each thread reads one 16-byte vector per step, the grid is sized in vectors, not
    #   elements.
    # HINT: four names: copies from copies_for, vectorize as int of the alignment test, elements per vector
    #   from the item size, grid from _grid on the vector count.
    # HINT: `per_thread = 16 // x.element_size()` and `_grid(math.ceil(n / per_thread), threads,
    #   blocks_per_sm)`.
    copies = copies_for(rung, bins, threads)
    vectorize = int(x.data_ptr() % 16 == 0)  # 16-byte loads need 16-byte aligned addresses
    per_thread = 16 // x.element_size()
    grid = _grid(math.ceil(n / per_thread), threads, blocks_per_sm)
    # END EXERCISE
    _cuda_c_kernel(rung, x.dtype, defines).prepared_async_call(
        (grid, 1), (threads, 1, 1), None, x.data_ptr(), out.data_ptr(), n, bins, copies, vectorize,
        shared_size=4 * copies * bins)
    return out


def histogram_cuda_per_warp(x: torch.Tensor, bins: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Counts with `histogram_per_warp_*` (CUDA C): a sub-histogram per warp, 16-byte loads."""
    out = _checked(x, bins, out, "histogram_cuda_per_warp")
    return _private("per_warp", x, out, bins)


def histogram_cuda_per_lane(x: torch.Tensor, bins: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Counts with `histogram_per_lane_*` (CUDA C): 32 bank-interleaved copies, 16-byte loads."""
    out = _checked(x, bins, out, "histogram_cuda_per_lane")
    return _private("per_lane", x, out, bins)


def torch_histogram(x: torch.Tensor, bins: int) -> torch.Tensor:
    """The reference: torch.bincount of the values in [0, bins), as int32."""
    wide = x.long()  # compares with any bins, whatever x's dtype
    return torch.bincount(wide[(wide >= 0) & (wide < bins)], minlength=bins).to(torch.int32)


# --- compute-sanitizer cases ----------------------------------------------------------------------

def _sanitizer_case(launcher: str, dtype: torch.dtype, offset: int = 0) -> None:
    # 10007 elements (prime: a partial vector, a partial block), 100 bins, and values outside
    # [0, 100) on both sides for int32: the range checks and every tail run.
    n = 10007 + offset
    low = 0 if dtype == torch.uint8 else -50
    x = torch.randint(low, 256, (n,), device=runtime.DEVICE).to(dtype)[offset:]
    globals()[launcher](x, 100)
    torch.cuda.synchronize()


def _sanitizer_cases() -> dict[str, Callable[[], None]]:
    cases = {}
    case = functools.partial
    for dtype, suffix in _SUFFIX.items():
        cases[f"histogram_global_kernel[{suffix}]"] = case(_sanitizer_case, "histogram_numba_global", dtype)
        cases[f"histogram_shared_kernel[{suffix}]"] = case(_sanitizer_case, "histogram_numba_shared", dtype)
        for rung in ("global", "shared", "per_warp", "per_lane"):
            cases[f"histogram_{rung}_{suffix}"] = functools.partial(_sanitizer_case, f"histogram_cuda_{rung}", dtype)
        for rung in ("per_warp", "per_lane"):  # unaligned: the element-by-element path
            cases[f"histogram_{rung}_{suffix}[unaligned]"] = functools.partial(
                _sanitizer_case, f"histogram_cuda_{rung}", dtype, 1)
    return cases


# One small synchronized launch per kernel (and per dtype), for compute-sanitizer.
SANITIZER_CASES: dict[str, Callable[[], None]] = _sanitizer_cases()


# --- benchmarks ---------------------------------------------------------------------------------------

# BEGIN SOLUTION ONLY: the benchmarks, sweep and command line (they measure the solution's kernels)
BENCH_BINS = 256


def _uniform(dtype):
    def make(n: int):
        x = torch.randint(0, BENCH_BINS, (n,), device=runtime.DEVICE).to(dtype)
        return x, BENCH_BINS, torch.empty(BENCH_BINS, dtype=torch.int32, device=runtime.DEVICE)
    return make


def _all_equal(n: int):
    x = torch.full((n,), 7, dtype=torch.uint8, device=runtime.DEVICE)
    return x, BENCH_BINS, torch.empty(BENCH_BINS, dtype=torch.int32, device=runtime.DEVICE)


_VARIANTS = {
    "torch": lambda x, bins, out: torch.bincount(x, minlength=bins),
    "numba_global": histogram_numba_global,
    "numba_shared": histogram_numba_shared,
    "cuda_global": histogram_cuda_global,
    "cuda_shared": histogram_cuda_shared,
    "cuda_per_warp": histogram_cuda_per_warp,
    "cuda_per_lane": histogram_cuda_per_lane,
}
_GPU_ONLY = ("cuda_global", "cuda_shared", "cuda_per_warp", "cuda_per_lane")
_HEADLINE = ("numba_shared", "cuda_shared", "cuda_per_warp", "cuda_per_lane")
_NOTES = ("bins = 256; bytes = n * itemsize (x read once) + 4 * 256 (counts written once); "
          "torch = torch.bincount(x, minlength=256) (int64 counts; torch.histc takes floats only)")

BENCHMARKS = [
    Benchmark(
        name="histogram_u8_week1", title="Histogram of uniform uint8 values, 256 bins",
        sizes=[1 << 24, 1 << 26, 1 << 28], sim_sizes=[1000], size_label=pow2_label,
        make_inputs=_uniform(torch.uint8), variants=_VARIANTS, gpu_only=_GPU_ONLY, headline=_HEADLINE,
        bytes=lambda n: n + 4 * BENCH_BINS, notes=_NOTES,
    ),
    Benchmark(
        name="histogram_i32_week1", title="Histogram of uniform int32 values in [0, 256), 256 bins",
        sizes=[1 << 24, 1 << 26], sim_sizes=[1000], size_label=pow2_label,
        make_inputs=_uniform(torch.int32), variants=_VARIANTS, gpu_only=_GPU_ONLY, headline=_HEADLINE,
        bytes=lambda n: 4 * n + 4 * BENCH_BINS, notes=_NOTES,
    ),
    Benchmark(
        name="histogram_skewed_week1", title="Histogram of uint8 values all equal (worst case for atomics), 256 bins",
        sizes=[1 << 26], sim_sizes=[1000], size_label=pow2_label,
        make_inputs=_all_equal, variants=_VARIANTS, gpu_only=_GPU_ONLY, headline=_HEADLINE,
        bytes=lambda n: n + 4 * BENCH_BINS, notes=_NOTES + "; every value is 7",
    ),
]


# --- command line: --sweep (GPU) -----------------------------------------------------------------------

def sweep(unrolls=(1, 2, 4), threads_options=(256, 512, 1024), blocks_options=(2, 4, 8)) -> list[dict]:
    """Time the per-warp and per-lane rungs over launch shapes (uint8 2^28, int32 2^26, 256 bins)."""
    from course import bench

    copy_gbps = bench.copy_bandwidth_gbps()
    print(f"copy ceiling {copy_gbps:.0f} GB/s; bytes = n * itemsize + 1 KiB; 'ok' = matches torch.bincount")
    print(f"{'input':<10} {'rung':<9} {'unroll':>6} {'threads':>7} {'blk/SM':>6} {'ms':>8} {'GB/s':>6} {'% copy':>7} ok")
    rows = []
    for dtype, n in ((torch.uint8, 1 << 28), (torch.int32, 1 << 26)):
        x, bins, out = _uniform(dtype)(n)
        expected = torch_histogram(x, bins)
        nbytes = n * x.element_size() + 4 * bins
        label = f"{pow2_label(n)} {_SUFFIX[dtype]}"
        torch_row = bench.timing_fields(bench.time_gpu(lambda: torch.bincount(x, minlength=bins), [()]))
        gbps = nbytes / (torch_row["ms"] * 1e-3) / 1e9
        print(f"{label:<10} {'torch.bincount':<33} {bench.ms_cell(torch_row, '8.3f')} {gbps:6.0f} "
              f"{100 * gbps / copy_gbps:6.1f}%")
        for rung in ("per_warp", "per_lane"):
            for unroll in unrolls:
                defines = (f"-DHISTOGRAM_UNROLL={unroll}",)
                for threads in threads_options:
                    for blocks_per_sm in blocks_options:
                        def call():
                            out.zero_()
                            return _private(rung, x, out, bins, threads, blocks_per_sm, defines)
                        try:
                            ok = torch.equal(call(), expected)
                            timing = bench.time_gpu(call, [()])
                        except Exception as error:  # a shape that fails to launch: report, go on
                            print(f"{label:<10} {rung:<9} {unroll:>6} {threads:>7} {blocks_per_sm:>6} failed: "
                                  f"{str(error).splitlines()[0][:60]}")
                            continue
                        gbps = nbytes / (timing.median_ms * 1e-3) / 1e9
                        rows.append({"input": label, "rung": rung, "unroll": unroll, "threads": threads,
                                     "blocks_per_sm": blocks_per_sm, **bench.timing_fields(timing), "gbps": gbps})
                        print(f"{label:<10} {rung:<9} {unroll:>6} {threads:>7} {blocks_per_sm:>6} "
                              f"{bench.ms_cell(rows[-1], '8.3f')} {gbps:6.0f} {100 * gbps / copy_gbps:6.1f}% {ok}")
        del x, out, expected
    print(bench.footnote(rows), end="")
    return rows


def main(argv=None) -> int:
    from course.sweep import sweep_main

    return sweep_main(sweep, argv, doc=__doc__, help="time the fast rungs' launch shapes", gpu_only=True)


if __name__ == "__main__":
    sys.exit(main())
# END SOLUTION ONLY
