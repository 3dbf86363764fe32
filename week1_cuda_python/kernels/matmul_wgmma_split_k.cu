// Split-K: the persistent wgmma + TMA GEMM (kernels/matmul_wgmma_persistent.cu, whose body this file instantiates
// with SPLIT_K = true; read its header first) for a small C with a long K. Launched from
// week1_cuda_python/matmul_wgmma_split_k.py, which picks the number of ranges.
//
// Why. A persistent grid deals output tiles to SMs. The capstone's weight gradients dW = dY^T X are small matrices
// summed over 8192 tokens: the attention projection's is 768 x 768, 18 tiles of 128 x 256 for 132 SMs, so 114 SMs
// have nothing to do however fast the other 18 run (matmul_wgmma_waves.py: at best 13.6% of the tensor cores'
// time does the work). There is no more C to deal out, but there is more K: cut each tile's 128 k tiles into
// `splits` ranges and every (range, tile) pair is a unit of work, 18 x 7 = 126 units for the same 132 SMs.
//
// The price. A unit's result is a partial sum, not C: it goes out in fp32, unrounded, to a workspace (`splits`
// copies of C's rows, 4 bytes an element), and a second kernel adds the ranges and rounds once to C's type. At
// 768 x 768 and 7 ranges that is 16.5 MB written and read again, which stays in the H100's 50 MB of L2; every range
// also pays the prologue (filling the ring) and the epilogue once more. matmul_wgmma_split_k.py's plan weighs the
// two (the busiest SM's share of the work against the workspace's bytes) to pick the number of ranges.
//
// Order. The units of one range come one after another in the persistent loop (unit = range * tiles + tile), so
// the tiles in flight together read the same panels of A and B (the range's k) and share them in L2. The sum adds
// the ranges in the order 0, 1, 2, ...: the same bits every run, unlike atomics or a reduction in the TMA store,
// whose order depends on which block finishes first.
//
// Entry points: wgmma_persistent_split_k_<t> (A row-major) and wgmma_persistent_a_col_split_k_<t> (A column-major,
// dW's dY^T), then wgmma_split_k_sum_<t>. Build: sm_90a only, as the body.
#define WP_BODY_ONLY
#ifdef WP_BODY  // -DWP_BODY='"path"': the body's exercise stub, which the launchers name under --impl=exercises
#include WP_BODY
#else
#include "matmul_wgmma_persistent.cu"
#endif

// Split-K (the header): C's fp32 partial sums per range of `k_per_split` k tiles, to the workspace map_c, with A
// row-major or column-major; then the sum.
#define WP_SPLIT_K_ENTRY(name, T, A_COL)                                                               \
    extern "C" __global__ void __launch_bounds__(WP_THREADS, 1)                                        \
    name(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,         \
         const __grid_constant__ CUtensorMap map_c, int M, int N, int K, int k_per_split)              \
    {                                                                                                  \
        wgmma_persistent_body<T, 1, WP_EPI_NONE, false, false, A_COL, true>(map_a, map_b, map_c, M, N, K, \
                                                                            nullptr, 0, k_per_split);  \
    }
WP_SPLIT_K_ENTRY(wgmma_persistent_split_k_f16, __half, false)
WP_SPLIT_K_ENTRY(wgmma_persistent_split_k_bf16, __nv_bfloat16, false)
WP_SPLIT_K_ENTRY(wgmma_persistent_a_col_split_k_f16, __half, true)
WP_SPLIT_K_ENTRY(wgmma_persistent_a_col_split_k_bf16, __nv_bfloat16, true)

// C (M x N, T) = the sum over s < splits of the workspace's rows s * m_rows + row (fp32, N columns), added in the
// order s = 0, 1, ... (the same bits every run) and rounded once. Four columns a thread (N is a multiple of 8): one
// 16-byte load per range, one 8-byte store.
template <typename T>
__device__ __forceinline__ void wp_sum_partials(const float* __restrict__ ws, T* __restrict__ c, int M, int N,
                                                int m_rows, int splits)
{
#if WP_HOPPER
    const long long quads = (long long)M * N / 4, range = (long long)m_rows * N;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < quads; i += stride) {
        const long long e = 4 * i;  // C's elements e .. e + 3, one row (N is a multiple of 4)
        // BEGIN EXERCISE: the four sums of C's elements e .. e + 3: range 0's float4 at ws + e, then ranges
        //   s = 1 .. splits - 1 added in that order (range s starts `range` floats after range s - 1), then rounded
        //   once to T, two values a 4-byte pack2, and the 8 bytes stored at c + e
        // HINT: one 16-byte load per range: *reinterpret_cast<const float4*>(ws + s * range + e); the order of the
        //   additions is what keeps the bits the same from run to run.
        // HINT: `uint2 packed; packed.x = pack2(acc.x, acc.y, T()); packed.y = pack2(acc.z, acc.w, T());`
        // STUB: #define HOLE_OPEN 1  // delete once this hole is filled: nothing is built while one is left (course/holes.py)
        float4 acc = *reinterpret_cast<const float4*>(ws + e);
        for (int s = 1; s < splits; ++s) {
            const float4 part = *reinterpret_cast<const float4*>(ws + s * range + e);
            acc.x += part.x; acc.y += part.y; acc.z += part.z; acc.w += part.w;
        }
        uint2 packed;
        packed.x = pack2(acc.x, acc.y, T());
        packed.y = pack2(acc.z, acc.w, T());
        *reinterpret_cast<uint2*>(c + e) = packed;
        // END EXERCISE
    }
#else
    __trap();
#endif
}
#define WP_SUM_ENTRY(name, T)                                                                          \
    extern "C" __global__ void name(const float* __restrict__ ws, T* __restrict__ c, int M, int N,     \
                                    int m_rows, int splits)                                            \
    {                                                                                                  \
        wp_sum_partials<T>(ws, c, M, N, m_rows, splits);                                               \
    }
WP_SUM_ENTRY(wgmma_split_k_sum_f16, __half)
WP_SUM_ENTRY(wgmma_split_k_sum_bf16, __nv_bfloat16)
