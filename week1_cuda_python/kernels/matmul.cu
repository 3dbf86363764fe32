// The fp32 matmul ladder in CUDA C: C = A @ B, launched from week1_cuda_python/matmul.py.
//
// A is M x K, B is K x N, C is M x N, all row-major float32. Each rung is its own kernel so
// the steps can be diffed; the README gives each rung's predicted and measured gain.
//
// Cost model: 2*M*N*K FLOPs. The minimum traffic is 4*(M*K + K*N + M*N) bytes, but a kernel
// that reads A and B from global memory once per FLOP pair moves 8*M*N*K bytes: at 4096^3
// that is 550 GB, about 180 ms at 3 TB/s. Everything after the naive rungs is about reusing
// each loaded value many times from faster storage: shared memory (per block), then
// registers (per thread).
//
// Rungs 1-3 handle any M, N, K with bounds checks. Rungs 4-7 assume M, N, K are multiples of
// their tile sizes (and 16-byte alignment for float4): the Python launcher pads the inputs
// when they are not, so the hot loops carry no bounds checks.

#define WARPSIZE 32

// ---- 1. naive: one thread per output, threadIdx.x walks ROWS ----------------------------
// The 32 threads of a warp have consecutive threadIdx.x, so here they own 32 different rows
// of C in one column. Each load of A touches 32 rows (32 separate 32-byte sectors: 1/8 of
// every sector wasted), each load of B is the same address for the whole warp, and each
// store to C is strided by N. Uncoalesced on purpose: the next rung swaps two lines.
extern "C" __global__ void sgemm_naive(const float* __restrict__ A, const float* __restrict__ B,
                                       float* __restrict__ C, int M, int N, int K)
{
    // BEGIN EXERCISE: one thread per output: row from the x coordinates (blockIdx.x * blockDim.x +
    //   threadIdx.x), col from y; guard both; acc over k of A[row][k] * B[k][col] (size_t offsets)
    // HINT: the simplest mapping: one thread, one C element, a dot product of a row of A and a column of B
    //   read straight from global memory. Row from x makes a warp span 32 rows: slow on purpose.
    // HINT: `const int row = blockIdx.x * blockDim.x + threadIdx.x;` then a guarded loop over k, with
    //   (size_t) offsets: M * K can pass 2^31.
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
        }
        C[(size_t)row * N + col] = acc;
    }
    // END EXERCISE
}

// ---- 2. coalesced: threadIdx.x walks COLUMNS ------------------------------------------------
// Now a warp owns 32 neighbouring columns of one row: its loads of B are 128 contiguous
// bytes (one transaction), its load of A is one broadcast address, its store to C is
// contiguous. Same FLOPs, same instruction count, several times faster.
extern "C" __global__ void sgemm_coalesced(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K)
{
    // BEGIN EXERCISE: as sgemm_naive with threadIdx.x over COLUMNS: col from x, row from y
    // HINT: a warp's 32 threads now share a row and take 32 neighbouring columns: their loads of B and stores
    //   of C are 128 contiguous bytes (coalesced), their load of A one broadcast address.
    // HINT: sgemm_naive's body with the two index lines swapped: col from the x coordinates, row from y.
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
        }
        C[(size_t)row * N + col] = acc;
    }
    // END EXERCISE
}

