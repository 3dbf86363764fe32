"""Matrix multiplication in Triton, the production kernels: autotuned configs (rung 3),
persistent programs (rung 4), TMA tensor descriptors (rung 5) and a fused epilogue (rung 6).

Read matmul_basic.py first: rung 1 is a plain tiled `tl.dot` kernel, one program per tile of C;
rung 2 the same with the tiles in grouped order (`grouped_tile`, imported from there). fp8, the
last rung, is matmul_fp8.py (it runs these kernels with their HAS_SCALE and FP8_PRECISE switches
on). Benchmarks, the config sweep and the ladder's command line: matmul_bench.py. Here:
three kernels sharing their tile code (`_tile_product`, `_epilogue`, `_finish_tile`) and the entry points;
their configs and launchers are matmul_launch.py, the choice between them matmul_dispatch.py.

* Rung 3, `matmul_kernel` (`matmul_tiled`): rung 2's kernel, tuned. `@triton.autotune` times a few
  `triton.Config`s (tile shape, warps, pipeline stages) on the first call for each (M, N, K,
  dtype, epilogue) and keeps the fastest; `_prune_configs` drops configs that do not fit the
  GPU's shared memory and, for small problems, all but the smallest tile. On the GPU that ran
  `matmul_bench --sweep`, the launchers skip the autotuner and use the fastest config the sweep
  measured for the shape (results/dispatch_matmul.json; matmul_dispatch.py). Rows and columns
  past the edge wrap around (% a_rows, % b_cols) instead of being masked, so the loads stay
  unmasked and vectorised; only K is masked.
* Rung 4, `matmul_persistent_kernel`: as many programs as SMs, each looping over tiles (same
  grouped order). The grid is one wave: no tail of a half-empty last wave, one launch's set-up
  per SM, and with `flatten=True` the compiler may start loading tile i+1 while tile i's epilogue
  runs.
* Rung 5, `matmul_tma_kernel`: the persistent kernel with A and B read through tensor descriptors
  (`TensorDescriptor`; the tile's product is `tile_product_tma`, which week 4's fused linear
  reuses): the Hopper TMA engine copies whole tiles from HBM to shared memory, with
  no address arithmetic or masks in the threads (out-of-bounds parts of a tile are filled with
  zeros). C goes back the same way when `out` allows it (row-major, rows on 16-byte boundaries):
  the tile is staged in shared memory and the TMA engine writes it in whole rows
  (`_finish_tile_tma`); otherwise through masked stores. Needs compute capability >= 9.0 (H100);
  the Triton interpreter emulates it.
* Rung 6, the fused epilogue (`_epilogue`): bias and activation (relu, gelu, gelu_tanh, silu)
  applied to the fp32 accumulator before the one store, instead of more passes over C in memory.
  Every kernel here runs it, before a masked store (`_finish_tile`) or a TMA store.

Entry points (all return C and accept `out=`; a, b any strides, the same dtype, fp16 or bf16):
    matmul(a, b, bias=None, activation=None, out=None, *, pad_strides=True, rung=None, tile=None)
        the fastest of these for the shape (matmul_dispatch.py), or the rung and tile named:
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
kernel wherever the sweep found it fastest (results/dispatch_matmul.json).

Cost model: 2 * M * N * K FLOPs. Minimum traffic (M*K + K*N + M*N) * itemsize; at 4096^3 fp16
that is 100 MB for 137 GFLOP, ~1400 FLOPs per byte: compute-bound, so the yardstick is
TFLOP/s against torch.matmul (cuBLAS) and torch._scaled_mm (fp8) in the same run.
"""
from __future__ import annotations

import torch

from course import runtime
from course.gpu import triton, tl

