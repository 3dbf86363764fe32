"""Matrix multiplication in Triton, the production kernels: autotuned configs (rung 3),
persistent programs (rung 4), TMA tensor descriptors (rung 5) and a fused epilogue (rung 6).

Read matmul_basic.py first: rung 1 is a plain tiled `tl.dot` kernel, one program per tile of C;
rung 2 the same with the tiles in grouped order (`grouped_tile`, imported from there). fp8, the
last rung, is matmul_fp8.py (it runs these kernels with their HAS_SCALE and FP8_PRECISE switches
on). Benchmarks, the config sweep and the ladder's command line: matmul_bench.py. Over 500 lines:
three kernels sharing their tile code (`_tile_product`, `_epilogue`, `_finish_tile`), their tuning, launchers.

* Rung 3, `matmul_kernel` (`matmul_tiled`): rung 2's kernel, tuned. `@triton.autotune` times a few
  `triton.Config`s (tile shape, warps, pipeline stages) on the first call for each (M, N, K,
  dtype, epilogue) and keeps the fastest; `_prune_configs` drops configs that do not fit the
  GPU's shared memory and, for small problems, all but the smallest tile. On the GPU that ran
  `matmul_bench --sweep`, the launchers skip the autotuner and use the fastest config the sweep
  measured for the shape (results/tuned_matmul.json; `tuned_config`). Rows and columns
  past the edge wrap around (% a_rows, % b_cols) instead of being masked, so the loads stay
  unmasked and vectorised; only K is masked.
* Rung 4, `matmul_persistent_kernel`: as many programs as SMs, each looping over tiles (same
  grouped order). The grid is one wave: no tail of a half-empty last wave, one launch's set-up
  per SM, and with `flatten=True` the compiler may start loading tile i+1 while tile i's epilogue
  runs.
* Rung 5, `matmul_tma_kernel`: the persistent kernel with A and B read through tensor descriptors
  (`TensorDescriptor`): the Hopper TMA engine copies whole tiles from HBM to shared memory, with
  no address arithmetic or masks in the threads (out-of-bounds parts of a tile are filled with
  zeros). C goes back the same way when `out` allows it (row-major, rows on 16-byte boundaries):
  the tile is staged in shared memory and the TMA engine writes it in whole rows
  (`_finish_tile_tma`); otherwise through masked stores. Needs compute capability >= 9.0 (H100);
  the Triton interpreter emulates it.
* Rung 6, the fused epilogue (`_epilogue`): bias and activation (relu, gelu, gelu_tanh, silu)
  applied to the fp32 accumulator before the one store, instead of more passes over C in memory.
  Every kernel here runs it, before a masked store (`_finish_tile`) or a TMA store.

Entry points (all return C and accept `out=`; a, b any strides, the same dtype, fp16 or bf16):
    matmul(a, b, bias=None, activation=None, out=None, *, pad_strides=True)   the fastest of:
    matmul_tiled(a, b, bias=None, activation=None, out=None, *, pad_strides=True)   rung 3
    matmul_persistent(a, b, bias=None, activation=None, out=None, *, pad_strides=True)   rung 4
    matmul_tma(a, b, bias=None, activation=None, out=None)                    rung 5, sm_90+
    matmul_fixed(a, b, ..., block_m=128, block_n=256, block_k=64, group_m=8, ...)   one config

Odd strides: Triton proves 16-byte alignment from integer arguments that are multiples of 16
(it compiles a kernel variant for them), and only then loads 8 fp16 values per instruction.
A row stride of 3000 or 4097 elements defeats that and the kernel falls to 2-byte loads, ~5x
slower. Yet 3000 fp16 elements are 6000 bytes, a multiple of 16: every row of such a tensor
still starts on a 16-byte boundary; only the compiler cannot see it. Where a, b and out all
have such rows (`row_align`), the launcher says so (ROW_ALIGN, a compile-time argument) and the
kernels tell the compiler (`_multiple_of`): vector loads and stores, no copy. Where a stride
really is misaligned (4097 elements), `pad_strides=True` copies the operand into a buffer whose
row stride is padded to a multiple of 16 elements (K padded with zeros, which add nothing to
the dot products): one read and one write of the operand, small beside the ~5x it saves.
pad_strides=False runs the kernels on the operands as they are, told only what is true. The TMA
engine needs exactly the 16-byte rule: `matmul_tma` reads B in place, and `matmul` takes the TMA
kernel wherever the sweep found it fastest (results/tuned_matmul.json).

Cost model: 2 * M * N * K FLOPs. Minimum traffic (M*K + K*N + M*N) * itemsize; at 4096^3 fp16
that is 100 MB for 137 GFLOP, ~1400 FLOPs per byte: compute-bound, so the yardstick is
TFLOP/s against torch.matmul (cuBLAS) and torch._scaled_mm (fp8) in the same run.
"""
from __future__ import annotations

import math

import torch

from course import runtime  # before triton: chooses the GPU or the Triton interpreter
from course import tuning, validate, versions

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from week3_triton_kernels.matmul_basic import DTYPES, check_blocks, check_operands, grouped_tile  # noqa: E402

ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
# Triton specialises an integer argument divisible by 16 (and a pointer aligned to 16 bytes):
# only then can it prove that a row starts on a 16-byte boundary and use vector loads.
ALIGN = 16


