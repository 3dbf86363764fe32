// The attention forward in the FlashAttention-3 style, in CUDA C for the H100/H200 (sm_90a only).
// Launched from week4_triton_dl/attention/hopper.py (`attention_hopper`), built there with
// torch.utils.cpp_extension.load_inline; the instructions are wrapped in week 1's hopper_ptx.cuh.
//
//     O = softmax(Q K^T * scale [+ causal mask]) V,   lse = log(sum_j exp(s_ij)) per row
//     q: [B, H, Sq, D], k and v: [B, H, Sk, D], contiguous, fp16 or bf16; D = 64 or 128
//
// It is week 4's online softmax (attention/flash.py) on the machinery of week 1's Hopper GEMMs
// (kernels/matmul_wgmma*.cu: TMA, mbarrier rings, wgmma, setmaxnreg, warp specialisation), arranged
// the way FlashAttention-3 (Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao, 2024, arXiv:2407.08608)
// arranges it. The paper reports up to ~740 TFLOP/s fp16 forward on an H100 SXM (75% of the
// datasheet's 989); this file keeps its structure and leaves some of its speed (below).
//
// ---- One block, 3 warpgroups (384 threads) -------------------------------------------------------
// A block owns 128 rows of Q (one (batch, head), rows m0 .. m0+127) and walks the key tiles of 128.
// * warpgroup 0, the producer: one thread issues TMA copies. Q once; then K and V tiles into a ring
//   of STAGES slots, each slot with a "full" mbarrier (the copy's bytes landed) and an "empty" one
//   (both consumers have finished reading it). It keeps 40 registers (setmaxnreg.dec) and gives
//   the rest to the consumers.
// * warpgroups 1 and 2, the consumers: each owns 64 of the 128 query rows (wgmma's M is 64) and
//   runs the online softmax over the same key tiles, 232 registers each (setmaxnreg.inc):
//     S = Q K^T    wgmma m64n128k16, A = Q and B = K from shared memory     (64 fp32 registers)
//     softmax      row max, P = 2^(S c - m), rescale factor alpha, row sums l, all in registers
//     O += P V     wgmma m64nDk16, A = P from REGISTERS, B = V from shared memory (D/2 registers)
//   P never goes to shared memory: the fp32 accumulator layout of S (thread t of warp w holds rows
//   16w + t/4 + {0, 8}, columns 8j + 2(t%4) + {0, 1}) is exactly the layout wgmma wants for an A
//   operand in registers, 16 columns (one k step) at a time, once two neighbours are packed into
//   one 32-bit register of the input type. FlashAttention-3 does the same ("RS" GEMM); through
//   shared memory would cost a 16 KB write, a fence and a barrier per tile.
//
// ---- The ping-pong ----------------------------------------------------------------------------------
// Softmax is work for the multi-function units (MUFU.EX2: 16 per clock per SM against the tensor
// cores' ~2,048 dense fp16 FMAs per clock; FA3 counts 3.9 TFLOP/s of exp against 989 of matmul), so
// while a warpgroup does its softmax the tensor cores would idle. With two warpgroups, named barrier
// 1 ("warpgroup 1 may issue") and 2 ("warpgroup 2 may issue") make their GEMM phases alternate:
//     WG1: [GEMMs] softmax........ [GEMMs] softmax........
//     WG2:  wait.. [GEMMs] softmax........ [GEMMs] softmax
// Each GEMM phase is this tile's S = Q K^T and the previous tile's O += P V, issued together. A
// warpgroup takes its turn with bar.sync (256 threads: its own 128 + the other's 128 arrivals) and
// hands the turn over with bar.arrive on the other's barrier right after issuing (wgmma is
// asynchronous: the tensor cores work on while the issuing warps go on to wait for the results).
// Warpgroup 2 starts by giving warpgroup 1 the first turn, and skips its hand-over after its last
// phase, so every bar.sync meets exactly one bar.arrive and no barrier is left half-arrived at exit.
//
// ---- The intra-warpgroup overlap (-DAH_INTRA_OVERLAP=1, hopper.py's overlap=True; off by default) -------
// The ping-pong hides one warpgroup's softmax behind the other's GEMMs; FA3 (section 3.2) also hides it
// behind the warpgroup's OWN P V. A phase commits S = Q K^T of tile j and O += P V of tile j-1 as two
// groups, S first; wgmma.wait_group 1 then waits for S alone, and the softmax of tile j runs while the
// tensor cores still do P V of j-1:
//     default: [S_j, PV_j-1] ---- wait both ---- softmax_j ---------------- (next turn)
//     overlap: [S_j, PV_j-1] -- wait S -- softmax_j (under PV_j-1) -- wait PV -- rescale O, pack P_j
// so the softmax starts a P V earlier and the next turn comes sooner. The P V wgmma reads p and writes
// o until it completes, so neither may be touched before wait_group 0 (the PTX ISA: undefined): the
// softmax computes alpha into a stand-in of ones (ah_phase), O is rescaled by it and P packed after the
// wait. Same operations in the same order: the same bits as the default (the tests compare them).
// Register cost: p (32) and the two alphas stay live through the softmax, where the default lets
// its temporaries reuse p. With nvcc 13.0 the highest register of the consumers' SASS goes from
// R197 to R217 at D = 128 and from R178 to R187 at D = 64, of setmaxnreg's 232 (ptxas -v reports the
// launch bound's 168, not this; the GPU check's first step prints both), no spills. ptxas keeps the
// overlap: MUFU.EX2 sits between the two waits. Had it found a register of a pending wgmma touched, it
// would wait after every wgmma instead, saying so in an info line, not a warning (the tests look for
// it). Unmeasured on a GPU as yet: tools/gpu_attention_hopper_check.sh times it beside the default.
//
// ---- The online softmax, base 2 ----------------------------------------------------------------------
// c = scale * log2(e) is folded into one multiply: p = 2^(s c - m) with m the running max of s c,
// one FFMA and one MUFU.EX2 per score. lse = (m + log2 l) ln 2 (natural log: what the backward and
// torch use). A masked score is set to -inf with a select (not added), so a NaN key hidden by the
// causal mask stays hidden, as in torch's fused kernels.
//
// ---- Masks and ragged lengths -------------------------------------------------------------------------
// Causal (top-left, key j visible to query i when j <= i): tiles entirely above the diagonal are
// never loaded (the block's tile count stops at its last row); tiles that cross it are masked per
// element; tiles entirely below it, and inside Sk, run with no mask code. Keys past Sk (the last
// tile's ragged end) are masked too. The TMA reads q, k, v as 3-D tensors [B*H, S, D] (S its own
// dimension), so a box running past S reads ZEROS, not the next head's rows: 0 * NaN would leak a
// NaN of another head through P V.
// Padding keys (key_lengths (B,), hopper.py's key_lengths=): batch b has keys 0 .. n - 1, n = key_lengths[b]
// clamped to [0, Sk] (attention_hopper_keys.cuh). Everything above reads n where it read Sk: the key tiles a
// work tile visits stop at n (so padding costs no tensor-core work past its last tile) and the mask hides
// keys >= n. One thing is new: keys n .. Sk - 1 are real memory, NaN or anything, and P = 0 there does not
// make 0 x NaN vanish in P V. So the producer lands the last key tile's V through a barrier of its own
// (`staging`), then has the copy engine write zeros over those rows (1-D bulk copies from ah_zeros, a zero
// buffer in global memory) counted on full_v: the consumers wait on full_v as for any tile and never see the
// garbage, and no thread stores into a slot the TMA writes (both writers are the copy engine, in order: the
// zeros are issued once the tile has landed). A K row needs no zeroing: the mask's select turns its NaN score
// into -inf. A row with no key at all (n = 0) visits one tile, all masked, and stores zeros and lse = -inf, as
// SDPA (and Sk = 0) do.
//
// ---- The persistent build (-DAH_PERSISTENT=1, hopper.py's persistent=True; off by default) ------------
// As FA3 and cuDNN: grid = min(SMs, work tiles), each block walks work tiles (ah_round_tile: a static
// scheduler), so the producer loads the next tile's Q, K, V under the consumers' last P V and epilogue of
// this one (a 1k sequence pays that prologue and epilogue 8 times per head). One Q slot serves every tile:
// the consumers arrive on empty_q once their last S = Q K^T of a tile is done, the producer waits for it
// before the next Q. The ring's slots and phases run on across tiles (`ring`: key tiles so far), and so
// does the ping-pong (warpgroup 2 hands over after a tile's last phase too, but the block's last);
// tests/week4/test_attention_hopper_persistent_protocol.py models it. Unmeasured on a GPU as yet.
// -DAH_DYNAMIC_TILES=1 (with it; dynamic=True) hands the tiles out from a global counter instead, longest first:
// attention_hopper_dynamic.cuh, included below, says how the tile reaches the consumers and how the block ends.
//
// ---- What this rung leaves out (FA3 has them) -----------------------------------------------------------
// the intra-warpgroup overlap, the persistent grid and its dynamic scheduler in the default build (A/Bs above
// until a GPU has run them), the O epilogue through shared memory and a TMA store (O is stored
// here straight from registers, 4 bytes per thread), fp8, and larger key tiles for D = 64.
//
// Shared memory (dynamic, rounded up to 1024 bytes for the swizzle): Q, 128 rows x D; STAGES slots
// of K (128 keys x D) and of V. D = 128: 32 KB + 2 x 2 x 32 KB = 160 KB; D = 64: 80 KB. A tile of
// D = 128 is two "slabs" of 64 columns (128 bytes: the swizzle's span, and the largest box inner
// dimension the 128-byte swizzle allows), each 128 rows x 128 bytes = 16 KB.

