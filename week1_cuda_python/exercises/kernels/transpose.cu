// Exercise: the transposes that week1_cuda_python/exercises/transpose.py launches. Keep these
// names, signatures and #defines. out (cols x rows) = x.T for a row-major x (rows x cols).

#define TILE 32
#define BLOCK_ROWS 8
#ifndef TILE64_ROWS
#define TILE64_ROWS 8
#endif

extern "C" __global__ void transpose_padded_f32(const float* x, float* out, int rows, int cols)
{
    // TODO: __shared__ float tile[TILE][TILE + 1]; read with threadIdx.x along x's rows,
    // __syncthreads(), write with threadIdx.x along out's rows (reading a column of the tile).
}

extern "C" __global__ void transpose_padded_f64(const double* x, double* out, int rows, int cols)
{
    // TODO: as above for double.
}

extern "C" __global__ void transpose_tile64_f32(const float* x, float* out, int rows, int cols, int vectorize)
{
    // TODO: a 64x64 tile per block of 32 x TILE64_ROWS threads. On full tiles (and vectorize),
    // read each row as float2 pairs: lane tx gets columns 2tx and 2tx + 1. Where do you store
    // them in shared memory so that neither the stores nor the column reads conflict? (Hint:
    // two 64 x 33 half-tiles, one for even and one for odd columns.) Edge tiles element by element.
}

extern "C" __global__ void transpose_tile64_f64(const double* x, double* out, int rows, int cols, int vectorize)
{
    // TODO: as above for double (double2 pairs).
}
