"""capstone.train on a text file: bytes as tokens, a held-out tail, the validation loss, a sample,
the README's record; and every bad file refused with a ValueError that names --text.

The model learns: a tiny reference-ops model (pure PyTorch, so the CPU run takes seconds) starts
near ln(256) = 5.5 nats per byte (uniform guessing) and, after LEARN_STEPS steps on a repeated
verse, must be below FALL x the verse's byte-frequency (unigram) entropy, 3.0 nats, on its training
batches and on the held-out tail. No model that ignores the context can go below the unigram
entropy, so this passes only if the model uses the bytes before each target (seeds 0-2 reach
~1.45, against the bound 2.4); a model that does not learn (no optimizer step, targets not
shifted) stays above it.
"""
import collections
import json
import math

import pytest
import torch

from capstone import generate as cg
from capstone import model as cm
from capstone import text as ct
from capstone import text_record
from capstone import train
from week5_integration import data
from week5_integration.train import TrainConfig

SEQ = 16
STEPS = 40         # the command-line run: short, it checks the plumbing
LEARN_STEPS = 80   # the learning check
FALL = 0.8
VERSE = ("Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\n"
         "Rough winds do shake the darling buds of May,\nAnd summer's lease hath all too short a date.\n")


@pytest.fixture
def poem(tmp_path):
    path = tmp_path / "poem.txt"
    path.write_text(VERSE * 40, encoding="utf-8")
    return path


def tc(**changes):
    return TrainConfig(**{"steps": STEPS, "batch": 8, "seq_len": SEQ, "warmup": 4, "lr": 3e-3, **changes})


# ---------------------------------------------------------------------------- refusals
def test_bad_text_files_are_refused(tmp_path):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Ça va? Très bien.\n".encode("latin-1") * 50)
    short = tmp_path / "short.txt"
    short.write_text("x" * (ct.MIN_WINDOWS * (SEQ + 1) - 1))
    cases = [(tmp_path / "missing.txt", "no such file"), (tmp_path, "a folder"),
             (latin1, "not UTF-8.*byte 0"), (short, "too short.*at least 4 context windows of 17 bytes \\(68")]
    for path, why in cases:
        with pytest.raises(ValueError, match=f"--text.*{why}"):
            ct.read_text(path, SEQ)
        with pytest.raises(ValueError, match="--text"):  # before the model is built
            train.Trainer("tiny", tc(), ops="reference", text=path)
    ok = tmp_path / "ok.txt"
    ok.write_text("é" * (ct.MIN_WINDOWS * (SEQ + 1)))  # 2 bytes a character: long enough in bytes
    assert len(ct.read_text(ok, SEQ)) == 2 * ct.MIN_WINDOWS * (SEQ + 1)
    for bad in (None, ""):
        with pytest.raises(ValueError, match="--text"):
            ct.read_text(bad, SEQ)


def test_command_line_refuses_a_bad_text_before_training(tmp_path, capsys):
    missing = tmp_path / "nope.txt"
    assert train.main(["--config", "tiny", "--text", str(missing), "--out", str(tmp_path / "run")]) == 2
    assert f"--text {missing}: no such file; expected a UTF-8 text file" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------- tokens and split
def test_tokens_are_the_files_bytes_and_the_tail_is_held_out(poem):
    raw = ct.read_text(poem, SEQ)
    train_ids, val_ids, source = ct.load(poem, SEQ)
    assert torch.equal(torch.cat([train_ids, val_ids]), data.encode(poem.read_text(encoding="utf-8")))
    assert train_ids.dtype == torch.int64
    assert len(val_ids) == math.ceil(len(raw) * ct.VAL_FRACTION)
    assert source == {"text": "poem.txt", "bytes": len(raw), "sha256": source["sha256"],
                      "train_tokens": len(train_ids), "val_tokens": len(val_ids)}
    # A short file still holds out one whole window (10% of it would be less).
    ids = torch.arange(ct.MIN_WINDOWS * (SEQ + 1))
    head, tail = ct.split(ids, SEQ)
    assert len(tail) == SEQ + 1 and torch.equal(tail, ids[-(SEQ + 1):]) and torch.equal(head, ids[:-(SEQ + 1)])


def test_shipped_text_is_utf8_and_prompts_come_from_held_out_text():
    train_ids, val_ids, source = ct.load(ct.DEFAULT_TEXT, 1024)
    assert source["text"] == "tinyshakespeare.txt" and source["bytes"] < 1.2e6
    prompt = ct.prompt_from(val_ids)
    assert 4 <= len(prompt.encode()) <= 24 and prompt in data.decode(val_ids.tolist())


# ---------------------------------------------------------------------------- training
def unigram_entropy(text: str) -> float:
    counts = collections.Counter(text.encode("utf-8"))
    n = sum(counts.values())
    return -sum(c / n * math.log(c / n) for c in counts.values())


def test_training_on_a_text_lowers_the_loss_and_reports_validation(poem):
    trainer = train.Trainer("tiny", tc(steps=LEARN_STEPS, lr=5e-3), ops="reference", text=poem)
    untrained = trainer.evaluate()
    records = trainer.run()
    first, last = records[0]["loss"], sum(r["loss"] for r in records[-5:]) / 5
    bound = FALL * unigram_entropy(VERSE)
    assert abs(first - math.log(256)) < 0.5 and abs(untrained - math.log(256)) < 0.5, (first, untrained)
    assert last < bound, (first, last, bound)
    val = trainer.evaluate()
    assert math.isfinite(val) and val < bound, (untrained, val, bound)


