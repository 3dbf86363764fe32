// Exercise: the CUDA C matmul ladder that week1_cuda_python/exercises/matmul.py launches.
// C (M x N) = A (M x K) @ B (K x N), row-major float32. Keep these names and signatures.

extern "C" __global__ void sgemm_naive(const float* __restrict__ A, const float* __restrict__ B,
                                       float* __restrict__ C, int M, int N, int K)
{
    // TODO: row from threadIdx.x, col from threadIdx.y; guard; loop over k.
}

extern "C" __global__ void sgemm_coalesced(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K)
{
    // TODO: as sgemm_naive with threadIdx.x over columns: why is that faster?
}

extern "C" __global__ void sgemm_shared(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K)
{
    // TODO: 32x32 __shared__ tiles of A and B; __syncthreads() after loading and after use.
}

extern "C" __global__ void sgemm_blocktile_1d(const float* __restrict__ A, const float* __restrict__ B,
                                              float* __restrict__ C, int M, int N, int K)
{
    // TODO: 64x64 block tile, BK = 8, each of 512 threads computes 8 outputs of one column.
}

extern "C" __global__ void sgemm_blocktile_2d(const float* __restrict__ A, const float* __restrict__ B,
                                              float* __restrict__ C, int M, int N, int K)
{
    // TODO: 128x128 block tile, each of 256 threads computes an 8x8 block (outer products).
}

extern "C" __global__ void sgemm_vectorized(const float* __restrict__ A, const float* __restrict__ B,
                                            float* __restrict__ C, int M, int N, int K)
{
    // TODO: as sgemm_blocktile_2d with float4 loads/stores and A transposed in shared memory.
}

extern "C" __global__ void sgemm_warptiling(const float* __restrict__ A, const float* __restrict__ B,
                                            float* __restrict__ C, int M, int N, int K)
{
    // TODO: block tile -> warp tile -> thread tile; prefetch the next tile into registers.
}
