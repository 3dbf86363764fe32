"""Hello, GPU: every thread writes down who it is, and what the GPU it runs on has.

What it teaches: the thread hierarchy made visible. A launch `kernel[blocks, threads]` starts
a grid of blocks of threads; each thread reads its coordinates (`cuda.blockIdx`,
`cuda.threadIdx`, `cuda.blockDim`) and from them computes everything else: its global index
(`cuda.grid`), its warp (threads are grouped into warps of 32 consecutive *linear* thread
ids, x varying fastest) and its lane inside the warp (`cuda.laneid`). The kernels below
store those numbers in an output tensor, one row per element, so a test can check every one
of them, including the threads of the last block that must do nothing (`if i < n`).
`device_facts()` lists what the GPU has (SMs, memory, caches, registers, limits), from
torch's and Numba's device queries, beside one measured figure: copy bandwidth.

Cost model: none worth the name. Each thread writes 5 (1-D) or 8 (2-D) int32 values:
20n or 32n bytes, no FLOPs. The point is the indices, not the speed.
"""
from __future__ import annotations

import argparse
import math

import torch

from course import interop, runtime
from course.bench import copy_bandwidth_gbps
from course.gpu import cuda

# EXERCISE NOTE: Each kernel writes, for the element its thread owns, the thread's own coordinates;
#   the tests know exactly which thread must own which element, so every index has to be right.
#   The launchers' argument checks (_count, _output) and the early return when there is nothing to
#   launch are given: you write the kernels and the grids.

THREADS_PER_BLOCK = 256  # 8 warps; any multiple of 32 up to 1024 works
BLOCK_2D = (16, 16)
MAX_THREADS_PER_BLOCK = 1024  # every GPU since Fermi (compute capability 2.0)
MAX_GRID_Y = 65535
# Column meanings of the outputs: out[..., WHO_1D.index("lane")] is a thread's lane id.
WHO_1D = ("block", "thread", "global", "warp", "lane")
WHO_2D = ("block_x", "block_y", "thread_x", "thread_y", "col", "row", "warp", "lane")
WHO_GRID_STRIDE = ("thread", "step")  # which global thread handled element i, on which trip


# --- kernels ---------------------------------------------------------------------------------

@cuda.jit
def hello_1d_kernel(out):
    """Thread i of the grid writes row i: its block, thread, global index, warp and lane."""
    # BEGIN EXERCISE: i = cuda.grid(1); guard i < out.shape[0]; row i = (blockIdx.x, threadIdx.x, i,
    #   warp = threadIdx.x // cuda.warpsize, lane = cuda.laneid)
    # HINT: one row per global thread: the row records where the thread sits in the hierarchy, and the
    #   threads of the last, partial block must write nothing.
    # HINT: compute the global index, guard it against the table's row count, then five stores; the warp is
    #   the thread's position in its block divided by the warp size.
    # HINT: the lane comes from the hardware (`cuda.laneid`), and should equal threadIdx.x % 32.
    i = cuda.grid(1)  # blockIdx.x * blockDim.x + threadIdx.x
    # The grid is rounded up to whole blocks, so the last block has threads past the end:
    # without this guard they would write into memory that is not ours.
    if i < out.shape[0]:
        t = cuda.threadIdx.x
        out[i, 0] = cuda.blockIdx.x
        out[i, 1] = t
        out[i, 2] = i
        out[i, 3] = t // cuda.warpsize  # warps are consecutive runs of 32 threads of a block
        out[i, 4] = cuda.laneid  # read from the hardware: equals t % 32
    # END EXERCISE