// The Hopper instructions, one C++ function each: week1_cuda_python/kernels/hopper_ptx.cuh, the course's one
// copy (found through the -I of every build). Beyond the GEMMs' set, attention uses its 3-D TMA load (the
// TMA clips each head at S), named barriers with a count (the ping-pong), wgmma with A from registers (P never
// goes to shared memory) and ex2 / lg2 (the exponential in base 2, log2(e) folded into the score scale).
#include "hopper_ptx.cuh"
#include "attention_hopper_keys.cuh"  // AhKeys: the keys a (batch, head) has (Sk, or its key_lengths entry)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>


#define AH_HOPPER HOPPER_SM90A  // 1 only where the instructions exist: elsewhere the kernel traps

#define AH_BM 128              // query rows per block: 2 consumer warpgroups x 64
#define AH_BN 128              // keys per tile
#define AH_STAGES 2            // K/V ring slots
#define AH_THREADS 384         // producer + 2 consumers
#define AH_SLAB_COLS 64        // columns per TMA box and per swizzled slab (128 bytes)
#define AH_SLAB_BYTES (128 * 128)  // 128 rows x 128 bytes
#define AH_PRODUCER_REGS 40
#define AH_CONSUMER_REGS 232   // 40 + 2 x 232 = 504 <= 512 (65,536 registers / 128 threads per warpgroup)
#ifndef AH_PINGPONG
#define AH_PINGPONG 1          // -DAH_PINGPONG=0: the consumers issue whenever ready (the A/B of the ping-pong)
#endif
#ifndef AH_INTRA_OVERLAP
#define AH_INTRA_OVERLAP 0     // -DAH_INTRA_OVERLAP=1: the softmax of tile j under this warpgroup's own P V of j-1
#endif
#ifndef AH_PERSISTENT
#define AH_PERSISTENT 0        // -DAH_PERSISTENT=1: one block per SM, each walking work tiles (the header)
#endif
#ifndef AH_DYNAMIC_TILES
#define AH_DYNAMIC_TILES 0     // -DAH_DYNAMIC_TILES=1 (with AH_PERSISTENT=1): tiles from a global counter (the header)
#endif
#if AH_DYNAMIC_TILES && !AH_PERSISTENT
#error "AH_DYNAMIC_TILES=1 schedules the persistent build's tiles: build it with AH_PERSISTENT=1"
#endif

