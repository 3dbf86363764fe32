// The host side of attention_hopper_forward.cu (included at its end, after the kernel): the TMA tensor maps
// of q, k, v, the grid (one block per work tile; one per SM in the persistent build), the dynamic scheduler's
// counter (its build only), the launch, and the extern "C" entry hopper.py's binding calls. No torch header
// here: the binding passes raw pointers.
#pragma once

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>
#if AH_DYNAMIC_TILES
#include <map>
#include <mutex>
#include <utility>
#endif

static PFN_cuTensorMapEncodeTiled_v12000 ah_encode_fn()
{
    // The driver's function, found through the runtime (no -lcuda at link time).
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    if (fn == nullptr) {
        void* ptr = nullptr;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &found) ==
                cudaSuccess && found == cudaDriverEntryPointSuccess)
            fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
    }
    return fn;
}

// [B*H, S, D] as a 3-D tensor (dims listed fastest first), boxes of 64 columns x 128 rows x 1 head,
// 128-byte swizzle, zeros outside.
static int ah_tensor_map(CUtensorMap* map, bool bf16, const void* ptr, int bh_count, int seq, int d)
{
    PFN_cuTensorMapEncodeTiled_v12000 encode = ah_encode_fn();
    if (encode == nullptr) return -1;
    const cuuint64_t dims[3] = {(cuuint64_t)d, (cuuint64_t)seq, (cuuint64_t)bh_count};
    const cuuint64_t strides[2] = {(cuuint64_t)d * 2, (cuuint64_t)seq * d * 2};  // bytes, dims 1 and 2
    const cuuint32_t box[3] = {AH_SLAB_COLS, 128, 1};
    const cuuint32_t element_strides[3] = {1, 1, 1};
    const CUresult r = encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
                              const_cast<void*>(ptr), dims, strides, box, element_strides,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : -2;
}

#if AH_DYNAMIC_TILES
// The dynamic scheduler's counter (attention_hopper_dynamic.cuh): a slot of ah_tile_counters per device and stream,
// handed out in order of first use and kept for the process. Launches on one stream never overlap, so each finds
// its counter at zero; two streams never share one (two torch streams that share a handle from torch's pool
// are one stream). -5 past AH_COUNTER_SLOTS streams on one device.
static int ah_counter_slot(cudaStream_t stream, int device, int* slot)
{
    static std::mutex lock;
    static std::map<std::pair<int, cudaStream_t>, int> slots;
    static std::map<int, int> used;  // slots handed out per device
    const std::lock_guard<std::mutex> hold(lock);
    auto found = slots.find({device, stream});
    if (found == slots.end()) {
        if (used[device] >= AH_COUNTER_SLOTS) return -5;
        found = slots.emplace(std::make_pair(device, stream), used[device]++).first;
    }
    *slot = found->second;
    return 0;
}
#endif

template <typename T, int D>
static int ah_launch(bool bf16, const void* q, const void* k, const void* v, void* out, float* lse, int bh_count,
                     int seq_q, int seq_k, float c, int causal, AhKeys key_count, cudaStream_t stream)
{
    CUtensorMap map_q, map_k, map_v;
    int err = ah_tensor_map(&map_q, bf16, q, bh_count, seq_q, D);
    if (!err) err = ah_tensor_map(&map_k, bf16, k, bh_count, seq_k, D);
    if (!err) err = ah_tensor_map(&map_v, bf16, v, bh_count, seq_k, D);
    if (err) return err;
    const int smem = AhShape<D>::SMEM_BYTES;
    cudaError_t e = cudaFuncSetAttribute(attention_hopper_fwd<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return (int)e;
    long long blocks = (long long)((seq_q + AH_BM - 1) / AH_BM) * bh_count;
#if AH_PERSISTENT
    int device = 0, sms = 0;  // one block per SM (one fits: 384 threads, the shared memory above)
    e = cudaGetDevice(&device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return (int)e;
    if (blocks > 0x7fffffffLL - 2 * sms) return -3;  // the next round's tile stays an int
    blocks = blocks < sms ? blocks : sms;
#endif
#if AH_DYNAMIC_TILES
    int counter_slot = 0;
    err = ah_counter_slot(stream, device, &counter_slot);
    if (err) return err;
#endif
    if (blocks > 0x7fffffffLL) return -3;
    attention_hopper_fwd<T, D><<<(unsigned)blocks, AH_THREADS, smem, stream>>>(
        map_q, map_k, map_v, static_cast<T*>(out), lse, bh_count, seq_q, seq_k, c, causal, key_count
#if AH_DYNAMIC_TILES
        , counter_slot
#endif
    );
    return (int)cudaGetLastError();
}

// dtype: 0 = fp16, 1 = bf16. key_lengths: null, or (B,) entries, int64 (lengths_wide = 1) or int32, batch
// bh / heads (attention_hopper_keys.cuh). Returns 0, a cudaError_t (> 0), or -1 (no cuTensorMapEncodeTiled),
// -2 (a tensor map was refused), -3 (grid too large), -4 (head dim not 64 or 128), -5 (the dynamic build: more
// streams on one device than it has counters).
extern "C" int attention_hopper_forward_cuda(int dtype, const void* q, const void* k, const void* v, void* out,
                                             float* lse, int bh_count, int seq_q, int seq_k, int d, float c,
                                             int causal, const void* key_lengths, int lengths_wide, int heads,
                                             void* stream)
{
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    const AhKeys keys{key_lengths, lengths_wide, heads, seq_k};
    if (d == 64)
        return dtype ? ah_launch<__nv_bfloat16, 64>(true, q, k, v, out, lse, bh_count, seq_q, seq_k, c, causal, keys, st)
                     : ah_launch<__half, 64>(false, q, k, v, out, lse, bh_count, seq_q, seq_k, c, causal, keys, st);
    if (d == 128)
        return dtype ? ah_launch<__nv_bfloat16, 128>(true, q, k, v, out, lse, bh_count, seq_q, seq_k, c, causal, keys, st)
                     : ah_launch<__half, 128>(false, q, k, v, out, lse, bh_count, seq_q, seq_k, c, causal, keys, st);
    return -4;
}
