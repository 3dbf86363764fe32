"""A text of your own for the capstone GPT: a UTF-8 file read as byte tokens, checked and split.

    python -m capstone.train --text capstone/data/tinyshakespeare.txt --config tiny --steps 50 --out /tmp/t

Tokens are the file's bytes (vocabulary 256, as for the generated corpus in
`week5_integration/data.py`): any UTF-8 text trains without a tokenizer, and a sample decodes back
to text. The last `VAL_FRACTION` of the file (at least one context window) is held out: the
validation loss is measured on text the model never saw, so it tells learning from memorizing.
A file too short for that, missing, or not UTF-8 is refused before a model is built, with a
ValueError that names `--text` and says what was expected.

`DEFAULT_TEXT` ships with the course (public domain; `capstone/data/README.md` says where it comes
from), so the GPU run of the README needs nothing downloaded. `public_domain_book` fetches a
Project Gutenberg book when the machine is online (the notebook's offer on Colab) and returns
None, with the reason, when it is not: the generated corpus is then the fallback.
"""
from __future__ import annotations

import hashlib
import http.client
import math
import urllib.request
from pathlib import Path

import torch

from week5_integration import data

DEFAULT_TEXT = Path(__file__).resolve().parent / "data" / "tinyshakespeare.txt"
VAL_FRACTION = 0.1
# Training needs room for different windows, validation at least one whole window: 4 windows is
# the least a file may hold (3 to draw training windows from, the held-out tail at least 1).
MIN_WINDOWS = 4

# Pride and Prejudice (Jane Austen), public domain, plain UTF-8 text from Project Gutenberg.
GUTENBERG_URL = "https://www.gutenberg.org/cache/epub/1342/pg1342.txt"


def read_text(path, seq_len: int) -> bytes:
    """The bytes of a UTF-8 text file long enough for windows of seq_len + 1 bytes.

    ValueError (naming --text) for a missing file, a folder, a file that is not UTF-8, or one
    shorter than MIN_WINDOWS context windows.
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len must be a positive int, got {seq_len!r}")
    if not isinstance(path, (str, Path)) or not str(path):
        raise ValueError(f"--text: expected the path of a UTF-8 text file, got {path!r}")
    path = Path(path)
    if not path.is_file():
        what = "a folder" if path.is_dir() else "no such file"
        raise ValueError(f"--text {path}: {what}; expected a UTF-8 text file")
    raw = path.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"--text {path}: not UTF-8 text (byte {error.start}: {error.reason}); expected a "
                         "UTF-8 file: convert it first, e.g. `iconv -f latin1 -t utf-8`") from None
    need = MIN_WINDOWS * (seq_len + 1)
    if len(raw) < need:
        raise ValueError(f"--text {path}: {len(raw)} bytes is too short; expected at least {MIN_WINDOWS} "
                         f"context windows of {seq_len + 1} bytes ({need} bytes): windows to train on and a "
                         "held-out tail for the validation loss")
    return raw


def tokens(raw: bytes) -> torch.Tensor:
    """The bytes as int64 token ids (what data.encode gives for the decoded text, without the copy
    through a Python list: a 100 MB file takes a second, not a minute)."""
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.int64)


def split(ids: torch.Tensor, seq_len: int, val_fraction: float = VAL_FRACTION):
    """(train, val): the tail, val_fraction of the tokens but at least one window of seq_len + 1,
    is held out; what precedes it is trained on. Contiguous, not shuffled: neighbouring windows
    overlap, so a random split would leak training text into validation."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    n_val = max(math.ceil(len(ids) * val_fraction), seq_len + 1)
    if len(ids) - n_val < seq_len + 1:
        raise ValueError(f"{len(ids)} tokens leave no training window of {seq_len + 1} after a held-out "
                         f"tail of {n_val}")
    return ids[:-n_val], ids[-n_val:]


def load(path, seq_len: int, val_fraction: float = VAL_FRACTION) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(train tokens, val tokens, source): `source` names the file and its digest, so a checkpoint
    made on one text refuses to resume on another."""
    raw = read_text(path, seq_len)
    train, val = split(tokens(raw), seq_len, val_fraction)
    source = {"text": Path(path).name, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest(),
              "train_tokens": len(train), "val_tokens": len(val)}
    return train, val, source


def prompt_from(val: torch.Tensor, n: int = 24) -> str:
    """The first line of the held-out text that has at least a few characters, cut to about n
    bytes at a character boundary: a prompt the model has not seen."""
    text = data.decode(val[: 64 * n].tolist())
    lines = [line.strip() for line in text.splitlines()[1:]]  # [0] may start mid-line
    line = next((line for line in lines if len(line) >= 4), text.strip() or "The")
    cut = line.encode("utf-8")[:n].decode("utf-8", errors="ignore")
    return cut or "The"


def public_domain_book(dest, url: str = GUTENBERG_URL, timeout: float = 20.0) -> tuple[Path | None, str]:
    """Download a public-domain book to `dest` (kept: a second call reads the file); returns
    (path, message), or (None, why) when the machine is offline or the download fails.

    Project Gutenberg's header and licence footer are cut (its "*** START/END OF" lines): what is
    left is the public-domain book itself.
    """
    dest = Path(dest)
    if dest.is_file() and dest.stat().st_size > 0:
        return dest, f"using {dest} ({dest.stat().st_size:,} bytes, downloaded before)"
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "gpu-kernels-course"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except (OSError, ValueError, http.client.HTTPException) as error:  # URLError, timeouts: OSErrors
        return None, f"could not download {url} ({error.__class__.__name__}: {error}): offline?"
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
    start, end = text.find("*** START OF"), text.find("*** END OF")
    if start >= 0 and end > start:
        text = text[text.find("\n", start) + 1:end]
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text.strip() + "\n", encoding="utf-8")
    return dest, f"downloaded {url} to {dest} ({dest.stat().st_size:,} bytes)"


def write_samples(trainer, path, checkpoint, *, prompt: str | None = None, n: int = 300,
                  temperature: float = 0.8, seed: int = 0) -> list[dict]:
    """After training: continue `prompt` greedily and sampled (capstone/generate.py), write both to
    `path` and return them as records. Under FSDP the weights are sharded, so rank 0 reads the full
    ones back from the checkpoint the run just wrote."""
    from capstone import generate

    if trainer.world == 1:
        model = trainer.model
    else:
        model = generate.load_model(checkpoint, ops=trainer.ops_name, device=trainer.device)
    max_len = model.cfg.max_seq_len
    if prompt is None:
        prompt = prompt_from(trainer.val_tokens, min(24, max_len // 2)) if "text" in trainer.source else "The fox saw"
    n = min(n, max_len - len(prompt.encode("utf-8")))
    if n < 1:
        raise ValueError(f"--prompt is {len(prompt.encode('utf-8'))} bytes: no room left in the model's "
                         f"context of {max_len}; expected a shorter prompt")
    greedy = generate.generate_texts(model, [prompt], n)[0]
    sampled = generate.sample_text(model, prompt, n, temperature=temperature, seed=seed)
    samples = [{"method": "greedy", "prompt": prompt, "bytes": n, "text": greedy},
               {"method": "sampled", "temperature": temperature, "seed": seed, "prompt": prompt, "bytes": n,
                "text": sampled}]
    Path(path).write_text(f"--- greedy, from {prompt!r}\n{greedy}\n\n--- sampled at temperature {temperature}, "
                          f"seed {seed}, from {prompt!r}\n{sampled}\n", encoding="utf-8")
    return samples