template <int D>
struct AhShape {
    static constexpr int SLABS = D / AH_SLAB_COLS;
    static constexpr int TILE_BYTES = SLABS * AH_SLAB_BYTES;  // Q, or one K or V slot
    static constexpr int SMEM_BYTES = TILE_BYTES * (1 + 2 * AH_STAGES) + 1024;
};
static_assert(AhShape<128>::SMEM_BYTES <= 227 * 1024, "the H100 gives a block at most 227 KB of shared memory");
static_assert(AH_BM == 128 && AH_BN == 128, "the wgmma shapes below are m64n128 (S) and the row split 2 x 64");

// Zeros in global memory, a slab's worth (a module variable: zero when the module loads, never written): what the
// copy engine copies over a staged V tile's padding rows (ah_zero_rows). Outside `#if AH_HOPPER`: the host pass
// registers every module variable, so it must see the declaration too.
__device__ __align__(128) unsigned char ah_zeros[AH_SLAB_BYTES];

#if AH_HOPPER
// One tile's online-softmax step for this thread's 2 rows (h = 0, 1): mask (MASK), running max m,
// P = 2^(S c - m) packed into the A registers of P V, alpha rescales l and O.
// s[4j + 2h + e]: row row0 + 8h, column n0 + 8j + 2(lane % 4) + e, j = 0 .. 15.
// `o` is the accumulator alpha rescales: O itself, or (the overlap build) a stand-in (ah_phase says why).
template <typename T, int D, bool MASK>
__device__ __forceinline__ void ah_softmax(float (&s)[64], float (&o)[D / 2], float (&m)[2], float (&l)[2], float c,
                                           int row0, int col0, int seq_k, bool causal)
{
    // BEGIN EXERCISE: the mask of a tile that needs one (MASK): every score s[4j + 2h + e] of a key past
    //   Sk, or (causal) of a key after this row's query, becomes -inf, by a select (not an add)
    // HINT: causal is top-left: query i sees keys 0 .. i, its own key i included; the score of
    //   row row0 + 8h and column col0 + 8j + e sits in s[4 * j + 2 * h + e] (the layout comment above).
    //   A select keeps a NaN of a hidden key hidden; -inf turns into p = 2^-inf = 0 below.
    // HINT: three unrolled loops (j over the 16 column groups, h over the 2 rows, e over the pair), the
    //   column `col0 + 8 * j + e`, one `if` with two conditions: past Sk, or causal and after the row.
    // HINT: `if (col >= seq_k || (causal && col > row0 + 8 * h))` (`>=` there would hide the diagonal)
    // STUB: #define HOLE_OPEN 1  // delete once this hole is filled: nothing is built while one is left (course/holes.py)
    if (MASK) {
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = col0 + 8 * j + e;
                    if (col >= seq_k || (causal && col > row0 + 8 * h)) s[4 * j + 2 * h + e] = -INFINITY;
                }
    }
    // END EXERCISE
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        // BEGIN EXERCISE: the online-softmax step of row h (base 2): the row max of this tile (the quad's 4
        //   threads share a row), the new running max m_new of s c, p = 2^(s c - m_new) in place of s, the
        //   factor alpha = 2^(m_old - m_new) that rescales the running sum l[h] and this row's O registers
        // HINT: flash.py's online softmax, per tile: what was summed under the old max m is worth
        //   2^(m_old - m_new) as much under the new one, in the row sum l AND in the accumulated O = sum p v;
        //   a row whose max changes between key tiles shows a missing rescale. A row that has seen only
        //   masked keys has m_new = -inf: shift by 0 then (-inf - -inf is NaN).
        // HINT: the max of the row's 32 scores in s (s[4j + 2h], s[4j + 2h + 1]), two __shfl_xor_sync (1, 2);
        //   m_new = max(m[h], mx c) (c > 0); ex2 for alpha and for every p (fmaf(s, c, -shift)); l and m;
        //   then o[4j + 2h] and o[4j + 2h + 1], j < D / 8, times alpha.
        // HINT: `const float alpha = ex2(m[h] - shift);` then `o[4 * j + 2 * h] *= alpha;` (both columns)
        // STUB: #define HOLE_OPEN 1  // delete once this hole is filled: nothing is built while one is left (course/holes.py)
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < 16; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        // The 4 threads of a quad (lane / 4 equal) hold the same row: reduce across them.
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
        const float m_new = fmaxf(m[h], mx * c);  // c > 0: max(s) c = max(s c)
        // A row that has seen only masked keys so far has m_new = -inf: shift by 0, so that
        // -inf - -inf (NaN) never happens; its p and alpha are then 2^-inf = 0.
        const float shift = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = ex2(m[h] - shift);
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float v = ex2(fmaf(s[4 * j + 2 * h + e], c, -shift));
                s[4 * j + 2 * h + e] = v;
                sum += v;
            }
        l[h] = l[h] * alpha + sum;  // a partial sum over this thread's columns: reduced at the end
        m[h] = m_new;
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
            o[4 * j + 2 * h] *= alpha;
            o[4 * j + 2 * h + 1] *= alpha;
        }
        // END EXERCISE
    }
}

