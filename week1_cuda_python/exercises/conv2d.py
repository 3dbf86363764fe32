"""Exercise: 2-D convolution in Numba and CUDA C. Same names as week1_cuda_python/conv2d.py.

Check your work with `pytest tests/week1/test_conv2d.py --impl=exercises`.

    out[r, c] = sum_{dy, dx < K} x[r + dy - K//2, c + dx - K//2] * w[dy, dx]   (x = 0 outside)

i.e. F.conv2d(x[None, None], w[None, None], padding=K // 2)[0, 0]; x is (H, W) float32, w is
(K, K) float32 with K odd. Launchers validate first (course.validate for the tensors; then
ValueError for a non-square w, an even K, or K > MAX_K on the constant-memory rungs), allocate
`out` like x if None, return early on an empty image.
Numba's cuda.const.array_like(arr) needs `arr` when the kernel is *compiled*: write a kernel
factory that closes over a NumPy copy of the filter, and cache the kernels it makes.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from course import runtime  # noqa: F401  before numba: GPU or CUDA simulator
from course import interop, validate  # noqa: F401
from course.check import random_tensor

from numba import cuda, float32  # noqa: E402,F401

CUDA_SOURCE = Path(__file__).parent / "kernels" / "conv2d.cu"  # your CUDA C file
DTYPES = (torch.float32,)
MAX_K = 15
TILE_W = 32
TILE_H = 32
BLOCK = (32, 8)
ROWS_PER_THREAD = TILE_H // BLOCK[1]
MAX_GRID_Y = 65535


@cuda.jit
def conv2d_naive_kernel(x, w, out):
    """One thread per output (col, row = cuda.grid(2)); skip taps outside the image."""
    # TODO


def _const_kernel(weights):
    """Return a @cuda.jit kernel(x, out) whose filter is cuda.const.array_like(weights)."""
    raise NotImplementedError("not implemented yet: _const_kernel (week1 exercise)")


def _tiled_kernel(weights):
    """Return a kernel(x, out): a (TILE_H + K - 1, TILE_W + K - 1) shared tile with the halo,
    loaded by all 256 threads of the block (zeros outside the image), then ROWS_PER_THREAD
    outputs per thread; filter in constant memory."""
    raise NotImplementedError("not implemented yet: _tiled_kernel (week1 exercise)")


def conv2d_numba_naive(x, w, out=None):
    """conv2d_naive_kernel on blocks of BLOCK threads, any odd K."""
    raise NotImplementedError("not implemented yet: conv2d_numba_naive (week1 exercise)")


def conv2d_numba_const(x, w, out=None):
    """The constant-memory kernel compiled for this filter (w.cpu().numpy()), K <= MAX_K."""
    raise NotImplementedError("not implemented yet: conv2d_numba_const (week1 exercise)")


def conv2d_numba_tiled(x, w, out=None):
    """The tiled kernel, grid (ceil(W / TILE_W), ceil(H / TILE_H)), K <= MAX_K."""
    raise NotImplementedError("not implemented yet: conv2d_numba_tiled (week1 exercise)")


def conv2d_cuda_naive(x, w, out=None):
    """`conv2d_naive` from kernels/conv2d.cu: interop.cuda_module(CUDA_SOURCE).get_function(...)."""
    raise NotImplementedError("not implemented yet: conv2d_cuda_naive (week1 exercise)")


def conv2d_cuda_const(x, w, out=None):
    """`conv2d_const`: first copy w into the module's c_filter (module.get_global("c_filter")
    gives its address; runtime.pycuda_driver().memcpy_dtod_async(address, w.data_ptr(), nbytes, None))."""
    raise NotImplementedError("not implemented yet: conv2d_cuda_const (week1 exercise)")


def conv2d_cuda_tiled(x, w, out=None):
    """`conv2d_tiled`: c_filter as above, 32 x 8 threads per 32 x 32 outputs."""
    raise NotImplementedError("not implemented yet: conv2d_cuda_tiled (week1 exercise)")


def conv2d_cuda_unrolled(x, w, out=None):
    """`conv2d_tiled_k<K>` (write a template<int K> kernel and one extern "C" wrapper per odd K):
    K a compile-time constant, the tap loops unrolled."""
    raise NotImplementedError("not implemented yet: conv2d_cuda_unrolled (week1 exercise)")


def conv2d_cuda_regblock(x, w, out=None):
    """`conv2d_regblock_k<K>`: as unrolled, each thread computing 4 consecutive output rows, each
    input row loaded from shared memory into registers once and used by every output it feeds."""
    raise NotImplementedError("not implemented yet: conv2d_cuda_regblock (week1 exercise)")


def conv2d_torch(x, w, out=None):
    """The reference: F.conv2d with TF32 off (given, not an exercise)."""
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        result = F.conv2d(x[None, None], w[None, None], padding=w.shape[0] // 2)[0, 0]
    finally:
        torch.backends.cudnn.allow_tf32 = previous
    return result if out is None else out.copy_(result)


NUMBA_LAUNCHERS = ("conv2d_numba_naive", "conv2d_numba_const", "conv2d_numba_tiled")
CUDA_C_LAUNCHERS = ("conv2d_cuda_naive", "conv2d_cuda_const", "conv2d_cuda_tiled", "conv2d_cuda_unrolled",
                    "conv2d_cuda_regblock")
ANY_K_LAUNCHERS = ("conv2d_numba_naive", "conv2d_cuda_naive")


def _sanitizer_case(launcher):
    def run():
        x = random_tensor((37, 45), torch.float32, runtime.DEVICE)
        w = random_tensor((5, 5), torch.float32, runtime.DEVICE)
        launcher(x, w)
        torch.cuda.synchronize()
    return run


SANITIZER_CASES = {
    "conv2d_naive_kernel (Numba)": _sanitizer_case(conv2d_numba_naive),
    "conv2d_const_kernel (Numba)": _sanitizer_case(conv2d_numba_const),
    "conv2d_tiled_kernel (Numba)": _sanitizer_case(conv2d_numba_tiled),
    "conv2d_naive (CUDA C)": _sanitizer_case(conv2d_cuda_naive),
    "conv2d_const (CUDA C)": _sanitizer_case(conv2d_cuda_const),
    "conv2d_tiled (CUDA C)": _sanitizer_case(conv2d_cuda_tiled),
    "conv2d_tiled_k5 (CUDA C)": _sanitizer_case(conv2d_cuda_unrolled),
    "conv2d_regblock_k5 (CUDA C)": _sanitizer_case(conv2d_cuda_regblock),
}
