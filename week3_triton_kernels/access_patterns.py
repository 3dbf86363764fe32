"""Memory access patterns in Triton: the bytes the hardware moves versus the bytes you use.

DRAM and L2 never deliver one element. A warp's load is cut into 32-byte *sectors* (four per
128-byte cache line), and every sector it touches is fetched whole. Thirty-two threads reading
32 consecutive fp32 values touch 4 sectors: every byte fetched is used ("coalesced"). The same
threads reading every 8th value touch 32 sectors, and 7/8 of each is thrown away.

What it teaches, kernel by kernel (cost model: n elements of `itemsize` bytes):
* `strided_copy_kernel`: out[i] = x[i * s], a 1-D view with stride s. Useful traffic is
  2 n itemsize (read n, write n); the read fetches n * itemsize * min(s, 32 / itemsize) bytes
  (`read_amplification`), so past s = 8 (fp32) each useful 4 bytes cost a 32-byte sector and the
  useful bandwidth should fall to ~2/9 of the copy rate (read 8x, write 1x) and stay there.
* 2-D copies of any strided view, `out = x.contiguous()` done by a kernel that follows x's
  strides (a transpose is the copy of `x.t()`):
  - `copy2d_gather_kernel`: one program per block of *output* elements in row-major order, each
    computing (row, col) and gathering x[row, col]. Writes coalesce; reads of a transposed view
    stride by a whole row (week 1's naive transpose, in Triton).
  - `copy2d_tiled_kernel`: one program per 2-D tile, addresses `rows * stride_r + cols * stride_c`.
    Triton specialises an integer argument equal to 1 into a compile-time constant, so it knows
    which dimension of x is contiguous; it lays out the load along that dimension, the store
    along out's rows, and converts between the two layouts through shared memory: week 1's
    shared-memory transpose, written by the compiler.
  - `copy2d_block_ptr_kernel`: the same tile with `tl.make_block_ptr` (shape, strides, offsets,
    `boundary_check` instead of masks). Triton 3.6 rewrites block pointers into the pointer
    arithmetic above, so expect the same speed; Triton 3.8 removed them (the CPU interpreter
    here is Triton 3.9), so this version runs only where `BLOCK_PTR_SUPPORTED`.
  - `copy2d_descriptor_kernel`: tensor descriptors (`triton.tools.tensor_descriptor`), built on
    the host: on Hopper (sm_90) loads and stores become TMA bulk copies between global and
    shared memory, issued by one thread; older GPUs get ordinary loads (compiled for sm_75: scalar
    4-byte ones, so prefer `copy2d` there). TMA needs a unit-stride
    last dimension, 16-byte aligned base and strides: a transposed view is read through a
    descriptor of the underlying row-major matrix and the tile is transposed on-chip (`tl.trans`).
* `copy_kernel` / `copy_persistent_kernel`: a plain copy whose launch parameters (BLOCK_SIZE,
  `num_warps`, `num_stages`, number of programs) `python -m week3_triton_kernels.access_patterns_bench
  --sweep` measures. 2 n itemsize bytes, 0 FLOPs: the copy rate is the ceiling of everything here.

Every kernel is a copy: 0 FLOPs, so "% of copy bandwidth" is the only yardstick, and the results
must be bit-exact (NaN payloads and -0.0 included). The benchmarks, the launch sweeps and the
one-launch-each profiling run: access_patterns_bench.py.
"""
from __future__ import annotations

import torch

from course import validate, versions
from course.gpu import triton, tl
from triton.tools.tensor_descriptor import TensorDescriptor

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64,
          torch.int8, torch.int16, torch.int32, torch.int64)
SECTOR_BYTES = 32  # the unit in which L1 and L2 track and fetch memory (NVIDIA GPUs since Maxwell)
BLOCK_SIZE = 1024  # 1-D kernels: 4 warps x 32 threads x 8 fp32 = two 16-byte accesses per thread
TILE = (64, 64)    # 2-D kernels: 16 KB of fp32 per program, 32 values per thread at 4 warps
TILE_WARPS = 4
# Triton 3.8 removed block pointers; its tl.make_block_ptr only raises (the docstring says so).
BLOCK_PTR_SUPPORTED = "removed" not in (tl.make_block_ptr.__doc__ or "")


