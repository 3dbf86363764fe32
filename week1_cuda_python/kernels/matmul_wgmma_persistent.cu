// The rungs above wgmma_tma: a persistent, warp-specialised wgmma + TMA GEMM whose epilogue goes through shared
// memory and a TMA store, and the same with 2-block clusters. Launched from
// week1_cuda_python/matmul_wgmma_persistent.py (rungs `wgmma_persistent`, `wgmma_cluster`); kernels/matmul_wgmma.cu
// is the rung below and explains the pieces this one reuses (warpgroups, shared-memory descriptors, the 128-byte
// swizzle, tensor maps, mbarrier phases, setmaxnreg). Read that header first; this one says only what changes and
// why.
//
// C (M x N) = A (M x K) @ B (K x N), all row-major; fp16 or bf16 in, fp32 accumulate, C in the inputs' type.
// Or A column-major (the wgmma_persistent_a_col_* entries): A is given as the K x M row-major matrix whose
// transpose it is, which is how a weight gradient dW = dY^T X finds dY (stored tokens x N); the body's A_KM below.
// Split-K (the body's SPLIT_K below; its entries and the lesson in kernels/matmul_wgmma_split_k.cu): every (range of
// K, tile) pair a unit of the persistent loop, fp32 partial sums to a workspace, added afterwards.
//
// What wgmma_tma leaves on the table (its header's last paragraph), and what this rung does:
// 1. One block per tile of C. Each block pays a prologue (barrier init, the first STAGES copies in flight before
//    any math) and an epilogue (the accumulators to global memory) during which the tensor cores of its SM idle: at
//    4096^3, 512 tiles of 128 x 256 on 132 SMs, about 4 of each per SM. Here the grid is one block per SM
//    ("persistent") and each block walks the tiles tile = blockIdx.x, blockIdx.x + gridDim.x, ...: the producer
//    runs ahead into the next tile's k tiles while the consumers are still storing the last one, so the ring stays
//    full across tile boundaries and the epilogue overlaps the next tile's copies.
// 2. The epilogue. wgmma_tma stored its accumulators straight from registers: each thread writes 4-byte pairs
//    scattered over 16 rows, 32 bytes per row per warp instruction, with a bounds check per pair. Here each
//    consumer warpgroup writes a 64 x 64 chunk of its accumulators into a 128-byte-swizzled shared buffer
//    (conflict-free: below) and one thread hands the whole chunk to the TMA (cp.async.bulk.tensor ...
//    global.shared::cta), which writes full 128-byte lines and clips at M and N by itself: no bounds checks in the
//    kernel at all. Two buffers per warpgroup, so the registers of chunk q+1 are being written while the TMA still
//    reads chunk q.
// 3. The block order (matmul_wgmma.cu, "Block order") is the same grouped order, now over the persistent tile
//    index: the ~132 tiles in flight at once still form a patch of C about GROUP_M x (132 / GROUP_M) tiles, so
//    their panels of A and B are shared in the L2.
// 4. The next rung, wgmma_cluster (same body, CLUSTER = 2, entry points wgmma_cluster_*): blocks in pairs (a
//    cluster of 2) on vertically adjacent tiles, which read the same tile of B; each loads half of it and the TMA
//    multicasts it into both blocks' shared memory (below, "clusters").
//
// Tile: 128 x 256 x 64, two consumer warpgroups of 64 x 256 (wgmma m64n256k16), not 128 x 128. Why: per 16-wide k
// step a warpgroup's m64n256k16 is 262,144 multiply-adds and reads 2 KB of A and 8 KB of B from shared memory; an
// SM's tensor cores do ~2,048 dense fp16 multiply-adds per clock (989 TFLOP/s / 132 SMs / 2 FLOP each / 1.83 GHz),
// so one such instruction keeps them busy ~128 clocks for 10 KB read: 80 bytes per clock, under the 128 bytes per
// clock shared memory delivers. An m64n128k16 (the 128 x 128 tile) reads 6 KB in 64 clocks, 96 bytes per clock,
// closer to that ceiling; and a 128 x 256 tile moves 48 KB from L2 per 4.2 MFLOP against 32 KB per 2.1 MFLOP (85
// against 64 FLOP per byte). The cost: 128 fp32 accumulators per consumer thread, which setmaxnreg pays for (232
// registers), and fewer tiles (a ragged last wave at small sizes).
//
// Tile width builds (-DWP_BN=192 or 128; 256 when not defined). The ragged last wave is the price at the capstone's
// N = 768: 768 / 256 = 3 column tiles, 64 x 3 = 192 tiles of 128 x 256 at 8192 rows, 1.45 waves on 132 SMs, the
// second wave 45% full. With WP_BN = 192 (wgmma m64n192k16) the same C is 4 column tiles, 256 tiles, 1.94 waves;
// with 128, 384 tiles, 2.9 waves. The width is a compile-time constant (the accumulators are registers, so their
// count must be), one cubin per width; everything below follows it: B's stage is WP_BN / 64 slabs, the epilogue
// WP_BN / 64 chunks, a consumer thread WP_BN / 2 accumulators. matmul_wgmma_waves.py gives the arithmetic per
// width and shape, and the schedule rule (matmul_wgmma_schedule.py) picks a width per shape from measurements.
// SwiGLU splits a tile into a gate half and an up half of whole 64-column slabs and store chunks: 256 and 128
// only (WP_SWIGLU_BUILDS; a 192-wide tile's halves would be 96 columns).
//
// Shared memory (227 KB per block at most on the H100): 4 stages x 48 KB = 192 KB for the ring, + 2 consumers x 2
// buffers x 8 KB = 32 KB for the epilogue (a 128 x 256 tile of C staged whole would need 64 KB, which with 4 stages
// does not fit; 3 stages would), + 1 KB to align to 1024.
//
// Shapes: M, N, K any (K >= 1); the TMA reads zeros outside A and B and clips the stores of C. The tensor maps need
// a 16-byte aligned base and row strides that are multiples of 16 bytes: K and N multiples of 8 (the launcher
// refuses the rest, naming matmul_wgmma_tma, which pads).
//
// Build: sm_90a only (-gencode=arch=compute_90a,code=sm_90a); elsewhere the body is a trap and the launcher refuses
// non-sm_90 GPUs before anything is compiled.

