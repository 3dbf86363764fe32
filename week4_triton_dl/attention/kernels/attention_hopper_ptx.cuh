// The Hopper instructions the attention forward (attention_hopper_forward.cu) is built from, one
// PTX instruction per wrapper. week1_cuda_python/kernels/matmul_wgmma.cu's header explains the
// machinery (warpgroups, shared-memory descriptors, the 128-byte swizzle, tensor maps, mbarrier
// phases, setmaxnreg); this file adds what attention needs beyond the GEMM:
// * 3-D TMA loads: q, k, v are [B*H, S, D]; a box that runs past S inside one head must read
//   zeros, not the next head's rows (a NaN there would leak through 0 * NaN), so the tensor map
//   has S as its own dimension and the TMA clips each head separately;
// * named barriers with a count (bar.sync / bar.arrive): the ping-pong between the two consumer
//   warpgroups;
// * wgmma with A from registers (the "RS" form): P = softmax(S) never goes to shared memory;
// * ex2 / lg2: the exponential in base 2 (MUFU.EX2), log2(e) folded into the score scale.
// Everything here exists only on sm_90a: AH_HOPPER is 0 for every other target and the kernel
// body is then a trap (the launcher refuses other GPUs first).
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AH_HOPPER 1
#else
#define AH_HOPPER 0
#endif

__device__ __forceinline__ uint32_t ah_smem(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#if AH_HOPPER
// ---- mbarriers (matmul_wgmma.cu: "mbarrier and phases") ------------------------------------------
__device__ __forceinline__ void ah_mbar_init(uint64_t* bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(ah_smem(bar)), "r"(count) : "memory");
}
// Arrive once and add `bytes` to what this phase waits for (the producer, before its copies).
__device__ __forceinline__ void ah_mbar_expect_tx(uint64_t* bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(ah_smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void ah_mbar_arrive(uint64_t* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(ah_smem(bar)) : "memory");
}
// Until the phase of this parity has completed (try_wait suspends a while in hardware first).
__device__ __forceinline__ void ah_mbar_wait(uint64_t* bar, uint32_t parity)
{
    uint32_t done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(ah_smem(bar)), "r"(parity) : "memory");
    }
}

// ---- the TMA: one 3-D box (x = column of D, y = row of S, z = batch * head) into shared memory --
// The box's bytes count towards `bar`'s transaction count; elements outside the tensor (rows
// >= S of this head) arrive as zeros and still count: every box delivers all its bytes.
__device__ __forceinline__ void ah_tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y, int z)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n"
                 :: "r"(ah_smem(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(ah_smem(bar))
                 : "memory");
}

// ---- named barriers: `count` threads (a multiple of 32) meet at barrier `id` (0 is __syncthreads') --
// bar.sync waits until `count` threads have arrived (itself included); bar.arrive counts this
// thread in and goes on at once. One warpgroup syncing (128) while the other arrives (128) is a
// one-way signal "your turn": the ping-pong of the kernel.
__device__ __forceinline__ void ah_bar_sync(uint32_t id, uint32_t count)
{
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void ah_bar_arrive(uint32_t id, uint32_t count)
{
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}

// ---- registers per warpgroup ------------------------------------------------------------------------
template <int REGS>
__device__ __forceinline__ void ah_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(REGS)); }
template <int REGS>
__device__ __forceinline__ void ah_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(REGS)); }

// ---- wgmma ---------------------------------------------------------------------------------------------
// Shared-memory descriptor, 128-byte swizzle (matmul_wgmma.cu: start >> 4 in bits 0-13, LBO >> 4 in
// 16-29, SBO >> 4 in 32-45, mode 1 = 128-byte swizzle in bits 62-63).
__device__ __forceinline__ uint64_t ah_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16
         | static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32 | 1ull << 62;
}
__device__ __forceinline__ void ah_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void ah_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void ah_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
// Pins accumulator registers after a wait: the compiler sees no data dependence between the wait
// and the registers the wgmma writes, so without this it could move a read of them above the wait.
template <int N>
__device__ __forceinline__ void ah_fence_regs(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i]) :: "memory");
}

