// The Hopper (sm_90a) instructions the course's kernels are built from, each as a C++ function around
// one PTX instruction (or two that only make sense together). Included by week 1's wgmma GEMMs
// (matmul_wgmma.cu, matmul_wgmma_persistent.cu and the files that include it) and week 4's Hopper
// attention (attention_hopper_forward.cu, attention_hopper_backward.cu): one copy, so a fix or a
// comment lands in every kernel at once.
//
// matmul_wgmma.cu's header teaches the machinery these wrap (warpgroups, shared-memory descriptors,
// the 128-byte swizzle, tensor maps, mbarrier phases, setmaxnreg); the comments here say what each
// instruction does and why a kernel needs it. Every nvcc command of those kernels names this folder
// with -I (matmul_tensor_cores.py, HOPPER_PTX_INCLUDE; the load_inline builds, extra_include_paths), so a
// kernel and its exercise stub (under exercises/) both find it as "hopper_ptx.cuh".
//
// Build: the instructions exist only on sm_90a (-gencode=arch=compute_90a,code=sm_90a). HOPPER_SM90A
// is 1 in that device pass and 0 everywhere else (host code, sm_75 .. sm_90): the wrappers are then
// not declared, and a kernel that includes this file must trap in that case (each one does).
#pragma once

#include <cuda.h>  // CUtensorMap (the 128-byte, 128-byte-aligned tensor map type)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <type_traits>  // std::is_same: which wgmma type string a template names

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HOPPER_SM90A 1  // compiling device code for sm_90a: wgmma, setmaxnreg and the TMA exist
#else
#define HOPPER_SM90A 0
#endif

// A generic pointer into shared memory as the 32-bit shared-window address PTX's shared::cta operands take.
__device__ __forceinline__ uint32_t smem_addr(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Two fp32 values as one 32-bit register of the 16-bit type, the first in the low half: a pair of C's
// neighbouring columns for one 4-byte store, and the layout of a wgmma A fragment's register (below).
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __half)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __nv_bfloat16)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}

#if HOPPER_SM90A
// ---- mbarriers (matmul_wgmma.cu: "mbarrier and phases") -------------------------------------------------
// A 64-bit counter in shared memory whose phase completes when `count` arrivals and the expected
// transaction bytes have come; waiters ask for the parity of the phase they need.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_addr(bar)), "r"(count) : "memory");
}
// The initialised barriers made visible to the copy engine (the "async proxy") and to the cluster, not only
// to this block's threads: once, by the initialising thread, before the first TMA names them.
__device__ __forceinline__ void fence_mbarrier_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrive, and add `bytes` to the transaction count this phase waits for (the producer, before its copies).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_addr(bar)) : "memory");
}
// Spin until the phase with this parity has completed. try_wait itself waits a while in hardware
// before it says no, so this loop is not a hot spin.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity)
{
    uint32_t done = 0;
    while (!done) {
        asm volatile("{\n"
                     ".reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n"
                     "}\n"
                     : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
    }
}

// ---- clusters (matmul_wgmma_persistent.cu: "clusters") ------------------------------------------------
// This block's rank within its cluster.
__device__ __forceinline__ uint32_t cluster_rank()
{
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}
// All threads of every block of the cluster: what one block initialised (or is still doing to another's
// shared memory) is done and visible before anyone goes past. Not .aligned: the threads may arrive from
// different places of the code.
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// Arrive on the mbarrier at the same offset in block `rank`'s shared memory (mapa: that address in the
// cluster's shared window).
__device__ __forceinline__ void mbar_arrive_remote(uint64_t* bar, uint32_t rank)
{
    asm volatile("{\n.reg .b32 remote;\n"
                 "mapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(smem_addr(bar)), "r"(rank) : "memory");
}

// ---- the TMA: tensor copies global <-> shared memory from one thread's instruction --------------------
// One box of `map` whose first element is at (x = column, y = row) of the tensor, into shared memory at
// `dst`; its bytes count towards `bar`'s transaction count. Elements outside the tensor arrive as zeros
// and still count: every box delivers all its bytes.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y),
                    "r"(smem_addr(bar))
                 : "memory");
}
// The same box written into every block of the cluster named in `mask`, at `dst`'s offset, each block's
// `bar` (same offset) counting the bytes: one read from L2 for several blocks.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y,
                                                      uint16_t mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar)),
                    "h"(mask)
                 : "memory");
}
// A 3-D box (x = column, y = row, z = batch * head). Attention's q, k, v are [B*H, S, D]: with S as its own
// dimension the TMA clips each head separately, so a box that runs past S reads zeros, not the next head's
// rows (a NaN there would leak through 0 * NaN).
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y, int z)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n"
                 :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z),
                    "r"(smem_addr(bar))
                 : "memory");
}
// A plain 1-D bulk copy (no tensor map): `bytes` contiguous bytes from global memory at `src` into shared memory
// at `dst` (both 16-byte aligned, bytes a multiple of 16), counting towards `bar`'s transaction count. Attention
// copies zeros this way over a staged V tile's padding rows: the copy engine writes them, as it wrote the tile.
__device__ __forceinline__ void bulk_load_1d(void* dst, const void* src, uint32_t bytes, uint64_t* bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}
// The box of `map` whose first element is (x = column, y = row), from shared memory at `src`; elements
// outside the tensor are not written. It joins this thread's open bulk group (bulk_commit below).
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int x, int y)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 :: "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(src)) : "memory");
}
// The fp32 tile at `src` (laid out as the box of `map`) ADDED into the box at (x, y, z) by the TMA: the
// reduce happens at L2, whole 128-byte lines at a time; rows outside the tensor are not written. Like a
// store, it joins this thread's open bulk group and reads `src` through the async proxy.
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap* map, const void* src, int x, int y, int z)
{
    asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n"
                 :: "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(src)), "r"(x), "r"(y), "r"(z) : "memory");
}
// Close this thread's bulk operations issued since the last commit into one bulk group (possibly empty: a
// kernel may commit unconditionally so that "the group before last" always names the same buffer).
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Wait until at most N of this thread's bulk groups still READ their shared-memory source (their global
// writes may still be under way): from then on those sources may be overwritten.
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory"); }
// Wait until at most N of this thread's bulk groups are incomplete, writes included (N = 0 before the
// block exits: its shared memory must outlive the copies reading it).
template <int N>
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(N) : "memory"); }
// Ordinary stores to shared memory are made by the "generic proxy"; the TMA and wgmma read through the
// "async proxy". Each writing thread fences its own writes before the barrier that lets the reader go, or
// the reader may see stale bytes.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Two fp32 values to shared memory at shared-window address `addr` (8-byte aligned), one instruction.
__device__ __forceinline__ void st_shared_f2(uint32_t addr, float x, float y)
{
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" :: "r"(addr), "f"(x), "f"(y) : "memory");
}