// The instructions, one C++ function each, are the course's one copy in week1_cuda_python/kernels/hopper_ptx.cuh;
// those new in this rung: the TMA store (tma_store_2d) and the bulk groups that say when its source may be reused,
// fence_async_smem (ordinary stores made visible to the TMA), warpgroup_sync (a barrier for one warpgroup), and the
// cluster ones.
#include "hopper_ptx.cuh"

#define WP_HOPPER HOPPER_SM90A

// Tiles (matmul_wgmma_persistent.py's PERSISTENT_TILES must match).
#define WP_BM 128         // rows of C per tile: 2 consumer warpgroups x wgmma's M = 64
#ifndef WP_BN
#define WP_BN 256         // columns per tile: wgmma's largest N (-DWP_BN=192 or 128: the header's width builds)
#endif
#define WP_BK 64          // k per stage: 64 halves = 128 bytes, one swizzle row
#define WP_STAGES 4       // the ring: 4 x 48 KB
#define WP_CONSUMERS 2    // consumer warpgroups; warpgroup 0 is the producer
#define WP_THREADS (128 * (WP_CONSUMERS + 1))
#define WP_B_SLAB 64      // columns of B per TMA box (64 halves = the 128-byte swizzle span)
#define WP_C_CHUNK 64     // columns of C per TMA store box (64 halves = 128 bytes again)
#ifndef WP_GROUP_M
#define WP_GROUP_M 16     // rows of tiles per group of the tile order
#endif
#define WP_A_BYTES (WP_BM * WP_BK * 2)                    // 16 KB
#define WP_B_SLAB_BYTES (WP_BK * WP_B_SLAB * 2)           // 8 KB
#define WP_STAGE_BYTES (WP_A_BYTES + WP_BN / WP_B_SLAB * WP_B_SLAB_BYTES)  // 48 KB
#define WP_C_BYTES (64 * WP_C_CHUNK * 2)                  // 8 KB: one warpgroup's 64 x 64 chunk
#define WP_C_BUFFERS 2                                    // per consumer warpgroup
#define WP_SMEM_BYTES (WP_STAGES * WP_STAGE_BYTES + WP_CONSUMERS * WP_C_BUFFERS * WP_C_BYTES + 1024)

// SwiGLU's halves of a tile (WP_BN / 2 columns each) are whole slabs and store chunks: the fused entry points
// build it only where this is 1 (WP_BN = 256 or 128).
#define WP_SWIGLU_BUILDS (WP_BN / 2 % WP_C_CHUNK == 0)

static_assert(WP_BN == 256 || WP_BN == 192 || WP_BN == 128, "WP_BN: 256, 192 or 128 (matmul_wgmma_persistent.WIDTHS)");
static_assert(WP_BK * 2 == 128 && WP_B_SLAB * 2 == 128 && WP_C_CHUNK * 2 == 128, "128-byte swizzle rows");
static_assert(WP_BM == 64 * WP_CONSUMERS && WP_BN % WP_C_CHUNK == 0, "tile shape");
static_assert(WP_STAGE_BYTES % 1024 == 0 && WP_C_BYTES % 1024 == 0, "every buffer starts 1024-aligned");
static_assert(WP_SMEM_BYTES <= 227 * 1024, "the H100 gives a block at most 227 KB of shared memory");

// ---- the tile order ------------------------------------------------------------------------------
// Tile number `id` (0 .. tiles_m * tiles_n - 1, the persistent loop's counter) -> (tile_m, tile_n): groups of
// `group_m` rows of tiles, each walked column by column (matmul_wgmma.cu's grouped_tile; matmul_wgmma_persistent.py's
// `persistent_tile` is the same arithmetic, tested to be a permutation).
__device__ __forceinline__ void wp_tile(int id, int tiles_m, int tiles_n, int group_m, int& tile_m, int& tile_n)
{
    // BEGIN EXERCISE: the grouped tile order: which group of `group_m` rows of tiles `id` falls in, that group's first
    //   row tile and its number of rows (the last group may be short), then down the group's column first: tile_m,
    //   tile_n (matmul_wgmma.cu's grouped_tile; your persistent_tile, in CUDA C)
    // HINT: a full group holds group_m * tiles_n tiles, so id / that is the group and id % that the place inside it;
    //   walking a column of the group first means the row changes fastest: place % rows.
    // HINT: rows = min(tiles_m - first_m, group_m): dividing by group_m in the last, shorter group would send some
    //   tiles past the last row of C and leave others never computed.
    // HINT: `tile_m = first_m + in_group % rows; tile_n = in_group / rows;`
    // STUB: #define HOLE_OPEN 1  // delete once this hole is filled: nothing is built while one is left (course/holes.py)
    const int per_group = group_m * tiles_n;
    const int first_m = (id / per_group) * group_m;
    const int rows = min(tiles_m - first_m, group_m);
    const int in_group = id % per_group;
    tile_m = first_m + in_group % rows;
    tile_n = in_group / rows;
    // END EXERCISE
}

