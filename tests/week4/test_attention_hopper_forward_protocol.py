"""The Hopper attention forward's protocol, checked without a GPU: a model of its producer, its two consumer
warpgroups, the K/V ring's mbarriers, the ping-pong's named barriers, the wgmma groups and the registers they
read and write, run under many random interleavings, for both builds (the default, and -DAH_INTRA_OVERLAP=1).

Why: the overlap build (kernels/attention_hopper_forward.cu, `if (OVERLAP)` in ah_phase) waits for S = Q K^T
alone (wgmma.wait_group 1), runs the softmax of tile j while the P V wgmma of tile j - 1 still reads P and
writes O, and only after wait_group 0 rescales O and packs the next P. The PTX ISA makes touching a register
of a pending wgmma undefined, and a GPU shows such a mistake as wrong numbers now and then, or not at all;
nobody has run the build on a GPU yet. So every step the kernel orders is modelled here, and the model must
catch each wrong order planted in it.

The model, per phase `it` of a warpgroup (ah_phase: S of tile it when it < n, P V of tile it - 1 when it >= 1):
wait full_k / full_v; bar.sync on its turn (ping-pong); issue S and P V (one commit group in the default
build; two, S first, in the overlap build); bar.arrive on the other's turn (warpgroup 2 skips it after its
last phase); then the waits, the slot releases (4 arrivals per warpgroup: lane 0 of each warp), the softmax,
the O rescale and the pack of P, in the build's order. A wgmma group completes at a random later step,
groups of one warpgroup in order; wait_group N waits until at most N are pending. Registers carry what they
hold: s ("S", t) then ("P", t) after the softmax, p ("P", t) once packed, O the last tile accumulated and
the last tile's alpha applied; an ordinary instruction on a register a pending group reads or writes is an
AssertionError, as is a slot refilled under its reader, a tile read before it landed, a named barrier
arrived on too often or left half-arrived; no progress is a RuntimeError (a hang on the GPU).
`test_the_model_follows_the_source` ties the model's order to today's source.
"""
import random
import re

import pytest

from tests.mbarrier_model import Barrier, NamedBarrier, SmemSlots, WgmmaGroups, run_agents
from week4_triton_dl.attention import hopper as hp

STAGES, WARPGROUPS, WARPS = 2, 2, 4  # AH_STAGES; consumer warpgroups; warps per warpgroup
ORDERS = ("default", "overlap")
# Planted mistakes of the overlap build, and what the model must say about each.
WRONG = {
    "pack_before_pv_wait": "p of warpgroup . touched while a wgmma group that reads it is pending",
    "rescale_before_pv_wait": "o of warpgroup . touched while a wgmma group that writes it is pending",
    # (the K slot, released after a wait that waited for nothing, may be refilled under S first)
    "one_commit_group": "s of warpgroup . touched while a wgmma group that writes it|K slot . refilled while",
    "pv_committed_first": "s of warpgroup . touched while a wgmma group that writes it|K slot . refilled while",
    "release_v_after_s_wait": "V slot . refilled while a wgmma reads it|changed under its wgmma",
    "rescale_forgotten": "P V of tile . issued on stale P or O",
}
# Planted mistakes of the default build (tests/week4/wrong/attention_hopper_forward.py's
# slot_released_before_wgmma_wait: a race no GPU run of the tests has shown; the model shows it).
DEFAULT_WRONG = {
    "release_before_wait": "[KV] slot . refilled while a wgmma reads it|changed under its wgmma",
}
# Not in WRONG: K released before wait_group 1. The model finds no race there, and rightly: the producer's
# next copy into that K slot comes after its V copy, which waits for the V release of the same phase, after
# wait_group 0 of both warpgroups (groups complete in order). A harmless order, but an accident of the
# producer's order, not a rule to lean on.





