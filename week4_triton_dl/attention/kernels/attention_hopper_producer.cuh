// The producer of attention_hopper_forward.cu (included by it inside its device code, after the work-tile helpers):
// one thread's TMA copies of a work tile's Q, K and V through the ring, and, for a head with padding keys
// (key_lengths), the staged last V tile whose padding rows the copy engine overwrites with zeros. The .cu's header
// tells the protocol (the ring, the ping-pong, "Padding keys"); tests/week4/test_attention_hopper_persistent_protocol.py
// models it.
#pragma once

// Rows [from, to) of a staged V slot overwritten with zeros by the copy engine, counted on `bar`: whole 128-byte
// rows of each slab, one contiguous run per slab (the swizzle permutes 16-byte chunks inside a row only).
template <int D>
__device__ __forceinline__ void ah_zero_rows(unsigned char* slot, int from, int to, uint64_t* bar)
{
    const uint32_t bytes = (uint32_t)(to - from) * 128;
    mbar_arrive_expect_tx(bar, AhShape<D>::SLABS * bytes);
#pragma unroll
    for (int sl = 0; sl < AhShape<D>::SLABS; ++sl)
        bulk_load_1d(slot + sl * AH_SLAB_BYTES + from * 128, ah_zeros, bytes, bar);
}

// The producer's copies for one work tile (one thread): Q, then its key tiles through the ring. Slot and
// phase follow `ring`, the key tiles this block sent through the ring before (never reset). `keys`: the head's
// keys (padding keys: the header); `staged`: the last tiles this block landed through `staging` (its parity).
template <int D>
__device__ __forceinline__ void ah_produce(const CUtensorMap* map_q, const CUtensorMap* map_k,
                                           const CUtensorMap* map_v, int bh, int m0, int n_tiles, int ring,
                                           int keys, int seq_k, int& staged, unsigned char* q_tile,
                                           unsigned char* k_slots, unsigned char* v_slots, uint64_t* full_q,
                                           uint64_t* full_k, uint64_t* full_v, uint64_t* empty_k, uint64_t* empty_v,
                                           uint64_t* staging)
{
    using Shape = AhShape<D>;
    // The last key tile's V rows that are padding inside Sk: [zero_from, zero_to) (past Sk the TMA wrote zeros).
    const int n_last = (n_tiles - 1) * AH_BN;
    const int zero_from = max(keys - n_last, 0), zero_to = min(AH_BN, seq_k - n_last);
    mbar_arrive_expect_tx(full_q, Shape::TILE_BYTES);
#pragma unroll
    for (int sl = 0; sl < Shape::SLABS; ++sl)
        tma_load_3d(q_tile + sl * AH_SLAB_BYTES, map_q, full_q, sl * AH_SLAB_COLS, m0, bh);
    for (int it = 0; it < n_tiles; ++it) {
        const int r = ring + it;
        const int s = r % AH_STAGES;
        const uint32_t reuse_parity = ((r / AH_STAGES) - 1) & 1;  // the slot's previous use
        // K and V have their own barriers: S = Q K^T may start before V has landed, and
        // a K slot is free as soon as S is computed, a whole softmax before its V is.
        if (r >= AH_STAGES) mbar_wait(&empty_k[s], reuse_parity);
        // Every box delivers all its bytes (zeros past Sk): the count is always a full tile.
        mbar_arrive_expect_tx(&full_k[s], Shape::TILE_BYTES);
#pragma unroll
        for (int sl = 0; sl < Shape::SLABS; ++sl)
            tma_load_3d(k_slots + s * Shape::TILE_BYTES + sl * AH_SLAB_BYTES, map_k, &full_k[s],
                        sl * AH_SLAB_COLS, it * AH_BN, bh);
        if (r >= AH_STAGES) mbar_wait(&empty_v[s], reuse_parity);
        // A last tile with padding keys inside Sk lands on `staging`, which only this thread waits for.
        const bool stage = it == n_tiles - 1 && zero_from < zero_to;
        uint64_t* landed = stage ? staging : &full_v[s];
        mbar_arrive_expect_tx(landed, Shape::TILE_BYTES);
#pragma unroll
        for (int sl = 0; sl < Shape::SLABS; ++sl)
            tma_load_3d(v_slots + s * Shape::TILE_BYTES + sl * AH_SLAB_BYTES, map_v, landed,
                        sl * AH_SLAB_COLS, it * AH_BN, bh);
        if (stage) {
            // Once the tile has landed, zeros over its padding rows, counted on full_v: the consumers' wait on
            // full_v then covers the zeros (issued after the tile landed, so they land after it too).
            mbar_wait(staging, staged & 1);
            ++staged;
            ah_zero_rows<D>(v_slots + s * Shape::TILE_BYTES, zero_from, zero_to, &full_v[s]);
        }
    }
}