// ---- clusters (the wgmma_cluster rung): two blocks, one column of B ------------------------------
// A cluster's blocks run at once on one GPC and may read and write each other's shared memory ("distributed shared
// memory"). The cluster rung pairs the blocks of vertically adjacent tiles, (2i, n) and (2i + 1, n): they need the
// same 64 x 256 slice of B at every k step. Each block loads half of it (slabs j with j % 2 == its rank) with ONE TMA
// copy *multicast* to both blocks' shared memory at the same offset, signalling each block's full barrier: B is read
// from L2 once per pair, not twice (a quarter less L2 -> SM traffic per stage: 16 + 16 of 48 KB per block instead of
// 16 + 32). The price is that a stage is now written by both blocks' copies, so it may only be refilled when both
// blocks' consumers are done with it: every consumer warp arrives on its own block's empty barrier and on the peer's
// (16 arrivals per phase instead of 8). The instructions: cluster_rank, cluster_sync, mbar_arrive_remote and
// tma_load_2d_multicast (hopper_ptx.cuh).

// ---- epilogues (the fused variants of matmul_wgmma_fused.cu; this rung uses WP_EPI_NONE) --------
// Applied in registers to the fp32 accumulators, before the one rounding to C's type and the TMA store: a bias (one
// per column), a residual (C = A B^T + R, R read where C is written), or SwiGLU (the tile holds gate columns in its
// left half and the matching up columns in its right half, and writes silu(gate) * up: half as many columns as it
// computed).
#define WP_EPI_NONE 0
#define WP_EPI_BIAS 1
#define WP_EPI_RESIDUAL 2
#define WP_EPI_SWIGLU 3

#if WP_HOPPER
// Two adjacent elements of a 16-bit tensor as floats (one 4-byte load: the launcher checks the
// base is 4-byte aligned, and the column is even).
__device__ __forceinline__ float2 wp_load_pair(const __half* p)
{
    return __half22float2(*reinterpret_cast<const __half2*>(p));
}
__device__ __forceinline__ float2 wp_load_pair(const __nv_bfloat16* p)
{
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
// silu(g) * u = g * sigmoid(g) * u, in fp32. g -> -inf: exp overflows to inf and g / inf = -0,
// which is silu's limit; no NaN unless g or u is one.
__device__ __forceinline__ float wp_swiglu(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

// Split-K's epilogue: one warpgroup's 64 x COLS fp32 partial sums, unrounded, into the workspace at row `ws_row`
// (fp32, so a 64-column chunk is 256 bytes a row: two boxes of 64 rows x 32 columns, 128 bytes a row, the swizzle
// span), one box per store buffer of this warpgroup: each chunk waits until the previous chunk's two stores have
// read both buffers. Pair (row r, columns 2(lane % 4) + {0, 1} of 8-column group jj) lands in 16-byte unit
// 2 (jj % 4) + (lane % 4) / 2 of box jj / 4, 8 bytes in for odd lane % 4; the unit is swizzled as the 16-bit
// epilogue's (unit ^ (r % 8)). The 8 rows and 4 pairs a warp writes at once cover the 32 banks twice, the least
// 256 bytes can take.
template <int COLS>
__device__ __forceinline__ void wp_store_partials(const float (&d)[COLS / 2], unsigned char* bufs,
                                                  const CUtensorMap* map, int n0, int ws_row, int c_cols,
                                                  bool rows_inside, int c)
{
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, row0 = warp * 16 + lane / 4;
#pragma unroll
    for (int q = 0; q < COLS / WP_C_CHUNK; ++q) {
        if (tid == 0) bulk_wait_read<0>();
        warpgroup_sync(1 + c);
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
            unsigned char* buf = bufs + (jj / 4) * WP_C_BYTES;
            const int j = 8 * q + jj, unit = 2 * (jj % 4) + (lane % 4) / 2;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = row0 + 8 * h;
                const uint32_t offset = r * 128 + ((unit ^ (r & 7)) << 4) + 8 * (lane % 2);
                *reinterpret_cast<float2*>(buf + offset) = make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
            }
        }
        fence_async_smem();
        warpgroup_sync(1 + c);
        if (tid == 0) {
            for (int half = 0; half < 2; ++half) {
                const int col = n0 + q * WP_C_CHUNK + 32 * half;
                if (col < c_cols && rows_inside) tma_store_2d(map, bufs + half * WP_C_BYTES, col, ws_row);
            }
            bulk_commit();
        }
    }
}
#endif