from week3_triton_kernels import matmul_dispatch
from week3_triton_kernels import matmul_launch as launch
from week3_triton_kernels.matmul_basic import check_blocks, grouped_tile
# The launch plumbing's public names, part of this lesson's API too (importers of matmul keep working).
from week3_triton_kernels.matmul_launch import (  # noqa: F401
    ACTIVATIONS, ALIGN, AUTOTUNE_CONFIGS, PERSISTENT_CONFIGS, POINTER_KEY, PRUNE, SIM_CONFIG, TMA_KEY, Kernels,
    check_args, epilogue_torch, pad_for_vector_loads, padded_copy, row_align, rows_16_byte_aligned,
    shared_memory_bytes, stores_c_through_tma, tile_config, with_tma_block_shapes)


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
def tile_product_tma(a_desc, b_desc, pid_m, pid_n, K, B_KMAJOR: tl.constexpr, FP8_PRECISE: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """_tile_product with the operand tiles read through tensor descriptors (rung 5; week 4's fused
    linear runs it too, kernel_tma.py)."""
    # BEGIN EXERCISE: the fp32 BLOCK_M x BLOCK_N tile (pid_m, pid_n) of A @ B, each operand tile one
    #   descriptor load: a_desc.load([row, col]), b_desc.load(...) (B_KMAJOR: b_desc walks the (N, K)
    #   storage: use the loaded tile transposed, .T); accumulate with _dot
    # HINT: _tile_product's K loop, but operand tiles arrive by TMA: a descriptor load takes only tile
    #   coordinates, zero-fills out-of-bounds parts, and needs no pointer arithmetic or masks.
    # HINT: fp32 acc of zeros, then a K loop loading a at [pid_m * BLOCK_M, k * BLOCK_K] and b at its
    #   coordinates, _dot; return acc.
    # HINT: B_KMAJOR means b_desc describes the (N, K) weight: `b = b_desc.load([pid_n * BLOCK_N, k *
    #   BLOCK_K]).T`.
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
    return acc
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
    # BEGIN EXERCISE: the persistent loop of matmul_persistent_kernel, each tile's product from
    #   tile_product_tma; C_TMA: store with _finish_tile_tma, else _finish_tile
    # HINT: Same persistent loop as matmul_persistent_kernel; only the tile's product and (when C_TMA) its
    #   store change: the operands arrive through descriptors.
    # HINT: Inside the tile loop: grouped_tile, tile_product_tma; then _finish_tile_tma if C_TMA else
    #   _finish_tile.
    tl.static_assert(BLOCK_K >= 16, "tl.dot needs BLOCK_K >= 16")
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=FLATTEN):
        pid_m, pid_n = grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tile_product_tma(a_desc, b_desc, pid_m, pid_n, K, B_KMAJOR, FP8_PRECISE, BLOCK_M, BLOCK_N, BLOCK_K)
        if C_TMA:  # `out` is row-major with 16-byte aligned rows: C leaves through the TMA engine too
            _finish_tile_tma(acc, c_desc, bias_ptr, a_scale_ptr, b_scale_ptr, pid_m, pid_n, N, HAS_BIAS,
                             HAS_SCALE, ACTIVATION, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)
        else:  # any other `out` (a column slice with an odd stride, say): ordinary masked stores
            _finish_tile(acc, c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, pid_m, pid_n, M, N, stride_cm,
                         stride_cn, HAS_BIAS, HAS_SCALE, ACTIVATION, BLOCK_M, BLOCK_N)
    # END EXERCISE


# ------------------------------------------------------------------------------ autotuning


# The autotuned kernels (matmul_launch.py has their config spaces, keys and pruner).
matmul_kernel_autotuned = triton.autotune(configs=AUTOTUNE_CONFIGS, key=POINTER_KEY,
                                          prune_configs_by=PRUNE)(matmul_kernel)
matmul_persistent_autotuned = triton.autotune(configs=PERSISTENT_CONFIGS, key=POINTER_KEY,
                                              prune_configs_by=PRUNE)(matmul_persistent_kernel)
matmul_tma_autotuned = triton.autotune(configs=with_tma_block_shapes(PERSISTENT_CONFIGS), key=TMA_KEY,
                                       prune_configs_by=PRUNE)(matmul_tma_kernel)

KERNELS = Kernels(matmul_kernel, matmul_kernel_autotuned, matmul_persistent_kernel, matmul_persistent_autotuned,
                  matmul_tma_kernel, matmul_tma_autotuned)


