"""The Hopper attention backward's ring protocol, checked without a GPU: a model of its producer, its 8
consumer warps, the mbarriers, the TMA copies and the wgmmas, run under many random interleavings.

Why: compute-sanitizer's racecheck reported hazards between the producer's copies into a ring stage and the
consumers' reads of it (issue 33). A race there would be a stage refilled while still read (an empty-barrier
arrive too early, a wrong parity) or a stage read before its bytes landed (a wrong parity, an expect_tx that
does not cover every copied byte). Every agent here is a small state machine that follows
kernels/attention_hopper_backward.cu line by line: the producer waits empty[s] for parity (it / 2 - 1) & 1
from the third use on, arrives on full[s] with expect_tx = the bytes it copies, then issues the copies; a
consumer warp waits full[s] for parity (it / 2) & 1, its wgmmas read the stage until their group completes,
and lane 0 arrives on empty[s] after wgmma.wait_group 0 (and, before it, the warpgroup's bar.sync). Copies
land and wgmma groups finish at random later steps. The mbarrier follows the PTX ISA: a phase completes when
its pending arrivals and its transaction count are both zero; try_wait.parity p succeeds while the current
phase's parity is not p.

`lse_in_ring=True` is the kernel racecheck flagged (lse2 and Delta copied into the stage by a 1-D bulk copy,
read by every thread with ordinary loads before the warpgroup's bar.sync): the model finds no race there
either, which is the protocol half of the verdict (the note's racecheck paragraph has the other half: which
ordering racecheck cannot see). `test_the_model_follows_the_source` ties the model to today's source.
"""
import random
import re

import pytest

from week4_triton_dl.attention import hopper_backward as hb

STAGES, WARPGROUPS, WARPS = 2, 2, 4  # AHB_STAGES; consumer warpgroups; warps per warpgroup


class Barrier:
    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase, self.pending = self.phase + 1, self.count

    def arrive(self, tx=0):
        assert self.pending > 0, "an arrival on a phase that has all its arrivals: a phase overrun"
        self.pending -= 1
        self.tx += tx
        self._maybe_complete()

    def complete_tx(self, n):
        self.tx -= n
        self._maybe_complete()

    def ready(self, parity):  # mbarrier.try_wait.parity
        return (self.phase & 1) != parity


