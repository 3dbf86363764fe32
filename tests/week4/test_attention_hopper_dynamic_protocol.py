"""The persistent Hopper attention forward's dynamic scheduler (-DAH_PERSISTENT=1 -DAH_DYNAMIC_TILES=1), checked
without a GPU: several blocks drawing work tiles from one global counter, modelled under many random interleavings.

Why: kernels/attention_hopper_dynamic.cuh hands the work tiles out at run time. A block's first tile is its
blockIdx.x; its producer thread then draws the next (G + atomicAdd(counter, 1)) once it has issued the loads of
the current one, waits on empty_q (the consumers have done with Q, and with the mailbox), writes the tile into a
shared-memory mailbox and arrives on full_q (with Q's bytes, or, past the end, alone). The consumers wait on full_q,
read the mailbox (lane 0 of each warp), run the tile or leave. Each block draws once past the end, so the launch's
last draw returns tiles - 1 and that block resets the counter. What a GPU would show as a hang, a tile run twice or
never (a NaN left in a poisoned output), or a wrong answer on the NEXT launch (a counter not back at zero), must
hold for every interleaving:
* every work tile runs exactly once, in one block, and that block's producer and both consumers agree on it (the
  Q and K/V each wgmma reads are the tile's own);
* every block ends (a block whose first tile is past the end, too) and leaves no named barrier half-arrived:
  warpgroup 2 hands the turn over after every tile's last phase (it cannot know the tile is its block's last),
  warpgroup 1 takes that turn once told to leave;
* the counter is back at zero when the last block ends.

The model: blocks of one producer and two consumer agents (the slots as in
test_attention_hopper_persistent_protocol.py, which models one block's ring, Q slot and ping-pong in detail), a
shared counter whose atomicAdd is one step, run together by tests/mbarrier_model.run_agents. Padding keys: the
last V tile of a `padded` work tile goes through the block's `staging` mbarrier and is zeroed by the copy engine
before full_v (SmemSlots.staged_v); `staged`, its parity, counts across the tiles the block draws. Each planted
mistake (WRONG) must be caught; `test_the_model_follows_the_source` ties the model to the kernel's lines.
"""
import random
import re

import pytest

from tests.mbarrier_model import Barrier, NamedBarrier, SmemSlots, WgmmaGroups, run_agents
from week4_triton_dl.attention import hopper as hp
from week4_triton_dl.attention.persistent_balance import dynamic_tile, list_schedule, section_heads

STAGES, WARPS = 2, 4  # AH_STAGES; warps per consumer warpgroup (lane 0 of each arrives)
WRONG = {
    # the producer posts the next tile before its empty_q wait: a consumer still on the last tile's first phases
    # has not read the mailbox yet, or (one warp of four) reads the next one
    "post_before_empty_wait": "read Q of tile|read before tile|twice|never ran|agree|no progress",
    # the consumers read the mailbox before full_q's phase completes: the last round's tile, or nothing posted yet
    "take_before_full_wait": "read Q of tile|twice|never ran|agree|no progress",
    # the first block to draw past the end resets the counter: blocks still drawing get old tiles again
    "reset_on_first_end": "twice|counter",
    # the counter is never reset: the next launch starts past the end
    "no_reset": "counter",
    # warpgroup 1 leaves without taking warpgroup 2's last hand-over
    "no_last_turn": "half-arrived",
    # warpgroup 2 skips its hand-over after a block's last tile as the static build does, guessing it from
    # the counter (another block may still draw): warpgroup 1's final bar.sync never completes
    "static_more": "no progress|half-arrived",
    # past the end the producer stops without arriving on full_q: the consumers wait forever
    "no_end_post": "no progress",
    # the producer's staging parity restarts at 0 with every tile it draws (with padded tiles only)
    "staging_parity_reset": "read before tile .* landed|refilled while a wgmma reads it|no progress",
}


