"""Forward + backward as one call (attention/hopper_fwdbwd_bench.py) and the Hopper rows of the week's
attention benchmarks (attention/bench.py, what tools/ncu_hopper.sh launches), on the CPU.

The rounds need an H100; what the bench makes of them does not: time_gpu is replaced by a script of Timings per
variant (as tests/week4/test_attention_hopper_bench.py does), so a host-paced round can be played and its
ratio must come from the graph replay. The variants' wiring (forward op, autograd, backward op, the causal flag
and dO passed through) runs on the kernels' stand-ins (tests/week4/hopper_stand_ins.py: float64 from the same
inputs, rounded once), against a float64 autograd reference.
"""
import re
from pathlib import Path

import pytest
import torch

from course import weeks
from tests.fake_rounds import gpu, host, play
from tests.week4 import hopper_stand_ins
from tests.week4.attention_helpers import assert_within, qkv
from week4_triton_dl.attention import bench as week_bench
from week4_triton_dl.attention import hopper_fwdbwd_bench as fb

CAPSTONE = (8, 12, 1024, 64, True)
LONG = (4, 16, 4096, 128, True)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_rounds(monkeypatch):
    """Plays `script[label]` (one Timing per round) to the bench's time_gpu; records what it was asked."""
    played = play(monkeypatch)
    monkeypatch.setattr(fb, "make_inputs", lambda size: (None,) * 4 + (size[4],))
    return played


def fake(label, dq=0.0, refuse=None):
    """A variant that says who it is (the fake timer plays by label); its one untimed call returns a dq
    filled with `dq`, or raises `refuse` (cuDNN refusing a shape)."""
    def fn(*args):
        if refuse:
            raise RuntimeError(refuse)
        return torch.full((2,), dq), None, None
    fn.label = label
    return fn


def by_variant(rows):
    return {r["variant"]: r for r in rows}


def test_a_host_paced_size_takes_its_ratios_from_the_graph_replay(fake_rounds):
    script, asked = fake_rounds
    rounds = fb.plan(CAPSTONE, 3, 30.0)[0]
    assert fb.flops(CAPSTONE) < fb.SHORT_FLOPS and rounds == fb.SHORT_ROUNDS  # the short shape: timed longer
    script.update(torch=[host(0.30, 0.16)] * rounds, triton=[host(0.33, 0.20)] * rounds, hopper=[gpu(0.18)] * rounds)
    variants = {"torch": fake("torch", 1.0), "triton": fake("triton", 1.5), "hopper": fake("hopper", 0.75)}
    rows = by_variant(fb.measure(CAPSTONE, 3, 30.0, variants))
    assert all(a["graph"] for a in asked) and {a["rep_ms"] for a in asked} == {fb.SHORT_REP_MS}
    assert len(asked) == 3 * fb.SHORT_ROUNDS
    hopper, torch_row = rows["hopper"], rows["torch"]
    assert hopper["speedup_vs_torch"] == pytest.approx(0.16 / 0.18)  # GPU against GPU, not 0.30 / 0.18
    assert hopper["speedup_vs_triton"] == pytest.approx(0.20 / 0.18)
    assert torch_row["ms"] == 0.30 and torch_row["graphed_ms"] == 0.16 and torch_row["gpu_ms"] == 0.16
    assert torch_row["tflops"] == pytest.approx(fb.flops(CAPSTONE) / 0.16e-3 / 1e12)
    assert hopper["max_abs_dq_diff_vs_torch"] == 0.25 and rows["triton"]["max_abs_dq_diff_vs_torch"] == 0.5
    assert "max_abs_dq_diff_vs_torch" not in torch_row


def test_a_refused_variant_is_a_row_that_says_so_and_the_others_are_timed(fake_rounds):
    script, _ = fake_rounds
    script.update(hopper=[gpu(1.0), gpu(1.1), gpu(0.9)])
    variants = {"torch": fake("torch", refuse="No available kernel.\nmore"), "hopper": fake("hopper")}
    rows = fb.measure(LONG, 3, 30.0, variants)
    assert [r["variant"] for r in rows] == ["hopper", "torch"]
    assert rows[1]["ms"] is None and rows[1]["note"] == "refused: No available kernel."
    assert "speedup_vs_torch" not in rows[0] and rows[0]["ms"] == 1.0 and rows[0]["reps"] == 3
    table = fb.markdown({"title": "t", "date": "d", "machine": {}, "notes": "n", "rows": rows})
    assert "| torch | refused: No available kernel. |" in table


def test_flops_count_forward_and_backward():
    B, H, S, D, _ = LONG
    assert fb.flops(LONG) == 3.5 * 4 * B * H * S * S * D / 2
    assert fb.flops((4, 16, 4096, 128, False)) == 2 * fb.flops(LONG)


@pytest.mark.parametrize("quick,name", [(True, "attention_hopper_fwdbwd_quick"), (False, fb.NAME)])
def test_the_quick_run_writes_its_own_record(quick, name, monkeypatch, tmp_path):
    seen = {}

    def run(sizes, rounds, rep_ms, name):
        seen.update(sizes=sizes, rounds=rounds, name=name)
        return {"benchmark": name, "title": "t", "date": "d", "machine": {}, "notes": "n", "rows": []}

    monkeypatch.setattr(fb, "run", run)
    assert fb.main(["--out", str(tmp_path)] + (["--quick"] if quick else [])) == 0
    assert seen["name"] == name and seen["sizes"] == (fb.QUICK_SIZES if quick else fb.SIZES)
    assert seen["rounds"] == (3 if quick else 5)
    assert (tmp_path / f"{name}.json").exists() and (tmp_path / f"{name}.md").exists()
    assert CAPSTONE in fb.SIZES and CAPSTONE in fb.QUICK_SIZES