def simulate(iters, seed, lse_in_ring=False, release="after_wait", producer_parity=-1, consumer_parity=0,
             expect_all=True):
    """Run the model to the end; AssertionError on a race, RuntimeError on a hang.

    release: where lane 0 arrives on empty[s]: "after_wait" (the kernel: after wgmma.wait_group 0),
    "before_wait" (right after committing the dV / dK wgmmas), "before_reads" (right after the full wait),
    "never". expect_all=False: expect_tx covers Q and dO but not lse2 / Delta (only with lse_in_ring)."""
    rng = random.Random(seed)
    full = [Barrier(1) for _ in range(STAGES)]
    empty = [Barrier(WARPGROUPS * WARPS) for _ in range(STAGES)]
    parts = ("q", "do", "lse", "delta") if lse_in_ring else ("q", "do")
    content = [dict.fromkeys(parts) for _ in range(STAGES)]  # which use's bytes each part of a stage holds
    reading = [0] * STAGES  # wgmma groups issued on a stage and not yet complete
    events = []             # pending completions: copies landing, wgmma groups finishing

    def producer():
        for it in range(iters):
            s = it % STAGES
            if it >= STAGES:
                while not empty[s].ready(((it // STAGES) + producer_parity) & 1):
                    yield
            covered = parts if expect_all else ("q", "do")
            full[s].arrive(tx=len(covered))  # mbar_expect_tx: one unit of bytes per copied part
            for part in parts:               # then the copies, which may write from now on
                def land(s=s, it=it, part=part):
                    assert reading[s] == 0, f"stage {s} refilled while a wgmma reads it"
                    content[s][part] = it
                    full[s].complete_tx(1)
                events.append(land)
            yield

    def warp(sync):
        for it in range(iters):
            s = it % STAGES
            while not full[s].ready(((it // STAGES) + consumer_parity) & 1):
                yield
            if release == "before_reads":
                empty[s].arrive()
            yield from wgmma(s, it)  # S^T = K Q^T, dP^T = V dO^T; wgmma.wait_group 0 before the softmax
            if lse_in_ring:  # the flagged kernel's ordinary loads of lse2 and Delta (cuda.cu:247)
                for part in ("lse", "delta"):
                    assert content[s][part] == it, f"lse2 / Delta of stage {s} read while not use {it}'s"
                    yield
            # dV += P^T dO, dK += dS^T Q (committed; waited below), dS to shared memory, bar.sync
            done = yield from wgmma(s, it, wait=False)
            if release == "before_wait":
                empty[s].arrive()
            yield from sync(it)
            while not done():  # wgmma.wait_group 0
                yield
            if release == "after_wait":
                empty[s].arrive()  # lane 0 of this warp
            yield                  # dQ = dS K reads K and dS only: not the ring

    def wgmma(s, it, wait=True):
        assert content[s]["q"] == it and content[s]["do"] == it, f"stage {s} read before use {it} landed"
        reading[s] += 1
        state = {"done": False}

        def finish():
            assert content[s]["q"] == it and content[s]["do"] == it, f"stage {s} changed under its wgmma"
            reading[s] -= 1
            state["done"] = True
        events.append(finish)
        if wait:
            while not state["done"]:
                yield
        return lambda: state["done"]

    def bar_sync(arrived):  # one named barrier of 128 threads per warpgroup (bar.sync 1 + c, 128)
        def sync(it):
            arrived[it] = arrived.get(it, 0) + 1
            while arrived[it] < WARPS:
                yield
        return sync

    agents = [producer()]
    for _group in range(WARPGROUPS):
        sync = bar_sync({})
        agents += [warp(sync) for _ in range(WARPS)]
    stalled = 0
    while agents or events:
        kind, pick = rng.choice([("agent", a) for a in agents] + [("event", e) for e in events])
        if kind == "event":
            events.remove(pick)
            pick()
            stalled = 0
            continue
        try:
            next(pick)
            stalled = stalled + 1 if not events else 0
        except StopIteration:
            agents.remove(pick)
            stalled = 0
        if stalled > 200 * (len(agents) + 1):
            raise RuntimeError("no progress: the agents wait for phases that never complete (a hang on the GPU)")


@pytest.mark.parametrize("lse_in_ring", [False, True], ids=["today", "lse_in_ring"])
@pytest.mark.parametrize("iters", [1, 2, 3, 5, 8])
def test_no_hang_and_no_stage_reused_too_early(iters, lse_in_ring):
    """Every use of a stage lands before it is read, is not overwritten while read, and everything finishes,
    over many interleavings: today's kernel, and the one racecheck flagged (lse2 / Delta in the ring)."""
    for seed in range(25):
        simulate(iters, seed, lse_in_ring=lse_in_ring)


@pytest.mark.parametrize("release", ["before_wait", "before_reads"])
@pytest.mark.parametrize("lse_in_ring", [False, True], ids=["today", "lse_in_ring"])
def test_the_model_sees_an_early_release(release, lse_in_ring):
    """An empty-barrier arrive before the last reader is done (before wgmma.wait_group 0, or before any
    read): some interleaving refills the stage under its reader."""
    with pytest.raises(AssertionError, match="refilled while|changed under|read while not|read before"):
        for seed in range(300):
            simulate(5, seed, lse_in_ring=lse_in_ring, release=release)


def test_the_model_sees_wrong_parities_a_short_expect_tx_and_a_missing_release():
    with pytest.raises(AssertionError, match="refilled while|changed under|read while not|read before|overrun"):
        for seed in range(300):  # the producer waiting for a phase not yet due
            simulate(5, seed, producer_parity=0)
    with pytest.raises(AssertionError, match="read before"):
        for seed in range(300):  # the consumers waiting for the phase before the one due
            simulate(5, seed, consumer_parity=1)
    with pytest.raises(AssertionError, match="read while not|read before|overrun"):
        for seed in range(300):  # expect_tx without lse2 / Delta's bytes: the phase completes without them
            simulate(5, seed, lse_in_ring=True, expect_all=False)
    with pytest.raises(RuntimeError, match="no progress"):
        simulate(5, 0, release="never")


def test_the_model_follows_the_source():
    """The formulas and the order the model uses are the kernel's (if these lines change, change the model);
    and every byte the ring holds is read by wgmma alone (no bulk copy, no ordinary load of the ring)."""
    source = hb.SOURCE.read_text()
    for line in ("if (it >= AHB_STAGES) mbar_wait(&empty[s], (it / AHB_STAGES - 1) & 1);",
                 "mbar_wait(&full[s], (it / AHB_STAGES) & 1);",
                 "mbar_init(&full[s], 1);", "mbar_init(&empty[s], 8);",
                 "mbar_expect_tx(&full[s], 2 * L::q_bytes);",
                 "#define AHB_STAGES 2"):
        assert line in source, f"the kernel no longer has `{line}`: update the model"
    # expect_tx = 2 * q_bytes covers exactly the copies into full[s]: one Q and one dO box per 64-column slab.
    producer = source[source.index("mbar_expect_tx(&full[s]"):source.index("} else {")]
    assert re.findall(r"tma_load_3d\(([^;]*)\);", producer) == [
        "stage + j * L::q_slab, &map_q, &full[s], j * AHB_SLAB, m0, bh",
        "stage + L::q_bytes + j * L::q_slab, &map_do, &full[s], j * AHB_SLAB, m0, bh"]
    assert "for (int j = 0; j < D / AHB_SLAB; ++j)" in producer
    # The consumer's order: full wait, the dV / dK wgmmas, bar.sync, wait_group 0, then lane 0's arrive.
    order = ["mbar_wait(&full[s], (it / AHB_STAGES) & 1);", "wgmma_rs_n128(dk, dsa[kk], d_q, T())",
             "warpgroup_sync(1 + c);", "wgmma_wait<0>();  // dV, dK done", "if (lane == 0) mbar_arrive(&empty[s]);"]
    at = [source.index(text) for text in order]
    assert at == sorted(at), "the consumer's release no longer follows its last read of the stage"
    assert source.count("mbar_arrive(&empty[s])") == 1
    assert "bulk_load" not in source and not re.search(r"__shared__[^;]*\bfloat\b", source), \
        "an ordinary load of TMA-written shared memory is back: racecheck cannot see its ordering (see the note)"