def read_amplification(stride: int, itemsize: int, sector_bytes: int = SECTOR_BYTES) -> float:
    """Bytes fetched per useful byte when a warp reads every `stride`-th element.

    Each useful element drags in its whole sector; consecutive useful elements share a sector
    while stride * itemsize < sector_bytes. So: min(stride, sector_bytes / itemsize).
    """
    if not isinstance(stride, int) or stride < 1:
        raise ValueError(f"stride must be an integer >= 1, got {stride!r}")
    return min(stride * itemsize, sector_bytes) / itemsize


# ------------------------------------------------------------------------------------ kernels
@triton.jit
def strided_copy_kernel(x_ptr, out_ptr, n, stride, BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: out[i] = x[i * stride] for the BLOCK_SIZE values of i this program owns: int64
    #   offsets, mask offs < n, the load strided, the store contiguous
    # HINT: The lesson is the cost of the read pattern, not the math: the store stays contiguous, only the
    #   load address jumps by `stride` elements per lane.
    # HINT: Offsets as in vector_add (int64 program id times BLOCK_SIZE plus arange), one mask; the load
    #   adds offs * stride to x_ptr, the store adds plain offs to out_ptr.
    # HINT: `x = tl.load(x_ptr + offs * stride, mask=mask)`
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    # With stride == 1 Triton compiles a specialised kernel (the argument becomes the constant 1)
    # and proves the addresses contiguous: 16-byte vector loads. Any other stride: one 4-byte
    # load per element, and one sector per element once stride * itemsize >= 32 bytes.
    x = tl.load(x_ptr + offs * stride, mask=mask)
    tl.store(out_ptr + offs, x, mask=mask)
    # END EXERCISE


@triton.jit
def copy2d_gather_kernel(x_ptr, out_ptr, n, n_cols, stride_r, stride_c, BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: one program per BLOCK_SIZE output elements, walking the OUTPUT in row-major order (a
    #   coalesced store): rows = offs // n_cols, cols = offs % n_cols; load x through its strides
    # HINT: Walk the output in flat row-major order so the store is coalesced; each flat index becomes a
    #   (row, col) pair, and x's own strides decide where the load goes.
    # HINT: Flat offsets and mask as usual; row = offs // n_cols, col = offs % n_cols; the load address is
    #   row * stride_r + col * stride_c, the store address is offs.
    # HINT: `tl.load(x_ptr + rows * stride_r + cols * stride_c, mask=mask)`
    # Walk the OUTPUT in row-major order: the store is coalesced, and the load goes wherever
    # x's strides send it. For x = a.t(), neighbouring lanes read addresses a whole row apart.
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    rows = offs // n_cols
    cols = offs % n_cols
    x = tl.load(x_ptr + rows * stride_r + cols * stride_c, mask=mask)
    tl.store(out_ptr + offs, x, mask=mask)
    # END EXERCISE


@triton.jit
def _tile_coords(n_cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # A 1-D grid cut into (row tile, column tile): no 65535 limit on grid axis 1.
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(n_cols, BLOCK_C)
    return pid // tiles_c, pid % tiles_c


@triton.jit
def copy2d_tiled_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_r, stride_c, out_stride_r,
                        BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # BEGIN EXERCISE: one program per [BLOCK_R, BLOCK_C] tile: tile_r, tile_c = _tile_coords(...); int64 row
    #   and column offsets; a 2-D mask for both edges; load through x's strides, store to out (row stride
    #   out_stride_r, column stride 1)
    # HINT: A 2-D tile lets the compiler see both dimensions at once, so it can read along whichever
    #   dimension is contiguous in x and write along out's rows (converting through shared memory).
    # HINT: Row and column index vectors from the tile coordinates (int64), a 2-D mask rows[:, None] <
    #   n_rows & cols[None, :] < n_cols, pointers built by broadcasting with the strides.
    # HINT: Load at `rows[:, None] * stride_r + cols[None, :] * stride_c`; store at `rows[:, None] *
    #   out_stride_r + cols[None, :]`.
    tl.static_assert(BLOCK_R * BLOCK_C <= 128 * 128, "a larger tile spills registers")
    tile_r, tile_c = _tile_coords(n_cols, BLOCK_R, BLOCK_C)
    rows = tile_r.to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tile_c.to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    # When stride_r == 1 (a transposed view) the compiler reads the tile down its columns and
    # writes it along its rows, converting the register layout through shared memory between.
    tile = tl.load(x_ptr + rows[:, None] * stride_r + cols[None, :] * stride_c, mask=mask)
    tl.store(out_ptr + rows[:, None] * out_stride_r + cols[None, :], tile, mask=mask)
    # END EXERCISE


@triton.jit
def copy2d_block_ptr_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_r, stride_c, out_stride_r,
                            BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, X_COLUMN_MAJOR: tl.constexpr):
    # BEGIN EXERCISE: the tiled copy with tl.make_block_ptr and boundary_check=(0, 1) instead of masks: a
    #   block pointer for x (order (0, 1) if X_COLUMN_MAJOR else (1, 0)) and one for out
    # HINT: A block pointer carries the tensor's shape, strides and the tile's position, so the compiler
    #   checks the edges for you (boundary_check) and knows which dimension is contiguous (order).
    # HINT: Two tl.make_block_ptr calls with shape (n_rows, n_cols), the tile's offsets (tile_r * BLOCK_R,
    #   tile_c * BLOCK_C) and block_shape (BLOCK_R, BLOCK_C); `order` lists the fastest dimension first, so
    #   it depends on X_COLUMN_MAJOR for the source; order must be a constant, hence an if/else around the
    #   whole call.
    # HINT: `tile = tl.load(src, boundary_check=(0, 1))`, then `tl.store(dst, tile, boundary_check=(0, 1))`.
    tile_r, tile_c = _tile_coords(n_cols, BLOCK_R, BLOCK_C)
    # `order` lists the dimensions from fastest-varying in memory to slowest.
    if X_COLUMN_MAJOR:
        src = tl.make_block_ptr(x_ptr, shape=(n_rows, n_cols), strides=(stride_r, stride_c),
                                offsets=(tile_r * BLOCK_R, tile_c * BLOCK_C),
                                block_shape=(BLOCK_R, BLOCK_C), order=(0, 1))
    else:
        src = tl.make_block_ptr(x_ptr, shape=(n_rows, n_cols), strides=(stride_r, stride_c),
                                offsets=(tile_r * BLOCK_R, tile_c * BLOCK_C),
                                block_shape=(BLOCK_R, BLOCK_C), order=(1, 0))
    dst = tl.make_block_ptr(out_ptr, shape=(n_rows, n_cols), strides=(out_stride_r, 1),
                            offsets=(tile_r * BLOCK_R, tile_c * BLOCK_C),
                            block_shape=(BLOCK_R, BLOCK_C), order=(1, 0))
    # boundary_check replaces the masks: the block pointer knows the shape it lives in.
    tile = tl.load(src, boundary_check=(0, 1))
    tl.store(dst, tile, boundary_check=(0, 1))
    # END EXERCISE


@triton.jit
def copy2d_descriptor_kernel(x_desc, out_desc, n_cols,
                             BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, TRANSPOSED: tl.constexpr):
    # BEGIN EXERCISE: the tiled copy through tensor descriptors: x_desc.load([r0, c0]), out_desc.store([r0,
    #   c0], tile); if TRANSPOSED, x_desc describes x.t(): load its [BLOCK_C, BLOCK_R] tile at [c0, r0] and
    #   tl.trans it
    # HINT: A tensor descriptor hands a whole tile copy to the TMA engine: you give only the tile's starting
    #   coordinates, and out-of-bounds parts are zero-filled on load and skipped on store.
    # HINT: r0, c0 from _tile_coords times the block sizes; when TRANSPOSED the descriptor is of x.t(), so
    #   ask for the tile at the swapped coordinates and transpose it on chip; then one store.
    # HINT: `tile = tl.trans(x_desc.load([c0, r0]))` in the transposed case.
    tile_r, tile_c = _tile_coords(n_cols, BLOCK_R, BLOCK_C)
    r0 = tile_r * BLOCK_R
    c0 = tile_c * BLOCK_C
    if TRANSPOSED:
        # x_desc describes x.t(), which is row-major: fetch its [BLOCK_C, BLOCK_R] tile whole
        # (one TMA copy on Hopper) and transpose it on-chip.
        tile = tl.trans(x_desc.load([c0, r0]))
    else:
        tile = x_desc.load([r0, c0])
    # Out-of-bounds parts of a tile are not written: the descriptor knows out's shape.
    out_desc.store([r0, c0], tile)
    # END EXERCISE


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: a plain copy, one block per program, masked
    # HINT: The baseline every other copy is compared with: vector_add with one input.
    # HINT: int64 offsets from the program id, mask offs < n, a masked load feeding a masked store.
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
    # END EXERCISE


@triton.jit
def copy_persistent_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: a grid-stride loop: a fixed number of programs, each copying blocks pid, pid +
    #   num_programs, ... (range(tl.program_id(0), tl.cdiv(n, BLOCK_SIZE), tl.num_programs(0)))
    # HINT: A grid-stride loop: launch a fixed number of programs and let each copy blocks pid, pid + P, pid
    #   + 2P ...; a loop is what gives the compiler something to pipeline.
    # HINT: `for block in range(tl.program_id(0), tl.cdiv(n, BLOCK_SIZE), tl.num_programs(0)):` with the
    #   plain copy's body inside, offsets computed from `block`.
    # HINT: Use `tl.cast(block, tl.int64) * BLOCK_SIZE` (not block.to(): the interpreter's loop variable is
    #   a Python int).
    # A fixed number of programs loop over the blocks (a grid-stride loop). Only a loop gives
    # num_stages something to do: the compiler may issue the next blocks' loads before the
    # current block is stored (software pipelining), if its pipeliner takes this loop.
    for block in range(tl.program_id(0), tl.cdiv(n, BLOCK_SIZE), tl.num_programs(0)):
        # tl.cast, not block.to(): in the interpreter the loop variable is a plain Python int.
        offs = tl.cast(block, tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
    # END EXERCISE


# ---------------------------------------------------------------------------------- launchers
def _checked_input(x, ndim: int) -> torch.Tensor:
    # contiguous=False: following arbitrary strides is the point of these kernels.
    return validate.tensor(x, "x", dtypes=DTYPES, ndim=ndim, contiguous=False)


def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first, last) byte addresses `t` can touch."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _checked_output(out, x: torch.Tensor, shape) -> torch.Tensor:
    if out is None:
        return torch.empty(shape, dtype=x.dtype, device=x.device)
    validate.tensor(out, "out", dtypes=(x.dtype,))
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out has shape {tuple(out.shape)}; expected {tuple(shape)}")
    (x0, x1), (o0, o1) = _span(x), _span(out)
    if x.numel() and x0 < o1 and o0 < x1:
        raise ValueError("out overlaps x in memory: programs run in no fixed order, so a copy "
                         "onto itself would read elements already overwritten; pass a separate out")
    return out


def strided_copy(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x.contiguous() for a 1-D view x of any stride (x = base[::s] reads every s-th element)."""
    x = _checked_input(x, 1)
    out = _checked_output(out, x, x.shape)
    n = x.numel()
    if n == 0:
        return out  # a grid of zero programs is an invalid launch
    strided_copy_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, x.stride(0), BLOCK_SIZE=BLOCK_SIZE,
                                                      num_warps=4)
    return out


def copy2d_gather(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x.contiguous() for any 2-D view, one program per BLOCK_SIZE output elements."""
    x = _checked_input(x, 2)
    out = _checked_output(out, x, x.shape)
    n = x.numel()
    if n == 0:
        return out
    copy2d_gather_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, x.shape[1], x.stride(0), x.stride(1),
                                                       BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
    return out


def _tile_args(tile, num_warps):
    block_r, block_c = TILE if tile is None else tile
    for name, value in (("tile[0]", block_r), ("tile[1]", block_c)):
        if not isinstance(value, int) or value < 1 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 1, got {value!r}")
    num_warps = TILE_WARPS if num_warps is None else num_warps
    if num_warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"num_warps must be a power of two from 1 to 32, got {num_warps!r}")
    return block_r, block_c, num_warps


def copy2d(x: torch.Tensor, out: torch.Tensor | None = None, *, tile=None, num_warps=None) -> torch.Tensor:
    """out = x.contiguous() for any 2-D view (transposed, sliced, stepped, broadcast), in 2-D tiles.

    `tile` = (rows, cols) of each program's tile (default `TILE`); `num_warps` default `TILE_WARPS`.
    """
    x = _checked_input(x, 2)
    block_r, block_c, num_warps = _tile_args(tile, num_warps)
    out = _checked_output(out, x, x.shape)
    n_rows, n_cols = x.shape
    if out.numel() == 0:
        return out
    grid = (triton.cdiv(n_rows, block_r) * triton.cdiv(n_cols, block_c),)
    copy2d_tiled_kernel[grid](x, out, n_rows, n_cols, x.stride(0), x.stride(1), out.stride(0),
                              BLOCK_R=block_r, BLOCK_C=block_c, num_warps=num_warps)
    return out


def copy2d_block_ptr(x: torch.Tensor, out: torch.Tensor | None = None, *, tile=None,
                     num_warps=None) -> torch.Tensor:
    """`copy2d` written with block pointers (`tl.make_block_ptr`); Triton <= 3.7 only."""
    if not BLOCK_PTR_SUPPORTED:
        raise RuntimeError(f"Triton {triton.__version__} removed tl.make_block_ptr (block pointers went "
                           "in Triton 3.8): use copy2d (pointer arithmetic) or copy2d_descriptor")
    x = _checked_input(x, 2)
    block_r, block_c, num_warps = _tile_args(tile, num_warps)
    out = _checked_output(out, x, x.shape)
    n_rows, n_cols = x.shape
    if out.numel() == 0:
        return out
    grid = (triton.cdiv(n_rows, block_r) * triton.cdiv(n_cols, block_c),)
    copy2d_block_ptr_kernel[grid](x, out, n_rows, n_cols, x.stride(0), x.stride(1), out.stride(0),
                                  BLOCK_R=block_r, BLOCK_C=block_c,
                                  X_COLUMN_MAJOR=x.stride(0) < x.stride(1), num_warps=num_warps)
    return out


def _descriptor(t: torch.Tensor, block_shape) -> TensorDescriptor:
    """A host-side tensor descriptor of a 2-D view whose last stride is 1 (checked by the caller).

    A dimension of size 1 is never stepped over, so its stride is free: give it an aligned one
    (torch reports the row length, which need not be a multiple of 16 bytes).
    """
    rows, cols = t.shape
    row_stride = t.stride(0) if rows > 1 else triton.cdiv(cols * t.element_size(), 16) * 16 // t.element_size()
    return TensorDescriptor(t, [rows, cols], [row_stride, 1], list(block_shape))


def _descriptor_view(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(row-major view to describe, whether it is x transposed); ValueError if TMA cannot read x."""
    rows, cols = x.shape
    if x.stride(1) == 1 or cols == 1:
        view, transposed = x, False
    elif x.stride(0) == 1 or rows == 1:
        view, transposed = x.t(), True
    else:
        raise ValueError(f"x has strides {x.stride()}: a tensor descriptor needs one dimension of "
                         "stride 1 (TMA copies rows of contiguous bytes); use copy2d")
    if view.shape[0] > 1 and view.stride(0) == 0:
        raise ValueError("x is a broadcast view (stride 0): a tensor descriptor cannot describe it; use copy2d")
    itemsize = x.element_size()
    if view.shape[0] > 1 and (view.stride(0) * itemsize) % 16:
        raise ValueError(f"x's rows are {view.stride(0) * itemsize} bytes apart; a tensor descriptor "
                         "(TMA) needs a multiple of 16 bytes: use copy2d, or pad the rows")
    if x.data_ptr() % 16:
        raise ValueError("x does not start on a 16-byte boundary (a view like a[1:]?); a tensor "
                         "descriptor needs 16-byte alignment: use copy2d")
    return view, transposed


def copy2d_descriptor(x: torch.Tensor, out: torch.Tensor | None = None, *, tile=None,
                      num_warps=None) -> torch.Tensor:
    """`copy2d` through tensor descriptors: TMA bulk copies on Hopper, plain loads elsewhere.

    x needs one unit-stride dimension (a row-major view, or the transpose of one), 16-byte
    aligned start and row pitch; out's rows too. `tile` defaults to `TILE`; its rows must be
    at least 16 bytes long (TMA's smallest box row).
    """
    x = _checked_input(x, 2)
    block_r, block_c, num_warps = _tile_args(tile, num_warps)
    if min(block_r, block_c) * x.element_size() < 16:
        raise ValueError(f"tile {(block_r, block_c)} has rows of fewer than 16 bytes of "
                         f"{str(x.dtype).replace('torch.', '')}: a tensor descriptor needs at least 16")
    out = _checked_output(out, x, x.shape)
    n_rows, n_cols = x.shape
    if out.numel() == 0:
        return out
    view, transposed = _descriptor_view(x)
    if n_rows > 1 and (n_cols * x.element_size()) % 16:
        raise ValueError(f"out's rows are {n_cols * x.element_size()} bytes long; a tensor descriptor "
                         "(TMA) needs a multiple of 16 bytes: use copy2d")
    if out.data_ptr() % 16:
        raise ValueError("out does not start on a 16-byte boundary; a tensor descriptor needs it")
    x_desc = _descriptor(view, (block_c, block_r) if transposed else (block_r, block_c))
    out_desc = _descriptor(out, (block_r, block_c))
    # Triton 3.5's interpreter refuses aligned strides that are not 16 elements (a GPU takes them)
    versions.refuse_unsimulated_descriptors("copy2d_descriptor", "use copy2d, a GPU, or Triton >= 3.6",
                                            x_desc.strides, out_desc.strides)
    grid = (triton.cdiv(n_rows, block_r) * triton.cdiv(n_cols, block_c),)
    copy2d_descriptor_kernel[grid](x_desc, out_desc, n_cols, BLOCK_R=block_r, BLOCK_C=block_c,
                                   TRANSPOSED=transposed, num_warps=num_warps)
    return out


def transpose(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = x.T as a new row-major matrix: the tiled copy of the view x.t() (no .contiguous())."""
    x = _checked_input(x, 2)
    return copy2d(x.t(), out)


def copy(x: torch.Tensor, out: torch.Tensor | None = None, *, block_size: int = BLOCK_SIZE,
         num_warps: int = 4, num_stages: int | None = None, programs: int | None = None) -> torch.Tensor:
    """out = x for contiguous x, with every launch parameter exposed (for the sweep).

    `programs=None`: one program per block (`copy_kernel`); an int: that many programs loop
    over the blocks (`copy_persistent_kernel`), where `num_stages` can pipeline the loads.
    """
    x = validate.tensor(x, "x", dtypes=DTYPES)
    if not isinstance(block_size, int) or block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two >= 16, got {block_size!r}")
    if num_warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"num_warps must be a power of two from 1 to 32, got {num_warps!r}")
    if num_stages is not None and (not isinstance(num_stages, int) or num_stages < 1):
        raise ValueError(f"num_stages must be an integer >= 1, got {num_stages!r}")
    if programs is not None and (not isinstance(programs, int) or programs < 1):
        raise ValueError(f"programs must be an integer >= 1, got {programs!r}")
    out = _checked_output(out, x, x.shape)
    n = x.numel()
    if n == 0:
        return out
    options = {"num_warps": num_warps} | ({"num_stages": num_stages} if num_stages else {})
    if programs is None:
        copy_kernel[(triton.cdiv(n, block_size),)](x, out, n, BLOCK_SIZE=block_size, **options)
    else:
        programs = min(programs, triton.cdiv(n, block_size))
        copy_persistent_kernel[(programs,)](x, out, n, BLOCK_SIZE=block_size, **options)
    return out


# ------------------------------------------------------------------------- the code behind each entry
# What each launcher runs, kernel to launcher: the benchmarks (access_patterns_bench.py) count its
# lines beside each variant (`Benchmark.sources`).
STRIDED_COPY_CODE = (strided_copy_kernel, strided_copy)
COPY2D_GATHER_CODE = (copy2d_gather_kernel, copy2d_gather)
COPY2D_CODE = (copy2d_tiled_kernel, _tile_coords, copy2d)
COPY2D_BLOCK_PTR_CODE = (copy2d_block_ptr_kernel, _tile_coords, copy2d_block_ptr)
COPY2D_DESCRIPTOR_CODE = (copy2d_descriptor_kernel, _tile_coords, copy2d_descriptor, _descriptor, _descriptor_view)
