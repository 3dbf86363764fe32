// Exercise: the three kernels that week1_cuda_python/exercises/conv2d.py launches.
// Keep the names and signatures (extern "C": Python finds them by name).
//
//   out[r][c] = sum over dy, dx in [0, K) of x[r + dy - K/2][c + dx - K/2] * w[dy][dx],
//   x = 0 outside the image; sum the taps dy outer, dx inner.
// Blocks are 32 x 8 threads. conv2d_naive / conv2d_const: one output per thread.
// conv2d_tiled: a 32 x 32 block of outputs, 4 rows per thread.

#define MAX_K 15
#define TILE_W 32
#define TILE_H 32
#define BLOCK_H 8
#define HALO_MAX (MAX_K - 1)

// The launcher copies the filter here (row-major, K * K floats) before each launch.
__constant__ float c_filter[MAX_K * MAX_K];

extern "C" __global__ void conv2d_naive(const float* __restrict__ x,
                                        const float* __restrict__ w,
                                        float* __restrict__ out,
                                        int H, int W, int K)
{
    // TODO: col and row from blockIdx, blockDim, threadIdx; return when outside the image;
    // skip taps outside the image; index with (long long)row * W + col.
}

extern "C" __global__ void conv2d_const(const float* __restrict__ x,
                                        float* __restrict__ out,
                                        int H, int W, int K)
{
    // TODO: conv2d_naive with c_filter[dy * K + dx] instead of w.
}

extern "C" __global__ void conv2d_tiled(const float* __restrict__ x,
                                        float* __restrict__ out,
                                        int H, int W, int K)
{
    // TODO: load the (TILE_H + K - 1) x (TILE_W + K - 1) window starting at
    // (blockIdx.y * TILE_H - K/2, blockIdx.x * TILE_W - K/2) into shared memory (0 outside
    // the image), __syncthreads(), then each thread computes rows threadIdx.y + k * BLOCK_H.
    // The shared array: __shared__ float tile[TILE_H + HALO_MAX][TILE_W + HALO_MAX];
}

// Then conv2d_tiled_k1, conv2d_tiled_k3, ..., conv2d_tiled_k15 and conv2d_regblock_k1 ... _k15,
// each (const float* x, float* out, int H, int W): write the body once as a
// template <int K> __device__ function and instantiate it from one extern "C" wrapper per K.
