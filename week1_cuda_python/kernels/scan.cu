// Prefix sums (scans) in CUDA C, launched from week1_cuda_python/scan.py.
//
// out[i] = x[0] + ... + x[i] (inclusive) or x[0] + ... + x[i-1] (exclusive, out[0] = 0), for
// float32 and int32 (int32 wraps modulo 2^32, as torch.cumsum(x, 0, dtype=torch.int32) does).
//
// Cost model: n elements, 4n bytes read and 4n bytes written at the very least, n - 1 additions:
// memory-bound. The four rungs differ in how much extra work and traffic they pay:
//   scan_hillis_steele_*   one block, log2(n) steps of n additions each: O(n log n) work
//   scan_blelloch_*        one block (or one per tile), up-sweep + down-sweep: O(n) work
//   scan_add_offsets_*     with the one above, a multi-block scan: 16n bytes (x read once, out
//                          written, then read and written again)
//   scan_lookback_*        single pass, decoupled look-back: 8n bytes, the minimum
//
// Kernels are extern "C" (Python finds them by name); each comes in an _f32 and an _i32 flavour
// generated from one template.

// --- element arithmetic ------------------------------------------------------------------------

// Signed overflow is undefined behaviour in C++: add int32 as unsigned, which wraps modulo 2^32.
__device__ __forceinline__ float scan_add(float a, float b) { return a + b; }
__device__ __forceinline__ int scan_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }

// --- rung 1: Hillis-Steele, one block ------------------------------------------------------------

#define HILLIS_STEELE_MAX 1024  // one element per thread, at most one block of 1024 threads

// Step d adds the element 2^d places to the left. Every thread reads the old array and writes a
// new one: with a single array, thread t could read element t - offset after thread t - offset
// had already overwritten it in this same step. Two buffers and one barrier per step avoid that.
template <typename T>
__device__ void hillis_steele(const T* __restrict__ x, T* __restrict__ out, int n, int exclusive)
{
    // BEGIN EXERCISE: __shared__ T buffer[2][HILLIS_STEELE_MAX]; one element per thread (x[t - 1] when
    //   exclusive, 0 outside); log2(n) steps reading one buffer and writing the other (scan_add),
    //   __syncthreads() after each; out[t] for t < n
    // HINT: after step d each element holds the sum of the 2^d elements ending at it: log2(n) steps of one add
    //   per thread. Two buffers: no thread overwrites a value another thread still has to read.
    // HINT: `value = scan_add(buffer[current][t - offset], value)` when t >= offset, written to buffer[current ^ 1];
    //   flip `current` and __syncthreads() at the end of each step.
    __shared__ T buffer[2][HILLIS_STEELE_MAX];
    const int t = threadIdx.x;
    // An exclusive scan is the inclusive scan of x shifted right by one, with 0 shifted in.
    const int src = exclusive ? t - 1 : t;
    buffer[0][t] = (t < n && src >= 0) ? x[src] : T(0);
    __syncthreads();
    int current = 0;
    for (int offset = 1; offset < n; offset <<= 1) {
        T value = buffer[current][t];
        if (t >= offset) {
            value = scan_add(buffer[current][t - offset], value);
        }
        buffer[current ^ 1][t] = value;
        current ^= 1;
        // Everyone has finished reading the old buffer before anyone overwrites it next step.
        __syncthreads();
    }
    if (t < n) {
        out[t] = buffer[current][t];
    }
    // END EXERCISE
}

extern "C" __global__ void scan_hillis_steele_f32(const float* x, float* out, int n, int exclusive)
{
    hillis_steele<float>(x, out, n, exclusive);
}

extern "C" __global__ void scan_hillis_steele_i32(const int* x, int* out, int n, int exclusive)
{
    hillis_steele<int>(x, out, n, exclusive);
}

// --- rung 2: Blelloch (work-efficient), one tile of 2 * blockDim.x elements per block ----------

#define BLELLOCH_MAX 2048  // two elements per thread, 1024 threads
#define LOG_BANKS 5
// The tree's strided accesses (2^d apart) pile onto few of the 32 banks; one padding word
// after every 32 spreads them out (Harris, Sengupta and Owens, GPU Gems 3, ch. 39).
#define PADDED(i) ((i) + ((i) >> LOG_BANKS))

