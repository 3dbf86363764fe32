// RMSNorm, forward and backward, in CUDA C++: the kernels of week5_integration/cuda_extension.py.
//
//   y = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps)           (over the last dimension, N)
//   dx = rstd * (g - xhat * mean(g * xhat)),  g = dy * w, xhat = x * rstd
//   dw = sum over rows of dy * xhat                                (two stages: partials, then a sum)
//
// This file includes no torch header. It compiles on its own (`nvcc -cubin -arch=sm_90`, which the
// course's tests run for sm_75 and sm_90), and cuda_extension.py hands it to
// torch.utils.cpp_extension.load_inline with a small C++ binding that checks the tensors and calls
// the launchers at the bottom through raw pointers.
//
// The file holds two versions of the same op:
// * a plain C++ one (first half), loops on the CPU: g++ compiles it for the CPU build of the
//   extension, where __CUDACC__ is undefined and the CUDA half is skipped. It mirrors the GPU
//   version's structure (rows spread over P "programs", one dW partial per program), so the two
//   can be read side by side, and it is what the tests check on a machine without a GPU;
// * the CUDA kernels (second half), compiled by nvcc.

#include <cmath>
#include <cstdint>

// ---------------------------------------------------------------------------- plain C++ (CPU)
// T is float or double; sums are accumulated in T (float for float, as the CUDA kernels do).
template <typename T>
void rmsnorm_forward_cpu(const T* x, const T* w, T* y, T* rstd, int64_t M, int64_t N, double eps) {
    // BEGIN EXERCISE: for each row r: sum_sq of x over the row (in T), inv = 1 / sqrt(sum_sq / N + eps),
    //   rstd[r] = inv, y[r * N + c] = x * inv * w[c].
    // HINT: The CPU reference is the formula written as two loops per row: the sum of squares, then the
    //   scaled output; it is the ground truth the CUDA kernels are checked against.
    // HINT: for r in rows: pointer to the row, accumulate x*x in T, inv = 1 / sqrt(mean + eps), store
    //   rstd[r], then a second loop writing y = x * inv * w[c].
    // HINT: `const T inv = T(1) / std::sqrt(sum_sq / T(N) + T(eps));`
    for (int64_t r = 0; r < M; ++r) {
        const T* xr = x + r * N;
        T sum_sq = 0;
        for (int64_t c = 0; c < N; ++c) sum_sq += xr[c] * xr[c];
        const T inv = T(1) / std::sqrt(sum_sq / T(N) + T(eps));
        rstd[r] = inv;
        for (int64_t c = 0; c < N; ++c) y[r * N + c] = xr[c] * inv * w[c];
    }
    // END EXERCISE
}

// Row r is handled by "program" r % P; each program adds its rows' dy * xhat into its own row
// of dw_partial (P x N), so no two programs ever write the same element: the CUDA grid below does
// exactly this with P thread blocks running at once.
template <typename T>
void rmsnorm_backward_cpu(const T* dy, const T* x, const T* w, const T* rstd, T* dx, T* dw_partial,
                          int64_t M, int64_t N, int64_t P) {
    // BEGIN EXERCISE: zero dw_partial (P x N); for each row r (program r % P): inv = rstd[r], mean =
    //   sum_c(dy * w * x * inv) / N, dx = inv * (dy * w - xhat * mean), and add dy * xhat into row r % P of
    //   dw_partial.
    // HINT: Mirror the GPU's decomposition on the CPU: row r belongs to 'program' r % P, which adds its
    //   rows' dw contributions into its own partial row; dx needs the row's mean of g * xhat first.
    // HINT: Zero all of dw_partial; for each row: inv = rstd[r], a first loop summing dy * w * x * inv,
    //   mean = that / N; a second loop writing dx and adding dy * xhat into row r % P of the partials.
    // HINT: `dx[r * N + c] = inv * (dyr[c] * w[c] - xhat * mean);`
    for (int64_t i = 0; i < P * N; ++i) dw_partial[i] = 0;
    for (int64_t r = 0; r < M; ++r) {
        const T* xr = x + r * N;
        const T* dyr = dy + r * N;
        T* acc = dw_partial + (r % P) * N;
        const T inv = rstd[r];
        T dot = 0;  // sum of g * xhat over the row
        for (int64_t c = 0; c < N; ++c) dot += dyr[c] * w[c] * (xr[c] * inv);
        const T mean = dot / T(N);
        for (int64_t c = 0; c < N; ++c) {
            const T xhat = xr[c] * inv;
            dx[r * N + c] = inv * (dyr[c] * w[c] - xhat * mean);
            acc[c] += dyr[c] * xhat;
        }
    }
    // END EXERCISE
}