// ---- named barriers: barrier `id` (0 is __syncthreads') for `count` threads (a multiple of 32) ---------
// bar.sync waits until `count` threads have arrived (itself included); bar.arrive counts this thread in
// and goes on at once. One warpgroup syncing (128) while the other arrives (128) is a one-way signal
// "your turn": attention's ping-pong between its consumer warpgroups.
__device__ __forceinline__ void bar_sync(uint32_t id, uint32_t count)
{
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(uint32_t id, uint32_t count)
{
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}
// A barrier for the 128 threads of one warpgroup only (the count an immediate), so two consumer
// warpgroups never wait for each other; the kernels give consumer c the id 1 + c.
__device__ __forceinline__ void warpgroup_sync(int id) { asm volatile("bar.sync %0, 128;\n" :: "r"(id) : "memory"); }

// ---- registers per warpgroup (matmul_wgmma.cu: "setmaxnreg") -------------------------------------------
// The register file is split evenly at launch; a producer warpgroup gives registers back (dec), the
// consumer warpgroups take them for their accumulators (inc). Every thread of the warpgroup executes it.
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(REGS)); }
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(REGS)); }

// ---- wgmma ---------------------------------------------------------------------------------------------------
// The shared-memory descriptor (matmul_wgmma.cu: "Shared-memory descriptor"): start address >> 4 in bits
// 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45, swizzle mode in 62-63; strides in bytes. Every tile of the
// course's kernels is 128-byte swizzled (mode 1).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4)
         | static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16
         | static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32
         | 1ull << 62;  // swizzle mode 1: 128-byte
}
// wgmma.fence: accumulator (and A fragment) registers written by ordinary instructions are visible to the
// wgmmas issued after it. commit_group closes a group of issued wgmmas; wait_group<N> waits until at most
// N groups of this warp are still running.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
// Pins accumulator registers after a wait: the compiler sees no data dependence between the wait and the
// registers the wgmma writes, so without this it could move a read of them above the wait.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
// The same for A fragments in registers (four k slices): they must live, unchanged, until the wgmmas
// reading them are done.
__device__ __forceinline__ void fence_a(uint32_t (&a)[4][4])
{
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(a[i][r]) :: "memory");
}

