// Histograms in CUDA C, launched from week1_cuda_python/histogram.py.
//
// counts[b] = number of i with x[i] == b, for uint8 or int32 values; values outside [0, bins)
// are not counted (int32 values are compared as unsigned, so negatives fall out too).
//
// Cost model: n * sizeof(x) bytes read, 4 * bins bytes written, one increment per element and
// no arithmetic to speak of. The increments are the problem: many threads add to the same few
// counters, and an atomic add on one address is a queue. The rungs move the queues closer:
//   histogram_global_*     one atomicAdd in global memory (the L2) per element
//   histogram_shared_*     a per-block histogram in shared memory, merged once per block
//   histogram_per_warp_*   one sub-histogram per warp: fewer warps collide on a counter;
//                          16-byte vector loads, several vectors in flight per thread
//   histogram_per_lane_*   up to 32 copies interleaved so that lane l always hits bank l:
//                          no bank conflicts and no same-address collisions inside a warp,
//                          whatever the data (all-equal input included)
// Every kernel comes as _u8 (unsigned char) and _i32 (int), from one template.

#define MAX_SHARED_BINS 12288  // 48 KiB of int counters: what a block gets without opting in
#ifndef HISTOGRAM_UNROLL
#define HISTOGRAM_UNROLL 2  // 16-byte vectors each thread loads before counting any
#endif

// --- counting one value, or the values packed in one 32-bit word -------------------------------

// `counters` is this thread's sub-histogram; counter b lives at counters[b * stride].
__device__ __forceinline__ void count_one(int* counters, unsigned value, unsigned bins, int stride)
{
    // BEGIN EXERCISE: count `value` when value < bins (unsigned: negative int32 values are huge and
    //   fall out too): atomicAdd on counter `value` of this sub-histogram (counters + value * stride)
    // HINT: casting to unsigned folds the two range checks into one: a negative value becomes a huge
    //   unsigned number and fails `< bins` too.
    // HINT: one if on the unsigned comparison, one atomicAdd of 1 at this sub-histogram's counter for the
    //   value (counters are `stride` ints apart).
    if (value < bins) {
        atomicAdd(counters + value * stride, 1);
    }
    // END EXERCISE
}

// The tag argument picks the element type: four uint8 values per word, or one int32.
__device__ __forceinline__ void count_word(int* counters, unsigned word, unsigned bins, int stride, unsigned char)
{
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        count_one(counters, (word >> (8 * k)) & 0xffu, bins, stride);
    }
}

__device__ __forceinline__ void count_word(int* counters, unsigned word, unsigned bins, int stride, int)
{
    count_one(counters, word, bins, stride);
}

// --- rung 1: one global atomic per element -------------------------------------------------------

template <typename T>
__device__ void histogram_global(const T* __restrict__ x, int* __restrict__ counts, long long n, int bins)
{
    // BEGIN EXERCISE: one thread per element (64-bit index, guarded): count_one in the global counts
    // HINT: the first rung: every element is one global atomic; the index must be 64-bit because n can
    //   exceed 2^31.
    // HINT: a long long global index, a guard against n, then count_one on the global counts with stride 1
    //   (cast the value and bins to unsigned).
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        count_one(counts, (unsigned)x[i], (unsigned)bins, 1);
    }
    // END EXERCISE
}

extern "C" __global__ void histogram_global_u8(const unsigned char* x, int* counts, long long n, int bins)
{
    histogram_global<unsigned char>(x, counts, n, bins);
}

extern "C" __global__ void histogram_global_i32(const int* x, int* counts, long long n, int bins)
{
    histogram_global<int>(x, counts, n, bins);
}

// --- rung 2: a per-block histogram in shared memory ----------------------------------------------

