"""Matrix multiplication in Triton: tiles, tl.dot, grouped program order, autotuning, epilogues.

C (M x N) = A (M x K) @ B (K x N). Each program owns one BLOCK_M x BLOCK_N tile of C and walks
K in BLOCK_K steps: load a BLOCK_M x BLOCK_K tile of A and a BLOCK_K x BLOCK_N tile of B, and
`tl.dot` them into an fp32 accumulator (tensor cores: wgmma on the H100). Week 1's shared-memory
tiling by hand, with the staging through shared memory, the software pipelining (`num_stages`)
and the tensor-core layout chosen by the compiler.

* Grouped ordering. Programs that run at the same time should share inputs in L2. In row-major
  order (GROUP_M = 1) the ~130 concurrent programs cover one or two rows of C tiles: they share
  one A panel but each reads a different B panel, so all of B streams through L2 for every row
  of tiles. Grouping GROUP_M rows of tiles and walking down a column first makes concurrent
  programs form a roughly square patch: each loaded A and B panel is reused ~GROUP_M times.
* `@triton.autotune` times a few `triton.Config`s (tile shape, warps, pipeline stages) on the
  first call for each (M, N, K, dtype) and keeps the fastest: no single tile shape wins for
  every shape and GPU.
* Epilogue fusion: bias and activation are applied to the fp32 accumulator before the one
  store, instead of a second and third pass over C in memory.

Cost model: 2 * M * N * K FLOPs. Minimum traffic (M*K + K*N + M*N) * itemsize; at 4096^3 fp16
that is 100 MB for 137 GFLOP, ~1400 FLOPs per byte: compute-bound, so the yardstick is
TFLOP/s against torch.matmul (cuBLAS) in the same run.
"""
from __future__ import annotations

import torch

from course import runtime  # before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.bench import Benchmark
from course.check import random_tensor

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16)
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3}
INT32_MAX = 2**31 - 1


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    # Checked while compiling, so a bad config fails with this sentence, not an MLIR error.
    tl.static_assert(BLOCK_K >= 16, "tl.dot needs BLOCK_K >= 16")
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # Grouped ordering: consecutive pids fill a GROUP_M-tall column of tiles, then move right.
    # With GROUP_M = 1 this is plain row-major order.
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)  # the last group may be shorter
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # Rows/cols past M/N wrap around (% M) instead of being masked: the loads stay unmasked
    # and aligned, and the wrapped results are never stored.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        # K is the one dimension that must be masked: a wrapped K would add wrong products.
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)  # fp16/bf16 in, fp32 accumulate on the tensor cores
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Epilogue on the fp32 accumulator, while the tile is still in registers.
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_cn, mask=offs_cn < N, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    if ACTIVATION == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == 2:
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    elif ACTIVATION == 3:
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp(-2.0 * u))
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


# A small space (each config costs a compile and a timing run on first use of a shape). The
# large tiles feed the H100's wgmma well; the small ones win when M or N is small.
AUTOTUNE_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
]
SMALL_PROBLEM = 512 * 512  # C this small: tiles of 64 x 128 already give every SM work


def _prune_configs(configs, named_args, **kwargs):
    # Timing five configs costs five compiles (seconds each); for a small C, where the big
    # tiles would leave most SMs idle anyway, time only the smallest tile.
    if named_args["M"] * named_args["N"] <= SMALL_PROBLEM:
        return [min(configs, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]
    return configs


matmul_kernel_autotuned = triton.autotune(
    configs=AUTOTUNE_CONFIGS, key=["M", "N", "K", "HAS_BIAS", "ACTIVATION"],
    prune_configs_by={"early_config_prune": _prune_configs})(matmul_kernel)
# The interpreter cannot time configs (no device clock); it runs this small one instead.
SIM_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}


def _check(a, b, bias, activation, out):
    validate.tensor(a, "a", dtypes=DTYPES, ndim=2, contiguous=False)  # any strides: we pass them
    validate.tensor(b, "b", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.same_dtype(a=a, b=b)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} "
                         "(a's columns must equal b's rows)")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
    M, K = a.shape
    N = b.shape[1]
    if bias is not None:
        validate.tensor(bias, "bias", dtypes=DTYPES, ndim=1)
        validate.same_dtype(a=a, bias=bias)
        if bias.shape[0] != N:
            raise ValueError(f"bias has {bias.shape[0]} elements; expected N = {N} (one per column of c)")
    for name, t in (("a", a), ("b", b)):
        if max((s - 1) * st for s, st in zip(t.shape, t.stride())) > INT32_MAX:
            raise ValueError(f"{name} spans more than 2^31 elements: the kernel's offsets are int32")
    if out is None:
        out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    else:
        validate.tensor(out, "out", dtypes=(a.dtype,), ndim=2, contiguous=False)
        if tuple(out.shape) != (M, N):
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {(M, N)}")
    return M, N, K, out


