"""week5_integration.model: the reference twin the kernels are swapped into, and its KV cache."""
import dataclasses

import pytest
import torch

from course import runtime
from course.check import assert_close
from week5_integration import data
from week5_integration import model as m

DEVICE = runtime.DEVICE
TINY = m.GPT_TINY


def tiny_model(**changes):
    torch.manual_seed(0)
    return m.GPT(m.config(TINY, **changes)).to(DEVICE)


def test_gpt2_small_has_124m_parameters_with_gpt2_vocabulary():
    # Counted on the meta device: no memory, same shapes.
    with torch.device("meta"):
        model = m.GPT(m.config(m.GPT2_SMALL, vocab_size=50257))
    assert 120e6 < m.count_parameters(model) < 128e6


@pytest.mark.parametrize("changes", [{}, {"norm": "layernorm", "mlp": "gelu", "pos": "learned"}], ids=["llama", "gpt2"])
def test_logits_shape_and_loss_equals_cross_entropy_of_logits(changes):
    model = tiny_model(**changes)
    idx = torch.randint(0, TINY.vocab_size, (3, 11), device=DEVICE)
    targets = torch.randint(0, TINY.vocab_size, (3, 11), device=DEVICE)
    logits = model(idx)
    assert logits.shape == (3, 11, TINY.vocab_size)
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, TINY.vocab_size).double(), targets.reshape(-1))
    assert_close(model.loss(idx, targets).double(), want, rtol=1e-5, atol=1e-6)


