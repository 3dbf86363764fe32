// The top of the matmul ladder: tensor cores through WMMA, launched from
// week1_cuda_python/matmul_tensor_cores.py.
//
// C (M x N) = A (M x K) @ B (K x N); A and B row-major fp16 (or bf16 on sm_80+), products
// accumulated in fp32, C written as fp16/bf16 or fp32. One tensor-core instruction family,
// reached through the portable C++ API nvcuda::wmma: a warp loads a 16x16 "fragment" of A and
// one of B, and `mma_sync` adds their 16x16x16 product (4096 multiply-adds) into a 16x16 fp32
// accumulator fragment. Which thread holds which element of a fragment is unspecified: the
// warp acts as one unit, which is why every wmma call is "_sync" and takes the whole warp.
//
// Cost model: 2*M*N*K FLOPs, at least 2*(M*K + K*N) + size(out)*M*N bytes. At 4096^3 that is
// 137 GFLOP on ~100 MB: ~1400 FLOP/byte, far right of the H100's ridge (~1000 TFLOP/s over
// ~3 TB/s ~ 300 FLOP/byte, datasheet). The tensor cores run ~15x faster than the fp32 CUDA
// cores, so every byte must be reused ~15x more than in the fp32 ladder to keep them fed: the rungs
// below are the fp32 ladder's story (global -> shared -> registers) replayed at that speed.
//
// Rungs (each its own extern "C" kernel, for fp16->fp16, fp16->fp32, bf16->bf16, bf16->fp32):
//   wmma_naive_*     each warp owns one 16x16 tile of C; fragments straight from global memory
//   wmma_shared_*    block tiles staged in (skewed) shared memory; warp tiles of FMxFN fragments
//   wmma_cp_async_*  the same, with a STAGES-deep cp.async pipeline (sm_80+): the next tiles
//                    are copied global -> shared while the tensor cores work on this one
//
// Shapes: the kernels never bounds-check their loads. The launcher pads A to (Mp x Kp) and B to
// (Kp x Np), multiples of the block tile, with zeros (exact: a padded k adds 0 * 0; padded rows
// and columns of C are never stored), and passes the padded K and the leading dimensions
// lda = Kp, ldb = Np. The stores are bounds-checked against the true M and N, so C itself is
// never padded. Pointers to A and B must be 32-byte aligned (wmma's rule); C need not be.

#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

using namespace nvcuda;

#define WARPSIZE 32
#define FRAG 16   // m16n16k16: the one WMMA shape that exists for fp16 and bf16 alike
// Shared-memory rows are padded ("skewed") by 8 halves = 16 bytes. An unpadded row of 32 or
// 128 halves is a multiple of 128 bytes, so the 8 rows a fragment load reads at once would
// start in the same bank: an 8-way conflict. 16 extra bytes shift each row by 4 banks, and
// 8 rows then cover all 32 banks once. 8 halves also keeps wmma's rule that the leading
// dimension be a multiple of 16 bytes.
#define SKEW 8

// Tile shapes of the shared-memory rungs. The defaults were chosen for the H100 with
// `python -m week1_cuda_python.matmul_tensor_cores_bench --sweep`, which recompiles this file with
// -DTC_BM=... for each candidate. Static shared memory is capped at 48 KB per block, which
// bounds BM, BN, BK and STAGES together (static_asserts below say which combination is over).
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

// The naive rung: 4 warps per block, 2 x 2 tiles of 16 x 16.
#define NAIVE_WARPS_M 2
#define NAIVE_WARPS_N 2
#define NAIVE_THREADS (NAIVE_WARPS_M * NAIVE_WARPS_N * WARPSIZE)

// ---- helpers ------------------------------------------------------------------------------

__device__ __forceinline__ void store_element(float v, float* p) { *p = v; }
__device__ __forceinline__ void store_element(float v, __half* p) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store_element(float v, __nv_bfloat16* p) { *p = __float2bfloat16_rn(v); }