// Pack P for the RS wgmma: k step t (keys 16t .. 16t+15) takes s[8t .. 8t+7] as
// {row, cols 2q..}, {row+8, cols 2q..}, {row, cols 8+2q..}, {row+8, cols 8+2q..}: the
// m16k16 A fragment of each warp, rounded to the input type (as the Triton kernel rounds P).
template <typename T>
__device__ __forceinline__ void ah_pack_p(const float (&s)[64], uint32_t (&p)[32])
{
#pragma unroll
    for (int i = 0; i < 32; ++i) p[i] = pack2(s[2 * i], s[2 * i + 1], T());
}

// The softmax of tile `it` (this warpgroup's rows) on the scores in s: a mask only where the tile
// runs past Sk, or (causal) crosses this warpgroup's diagonal. PACK: P packed into p in each branch
// (the default build; the overlap build packs later, after the wait for the P V that reads p).
template <typename T, int D, bool PACK>
__device__ __forceinline__ void ah_softmax_tile(int it, int wg, int lane, int row0, int m0, int seq_k, int causal,
                                                float c, float (&s)[64], float (&o)[D / 2], uint32_t (&p)[32],
                                                float (&m)[2], float (&l)[2])
{
    const int n0 = it * AH_BN;
    const int col0 = n0 + 2 * (lane % 4);
    const bool mask = n0 + AH_BN > seq_k || (causal && n0 + AH_BN - 1 > m0 + 64 * wg);
    if (mask) {
        ah_softmax<T, D, true>(s, o, m, l, c, row0, col0, seq_k, causal);
        if (PACK) ah_pack_p<T>(s, p);
    } else {
        ah_softmax<T, D, false>(s, o, m, l, c, row0, col0, seq_k, causal);
        if (PACK) ah_pack_p<T>(s, p);
    }
}

