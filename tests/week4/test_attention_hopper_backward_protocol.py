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

The second model (`simulate_dq`) is the dQ tile's reuse rule (AHB_DQ_TMA, the default build): each consumer
warpgroup's 4 warps store their part of the fp32 tile into one shared-memory buffer per step, and one thread
(tid 0, in warp 0) hands the whole buffer to the TMA's reduce-add, which reads it later through the async
proxy. Per step: issuer waits bulk_group.read 0 -> bar.sync -> stores -> fence.proxy.async -> bar.sync ->
issue + commit; at the end the issuer waits for the group before the CTA exits. The model drops each edge in
turn and finds the race it guards against.

Padding keys (key_lengths, the kernel's header): `border=True` is the CTA that holds a head's last key. The
producer's K / V copy lands on kv_full; after waiting for it, each consumer warpgroup zeroes its own K and V rows
from the key count on (the kernel spreads the 16-byte chunks over its 128 threads: here each warp zeroes a part),
fences the stores for the async proxy and meets its warpgroup barrier before its first wgmma, which must see
every part of its rows zeroed and fenced. A CTA whose keys are all padding leaves before any barrier: it has
no protocol to model, the source test checks that it leaves first.

`lse_in_ring=True` is the kernel racecheck flagged (lse2 and Delta copied into the stage by a 1-D bulk copy,
read by every thread with ordinary loads before the warpgroup's bar.sync): the model finds no race there
either, which is the protocol half of the verdict (the note's racecheck paragraph has the other half: which
ordering racecheck cannot see). `test_the_model_follows_the_source` ties the model to today's source.
"""
import random
import re

import pytest

from tests.mbarrier_model import Barrier, run_agents
from week4_triton_dl.attention import hopper_backward as hb

STAGES, WARPGROUPS, WARPS = 2, 2, 4  # AHB_STAGES; consumer warpgroups; warps per warpgroup



def simulate(iters, seed, lse_in_ring=False, release="after_wait", producer_parity=-1, consumer_parity=0,
             expect_all=True, border=False, pad="kernel"):
    """Run the model to the end; AssertionError on a race, RuntimeError on a hang.

    release: where lane 0 arrives on empty[s]: "after_wait" (the kernel: after wgmma.wait_group 0),
    "before_wait" (right after committing the dV / dK wgmmas), "before_reads" (right after the full wait),
    "never". expect_all=False: expect_tx covers Q and dO but not lse2 / Delta (only with lse_in_ring).
    border: the CTA zeroes its padding K / V rows; pad: "kernel", or one of PAD_MISTAKES."""
    rng = random.Random(seed)
    kv_full = Barrier(1)
    kv = [[None] * WARPS for _ in range(WARPGROUPS)]  # each warp's part of its warpgroup's K / V rows
    full = [Barrier(1) for _ in range(STAGES)]
    empty = [Barrier(WARPGROUPS * WARPS) for _ in range(STAGES)]
    parts = ("q", "do", "lse", "delta") if lse_in_ring else ("q", "do")
    content = [dict.fromkeys(parts) for _ in range(STAGES)]  # which use's bytes each part of a stage holds
    reading = [0] * STAGES  # wgmma groups issued on a stage and not yet complete
    events = []             # pending completions: copies landing, wgmma groups finishing

    def land_kv():
        for part in kv:
            part[:] = ["copied"] * WARPS  # in a border CTA: padding rows of garbage
        kv_full.complete_tx(1)

    def producer():
        kv_full.arrive(tx=1)  # K and V once, on kv_full
        events.append(land_kv)
        yield
        for it in range(iters):
            s = it % STAGES
            if it >= STAGES:
                while not empty[s].ready(((it // STAGES) + producer_parity) & 1):
                    yield
            covered = parts if expect_all else ("q", "do")
            full[s].arrive(tx=len(covered))  # mbar_arrive_expect_tx: one unit of bytes per copied part
            for part in parts:               # then the copies, which may write from now on
                def land(s=s, it=it, part=part):
                    assert reading[s] == 0, f"stage {s} refilled while a wgmma reads it"
                    content[s][part] = it
                    full[s].complete_tx(1)
                events.append(land)
            yield

    def zero_padding(g, w, sync):  # this warp's chunks of the padding rows, its fence, the warpgroup barrier
        kv[g][w] = "zeroed"
        yield
        if pad != "no_fence":
            kv[g][w] = "fenced"  # fence.proxy.async.shared::cta
            yield
        if pad != "no_sync":
            yield from sync("pad")

    def warp(g, w, sync):
        if border and pad == "before_kv_wait":
            yield from zero_padding(g, w, sync)
        while not kv_full.ready(0):
            yield
        if border and pad != "before_kv_wait":
            yield from zero_padding(g, w, sync)
        for it in range(iters):
            s = it % STAGES
            while not full[s].ready(((it // STAGES) + consumer_parity) & 1):
                yield
            if release == "before_reads":
                empty[s].arrive()
            ready = "fenced" if border else "copied"  # what the wgmmas' K / V rows (warpgroup-wide) must hold
            assert all(part == ready for part in kv[g]), f"K / V rows of warpgroup {g} read while they hold {kv[g]}"
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
    for group in range(WARPGROUPS):
        sync = bar_sync({})
        agents += [warp(group, w, sync) for w in range(WARPS)]
    run_agents(agents, events, rng)


# A border CTA's zeroing, each time without one of its edges: the warpgroup barrier (a warp's wgmma reads rows
# another warp has not zeroed yet), the fence (stores the async proxy need not see), the kv_full wait (the copy
# lands over the zeros).
PAD_MISTAKES = ("no_sync", "no_fence", "before_kv_wait")


@pytest.mark.parametrize("border", [False, True], ids=["inner", "border"])
@pytest.mark.parametrize("lse_in_ring", [False, True], ids=["today", "lse_in_ring"])
@pytest.mark.parametrize("iters", [1, 2, 3, 5, 8])
def test_no_hang_and_no_stage_reused_too_early(iters, lse_in_ring, border):
    """Every use of a stage lands before it is read, is not overwritten while read, and everything finishes,
    over many interleavings: today's kernel, and the one racecheck flagged (lse2 / Delta in the ring); in a
    border CTA (padding keys) the first wgmma sees its K / V rows landed, zeroed and fenced."""
    for seed in range(25):
        simulate(iters, seed, lse_in_ring=lse_in_ring, border=border)


@pytest.mark.parametrize("pad", PAD_MISTAKES)
def test_the_model_sees_each_dropped_edge_of_the_border_zeroing(pad):
    with pytest.raises(AssertionError, match="K / V rows of warpgroup . read while"):
        for seed in range(300):
            simulate(3, seed, border=True, pad=pad)


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
    # expect_tx without lse2 / Delta's bytes: the phase completes without them (the bytes left over then count
    # against a later phase, which may never complete: a hang is the other way it shows)
    with pytest.raises((AssertionError, RuntimeError), match="read while not|read before|overrun|no progress"):
        for seed in range(300):
            simulate(5, seed, lse_in_ring=True, expect_all=False)
    with pytest.raises(RuntimeError, match="no progress"):
        simulate(5, 0, release="never")


def _in_order(text, steps, what):
    """Each step found in `text` after the one before (a step that also occurs earlier does not count there)."""
    at = 0
    for step in steps:
        found = text.find(step, at)
        assert found != -1, f"{what}: the kernel no longer has `{step}` where the model has it: update the model"
        at = found + len(step)


def test_the_model_follows_the_source():
    """The formulas and the order the model uses are the kernel's (if these lines change, change the model);
    and every byte the ring holds is read by wgmma alone (no bulk copy, no ordinary load of the ring)."""
    source = hb.SOURCE.read_text()
    for line in ("if (it >= AHB_STAGES) mbar_wait(&empty[s], (it / AHB_STAGES - 1) & 1);",
                 "mbar_wait(&full[s], (it / AHB_STAGES) & 1);",
                 "mbar_init(&full[s], 1);", "mbar_init(&empty[s], 8);",
                 "mbar_arrive_expect_tx(&full[s], 2 * L::q_bytes);",
                 "#define AHB_STAGES 2"):
        assert line in source, f"the kernel no longer has `{line}`: update the model"
    # expect_tx = 2 * q_bytes covers exactly the copies into full[s]: one Q and one dO box per 64-column slab.
    producer = source[source.index("mbar_arrive_expect_tx(&full[s]"):source.index("} else {")]
    assert re.findall(r"tma_load_3d\(([^;]*)\);", producer) == [
        "stage + j * L::q_slab, &map_q, &full[s], j * AHB_SLAB, m0, bh",
        "stage + L::q_bytes + j * L::q_slab, &map_do, &full[s], j * AHB_SLAB, m0, bh"]
    assert "for (int j = 0; j < D / AHB_SLAB; ++j)" in producer
    consumer = source[source.index("// ---- consumers:"):]
    # A border CTA (padding keys): the kv_full wait, each warpgroup's zeroing of its own rows (a condition the
    # same for all its threads: no tid in it, so all 128 meet the barrier), the fence, the warpgroup barrier,
    # then the loop's first wgmma, which reads K.
    _in_order(consumer, ["mbar_wait(&kv_full, 0);",
                         "const int pad_from = max(keys - (n0 + 64 * c), 0), pad_to = min(64, S - (n0 + 64 * c));",
                         "if (pad_from < pad_to) {", "const int at = j * L::kv_slab + my_rows + 16 * i;",
                         "*reinterpret_cast<uint4*>(base + L::k_off + at) = make_uint4(0u, 0u, 0u, 0u);",
                         "*reinterpret_cast<uint4*>(base + L::v_off + at) = make_uint4(0u, 0u, 0u, 0u);",
                         "fence_async_smem();", "warpgroup_sync(1 + c);", "for (int it = 0; it < iters; ++it) {",
                         "wgmma_ss<64, T, WGMMA_B_K_MAJOR>(st, smem_desc(k_tile + k_step"], "the border zeroing")
    # The consumer's order in the loop: full wait, the dV / dK wgmmas, bar.sync, wait_group 0, lane 0's arrive.
    _in_order(consumer, ["for (int it = 0; it < iters; ++it) {", "mbar_wait(&full[s], (it / AHB_STAGES) & 1);",
                         "wgmma_rs<D, T, WGMMA_B_MN_MAJOR>(dk, dsa[kk], d_q)", "warpgroup_sync(1 + c);",
                         "wgmma_wait<0>();  // dV, dK done", "if (lane == 0) mbar_arrive(&empty[s]);"],
              "the consumer's release (after its last read of the stage)")
    assert source.count("mbar_arrive(&empty[s])") == 1
    # A CTA whose keys are all padding leaves before any barrier is initialised, waited on or met.
    kernel = source[source.index("ahb_main(const __grid_constant__"):]
    early = kernel[:kernel.index("return;\n    }") + len("return;")]
    assert "if ((int)blockIdx.x * AHB_BN >= keys) {" in early and "const int keys = key_count.of(blockIdx.y);" in early
    assert not re.search(r"mbar_|__syncthreads|warpgroup_sync|bar_sync|fence", early), "a barrier before the exit"
    _in_order(kernel, ["return;\n    }", "keys_here = keys;", "mbar_init(&kv_full, 1);", "__syncthreads();"],
              "the early exit")
    assert "bulk_load" not in source and not re.search(r"__shared__[^;]*\bfloat\b", source), \
        "an ordinary load of TMA-written shared memory is back: racecheck cannot see its ordering (see the note)"


# --- the dQ tile's reuse rule (AHB_DQ_TMA) ------------------------------------------------------------------

def simulate_dq(iters, seed, wait=True, fence=True, issue_barrier=True, final_wait=True):
    """One consumer warpgroup's dQ buffer over `iters` steps under a random interleaving; AssertionError on a
    race. The TMA reads each warp's part of the buffer at a random later step (the copy engine walks the
    tile; no thread orders its reads but the issuer's wait_group.read). A part holds (step, visible): the
    step whose values the warp stored, and whether the warp's fence.proxy.async has made them visible to the
    async proxy since. wait / fence / issue_barrier / final_wait=False drop: the issuer's wait_group.read 0
    before the dS barrier, each warp's fence, the barrier between the stores and the issue, the issuer's
    wait_group 0 before the CTA exits."""
    rng = random.Random(seed)
    part = [(None, False)] * WARPS  # warp w's 32 x 8 floats of the tile: (step stored, visible to the async proxy)
    unread = [0] * WARPS            # reduce-add reads of each part issued and not yet done
    events = []

    def issue(it):  # D / 32 reduce-adds + commit_group: reads of every part, at random later steps
        for w in range(WARPS):
            unread[w] += 1

            def read(w=w, it=it):
                step, visible = part[w]
                assert step == it, f"the reduce of step {it} read warp {w}'s part of step {step}"
                assert visible, f"the reduce of step {it} read warp {w}'s stores before its proxy fence"
                unread[w] -= 1
            events.append(read)

    def warp(w, sync):
        issuer = w == 0
        for it in range(iters):
            # (S^T, dP^T, the softmax, dV / dK wgmmas; dS stores)
            if issuer and wait:
                while any(unread):  # cp.async.bulk.wait_group.read 0: every issued reduce has read the tile
                    yield
            yield from sync(("ds", it))  # the dS barrier (bar.sync 1 + c, 128)
            assert unread[w] == 0, f"warp {w} overwrote its part while the reduce of an earlier step reads it"
            part[w] = (it, False)        # st.shared of the dQ values (two column blocks: two steps apart)
            yield
            if fence:
                part[w] = (it, True)     # fence.proxy.async.shared::cta
            yield
            if issue_barrier:
                yield from sync(("issue", it))
            if issuer:
                issue(it)
            yield
        if issuer and final_wait:
            while any(unread):  # cp.async.bulk.wait_group 0
                yield

    arrived = {}

    def sync(key):
        arrived[key] = arrived.get(key, 0) + 1
        while arrived[key] < WARPS:
            yield

    agents = [warp(w, sync) for w in range(WARPS)]
    while agents or events:
        if not agents:
            assert not events, "the CTA exited (its shared memory freed) while a reduce still reads it"
        kind, pick = rng.choice([("agent", a) for a in agents] + [("event", e) for e in events])
        if kind == "event":
            events.remove(pick)
            pick()
            continue
        try:
            next(pick)
        except StopIteration:
            agents.remove(pick)


@pytest.mark.parametrize("iters", [1, 2, 3, 6])
def test_dq_buffer_reuse_is_race_free(iters):
    """The kernel's rule: every reduce reads exactly its own step's fenced values, no part is overwritten
    while an issued reduce may still read it, and the CTA outlives its reduces."""
    for seed in range(60):
        simulate_dq(iters, seed)


@pytest.mark.parametrize("dropped, message", [
    ("wait", "overwrote its part while the reduce"),
    ("fence", "before its proxy fence"),
    # issued before a warp stored: the reduce reads the old part, or the warp stores under the reduce
    ("issue_barrier", "read warp .'s part of step|before its proxy fence|overwrote its part while"),
    ("final_wait", "exited .* while a reduce still reads it"),
])
def test_the_dq_model_sees_each_dropped_edge(dropped, message):
    """Each edge of the rule is needed: without the issuer's wait_group.read a warp overwrites a part an
    earlier reduce has not read; without a warp's fence the reduce reads stores the async proxy need not see;
    without the barrier before the issue the reduce may read parts the other warps have not stored yet;
    without the last wait the CTA may exit under its reduce."""
    with pytest.raises(AssertionError, match=message):
        for seed in range(300):
            simulate_dq(4, seed, **{dropped: False})


def test_the_dq_model_follows_the_source():
    """The order the model uses is the kernel's (AHB_DQ_TMA branch): wait_group.read before the dS barrier,
    the stores after it, then each thread's fence, the barrier, the issuer's reduce-adds and commit; the
    final wait_group 0 after the loop. If these lines change, change the model."""
    source = hb.SOURCE.read_text()
    order = ["if (issuer) bulk_wait_read<0>();", "warpgroup_sync(1 + c);\n\n            wgmma_wait<0>();  // dV, dK done",
             "st_shared_f2(", "fence_async_smem();\n            warpgroup_sync(1 + c);\n            if (issuer) {",
             "tma_reduce_add_3d(&map_dq", "bulk_commit();", "if (issuer) bulk_wait<0>();"]
    at = [source.find(text) for text in order]
    assert -1 not in at, f"the kernel no longer has `{order[at.index(-1)]}`: update the model"
    assert at == sorted(at), "the dQ buffer's reuse rule is no longer in the model's order"
    for text in ("bulk_wait_read<0>", "tma_reduce_add_3d(&map_dq", "bulk_commit()", "bulk_wait<0>"):
        assert source.count(text) == 1, f"{text} appears {source.count(text)} times: update the model"
