// The PTX the Hopper attention backward (attention_hopper_backward.cu) is built from: one instruction
// per wrapper. week1_cuda_python/kernels/matmul_wgmma.cu explains each of them (warpgroups, shared-memory
// descriptors, the 128-byte swizzle, tensor maps, mbarrier phases, setmaxnreg); this file adds only
//   * a 3-D TMA load (the tensors are [B*H, S, D]: a box that runs past S reads zeros, never the next head),
//   * wgmma with the A operand in registers (P^T and dS^T straight from the accumulators), and
//   * the register-fragment identity that makes that possible (ahb_pack_a below), and
//   * the TMA's bulk reduce-add of an fp32 tile from shared memory into global memory, with its bulk groups
//     (dQ's accumulation: the .cu's "dQ" paragraph).
// Compiled only where __CUDA_ARCH_FEAT_SM90_ALL is defined (sm_90a); elsewhere AHB_HOPPER is 0 and the
// kernels trap.
#pragma once
#include <cuda.h>  // CUtensorMap
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AHB_HOPPER 1
#else
#define AHB_HOPPER 0
#endif

__device__ __forceinline__ uint32_t ahb_smem(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#if AHB_HOPPER
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(ahb_smem(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(ahb_smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(ahb_smem(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity)
{
    uint32_t done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(ahb_smem(bar)), "r"(parity) : "memory");
    }
}
// The box of `map` starting at (x = column, y = row, z = head) into shared memory at `dst`; its bytes
// (all of them, zeros for the part outside the tensor) count towards `bar`'s transaction count.
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y, int z)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n"
                 :: "r"(ahb_smem(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(ahb_smem(bar))
                 : "memory");
}
// The fp32 tile at `src` (shared memory, laid out as the box of `map`: [64 rows][32 columns], 128-byte
// swizzled) ADDED into the box of `map` at (x = column, y = row, z = head) by the TMA: the reduce happens at
// L2, whole 128-byte lines at a time; rows outside the tensor (past S) are not written. Asynchronous: its
// completion is tracked by this thread's bulk groups (bulk_commit, bulk_wait_read, bulk_wait below), and it
// reads `src` through the async proxy, so the generic-proxy stores that filled `src` must be fenced first.
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap* map, const void* src, int x, int y, int z)
{
    asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n"
                 :: "l"(reinterpret_cast<uint64_t>(map)), "r"(ahb_smem(src)), "r"(x), "r"(y), "r"(z) : "memory");
}
// Closes this thread's bulk operations issued since the last commit into one bulk group.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's bulk groups still READ their shared-memory source (their global
// writes may still be under way): from then on the source may be overwritten.
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory"); }
// Waits until at most N of this thread's bulk groups are incomplete (reads and writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(N) : "memory"); }
// 128-byte swizzle descriptor (matmul_wgmma.cu: bits 0-13 address >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4,
// 62-63 swizzle mode 1 = 128 bytes).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16
         | static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32 | 1ull << 62;
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(REGS)); }
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(REGS)); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
// Ordinary stores to shared memory (dS; the dQ tile) must be made visible to the async proxy that wgmma (and
// the TMA reduce) read through.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Two fp32 values to shared memory at `addr` (8-byte aligned).
__device__ __forceinline__ void st_shared_f2(uint32_t addr, float x, float y)
{
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" :: "r"(addr), "f"(x), "f"(y) : "memory");
}
// A barrier for the 128 threads of one consumer warpgroup (ids 1, 2; 0 is __syncthreads').
__device__ __forceinline__ void warpgroup_sync(int id) { asm volatile("bar.sync %0, 128;\n" :: "r"(id) : "memory"); }
// Keeps the compiler from moving reads of an accumulator above the wgmma.wait_group that completes it.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
// The same for A fragments in registers: they must live (unchanged) until the wgmma reading them is done.
__device__ __forceinline__ void fence_a(uint32_t (&a)[4][4])
{
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(a[i][r]) :: "memory");
}
// 2^x, the SFU's approximation (relative error ~2^-22; 2^-inf = +0): what the exponentials of a
// softmax use on the GPU.
__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// ---- wgmma (generated: the operand lists are long; see the header comment of the .cu) -------------
#define AHB_D8(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), \
                  "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