// One GEMM phase of a consumer warpgroup and the softmax after it (the header's ping-pong):
// wait for the data, take the turn, issue S = Q K^T of tile `it` (HAS_S) and O += P V of tile it - 1
// (HAS_PV), hand the turn over, wait for the results, free the slots, softmax of tile it.
template <typename T, int D, bool HAS_S, bool HAS_PV>
// `ring`: the key tiles this block put through the ring before this work tile (0 but in the persistent
// build, whose slots and phases run on across work tiles); `more`: another work tile follows (persistent).
__device__ __forceinline__ void ah_phase(int it, int n_tiles, int wg, int lane, int row0, int m0, int seq_k,
                                         int causal, float c, float (&s)[64], float (&o)[D / 2], uint32_t (&p)[32],
                                         float (&m)[2], float (&l)[2], uint32_t q_base, unsigned char* k_slots,
                                         unsigned char* v_slots, uint64_t* full_k, uint64_t* full_v,
                                         uint64_t* empty_k, uint64_t* empty_v, int ring, bool more)
{
    constexpr int TILE = AhShape<D>::TILE_BYTES;
    constexpr bool OVERLAP = AH_INTRA_OVERLAP && HAS_S && HAS_PV;  // the first and last phases have one GEMM
    const uint32_t my_turn = 1 + wg, their_turn = 2 - wg;  // named barrier ids (0 is __syncthreads')
    const int r = ring + it;  // tile it's place in the ring (S reads slot r, P V slot r - 1)
    const int s_slot = r % AH_STAGES, pv_slot = (r + AH_STAGES - 1) % AH_STAGES;
    if (HAS_S) mbar_wait(&full_k[s_slot], (r / AH_STAGES) & 1);
    if (HAS_PV) mbar_wait(&full_v[pv_slot], ((r - 1) / AH_STAGES) & 1);

    if (AH_PINGPONG) bar_sync(my_turn, 256);  // the tensor cores are ours until we arrive on the other's
    // The registers the wgmmas read or write (o rescaled, p packed) were last written by ordinary
    // instructions: the fence orders those writes before the asynchronous reads.
    wgmma_fence();
    if (HAS_S) {
        const uint32_t k_base = smem_addr(k_slots + s_slot * TILE);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            // k step kk: slab kk / 4, 32 bytes (16 elements) per step inside the 128-byte rows;
            // K-major with the 128-byte swizzle: SBO = 8 rows x 128 bytes, LBO unused.
            const uint32_t off = (kk / 4) * AH_SLAB_BYTES + (kk % 4) * 32;
            wgmma_ss<128, T, WGMMA_B_K_MAJOR>(s, smem_desc(q_base + off, 16, 1024), smem_desc(k_base + off, 16, 1024),
                                              kk > 0);
        }
    }
    if (OVERLAP) wgmma_commit();  // S in a group of its own: wait<1> below waits for it alone
    if (HAS_PV) {
        const uint32_t v_base = smem_addr(v_slots + pv_slot * TILE);
#pragma unroll
        for (int t = 0; t < AH_BN / 16; ++t) {
            // V is MN-major for this GEMM (head dim contiguous): 16 keys = 16 rows of 128 bytes
            // further; SBO = 8 key rows (1024 bytes), LBO = the next 64-column slab (D = 128).
            const uint32_t a[4] = {p[4 * t], p[4 * t + 1], p[4 * t + 2], p[4 * t + 3]};
            wgmma_rs<D, T, WGMMA_B_MN_MAJOR>(o, a, smem_desc(v_base + t * 16 * 128, AH_SLAB_BYTES, 1024));
        }
    }
    wgmma_commit();
    // Hand the turn over, except warpgroup 2 after its last phase of its last work tile (the header: no
    // barrier left half-arrived); with a work tile to follow, warpgroup 1's next first phase is the turn's.
    if (AH_PINGPONG && (HAS_S || wg == 0 || more)) bar_arrive(their_turn, 256);
    if (!OVERLAP) {  // the default build, and the overlap build's first and last phases (one GEMM each)
        // BEGIN EXERCISE: wait for this phase's wgmmas (S and O are in registers only then: fence them), then
        //   give the K slot of tile it (HAS_S) and the V slot of tile it - 1 (HAS_PV) back to the producer
        // HINT: wgmma is asynchronous: after the commit the tensor cores may still be reading the slots.
        //   A slot is free only once every wgmma that reads it has COMPLETED; released earlier, the producer's
        //   next TMA copy can overwrite K or V under a running wgmma (a race: wrong, different results run
        //   to run). The empty barriers count 8 arrivals: one per consumer warp of both warpgroups.
        // HINT: wgmma_wait<0>() (every committed group done), fence_regs on s and o (the compiler must
        //   not touch them before), then lane 0 of each warp arrives on empty_k[s_slot] (if HAS_S) and on
        //   empty_v[pv_slot] (if HAS_PV).
        // HINT: the order is the point: `wgmma_wait<0>();` first, `mbar_arrive(&empty_k[s_slot]);` after
        // STUB: #define HOLE_OPEN 1  // delete once this hole is filled: nothing is built while one is left (course/holes.py)
        // STUB: __trap();  // not implemented yet: the consumer never frees a ring slot (the producer would wait forever)
        wgmma_wait<0>();
        fence_regs(s);
        fence_regs(o);
        // Both GEMMs have read their slots: give them back to the producer (one arrive per warp).
        if (lane == 0) {
            if (HAS_S) mbar_arrive(&empty_k[s_slot]);
            if (HAS_PV) mbar_arrive(&empty_v[pv_slot]);
        }
        // END EXERCISE
        if (HAS_S) ah_softmax_tile<T, D, true>(it, wg, lane, row0, m0, seq_k, causal, c, s, o, p, m, l);
        return;
    }
    // BEGIN EXERCISE: (the last stage, the overlap build only: overlap=True; the default build never
    //   comes here) end a middle phase with the intra-warpgroup overlap: wait for S alone, release its
    //   K slot, run this tile's softmax while P V still runs, then wait for P V, release its V slot,
    //   rescale O and pack P
    // HINT: S and P V were committed as two groups, S first: wgmma's wait_group N waits until at most
    //   N groups are pending, so waiting with 1 leaves P V running. Until P V's group is done it still
    //   reads p and writes o: the softmax must touch neither, so it rescales a stand-in of ones (the
    //   factors alpha) instead of O, and P is packed only after the second wait.
    // HINT: wait<1>, fence s, lane 0 arrives on empty_k[s_slot]; an alpha[D / 2] of 1.0f, then
    //   ah_softmax_tile<T, D, false> with alpha where the default passes o; wait<0>, fence o and s,
    //   lane 0 arrives on empty_v[pv_slot]; o[i] *= alpha[i] for every i, then ah_pack_p<T>(s, p).
    // HINT: `wgmma_wait<1>();` then `ah_softmax_tile<T, D, false>(it, wg, lane, row0, m0, seq_k,
    //   causal, c, s, alpha, p, m, l);` then `wgmma_wait<0>();`: the tests of
    //   tests/week4/test_attention_hopper_forward_protocol.py plant the orders that race
    // STUB: #define HOLE_OPEN 1  // delete once this hole is filled: nothing is built while one is left (course/holes.py)
    // STUB: __trap();  // not implemented yet: the overlap build's phase end (the default build is unaffected)
    // S (the older group) is waited alone, its softmax runs while the P V group still reads p and
    // writes o. Neither is touched before wait<0>: the softmax rescales a stand-in of ones instead
    // of O (1 * alpha folds to alpha: two registers, not D / 2), and P is packed only after the wait.
    wgmma_wait<1>();
    fence_regs(s);
    if (lane == 0) mbar_arrive(&empty_k[s_slot]);  // S = Q K^T has read its K slot
    float alpha[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) alpha[i] = 1.0f;
    ah_softmax_tile<T, D, false>(it, wg, lane, row0, m0, seq_k, causal, c, s, alpha, p, m, l);
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(s);  // the pack below reads s: fenced here, it cannot move above the wait
    if (lane == 0) mbar_arrive(&empty_v[pv_slot]);  // P V has read its V slot
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] *= alpha[i];
    ah_pack_p<T>(s, p);
    // END EXERCISE
}
// Work tile `tile` -> (batch * head, first query row, key tiles to visit). Head-major: consecutive tiles
// are the query tiles of one (batch, head), so the ~132 blocks in flight share the K and V of a few heads,
// which stay in L2 (a head's K and V at S = 1k, D = 128 are 512 KB) and are read from DRAM about once (the
// head fastest read them once per query tile: memory-bound at S = 1k on an H100). Within a head, causal
// tiles run longest first (the last query tiles), so the short ones fill the tail.
// `keys`: the keys of the tile's head (AhKeys: Sk, or its batch's key_lengths entry).
__device__ __forceinline__ void ah_key_tiles(int m0, int keys, int causal, int& n_tiles)
{
    // Key tiles to visit: up to the last key, or (causal) up to the one holding the tile's last row's key; one
    // (all masked) for a head with no key, so that every phase of the protocol still runs once.
    const int last_key = causal ? min(keys - 1, m0 + AH_BM - 1) : keys - 1;
    n_tiles = max(last_key, 0) / AH_BN + 1;
}
__device__ __forceinline__ void ah_work(unsigned tile, int m_tiles, const AhKeys& key_count, int causal, int& bh,
                                        int& m0, int& n_tiles, int& keys)
{
    bh = tile / m_tiles;
    const int order = tile % m_tiles;
    m0 = (causal ? m_tiles - 1 - order : order) * AH_BM;
    keys = key_count.of(bh);
    ah_key_tiles(m0, keys, causal, n_tiles);
}

