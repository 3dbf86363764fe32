"""capstone.train: exact resume, the log, the plot, the command line, refusals.

Resume must be exact, not close: "train N steps" and "train k, save, start a new process's worth
of objects, load, train N - k" run the same float operations on the same values in the same
order, so weights and losses are compared bit for bit (torch.equal).
"""
import json
import subprocess
import sys

import pytest
import torch

from capstone import train as ct
from week5_integration.train import TrainConfig

N, K = 5, 2


def config(**changes):
    return TrainConfig(**{"steps": N, "batch": 2, "seq_len": 16, "warmup": 2, "corpus_bytes": 1 << 14, **changes})


@pytest.mark.parametrize("ops, n, k", [("reference", N, K), ("fast", 3, 1)])
def test_resume_is_exact(tmp_path, ops, n, k):
    tc = config(steps=n)
    straight = ct.Trainer("tiny", tc, ops=ops)
    want = straight.run()
    first = ct.Trainer("tiny", tc, ops=ops)
    got = first.run(k)
    first.save(tmp_path / "ck.pt")
    first.run(n)  # the interrupted run goes on too: the checkpoint must not share its tensors
    second = ct.Trainer("tiny", tc, ops=ops)
    second.load(tmp_path / "ck.pt")
    assert second.step == k
    got += second.run()
    assert [r["step"] for r in got] == list(range(n))
    assert [r["loss"] for r in got] == [r["loss"] for r in want]
    assert [r["lr"] for r in got] == [r["lr"] for r in want]
    assert torch.equal(second.parameters_flat(), straight.parameters_flat())
    assert not torch.equal(straight.parameters_flat(), ct.Trainer("tiny", tc, ops=ops).parameters_flat())


def test_checkpoint_from_another_config_is_refused(tmp_path):
    ct.Trainer("tiny", config()).save(tmp_path / "ck.pt")
    with pytest.raises(ValueError, match="another train_config.*steps"):
        ct.Trainer("tiny", config(steps=N + 1)).load(tmp_path / "ck.pt")
    with pytest.raises(ValueError, match="another config"):
        ct.Trainer("small", config()).load(tmp_path / "ck.pt")


def test_command_line_trains_pauses_resumes_and_plots(tmp_path):
    out = tmp_path / "run"
    base = [sys.executable, "-m", "capstone.train", "--config", "tiny", "--ops", "reference", "--steps", "6",
            "--batch", "2", "--seq-len", "16", "--corpus-bytes", "16384", "--log-every", "2", "--out", str(out)]
    subprocess.run(base + ["--stop-after", "4", "--quiet"], check=True, timeout=120)
    assert [r["step"] for r in ct.read_log(out / ct.LOG)] == [0, 1, 2, 3]
    done = subprocess.run(base + ["--resume"], check=True, timeout=120, capture_output=True, text=True)
    log = ct.read_log(out / ct.LOG)
    assert [r["step"] for r in log] == list(range(6))
    assert "6/6" in done.stderr  # the progress bar reached the end
    summary = json.loads((out / ct.SUMMARY).read_text())
    assert summary["steps_done"] == 6 and summary["last_loss"] == log[-1]["loss"]
    assert (out / ct.PLOT).stat().st_size > 1000
    # The same 6 steps in one go: identical log (losses, learning rates).
    once = tmp_path / "once"
    subprocess.run(base[:-1] + [str(once), "--quiet", "--no-plot"], check=True, timeout=120)
    assert [r["loss"] for r in ct.read_log(once / ct.LOG)] == [r["loss"] for r in log]


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(RuntimeError, match="process group"):
        ct.Trainer("tiny", config(), fsdp=True)
    with pytest.raises(TypeError, match="TrainConfig"):
        ct.Trainer("tiny", {"steps": 3})
    with pytest.raises(ValueError, match="exceeds the model's max_seq_len"):
        ct.Trainer("tiny", config(seq_len=33))
    with pytest.raises(ValueError, match="ops must be one of"):
        ct.Trainer("tiny", config(), ops="cuda")
    trainer = ct.Trainer("tiny", config())
    with pytest.raises(ValueError, match="until must be in"):
        trainer.run(N + 1)
    with pytest.raises(FileNotFoundError):
        trainer.load(tmp_path / "missing.pt")
    rc = subprocess.run([sys.executable, "-m", "capstone.train", "--fsdp", "--out", str(tmp_path / "x")],
                        capture_output=True, text=True, timeout=60)
    assert rc.returncode == 2 and "torchrun" in rc.stderr


# ------------------------------------------------------------------ compiled and graphed steps
def _run(ops, compile, steps=3, seed=0, amp=None):
    changes = {} if amp is None else {"amp": amp}
    trainer = ct.Trainer("tiny", config(steps=steps, seed=seed, **changes), ops=ops, compile=compile)
    return trainer.run(), trainer.parameters_flat()


