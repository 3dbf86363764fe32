// The persistent wgmma + TMA GEMM with a "ping-pong" consumer schedule: the body of
// kernels/matmul_wgmma_persistent.cu with PINGPONG = true (read its header first), for the plain
// GEMM (B: K x N) and for every fused epilogue of kernels/matmul_wgmma_fused.cu (W: N x K).
// Launched from week1_cuda_python/matmul_wgmma_persistent.py and matmul_wgmma_fused.py with
// `schedule="pingpong"`; week1_cuda_python/notes/matmul_wgmma_persistent.md has the numbers behind it.
//
// Why. In the default ("cooperative") schedule both consumer warpgroups compute one 128 x 256 tile,
// 64 rows each, and then both run its epilogue (registers -> shared memory -> TMA store; with a
// fused epilogue also the bias or residual loads and SwiGLU's exponentials). The producer keeps
// loading the next tile's first stages meanwhile, but no wgmma is issued until the epilogue ends:
// the tensor cores idle for it, once per tile. At K = 4096 a tile's mainloop is 64 k steps and the
// epilogue a few percent of it; at the capstone's K = 768 it is 12 k steps, and the epilogue (with
// a residual: global loads whose latency is paid chunk after chunk) is a large share of the tile.
//
// Ping-pong. Each consumer warpgroup owns whole tiles of 64 x 256 (its 128 fp32 accumulators per
// thread, as before): consumer 0 takes the block's tiles 0, 2, 4, ..., consumer 1 tiles 1, 3, 5, ....
// The producer is unchanged: it walks the block's tiles in order, so the ring holds tile 0's k steps,
// then tile 1's, ...; each consumer skips the other's positions (`it += k_tiles`), and each stage is
// released by the 4 warps of one warpgroup (the empty barriers count 4, not 8). While consumer 0
// stores tile 2i, consumer 1 runs tile 2i + 1's wgmmas, and the other way round: one warpgroup's
// m64n256k16 stream alone keeps all four tensor-core quadrants of the SM busy.
//
// The turn barriers. The consumers also take turns at the mainloop: consumer c starts a tile's k
// loop only after the other has waited on every full barrier of the block's previous tile. This is
// needed for correctness, not only for order: a consumer back from its epilogue may reach a stage
// whose full barrier is one phase *behind* its ring position (the other consumer's tile, which comes
// first in the ring, not loaded yet); the parity of that pending phase is the opposite of the one it
// waits for, so `try_wait.parity` would pass at once and the wgmmas would read stale bytes. After the
// other consumer's waits, every earlier phase has completed and the parity names the right phase.
// tests/week1/test_matmul_wgmma_persistent_protocol.py models this (and fails without the turns).
//
// The costs. A stage is 8 KB of A + 32 KB of B for 2.1 MFLOP (52 FLOP per byte from L2, against 85
// for the 128 x 256 tile), and 4 stages of 40 KB cover half the time of 4 of 48 KB: a tile that
// needs L2 bandwidth or DRAM latency hiding (big K, big N) is better cooperative. The tile count
// doubles (64-row tiles), which also evens out a ragged last wave: 8192 x 768 is 384 tiles of
// 64 x 256, 2.9 per SM of 132, against 192 of 128 x 256 (1.45: the second wave 45% full).
//
// Build: sm_90a only, like the file it includes (-gencode=arch=compute_90a,code=sm_90a);
// elsewhere the bodies trap and the launchers refuse non-sm_90 GPUs before anything is compiled.
// -DWP_BN=192 or 128: the tile width builds (64 x WP_BN tiles; matmul_wgmma_persistent.cu's header).
#define WP_BODY_ONLY
#ifdef WP_BODY  // -DWP_BODY='"path"': the body's exercise stub, which the launchers name under --impl=exercises
#include WP_BODY
#else
#include "matmul_wgmma_persistent.cu"
#endif

// C = A @ B, B K x N row-major: matmul_wgmma_persistent.launch_persistent(..., schedule="pingpong").
#define WPP_ENTRY(name, T)                                                                             \
    extern "C" __global__ void __launch_bounds__(WP_THREADS, 1)                                        \
    name(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,         \
         const __grid_constant__ CUtensorMap map_c, int M, int N, int K)                               \
    {                                                                                                  \
        wgmma_persistent_body<T, 1, WP_EPI_NONE, false, true>(map_a, map_b, map_c, M, N, K);           \
    }

// C = epilogue(A @ W^T), W N x K: matmul_wgmma_fused.launch_fused(..., schedule="pingpong").
#define WPP_FUSED_ENTRY(name, T, EPI)                                                                  \
    extern "C" __global__ void __launch_bounds__(WP_THREADS, 1)                                        \
    name(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w,         \
         const __grid_constant__ CUtensorMap map_c, int M, int N, int K, const T* __restrict__ extra,   \
         int n_out)                                                                                    \
    {                                                                                                  \
        wgmma_persistent_body<T, 1, EPI, true, true>(map_a, map_w, map_c, M, N, K, extra, n_out);      \
    }

WPP_ENTRY(wgmma_pingpong_f16, __half)
WPP_ENTRY(wgmma_pingpong_bf16, __nv_bfloat16)
WPP_FUSED_ENTRY(wgmma_linear_pingpong_f16, __half, WP_EPI_NONE)
WPP_FUSED_ENTRY(wgmma_linear_pingpong_bf16, __nv_bfloat16, WP_EPI_NONE)
WPP_FUSED_ENTRY(wgmma_linear_pingpong_bias_f16, __half, WP_EPI_BIAS)
WPP_FUSED_ENTRY(wgmma_linear_pingpong_bias_bf16, __nv_bfloat16, WP_EPI_BIAS)
WPP_FUSED_ENTRY(wgmma_linear_pingpong_residual_f16, __half, WP_EPI_RESIDUAL)
WPP_FUSED_ENTRY(wgmma_linear_pingpong_residual_bf16, __nv_bfloat16, WP_EPI_RESIDUAL)
#if WP_SWIGLU_BUILDS  // not in the WP_BN = 192 build: SwiGLU's halves must be whole 64-column slabs
WPP_FUSED_ENTRY(wgmma_linear_pingpong_swiglu_f16, __half, WP_EPI_SWIGLU)
WPP_FUSED_ENTRY(wgmma_linear_pingpong_swiglu_bf16, __nv_bfloat16, WP_EPI_SWIGLU)
#endif