// Each block scans the tile of m = 2 * blockDim.x elements starting at blockIdx.x * m (m is a
// power of two; elements past n count as 0). The up-sweep builds partial sums in a balanced tree
// (the root is the tile's total, written to block_sums[blockIdx.x] when block_sums is not
// NULL); the down-sweep turns the tree into the exclusive scan. 2(m - 1) additions in all.
template <typename T>
__device__ void blelloch(const T* __restrict__ x, T* __restrict__ out, T* __restrict__ block_sums,
                         long long n, int exclusive)
{
    // BEGIN EXERCISE: __shared__ T tree[PADDED(BLELLOCH_MAX)]; the tile of m = 2 * blockDim.x elements at
    //   blockIdx.x * m, thread t loading elements t and t + m/2 (0 past n) into the tree at PADDED indices
    //   (keep the two values: the inclusive scan adds them back)
    // HINT: two elements per thread, m/2 apart: each of the two loads is coalesced across the warp, and
    //   PADDED spreads the tree's power-of-two strides over the shared-memory banks.
    // HINT: `const T xa = base + a < n ? x[base + a] : T(0);` with base = blockIdx.x * m (long long), a = t
    __shared__ T tree[PADDED(BLELLOCH_MAX)];
    const int t = threadIdx.x;
    const int m = 2 * blockDim.x;
    const long long base = (long long)blockIdx.x * m;
    // Thread t owns elements t and t + m/2: each of the two loads is coalesced across the warp.
    const int a = t, b = t + m / 2;
    const T xa = base + a < n ? x[base + a] : T(0);
    const T xb = base + b < n ? x[base + b] : T(0);
    tree[PADDED(a)] = xa;
    tree[PADDED(b)] = xb;
    // END EXERCISE

    // BEGIN EXERCISE: the up-sweep: log2(m) levels, `active` threads halving each level, each adding the
    //   left child into the right (stride doubling), __syncthreads() before every level; then thread 0
    //   writes the root (the tile's total) to block_sums[blockIdx.x] unless it is NULL, and sets it to 0
    // HINT: a reduction tree built in place: after level d, element stride * (2t + 2) - 1 holds the sum of
    //   its 2 * stride predecessors. Zeroing the root seeds the down-sweep with the identity.
    // HINT: `left = stride * (2 * t + 1) - 1, right = stride * (2 * t + 2) - 1;` tree[PADDED(right)] =
    //   scan_add(tree[PADDED(left)], tree[PADDED(right)])
    int stride = 1;
    for (int active = m / 2; active > 0; active >>= 1) {  // up-sweep (reduce)
        __syncthreads();
        if (t < active) {
            const int left = stride * (2 * t + 1) - 1, right = stride * (2 * t + 2) - 1;
            tree[PADDED(right)] = scan_add(tree[PADDED(left)], tree[PADDED(right)]);
        }
        stride <<= 1;
    }
    __syncthreads();
    if (t == 0) {
        if (block_sums != nullptr) {
            block_sums[blockIdx.x] = tree[PADDED(m - 1)];
        }
        tree[PADDED(m - 1)] = T(0);  // the identity at the root starts the exclusive scan
    }
    // END EXERCISE

    // BEGIN EXERCISE: the down-sweep: `active` doubling from 1, stride halving, __syncthreads() before every
    //   level: the left child takes the parent's value, the right child the parent's plus the old left;
    //   then out[base + a] and out[base + b] (guarded by n): the tree (exclusive) or tree + x (inclusive)
    // HINT: each node passes down "the sum of everything before my subtree": to the left child as is, to
    //   the right child plus the left subtree's sum. At the leaves that is the exclusive scan.
    // HINT: `const T from_left = tree[PADDED(left)]; tree[PADDED(left)] = tree[PADDED(right)];`
    for (int active = 1; active < m; active <<= 1) {  // down-sweep
        stride >>= 1;
        __syncthreads();
        if (t < active) {
            const int left = stride * (2 * t + 1) - 1, right = stride * (2 * t + 2) - 1;
            const T from_left = tree[PADDED(left)];
            tree[PADDED(left)] = tree[PADDED(right)];
            tree[PADDED(right)] = scan_add(tree[PADDED(right)], from_left);
        }
    }
    __syncthreads();
    // The tree now holds the exclusive scan; the inclusive one adds each element once more.
    if (base + a < n) {
        out[base + a] = exclusive ? tree[PADDED(a)] : scan_add(tree[PADDED(a)], xa);
    }
    if (base + b < n) {
        out[base + b] = exclusive ? tree[PADDED(b)] : scan_add(tree[PADDED(b)], xb);
    }
    // END EXERCISE
}

