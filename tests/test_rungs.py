"""`python -m course rung`: a ladder's rungs run by number, checked against torch before timing."""
import math

import pytest
import torch

from course import bench, runtime, rungs


def _ladder(wrong=False):
    def make_inputs(n):
        return (torch.randn(n, n, device=runtime.DEVICE), torch.randn(n, n, device=runtime.DEVICE))

    def off_by_a_tile(a, b):  # a planted bug: the last row of C never written (poison stays)
        c = a @ b
        c[-1] = float("nan")
        return c

    variants = {"torch": lambda a, b: a @ b, "naive": lambda a, b: (a.double() @ b.double()).float(),
                "tiled": off_by_a_tile if wrong else (lambda a, b: torch.mm(a, b))}
    b = bench.Benchmark(name="fake_mm", title="fake", sizes=[64], sim_sizes=[32], make_inputs=make_inputs,
                        variants=variants, bytes=lambda n: 3 * n * n * 4, flops=lambda n: 2 * n ** 3)
    return rungs.Ladder("fake_mm", b, [rungs.Rung("naive", "one dot per element"),
                                       rungs.Rung("tiled", "tiles")], rel_tol=1e-5)


def test_each_rung_is_checked_then_timed(capsys):
    rows = rungs.run_rungs(_ladder(), [1, 2])
    assert [r["variant"] for r in rows] == ["naive", "tiled"]
    assert all(r["ok"] and r["ms"] > 0 and r["rel_err"] < 1e-5 for r in rows)
    out = capsys.readouterr().out
    assert f"fake_mm at {runtime.pick(gpu=64, sim=32)}" in out and "one dot per element" in out


def test_a_wrong_rung_is_reported_and_not_timed(capsys):
    rows = rungs.run_rungs(_ladder(wrong=True), [2])
    assert rows[0]["ok"] is False and rows[0]["ms"] is None and math.isnan(rows[0]["rel_err"])
    assert "WRONG" in capsys.readouterr().out


def test_numbers_off_the_ladder_and_unknown_variants_are_refused():
    with pytest.raises(ValueError, match="rungs 1 to 2, not 3"):
        _ladder().rung(3)
    b = _ladder().benchmark
    with pytest.raises(ValueError, match="no variant"):
        rungs.Ladder("x", b, [rungs.Rung("nope", "")], rel_tol=1e-3)


def test_relative_error_is_normwise_and_nan_when_finiteness_differs():
    ref = torch.tensor([3.0, 4.0])
    assert rungs.relative_error(torch.tensor([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert math.isnan(rungs.relative_error(torch.tensor([3.0, math.inf]), ref))
    assert rungs.relative_error(torch.tensor([math.nan, 4.0]), torch.tensor([math.nan, 4.0])) == 0.0


def test_every_registered_ladder_is_found_and_well_formed():
    for name, (week, module) in rungs.registered().items():
        ladder = rungs.find(name)
        assert ladder.rungs and 0 < ladder.rel_tol < 1, name
