"""The persistent Hopper attention forward's protocol (-DAH_PERSISTENT=1), checked without a GPU: a block that
runs several work tiles in a row, modelled under many random interleavings.

Why: the persistent build (kernels/attention_hopper_forward.cu, its header's "The persistent build") keeps one
Q slot for every work tile of a block and lets the producer load the next tile's Q, K and V while the consumers
still run the last P V and the epilogue of the previous one. Four things must hold across work tiles, and a GPU
shows a mistake in any of them as a hang or as wrong numbers now and then:
* Q: the producer's copy of the next Q must not land while an S = Q K^T of the previous tile still reads the
  slot. The consumers arrive on the `empty_q` mbarrier (4 arrivals per warpgroup) once their last S of a tile
  has completed; the producer waits for that phase before the next Q.
* the K/V ring: its slots and phases run on across tiles (`ring`: the key tiles so far), never reset, in the
  producer and in both consumers alike, also when the tiles have different numbers of key tiles (causal).
* the ping-pong: warpgroup 2 gives warpgroup 1 the first turn once per block, and hands the turn over after its
  last phase of every tile but the block's last, so every bar.sync meets one bar.arrive, none is left half-arrived.
* padding keys (key_lengths, the header's "Padding keys"): a tile whose last key tile holds padding keys inside
  Sk has that V copy land on `staging`, an mbarrier only the producer waits on, then has the copy engine write
  zeros over the padding rows, counted on full_v: the consumers wait on full_v as always and must never see the
  garbage.
  `staged`, staging's phase count, runs on across the block's tiles as the ring does.

The model (tests/week4/test_attention_hopper_forward_protocol.py models one tile's registers and wgmma groups
in detail; this one models the slots): per work tile of n key tiles, the phases it = 0 .. n of each consumer
warpgroup: wait full_k / full_v at ring position ring + it, take the turn, issue S (reads Q and a K slot) and
P V (reads a V slot) as wgmma groups that complete at a random later step, hand the turn over, wait
(wait_group 0; the overlap build: wait_group 1 for S, release K, then wait_group 0, release V), release the
slots; after the tile's last phase with S, the Q release; then its last P V and the epilogue. A slot refilled
under its reader, a tile read before it landed (or the wrong tile read), a barrier arrived on too often or left
half-arrived is an AssertionError; no progress is a RuntimeError (a hang on the GPU). `padded` (the rounds
whose last V tile is staged): the producer's copy lands on `staging`, it waits for its own parity, then the
zeros' copy lands on full_v (a copy landing under a reading wgmma is an AssertionError); that tile's P V must
read the zeroed slot (tests/mbarrier_model.SmemSlots.staged_v). Each planted mistake (WRONG) must be caught;
`test_the_model_follows_the_source` ties the model to the source.
"""
import random

import pytest

from tests.mbarrier_model import Barrier, NamedBarrier, SmemSlots, WgmmaGroups, run_agents
from week4_triton_dl.attention import hopper as hp
from week4_triton_dl.attention.persistent_balance import balance, key_tiles, walk

STAGES, WARPGROUPS, WARPS, BM = 2, 2, 4, 128  # AH_STAGES; consumer warpgroups; warps each; AH_BM (= AH_BN)
WRONG = {
    # the producer reloads Q without waiting for empty_q: the copy lands under the previous tile's S
    "no_q_empty_wait": "Q slot . refilled while a wgmma reads it|S of tile . read Q of tile",
    # the consumers release Q right after issuing their last S, before waiting for it
    "q_released_before_s_wait": "Q slot . refilled while a wgmma reads it|S of tile . read Q of tile",
    # the consumers restart the ring at slot 0 and phase 0 on each tile (the producer runs on)
    "ring_reset_per_tile": "read before tile|reads tile|no progress",
    # warpgroup 2 skips its last hand-over on every tile (the one-tile rule) and gives no first turn again
    "no_handover_between_tiles": "no progress",
    # warpgroup 2 gives the first turn on every tile as well as handing over between tiles: two arrivals of
    # its own complete a generation of barrier 1 that warpgroup 1 never syncs on
    "first_turn_every_tile": "overrun|half-arrived|no progress",
    # padding keys: the producer lands the last V tile on full_v with its bytes, as any tile, and copies the zeros
    # once that phase completes: the consumers may read the garbage, or the zeros land under them
    "v_arrive_before_zeroing": "read before tile .* landed|refilled while a wgmma reads it",
    # the zeros' copy issued right after the tile's, without the wait on `staging`: two copies into one slot in
    # flight at once, and the tile may land over the zeros
    "zeros_before_the_tile_landed": "read before tile .* landed|refilled while a wgmma reads it|no progress",
    # the producer waits on `staging` with parity 0 every time (its count restarting per tile): on the second
    # padded tile the wait passes at once and the zeros go in before the copy, which may land over them
    "staging_parity_reset": "read before tile .* landed|refilled while a wgmma reads it|no progress",
}






