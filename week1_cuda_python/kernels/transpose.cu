// Matrix transpose in CUDA C, launched from week1_cuda_python/transpose.py: out (C x R) = x.T
// for a row-major x (R x C), float32 (_f32) and float64 (_f64).
//
// Cost model: 2 * R * C * sizeof(T) bytes (x read once, out written once), no arithmetic. The
// ceiling is a device-to-device copy; what stands between a transpose and the copy is that one
// side walks rows and the other columns.
//   transpose_padded_*   the Numba `padded` rung in C: a 32 x 33 shared tile, 32 x 8 threads,
//                        4 elements per thread
//   transpose_tile64_*   a 64 x 64 tile per block of 32 x TILE64_ROWS threads (16 elements per
//                        thread with 8 rows): more loads in flight per thread, a quarter of the
//                        blocks and barriers per byte; rows read as 8-byte (float2) or 16-byte
//                        (double2) vectors, stored into two padded half-tiles so that neither
//                        the shared stores nor the column reads have bank conflicts.
// Offsets into x and out are 64-bit (size_t): R * C can exceed 2^31 elements.

// --- the padded 32 x 32 tile ----------------------------------------------------------------------

#define TILE 32
#define BLOCK_ROWS 8

template <typename T>
__device__ void transpose_padded(const T* __restrict__ x, T* __restrict__ out, int rows, int cols)
{
    // 33 columns: column k of the tile starts one bank further on in each row, so reading a
    // column (32 addresses 33 words apart) touches 32 different banks.
    // BEGIN EXERCISE: __shared__ T tile[TILE][TILE + 1]; read the block's tile of x with threadIdx.x
    //   along x's rows (bounds-checked, 64-bit offsets: (size_t)row * cols + col), __syncthreads(),
    //   write it transposed with threadIdx.x along out's rows (reading a column of the tile)
    // HINT: two coalesced phases joined by shared memory: read a tile row-wise from x, barrier, write it
    //   row-wise to out while reading a column of the tile; the +1 column of padding spreads that column
    //   over 32 banks.
    // HINT: declare the padded tile; loop j over the tile's rows in steps of BLOCK_ROWS for the load
    //   (bounds-checked), __syncthreads(), then a second loop at the swapped block coordinates for the
    //   store.
    // HINT: index with size_t products (`(size_t)row * cols + col`): rows * cols can pass 2^31 even when
    //   each fits an int.
    __shared__ T tile[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * TILE + tx;  // threadIdx.x along x's rows: coalesced reads
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int row = blockIdx.y * TILE + ty + j;
        if (row < rows && col < cols) {
            tile[ty + j][tx] = x[(size_t)row * cols + col];
        }
    }
    __syncthreads();
    const int out_col = blockIdx.y * TILE + tx;  // threadIdx.x along out's rows: coalesced writes
    for (int j = 0; j < TILE; j += BLOCK_ROWS) {
        const int out_row = blockIdx.x * TILE + ty + j;
        if (out_row < cols && out_col < rows) {
            out[(size_t)out_row * rows + out_col] = tile[tx][ty + j];
        }
    }
    // END EXERCISE
}

extern "C" __global__ void transpose_padded_f32(const float* x, float* out, int rows, int cols)
{
    transpose_padded<float>(x, out, rows, cols);
}

extern "C" __global__ void transpose_padded_f64(const double* x, double* out, int rows, int cols)
{
    transpose_padded<double>(x, out, rows, cols);
}

// --- 64 x 64 tiles, 16 elements per thread, vector loads --------------------------------------------

#ifndef TILE64_ROWS
#define TILE64_ROWS 8  // threads per block = 32 x TILE64_ROWS; elements per thread = 128 / TILE64_ROWS
#endif
#define TILE64 64
#define HALF_PITCH 33  // 32 columns + 1 of padding
#define PAIRS_PER_THREAD (TILE64 / TILE64_ROWS)  // tile rows per thread (2 elements each)