// B's layout in shared memory, the instruction's imm-trans-b. K-major: the k (reduction) index contiguous,
// as wgmma reads A (nn.Linear's weight, attention's K). MN-major: the n index contiguous (a row-major
// K x N matrix, attention's V), which wgmma transposes as it reads.
#define WGMMA_B_K_MAJOR 0
#define WGMMA_B_MN_MAJOR 1
// A's layout in shared memory, the instruction's imm-trans-a, for A read through a descriptor: K-major (a
// row-major M x K matrix, every GEMM's usual A) or MN-major (the m index contiguous: A given column-major,
// e.g. dY^T in a weight gradient dW = dY^T X, where dY is stored tokens x N). Same rule as B's: only the
// 16-bit types may be transposed (PTX ISA, wgmma.mma_async, imm-trans-a).
#define WGMMA_A_K_MAJOR 0
#define WGMMA_A_MN_MAJOR 1

// The accumulator operands of a 64 x N fp32 tile: N / 2 registers a thread, "{%0, ..., %(N/2 - 1)}".
#define HP_D4(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define HP_D16(i) HP_D4(i), HP_D4((i) + 4), HP_D4((i) + 8), HP_D4((i) + 12)
#define HP_D32 HP_D16(0), HP_D16(16)
#define HP_D64 HP_D32, HP_D16(32), HP_D16(48)
#define HP_D96 HP_D64, HP_D16(64), HP_D16(80)
#define HP_D128 HP_D64, HP_D16(64), HP_D16(80), HP_D16(96), HP_D16(112)
#define HP_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n" \
                  " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define HP_REGS64 HP_REGS32 ",\n" \
                  " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n" \
                  " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define HP_REGS96 HP_REGS64 ",\n" \
                  " %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,\n" \
                  " %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define HP_REGS128 HP_REGS64 ",\n" \
                  " %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,\n" \
                  " %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,\n" \
                  " %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109,\n" \
                  " %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122,\n" \
                  " %123, %124, %125, %126, %127"

// "SS": d (64 x N fp32) = (accumulate ? d : 0) + A (64 x 16, shared memory, TRANS_A: WGMMA_A_K_MAJOR, the
// default, or WGMMA_A_MN_MAJOR) @ B (16 x N, shared memory, TRANS_B: WGMMA_B_K_MAJOR or WGMMA_B_MN_MAJOR),
// both through descriptors; in `T`, fp16 or bf16. The scale-d predicate (accumulate = 0) starts a tile from
// zero without N / 2 register moves. After the accumulators: %A A's descriptor, %A+1 B's, %A+2 accumulate,
// %A+3 TRANS_B, %A+4 TRANS_A; the immediates between are scale A by 1, scale B by 1.
// N: the PTX ISA's wgmma.mma_async takes, for .f16 and .bf16 inputs, every .m64nNk16 with N a multiple of 8
// from 8 to 256 (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate": wgmma.mma_async, .shape;
// the list as the ptx-90-parser crate quotes it, docs.rs/ptx-90-parser/0.2.2, wgmma_mma_async.rs). The course
// wraps the ones its kernels use: 64 and 128 (attention), 128, 192 and 256 (the persistent GEMM's tile widths,
// matmul_wgmma_persistent.cu's WP_BN).
#define HP_WGMMA_SS(N, TYPE, REGS, A, B, P, TB, TA, ...)                                                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                   \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE "\n" REGS "},\n"    \
                 " %" #A ", %" #B ", p, 1, 1, %" #TA ", %" #TB ";\n}\n"                              \
                 : __VA_ARGS__                                                                       \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B), "n"(TRANS_A))
template <int N, typename T, int TRANS_B, int TRANS_A = WGMMA_A_K_MAJOR>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int accumulate)
{
    static_assert(N == 64 || N == 128 || N == 192 || N == 256,
                  "the course's wgmma shapes: m64n64k16, m64n128k16, m64n192k16, m64n256k16");
    static_assert(TRANS_B == WGMMA_B_K_MAJOR || TRANS_B == WGMMA_B_MN_MAJOR, "TRANS_B: WGMMA_B_K_MAJOR or _MN_MAJOR");
    static_assert(TRANS_A == WGMMA_A_K_MAJOR || TRANS_A == WGMMA_A_MN_MAJOR, "TRANS_A: WGMMA_A_K_MAJOR or _MN_MAJOR");
    constexpr bool half = std::is_same<T, __half>::value;
    static_assert(half || std::is_same<T, __nv_bfloat16>::value, "T: __half or __nv_bfloat16");
    if constexpr (N == 64) {
        if constexpr (half) HP_WGMMA_SS(64, "f16", HP_REGS32, 32, 33, 34, 35, 36, HP_D32);
        else HP_WGMMA_SS(64, "bf16", HP_REGS32, 32, 33, 34, 35, 36, HP_D32);
    } else if constexpr (N == 128) {
        if constexpr (half) HP_WGMMA_SS(128, "f16", HP_REGS64, 64, 65, 66, 67, 68, HP_D64);
        else HP_WGMMA_SS(128, "bf16", HP_REGS64, 64, 65, 66, 67, 68, HP_D64);
    } else if constexpr (N == 192) {
        if constexpr (half) HP_WGMMA_SS(192, "f16", HP_REGS96, 96, 97, 98, 99, 100, HP_D96);
        else HP_WGMMA_SS(192, "bf16", HP_REGS96, 96, 97, 98, 99, 100, HP_D96);
    } else {
        if constexpr (half) HP_WGMMA_SS(256, "f16", HP_REGS128, 128, 129, 130, 131, 132, HP_D128);
        else HP_WGMMA_SS(256, "bf16", HP_REGS128, 128, 129, 130, 131, 132, HP_D128);
    }
}

