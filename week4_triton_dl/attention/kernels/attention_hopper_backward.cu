// The backward of the Hopper attention rung (FlashAttention-3 style): dQ, dK, dV on wgmma + TMA, sm_90a
// only. Built by week4_triton_dl/attention/hopper_backward.py (load_inline, -gencode=arch=compute_90a,
// code=sm_90a); the PTX wrappers are week 1's hopper_ptx.cuh (the course's one copy).
//
// The math is week 4's Triton backward (attention/backward.py, FlashAttention-2's algorithm): with
// P = exp(scale Q K^T - lse) recomputed from the forward's log-sum-exp, dP = dO V^T and Delta = rowsum(dO * O),
//     dS = P * (dP - Delta),   dV = P^T dO,   dK = scale dS^T Q,   dQ = scale dS K.
// Three kernels, in order on one stream:
// 1. ahb_preprocess: Delta (fp32) per query row, lse * log2(e) per row (so P = 2^(s * scale * log2 e - lse2)),
//    both into buffers padded to a multiple of 64 rows (padding rows: lse2 = +inf, Delta = 0, so a padding
//    query has P = 0 everywhere), and the fp32 dQ accumulator zeroed.
// 2. ahb_main: one CTA per block of 128 keys of one (batch, head): K and V stay in shared memory, the CTA
//    walks the query blocks (64 rows each). Three warpgroups: warpgroup 0 is the producer (one thread
//    issues TMA copies of Q and dO into a 2-stage ring; registers given back by setmaxnreg),
//    warpgroups 1 and 2 are consumers, each owning 64 of the 128 keys (wgmma's M is 64). Per query block
//    a consumer computes, for its keys:
//      S^T = K Q^T, dP^T = V dO^T            wgmma, both operands from shared memory (K-major: below)
//      P^T = 2^(S^T c - lse2), dS^T = P^T (dP^T - Delta)   in registers (masks: below)
//      dV += P^T dO, dK += dS^T Q            wgmma with A = P^T, dS^T in REGISTERS (the fragment identity,
//                                            pack_a_fragment in hopper_ptx.cuh), B = dO, Q MN-major
//      dQ_part = dS K                        dS^T written to shared memory as dS (K-major), wgmma, then
//                                            added into the fp32 dQ_accum by a TMA reduce-add of the
//                                            whole tile from shared memory: see "dQ" below
//    then writes dV and scale * dK once.
// 3. ahb_convert: dQ = scale * dQ_accum, rounded to the inputs' type.
//
// Why the transposed orientation (S^T, keys along the accumulator rows): dK and dV are per KEY, so their
// accumulators must have keys along the rows; computing S^T = K Q^T directly puts P^T and dS^T in the
// accumulator layout that is exactly the A-operand layout of dV += P^T dO and dK += dS^T Q. Nothing is
// transposed in memory:
//   operand             stored as                    wgmma sees it as
//   A = K (S^T)          K tile [key][d], d contig.    M x K, K-major (transpose-A 0)
//   B = Q (S^T)          Q tile [query][d]            N x K, K-major: B[d][q] = Q[q][d] (transpose-B 0)
//   A = V, B = dO (dP^T) the same as K, Q
//   A = P^T, dS^T        registers                    (no major-ness: fragments)
//   B = dO (dV), Q (dK)  [query][d], d contiguous     K x N with N contiguous: MN-major (transpose-B 1)
//   A = dS (dQ)          written by the consumer as [query][key], key contiguous: K-major (transpose-A 0)
//   B = K (dQ)           K tile [key][d]              K x N with N contiguous: MN-major (transpose-B 1)
// The transpose bits exist only for 16-bit inputs (PTX ISA, wgmma.mma_async): fp16/bf16 are all this
// kernel takes. dS is the one operand that must be re-laid: it is produced per key row and consumed per
// query row. Each thread stores its 16-bit dS values one by one at [query][key] in the 128-byte swizzled
// pattern (below), which is also free of bank conflicts.
//
// Shared-memory layouts (all 128-byte swizzled, every tile 1024-byte aligned, as matmul_wgmma.cu):
// a [rows][D] tile is stored as D/64 "slabs" of [rows][64] (64 halves = one 128-byte swizzle row), one TMA
// box each. Descriptors, with SBO = 1024 bytes (8 rows of 128 bytes) throughout:
//   K-major (K, V, Q, dO for S^T and dP^T; dS for dQ): k step kk (16 elements = 32 bytes) at slab kk / 4,
//     byte offset 32 (kk % 4) inside the row (matmul_wgmma.cu's A); LBO unused (16).
//   MN-major (dO, Q for dV, dK; K for dQ): k step kk = 16 rows = 2048 bytes further; LBO = the distance
//     between slabs along N (matmul_wgmma.cu's B, the same encoding the week-1 rung runs).
//
// The ring (mbarrier phases as in matmul_wgmma.cu). kv_full: one phase, the producer's arrive + K and V's
// bytes (2 x 128 x D x 2). full[s]: per use the producer arrives with expect_tx = Q + dO boxes (2 x 64 x D x
// 2 bytes, every box whole: out-of-range rows arrive as zeros but still count); consumers wait for parity
// (it / STAGES) & 1. empty[s]: 8 arrivals per use (lane 0 of each consumer warp, once its dV and dK wgmmas,
// the last readers of stage s, have completed); the producer waits for parity (it / STAGES - 1) & 1 before
// refilling it. Every byte the TMA writes is read by wgmma alone, as in the forward: lse2 and Delta (16 of
// each per thread and query block; 512 bytes per query block, L2-resident) come straight from global memory
// into registers once S^T is done (loaded earlier, while the wgmmas run, they cost D = 128 a spill). They
// once went through the ring by a 1-D bulk copy read with ordinary loads: correct (the full barrier's
// transaction count orders the copy before the reads, the empty barrier the reads before the next copy),
// but compute-sanitizer's racecheck reported those reads as racing with the copy (the note says why).
//
// Masks. Keys past S (the last key block: K, V rows read as zeros, but 2^(0 - lse2) is not 0): P = 0.
// Causal (top-left, Sq = Sk): a query block whose last row is before the block's first key sees none of
// its keys: skipped (the loop starts at query block n0 / 64); the blocks that straddle the diagonal
// (m0 < n0 + 128) get P = 0 where key > query. Queries past S: lse2 = +inf gives P = 0, Delta = 0 and
// dO = 0 give dS = 0, and their dQ rows are not written.
// Padding keys (key_lengths, attention_hopper_keys.cuh: batch b has keys 0 .. n - 1). A CTA whose 128 keys are
// all padding (n0 >= n) writes dK = dV = 0 for them and adds nothing to dQ: it leaves before any barrier. In the
// CTA that holds the border, keys >= n get P = 0 as keys past S do; and because they are real memory (NaN or
// anything), each consumer warpgroup first zeroes its own K and V rows from n on in shared memory (a fence for
// the async proxy, then its warpgroup barrier, before the first wgmma): a zero row makes S^T and dP^T finite
// there, so dS = 0 exactly, and 0 x NaN never reaches dQ = dS K. Their dK and dV are then exact zeros.
//
// dQ. Every key block adds to every query row's dQ, and the key blocks are different CTAs. Options: fp32
// additions into a [B, H, S, D] accumulator (this kernel: 5 matmuls per tile pair, no recomputation), or a
// second pass with the query block resident that recomputes S and dP (7 matmuls, no atomics, bitwise
// deterministic: week 4's Triton "split"). Adding was chosen for one kernel to write and check, at the
// price of dQ's last bits depending on the order the CTAs add in; the two consumer warpgroups each add
// their own 64 keys' share (so no warpgroup waits for the other). HOW it is added (AHB_DQ_TMA):
// * 1 (the default, FlashAttention-3's way): each warpgroup stores its fp32 partial tile [64 queries][D] into
//   its own shared-memory buffer (D / 32 boxes of [64][32] fp32, 128-byte swizzled: conflict-free stores),
//   and one thread (tid 0 of the warpgroup) issues one TMA reduce-add per box (cp.reduce.async.bulk.tensor,
//   the tensor map of dQ_accum): the additions happen at L2 on whole 128-byte lines, each consumer thread
//   issues D / 4 float2 shared stores instead of D / 4 float2 global atomics per step, and query rows past
//   S are clipped by the tensor map. The buffer's reuse rule, per step (tests/week4/test_attention_hopper_backward_protocol.py
//   models it and shows each edge is needed):
//     issuer: cp.async.bulk.wait_group.read 0   the previous step's reduce has READ the buffer ...
//     all:    bar.sync (the dS barrier)        ... and every thread knows it before it writes (WAR)
//     all:    stores of the dQ tile, fence.proxy.async.shared::cta   generic-proxy writes made visible to the
//                                              async proxy the TMA reads through (without it the reduce may
//                                              read stale bytes even after the barrier)
//     all:    bar.sync                          every thread's stores and fence happen before the issue (RAW)
//     issuer: D / 32 reduce-adds, commit_group  one bulk group per step
//   and at the end the issuer waits for the whole group (wait_group 0) before the CTA exits, since its
//   shared memory must outlive the reads. The wait for the previous step comes a whole step after its issue,
//   so in practice it does not stall.
// * 0 (-DAHB_DQ_TMA=0, the A/B variant the benchmark times as hopper_atomics): each thread adds its
//   accumulator values straight from registers, as float2 atomics (sm_90: one instruction for a pair of
//   adjacent columns), D / 4 per thread per step, 8 different 32-byte sectors per warp instruction.
#include <cstring>  // memcpy of the tensor maps