// Lane tx reads x[r][2tx] and x[r][2tx + 1] as one vector. Stored in ONE 64 x 65 tile, the two
// values would land at 2tx and 2tx + 1: lanes tx and tx + 16 then share a bank (2-way conflict
// on every store). Split by column parity instead: even columns in `even`, odd in `odd`, each
// 64 x 33. A store even[r][tx] is 32 consecutive words (no conflict); reading column c back is
// half[r][c / 2] for 32 rows r, 33 words apart: 32 different banks. (For doubles, 8-byte words
// are served per half-warp and the same argument holds.)
template <typename T, typename T2>
__device__ void transpose_tile64(const T* __restrict__ x, T* __restrict__ out, int rows, int cols, int vectorize)
{
    __shared__ T even[TILE64][HALF_PITCH];
    __shared__ T odd[TILE64][HALF_PITCH];
    // BEGIN EXERCISE: fill the two half-tiles of this block's tile (its corner col0, row0). Full tiles (and
    //   vectorize): each thread loads its PAIRS_PER_THREAD pairs (T2 vectors: lane tx gets columns 2tx,
    //   2tx + 1 of row ty + j * TILE64_ROWS) into registers first, then stores them, the even column in
    //   `even`, the odd one in `odd`; edge tiles element by element, bounds-checked
    // HINT: a full tile can be read as pairs (one T2 per lane, two columns at once), and issuing all loads
    //   before any store keeps several requests in flight; the two columns of a pair are split into the
    //   even and odd half-tiles.
    // HINT: decide `full` (vectorize, and the tile fits inside both extents); full: a register array of T2,
    //   one unrolled loop of vector loads, a second loop storing .x to even and .y to odd; else: a
    //   bounds-checked loop storing column 2tx and 2tx+1 separately.
    // HINT: the vector load: `reinterpret_cast<const T2*>(x + (size_t)(row0 + r) * cols + col0)[tx]`.
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col0 = blockIdx.x * TILE64, row0 = blockIdx.y * TILE64;
    const bool full = vectorize && col0 + TILE64 <= cols && row0 + TILE64 <= rows;
    if (full) {
        // All loads first, into registers, then the shared stores: 64 / TILE64_ROWS independent
        // vector loads per thread in flight at once (Little's law: bytes in flight = bandwidth
        // x latency, and one thread with one load in flight cannot supply its share).
        T2 pairs[PAIRS_PER_THREAD];
#pragma unroll
        for (int j = 0; j < PAIRS_PER_THREAD; ++j) {
            const int r = ty + j * TILE64_ROWS;
            pairs[j] = reinterpret_cast<const T2*>(x + (size_t)(row0 + r) * cols + col0)[tx];
        }
#pragma unroll
        for (int j = 0; j < PAIRS_PER_THREAD; ++j) {
            const int r = ty + j * TILE64_ROWS;
            even[r][tx] = pairs[j].x;
            odd[r][tx] = pairs[j].y;
        }
    } else {  // edge tiles, odd widths, unaligned views: element by element, bounds-checked
        const int c = col0 + 2 * tx;
        for (int j = 0; j < PAIRS_PER_THREAD; ++j) {
            const int r = ty + j * TILE64_ROWS;
            const int row = row0 + r;
            if (row < rows && c < cols) {
                even[r][tx] = x[(size_t)row * cols + c];
            }
            if (row < rows && c + 1 < cols) {
                odd[r][tx] = x[(size_t)row * cols + c + 1];
            }
        }
    }
    // END EXERCISE
    __syncthreads();
    // Row c of this block's part of out is column c of the tile: lanes take rows tx and tx + 32
    // of the tile, so each warp store writes 32 consecutive elements of out.
    // BEGIN EXERCISE: row c = ty + j * TILE64_ROWS of this block's part of out is column c of the tile,
    //   in the half-tile of c's parity at index c / 2; lanes write elements tx and tx + 32 of that row
    //   (bounds-checked against cols and rows)
    // HINT: row c of the output block is column c of the tile; column c lives in the half-tile of its parity
    //   at position c/2, and lanes take tile rows tx and tx + 32 so a warp writes 32 consecutive
    //   elements of out.
    // HINT: loop j over PAIRS_PER_THREAD: c from ty and j, pick the half by c & 1 (uniform per warp, so no
    //   divergence), point at out's row col0 + c starting at column row0, and two bounds-checked stores.
    // HINT: the shared read: `half[tx * HALF_PITCH + c / 2]` (and tx + 32 for the second store).
#pragma unroll
    for (int j = 0; j < PAIRS_PER_THREAD; ++j) {
        const int c = ty + j * TILE64_ROWS;
        const int out_row = col0 + c;
        const T* half = (c & 1) ? &odd[0][0] : &even[0][0];  // the same for the whole warp
        const int k = c / 2;
        T* dst = out + (size_t)out_row * rows + row0;
        if (out_row < cols && row0 + tx < rows) {
            dst[tx] = half[tx * HALF_PITCH + k];
        }
        if (out_row < cols && row0 + tx + 32 < rows) {
            dst[tx + 32] = half[(tx + 32) * HALF_PITCH + k];
        }
    }
    // END EXERCISE
}

extern "C" __global__ void __launch_bounds__(32 * TILE64_ROWS)
transpose_tile64_f32(const float* x, float* out, int rows, int cols, int vectorize)
{
    transpose_tile64<float, float2>(x, out, rows, cols, vectorize);
}

extern "C" __global__ void __launch_bounds__(32 * TILE64_ROWS)
transpose_tile64_f64(const double* x, double* out, int rows, int cols, int vectorize)
{
    transpose_tile64<double, double2>(x, out, rows, cols, vectorize);
}