def simulate(work, seed, order="default", overlap=False, padded=()):
    """One block running the work tiles `work` (their numbers of key tiles, in the block's order) to the end;
    `padded`: the rounds whose last V tile is staged and zeroed (padding keys inside Sk).
    order: "default" or a key of WRONG. AssertionError on a race, RuntimeError on a hang."""
    rng = random.Random(seed)
    full_q, empty_q = Barrier(1), Barrier(WARPGROUPS * WARPS)
    full = {kind: [Barrier(1) for _ in range(STAGES)] for kind in "KV"}
    empty = {kind: [Barrier(WARPGROUPS * WARPS) for _ in range(STAGES)] for kind in "KV"}
    turns = [NamedBarrier(), NamedBarrier()]
    staging = Barrier(1)  # the producer's arrive.expect_tx (+ the bytes)
    events = []
    slots = SmemSlots(STAGES, events)  # Q holds its work tile's round, K and V (round, key tile)
    load = slots.load

    def staged_v(s, r, tile, staged):
        if order == "v_arrive_before_zeroing":
            load("V", s, tile, full["V"][s])
            yield
            while not full["V"][s].ready((r // STAGES) & 1):  # the copy has landed: now the zeros
                yield
            load("V", s, (*tile, "zeroed"), staging)  # counted where nobody waits: full_v's phase is over
            return
        if order == "zeros_before_the_tile_landed":
            load("V", s, tile, staging)
            load("V", s, (*tile, "zeroed"), full["V"][s])
            return
        parity = 0 if order == "staging_parity_reset" else staged & 1
        yield from slots.staged_v(s, tile, staging, parity, full["V"][s])

    def producer():
        ring, staged = 0, 0  # staged: the V tiles landed through `staging` so far, never reset
        for round_, n in enumerate(work):
            if round_ > 0 and order != "no_q_empty_wait":
                while not empty_q.ready((round_ - 1) & 1):
                    yield
            load("Q", 0, round_, full_q)
            yield
            for it in range(n):
                r = ring + it
                s = r % STAGES
                for kind in "KV":
                    if r >= STAGES:
                        while not empty[kind][s].ready(((r // STAGES) - 1) & 1):
                            yield
                    if kind == "V" and it == n - 1 and round_ in padded:
                        yield from staged_v(s, r, (round_, it), staged)
                        staged += 1
                    else:
                        load(kind, s, (round_, it), full[kind][s])
                    yield
            ring += n

    def consumer(wg):
        wgmma = WgmmaGroups(slots)
        read, commit, wait_group = wgmma.read, wgmma.commit, wgmma.wait

        def release(barrier):
            for _ in range(WARPS):  # lane 0 of each warp
                barrier.arrive()

        ring = 0
        for round_, n in enumerate(work):
            more = round_ + 1 < len(work)
            base = 0 if order == "ring_reset_per_tile" else ring
            while not full_q.ready(round_ & 1):
                yield
            if wg == 1 and (round_ == 0 or order == "first_turn_every_tile"):
                turns[0].arrive()  # warpgroup 1 takes the first turn
            for it in range(n + 1):
                has_s, has_pv = it < n, it >= 1
                r = base + it
                if it == n and order != "q_released_before_s_wait":
                    release(empty_q)  # after the tile's last phase with S: every S has completed, Q is free
                for kind, pos, wanted in (("K", r, has_s), ("V", r - 1, has_pv)):
                    while wanted and not full[kind][pos % STAGES].ready((pos // STAGES) & 1):
                        yield
                yield from turns[wg].sync()
                if has_s:
                    read("Q", 0, round_)
                    read("K", r % STAGES, (round_, it))
                if has_s and has_pv and overlap:
                    commit()  # S in a group of its own
                if has_pv:  # a padded tile's last V: what the producer zeroed
                    zeroed = ("zeroed",) if it == n and round_ in padded else ()
                    read("V", (r - 1) % STAGES, (round_, it - 1, *zeroed))
                commit()
                if has_s and it == n - 1 and order == "q_released_before_s_wait":
                    release(empty_q)
                if has_s or wg == 0 or (more and order != "no_handover_between_tiles"):
                    turns[1 - wg].arrive()
                yield
                if has_s and has_pv and overlap:
                    yield from wait_group(1)
                    release(empty["K"][r % STAGES])
                    yield
                yield from wait_group(0)
                if has_s and not (has_pv and overlap):
                    release(empty["K"][r % STAGES])
                if has_pv:
                    release(empty["V"][(r - 1) % STAGES])
                yield  # the softmax
            yield  # the epilogue: O and lse from the registers, no shared memory
            ring += n

    agents = [producer()] + [consumer(wg) for wg in range(WARPGROUPS)]
    run_agents(agents, events, rng)
    assert all(t.arrived == 0 for t in turns), "a named barrier is left half-arrived at exit"
    assert staging.pending == 1 and staging.tx == 0, "a staged V copy is still in flight at exit"


# Work tiles per block: one tile (the non-persistent case), equal tiles, and causal-like tiles of different
# lengths (longest first, or a short one before a long one: a block's walk alternates direction).
WORKS = [[1], [3], [1, 1], [2, 2, 2], [4, 1], [1, 4], [3, 1, 2, 5], [2, 1, 1, 3, 1]]
# Padding keys (the rounds whose last V tile is staged): one tile (the non-persistent kernel), every round, some
# rounds (a padded tile next to unpadded ones), one-key-tile rounds (the staged tile is also the first: its K and
# V go in back to back), and ring positions of both parities for the staged slot.
PADDED = [([1], {0}), ([3], {0}), ([1, 1], {0, 1}), ([2, 2, 2], {0, 2}), ([4, 1], {1}), ([1, 4], {0, 1}),
          ([3, 1, 2, 5], {0, 1, 3}), ([2, 1, 1, 3, 1], {1, 2, 4})]


def _ids(case):
    if isinstance(case, list):
        return "-".join(map(str, case))
    return "padded" + "".join(map(str, sorted(case))) if case else "unpadded"


@pytest.mark.parametrize("overlap", [False, True], ids=["default", "overlap"])
@pytest.mark.parametrize("work, padded", [(w, set()) for w in WORKS] + PADDED, ids=_ids)
def test_no_hang_no_race_across_work_tiles(work, padded, overlap):
    """Every Q, K and V lands before it is read and is not refilled under its reader, each wgmma reads its
    own work tile's data (a padded tile's last V zeroed), and the block finishes with no named barrier
    half-arrived and no staged copy in flight."""
    for seed in range(40):
        simulate(work, seed, overlap=overlap, padded=padded)


@pytest.mark.parametrize("order, message", list(WRONG.items()), ids=list(WRONG))
def test_the_model_catches_each_planted_mistake(order, message):
    with pytest.raises((AssertionError, RuntimeError), match=message):
        for seed in range(300):
            for work, padded in (([2, 3], ()), ([3, 1, 2], {0, 2}), ([1, 1, 1], {0, 1, 2})):
                simulate(work, seed, order, padded=padded)


def test_without_the_q_empty_wait_one_tile_is_still_fine():
    """The planted bug needs a second work tile to show: the non-persistent kernel has no Q to protect."""
    for seed in range(50):
        simulate([3], seed, "no_q_empty_wait")


def test_a_staging_parity_reset_needs_a_second_padded_tile_to_show():
    """Parity 0 is right for the block's first staged tile: the non-persistent kernel (one tile, `staged` = 0)
    cannot show the bug, nor a block with one padded tile; the persistent one, with a second, does (above)."""
    for seed in range(50):
        simulate([3], seed, "staging_parity_reset", padded={0})
        simulate([2, 3, 1], seed, "staging_parity_reset", padded={1})


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_only_a_work_tiles_last_key_tile_holds_padding_keys(causal):
    """Why the model stages one V tile per work tile, and only when ah_produce's rows [zero_from, zero_to) are
    not empty: ah_key_tiles' key tiles (mirrored) end at the head's last key, so every padding key inside Sk that
    a visited tile holds lies in the last one, in those rows (keys past Sk: the TMA's zeros)."""
    for seq_k in (1, 100, 128, 129, 300, 512):
        for keys in range(seq_k + 1):
            for m0 in range(0, seq_k + BM, BM) if causal else (0,):
                last_key = min(keys - 1, m0 + BM - 1) if causal else keys - 1
                n_tiles = max(last_key, 0) // BM + 1
                n_last = (n_tiles - 1) * BM
                zero_from, zero_to = max(keys - n_last, 0), min(BM, seq_k - n_last)
                padding = [k for k in range(min(n_tiles * BM, seq_k)) if k >= keys]
                assert all(k >= n_last for k in padding), (seq_k, keys, m0)  # never in an earlier tile
                assert padding == [n_last + row for row in range(zero_from, zero_to)], (seq_k, keys, m0)


# --- the static scheduler: ah_round_tile and ah_work, mirrored ------------------------------------------------

@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("tiles, grid", [(1, 1), (7, 7), (5, 132), (132, 132), (133, 132), (2048, 132),
                                         (4096, 114), (1000, 78)])
def test_every_work_tile_runs_exactly_once(tiles, grid, causal):
    grid = min(grid, tiles)  # the launcher's grid: min(SMs, work tiles)
    seen = sorted(t for b in range(grid) for t in walk(b, grid, tiles, causal))
    assert seen == list(range(tiles))
    assert all(next(walk(b, grid, tiles, causal), None) is not None for b in range(grid)), "a block with no tile"


@pytest.mark.parametrize("bh, seq", [(256, 1024), (256, 4096), (128, 2048), (128, 512)])
def test_alternating_rounds_even_out_causal_work(bh, seq):
    """Plain striding (tile b + k G) gives block b the query tiles b, b + G, ... mod m_tiles: at S = 1k causal
    on 132 SMs half the blocks get the long tiles every time. Alternating the direction of the rounds pairs a
    long tile with a short one: the busiest block's key tiles (what sets the kernel's time) come down."""
    m_tiles, grid = seq // BM, 132
    tiles = bh * m_tiles

    def busiest(causal_order):
        return max(sum(key_tiles(t, m_tiles, seq, True) for t in walk(b, grid, tiles, causal_order))
                   for b in range(grid))
    striding, alternating = busiest(False), busiest(True)
    mean = sum(key_tiles(t, m_tiles, seq, True) for t in range(tiles)) / grid
    assert alternating < striding and alternating <= 1.1 * mean, (striding, alternating, mean)


def _between(text, start, end):
    return text[text.index(start):text.index(end, text.index(start))]


def test_the_model_follows_the_source():
    """The steps the model gives the persistent build are the kernel's (if these lines change, change the model)."""
    source = hp.KERNELS.joinpath(hp.SOURCE.name).read_text() + hp.PRODUCER_HEADER.read_text()  # ah_produce: its own file
    assert "#define AH_STAGES 2" in source and "mbar_init(&empty_q, 8);" in source
    kernel = _between(source, "attention_hopper_fwd(const __grid_constant__", "\n}\n")
    producer = _between(kernel, "#elif AH_PERSISTENT\n            for (int round = 0, ring = 0, tile;", "#else")
    steps = ["ah_work(tile, m_tiles, key_count, causal, bh, m0, n_tiles, keys);",
             "if (round > 0) mbar_wait(&empty_q, (round - 1) & 1);",
             "ah_produce<D>(&map_q, &map_k, &map_v, bh, m0, n_tiles, ring, keys, seq_k, staged,", "ring += n_tiles;"]
    at = [producer.find(text) for text in steps]
    assert -1 not in at and at == sorted(at), "the persistent producer's order is not the model's"
    # `staged` (staging's parity) is the block's: set once, before the rounds, and passed by reference
    assert kernel.count("int staged = 0;") == 1 and kernel.index("int staged = 0;") < kernel.index(producer)
    assert "mbar_init(&staging, 1);" in kernel and "int& staged" in source
    assert "(tile = ah_round_tile(round, causal)) < tiles" in kernel
    assert "return round * (int)gridDim.x + ((causal && (round & 1)) ? (int)(gridDim.x - 1 - blockIdx.x)" in source
    consumer = _between(source, "__device__ __forceinline__ void ah_consume(", "\n}\n")
    steps = ["mbar_wait(full_q, round & 1);", "if (AH_PINGPONG && wg == 1 && round == 0) bar_arrive(1, 256);",
             "ah_phase<T, D, true, false>(0,", "ah_phase<T, D, true, true>(it,",
             "if (empty_q != nullptr && lane == 0) mbar_arrive(empty_q);", "ah_phase<T, D, false, true>(n_tiles,"]
    at = [consumer.find(text) for text in steps]
    assert -1 not in at and at == sorted(at), "the persistent consumer's order is not the model's"
    phase = _between(source, "__device__ __forceinline__ void ah_phase(", "\n}\n")
    assert "const int r = ring + it;" in phase and "(r / AH_STAGES) & 1" in phase and "((r - 1) / AH_STAGES) & 1" in phase
    assert "if (AH_PINGPONG && (HAS_S || wg == 0 || more)) bar_arrive(their_turn, 256);" in phase
    produce = _between(source, "__device__ __forceinline__ void ah_produce(", "\n}\n")
    assert "const int r = ring + it;" in produce and "((r / AH_STAGES) - 1) & 1" in produce
    # the staged V tile: its copy on `staging`, the producer's wait, then the zeros' copy counted on full_v
    steps = ["const int zero_from = max(keys - n_last, 0), zero_to = min(AH_BN, seq_k - n_last);",
             "if (r >= AH_STAGES) mbar_wait(&empty_v[s], reuse_parity);",
             "const bool stage = it == n_tiles - 1 && zero_from < zero_to;",
             "uint64_t* landed = stage ? staging : &full_v[s];", "mbar_arrive_expect_tx(landed, Shape::TILE_BYTES);",
             "map_v, landed,", "if (stage) {", "mbar_wait(staging, staged & 1);", "++staged;",
             "ah_zero_rows<D>(v_slots + s * Shape::TILE_BYTES, zero_from, zero_to, &full_v[s]);"]
    at = [produce.find(text) for text in steps]
    assert -1 not in at and at == sorted(at), f"the staged V tile's order is not the model's: {list(zip(steps, at))}"
    assert "const int n_last = (n_tiles - 1) * AH_BN;" in produce
    zeros = _between(source, "__device__ __forceinline__ void ah_zero_rows(", "\n}\n")  # the zeros' bytes, on bar
    assert "mbar_arrive_expect_tx(bar, AhShape<D>::SLABS * bytes);" in zeros and "ah_zeros, bytes, bar);" in zeros
    keys = _between(source, "void ah_key_tiles(", "\n}\n")  # mirrored by the test of the last key tile
    assert "const int last_key = causal ? min(keys - 1, m0 + AH_BM - 1) : keys - 1;" in keys
    assert "n_tiles = max(last_key, 0) / AH_BN + 1;" in keys
    more = "const bool more = ah_round_tile(round + 1, causal) < tiles;"
    assert more in kernel, "the consumers' `more` is not the scheduler's next round"


def test_the_balance_record_is_what_the_scheduler_gives():
    # results/attention_hopper_persistent_balance.json (the note cites it) is regenerated, never typed
    from week4_triton_dl.attention import persistent_balance as pb
    assert pb.main(["--check"]) == 0


def test_the_static_walk_loses_its_pairing_when_the_grid_and_a_heads_tiles_do_not_line_up():
    # S = 16k: 128 query tiles a head, 132 blocks: the reversal's partner drifts 4 tiles a round
    assert balance(16, 16384)["busiest_over_mean"] > 1.5
    assert balance(256, 1024)["busiest_over_mean"] < 1.05
    with pytest.raises(ValueError, match="seq must be a positive int"):
        balance(16, 0)