@pytest.mark.parametrize("ops", ["fast", "reference"])
def test_compiled_step_matches_the_eager_step(ops):
    # The fast model compiles as one graph (its kernels are registered ops); its loss and weights
    # after 3 AdamW steps match the eager model's. fp32 (autocast off, also on a GPU), same kernels:
    # only the fusion of the torch code around them may round differently, a few ulp per step.
    eager, eager_params = _run(ops, False, amp=False)
    compiled, compiled_params = _run(ops, True, amp=False)
    for a, b in zip(eager, compiled):
        assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]), (a, b)
    # AdamW's first steps move each weight by ~lr * sign(gradient): a weight whose gradient is ~0
    # may step either way in the two runs (Inductor sums in another order), so the element-wise
    # bound is 2 lr per step, while the typical weight must agree to rounding.
    diff = (compiled_params - eager_params).abs()
    lrs = sum(r["lr"] for r in eager)
    assert float(diff.max()) <= 2 * lrs * 1.01, float(diff.max())
    assert float(diff.median()) <= 1e-6 * float(eager_params.abs().median()) + 1e-9, float(diff.median())


@pytest.mark.gpu(reason="CUDA graphs exist only on a GPU")
def test_cuda_graph_step_matches_the_eager_step():
    # reduce-overhead replays the compiled forward and backward as CUDA graphs. Losses are logged
    # from copies (a graph's output is overwritten by the next replay: a shared tensor would show
    # the last step's loss everywhere) and the weights follow the eager run's. bf16 autocast here,
    # so the bound is bf16's: the same kernels, rounding only where Inductor fuses differently.
    eager, eager_params = _run("fast", False, steps=6)
    graphed, graphed_params = _run("fast", "reduce-overhead", steps=6)
    # A shared loss tensor would show the last step's value at every step of a flush group (six steps: one
    # group). Two honest steps may log the same value, though: the loss is bf16 (1/32 apart near 5) and moves
    # ~0.1 a step (an H100 run logged 5 distinct of 6), so the check is "not one value", then step by step.
    assert len({r["loss"] for r in graphed}) > 1, "every step must log its own loss, not the last step's"
    for a, b in zip(eager, graphed):
        assert abs(a["loss"] - b["loss"]) <= 2e-2 * abs(a["loss"]), (a, b)
    assert (graphed_params - eager_params).abs().max() <= 1e-2 * eager_params.abs().max()


def test_one_thread_backward_computes_the_same_step():
    # The backward on the calling thread instead of autograd's device thread: the same kernels in
    # the same order, so the same bits (only which thread runs them changes).
    threaded = ct.Trainer("tiny", config(steps=2), ops="fast")
    one_thread = ct.Trainer("tiny", config(steps=2), ops="fast", autograd_threads=False)
    a, b = threaded.run(), one_thread.run()
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    assert torch.equal(threaded.parameters_flat(), one_thread.parameters_flat())
    assert torch.autograd.is_multithreading_enabled(), "the setting must not leak out of the step"


def test_compile_mode_is_checked():
    with pytest.raises(ValueError, match="compile must be"):
        ct.Trainer("tiny", config(), compile="fastest")


def test_fast_model_is_one_graph_of_the_course_ops():
    # Every kernel of the fast model is a registered op: Dynamo records the whole loss (forward)
    # as one graph, with no break, and each course op appears in it as one node.
    from capstone import model as cm
    from week5_integration.distributed import LossModel

    torch._dynamo.reset()
    model = LossModel(cm.build("tiny", "fast", seed=0))
    idx = torch.randint(0, 256, (2, 32), device=model.gpt.tok.weight.device)
    explained = torch._dynamo.explain(model)(idx, idx)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
    targets = {str(node.target) for graph in explained.graphs for node in graph.graph.nodes
               if node.op == "call_function"}
    # add_rms_norm: norm2 of each block, and the deferred residual adds of norm1 (blocks 1..) and norm_f
    for op in ("rms_norm", "add_rms_norm", "rope_qk", "flash_attention", "swiglu_packed", "fused_linear_cross_entropy"):
        assert f"course.{op}.default" in targets, (op, sorted(t for t in targets if "course" in t))


def test_each_flushed_group_is_timed_by_the_kits_clock(monkeypatch, gpu_clock):
    """run's steps go through course/bench_clock.py's LoopClock, one clock per flushed group: each record's ms is
    its step's, each group's Timing (in Trainer.timings) says whether the host paced it. Off the GPU the flag is
    unknown; with stand-in events that follow the host (conftest's gpu_clock), every group is host-paced."""
    trainer = ct.Trainer("tiny", config(), ops="reference")
    records = trainer.run(log_every=2)
    assert [t.reps for t in trainer.timings] == [2, 2, 1]
    assert [r["ms"] for r in records] == [ms for t in trainer.timings for ms in t.samples]
    assert all((t.host_bound is None) == (trainer.device.type != "cuda") for t in trainer.timings)  # known on a GPU
    monkeypatch.setattr(ct, "LoopClock", gpu_clock())
    trainer = ct.Trainer("tiny", config(), ops="reference")
    trainer.run(2, log_every=2)
    trainer.run(log_every=N)
    assert [t.reps for t in trainer.timings] == [2, N - 2] and all(t.host_bound for t in trainer.timings)
