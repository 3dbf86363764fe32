"""capstone.measure and capstone.summary: the summary compares each target with the right rows (no GPU needed)."""
import re

import pytest

from course import runtime
from capstone import attention_ops, measure, summary, wgmma_ops


def record(rows):
    return {"rows": rows, "machine": {"gpu": "H100 (made up for the test)", "torch": "x"}, "date": "today"}


def test_summary_reads_the_targets_from_the_rows():
    train = record([
        {"size": "s", "variant": "torch", "ms": 40.0, "tokens_per_s": 100.0, "peak_mib": 9000.0},
        {"size": "s", "variant": "torch.compile", "ms": 30.0, "tokens_per_s": 133.0, "peak_mib": 8000.0},
        {"size": "s", "variant": "fast", "ms": 25.0, "tokens_per_s": 160.0, "peak_mib": 5000.0},
        {"size": "s", "variant": "fast+compile", "skipped": "failed: x"},
    ])
    decode = record([
        {"size": "B=1, context 960+64", "variant": "torch no_cache", "ms": 6.0, "tokens_per_s": 166.0},
        {"size": "B=1, context 960+64", "variant": "fast cache+graph", "ms": 1.5, "tokens_per_s": 666.0},
    ])
    loss = {"steps": 200, "tolerance": measure.LOSS_TOLERANCE, "step0_abs_diff": 0.001,
            "moving_avg_max_abs_diff": 0.2, "max_abs_diff": 0.3, "within_tolerance": False}
    text = summary.summary_markdown(train, decode, loss)
    lines = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert "1.60x | NO" in lines["| training tokens/s >= 2.0x the eager twin"]
    assert "1.20x | NO" in lines["| training tokens/s >= 1.25x the compiled twin"]
    assert "| yes |" in lines["| peak memory <= the eager twin's"]
    assert "4.0x | NO" in next(v for k, v in lines.items() if "decode tokens/s (KV cache + CUDA graph)" in k)
    assert "| NO |" in next(v for k, v in lines.items() if "loss over 200 steps" in k)
    assert "pending" in next(v for k, v in lines.items() if "FSDP" in k)
    assert "H100 (made up for the test)" in text


def test_summary_without_measurements_says_so():
    text = summary.summary_markdown(None, None, None)
    assert text.count("not measured") >= 5 and "SIMULATION" in text


def test_train_variants_follow_the_ladder():
    names = [name for name, _, _ in measure.train_variants()]
    assert names == ["torch", "+flash_attention", "+fused_norm_rope_swiglu", "fast", "+swiglu_gemm", "+residual_gemm",
                     "+norm_gemm", "fast, one-thread backward", "torch.compile", "fast+compile",
                     "torch.compile+cudagraphs", "fast+compile+cudagraphs",
                     "fused_gemms+compile", "fused_gemms+compile+cudagraphs",
                     "wgmma_gemms+compile", "wgmma_gemms+compile+cudagraphs",
                     "sdpa_attention", "triton_attention", "hopper_attention",
                     "hopper_attention+compile", "hopper_attention+compile+cudagraphs"]
    ops = {name: o for name, o, _ in measure.train_variants()}
    assert ops["fast+compile"].name == "+fused_ce" and ops["fused_gemms+compile"].name == "+norm_gemm"
    modes = {name: mode for name, _, mode in measure.train_variants()}
    for name in measure.WGMMA_VARIANTS:  # week 1's CUDA C GEMMs, compiled as the Triton ones are
        assert ops[name].name == "wgmma_gemms" and ops[name].linear_swiglu is wgmma_ops.linear_swiglu
    assert modes["wgmma_gemms+compile"] is True and modes["wgmma_gemms+compile+cudagraphs"] == "reduce-overhead"
    assert set(measure.WGMMA_VARIANTS) <= set(measure.READ_AGAINST)
    # the attention isolated (issue 33): fast with its attention forced, each read against fast of its mode
    for name in measure.HOPPER_ATTENTION_VARIANTS:
        assert ops[name].name == "hopper_attention" and ops[name].attention is attention_ops.hopper_attention
        assert measure.READ_AGAINST[name] == name.replace("hopper_attention", "fast")
    assert modes["hopper_attention"] is False and modes["hopper_attention+compile+cudagraphs"] == "reduce-overhead"
    assert ops["sdpa_attention"].attention is not ops["fast"].attention
    assert measure.READ_AGAINST["sdpa_attention"] == measure.READ_AGAINST["triton_attention"] == "fast"


