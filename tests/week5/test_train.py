"""week5_integration.train: the schedule, the optimizer's groups, clipping, and that training learns."""
import math

import pytest
import torch

from course import runtime
from course.check import assert_close
from week5_integration import data
from week5_integration import model as m

tr = runtime.lesson("week5_integration.train")
kernels = runtime.lesson("week5_integration.kernels")
DEVICE = runtime.DEVICE
TINY = m.config(m.GPT_TINY, vocab_size=data.VOCAB_SIZE)


def test_learning_rate_warms_up_linearly_then_follows_a_cosine_to_the_floor():
    tc = tr.TrainConfig(steps=111, lr=1e-3, warmup=10, min_lr_ratio=0.1)  # 100 decay steps after the peak
    lrs = [tr.lr_at(s, tc) for s in range(tc.steps)]
    assert lrs[:10] == pytest.approx([1e-3 * (s + 1) / 10 for s in range(10)])
    assert lrs[10] == pytest.approx(1e-3)                     # the peak, right after warm-up
    assert lrs[-1] == pytest.approx(1e-4)                     # the floor, at the last step
    assert lrs[10 + 50] == pytest.approx(0.55e-3)             # half way: the cosine's midpoint
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))    # never rises after warm-up
    no_warmup = tr.TrainConfig(steps=5, lr=2e-3, warmup=0, min_lr_ratio=0.0)
    assert tr.lr_at(0, no_warmup) == pytest.approx(2e-3) and tr.lr_at(4, no_warmup) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="step must be in"):
        tr.lr_at(111, tc)


@pytest.mark.parametrize("changes,match", [({"steps": 0}, "steps"), ({"lr": -1.0}, "lr"), ({"min_lr_ratio": 2.0}, "min_lr_ratio"),
                                           ({"grad_clip": 0.0}, "grad_clip"), ({"warmup": -1}, "warmup")])
def test_bad_training_configs_are_refused(changes, match):
    with pytest.raises(ValueError, match=match):
        tr.TrainConfig(**changes)


def test_weight_decay_applies_to_matrices_only():
    model = m.GPT(TINY)
    decay, no_decay = tr.param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    # the tied embedding / LM head is one parameter, counted once
    assert sum(p.numel() for g in (decay, no_decay) for p in g["params"]) == m.count_parameters(model)


def test_clipping_bounds_the_global_gradient_norm():
    tc = tr.TrainConfig(steps=1, batch=2, seq_len=8, grad_clip=1e-3, corpus_bytes=4000)
    model = tr.build_model(TINY, "torch")
    batches, _ = tr.make_batches(model.cfg, tc, device=DEVICE)
    step = tr.make_step(model, tr.make_optimizer(model, tc), tc)
    _, norm = step(*batches.next(), 1e-3)
    total = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert float(norm) > 1e-3                                # the norm before clipping, as returned
    assert float(total) <= 1e-3 * (1 + 1e-5)                 # what the optimizer saw


def test_training_a_few_steps_lowers_the_loss_and_times_every_step():
    tc = tr.TrainConfig(steps=25, batch=8, seq_len=32, lr=5e-3, warmup=4, corpus_bytes=20_000, skip=2)
    model = tr.build_model(TINY, "torch")
    batches, val = tr.make_batches(model.cfg, tc, device=DEVICE)
    result = tr.train(model, batches, tc)
    assert len(result.losses) == len(result.step_ms) == len(result.grad_norms) == 25
    # Uniform over 256 bytes is ln 256 = 5.5 nats; the corpus's letters are far more predictable.
    assert result.losses[0] > 5.0 and sum(result.losses[-5:]) / 5 < result.losses[0] - 1.0, result.losses[::5]
    assert result.lrs == pytest.approx([tr.lr_at(s, tc) for s in range(25)])
    assert result.timer == ("cuda_events" if runtime.on_gpu() else "host_clock")
    assert result.tokens_per_step == 8 * 32 and result.tokens_per_s > 0 and math.isfinite(result.tflops)
    assert tr.evaluate(model, val, tc, n_batches=2) < result.losses[0]


def test_same_seed_gives_the_same_batches():
    tc = tr.TrainConfig(steps=1, batch=3, seq_len=8, corpus_bytes=4000)
    a, _ = tr.make_batches(TINY, tc, device=DEVICE)
    b, _ = tr.make_batches(TINY, tc, device=DEVICE)
    for _ in range(3):
        assert all(torch.equal(s, t) for s, t in zip(a.next(), b.next()))


def test_torch_and_course_ops_track_each_other():
    # float32 both: the kernels reorder reductions (~1e-7 relative per op, see test_kernels.py);
    # three AdamW steps later the losses still agree to ~1e-6 relative: 1e-4 leaves a margin.
    tc = tr.TrainConfig(steps=3, batch=2, seq_len=8, lr=1e-3, warmup=1, corpus_bytes=4000, amp=False)
    results = []
    for ops in (m.TORCH_OPS, kernels.COURSE_OPS):
        model = tr.build_model(TINY, ops)
        batches, _ = tr.make_batches(model.cfg, tc, device=DEVICE)
        results.append(tr.train(model, batches, tc))
    assert_close(torch.tensor(results[1].losses), torch.tensor(results[0].losses), rtol=1e-4, atol=1e-6)
    assert_close(torch.tensor(results[1].grad_norms), torch.tensor(results[0].grad_norms), rtol=1e-4, atol=1e-7)