#define AH_D4(d, i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define AH_D16(d, i) AH_D4(d, i), AH_D4(d, (i) + 4), AH_D4(d, (i) + 8), AH_D4(d, (i) + 12)
#define AH_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n" \
                  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define AH_REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n" \
                  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n" \
                  " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n" \
                  " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// S (64 x 128 fp32, 64 registers a thread) = (accumulate ? S : 0) + A (64 x 16) @ B (16 x 128), both
// from shared memory, both K-major (the head dimension contiguous: Q's rows and K's rows as stored),
// so both transpose flags are 0. Operands: %0-%63 S, %64 A's descriptor, %65 B's, %66 accumulate.
#define AH_SS_N128(TYPE)                                                                               \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                          \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE "\n" AH_REGS64 ",\n"     \
                 " %64, %65, p, 1, 1, 0, 0;\n}\n"                                                      \
                 : AH_D16(d, 0), AH_D16(d, 16), AH_D16(d, 32), AH_D16(d, 48)                           \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate))
template <typename T>
__device__ __forceinline__ void ah_mma_ss_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate);
template <>
__device__ __forceinline__ void ah_mma_ss_n128<__half>(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate)
{
    AH_SS_N128("f16");
}
template <>
__device__ __forceinline__ void ah_mma_ss_n128<__nv_bfloat16>(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                              int accumulate)
{
    AH_SS_N128("bf16");
}

// O (64 x N fp32, N/2 registers) += A (64 x 16, four 32-bit registers a thread: P in the input type)
// @ B (16 x N, shared memory). B is V's tile as stored: keys (this GEMM's k) in rows, the head
// dimension (N) contiguous: "MN-major", transpose flag 1 (the last immediate). A from registers has
// no transpose flag. Operands: the accumulators, then a[0..3], B's descriptor.
// The operand numbers after the accumulators differ with N: A's registers and B's descriptor are
// %32-%36 at N = 64 and %64-%68 at N = 128; the last "r"(1) sets the scale-d predicate (accumulate).
#define AH_RS_TAIL32 " {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
#define AH_RS_TAIL64 " {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
#define AH_RS(N, REGS, PRED, TAIL, TYPE, ...)                                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " PRED ", 0;\n"                                    \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE "\n" REGS ",\n" TAIL   \
                 : __VA_ARGS__                                                                         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))

template <typename T, int N>
__device__ __forceinline__ void ah_mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b);
template <>
__device__ __forceinline__ void ah_mma_rs<__half, 64>(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b)
{
    AH_RS(64, AH_REGS32, "%37", AH_RS_TAIL32, "f16", AH_D16(d, 0), AH_D16(d, 16));
}
template <>
__device__ __forceinline__ void ah_mma_rs<__nv_bfloat16, 64>(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b)
{
    AH_RS(64, AH_REGS32, "%37", AH_RS_TAIL32, "bf16", AH_D16(d, 0), AH_D16(d, 16));
}
template <>
__device__ __forceinline__ void ah_mma_rs<__half, 128>(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b)
{
    AH_RS(128, AH_REGS64, "%69", AH_RS_TAIL64, "f16", AH_D16(d, 0), AH_D16(d, 16), AH_D16(d, 32), AH_D16(d, 48));
}
template <>
__device__ __forceinline__ void ah_mma_rs<__nv_bfloat16, 128>(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b)
{
    AH_RS(128, AH_REGS64, "%69", AH_RS_TAIL64, "bf16", AH_D16(d, 0), AH_D16(d, 16), AH_D16(d, 32), AH_D16(d, 48));
}

// ---- arithmetic ---------------------------------------------------------------------------------------
// 2^x and log2(x) on the special-function unit (MUFU.EX2 / MUFU.LG2): ex2(-inf) = 0, NaN stays NaN.
__device__ __forceinline__ float ah_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float ah_log2(float x)
{
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
// Two fp32 values as one 32-bit register of the input type, the first in the low half: the
// layout of a wgmma A fragment's pair of neighbouring columns.
__device__ __forceinline__ uint32_t ah_pack(float lo, float hi, __half)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t ah_pack(float lo, float hi, __nv_bfloat16)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}
#endif  // AH_HOPPER