# ---------------------------------------------------------------------------- device helpers
# The tile code every kernel here shares (grouped_tile, rung 2's tile order, comes from matmul_basic).
@triton.jit
def _dot(a, b, acc, FP8_PRECISE: tl.constexpr, BLOCK_K: tl.constexpr):
    # BEGIN EXERCISE: acc + a @ b with tl.dot (fp32 accumulation); with FP8_PRECISE pass
    #   max_num_imprecise_acc=BLOCK_K (the fp8 tensor cores' partial sums are promoted every BLOCK_K)
    # HINT: tl.dot already accumulates into the fp32 acc you pass; fp8 on Hopper needs one extra argument so
    #   partial sums are promoted to true fp32 every BLOCK_K.
    # HINT: A constexpr `if FP8_PRECISE:` with two tl.dot calls that differ only in a keyword; return acc.
    # HINT: `tl.dot(a, b, acc, max_num_imprecise_acc=BLOCK_K)`
    if FP8_PRECISE:
        # Hopper's fp8 wgmma keeps its running sum in reduced precision; max_num_imprecise_acc
        # = BLOCK_K makes Triton add each BLOCK_K-long partial product into a separate fp32
        # accumulator with ordinary FADDs (the "promotion" of DeepSeek-V3, sec. 3.3.2).
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=BLOCK_K)
    else:
        acc = tl.dot(a, b, acc)  # fp16/bf16/fp8 in, fp32 accumulate on the tensor cores
    return acc
    # END EXERCISE


@triton.jit
def _tile_product(a_ptr, b_ptr, pid_m, pid_n, K, a_rows, b_cols,
                  stride_am, stride_ak, stride_bk, stride_bn, FP8_PRECISE: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # BEGIN EXERCISE: the fp32 BLOCK_M x BLOCK_N tile (pid_m, pid_n) of A @ B: row offsets % a_rows and
    #   column offsets % b_cols (wrap instead of mask: the loads stay unmasked, the wrapped results are
    #   never stored); loop over K in BLOCK_K steps masking K only; accumulate with _dot
    # HINT: The K loop of matmul_basic, with one trick: instead of masking rows past M and columns past N,
    #   wrap their offsets with %, so the loads need no M/N mask; those results are simply never stored.
    # HINT: offs_am = (pid_m * BLOCK_M + arange) % a_rows, offs_bn likewise % b_cols; pointer tiles from the
    #   strides; in the loop mask only K (offs_k < K - k * BLOCK_K, other=0), call _dot, advance pointers.
    # HINT: K must stay masked: a wrapped K index would add real but wrong products into the sum.
    # Rows/cols past the end wrap around (% a_rows, % b_cols) instead of being masked: the loads
    # stay unmasked and aligned, and the wrapped results are never stored. When a_rows / b_cols
    # are multiples of 16 the compiler can still prove that runs of 16 offsets are contiguous.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % a_rows
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % b_cols
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        # K is the one dimension that must be masked: a wrapped K would add wrong products.
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = _dot(a, b, acc, FP8_PRECISE, BLOCK_K)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc
    # END EXERCISE


@triton.jit
def _epilogue(acc, bias_ptr, a_scale_ptr, b_scale_ptr, offs_cn, N, HAS_BIAS: tl.constexpr,
              HAS_SCALE: tl.constexpr, ACTIVATION: tl.constexpr):
    # BEGIN EXERCISE: the epilogue on the fp32 tile still in registers (columns offs_cn): * a_scale * b_scale
    #   (HAS_SCALE), + bias (masked to N), the ACTIVATION (relu must keep NaN: tl.maximum(...,
    #   propagate_nan=tl.PropagateNan.ALL)); returns the fp32 tile
    # HINT: Everything after the K loop happens on the fp32 tile while it is still in registers: scaling,
    #   bias, activation, so C is written exactly once.
    # HINT: Constexpr ifs in order: HAS_SCALE multiplies by the two loaded scales; HAS_BIAS loads
    #   bias[offs_cn] masked to N (fp32) and adds bias[None, :]; ACTIVATION 1..4 = relu, exact gelu, tanh
    #   gelu, silu.
    # HINT: relu must keep NaN like torch: `tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)`; silu
    #   is `acc / (1.0 + tl.exp(-acc))`.
    # Epilogue on the fp32 accumulator, while the tile is still in registers; the caller stores it.
    if HAS_SCALE:  # fp8: the operands were stored divided by their scales
        acc = acc * (tl.load(a_scale_ptr) * tl.load(b_scale_ptr))
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_cn, mask=offs_cn < N, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    if ACTIVATION == 1:
        # propagate_nan: max(NaN, 0) is 0 in hardware (fmax), NaN in torch.relu.
        acc = tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)
    elif ACTIVATION == 2:
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    elif ACTIVATION == 3:
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp(-2.0 * u))  # 0.5 h (1 + tanh u) = h * sigmoid(2u)
    elif ACTIVATION == 4:
        acc = acc / (1.0 + tl.exp(-acc))  # silu(h) = h * sigmoid(h)
    return acc
    # END EXERCISE