// ---------------------------------------------------------------------------------- CUDA (GPU)
#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace rmsnorm_ext {

// Storage types in, fp32 arithmetic inside: 16-bit inputs are widened once per element.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// Sum of one float per thread over the whole block, returned to every thread. Inside a warp the
// 32 lanes add through register shuffles (no shared memory, no __syncthreads); one partial per warp
// then goes through shared memory and warp 0 adds those. blockDim.x must be a multiple of 32.
__device__ float block_sum(float v) {
    // BEGIN EXERCISE: add v across the warp with __shfl_xor_sync (offsets 16, 8, 4, 2, 1), one partial per
    //   warp into a __shared__ float[32], __syncthreads, warp 0 adds the partials, broadcast the total
    //   through shared memory to every thread (and __syncthreads before returning: the next call reuses
    //   it).
    // HINT: A block-wide sum in two levels: inside a warp, lanes exchange registers with shuffles (no
    //   shared memory, no barrier); then one value per warp goes through shared memory and warp 0 adds
    //   those.
    // HINT: A __shared__ float[32]; butterfly loop `for offset = 16; offset > 0; offset /= 2` with
    //   __shfl_xor_sync; lane 0 stores its warp's sum; __syncthreads; warp 0 loads (0 past the warp count),
    //   shuffles again, lane 0 stores the total; __syncthreads; everyone reads it; __syncthreads again.
    // HINT: The last `__syncthreads()` matters: the next call overwrites warp_sums, and a fast thread must
    //   not do so before a slow one has read the total.
    __shared__ float warp_sums[32];
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < static_cast<int>(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (lane == 0) warp_sums[0] = v;
    }
    __syncthreads();
    v = warp_sums[0];
    __syncthreads();  // nobody may overwrite warp_sums (next call) before everyone has read it
    // END EXERCISE
    return v;
}

// One block per row. Thread t reads columns t, t + blockDim.x, ...: consecutive threads read
// consecutive addresses, so each warp's loads coalesce into full 128-byte transactions. The row is
// read twice (sum of squares, then the output); the second read mostly hits L1/L2.
template <typename T>
__global__ void rmsnorm_fwd_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                   float* __restrict__ rstd, int64_t N, float eps) {
    // BEGIN EXERCISE: one block per row (blockIdx.x); each thread strides over the columns by blockDim.x
    //   (coalesced); sum of squares in fp32 -> block_sum -> inv = rsqrtf(sum / N + eps); thread 0 writes
    //   rstd[row]; every thread writes its y elements (from_float<T>).
    // HINT: One thread block per row; its threads stride across the columns so consecutive threads read
    //   consecutive elements (coalesced); the two loops read the row twice, the second mostly from cache.
    // HINT: row = blockIdx.x; loop c = threadIdx.x; c < N; c += blockDim.x summing squares in fp32
    //   (to_float); block_sum; inv = rsqrtf(sum / N + eps); thread 0 writes rstd; a second strided loop
    //   writes y via from_float<T>.
    // HINT: `const float inv = rsqrtf(block_sum(sum_sq) / static_cast<float>(N) + eps);`
    const int64_t row = blockIdx.x;
    const T* xr = x + row * N;
    float sum_sq = 0.0f;
    for (int64_t c = threadIdx.x; c < N; c += blockDim.x) {
        const float v = to_float(xr[c]);
        sum_sq += v * v;
    }
    const float inv = rsqrtf(block_sum(sum_sq) / static_cast<float>(N) + eps);
    if (threadIdx.x == 0) rstd[row] = inv;
    for (int64_t c = threadIdx.x; c < N; c += blockDim.x)
        y[row * N + c] = from_float<T>(to_float(xr[c]) * inv * to_float(w[c]));
    // END EXERCISE
}