@cuda.jit
def hello_2d_kernel(out):
    """A 2-D grid over a (rows, cols) table: x is the column, y the row."""
    # BEGIN EXERCISE: col, row = cuda.grid(2) (x first); guard both; out[row, col] = (block x, block y,
    #   thread x, thread y, col, row, warp, lane): warps are cut from the linear id ty * blockDim.x + tx
    # HINT: a 2-D grid is two independent 1-D indexings; Numba returns x first, and x is the column so that a
    #   warp walks a row.
    # HINT: unpack the 2-D grid index, guard both bounds together, then eight stores; warps are cut from the
    #   linear id in the block with x fastest.
    # HINT: `linear = ty * cuda.blockDim.x + tx`, and the warp is `linear // cuda.warpsize`.
    col, row = cuda.grid(2)  # x first: (blockIdx.x * blockDim.x + threadIdx.x, ... y ...)
    if row < out.shape[0] and col < out.shape[1]:
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        # Warps are cut from the *linear* thread id, x fastest: with a 16 x 16 block, warp 0
        # is rows 0 and 1 of the block. That is why x should walk contiguous memory.
        linear = ty * cuda.blockDim.x + tx
        out[row, col, 0] = cuda.blockIdx.x
        out[row, col, 1] = cuda.blockIdx.y
        out[row, col, 2] = tx
        out[row, col, 3] = ty
        out[row, col, 4] = col
        out[row, col, 5] = row
        out[row, col, 6] = linear // cuda.warpsize
        out[row, col, 7] = cuda.laneid
    # END EXERCISE


@cuda.jit
def hello_grid_stride_kernel(out):
    """A fixed grid walks any n: element i is handled by thread i % gridsize, on trip i // gridsize."""
    # BEGIN EXERCISE: loop i over range(cuda.grid(1), out.shape[0], cuda.gridsize(1)), counting trips:
    #   out[i] = (this thread's global id, trip number)
    # HINT: thread t handles elements t, t + gridsize, t + 2*gridsize...: the trip counter is how many times
    #   round the loop it has gone.
    # HINT: start and stride from cuda.grid/cuda.gridsize, a counter set to 0 before the `for`, two stores
    #   and an increment inside.
    # HINT: store `start` (not i) as the thread id: that is who handled element i.
    start = cuda.grid(1)
    stride = cuda.gridsize(1)  # blocks * threads per block
    step = 0
    for i in range(start, out.shape[0], stride):
        out[i, 0] = start
        out[i, 1] = step
        step += 1
    # END EXERCISE


@cuda.jit
def hello_print_kernel():
    """printf from the GPU: lines arrive in whatever order the warps ran (and only at a sync)."""
    # BEGIN EXERCISE: each thread prints its block and thread index (print() works in Numba kernels)
    # HINT: Numba kernels may call print() with constants and scalars; each thread prints its own line.
    # HINT: one print call with the block index and the thread index along x.
    print("hello from block", cuda.blockIdx.x, "thread", cuda.threadIdx.x)
    # END EXERCISE


# --- launchers ---------------------------------------------------------------------------------