// The Hopper instructions, one C++ function each: week1_cuda_python/kernels/hopper_ptx.cuh, found through the
// -I of every build. Beyond the GEMMs' set, this file uses its 3-D TMA load (the tensors are [B*H, S, D]: a box
// that runs past S reads zeros, never the next head), wgmma with A in registers and the fragment identity that
// feeds it (pack_a_fragment), and the TMA's bulk reduce-add of an fp32 tile with its bulk groups (dQ, above).
#include "hopper_ptx.cuh"
#include "attention_hopper_keys.cuh"  // AhKeys: the keys a (batch, head) has (S, or its key_lengths entry)

#define AHB_HOPPER HOPPER_SM90A  // 1 only where the instructions exist: elsewhere the kernels trap

// Two 16-bit values (one 32-bit word, the first in the low half) as floats: pack2's inverse.
__device__ __forceinline__ float2 ahb_unpack(uint32_t bits, __half)
{
    return __half22float2(*reinterpret_cast<__half2*>(&bits));
}
__device__ __forceinline__ float2 ahb_unpack(uint32_t bits, __nv_bfloat16)
{
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&bits));
}

#ifndef AHB_DQ_TMA
#define AHB_DQ_TMA 1  // 1: dQ by TMA reduce-add of a shared-memory tile; 0: per-element float2 atomics ("dQ" above)
#endif

