// Vector add in CUDA C: out[i] = a[i] + b[i], launched from Python by week1_cuda_python/vector_add.py.
//
// Cost model: two 4-byte reads and one 4-byte write per element, one FLOP. At 1/12 FLOP per
// byte no GPU is compute-bound here: the only question is how close we get to the memory's
// copy bandwidth.
//
// Element counts are 64-bit: 2^31 floats is only 8 GiB, and an int index would wrap.

extern "C" __global__ void vector_add_f32(const float* __restrict__ a,
                                          const float* __restrict__ b,
                                          float* __restrict__ out,
                                          long long n)
{
    // Thread i of the grid owns element i. Neighbouring threads of a warp read neighbouring
    // floats, so the warp's 32 loads coalesce into 128 contiguous bytes.
    // BEGIN EXERCISE: one thread per element: i = blockIdx.x * blockDim.x + threadIdx.x as a long long
    //   (an int wraps past 2^31 elements); guard i < n
    // HINT: thread i of the whole grid owns element i; the index must be computed in 64 bits because
    //   blockIdx.x * blockDim.x is an unsigned int product that wraps past 2^32 (and an int index past
    //   2^31).
    // HINT: two statements: the global index (cast one factor to long long before multiplying), then a
    //   guarded add-and-store for the partial last block.
    // HINT: `long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;`
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {  // the last block hangs past the end whenever n is not a multiple of it
        out[i] = a[i] + b[i];
    }
    // END EXERCISE
}

extern "C" __global__ void vector_add_f32x4(const float* __restrict__ a,
                                            const float* __restrict__ b,
                                            float* __restrict__ out,
                                            long long n)
{
    // Each thread moves 16 bytes per access (one float4) instead of 4: a quarter of the load
    // and store instructions for the same bytes, so more bytes are in flight per warp.
    // The launcher guarantees 16-byte aligned pointers, which float4 accesses require.
    // BEGIN EXERCISE: one float4 (4 elements) per thread for the first n / 4 * 4 elements
    //   (reinterpret_cast<const float4*>), then the remaining n % 4 elements one by one (the first
    //   threads take them)
    // HINT: view the arrays as float4 for the whole groups of 4 (one 16-byte access per thread, still
    //   coalesced), and treat the n % 4 leftovers as a separate scalar tail.
    // HINT: the same global index i twice: once as a float4 index guarded by i < n/4 (reinterpret_cast the
    //   three pointers), once as an offset into the tail starting at 4*(n/4), guarded by < n.
    // HINT: the tail element of thread i is `4 * n4 + i`: only threads 0..2 ever pass its guard.
    long long n4 = n / 4;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 x = reinterpret_cast<const float4*>(a)[i];
        float4 y = reinterpret_cast<const float4*>(b)[i];
        reinterpret_cast<float4*>(out)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    // The last n % 4 elements do not fill a float4: the first threads take them one by one.
    long long tail = 4 * n4 + i;
    if (tail < n) {
        out[tail] = a[tail] + b[tail];
    }
    // END EXERCISE
}
