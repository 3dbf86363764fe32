// Padding keys for the Hopper attention kernels (attention_hopper_forward.cu and attention_hopper_backward.cu
// include it): how many keys a (batch, head) has. Without key_lengths every head has all Sk of them; with it,
// batch b has key_lengths[b] clamped to [0, Sk] (keys j >= key_lengths[b] are padding: no query sees them), as
// week 4's Triton rungs read it (attention/plans.py, visible_key_count). The tensor is torch's, int32 or int64
// (B,): read as it is, so the op never copies it (a .to(int32) would be a kernel launch of its own).
#pragma once

struct AhKeys {
    const void* lengths;  // key_lengths (B,) or null: no padding keys
    int wide;             // 1: int64 entries, 0: int32
    int heads;            // H: (batch, head) index bh belongs to batch bh / H
    int seq_k;            // Sk: the keys every head has in memory

    __device__ __forceinline__ int of(int bh) const
    {
        if (lengths == nullptr) return seq_k;
        const long long n = wide ? static_cast<const long long*>(lengths)[bh / heads]
                                 : (long long)static_cast<const int*>(lengths)[bh / heads];
        return n <= 0 ? 0 : (n >= seq_k ? seq_k : (int)n);
    }
};