extern "C" __global__ void scan_blelloch_f32(const float* x, float* out, float* block_sums,
                                             long long n, int exclusive)
{
    blelloch<float>(x, out, block_sums, n, exclusive);
}

extern "C" __global__ void scan_blelloch_i32(const int* x, int* out, int* block_sums,
                                             long long n, int exclusive)
{
    blelloch<int>(x, out, block_sums, n, exclusive);
}

// --- rung 3: multi-block = Blelloch per tile, scan of the tile totals, then this -------------------

// out[i] += offsets[tile of i], the exclusive scan of the tile totals. Tile 0 adds nothing.
template <typename T>
__device__ void add_offsets(T* __restrict__ out, const T* __restrict__ offsets, long long n, int tile)
{
    // BEGIN EXERCISE: one thread per element (64-bit index): out[i] += offsets[i / tile], tile 0 adding nothing
    // HINT: after each tile was scanned on its own, element i still misses the total of every tile before its
    //   own: offsets holds exactly that (the exclusive scan of the tile totals).
    // HINT: `const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;` then, for i < n and
    //   i / tile > 0, `out[i] = scan_add(offsets[i / tile], out[i]);`
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long block = i / tile;
    if (i < n && block > 0) {
        out[i] = scan_add(offsets[block], out[i]);
    }
    // END EXERCISE
}

extern "C" __global__ void scan_add_offsets_f32(float* out, const float* offsets, long long n, int tile)
{
    add_offsets<float>(out, offsets, n, tile);
}

extern "C" __global__ void scan_add_offsets_i32(int* out, const int* offsets, long long n, int tile)
{
    add_offsets<int>(out, offsets, n, tile);
}

// --- rung 4: single pass with decoupled look-back ------------------------------------------------
//
// After Merrill and Garland, "Single-pass Parallel Prefix Scan with Decoupled Look-back"
// (NVIDIA technical report NVR-2016-002, 2016). Each block scans one tile and then needs the sum
// of everything before its tile. Instead of waiting for the previous tile's full prefix (a
// serial chain across the whole array), every tile publishes its own total (AGGREGATE) as soon
// as it knows it, and its inclusive prefix (PREFIX) once it has it. A block looks back over its
// predecessors, adding AGGREGATEs until it meets a PREFIX: the chain is short and x is read once.
//
// The tuning knobs can be set at compile time (-DLOOKBACK_THREADS=..., the --sweep does).
#ifndef LOOKBACK_THREADS
#define LOOKBACK_THREADS 256
#endif
#ifndef LOOKBACK_VECTORS
#define LOOKBACK_VECTORS 4  // 16-byte vectors (4 elements) per thread: 16 elements per thread
#endif
#define LOOKBACK_WARPS (LOOKBACK_THREADS / 32)
#define WARP_CHUNK 128  // one vector per lane: a warp covers 128 consecutive elements per load
#define WARP_ELEMENTS (WARP_CHUNK * LOOKBACK_VECTORS)
#define LOOKBACK_TILE (LOOKBACK_THREADS * LOOKBACK_VECTORS * 4)
#define FULL_MASK 0xffffffffu

// A tile's status is ONE 64-bit word: the flag in the high half, the value's bits in the low
// half. A single aligned 64-bit store is seen whole or not at all, so a reader can never see a
// flag without its value: no fence is needed between writing the value and raising the flag.
// The launcher zeroes the words (flag NOT_READY) before every launch.
#define STATUS_NOT_READY 0ull
#define STATUS_AGGREGATE 1ull
#define STATUS_PREFIX 2ull

__device__ __forceinline__ unsigned to_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ unsigned to_bits(int v) { return (unsigned)v; }
template <typename T> __device__ __forceinline__ T from_bits(unsigned bits);
template <> __device__ __forceinline__ float from_bits<float>(unsigned bits) { return __uint_as_float(bits); }
template <> __device__ __forceinline__ int from_bits<int>(unsigned bits) { return (int)bits; }

template <typename T>
__device__ __forceinline__ void publish(unsigned long long* status, long long tile,
                                        unsigned long long flag, T value)
{
    // volatile: a real 64-bit store to memory every other SM sees (L2), never kept in a register
    // or in this SM's L1.
    *(volatile unsigned long long*)(status + tile) = (flag << 32) | to_bits(value);
}