// Write one 16x16 fp32 accumulator fragment to C at (row0, col0), converting to C's type and
// skipping elements past M or N. The fragment's register layout is opaque, so it goes through
// the warp's 1 KB of shared scratch first (store_matrix_sync knows the layout); then lane l
// writes elements l, l + 32, ...: each store instruction of the warp covers two 16-element row
// pieces of C, contiguous bytes.
template <typename Out>
__device__ __forceinline__ void store_fragment(const wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, float>& acc,
                                               float* scratch, Out* __restrict__ C, int M, int N,
                                               int row0, int col0)
{
    const int lane = threadIdx.x % WARPSIZE;
    wmma::store_matrix_sync(scratch, acc, FRAG, wmma::mem_row_major);
    __syncwarp();  // every lane's part of the fragment is in scratch before anyone reads it
#pragma unroll
    for (int e = lane; e < FRAG * FRAG; e += WARPSIZE) {
        const int row = row0 + e / FRAG, col = col0 + e % FRAG;
        if (row < M && col < N) store_element(scratch[e], &C[(size_t)row * N + col]);
    }
    __syncwarp();  // nobody overwrites scratch with the next fragment while it is being read
}

// ---- 1. wmma_naive: one warp, one 16x16 tile of C, fragments from global memory ----------
// The fp32 ladder's "naive" rung with a warp in place of a thread. Every mma_sync needs two
// fresh 512-byte fragments (8 FLOPs per byte loaded), read through L1/L2 with no reuse
// arranged by us: the tensor cores wait on memory most of the time. Neighbouring warps of a
// block share rows of A and columns of B, so L1 catches some of it.
template <typename In, typename Out>
__device__ __forceinline__ void wmma_naive_body(const In* __restrict__ A, const In* __restrict__ B,
                                                Out* __restrict__ C, int M, int N, int K, int lda, int ldb)
{
    // BEGIN EXERCISE: this warp's 16x16 tile of C (row0, col0: 2 x 2 warps per block; leave if row0 >= M or
    //   col0 >= N); an fp32 accumulator fragment filled with 0; for k in steps of 16: load_matrix_sync an
    //   A and a B fragment straight from global memory (leading dimensions lda, ldb), mma_sync; store
    //   with store_fragment through a 16x16 float __shared__ scratch per warp
    // HINT: wmma works per warp: each warp owns one 16x16 tile of C and accumulates A(16x16) x B(16x16)
    //   products along K in an fp32 fragment; this naive version loads fragments straight from global
    //   memory.
    // HINT: warp id from threadIdx.x; row0/col0 from the block index and the warp's position in the 2 x 2
    //   warp grid (times FRAG); early return for whole warps outside C; accumulator filled with 0; loop
    //   k by 16: two load_matrix_sync, one mma_sync; store_fragment via this warp's scratch.
    // HINT: the fragment addresses: `A + (size_t)row0 * lda + k` and `B + (size_t)k * ldb + col0`.
    __shared__ __align__(128) float scratch[NAIVE_WARPS_M * NAIVE_WARPS_N][FRAG * FRAG];
    const int warp = threadIdx.x / WARPSIZE;
    const int row0 = (blockIdx.y * NAIVE_WARPS_M + warp / NAIVE_WARPS_N) * FRAG;
    const int col0 = (blockIdx.x * NAIVE_WARPS_N + warp % NAIVE_WARPS_N) * FRAG;
    if (row0 >= M || col0 >= N) return;  // whole warps leave together; no block barrier follows

    wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::fragment<wmma::matrix_a, FRAG, FRAG, FRAG, In, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, In, wmma::row_major> b;
    for (int k = 0; k < K; k += FRAG) {
        wmma::load_matrix_sync(a, A + (size_t)row0 * lda + k, lda);
        wmma::load_matrix_sync(b, B + (size_t)k * ldb + col0, ldb);
        wmma::mma_sync(acc, a, b, acc);
    }
    store_fragment(acc, scratch[warp], C, M, N, row0, col0);
    // END EXERCISE
}

// ---- shared pieces of rungs 2 and 3 ---------------------------------------------------------

// Bytes of one pipeline stage: a BM x BK tile of A and a BK x BN tile of B, rows skewed.
template <typename In, int BM, int BN, int BK>
struct TileSmem {
    static constexpr int A_PITCH = BK + SKEW;
    static constexpr int B_PITCH = BN + SKEW;
    static constexpr int A_ELEMS = BM * A_PITCH;
    static constexpr int STAGE_ELEMS = A_ELEMS + BK * B_PITCH;
    static constexpr int STAGE_BYTES = STAGE_ELEMS * (int)sizeof(In);
};