// ---- the kernel body -----------------------------------------------------------------------------
// CLUSTER = 1: the wgmma_persistent rung. CLUSTER = 2: the wgmma_cluster rung (above); the persistent loop then walks
// "units" of CLUSTER vertically adjacent tiles, one per block of the cluster. B_NK = false: B is K x N row-major
// (this rung); true: B is N x K row-major (nn.Linear's weight), loaded as 64-row boxes of 64 k (128 bytes) each, the
// same K-major swizzled layout as A: the WP_BN / 64 boxes of a stage sit back to back, WP_BN rows of 128 bytes, and one
// descriptor with SBO = 1024 (8 rows) covers them. EPI, `extra` (the bias or the residual, or null) and `n_out` (C's
// columns: N, or N / 2 for SwiGLU) are the fused variants'. PINGPONG = false: both consumer warpgroups work on one
// 128 x 256 tile ("cooperative"), so while they run the epilogue nobody issues wgmmas. true
// (kernels/matmul_wgmma_pingpong.cu, which says why): each consumer owns whole 64 x 256 tiles, the block's tiles 0,
// 2, 4, ... for consumer 0 and 1, 3, 5, ... for consumer 1, and one's epilogue runs while the other's wgmmas do; the
// two take turns at the mainloop (the `turn` barriers below), which also keeps the ring's parities right.
// A_KM = false: A is M x K row-major (K-major, a 128-row box of 64 k). true: A is stored K x M row-major (A
// column-major, MN-major for wgmma), loaded as TILE_M / 64 boxes of 64 k rows x 64 m (128 bytes), each a slab laid
// out as B's MN-major slabs are; a consumer warpgroup's 64 rows of the tile are exactly one slab, 8 KB, the same
// offset as its 64 K-major rows, and wgmma transposes it as it reads (imm-trans-a).
// SPLIT_K = true: the persistent loop walks (range of K, tile) units, `k_per_split` k tiles of 64 a range (the last
// may be shorter); map_c is then the fp32 workspace, `splits` blocks of tiles_m * TILE_M rows (the rows past M are
// written, never read), and the epilogue is wp_store_partials. The units of one range come one after another, so
// the tiles in flight together read the same K panels of A and B, from L2.
template <typename T, int CLUSTER, int EPI = WP_EPI_NONE, bool B_NK = false, bool PINGPONG = false,
          bool A_KM = false, bool SPLIT_K = false>
