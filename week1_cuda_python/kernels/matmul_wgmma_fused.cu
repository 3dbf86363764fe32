// Fused epilogues on the persistent wgmma + TMA GEMM (kernels/matmul_wgmma_persistent.cu, whose
// body this file instantiates; read its header first). Launched from
// week1_cuda_python/matmul_wgmma_fused.py, which registers them as torch ops.
//
// C = A @ W^T (+ epilogue), A (M x K) and W (N x K) row-major: W is nn.Linear's weight as a model
// stores it, so no transpose is ever made (the body's B_NK layout). fp16 or bf16 in, fp32
// accumulate, the epilogue in fp32 on the accumulators, ONE rounding to C's type, then the TMA store:
//   wgmma_linear_<t>            C = A W^T                      (the layout alone, no epilogue)
//   wgmma_linear_bias_<t>       C = A W^T + bias               (bias: N, one value per column)
//   wgmma_linear_residual_<t>   C = A W^T + R                  (R: M x N; may be C itself)
//   wgmma_linear_swiglu_<t>     C = silu(A Wg^T) * (A Wu^T)    (W = [Wg; Wu]: 2 F x K; C: M x F)
//
// Why fuse. Unfused, each epilogue is a second kernel that reads the GEMM's output back from DRAM
// and writes it again: for the capstone's MLP up projection (8192 tokens x 4096 columns, bf16) that
// is 64 MB written by the GEMM, 64 MB read and 32 MB written by SwiGLU; fused, 32 MB are written
// once. The residual add saves reading and writing M x N once more; the bias, a pass over C.
// In fp32 registers the epilogue also skips the intermediate rounding (GEMM output to bf16, then
// the elementwise op's result to bf16 again): the fused result is at least as accurate.
//
// SwiGLU without an interleaved weight. Each tile of C covers 128 columns f0 .. f0 + 127 and loads
// the gate rows f0 .. of W into the left half of its B stage and the up rows F + f0 .. into the
// right half; accumulator column t (< 128) is gate column f0 + t and t + 128 its up partner, held by
// the same thread (the wgmma layout repeats every 8 columns), so silu(g) * u needs no shuffle.
// [Wg; Wu] is the capstone's up-projection weight as it is (model.py: one GEMM, `[gate | up]`).
// That is the 256-wide tile; the width builds (-DWP_BN, matmul_wgmma_persistent.cu's header) halve
// it the same way at 128 (64 gate columns, 64 up), but not at 192: each half would be 96 columns,
// one and a half of the 64-column slabs B is loaded in and C stored in, so that build has no
// SwiGLU entry points and the launcher refuses width=192 for it.
//
// Costs of the epilogue loads: the bias is N values read by every row tile (from L2); R is read
// with 4-byte loads, 16 bytes per row per warp instruction, and the eight instructions of a chunk
// cover each 128-byte line of R whole (L1 catches the rest): R's bytes come from DRAM once.
//
// Build: sm_90a only, like the file it includes; elsewhere the bodies trap and the launcher
// refuses non-sm_90 GPUs, naming the Triton fallback.
#define WP_BODY_ONLY
#ifdef WP_BODY  // -DWP_BODY='"path"': the body's exercise stub, which the launchers name under --impl=exercises
#include WP_BODY
#else
#include "matmul_wgmma_persistent.cu"
#endif

#define WF_ENTRY(name, T, EPI)                                                                         \
    extern "C" __global__ void __launch_bounds__(WP_THREADS, 1)                                        \
    name(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_w,         \
         const __grid_constant__ CUtensorMap map_c, int M, int N, int K, const T* __restrict__ extra,   \
         int n_out)                                                                                    \
    {                                                                                                  \
        wgmma_persistent_body<T, 1, EPI, true>(map_a, map_w, map_c, M, N, K, extra, n_out);            \
    }

WF_ENTRY(wgmma_linear_f16, __half, WP_EPI_NONE)
WF_ENTRY(wgmma_linear_bf16, __nv_bfloat16, WP_EPI_NONE)
WF_ENTRY(wgmma_linear_bias_f16, __half, WP_EPI_BIAS)
WF_ENTRY(wgmma_linear_bias_bf16, __nv_bfloat16, WP_EPI_BIAS)
WF_ENTRY(wgmma_linear_residual_f16, __half, WP_EPI_RESIDUAL)
WF_ENTRY(wgmma_linear_residual_bf16, __nv_bfloat16, WP_EPI_RESIDUAL)
#if WP_SWIGLU_BUILDS  // not in the WP_BN = 192 build (the header's "SwiGLU without an interleaved weight")
WF_ENTRY(wgmma_linear_swiglu_f16, __half, WP_EPI_SWIGLU)
WF_ENTRY(wgmma_linear_swiglu_bf16, __nv_bfloat16, WP_EPI_SWIGLU)
#endif
