// Exercise: the histograms that week1_cuda_python/exercises/histogram.py launches. Keep these
// names and signatures. counts[b] += number of x[i] == b for 0 <= x[i] < bins (compare
// (unsigned)x[i] < (unsigned)bins: negative int32 values then fall out too).

#define MAX_SHARED_BINS 12288  // 48 KiB of int counters

extern "C" __global__ void histogram_global_u8(const unsigned char* x, int* counts, long long n, int bins)
{
    // TODO: one thread per element, atomicAdd(counts + value, 1).
}

extern "C" __global__ void histogram_global_i32(const int* x, int* counts, long long n, int bins)
{
    // TODO: as above for int.
}

extern "C" __global__ void histogram_shared_u8(const unsigned char* x, int* counts, long long n, int bins)
{
    // TODO: extern __shared__ int block_counts[] (bins ints); zero, __syncthreads(), grid-stride
    // shared atomics, __syncthreads(), one global atomicAdd per nonzero bin.
}

extern "C" __global__ void histogram_shared_i32(const int* x, int* counts, long long n, int bins)
{
    // TODO: as above for int.
}

extern "C" __global__ void histogram_per_warp_u8(const unsigned char* x, int* counts, long long n, int bins,
                                                 int copies, int vectorize)
{
    // TODO: `copies` sub-histograms of `bins` counters in dynamic shared memory, warp w uses copy
    // w % copies; read uint4 vectors (16 values) when vectorize, the tail one by one; merge.
}

extern "C" __global__ void histogram_per_warp_i32(const int* x, int* counts, long long n, int bins,
                                                  int copies, int vectorize)
{
    // TODO: as above for int (4 values per uint4).
}

extern "C" __global__ void histogram_per_lane_u8(const unsigned char* x, int* counts, long long n, int bins,
                                                 int copies, int vectorize)
{
    // TODO: as per warp, but lane l uses copy l % copies and counter b of copy c lives at
    // b * copies + c: with 32 copies lane l always hits bank l. Why does that help skewed data?
}

extern "C" __global__ void histogram_per_lane_i32(const int* x, int* counts, long long n, int bins,
                                                  int copies, int vectorize)
{
    // TODO: as above for int.
}