@triton.jit
def _finish_tile(acc, c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, pid_m, pid_n, M, N,
                 stride_cm, stride_cn, HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr,
                 ACTIVATION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # BEGIN EXERCISE: tile (pid_m, pid_n) of C: _epilogue, then one masked store in c's dtype
    # HINT: The tile's rows and columns, the epilogue, and a masked store: the only place M and N edges are
    #   masked.
    # HINT: offs_cm and offs_cn from pid_m/pid_n and the block sizes; call _epilogue; pointers from
    #   stride_cm/stride_cn; 2-D mask on both; cast to c_ptr.dtype.element_ty on store.
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _epilogue(acc, bias_ptr, a_scale_ptr, b_scale_ptr, offs_cn, N, HAS_BIAS, HAS_SCALE, ACTIVATION)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
    # END EXERCISE


@triton.jit
def _finish_tile_tma(acc, c_desc, bias_ptr, a_scale_ptr, b_scale_ptr, pid_m, pid_n, N,
                     HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr, ACTIVATION: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr):
    # BEGIN EXERCISE: tile (pid_m, pid_n) of C through the TMA engine: _epilogue, then c_desc.store([row, col],
    #   tile in c_desc.dtype), no mask; EPILOGUE_SUBTILE: as two BLOCK_N / 2 halves (tl.reshape, tl.permute,
    #   tl.split)
    # HINT: The TMA store needs no mask: the descriptor knows C's shape and clips. You only give the tile's
    #   top-left corner and a tile in the descriptor's dtype.
    # HINT: Columns offs_cn for the bias, _epilogue, then either one c_desc.store([row, col], ...) or, with
    #   EPILOGUE_SUBTILE, split the tile into two column halves and store each at col and col + BLOCK_N //
    #   2.
    # HINT: The split: reshape to (BLOCK_M, 2, BLOCK_N // 2), permute to (0, 2, 1) so the size-2 axis is
    #   last, then `left, right = tl.split(...)`.
    # The same epilogue, then the tile goes to shared memory and the TMA engine copies it to C in
    # whole 16-byte rows, where the masked store above wrote each row in pieces whenever Triton
    # could not prove that C's rows start on 16-byte boundaries. No mask: a TMA store clips at the
    # tensor's bounds (the descriptor holds C's shape), so the ragged edge tiles need none.
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _epilogue(acc, bias_ptr, a_scale_ptr, b_scale_ptr, offs_cn, N, HAS_BIAS, HAS_SCALE, ACTIVATION)
    row, col = pid_m * BLOCK_M, pid_n * BLOCK_N
    if EPILOGUE_SUBTILE:
        # Two stores of BLOCK_M x BLOCK_N / 2 each: the staging buffer in shared memory is half
        # the tile, which leaves room for one more pipeline stage of A and B.
        halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c_desc.store([row, col], left.to(c_desc.dtype))
        c_desc.store([row, col + BLOCK_N // 2], right.to(c_desc.dtype))
    else:
        c_desc.store([row, col], acc.to(c_desc.dtype))
    # END EXERCISE


@triton.jit
def _multiple_of(x, MULTIPLE: tl.constexpr):
    """x, with the compiler told that it is a multiple of MULTIPLE (the caller's promise).

    tl.multiple_of(x, MULTIPLE) is the usual spelling, but on a kernel's integer *argument* Triton
    drops the hint (it sticks only to values computed in the kernel). x // MULTIPLE * MULTIPLE is x
    itself when the promise holds, and a product of MULTIPLE is a multiple of it as far as the
    compiler's alignment analysis can see.
    """
    return x // MULTIPLE * MULTIPLE


# ----------------------------------------------------------------------------------- kernels
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, M, N, K, a_rows, b_cols,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr, ACTIVATION: tl.constexpr,
                  FP8_PRECISE: tl.constexpr, ROW_ALIGN: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # ROW_ALIGN > 1 is the launcher's promise (`row_align`) that A, B and C are row-major with every
    # row starting on a 16-byte boundary: K, N, b_cols and the row strides are multiples of ROW_ALIGN
    # elements. Triton sees that for itself only in numbers divisible by 16; told here, it loads and
    # stores 16-byte vectors along the rows at N = 3000 too (no padded copy of B needed).
    if ROW_ALIGN > 1:  # (a compile-time branch: ROW_ALIGN = 1 compiles exactly as before)
        K, N, b_cols = _multiple_of(K, ROW_ALIGN), _multiple_of(N, ROW_ALIGN), _multiple_of(b_cols, ROW_ALIGN)
        stride_am, stride_bk = _multiple_of(stride_am, ROW_ALIGN), _multiple_of(stride_bk, ROW_ALIGN)
        stride_cm = _multiple_of(stride_cm, ROW_ALIGN)
    # BEGIN EXERCISE: one program per tile: grouped_tile(program_id), _tile_product, _finish_tile
    # HINT: One program, one tile: the three helpers above compose into the whole kernel.
    # HINT: Assert BLOCK_K >= 16 at compile time, get (pid_m, pid_n) from grouped_tile on the program id,
    #   compute the tile with _tile_product, hand it to _finish_tile.
    # Checked while compiling, so a bad config fails with this sentence, not an MLIR error.
    tl.static_assert(BLOCK_K >= 16, "tl.dot needs BLOCK_K >= 16")
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = _tile_product(a_ptr, b_ptr, pid_m, pid_n, K, a_rows, b_cols, stride_am, stride_ak,
                        stride_bk, stride_bn, FP8_PRECISE, BLOCK_M, BLOCK_N, BLOCK_K)
    _finish_tile(acc, c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, pid_m, pid_n, M, N, stride_cm,
                 stride_cn, HAS_BIAS, HAS_SCALE, ACTIVATION, BLOCK_M, BLOCK_N)
    # END EXERCISE


@triton.jit
def matmul_persistent_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, M, N, K,
                             a_rows, b_cols, stride_am, stride_ak, stride_bk, stride_bn,
                             stride_cm, stride_cn, HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr,
                             ACTIVATION: tl.constexpr, FP8_PRECISE: tl.constexpr, ROW_ALIGN: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr, FLATTEN: tl.constexpr):
    # ROW_ALIGN > 1: the launcher's promise of 16-byte aligned rows, passed on as in matmul_kernel.
    if ROW_ALIGN > 1:  # (a compile-time branch: ROW_ALIGN = 1 compiles exactly as before)
        K, N, b_cols = _multiple_of(K, ROW_ALIGN), _multiple_of(N, ROW_ALIGN), _multiple_of(b_cols, ROW_ALIGN)
        stride_am, stride_bk = _multiple_of(stride_am, ROW_ALIGN), _multiple_of(stride_bk, ROW_ALIGN)
        stride_cm = _multiple_of(stride_cm, ROW_ALIGN)
    # BEGIN EXERCISE: persistent: NUM_PROGRAMS programs, each looping over tiles tile_id = program_id,
    #   + NUM_PROGRAMS, ... (tl.range(..., flatten=FLATTEN)); per tile as matmul_kernel
    # HINT: A persistent kernel launches about one program per SM and loops over tiles, saving launch waves
    #   and letting the pipeline run across tile boundaries.
    # HINT: num_tiles = cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N); a tl.range loop from the program id with step
    #   NUM_PROGRAMS and flatten=FLATTEN; matmul_kernel's three calls inside.
    # HINT: `for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=FLATTEN):`
    tl.static_assert(BLOCK_K >= 16, "tl.dot needs BLOCK_K >= 16")
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    # NUM_PROGRAMS programs (one per SM, or a few per SM); program p computes tiles p,
    # p + NUM_PROGRAMS, ... in grouped order, so the tiles in flight at any moment are still a
    # compact patch of C (L2 reuse as before).
    # flatten=True merges this loop with the K loop inside, so the software pipeline keeps
    # loading (the next tile's first K steps) across the boundary between tiles.
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=FLATTEN):
        pid_m, pid_n = grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _tile_product(a_ptr, b_ptr, pid_m, pid_n, K, a_rows, b_cols, stride_am, stride_ak,
                            stride_bk, stride_bn, FP8_PRECISE, BLOCK_M, BLOCK_N, BLOCK_K)
        _finish_tile(acc, c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, pid_m, pid_n, M, N, stride_cm,
                     stride_cn, HAS_BIAS, HAS_SCALE, ACTIVATION, BLOCK_M, BLOCK_N)
    # END EXERCISE


@triton.jit
def matmul_tma_kernel(a_desc, b_desc, c_desc, c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, M, N, K,
                      stride_cm, stride_cn, HAS_BIAS: tl.constexpr, HAS_SCALE: tl.constexpr,
                      ACTIVATION: tl.constexpr, FP8_PRECISE: tl.constexpr, B_KMAJOR: tl.constexpr,
                      C_TMA: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr, FLATTEN: tl.constexpr,
                      EPILOGUE_SUBTILE: tl.constexpr = False):
    # BEGIN EXERCISE: the persistent loop of matmul_persistent_kernel, loading tiles through tensor
    #   descriptors: a_desc.load([row, col]) and b_desc.load(...) (B_KMAJOR: b_desc walks the (N, K)
    #   storage: use the loaded tile transposed, .T); C_TMA: store with _finish_tile_tma, else _finish_tile
    # HINT: Same persistent loop, but operand tiles arrive by TMA: a descriptor load takes only tile
    #   coordinates, zero-fills out-of-bounds parts, and needs no pointer arithmetic or masks.
    # HINT: Inside the tile loop: fp32 acc of zeros, a K loop loading a at [pid_m * BLOCK_M, k * BLOCK_K]
    #   and b at its coordinates, _dot; then _finish_tile_tma if C_TMA else _finish_tile.
    # HINT: B_KMAJOR means b_desc describes the (N, K) weight: `b = b_desc.load([pid_n * BLOCK_N, k *
    #   BLOCK_K]).T`.
    tl.static_assert(BLOCK_K >= 16, "tl.dot needs BLOCK_K >= 16")
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=FLATTEN):
        pid_m, pid_n = grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            # One TMA copy per operand tile: the descriptor knows the shape and strides, so
            # a tile hanging over M, N or K arrives zero-filled, and no thread computes an
            # address. The copy lands in shared memory in the layout wgmma reads.
            a = a_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
            if B_KMAJOR:  # b is w.t() of an (N, K) row-major w: load w's tile, use it transposed
                b = b_desc.load([pid_n * BLOCK_N, k * BLOCK_K]).T
            else:
                b = b_desc.load([k * BLOCK_K, pid_n * BLOCK_N])
            acc = _dot(a, b, acc, FP8_PRECISE, BLOCK_K)
        if C_TMA:  # `out` is row-major with 16-byte aligned rows: C leaves through the TMA engine too
            _finish_tile_tma(acc, c_desc, bias_ptr, a_scale_ptr, b_scale_ptr, pid_m, pid_n, N, HAS_BIAS,
                             HAS_SCALE, ACTIVATION, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)
        else:  # any other `out` (a column slice with an odd stride, say): ordinary masked stores
            _finish_tile(acc, c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, pid_m, pid_n, M, N, stride_cm,
                         stride_cn, HAS_BIAS, HAS_SCALE, ACTIVATION, BLOCK_M, BLOCK_N)
    # END EXERCISE