# ------------------------------------------------------------------------------- launchers
def run_kernel(kind, a, b, bias, activation, out, M, N, K, *, scales=None, fp8_precise=False,
               pad_strides=True, config=None, kernels: Kernels | None = None):
    """Launch rung `kind` ("tiled", "persistent", "tma") of this module's kernels (or `kernels`) on
    checked operands, with `config` or the autotuner's (matmul_launch.run_kernel)."""
    return launch.run_kernel(kind, KERNELS if kernels is None else kernels, a, b, bias, activation, out, M, N, K,
                             scales=scales, fp8_precise=fp8_precise, pad_strides=pad_strides, config=config)


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None, out: torch.Tensor | None = None, *,
           pad_strides: bool = True, rung: str | None = None, tile: dict | None = None) -> torch.Tensor:
    """activation(a @ b + bias), fp16/bf16 in, fp32 accumulation.

    The kernel (`rung`: "tiled", "persistent" or "tma") and its tile are matmul_dispatch.py's
    choice for this shape on this GPU (the sweep's fastest, results/dispatch_matmul.json), else the
    tiled kernel autotuned; `rung=` and `tile=` (a dict of BLOCK_M, BLOCK_N, BLOCK_K[, GROUP_M,
    num_warps, num_stages]) choose instead. `activation` is None, "relu", "gelu" (exact erf),
    "gelu_tanh" or "silu"; `bias` has N elements. `pad_strides` copies operands whose strides defeat
    16-byte loads (module docstring); pad_strides=False runs them as they are (the tiled kernel
    unless a rung is named).
    """
    M, N, K, out = check_args(a, b, bias, activation, out)
    rung, tile = matmul_dispatch.resolve(rung, tile, M, N, K, a.dtype, pad_strides)
    if rung == "tma":
        runtime.require_capability((9, 0), 'matmul(rung="tma") (the TMA engine)', "use rung tiled or persistent")
    return run_kernel(rung, a, b, bias, activation, out, M, N, K, pad_strides=pad_strides, config=tile)


def matmul_fixed(a, b, bias=None, activation=None, out=None, *, block_m=128, block_n=256, block_k=64,
                 group_m=8, num_warps=8, num_stages=3, pad_strides=True):
    """The tiled kernel with one hand-picked config: for experiments (GROUP_M = 1 vs 8, tiles)."""
    check_blocks(block_m, block_n, block_k, group_m)
    tile = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
                num_warps=num_warps, num_stages=num_stages)
    return matmul(a, b, bias, activation, out, pad_strides=pad_strides, rung="tiled", tile=tile)


def matmul_tiled(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                 activation: str | None = None, out: torch.Tensor | None = None, *,
                 pad_strides: bool = True) -> torch.Tensor:
    """Rung 3: `matmul(..., rung="tiled")`: `matmul_kernel`, one program per tile, in the tile the
    sweep found fastest for the shape on this GPU, else the autotuner's."""
    return matmul(a, b, bias, activation, out, pad_strides=pad_strides, rung="tiled")


def matmul_persistent(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                      activation: str | None = None, out: torch.Tensor | None = None, *,
                      pad_strides: bool = True) -> torch.Tensor:
    """`matmul(..., rung="persistent")`: one program per SM looping over the tiles."""
    return matmul(a, b, bias, activation, out, pad_strides=pad_strides, rung="persistent")


def matmul_tma(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
               activation: str | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """`matmul(..., rung="tma")`: the persistent kernel reading A and B through TMA tensor
    descriptors (compute capability >= 9.0).

    TMA needs 16-byte aligned row strides (8 fp16 elements): a 5000 x 3000 x 4000 problem's B
    (row stride 3000 elements = 6000 bytes) is read in place, and C (the same stride) written
    through a descriptor too. Operands that fail the rule are copied first (`padded_copy`); an
    `out` that fails it gets masked stores.
    """
    check_args(a, b, bias, activation, out)
    runtime.require_capability((9, 0), "matmul_tma (the TMA engine)", "use matmul or matmul_persistent")
    return matmul(a, b, bias, activation, out, rung="tma")


# -------------------------------------------------------------------------------- references
def matmul_torch(a, b, bias=None, activation=None):
    """The reference, in float64: activation(a @ b + bias), rounded once to a's dtype."""
    acc = a.double() @ b.double()
    return epilogue_torch(acc, None if bias is None else bias.double(), activation).to(a.dtype)