// d (64 x 64) = (accumulate ? d : 0) + A (64 x 16, smem, K-major) @ B (16 x 64, smem; TRANS_B: 0 K-major, 1 MN-major).
template <int TRANS_B>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate, __half)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16\n"
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},\n"
                 " %32, %33, p, 1, 1, 0, %35;\n}\n"
                 : AHB_D8(0), AHB_D8(8), AHB_D8(16), AHB_D8(24)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
}

// d (64 x 64) += A (64 x 16, registers: 4 x 32 bits = 8 values) @ B (16 x 64, smem, MN-major).
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, __half)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16\n"
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},\n"
                 " {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : AHB_D8(0), AHB_D8(8), AHB_D8(16), AHB_D8(24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// d (64 x 128) += A (64 x 16, registers: 4 x 32 bits = 8 values) @ B (16 x 128, smem, MN-major).
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, __half)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16\n"
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},\n"
                 " {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : AHB_D8(0), AHB_D8(8), AHB_D8(16), AHB_D8(24), AHB_D8(32), AHB_D8(40), AHB_D8(48), AHB_D8(56)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// d (64 x 64) = (accumulate ? d : 0) + A (64 x 16, smem, K-major) @ B (16 x 64, smem; TRANS_B: 0 K-major, 1 MN-major).
template <int TRANS_B>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate, __nv_bfloat16)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16\n"
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},\n"
                 " %32, %33, p, 1, 1, 0, %35;\n}\n"
                 : AHB_D8(0), AHB_D8(8), AHB_D8(16), AHB_D8(24)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
}

// d (64 x 64) += A (64 x 16, registers: 4 x 32 bits = 8 values) @ B (16 x 64, smem, MN-major).
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, __nv_bfloat16)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16\n"
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},\n"
                 " {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : AHB_D8(0), AHB_D8(8), AHB_D8(16), AHB_D8(24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// d (64 x 128) += A (64 x 16, registers: 4 x 32 bits = 8 values) @ B (16 x 128, smem, MN-major).
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, __nv_bfloat16)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16\n"
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},\n"
                 " {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : AHB_D8(0), AHB_D8(8), AHB_D8(16), AHB_D8(24), AHB_D8(32), AHB_D8(40), AHB_D8(48), AHB_D8(56)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

#endif  // AHB_HOPPER

// Two fp32 values as one 32-bit pair of the 16-bit type (the low half is the first).
__device__ __forceinline__ uint32_t ahb_pack(float v0, float v1, __half)
{
    __half2 h = __floats2half2_rn(v0, v1);
    return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t ahb_pack(float v0, float v1, __nv_bfloat16)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
    return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ float2 ahb_unpack(uint32_t bits, __half)
{
    return __half22float2(*reinterpret_cast<__half2*>(&bits));
}
__device__ __forceinline__ float2 ahb_unpack(uint32_t bits, __nv_bfloat16)
{
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&bits));
}

// The register-fragment identity. A 64 x N fp32 accumulator of a warpgroup gives thread (warp w, lane l)
// rows 16w + l/4 + {0, 8} and, in every 8-column block j, columns 8j + 2(l%4) + {0, 1}: d[4j + 2h + e] is
// (row 16w + l/4 + 8h, column 8j + 2(l%4) + e). wgmma's A operand in registers (16-bit types, a 64 x 16
// k slice) uses the same places: a[0] = rows +0, columns 2(l%4) + {0,1}; a[1] = rows +8, same columns;
// a[2], a[3] = the same 8 columns further (PTX ISA, "Register Fragments", wgmma .f16 matrix A). So k slice
// kk (columns 16kk .. 16kk+15) of an accumulator IS the A fragment of d[8kk .. 8kk+7], packed in pairs:
// P^T and dS^T feed dV += P^T dO and dK += dS^T Q without a trip through shared memory.
template <typename T, int N>
__device__ __forceinline__ void ahb_pack_a(const float (&d)[N], int kk, uint32_t (&a)[4])
{
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = ahb_pack(d[8 * kk + 2 * r], d[8 * kk + 2 * r + 1], T());
}