// A fixed grid of P blocks; block b handles rows b, b + P, ... and accumulates dy * xhat for its
// columns in shared memory (N floats: thread t owns columns t, t + blockDim.x, ..., so no two
// threads touch the same element and no atomics are needed). At the end each block writes its
// partial row of dW; the binding sums the P rows (stage two). P ~ 2 blocks per SM keeps every SM
// busy while P x N stays small.
template <typename T>
__global__ void rmsnorm_bwd_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                                   const float* __restrict__ rstd, T* __restrict__ dx,
                                   float* __restrict__ dw_partial, int64_t M, int64_t N) {
    // BEGIN EXERCISE: extern __shared__ float dw_acc[] (N floats, zeroed by each thread for its own
    //   columns); loop rows blockIdx.x, blockIdx.x + gridDim.x, ...: mean = block_sum(sum of dy * w * xhat)
    //   / N, dx = inv * (dy * w - xhat * mean), dw_acc[c] += dy * xhat; finally write dw_acc into row
    //   blockIdx.x of dw_partial.
    // HINT: Each block takes rows blockIdx.x, + gridDim.x, ... and accumulates its dw share in dynamic
    //   shared memory; each thread only ever touches its own columns, so the zeroing and the adds need no
    //   barrier.
    // HINT: extern __shared__ float dw_acc[] zeroed by the strided column loop; grid-stride loop over rows:
    //   strided dot of dy * w * xhat, block_sum / N for the mean, a strided loop writing dx and adding dy *
    //   xhat to dw_acc[c]; finally copy dw_acc into row blockIdx.x of dw_partial.
    // HINT: `for (int64_t row = blockIdx.x; row < M; row += gridDim.x)`: the grid has P blocks, fewer than
    //   the rows.
    extern __shared__ float dw_acc[];
    for (int64_t c = threadIdx.x; c < N; c += blockDim.x) dw_acc[c] = 0.0f;
    for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
        const T* xr = x + row * N;
        const T* dyr = dy + row * N;
        const float inv = rstd[row];
        float dot = 0.0f;
        for (int64_t c = threadIdx.x; c < N; c += blockDim.x)
            dot += to_float(dyr[c]) * to_float(w[c]) * to_float(xr[c]) * inv;
        const float mean = block_sum(dot) / static_cast<float>(N);
        for (int64_t c = threadIdx.x; c < N; c += blockDim.x) {
            const float xhat = to_float(xr[c]) * inv;
            const float g = to_float(dyr[c]);
            dx[row * N + c] = from_float<T>(inv * (g * to_float(w[c]) - xhat * mean));
            dw_acc[c] += g * xhat;
        }
    }
    for (int64_t c = threadIdx.x; c < N; c += blockDim.x) dw_partial[blockIdx.x * N + c] = dw_acc[c];
    // END EXERCISE
}

// ~8 elements per thread, a power of two between one warp and 1024 threads.
inline int threads_for(int64_t N) {
    int threads = 32;
    while (threads < 1024 && threads * 8 < N) threads *= 2;
    return threads;
}

template <typename T>
int launch_forward(const void* x, const void* w, void* y, float* rstd, int64_t M, int64_t N, float eps,
                   cudaStream_t stream) {
    rmsnorm_fwd_kernel<T><<<static_cast<unsigned>(M), threads_for(N), 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), rstd, N, eps);
    return static_cast<int>(cudaGetLastError());
}

template <typename T>
int launch_backward(const void* dy, const void* x, const void* w, const float* rstd, void* dx,
                    float* dw_partial, int64_t M, int64_t N, int64_t programs, cudaStream_t stream) {
    const size_t smem = static_cast<size_t>(N) * sizeof(float);
    rmsnorm_bwd_kernel<T><<<static_cast<unsigned>(programs), threads_for(N), smem, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(w), rstd,
        static_cast<T*>(dx), dw_partial, M, N);
    return static_cast<int>(cudaGetLastError());
}

}  // namespace rmsnorm_ext

// The launchers the binding calls. dtype: 0 float32, 1 float16, 2 bfloat16. The stream arrives as
// void* so the binding needs no CUDA header. Returns a cudaError_t code (0: launched).
int rmsnorm_ext_forward_cuda(int dtype, const void* x, const void* w, void* y, float* rstd, int64_t M,
                             int64_t N, float eps, void* stream) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (dtype == 0) return rmsnorm_ext::launch_forward<float>(x, w, y, rstd, M, N, eps, s);
    if (dtype == 1) return rmsnorm_ext::launch_forward<__half>(x, w, y, rstd, M, N, eps, s);
    if (dtype == 2) return rmsnorm_ext::launch_forward<__nv_bfloat16>(x, w, y, rstd, M, N, eps, s);
    return static_cast<int>(cudaErrorInvalidValue);
}

int rmsnorm_ext_backward_cuda(int dtype, const void* dy, const void* x, const void* w, const float* rstd,
                              void* dx, float* dw_partial, int64_t M, int64_t N, int64_t programs,
                              void* stream) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (dtype == 0) return rmsnorm_ext::launch_backward<float>(dy, x, w, rstd, dx, dw_partial, M, N, programs, s);
    if (dtype == 1) return rmsnorm_ext::launch_backward<__half>(dy, x, w, rstd, dx, dw_partial, M, N, programs, s);
    if (dtype == 2)
        return rmsnorm_ext::launch_backward<__nv_bfloat16>(dy, x, w, rstd, dx, dw_partial, M, N, programs, s);
    return static_cast<int>(cudaErrorInvalidValue);
}

const char* rmsnorm_ext_error_string(int code) {
    return cudaGetErrorString(static_cast<cudaError_t>(code));
}
#endif  // __CUDACC__
