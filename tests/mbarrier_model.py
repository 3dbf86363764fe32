"""An mbarrier as the CPU protocol models of the Hopper kernels see it (tests/week1/
test_matmul_wgmma_persistent_protocol.py, tests/week4/test_attention_hopper_backward_protocol.py).

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