// Shared-memory atomics are handled inside the SM, an order of magnitude closer than the L2, and
// only the threads of one block compete for each counter. The grid is a few blocks per SM; each
// thread strides through the input (coalesced: neighbouring threads read neighbouring elements),
// and each block adds its `bins` totals to the global counts once at the end.
template <typename T>
__device__ void histogram_shared(const T* __restrict__ x, int* __restrict__ counts, long long n, int bins)
{
    // BEGIN EXERCISE: extern __shared__ int block_counts[] (bins ints, sized by the launch); zero it,
    //   __syncthreads(), grid-stride over x counting into it, __syncthreads(), one global atomicAdd per
    //   nonzero bin
    // HINT: a block-private histogram in shared memory: atomics there are on-SM and contended only within
    //   the block; the merge costs one global atomic per nonzero bin per block.
    // HINT: extern shared int array; block-stride loop zeroing bins; __syncthreads(); 64-bit grid-stride
    //   loop calling count_one on it; __syncthreads(); block-stride loop adding nonzero counts with
    //   atomicAdd.
    // HINT: the grid stride in 64 bits: `(long long)gridDim.x * blockDim.x`.
    extern __shared__ int block_counts[];  // `bins` ints, sized by the launch
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
        block_counts[b] = 0;
    }
    __syncthreads();
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        count_one(block_counts, (unsigned)x[i], (unsigned)bins, 1);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
        const int c = block_counts[b];
        if (c != 0) {
            atomicAdd(counts + b, c);
        }
    }
    // END EXERCISE
}

extern "C" __global__ void histogram_shared_u8(const unsigned char* x, int* counts, long long n, int bins)
{
    histogram_shared<unsigned char>(x, counts, n, bins);
}

extern "C" __global__ void histogram_shared_i32(const int* x, int* counts, long long n, int bins)
{
    histogram_shared<int>(x, counts, n, bins);
}

