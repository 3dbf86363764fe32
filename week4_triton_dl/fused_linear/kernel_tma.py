"""The fused linear's Hopper rung: the same GEMM and epilogues, persistent and fed by TMA (sm_90).

Why a second kernel. kernel.py's main loop already compiles to Hopper's asynchronous wgmma with a
cp.async pipeline (the note's diagnosis), but it is one program per tile: at the capstone's K = 768 a
tile is only 12 K steps, and each program's pipeline fill and epilogue (the accumulator shuffled
through shared memory, the residual tile loaded, the store) leave its SM's tensor cores idle; the big
tiles take 144 KB of shared memory, so no second block on the SM covers for it. cuBLAS's Hopper
kernels are persistent and TMA-fed. This rung is week 3's `matmul_tma_kernel` (rung 5 of
week3_triton_kernels/matmul.py, which explains both ideas) with this lesson's epilogues, built from
week 3's own pieces:

* persistent: NUM_PROGRAMS programs (one or two an SM) loop over the tiles in week 3's grouped order
  (`grouped_tile`), the tile loop flattened into the K loop (FLATTEN), so the pipeline keeps loading
  the next tile's first K steps while this tile's epilogue runs;
* TMA: each tile's product is week 3's `tile_product_tma`, every operand tile one descriptor load.
  W is read as stored, (N, K) K-major (B_KMAJOR), its tile used transposed, the layout wgmma reads B in;
* the bias and residual epilogues are epilogues.py's, as in kernel.py, and C leaves by the same
  masked store.

Only where it applies: 16-bit x and W of one dtype with 16-byte aligned rows (TMA's rule), on sm_90
and newer. kernel.py keeps the norm prologue (its A is the fp32 residual stream, rounded after the
scale), fp32, and SwiGLU: its two accumulators, compiled this way for sm_90, reach 255 registers and
spill (the tiled kernel's stay under 255, no stack). launch.py picks the rung (the dispatch table's row,
or `rung=`; launch_tma.why_not says where this one cannot run).
"""
from __future__ import annotations

from course.gpu import triton, tl
from week3_triton_kernels.matmul import tile_product_tma
from week3_triton_kernels.matmul_basic import grouped_tile
from week4_triton_dl.fused_linear.epilogues import bias_epilogue, residual_epilogue


@triton.jit
def fused_linear_tma_kernel(a_desc, w_desc, c_ptr, bias_ptr, res_ptr, M, N, K,
                            stride_cm, stride_cn, stride_rm, stride_rn,
                            HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
                            FLATTEN: tl.constexpr):
    tl.static_assert(BLOCK_K >= 16, "tl.dot needs BLOCK_K >= 16")
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=FLATTEN):
        pid_m, pid_n = grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        # B_KMAJOR: W's (BLOCK_N, BLOCK_K) tile as stored, used as W^T's (BLOCK_K, BLOCK_N); not fp8.
        acc = tile_product_tma(a_desc, w_desc, pid_m, pid_n, K, True, False, BLOCK_M, BLOCK_N, BLOCK_K)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        if HAS_BIAS:
            acc = bias_epilogue(acc, bias_ptr, cols, N)
        if HAS_RESIDUAL:
            acc = residual_epilogue(acc, res_ptr, rows, cols, mask, stride_rm, stride_rn)
        c_ptrs = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
