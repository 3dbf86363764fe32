"""Text to train on, made here: a generated corpus, byte-level tokens, and random training windows.

Nothing is downloaded. `corpus("stories")` writes English-like sentences from a small grammar
(subjects, verbs, objects, colours, counts with number agreement), so a model has real structure
to learn and its loss falls well below the 8 bits per byte of random text; `corpus("arithmetic")`
writes sums like "17+25=42." — a second task, used to fine-tune a model pre-trained on stories.
Both are deterministic in their seed.

Tokens are bytes (vocabulary 256): no tokenizer to train or ship, and every string round-trips.
"""
from __future__ import annotations

import random

import torch

VOCAB_SIZE = 256

_SUBJECTS = ["the fox", "a cat", "the old man", "my sister", "the robot", "a small bird", "the teacher",
             "our neighbour", "the king", "a young girl", "the farmer", "the dog"]
_VERBS = [("sees", "saw"), ("finds", "found"), ("paints", "painted"), ("carries", "carried"),
          ("counts", "counted"), ("wants", "wanted"), ("builds", "built"), ("hides", "hid")]
_OBJECTS = [("apple", "apples"), ("stone", "stones"), ("boat", "boats"), ("book", "books"),
            ("house", "houses"), ("star", "stars"), ("box", "boxes"), ("tree", "trees")]
_COLOURS = ["red", "blue", "green", "yellow", "white", "black", "silver", "brown"]
_PLACES = ["in the garden", "near the river", "at the market", "under the bridge", "on the hill",
           "in the old town", "by the sea", "behind the school"]
_NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def _sentence(rng: random.Random) -> str:
    subject = rng.choice(_SUBJECTS)
    present, past = rng.choice(_VERBS)
    verb = past if rng.random() < 0.5 else present
    count = rng.randrange(len(_NUMBERS))
    noun = _OBJECTS[rng.randrange(len(_OBJECTS))][0 if count == 0 else 1]
    colour = rng.choice(_COLOURS)
    text = f"{subject} {verb} {_NUMBERS[count]} {colour} {noun}"
    if rng.random() < 0.6:
        text += " " + rng.choice(_PLACES)
    return text[0].upper() + text[1:] + "."


def _sum(rng: random.Random) -> str:
    a, b = rng.randrange(100), rng.randrange(100)
    return f"{a}+{b}={a + b}."


KINDS = {"stories": _sentence, "arithmetic": _sum}


def corpus(kind: str = "stories", n_bytes: int = 1 << 20, seed: int = 0) -> str:
    """About n_bytes of generated text (whole sentences, separated by spaces)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    if n_bytes < 1:
        raise ValueError(f"n_bytes must be >= 1, got {n_bytes}")
    rng, make = random.Random(seed), KINDS[kind]
    parts, size = [], 0
    while size < n_bytes:
        parts.append(make(rng))
        size += len(parts[-1]) + 1
    return " ".join(parts)


def encode(text: str) -> torch.Tensor:
    """UTF-8 bytes as int64 token ids (the dtype nn.Embedding and cross_entropy take)."""
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)


def decode(tokens) -> str:
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


def split(tokens: torch.Tensor, val_fraction: float = 0.05):
    """(train, val): the last val_fraction of the tokens is held out."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    cut = int(len(tokens) * (1 - val_fraction))
    return tokens[:cut], tokens[cut:]


class Batches:
    """Random windows of seq_len + 1 tokens: inputs are the first seq_len, targets the last.

    Seeded, so two runs (eager and optimized, say) see the same batches in the same order.
    """

    def __init__(self, tokens: torch.Tensor, batch: int, seq_len: int, *, seed: int = 0, device="cpu"):
        if tokens.dim() != 1 or len(tokens) < seq_len + 1:
            raise ValueError(f"need a 1-D token tensor longer than seq_len + 1 = {seq_len + 1}, "
                             f"got shape {tuple(tokens.shape)}")
        if batch < 1 or seq_len < 1:
            raise ValueError(f"batch and seq_len must be >= 1, got {batch}, {seq_len}")
        self.tokens, self.batch, self.seq_len, self.device = tokens, batch, seq_len, device
        self.generator = torch.Generator().manual_seed(seed)

    def next(self):
        starts = torch.randint(0, len(self.tokens) - self.seq_len, (self.batch,), generator=self.generator)
        rows = torch.stack([self.tokens[s:s + self.seq_len + 1] for s in starts.tolist()])
        rows = rows.to(self.device, non_blocking=True)
        return rows[:, :-1], rows[:, 1:]

    def state(self) -> torch.Tensor:
        """The generator state, for exact resume from a checkpoint."""
        return self.generator.get_state()

    def load_state(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)