// ---- 3. shared-memory tiles ----------------------------------------------------------------
// A 32x32 block of threads loads a 32x32 tile of A and of B into shared memory once, then
// every thread reads 32 values of each from there: each global load now feeds 32 FMAs
// instead of 1. Out-of-range elements are loaded as 0, which adds nothing to the sum.
#define SHARED_TILE 32
extern "C" __global__ void sgemm_shared(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K)
{
    // BEGIN EXERCISE: 32x32 __shared__ tiles of A and B; per k0 step each thread loads one element of
    //   each (0 outside the matrices), __syncthreads(), SHARED_TILE FMAs from the tiles,
    //   __syncthreads() again; write C with a bounds check
    // HINT: each element loaded into shared memory is read by 32 threads: 32 FMAs per global load instead of 1.
    //   Out-of-range elements load as 0, which adds nothing.
    // HINT: one barrier after the loads (the tile must be complete) and one after the math (nobody overwrites
    //   the tile while a slower warp still reads it).
    // HINT: `As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;`
    __shared__ float As[SHARED_TILE][SHARED_TILE];
    __shared__ float Bs[SHARED_TILE][SHARED_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * SHARED_TILE + ty;
    const int col = blockIdx.x * SHARED_TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += SHARED_TILE) {
        // tx walks along a row of each tile: coalesced global loads, conflict-free stores.
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();  // the whole tile must be loaded before anyone reads it
#pragma unroll
        for (int k = 0; k < SHARED_TILE; ++k) {
            // As[ty][k] is one address per warp (broadcast); Bs[k][tx] is 32 banks in a row.
            acc += As[ty][k] * Bs[k][tx];
        }
        __syncthreads();  // nobody overwrites the tile while a slower warp still reads it
    }
    if (row < M && col < N) {
        C[(size_t)row * N + col] = acc;
    }
    // END EXERCISE
}

