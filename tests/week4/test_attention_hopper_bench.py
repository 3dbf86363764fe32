"""The Hopper attention benches (attention/hopper_bench.py, hopper_backward_bench.py) on the CPU, with fake timers.

Their rounds need an H100; what they make of the rounds does not. time_gpu is replaced by a script of
Timings per variant (as tests/test_bench_timing.py does), so a host-paced round can be played: its row
must keep the events' ms marked *, carry the graph replay's "GPU ms (graph)", and take its TFLOP/s and
every ratio from the GPU's time; a host-paced round that could not be replayed gives no ratio, not a
ratio of two Pythons. The capstone's shape, the shortest, is timed longer in quick mode too, and the
quick run writes its own record beside the full sweep's.
"""
import pytest
import torch

from course import bench, bench_timing
from tests.fake_rounds import LOST, gpu, host, labelled, play
from week4_triton_dl.attention import hopper_backward_bench as bwd_bench
from week4_triton_dl.attention import hopper_bench as fwd_bench

CAPSTONE = (8, 12, 1024, 64, True)
LONG = (4, 16, 4096, 128, True)


@pytest.fixture
def fake_rounds(monkeypatch):
    """Plays `script[label]` (one Timing per round) to the bench's time_gpu; records what it was asked."""
    return play(monkeypatch)


@pytest.fixture
def forward(fake_rounds, monkeypatch):
    script, asked = fake_rounds
    q = torch.zeros(1, 1, 1, 1)
    monkeypatch.setattr(fwd_bench, "make_inputs", lambda arg: (q, q, q, arg[0][4]))
    monkeypatch.setattr(fwd_bench, "attention_hopper", lambda q, k, v, causal: q)  # the one-call diff
    monkeypatch.setattr(fwd_bench, "_sdpa_cudnn", lambda q, k, v, causal: q)
    return script, asked


def rows_by_variant(rows):
    return {r["variant"]: r for r in rows}


def test_a_host_paced_size_takes_its_ratios_and_tflops_from_the_graph_replay(forward):
    script, asked = forward
    rounds = fwd_bench.plan(CAPSTONE, 3, 25.0)[0]
    script.update(torch=[host(0.107, 0.050)] * rounds, triton=[host(0.108, 0.055)] * rounds,
                  hopper=[gpu(0.065)] * rounds, hopper_overlap=[host(0.083, 0.060)] * rounds)
    rows = rows_by_variant(fwd_bench.measure(CAPSTONE, torch.bfloat16, 3, 25.0,
                                             labelled(["torch", "triton", "hopper", "hopper_overlap"])))
    assert all(a["graph"] for a in asked)  # every round may be replayed where the host paced it
    torch_row, overlap = rows["torch"], rows["hopper_overlap"]
    assert torch_row["ms"] == 0.107 and torch_row["host_bound"] is True and torch_row["graphed_ms"] == 0.050
    assert torch_row["gpu_ms"] == 0.050
    assert torch_row["tflops"] == pytest.approx(fwd_bench.flops(CAPSTONE) / 0.050e-3 / 1e12)
    assert rows["hopper"]["speedup_vs_torch"] == pytest.approx(0.050 / 0.065)  # GPU against GPU
    assert rows["hopper"]["speedup_vs_torch"] < 1 < 0.107 / 0.065  # the events' ratio would say the opposite
    assert overlap["speedup_vs_torch"] == pytest.approx(0.050 / 0.060)
    assert overlap["speedup_vs_hopper"] == pytest.approx(0.065 / 0.060)
    assert "graphed_ms" not in rows["hopper"] and rows["hopper"]["gpu_ms"] == 0.065


def test_the_dynamic_rows_carry_their_ratio_to_the_static_walk(forward):
    script, _ = forward
    script.update(torch=[gpu(0.50)] * 3, hopper=[gpu(0.60)] * 3, hopper_persistent=[gpu(0.80), gpu(0.78), gpu(0.82)],
                  hopper_dynamic=[gpu(0.52), gpu(0.52), gpu(0.50)], hopper_dynamic_overlap=[gpu(0.51)] * 3)
    rows = rows_by_variant(fwd_bench.measure(LONG, torch.bfloat16, 3, 25.0, labelled(
        ["torch", "hopper", "hopper_persistent", "hopper_dynamic", "hopper_dynamic_overlap"])))
    dynamic = rows["hopper_dynamic"]
    assert dynamic["speedup_vs_static"] == pytest.approx(0.80 / 0.52)  # round by round, the median
    assert (dynamic["speedup_vs_static_min"], dynamic["speedup_vs_static_max"]) == pytest.approx((0.78 / 0.52, 0.82 / 0.50))
    # hopper_persistent_overlap was not timed: no ratio, rather than one against another build
    assert not any("speedup_vs_static" in rows[v] for v in ("hopper_dynamic_overlap", "hopper_persistent", "hopper"))