#include "attention_hopper_producer.cuh"  // ah_zero_rows, ah_produce: the producer thread's copies

// One work tile of a consumer warpgroup wg (0 or 1: query rows m0 + 64 wg .. + 63): its GEMM phases, then
// the epilogue. `seq_k`: the keys of this tile's head (Sk, or its key_lengths entry: the mask's bound).
// `round`: work tiles before this one (full_q's parity); empty_q (persistent only, else null): where the
// warpgroup says it has done with Q; `more`: another work tile follows.
template <typename T, int D>
__device__ __forceinline__ void ah_consume(int wg, int tid, int bh, int m0, int n_tiles, int ring, int round, bool more,
                                           int seq_q, int seq_k, int causal, float c, T* __restrict__ out,
                                           float* __restrict__ lse, uint32_t q_base, unsigned char* k_slots,
                                           unsigned char* v_slots, uint64_t* full_q, uint64_t* empty_q,
                                           uint64_t* full_k, uint64_t* full_v, uint64_t* empty_k, uint64_t* empty_v)
{
    const int warp = tid / 32, lane = tid % 32;
    const int row0 = m0 + 64 * wg + 16 * warp + lane / 4;  // this thread's rows: row0, row0 + 8
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    float s[64];
    uint32_t p[32];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    mbar_wait(full_q, round & 1);
    if (AH_PINGPONG && wg == 1 && round == 0) bar_arrive(1, 256);  // warpgroup 1 (wg 0) takes the first turn

    // Phase it issues S of tile it (it < n_tiles) and P V of tile it - 1 (it >= 1), then runs the
    // softmax of tile it. Phase 0 and phase n_tiles are peeled off the loop: wgmmas under a runtime
    // condition make ptxas serialise them (its C7520 warning), so each call below is unconditional.
    ah_phase<T, D, true, false>(0, n_tiles, wg, lane, row0, m0, seq_k, causal, c, s, o, p, m, l, q_base,
                                k_slots, v_slots, full_k, full_v, empty_k, empty_v, ring, more);
    for (int it = 1; it < n_tiles; ++it)
        ah_phase<T, D, true, true>(it, n_tiles, wg, lane, row0, m0, seq_k, causal, c, s, o, p, m, l, q_base,
                                   k_slots, v_slots, full_k, full_v, empty_k, empty_v, ring, more);
    // Every S = Q K^T of this tile has completed (each phase waited for it): Q's slot is free for the next
    // work tile's, loaded while this warpgroup runs its last P V and its epilogue (one arrive per warp).
    if (empty_q != nullptr && lane == 0) mbar_arrive(empty_q);
    ah_phase<T, D, false, true>(n_tiles, n_tiles, wg, lane, row0, m0, seq_k, causal, c, s, o, p, m, l, q_base,
                                k_slots, v_slots, full_k, full_v, empty_k, empty_v, ring, more);

    // ---- epilogue: O / l and lse, straight from the registers ----
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = l[h];
        sum += __shfl_xor_sync(0xffffffff, sum, 1);
        sum += __shfl_xor_sync(0xffffffff, sum, 2);
        const int row = row0 + 8 * h;
        if (row >= seq_q) continue;
        // A head with keys sees key 0 in every row (top-left causal), so sum > 0 unless NaN got in; a head with
        // none (key_lengths 0) has o = 0 and sum = 0: zeros, and lse = log2(0) = -inf, as SDPA.
        const float inv = seq_k > 0 ? 1.0f / sum : 0.0f;
        T* dst = out + ((size_t)bh * seq_q + row) * D + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
            *reinterpret_cast<uint32_t*>(dst + 8 * j) = pack2(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv, T());
        if (lane % 4 == 0) lse[(size_t)bh * seq_q + row] = (m[h] + lg2(sum)) * 0.6931471805599453f;
    }
}

