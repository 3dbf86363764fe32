// Exercise: write the two kernels that week1_cuda_python/exercises/vector_add.py launches.
// They must keep these names and signatures (extern "C" stops C++ name mangling, so Python
// can find them by name). n is 64-bit: an int index wraps past 2^31 elements.

extern "C" __global__ void vector_add_f32(const float* __restrict__ a,
                                          const float* __restrict__ b,
                                          float* __restrict__ out,
                                          long long n)
{
    // TODO: one thread per element; guard i < n.
}

extern "C" __global__ void vector_add_f32x4(const float* __restrict__ a,
                                            const float* __restrict__ b,
                                            float* __restrict__ out,
                                            long long n)
{
    // TODO: one float4 (4 elements) per thread for the first n / 4 * 4 elements,
    // then the remaining n % 4 elements one by one.
}
