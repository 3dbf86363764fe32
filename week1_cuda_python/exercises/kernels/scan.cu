// Exercise: the prefix sums that week1_cuda_python/exercises/scan.py launches. Keep these names,
// signatures and #defines (the tests compare them with the Python constants).
// out[i] = x[0] + ... + x[i] (inclusive) or x[0] + ... + x[i-1] (exclusive, out[0] = 0).
// Tip: write each kernel once as a template<typename T> __device__ function and call it from
// the _f32 and _i32 wrappers; add int32 as unsigned so that overflow wraps (signed overflow is
// undefined behaviour in C++).

#define HILLIS_STEELE_MAX 1024
#define BLELLOCH_MAX 2048
#ifndef LOOKBACK_THREADS
#define LOOKBACK_THREADS 256
#endif
#ifndef LOOKBACK_VECTORS
#define LOOKBACK_VECTORS 4
#endif

extern "C" __global__ void scan_hillis_steele_f32(const float* x, float* out, int n, int exclusive)
{
    // TODO: __shared__ float buffer[2][HILLIS_STEELE_MAX]; one element per thread; log2(n)
    // steps reading one buffer and writing the other, __syncthreads() after each.
}

extern "C" __global__ void scan_hillis_steele_i32(const int* x, int* out, int n, int exclusive)
{
    // TODO: as above for int.
}

extern "C" __global__ void scan_blelloch_f32(const float* x, float* out, float* block_sums,
                                             long long n, int exclusive)
{
    // TODO: tile of m = 2 * blockDim.x elements at blockIdx.x * m; shared tree padded by one
    // word per 32 (index i -> i + (i >> 5)); up-sweep; root -> block_sums[blockIdx.x] unless
    // block_sums is NULL; root = 0; down-sweep; inclusive adds x once more.
}

extern "C" __global__ void scan_blelloch_i32(const int* x, int* out, int* block_sums,
                                             long long n, int exclusive)
{
    // TODO: as above for int.
}

extern "C" __global__ void scan_add_offsets_f32(float* out, const float* offsets, long long n, int tile)
{
    // TODO: out[i] += offsets[i / tile] for i in tiles 1, 2, ...
}

extern "C" __global__ void scan_add_offsets_i32(int* out, const int* offsets, long long n, int tile)
{
    // TODO: as above for int.
}

extern "C" __global__ void scan_lookback_f32(const float* x, float* out, long long n, unsigned long long* status,
                                             unsigned* tile_counter, int exclusive, int vectorize)
{
    // TODO (Merrill and Garland 2016, decoupled look-back), LOOKBACK_THREADS threads, a tile of
    // LOOKBACK_THREADS * LOOKBACK_VECTORS * 4 elements:
    //  1. tile = atomicAdd(tile_counter, 1) (thread 0, shared with the block): tiles in start order;
    //  2. load float4 vectors (when vectorize and the tile is full; else element by element);
    //  3. scan in registers and with __shfl_up_sync inside each warp; warp totals via shared memory;
    //  4. publish the tile total with flag AGGREGATE (flag and value in ONE 64-bit volatile store),
    //     look back over predecessors (32 at a time, __ballot_sync) until a PREFIX, publish PREFIX;
    //  5. add the prefix and store.
}

extern "C" __global__ void scan_lookback_i32(const int* x, int* out, long long n, unsigned long long* status,
                                             unsigned* tile_counter, int exclusive, int vectorize)
{
    // TODO: as above for int (int4 vectors).
}
