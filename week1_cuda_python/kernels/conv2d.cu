// 2-D convolution (cross-correlation, zero padding, 'same' output) of an H x W float32 image
// with a K x K filter, K odd. Launched by week1_cuda_python/conv2d.py.
//
//   out[r][c] = sum over dy, dx in [0, K) of x[r + dy - K/2][c + dx - K/2] * w[dy][dx]
//
// with x = 0 outside the image. Cost: 2 K^2 FLOPs per output; at least 8 bytes per pixel
// (read once, write once). Three rungs: the filter in global memory, in constant memory,
// then the input tile with its halo staged in shared memory.
//
// The taps are summed in the same order (dy outer, dx inner) in every kernel, and padding
// contributes 0 * w, which changes no sum: the rungs agree bit for bit on finite filters.

#define MAX_K 15           // largest filter the constant-memory buffer holds
#define TILE_W 32          // outputs per block along a row: one warp, 128 contiguous bytes
#define TILE_H 32          // outputs per block down a column
#define BLOCK_H 8          // 32 x 8 = 256 threads; each computes TILE_H / BLOCK_H outputs
#define HALO_MAX (MAX_K - 1)

// 225 floats. Constant memory is cached per SM and *broadcast*: when every thread of a warp
// reads the same address (the same filter tap, at the same time, as here) one read serves
// all 32. Written by the host before a launch (module.get_global + a copy).
__constant__ float c_filter[MAX_K * MAX_K];

extern "C" __global__ void conv2d_naive(const float* __restrict__ x,
                                        const float* __restrict__ w,
                                        float* __restrict__ out,
                                        int H, int W, int K)
{
    // One thread per output; x walks a row, so a warp reads and writes 32 neighbouring floats.
    // BEGIN EXERCISE: col and row from blockIdx, blockDim, threadIdx; return when outside the image; acc
    //   over the taps (dy outer, dx inner, fmaf), skipping taps outside the image; index with
    //   (long long)row * W + col
    // HINT: one thread per output pixel with x on the column (a warp touches 32 neighbouring floats); taps
    //   outside the image count as zero, so they are simply skipped.
    // HINT: col/row from the 2-D indices and an early return outside the image; r = K / 2; a float
    //   accumulator; dy loop (continue when the row is outside), dx loop (skip when the column is
    //   outside) with fmaf; one store.
    // HINT: the input offset in 64 bits: `(long long)y * W + xx`, since H * W can pass 2^31.
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= H || col >= W) {
        return;
    }
    const int r = K / 2;
    float acc = 0.0f;
    for (int dy = 0; dy < K; ++dy) {
        const int y = row + dy - r;
        if (y < 0 || y >= H) {
            continue;  // zero padding: the tap adds 0
        }
        for (int dx = 0; dx < K; ++dx) {
            const int xx = col + dx - r;
            if (xx >= 0 && xx < W) {
                // Every input pixel is read by K^2 threads: global memory sees it once, the
                // L1/L2 caches serve the rest. The filter read is uniform across the warp.
                acc = fmaf(x[(long long)y * W + xx], w[dy * K + dx], acc);
            }
        }
    }
    out[(long long)row * W + col] = acc;
    // END EXERCISE
}

extern "C" __global__ void conv2d_const(const float* __restrict__ x,
                                        float* __restrict__ out,
                                        int H, int W, int K)
{
    // As conv2d_naive, the filter from constant memory: its reads leave the L1/load path.
    // BEGIN EXERCISE: conv2d_naive with c_filter[dy * K + dx] instead of w
    // HINT: identical arithmetic to conv2d_naive; only where the filter lives changes: the __constant__
    //   array is cached and broadcast to a warp that reads the same tap.
    // HINT: copy the naive body and replace the w[...] read with the module's c_filter at the same index `dy
    //   * K + dx`.
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= H || col >= W) {
        return;
    }
    const int r = K / 2;
    float acc = 0.0f;
    for (int dy = 0; dy < K; ++dy) {
        const int y = row + dy - r;
        if (y < 0 || y >= H) {
            continue;
        }
        for (int dx = 0; dx < K; ++dx) {
            const int xx = col + dx - r;
            if (xx >= 0 && xx < W) {
                acc = fmaf(x[(long long)y * W + xx], c_filter[dy * K + dx], acc);
            }
        }
    }
    out[(long long)row * W + col] = acc;
    // END EXERCISE
}