def pretend_gpu(monkeypatch, capability):
    """This machine as a GPU of `capability` (None: no GPU) for wgmma_ops.unsupported() and
    attention_ops.unsupported(); the record's machine line and the rows' attention labels made up (describing
    them would ask the driver)."""
    monkeypatch.setattr(runtime, "on_gpu", lambda: capability is not None)
    monkeypatch.setattr(attention_ops, "describe", lambda attention, shape, dtype: f"label of {attention.__name__}")
    monkeypatch.setattr(runtime, "capability", lambda device=None: capability)
    monkeypatch.setattr(runtime, "describe", lambda: {"gpu": "made up for the test"})
    monkeypatch.setattr(measure.bench, "copy_bandwidth_gbps", lambda: None)


@pytest.mark.parametrize("capability", [None, (8, 0), (12, 0)])
def test_sm90a_variants_are_skipped_with_the_reason_off_hopper(capability, monkeypatch, tmp_path):
    """Off sm_90 (or without a GPU) the wgmma and Hopper attention rows say why, in the skipped-row convention;
    nothing is timed in their name (time_training would fail the test if it ran)."""
    pretend_gpu(monkeypatch, capability)
    monkeypatch.setattr(measure, "time_training", lambda *a, **k: pytest.fail("an sm_90a variant was run"))
    p = {**measure.plan(), "compile": True}
    only = measure.WGMMA_VARIANTS + measure.HOPPER_ATTENTION_VARIANTS
    record = measure.measure_training(p, tmp_path, deadline=float("inf"), only=only)
    rows = {r["variant"]: r for r in record["rows"]}
    assert set(rows) == set(only)
    for name in measure.HOPPER_ATTENTION_VARIANTS:
        assert "week4_triton_dl.attention.flash_attention" in rows[name]["skipped"]  # the fallback, named
        assert rows[name]["attention"] == "label of hopper_attention"
    want = "no GPU" if capability is None else rf"compute capability {capability[0]}\.{capability[1]}"
    for row in rows.values():
        assert "ms" not in row and re.search(want, row["skipped"]), row
        assert "sm_90a" in row["skipped"]


def test_loss_phase_skips_the_sm90a_curves_with_the_reason(monkeypatch):
    pretend_gpu(monkeypatch, (8, 9))
    assert ("hopper_attention", "hopper_attention", False) in measure.LOSS_CURVES  # held to the twin on sm_90a
    monkeypatch.setattr(measure, "LOSS_CURVES", (("wgmma_gemms", "wgmma_gemms", False),
                                                 ("hopper_attention", "hopper_attention", False)))
    result = measure.measure_loss(measure.plan(), deadline=float("inf"))
    for name in ("wgmma_gemms", "hopper_attention"):
        assert "compute capability 8.9" in result["curves"][name]["skipped"]


def test_training_rows_name_their_attention_and_read_siblings_against_fast(monkeypatch, tmp_path):
    """Each row carries the attention it ran (attention_ops.describe, at the step's shape); an attention sibling's
    "vs previous rung" is fast's ms over its own. The timing is made up: what is tested is the bookkeeping."""
    pretend_gpu(monkeypatch, None)
    ms = {"torch": 40.0, "fast": 30.0, "sdpa_attention": 31.0, "triton_attention": 30.0}
    monkeypatch.setattr(measure, "time_training", lambda p, ops, *, compile, profile_to=None, name="": {"ms": ms[name]})
    record = measure.measure_training(measure.plan(), tmp_path, deadline=float("inf"), only=tuple(ms))
    rows = {r["variant"]: r for r in record["rows"]}
    assert rows["fast"]["attention"] == "label of course_attention"
    assert rows["torch"]["attention"] == rows["sdpa_attention"]["attention"] == "label of torch_attention"
    assert rows["triton_attention"]["attention"] == "label of triton_attention"
    assert rows["sdpa_attention"]["gain_vs_previous_rung"] == pytest.approx(30.0 / 31.0)
    table = measure._table(record)
    assert "| attention |" in table.splitlines()[2] and "label of triton_attention" in table


@pytest.fixture
def fused_rows():
    """The twins and week 4's fused GEMMs' model, eager and compiled: the rows issue 32's targets read."""
    return [{"size": "s", "variant": "torch", "ms": 40.0, "tokens_per_s": 100.0},
            {"size": "s", "variant": "torch.compile", "ms": 25.0, "tokens_per_s": 160.0},
            {"size": "s", "variant": "torch.compile+cudagraphs", "ms": 24.0, "tokens_per_s": 166.0},
            {"size": "s", "variant": "fused_gemms+compile", "ms": 19.0, "tokens_per_s": 210.0, "tflops": 400.0},
            {"size": "s", "variant": "fused_gemms+compile+cudagraphs", "ms": 18.0, "tokens_per_s": 222.0,
             "tflops": 460.0}]