def _count(value, name: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a Python int, got {type(value).__name__}")
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and at most {maximum}" if maximum is not None else ""
        raise ValueError(f"{name} must be at least {minimum}{upper}, got {value}")
    return value


def _output(out, shape: tuple) -> torch.Tensor:
    if out is None:
        return torch.empty(shape, dtype=torch.int32, device=runtime.DEVICE)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out.dtype != torch.int32:
        raise TypeError(f"out has dtype {str(out.dtype).replace('torch.', '')}; expected int32")
    if out.device.type != runtime.DEVICE.type:
        raise ValueError(f"out is on {out.device}, but kernels run on {runtime.DEVICE}")
    if tuple(out.shape) != shape:
        raise ValueError(f"out has shape {tuple(out.shape)}; expected {shape}")
    if not out.is_contiguous():
        raise ValueError("out is not contiguous: pass a freshly allocated tensor")
    return out


def who_am_i_1d(n: int, threads_per_block: int = THREADS_PER_BLOCK,
                out: torch.Tensor | None = None) -> torch.Tensor:
    """An (n, 5) int32 table: row i says which block, thread, global id, warp and lane wrote it."""
    n = _count(n, "n")
    threads_per_block = _count(threads_per_block, "threads_per_block", minimum=1,
                               maximum=MAX_THREADS_PER_BLOCK)
    out = _output(out, (n, len(WHO_1D)))
    if n:  # a grid of zero blocks is an invalid launch
        # BEGIN EXERCISE: the grid: enough blocks of threads_per_block threads to cover n rows
        # HINT: n rows at threads_per_block per block need a ceiling division: a partial last block still
        #   counts.
        # HINT: `math.ceil(n / threads_per_block)` (or the integer form (n + t - 1) // t).
        blocks = math.ceil(n / threads_per_block)
        # END EXERCISE
        hello_1d_kernel[blocks, threads_per_block](interop.to_numba(out))
    return out


def who_am_i_2d(rows: int, cols: int, block: tuple = BLOCK_2D,
                out: torch.Tensor | None = None) -> torch.Tensor:
    """A (rows, cols, 8) int32 table: entry (r, c) says which 2-D block and thread wrote it."""
    rows, cols = _count(rows, "rows"), _count(cols, "cols")
    if not (isinstance(block, tuple) and len(block) == 2):
        raise TypeError(f"block must be a tuple (threads in x, threads in y), got {block!r}")
    bx = _count(block[0], "block[0]", minimum=1, maximum=MAX_THREADS_PER_BLOCK)
    by = _count(block[1], "block[1]", minimum=1, maximum=MAX_THREADS_PER_BLOCK)
    if bx * by > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"block {block} has {bx * by} threads; at most {MAX_THREADS_PER_BLOCK} per block")
    # BEGIN EXERCISE: the 2-D grid (blocks along x, blocks along y): x covers the columns with bx
    #   threads per block, y the rows with by
    # HINT: each grid dimension is covered independently: x blocks over the columns, y blocks over the rows,
    #   each a ceiling division.
    # HINT: a tuple (blocks along x, blocks along y): `math.ceil(cols / bx)` first, because x is the column.
    grid = (math.ceil(cols / bx), math.ceil(rows / by))
    # END EXERCISE
    if grid[1] > MAX_GRID_Y:
        raise ValueError(f"{rows} rows need {grid[1]} blocks in y; at most {MAX_GRID_Y}")
    out = _output(out, (rows, cols, len(WHO_2D)))
    if rows and cols:
        hello_2d_kernel[grid, (bx, by)](interop.to_numba(out))
    return out


def who_am_i_grid_stride(n: int, blocks: int, threads_per_block: int = THREADS_PER_BLOCK,
                         out: torch.Tensor | None = None) -> torch.Tensor:
    """An (n, 2) int32 table: (global thread that handled element i, loop trip it was on)."""
    n = _count(n, "n")
    blocks = _count(blocks, "blocks", minimum=1, maximum=2**31 - 1)
    threads_per_block = _count(threads_per_block, "threads_per_block", minimum=1,
                               maximum=MAX_THREADS_PER_BLOCK)
    out = _output(out, (n, len(WHO_GRID_STRIDE)))
    if n:
        # BEGIN EXERCISE: launch hello_grid_stride_kernel on exactly `blocks` blocks of threads_per_block
        #   threads, whatever n: the loop inside covers the rest
        # HINT: Numba's launch syntax is kernel[grid, block](args); the grid is fixed by the caller, and the
        #   stride loop makes it correct for any n.
        # HINT: pass the torch tensor through interop.to_numba so Numba sees the same device memory.
        # HINT: `hello_grid_stride_kernel[blocks, threads_per_block](...)`
        hello_grid_stride_kernel[blocks, threads_per_block](interop.to_numba(out))
        # END EXERCISE
    return out


