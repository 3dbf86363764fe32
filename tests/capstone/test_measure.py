"""capstone.measure and capstone.summary: the summary compares each target with the right rows (no GPU needed)."""
from capstone import measure, summary


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
                     "fused_gemms+compile", "fused_gemms+compile+cudagraphs"]
    ops = {name: o for name, o, _ in measure.train_variants()}
    assert ops["fast+compile"].name == "+fused_ce" and ops["fused_gemms+compile"].name == "+norm_gemm"


def test_summary_holds_the_fused_gemms_to_issue_32s_targets():
    train = record([
        {"size": "s", "variant": "torch", "ms": 40.0, "tokens_per_s": 100.0},
        {"size": "s", "variant": "torch.compile", "ms": 25.0, "tokens_per_s": 160.0},
        {"size": "s", "variant": "torch.compile+cudagraphs", "ms": 24.0, "tokens_per_s": 166.0},
        {"size": "s", "variant": "fused_gemms+compile", "ms": 19.0, "tokens_per_s": 210.0, "tflops": 400.0},
        {"size": "s", "variant": "fused_gemms+compile+cudagraphs", "ms": 18.0, "tokens_per_s": 222.0, "tflops": 460.0},
    ])
    held = {"step0_abs_diff": 0.001, "moving_avg_max_abs_diff": 0.01, "within_tolerance": True,
            "control": {"moving_avg_max_abs_diff": 0.02}, "within_control": True}
    loss = {"steps": 200, "tolerance": measure.LOSS_TOLERANCE, "fused_gemms": held}
    lines = [line for line in summary.summary_markdown(train, None, loss).splitlines() if "fused GEMMs" in line]
    assert len(lines) == 5
    assert "1.32x | yes" in lines[0] and "1.33x | yes" in lines[1] and "2.22x | yes" in lines[2]
    assert "46.5% | yes" in lines[3] and lines[4].endswith("| yes |")
