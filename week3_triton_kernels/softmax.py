"""Softmax in Triton: one fused pass per row, a persistent version, and an online version.

softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), with m = max_j x_j. Subtracting the row
maximum changes nothing mathematically (it cancels) but keeps exp() from overflowing: without
it a row holding 100.0 in fp32 gives inf / inf = NaN.

What it teaches, kernel by kernel (diff them in this order):
* `softmax_row_kernel`: one program per row, the whole row in one block of registers. The
  row is read from HBM once and written once; max, exp, sum and divide all happen on-chip.
  PyTorch's eager `x - x.max(); e = x.exp(); e / e.sum()` would move the row ~8 times.
* `softmax_rows_kernel`: the same, with several short rows per program (a 2-D block), for
  rows too short to give one program enough bytes to move.
* `softmax_persistent_kernel`: a fixed grid of (programs resident per SM) x (SMs) programs,
  each looping over blocks of rows. Launch and tail costs are paid once per program instead
  of once per row, and `tl.range(..., num_stages=2)` lets the compiler issue the loads of the
  next block while the current one is reduced: more bytes in flight per SM.
* `softmax_online_kernel`: for rows wider than one block. The running maximum `m` and the
  running sum `d` are updated chunk by chunk (d <- d * exp(m_old - m_new) + sum exp(x - m_new),
  Milakov & Gimelshein 2018), so the statistics need ONE read of the row instead of two (max,
  then sum); a second read produces the output. This is the recurrence FlashAttention uses.

Cost model (rows x cols, itemsize s): the fused kernels move 2 * rows * cols * s bytes (read x,
write y); the online kernel reads x twice, 3 * rows * cols * s, though the second read often
hits L2. About 5 FLOPs per element (sub, exp, add, mul, max): ~1 FLOP/byte in fp32, so every
version is memory-bound and "% of copy bandwidth" is the yardstick.

Keeping HBM busy (Little's law): bytes in flight = bandwidth x latency ~ 3 TB/s x ~1 us = ~3 MB,
~25 KB per SM. A program holds its row in registers from load to store, so the bytes it has in
flight are its block's bytes only while it loads; the rest of the time it reduces. bf16 rows are
half the bytes of fp32 rows for the same reductions and the same registers (arithmetic is fp32),
so each bf16 program brings half as many bytes per unit of work: it needs more rows per program,
or overlap between blocks (the persistent kernel), to keep as many bytes in flight.

`softmax` picks the kernel and its launch settings per (dtype size, padded row width) from
results/tuned_softmax.json (written by `python -m week3_triton_kernels.softmax_bench --sweep`, used
on the GPU it was measured on) and falls back to `heuristic_config` elsewhere. bf16 inputs are loaded as bf16, converted to fp32 in
registers, and rounded back to bf16 only on the store: fp32 arithmetic, bf16 traffic.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from course import runtime, tuning, validate
from course.gpu import triton, tl

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Widest row that the one-block kernels accept: 32k fp32 values is 128 KB of registers per
# program, already one program per SM at 16 warps. Wider rows must stream (online softmax).
MAX_ONE_BLOCK = 32768
# Where `softmax` switches from the one-block kernels to the online kernel.
AUTO_ONE_BLOCK = 32768
ONLINE_BLOCK = 4096  # chunk the online kernel streams through per step
# Rows per program when `softmax_one_block` is not told: one. Packing 1k-2k fp32 rows 4 or 2 to a
# program gained nothing on the H100 (within 0.3%), one row already reached ~96% of copy.
DEFAULT_ROWS_PER_PROGRAM = 1


@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride,
                       BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: one program per row, the whole row in one block: row = tl.program_id(0) as int64 (row
    #   * stride passes 2^31 on big inputs); load the row with other=-inf past n_cols, in fp32; subtract
    #   tl.max (exp of large numbers overflows), tl.exp, divide by tl.sum; store in out's dtype, masked
    # HINT: The whole row fits in one block, so one program can do max, exp and sum in registers.
    #   Subtracting the row max first keeps exp from overflowing without changing the result.
    # HINT: cols = tl.arange(0, BLOCK_SIZE) with mask cols < n_cols; row start = row * stride; load with
    #   other=-inf so padding never wins the max and exp(-inf) = 0 adds nothing to the sum.
    # HINT: `z = x - tl.max(x, axis=0)`, then `num = tl.exp(z)` and divide by `tl.sum(num, axis=0)`.
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride passes 2^31 on big inputs
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # -inf in the padding lanes: they never win the max and exp(-inf) = 0 adds nothing.
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    den = tl.sum(num, axis=0)
    y = num * (1.0 / den)  # one division per row, then multiplies
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


@triton.jit
def softmax_rows_kernel(x_ptr, out_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                        BLOCK_ROWS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: BLOCK_ROWS rows per program in a 2-D block [BLOCK_ROWS, BLOCK_SIZE]:
    #   softmax_row_kernel's body, reducing along axis=1, masked on rows and columns
    # HINT: Same math as softmax_row_kernel, but each program handles a [BLOCK_ROWS, BLOCK_SIZE] tile: more
    #   bytes in flight per program for narrow rows.
    # HINT: rows is a vector (program id * BLOCK_ROWS + arange), broadcast rows[:, None] against cols[None,
    #   :] for pointers and for a 2-D mask on both rows and columns; reductions use axis=1.
    # HINT: Reductions come back 1-D: broadcast them back with `[:, None]`, e.g. `x - tl.max(x, axis=1)[:,
    #   None]`.
    # BLOCK_ROWS rows per program: a 1k-wide bf16 row is only 2 KB per program; packing rows
    # gives each program more bytes to load at once.
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask,
                other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=1)[:, None]
    num = tl.exp(z)
    den = tl.sum(num, axis=1)
    y = num * (1.0 / den)[:, None]
    tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :],
             y.to(out_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


@triton.jit
def softmax_persistent_kernel(x_ptr, out_ptr, n_rows, n_cols, x_row_stride, out_row_stride,
                              BLOCK_ROWS: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                              NUM_STAGES: tl.constexpr):
    # BEGIN EXERCISE: a fixed grid of programs, each looping over blocks of BLOCK_ROWS rows: for block in
    #   tl.range(tl.program_id(0), tl.cdiv(n_rows, BLOCK_ROWS), tl.num_programs(0), num_stages=NUM_STAGES),
    #   the body of softmax_rows_kernel for rows block * BLOCK_ROWS + arange (int64 before multiplying by
    #   the stride)
    # HINT: Launch only as many programs as the GPU holds at once and let each loop over row blocks with a
    #   stride of the program count: no tail wave of half-empty SMs.
    # HINT: A `for block in tl.range(start, n_blocks, step, num_stages=...)` loop whose body is
    #   softmax_rows_kernel's; the column offsets and column mask can be computed once, outside the loop.
    # HINT: `rows = (block * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)).to(tl.int64)` inside the loop, then the
    #   same 2-D mask and axis=1 reductions.
    # The grid is sized to what the GPU holds at once (see `_resident_programs_per_sm`); each
    # program strides through the row blocks: program p takes blocks p, p + P, p + 2P, ...
    n_blocks = tl.cdiv(n_rows, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_SIZE)
    col_mask = cols < n_cols
    # num_stages on tl.range pipelines the loop's loads (cp.async into shared memory): block
    # i + 1 is being fetched while block i is reduced, so the SM never waits with nothing in flight.
    for block in tl.range(tl.program_id(0), n_blocks, tl.num_programs(0), num_stages=NUM_STAGES):
        # Row numbers fit int32 (they are < n_rows); row * stride may not: int64 before multiplying.
        rows = (block * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)).to(tl.int64)
        mask = (rows[:, None] < n_rows) & col_mask[None, :]
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask,
                    other=-float("inf")).to(tl.float32)
        z = x - tl.max(x, axis=1)[:, None]
        num = tl.exp(z)
        den = tl.sum(num, axis=1)
        y = num * (1.0 / den)[:, None]
        tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :],
                 y.to(out_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


@triton.jit
def softmax_online_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride,
                          BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: rows of any width in two passes: first the online max and sum over BLOCK_SIZE chunks
    #   (m_new = max(m, x); d = d * exp(m - m_new) + exp(x - m_new); beware -inf - -inf = NaN while a lane
    #   has seen only -inf), reduced across lanes; then a second loop writes exp(x - max) / sum
    # HINT: A row too wide for one block needs the max and sum built up chunk by chunk: when the running max
    #   grows, rescale the sum so far by exp(old_max - new_max).
    # HINT: Keep per-lane vectors m (starts at -inf) and d (zeros) across the first loop; after it, reduce
    #   them to one row max and one row sum; a second loop reloads x and writes exp(x - max) / sum.
    # HINT: Guard the -inf lanes: `shift = tl.where(m_new == -float("inf"), 0.0, m_new)`, then `d = d *
    #   tl.exp(m - shift) + tl.exp(x - shift)`; at the end `row_sum = tl.sum(d * tl.exp(m - row_max), 0)`.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    # Per-lane running max and sum: no cross-lane reduction inside the loop, one at the end.
    m = tl.full([BLOCK_SIZE], -float("inf"), tl.float32)
    d = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # A lane that has seen only -inf keeps m = -inf; -inf - (-inf) would be NaN, so shift
        # by 0 there: its rescale factor exp(-inf) = 0 and its terms exp(-inf) = 0, as they must.
        shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        d = d * tl.exp(m - shift) + tl.exp(x - shift)
        m = m_new
    row_max = tl.max(m, axis=0)
    # An all -inf row gives -inf - (-inf) = NaN here, and so NaN outputs: what torch gives.
    row_sum = tl.sum(d * tl.exp(m - row_max), axis=0)
    inv = 1.0 / row_sum
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - row_max) * inv
        tl.store(out_row + offs, y.to(out_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


# ------------------------------------------------------------------------ launch settings
@dataclass(frozen=True)
class SoftmaxConfig:
    """How `softmax` launches for one (dtype size, row width): which kernel and its knobs.

    persistent: a grid of resident programs looping over row blocks (`softmax_persistent_kernel`)
    instead of one program per row block (`softmax_row_kernel` / `softmax_rows_kernel`).
    rows: rows per program block; num_warps: threads per program / 32;
    num_stages: loads in flight in the persistent loop (1 = no pipelining; ignored otherwise).
    """
    persistent: bool
    rows: int
    num_warps: int
    num_stages: int = 1

    def label(self) -> str:
        kind = f"persistent s{self.num_stages}" if self.persistent else "grid of blocks"
        return f"{kind:<15} rows={self.rows:<2} warps={self.num_warps:<2}"


def default_num_warps(elements_per_program: int) -> int:
    """Warps for a program of this many elements: ~16 fp32 values per thread keeps registers low
    enough for two or more programs per SM."""
    return max(4, min(16, triton.next_power_of_2(elements_per_program) // (32 * 16)))


# Pipelined loads (num_stages=2) land in shared memory: two blocks must fit in the 227 KB an H100
# program may use, with room to spare for the reductions' scratch space.
STAGED_BYTES = 160 * 1024


def two_stages_fit(block_bytes: int) -> bool:
    """Whether two blocks of this many bytes (num_stages=2) fit in STAGED_BYTES of shared memory."""
    return 2 * block_bytes <= STAGED_BYTES


def heuristic_config(n_cols: int, dtype: torch.dtype) -> SoftmaxConfig:
    """The launch settings used where no measurement says better (any GPU, any width).

    fp32: one row per program, ~16 values per thread (measured at 90-96% of copy on the H100
    in the development run of 2026-11-22). 16-bit: rows packed until a block holds >= 8 KB,
    persistent, with a second block's loads in flight whenever two blocks fit in shared memory
    (a prediction until the sweep has run: see notes/softmax.md).
    """
    block = triton.next_power_of_2(max(n_cols, 1))
    itemsize = torch.empty((), dtype=dtype).element_size()
    if itemsize >= 4:
        return SoftmaxConfig(persistent=False, rows=1, num_warps=default_num_warps(block))
    rows = max(1, 8192 // (block * itemsize))
    return SoftmaxConfig(persistent=True, rows=rows, num_warps=default_num_warps(rows * block),
                         num_stages=2 if two_stages_fit(rows * block * itemsize) else 1)


# The fastest config per (itemsize, padded width), measured by `python -m
# week3_triton_kernels.softmax_bench --sweep` and written by it to results/tuned_softmax.json (with
# the GPU, versions and date). Read once; used only on the GPU it was measured on
# (course/tuning.py), else `heuristic_config`.
TUNED = tuning.TunedTable(__file__, "softmax", SoftmaxConfig)


def config_for(n_cols: int, dtype: torch.dtype) -> SoftmaxConfig:
    """The launch settings `softmax` uses: the tuned table where it has an entry, else the heuristic."""
    key = (torch.empty((), dtype=dtype).element_size(), triton.next_power_of_2(max(n_cols, 1)))
    return TUNED.get(key) or heuristic_config(n_cols, dtype)


_resident_cache: dict = {}


def _resident_programs_per_sm(compiled, num_warps: int) -> int:
    """How many copies of a compiled kernel one SM holds at once: the tightest of its limits.

    Registers: 64K 32-bit registers per SM, allocated per warp in steps of 256 (8 per thread);
    threads: 2048 per SM; shared memory: ~228 KB per SM; and at most 32 programs per SM.
    """
    props = torch.cuda.get_device_properties(runtime.DEVICE)
    regs = max(8, -(-int(compiled.n_regs) // 8) * 8)
    by_regs = getattr(props, "regs_per_multiprocessor", 65536) // (regs * 32 * num_warps)
    by_threads = getattr(props, "max_threads_per_multi_processor", 2048) // (32 * num_warps)
    smem = int(compiled.metadata.shared)
    by_smem = getattr(props, "shared_memory_per_multiprocessor", 233472) // smem if smem else 32
    return max(1, min(by_regs, by_threads, by_smem, 32))


def _persistent_grid(x, out, n_rows, n_cols, rows, block, num_warps, num_stages) -> int:
    n_blocks = triton.cdiv(n_rows, rows)
    if not runtime.on_gpu():
        return min(n_blocks, 2 * runtime.sm_count())  # the interpreter runs programs one by one
    key = (x.dtype, rows, block, num_warps, num_stages)
    if key not in _resident_cache:
        # Compile without running (the official Triton softmax tutorial does the same) and ask
        # the compiled kernel how many registers and how much shared memory it needs.
        compiled = softmax_persistent_kernel.warmup(
            x, out, n_rows, n_cols, n_cols, n_cols, BLOCK_ROWS=rows, BLOCK_SIZE=block,
            NUM_STAGES=num_stages, num_warps=num_warps, grid=(1,))
        compiled._init_handles()
        _resident_cache[key] = _resident_programs_per_sm(compiled, num_warps)
    return min(n_blocks, _resident_cache[key] * runtime.sm_count())


# ------------------------------------------------------------------------------- launchers
def _prepare(x, out):
    validate.tensor(x, "x", dtypes=DTYPES)
    if x.dim() == 0:
        raise ValueError("x must have at least 1 dimension (softmax runs over the last one), got a scalar")
    out = validate.output(out, x)
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols if n_cols else 0
    return out, n_rows, n_cols


def _check_power_of_two(name, value, low, high=None):
    if value is None:
        return
    if (not isinstance(value, int) or isinstance(value, bool) or value < low or value & (value - 1)
            or (high is not None and value > high)):
        limit = f" and <= {high}" if high is not None else ""
        raise ValueError(f"{name} must be a power of two >= {low}{limit}, got {value!r}")


def _check_one_block(n_cols):
    if n_cols > MAX_ONE_BLOCK:
        raise ValueError(f"x has rows of {n_cols} elements, more than one block holds "
                         f"(MAX_ONE_BLOCK = {MAX_ONE_BLOCK}): use softmax_online or softmax")


def _launch_blocks(x, out, n_rows, n_cols, rows, num_warps):
    block = triton.next_power_of_2(n_cols)
    rows = min(rows, triton.next_power_of_2(n_rows))
    num_warps = num_warps or default_num_warps(rows * block)
    if rows == 1:
        softmax_row_kernel[(n_rows,)](x, out, n_cols, n_cols, n_cols, BLOCK_SIZE=block,
                                      num_warps=num_warps)
    else:
        softmax_rows_kernel[(triton.cdiv(n_rows, rows),)](x, out, n_rows, n_cols, n_cols, n_cols,
                                                         BLOCK_ROWS=rows, BLOCK_SIZE=block,
                                                         num_warps=num_warps)


def _launch_persistent(x, out, n_rows, n_cols, rows, num_warps, num_stages):
    block = triton.next_power_of_2(n_cols)
    rows = min(rows, triton.next_power_of_2(n_rows))
    grid = _persistent_grid(x, out, n_rows, n_cols, rows, block, num_warps, num_stages)
    softmax_persistent_kernel[(grid,)](x, out, n_rows, n_cols, n_cols, n_cols, BLOCK_ROWS=rows,
                                       BLOCK_SIZE=block, NUM_STAGES=num_stages, num_warps=num_warps)


def softmax_one_block(x: torch.Tensor, out: torch.Tensor | None = None, *,
                      rows_per_program: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    """Softmax over the last dimension, each row held in one block (cols <= MAX_ONE_BLOCK).

    `rows_per_program` > 1 packs several narrow rows into each program (`softmax_rows_kernel`);
    by default one row per program (`softmax_row_kernel`). `num_warps` defaults to ~16 values
    per thread.
    """
    out, n_rows, n_cols = _prepare(x, out)
    _check_one_block(n_cols)
    _check_power_of_two("rows_per_program", rows_per_program, 1)
    _check_power_of_two("num_warps", num_warps, 1, 32)
    if out.numel() == 0:
        return out
    _launch_blocks(x, out, n_rows, n_cols, rows_per_program or DEFAULT_ROWS_PER_PROGRAM, num_warps)
    return out


def softmax_persistent(x: torch.Tensor, out: torch.Tensor | None = None, *,
                       rows_per_program: int | None = None, num_warps: int | None = None,
                       num_stages: int | None = None) -> torch.Tensor:
    """Softmax over the last dimension with a persistent grid (cols <= MAX_ONE_BLOCK).

    As many programs as the GPU holds at once loop over blocks of `rows_per_program` rows,
    with `num_stages` blocks' loads in flight. Unset knobs come from `heuristic_config`.
    """
    out, n_rows, n_cols = _prepare(x, out)
    _check_one_block(n_cols)
    _check_power_of_two("rows_per_program", rows_per_program, 1)
    _check_power_of_two("num_warps", num_warps, 1, 32)
    if num_stages is not None and (not isinstance(num_stages, int) or isinstance(num_stages, bool)
                                   or not 1 <= num_stages <= 4):
        raise ValueError(f"num_stages must be an int from 1 to 4, got {num_stages!r}")
    if out.numel() == 0:
        return out
    guess = heuristic_config(n_cols, x.dtype)
    rows = rows_per_program or guess.rows
    block = triton.next_power_of_2(n_cols)
    _launch_persistent(x, out, n_rows, n_cols, rows,
                       num_warps or default_num_warps(min(rows, triton.next_power_of_2(n_rows)) * block),
                       num_stages or guess.num_stages)
    return out


def softmax_online(x: torch.Tensor, out: torch.Tensor | None = None, *,
                   block_size: int = ONLINE_BLOCK) -> torch.Tensor:
    """Softmax over the last dimension for rows of any width, streamed in `block_size` chunks."""
    if not isinstance(block_size, int) or block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two >= 16, got {block_size!r}")
    out, n_rows, n_cols = _prepare(x, out)
    if out.numel() == 0:
        return out
    block = min(block_size, max(16, triton.next_power_of_2(n_cols)))
    softmax_online_kernel[(n_rows,)](x, out, n_cols, n_cols, n_cols, BLOCK_SIZE=block,
                                     num_warps=default_num_warps(block))
    return out


def softmax_with_config(x, out, config: SoftmaxConfig):
    """Softmax of checked x into out with these launch settings: `softmax`'s launch, and the sweep's."""
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    if config.persistent:
        _launch_persistent(x, out, n_rows, n_cols, config.rows, config.num_warps, config.num_stages)
    else:
        _launch_blocks(x, out, n_rows, n_cols, config.rows, config.num_warps)
    return out


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.softmax(x, dim=-1): the tuned one-block kernel when a row fits, online otherwise."""
    out, n_rows, n_cols = _prepare(x, out)
    if out.numel() == 0:
        return out
    if n_cols > AUTO_ONE_BLOCK:
        return softmax_online(x, out)
    return softmax_with_config(x, out, config_for(n_cols, x.dtype))