def test_summary_holds_the_fused_gemms_to_issue_32s_targets(fused_rows):
    train = record(fused_rows)
    held = {"step0_abs_diff": 0.001, "moving_avg_max_abs_diff": 0.06, "final_mean_abs_diff": 0.001,
            "within_tolerance": False, "control": {"moving_avg_max_abs_diff": 0.08, "final_mean_abs_diff": 0.0},
            "within_control": True}
    loss = {"steps": 200, "tolerance": measure.LOSS_TOLERANCE, "fused_gemms": held}
    lines = [line for line in summary.summary_markdown(train, None, loss).splitlines() if "fused GEMMs" in line]
    assert len(lines) == 6
    assert "1.32x | yes" in lines[0] and "1.33x | yes" in lines[1] and "2.22x | yes" in lines[2]
    assert "46.5% | yes" in lines[3]
    # the loss in two rows, as the fast model's: the pre-stated bound missed (0.06 > 0.05), the control met
    assert "within 0.05" in lines[4] and "means: 0.0600" in lines[4] and lines[4].endswith("| NO |")
    assert "control" in lines[5] and "0.0600 (control 0.0800)" in lines[5] and lines[5].endswith("| yes |")
    del held["control"], held["within_control"]  # no control measured: the pre-stated bound's row alone
    lines = [line for line in summary.summary_markdown(train, None, loss).splitlines() if "fused GEMMs" in line]
    assert len(lines) == 5 and lines[4].endswith("| NO |")


def test_summary_takes_the_faster_fused_gemms_and_names_it(fused_rows):
    """Issue 32's rows take the faster of week 4's Triton and week 1's CUDA C model in each mode; a counted
    CUDA C model brings its own loss row (its residual stream is bf16)."""
    train = record(fused_rows + [
        {"size": "s", "variant": "wgmma_gemms+compile", "ms": 20.0, "tokens_per_s": 200.0, "tflops": 380.0},
        {"size": "s", "variant": "wgmma_gemms+compile+cudagraphs", "ms": 16.0, "tokens_per_s": 250.0, "tflops": 500.0},
    ])
    lines = [line for line in summary.summary_markdown(train, None, None).splitlines()
             if "fused GEMMs" in line or "wgmma GEMMs" in line]
    assert "fused_gemms+compile 210" in lines[0]  # default mode: Triton is the faster here
    assert "wgmma_gemms+compile+cudagraphs 250" in lines[1] and "1.50x | yes" in lines[1]
    assert "wgmma_gemms+compile+cudagraphs" in lines[2] and "2.50x" in lines[2]
    assert "wgmma GEMMs" in lines[-1] and "not measured" in lines[-1]


def test_summary_names_each_rows_attention_and_judges_the_rule():
    """Issue 33: the rows quoted name their attention; fast (the dispatch rule's pick) is held to the fastest of
    the op's kernels forced in the same model, within week 4's dispatch margin (SDPA shown, not judged)."""
    rule, forced = "Triton flash_blocked: dispatch rule", "CUDA C flash_hopper fwd + bwd: forced"
    train = record([
        {"size": "s", "variant": "torch", "ms": 40.0, "tokens_per_s": 100.0, "attention": "SDPA flash"},
        {"size": "s", "variant": "fast", "ms": 20.0, "tokens_per_s": 200.0, "attention": rule},
        {"size": "s", "variant": "triton_attention", "ms": 20.2, "tokens_per_s": 198.0,
         "attention": "Triton flash_blocked: forced"},
        {"size": "s", "variant": "hopper_attention", "ms": 21.0, "tokens_per_s": 190.0, "attention": forced},
        {"size": "s", "variant": "sdpa_attention", "ms": 18.0, "tokens_per_s": 222.0, "attention": "SDPA flash"},
        {"size": "s", "variant": "fast+compile+cudagraphs", "ms": 16.0, "tokens_per_s": 250.0, "attention": rule},
        {"size": "s", "variant": "hopper_attention+compile+cudagraphs", "ms": 15.0, "tokens_per_s": 267.0,
         "attention": forced},
    ])
    lines = summary.summary_markdown(train, None, None).splitlines()
    eager = next(line for line in lines if line.startswith("| training tokens/s >= 2.0x the eager twin"))
    assert f"fast ({rule}) 200" in eager
    first, graphs = (line for line in lines if line.startswith("| attention (issue 33)"))
    assert first.startswith("| attention (issue 33): fast's") and first.endswith("| yes |")  # SDPA faster: not judged
    assert f"hopper_attention ({forced}) 190: 0.95x" in first and "sdpa_attention (SDPA flash) 222: 1.11x" in first
    assert graphs.startswith("| attention (issue 33): fast+compile+cudagraphs's") and graphs.endswith("| NO |")
    assert "1.07x" in graphs  # the Hopper kernels past the margin: the rule should have picked them here
    assert "| Hopper attention (week 4's CUDA C): loss tracks the eager twin | not measured | - |" in lines