#define AHB_BM 64          // queries per step (wgmma N of S^T, K of dV / dK)
#define AHB_BN 128         // keys per CTA: 2 consumer warpgroups x 64
#define AHB_STAGES 2       // Q / dO ring depth
#define AHB_THREADS 384    // producer warpgroup + 2 consumers
#define AHB_SLAB 64        // columns per TMA box: 64 halves = 128 bytes, the swizzle span
#define AHB_LOG2E 1.4426950408889634f

template <int D>
struct AhbLayout {
    static constexpr int kv_slab = AHB_BN * 128;              // 16 KB: [128 keys][64 columns]
    static constexpr int q_slab = AHB_BM * 128;               // 8 KB: [64 queries][64 columns]
    static constexpr int kv_bytes = (D / AHB_SLAB) * kv_slab; // one of K, V
    static constexpr int q_bytes = (D / AHB_SLAB) * q_slab;   // one of Q, dO
    static constexpr int ds_bytes = AHB_BM * 64 * 2;          // one consumer's dS: [64 queries][64 keys]
    static constexpr int k_off = 0, v_off = kv_bytes, ring_off = 2 * kv_bytes;
    static constexpr int stage_bytes = 2 * q_bytes;           // Q then dO
    static constexpr int ds_off = ring_off + AHB_STAGES * stage_bytes;
    static constexpr int dq_box = AHB_BM * 32 * 4;             // 8 KB: one TMA box of dQ, [64 queries][32] fp32
    static constexpr int dq_bytes = AHB_DQ_TMA ? (D / 32) * dq_box : 0;  // one consumer's dQ tile
    static constexpr int dq_off = ds_off + 2 * ds_bytes;      // a multiple of 1024, as the swizzle needs
    static constexpr int smem_bytes = dq_off + 2 * dq_bytes + 1024;  // + 1 KB to align the base to 1024
};
static_assert(AhbLayout<128>::dq_off % 1024 == 0 && AhbLayout<64>::dq_off % 1024 == 0, "dQ tiles 1024-aligned");
static_assert(AhbLayout<128>::smem_bytes <= 227 * 1024, "H100: at most 227 KB of shared memory per block");

