"""Exercise: tiled matmul with tl.dot, grouped ordering, autotuning, a fused epilogue, then a
persistent kernel, a TMA (tensor descriptor) kernel and fp8. Same names as
week3_triton_kernels/matmul.py. Check your work with
`pytest tests/week3/test_matmul.py --impl=exercises`.

Suggested order: `_grouped_tile`, `_dot`, `_tile_product`, `_finish_tile` and `matmul_kernel`
with `matmul` and `matmul_fixed`; then `pad_for_vector_loads`; then `matmul_persistent_kernel`
(a loop around the same helpers); then `matmul_tma_kernel`; then `matmul_fp8`.
"""
from __future__ import annotations

import torch

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate  # noqa: F401

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402, F401

# Given: the fp8 tensor cores' worst-case summation error, the tests' tolerance.
from week3_triton_kernels.matmul import FP8_TENSOR_CORE_UNIT, fp8_sum_error_bound  # noqa: E402, F401

DTYPES = (torch.float16, torch.bfloat16)
FP8_DTYPES = (torch.float8_e4m3fn,)
FP8_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
FP8_MAX = 448.0
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
ALIGN = 16
FP8_BLOCK_K = 128


@triton.jit
def _grouped_tile(tile_id, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of tile number tile_id: GROUP_M rows of tiles at a time, down a column first."""
    # TODO
    pass


@triton.jit
def _dot(a, b, acc, FP8_PRECISE: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc + a @ b; with FP8_PRECISE pass max_num_imprecise_acc=BLOCK_K to tl.dot."""
    # TODO
    pass


@triton.jit
def _tile_product(a_ptr, b_ptr, pid_m, pid_n, K, a_rows, b_cols,
                  stride_am, stride_ak, stride_bk, stride_bn, FP8_PRECISE: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The fp32 BLOCK_M x BLOCK_N tile (pid_m, pid_n) of A @ B."""
    # TODO: offsets of A's rows % a_rows and B's columns % b_cols (wrap instead of mask); loop
    # over K in BLOCK_K steps masking K only; accumulate with _dot; return the accumulator.
    pass


@triton.jit
def _finish_tile(acc, c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, pid_m, pid_n, M, N,
                 stride_cm, stride_cn, HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr,
                 ACTIVATION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Epilogue: * a_scale * b_scale, + bias, activation (ACTIVATIONS); one masked store."""
    # TODO (relu must keep NaN: tl.maximum(..., propagate_nan=tl.PropagateNan.ALL))
    pass


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, M, N, K, a_rows, b_cols,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr, ACTIVATION: tl.constexpr,
                  FP8_PRECISE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # TODO: one program per tile: _grouped_tile(program_id), _tile_product, _finish_tile.
    pass


@triton.jit
def matmul_persistent_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, M, N, K,
                             a_rows, b_cols, stride_am, stride_ak, stride_bk, stride_bn,
                             stride_cm, stride_cn, HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr,
                             ACTIVATION: tl.constexpr, FP8_PRECISE: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr):
    # TODO: for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=FLATTEN): ...
    pass


@triton.jit
def matmul_tma_kernel(a_desc, b_desc, c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, M, N, K,
                      stride_cm, stride_cn, HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr,
                      ACTIVATION: tl.constexpr, FP8_PRECISE: tl.constexpr, B_KMAJOR: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr):
    # TODO: the persistent loop, loading tiles with a_desc.load([row, col]) and b_desc.load(...)
    # (B_KMAJOR: b_desc walks the (N, K) storage; use the loaded tile transposed, .T).
    pass


def _config(bm, bn, bk, stages, warps, group_m=8, **extra):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m, **extra},
                         num_stages=stages, num_warps=warps)


AUTOTUNE_CONFIGS = [
    # TODO: 4 to 6 configs, e.g. _config(BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps)
    _config(64, 64, 32, 3, 4),
]
PERSISTENT_CONFIGS = [
    # TODO: 4 to 6 configs with FLATTEN=True or False
    _config(64, 64, 32, 3, 4, FLATTEN=True),
]
KEY = ["M", "N", "K", "HAS_BIAS", "HAS_SCALE", "ACTIVATION", "FP8_PRECISE"]
matmul_kernel_autotuned = triton.autotune(configs=AUTOTUNE_CONFIGS, key=KEY)(matmul_kernel)
matmul_persistent_autotuned = triton.autotune(configs=PERSISTENT_CONFIGS, key=KEY)(matmul_persistent_kernel)
matmul_tma_autotuned = triton.autotune(configs=PERSISTENT_CONFIGS, key=KEY + ["B_KMAJOR"])(matmul_tma_kernel)


