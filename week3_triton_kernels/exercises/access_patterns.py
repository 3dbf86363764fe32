"""Exercise: memory access patterns in Triton. Same names as week3_triton_kernels/access_patterns.py.

Check your work with `pytest tests/week3/test_access_patterns.py --impl=exercises`.
Without a GPU the kernels run in the Triton interpreter: `print` and pdb work inside them
(see ../debugging_triton.md). Every kernel is a copy: the tests compare bit for bit.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402, F401

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64,
          torch.int8, torch.int16, torch.int32, torch.int64)
SECTOR_BYTES = 32
BLOCK_SIZE = 1024
TILE = (64, 64)
TILE_WARPS = 4
BLOCK_PTR_SUPPORTED = "removed" not in (tl.make_block_ptr.__doc__ or "")


def read_amplification(stride: int, itemsize: int, sector_bytes: int = SECTOR_BYTES) -> float:
    """Bytes fetched per useful byte when a warp reads every `stride`-th element (the cost model)."""
    if not isinstance(stride, int) or stride < 1:
        raise ValueError(f"stride must be an integer >= 1, got {stride!r}")
    return min(stride * itemsize, sector_bytes) / itemsize


@triton.jit
def strided_copy_kernel(x_ptr, out_ptr, n, stride, BLOCK_SIZE: tl.constexpr):
    """out[i] = x[i * stride] for the BLOCK_SIZE values of i this program owns."""
    # TODO: offsets in int64 (pid.to(tl.int64) * BLOCK_SIZE + tl.arange); mask offs < n;
    # load from x_ptr + offs * stride, store to out_ptr + offs.
    pass


@triton.jit
def copy2d_gather_kernel(x_ptr, out_ptr, n, n_cols, stride_r, stride_c, BLOCK_SIZE: tl.constexpr):
    """One program per BLOCK_SIZE output elements (row-major), each gathering x[row, col]."""
    # TODO: flat offsets into out; rows = offs // n_cols, cols = offs % n_cols; load x through
    # its strides, store contiguously.
    pass


@triton.jit
def _tile_coords(n_cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(n_cols, BLOCK_C)
    return pid // tiles_c, pid % tiles_c


@triton.jit
def copy2d_tiled_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_r, stride_c, out_stride_r,
                        BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """One program per [BLOCK_R, BLOCK_C] tile; addresses rows * stride_r + cols * stride_c."""
    # TODO: tile_r, tile_c = _tile_coords(...); int64 row and column offsets; a 2-D mask for both
    # edges; load through x's strides, store to out (row stride out_stride_r, column stride 1).
    pass


@triton.jit
def copy2d_block_ptr_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_r, stride_c, out_stride_r,
                            BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, X_COLUMN_MAJOR: tl.constexpr):
    """The tiled copy with tl.make_block_ptr and boundary_check=(0, 1) instead of masks."""
    # TODO: a block pointer for x (order (0, 1) if X_COLUMN_MAJOR else (1, 0)) and one for out;
    # tl.load(src, boundary_check=(0, 1)); tl.store(dst, tile, boundary_check=(0, 1)).
    pass


@triton.jit
def copy2d_descriptor_kernel(x_desc, out_desc, n_cols,
                             BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, TRANSPOSED: tl.constexpr):
    """The tiled copy through tensor descriptors: x_desc.load([r0, c0]), out_desc.store([r0, c0], tile)."""
    # TODO: if TRANSPOSED, x_desc describes x.t(): load its [BLOCK_C, BLOCK_R] tile at [c0, r0]
    # and tl.trans it.
    pass


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    """A plain copy, one block per program."""
    # TODO
    pass


@triton.jit
def copy_persistent_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    """A plain copy where each program loops over blocks pid, pid + num_programs, ..."""
    # TODO: for block in range(tl.program_id(0), tl.cdiv(n, BLOCK_SIZE), tl.num_programs(0)): ...
    pass


def strided_copy(x, out=None):
    """out = x.contiguous() for a 1-D view x of any stride."""
    raise NotImplementedError("not implemented yet: strided_copy (week3 exercise)")


def copy2d_gather(x, out=None):
    """out = x.contiguous() for any 2-D view, one program per BLOCK_SIZE output elements."""
    raise NotImplementedError("not implemented yet: copy2d_gather (week3 exercise)")


def copy2d(x, out=None, *, tile=None, num_warps=None):
    """out = x.contiguous() for any 2-D view, in 2-D tiles (default TILE, TILE_WARPS)."""
    raise NotImplementedError("not implemented yet: copy2d (week3 exercise)")


def copy2d_block_ptr(x, out=None, *, tile=None, num_warps=None):
    """copy2d with block pointers; raise RuntimeError naming tl.make_block_ptr where Triton removed them."""
    raise NotImplementedError("not implemented yet: copy2d_block_ptr (week3 exercise)")


def copy2d_descriptor(x, out=None, *, tile=None, num_warps=None):
    """copy2d through host-side TensorDescriptors; ValueError for views TMA cannot describe."""
    raise NotImplementedError("not implemented yet: copy2d_descriptor (week3 exercise)")


def transpose(x, out=None):
    """out = x.T as a new row-major matrix (copy2d of the view x.t())."""
    raise NotImplementedError("not implemented yet: transpose (week3 exercise)")


def copy(x, out=None, *, block_size=BLOCK_SIZE, num_warps=4, num_stages=None, programs=None):
    """out = x for contiguous x, every launch parameter exposed; programs=int: the persistent kernel."""
    raise NotImplementedError("not implemented yet: copy (week3 exercise)")