def simulate(n_tiles, seed, order="overlap", pingpong=True, last_handover=False):
    """Run the model to the end; AssertionError on a race, RuntimeError on a hang. order: "default",
    "overlap" or a key of WRONG. last_handover=True: warpgroup 2 hands the turn over after its last phase too."""
    rng = random.Random(seed)
    overlap = order not in ("default", *DEFAULT_WRONG)
    full = {kind: [Barrier(1) for _ in range(STAGES)] for kind in "KV"}
    empty = {kind: [Barrier(WARPGROUPS * WARPS) for _ in range(STAGES)] for kind in "KV"}
    turns = [NamedBarrier(), NamedBarrier()]             # named barriers 1 and 2: "warpgroup 1 / 2 may issue"
    events = []
    slots = SmemSlots(STAGES, events)                    # which tile each K/V slot holds, and who reads it

    def producer():
        for it in range(n_tiles):
            s = it % STAGES
            for kind in "KV":
                if it >= STAGES:
                    while not empty[kind][s].ready(((it // STAGES) - 1) & 1):
                        yield
                slots.load(kind, s, it, full[kind][s])  # expect_tx, then the copy, which lands later
                yield

    def consumer(wg):
        regs = {"s": None, "p": None, "o": (-1, -1)}  # o: (last tile accumulated, last tile's alpha applied)
        wgmma = WgmmaGroups(slots, who=f"warpgroup {wg}")
        touch, commit = wgmma.touch, wgmma.commit

        def issue_s(it):
            touch("s")  # wgmma.fence orders the earlier ordinary writes; nothing touches s until the wait
            wgmma.operand("s", "writes", lambda: regs.update(s=("S", it)))
            wgmma.read("K", it % STAGES, it)

        def issue_pv(t):
            assert regs["p"] == ("P", t) and regs["o"] == (t - 1, t), f"P V of tile {t} issued on stale P or O"
            wgmma.operand("p", "reads")
            wgmma.operand("o", "writes", lambda: regs.update(o=(t, t)))
            wgmma.read("V", t % STAGES, t)

        wait_group = wgmma.wait

        def release(kind, t):
            for _ in range(WARPS):  # lane 0 of each warp
                empty[kind][t % STAGES].arrive()

        def softmax(it, rescale_o):
            touch("s")
            assert regs["s"] == ("S", it), f"the softmax of tile {it} read s = {regs['s']}"
            regs["s"] = ("P", it)
            if rescale_o:
                rescale(it)

        def rescale(it):
            touch("o")
            assert regs["o"] == (it - 1, it - 1), f"alpha of tile {it} applied to O = {regs['o']}"
            regs["o"] = (it - 1, it)

        def pack(it):
            touch("s")
            touch("p")
            assert regs["s"] == ("P", it)
            regs["p"] = ("P", it)

        if pingpong and wg == 1:
            turns[0].arrive()  # warpgroup 1 takes the first turn
        for it in range(n_tiles + 1):
            has_s, has_pv = it < n_tiles, it >= 1
            both = has_s and has_pv and overlap
            for kind, t, wanted in (("K", it, has_s), ("V", it - 1, has_pv)):
                while wanted and not full[kind][t % STAGES].ready((t // STAGES) & 1):
                    yield
            if pingpong:
                yield from turns[wg].sync()
            if both and order == "pv_committed_first":
                issue_pv(it - 1)
                commit()
                issue_s(it)
            else:
                if has_s:
                    issue_s(it)
                if both and order != "one_commit_group":
                    commit()  # S in a group of its own
                if has_pv:
                    issue_pv(it - 1)
            commit()
            if pingpong and (has_s or wg == 0 or last_handover):
                turns[1 - wg].arrive()
            yield
            if not both:  # the default build, and the overlap build's first and last phases
                early = order == "release_before_wait"  # planted: the slots given back before the wait
                if not early:
                    yield from wait_group(0)
                if has_s:
                    release("K", it)
                if has_pv:
                    release("V", it - 1)
                if early:
                    yield
                    yield from wait_group(0)
                if has_s:
                    softmax(it, rescale_o=True)
                    pack(it)
                continue
            yield from wait_group(1)
            release("K", it)
            if order == "release_v_after_s_wait":
                release("V", it - 1)
            yield
            softmax(it, rescale_o=False)  # alpha into the stand-in: O is the pending P V's
            if order == "rescale_before_pv_wait":
                rescale(it)
            if order == "pack_before_pv_wait":
                pack(it)
            yield
            yield from wait_group(0)
            if order != "release_v_after_s_wait":
                release("V", it - 1)
            if order not in ("rescale_before_pv_wait", "rescale_forgotten"):
                rescale(it)
            if order != "pack_before_pv_wait":
                pack(it)
        touch("o")  # the epilogue reads O
        assert regs["o"] == (n_tiles - 1, n_tiles - 1), f"O holds {regs['o']} at the end"

    agents = [producer()] + [consumer(wg) for wg in range(WARPGROUPS)]
    run_agents(agents, events, rng)
    assert all(t.arrived == 0 for t in turns), "a named barrier is left half-arrived at exit"


@pytest.mark.parametrize("pingpong", [True, False], ids=["pingpong", "no_pingpong"])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("n_tiles", [1, 2, 3, 5])
def test_no_hang_no_race_and_the_right_values(n_tiles, order, pingpong):
    """Both builds, with and without the ping-pong: every tile lands before it is read and is not refilled
    under its reader, no register of a pending wgmma is touched, P V always takes this tile's P and an O
    rescaled by this tile's alpha, and everything finishes with no named barrier half-arrived."""
    for seed in range(25):
        simulate(n_tiles, seed, order, pingpong)


@pytest.mark.parametrize("order, message", list({**WRONG, **DEFAULT_WRONG}.items()),
                         ids=list({**WRONG, **DEFAULT_WRONG}))
def test_the_model_catches_each_planted_order(order, message):
    """P packed, or O rescaled, before the wait for the P V that reads / writes them; S and P V in one
    group (wait_group 1 then waits for nothing) or committed P V first (it waits for P V, not S); the V slot
    released once S is done; O never rescaled by the stand-in's alpha; and the default build's slots given
    back before its wait (a race no GPU run of the tests has shown): some interleaving shows each."""
    with pytest.raises(AssertionError, match=message):
        for seed in range(300):
            simulate(4, seed, order)


def test_the_model_catches_a_barrier_left_half_arrived():
    with pytest.raises(AssertionError, match="half-arrived|overrun"):
        simulate(3, 0, "overlap", last_handover=True)


def _between(text, start, end):
    return text[text.index(start):text.index(end, text.index(start))]


def test_the_model_follows_the_source():
    """The order the model gives each build is the kernel's (if these lines change, change the model)."""
    source = hp.KERNELS.joinpath(hp.SOURCE.name).read_text() + hp.PRODUCER_HEADER.read_text()  # ah_produce: its own file
    assert "#define AH_STAGES 2" in source and "mbar_init(&empty_k[s], 8);" in source
    assert "constexpr bool OVERLAP = AH_INTRA_OVERLAP && HAS_S && HAS_PV;" in source
    phase = _between(source, "__device__ __forceinline__ void ah_phase(", "\n}\n")
    # The issue: S, then (overlap) a commit of S alone, then P V, then the commit; then the hand-over.
    issue = ["wgmma_ss<128, T, WGMMA_B_K_MAJOR>(s,", "if (OVERLAP) wgmma_commit();",
             "wgmma_rs<D, T, WGMMA_B_MN_MAJOR>(o, a,",
             "wgmma_commit();\n", "bar_arrive(their_turn, 256);"]
    at = [phase.find(text) for text in issue]
    assert -1 not in at and at == sorted(at), "the issue order is not the model's"
    # The default (and the overlap build's one-GEMM phases) first: wait 0 (the exercise), the releases,
    # then the softmax on O and the pack in one call, and the return.
    default = _between(phase, "if (!OVERLAP) {", "return;")
    default = "\n".join(line for line in default.splitlines() if not line.lstrip().startswith("//"))  # not the hints
    steps = ["wgmma_wait<0>();", "mbar_arrive(&empty_k[s_slot]);", "mbar_arrive(&empty_v[pv_slot]);",
             "ah_softmax_tile<T, D, true>(it, wg, lane, row0, m0, seq_k, causal, c, s, o, p, m, l);"]
    at = [default.find(text) for text in steps]
    assert -1 not in at and at == sorted(at), "the default build's order is not the model's"
    # The overlap, the rest of the phase: wait 1, fence s, K released, softmax on the stand-in, wait 0,
    # fence o, V released, O rescaled, P packed.
    block = phase[phase.index("return;", phase.index("if (!OVERLAP) {")):]
    block = "\n".join(line for line in block.splitlines() if not line.lstrip().startswith("//"))  # not the hints
    steps = ["wgmma_wait<1>();", "fence_regs(s);", "mbar_arrive(&empty_k[s_slot]);",
             "ah_softmax_tile<T, D, false>(it, wg, lane, row0, m0, seq_k, causal, c, s, alpha, p, m, l);",
             "wgmma_wait<0>();", "fence_regs(o);", "mbar_arrive(&empty_v[pv_slot]);",
             "o[i] *= alpha[i];", "ah_pack_p<T>(s, p);"]
    at = [block.find(text) for text in steps]
    assert -1 not in at, f"the overlap block no longer has `{steps[at.index(-1)]}`: update the model"
    assert at == sorted(at), "the overlap block's order is not the model's"
    assert "o[" not in block[:at[4]] and "p[" not in block[:at[4]], "O or P touched before wait_group 0"
    assert re.search(r"if \(PACK\) ah_pack_p<T>\(s, p\);[\s\S]*if \(PACK\) ah_pack_p<T>\(s, p\);", source)
