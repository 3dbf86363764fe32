"""week5_integration.data: the generated corpus, byte tokens and reproducible batches."""
import pytest
import torch

from week5_integration import data


@pytest.mark.parametrize("kind", sorted(data.KINDS))
def test_corpus_is_deterministic_and_roughly_the_size_asked(kind):
    text = data.corpus(kind, 5000, seed=3)
    assert text == data.corpus(kind, 5000, seed=3) != data.corpus(kind, 5000, seed=4)
    assert 5000 <= len(text) < 5200


def test_arithmetic_sums_are_right():
    for fact in data.corpus("arithmetic", 2000).split():
        lhs, rhs = fact.rstrip(".").split("=")
        a, b = lhs.split("+")
        assert int(a) + int(b) == int(rhs)


def test_bytes_round_trip():
    text = "Héllo, wörld. 17+25=42."
    tokens = data.encode(text)
    assert tokens.dtype == torch.int64 and int(tokens.max()) < data.VOCAB_SIZE
    assert data.decode(tokens) == text


def test_batches_are_shifted_windows_and_reproducible():
    tokens = torch.arange(1000)
    a, b = data.Batches(tokens, 4, 16, seed=1), data.Batches(tokens, 4, 16, seed=1)
    x, y = a.next()
    assert x.shape == y.shape == (4, 16)
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y[:, -1], x[:, -1] + 1)
    assert torch.equal(x, b.next()[0])
    state = a.state()
    nxt = a.next()[0]
    a.load_state(state)
    assert torch.equal(a.next()[0], nxt)


def test_bad_arguments():
    with pytest.raises(ValueError, match="kind must be one of"):
        data.corpus("poems")
    with pytest.raises(ValueError, match="longer than seq_len"):
        data.Batches(torch.arange(10), 2, 16)
    with pytest.raises(ValueError, match="val_fraction"):
        data.split(torch.arange(10), 1.5)