# ------------------------------------------------------------------------------ autotuning
def tile_config(bm, bn, bk, stages, warps, group_m=8, **extra):
    """A triton.Config of a tiled matmul: BLOCK_M x BLOCK_N x BLOCK_K tiles, GROUP_M, stages, warps."""
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m, **extra},
                         num_stages=stages, num_warps=warps)


# Small spaces (each config costs a compile and a timing run on first use of a shape). The
# large tiles feed the H100's wgmma well; the small ones win when M or N is small.
AUTOTUNE_CONFIGS = [
    tile_config(128, 256, 64, 3, 8),
    tile_config(256, 128, 64, 3, 8),
    tile_config(128, 128, 64, 4, 8),
    tile_config(128, 128, 64, 4, 4),
    tile_config(64, 128, 64, 4, 4),
]
PERSISTENT_CONFIGS = [
    tile_config(128, 256, 64, 3, 8, FLATTEN=True),
    tile_config(128, 256, 64, 4, 8, FLATTEN=True),
    tile_config(128, 128, 64, 4, 8, FLATTEN=True),
    tile_config(128, 128, 64, 4, 4, FLATTEN=True),
    tile_config(64, 128, 64, 4, 4, FLATTEN=True),
]
SMALL_PROBLEM = 512 * 512  # C this small: tiles of 64 x 128 already give every SM work


