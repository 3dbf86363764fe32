"""week1_cuda_python.matmul_wgmma_schedule: the measured rule that picks the wgmma GEMMs' consumer
schedule when the caller names none, on the CPU: derived from fake benchmark records (every round
must clear the margin; host-bound rows decide nothing), looked up in order, its wave arithmetic
against a count of tiles dealt to SMs, and the committed table equal to what the records give.
"""
import json
import math

import pytest

from course import dispatch
from week1_cuda_python import matmul_wgmma_schedule as rule


def _rows(variants: dict, size: str, host_bound=(), epilogue=None):
    """Benchmark rows at `size`: {variant: ms of each round}."""
    return [{"size": size, "variant": v, "ms_rounds": ms, "ms": sorted(ms)[len(ms) // 2],
             "host_bound": v in host_bound, **({"epilogue": epilogue} if epilogue else {})}
            for v, ms in variants.items()]


def _record(name, rows, gpu="Fake H100", simulated=False):
    return {"benchmark": name, "rows": rows, "simulated": simulated, "date": "2026-12-07 04:27 UTC",
            "machine": {"gpu": gpu, "sm_count": 132}}


@pytest.fixture
def results(tmp_path):
    plain = ("wgmma_persistent", "wgmma_pingpong")
    rows = (_rows(dict(zip(plain, ([1.30, 1.30, 1.30], [1.00, 1.02, 1.05]))), "8192x768x3072 bfloat16")   # clear win
            + _rows(dict(zip(plain, ([1.10, 1.10, 1.10], [1.00, 1.00, 1.09]))), "8192x2304x768 bfloat16")  # one round within
            + _rows(dict(zip(plain, ([2.0, 2.0, 2.0], [1.0, 1.0, 1.0]))), "8192x768x768 bfloat16", ("wgmma_pingpong",))
            + _rows(dict(zip(plain, ([1.0, 1.0, 1.0], [1.5, 1.5, 1.5]))), "4096x4096x4096 bfloat16"))
    fused = (_rows({"wgmma_gemm": [1.0] * 3, "wgmma_gemm_pp": [1.2] * 3, "wgmma_fused": [1.2] * 3,
                    "wgmma_fused_pp": [1.0] * 3}, "swiglu 8192x4096x768 bfloat16", epilogue="swiglu"))
    (tmp_path / "matmul_wgmma_schedules_week1.json").write_text(json.dumps(_record("s", rows)))
    (tmp_path / "matmul_wgmma_fused_week1.json").write_text(json.dumps(_record("f", fused)))
    return tmp_path


def _as_rows(record) -> dict:
    return {tuple(r["key"]): dispatch.Row(tuple(r["key"]), r["rung"], r["tile"], r["measured"]) for r in record["rows"]}


def test_pingpong_only_where_every_round_clears_the_margin(results):
    record = rule.derive(results)
    rungs = {tuple(r["key"]): r["rung"] for r in record["rows"]}
    assert rungs == {(8192, 768, 3072, "bfloat16", "gemm"): "pingpong",
                     (8192, 2304, 768, "bfloat16", "gemm"): "cooperative",   # median 1.10, worst round 1.009
                     (8192, 768, 768, "bfloat16", "gemm"): "cooperative",    # host-bound: Python's time
                     (4096, 4096, 4096, "bfloat16", "gemm"): "cooperative",
                     (8192, 4096, 768, "bfloat16", "none"): "cooperative",
                     (8192, 4096, 768, "bfloat16", "swiglu"): "pingpong"}
    first = record["rows"][0]["measured"]
    assert first["worst_round"] == round(1.30 / 1.05, 3) and first["rounds"] == 3
    assert record["machine"]["gpu"] == "Fake H100" and not record["simulated"]


def test_simulated_records_decide_nothing(tmp_path):
    (tmp_path / "matmul_wgmma_schedules_week1.json").write_text(json.dumps(_record("s", _rows(
        {"wgmma_persistent": [2.0], "wgmma_pingpong": [1.0]}, "64x256x64 bfloat16"), simulated=True)))
    assert rule.derive(tmp_path) is None


def test_records_of_two_gpus_are_refused(results):
    path = results / "matmul_wgmma_fused_week1.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "machine": {"gpu": "Other", "sm_count": 132}}))
    with pytest.raises(ValueError, match="one GPU's rows"):
        rule.derive(results)


def test_lookup_order(results):
    rows = _as_rows(rule.derive(results))
    assert rule.choose(8192, 768, 3072, "torch.bfloat16", rows=rows) == "pingpong"
    assert rule.choose(8192, 768, 3072, "torch.float16", rows=rows) == "cooperative"  # that dtype unmeasured
    assert rule.choose(8192, 768, 3000, "torch.bfloat16", rows=rows) == "cooperative"  # no nearest-shape borrowing
    assert rule.choose(8192, 4096, 768, "torch.bfloat16", "swiglu", rows=rows) == "pingpong"
    assert rule.choose(8192, 4096, 768, "torch.bfloat16", "bias", rows=rows) == "cooperative"  # its 'none' row
    # a fused epilogue with no row of its own takes the shape's plain GEMM row (same mainloop and tile order)
    assert rule.choose(8192, 768, 3072, "torch.bfloat16", "residual", rows=rows) == "pingpong"
    assert rule.choose(8192, 768, 3072, "torch.bfloat16", rows={}) == "cooperative"


def _busiest(count: int, sms: int) -> int:
    """Tiles dealt to SMs one by one (block b takes b, b + sms, ...): the most any SM gets."""
    load = [0] * sms
    for tile in range(count):
        load[tile % sms] += 1
    return max(load)


@pytest.mark.parametrize("m, n, k", [(8192, 768, 3072), (8192, 2304, 768), (5000, 3000, 4000), (1, 8, 8)])
def test_wave_arithmetic(m, n, k):
    got = rule.explain(m, n, k, 132)
    assert got["k_steps"] == math.ceil(k / 64)
    for schedule, rows in (("cooperative", 128), ("pingpong", 64)):
        count = math.ceil(m / rows) * math.ceil(n / 256)
        assert got[schedule]["tiles"] == count and got[schedule]["busiest"] == _busiest(count, 132)
        assert got[schedule]["busiest_rows"] == _busiest(count, 132) * rows
    assert got["wave_gain"] == round(got["cooperative"]["busiest_rows"] / got["pingpong"]["busiest_rows"], 3)


def test_the_committed_table_is_what_the_records_give():
    """results/dispatch_wgmma_schedule.json is computed, never edited: `python -m
    week1_cuda_python.matmul_wgmma_schedule` rewrites it after a bench run."""
    record = rule.derive()
    if record is None:
        assert not rule.TABLE.path.exists()
    else:
        assert rule.TABLE.path.read_text() == rule.text(record), "stale: run python -m week1_cuda_python.matmul_wgmma_schedule"


def test_the_rule_uses_the_launchers_tiles():
    from week1_cuda_python import matmul_wgmma_persistent as wp

    for schedule, tiles in (("cooperative", wp.PERSISTENT_TILES), ("pingpong", wp.PINGPONG_TILES)):
        assert rule.TILE_SHAPES[schedule] == (tiles.bm, tiles.bn, tiles.bk), schedule
