"""week5_integration.finetune: the memory model, the prompts and their scoring, the variants, and the
whole experiment end to end on the tiny config (CPU: seconds)."""
import json

import pytest
import torch

from course import bench, runtime
from course.check import assert_close
from week5_integration import finetune_bench  # the record, table and command line (of the solution's run)
from week5_integration import model as gpt

ft = runtime.lesson("week5_integration.finetune")
lr = runtime.lesson("week5_integration.lora")
DEVICE = runtime.DEVICE


# -------------------------------------------------------------------------- the memory model
def test_parameter_counts_match_the_model():
    cfg = ft.CONFIGS["tiny"]
    counts = ft.parameter_counts(cfg, rank=4)
    torch.manual_seed(0)
    model = gpt.GPT(cfg)
    assert counts["total"] == gpt.count_parameters(model)
    linears = [m for name, m in model.named_modules() if name.rsplit(".", 1)[-1] in lr.TARGETS]
    assert counts["linear"] == sum(m.weight.numel() for m in linears)
    lr.apply_lora(model, r=4, alpha=8, kernel="torch")
    assert counts["adapters"] == lr.count_trainable(model)
    assert counts["embedding"] == model.tok.weight.numel()


def test_memory_model_predicts_the_ratios_the_notes_quote():
    cfg, plan = ft.CONFIGS["gpt2"], ft.PLANS["gpt2"]
    tokens = plan.batch * plan.seq_len
    parts = {v: ft.memory_model(cfg, v, tokens, rank=plan.rank) for v in ("full", "lora", "qlora")}
    p = ft.parameter_counts(cfg, plan.rank)["total"]
    assert parts["full"]["weights"] == 4 * p and parts["full"]["grads"] == 4 * p
    assert parts["full"]["optimizer"] == 8 * p  # AdamW's m and v in fp32
    assert len({v["activations"] for v in parts.values()}) == 1  # the same activations for all three
    qlora_ratio = parts["qlora"]["total"] / parts["full"]["total"]
    lora_ratio = parts["lora"]["total"] / parts["full"]["total"]
    assert 0.33 < qlora_ratio < 0.40 and 0.40 < lora_ratio < 0.45  # the module docstring's 0.36 and 0.42
    # The NF4 base: 4.127 bits per adapted weight, against 32 for full fine-tuning's master copy.
    assert parts["qlora"]["weights"] < 0.2 * parts["full"]["weights"]
    without = ft.memory_model(cfg, "qlora", tokens, checkpointing=False)
    assert without["activations"] > 4 * parts["qlora"]["activations"]
    assert ft.memory_model(cfg, "qlora", 2 * tokens)["total"] > parts["qlora"]["total"]
    with pytest.raises(ValueError, match="variant must be one of"):
        ft.memory_model(cfg, "prefix_tuning", tokens)


@pytest.mark.gpu(reason="the activation formula counts what CUDA kernels save (flash SDPA, fused RMSNorm) in bf16")
def test_activation_formula_matches_the_saved_tensors():
    cfg = ft.CONFIGS["small"]
    torch.manual_seed(0)
    model = gpt.GPT(cfg).to(DEVICE)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params and not (t.dim() == 2 and tuple(t.shape) in shapes):
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    # autocast's bf16 copies of the weights are not activations. torch 2.11 saves them for the
    # matmul's backward as the transposed view W^T (measured on the H100: 25 copies, 47.5 MB of the
    # 121.7 MB saved), so a weight copy shows either shape.
    shapes = {s for p in model.parameters() for s in (tuple(p.shape), tuple(p.shape)[::-1])}
    # 2 x 200 tokens: no activation of shape (tokens, d) can pass for a (512, 512) weight copy.
    idx = torch.randint(0, cfg.vocab_size, (2, 200), device=DEVICE)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ft.autocast():
        model.loss(idx, idx)
    predicted = ft.activation_bytes(cfg, 2 * 200, checkpointing=False)
    assert 0.8 * predicted < sum(saved.values()) < 1.25 * predicted, (sum(saved.values()), predicted)


# ------------------------------------------------------------------------- prompts and scoring
def test_sum_prompts_have_one_length_and_correct_answers():
    prompts, answers = ft.sum_prompts(50, 24, seed=3)
    assert len(prompts) == len(answers) == 50 and {len(p) for p in prompts} == {24}
    for prompt, answer in zip(prompts, answers):
        a, b = prompt.rsplit(" ", 1)[1].rstrip("=").split("+")
        assert answer == f"{int(a) + int(b)}."
    assert ft.sum_prompts(50, 24, seed=3) == (prompts, answers)  # deterministic


def test_score_answers_is_exact_match_up_to_the_first_period():
    answers = ["42.", "7.", "198."]
    assert ft.score_answers(["42. 1+1", "7.", "198."], answers) == 1.0
    assert ft.score_answers(["42", "71.", "19.8"], answers) == 0.0  # no period, wrong, cut early
    assert ft.score_answers(["42.", "8.", "x"], answers) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="generations for"):
        ft.score_answers(["1."], answers)


# ---------------------------------------------------------------------------------- variants
@pytest.mark.parametrize("variant", ft.VARIANTS)
def test_each_variant_trains_what_it_says(variant):
    cfg, plan = ft.CONFIGS["tiny"], ft.PLANS["tiny"]
    torch.manual_seed(0)
    model = ft.prepare(gpt.GPT(cfg).to(DEVICE), variant, plan)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    if variant == "full":
        assert trainable == {n for n, _ in model.named_parameters()}
    else:
        assert trainable == {n for n, _ in model.named_parameters() if n.endswith(("lora_a", "lora_b"))} | {"tok.weight"}
        kind = "QLoRALinear" if variant == "qlora" else "LoRALinear"  # by name: --impl=exercises has two copies
        assert sum(type(m).__name__ == kind for m in model.modules()) == 4 * cfg.n_layers