def shared_memory_bytes(config, itemsize: int, c_itemsize: int = 0) -> int:
    """Bytes of shared memory a config takes: its pipeline buffers, stages x (BLOCK_M + BLOCK_N) x
    BLOCK_K x itemsize, plus, when C leaves through a TMA store (c_itemsize: C's element size, 0
    for ordinary stores), the staging buffer of one C tile (half a tile with EPILOGUE_SUBTILE)."""
    kw = config.kwargs
    staging = kw["BLOCK_M"] * kw["BLOCK_N"] * c_itemsize // (2 if kw.get("EPILOGUE_SUBTILE") else 1)
    return config.num_stages * (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * itemsize + staging


def _prune_configs(configs, named_args, **kwargs):
    # Each config is a compile (seconds). Drop those whose buffers cannot fit the GPU's shared
    # memory (a T4 has 64 KB per block, an H100 227 KB); for a small C, where big tiles would leave
    # most SMs idle anyway, time only the smallest tile.
    operand = named_args.get("a_ptr", named_args.get("a_desc"))
    itemsize = (operand.base if isinstance(operand, TensorDescriptor) else operand).element_size()
    c_desc = named_args.get("c_desc")  # the TMA kernel storing through a descriptor: count its staging
    c_itemsize = c_desc.base.element_size() if c_desc is not None else 0
    size = lambda c: shared_memory_bytes(c, itemsize, c_itemsize)  # noqa: E731
    limit = runtime.shared_memory_per_block()
    fitting = [c for c in configs if size(c) <= limit]
    fitting = fitting or [min(configs, key=size)]
    if named_args["M"] * named_args["N"] <= SMALL_PROBLEM:
        return [min(fitting, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]
    return fitting


def c_block_shape(bm: int, bn: int, epilogue_subtile: bool = False) -> list[int]:
    """The block shape of C's descriptor: the tile, or half of it along N with EPILOGUE_SUBTILE."""
    return [bm, bn // 2 if epilogue_subtile else bn]


def _tma_block_shapes(nargs):
    # A descriptor's block shape is part of its type: set it from the config being launched.
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk] if nargs["B_KMAJOR"] else [bk, bn]
    if nargs.get("c_desc") is not None:
        nargs["c_desc"].block_shape = c_block_shape(bm, bn, nargs.get("EPILOGUE_SUBTILE", False))


def with_tma_block_shapes(configs):
    """The configs, each setting the TMA descriptors' block shapes before its launch (a pre_hook)."""
    return [triton.Config(dict(c.kwargs), num_warps=c.num_warps, num_stages=c.num_stages,
                          pre_hook=_tma_block_shapes) for c in configs]


# The autotuners' keys: a best config is kept per value of each. ROW_ALIGN (the pointer kernels'
# promise of aligned rows) and C_TMA (the TMA kernel's store, whose staging buffer takes shared
# memory) change which configs fit and win.
KEY = ["M", "N", "K", "HAS_BIAS", "HAS_SCALE", "ACTIVATION", "FP8_PRECISE"]
POINTER_KEY = KEY + ["ROW_ALIGN"]
TMA_KEY = KEY + ["B_KMAJOR", "C_TMA"]
PRUNE = {"early_config_prune": _prune_configs}
matmul_kernel_autotuned = triton.autotune(configs=AUTOTUNE_CONFIGS, key=POINTER_KEY,
                                          prune_configs_by=PRUNE)(matmul_kernel)
matmul_persistent_autotuned = triton.autotune(configs=PERSISTENT_CONFIGS, key=POINTER_KEY,
                                              prune_configs_by=PRUNE)(matmul_persistent_kernel)
matmul_tma_autotuned = triton.autotune(configs=with_tma_block_shapes(PERSISTENT_CONFIGS), key=TMA_KEY,
                                       prune_configs_by=PRUNE)(matmul_tma_kernel)
# The interpreter cannot time configs (no device clock); it runs this small one instead.
SIM_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}


# ---------------------------------------------------------------------------- tuned configs
# `python -m week3_triton_kernels.matmul_bench --sweep` (GPU) times a wide set of candidate
# configs of every kernel at the benchmark shapes and writes the fastest to
# results/tuned_matmul.json, beside the GPU, versions and date (course/tuning.py). A key is
# [M, N, K, dtype name, kind]: kind "tiled", "persistent" or "tma" holds the fastest config of
# that kernel, "best" the fastest of all (its config names its "kind"). The table is used only on
# the GPU that measured it; elsewhere, and for shapes far from every swept one, the autotuner
# (a few configs timed on first use) decides as before.
RESULTS = tuning.results_folder(__file__)
TUNED_KINDS = ("best", "tiled", "persistent", "tma")
_tuned: dict | None = None


def tuned_table() -> dict:
    """{(M, N, K, dtype name, kind): config} from results/tuned_matmul.json on its GPU, else {}."""
    global _tuned
    if _tuned is None:
        _tuned = tuning.load(RESULTS, "matmul")
    return _tuned


def _shape_class(dims) -> tuple:
    # Which dimensions are multiples of 16 decides which operands get the padded copy and
    # which loads are vectorised: a config tuned for 4096^3 says little about 4097^3.
    return tuple(d % ALIGN == 0 for d in dims)


def tuned_config(M: int, N: int, K: int, dtype, kind: str = "best", table: dict | None = None) -> dict | None:
    """The swept config for this problem: the entry of exactly (M, N, K, dtype), else that of the
    nearest swept shape of the same class (same dimensions multiples of 16, every dimension within
    2x: sum of |log2| ratios smallest), else None. A copy: callers may pop from it."""
    if kind not in TUNED_KINDS:
        raise ValueError(f"kind must be one of {TUNED_KINDS}, got {kind!r}")
    table = tuned_table() if table is None else table
    name = str(dtype).replace("torch.", "")
    exact = table.get((M, N, K, name, kind))
    if exact is not None:
        return dict(exact)
    if min(M, N, K) <= 0:
        return None
    nearest, distance = None, math.inf
    for (m, n, k, entry_dtype, entry_kind), config in table.items():
        if entry_dtype != name or entry_kind != kind or _shape_class((m, n, k)) != _shape_class((M, N, K)):
            continue
        logs = [abs(math.log2(want / have)) for want, have in zip((M, N, K), (m, n, k))]
        if max(logs) <= 1 and sum(logs) < distance:
            nearest, distance = config, sum(logs)
    return dict(nearest) if nearest is not None else None


# ------------------------------------------------------------------------- input handling
def check_args(a, b, bias, activation, out, *, dtypes=DTYPES, out_dtype=None):
    """(M, N, K, out) after `check_operands` (a, b, out: matmul_basic) and the epilogue's arguments:
    `activation` one of ACTIVATIONS, `bias` N elements in out's dtype."""
    M, N, K, out = check_operands(a, b, out, dtypes=dtypes, out_dtype=out_dtype)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, got {activation!r}")
    if bias is not None:
        validate.tensor(bias, "bias", dtypes=(out.dtype,), ndim=1)
        if bias.shape[0] != N:
            raise ValueError(f"bias has {bias.shape[0]} elements; expected N = {N} (one per column of c)")
    return M, N, K, out


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _aligned(t: torch.Tensor, row_major: bool) -> bool:
    """Rows (row_major) or columns start on 16-element boundaries and the base is 16-byte aligned."""
    inner, outer = (1, 0) if row_major else (0, 1)
    return (t.stride(inner) == 1 and (t.stride(outer) % ALIGN == 0 or t.shape[outer] == 1)
            and t.data_ptr() % 16 == 0)


def rows_16_byte_aligned(t: torch.Tensor) -> bool:
    """t (2-D) is row-major and every row starts on a 16-byte boundary: columns contiguous, the
    row stride a multiple of 16 bytes (8 fp16 elements) and the base 16-byte aligned. That is what
    the TMA engine needs of a tensor it reads or writes, and what lets the pointer kernels move
    16-byte vectors along the rows once told (ROW_ALIGN)."""
    return t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0


def row_align(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> int:
    """The pointer kernels' ROW_ALIGN: 16 bytes in elements (8 for fp16) when a, b and out, of one
    dtype, all have 16-byte aligned rows (`rows_16_byte_aligned`) and K and N are multiples of it
    (no row ends inside a vector); else 1, nothing promised. Such operands need no padded copy:
    at 5000 x 3000 x 4000 B's row stride of 3000 elements is 6000 bytes, a multiple of 16."""
    step = 16 // a.element_size()
    same_dtype = a.dtype == b.dtype == out.dtype
    aligned = same_dtype and all(rows_16_byte_aligned(t) for t in (a, b, out))
    return step if aligned and a.shape[1] % step == 0 and b.shape[1] % step == 0 else 1


def padded_copy(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """t (r x c) copied into a row-major buffer with row stride round_up(cols, 16), rows >= r.

    Returns the (rows x cols) view. Rows r..rows and columns c..cols are zeros (padding K with
    zeros adds nothing to a dot product); the columns past `cols` in each row are not touched.
    """
    r, c = t.shape
    buffer = t.new_empty((rows, _round_up(cols, ALIGN)))
    view = buffer[:, :cols]
    view[:r, :c].copy_(t)
    if rows > r:
        view[r:].zero_()
    if cols > c:
        view[:r, c:].zero_()
    return view


def pad_for_vector_loads(a: torch.Tensor, b: torch.Tensor, k_major_b: bool = False):
    """(a, b, K, a_rows, b_cols) arranged so the pointer kernels can use 16-byte loads.

    A's loads are vectors along its contiguous dimension, B's likewise; that needs aligned
    strides and, along the vectorised dimension, an extent that is a multiple of 16 (K for the
    masked K loop, M or N for the % wrap-around). Operands that fail are copied (`padded_copy`):
    K is padded with zeros in both, B's columns to a multiple of 16 (b_cols: computed, never
    stored). Operands that pass are used in place, whatever their layout. `k_major_b` (fp8)
    makes a copied B column-major, the layout fp8 tensor cores read.
    """
    M, K = a.shape
    N = b.shape[1]
    k_pad = _round_up(K, ALIGN)
    a_rows, b_cols = M, N
    a_ok = k_pad == K and (_aligned(a, row_major=True) or (_aligned(a, row_major=False) and M % ALIGN == 0))
    if not a_ok:
        a = padded_copy(a, M, k_pad)
    b_ok = k_pad == K and (_aligned(b, row_major=False) or
                           (not k_major_b and _aligned(b, row_major=True) and N % ALIGN == 0))
    if not b_ok and k_major_b:
        b = padded_copy(b.t(), N, k_pad).t()  # (k_pad, N), column-major
    elif not b_ok:
        b_cols = _round_up(N, ALIGN)
        b = padded_copy(b, k_pad, b_cols)
    return a, b, k_pad, a_rows, b_cols


def _programs(config: dict, M: int, N: int) -> tuple[int, int]:
    """(NUM_PROGRAMS, grid size) of a persistent launch with `config` (its PER_SM popped): PER_SM
    programs per SM (1: one wave, 2: two co-resident programs per SM hide each other's
    latencies), or PER_SM = 0: one program per tile (the persistent loop runs once)."""
    tiles = triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"])
    per_sm = config.pop("PER_SM", 1)
    step = tiles if per_sm == 0 else per_sm * runtime.sm_count()
    return step, min(step, tiles)


def _launch_pointer(kind, a, b, bias, activation, out, scales, fp8_precise, pad_strides, config, tuners):
    M, K = a.shape
    N = b.shape[1]
    # fp8 wants B column-major (pad_for_vector_loads makes it so): no ROW_ALIGN promise there.
    align = row_align(a, b, out) if scales is None else 1
    if pad_strides and align == 1:  # aligned rows need no copy: the kernel is told instead
        a, b, K, a_rows, b_cols = pad_for_vector_loads(a, b, k_major_b=scales is not None)
    else:
        a_rows, b_cols = M, N
    a_scale, b_scale = scales if scales is not None else (out, out)
    args = (a, b, out, bias if bias is not None else out, a_scale, b_scale, M, N, K, a_rows, b_cols,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1))
    meta = dict(HAS_BIAS=bias is not None, HAS_SCALE=scales is not None,
                ACTIVATION=ACTIVATIONS[activation], FP8_PRECISE=fp8_precise, ROW_ALIGN=align)
    tiles = lambda m: triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"])  # noqa: E731
    if kind == "tiled":
        kernel = matmul_kernel_autotuned if config is None else matmul_kernel
        kernel[lambda m: (tiles(m),)](*args, **meta, **(config or {}))
        return out
    if config is None:
        sms = runtime.sm_count()
        tuned = (tuners or {}).get("persistent", matmul_persistent_autotuned)
        tuned[lambda m: (min(sms, tiles(m)),)](*args, **meta, NUM_PROGRAMS=sms)
        return out
    config = dict(config)
    step, grid = _programs(config, M, N)
    matmul_persistent_kernel[(grid,)](*args, **meta, NUM_PROGRAMS=step, **config)
    return out


def _tma_operands(a, b):
    """A row-major and B either way round, both with 16-byte aligned strides (TMA's rule)."""
    M, K = a.shape
    N = b.shape[1]
    if not rows_16_byte_aligned(a):
        a = padded_copy(a, M, K)
    if rows_16_byte_aligned(b.t()):  # K-major B (b = w.t()): the descriptor walks w, (N, K)
        return a, b.t(), True
    if a.element_size() == 1:
        # fp8 wgmma reads B only K-major from shared memory: make that layout once here.
        return a, padded_copy(b.t(), N, K), True
    if not rows_16_byte_aligned(b):
        b = padded_copy(b, K, N)
    return a, b, False


def stores_c_through_tma(out: torch.Tensor, itemsize: int, config: dict | None = None) -> bool:
    """Whether the TMA kernel writes `out` through a TMA store: wherever TMA allows it (out
    row-major with 16-byte aligned rows, each row a whole number of 16-byte pieces) and, for a given config (operands of `itemsize` bytes),
    where the C staging buffer still fits in shared memory beside the pipeline (the autotuner's
    pruner counts it the same way). Anywhere else: the masked stores of the pointer kernels."""
    if not rows_16_byte_aligned(out):
        return False
    if out.shape[1] * out.element_size() % 16:
        # Measured on the H100 (Triton 3.6, tools/probe_tma_store_edge.py): a TMA store into a column
        # slice 53 fp16 wide wrote columns 53-55 too, up to the next 16-byte boundary, where the
        # neighbouring columns of the buffer live. So C's width must end on a 16-byte boundary.
        return False
    if config is None:
        return True
    as_config = triton.Config(config, num_stages=config.get("num_stages", 3))
    return shared_memory_bytes(as_config, itemsize, out.element_size()) <= runtime.shared_memory_per_block()


def _launch_tma(a, b, bias, activation, out, scales, fp8_precise, config, tuners):
    M, K = a.shape
    N = b.shape[1]
    a, b_stored, b_kmajor = _tma_operands(a, b)
    if config is None and not runtime.on_gpu():
        config = dict(SIM_CONFIG, FLATTEN=True)
    config = dict(config) if config is not None else None
    bm, bn, bk = ((config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]) if config is not None
                  else (64, 64, 64))  # placeholder block shapes: the tuner's pre_hook sets them
    subtile = config is not None and config.get("EPILOGUE_SUBTILE", False)
    c_tma = stores_c_through_tma(out, a.element_size(), config)
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b_stored, [bn, bk] if b_kmajor else [bk, bn])
    c_desc = TensorDescriptor.from_tensor(out, c_block_shape(bm, bn, subtile)) if c_tma else None
    versions.refuse_unsimulated_descriptors("matmul_tma", "use matmul_persistent, a GPU, or Triton >= 3.6",
                                            *(d.strides for d in (a_desc, b_desc, c_desc) if d is not None))
    a_scale, b_scale = scales if scales is not None else (out, out)
    args = (a_desc, b_desc, c_desc, out, bias if bias is not None else out, a_scale, b_scale, M, N, K,
            out.stride(0), out.stride(1))
    meta = dict(HAS_BIAS=bias is not None, HAS_SCALE=scales is not None, ACTIVATION=ACTIVATIONS[activation],
                FP8_PRECISE=fp8_precise, B_KMAJOR=b_kmajor, C_TMA=c_tma)
    if config is None:
        sms = runtime.sm_count()
        grid = lambda m: (min(sms, triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"])),)  # noqa: E731
        tuned = (tuners or {}).get("tma", matmul_tma_autotuned)
        tuned[grid](*args, **meta, NUM_PROGRAMS=sms)
    else:
        step, grid = _programs(config, M, N)
        matmul_tma_kernel[(grid,)](*args, **meta, NUM_PROGRAMS=step, **config)
    return out


def run_kernel(kind, a, b, bias, activation, out, M, N, K, *, scales=None, fp8_precise=False,
               pad_strides=True, config=None, tuners=None):
    """Launch `kind` ("tiled", "persistent", "tma") on checked operands; config=None: autotuned (GPU)
    or SIM_CONFIG, else that config (a dict of the kernel's meta-parameters: the sweep's). `scales`
    (a_scale, b_scale tensors) and `fp8_precise` serve fp8; `tuners` {kind: autotuned kernel}
    replaces this module's autotuners (fp8 has its own configs: matmul_fp8.py)."""
    if scales is not None:  # fp8 operands: refused before any launch where there are no fp8 tensor cores
        runtime.require_capability((8, 9), "fp8 matmul (fp8 tensor cores)",
                                   "use float16 or bfloat16 operands (matmul)")
    runtime.require_bf16_tensor_cores(a.dtype, "the Triton matmul (tl.dot)")  # the sweep comes here directly
    if M == 0 or N == 0:
        return out
    if K == 0:
        # An empty sum is 0; the epilogue still applies. Not worth a kernel.
        acc = torch.zeros((M, N), dtype=torch.float32, device=a.device)
        out.copy_(epilogue_torch(acc, bias, activation))
        return out
    if kind == "tma":
        return _launch_tma(a, b, bias, activation, out, scales, fp8_precise, config, tuners)
    if config is None and not runtime.on_gpu():
        config = dict(SIM_CONFIG, **({"FLATTEN": True} if kind == "persistent" else {}))
    return _launch_pointer(kind, a, b, bias, activation, out, scales, fp8_precise, pad_strides, config, tuners)


# ------------------------------------------------------------------------------- launchers
def matmul_fixed(a, b, bias=None, activation=None, out=None, *, block_m=128, block_n=256, block_k=64,
                 group_m=8, num_warps=8, num_stages=3, pad_strides=True):
    """The tiled kernel with one hand-picked config: for experiments (GROUP_M = 1 vs 8, tiles)."""
    M, N, K, out = check_args(a, b, bias, activation, out)
    check_blocks(block_m, block_n, block_k, group_m)
    config = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
                  num_warps=num_warps, num_stages=num_stages)
    return run_kernel("tiled", a, b, bias, activation, out, M, N, K, pad_strides=pad_strides, config=config)


def run_tuned(kind, a, b, bias, activation, out, M, N, K, *, pad_strides=True):
    """run_kernel with the swept config of `kind` for this shape (`tuned_config`: GPU, tuned table);
    without one, the autotuner. kind "best": whichever kernel the sweep found fastest ("tiled"
    when there is no table)."""
    config = tuned_config(M, N, K, a.dtype, kind) if runtime.on_gpu() else None
    if kind == "best":
        kind = config.pop("kind") if config is not None else "tiled"
    return run_kernel(kind, a, b, bias, activation, out, M, N, K, pad_strides=pad_strides, config=config)


def matmul_tiled(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                 activation: str | None = None, out: torch.Tensor | None = None, *,
                 pad_strides: bool = True) -> torch.Tensor:
    """Rung 3: activation(a @ b + bias) with `matmul_kernel`, one program per tile, in the config
    the sweep found fastest for the shape on this GPU, else the autotuner's.

    `activation` is None, "relu", "gelu" (exact erf), "gelu_tanh" or "silu"; `bias` has N
    elements. `pad_strides` copies operands whose strides defeat 16-byte loads (module docstring).
    """
    M, N, K, out = check_args(a, b, bias, activation, out)
    return run_tuned("tiled", a, b, bias, activation, out, M, N, K, pad_strides=pad_strides)


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None, out: torch.Tensor | None = None, *,
           pad_strides: bool = True) -> torch.Tensor:
    """activation(a @ b + bias), fp16/bf16 in, fp32 accumulation: the kernel (tiled, persistent or
    TMA) and config the sweep found fastest for this shape on this GPU (results/tuned_matmul.json),
    else `matmul_tiled` autotuned. Arguments as `matmul_tiled`; pad_strides=False runs the tiled
    kernel on the operands as they are.
    """
    M, N, K, out = check_args(a, b, bias, activation, out)
    return run_tuned("best" if pad_strides else "tiled", a, b, bias, activation, out, M, N, K,
                     pad_strides=pad_strides)