// Copy a ROWS x COLS tile (COLS a multiple of 8) from global memory (leading dimension ld) to
// shared memory (row pitch `pitch`), 16 bytes per thread per step. Consecutive threads take
// consecutive 16-byte chunks of a row: each warp reads whole 128-byte lines (coalesced).
template <int ROWS, int COLS, int THREADS, typename In>
__device__ __forceinline__ void copy_tile_sync(In* dst, int pitch, const In* __restrict__ src, int ld)
{
    constexpr int CHUNKS_PER_ROW = COLS / 8;
    constexpr int CHUNKS = ROWS * CHUNKS_PER_ROW;
    static_assert(COLS % 8 == 0 && CHUNKS % THREADS == 0, "tile must split into 16-byte chunks evenly");
#pragma unroll
    for (int step = 0; step < CHUNKS / THREADS; ++step) {
        const int c = threadIdx.x + step * THREADS;
        const int r = c / CHUNKS_PER_ROW, col = (c % CHUNKS_PER_ROW) * 8;
        *reinterpret_cast<uint4*>(dst + r * pitch + col) =
            *reinterpret_cast<const uint4*>(src + (size_t)r * ld + col);
    }
}

// Fragment loads from shared memory. For fp16, wmma::load_matrix_sync emits PTX's
// `wmma.load ... .shared.f16`, which ptxas turns into ldmatrix (LDSM: one instruction moves a
// whole 16x16 fragment, transposing B on the way). CUDA 13's bf16 overloads emit the same
// instruction without a state space ("generic" address), and ptxas then falls back to 32-bit
// generic loads (LD.E) plus byte permutes, several times the instructions (check with --sass).
// So for bf16 we write the PTX instruction ourselves, with `.shared`. The fragment's storage
// is four 32-bit registers, which is how mma.hpp itself hands it to the instruction.
template <typename Use>
__device__ __forceinline__ void load_shared(wmma::fragment<Use, FRAG, FRAG, FRAG, __half, wmma::row_major>& f,
                                            const __half* p, unsigned ldm)
{
    wmma::load_matrix_sync(f, p, ldm);
}
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // bf16 fragments exist from sm_80 on
__device__ __forceinline__ void load_shared(wmma::fragment<wmma::matrix_a, FRAG, FRAG, FRAG, __nv_bfloat16, wmma::row_major>& f,
                                            const __nv_bfloat16* p, unsigned ldm)
{
    int* r = reinterpret_cast<int*>(&f);
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr), "r"(ldm) : "memory");
}
__device__ __forceinline__ void load_shared(wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, __nv_bfloat16, wmma::row_major>& f,
                                            const __nv_bfloat16* p, unsigned ldm)
{
    int* r = reinterpret_cast<int*>(&f);
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr), "r"(ldm) : "memory");
}
#endif

