"""The persistent kernel's ring protocol, checked without a GPU: a model of its producer, consumers,
mbarriers, TMA copies and wgmmas, run under many random interleavings.

What a first GPU run of kernels/matmul_wgmma_persistent.cu could hit is a hang (a wait for a phase
parity that never comes) or a race (a stage refilled while a wgmma still reads it, in this block or,
with a cluster, in the peer whose multicast writes into it). Both depend on the order in which
independent agents move, which one GPU run samples once. Here every agent is a small state machine
that follows the kernel's rules line by line (the ring position `it` counted across tiles, the parity
formulas, release of stage it - 1 after wgmma.wait_group 1, the tile's last stage after wait_group 0,
arrivals on the peer's empty barrier); the TMA copies and wgmma groups complete at random later steps.
The mbarrier is modelled as the PTX ISA defines it: a phase completes when its pending arrivals and
its transaction count are both zero, and `try_wait.parity p` succeeds while the current phase's parity
is not p. `test_the_model_follows_the_source` ties the model's formulas to the source text.

The ping-pong schedule (kernels/matmul_wgmma_pingpong.cu: PINGPONG = true) is modelled too: each
consumer takes every other tile, skips the other's ring positions, releases stages alone (4 arrivals
per phase), and waits for its turn at the mainloop; the model shows that without the turns a
consumer can pass a full-barrier wait one phase early (its parity aliases the pending phase's).
"""
import random
import re

import pytest

from course import runtime
from tests.mbarrier_model import Barrier, run_agents

wp = runtime.lesson("week1_cuda_python.matmul_wgmma_persistent")


def kernel_code(text: str | None = None) -> str:
    """kernels/matmul_wgmma_persistent.cu (or `text`) without its whole-line comments: the lines below must be
    the kernel's code, not a hint's quotation of it (the exercise's hints quote some of them)."""
    text = wp.PERSISTENT_SOURCE.read_text() if text is None else text
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))



STAGES = wp.PERSISTENT_TILES.stages
CONSUMERS, WARPS = wp.PERSISTENT_TILES.consumers, 4