// ---- 1. Delta, lse2, dQ_accum = 0 ------------------------------------------------------------------
// One warp per query row (8 rows per block of 256 threads), grid (S_pad / 8, B * H).
template <typename T, int D>
__global__ void __launch_bounds__(256) ahb_preprocess(const T* __restrict__ o, const T* __restrict__ dout,
                                                       const float* __restrict__ lse, float* __restrict__ lse2,
                                                       float* __restrict__ delta, float* __restrict__ dq_acc,
                                                       int S, int S_pad)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * 8 + threadIdx.x / 32;
    const size_t bh = blockIdx.y;
    if (row >= S_pad) return;
    if (row >= S) {  // padding rows of a query block: P = 2^(s - inf) = 0 and dS = 0 there
        if (lane == 0) { lse2[bh * S_pad + row] = __int_as_float(0x7f800000); delta[bh * S_pad + row] = 0.0f; }
        return;
    }
    const size_t base = (bh * S + row) * D;
    float sum = 0.0f;
#pragma unroll
    for (int c = 2 * lane; c < D; c += 64) {  // D / 64 pairs per lane, adjacent lanes adjacent pairs
        const float2 a = ahb_unpack(*reinterpret_cast<const uint32_t*>(o + base + c), T());
        const float2 b = ahb_unpack(*reinterpret_cast<const uint32_t*>(dout + base + c), T());
        sum += a.x * b.x + a.y * b.y;
        *reinterpret_cast<float2*>(dq_acc + base + c) = make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) {
        delta[bh * S_pad + row] = sum;
        lse2[bh * S_pad + row] = lse[bh * S + row] * AHB_LOG2E;
    }
}

// ---- 3. dQ = scale * dQ_accum in the inputs' type ----------------------------------------------------
template <typename T>
__global__ void __launch_bounds__(256) ahb_convert(const float* __restrict__ dq_acc, T* __restrict__ dq,
                                                    size_t pairs, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < pairs; i += (size_t)gridDim.x * blockDim.x) {
        const float2 v = reinterpret_cast<const float2*>(dq_acc)[i];
        reinterpret_cast<uint32_t*>(dq)[i] = pack2(v.x * scale, v.y * scale, T());
    }
}