def test_a_gpu_paced_size_reads_as_before(forward):
    script, _ = forward
    script.update(torch=[gpu(0.50), gpu(0.55), gpu(0.52)], hopper=[gpu(0.55), gpu(0.55), gpu(0.50)])
    rows = rows_by_variant(fwd_bench.measure(LONG, torch.bfloat16, 3, 25.0, labelled(["torch", "hopper"])))
    hopper = rows["hopper"]
    assert hopper["ms"] == 0.55 and hopper["gpu_ms"] == 0.55 and hopper["host_bound"] is False
    assert (hopper["speedup_vs_torch"], hopper["speedup_min"], hopper["speedup_max"]) == pytest.approx(
        (0.55 / 0.55, 0.50 / 0.55, 0.52 / 0.50))  # round by round: 0.91, 1.00, 1.04


def test_a_host_paced_round_without_a_replay_gives_no_ratio(forward):
    script, _ = forward
    rounds = fwd_bench.plan(CAPSTONE, 3, 25.0)[0]
    script.update(torch=[host(0.107, 0.050)] * rounds, hopper=[LOST] * rounds)
    rows = rows_by_variant(fwd_bench.measure(CAPSTONE, torch.bfloat16, 3, 25.0, labelled(["torch", "hopper"])))
    lost = rows["hopper"]
    assert "speedup_vs_torch" not in lost and lost["gpu_ms"] is None and lost["tflops"] is None
    assert lost["graph_error"].startswith("capture failed")
    table = fwd_bench.markdown({"title": "t", "date": "d", "machine": {}, "notes": "n", "rows": list(rows.values())})
    cells = [c.strip() for c in next(line for line in table.splitlines() if "| hopper |" in line).strip("|").split("|")]
    assert cells[2:6] == ["0.0900*", "-", "-", "-"]  # ms marked, no graph time, no TFLOP/s, no ratio


def test_the_capstone_shape_is_timed_longer_even_in_quick_mode(forward):
    script, asked = forward
    assert fwd_bench.flops(CAPSTONE) < fwd_bench.SHORT_FLOPS <= min(fwd_bench.flops(s) for s in fwd_bench.SIZES[:-1])
    assert fwd_bench.plan(CAPSTONE, 3, 25.0) == (fwd_bench.SHORT_ROUNDS, fwd_bench.SHORT_REP_MS)
    assert fwd_bench.plan(CAPSTONE, 9, 250.0) == (9, 250.0)  # never less than asked
    assert fwd_bench.plan(LONG, 3, 25.0) == (3, 25.0)
    script.update(torch=[gpu(0.05)] * fwd_bench.SHORT_ROUNDS)
    row = fwd_bench.measure(CAPSTONE, torch.bfloat16, 3, 25.0, labelled(["torch"]))[0]
    assert row["reps"] == fwd_bench.SHORT_ROUNDS and len(asked) == fwd_bench.SHORT_ROUNDS
    assert {a["rep_ms"] for a in asked} == {fwd_bench.SHORT_REP_MS}
    assert CAPSTONE in fwd_bench.QUICK_SIZES and CAPSTONE in bwd_bench.QUICK_SIZES


def records_notes(monkeypatch) -> list:
    """The notes line of each bench's record, from its run() with the GPU and the rounds faked away."""
    from course import runtime
    monkeypatch.setattr(runtime, "on_gpu", lambda: True)
    monkeypatch.setattr(runtime, "capability", lambda: (9, 0))
    monkeypatch.setattr(runtime, "describe", dict)
    monkeypatch.setattr(bench, "copy_bandwidth_gbps", lambda: 3000.0)
    monkeypatch.setattr(fwd_bench, "device_refusal", lambda device: None)
    monkeypatch.setattr(fwd_bench, "usable", lambda variants, dtype: (variants, []))
    monkeypatch.setattr(bwd_bench, "unsupported", lambda capability: None)
    for module in (fwd_bench, bwd_bench):
        monkeypatch.setattr(module, "measure", lambda *args: [])
    return [fwd_bench.run(fwd_bench.QUICK_SIZES, 3, 25.0)["notes"], bwd_bench.run(bwd_bench.QUICK_SIZES, 3, 30.0)["notes"]]


