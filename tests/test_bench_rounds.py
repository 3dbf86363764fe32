"""course.bench.interleaved_rounds, the timing loop of every interleaved-rounds benchmark, on the CPU.

The clock is fake and deterministic: a variant's time in a round is its own cost times that round's
drift (the GPU's clock, its temperature, its neighbours), so what the rounds are for can be checked
exactly: drift lands on every variant of a round alike and cancels in the ratio taken within it.
"""
import pytest
import torch

from course import bench


class DriftingClock:
    """time_ms(fn): fn's cost (ms) times the drift of the round in progress; records the call order."""

    def __init__(self, costs: dict, drift: list):
        self.costs, self.drift, self.calls = costs, drift, []

    def __call__(self, fn) -> float:
        label = fn()
        round_index = sum(1 for c in self.calls if c == label)
        self.calls.append(label)
        return self.costs[label] * self.drift[round_index]


def variants(*labels):
    return {label: (lambda label=label: label) for label in labels}


def test_each_round_times_every_variant_once_in_turn():
    clock = DriftingClock({"torch": 1.0, "fast": 0.8, "slow": 2.0}, [1.0, 1.2, 0.9])
    timed = bench.interleaved_rounds(variants("torch", "fast", "slow"), 3, clock)
    assert clock.calls == ["torch", "fast", "slow"] * 3
    assert list(timed.ms) == ["torch", "fast", "slow"]  # the variants' order: the record's row order
    assert timed.ms["slow"] == [2.0, 2.4, 1.8]


def test_drift_cancels_in_the_ratio_within_a_round():
    timed = bench.interleaved_rounds(variants("torch", "fast"), 3,
                                     DriftingClock({"torch": 1.0, "fast": 0.8}, [1.0, 1.5, 0.7]))
    ratio, low, high = timed.ratio_range("fast")
    assert ratio == pytest.approx(1.25, rel=1e-12)
    assert (low, high) == (pytest.approx(1.25, rel=1e-12), pytest.approx(1.25, rel=1e-12))
    assert timed.median("fast") == pytest.approx(0.8)  # median of 0.8 x (1.0, 1.5, 0.7)
    # the variant's own times moved by the drift: (1.2 - 0.56) / 0.8 = 80%
    assert timed.spread_pct("fast") == pytest.approx(80.0)
    assert timed.ratio_range("torch") == (1.0, 1.0, 1.0)


def test_the_ratio_is_a_median_of_per_round_ratios_not_a_ratio_of_medians():
    script = {"torch": [1.0, 2.0, 3.0], "kernel": [2.5, 1.0, 2.0]}
    timed = bench.interleaved_rounds(variants("torch", "kernel"), 3, lambda fn: script[fn()].pop(0))
    assert timed.ratios("kernel") == [0.4, 2.0, 1.5]
    assert timed.ratio_range("kernel") == (1.5, 0.4, 2.0)  # not median(torch) / median(kernel) = 1.0
    assert timed.median("kernel") == 2.0 and timed.median("torch") == 2.0
    assert timed.spread_pct("kernel") == pytest.approx(100 * 1.5 / 2.0)


def test_any_variant_can_be_the_baseline():
    timed = bench.interleaved_rounds(variants("torch", "torch.compile", "fused"), 2,
                                     DriftingClock({"torch": 2.0, "torch.compile": 1.0, "fused": 0.5}, [1.0, 1.1]))
    assert timed.ratio_range("fused", "torch.compile") == pytest.approx((2.0, 2.0, 2.0))
    assert timed.ratio_range("fused") == pytest.approx((4.0, 4.0, 4.0))


def test_rounds_are_at_least_one():
    with pytest.raises(ValueError, match="rounds"):
        bench.interleaved_rounds(variants("torch"), 0, lambda fn: 1.0)


def test_the_persistent_gemm_bench_rows_come_from_the_rounds(monkeypatch):
    """A bench's measure() on the CPU, its timer faked: the row's fields are the rounds' statistics."""
    from week1_cuda_python import matmul_wgmma_persistent_bench as pb

    fns = variants("torch", "wgmma_persistent")
    clock = DriftingClock({"torch": 1.0, "wgmma_persistent": 0.9}, [1.0, 1.3, 0.8, 1.1, 1.0])
    monkeypatch.setattr(bench, "input_sets", lambda make, size: [()])
    monkeypatch.setattr(bench, "time_gpu", lambda fn, sets, **kw: bench.Timing(clock(fn), 0.0, 1))
    rows = pb.measure((256, 256, 64), torch.bfloat16, 5, 20, fns)
    assert [r["variant"] for r in rows] == ["torch", "wgmma_persistent"]
    row = rows[1]
    assert row["ms_rounds"] == pytest.approx([0.9, 1.17, 0.72, 0.99, 0.9])
    assert row["ms"] == pytest.approx(0.9) and row["ms_min"] == pytest.approx(0.72) and row["reps"] == 5
    assert row["speedup_vs_torch"] == pytest.approx(1 / 0.9)
    assert row["speedup_min"] == pytest.approx(1 / 0.9) and row["speedup_max"] == pytest.approx(1 / 0.9)
    assert row["spread_pct"] == pytest.approx(100 * (1.17 - 0.72) / 0.9)
    assert row["tflops"] == pytest.approx(2 * 256 * 256 * 64 / (0.9e-3) / 1e12)