// ---- 2. the main kernel ------------------------------------------------------------------------------
template <typename T, int D, bool CAUSAL>
__global__ void __launch_bounds__(AHB_THREADS, 1)
ahb_main(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
         const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
         const __grid_constant__ CUtensorMap map_dq,  // dQ_accum, fp32, boxes [64][32]: AHB_DQ_TMA only
         const float* __restrict__ lse2, const float* __restrict__ delta, float* __restrict__ dq_acc,
         T* __restrict__ dk_out, T* __restrict__ dv_out, int S, int S_pad, float scale, AhKeys key_count)
{
#if AHB_HOPPER
    using L = AhbLayout<D>;
    const int keys = key_count.of(blockIdx.y);  // this head's keys (padding keys: the header)
    if ((int)blockIdx.x * AHB_BN >= keys) {
        // Every key of this block is padding: its dK and dV are zero, it adds nothing to dQ. All 384 threads
        // leave here, before any barrier is initialised or waited on.
        const size_t first = ((size_t)blockIdx.y * S + blockIdx.x * AHB_BN) * D;
        const size_t count = (size_t)min(AHB_BN, S - (int)blockIdx.x * AHB_BN) * D / 2;  // 32-bit pairs
        for (size_t i = threadIdx.x; i < count; i += AHB_THREADS) {
            reinterpret_cast<uint32_t*>(dk_out + first)[i] = 0u;
            reinterpret_cast<uint32_t*>(dv_out + first)[i] = 0u;
        }
        return;
    }
    extern __shared__ unsigned char ahb_raw[];
    __shared__ __align__(8) uint64_t kv_full, full[AHB_STAGES], empty[AHB_STAGES];
    // The head's key count, read from here where the masks need it: kept in a register through the loop it
    // costs D = 128 a spill.
    __shared__ int keys_here;
    unsigned char* base = ahb_raw + ((1024 - (smem_addr(ahb_raw) & 1023)) & 1023);

    const int warpgroup = threadIdx.x / 128;
    const int bh = blockIdx.y;
    const int n0 = blockIdx.x * AHB_BN;
    const int q_blocks = (S + AHB_BM - 1) / AHB_BM;
    // Causal: query block i sees a key of this block only if its last row 64i + 63 >= n0.
    const int first = CAUSAL ? n0 / AHB_BM : 0;
    const int iters = q_blocks - first;

    if (threadIdx.x == 0) {
        keys_here = keys;
        mbar_init(&kv_full, 1);
        for (int s = 0; s < AHB_STAGES; ++s) {
            mbar_init(&full[s], 1);  // the producer's arrive (+ the bytes)
            mbar_init(&empty[s], 8); // lane 0 of each of the 8 consumer warps
        }
        fence_mbarrier_init();
    }
    __syncthreads();

    if (warpgroup == 0) {
        // ---- producer: K and V once, then Q and dO of each query block into the ring ----
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            mbar_arrive_expect_tx(&kv_full, 2 * L::kv_bytes);
#pragma unroll
            for (int j = 0; j < D / AHB_SLAB; ++j) {
                tma_load_3d(base + L::k_off + j * L::kv_slab, &map_k, &kv_full, j * AHB_SLAB, n0, bh);
                tma_load_3d(base + L::v_off + j * L::kv_slab, &map_v, &kv_full, j * AHB_SLAB, n0, bh);
            }
            for (int it = 0; it < iters; ++it) {
                const int s = it % AHB_STAGES, m0 = (first + it) * AHB_BM;
                if (it >= AHB_STAGES) mbar_wait(&empty[s], (it / AHB_STAGES - 1) & 1);
                unsigned char* stage = base + L::ring_off + s * L::stage_bytes;
                mbar_arrive_expect_tx(&full[s], 2 * L::q_bytes);
#pragma unroll
                for (int j = 0; j < D / AHB_SLAB; ++j) {
                    tma_load_3d(stage + j * L::q_slab, &map_q, &full[s], j * AHB_SLAB, m0, bh);
                    tma_load_3d(stage + L::q_bytes + j * L::q_slab, &map_do, &full[s], j * AHB_SLAB, m0, bh);
                }
            }
        }
    } else {
        // ---- consumers: warpgroup c owns keys n0 + 64c .. n0 + 64c + 63 ----
        setmaxnreg_inc<232>();
        const int c = warpgroup - 1;
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        const int row = 16 * warp + lane / 4;  // this thread's accumulator rows: row, row + 8 (of 64)
        const int col = 2 * (lane % 4);        // and columns 8j + col + {0, 1}
        const uint32_t k_tile = smem_addr(base + L::k_off), v_tile = smem_addr(base + L::v_off);
        const uint32_t my_rows = c * 64 * 128; // this warpgroup's 64 rows inside each [128][64] K/V slab
        unsigned char* ds_tile = base + L::ds_off + c * L::ds_bytes;
#if AHB_DQ_TMA
        unsigned char* dq_tile = base + L::dq_off + c * L::dq_bytes;  // this warpgroup's dQ tile (fp32)
        const bool issuer = tid == 0;  // issues (and waits for) this warpgroup's dQ reduce-adds
#endif
        const float c2 = scale * AHB_LOG2E;
        float dk[D / 2], dv[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; ++i) { dk[i] = 0.0f; dv[i] = 0.0f; }

        mbar_wait(&kv_full, 0);
        // Padding keys inside S (the header): rows [pad_from, pad_to) of this warpgroup's 64 K and V rows.
        const int pad_from = max(keys - (n0 + 64 * c), 0), pad_to = min(64, S - (n0 + 64 * c));
        if (pad_from < pad_to) {
            for (int i = pad_from * 8 + tid; i < pad_to * 8; i += 128)  // 16-byte chunks: 8 a 128-byte row
#pragma unroll
                for (int j = 0; j < D / AHB_SLAB; ++j) {
                    const int at = j * L::kv_slab + my_rows + 16 * i;
                    *reinterpret_cast<uint4*>(base + L::k_off + at) = make_uint4(0u, 0u, 0u, 0u);
                    *reinterpret_cast<uint4*>(base + L::v_off + at) = make_uint4(0u, 0u, 0u, 0u);
                }
            fence_async_smem();      // the stores, visible to the async proxy the wgmmas read through
            warpgroup_sync(1 + c);   // every thread's stores and fence before anyone's first wgmma
        }
        for (int it = 0; it < iters; ++it) {
            const int s = it % AHB_STAGES, m0 = (first + it) * AHB_BM;
            const uint32_t q_tile = smem_addr(base + L::ring_off + s * L::stage_bytes);
            const uint32_t do_tile = q_tile + L::q_bytes;
            mbar_wait(&full[s], (it / AHB_STAGES) & 1);

            // S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries each), K-major operands.
            float st[32], dpt[32];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                const uint32_t k_step = (kk / 4) * L::kv_slab + my_rows + (kk % 4) * 32;
                const uint32_t q_step = (kk / 4) * L::q_slab + (kk % 4) * 32;
                wgmma_ss<64, T, WGMMA_B_K_MAJOR>(st, smem_desc(k_tile + k_step, 16, 1024),
                                                 smem_desc(q_tile + q_step, 16, 1024), kk > 0);
            }
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                const uint32_t k_step = (kk / 4) * L::kv_slab + my_rows + (kk % 4) * 32;
                const uint32_t q_step = (kk / 4) * L::q_slab + (kk % 4) * 32;
                wgmma_ss<64, T, WGMMA_B_K_MAJOR>(dpt, smem_desc(v_tile + k_step, 16, 1024),
                                                 smem_desc(do_tile + q_step, 16, 1024), kk > 0);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs(st);
            fence_regs(dpt);

            // P^T and dS^T in place: st <- P^T, dpt <- dS^T. Element 4j + 2h + e is key
            // n0 + 64c + row + 8h, query m0 + 8j + col + e.
            const int kv = *static_cast<volatile int*>(&keys_here);
            const bool masked = (n0 + AHB_BN > kv) || (CAUSAL && m0 < n0 + AHB_BN);
            const float* lse_row = lse2 + (size_t)bh * S_pad + m0 + col;  // S_pad rows: never out of range
            const float* delta_row = delta + (size_t)bh * S_pad + m0 + col;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float2 l2 = *reinterpret_cast<const float2*>(lse_row + 8 * j);
                const float2 dl = *reinterpret_cast<const float2*>(delta_row + 8 * j);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float lj = e ? l2.y : l2.x, dj = e ? dl.y : dl.x;
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int i = 4 * j + 2 * h + e;
                        float p = ex2(st[i] * c2 - lj);
                        if (masked) {
                            const int key = n0 + 64 * c + row + 8 * h, query = m0 + 8 * j + col + e;
                            if (key >= kv || (CAUSAL && key > query)) p = 0.0f;
                        }
                        st[i] = p;
                        dpt[i] = p * (dpt[i] - dj);
                    }
                }
            }

            // dV += P^T dO and dK += dS^T Q: A from registers (4 k slices of 16 queries), B MN-major.
            uint32_t pa[4][4], dsa[4][4];
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) { pack_a_fragment<T>(st, kk, pa[kk]); pack_a_fragment<T>(dpt, kk, dsa[kk]); }
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const uint64_t d_do = smem_desc(do_tile + kk * 16 * 128, L::q_slab, 1024);
                wgmma_rs<D, T, WGMMA_B_MN_MAJOR>(dv, pa[kk], d_do);
            }
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const uint64_t d_q = smem_desc(q_tile + kk * 16 * 128, L::q_slab, 1024);
                wgmma_rs<D, T, WGMMA_B_MN_MAJOR>(dk, dsa[kk], d_q);
            }
            wgmma_commit();