def device_capability():
    """(major, minor) of the GPU, or None in simulation (given)."""
    return torch.cuda.get_device_capability(runtime.DEVICE) if runtime.on_gpu() else None


def padded_copy(t, rows, cols):
    """t copied into a row-major buffer with row stride round_up(cols, 16), zero-padded (given)."""
    r, c = t.shape
    buffer = t.new_empty((rows, -(-cols // ALIGN) * ALIGN))
    view = buffer[:, :cols]
    view[:r, :c].copy_(t)
    if rows > r:
        view[r:].zero_()
    if cols > c:
        view[:r, c:].zero_()
    return view


def pad_for_vector_loads(a, b, k_major_b=False):
    """(a, b, K, a_rows, b_cols): operands arranged so the pointer kernels can use 16-byte loads."""
    raise NotImplementedError("not implemented yet: pad_for_vector_loads (week3 exercise)")


def matmul_fixed(a, b, bias=None, activation=None, out=None, *, block_m=128, block_n=256, block_k=64,
                 group_m=8, num_warps=8, num_stages=3, pad_strides=True):
    raise NotImplementedError("not implemented yet: matmul_fixed (week3 exercise)")


def matmul(a, b, bias=None, activation=None, out=None, *, pad_strides=True):
    """activation(a @ b + bias), fp16/bf16 in, fp32 accumulation. a, b and out may have any
    strides; with int32 offsets in the kernel, refuse (ValueError "spans more than 2^31
    elements") an operand, out included, whose last element lies 2^31 or more elements past its
    first (sum over dimensions of (size - 1) * stride)."""
    raise NotImplementedError("not implemented yet: matmul (week3 exercise)")


def matmul_persistent(a, b, bias=None, activation=None, out=None, *, pad_strides=True):
    raise NotImplementedError("not implemented yet: matmul_persistent (week3 exercise)")


def matmul_tma(a, b, bias=None, activation=None, out=None):
    raise NotImplementedError("not implemented yet: matmul_tma (week3 exercise)")


def matmul_fp8(a, b, a_scale, b_scale, bias=None, activation=None, out=None, *,
               out_dtype=torch.bfloat16, fast_accum=False, kernel="auto"):
    raise NotImplementedError("not implemented yet: matmul_fp8 (week3 exercise)")


def quantize_fp8(x):
    """(x_fp8, scale) with scale = amax(|x|) / 448 (given)."""
    if x.numel() == 0:
        return x.to(torch.float8_e4m3fn), torch.ones((), dtype=torch.float32, device=x.device)
    scale = x.detach().abs().amax().float().clamp_min(1e-12) / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale


def _epilogue_torch(acc, bias, activation):
    if bias is not None:
        acc = acc + bias.to(acc.dtype)
    if activation == "relu":
        acc = torch.relu(acc)
    elif activation in ("gelu", "gelu_tanh"):
        acc = torch.nn.functional.gelu(acc, approximate="tanh" if activation == "gelu_tanh" else "none")
    elif activation == "silu":
        acc = torch.nn.functional.silu(acc)
    return acc


def matmul_torch(a, b, bias=None, activation=None):
    """The reference (given), in float64, rounded once to a's dtype."""
    acc = a.double() @ b.double()
    return _epilogue_torch(acc, None if bias is None else bias.double(), activation).to(a.dtype)


def matmul_fp8_torch(a, b, a_scale, b_scale, bias=None, activation=None, out_dtype=torch.bfloat16):
    """The fp8 reference (given), in float64, rounded once to out_dtype."""
    acc = (a.double() @ b.double()) * (float(a_scale) * float(b_scale))
    return _epilogue_torch(acc, None if bias is None else bias.double(), activation).to(out_dtype)
