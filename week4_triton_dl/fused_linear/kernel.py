"""The fused linear's one kernel: week 3's tiled GEMM with a prologue on A and epilogues on C.

out = epilogue(prologue(A) @ W^T), W stored as nn.Linear stores it, (out_features, in_features), so
the kernel reads W^T through strides (no transposed copy). The structure is week 3's rung 3
(matmul.py's `matmul_kernel`): one program per BLOCK_M x BLOCK_N tile of C in grouped order
(`grouped_tile`: programs running together share A's rows and W's rows in L2), row and column
offsets past the edge wrapped (% M, % N) so A and W load unmasked, only K masked, fp32 accumulation
on the tensor cores. The constexpr switches add, each compiled only where asked for:

* NORM (prologue_norm.py): every A tile scaled by the rows' rstd and the columns' norm weight
  between its load and the dot, then rounded to W's dtype (A may be fp32: the residual stream);
* SWIGLU (epilogues.py): a second accumulator from W's rows F.., the same A tile feeding both dots,
  and h = silu(g) * u in the epilogue; STORE_PRE also writes [g | u] for the backward;
* HAS_BIAS, HAS_RESIDUAL (epilogues.py): + bias, + residual on the fp32 tile before its one store.

Cost: 2 M N K FLOPs (4 M F K with SWIGLU: both halves), as cuBLAS's GEMM; the traffic saved is
each epilogue's and the prologue's (their docstrings count it). The launcher: launch.py.
"""
from __future__ import annotations

from course.gpu import triton, tl
from week3_triton_kernels.matmul_basic import grouped_tile
from week4_triton_dl.fused_linear.epilogues import bias_epilogue, residual_epilogue, swiglu_epilogue
from week4_triton_dl.fused_linear.prologue_norm import normed_a_tile


@triton.jit
def fused_linear_kernel(a_ptr, w_ptr, c_ptr, bias_ptr, res_ptr, rstd_ptr, nw_ptr, pre_ptr, M, N, K,
                        stride_am, stride_ak, stride_wn, stride_wk, stride_cm, stride_cn,
                        stride_rm, stride_rn, stride_pm,
                        HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, NORM: tl.constexpr,
                        SWIGLU: tl.constexpr, STORE_PRE: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP_M: tl.constexpr):
    # N: C's columns. With SWIGLU, W has 2N rows: the gate's rows [0, N), the up's [N, 2N).
    tl.static_assert(BLOCK_K >= 16, "tl.dot needs BLOCK_K >= 16")
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    # Wrapped, not masked (week 3): the loads stay unmasked; wrapped rows and columns are never stored.
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_wn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_wn[None, :] * stride_wn  # a (BLOCK_K, BLOCK_N) tile of W^T
    if NORM:
        rstd = tl.load(rstd_ptr + offs_am)  # one per row of the tile, for every K step
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if SWIGLU:
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # BEGIN EXERCISE: the K loop: per step load the A tile (K masked) and, with NORM, pass it through
    #   normed_a_tile (rounded to W's dtype); load the W^T tile and accumulate with tl.dot(...,
    #   input_precision=INPUT_PRECISION); with SWIGLU a second W^T tile N rows further (the up half) into
    #   acc_u from the SAME A tile; advance both pointer tiles by BLOCK_K
    # HINT: Week 3's tiled K loop, twice fed: the A tile is loaded (and normalized) once per K step and
    #   multiplied by both halves of the stacked weight, so the second GEMM costs no extra A traffic.
    # HINT: `k_mask = offs_k < K - k * BLOCK_K`; A masked along its columns (k_mask[None, :]), W^T along
    #   its rows (k_mask[:, None]), other=0.0; the up tile is at `w_ptrs + N * stride_wn`.
    # HINT: the norm's column weights are those of this step's K columns: `k * BLOCK_K + offs_k`.
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_mask = offs_k < K - k * BLOCK_K  # K is masked: a wrapped K would add wrong products
        a = tl.load(a_ptrs, mask=k_mask[None, :], other=0.0)
        if NORM:
            a = normed_a_tile(a, rstd, nw_ptr, k * BLOCK_K + offs_k, k_mask, w_ptr.dtype.element_ty)
        w = tl.load(w_ptrs, mask=k_mask[:, None], other=0.0)
        acc = tl.dot(a, w, acc, input_precision=INPUT_PRECISION)
        if SWIGLU:  # the same A tile, W's up rows: the second GEMM reads no more A
            w_u = tl.load(w_ptrs + N * stride_wn, mask=k_mask[:, None], other=0.0)
            acc_u = tl.dot(a, w_u, acc_u, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk
    # END EXERCISE

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    # BEGIN EXERCISE: the epilogue on the fp32 tile, in a model's order: + bias (HAS_BIAS), then SwiGLU on
    #   the two accumulators (SWIGLU: swiglu_epilogue, which also stores [g | u] with STORE_PRE), then +
    #   residual (HAS_RESIDUAL); one masked store in c's dtype
    # HINT: Everything between the last tl.dot and the store happens in registers: that is the whole
    #   saving, each epilogue replacing a pass over an M x N tensor in HBM.
    # HINT: Three constexpr ifs calling the helpers of epilogues.py in that order, then C's pointer tile
    #   (rows in int64: M x N can pass 2^31) and `tl.store(..., acc.to(c_ptr.dtype.element_ty), mask=mask)`.
    if HAS_BIAS:
        acc = bias_epilogue(acc, bias_ptr, cols, N)
    if SWIGLU:
        acc = swiglu_epilogue(acc, acc_u, pre_ptr, rows, cols, mask, stride_pm, N, STORE_PRE)
    if HAS_RESIDUAL:
        acc = residual_epilogue(acc, res_ptr, rows, cols, mask, stride_rm, stride_rn)
    c_ptrs = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE
