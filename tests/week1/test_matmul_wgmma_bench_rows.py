"""The week-1 wgmma GEMM benches' rows (matmul_wgmma_persistent_bench, matmul_wgmma_fused_bench) on the CPU,
with fake timers, as tests/week4/test_attention_hopper_bench.py does for the attention benches.

Their rounds need an H100; what they make of the rounds does not. time_gpu is replaced by a script of
Timings per variant, so host-paced rounds can be played (the capstone's 20-60 us GEMMs): a row keeps the
events' ms marked *, carries the graph replay's "GPU ms (graph)" and each round's GPU time
(`gpu_ms_rounds`, what the schedule rule compares builds on), and takes its TFLOP/s and every ratio
from the GPU's time; a host-paced round that could not be replayed gives no ratio, and the table a "-".
"""
import pytest
import torch

from course import bench_timing, runtime
from tests.fake_rounds import LOST, gpu, host, labelled, play
from week1_cuda_python import matmul_wgmma_fused_bench as fb
from week1_cuda_python import matmul_wgmma_persistent_bench as pb

SHAPE = (8192, 768, 3072)
FLOPS = 2 * 8192 * 768 * 3072


@pytest.fixture
def script(monkeypatch):
    """Plays `script[label]` (one Timing per round) to the benches' time_gpu; every call must ask for graph=True."""
    return play(monkeypatch, input_sets=lambda make, size: [()], require_graph=True)[0]


def by_variant(rows):
    return {r["variant"]: r for r in rows}


def cells(table: str, variant: str) -> list:
    return [c.strip() for c in next(line for line in table.splitlines() if f"| {variant} |" in line).strip("|").split("|")]


def test_persistent_rows_take_tflops_and_ratios_from_the_gpu_time(script):
    script.update(torch=[host(0.105, 0.050), host(0.104, 0.052), gpu(0.051)],
                  wgmma_persistent=[host(0.100, 0.050), host(0.101, 0.049), host(0.100, 0.050)],
                  wgmma_persistent_bn192=[host(0.110, 0.046), host(0.109, 0.047), host(0.108, 0.046)],
                  wgmma_pingpong=[LOST, host(0.100, 0.050), host(0.100, 0.050)])
    rows = by_variant(pb.measure(SHAPE, torch.bfloat16, 3, 20.0, labelled(script)))
    wide, coop = rows["wgmma_persistent_bn192"], rows["wgmma_persistent"]
    assert wide["ms"] == 0.109 and wide["host_bound"] is True and wide["graphed_ms"] == 0.046  # the events' median
    assert wide["gpu_ms_rounds"] == [0.046, 0.047, 0.046] and wide["gpu_ms"] == 0.046
    assert wide["tflops"] == pytest.approx(FLOPS / 0.046e-3 / 1e12)
    assert (wide["speedup_vs_torch"], wide["speedup_min"], wide["speedup_max"]) == pytest.approx(
        (0.052 / 0.047, 0.050 / 0.046, 0.051 / 0.046))  # per round, GPU against GPU: 1.087, 1.106, 1.109
    assert wide["speedup_vs_torch"] > 1 > 0.104 / 0.109  # the events' ratio would say the opposite
    assert rows["torch"]["gpu_ms_rounds"] == [0.050, 0.052, 0.051]  # the events' where the GPU paced the round
    assert coop["gpu_ms_rounds"] == [0.050, 0.049, 0.050]
    lost = rows["wgmma_pingpong"]
    assert lost["gpu_ms_rounds"] == [None, 0.050, 0.050] and lost["graphed_ms"] == 0.050
    assert (lost["speedup_min"], lost["speedup_max"]) == pytest.approx((0.051 / 0.050, 0.052 / 0.050))  # rounds 2, 3
    table = pb.markdown({"title": "t", "date": "d", "machine": {}, "notes": "n", "rows": list(rows.values())})
    assert cells(table, "wgmma_persistent_bn192")[2:4] == ["0.1090*", "0.0460"]  # ms marked, GPU ms (graph)
    assert "GPU ms (graph)" in table and bench_timing.FOOTNOTE in table


