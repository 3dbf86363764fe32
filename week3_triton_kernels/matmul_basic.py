"""Matrix multiplication in Triton, the first two rungs: one program per tile of C, then the
order in which the programs visit the tiles.

C (M x N) = A (M x K) @ B (K x N), fp16 or bf16 in, fp32 accumulation, C in the inputs' dtype.

Rung 1, `matmul_plain_kernel` (launcher `matmul_plain`): program number p owns one BLOCK_M x
BLOCK_N tile of C, the tiles numbered in row-major order. It walks K in BLOCK_K steps: load a
BLOCK_M x BLOCK_K tile of A and a BLOCK_K x BLOCK_N tile of B, and `tl.dot` them into an fp32
accumulator (tensor cores: wgmma on an H100, mma on an A100). Loads are masked where a tile hangs
over the edge of A or B (M, N or K not a multiple of the block), with zeros, which add nothing to
a dot product; the one store is masked the same way. That is week 1's shared-memory tiling with
the staging through shared memory, the software pipeline (`num_stages`) and the tensor-core
layout left to the compiler.

Rung 2, `grouped_tile` + `matmul_grouped_kernel` (launcher `matmul_grouped`): the same kernel,
the tiles numbered differently. In row-major order the ~130 programs running at once on an H100
cover one or two rows of C tiles, so between them they read nearly every column panel of B, and
all of B streams through L2 again for every row of tiles. Numbering GROUP_M rows of tiles
column by column instead makes the programs in flight a squarer patch of C that reads each A
and B panel from L2 ~GROUP_M times. Diff the two kernels: two lines differ.

Both use fixed block sizes (128 x 128 x 32 tiles, 4 warps, 3 stages: 48 KB of pipeline buffers,
which fits every GPU since the T4). The rungs after these, in matmul.py: autotuned tile configs,
persistent programs, TMA tensor descriptors, a fused bias + activation epilogue; and fp8 in
matmul_fp8.py. `python -m course rung matmul_triton` lists the whole ladder and runs any rung by
its number.

Cost model: 2 * M * N * K FLOPs; at least (M*K + K*N + M*N) * 2 bytes moved: at 4096^3 that is
~1400 FLOPs per byte, compute-bound, so the yardstick is TFLOP/s against torch.matmul (cuBLAS).
"""
from __future__ import annotations

import torch

from course import runtime, validate
from course.gpu import tl, triton

DTYPES = (torch.float16, torch.bfloat16)
INT32_MAX = 2**31 - 1
# Rung 1's and rung 2's one config. BLOCK_K = 32 keeps 3 stages of A and B tiles at
# 3 x (128 + 128) x 32 x 2 bytes = 48 KB, under a T4's 64 KB of shared memory per block.
PLAIN_BLOCKS = {"block_m": 128, "block_n": 128, "block_k": 32}
PLAIN_LAUNCH = {"num_warps": 4, "num_stages": 3}


# -------------------------------------------------------------------------- rung 1: plain tiles
@triton.jit
def matmul_plain_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    # BEGIN EXERCISE: tile (pid_m, pid_n) of C in row-major order of program_id; offsets of its rows,
    #   columns and of one BLOCK_K step; a K loop that loads masked A and B tiles (zeros past M, N, K)
    #   and tl.dot's them into an fp32 accumulator; one masked store in c's dtype
    # HINT: Each program computes one BLOCK_M x BLOCK_N tile of C by walking K in BLOCK_K steps and summing
    #   tile products in fp32 (tl.dot uses the tensor cores).
    # HINT: pid_m = pid // tiles_per_row, pid_n = pid % tiles_per_row; pointer tiles a_ptrs[offs_m, offs_k]
    #   and b_ptrs[offs_k, offs_n] from the strides; in the loop load both with masks (other=0), tl.dot into
    #   acc, advance the pointers by BLOCK_K * stride.
    # HINT: The last K step may be short: mask with `offs_k < K - k * BLOCK_K` on both tiles, or it
    #   multiplies garbage; accumulate with `acc = tl.dot(a, b, acc)`.
    # Which tile: the grid of C tiles, numbered row by row.
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = tl.program_id(0) // num_pid_n
    pid_n = tl.program_id(0) % num_pid_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32: K products summed at full precision
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K  # the last step may be short: mask K too, or it adds wrong products
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)  # fp16/bf16 in, fp32 accumulate, on the tensor cores
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
    # END EXERCISE