extern "C" __global__ void conv2d_tiled(const float* __restrict__ x,
                                        float* __restrict__ out,
                                        int H, int W, int K)
{
    // The block's (TILE_H + K - 1) x (TILE_W + K - 1) input window, halo included, is read
    // from global memory once, into shared memory; every tap then reads shared memory.
    // BEGIN EXERCISE: __shared__ float tile[TILE_H + HALO_MAX][TILE_W + HALO_MAX]; load the
    //   (TILE_H + K - 1) x (TILE_W + K - 1) window starting at (blockIdx.y * TILE_H - K/2,
    //   blockIdx.x * TILE_W - K/2) with all the block's threads (0 outside the image), __syncthreads(),
    //   then each thread computes rows threadIdx.y + k * BLOCK_H of its column from the tile and c_filter
    // HINT: every input pixel feeds up to K^2 outputs, so the block loads its output tile plus an r-pixel
    //   halo into shared memory once, stores zeros outside the image (no bounds checks in the tap loop),
    //   and computes from there.
    // HINT: phase 1: the block's linear thread id walks the flattened (tile_h x tile_w) window in steps of
    //   the block size, storing the pixel or 0; __syncthreads(); phase 2: loop k over TILE_H / BLOCK_H
    //   rows per thread, guard the image bounds, fmaf over dy, dx from the tile and c_filter.
    // HINT: the shared read: `tile[ly + dy][threadIdx.x + dx]`, with `ly = threadIdx.y + k * BLOCK_H`.
    __shared__ float tile[TILE_H + HALO_MAX][TILE_W + HALO_MAX];
    const int r = K / 2;
    const int tile_w = TILE_W + K - 1;
    const int tile_h = TILE_H + K - 1;
    const int y0 = blockIdx.y * TILE_H - r;  // image coordinates of tile[0][0]
    const int x0 = blockIdx.x * TILE_W - r;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;

    // Consecutive threads load consecutive pixels of a tile row: coalesced. Pixels outside
    // the image are stored as 0, so the loop below needs no bounds checks.
    for (int i = tid; i < tile_h * tile_w; i += threads) {
        const int ty = i / tile_w;
        const int tx = i - ty * tile_w;
        const int y = y0 + ty;
        const int xx = x0 + tx;
        tile[ty][tx] = (y >= 0 && y < H && xx >= 0 && xx < W) ? x[(long long)y * W + xx] : 0.0f;
    }
    __syncthreads();

    // A warp (fixed threadIdx.y, 32 consecutive threadIdx.x) reads 32 consecutive words of
    // one tile row: 32 different banks, no conflict; the filter read is a broadcast.
    const int col = blockIdx.x * TILE_W + threadIdx.x;
    for (int k = 0; k < TILE_H / BLOCK_H; ++k) {
        const int ly = threadIdx.y + k * BLOCK_H;
        const int row = blockIdx.y * TILE_H + ly;
        if (row < H && col < W) {
            float acc = 0.0f;
            for (int dy = 0; dy < K; ++dy) {
                for (int dx = 0; dx < K; ++dx) {
                    acc = fmaf(tile[ly + dy][threadIdx.x + dx], c_filter[dy * K + dx], acc);
                }
            }
            out[(long long)row * W + col] = acc;
        }
    }
    // END EXERCISE
}

// conv2d_tiled with K known at compile time: one kernel per odd K (conv2d_tiled_k1 ... k15).
// The tap loops then unroll completely, every filter index dy * K + dx becomes a constant
// (the filter value can be an operand of the FMA itself, read from the constant bank), the
// shared tile is sized for this K, and the index arithmetic of the load loop divides by a
// constant. Numba's per-filter kernels get the same for free: there K is a closure constant.
template <int K>
__device__ __forceinline__ void conv2d_tiled_fixed(const float* __restrict__ x,
                                                   float* __restrict__ out,
                                                   int H, int W)
{
    // BEGIN EXERCISE: conv2d_tiled with K a template constant: the tile sized exactly (TILE_H + K - 1) x
    //   (TILE_W + K - 1), and #pragma unroll on the tap loops (they unroll completely)
    // HINT: with K known at compile time, the tile has its exact size (more blocks fit per SM) and the tap
    //   loops unroll completely into straight-line FMAs with constant filter offsets.
    // HINT: conv2d_tiled's body with constexpr R, TW, TH and `__shared__ float tile[TH][TW]`, and #pragma
    //   unroll before the row loop and both tap loops.
    constexpr int R = K / 2;
    constexpr int TW = TILE_W + K - 1;
    constexpr int TH = TILE_H + K - 1;
    __shared__ float tile[TH][TW];
    const int y0 = blockIdx.y * TILE_H - R;
    const int x0 = blockIdx.x * TILE_W - R;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    for (int i = tid; i < TH * TW; i += threads) {
        const int ty = i / TW;
        const int tx = i - ty * TW;
        const int y = y0 + ty;
        const int xx = x0 + tx;
        tile[ty][tx] = (y >= 0 && y < H && xx >= 0 && xx < W) ? x[(long long)y * W + xx] : 0.0f;
    }
    __syncthreads();
    const int col = blockIdx.x * TILE_W + threadIdx.x;
#pragma unroll
    for (int k = 0; k < TILE_H / BLOCK_H; ++k) {
        const int ly = threadIdx.y + k * BLOCK_H;
        const int row = blockIdx.y * TILE_H + ly;
        if (row < H && col < W) {
            float acc = 0.0f;
#pragma unroll
            for (int dy = 0; dy < K; ++dy) {
#pragma unroll
                for (int dx = 0; dx < K; ++dx) {
                    acc = fmaf(tile[ly + dy][threadIdx.x + dx], c_filter[dy * K + dx], acc);
                }
            }
            out[(long long)row * W + col] = acc;
        }
    }
    // END EXERCISE
}