def test_a_variant_whose_gpu_time_no_round_knows_gives_no_ratio(script):
    """Every round host-paced and the capture failed (time_gpu records why): the row has no GPU time, no TFLOP/s
    and no ratio, its table cells "-", and the bench does not crash."""
    script.update(torch=[gpu(0.05)] * 3, wgmma_persistent=[LOST] * 3)
    rows = by_variant(pb.measure(SHAPE, torch.bfloat16, 3, 20.0, labelled(script)))
    lost = rows["wgmma_persistent"]
    assert lost["gpu_ms"] is None and lost["tflops"] is None and lost["speedup_vs_torch"] is None
    assert lost["gpu_ms_rounds"] == [None] * 3 and lost["graph_error"].startswith("capture failed")
    table = pb.markdown({"title": "t", "date": "d", "machine": {}, "notes": "n", "rows": list(rows.values())})
    assert cells(table, "wgmma_persistent")[2:7] == ["0.0900*", "-", "-", "-", "-"]


def test_fused_rows_take_both_ratios_from_the_gpu_time(script):
    script.update(**{"torch": [host(0.120, 0.080)] * 3, "torch.compile": [host(0.110, 0.060)] * 3,
                     "wgmma_fused": [host(0.100, 0.050)] * 3, "wgmma_fused_pp": [LOST] * 3})
    rows = by_variant(fb.measure("residual", (8192, 768, 768), torch.bfloat16, 3, 20.0, labelled(script)))
    fused = rows["wgmma_fused"]
    assert fused["ms"] == 0.100 and fused["gpu_ms"] == 0.050 and fused["gpu_ms_rounds"] == [0.050] * 3
    assert fused["speedup_vs_torch"] == pytest.approx(0.080 / 0.050)
    assert fused["speedup_vs_compile"] == pytest.approx(0.060 / 0.050)
    assert fused["tflops"] == pytest.approx(2 * 8192 * 768 * 768 / 0.050e-3 / 1e12)
    assert rows["wgmma_fused_pp"]["speedup_vs_compile"] is None
    table = fb.markdown({"title": "t", "date": "d", "machine": {}, "notes": "n", "rows": list(rows.values())})
    assert cells(table, "wgmma_fused")[2:6] == ["0.1000*", "0.0500", "193", "1.600x (1.600 - 1.600)"]
    assert cells(table, "wgmma_fused_pp")[2:7] == ["0.0900*", "-", "-", "-", "-"]


HOPPER = runtime.on_gpu() and pb.unsupported(runtime.capability()) is None and pb.wgmma_unsupported(
    runtime.capability()) is None


@pytest.mark.gpu(reason="captures the sm_90a kernels in a CUDA graph")
@pytest.mark.skipif(not HOPPER, reason="the wgmma_persistent rung needs an H100/H200 (compute capability 9.0)")
def test_every_benched_variant_replays_from_a_cuda_graph():
    """What time_gpu(graph=True) does with a host-paced round: each variant of both benches at a capstone
    shape is captured and replayed (bench_timing.graph_replay_ms), with no capture error."""
    sets = [pb.make_inputs(((1024, 768, 768), torch.bfloat16))]
    failed = {}
    for label in pb.SMALL_VARIANTS:
        ms, why = bench_timing.graph_replay_ms(pb.VARIANTS[label], sets, budget_ms=5, guess_ms=0.05)
        failed.update({label: why} if why or not ms > 0 else {})
    fused_sets = [fb.make_inputs(("residual", (1024, 768, 768), torch.bfloat16))]
    for label, fn in fb.variants("residual").items():
        fn(*fused_sets[0])  # compiles torch.compile's graph outside the capture, as the bench's warm-up does
        ms, why = bench_timing.graph_replay_ms(fn, fused_sets, budget_ms=5, guess_ms=0.05)
        failed.update({f"fused {label}": why} if why or not ms > 0 else {})
    assert not failed, failed