def test_checkpoint_of_another_text_is_refused(tmp_path, poem):
    train.Trainer("tiny", tc(), ops="reference", text=poem).save(tmp_path / "ck.pt")
    other = tmp_path / "other.txt"
    other.write_text(VERSE.upper() * 40)
    with pytest.raises(ValueError, match="trained on .*poem.txt"):
        train.Trainer("tiny", tc(), ops="reference", text=other).load(tmp_path / "ck.pt")
    with pytest.raises(ValueError, match="trained on"):
        train.Trainer("tiny", tc(), ops="reference").load(tmp_path / "ck.pt")


def test_command_line_trains_on_a_text_samples_and_records(tmp_path, poem, capsys):
    out, results = tmp_path / "run", tmp_path / "results"
    argv = ["--config", "tiny", "--ops", "reference", "--text", str(poem), "--steps", str(STEPS),
            "--batch", "8", "--seq-len", str(SEQ), "--lr", "3e-3", "--eval-every", "10", "--log-every", "5",
            "--sample-bytes", "12", "--out", str(out), "--record", str(results), "--quiet"]
    assert train.main(argv) == 0
    summary = json.loads((out / train.SUMMARY).read_text())
    assert summary["source"]["text"] == "poem.txt"
    assert [s for s, _ in summary["val_curve"]] == [10, 20, 30, 40]
    assert summary["val_curve"][-1][1] == summary["val_loss"] < summary["val_curve"][0][1]
    assert (out / train.PLOT).is_file()
    greedy, sampled = summary["samples"]
    for s in (greedy, sampled):
        assert s["text"].startswith(s["prompt"]) and len(s["text"].encode()) >= len(s["prompt"].encode())
        assert s["prompt"] in VERSE  # a line start of the held-out tail
    assert sampled["temperature"] == 0.8 and (out / train.SAMPLE).read_text().count("---") == 2
    record = json.loads((results / "capstone_text.json").read_text())
    assert record["final_val_loss"] == summary["val_loss"] and len(record["curves"]["train"]) == STEPS
    assert record["best_val"]["val_loss"] == min(v for _, v in summary["val_curve"])
    assert (results / "capstone_text.md").read_text() == text_record.markdown(record)
    assert (results / text_record.PLOT).is_file()
    assert "--text" in record["command"] and "greedy" in capsys.readouterr().out


# ---------------------------------------------------------------------------- sampling
def test_sampling_draws_bytes_only_and_is_seeded():
    cfg = cm.preset("tiny", vocab_size=512)  # ids 256..511 exist but are no byte
    model = cm.build(cfg, "reference", seed=0)
    with torch.no_grad():
        model.tok.weight[256:] *= 50  # make them likely: they must still never be drawn
    idx = data.encode("The ")[None].to(model.tok.weight.device)  # the model lives where the kernels run
    a = cg.sample(model, idx, 20, temperature=1.0, seed=3)
    assert a.shape == (1, 24) and torch.equal(a[:, :4], idx) and int(a.max()) < 256
    assert torch.equal(a, cg.sample(model, idx, 20, temperature=1.0, seed=3))
    assert not torch.equal(a, cg.sample(model, idx, 20, temperature=1.0, seed=4))
    for bad in (0, -1.0, True, "hot"):
        with pytest.raises(ValueError, match="temperature"):
            cg.sample(model, idx, 5, temperature=bad)
    with pytest.raises(ValueError, match="max_seq_len"):
        cg.sample(model, idx, cfg.max_seq_len, temperature=1.0)
    # Greedy decoding takes the argmax over every id: a non-byte id shows as U+FFFD, not an error.
    greedy = cg.generate(model, idx, 6, method="cache")
    assert int(greedy.max()) >= 256
    assert cg.generate_texts(model, ["The "], 6, method="cache")[0] == cg.to_text(greedy[0].tolist())
    assert cg.to_text([72, 105, 300, 0xC3, 0xA9]) == "Hi\ufffdé"


def test_notebook_book_falls_back_offline(tmp_path):
    path, why = ct.public_domain_book(tmp_path / "book.txt", url="http://127.0.0.1:9/none.txt", timeout=2)
    assert path is None and "could not download" in why
    # Online, Project Gutenberg's header and licence footer are cut (a file:// URL stands for the site).
    page = tmp_path / "pg.txt"
    page.write_text("The Project Gutenberg eBook\r\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\r\n"
                    "It is a truth universally acknowledged.\r\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\r\n"
                    "licence\r\n")
    path, why = ct.public_domain_book(tmp_path / "book.txt", url=page.as_uri())
    assert path.read_text() == "It is a truth universally acknowledged.\n" and "downloaded" in why
    kept = tmp_path / "kept.txt"
    kept.write_text("downloaded before\n")
    assert ct.public_domain_book(kept, url="http://127.0.0.1:9/none.txt")[0] == kept


def test_readme_record_matches_its_markdown():
    """The README includes results/capstone_text.md: it must be markdown() of the json beside it,
    and before the GPU run the README's block names the command that writes it."""
    results = text_record.Path(train.__file__).parent / "results"
    if (results / "capstone_text.json").is_file():
        record = json.loads((results / "capstone_text.json").read_text())
        assert (results / "capstone_text.md").read_text() == text_record.markdown(record)
        assert (results / text_record.PLOT).is_file()
    else:
        from course import weeks
        assert weeks.runner_command("capstone_text") == text_record.COMMAND