__device__ __forceinline__ unsigned long long read_status(const unsigned long long* status, long long tile)
{
    return *(const volatile unsigned long long*)(status + tile);
}

template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T value, int lane)
{
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const T left = __shfl_up_sync(FULL_MASK, value, offset);
        if (lane >= offset) {
            value = scan_add(left, value);
        }
    }
    return value;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T value)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        value = scan_add(value, __shfl_xor_sync(FULL_MASK, value, offset));
    }
    return value;
}

// Run by the 32 lanes of warp 0 of tile `tile` > 0: the sum of all tiles before it. Lane k
// watches tile (window_end - k); the window slides 32 tiles further back until some lane finds
// a PREFIX. Every predecessor took its tile number from the atomic counter before this block
// did, so it is running (or done) and will publish: the spin cannot wait forever.
template <typename T>
__device__ T look_back(const unsigned long long* status, long long tile, int lane)
{
    // BEGIN EXERCISE: lane k watches tile window_end - k (spinning while its flag is NOT_READY; before
    //   tile 0 reads as PREFIX 0); __ballot_sync finds the nearest PREFIX; the lanes up to it add their
    //   values (warp_sum) into the running prefix; no PREFIX yet: slide the window 32 tiles back
    // HINT: decoupled look-back: a tile needs the sum of all tiles before it, but only waits for the nearest
    //   one that published a PREFIX; AGGREGATEs between add their own totals (Merrill & Garland 2016).
    // HINT: per window: each lane spins on read_status(status, window_end - lane) while NOT_READY;
    //   __ballot_sync(FULL_MASK, flag == PREFIX) and __ffs give the nearest PREFIX lane; warp_sum of the
    //   values of lanes up to it.
    // HINT: `const int last = prefix_lanes ? __ffs(prefix_lanes) - 1 : 31;`
    T exclusive = T(0);
    long long window_end = tile - 1;
    while (true) {
        const long long watched = window_end - lane;
        unsigned long long word = (STATUS_PREFIX << 32) | to_bits(T(0));  // before tile 0: prefix 0
        if (watched >= 0) {
            do {
                word = read_status(status, watched);
            } while ((word >> 32) == STATUS_NOT_READY);
        }
        // Lanes are ordered nearest tile first: the first PREFIX found ends the look-back, and
        // only the lanes up to it (the AGGREGATEs between it and us, and the PREFIX) count.
        const unsigned prefix_lanes = __ballot_sync(FULL_MASK, (word >> 32) == STATUS_PREFIX);
        const int last = prefix_lanes ? __ffs(prefix_lanes) - 1 : 31;
        const T value = lane <= last ? from_bits<T>((unsigned)word) : T(0);
        exclusive = scan_add(warp_sum(value), exclusive);
        if (prefix_lanes) {
            return exclusive;
        }
        window_end -= 32;
    }
    // STUB: return T(0);
    // END EXERCISE
}

template <typename T> struct Vector4;
template <> struct Vector4<float> { typedef float4 type; };
template <> struct Vector4<int> { typedef int4 type; };