def launch(costs, grid, seed, order="default", counter=None, padded=()):
    """One launch of `grid` blocks over work tiles of `costs` key tiles each (the dynamic order's), to the end;
    `padded`: the work tiles whose last V tile is staged and zeroed (padding keys inside Sk).
    Returns {block: tiles it ran}. AssertionError on a race or a broken rule, RuntimeError on a hang."""
    rng = random.Random(seed)
    tiles = len(costs)
    counter = counter if counter is not None else [0]
    events, agents, ran, checks = [], [], {}, []

    def block(b):
        full_q, empty_q = Barrier(1), Barrier(2 * WARPS)
        full = {kind: [Barrier(1) for _ in range(STAGES)] for kind in "KV"}
        empty = {kind: [Barrier(2 * WARPS) for _ in range(STAGES)] for kind in "KV"}
        turns, mailbox, staging = [NamedBarrier(), NamedBarrier()], [None], Barrier(1)
        ran[b] = {"producer": [], 0: [], 1: []}

        slots = SmemSlots(STAGES, events, where=f" of block {b}")  # Q holds its work tile, K and V (tile, key tile)
        load = slots.load

        def draw():  # atomicAdd, then (the launch's last draw) atomicExch(counter, 0): ah_draw
            drawn = counter[0]
            counter[0] += 1
            if order == "reset_on_first_end" and grid + drawn >= tiles and not checks:
                checks.append("reset")
                counter[0] = 0
            elif order not in ("no_reset", "reset_on_first_end") and drawn == tiles - 1:
                counter[0] = 0
            return grid + drawn

        def producer():
            ring, tile, round_, staged = 0, b, 0, 0  # staged: V tiles landed through `staging`, never reset
            while True:
                if order == "post_before_empty_wait":
                    mailbox[0] = tile
                if round_ > 0:
                    while not empty_q.ready((round_ - 1) & 1):
                        yield
                mailbox[0] = tile  # ah_post
                if tile >= tiles:
                    if order != "no_end_post":
                        full_q.arrive()
                    return
                ran[b]["producer"].append(tile)
                load("Q", 0, tile, full_q)
                yield
                for it in range(costs[tile]):
                    r = ring + it
                    for kind in "KV":
                        if r >= STAGES:
                            while not empty[kind][r % STAGES].ready(((r // STAGES) - 1) & 1):
                                yield
                        if kind == "V" and it == costs[tile] - 1 and tile in padded:
                            parity = 0 if order == "staging_parity_reset" else staged & 1
                            yield from slots.staged_v(r % STAGES, (tile, it), staging, parity, full["V"][r % STAGES])
                            staged += 1
                        else:
                            load(kind, r % STAGES, (tile, it), full[kind][r % STAGES])
                        yield
                ring += costs[tile]
                tile = draw()
                round_ += 1
                yield

        def consumer(wg):
            wgmma = WgmmaGroups(slots)
            read, commit = wgmma.read, wgmma.commit

            def release(barrier):
                for _ in range(WARPS):
                    barrier.arrive()

            ring, round_ = 0, 0
            while True:
                if order == "take_before_full_wait":
                    tile = mailbox[0]
                while not full_q.ready(round_ & 1):  # ah_take: the wait, then the mailbox
                    yield
                if order != "take_before_full_wait":
                    tile = mailbox[0]
                if tile is None or tile >= tiles:
                    break
                ran[b][wg].append(tile)
                n = costs[tile]
                last = order == "static_more" and grid + counter[0] >= tiles  # a guess: not what the kernel knows
                if wg == 1 and round_ == 0:
                    turns[0].arrive()
                for it in range(n + 1):
                    has_s, has_pv = it < n, it >= 1
                    r = ring + it
                    if it == n:
                        release(empty_q)
                    for kind, pos, wanted in (("K", r, has_s), ("V", r - 1, has_pv)):
                        while wanted and not full[kind][pos % STAGES].ready((pos // STAGES) & 1):
                            yield
                    yield from turns[wg].sync()
                    if has_s:
                        read("Q", 0, tile)
                        read("K", r % STAGES, (tile, it))
                    if has_pv:  # a padded tile's last V: what the producer zeroed
                        zeroed = ("zeroed",) if it == n and tile in padded else ()
                        read("V", (r - 1) % STAGES, (tile, it - 1, *zeroed))
                    commit()
                    if has_s or wg == 0 or not last:  # `more` is always true in the dynamic build
                        turns[1 - wg].arrive()
                    yield
                    yield from wgmma.wait(0)
                    if has_s:
                        release(empty["K"][r % STAGES])
                    if has_pv:
                        release(empty["V"][(r - 1) % STAGES])
                    yield
                yield  # the epilogue
                ring += n
                round_ += 1
            if wg == 0 and round_ > 0 and order != "no_last_turn":
                yield from turns[0].sync()  # warpgroup 2's last hand-over

        agents.extend([producer(), consumer(0), consumer(1)])
        checks_at_exit.append(lambda: (turns, staging))

    checks_at_exit = []
    for b in range(grid):
        block(b)
    run_agents(agents, events, rng)
    for turns, staging in (get() for get in checks_at_exit):
        assert all(t.arrived == 0 for t in turns), "a named barrier is left half-arrived at exit"
        assert staging.pending == 1 and staging.tx == 0, "a staged V copy is still in flight at exit"
    for b, got in ran.items():
        assert got["producer"] == got[0] == got[1], f"block {b}: the producer and the consumers do not agree: {got}"
    every = sorted(t for got in ran.values() for t in got["producer"])
    twice = sorted({t for t in every if every.count(t) > 1})
    assert not twice, f"work tiles run twice: {twice}"
    assert every == list(range(tiles)), f"work tiles never ran: {sorted(set(range(tiles)) - set(every))}"
    assert counter[0] == 0, f"the counter is left at {counter[0]}, not 0: the next launch would start past the end"
    return ran


def causal_costs(bh, seq, d=128):
    """The key tiles of each work tile in the dynamic order (persistent_balance.dynamic_tile, ah_dyn_work's mirror)."""
    m_tiles = -(-seq // 128)
    heads = section_heads(d, seq, bh)
    return [min(seq - 1, dynamic_tile(t, bh, m_tiles, heads, True)[1] * 128 + 127) // 128 + 1
            for t in range(bh * m_tiles)]


# (costs, grid): equal tiles, causal tiles longest first, fewer tiles than blocks, one block, one tile
CASES = [([2] * 6, 3), (causal_costs(3, 512), 4), (causal_costs(2, 384), 2), ([3, 1], 4), ([1, 2, 3], 1),
         ([2], 1), (causal_costs(1, 640), 3)]


@pytest.mark.parametrize("costs, grid", CASES, ids=lambda c: "-".join(map(str, c)) if isinstance(c, list) else f"G{c}")
def test_every_tile_once_and_the_counter_back_at_zero(costs, grid):
    for seed in range(25):
        launch(costs, grid, seed)


def test_launches_in_a_row_share_the_counter():
    """The second launch on a stream finds the counter where the first left it (zero)."""
    counter = [0]
    for seed in range(20):
        launch(causal_costs(3, 512), 4, seed, counter=counter)
        launch([1] * 5, 2, seed, counter=counter)


def test_padded_tiles_are_staged_across_the_tiles_a_block_draws():
    """Padding keys: every other work tile's last V tile staged and zeroed (a block draws padded and unpadded
    tiles in any order; its staging parity runs on across them), as the kernel's `staged` does."""
    for costs, grid in ((causal_costs(3, 512), 4), ([2] * 6, 2), ([1] * 5, 2)):
        for seed in range(25):
            launch(costs, grid, seed, padded=set(range(0, len(costs), 2)))


@pytest.mark.parametrize("order, message", list(WRONG.items()), ids=list(WRONG))
def test_the_model_catches_each_planted_mistake(order, message):
    with pytest.raises((AssertionError, RuntimeError), match=message):
        for seed in range(200):
            for costs, grid, padded in ((causal_costs(3, 512), 4, ()), ([2] * 6, 3, ()), ([3, 1], 4, ()),
                                        ([1] * 6, 2, set(range(6)))):
                launch(costs, grid, seed, order, padded=padded)


def test_the_causal_order_is_longest_first_within_a_section():
    costs = causal_costs(16, 16384)  # 4 heads a section at D = 128
    assert section_heads(128, 16384, 16) == 4
    section = 4 * 128
    for start in range(0, len(costs), section):
        part = costs[start:start + section]
        assert part == sorted(part, reverse=True) and part[:4] == [128] * 4
    assert max(list_schedule(costs, 132)) <= 1.01 * sum(costs) / 132


def _between(text, start, end):
    return text[text.index(start):text.index(end, text.index(start))]


def _in_order(text, steps, what):
    at = [text.find(step) for step in steps]
    assert -1 not in at and at == sorted(at), f"{what}'s order is not the model's: {list(zip(steps, at))}"


def test_the_model_follows_the_source():
    """The steps the model gives the dynamic build are the kernel's (if these lines change, change the model)."""
    source = hp.KERNELS.joinpath(hp.SOURCE.name).read_text() + hp.PRODUCER_HEADER.read_text()  # ah_produce: its own file
    scheduler = hp.DYNAMIC_HEADER.read_text()
    kernel = _between(source, "attention_hopper_fwd(const __grid_constant__", "\n}\n")
    producer = _between(kernel, "#if AH_DYNAMIC_TILES\n            // Round 0", "#else")
    _in_order(producer, ["for (int round = 0, ring = 0, tile = blockIdx.x;; ++round, tile = ah_draw(tile_counter, tiles))",
                         "if (round > 0) mbar_wait(&empty_q, (round - 1) & 1);",
                         "if (ah_post(tile, tiles, &mailbox, &full_q)) break;",
                         "ah_dyn_work(tile, m_tiles, bh_count, heads, key_count, causal, bh, m0, n_tiles, keys);",
                         "ah_produce<D>(&map_q, &map_k, &map_v, bh, m0, n_tiles, ring, keys, seq_k, staged,",
                         "ring += n_tiles;"], "the producer")
    # `staged` (staging's parity) is the block's, set before the rounds (the staged path itself, ah_produce, is
    # tied to the persistent model's source test)
    assert kernel.count("int staged = 0;") == 1 and kernel.index("int staged = 0;") < kernel.index(producer)
    consumer = _between(kernel, "#if AH_DYNAMIC_TILES\n        // The tile comes with Q", "#else")
    _in_order(consumer, ["int round = 0;", "(tile = ah_take(round, &mailbox, &full_q)) < tiles; ++round)",
                         "ah_dyn_work(tile, m_tiles, bh_count, heads, key_count, causal, bh, m0, n_tiles, keys);",
                         "const bool more = true;",
                         "ah_consume<T, D>(wg, threadIdx.x % 128, bh, m0, n_tiles, ring, round, more, seq_q, keys,",
                         "ring += n_tiles;",
                         "if (AH_PINGPONG && wg == 0 && round > 0) bar_sync(1, 256);"], "the consumers")
    assert "int* tile_counter = &ah_tile_counters[counter_slot];" in kernel  # this stream's counter
    _in_order(_between(scheduler, "int ah_draw(", "\n}\n"),
              ["const int drawn = atomicAdd(counter, 1);", "if (drawn == tiles - 1) atomicExch(counter, 0);",
               "return (int)gridDim.x + drawn;"], "the draw")
    _in_order(_between(scheduler, "bool ah_post(", "\n}\n"),
              ["*mailbox = tile;", "if (tile < tiles) return false;", "mbar_arrive(full_q);", "return true;"], "the post")
    _in_order(_between(scheduler, "int ah_take(", "\n}\n"),
              ["mbar_wait(full_q, round & 1);", "if (threadIdx.x % 32 == 0) tile = *mailbox;",
               "return __shfl_sync(0xffffffff, tile, 0);"], "the take")
    # ah_consume waits on full_q again (the same phase: it returns at once) and gives the first turn in round 0
    consume = _between(source, "__device__ __forceinline__ void ah_consume(", "\n}\n")
    assert "mbar_wait(full_q, round & 1);" in consume and "wg == 1 && round == 0) bar_arrive(1, 256);" in consume
    # the order persistent_balance.dynamic_tile mirrors
    work = _between(scheduler, "void ah_dyn_work(", "\n}\n")
    for line in ("const int section = tile / (heads * m_tiles), in_section = tile % (heads * m_tiles);",
                 "const int here = min(heads, bh_count - section * heads);", "const int order = in_section / here;",
                 "bh = section * heads + in_section % here;", "m0 = (m_tiles - 1 - order) * AH_BM;"):
        assert line in work, line
    assert re.search(r"#define AH_L2_SECTION_BYTES \(32 << 20\)", scheduler)
    assert "return max(1, min(bh_count, AH_L2_SECTION_BYTES / (4 * d) / seq_k));" in scheduler