#if AHB_DQ_TMA
            // The previous step's reduce-adds must have READ dq_tile before anyone overwrites it (after the
            // dS barrier below); the bulk group is the issuer's, so the issuer waits here and the barrier
            // passes that on to all 128. (Here rather than just before the barrier: there, ptxas spills.)
            if (issuer) bulk_wait_read<0>();
#endif

            // dS^T -> dS in shared memory, [query][key] (keys contiguous: K-major A of dQ = dS K), 128-byte
            // swizzled: 16-byte chunk k / 8 of row q is stored at chunk (k / 8) ^ (q % 8). The values are
            // the 16-bit ones dK used (dsa). The previous step's dQ wgmmas, the last readers, completed.
#pragma unroll
            for (int j = 0; j < 8; ++j) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const uint32_t bits = dsa[j / 2][2 * (j % 2) + h];  // d[4j + 2h + {0, 1}]
                    const int key = row + 8 * h;
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int q = 8 * j + col + e;
                        const uint32_t offset = q * 128 + (((key >> 3) ^ (q & 7)) << 4) + (key & 7) * 2;
                        *reinterpret_cast<uint16_t*>(ds_tile + offset) = static_cast<uint16_t>(bits >> (16 * e));
                    }
                }
            }
            fence_async_smem();
            warpgroup_sync(1 + c);

            wgmma_wait<0>();  // dV, dK done: Q and dO of stage s are no longer read
            fence_regs(dv);
            fence_regs(dk);
            fence_a(pa);   // the A fragments stay untouched until the wgmmas that read them are done
            fence_a(dsa);
            if (lane == 0) mbar_arrive(&empty[s]);

            // dQ_part = dS K over this warpgroup's 64 keys, 64 columns at a time (32 accumulators).