def hello_print(blocks: int = 2, threads_per_block: int = 4) -> None:
    """Every thread prints a line (device printf). Keep it small: it is one line per thread."""
    blocks = _count(blocks, "blocks", minimum=1, maximum=64)
    threads_per_block = _count(threads_per_block, "threads_per_block", minimum=1, maximum=64)
    # BEGIN EXERCISE: launch hello_print_kernel on blocks x threads_per_block threads, then
    #   synchronise (device printf is flushed to stdout at a sync)
    # HINT: a launch is asynchronous and device printf output sits in a buffer until the host synchronises.
    # HINT: two lines: the launch with [blocks, threads] and no arguments, then cuda.synchronize().
    hello_print_kernel[blocks, threads_per_block]()
    cuda.synchronize()  # device printf is flushed to stdout at synchronisation points
    # END EXERCISE


# --- what the GPU has ------------------------------------------------------------------------

# (key, Numba/driver attribute name): the driver's own answers, where torch's properties have none.
_DRIVER_ATTRIBUTES = (
    ("max_threads_per_block", "MAX_THREADS_PER_BLOCK"),
    ("max_threads_per_sm", "MAX_THREADS_PER_MULTIPROCESSOR"),
    ("max_blocks_per_sm", "MAX_BLOCKS_PER_MULTIPROCESSOR"),
    ("registers_per_block", "MAX_REGISTERS_PER_BLOCK"),
    ("registers_per_sm", "MAX_REGISTERS_PER_MULTIPROCESSOR"),
    ("shared_memory_per_block_bytes", "MAX_SHARED_MEMORY_PER_BLOCK"),
    ("shared_memory_per_block_optin_bytes", "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
    ("shared_memory_per_sm_bytes", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
    ("constant_memory_bytes", "TOTAL_CONSTANT_MEMORY"),
    ("l2_cache_bytes", "L2_CACHE_SIZE"),
    ("warp_size", "WARP_SIZE"),
    ("sm_clock_khz", "CLOCK_RATE"),
    ("memory_clock_khz", "MEMORY_CLOCK_RATE"),
    ("memory_bus_width_bits", "GLOBAL_MEMORY_BUS_WIDTH"),
    ("async_copy_engines", "ASYNC_ENGINE_COUNT"),
    ("max_grid_x", "MAX_GRID_DIM_X"),
    ("max_grid_y", "MAX_GRID_DIM_Y"),
)


def _driver_attribute(device, name: str):
    try:
        return int(getattr(device, name))
    except Exception:  # an attribute this driver no longer reports (CUDA 13 dropped some clocks)
        return None


def _simulator_facts() -> dict:
    return {
        "simulated": True,
        "name": "Numba CUDA simulator (no GPU: every figure here is the simulator's, not hardware's)",
        "compute_capability": "{}.{}".format(*cuda.get_current_device().compute_capability),
        "sm_count": runtime.sm_count(),  # a stand-in the course uses to size grids
        "warp_size": 32,  # the simulator's cuda.laneid is the linear thread id % 32, as on hardware
        "max_threads_per_block": MAX_THREADS_PER_BLOCK,
        "global_memory_bytes": None,
        "copy_bandwidth_gbps": None,
    }


def device_facts(measure: bool = True) -> dict:
    """What this GPU has, from torch and the driver; with `measure`, also its copy bandwidth.

    In simulation, the simulator's few facts, with "simulated": True.
    """
    if not runtime.on_gpu():
        return _simulator_facts()
    # BEGIN EXERCISE: the GPU's facts: torch.cuda.get_device_properties (name, compute capability,
    #   SMs, memory), the driver's attributes of numba.cuda.get_current_device() (_DRIVER_ATTRIBUTES),
    #   warps per SM and the peak bandwidth (2 x memory clock x bus width / 8), the copy bandwidth
    #   measured (course.bench.copy_bandwidth_gbps) when `measure`
    # HINT: most facts are one attribute away: torch's device properties for name/capability/SMs/memory, the
    #   driver for the rest; a couple are derived (warps per SM, DDR peak bandwidth).
    # HINT: build a dict from props, loop over _DRIVER_ATTRIBUTES calling _driver_attribute, then derive: max
    #   threads // warp size, and 2 * clock(Hz) * bus width(bytes); guard the derivations on attributes
    #   that may be None.
    # HINT: the peak: `2 * clock_khz * 1e3 * bus_width_bits / 8 / 1e9` GB/s (double data rate: two transfers
    #   per clock).
    props = torch.cuda.get_device_properties(runtime.DEVICE)
    facts = {
        "simulated": False,
        "name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "global_memory_bytes": props.total_memory,
    }
    device = cuda.get_current_device()
    for key, attribute in _DRIVER_ATTRIBUTES:
        facts[key] = _driver_attribute(device, attribute)
    if facts["l2_cache_bytes"] is None:
        facts["l2_cache_bytes"] = getattr(props, "L2_cache_size", None)
    if facts["max_threads_per_sm"] and facts["warp_size"]:
        facts["max_warps_per_sm"] = facts["max_threads_per_sm"] // facts["warp_size"]
    if facts["memory_clock_khz"] and facts["memory_bus_width_bits"]:
        # Double data rate: two transfers per clock, bus_width / 8 bytes each. The datasheet's
        # figure; a real copy reaches 85-95% of it.
        facts["peak_memory_bandwidth_gbps"] = (
            2 * facts["memory_clock_khz"] * 1e3 * facts["memory_bus_width_bits"] / 8 / 1e9)
    facts["copy_bandwidth_gbps"] = copy_bandwidth_gbps() if measure else None
    # END EXERCISE
    return facts


def _human(key: str, value) -> str:
    if value is None:
        return "n/a"
    if key.endswith("_bytes"):
        for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if value >= size:
                return f"{value / size:.4g} {unit}"
        return f"{value} B"
    if key.endswith("_khz"):
        return f"{value / 1e3:.0f} MHz"
    if key.endswith("_gbps"):
        return f"{value:.0f} GB/s"
    return str(value)


def facts_table(facts: dict) -> str:
    """`device_facts()` as a markdown table, sizes in KiB/MiB/GiB, clocks in MHz."""
    banner = ("SIMULATION: the Numba CUDA simulator, no GPU; these are not hardware figures"
              if facts.get("simulated") else f"{facts['name']}")
    lines = [f"**Device facts**: {banner}.", "", "| fact | value |", "|---|---|"]
    for key, value in facts.items():
        if key in ("simulated", "name"):
            continue
        label = key.replace("_bytes", "").replace("_khz", "").replace("_gbps", "").replace("_", " ")
        if key == "copy_bandwidth_gbps":
            label += " (measured: device-to-device copy, read + write)"
        elif key == "peak_memory_bandwidth_gbps":
            label += " (from memory clock x bus width)"
        lines.append(f"| {label} | {_human(key, value)} |")
    return "\n".join(lines) + "\n"


def _sync() -> None:
    cuda.synchronize()


# One small launch of every kernel, sizes that leave partial blocks (for compute-sanitizer).
SANITIZER_CASES = {
    "hello_1d_kernel": lambda: (who_am_i_1d(1000, 256), _sync()),
    "hello_2d_kernel": lambda: (who_am_i_2d(37, 45, (16, 8)), _sync()),
    "hello_grid_stride_kernel": lambda: (who_am_i_grid_stride(5000, 3, 128), _sync()),
    "hello_print_kernel": lambda: hello_print(1, 2),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="print what this GPU has (python -m week1_cuda_python.hello_gpu)")
    parser.add_argument("--no-measure", action="store_true", help="skip the copy-bandwidth measurement")
    args = parser.parse_args(argv)
    print(facts_table(device_facts(measure=not args.no_measure)))
    print("who_am_i_1d(40, threads_per_block=16), columns", WHO_1D)
    print(who_am_i_1d(40, 16).cpu())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