// One BK-deep slice of the block tile, for one warp: FM x FN accumulator fragments (the warp
// tile), fed by FM fragments of A and FN of B per 16-wide k step. Each fragment loaded from
// shared memory feeds FN (or FM) mma_syncs: the register-blocking idea of the fp32 ladder,
// with fragments for registers. Shared-memory reads per mma: (FM + FN) / (FM * FN), 1/2 at 4x4.
template <typename In, int BK, int FM, int FN>
__device__ __forceinline__ void mma_warp_tile(const In* As, int a_pitch, const In* Bs, int b_pitch,
                                              wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, float> (&acc)[FM][FN])
{
    // BEGIN EXERCISE: per 16-wide k step of the BK slice: FM fragments of A (load_shared, rows i * 16 of
    //   As) and FN of B (columns j * 16 of Bs), then the FM x FN mma_syncs: each fragment feeds FN (or
    //   FM) of them
    // HINT: each warp computes an FM x FN grid of 16x16 tiles; loading all FM A fragments and FN B fragments
    //   once per k step lets each fragment feed FN (or FM) mma_syncs, the tensor-core version of
    //   register blocking.
    // HINT: arrays of FM A fragments and FN B fragments; unrolled loop kk over BK by FRAG: load_shared each
    //   A fragment (row block i of As, column kk) and each B fragment (row kk of Bs, column block j),
    //   then the double loop of mma_sync.
    // HINT: the A fragment at `As + i * FRAG * a_pitch + kk`, the B fragment at `Bs + kk * b_pitch + j *
    //   FRAG`.
    wmma::fragment<wmma::matrix_a, FRAG, FRAG, FRAG, In, wmma::row_major> a[FM];
    wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, In, wmma::row_major> b[FN];
#pragma unroll
    for (int kk = 0; kk < BK; kk += FRAG) {
#pragma unroll
        for (int i = 0; i < FM; ++i) load_shared(a[i], As + i * FRAG * a_pitch + kk, a_pitch);
#pragma unroll
        for (int j = 0; j < FN; ++j) load_shared(b[j], Bs + kk * b_pitch + j * FRAG, b_pitch);
#pragma unroll
        for (int i = 0; i < FM; ++i)
#pragma unroll
            for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    // END EXERCISE
}

// Every warp writes its FM x FN fragments; `smem` is free again (the caller synchronised).
template <typename Out, int FM, int FN>
__device__ __forceinline__ void store_warp_tile(const wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, float> (&acc)[FM][FN],
                                                float* scratch, Out* __restrict__ C, int M, int N, int row0, int col0)
{
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) store_fragment(acc[i][j], scratch, C, M, N, row0 + i * FRAG, col0 + j * FRAG);
}

// ---- 2. wmma_shared: block tiles in shared memory, warp tiles of fragments ----------------
// The block (BM/WM x BN/WN warps) copies a BM x BK tile of A and a BK x BN tile of B into
// shared memory once; each warp then computes its WM x WN warp tile from there. Global reads
// per FLOP drop by the block tile's reuse (each element of A feeds BN columns), and the
// tensor cores read fragments from shared memory (~20-30 cycles) instead of L2 (~200+).
// Load and compute alternate: while a tile is being copied, the tensor cores idle.
template <typename In, typename Out, int BM, int BN, int BK, int WM, int WN>
__device__ __forceinline__ void wmma_shared_body(const In* __restrict__ A, const In* __restrict__ B,
                                                 Out* __restrict__ C, int M, int N, int K, int lda, int ldb)
{
    using S = TileSmem<In, BM, BN, BK>;
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = (BM / WM) * WARPS_N * WARPSIZE;
    constexpr int FM = WM / FRAG, FN = WN / FRAG;
    constexpr int SMEM_BYTES = S::STAGE_BYTES;
    static_assert(BM % WM == 0 && BN % WN == 0 && WM % FRAG == 0 && WN % FRAG == 0 && BK % FRAG == 0,
                  "tiles must be multiples of the 16x16x16 fragment");
    static_assert(SMEM_BYTES <= 48 * 1024, "static shared memory is limited to 48 KB per block");
    static_assert(THREADS / WARPSIZE * FRAG * FRAG * 4 <= SMEM_BYTES, "epilogue scratch must fit in the tile buffers");

    __shared__ __align__(128) unsigned char smem[SMEM_BYTES];
    In* As = reinterpret_cast<In*>(smem);
    In* Bs = As + S::A_ELEMS;

    const int warp = threadIdx.x / WARPSIZE;
    const int warp_row = warp / WARPS_N, warp_col = warp % WARPS_N;
    const In* A_block = A + (size_t)blockIdx.y * BM * lda;
    const In* B_block = B + (size_t)blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    // BEGIN EXERCISE: per BK slice: the block copies its tile of A (BM x BK) and of B (BK x BN) into shared
    //   memory (copy_tile_sync, rows skewed: S::A_PITCH, S::B_PITCH), __syncthreads(), each warp runs
    //   mma_warp_tile on its part of the tiles, __syncthreads() before the next copy overwrites them
    // HINT: the classic shared-memory tiling, with warps as the unit of compute: the block stages a BM x BK
    //   slice of A and a BK x BN slice of B, then every warp multiplies its own part of them.
    // HINT: loop k0 over K by BK: copy_tile_sync for A (offset k0 along the row) and for B (offset k0 rows,
    //   so k0 * ldb), __syncthreads(), mma_warp_tile with As offset by the warp's rows and Bs by the
    //   warp's columns, __syncthreads().
    // HINT: the second barrier matters: the next iteration's copy would overwrite a tile another warp is
    //   still reading.
    for (int k0 = 0; k0 < K; k0 += BK) {
        copy_tile_sync<BM, BK, THREADS>(As, S::A_PITCH, A_block + k0, lda);
        copy_tile_sync<BK, BN, THREADS>(Bs, S::B_PITCH, B_block + (size_t)k0 * ldb, ldb);
        __syncthreads();  // the whole tile is in shared memory before any warp reads it
        mma_warp_tile<In, BK, FM, FN>(As + warp_row * WM * S::A_PITCH, S::A_PITCH,
                                      Bs + warp_col * WN, S::B_PITCH, acc);
        __syncthreads();  // no warp overwrites the tile while another still reads it
    }
    // END EXERCISE
    float* scratch = reinterpret_cast<float*>(smem) + warp * FRAG * FRAG;
    store_warp_tile(acc, scratch, C, M, N, blockIdx.y * BM + warp_row * WM, blockIdx.x * BN + warp_col * WN);
}