def simulate(k_tiles, units, cluster, seed, release_early=False, producer_parity=-1, tile_end_release=True,
             pingpong=False, turns=True, empty_count=None, races=None):
    """Run the model to the end; AssertionError on a race, RuntimeError on a hang. `k_tiles`: k steps per unit, or
    (split-K: kernels/matmul_wgmma_split_k.cu) a tuple of them, one per unit in the persistent loop's order. `pingpong`: the
    ping-pong schedule (cluster 1); `turns=False`: without its turn barriers (the wrong variant);
    `empty_count`: the empty barriers' arrival count, if not the kernel's; `races`: a list to which each
    race is appended instead of raised (the run goes on, to see whether it also hangs)."""
    assert not pingpong or cluster == 1, "the kernel has no ping-pong with clusters"
    counts = list(k_tiles) if isinstance(k_tiles, tuple) else [k_tiles] * units  # k steps of each unit
    assert len(counts) == units and not (pingpong and isinstance(k_tiles, tuple)), "split-K: cooperative only"
    rng = random.Random(seed)

    def check(ok, message):
        if not ok:
            if races is None:
                raise AssertionError(message)
            races.append(message)
    blocks = range(cluster)
    readers = 1 if pingpong else CONSUMERS  # consumer warpgroups that read (and release) each stage
    full = [[Barrier(1) for _ in range(STAGES)] for _ in blocks]
    empty = [[Barrier(empty_count or WARPS * readers * cluster) for _ in range(STAGES)] for _ in blocks]
    turn = [[Barrier(1) for _ in range(CONSUMERS)] for _ in blocks]  # ping-pong: consumer c may start a mainloop
    # content[b][s][half]: which ring position the bytes in that half of block b's stage s belong to
    # (half 0: A and this block's share of B; half h of a cluster: block h's multicast share of B).
    content = [[[None] * cluster for _ in range(STAGES)] for _ in blocks]
    reading = [[0] * STAGES for _ in blocks]  # wgmma groups issued on a stage and not yet finished
    events = []  # pending asynchronous completions: the TMA copies landing, the wgmma groups finishing
    positions = sum(counts)

    def state():
        return [(bar.phase, bar.pending, bar.tx) for row in full + empty for bar in row]

    def producer(b):
        for it in range(positions):
            s = it % STAGES
            if it >= STAGES:
                while not empty[b][s].ready(((it // STAGES) + producer_parity) & 1):
                    yield
            full[b][s].arrive(tx=cluster)  # one unit of bytes per half: A + own B share, the peer's share
            for dst in blocks:  # the copy (multicast to every block of the cluster) may write from now on
                check(reading[dst][s] == 0, f"stage {s} of block {dst} refilled while a wgmma reads it")
                def land(dst=dst, s=s, it=it, src=b):
                    check(reading[dst][s] == 0, f"stage {s} of block {dst} refilled while a wgmma reads it")
                    content[dst][s][src] = it
                    full[dst][s].complete_tx(1)
                if dst == b or cluster > 1:
                    events.append(land)

    def consumer(b, c):
        groups = []  # this warpgroup's committed, unfinished wgmma groups: (stage, position)
        it = c * k_tiles if pingpong else 0  # ping-pong: the block's tile c is this one's first
        mine = 0  # ping-pong: this consumer's tiles so far
        for unit in (range(c, units, 2) if pingpong else range(units)):
            if pingpong and turns and mine + c > 0:  # the other consumer's arrival number mine + c
                while not turn[b][c].ready((mine - 1 + c) & 1):
                    yield
            for kt in range(counts[unit]):  # kt: the unit's k steps from its first (the kernel's kt - kt_begin)
                s = it % STAGES
                while not full[b][s].ready((it // STAGES) & 1):
                    yield
                check(content[b][s] == [it] * cluster, f"block {b} reads stage {s} before position {it} landed")
                reading[b][s] += 1
                groups.append((s, it))

                def finish(b=b, s=s, it=it, groups=groups):
                    check(content[b][s] == [it] * cluster, f"stage {s} of block {b} changed under its wgmma")
                    reading[b][s] -= 1
                    groups.remove((s, it))
                events.append(finish)
                if release_early:  # the known-wrong fixture's bug: release this stage, no wait
                    for peer in blocks:
                        for _ in range(WARPS):
                            empty[peer][s].arrive()
                    it += 1
                    continue
                # wgmma.wait_group 1: every group but the most recent one is complete (groups may
                # finish in any order in the model; the wait is about which, not how many)
                while any(g != (s, it) for g in groups):
                    yield
                if kt > 0:
                    for peer in blocks:  # own empty barrier, and the peer's (its copies write here too)
                        for _ in range(WARPS):
                            empty[peer][(it - 1) % STAGES].arrive()
                it += 1
            if pingpong:  # every full wait of the tile passed: the other consumer's turn
                turn[b][c ^ 1].arrive()
            while groups:  # wgmma.wait_group 0
                yield
            if not release_early and tile_end_release:
                for peer in blocks:
                    for _ in range(WARPS):
                        empty[peer][(it - 1) % STAGES].arrive()
            if pingpong:  # skip the other consumer's tile
                it += k_tiles
                mine += 1

    agents = [producer(b) for b in blocks] + [consumer(b, c) for b in blocks for c in range(CONSUMERS)]
    run_agents(agents, events, rng, state)  # a step that moves no barrier, nothing in flight: toward a hang


CASES = [(k, units, cluster) for k in (1, 2, 3, 5, 6) for units in (1, 3, 7) for cluster in (1, 2)]


@pytest.mark.parametrize("k_tiles, units, cluster", CASES, ids=lambda v: str(v))
def test_no_hang_and_no_stage_reused_too_early(k_tiles, units, cluster):
    """Every ring position lands before it is read and is not overwritten while read, and everything
    finishes, over many interleavings; k steps per tile not a multiple of the stages (3, 5, 6) make
    the ring's position at a tile's start land on every stage."""
    for seed in range(12):
        simulate(k_tiles, units, cluster, seed)


# The kernel's lines the model copies (the ring's parities, counts and releases; the full barrier counts
# every byte the copies deliver, as the model's stages land whole).
RING_LINES = ("if (it >= WP_STAGES) mbar_wait(&empty[s], ((it / WP_STAGES) - 1) & 1);",
              "mbar_wait(&full[s], (it / WP_STAGES) & 1);",
              "mbar_arrive_expect_tx(&full[s], bytes);",
              "mbar_init(&full[s], 1);",
              "mbar_init(&empty[s], 4 * WP_CONSUMERS * CLUSTER / (PINGPONG ? 2 : 1));",
              "wgmma_wait<1>();\n                if (kt > kt_begin && lane == 0) {\n"
              "                    mbar_arrive(&empty[(it - 1) % WP_STAGES]);\n"
              "                    if (CLUSTER > 1) mbar_arrive_remote(&empty[(it - 1) % WP_STAGES], rank ^ 1);",
              "wgmma_wait<0>();\n            if (lane == 0) {  // the tile's last stage\n"
              "                mbar_arrive(&empty[(it - 1) % WP_STAGES]);")


# Split-K's units: 2 x 2 tiles in ranges of 6, 6 and 4 k steps (16 k tiles, 3 ranges; unit = range * tiles +
# tile), and 18 tiles in 2 ranges of 19 and 18; on 1, 3 and 5 blocks' worth of units walked by one block here.
SPLIT_K_UNITS = [(6,) * 4 + (6,) * 4 + (4,) * 4, (19,) * 6 + (18,) * 6, (1, 1, 1, 2, 2, 2)]


@pytest.mark.parametrize("counts", SPLIT_K_UNITS, ids=lambda c: f"{len(c)}units")
def test_split_k_units_of_uneven_ranges(counts):
    """Units whose k steps differ (the last range shorter): the ring position runs on over them, so every stage
    is waited on at the right parity and released once, with no hang, over many interleavings."""
    for seed in range(12):
        simulate(counts, len(counts), 1, seed)


@pytest.mark.parametrize("cluster", [1, 2])
def test_the_model_sees_a_stage_released_before_its_wgmmas_finish(cluster):
    """The known-wrong kernel `stage_released_before_its_wgmmas_finish` (tests/week1/wrong/), in the
    model: some interleaving refills a stage under a running wgmma."""
    with pytest.raises(AssertionError, match="refilled while a wgmma reads it|changed under its wgmma"):
        for seed in range(200):
            simulate(5, 3, cluster, seed, release_early=True)


def test_the_model_follows_the_source():
    """The formulas the model uses are the kernel's (if these lines change, change the model)."""
    wp.refuse_open_hole()  # the stub (--impl=exercises) with a hole open: 'not implemented yet'
    source = kernel_code()
    for line in RING_LINES:
        assert line in source, f"the kernel no longer has `{line[:60]}...`: update the model"
    # One ring position per k step, counted across the block's units, in both roles; a unit's k steps are its
    # range's (split-K) or all of K, the same in both roles.
    assert len(re.findall(r"for \(int kt = kt_begin; kt < kt_end; \+\+kt, \+\+it\)", source)) == 2
    assert source.count("const int kt_begin = SPLIT_K ? unit / tile_units * per_split : 0;") == 2
    assert source.count("const int kt_end = SPLIT_K ? min(kt_begin + per_split, k_tiles) : k_tiles;") == 2


@pytest.mark.parametrize("cluster", [1, 2])
def test_the_model_sees_a_wrong_parity_and_a_missing_release(cluster):
    """The model is not blind: the producer waiting for parity (it / STAGES) & 1 (the phase not yet due)
    refills a stage early; consumers that never release a tile's last stage hang the producer."""
    with pytest.raises(AssertionError, match="refilled while a wgmma reads it|before position|changed under|phase overrun"):
        for seed in range(200):
            simulate(5, 3, cluster, seed, producer_parity=0)
    with pytest.raises(RuntimeError, match="no progress"):
        simulate(5, 3, cluster, 0, tile_end_release=False)


# --- the ping-pong schedule (PINGPONG = true) --------------------------------------------------------

@pytest.mark.parametrize("k_tiles, units", [(k, units) for k in (1, 2, 3, 5, 6, 12) for units in (1, 2, 3, 7)],
                         ids=lambda v: str(v))
def test_pingpong_no_hang_and_no_stage_reused_too_early(k_tiles, units):
    """Consumers on alternate tiles, skipping each other's ring positions, releasing stages alone and
    taking turns at the mainloop: every position lands before it is read, none is refilled under a
    wgmma, nothing hangs; 12 k steps is the capstone's K = 768, 1 and 2 fewer than the stages."""
    for seed in range(12):
        simulate(k_tiles, units, 1, seed, pingpong=True)


def test_pingpong_without_turns_reads_a_stage_one_phase_early():
    """Why the turn barriers: without them a consumer back from its epilogue can wait on a stage whose
    full barrier is one phase behind (the other consumer's tile not loaded yet) and pass at once."""
    with pytest.raises(AssertionError, match="before position"):
        for seed in range(400):
            simulate(5, 7, 1, seed, pingpong=True, turns=False)


def test_pingpong_without_turns_mostly_hangs():
    """What the GPU run of that known-wrong kernel meets (tests/week1/wrong: its must-fail run printed no
    verdict in 240 s): past the stale read, a consumer's releases land on the other's phases, and most
    interleavings end waiting for a phase that never completes (or overrun one). So the fixture declares
    hang_s: its test run is cut and a hang counts as rejected."""
    hangs = 0
    for seed in range(60):
        try:
            simulate(12, 9, 1, seed, pingpong=True, turns=False, races=[])  # the capstone's 12 k steps
        except RuntimeError:
            hangs += 1
        except AssertionError as error:
            assert "arrival on a phase" in str(error)  # an overrun: the mbarrier's count exceeded
    assert hangs > 30


def test_pingpong_model_sees_an_early_release_and_a_wrong_count():
    """The model is not blind in ping-pong either: a stage released before its wgmmas finish is
    refilled under one; a cooperative empty count (8 arrivals) with one warpgroup releasing hangs."""
    with pytest.raises(AssertionError, match="refilled while a wgmma reads it|changed under its wgmma"):
        for seed in range(200):
            simulate(5, 3, 1, seed, release_early=True, pingpong=True)
    with pytest.raises(RuntimeError, match="no progress"):
        simulate(5, 3, 1, 0, pingpong=True, empty_count=WARPS * CONSUMERS)


def test_the_pingpong_model_follows_the_source():
    """The ping-pong lines the model copies (if these change, change the model)."""
    wp.refuse_open_hole()  # the stub (--impl=exercises) with a hole open: 'not implemented yet'
    source = kernel_code()
    for line in PINGPONG_LINES:
        assert line in source, f"the kernel no longer has `{line[:60]}...`: update the model"


PINGPONG_LINES = ("mbar_init(&empty[s], 4 * WP_CONSUMERS * CLUSTER / (PINGPONG ? 2 : 1));",
                  "if (PINGPONG) { mbar_init(&turn[0], 1); mbar_init(&turn[1], 1); }",
                  "uint32_t it = PINGPONG ? c * k_tiles : 0;",
                  "for (int unit = first_unit + (PINGPONG ? c * unit_stride : 0); unit < units;\n"
                  "             unit += (PINGPONG ? 2 : 1) * unit_stride) {",
                  "if (PINGPONG && mine + c > 0) mbar_wait(&turn[c], (mine - 1 + c) & 1);",
                  "if (PINGPONG && tid == 0) mbar_arrive(&turn[c ^ 1]);\n            wgmma_wait<0>();",
                  "if (PINGPONG) { it += k_tiles; ++mine; }")


# --- the epilogue's layout: registers -> swizzled shared memory -> what the TMA store reads ---------

def tma_swizzle_128b(row: int, byte: int) -> int:
    """Where the TMA (CU_TENSOR_MAP_SWIZZLE_128B, box rows of 128 bytes, buffer 1024-byte aligned)
    expects byte `byte` of box row `row`: its 16-byte chunk XORed with the row's index within 8 rows."""
    return row * 128 + (((byte // 16) ^ (row % 8)) * 16) + byte % 16


SWIZZLE_LINE = "const uint32_t offset = r * 128 + ((jj ^ (r & 7)) << 4) + 4 * (lane % 4);"


def test_epilogue_writes_every_element_of_a_chunk_where_the_tma_store_reads_it():
    """The kernel's shared-memory offset for the pair of columns a thread holds (the wgmma accumulator
    layout: warp w, lane l hold rows 16 w + l / 4 + 8 h and columns 8 j + 2 (l % 4) + {0, 1}) is the
    TMA's swizzled place of that pair, and the 128 threads x 8 x 2 pairs cover the 8 KB chunk once."""
    wp.refuse_open_hole()  # the stub (--impl=exercises) with a hole open: 'not implemented yet'
    assert SWIZZLE_LINE in kernel_code(), "the epilogue's offset changed: update this test's copy of it"
    seen = set()
    for warp in range(4):
        for lane in range(32):
            for jj in range(8):
                for h in range(2):
                    r = warp * 16 + lane // 4 + 8 * h
                    offset = r * 128 + ((jj ^ (r & 7)) << 4) + 4 * (lane % 4)
                    col = 8 * jj + 2 * (lane % 4)  # the pair's first column within the 64-column chunk
                    assert offset == tma_swizzle_128b(r, 2 * col), (warp, lane, jj, h)
                    seen.add(offset)
    assert seen == set(range(0, 64 * 128, 4)), "some 4-byte pair of the chunk is written twice or never"


# The epilogue's store buffers: which one a chunk takes, and the wait that frees it.
STORE_TURN_LINES = ("const int turn_q = CHUNKS % WP_C_BUFFERS == 0 ? q : (int)((chunks_done + q) % WP_C_BUFFERS);",
                    "unsigned char* buf = my_bufs + (turn_q % WP_C_BUFFERS) * WP_C_BYTES;",
                    "if (tid == 0) bulk_wait_read<WP_C_BUFFERS - 1>();", "chunks_done += CHUNKS;")


@pytest.mark.parametrize("width, swiglu", [(256, False), (256, True), (192, False), (128, False), (128, True)])
def test_store_buffers_take_turns_across_tiles(width, swiglu):
    """Before writing a chunk into a buffer, a consumer waits until at most one of its stores still reads
    shared memory (bulk_wait_read<WP_C_BUFFERS - 1>): the buffer is free only if the chunk just before used
    the other one, across tile boundaries too. With 3 chunks a tile (width 192) or 1 (SwiGLU at 128),
    restarting the turn at each tile would give a tile's first chunk the buffer the last one is still
    stored from; the kernel's turn runs on (`chunks_done`), and for an even count is q's parity (the
    256-wide build's code unchanged)."""
    wp.refuse_open_hole()  # the stub (--impl=exercises) with a hole open: 'not implemented yet'
    code = kernel_code()
    assert all(line in code for line in STORE_TURN_LINES), "the store buffers' turn changed: update this test"
    buffers, chunks = wp.PERSISTENT_TILES.c_buffers, (width // 2 if swiglu else width) // 64
    used, chunks_done = [], 0
    for _tile in range(5):
        for q in range(chunks):
            turn_q = q if chunks % buffers == 0 else (chunks_done + q) % buffers
            used.append(turn_q % buffers)
        chunks_done += chunks
    assert all(a != b for a, b in zip(used, used[1:])), used


SWIGLU_LINE = "v0 = wp_swiglu(v0, d[4 * (j + TILE_OUT / 8) + 2 * h]);"


@pytest.mark.parametrize("width", [256, 128])  # the widths SwiGLU builds at (matmul_wgmma_fused.SWIGLU_WIDTHS)
def test_swiglu_partner_registers_hold_the_matching_up_column(width):
    """With gate rows in the first half of the B stage's slabs and up rows in the second, accumulator
    column t < TILE_OUT (= width / 2) is gate column f0 + t and column t + TILE_OUT its up partner:
    registers 4 j + 2 h + e and 4 (j + TILE_OUT / 8) + 2 h + e of the same thread (the layout repeats
    every 8 columns, so j + TILE_OUT / 8 is TILE_OUT columns further: 16 and 128 at 256, 8 and 64 at 128)."""
    wp.refuse_open_hole()  # the stub (--impl=exercises) with a hole open: 'not implemented yet'
    assert SWIGLU_LINE in kernel_code()
    tile_out = width // 2
    column = lambda reg, lane: 8 * (reg // 4) + 2 * (lane % 4) + reg % 2  # noqa: E731
    row = lambda reg, lane, warp: warp * 16 + lane // 4 + 8 * ((reg // 2) % 2)  # noqa: E731
    for lane in range(32):
        for j in range(tile_out // 8):
            for h in range(2):
                for e in range(2):
                    gate, up = 4 * j + 2 * h + e, 4 * (j + tile_out // 8) + 2 * h + e
                    assert up < width // 2  # inside the thread's accumulators (width / 2 of them)
                    assert column(up, lane) == column(gate, lane) + tile_out and row(up, lane, 0) == row(gate, lane, 0)


# A unit's first wgmma starts its sums from zero (scale-d 0) at the unit's first k step, kt_begin: with split-K a unit
# of range r > 0 starts at kt = r * per_split, and an `accumulate = kt > 0` would add its sums to the registers the
# previous unit left (the known-wrong kernel split_k_range_adds_the_previous_units_sums).
ACCUMULATE_LINE = "wgmma_ss<WP_BN, T, B_TRANS, A_TRANS>(d, desc_a, desc_b, kt > kt_begin || kk > 0);"


def test_a_units_first_wgmma_starts_from_zero():
    """The consumer's accumulate flag is relative to the unit's first k step, the same kt_begin its k loop starts
    at: the model's units (kt counted from each unit's first) are the kernel's."""
    wp.refuse_open_hole()  # the stub (--impl=exercises) with a hole open: 'not implemented yet'
    code = kernel_code()
    assert code.count(ACCUMULATE_LINE) == 1
    assert code.index("for (int kt = kt_begin; kt < kt_end; ++kt, ++it) {\n                const uint32_t s = it % "
                      "WP_STAGES;\n                mbar_wait(&full[s]") < code.index(ACCUMULATE_LINE)


# The tile order's lines (test_matmul_wgmma_persistent.py checks them against persistent_tile).
TILE_ORDER_LINES = ("const int rows = min(tiles_m - first_m, group_m);", "tile_m = first_m + in_group % rows;",
                    "tile_n = in_group / rows;")


def _kernel_fixtures():
    from classroom.must_fail import load_fixtures
    return [f for f in load_fixtures() if f.solution.name == "matmul_wgmma_persistent.cu"]


@pytest.mark.parametrize("fixture", _kernel_fixtures(), ids=lambda f: f.wrong.name)
def test_known_wrong_kernels_break_a_line_the_cpu_tests_check(fixture):
    """Each known-wrong kernel (tests/week1/wrong/matmul_wgmma_persistent.py; the GPU tests must reject it)
    loses one of the lines the model and the layout tests above copy, so a CPU run already points at it."""
    from classroom.must_fail import wrong_source
    code = kernel_code(wrong_source(fixture))
    lines = (*RING_LINES, *PINGPONG_LINES, SWIZZLE_LINE, SWIGLU_LINE, *TILE_ORDER_LINES, ACCUMULATE_LINE)
    assert any(line not in code for line in lines), f"{fixture.wrong.name}: no CPU check sees it"