# ------------------------------------------------------------------ whether the host paced the timed steps
def test_a_training_row_says_whether_the_host_paced_its_timed_steps(monkeypatch, gpu_clock, tmp_path):
    """time_training times the steps after the warm-up as one group of the kit's clock (course/bench_clock.py):
    the row's ms is that Timing's median, host_bound and host_ms beside it; the table marks a host-paced ms.
    The GPU path runs on the CPU with stand-in events (conftest's gpu_clock), which follow the host."""
    from capstone import train as ct

    monkeypatch.setattr(ct, "LoopClock", gpu_clock())
    p = measure.plan()
    got = measure.time_training(p, measure.cm.ladder()[0], compile=False)
    assert got["host_bound"] is True and got["host_ms"] > 0 and got["ms"] > 0 and got["first_step_ms"] > 0
    record = measure._header(measure.TRAIN_BENCH, "t", "n", [], [{"size": "s", "variant": "torch", **got}])
    table = measure._table(record)
    assert f"| {got['ms']:.3f}* |" in table and "host-bound" in table
    del record["rows"][0]["host_bound"]  # a record made before the flag renders as it did
    assert "* |" not in measure._table(record) and "host-bound" not in measure._table(record)


def test_each_training_variant_starts_from_a_fresh_compile_state(monkeypatch):
    """Dynamo's caches and the CUDA-graph trees are per process. Two compiled variants in one process shared them
    on an H100 (the second's first graph recording found the first's tensor in the pool and failed), and every
    compiled variant counts its frames against the recompile limit of the one `forward` they share: so
    time_training resets the compile state before its trainer is built and after it is gone."""
    events = []
    monkeypatch.setattr(measure.torch._dynamo, "reset", lambda: events.append("reset"))

    class Trainer:
        def __init__(self, *a, **k):
            events.append("trainer")
            self.timings = [None]

        def run(self, *a, **k):
            return [{"ms": 1.0, "loss": 2.0}]

    monkeypatch.setattr(measure, "Trainer", Trainer)
    monkeypatch.setattr(measure.bench, "timing_fields", lambda timing: {"ms": 1.0})
    measure.time_training(measure.plan(), None, compile="reduce-overhead")
    assert events == ["reset", "trainer", "reset"]


def test_a_decode_row_is_host_bound_when_any_round_was(monkeypatch, gpu_clock):
    """The decode phase's rows take the flag over their rounds' Timings (bench_timing.rounds_fields)."""
    from week5_integration import inference

    monkeypatch.setattr(inference, "LoopClock", gpu_clock())
    p = {**measure.plan(), "decode_new": 3, "decode_prompt": 4}
    record = measure.measure_decode(p, deadline=float("inf"))
    rows = [r for r in record["rows"] if "ms" in r]
    assert rows and all(r["host_bound"] is True and r["host_ms"] > 0 for r in rows)
    assert measure._table(record).count("* |") == len(rows)


def hopper_loss(within_tolerance, within_control=None):
    held = {"step0_abs_diff": 0.002, "moving_avg_max_abs_diff": 0.07, "final_mean_abs_diff": 0.004,
            "within_tolerance": within_tolerance}
    if within_control is not None:
        held.update(control={"moving_avg_max_abs_diff": 0.05, "final_mean_abs_diff": 0.003},
                    within_control=within_control)
    return {"steps": 200, "tolerance": measure.LOSS_TOLERANCE, "hopper_attention": held}


@pytest.mark.parametrize("within_tolerance, within_control, verdicts, verdict", [
    (True, True, ["yes", "yes"], "within the bound"),
    (False, True, ["NO", "yes"], "beyond the bound, within the control's drift"),
    (False, False, ["NO", "NO"], "beyond both"),
    (False, None, ["NO"], "beyond the bound (no control measured)"),
])
def test_the_hopper_attention_loss_holds_the_bound_and_the_control_apart(within_tolerance, within_control,
                                                                          verdicts, verdict):
    """As every other model's loss (held_rows): the pre-stated bound's row, then the control's, each with its
    own verdict, and the last row saying which of the three the curve is; never one joined verdict."""
    lines = [line for line in summary.summary_markdown(None, None, hopper_loss(within_tolerance, within_control))
             .splitlines() if line.startswith("| Hopper attention")]
    assert [line.rsplit("|", 2)[-2].strip() for line in lines] == verdicts
    assert f": {verdict} |" in lines[-1]
    assert "within 0.05" in lines[0] and "means: 0.0700" in lines[0]
    if within_control is not None:
        assert "0.0700 (control 0.0500)" in lines[1]