__device__ __forceinline__ void wgmma_persistent_body(const CUtensorMap& map_a, const CUtensorMap& map_b,
                                                      const CUtensorMap& map_c, int M, int N, int K,
                                                      const T* __restrict__ extra = nullptr, int n_out = 0,
                                                      int k_per_split = 0)
{
#if WP_HOPPER
    static_assert(!SPLIT_K || (CLUSTER == 1 && EPI == WP_EPI_NONE && !PINGPONG), "split-K: cooperative, no epilogue");
    static_assert(EPI == WP_EPI_NONE || (CLUSTER == 1 && B_NK), "the fused epilogues: B_NK, no cluster");
    static_assert(!PINGPONG || CLUSTER == 1, "ping-pong: no cluster");
    static_assert(EPI != WP_EPI_SWIGLU || WP_SWIGLU_BUILDS, "SwiGLU: WP_BN 256 or 128 (halves of whole slabs)");
    // A tile's rows, and a ring stage: 128 rows of A + WP_BN columns of B (48 KB at 256), or with ping-pong
    // one warpgroup's 64 rows of A + the same B (40 KB at 256).
    constexpr int TILE_M = PINGPONG ? 64 : WP_BM;
    constexpr int A_BYTES = TILE_M * WP_BK * 2;
    constexpr int STAGE_BYTES = A_BYTES + WP_BN / WP_B_SLAB * WP_B_SLAB_BYTES;
    static_assert(STAGE_BYTES % 1024 == 0, "every stage starts 1024-aligned");
    // wgmma's B layout: B stored K x N row-major (this rung's B) is MN-major; stored N x K (nn.Linear's weight, the
    // fused epilogues' B) it is K-major, read exactly as A is.
    [[maybe_unused]] constexpr int B_TRANS = B_NK ? WGMMA_B_K_MAJOR : WGMMA_B_MN_MAJOR;  // (unused in the stub)
    [[maybe_unused]] constexpr int A_TRANS = A_KM ? WGMMA_A_MN_MAJOR : WGMMA_A_K_MAJOR;
    constexpr int A_SLAB_BYTES = 64 * WP_BK * 2;  // A_KM: one 64 k x 64 m box, 8 KB
    static_assert(WP_STAGES * STAGE_BYTES + WP_CONSUMERS * WP_C_BUFFERS * WP_C_BYTES + 1024 <= 227 * 1024, "smem");
    extern __shared__ unsigned char wp_smem_raw[];
    __shared__ __align__(8) uint64_t full[WP_STAGES];
    __shared__ __align__(8) uint64_t empty[WP_STAGES];
    __shared__ __align__(8) uint64_t turn[2];  // ping-pong only: consumer c may start a mainloop
    unsigned char* base = wp_smem_raw + ((1024 - (smem_addr(wp_smem_raw) & 1023)) & 1023);
    [[maybe_unused]] unsigned char* stages = base;                 // the ring (maybe_unused: the stub's holes)
    unsigned char* c_bufs = base + WP_STAGES * STAGE_BYTES;        // the epilogue's chunks

    // SwiGLU: a tile computes WP_BN / 2 gate columns (128 at 256) and the up columns that match them, and writes
    // WP_BN / 2 columns of C. B is [W_gate; W_up] (N = 2 * n_out rows): at 256, slabs 0, 1 of a stage come from gate
    // rows f0 .. f0 + 127, slabs 2, 3 from up rows n_out + f0 .. (f0 = 128 tile_n).
    constexpr bool SWIGLU = EPI == WP_EPI_SWIGLU;
    constexpr int TILE_OUT = SWIGLU ? WP_BN / 2 : WP_BN;           // columns of C per tile
    const int c_cols = SWIGLU ? n_out : N;                         // columns of C
    const int warpgroup = threadIdx.x / 128;
    const int tiles_m = (M + TILE_M - 1) / TILE_M, tiles_n = (c_cols + TILE_OUT - 1) / TILE_OUT;
    const int units_m = (tiles_m + CLUSTER - 1) / CLUSTER;  // CLUSTER = 1: units are tiles
    const int tile_units = units_m * tiles_n;
    const int k_tiles = (K + WP_BK - 1) / WP_BK;
    // Split-K: k tiles per range and ranges (the launcher picks k_per_split so that none is empty).
    const int per_split = SPLIT_K ? k_per_split : k_tiles, splits = SPLIT_K ? (k_tiles + per_split - 1) / per_split : 1;
    const int units = tile_units * splits;
    const uint32_t rank = CLUSTER > 1 ? cluster_rank() : 0;
    const int first_unit = blockIdx.x / CLUSTER, unit_stride = gridDim.x / CLUSTER;

    if (threadIdx.x == 0) {
        for (int s = 0; s < WP_STAGES; ++s) {
            mbar_init(&full[s], 1);                             // the producer's arrive (+ the bytes)
            mbar_init(&empty[s], 4 * WP_CONSUMERS * CLUSTER / (PINGPONG ? 2 : 1));  // one arrive per consumer warp that reads it
        }
        if (PINGPONG) { mbar_init(&turn[0], 1); mbar_init(&turn[1], 1); }  // the other consumer's arrive
        fence_mbarrier_init();
    }
    // The last block-wide barrier: after it the roles never meet again. With a cluster, the peer's
    // barriers must be initialised too before the first multicast or remote arrive lands in them.
    if (CLUSTER > 1) cluster_sync(); else __syncthreads();

    if (warpgroup == 0) {
        // ---- producer: one thread keeps the ring full, tile after tile ----
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            [[maybe_unused]] uint32_t it = 0;  // k tiles issued by this block so far: the ring position
            for (int unit = first_unit; unit < units; unit += unit_stride) {
                int unit_m, tile_n;
                wp_tile(SPLIT_K ? unit % tile_units : unit, units_m, tiles_n, WP_GROUP_M / CLUSTER, unit_m, tile_n);
                // The unit's k tiles: all of them, or (split-K) its range's.
                const int kt_begin = SPLIT_K ? unit / tile_units * per_split : 0;
                const int kt_end = SPLIT_K ? min(kt_begin + per_split, k_tiles) : k_tiles;
                // A block whose tile is below the last row of tiles (tiles_m odd) still takes part: it loads a valid
                // A box (the last tile's) so that its copies and barriers run as the peer's do, and stores nothing.
                const int m0 = min(unit_m * CLUSTER + (int)rank, tiles_m - 1) * TILE_M, n0 = tile_n * TILE_OUT;
                // The first row (column of B for B_NK = false) of each 64-wide slab of B, and which slabs are copied:
                // a slab wholly past C's columns is not copied, and its bytes not expected (matmul_wgmma.cu: a box
                // partly outside still delivers all its bytes, as zeros); its stale columns of the accumulators are
                // never stored.
                int slab_row[WP_BN / WP_B_SLAB];
                uint32_t copied = 0, bytes = A_BYTES;
#pragma unroll
                for (int j = 0; j < WP_BN / WP_B_SLAB; ++j) {
                    const int half = WP_BN / WP_B_SLAB / 2;  // SwiGLU: slabs 0 .. half - 1 gate, the rest up
                    const int col = SWIGLU ? n0 + (j % half) * WP_B_SLAB : n0 + j * WP_B_SLAB;  // of C
                    slab_row[j] = SWIGLU && j >= half ? n_out + col : col;
                    if (col < c_cols) { copied |= 1u << j; bytes += WP_B_SLAB_BYTES; }
                }
                // BEGIN EXERCISE: the producer's k loop over this unit (kt_begin <= kt < kt_end), counting ring
                //   positions `it` across the block's units: wait for the stage's previous use to be released
                //   (empty), arm full[s] with `bytes`, one TMA copy of A's box (A_KM: one per 64-m slab), one per
                //   copied slab of B (multicast with a cluster)
                // HINT: matmul_wgmma.cu's producer, the ring position `it` running on from tile to tile (and so the
                //   parities). With a cluster a block copies the slabs j % CLUSTER == rank, multicast to both blocks.
                // HINT: s = it % WP_STAGES; wait empty[s] from it = WP_STAGES on; mbar_arrive_expect_tx(&full[s],
                //   bytes); A at (kt * WP_BK, m0) (A_KM: slab i at (m0 + 64 i, kt * WP_BK), i < TILE_M / 64); each
                //   copied slab j at B_NK ? (kt * WP_BK, slab_row[j]) : (slab_row[j], kt * WP_BK).
                // HINT: `if (it >= WP_STAGES) mbar_wait(&empty[s], ((it / WP_STAGES) - 1) & 1);`
                // STUB: #define HOLE_OPEN 1  // delete once this hole is filled: nothing is built while one is left (course/holes.py)
                for (int kt = kt_begin; kt < kt_end; ++kt, ++it) {
                    const uint32_t s = it % WP_STAGES;
                    // The stage's previous use was ring position it - STAGES: phase it / STAGES - 1 of empty[s].
                    if (it >= WP_STAGES) mbar_wait(&empty[s], ((it / WP_STAGES) - 1) & 1);
                    unsigned char* dst = stages + s * STAGE_BYTES;
                    // All of B's bytes land here, the peer's multicast half included.
                    mbar_arrive_expect_tx(&full[s], bytes);
                    if (A_KM) {  // A stored K x M: TILE_M / 64 slabs of 64 m, as B's K x N slabs
#pragma unroll
                        for (int i = 0; i < TILE_M / 64; ++i)
                            tma_load_2d(dst + i * A_SLAB_BYTES, &map_a, &full[s], m0 + 64 * i, kt * WP_BK);
                    } else {
                        tma_load_2d(dst, &map_a, &full[s], kt * WP_BK, m0);
                    }
#pragma unroll
                    for (int j = 0; j < WP_BN / WP_B_SLAB; ++j) {
                        if (!(copied >> j & 1) || j % CLUSTER != (int)rank) continue;
                        unsigned char* b_dst = dst + A_BYTES + j * WP_B_SLAB_BYTES;
                        // The box's first element: (column, row) of B's tensor map.
                        const int x = B_NK ? kt * WP_BK : slab_row[j], y = B_NK ? slab_row[j] : kt * WP_BK;
                        if (CLUSTER > 1)
                            tma_load_2d_multicast(b_dst, &map_b, &full[s], x, y, (uint16_t)((1u << CLUSTER) - 1));
                        else
                            tma_load_2d(b_dst, &map_b, &full[s], x, y);
                    }
                }
                // END EXERCISE
            }
        }
    } else {
        // ---- consumers: warpgroup c owns rows 64c .. 64c+63 of every tile (ping-pong: every other tile) ----
        setmaxnreg_inc<232>();
        const int c = warpgroup - 1;
        const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        unsigned char* my_bufs = c_bufs + c * WP_C_BUFFERS * WP_C_BYTES;
        [[maybe_unused]] float d[WP_BN / 2];  // the warpgroup's 64 x WP_BN fp32 accumulators
        // Ping-pong: this consumer's first tile is the block's tile c, whose k steps start at ring
        // position c * k_tiles; after each tile it skips the other consumer's k_tiles positions.
        uint32_t it = PINGPONG ? c * k_tiles : 0;  // the same ring position as the producer's
        int mine = 0;                               // ping-pong: this consumer's tiles so far
        [[maybe_unused]] uint32_t chunks_done = 0;  // store chunks of this consumer's earlier tiles (below)
        for (int unit = first_unit + (PINGPONG ? c * unit_stride : 0); unit < units;
             unit += (PINGPONG ? 2 : 1) * unit_stride) {
            int unit_m, tile_n;
            wp_tile(SPLIT_K ? unit % tile_units : unit, units_m, tiles_n, WP_GROUP_M / CLUSTER, unit_m, tile_n);
            const int kt_begin = SPLIT_K ? unit / tile_units * per_split : 0;  // as the producer's
            const int kt_end = SPLIT_K ? min(kt_begin + per_split, k_tiles) : k_tiles;
            const int tile_m = unit_m * CLUSTER + (int)rank;
            const int m0 = tile_m * TILE_M, n0 = tile_n * TILE_OUT;
            const int row_base = m0 + (PINGPONG ? 0 : 64 * c);  // this warpgroup's first row of C

            // BEGIN EXERCISE: the consumer's mainloop, ring position `it`: (ping-pong: wait for this consumer's turn)
            //   per k step wait full[s], 4 wgmmas, commit, wait_group 1, release the previous stage (cluster: in both
            //   blocks); then (ping-pong: pass the turn) wait_group 0 and release the tile's last stage
            // HINT: matmul_wgmma.cu's k loop over kt_begin <= kt < kt_end, but `it` runs on across tiles, the unit's
            //   first wgmma overwrites d (accumulate = kt > kt_begin || kk > 0) and the last stage is released after
            //   wait_group 0. Ping-pong: a consumer starts only once the other has waited on every stage of the
            //   block's previous tile, else a parity can name a phase one behind (kernels/matmul_wgmma_pingpong.cu,
            //   "The turn barriers").
            // HINT: consumer c's tile `mine` waits for the other's arrival mine - 1 + c on turn[c]: `if (PINGPONG &&
            //   mine + c > 0) mbar_wait(&turn[c], (mine - 1 + c) & 1);`; after the loop thread 0 arrives on turn[c
            //   ^ 1].
            // HINT: A_KM's A is read as B's MN-major slabs are: desc_a = smem_desc(a_base + kk * 16 * 128,
            //   A_SLAB_BYTES, 1024); K-major: `wgmma_ss<WP_BN, T, B_TRANS, A_TRANS>(d, smem_desc(a_base + kk * 32,
            //   16, 1024), desc_b, kt > kt_begin || kk > 0);`
            // STUB: #define HOLE_OPEN 1  // delete once this hole is filled: nothing is built while one is left (course/holes.py)
            // Ping-pong: the other consumer has waited on every stage of the block's previous tile (pingpong.cu says
            // why). Consumer 0's tile `mine` waits for the other's arrival `mine`, consumer 1's for `mine + 1`.
            if (PINGPONG && mine + c > 0) mbar_wait(&turn[c], (mine - 1 + c) & 1);
            for (int kt = kt_begin; kt < kt_end; ++kt, ++it) {
                const uint32_t s = it % WP_STAGES;
                mbar_wait(&full[s], (it / WP_STAGES) & 1);
                // This warpgroup's 64 rows of A: 64 K-major rows of 128 bytes, or (A_KM) one 64-m slab: 8 KB either way.
                const uint32_t a_base = smem_addr(stages + s * STAGE_BYTES) + (PINGPONG ? 0 : c * 64 * 128);
                const uint32_t b_base = smem_addr(stages + s * STAGE_BYTES + A_BYTES);
                // Also orders the previous tile's epilogue reads of d before these wgmmas write it.
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < WP_BK / 16; ++kk) {
                    // A (and B_NK's B): K-major, 16 k = 32 bytes along each 128-byte row, SBO = 8 rows.
                    // B (K x N), and A_KM's A: MN-major, 16 k = 16 rows of 128 bytes, LBO = one 64-column slab.
                    const uint64_t desc_b = B_NK ? smem_desc(b_base + kk * 32, 16, 1024)
                                                 : smem_desc(b_base + kk * 16 * 128, WP_B_SLAB_BYTES, 1024);
                    const uint64_t desc_a = A_KM ? smem_desc(a_base + kk * 16 * 128, A_SLAB_BYTES, 1024)
                                                 : smem_desc(a_base + kk * 32, 16, 1024);
                    wgmma_ss<WP_BN, T, B_TRANS, A_TRANS>(d, desc_a, desc_b, kt > kt_begin || kk > 0);
                }
                wgmma_commit();
                // This k tile's wgmmas keep running; the previous one's are done: free its stage
                // (in both blocks of a cluster: the peer's copies write into this one's stages too).
                wgmma_wait<1>();
                if (kt > kt_begin && lane == 0) {
                    mbar_arrive(&empty[(it - 1) % WP_STAGES]);
                    if (CLUSTER > 1) mbar_arrive_remote(&empty[(it - 1) % WP_STAGES], rank ^ 1);
                }
            }
            // Ping-pong: this thread has waited on every stage of the tile: the other consumer may go.
            if (PINGPONG && tid == 0) mbar_arrive(&turn[c ^ 1]);
            wgmma_wait<0>();
            if (lane == 0) {  // the tile's last stage
                mbar_arrive(&empty[(it - 1) % WP_STAGES]);
                if (CLUSTER > 1) mbar_arrive_remote(&empty[(it - 1) % WP_STAGES], rank ^ 1);
            }
            // END EXERCISE

            if constexpr (SPLIT_K) {  // fp32 partial sums to the workspace, whose range r starts at row r tiles_m TILE_M
                wp_store_partials<WP_BN>(d, my_bufs, &map_c, n0, kt_begin / per_split * tiles_m * TILE_M + row_base,
                                         c_cols, row_base < M, c);
                continue;
            }
            // ---- epilogue: chunks of 64 x 64, registers -> swizzled shared memory -> TMA store ----
            // Accumulator layout (matmul_wgmma.cu): this thread holds rows warp*16 + lane/4 + {0, 8} and columns 8j +
            // 2*(lane%4) + {0, 1} of the warpgroup's 64 x WP_BN, j = 0 .. WP_BN / 8 - 1, in d[4j + 2h + {0, 1}] (h: the
            // +8 row). Chunk q of C is j = 8q .. 8q+7; with SwiGLU the matching up columns are TILE_OUT further, j +
            // TILE_OUT / 8 (16 at 256), in the same thread's registers.
            [[maybe_unused]] const int row0 = warp * 16 + lane / 4;
            constexpr int CHUNKS = TILE_OUT / WP_C_CHUNK;  // store chunks per tile
#pragma unroll
            for (int q = 0; q < CHUNKS; ++q) {
                // The buffers take turns chunk after chunk, across tiles too. With an even number of chunks a
                // tile that is q's parity; with an odd number (WP_BN = 192: 3; SwiGLU at 128: 1) a tile's first
                // chunk would take the buffer the tile before's last chunk may still be stored from, which the
                // wait below allows: the turn then runs on from the chunks already done.
                const int turn_q = CHUNKS % WP_C_BUFFERS == 0 ? q : (int)((chunks_done + q) % WP_C_BUFFERS);
                unsigned char* buf = my_bufs + (turn_q % WP_C_BUFFERS) * WP_C_BYTES;
                // The store that last read this buffer was committed two groups ago (every chunk
                // commits one group, stored or not): once at most one is still reading, it is free.
                if (tid == 0) bulk_wait_read<WP_C_BUFFERS - 1>();
                warpgroup_sync(1 + c);
#pragma unroll
                for (int jj = 0; jj < 8; ++jj) {
                    // BEGIN EXERCISE: this thread's pairs of chunk column group jj (j = 8q + jj; rows row0 and row0 +
                    //   8): the fused epilogue on the fp32 pair (EPI: SwiGLU with the up partner's registers, + bias,
                    //   + residual), then the pair packed to C's type at its 128-byte-swizzled place in `buf`
                    // HINT: the pair is d[4j + 2h], d[4j + 2h + 1]; SwiGLU's up partner, TILE_OUT columns on, is the
                    //   same thread's 4(j + TILE_OUT / 8) + 2h (+1). The TMA store reads the buffer 128-byte swizzled:
                    //   16-byte chunk jj of row r sits at chunk jj ^ (r % 8), which also spreads a warp's 8 rows over
                    //   all 32 banks.
                    // HINT: if constexpr on EPI: wp_swiglu(v, up); += wp_load_pair(extra + col) (bias, col < c_cols)
                    //   or at row * c_cols + col (residual, row < M); then the pack: pack2(v0, v1, T()) at buf +
                    //   offset.
                    // HINT: `const uint32_t offset = r * 128 + ((jj ^ (r & 7)) << 4) + 4 * (lane % 4);`
                    // STUB: #define HOLE_OPEN 1  // delete once this hole is filled: nothing is built while one is left (course/holes.py)
                    const int j = 8 * q + jj;
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int r = row0 + 8 * h;
                        float v0 = d[4 * j + 2 * h], v1 = d[4 * j + 2 * h + 1];
                        if constexpr (EPI != WP_EPI_NONE) {
                            // Column of C (even; c_cols is a multiple of 8, so col < c_cols covers col + 1)
                            // and row of C of this pair.
                            const int col = n0 + 8 * j + 2 * (lane % 4), row = row_base + r;
                            if constexpr (EPI == WP_EPI_SWIGLU) {
                                v0 = wp_swiglu(v0, d[4 * (j + TILE_OUT / 8) + 2 * h]);
                                v1 = wp_swiglu(v1, d[4 * (j + TILE_OUT / 8) + 2 * h + 1]);
                            } else if constexpr (EPI == WP_EPI_BIAS) {
                                if (col < c_cols) { const float2 b = wp_load_pair(extra + col); v0 += b.x; v1 += b.y; }
                            } else if constexpr (EPI == WP_EPI_RESIDUAL) {
                                // R may be C itself (in place): this thread reads the pair before the
                                // TMA store below writes it, and no other block touches it.
                                if (col < c_cols && row < M) {
                                    const float2 res = wp_load_pair(extra + (size_t)row * c_cols + col);
                                    v0 += res.x; v1 += res.y;
                                }
                            }
                        }
                        // 128-byte swizzle, as the TMA reads it: 16-byte chunk jj of row r lives at chunk jj ^ (r %
                        // 8). The 8 rows a warp writes at once (lane / 4) then hit 8 different chunks: all 32 banks,
                        // no conflict (unswizzled: 8-way).
                        const uint32_t offset = r * 128 + ((jj ^ (r & 7)) << 4) + 4 * (lane % 4);
                        *reinterpret_cast<uint32_t*>(buf + offset) = pack2(v0, v1, T());
                    }
                    // END EXERCISE
                }
                fence_async_smem();
                warpgroup_sync(1 + c);
                if (tid == 0) {
                    // A box wholly outside C (right of its columns, or this warpgroup's rows all below M; with a
                    // cluster, a whole tile below the last row of tiles) is not stored; a box partly outside is
                    // clipped by the TMA.
                    if (n0 + q * WP_C_CHUNK < c_cols && row_base < M)
                        tma_store_2d(&map_c, buf, n0 + q * WP_C_CHUNK, row_base);
                    bulk_commit();
                }
            }
            chunks_done += CHUNKS;
            if (PINGPONG) { it += k_tiles; ++mine; }  // the other consumer's tile: its positions, not ours
        }
        if (tid == 0) bulk_wait<0>();  // shared memory must outlive the stores reading it
    }
    // Neither block of a cluster may exit while the other can still write into its shared memory
    // (a multicast) or arrive on its barriers.
    if (CLUSTER > 1) cluster_sync();