#define CONV2D_TILED_K(k)                                                                  \
    extern "C" __global__ void conv2d_tiled_k##k(const float* __restrict__ x,              \
                                                 float* __restrict__ out, int H, int W)    \
    {                                                                                      \
        conv2d_tiled_fixed<k>(x, out, H, W);                                               \
    }

CONV2D_TILED_K(1)
CONV2D_TILED_K(3)
CONV2D_TILED_K(5)
CONV2D_TILED_K(7)
CONV2D_TILED_K(9)
CONV2D_TILED_K(11)
CONV2D_TILED_K(13)
CONV2D_TILED_K(15)

// Register blocking on top of conv2d_tiled_fixed: each thread computes TILE_H / BLOCK_H = 4
// *consecutive* output rows. Output rows j and j + 1 use the same input row with filter rows
// dy and dy - 1, so each input row of the thread's window is read from shared memory once
// (K words into registers) and feeds up to 4 outputs: (4 + K - 1) K shared loads for 4 K^2
// FMAs instead of 4 K^2. An SM's shared memory serves one warp-wide load per clock against
// four warp-wide FMAs: at 1 load per FMA a kernel runs at <= 25% of FMA peak, at K = 15's 0.3
// loads per FMA the cap rises to ~80%.
// The sum of each output still runs dy outer, dx inner: bit for bit the other rungs' result.
template <int K>
__device__ __forceinline__ void conv2d_regblock_fixed(const float* __restrict__ x,
                                                      float* __restrict__ out,
                                                      int H, int W)
{
    constexpr int R = K / 2;
    constexpr int TW = TILE_W + K - 1;
    constexpr int TH = TILE_H + K - 1;
    __shared__ float tile[TH][TW];
    const int y0 = blockIdx.y * TILE_H - R;
    const int x0 = blockIdx.x * TILE_W - R;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    for (int i = tid; i < TH * TW; i += threads) {
        const int ty = i / TW;
        const int tx = i - ty * TW;
        const int y = y0 + ty;
        const int xx = x0 + tx;
        tile[ty][tx] = (y >= 0 && y < H && xx >= 0 && xx < W) ? x[(long long)y * W + xx] : 0.0f;
    }
    __syncthreads();

    // BEGIN EXERCISE: this thread's ROWS consecutive output rows (from ly0 = threadIdx.y * ROWS), ROWS
    //   accumulators in registers; for each of the ROWS + K - 1 input rows they touch: its K values into
    //   registers once (v[dx]), added into every output j it feeds (filter row dy = t - j); then the
    //   bounds-checked stores. Keep the order of each sum: dy outer, dx inner
    // HINT: register blocking: a thread owns ROWS consecutive output rows, and input row t of the window
    //   feeds output j through filter row t - j, so each shared value is read into a register once and
    //   reused for every output it touches.
    // HINT: ROWS accumulators zeroed; unrolled loop t over ROWS + K - 1 input rows: load K values into v[],
    //   then for each j with 0 <= t - j < K add v[dx] * c_filter[(t - j) * K + dx]; finally
    //   bounds-checked stores of each accumulator.
    // HINT: `const int dy = t - j;` becomes a compile-time constant once everything is unrolled, so the `if`
    //   costs nothing.
    constexpr int ROWS = TILE_H / BLOCK_H;
    const int ly0 = threadIdx.y * ROWS;  // this thread's first output row inside the tile
    float acc[ROWS];
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        acc[j] = 0.0f;
    }
#pragma unroll
    for (int t = 0; t < ROWS + K - 1; ++t) {  // the input rows the thread's outputs touch
        float v[K];
#pragma unroll
        for (int dx = 0; dx < K; ++dx) {
            v[dx] = tile[ly0 + t][threadIdx.x + dx];
        }
#pragma unroll
        for (int j = 0; j < ROWS; ++j) {
            const int dy = t - j;  // known at compile time once the loops are unrolled
            if (dy >= 0 && dy < K) {
#pragma unroll
                for (int dx = 0; dx < K; ++dx) {
                    acc[j] = fmaf(v[dx], c_filter[dy * K + dx], acc[j]);
                }
            }
        }
    }
    const int col = blockIdx.x * TILE_W + threadIdx.x;
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        const int row = blockIdx.y * TILE_H + ly0 + j;
        if (row < H && col < W) {
            out[(long long)row * W + col] = acc[j];
        }
    }
    // END EXERCISE
}

#define CONV2D_REGBLOCK_K(k)                                                               \
    extern "C" __global__ void conv2d_regblock_k##k(const float* __restrict__ x,           \
                                                    float* __restrict__ out, int H, int W) \
    {                                                                                      \
        conv2d_regblock_fixed<k>(x, out, H, W);                                            \
    }

CONV2D_REGBLOCK_K(1)
CONV2D_REGBLOCK_K(3)
CONV2D_REGBLOCK_K(5)
CONV2D_REGBLOCK_K(7)
CONV2D_REGBLOCK_K(9)
CONV2D_REGBLOCK_K(11)
CONV2D_REGBLOCK_K(13)
CONV2D_REGBLOCK_K(15)
