"""An mbarrier as the CPU protocol models of the Hopper kernels see it (tests/week1/
test_matmul_wgmma_persistent_protocol.py, tests/week4/test_attention_hopper_forward_protocol.py and
test_attention_hopper_backward_protocol.py), the loop that runs the Hopper attention models' agents, and the
shared-memory slots and wgmma groups of the attention forward's persistent and dynamic models (with the producer's
staged V tile of a head with padding keys).

A phase completes when its expected arrivals have all arrived and its transaction bytes (expect_tx,
added by an arrival) have all been completed by the copies; the phase counter then advances and a
waiter on the old parity is released. One arrival too many on a phase is the overrun a real
mbarrier would turn into a hang or a wrong phase, so the model asserts it.
"""


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


class NamedBarrier:
    """bar.sync / bar.arrive with a count of `parties` x 128 threads: one arrival here per warpgroup (the
    attention kernels' ping-pong: two warpgroups, 256 threads)."""

    def __init__(self, parties: int = 2):
        self.parties, self.arrived, self.generation = parties, 0, 0

    def arrive(self):
        assert self.arrived < self.parties, "a named barrier arrived on more often than its count: an overrun"
        self.arrived += 1
        if self.arrived == self.parties:
            self.arrived, self.generation = 0, self.generation + 1

    def sync(self):
        generation = self.generation
        self.arrive()
        while self.generation == generation:
            yield


def run_agents(agents, events, rng, state=None):
    """Interleave `agents` (generators: each yield is a wait whose condition was false, or a step) and `events`
    (pending completions the agents append to: a TMA copy landing, a wgmma group finishing) in random order,
    drawn from `rng`, until all are done. RuntimeError once the agents have stepped 200 times per agent in a
    row with nothing in flight (and, given `state`, a snapshot of the barriers, without changing it): they
    wait for phases that never complete, which on the GPU is a hang."""
    stalled = 0
    while agents or events:
        kind, pick = rng.choice([("agent", a) for a in agents] + [("event", e) for e in events])
        if kind == "event":
            events.remove(pick)
            pick()
            stalled = 0
            continue
        before = state() if state else None
        try:
            next(pick)
            stalled = stalled + 1 if not events and (state is None or state() == before) else 0
        except StopIteration:
            agents.remove(pick)
            stalled = 0
        if stalled > 200 * (len(agents) + 1):
            raise RuntimeError("no progress: the agents wait for phases that never complete (a hang on the GPU)")


class SmemSlots:
    """One block's Q slot and K/V ring as its wgmmas see them: what each slot holds (whatever its last TMA copy
    put there) and how many committed, unfinished wgmma groups read it. A copy lands later, as an event of
    run_agents; it must not land under a reader. `where` names the block in the messages."""

    def __init__(self, stages: int, events: list, where: str = ""):
        self.content = {"Q": [None], "K": [None] * stages, "V": [None] * stages}
        self.reading = {"Q": [0], "K": [0] * stages, "V": [0] * stages}
        self.events, self.where = events, where

    def load(self, kind, s, what, barrier):
        barrier.arrive(tx=1)  # expect_tx, then the copy, which lands later

        def land():
            assert self.reading[kind][s] == 0, f"{kind} slot {s}{self.where} refilled while a wgmma reads it"
            self.content[kind][s] = what
            barrier.complete_tx(1)
        self.events.append(land)

    def staged_v(self, s, what, staging, parity, full_v):
        """The forward's last V tile with padding keys (ah_produce's `stage`), as the producer runs it: the copy
        lands on `staging`, which only the producer waits on (`parity`: the tiles it staged before, & 1); then the
        copy engine writes zeros over the padding rows (the slot then holds (*what, "zeroed")), counted on full_v.
        A generator: `yield from` it."""
        self.load("V", s, what, staging)
        yield
        while not staging.ready(parity):
            yield
        self.load("V", s, (*what, "zeroed"), full_v)


class WgmmaGroups:
    """One warpgroup's wgmmas on SmemSlots: reads gather into a group (checked: the slot holds what the wgmma
    wants), commit() closes it, and committed groups finish in order, each an event of run_agents, holding their
    slots until then (wgmma.wait_group: `yield from wait(n)`). Registers too, where a model tracks them: an
    `operand` of the open group reads or writes a register, its effect (what the wgmma wrote) lands when the group
    finishes, and `touch` (an ordinary instruction) on a register a pending group reads or writes is a race: the
    PTX ISA leaves it undefined. `who` names the warpgroup in the messages."""

    def __init__(self, slots: SmemSlots, who: str = "the warpgroup"):
        self.slots, self.who, self.pending, self.group = slots, who, [], []
        self.busy = {}  # register -> how each pending group that uses it does ("reads" / "writes")

    def read(self, kind, s, what):
        got = self.slots.content[kind][s]
        if kind == "Q":
            assert got == what, f"S of tile {what} read Q of tile {got}{self.slots.where}"
        else:
            assert got == what, f"{kind} slot {s}{self.slots.where} read before tile {what} landed (it holds {got})"
        self.slots.reading[kind][s] += 1
        self.group.append(("slot", (kind, s, what), None))

    def operand(self, register, how, effect=None):
        """`register` read or written ("reads" / "writes") by the open group; `effect()` when the group finishes."""
        self.group.append((register, how, effect))

    def touch(self, register):  # an ordinary instruction on a register
        uses = self.busy.get(register)
        assert not uses, f"{register} of {self.who} touched while a wgmma group that {uses[0]} it is pending"

    def commit(self):
        for register, how, _ in self.group:
            if register != "slot":
                self.busy.setdefault(register, []).append(how)
        self.pending.append(self.group)
        self.group = []
        self.slots.events.append(self.finish_oldest)

    def finish_oldest(self):  # groups of one warpgroup complete in order
        for register, how, effect in self.pending.pop(0):
            if register == "slot":
                kind, s, what = how
                assert self.slots.content[kind][s] == what, f"{kind} slot {s} changed under its wgmma"
                self.slots.reading[kind][s] -= 1
            else:
                self.busy[register].remove(how)
                if effect:
                    effect()

    def wait(self, n):
        while len(self.pending) > n:
            yield
