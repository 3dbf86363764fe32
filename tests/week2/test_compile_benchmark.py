"""week2_pytorch_optimizations.compile_benchmark: every configuration against eager float32.

On the CPU only two torch.compile calls run (a training and an inference step of the tiny
GPT, "compile"): each costs 10-40 s of C++ code generation there. Every other compiled or
CUDA-graph configuration is checked on the GPU, here and again inside the benchmark itself
(its `first-step rel. err` column, on the full-size model).
"""
import json

import pytest
import torch

from course import runtime
from course.check import assert_close

cb = runtime.lesson("week2_pytorch_optimizations.compile_benchmark")
models = runtime.lesson("week2_pytorch_optimizations.models")

TINY = {"cfg": models.GPT_TINY, "batch": 2}
COMPILE_ON_GPU = pytest.mark.gpu(reason="torch.compile costs 10-40 s per model on the CPU; "
                                        "the CPU run compiles only the 'compile' config")
GRAPH = pytest.mark.gpu(reason="CUDA graphs capture CUDA kernels")
CPU_CONFIGS = {"eager+bf16", "compile"}


def config_params():
    params = []
    for name, config in cb.CONFIGS.items():
        if name == "eager":
            continue
        marks = () if name in CPU_CONFIGS else (GRAPH if config.cuda_graph else COMPILE_ON_GPU)
        if config.compile_mode == "max-autotune":  # its GEMM search took 8-20 s per matmul shape on an H100
            marks = (marks, pytest.mark.slow)
        params.append(pytest.param(name, marks=marks))
    return params


@pytest.fixture(scope="module")
def eager_trace():
    return cb.train_trace("gpt", "eager", **TINY)


@pytest.fixture(scope="module")
def eager_logits():
    return cb.infer_output("gpt", "eager", **TINY)


def test_eager_is_deterministic(eager_trace):
    again = cb.train_trace("gpt", "eager", **TINY)
    assert again["losses"] == eager_trace["losses"]
    assert_close(again["grads"], eager_trace["grads"], rtol=0, atol=0)
    assert eager_trace["losses"][2] < eager_trace["losses"][0]  # AdamW is learning something


@pytest.mark.parametrize("name", config_params())
def test_training_step_matches_eager_fp32(name, eager_trace):
    trace = cb.train_trace("gpt", name, **TINY)
    tol = cb.tolerance(cb.CONFIGS[name])  # the reasons are in tolerance()'s docstring
    assert_close(torch.tensor(trace["losses"], dtype=torch.float64),
                 torch.tensor(eager_trace["losses"], dtype=torch.float64), rtol=tol["loss_rtol"], atol=0,
                 name=f"{name} losses over 3 steps")
    report = cb.compare(name, trace, eager_trace)
    assert report["grad_rel_err"] <= tol["grad_rel"], report
    assert report["ok"]


@pytest.mark.parametrize("name", config_params())
def test_inference_step_matches_eager_fp32(name, eager_logits):
    logits = cb.infer_output("gpt", name, **TINY)
    assert logits.shape == (2, models.GPT_TINY.seq_len, models.GPT_TINY.vocab_size)
    assert cb.rel_err(logits, eager_logits) <= cb.tolerance(cb.CONFIGS[name])["grad_rel"]


def test_bf16_autocast_changes_the_numbers_but_not_the_answer(eager_trace):
    """bf16 is not float32: the gradients differ by far more than rounding noise."""
    trace = cb.train_trace("gpt", "eager+bf16", **TINY)
    report = cb.compare("eager+bf16", trace, eager_trace)
    assert report["ok"] and report["grad_rel_err"] > cb.tolerance(cb.CONFIGS["compile"])["grad_rel"]


@pytest.mark.parametrize("name", ["eager+bf16", pytest.param("cudagraph+bf16", marks=GRAPH),
                                  pytest.param("reduce-overhead+bf16", marks=COMPILE_ON_GPU)])
def test_mlp_training_step_matches_eager(name):
    sizes = {"cfg": models.MLP_TINY, "batch": 5}
    ref, trace = cb.train_trace("mlp", "eager", **sizes), cb.train_trace("mlp", name, **sizes)
    assert cb.compare(name, trace, ref)["ok"]


@GRAPH
def test_make_graphed_callables_matches_eager():
    task = cb.make_task("mlp", models.MLP_TINY, 5)
    reference = cb.make_task("mlp", models.MLP_TINY, 5)
    graphed = cb.make_graphed_mlp(task)
    x, y = task.batch
    out, ref = graphed(x), reference.model(x)
    assert_close(out, ref, rtol=1e-5, atol=1e-6)  # same kernels, replayed
    task.loss_fn(out, y).backward()
    reference.loss_fn(ref, y).backward()
    for p, q in zip(task.model.parameters(), reference.model.parameters()):
        assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