// Persistent: block b's work tile in round k is k G + b (G = gridDim.x), or, causal and k odd, k G + G - 1 - b:
// a block that had a long tile gets a short one next. Striding alone gives block b the query tiles b, b + G,
// ... mod m_tiles: at S = 1k causal (m_tiles = 8, G = 132) half the blocks would do twice the others' work.
__device__ __forceinline__ int ah_round_tile(int round, int causal)
{
    return round * (int)gridDim.x + ((causal && (round & 1)) ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x);
}
#endif
#if AH_DYNAMIC_TILES
#include "attention_hopper_dynamic.cuh"  // the dynamic scheduler: its counters, ah_dyn_work, ah_draw, ah_post, ah_take
#endif

// Block b runs work tile b (ah_work); the persistent build's blocks walk them (ah_round_tile).
template <typename T, int D>
__global__ void __launch_bounds__(AH_THREADS, 1)
attention_hopper_fwd(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                     const __grid_constant__ CUtensorMap map_v, T* __restrict__ out, float* __restrict__ lse,
                     int bh_count, int seq_q, int seq_k, float c, int causal, AhKeys key_count
#if AH_DYNAMIC_TILES
                     , int counter_slot  // which of ah_tile_counters (one per stream): zero at launch, left at zero
#endif
                     )
{
#if AH_HOPPER
    using Shape = AhShape<D>;
    extern __shared__ unsigned char ah_raw[];
    __shared__ __align__(8) uint64_t full_q;
    __shared__ __align__(8) uint64_t full_k[AH_STAGES], full_v[AH_STAGES];
    __shared__ __align__(8) uint64_t empty_k[AH_STAGES], empty_v[AH_STAGES];
    __shared__ __align__(8) uint64_t staging;  // a last V tile with padding keys lands here before its zeros
    unsigned char* base = ah_raw + ((1024 - (smem_addr(ah_raw) & 1023)) & 1023);
    unsigned char* q_tile = base;
    unsigned char* k_slots = base + Shape::TILE_BYTES;
    unsigned char* v_slots = k_slots + AH_STAGES * Shape::TILE_BYTES;
    const int m_tiles = (seq_q + AH_BM - 1) / AH_BM;
    int bh, m0, n_tiles, keys;
#if AH_PERSISTENT
    __shared__ __align__(8) uint64_t empty_q;  // both consumers have done with Q: the next tile's may come
    const int tiles = m_tiles * bh_count;
#if AH_DYNAMIC_TILES
    __shared__ int mailbox;  // the round's work tile, from the producer to the consumers (ah_post, ah_take)
    int* tile_counter = &ah_tile_counters[counter_slot];
    const int heads = ah_section_heads(D, seq_k, bh_count);
#endif
#else
    ah_work(blockIdx.x, m_tiles, key_count, causal, bh, m0, n_tiles, keys);
#endif

    if (threadIdx.x == 0) {
        mbar_init(&full_q, 1);
        mbar_init(&staging, 1);  // the producer's arrive.expect_tx (+ the bytes)
        for (int s = 0; s < AH_STAGES; ++s) {
            mbar_init(&full_k[s], 1);   // the producer's arrive.expect_tx (+ the bytes)
            mbar_init(&full_v[s], 1);
            mbar_init(&empty_k[s], 8);  // one arrive per consumer warp (2 warpgroups x 4)
            mbar_init(&empty_v[s], 8);
        }
#if AH_PERSISTENT
        mbar_init(&empty_q, 8);
#endif
        fence_mbarrier_init();  // visible to the TMA
    }
    __syncthreads();  // the last block-wide barrier: from here the roles never meet again

    const int warpgroup = threadIdx.x / 128;
    if (warpgroup == 0) {
        // ---- producer ----
        setmaxnreg_dec<AH_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int staged = 0;  // V tiles landed through `staging` so far (its phase parity)
#if AH_DYNAMIC_TILES
            // Round 0 runs tile blockIdx.x; each later round's tile is drawn once the loads of the last are issued.
            for (int round = 0, ring = 0, tile = blockIdx.x;; ++round, tile = ah_draw(tile_counter, tiles)) {
#elif AH_PERSISTENT
            for (int round = 0, ring = 0, tile; (tile = ah_round_tile(round, causal)) < tiles; ++round) {
                ah_work(tile, m_tiles, key_count, causal, bh, m0, n_tiles, keys);
#endif
#if AH_PERSISTENT
                // BEGIN EXERCISE: (the persistent build only: persistent=True) before this work tile's Q goes into
                //   the one Q slot, wait until both consumers have done with the previous tile's Q
                // HINT: one Q slot serves every work tile of the block: the TMA copy of the next tile's Q must not
                //   land while a wgmma of the previous tile still reads it (both warpgroups' last S = Q K^T).
                //   The consumers say so on empty_q (8 arrivals, lane 0 of each warp) once per work tile.
                // HINT: round r > 0 waits for the completion of empty_q's phase r - 1: mbar_wait with the
                //   parity of that phase (the first tile has no previous Q to wait for).
                // STUB: #define HOLE_OPEN 1  // delete once this hole is filled: nothing is built while one is left (course/holes.py)
                // STUB: __trap();  // not implemented yet: the persistent build's producer (the default build is unaffected)
                if (round > 0) mbar_wait(&empty_q, (round - 1) & 1);
                // END EXERCISE
#if AH_DYNAMIC_TILES
                if (ah_post(tile, tiles, &mailbox, &full_q)) break;  // past the end: the consumers are told, no Q
                ah_dyn_work(tile, m_tiles, bh_count, heads, key_count, causal, bh, m0, n_tiles, keys);
#endif
                ah_produce<D>(&map_q, &map_k, &map_v, bh, m0, n_tiles, ring, keys, seq_k, staged, q_tile, k_slots,
                              v_slots, &full_q, full_k, full_v, empty_k, empty_v, &staging);
                ring += n_tiles;
            }
#else
            ah_produce<D>(&map_q, &map_k, &map_v, bh, m0, n_tiles, 0, keys, seq_k, staged, q_tile, k_slots, v_slots,
                          &full_q, full_k, full_v, empty_k, empty_v, &staging);
#endif
        }
    } else {
        // ---- consumers: warpgroup wg (0 or 1) owns query rows m0 + 64 wg .. + 63 ----
        setmaxnreg_inc<AH_CONSUMER_REGS>();
        const int wg = warpgroup - 1;
        const uint32_t q_base = smem_addr(q_tile) + wg * 64 * 128;  // 64 rows x 128 bytes into each slab
#if AH_DYNAMIC_TILES
        // The tile comes with Q (ah_take); whether another follows is not known yet: `more` is always true, and
        // warpgroup 1 takes warpgroup 2's last hand-over once told to leave (round > 0: the block ran a tile).
        int round = 0;
        for (int ring = 0, tile; (tile = ah_take(round, &mailbox, &full_q)) < tiles; ++round) {
            ah_dyn_work(tile, m_tiles, bh_count, heads, key_count, causal, bh, m0, n_tiles, keys);
            const bool more = true;
#elif AH_PERSISTENT
        for (int round = 0, ring = 0, tile; (tile = ah_round_tile(round, causal)) < tiles; ++round) {
            ah_work(tile, m_tiles, key_count, causal, bh, m0, n_tiles, keys);
            const bool more = ah_round_tile(round + 1, causal) < tiles;
#endif
#if AH_PERSISTENT
            ah_consume<T, D>(wg, threadIdx.x % 128, bh, m0, n_tiles, ring, round, more, seq_q, keys, causal, c, out,
                             lse, q_base, k_slots, v_slots, &full_q, &empty_q, full_k, full_v, empty_k, empty_v);
            ring += n_tiles;
        }
#if AH_DYNAMIC_TILES
        if (AH_PINGPONG && wg == 0 && round > 0) bar_sync(1, 256);  // warpgroup 2's last hand-over (the .cuh)
#endif
#else
        ah_consume<T, D>(wg, threadIdx.x % 128, bh, m0, n_tiles, 0, 0, false, seq_q, keys, causal, c, out, lse,
                         q_base, k_slots, v_slots, &full_q, nullptr, full_k, full_v, empty_k, empty_v);
#endif
    }
#else
    __trap();  // not compiled for sm_90a: the launcher refuses every other GPU before launching
#endif
}

// ---- host side: tensor maps, the grid and the launch (attention_hopper_forward_cuda, which hopper.py's
// binding calls) in their own file
#include "attention_hopper_host.cuh"