// ---- 4. 1-D register blocking: each thread computes TM outputs of one column -----------
// Rung 3 does 2 shared-memory loads per FMA, and shared memory, not arithmetic, becomes the
// limit. Here a thread keeps TM=8 accumulators in registers: one value of B loaded from
// shared memory is reused for 8 FMAs. Tiles: BM x BK of A, BK x BN of B, 512 threads.
#define B1_BM 64
#define B1_BN 64
#define B1_BK 8
#define B1_TM 8
extern "C" __global__ void __launch_bounds__((B1_BM * B1_BN) / B1_TM)
sgemm_blocktile_1d(const float* __restrict__ A, const float* __restrict__ B,
                   float* __restrict__ C, int M, int N, int K)
{
    // BEGIN EXERCISE: a B1_BM x B1_BN block tile, B1_BK deep; each of the 512 threads loads one element
    //   of the A tile and one of the B tile per step, and computes B1_TM outputs of one column of C in
    //   registers (one B value from shared memory feeds B1_TM FMAs); __syncthreads() around the math;
    //   no bounds checks: the launcher pads to whole tiles
    // HINT: a value of B read from shared memory is kept in a register and reused for B1_TM rows of A: fewer
    //   shared loads per FMA, the limit of rung 3.
    // HINT: threadCol = threadIdx.x % B1_BN, threadRow = threadIdx.x / B1_BN; move A, B, C to the block's
    //   corner once; per k: `const float b = Bs[k * B1_BN + threadCol];` then B1_TM FMAs into acc[i].
    __shared__ float As[B1_BM * B1_BK];
    __shared__ float Bs[B1_BK * B1_BN];
    const int threadCol = threadIdx.x % B1_BN;
    const int threadRow = threadIdx.x / B1_BN;
    A += (size_t)blockIdx.y * B1_BM * K;
    B += (size_t)blockIdx.x * B1_BN;
    C += (size_t)blockIdx.y * B1_BM * N + (size_t)blockIdx.x * B1_BN;
    // 512 threads load the 64x8 A tile and the 8x64 B tile, one element each.
    const int innerColA = threadIdx.x % B1_BK, innerRowA = threadIdx.x / B1_BK;
    const int innerColB = threadIdx.x % B1_BN, innerRowB = threadIdx.x / B1_BN;
    float acc[B1_TM] = {0.0f};
    for (int k0 = 0; k0 < K; k0 += B1_BK) {
        As[innerRowA * B1_BK + innerColA] = A[(size_t)innerRowA * K + innerColA];
        Bs[innerRowB * B1_BN + innerColB] = B[(size_t)innerRowB * N + innerColB];
        __syncthreads();
        A += B1_BK;
        B += (size_t)B1_BK * N;
#pragma unroll
        for (int k = 0; k < B1_BK; ++k) {
            const float b = Bs[k * B1_BN + threadCol];  // reused from a register TM times
#pragma unroll
            for (int i = 0; i < B1_TM; ++i) {
                acc[i] += As[(threadRow * B1_TM + i) * B1_BK + k] * b;
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < B1_TM; ++i) {
        C[(size_t)(threadRow * B1_TM + i) * N + threadCol] = acc[i];
    }
    // END EXERCISE
}

// ---- 5. 2-D register blocking: each thread computes a TM x TN block ---------------------
// An outer product of TM values of A and TN values of B gives TM*TN FMAs for TM+TN shared
// loads: 64 FMAs per 16 loads at 8x8, versus 8 per 9 in rung 4. 256 threads own a
// 128x128 tile of C, so each element of A and B fetched from global memory feeds 128 FMAs.
#define B2_BM 128
#define B2_BN 128
#define B2_BK 8
#define B2_TM 8
#define B2_TN 8
#define B2_THREADS ((B2_BM * B2_BN) / (B2_TM * B2_TN))
extern "C" __global__ void __launch_bounds__(B2_THREADS)
sgemm_blocktile_2d(const float* __restrict__ A, const float* __restrict__ B,
                   float* __restrict__ C, int M, int N, int K)
{
    // BEGIN EXERCISE: the shared tiles As (B2_BM x B2_BK) and Bs (B2_BK x B2_BN); this thread's place
    //   (threadRow, threadCol) among the (B2_BM / B2_TM) x (B2_BN / B2_TN) blocks of C; A, B and C moved to
    //   the block tile's corner; the load coordinates (innerRow/Col, stride in rows) of A and B; the
    //   B2_TM x B2_TN accumulators and the register arrays regM, regN
    // HINT: 256 threads each own a B2_TM x B2_TN block of the 128 x 128 tile: 64 accumulators per thread
    //   in registers, the point of this rung. The tiles hold more elements than there are threads, so
    //   each thread loads several rows, strideA (resp. strideB) rows apart.
    // HINT: `const int strideA = B2_THREADS / B2_BK;` (rows of A loaded per pass of all threads)
    __shared__ float As[B2_BM * B2_BK];
    __shared__ float Bs[B2_BK * B2_BN];
    const int threadCol = threadIdx.x % (B2_BN / B2_TN);
    const int threadRow = threadIdx.x / (B2_BN / B2_TN);
    A += (size_t)blockIdx.y * B2_BM * K;
    B += (size_t)blockIdx.x * B2_BN;
    C += (size_t)blockIdx.y * B2_BM * N + (size_t)blockIdx.x * B2_BN;
    const int innerColA = threadIdx.x % B2_BK, innerRowA = threadIdx.x / B2_BK;
    const int strideA = B2_THREADS / B2_BK;
    const int innerColB = threadIdx.x % B2_BN, innerRowB = threadIdx.x / B2_BN;
    const int strideB = B2_THREADS / B2_BN;
    float acc[B2_TM * B2_TN] = {0.0f};
    float regM[B2_TM], regN[B2_TN];
    // END EXERCISE

    // BEGIN EXERCISE: per B2_BK step: load both tiles cooperatively (rows strideA / strideB apart),
    //   __syncthreads(), advance A and B, then for each k the outer product of B2_TM values of A (regM) and
    //   B2_TN of B (regN) into acc; __syncthreads(); finally each thread writes its B2_TM x B2_TN block of C
    // HINT: the outer product: B2_TM + B2_TN shared loads feed B2_TM * B2_TN FMAs, so shared memory stops
    //   being the limit. No bounds checks: the launcher pads to whole tiles.
    // HINT: regM[i] = As[(threadRow * B2_TM + i) * B2_BK + k]; regN[j] = Bs[k * B2_BN + threadCol * B2_TN + j];
    //   then `acc[i * B2_TN + j] += regM[i] * regN[j]` in two unrolled loops
    for (int k0 = 0; k0 < K; k0 += B2_BK) {
        for (int r = 0; r < B2_BM; r += strideA) {
            As[(innerRowA + r) * B2_BK + innerColA] = A[(size_t)(innerRowA + r) * K + innerColA];
        }
        for (int r = 0; r < B2_BK; r += strideB) {
            Bs[(innerRowB + r) * B2_BN + innerColB] = B[(size_t)(innerRowB + r) * N + innerColB];
        }
        __syncthreads();
        A += B2_BK;
        B += (size_t)B2_BK * N;
#pragma unroll
        for (int k = 0; k < B2_BK; ++k) {
#pragma unroll
            for (int i = 0; i < B2_TM; ++i) regM[i] = As[(threadRow * B2_TM + i) * B2_BK + k];
#pragma unroll
            for (int j = 0; j < B2_TN; ++j) regN[j] = Bs[k * B2_BN + threadCol * B2_TN + j];
#pragma unroll
            for (int i = 0; i < B2_TM; ++i)
#pragma unroll
                for (int j = 0; j < B2_TN; ++j) acc[i * B2_TN + j] += regM[i] * regN[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < B2_TM; ++i)
#pragma unroll
        for (int j = 0; j < B2_TN; ++j)
            C[(size_t)(threadRow * B2_TM + i) * N + threadCol * B2_TN + j] = acc[i * B2_TN + j];
    // END EXERCISE
}

// ---- 6. vectorized: float4 global loads/stores, A stored transposed in shared memory -----
// Same tiling as rung 5. Loading A and B as float4 quarters the load instructions; storing
// the A tile transposed (As[k][m]) turns the inner loop's reads of A into contiguous
// addresses, which the compiler fetches with 128-bit shared loads (LDS.128) like those of B.
#define V_BM 128
#define V_BN 128
#define V_BK 8
#define V_TM 8
#define V_TN 8
#define V_THREADS ((V_BM * V_BN) / (V_TM * V_TN))
extern "C" __global__ void __launch_bounds__(V_THREADS)
sgemm_vectorized(const float* __restrict__ A, const float* __restrict__ B,
                 float* __restrict__ C, int M, int N, int K)
{
    // BEGIN EXERCISE: as sgemm_blocktile_2d's first hole, with the A tile stored TRANSPOSED in shared
    //   memory (As[k * V_BM + m]) and float4 load coordinates: one float4 of A (innerRowA, innerColA over
    //   V_BK / 4) and one of B (over V_BN / 4) per thread
    // HINT: 256 threads, an A tile of 128 x 8 = 256 float4 and a B tile of 8 x 128 = 256 float4: exactly
    //   one 16-byte load of each per thread per step.
    // HINT: `const int innerRowA = threadIdx.x / (V_BK / 4), innerColA = threadIdx.x % (V_BK / 4);`
    __shared__ float As[V_BK * V_BM];  // transposed: As[k * V_BM + m]
    __shared__ float Bs[V_BK * V_BN];
    const int threadCol = threadIdx.x % (V_BN / V_TN);
    const int threadRow = threadIdx.x / (V_BN / V_TN);
    A += (size_t)blockIdx.y * V_BM * K;
    B += (size_t)blockIdx.x * V_BN;
    C += (size_t)blockIdx.y * V_BM * N + (size_t)blockIdx.x * V_BN;
    // 256 threads: A tile 128 rows x 2 float4, B tile 8 rows x 32 float4: one float4 each.
    const int innerRowA = threadIdx.x / (V_BK / 4), innerColA = threadIdx.x % (V_BK / 4);
    const int innerRowB = threadIdx.x / (V_BN / 4), innerColB = threadIdx.x % (V_BN / 4);
    float acc[V_TM * V_TN] = {0.0f};
    float regM[V_TM], regN[V_TN];
    // END EXERCISE

    // BEGIN EXERCISE: per V_BK step: one float4 of A, scattered TRANSPOSED into As (its 4 values go to 4
    //   rows k), one float4 of B stored as is; __syncthreads(); the outer products as in rung 5 with regM
    //   read from As[k * V_BM + m]; then C written with float4 stores
    // HINT: reading the transposed A tile, a thread's 8 values of A for one k are contiguous, like B's:
    //   the compiler then uses 128-bit shared loads (LDS.128) for both.
    // HINT: `const float4 a4 = reinterpret_cast<const float4*>(&A[(size_t)innerRowA * K + innerColA * 4])[0];`
    //   then As[(innerColA * 4 + c) * V_BM + innerRowA] = a4.x, .y, .z, .w for c = 0..3
    for (int k0 = 0; k0 < K; k0 += V_BK) {
        const float4 a4 = reinterpret_cast<const float4*>(&A[(size_t)innerRowA * K + innerColA * 4])[0];
        As[(innerColA * 4 + 0) * V_BM + innerRowA] = a4.x;
        As[(innerColA * 4 + 1) * V_BM + innerRowA] = a4.y;
        As[(innerColA * 4 + 2) * V_BM + innerRowA] = a4.z;
        As[(innerColA * 4 + 3) * V_BM + innerRowA] = a4.w;
        reinterpret_cast<float4*>(&Bs[innerRowB * V_BN + innerColB * 4])[0] =
            reinterpret_cast<const float4*>(&B[(size_t)innerRowB * N + innerColB * 4])[0];
        __syncthreads();
        A += V_BK;
        B += (size_t)V_BK * N;
#pragma unroll
        for (int k = 0; k < V_BK; ++k) {
#pragma unroll
            for (int i = 0; i < V_TM; ++i) regM[i] = As[k * V_BM + threadRow * V_TM + i];
#pragma unroll
            for (int j = 0; j < V_TN; ++j) regN[j] = Bs[k * V_BN + threadCol * V_TN + j];
#pragma unroll
            for (int i = 0; i < V_TM; ++i)
#pragma unroll
                for (int j = 0; j < V_TN; ++j) acc[i * V_TN + j] += regM[i] * regN[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < V_TM; ++i) {
#pragma unroll
        for (int j = 0; j < V_TN; j += 4) {
            reinterpret_cast<float4*>(&C[(size_t)(threadRow * V_TM + i) * N + threadCol * V_TN + j])[0] =
                make_float4(acc[i * V_TN + j], acc[i * V_TN + j + 1], acc[i * V_TN + j + 2], acc[i * V_TN + j + 3]);
        }
    }
    // END EXERCISE
}

// ---- 7. warp tiling ----------------------------------------------------------------------
// A third level of tiling between the block and the thread: each warp owns a WM x WN
// sub-tile of the block tile, and inside it each thread owns WMITER x WNITER small TM x TN
// blocks spaced WSUBM / WSUBN apart. A warp's 32 threads then read a compact window of
// shared memory (fewer bank conflicts, more broadcast) and the warp's working set matches
// how the SM schedules: by warp. The tile sizes are compile-time template arguments, so
// every loop below unrolls and every accumulator lives in a register.
// A second shared-memory buffer would let the next tile load overlap this one's math;
// instead the global loads for tile k+1 are issued into registers before the math on tile
// k (register prefetch), which hides their latency with one buffer.
#ifndef WT_BM
#define WT_BM 128
#endif
#ifndef WT_BN
#define WT_BN 128
#endif
#ifndef WT_BK
#define WT_BK 8
#endif
#ifndef WT_WM
#define WT_WM 64
#endif
#ifndef WT_WN
#define WT_WN 64
#endif
#ifndef WT_WNITER
#define WT_WNITER 4
#endif
#ifndef WT_TM
#define WT_TM 8
#endif
#ifndef WT_TN
#define WT_TN 4
#endif
#define WT_THREADS ((WT_BM / WT_WM) * (WT_BN / WT_WN) * WARPSIZE)

template <int BM, int BN, int BK, int WM, int WN, int WNITER, int TM, int TN, int NUM_THREADS>
__device__ __forceinline__ void sgemm_warptiling_body(const float* __restrict__ A, const float* __restrict__ B,
                                                      float* __restrict__ C, int M, int N, int K)
{
    constexpr int WMITER = (WM * WN) / (WARPSIZE * TM * TN * WNITER);
    constexpr int WSUBM = WM / WMITER;
    constexpr int WSUBN = WN / WNITER;
    constexpr int ROW_STRIDE_A = (NUM_THREADS * 4) / BK;  // rows of A loaded per pass
    constexpr int ROW_STRIDE_B = NUM_THREADS / (BN / 4);   // rows of B loaded per pass
    constexpr int LOADS_A = BM / ROW_STRIDE_A;
    constexpr int LOADS_B = BK / ROW_STRIDE_B;
    static_assert(WMITER * WSUBM == WM && WNITER * WSUBN == WN, "warp tile must split evenly");
    static_assert((WSUBN / TN) * (WSUBM / TM) == WARPSIZE, "a warp's threads must cover its sub-tile");
    static_assert(LOADS_A * ROW_STRIDE_A == BM && LOADS_B * ROW_STRIDE_B == BK, "tile loads must split evenly");
    static_assert(BK % 4 == 0 && BN % 4 == 0 && TN % 4 == 0, "float4 accesses");

    // BEGIN EXERCISE: the shared tiles (As transposed: As[k * BM + m]) and the three levels of tiles:
    //   this warp's place in the block tile (warpRow, warpCol) and the thread's place in the warp's
    //   sub-tile; A, B and C moved to the block's (and C to the warp's) corner; the float4 load
    //   coordinates of A and B; the accumulators and register arrays
    // HINT: block tile -> warp tile (WM x WN, warpIdx = threadIdx.x / WARPSIZE) -> the thread's
    //   WMITER x WNITER blocks of TM x TN; within the warp, lane % (WSUBN / TN) is the thread's column.
    // HINT: `C += (size_t)(blockIdx.y * BM + warpRow * WM) * N + blockIdx.x * BN + warpCol * WN;`
    __shared__ float As[BK * BM];  // transposed: As[k * BM + m]
    __shared__ float Bs[BK * BN];

    const int warpIdx = threadIdx.x / WARPSIZE;
    const int warpCol = warpIdx % (BN / WN);
    const int warpRow = warpIdx / (BN / WN);
    const int lane = threadIdx.x % WARPSIZE;
    const int threadColInWarp = lane % (WSUBN / TN);
    const int threadRowInWarp = lane / (WSUBN / TN);

    A += (size_t)blockIdx.y * BM * K;
    B += (size_t)blockIdx.x * BN;
    C += (size_t)(blockIdx.y * BM + warpRow * WM) * N + blockIdx.x * BN + warpCol * WN;

    const int innerRowA = threadIdx.x / (BK / 4), innerColA = threadIdx.x % (BK / 4);
    const int innerRowB = threadIdx.x / (BN / 4), innerColB = threadIdx.x % (BN / 4);

    float acc[WMITER * TM * WNITER * TN] = {0.0f};
    float regM[WMITER * TM];
    float regN[WNITER * TN];
    float4 nextA[LOADS_A], nextB[LOADS_B];
    // END EXERCISE

    // BEGIN EXERCISE: register prefetch: tile 0's float4 loads of A and B into nextA[LOADS_A] / nextB[LOADS_B]
    //   (pass l covers rows innerRow + l * ROW_STRIDE)
    // HINT: one shared buffer, but the next tile's global loads are issued into registers before this
    //   tile's math: their latency hides behind the FMAs. Tile 0 has to be fetched before the loop.
    // HINT: `nextA[l] = reinterpret_cast<const float4*>(&A[(size_t)(innerRowA + l * ROW_STRIDE_A) * K + innerColA * 4])[0];`
    // Prefetch tile 0 into registers.
#pragma unroll
    for (int l = 0; l < LOADS_A; ++l)
        nextA[l] = reinterpret_cast<const float4*>(&A[(size_t)(innerRowA + l * ROW_STRIDE_A) * K + innerColA * 4])[0];
#pragma unroll
    for (int l = 0; l < LOADS_B; ++l)
        nextB[l] = reinterpret_cast<const float4*>(&B[(size_t)(innerRowB + l * ROW_STRIDE_B) * N + innerColB * 4])[0];
    // END EXERCISE

    for (int k0 = 0; k0 < K; k0 += BK) {
        // BEGIN EXERCISE: store the prefetched registers into shared memory: nextA's 4 values TRANSPOSED
        //   into As (As[(innerColA * 4 + c) * BM + m]), nextB as float4 into Bs; then __syncthreads()
        // HINT: the same scatter as rung 6's, once per load pass l (row m = innerRowA + l * ROW_STRIDE_A).
        // HINT: the barrier: no thread may read the tile before every thread has stored its part.
#pragma unroll
        for (int l = 0; l < LOADS_A; ++l) {
            const int m = innerRowA + l * ROW_STRIDE_A;
            As[(innerColA * 4 + 0) * BM + m] = nextA[l].x;
            As[(innerColA * 4 + 1) * BM + m] = nextA[l].y;
            As[(innerColA * 4 + 2) * BM + m] = nextA[l].z;
            As[(innerColA * 4 + 3) * BM + m] = nextA[l].w;
        }
#pragma unroll
        for (int l = 0; l < LOADS_B; ++l)
            reinterpret_cast<float4*>(&Bs[(innerRowB + l * ROW_STRIDE_B) * BN + innerColB * 4])[0] = nextB[l];
        __syncthreads();
        // END EXERCISE

        // BEGIN EXERCISE: unless this is the last tile: advance A and B by one tile and issue its global loads
        //   into nextA / nextB now
        // HINT: a load's result is not waited for until it is used (in the next iteration's stores), so the
        //   FMAs below run while the bytes are in flight.
        // HINT: `if (k0 + BK < K) { A += BK; B += (size_t)BK * N; ...the prefetch loops again... }`
        // Issue the next tile's global loads now; they complete while the FMAs below run.
        if (k0 + BK < K) {
            A += BK;
            B += (size_t)BK * N;
#pragma unroll
            for (int l = 0; l < LOADS_A; ++l)
                nextA[l] = reinterpret_cast<const float4*>(&A[(size_t)(innerRowA + l * ROW_STRIDE_A) * K + innerColA * 4])[0];
#pragma unroll
            for (int l = 0; l < LOADS_B; ++l)
                nextB[l] = reinterpret_cast<const float4*>(&B[(size_t)(innerRowB + l * ROW_STRIDE_B) * N + innerColB * 4])[0];
        }
        // END EXERCISE

        // BEGIN EXERCISE: per k: the thread's WMITER * TM values of A (regM) and WNITER * TN of B (regN)
        //   from this warp's window of the tiles, then WMITER x WNITER outer products of TM x TN into acc
        // HINT: sub-tile wm of the warp starts WSUBM rows after sub-tile wm - 1: the warp's 32 threads read
        //   a compact window of shared memory (broadcasts, few bank conflicts).
        // HINT: `regM[wm * TM + i] = As[k * BM + warpRow * WM + wm * WSUBM + threadRowInWarp * TM + i];`
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
                for (int i = 0; i < TM; ++i)
                    regM[wm * TM + i] = As[k * BM + warpRow * WM + wm * WSUBM + threadRowInWarp * TM + i];
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    regN[wn * TN + j] = Bs[k * BN + warpCol * WN + wn * WSUBN + threadColInWarp * TN + j];
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
                for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
                    for (int i = 0; i < TM; ++i)
#pragma unroll
                        for (int j = 0; j < TN; ++j)
                            acc[(wm * TM + i) * (WNITER * TN) + wn * TN + j] += regM[wm * TM + i] * regN[wn * TN + j];
        }
        // END EXERCISE
        __syncthreads();  // the tile is about to be overwritten by the prefetched one
    }

    // BEGIN EXERCISE: write each thread's WMITER x WNITER blocks of TM x TN results to C with float4 stores
    // HINT: C already points at the warp's corner: block (wm, wn) of the thread starts at row
    //   wm * WSUBM + threadRowInWarp * TM and column wn * WSUBN + threadColInWarp * TN.
    // HINT: `reinterpret_cast<float4*>(dst)[0] = make_float4(acc[a], acc[a + 1], acc[a + 2], acc[a + 3]);`
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int wn = 0; wn < WNITER; ++wn)
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const int a = (wm * TM + i) * (WNITER * TN) + wn * TN + j;
                    float* dst = &C[(size_t)(wm * WSUBM + threadRowInWarp * TM + i) * N
                                    + wn * WSUBN + threadColInWarp * TN + j];
                    reinterpret_cast<float4*>(dst)[0] = make_float4(acc[a], acc[a + 1], acc[a + 2], acc[a + 3]);
                }
    // END EXERCISE
}

extern "C" __global__ void __launch_bounds__(WT_THREADS)
sgemm_warptiling(const float* __restrict__ A, const float* __restrict__ B,
                 float* __restrict__ C, int M, int N, int K)
{
    sgemm_warptiling_body<WT_BM, WT_BN, WT_BK, WT_WM, WT_WN, WT_WNITER, WT_TM, WT_TN, WT_THREADS>(A, B, C, M, N, K);
}