@GRAPH
def test_cuda_graph_step_returns_its_static_loss():
    task = cb.make_task("gpt", **TINY)
    step = cb.make_train_step(task, "cudagraph")
    x, y = task.batch
    first = step(x, y)
    value = float(first)
    second = step(x, y)
    assert first.data_ptr() == second.data_ptr()  # one buffer, overwritten by every replay
    assert float(first) != value  # ...which is why train_trace copies the loss out at once


def _other_batch(seed):
    return models.gpt_batch(models.GPT_TINY, TINY["batch"], runtime.DEVICE, generator=torch.Generator().manual_seed(seed))


@GRAPH
@pytest.mark.parametrize("name", ["cudagraph", "cudagraph+bf16",  # the compiled ones: ~20 s of compiling each
                                  pytest.param("compile+bf16+cudagraph", marks=pytest.mark.slow),
                                  pytest.param("reduce-overhead", marks=pytest.mark.slow)])
def test_graph_steps_reused_with_new_inputs_match_eager(name):
    """A captured step keeps static input buffers: a call with NEW inputs must copy them in and
    give their answer. Inference: batches A, B, A against eager on each (logits, not tokens);
    training: steps on A, B, A against eager steps on the same sequence (the losses)."""
    tol = cb.tolerance(cb.CONFIGS[name])
    task, ref_task = cb.make_task("gpt", **TINY), cb.make_task("gpt", **TINY)
    batches = [task.batch, _other_batch(11), task.batch]
    step, ref_step = cb.make_infer_step(task, name), cb.make_infer_step(ref_task, "eager")
    for i, (x, _) in enumerate(batches):
        got = step(x.clone()).float().clone()  # a fresh tensor each time: never the static one
        assert cb.rel_err(got, ref_step(x).float()) <= tol["grad_rel"], f"inference call {i}"
    if name == "reduce-overhead":
        return
    task, ref_task = cb.make_task("gpt", **TINY), cb.make_task("gpt", **TINY)
    step, ref_step = cb.make_train_step(task, name), cb.make_train_step(ref_task, "eager")
    for i, (x, y) in enumerate(batches):
        got, want = float(step(x.clone(), y.clone())), float(ref_step(x, y))
        assert abs(got - want) <= tol["loss_rtol"] * abs(want), f"training step {i}: {got} vs eager {want}"


@pytest.mark.skipif(runtime.on_gpu(), reason="checks the CPU's refusal; a GPU runs the capture")
def test_cuda_graph_configs_refuse_the_cpu():
    task = cb.make_task("gpt", **TINY)
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        cb.make_train_step(task, "cudagraph")


def test_unknown_config_and_model_are_named():
    with pytest.raises(ValueError, match="config 'fast' is unknown"):
        cb.get_config("fast")
    with pytest.raises(ValueError, match="kind must be"):
        cb.make_task("cnn")


def test_table_has_every_row_and_saves(tmp_path):
    plans = [("gpt", "train", ["eager", "eager+bf16", "cudagraph+bf16"])]
    result = cb.benchmark(plans, progress=False, sizes={"gpt": TINY})
    rows = {r["variant"]: r for r in result["rows"]}
    assert list(rows) == ["eager", "eager+bf16", "cudagraph+bf16"]
    assert rows["eager"]["speedup_vs_eager"] == 1.0
    assert rows["eager+bf16"]["within_tolerance"]
    for r in rows.values():
        if "skipped" not in r:
            assert r["ms"] > 0 and r["tokens_per_s"] == pytest.approx(2 * 16 / (r["ms"] * 1e-3))
            assert (r["peak_mib"] is not None) == runtime.on_gpu()
    if not runtime.on_gpu():
        assert rows["cudagraph+bf16"]["skipped"] == "needs a CUDA GPU"
    paths = cb.save(result, tmp_path)
    assert [p.name for p in paths] == ["compile_benchmark.json", "compile_benchmark.md", "compile_benchmark.png"]
    record = json.loads(paths[0].read_text())
    assert record["ceilings"]["copy_gbps"] > 0 and record["machine"]["torch"] == torch.__version__
    table = paths[1].read_text()
    assert "| train GPT d32 L2 h2 V64, B2 x T16 | eager+bf16 |" in table
    assert ("SIMULATION" in table) == (not runtime.on_gpu())


def test_time_budget_skips_the_rest():
    result = cb.benchmark([("gpt", "train", ["eager", "eager+bf16"])], budget_s=0, progress=False,
                          sizes={"gpt": TINY})
    assert all("time budget" in r["skipped"] for r in result["rows"])