#pragma unroll
            for (int cc = 0; cc < D / 64; ++cc) {
                float dq[32];
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < 4; ++kk)
                    wgmma_ss<64, T, WGMMA_B_MN_MAJOR>(dq, smem_desc(smem_addr(ds_tile) + kk * 32, 16, 1024),
                                                      smem_desc(k_tile + cc * L::kv_slab + my_rows + kk * 16 * 128,
                                                                L::kv_slab, 1024),
                                                      kk > 0);
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(dq);
#if AHB_DQ_TMA
                // Into the box 2 cc + j / 4 of dq_tile, [64 rows][32 fp32 = 128 bytes], 128-byte swizzled as the
                // tensor map says: 16-byte chunk k of row r at chunk k ^ (r % 8). Column 8 (j % 4) + col is chunk
                // 2 (j % 4) + col / 4 (= 2 (j % 4) ^ col / 4), byte 4 (col % 4) in it; r % 8 = row % 8 for both h.
                // A warp's 8 rows x 4 lanes x 8 bytes then cover each of the 32 banks exactly twice: 2 wavefronts,
                // the minimum for 256 bytes. `at` and `key` pass through an empty asm so the compiler computes
                // the addresses here, not once before the loop: kept live across it they cost D = 128 a spill.
                uint32_t at = smem_addr(dq_tile) + 2 * cc * L::dq_box + row * 128 + (col % 4) * 4;
                uint32_t key = (row & 7) ^ (col / 4);
                asm volatile("" : "+r"(at), "+r"(key));
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int j = 0; j < 8; ++j)
                        st_shared_f2(at + 8 * h * 128 + (j / 4) * L::dq_box + (((2 * (j % 4)) ^ key) << 4),
                                     dq[4 * j + 2 * h], dq[4 * j + 2 * h + 1]);
#else
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int query = m0 + row + 8 * h;
                    if (query >= S) continue;
                    float* dst = dq_acc + ((size_t)bh * S + query) * D + cc * 64 + col;
#pragma unroll
                    for (int j = 0; j < 8; ++j)
                        atomicAdd(reinterpret_cast<float2*>(dst + 8 * j), make_float2(dq[4 * j + 2 * h], dq[4 * j + 2 * h + 1]));
                }
#endif
            }
#if AHB_DQ_TMA
            // Each thread's stores to dq_tile are generic-proxy writes; the TMA reads through the async proxy:
            // each writer fences its own stores for it, then the barrier orders every writer's fence before
            // the issuer's reduce-adds (a fence after the barrier, by the issuer alone, would not cover the
            // other threads' stores).
            fence_async_smem();
            warpgroup_sync(1 + c);
            if (issuer) {
#pragma unroll
                for (int b = 0; b < D / 32; ++b)
                    tma_reduce_add_3d(&map_dq, dq_tile + b * L::dq_box, 32 * b, m0, bh);
                bulk_commit();
            }
#endif
        }
#if AHB_DQ_TMA
        // The last step's reduce-adds still read this CTA's shared memory (and write dQ_accum): the CTA must
        // not exit (its shared memory freed) before they are done.
        if (issuer) bulk_wait<0>();
#endif

        // dV and scale * dK, straight from the accumulators (rows are keys; keys past S not stored).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int key = n0 + 64 * c + row + 8 * h;
            if (key >= S) continue;
            const size_t at = ((size_t)bh * S + key) * D + col;
