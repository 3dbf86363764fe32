"""week2_pytorch_optimizations.models: the GPT and the MLP the week measures."""
import pytest
import torch

from course import runtime
from course.check import assert_close

models = runtime.lesson("week2_pytorch_optimizations.models")
DEVICE = runtime.DEVICE


@pytest.mark.parametrize("batch, seq", [(1, 1), (3, 7), (2, 16)])
def test_gpt_shapes_and_loss(batch, seq):
    torch.manual_seed(0)
    cfg = models.GPT_TINY
    model = models.GPT(cfg).to(DEVICE)
    idx = torch.randint(0, cfg.vocab_size, (batch, seq), device=DEVICE)
    logits = model(idx)
    assert logits.shape == (batch, seq, cfg.vocab_size) and logits.dtype == torch.float32
    targets = torch.randint(0, cfg.vocab_size, (batch, seq), device=DEVICE)
    loss = models.gpt_loss(logits, targets)
    # Small init: logits near 0, so the loss starts near log(vocab) (a uniform guess).
    assert abs(loss.item() - torch.log(torch.tensor(float(cfg.vocab_size))).item()) < 0.1


def test_gpt_is_causal():
    torch.manual_seed(0)
    model = models.GPT(models.GPT_TINY).to(DEVICE)
    idx = torch.randint(0, 64, (2, 16), device=DEVICE)
    changed = idx.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 64
    # Position t sees only tokens <= t: changing tokens 10.. leaves logits 0..9 as they were.
    assert_close(model(changed)[:, :10], model(idx)[:, :10])
    assert not torch.allclose(model(changed)[:, 10:], model(idx)[:, 10:])


def test_weights_are_tied_and_counted_once():
    cfg = models.GPT_TINY
    model = models.GPT(cfg)
    assert model.head.weight is model.tok.weight
    d, L, V, T = cfg.d_model, cfg.n_layers, cfg.vocab_size, cfg.seq_len
    per_block = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    assert models.count_parameters(model) == V * d + T * d + L * per_block + 2 * d


def test_sequence_longer_than_the_model_is_refused():
    model = models.GPT(models.GPT_TINY)
    with pytest.raises(ValueError, match="exceeds the model's seq_len"):
        model(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("bad", [{"d_model": 30, "n_heads": 4}, {"n_layers": 0}, {"vocab_size": 2.5}])
def test_bad_gpt_config(bad):
    with pytest.raises(ValueError, match="GPTConfig"):
        models.tiny(models.GPT_TINY, **bad)


def test_mlp_shapes_and_config():
    cfg = models.MLP_TINY
    model = models.MLP(cfg).to(DEVICE)
    x, y = models.mlp_batch(cfg, 5, DEVICE)
    assert model(x).shape == y.shape == (5, cfg.d_out)
    assert sum(isinstance(m, torch.nn.Linear) for m in model.modules()) == cfg.n_layers
    with pytest.raises(ValueError, match="MLPConfig.d_hidden"):
        models.MLPConfig(d_hidden=0)


def test_flops_per_token():
    cfg = models.GPTConfig(vocab_size=100, seq_len=10, d_model=8, n_heads=2, n_layers=1)
    forward = 2 * (12 * 64 + 800) + 2 * 10 * 8
    assert models.flops_per_token(cfg, training=False) == forward
    assert models.flops_per_token(cfg) == 3 * forward