// Thread layout inside a tile: warp w owns WARP_ELEMENTS consecutive elements, loaded in
// LOOKBACK_VECTORS chunks of 128; in chunk j lane l holds elements 4l..4l+3 of the chunk. Every
// load and store is a 16-byte vector and a warp touches 512 consecutive bytes per instruction
// (coalesced), while each thread still holds runs of 4 consecutive elements it can scan alone.
template <typename T>
__device__ void scan_lookback(const T* __restrict__ x, T* __restrict__ out, long long n,
                              unsigned long long* __restrict__ status, unsigned* __restrict__ tile_counter,
                              int exclusive, int vectorize)
{
    // BEGIN EXERCISE: the block's shared words (s_tile, s_warp_totals, s_tile_prefix), lane and warp; this
    //   block's tile number: thread 0 takes it from the counter (atomicAdd on tile_counter) and shares it
    //   through s_tile (__syncthreads()); this warp's first element (warp_base) and whether the tile is
    //   full and may use vector loads (full_tile)
    // HINT: tiles are numbered in the order blocks start (an atomic counter), not by blockIdx: a block waits
    //   only on tiles that already started, so the look-back can never wait on a block that cannot run.
    // HINT: `if (threadIdx.x == 0) s_tile = atomicAdd(tile_counter, 1u);` then __syncthreads() and every thread
    //   reads s_tile; warp_base = tile * LOOKBACK_TILE + warp * WARP_ELEMENTS.
    typedef typename Vector4<T>::type V;
    __shared__ unsigned s_tile;
    __shared__ T s_warp_totals[LOOKBACK_WARPS];
    __shared__ T s_tile_prefix;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

    // Tiles are numbered in the order blocks START, not by blockIdx: the hardware may run block
    // 1000 before block 3, and block 1000 waiting on a block that cannot start would hang.
    if (threadIdx.x == 0) {
        s_tile = atomicAdd(tile_counter, 1u);
    }
    __syncthreads();
    const long long tile = s_tile;
    const long long warp_base = tile * LOOKBACK_TILE + (long long)warp * WARP_ELEMENTS;
    const bool full_tile = vectorize && (tile + 1) * LOOKBACK_TILE <= n;
    // END EXERCISE

    // BEGIN EXERCISE: the loads into v[j][0..3]: on a full tile LOOKBACK_VECTORS 16-byte vectors per lane
    //   (chunk j: lane l takes vector j * 32 + l of the warp's run), all issued before any use; else
    //   element by element, 0 past n
    // HINT: all LOOKBACK_VECTORS 16-byte loads are issued before any is used: many bytes in flight per thread,
    //   what a memory-bound kernel needs to reach full bandwidth.
    // HINT: full_tile: `const V q = x4[j * 32 + lane];` with x4 = reinterpret_cast<const V*>(x + warp_base);
    //   else element i = warp_base + j * WARP_CHUNK + 4 * lane + c, 0 past n.
    T v[LOOKBACK_VECTORS][4];
    if (full_tile) {
        const V* x4 = reinterpret_cast<const V*>(x + warp_base);
#pragma unroll
        for (int j = 0; j < LOOKBACK_VECTORS; ++j) {
            const V q = x4[j * 32 + lane];  // all loads issued before any use: bytes in flight
            v[j][0] = q.x; v[j][1] = q.y; v[j][2] = q.z; v[j][3] = q.w;
        }
    } else {  // the last, partial tile (or unaligned pointers): element loads, 0 past the end
#pragma unroll
        for (int j = 0; j < LOOKBACK_VECTORS; ++j) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const long long i = warp_base + j * WARP_CHUNK + 4 * lane + c;
                v[j][c] = i < n ? x[i] : T(0);
            }
        }
    }
    // END EXERCISE

    // Each lane sums its 4 elements per chunk; a warp scan over lanes (5 shuffles, no shared
    // memory, no barrier) gives each lane what comes before it within the chunk; the chunks of
    // a warp are chained in registers.
    // BEGIN EXERCISE: per chunk: each lane's sum of its 4 values, warp_inclusive_scan over the lanes, the
    //   lane's offset (what comes before it in the warp so far) in lane_offset[j], warp_total carried
    //   over chunks; lane 0 stores the warp's total in s_warp_totals, __syncthreads(); every thread adds
    //   the totals of the warps before its own (warp_offset) and of all (tile_total)
    // HINT: a scan in three levels: each lane's 4 values, the lanes of a warp (shuffles: no shared memory, no
    //   barrier), the warps of the tile (their totals through shared memory, one barrier).
    // HINT: the exclusive lane offset: __shfl_up_sync(FULL_MASK, inclusive, 1), 0 on lane 0; the warp's total:
    //   `__shfl_sync(FULL_MASK, inclusive, 31)`.
    T lane_offset[LOOKBACK_VECTORS];
    T warp_total = T(0);
#pragma unroll
    for (int j = 0; j < LOOKBACK_VECTORS; ++j) {
        const T lane_sum = scan_add(scan_add(v[j][0], v[j][1]), scan_add(v[j][2], v[j][3]));
        const T inclusive = warp_inclusive_scan(lane_sum, lane);
        T before = __shfl_up_sync(FULL_MASK, inclusive, 1);
        before = lane == 0 ? T(0) : before;
        lane_offset[j] = scan_add(warp_total, before);
        warp_total = scan_add(warp_total, __shfl_sync(FULL_MASK, inclusive, 31));
    }
    if (lane == 0) {
        s_warp_totals[warp] = warp_total;
    }
    __syncthreads();
    // A handful of warps: every thread adds up the totals of the warps before its own (shared
    // memory broadcasts, no conflicts) rather than paying another barrier for a scan.
    T warp_offset = T(0), tile_total = T(0);