// "RS": d (64 x N fp32) += A (64 x 16, registers: four 32-bit registers a thread, 8 values of `T`) @ B (16 x N,
// shared memory, TRANS_B as above). A from registers has no transpose flag: its layout is the accumulator's
// (pack_a_fragment below). After the accumulators: %A .. %A+3 the A fragment, %A+4 B's descriptor, %A+5 the
// scale-d predicate's 1 (always accumulate), %A+6 TRANS_B.
#define HP_WGMMA_RS(N, TYPE, REGS, A0, A1, A2, A3, B, P, TB, ...)                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                   \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE "\n" REGS "},\n"    \
                 " {%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #B ", p, 1, 1, %" #TB ";\n}\n"       \
                 : __VA_ARGS__                                                                       \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1), "n"(TRANS_B))
template <int N, typename T, int TRANS_B>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b)
{
    static_assert(N == 64 || N == 128, "the course's register-A wgmma shapes: m64n64k16, m64n128k16");
    static_assert(TRANS_B == WGMMA_B_K_MAJOR || TRANS_B == WGMMA_B_MN_MAJOR, "TRANS_B: WGMMA_B_K_MAJOR or _MN_MAJOR");
    constexpr bool half = std::is_same<T, __half>::value;
    static_assert(half || std::is_same<T, __nv_bfloat16>::value, "T: __half or __nv_bfloat16");
    if constexpr (N == 64) {
        if constexpr (half) HP_WGMMA_RS(64, "f16", HP_REGS32, 32, 33, 34, 35, 36, 37, 38, HP_D32);
        else HP_WGMMA_RS(64, "bf16", HP_REGS32, 32, 33, 34, 35, 36, 37, 38, HP_D32);
    } else {
        if constexpr (half) HP_WGMMA_RS(128, "f16", HP_REGS64, 64, 65, 66, 67, 68, 69, 70, HP_D64);
        else HP_WGMMA_RS(128, "bf16", HP_REGS64, 64, 65, 66, 67, 68, 69, 70, HP_D64);
    }
}

// The register-fragment identity. A 64 x N fp32 accumulator of a warpgroup gives thread (warp w, lane l)
// rows 16w + l/4 + {0, 8} and, in every 8-column block j, columns 8j + 2(l%4) + {0, 1}: d[4j + 2h + e] is
// (row 16w + l/4 + 8h, column 8j + 2(l%4) + e). wgmma's A operand in registers (16-bit types, a 64 x 16
// k slice) uses the same places: a[0] = rows +0, columns 2(l%4) + {0,1}; a[1] = rows +8, same columns;
// a[2], a[3] = the same 8 columns further (PTX ISA, "Register Fragments", wgmma .f16 matrix A). So k slice
// kk (columns 16kk .. 16kk+15) of an accumulator IS the A fragment of d[8kk .. 8kk+7], packed in pairs:
// an attention's P (or P^T, dS^T) feeds the next wgmma without a trip through shared memory.
template <typename T, int N>
__device__ __forceinline__ void pack_a_fragment(const float (&d)[N], int kk, uint32_t (&a)[4])
{
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = pack2(d[8 * kk + 2 * r], d[8 * kk + 2 * r + 1], T());
}

// ---- the special-function unit ---------------------------------------------------------------------------
// 2^x and log2(x) on the SFU (MUFU.EX2 / MUFU.LG2; relative error ~2^-22): ex2(-inf) = +0, NaN stays NaN.
// The exponentials of a softmax, with log2(e) folded into the score scale.
__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float lg2(float x)
{
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
#endif  // HOPPER_SM90A