def test_rope_matches_complex_rotation():
    # RoPE rotates the pair (x_i, x_{i + Dh/2}) by angle pos * base^(-2i/Dh): a complex multiply.
    model = tiny_model()
    q = torch.randn(1, 2, 5, TINY.head_dim, device=DEVICE, dtype=torch.float64)
    cos, sin = model.rope_tables(3, 5)
    got, _ = m.torch_rope(q, q, cos.double(), sin.double())
    half = TINY.head_dim // 2
    z = torch.complex(q[..., :half], q[..., half:]) * torch.polar(torch.ones_like(cos.double()), torch.atan2(sin.double(), cos.double()))
    assert_close(got, torch.cat((z.real, z.imag), dim=-1), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("changes", [{}, {"pos": "learned"}], ids=["rope", "learned"])
def test_kv_cache_decoding_equals_full_forward(changes):
    model = tiny_model(**changes).eval()
    idx = torch.randint(0, TINY.vocab_size, (2, 12), device=DEVICE)
    with torch.no_grad():
        full = model(idx)
        cache = m.KVCache(model.cfg, 2, device=DEVICE, dtype=torch.float32)
        prefix = model(idx[:, :5], cache=cache)  # prefill 5 positions
        cache.length = 5
        pieces = [prefix]
        for t in range(5, 12, 3):  # then blocks of up to 3 tokens (a chunked prefill)
            block = idx[:, t:t + 3]
            pieces.append(model(block, start=t, cache=cache))
            cache.length = t + block.shape[1]
    assert_close(torch.cat(pieces, dim=1), full, rtol=1e-4, atol=1e-5)


def test_greedy_generation_is_the_same_with_and_without_cache():
    model = tiny_model().eval()
    prompt = torch.randint(0, TINY.vocab_size, (2, 4), device=DEVICE)
    with_cache = m.generate(model, prompt, 10, use_cache=True)
    without = m.generate(model, prompt, 10, use_cache=False)
    assert with_cache.shape == (2, 14)
    assert torch.equal(with_cache, without)
    assert torch.equal(with_cache[:, :4], prompt)


def test_use_ops_swaps_every_layer_and_keeps_parameters():
    model = tiny_model()
    calls = []

    def counting_norm(*args):
        calls.append(1)
        return m.torch_norm(*args)

    before = [p.clone() for p in model.parameters()]
    model.use_ops(dataclasses.replace(m.TORCH_OPS, name="counting", norm=counting_norm))
    model(torch.randint(0, TINY.vocab_size, (1, 4), device=DEVICE))
    assert len(calls) == 2 * TINY.n_layers + 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(TypeError, match="Ops record"):
        model.use_ops(m.torch_norm)


# --- the deferred residual add (Ops.add_norm) ------------------------------------------------
def old_logits(model, idx):
    """The model as written before the deferred adds: each block's adds where a torch model has them."""
    T = idx.shape[1]
    x, rope = model.tok(idx), None
    if model.pos is not None:
        x = x + model.pos(torch.arange(T, device=idx.device))
    else:
        rope = model.rope_tables(0, T)
    for layer, block in enumerate(model.blocks):
        a = block.attn(block.norm1(x), rope, None, layer)
        x = x + a
        x = x + block.mlp(block.norm2(x))
    return model.head(model.norm_f(x))


def torch_add_norm(x, delta, weight, bias, eps, kind, out_dtype=None):
    """Ops.add_norm in torch ops: the add, the norm, the cast; the deferred model's plumbing, no kernel."""
    h = x + delta
    y = m.torch_norm(h, weight, bias, eps, kind)
    return h, (y if out_dtype is None else y.to(out_dtype))


def logits_and_grads(model, idx, forward):
    model.zero_grad(set_to_none=True)
    logits = forward(model, idx)
    logits.float().square().mean().backward()
    return logits.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


GPT2_CHANGES = {"norm": "layernorm", "mlp": "gelu", "pos": "learned"}


@pytest.mark.parametrize("changes", [{"n_layers": 3}, dict(GPT2_CHANGES, n_layers=3)], ids=["llama", "gpt2"])
def test_torch_twin_runs_the_old_block_ops_bit_for_bit(changes):
    # Without add_norm nothing is deferred: the twin's logits and every gradient are exactly those of
    # the old Block.forward (a + x, then norm2; x + mlp at the block's end; norm_f of the last x).
    model = tiny_model(**changes)
    idx = torch.randint(0, TINY.vocab_size, (2, 9), device=DEVICE)
    got, got_grads = logits_and_grads(model, idx, lambda mod, i: mod(i))
    want, want_grads = logits_and_grads(model, idx, old_logits)
    assert torch.equal(got, want)
    for name, g in want_grads.items():
        assert torch.equal(got_grads[name], g), name
    x = torch.randn(2, 9, TINY.d_model, device=DEVICE)
    assert model.blocks[0](x)[1] is None  # the twin's block adds its MLP branch itself


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "bf16_autocast"])
@pytest.mark.parametrize("changes", [{"n_layers": 3}, dict(GPT2_CHANGES, n_layers=3)], ids=["llama", "gpt2"])
def test_deferred_adds_are_the_twins_computation(changes, amp):
    # add_norm in torch ops: the deferred model does the twin's adds and norms, each block's last add
    # moved into the next norm1 (and the last into norm_f), so logits and gradients agree bit for bit.
    # Under autocast norm1/norm2 hand y to a matmul in bf16, the cast autocast would have made.
    calls = {"norm": 0, "add_norm": 0}

    def counted(name, fn):
        def call(*args):
            calls[name] += 1
            return fn(*args)
        return call

    twin = tiny_model(**changes)
    deferred = tiny_model(**changes).use_ops(dataclasses.replace(
        m.TORCH_OPS, name="deferred", norm=counted("norm", m.torch_norm), add_norm=counted("add_norm", torch_add_norm)))
    idx = torch.randint(0, TINY.vocab_size, (2, 9), device=DEVICE)
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=amp):
        want, want_grads = logits_and_grads(twin, idx, lambda mod, i: mod(i))
        got, got_grads = logits_and_grads(deferred, idx, lambda mod, i: mod(i))
    # every norm but block 0's norm1 takes a residual add: norm2 of each block, norm1 of the next, norm_f
    assert calls == {"norm": 1, "add_norm": 2 * 3}
    assert torch.equal(got, want)
    for name, g in want_grads.items():
        assert torch.equal(got_grads[name], g), name
    with torch.no_grad():  # the KV-cache path defers too
        cache = m.KVCache(deferred.cfg, 2, device=DEVICE, dtype=torch.float32)
        prefix = deferred(idx[:, :5], cache=cache)
        cache.length = 5
        rest = deferred(idx[:, 5:], start=5, cache=cache)
        assert_close(torch.cat((prefix, rest), dim=1), deferred(idx), rtol=1e-4, atol=1e-5)


def test_bad_inputs_are_refused():
    model = tiny_model()
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.randn(2, 3, device=DEVICE))
    with pytest.raises(ValueError, match="exceed max_seq_len"):
        model(torch.zeros(1, TINY.max_seq_len + 1, dtype=torch.int64, device=DEVICE))
    with pytest.raises(ValueError, match="divisible by n_heads"):
        m.config(TINY, d_model=33)
    with pytest.raises(ValueError, match="norm must be one of"):
        m.config(TINY, norm="batchnorm")
    with pytest.raises(ValueError, match="exceeds max_seq_len"):
        m.generate(model, torch.zeros(1, 30, dtype=torch.int64, device=DEVICE), 5)


def test_training_on_the_generated_corpus_lowers_the_loss():
    torch.manual_seed(0)
    cfg = m.config(TINY, vocab_size=data.VOCAB_SIZE)
    model = m.GPT(cfg).to(DEVICE)
    tokens = data.encode(data.corpus("stories", 20_000))
    batches = data.Batches(tokens, 8, cfg.max_seq_len, device=DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(60):
        x, y = batches.next()
        loss = model.loss(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    # Uniform over 256 bytes is ln 256 = 5.5 nats; the grammar's letters are far more predictable.
    assert losses[0] > 5.0 and sum(losses[-10:]) / 10 < 3.0, losses[::10]