// ---- 3. wmma_cp_async: a STAGES-deep pipeline of asynchronous copies ----------------------
// In rung 2 a warp's copy of the next tile is a global load into registers followed by a
// store to shared memory: the warp waits for DRAM/L2 before it can store, and the tensor cores
// wait for the tile. Ampere added cp.async: a copy global -> shared that bypasses registers and
// does not block the issuing thread. The block keeps STAGES tiles in flight: while the
// tensor cores work on tile t, the copies of tiles t+1 .. t+STAGES-1 are on their way.
// STAGES = 2 is classic double buffering. `.cg` caches the copy in L2 only: each element is
// read once per block, so L1 would gain nothing.
// On sm_75 (T4) cp.async does not exist: the same code then copies synchronously through
// registers (correct, with rung 2's speed); commit and wait become no-ops.
__device__ __forceinline__ void copy16_async(void* smem_dst, const void* gmem_src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(gmem_src) : "memory");
#else
    *reinterpret_cast<uint4*>(smem_dst) = *reinterpret_cast<const uint4*>(gmem_src);
#endif
}

// Close the group of copies issued since the last commit (an empty group is allowed).
__device__ __forceinline__ void copy_commit()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Wait until at most PENDING of this thread's committed groups are still in flight.
template <int PENDING>
__device__ __forceinline__ void copy_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" :: "n"(PENDING) : "memory");
#endif
}

template <int ROWS, int COLS, int THREADS, typename In>
__device__ __forceinline__ void copy_tile_async(In* dst, int pitch, const In* __restrict__ src, int ld)
{
    constexpr int CHUNKS_PER_ROW = COLS / 8;
    constexpr int CHUNKS = ROWS * CHUNKS_PER_ROW;
    static_assert(COLS % 8 == 0 && CHUNKS % THREADS == 0, "tile must split into 16-byte chunks evenly");
#pragma unroll
    for (int step = 0; step < CHUNKS / THREADS; ++step) {
        const int c = threadIdx.x + step * THREADS;
        const int r = c / CHUNKS_PER_ROW, col = (c % CHUNKS_PER_ROW) * 8;
        copy16_async(dst + r * pitch + col, src + (size_t)r * ld + col);
    }
}

