// Sum of a float32 vector with warp shuffles, launched from week1_cuda_python/reduction.py.
//
// Cost model: 4n bytes read, n - 1 additions: memory-bound. The work is to read at full
// bandwidth while combining partial sums cheaply: each thread sums many elements in a
// register (grid-stride, float4 loads), each warp combines its 32 sums with register
// shuffles (no shared memory, no __syncthreads), each block combines its warps' sums
// through 32 floats of shared memory, and one atomicAdd per block writes the total.

extern "C" __global__ void sum_warp_shuffle(const float* __restrict__ x, float* __restrict__ out,
                                            long long n, int vectorize)
{
    // BEGIN EXERCISE: a grid-stride partial sum per thread in a register: float4 loads for the first
    //   n / 4 * 4 elements when vectorize (the launcher checked the alignment), then the tail one by one
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    float acc = 0.0f;
    // float4 loads need 16-byte alignment, which the launcher checks (vectorize = 1).
    const long long n4 = vectorize ? n / 4 : 0;
    for (long long i = start; i < n4; i += stride) {
        const float4 v = reinterpret_cast<const float4*>(x)[i];
        acc += (v.x + v.y) + (v.z + v.w);
    }
    for (long long i = 4 * n4 + start; i < n; i += stride) {
        acc += x[i];
    }
    // END EXERCISE
    // Tree within the warp: after offsets 16, 8, 4, 2, 1, lane 0 holds the warp's sum.
    // All 32 lanes take part (mask 0xffffffff): nobody has returned early.
    // BEGIN EXERCISE: the warp's tree in registers: acc += __shfl_down_sync(0xffffffff, acc, offset)
    //   for offsets 16, 8, 4, 2, 1
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        acc += __shfl_down_sync(0xffffffffu, acc, offset);
    }
    // END EXERCISE
    // BEGIN EXERCISE: lane 0 of each warp stores its sum in __shared__ float warp_sums[32];
    //   __syncthreads(); warp 0 reduces those sums with a second shuffle tree and its lane 0 does the
    //   block's one atomicAdd(out, ...)
    __shared__ float warp_sums[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        warp_sums[warp] = acc;
    }
    __syncthreads();
    if (warp == 0) {
        acc = lane < (int)(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            acc += __shfl_down_sync(0xffffffffu, acc, offset);
        }
        if (lane == 0) {
            atomicAdd(out, acc);  // one atomic per block, not per element
        }
    }
    // END EXERCISE
}