def test_the_run_refuses_without_an_h100():
    with pytest.raises(RuntimeError, match="H100/H200"):
        fb.run(fb.QUICK_SIZES, 3, 30.0)


def reference_grads(q, k, v, do, causal):
    """dq, dk, dv by float64 autograd through SDPA's math (top-left causal mask)."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=causal)
    return torch.autograd.grad(out, (q64, k64, v64), do.double())


def check_step(step, causal, dtype=torch.bfloat16):
    q, k, v = qkv(1, 2, 40, 40, 64, dtype, requires_grad=True)
    do = torch.randn(q.shape).to(dtype)
    got = step(q, k, v, do, causal)
    for name, g, want in zip(("dq", "dk", "dv"), got, reference_grads(q, k, v, do, causal)):
        assert g.dtype == dtype and g.shape == want.shape
        # the stand-ins compute in float64 and round once: half a unit in the last place of bf16 (2^-9
        # relative), doubled for the float64 paths' differing order; a missed mask or dO is order 1
        assert_within(g, want, 2.0**-8 * want.abs() + 2.0**-30, name)


@pytest.mark.parametrize("causal", [False, True])
def test_the_hopper_step_runs_forward_and_backward_through_autograd(causal, monkeypatch):
    backward = hopper_stand_ins.install(monkeypatch)
    check_step(fb.VARIANTS["hopper"], causal)
    assert backward.calls == 1  # the backward op ran, once, inside the one call


@pytest.mark.parametrize("causal", [False, True])
def test_the_weeks_benchmarks_hopper_rows_run_the_op(causal, monkeypatch):
    # attention/bench.py's rows (on an H100 only; here built directly): the forward rows return o, the
    # forward + backward row the gradients, through the same op.
    backward = hopper_stand_ins.install(monkeypatch)
    fwdbwd = week_bench.hopper_variants(week_bench._forward_backward, causal, True)
    assert list(fwdbwd) == ["hopper"]
    check_step(lambda q, k, v, do, c: fwdbwd["hopper"](q, k, v, do), causal)
    assert backward.calls == 1
    forward = week_bench.hopper_variants(week_bench._forward_only, causal, False)
    assert list(forward) == ["hopper", "hopper_overlap"]
    q, k, v = qkv(1, 2, 40, 40, 64, torch.bfloat16)
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    for label, fn in forward.items():
        assert_within(fn(q, k, v), want, 2.0**-8 * want.abs() + 2.0**-30, label)


def test_the_hopper_rows_are_left_out_off_an_h100_and_are_gpu_only():
    assert week_bench.hopper_here() is False  # the CPU: no row would run
    fwd = next(b for b in week_bench.BENCHMARKS if b.name == "attention_fwd_bfloat16_d128")
    assert "hopper" not in fwd.variants and {"hopper", "hopper_overlap"} <= set(fwd.gpu_only)
    train = next(b for b in week_bench.BENCHMARKS if b.name == "attention_train_week4")
    assert "hopper" in train.gpu_only and "hopper" not in train.graphed


def ncu_groups() -> list[tuple[str, ...]]:
    text = (ROOT / "tools" / "ncu_hopper.sh").read_text()
    table = re.search(r"^GROUPS_TABLE='\n(.*?)^'", text, re.M | re.S).group(1)
    return [tuple(line.split(";")) for line in table.splitlines() if line.strip()]


def test_every_attention_ncu_group_names_a_registered_benchmark_size_and_variants():
    # On an H100 `python -m course ncu --launch` finds these; here the Hopper rows are added as there.
    groups = [g for g in ncu_groups() if g[1] == "week4_triton_dl"]
    assert {g[0] for g in groups} >= {"fah_4096", "fah_4096c", "fah_gpt2", "fahb_4096"}
    registered = {b.name: b for b in weeks.benchmarks("week4_triton_dl")}
    for name, _, bench_name, size, variants in groups:
        b = registered[bench_name]
        assert size in {b.size_label(s) for s in b.sizes}, (name, size)
        hopper_rows = set(week_bench.hopper_variants(week_bench._forward_only, False, "fwdbwd" in bench_name
                                                     or bench_name == "attention_train_week4"))
        unknown = set(variants.split()) - set(b.variants) - hopper_rows
        assert not unknown, (name, unknown)
        if name.startswith("fah"):
            assert "hopper" in variants.split() and ({"sdpa_cudnn", "torch"} & set(variants.split())), name
    text = (ROOT / "tools" / "ncu_hopper.sh").read_text()
    for name in ("fah_4096", "fah_4096c", "fah_gpt2", "fahb_4096"):  # the extensions are built before ncu
        assert f"PREBUILD_{name}=$HOPPER_BUILDS" in text


@pytest.mark.parametrize("rung,asked", [("flash_hopper", "flash_tma"), ("flash_tma", None), ("flash_blocked", None)])
def test_the_triton_row_never_runs_the_cuda_kernel(rung, asked, monkeypatch):
    # The op's dispatch sends some keys to this rung (results/dispatch_attention.json): the Triton row must
    # then name a Triton forward, or it would time the CUDA C kernel against itself.
    from course.dispatch import Choice

    from week4_triton_dl.attention import hopper_bench as hb

    calls = []
    monkeypatch.setattr(hb.dispatch, "choose", lambda q, k, v, causal: Choice(rung))
    monkeypatch.setattr(hb, "flash_attention", lambda q, k, v, causal, rung=None: calls.append(rung) or q)
    hb.triton_attention(None, None, None, True)
    assert calls == [asked]
    # the forward bench's row is this function; the forward + backward bench's step calls it
    assert hb.VARIANTS["triton"] is hb.triton_attention and fb.triton_attention is hb.triton_attention