def test_checkpointed_blocks_give_the_same_loss_and_gradients():
    cfg = ft.CONFIGS["tiny"]
    torch.manual_seed(0)
    plain = gpt.GPT(cfg).to(DEVICE)
    ckpt = ft.checkpoint_blocks(gpt.GPT(cfg).to(DEVICE))
    ckpt.load_state_dict(plain.state_dict())
    idx = torch.randint(0, cfg.vocab_size, (2, 16), device=DEVICE)
    losses = [m.loss(idx, idx) for m in (plain, ckpt)]
    for loss in losses:
        loss.backward()
    assert_close(losses[1], losses[0])
    for (name, p), q in zip(plain.named_parameters(), ckpt.parameters()):
        assert_close(q.grad, p.grad, name=name)
    with torch.no_grad():  # generation (a KV cache, no autograd) bypasses the checkpointing
        assert torch.equal(gpt.generate(ckpt, idx[:, :4], 3), gpt.generate(plain, idx[:, :4], 3))


# ------------------------------------------------------------------------------ end to end
# The whole experiment (pre-training, four variants, evaluation, generation) took 29 s on the H100,
# most of it compiling and autotuning kernels: slow. The command line below runs the same chain
# (run, record, markdown table, save) on two variants by default.
@pytest.mark.slow
def test_the_experiment_runs_and_writes_a_course_record(tmp_path):
    run = ft.run("tiny", pretrain_steps=30, steps=12, plan_changes={"prompts": 8, "eval_batches": 2, "warmup": 3},
                 log=lambda *a, **k: None)
    result = finetune_bench.record([run])
    assert bench.is_result(result) and result["benchmark"] == "finetune_week5"
    assert result["simulated"] == (not runtime.on_gpu()) and "copy_gbps" in result["ceilings"]
    rows = {r["variant"]: r for r in result["rows"]}
    assert list(rows) == ["pretrained", *ft.VARIANTS]
    for variant in ft.VARIANTS:
        row = rows[variant]
        for key in ("size", "ms", "trainable_params", "final_loss", "val_loss", "exact_match", "predicted_peak_mib"):
            assert row.get(key) is not None, (variant, key)
        assert 0.0 <= row["exact_match"] <= 1.0
        # Twelve steps on the new task already beat the model that has only read stories.
        assert row["val_loss"] < rows["pretrained"]["val_loss"], variant
        assert len(result["curves"]["tiny"][variant]) == 12
    assert rows["full"]["trainable_params"] > 2 * rows["lora"]["trainable_params"]
    assert rows["lora"]["trainable_params"] == rows["qlora"]["trainable_params"] == rows["lora_torch"]["trainable_params"]
    if not runtime.on_gpu():  # in simulation "lora" runs the torch twin: the very same arithmetic
        assert result["curves"]["tiny"]["lora"] == result["curves"]["tiny"]["lora_torch"]
    paths = finetune_bench.save(result, tmp_path)
    assert [p.name for p in paths] == ["finetune_week5.json", "finetune_week5.md", "finetune_week5_loss.png"]
    assert json.loads(paths[0].read_text())["rows"] == json.loads(json.dumps(result["rows"]))
    table = paths[1].read_text()
    assert all(f"| {v} |" in table for v in ft.VARIANTS)
    assert "| qlora |" in bench.markdown_table(result)  # what `python -m course report` renders


def test_the_command_line_prints_the_table(tmp_path, capsys):
    # The command line's plumbing on the cheapest variant: on a GPU "qlora" compiles the NF4 and
    # LoRA kernels (~20 s), which the experiment test above (slow) and the week-5 kernel tests run.
    assert finetune_bench.main(["--config", "tiny", "--pretrain-steps", "3", "--steps", "2", "--variants", "full",
                    "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| full |" in out and (tmp_path / "finetune_week5_loss.png").is_file()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="config must be one of"):
        ft.run("huge")
    with pytest.raises(ValueError, match="variants must be"):
        ft.run("tiny", variants=("full", "adapters"))
    with pytest.raises(ValueError, match="step counts"):
        ft.run("tiny", steps=-1)
    with pytest.raises(ValueError, match="exceed max_seq_len"):
        ft.run("tiny", plan_changes={"seq_len": 64})


def test_a_variants_row_says_whether_the_host_paced_its_steps(gpu_clock, monkeypatch):
    """The timed steps go through the kit's clock (course/bench_clock.py): its Timing gives the row its ms and,
    on a GPU, host_bound and host_ms; the table marks a host-paced ms. The GPU path runs here with stand-in
    events (conftest's gpu_clock), which follow the host: every loop is host-paced."""
    monkeypatch.setattr(bench, "LoopClock", gpu_clock())
    run = ft.run("tiny", pretrain_steps=2, steps=5, variants=("full",), log=lambda *a, **k: None)
    row = next(r for r in run["rows"] if r["variant"] == "full")
    assert row["host_bound"] is True and row["host_ms"] > 0 and row["ms"] > 0
    assert row["reps"] == 4 and row["ms_min"] <= row["ms"]  # 5 steps, the first a warm-up (min(5, max(5 // 4, 1)))
    result = finetune_bench.record([run])
    table = finetune_bench.markdown_table(result)
    assert f"| {row['ms']:.2f}* |" in table and "host-bound" in table
    del row["host_bound"], row["host_ms"]  # a record made before the flag: unmarked, no footnote
    table = finetune_bench.markdown_table(result)
    assert f"| {row['ms']:.2f} |" in table and "host-bound" not in table