#pragma unroll
    for (int w = 0; w < LOOKBACK_WARPS; ++w) {
        if (w == warp) {
            warp_offset = tile_total;
        }
        tile_total = scan_add(tile_total, s_warp_totals[w]);
    }
    // END EXERCISE

    // BEGIN EXERCISE: warp 0 publishes and looks back: tile 0 publishes PREFIX tile_total at once; any
    //   other tile publishes AGGREGATE tile_total first (successors need not wait), gets the sum of all
    //   tiles before it (look_back), then publishes PREFIX prefix + total; the prefix goes to
    //   s_tile_prefix for the whole block (__syncthreads())
    // HINT: publishing the AGGREGATE before looking back lets the successors go on without waiting for this
    //   tile's look-back; the PREFIX published after it ends theirs early.
    // HINT: lane 0 publishes; all 32 lanes of warp 0 call look_back<T>(status, tile, lane); lane 0 writes
    //   s_tile_prefix, then the whole block __syncthreads().
    if (warp == 0) {
        T tile_prefix = T(0);
        if (tile == 0) {
            if (lane == 0) {
                publish(status, tile, STATUS_PREFIX, tile_total);
            }
        } else {
            if (lane == 0) {  // publish our own total at once: successors need not wait for us
                publish(status, tile, STATUS_AGGREGATE, tile_total);
            }
            tile_prefix = look_back<T>(status, tile, lane);
            if (lane == 0) {
                publish(status, tile, STATUS_PREFIX, scan_add(tile_prefix, tile_total));
            }
        }
        if (lane == 0) {
            s_tile_prefix = tile_prefix;
        }
    }
    __syncthreads();
    // END EXERCISE

    // BEGIN EXERCISE: each thread's base (tile prefix + warp offset + lane offset), a serial scan of its 4
    //   values per chunk (exclusive: the running sum before each), and the stores: vectors on a full
    //   tile, element by element (i < n) otherwise
    // HINT: what comes before a thread's 4 values is the tile prefix, the warps before its own, and the lanes
    //   before it in each chunk: the serial scan of its 4 values starts from that sum.
    // HINT: per chunk j: running = thread_base + lane_offset[j]; for c: after = running + v[j][c]; v[j][c] =
    //   exclusive ? running : after; then the stores, float4-wide on a full tile.
    const T thread_base = scan_add(s_tile_prefix, warp_offset);
#pragma unroll
    for (int j = 0; j < LOOKBACK_VECTORS; ++j) {
        T running = scan_add(thread_base, lane_offset[j]);
#pragma unroll
        for (int c = 0; c < 4; ++c) {  // a serial scan of the lane's 4 elements
            const T after = scan_add(running, v[j][c]);
            v[j][c] = exclusive ? running : after;
            running = after;
        }
    }
    if (full_tile) {
        V* out4 = reinterpret_cast<V*>(out + warp_base);
#pragma unroll
        for (int j = 0; j < LOOKBACK_VECTORS; ++j) {
            V q;
            q.x = v[j][0]; q.y = v[j][1]; q.z = v[j][2]; q.w = v[j][3];
            out4[j * 32 + lane] = q;
        }
    } else {
#pragma unroll
        for (int j = 0; j < LOOKBACK_VECTORS; ++j) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const long long i = warp_base + j * WARP_CHUNK + 4 * lane + c;
                if (i < n) {
                    out[i] = v[j][c];
                }
            }
        }
    }
    // END EXERCISE
}

extern "C" __global__ void __launch_bounds__(LOOKBACK_THREADS)
scan_lookback_f32(const float* x, float* out, long long n, unsigned long long* status,
                  unsigned* tile_counter, int exclusive, int vectorize)
{
    scan_lookback<float>(x, out, n, status, tile_counter, exclusive, vectorize);
}

extern "C" __global__ void __launch_bounds__(LOOKBACK_THREADS)
scan_lookback_i32(const int* x, int* out, long long n, unsigned long long* status,
                  unsigned* tile_counter, int exclusive, int vectorize)
{
    scan_lookback<int>(x, out, n, status, tile_counter, exclusive, vectorize);
}