// --- rungs 3 and 4: several sub-histograms per block, vector loads -----------------------------------
//
// `copies` sub-histograms of `bins` counters share the block's shared memory (copies * bins <=
// MAX_SHARED_BINS, chosen by the launcher).
//   per warp (PER_LANE false): warp w counts into copy w % copies, laid out copy after copy.
//     Warps stop competing with each other; lanes of one warp still collide when they hit
//     the same counter (32-way for all-equal input) or counters in the same bank.
//   per lane (PER_LANE true): lane l counts into copy l % copies, laid out interleaved:
//     counter b of copy c at b * copies + c. With copies = 32 that address is in bank c = l:
//     the 32 lanes of a warp always hit 32 different banks and never the same address.
template <typename T, bool PER_LANE>
__device__ void histogram_private(const T* __restrict__ x, int* __restrict__ counts, long long n,
                                  int bins, int copies, int vectorize)
{
    extern __shared__ int sub_counts[];  // copies * bins ints
    // BEGIN EXERCISE: zero all copies * bins counters, __syncthreads(); this thread's sub-histogram
    //   `mine` and its `stride`: per warp, copy warp % copies laid out copy after copy (stride 1); per
    //   lane, copy lane % copies interleaved (counter b of copy c at b * copies + c, stride copies)
    // HINT: several copies of the histogram split the contention for a hot bin: one per warp (copies laid
    //   end to end) or one per lane (interleaved, so counter b of copy c is one word from copy c+1 and
    //   lanes hit different banks).
    // HINT: lane and warp from threadIdx.x; block-stride zero loop over copies * bins; __syncthreads(); then
    //   pick `mine` and `stride` with the PER_LANE template flag.
    // HINT: per lane: `mine = sub_counts + lane % copies`, stride copies; per warp: `sub_counts + (warp %
    //   copies) * bins`, stride 1.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int k = threadIdx.x; k < copies * bins; k += blockDim.x) {
        sub_counts[k] = 0;
    }
    __syncthreads();
    int* mine = PER_LANE ? sub_counts + lane % copies : sub_counts + (warp % copies) * bins;
    const int stride = PER_LANE ? copies : 1;
    const unsigned ubins = (unsigned)bins;
    // END EXERCISE

    // The body as 16-byte vectors (16 uint8 or 4 int32 values each). In one iteration a thread
    // issues HISTOGRAM_UNROLL independent loads before it counts any value: more bytes in flight
    // per thread hides the memory latency with fewer warps.
    // BEGIN EXERCISE: grid-stride over the uint4 vectors (when vectorize): HISTOGRAM_UNROLL loads in
    //   flight before counting their words with count_word(mine, ..., T()); the vectors left over one
    //   by one; then the tail past the last whole vector element by element (count_one); finally
    //   __syncthreads()
    // HINT: reading 16-byte vectors and issuing HISTOGRAM_UNROLL of them before counting any keeps several
    //   loads in flight per thread (latency hiding); what does not fill a vector, or a full unrolled
    //   group, is handled by simpler loops.
    // HINT: per_vector = 16 / sizeof(T); vectors = n / per_vector when vectorize, else 0; 64-bit first and
    //   grid stride; an unrolled main loop (load array, then count_word on .x .y .z .w), a one-vector
    //   loop, a scalar tail loop, then a barrier before the merge.
    // HINT: the main loop's condition: `v + (HISTOGRAM_UNROLL - 1) * grid < vectors` (the last of the group
    //   must be in range).
    const long long per_vector = 16 / sizeof(T);
    const long long vectors = vectorize ? n / per_vector : 0;
    const uint4* x4 = reinterpret_cast<const uint4*>(x);
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long grid = (long long)gridDim.x * blockDim.x;
    long long v = first;
    for (; v + (HISTOGRAM_UNROLL - 1) * grid < vectors; v += HISTOGRAM_UNROLL * grid) {
        uint4 q[HISTOGRAM_UNROLL];
#pragma unroll
        for (int u = 0; u < HISTOGRAM_UNROLL; ++u) {
            q[u] = x4[v + u * grid];  // each load instruction: a warp reads 512 contiguous bytes
        }
#pragma unroll
        for (int u = 0; u < HISTOGRAM_UNROLL; ++u) {
            count_word(mine, q[u].x, ubins, stride, T());
            count_word(mine, q[u].y, ubins, stride, T());
            count_word(mine, q[u].z, ubins, stride, T());
            count_word(mine, q[u].w, ubins, stride, T());
        }
    }
    for (; v < vectors; v += grid) {  // fewer than HISTOGRAM_UNROLL vectors left for this thread
        const uint4 q = x4[v];
        count_word(mine, q.x, ubins, stride, T());
        count_word(mine, q.y, ubins, stride, T());
        count_word(mine, q.z, ubins, stride, T());
        count_word(mine, q.w, ubins, stride, T());
    }
    for (long long i = vectors * per_vector + first; i < n; i += grid) {  // the tail, one by one
        count_one(mine, (unsigned)x[i], ubins, stride);
    }
    __syncthreads();
    // END EXERCISE

    // Merge the copies, one global atomic per nonzero bin per block. Per lane, thread b reads
    // copy (k + b) % copies at step k: neighbouring threads read neighbouring banks.
    // BEGIN EXERCISE: the merge: for each bin b of this thread (striding by blockDim.x), the total over
    //   the copies (start at copy b % copies: neighbouring threads, neighbouring banks), one global
    //   atomicAdd when it is nonzero
    // HINT: each bin's total is the sum over the copies; starting each thread's walk at copy b % copies
    //   makes neighbouring threads read neighbouring banks in the per-warp layout too.
    // HINT: block-stride loop over bins; inner loop over k < copies with c = (k + b) % copies, reading the
    //   counter with the layout PER_LANE selects; one atomicAdd if the total is nonzero.
    // HINT: the two layouts: `PER_LANE ? sub_counts[b * copies + c] : sub_counts[c * bins + b]`.
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
        int total = 0;
        for (int k = 0; k < copies; ++k) {
            const int c = (k + b) % copies;
            total += PER_LANE ? sub_counts[b * copies + c] : sub_counts[c * bins + b];
        }
        if (total != 0) {
            atomicAdd(counts + b, total);
        }
    }
    // END EXERCISE
}

extern "C" __global__ void histogram_per_warp_u8(const unsigned char* x, int* counts, long long n, int bins,
                                                 int copies, int vectorize)
{
    histogram_private<unsigned char, false>(x, counts, n, bins, copies, vectorize);
}

extern "C" __global__ void histogram_per_warp_i32(const int* x, int* counts, long long n, int bins,
                                                  int copies, int vectorize)
{
    histogram_private<int, false>(x, counts, n, bins, copies, vectorize);
}

extern "C" __global__ void histogram_per_lane_u8(const unsigned char* x, int* counts, long long n, int bins,
                                                 int copies, int vectorize)
{
    histogram_private<unsigned char, true>(x, counts, n, bins, copies, vectorize);
}

extern "C" __global__ void histogram_per_lane_i32(const int* x, int* counts, long long n, int bins,
                                                  int copies, int vectorize)
{
    histogram_private<int, true>(x, counts, n, bins, copies, vectorize);
}
