// The dynamic tile scheduler of attention_hopper_forward.cu's persistent build (-DAH_PERSISTENT=1
// -DAH_DYNAMIC_TILES=1, hopper.py's persistent=True, dynamic=True; sm_90a only), included by it inside the
// kernel's device code: the order of the work tiles, the counter's draw, and the mailbox that carries a drawn
// tile from the producer's thread to the consumer warpgroups.
//
// The static walk balances causal work only while the grid and a head's query tiles line up (at S = 16k it
// does not: persistent_balance.py). As FA3, a global counter hands out the tiles instead, in an order where
// causal tiles come longest first (ah_dyn_work: heads in sections whose K and V fit in L2, a section's tiles
// by key-tile count, longest first, its heads fastest). Block b's first tile is b; then the producer's thread
// draws the next (G + atomicAdd(counter, 1)) once it has issued the loads of its current one, and tells the
// consumers through a shared-memory mailbox written after the empty_q wait and before the arrive on full_q:
// the consumers learn the tile in the phase that tells them its Q landed (mbarrier arrive releases, the wait
// acquires). A draw past the end ends the block: the producer still waits for empty_q, posts the index and
// arrives on full_q with no bytes; the consumers read an index >= the tile count and leave. Every block draws
// exactly once past the end, so the launch makes exactly `tiles` draws and the one that returns tiles - 1 is
// the last: that block sets the counter back to zero for the next launch on the stream. The counters are a
// module variable, zero when the module loads: the host gives each (device, stream) a slot of its own, so no
// launch allocates or clears anything (CUDA graph capture allows neither an allocation nor a host memset). A
// captured launch keeps its capture stream's slot: replaying the graph on another stream while the capture
// stream runs this build too would share a counter (not done here: the bench replays on the capture stream).
// A consumer cannot know whether a tile is its block's last
// before the next draw is posted, so warpgroup 2 always hands the turn over after a tile's last phase and
// warpgroup 1, once told to leave, takes that last turn (bar.sync) so that none is left half-arrived.
// tests/week4/test_attention_hopper_persistent_protocol.py models it too. Unmeasured on a GPU as yet.
//
#pragma once

#define AH_L2_SECTION_BYTES (32 << 20)  // a section of heads' K and V (causal order): well inside the H100's 50 MB L2
// Streams per device that may launch this build (attention_hopper_host.cuh hands the slots out). torch's streams
// come from a pool of 32 per priority (torch.cuda.Stream() reuses them round-robin), the bench makes one per graph.
#define AH_COUNTER_SLOTS 256

__device__ int ah_tile_counters[AH_COUNTER_SLOTS];  // one per stream; each launch leaves its own at zero (ah_draw)

#if AH_HOPPER

// The dynamic order of the work tiles. Not causal: ah_work's (all tiles alike, head-major for L2). Causal: the
// heads in sections of `heads` (ah_section_heads: their K and V fit in L2 together), sections one after the
// other; within a section the query tiles by length, longest first, the section's heads varying fastest, so
// the counter hands out the long tiles first and the short ones fill the tail (list scheduling, longest first).
// With padding keys (key_lengths) a head's tiles may be shorter than their order says: the order stays the same.
__device__ __forceinline__ void ah_dyn_work(int tile, int m_tiles, int bh_count, int heads, const AhKeys& key_count,
                                            int causal, int& bh, int& m0, int& n_tiles, int& keys)
{
    if (!causal) {
        ah_work(tile, m_tiles, key_count, causal, bh, m0, n_tiles, keys);
        return;
    }
    const int section = tile / (heads * m_tiles), in_section = tile % (heads * m_tiles);
    const int here = min(heads, bh_count - section * heads);  // the last section may hold fewer heads
    const int order = in_section / here;                        // 0: the longest query tile (the last rows)
    bh = section * heads + in_section % here;
    m0 = (m_tiles - 1 - order) * AH_BM;
    keys = key_count.of(bh);
    ah_key_tiles(m0, keys, causal, n_tiles);
}

// Heads per section: as many as have their K and V (4 D bytes per key) in AH_L2_SECTION_BYTES, 1 to bh_count
// (so that heads x m_tiles <= the tile count, an int).
__device__ __forceinline__ int ah_section_heads(int d, int seq_k, int bh_count)
{
    return max(1, min(bh_count, AH_L2_SECTION_BYTES / (4 * d) / seq_k));
}

// The producer's next tile: G + the counter's old value. Each block draws until it draws past the end, once:
// `tiles` draws in all, and the one that returns tiles - 1 comes last, so its block resets the counter (the
// next launch on this stream finds it at zero; no draw of this launch can follow it).
__device__ __forceinline__ int ah_draw(int* counter, int tiles)
{
    const int drawn = atomicAdd(counter, 1);
    if (drawn == tiles - 1) atomicExch(counter, 0);
    return (int)gridDim.x + drawn;
}

// The producer posts the round's tile to the consumers: after its wait on empty_q (they have read the last one)
// and before its arrive on full_q (whose phase tells them). Past the end: the arrive alone, no Q; true: stop.
__device__ __forceinline__ bool ah_post(int tile, int tiles, volatile int* mailbox, uint64_t* full_q)
{
    *mailbox = tile;
    if (tile < tiles) return false;
    mbar_arrive(full_q);
    return true;
}

// The consumers' tile of round `round`: once full_q's phase completes (Q landed, or the end was posted), lane 0
// of each warp reads the mailbox (the lane that arrives on empty_q after it) and gives it to its warp.
__device__ __forceinline__ int ah_take(int round, const volatile int* mailbox, uint64_t* full_q)
{
    mbar_wait(full_q, round & 1);
    int tile = 0;
    if (threadIdx.x % 32 == 0) tile = *mailbox;
    return __shfl_sync(0xffffffff, tile, 0);
}
#endif