# ------------------------------------------------------------------------ rung 2: grouped order
# grouped_tile: which (pid_m, pid_n) tile program `tile_id` computes, in grouped order; public,
# as every tiled matmul of the course (matmul.py's, week 5's LoRA and NF4 GEMMs) orders its tiles
# this way.
@triton.jit
def grouped_tile(tile_id, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # BEGIN EXERCISE: grouped ordering: (pid_m, pid_n) of tile number tile_id, consecutive ids filling a
    #   GROUP_M-tall column of tiles before moving right (the last group may be shorter), so concurrently
    #   running programs share A's rows and B's columns in L2
    # HINT: Programs that run at the same time should reuse the same rows of A and columns of B so they stay
    #   in L2: number the tiles down a band of GROUP_M tile rows before moving to the next column.
    # HINT: Compute tiles per group (GROUP_M * tiles across N), the group of tile_id and its first tile row,
    #   the group's real height (the last group may be short), then pid_m from the remainder modulo that
    #   height and pid_n from its quotient.
    # HINT: `group_size_m = min(num_pid_m - first_pid_m, GROUP_M)`; `pid_m = first_pid_m + (tile_id %
    #   num_pid_in_group) % group_size_m`.
    # Grouped ordering: consecutive tile ids fill a GROUP_M-tall column of tiles, then move
    # right. With GROUP_M = 1 this is plain row-major order.
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)  # the last group may be shorter
    pid_m = first_pid_m + ((tile_id % num_pid_in_group) % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n
    # END EXERCISE


@triton.jit
def matmul_grouped_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                          stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # BEGIN EXERCISE: matmul_plain_kernel with the tile of program_id from grouped_tile
    # HINT: Only the tile order changes: the body of matmul_plain_kernel, with (pid_m, pid_n) taken from
    #   grouped_tile instead of plain division.
    # HINT: Copy the plain kernel's offsets, K loop and masked store; replace the two pid lines with one
    #   call.
    # HINT: `pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)`
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)  # the one change
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
    # END EXERCISE


# ------------------------------------------------------------------------------ launchers
def check_operands(a, b, out, *, dtypes=DTYPES, out_dtype=None):
    """(M, N, K, out) for C = a @ b after checking a, b (2-D, `dtypes`, the same dtype, inner
    dimensions equal, any strides) and `out` (M x N in out_dtype, default a's; allocated when None).

    The kernels compute offsets in int32 (rows * stride + cols * stride): every operand, `out`
    included, must span less than 2^31 elements. Raises TypeError / ValueError naming the argument.
    """
    validate.tensor(a, "a", dtypes=dtypes, ndim=2, contiguous=False)  # any strides: we pass them
    validate.tensor(b, "b", dtypes=dtypes, ndim=2, contiguous=False)
    runtime.require_bf16_tensor_cores(a.dtype, "the Triton matmul (tl.dot)")  # before launch: a T4 refuses bf16
    validate.same_dtype(a=a, b=b)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} "
                         "(a's columns must equal b's rows)")
    out_dtype = out_dtype or a.dtype
    M, K = a.shape
    N = b.shape[1]
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype, device=a.device)
    else:
        validate.tensor(out, "out", dtypes=(out_dtype,), ndim=2, contiguous=False)
        if tuple(out.shape) != (M, N):
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {(M, N)}")
    for name, t in (("a", a), ("b", b), ("out", out)):
        if t.numel() and sum((s - 1) * st for s, st in zip(t.shape, t.stride())) > INT32_MAX:
            raise ValueError(f"{name} spans more than 2^31 elements (strides {t.stride()}, shape "
                             f"{tuple(t.shape)}): the kernel's offsets are int32")
    return M, N, K, out


def check_blocks(block_m, block_n, block_k, group_m=1):
    """Block sizes must be powers of two >= 16 (tl.arange needs powers of two, tl.dot 16 at least)."""
    for name, v in (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 16 or v & (v - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot's minimum), got {v!r}")
    if not isinstance(group_m, int) or isinstance(group_m, bool) or group_m < 1:
        raise ValueError(f"group_m must be a positive int, got {group_m!r}")


def _launch(kernel, a, b, out, M, N, K, blocks, **meta):
    if M == 0 or N == 0:
        return out  # nothing to compute (and a grid of zero programs is an invalid launch)
    if K == 0:
        return out.zero_()  # an empty sum
    block_m, block_n, block_k = blocks["block_m"], blocks["block_n"], blocks["block_k"]
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)  # one program per tile of C
    kernel[grid](a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 out.stride(0), out.stride(1), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                 **meta, **PLAIN_LAUNCH)
    return out


def matmul_plain(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *,
                 block_m: int = PLAIN_BLOCKS["block_m"], block_n: int = PLAIN_BLOCKS["block_n"],
                 block_k: int = PLAIN_BLOCKS["block_k"]) -> torch.Tensor:
    """a @ b (fp16/bf16, any strides) with rung 1's kernel: one program per tile, row-major order."""
    M, N, K, out = check_operands(a, b, out)
    check_blocks(block_m, block_n, block_k)
    return _launch(matmul_plain_kernel, a, b, out, M, N, K,
                   {"block_m": block_m, "block_n": block_n, "block_k": block_k})


def matmul_grouped(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *, group_m: int = 8,
                   block_m: int = PLAIN_BLOCKS["block_m"], block_n: int = PLAIN_BLOCKS["block_n"],
                   block_k: int = PLAIN_BLOCKS["block_k"]) -> torch.Tensor:
    """a @ b with rung 2's kernel: rung 1 with the tiles in grouped order (GROUP_M rows of tiles)."""
    M, N, K, out = check_operands(a, b, out)
    check_blocks(block_m, block_n, block_k, group_m)
    return _launch(matmul_grouped_kernel, a, b, out, M, N, K,
                   {"block_m": block_m, "block_n": block_n, "block_k": block_k}, GROUP_M=group_m)