def matmul_persistent(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                      activation: str | None = None, out: torch.Tensor | None = None, *,
                      pad_strides: bool = True) -> torch.Tensor:
    """`matmul` with one program per SM looping over the tiles (`matmul_persistent_kernel`)."""
    M, N, K, out = check_args(a, b, bias, activation, out)
    return run_tuned("persistent", a, b, bias, activation, out, M, N, K, pad_strides=pad_strides)


def matmul_tma(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
               activation: str | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """`matmul_persistent` reading A and B through TMA tensor descriptors (compute capability >= 9.0).

    TMA needs 16-byte aligned row strides (8 fp16 elements): a 5000 x 3000 x 4000 problem's B
    (row stride 3000 elements = 6000 bytes) is read in place, and C (the same stride) written
    through a descriptor too. Operands that fail the rule are copied first (`padded_copy`); an
    `out` that fails it gets masked stores.
    """
    M, N, K, out = check_args(a, b, bias, activation, out)
    runtime.require_capability((9, 0), "matmul_tma (the TMA engine)", "use matmul or matmul_persistent")
    return run_tuned("tma", a, b, bias, activation, out, M, N, K)


# -------------------------------------------------------------------------------- references
def epilogue_torch(acc, bias, activation):
    """bias and activation applied to acc in torch (acc's dtype): the epilogue's reference."""
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
    """The reference, in float64: activation(a @ b + bias), rounded once to a's dtype."""
    acc = a.double() @ b.double()
    return epilogue_torch(acc, None if bias is None else bias.double(), activation).to(a.dtype)
