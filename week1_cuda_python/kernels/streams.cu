// The kernel of the streams lesson (week1_cuda_python/streams.py): a vector add with an
// adjustable amount of arithmetic, so that the kernel's time can be set against the copies'.
//
//   v = a[i] + b[i]; then `iters` times v = v / 2 + b[i]  (v tends to 2 b[i]);  out[i] = v
//
// iters = 0 is a plain vector add (12 bytes, 1 FLOP per element: far quicker than the PCIe
// copies around it); each iteration adds one dependent FMA (2 FLOPs) per element.

extern "C" __global__ void busy_add_f32(const float* __restrict__ a,
                                        const float* __restrict__ b,
                                        float* __restrict__ out,
                                        long long n, int iters)
{
    // BEGIN EXERCISE: one thread per element (64-bit index, guarded): v = a[i] + b[i], then `iters` times
    //   v = fmaf(v, 0.5f, b[i]) (v * 0.5 is exact: one rounding per step, as the reference); out[i] = v
    // HINT: an artificially compute-heavy elementwise kernel (so copies and compute are comparable): each
    //   thread repeats a cheap update `iters` times, rounding exactly as the reference does.
    // HINT: 64-bit global index and a guard; load b[i] once into a register; v = a + b; a for loop of fmaf;
    //   one store.
    // HINT: `v = fmaf(v, 0.5f, y);`: halving is exact, so the single rounding of the fma matches the
    //   reference's v / 2 + y.
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float y = b[i];
        float v = a[i] + y;
        for (int t = 0; t < iters; ++t) {
            v = fmaf(v, 0.5f, y);  // v * 0.5 is exact, so this is v / 2 + y rounded once
        }
        out[i] = v;
    }
    // END EXERCISE
}