def _launch(kernel, a, b, bias, activation, out, M, N, K, **config):
    if M == 0 or N == 0:
        return out
    if K == 0:
        # An empty sum is 0; the epilogue still applies. Not worth a kernel.
        acc = torch.zeros((M, N), dtype=torch.float32, device=a.device)
        out.copy_(_epilogue_torch(acc, bias, activation))
        return out
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    kernel[grid](a, b, out, bias if bias is not None else out, M, N, K,
                 a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
                 HAS_BIAS=bias is not None, ACTIVATION=ACTIVATIONS[activation], **config)
    return out


def matmul_fixed(a, b, bias=None, activation=None, out=None, *, block_m=128, block_n=256, block_k=64,
                 group_m=8, num_warps=8, num_stages=3):
    """The kernel with one hand-picked config: for experiments (GROUP_M = 1 vs 8, tile sizes)."""
    M, N, K, out = _check(a, b, bias, activation, out)
    for name, v in (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)):
        if not isinstance(v, int) or v < 16 or v & (v - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot's minimum), got {v!r}")
    if not isinstance(group_m, int) or group_m < 1:
        raise ValueError(f"group_m must be a positive int, got {group_m!r}")
    return _launch(matmul_kernel, a, b, bias, activation, out, M, N, K, BLOCK_M=block_m, BLOCK_N=block_n,
                   BLOCK_K=block_k, GROUP_M=group_m, num_warps=num_warps, num_stages=num_stages)


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """activation(a @ b + bias): fp16/bf16 in, fp32 accumulation, autotuned on the GPU.

    `activation` is None, "relu", "gelu" (exact erf) or "gelu_tanh"; `bias` has N elements.
    """
    M, N, K, out = _check(a, b, bias, activation, out)
    if runtime.on_gpu():
        return _launch(matmul_kernel_autotuned, a, b, bias, activation, out, M, N, K)
    return _launch(matmul_kernel, a, b, bias, activation, out, M, N, K, **SIM_CONFIG)


def _epilogue_torch(acc, bias, activation):
    if bias is not None:
        acc = acc + bias.to(acc.dtype)
    if activation == "relu":
        acc = torch.relu(acc)
    elif activation in ("gelu", "gelu_tanh"):
        acc = torch.nn.functional.gelu(acc, approximate="tanh" if activation == "gelu_tanh" else "none")
    return acc


def matmul_torch(a, b, bias=None, activation=None):
    """The reference, in float64: activation(a @ b + bias), rounded once to a's dtype."""
    acc = a.double() @ b.double()
    return _epilogue_torch(acc, None if bias is None else bias.double(), activation).to(a.dtype)


# ---------------------------------------------------------------------------------- benchmarks
def _inputs(size):
    M, N, K, dtype = size
    d = runtime.DEVICE
    return random_tensor((M, K), dtype, d), random_tensor((K, N), dtype, d, scale=max(K, 1) ** -0.5)


def _matmul_benchmark(dtype):
    short = str(dtype).replace("torch.", "")
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192), (5000, 3000, 4000), (4097, 4097, 4097)]
    return Benchmark(
        name=f"matmul_{short}",
        title=f"Matmul, {short} in, fp32 accumulate (Triton vs cuBLAS)",
        sizes=[(*s, dtype) for s in shapes],
        sim_sizes=[(64, 64, 64, torch.float16)],
        size_label=lambda s: f"{s[0]}x{s[1]}x{s[2]}",
        make_inputs=_inputs,
        variants={
            "torch": torch.matmul,
            "triton": matmul,
            "triton_ungrouped": lambda a, b: matmul_fixed(a, b, group_m=1),
        },
        headline=("triton",),
        bytes=lambda s: (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]) * 2,
        flops=lambda s: 2 * s[0] * s[1] * s[2],
        compute_dtype=dtype,
        notes="flops = 2 M N K; bytes = (MK + KN + MN) x 2, the minimum; triton_ungrouped is "
              "the 128x256x64 config with GROUP_M = 1 (row-major program order)",
    )


BENCHMARKS = [_matmul_benchmark(torch.float16), _matmul_benchmark(torch.bfloat16)]
