// Exercise: the tensor-core (WMMA) matmul rungs that week1_cuda_python/exercises/matmul_tensor_cores.py
// launches. C (M x N) = A (M x K) @ B (K x N); A, B row-major fp16 or bf16, fp32 accumulation,
// C of type Out (half, bf16 or float). The launcher pads A to (Mp x K) and B to (K x Np) with
// zeros, K already a multiple of the tile, lda = K and ldb = Np; the stores must check
// row < M and col < N (C is M x N, row stride N). The entry points at the bottom are written:
// fill in the three *_body templates. Keep the TC_* defaults (the Python side reads them).

#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

using namespace nvcuda;

#define WARPSIZE 32
#define FRAG 16
#define SKEW 8

#ifndef TC_BM
#define TC_BM 128
#endif
#ifndef TC_BN
#define TC_BN 128
#endif
#ifndef TC_BK
#define TC_BK 32
#endif
#ifndef TC_WM
#define TC_WM 64
#endif
#ifndef TC_WN
#define TC_WN 64
#endif
#ifndef TC_STAGES
#define TC_STAGES 2
#endif
#define TC_THREADS ((TC_BM / TC_WM) * (TC_BN / TC_WN) * WARPSIZE)

#define NAIVE_WARPS_M 2
#define NAIVE_WARPS_N 2
#define NAIVE_THREADS (NAIVE_WARPS_M * NAIVE_WARPS_N * WARPSIZE)

__device__ __forceinline__ void store_element(float v, float* p) { *p = v; }
__device__ __forceinline__ void store_element(float v, __half* p) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store_element(float v, __nv_bfloat16* p) { *p = __float2bfloat16_rn(v); }

// 1. One warp per 16x16 tile of C (4 warps per block, 2 x 2 tiles).
template <typename In, typename Out>
__device__ __forceinline__ void wmma_naive_body(const In* __restrict__ A, const In* __restrict__ B,
                                                Out* __restrict__ C, int M, int N, int K, int lda, int ldb)
{
    // TODO: row0/col0 of this warp's tile (leave if row0 >= M or col0 >= N); an fp32 accumulator
    // fragment filled with 0; for k in steps of 16: load_matrix_sync an A and a B fragment
    // straight from global memory, mma_sync. Store through a 16x16 float __shared__ scratch per
    // warp (store_matrix_sync, __syncwarp) so each lane can convert and bounds-check its elements.
}

// 2. Block tiles of TC_BM x TC_BK (A) and TC_BK x TC_BN (B) in shared memory, rows padded by SKEW;
//    each warp owns a TC_WM x TC_WN tile of C: (TC_WM/16) x (TC_WN/16) accumulator fragments.
template <typename In, typename Out, int BM, int BN, int BK, int WM, int WN>
__device__ __forceinline__ void wmma_shared_body(const In* __restrict__ A, const In* __restrict__ B,
                                                 Out* __restrict__ C, int M, int N, int K, int lda, int ldb)
{
    // TODO: copy the tiles with 16-byte (uint4) loads, __syncthreads(), mma over the BK slice,
    // __syncthreads(); then write the warp's fragments (bounds-checked) as in rung 1.
}

// 3. As rung 2 with a TC_STAGES-deep pipeline of cp.async copies (sm_80+; plain copies on sm_75).
template <typename In, typename Out, int BM, int BN, int BK, int WM, int WN, int STAGES>
__device__ __forceinline__ void wmma_cp_async_body(const In* __restrict__ A, const In* __restrict__ B,
                                                   Out* __restrict__ C, int M, int N, int K, int lda, int ldb)
{
    // TODO: `cp.async.cg.shared.global [dst], [src], 16;` (inline PTX, guarded by
    // #if __CUDA_ARCH__ >= 800), cp.async.commit_group after each tile, cp.async.wait_group
    // STAGES-2 before computing on the oldest one; one __syncthreads() per tile.
}

// ---- entry points (given): wmma_<rung>_<in>_<out>; bf16 ones trap below sm_80 ----------------
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define BF16_BODY(call) __trap()
#else
#define BF16_BODY(call) call
#endif

#define TC_ARGS(In, Out) const In* __restrict__ A, const In* __restrict__ B, Out* __restrict__ C, \
                         int M, int N, int K, int lda, int ldb
#define TC_ENTRY(name, threads, body, In, Out, guard)                                              \
    extern "C" __global__ void __launch_bounds__(threads) name(TC_ARGS(In, Out))                   \
    {                                                                                              \
        guard(body);                                                                               \
    }
#define TC_PLAIN(call) call
#define TC_ALL_TYPES(prefix, threads, BODY)                                                        \
    TC_ENTRY(prefix##_f16_f16, threads, (BODY(__half, __half)), __half, __half, TC_PLAIN)          \
    TC_ENTRY(prefix##_f16_f32, threads, (BODY(__half, float)), __half, float, TC_PLAIN)            \
    TC_ENTRY(prefix##_bf16_bf16, threads, (BODY(__nv_bfloat16, __nv_bfloat16)), __nv_bfloat16,     \
             __nv_bfloat16, BF16_BODY)                                                             \
    TC_ENTRY(prefix##_bf16_f32, threads, (BODY(__nv_bfloat16, float)), __nv_bfloat16, float, BF16_BODY)

#define NAIVE_CALL(In, Out) wmma_naive_body<In, Out>(A, B, C, M, N, K, lda, ldb)
#define SHARED_CALL(In, Out) wmma_shared_body<In, Out, TC_BM, TC_BN, TC_BK, TC_WM, TC_WN>(A, B, C, M, N, K, lda, ldb)
#define CP_ASYNC_CALL(In, Out) \
    wmma_cp_async_body<In, Out, TC_BM, TC_BN, TC_BK, TC_WM, TC_WN, TC_STAGES>(A, B, C, M, N, K, lda, ldb)

TC_ALL_TYPES(wmma_naive, NAIVE_THREADS, NAIVE_CALL)
TC_ALL_TYPES(wmma_shared, TC_THREADS, SHARED_CALL)
TC_ALL_TYPES(wmma_cp_async, TC_THREADS, CP_ASYNC_CALL)