template <typename In, typename Out, int BM, int BN, int BK, int WM, int WN, int STAGES>
__device__ __forceinline__ void wmma_cp_async_body(const In* __restrict__ A, const In* __restrict__ B,
                                                   Out* __restrict__ C, int M, int N, int K, int lda, int ldb)
{
    using S = TileSmem<In, BM, BN, BK>;
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = (BM / WM) * WARPS_N * WARPSIZE;
    constexpr int FM = WM / FRAG, FN = WN / FRAG;
    constexpr int SMEM_BYTES = STAGES * S::STAGE_BYTES;
    static_assert(STAGES >= 2, "a pipeline needs at least two stages");
    static_assert(BM % WM == 0 && BN % WN == 0 && WM % FRAG == 0 && WN % FRAG == 0 && BK % FRAG == 0,
                  "tiles must be multiples of the 16x16x16 fragment");
    static_assert(SMEM_BYTES <= 48 * 1024, "static shared memory is limited to 48 KB per block: "
                                           "fewer STAGES or a smaller BK");
    static_assert(THREADS / WARPSIZE * FRAG * FRAG * 4 <= SMEM_BYTES, "epilogue scratch must fit in the tile buffers");

    __shared__ __align__(128) unsigned char smem[SMEM_BYTES];

    const int warp = threadIdx.x / WARPSIZE;
    const int warp_row = warp / WARPS_N, warp_col = warp % WARPS_N;
    const In* A_block = A + (size_t)blockIdx.y * BM * lda;
    const In* B_block = B + (size_t)blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    // BEGIN EXERCISE: the pipeline: issue(t) copies tile t into stage t % STAGES with copy_tile_async and
    //   always commits a group (even past the last tile); STAGES - 1 tiles in flight first; then per
    //   tile: copy_wait<STAGES - 2>() (this thread's copies of tile t landed), __syncthreads() (every
    //   thread's, and every warp is done with tile t-1), issue tile t + STAGES - 1 into the freed stage,
    //   mma_warp_tile on tile t; finally copy_wait<0>() and __syncthreads() before the stages become
    //   the epilogue's scratch
    // HINT: a multi-stage cp.async pipeline: while the tensor cores work on tile t, the copies of the next
    //   STAGES - 1 tiles are already in flight; one commit group per tile keeps the wait count in step
    //   with t.
    // HINT: a lambda issue(t) that copies tile t into stage t % STAGES when t < tiles and always commits; a
    //   prologue issuing tiles 0..STAGES-2; the main loop wait / barrier / issue(t + STAGES - 1) / mma
    //   on stage t % STAGES; then drain with copy_wait<0>() and a barrier.
    // HINT: in the loop, `copy_wait<STAGES - 2>()` then `__syncthreads()` before issuing: the barrier also
    //   guarantees every warp is done with the stage about to be refilled.
    In* stage_base = reinterpret_cast<In*>(smem);
    const int tiles = K / BK;
    // Tile t lives in stage t % STAGES and is copy group number t of every thread.
    auto issue = [&](int t) {
        if (t < tiles) {
            In* As = stage_base + (t % STAGES) * S::STAGE_ELEMS;
            copy_tile_async<BM, BK, THREADS>(As, S::A_PITCH, A_block + t * BK, lda);
            copy_tile_async<BK, BN, THREADS>(As + S::A_ELEMS, S::B_PITCH, B_block + (size_t)t * BK * ldb, ldb);
        }
        copy_commit();  // always commit, even nothing: the group count then stays in step with t
    };

    // Prologue: STAGES - 1 tiles in flight before the first mma.
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) issue(t);

    for (int t = 0; t < tiles; ++t) {
        copy_wait<STAGES - 2>();  // groups 0..t (so tile t) of *this thread* have landed ...
        __syncthreads();          // ... and of every thread; also, every warp is done with tile t-1
        issue(t + STAGES - 1);    // refill the stage tile t-1 used: it overlaps the mmas below
        const In* As = stage_base + (t % STAGES) * S::STAGE_ELEMS;
        mma_warp_tile<In, BK, FM, FN>(As + warp_row * WM * S::A_PITCH, S::A_PITCH,
                                      As + S::A_ELEMS + warp_col * WN, S::B_PITCH, acc);
    }
    copy_wait<0>();
    __syncthreads();  // the stages are reused as epilogue scratch: every warp is done reading
    // END EXERCISE
    float* scratch = reinterpret_cast<float*>(smem) + warp * FRAG * FRAG;
    store_warp_tile(acc, scratch, C, M, N, blockIdx.y * BM + warp_row * WM, blockIdx.x * BN + warp_col * WN);
}

// ---- the extern "C" entry points ------------------------------------------------------------
// One kernel per (rung, input type, output type), so PyCUDA finds them by plain names:
// wmma_<rung>_<in>_<out>. bf16 WMMA exists from sm_80 (Ampere) on: compiled for sm_75, the
// bf16 kernels are stubs that trap, and the launcher refuses bf16 on such a GPU before any
// launch.
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
