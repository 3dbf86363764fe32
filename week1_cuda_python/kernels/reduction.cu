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
    // HINT: most of the reduction happens in a register: each thread walks the array with the grid's stride,
    //   so the same small grid handles any n and every warp's loads stay contiguous.
    // HINT: 64-bit start and stride; a float accumulator; one loop over float4 indices below n4 (n4 = n/4
    //   when vectorize, else 0) adding the four lanes; a second loop over the scalar tail starting at 4
    //   * n4 + start.
    // HINT: the stride is `(long long)gridDim.x * blockDim.x`: the whole grid, in 64 bits.
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
    // HINT: a shuffle reads another lane's register directly, so a warp can halve its values five times
    //   without shared memory or a barrier; after offsets 16..1 lane 0 holds the sum of all 32.
    // HINT: an unrolled for loop with offset starting at 16 and halving; each step adds the value shuffled
    //   down from lane + offset, with the full-warp mask since every lane is still active.
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        acc += __shfl_down_sync(0xffffffffu, acc, offset);
    }
    // END EXERCISE
    // BEGIN EXERCISE: lane 0 of each warp stores its sum in __shared__ float warp_sums[32];
    //   __syncthreads(); warp 0 reduces those sums with a second shuffle tree and its lane 0 does the
    //   block's one atomicAdd(out, ...)
    // HINT: warps cannot shuffle across each other, so each warp's lane 0 parks its sum in shared memory;
    //   after a barrier one warp loads those (up to 32) sums and repeats the shuffle tree; one atomic
    //   per block, not per element.
    // HINT: shared float[32]; lane and warp from threadIdx.x; lane 0 stores; __syncthreads(); inside `if
    //   (warp == 0)`: load a sum (0 for lanes past the block's warp count), the same shuffle loop, then
    //   lane 0 calls atomicAdd.
    // HINT: the guarded load: `lane < (int)(blockDim.x / 32) ? warp_sums[lane] : 0.0f` (unwritten slots hold
    //   garbage).
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