#else
    __trap();  // not compiled for sm_90a: the launcher never gets here
#endif
}

// ---- entry points: wgmma_persistent_<in>, wgmma_cluster_<in> (C in the inputs' type) ------------
// The tensor maps go by value as __grid_constant__ parameters; the launcher passes one pointer per argument to
// cuLaunchKernel (matmul_wgmma.cu says why not a packed buffer). The cluster kernels declare their cluster shape at
// compile time (__cluster_dims__), so a plain launch with a grid of an even number of blocks makes the pairs; only
// sm_90 and newer know the attribute. matmul_wgmma_fused.cu includes this file with WP_BODY_ONLY defined: the body
// without these entries.
#ifndef WP_BODY_ONLY
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define WP_PAIR __cluster_dims__(2, 1, 1)
#else
#define WP_PAIR
#endif
#define WP_ENTRY(name, T, CLUSTER, DIMS)                                                               \
    extern "C" __global__ void DIMS __launch_bounds__(WP_THREADS, 1)                                   \
    name(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,         \
         const __grid_constant__ CUtensorMap map_c, int M, int N, int K)                               \
    {                                                                                                  \
        wgmma_persistent_body<T, CLUSTER>(map_a, map_b, map_c, M, N, K);                               \
    }

WP_ENTRY(wgmma_persistent_f16, __half, 1, )
WP_ENTRY(wgmma_persistent_bf16, __nv_bfloat16, 1, )
WP_ENTRY(wgmma_cluster_f16, __half, 2, WP_PAIR)
WP_ENTRY(wgmma_cluster_bf16, __nv_bfloat16, 2, WP_PAIR)
// A column-major (given as the K x M row-major matrix it is the transpose of): dW = dY^T X without a transpose
// copy. Cooperative, no cluster, no epilogue: the backward's weight gradient is all it is for.
#define WP_A_COL_ENTRY(name, T)                                                                        \
    extern "C" __global__ void __launch_bounds__(WP_THREADS, 1)                                        \
    name(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,         \
         const __grid_constant__ CUtensorMap map_c, int M, int N, int K)                               \
    {                                                                                                  \
        wgmma_persistent_body<T, 1, WP_EPI_NONE, false, false, true>(map_a, map_b, map_c, M, N, K);    \
    }
WP_A_COL_ENTRY(wgmma_persistent_a_col_f16, __half)
WP_A_COL_ENTRY(wgmma_persistent_a_col_bf16, __nv_bfloat16)
#endif  // WP_BODY_ONLY