def test_build_model_refuses_unknown_names():
    with pytest.raises(ValueError, match="config must be one of"):
        tr.build_model("huge")
    with pytest.raises(ValueError, match="ops must be"):
        tr.build_model("tiny", "cuda")
    with pytest.raises(ValueError, match="vocab_size"):
        tr.make_batches(m.GPT_TINY, tr.TrainConfig(steps=1))


@pytest.mark.slow  # an end-to-end command line: the functions it calls are tested above
def test_the_command_line_runs(capsys):
    assert tr.main(["--config", "tiny", "--steps", "2", "--batch", "2", "--seq-len", "8", "--log-every", "1"]) == 0
    out = capsys.readouterr().out
    assert "step     1" in out and "tokens/s" in out


@pytest.mark.gpu(reason="bf16 autocast, fused AdamW and CUDA-event timing")
def test_gpu_training_uses_bf16_autocast_fused_adamw_and_cuda_events():
    tc = tr.TrainConfig(steps=8, batch=8, seq_len=128, lr=2e-3, warmup=2, corpus_bytes=1 << 16, skip=2)
    model = tr.build_model(m.config(m.GPT_SMALL, n_layers=2), "course")
    assert tr.amp_enabled(tc, DEVICE)
    opt = tr.make_optimizer(model, tc)
    assert opt.defaults["fused"]
    batches, _ = tr.make_batches(model.cfg, tc)
    result = tr.train(model, batches, tc, opt=opt)
    assert result.timer == "cuda_events" and all(ms > 0 for ms in result.step_ms)
    assert result.losses[-1] < result.losses[0]


def test_each_step_starts_from_fresh_gradients():
    # Three steps of `train` against a reference loop written out here (fp32, constant lr, clipping
    # on): zero the gradients, loss, backward, clip, AdamW. A step that forgets zero_grad adds the
    # previous steps' gradients to this one's, and Adam's normalized update then differs by O(lr) =
    # 1e-3 per weight. Error model of the comparison: both loops run the same fp32 ops on the same
    # batches, so they differ at most by the order of reductions (~1e-7 relative in a gradient);
    # AdamW moves a weight by <= lr per step, so 3 steps differ by ~3 lr x 1e-6 plus one rounding of
    # each weight (6e-8 at |w| ~ 1): 1e-6 absolute holds that with a margin and is 1000x below the bug.
    tc = tr.TrainConfig(steps=3, batch=2, seq_len=8, lr=1e-3, warmup=0, min_lr_ratio=1.0, grad_clip=1.0,
                        weight_decay=0.1, corpus_bytes=4000, amp=False)
    model = tr.build_model(TINY, "torch", seed=0)
    reference = tr.build_model(TINY, "torch", seed=0)
    start = [p.detach().clone() for p in reference.parameters()]
    batches, _ = tr.make_batches(model.cfg, tc, device=DEVICE)
    tr.train(model, batches, tc)

    params = list(reference.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": tc.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=tc.lr, betas=tc.betas, foreach=True)
    ref_batches, _ = tr.make_batches(reference.cfg, tc, device=DEVICE)
    for _ in range(tc.steps):
        x, y = ref_batches.next()
        opt.zero_grad(set_to_none=True)
        reference.loss(x, y).backward()
        torch.nn.utils.clip_grad_norm_(params, tc.grad_clip, foreach=True)
        opt.step()
    moved = max(float((p.detach() - s).abs().max()) for p, s in zip(reference.parameters(), start))
    assert moved > 100 * 1e-6  # the steps moved the weights far more than the tolerance below
    for (name, p), q in zip(reference.named_parameters(), model.parameters()):
        assert_close(q.detach(), p.detach(), rtol=0, atol=1e-6, name=f"{name} after {tc.steps} steps")


def test_the_timed_steps_say_whether_the_host_paced_them(monkeypatch, gpu_clock):
    """train times the steps after `skip` on the kit's clock (course/bench_clock.py), apart from the steps left out
    (their compilation would count as the host's time per step): result.timing is the timed steps', with their
    flag on a GPU. The GPU path runs on the CPU with stand-in events (conftest's gpu_clock)."""
    tc = tr.TrainConfig(steps=5, batch=2, seq_len=8, lr=1e-3, warmup=1, corpus_bytes=4000, skip=2, amp=False)
    model = tr.build_model(TINY, "torch")
    batches, _ = tr.make_batches(model.cfg, tc, device=DEVICE)
    result = tr.train(model, batches, tc)
    assert result.timing.reps == 3 and result.step_ms[2:] == result.timing.samples
    assert result.median_step_ms == result.timing.median_ms
    assert (result.timing.host_bound is None) == (not runtime.on_gpu())
    monkeypatch.setattr(tr, "LoopClock", gpu_clock())
    batches, _ = tr.make_batches(model.cfg, tc, device=DEVICE)
    result = tr.train(model, batches, tc)
    assert result.timing.host_bound is True and len(result.step_ms) == 5