def test_the_table_shows_the_graph_time_the_mark_and_says_what_the_ratios_are(monkeypatch):
    rows = [{"size": "s", "variant": "torch", "ms": 0.107, "graphed_ms": 0.05, "tflops": 250.0, "host_bound": True,
             "speedup_vs_torch": 1.0, "speedup_min": 1.0, "speedup_max": 1.0, "spread_pct": 3.0},
            {"size": "s", "variant": "hopper", "ms": 0.065, "tflops": 199.0, "host_bound": False,
             "speedup_vs_torch": 0.77, "speedup_min": 0.76, "speedup_max": 0.78, "spread_pct": 1.0}]
    for module in (fwd_bench, bwd_bench):
        table = module.markdown({"title": "t", "date": "d", "machine": {}, "notes": "n", "rows": rows})
        assert "| ms (median) | GPU ms (graph) | TFLOP/s |" in table
        assert "| torch | 0.1070* | 0.0500 | 250 | 1.000x |" in table
        assert "| hopper | 0.0650 | - | 199 | 0.770x |" in table
        assert table.rstrip().endswith(bench_timing.FOOTNOTE)
    for notes in records_notes(monkeypatch):
        assert "TFLOP/s and every ratio use each round's GPU time (the graph replay's where the host paced" in notes
        assert f"{fwd_bench.SHORT_ROUNDS} of ~{fwd_bench.SHORT_REP_MS:.0f} ms at sizes under" in notes


def test_the_backward_compares_the_gpus_times_and_its_reduce_add_against_the_atomics(fake_rounds, monkeypatch):
    script, asked = fake_rounds
    monkeypatch.setattr(bwd_bench, "VARIANTS", labelled(["torch", "triton", "hopper", "hopper_atomics"]))
    monkeypatch.setattr(bwd_bench, "make_inputs", lambda size: (None,) * 4 + ((object(),) * 4,) + (None, None, True))
    rounds = bwd_bench.plan(CAPSTONE, 3, 30.0)[0]
    assert rounds == fwd_bench.SHORT_ROUNDS
    script.update(torch=[host(0.30, 0.16)] * rounds, triton=[gpu(0.165)] * rounds,
                  hopper=[gpu(0.20)] * rounds, hopper_atomics=[host(0.26, 0.25)] * rounds)
    rows = rows_by_variant(bwd_bench.measure(CAPSTONE, 3, 30.0))
    assert all(a["graph"] for a in asked) and {a["rep_ms"] for a in asked} == {fwd_bench.SHORT_REP_MS}
    assert rows["hopper"]["speedup_vs_torch"] == pytest.approx(0.16 / 0.20)
    assert rows["hopper"]["speedup_vs_atomics"] == pytest.approx(0.25 / 0.20)
    assert rows["torch"]["ms"] == 0.30 and rows["torch"]["graphed_ms"] == 0.16
    assert rows["torch"]["tflops"] == pytest.approx(bwd_bench.flops(CAPSTONE) / 0.16e-3 / 1e12)


def test_the_backward_says_when_cudnn_refused_a_shape(fake_rounds, monkeypatch):
    script, _ = fake_rounds
    monkeypatch.setattr(bwd_bench, "VARIANTS", labelled(["torch", "hopper"]))
    monkeypatch.setattr(bwd_bench, "make_inputs", lambda size: (None,) * 4 + ((None,) * 4,) + (None, None, True))
    script.update(hopper=[gpu(1.0)] * 3)
    rows = bwd_bench.measure(LONG, 3, 30.0)
    assert [r["variant"] for r in rows] == ["hopper", "torch"] and rows[1]["ms"] is None
    assert "speedup_vs_torch" not in rows[0]
    table = bwd_bench.markdown({"title": "t", "date": "d", "machine": {}, "notes": "n", "rows": rows})
    assert "| torch | cuDNN refused this shape |" in table


@pytest.mark.parametrize("quick,name", [(True, "attention_hopper_quick"), (False, "attention_hopper")])
def test_the_quick_run_writes_its_own_record_beside_the_full_sweeps(quick, name, monkeypatch, tmp_path):
    seen = {}

    def run(sizes, rounds, rep_ms, dtypes, variants, name):
        seen.update(sizes=sizes, rounds=rounds, name=name)
        return {"benchmark": name, "title": "t", "date": "d", "machine": {}, "notes": "n", "rows": []}

    monkeypatch.setattr(fwd_bench, "run", run)
    assert fwd_bench.main(["--out", str(tmp_path)] + (["--quick"] if quick else [])) == 0
    assert seen["name"] == name and seen["sizes"] == (fwd_bench.QUICK_SIZES if quick else fwd_bench.SIZES)
    assert (tmp_path / f"{name}.json").exists() and (tmp_path / f"{name}.md").exists()