#pragma unroll
            for (int j = 0; j < D / 8; ++j) {
                *reinterpret_cast<uint32_t*>(dv_out + at + 8 * j) = pack2(dv[4 * j + 2 * h], dv[4 * j + 2 * h + 1], T());
                *reinterpret_cast<uint32_t*>(dk_out + at + 8 * j) =
                    pack2(scale * dk[4 * j + 2 * h], scale * dk[4 * j + 2 * h + 1], T());
            }
        }
    }
#else
    __trap();  // not compiled for sm_90a: the launcher refuses every other GPU before it gets here
#endif
}

// ---- the host launcher (no torch header: hopper_backward.py's binding calls it) ---------------------
// maps: 5 CUtensorMaps of 128 bytes (q, k, v, dO, dQ_accum), encoded by the Python side over [B*H, S, D]:
// boxes of [64 rows][64 columns] for q and dO, [128][64] for k and v, [64][32] (fp32) for dQ_accum (used by
// the AHB_DQ_TMA build only), 128-byte swizzle, zeros outside.
template <typename T, int D, bool CAUSAL>
static cudaError_t ahb_launch_typed(const unsigned char* maps, const void* o, const void* dout, const float* lse,
                                    float* lse2, float* delta, float* dq_acc, void* dq, void* dk, void* dv,
                                    int BH, int S, float scale, AhKeys key_count, cudaStream_t stream)
{
    const int S_pad = (S + AHB_BM - 1) / AHB_BM * AHB_BM;
    ahb_preprocess<T, D><<<dim3((S_pad + 7) / 8, BH), 256, 0, stream>>>(
        static_cast<const T*>(o), static_cast<const T*>(dout), lse, lse2, delta, dq_acc, S, S_pad);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;

    CUtensorMap m[5];
    for (int i = 0; i < 5; ++i) memcpy(&m[i], maps + 128 * i, 128);
    auto kernel = ahb_main<T, D, CAUSAL>;
    const int smem = AhbLayout<D>::smem_bytes;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    kernel<<<dim3((S + AHB_BN - 1) / AHB_BN, BH), AHB_THREADS, smem, stream>>>(
        m[0], m[1], m[2], m[3], m[4], lse2, delta, dq_acc, static_cast<T*>(dk), static_cast<T*>(dv), S, S_pad, scale,
        key_count);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;

    const size_t pairs = (size_t)BH * S * D / 2;
    const int blocks = (int)((pairs + 255) / 256 < 65536 ? (pairs + 255) / 256 : 65536);
    ahb_convert<T><<<blocks, 256, 0, stream>>>(dq_acc, static_cast<T*>(dq), pairs, scale);
    return cudaGetLastError();
}

// dtype 0: float16, 1: bfloat16. key_lengths: null, or (B,) entries, int64 (lengths_wide = 1) or int32, batch
// bh / heads. Returns a cudaError_t (0: launched).
int attention_hopper_bwd_cuda(int dtype, int head_dim, int causal, const unsigned char* maps, const void* o,
                              const void* dout, const float* lse, float* lse2, float* delta, float* dq_acc,
                              void* dq, void* dk, void* dv, int BH, int S, float scale, const void* key_lengths,
                              int lengths_wide, int heads, void* stream)
{
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    const AhKeys keys{key_lengths, lengths_wide, heads, S};
#define AHB_CASE(DT, T, HD, C)                                                                               \
    if (dtype == DT && head_dim == HD && (causal != 0) == C)                                                 \
        return (int)ahb_launch_typed<T, HD, C>(maps, o, dout, lse, lse2, delta, dq_acc, dq, dk, dv, BH, S, scale, \
                                               keys, st);
    AHB_CASE(0, __half, 64, false) AHB_CASE(0, __half, 64, true) AHB_CASE(0, __half, 128, false)
    AHB_CASE(0, __half, 128, true) AHB_CASE(1, __nv_bfloat16, 64, false) AHB_CASE(1, __nv_bfloat16, 64, true)
    AHB_CASE(1, __nv_bfloat16, 128, false) AHB_CASE(1, __nv_bfloat16, 128, true)
#undef AHB_CASE
    return (int)cudaErrorInvalidValue;
}

const char* attention_hopper_bwd_error_string(int code)
{
    return cudaGetErrorString(static_cast<cudaError_t>(code));
}
