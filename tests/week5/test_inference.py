"""week5_integration.inference: the KV-cache cost model, fixed-shape decoding, and the measurements.

(That cached and uncached greedy decoding give the same tokens is tests/week5/test_model.py's.)
"""
import json

import pytest
import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from course import bench, runtime
from course.check import assert_close
from week5_integration import model as m

inf = runtime.lesson("week5_integration.inference")
DEVICE = runtime.DEVICE
TINY = m.config(m.GPT_TINY, max_seq_len=48)
VARIANTS_CFG = {"llama": {}, "gpt2": {"norm": "layernorm", "mlp": "gelu", "pos": "learned"}}


def tiny_model(**changes):
    torch.manual_seed(0)
    return m.GPT(m.config(TINY, **changes)).to(DEVICE).eval()


# ----------------------------------------------------------------------------- cost model
@pytest.mark.parametrize("changes", VARIANTS_CFG.values(), ids=VARIANTS_CFG.keys())
def test_weights_read_per_step_counts_the_model(changes):
    with torch.device("meta"):
        model = m.GPT(m.config(m.GPT2_SMALL, **changes))
    cfg = model.cfg
    linear = sum(mod.weight.numel() for mod in model.modules() if isinstance(mod, nn.Linear))
    norms = sum(p.numel() for mod in model.modules() if isinstance(mod, m.Norm) for p in mod.parameters())
    rows_per_token = cfg.d_model * (2 if cfg.pos == "learned" else 1)  # token (+ position) embedding row
    assert inf.matmul_weights(cfg) == linear
    assert inf.weights_read_per_step(cfg, batch=3) == linear + norms + 3 * rows_per_token
    # model.py's per-token FLOPs are 2 per matmul weight plus its attention term 2 L T d.
    T = 100
    assert m.flops_per_token(cfg, context=T, training=False) == 2 * linear + 2 * cfg.n_layers * T * cfg.d_model


def test_decode_step_bytes_and_the_roofline_prediction():
    cfg = m.GPT2_SMALL
    d, L = cfg.d_model, cfg.n_layers
    weights = inf.weights_read_per_step(cfg, batch=1)
    kv_per_position = 2 * L * d * 2  # K and V, every layer, bf16
    want = 2 * weights + kv_per_position * 1024 + kv_per_position  # read 1024 positions, write one
    assert inf.decode_step_bytes(cfg, batch=1, context=1024) == want
    p = inf.predict_decode(cfg, batch=1, context=1024, copy_gbps=3000.0, tflops=722.0)
    assert p["bytes"] == want
    assert p["ms"] == pytest.approx(want / 3e12 * 1e3)
    assert p["tokens_per_s"] == pytest.approx(3e12 / want)
    assert 9_000 < p["tokens_per_s"] < 12_000  # ~285 MB per token at 3 TB/s
    # Batch 16 reads the weights once for 16 tokens, but 16 caches: more tokens/s, less than 16x.
    p16 = inf.predict_decode(cfg, batch=16, context=1024, copy_gbps=3000.0, tflops=722.0)
    assert p["tokens_per_s"] * 4 < p16["tokens_per_s"] < p["tokens_per_s"] * 16
    assert p16["ms_compute"] < p16["ms_memory"]  # still bandwidth-bound at batch 16
    # With a tiny bandwidth and tiny peak the larger time wins (the roofline's max).
    slow = inf.predict_decode(cfg, batch=1, context=16, copy_gbps=1e6, tflops=1e-6)
    assert slow["ms"] == slow["ms_compute"] > slow["ms_memory"]
    with pytest.raises(ValueError, match="copy_gbps"):
        inf.predict_decode(cfg, batch=1, context=16, copy_gbps=0)
    with pytest.raises(ValueError, match="context"):
        inf.decode_step_bytes(cfg, batch=1, context=0)


@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no_cache"])
def test_generation_flops_match_torchs_flop_counter(use_cache):
    # FlopCounterMode counts the linear layers as aten.mm; it counts SDPA only on some backends
    # (and as a full square, causal or not), so the comparison takes the mm's and leaves
    # attention out. Exact integers: no tolerance.
    model = tiny_model()
    prompt = torch.randint(0, TINY.vocab_size, (2, 5), device=DEVICE)
    with FlopCounterMode(display=False) as counter:
        m.generate(model, prompt, 6, use_cache=use_cache)
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    matmuls = sum(n for op, n in counts.items() if op in ("aten.mm", "aten.addmm"))
    want = inf.generation_flops(TINY, prompt=5, new_tokens=6, use_cache=use_cache, batch=2, attention=False)
    assert matmuls == want, counts


def test_uncached_generation_is_quadratic_cached_is_linear():
    cfg = m.GPT2_SMALL

    def total(n, cache):
        return inf.generation_flops(cfg, prompt=1, new_tokens=n, use_cache=cache)

    # Doubling the tokens: ~4x the work without the cache, ~2x with it.
    assert 3.5 < total(512, False) / total(256, False) < 4.5
    assert 1.9 < total(512, True) / total(256, True) < 2.2
    # Closed form of the uncached matmul work: sum over t of (P + t) positions.
    P, n = 7, 9
    per_position = 2 * inf.matmul_weights(cfg)
    assert inf.generation_flops(cfg, prompt=P, new_tokens=n, use_cache=False, attention=False) == \
        per_position * (n * P + n * (n - 1) // 2)
    assert inf.generation_flops(cfg, prompt=P, new_tokens=n, use_cache=True, attention=False) == \
        per_position * (P + n - 1)


def test_ops_per_decode_step_counts_every_layer():
    two, four = tiny_model(), m.GPT(m.config(TINY, n_layers=4)).to(DEVICE).eval()
    a, b = inf.ops_per_decode_step(two), inf.ops_per_decode_step(four)
    assert 0 < a["kernels"] < a["ops"]
    per_layer = (b["ops"] - a["ops"]) / 2
    assert per_layer > 10  # norms, projections, rope, cache writes, attention, MLP, residuals
    assert a["ops"] - 2 * per_layer > 0  # plus the embedding, final norm and head
    with pytest.raises(ValueError, match="max_seq_len"):
        inf.ops_per_decode_step(two, context=TINY.max_seq_len)


# ------------------------------------------------------------------------ fixed-shape decoding
@pytest.mark.parametrize("changes", VARIANTS_CFG.values(), ids=VARIANTS_CFG.keys())
def test_static_decoder_steps_equal_the_full_forward(changes):
    model = tiny_model(**changes)
    idx = torch.randint(0, TINY.vocab_size, (3, 12), device=DEVICE)
    with torch.no_grad():
        full = model(idx)
    decoder = inf.StaticDecoder(model, 3, max_len=16)
    decoder.prefill(idx[:, :5])
    assert_close(decoder.logits, full[:, 4], rtol=1e-4, atol=1e-5)
    for t in range(5, 12):
        decoder.token.copy_(idx[:, t:t + 1])  # teacher forcing: feed the known next token
        decoder.step()
        # fp32; the step attends over 16 masked positions instead of t + 1: same terms, other order.
        assert_close(decoder.logits, full[:, t], rtol=1e-4, atol=1e-5, name=f"logits at {t}")
    assert int(decoder.pos) == 12


@pytest.mark.parametrize("changes", VARIANTS_CFG.values(), ids=VARIANTS_CFG.keys())
def test_static_decoder_generates_what_generate_does(changes):
    model = tiny_model(**changes)
    prompt = torch.randint(0, TINY.vocab_size, (2, 4), device=DEVICE)
    want = m.generate(model, prompt, 10)
    assert torch.equal(inf.StaticDecoder(model, 2, max_len=13).generate(prompt, 10), want)


GRAPH_MODES = [pytest.param(False, id="eager"),
               pytest.param(True, id="cuda_graph", marks=pytest.mark.gpu(reason="CUDA graphs need a CUDA GPU"))]


@pytest.mark.parametrize("cuda_graph", GRAPH_MODES)
@pytest.mark.parametrize("changes", VARIANTS_CFG.values(), ids=VARIANTS_CFG.keys())
def test_static_decoder_reused_matches_a_fresh_one(changes, cuda_graph):
    """A decoder is an object with state (the KV cache, the position, the last token and logits,
    a captured graph). Used for one generation and then prefilled with another, shorter prompt
    (the cache still holds the first run's keys past it), it must give the LOGITS a fresh decoder
    gives, at the prefill and at every step after it: equal greedy tokens would hide a stale cache
    entry or position that only moves the logits a little."""
    model = tiny_model(**changes)
    used = inf.StaticDecoder(model, 2, max_len=24, cuda_graph=cuda_graph)
    used.generate(torch.randint(0, TINY.vocab_size, (2, 9), device=DEVICE), 14)  # fills positions 0..21
    prompt = torch.randint(0, TINY.vocab_size, (2, 4), device=DEVICE)
    forced = torch.randint(0, TINY.vocab_size, (2, 8), device=DEVICE)
    fresh = inf.StaticDecoder(model, 2, max_len=24, cuda_graph=cuda_graph)
    for decoder in (used, fresh):
        decoder.prefill(prompt)
    assert_close(used.logits, fresh.logits, name="logits after the prefill")
    assert torch.equal(used.token, fresh.token) and int(used.pos) == int(fresh.pos) == 4
    for t in range(forced.shape[1]):
        for decoder in (used, fresh):
            decoder.token.copy_(forced[:, t:t + 1])  # teacher forcing: the same input to both
            decoder.step()
        assert_close(used.logits, fresh.logits, name=f"logits at step {t}")
    # And the reused decoder's answer is the model's: the full forward over the same tokens.
    with torch.no_grad():
        full = model(torch.cat((prompt, forced), dim=1))
    assert_close(used.logits, full[:, -1], rtol=1e-4, atol=1e-5, name="reused vs the full forward")


def test_kv_cache_reused_from_position_0_matches_a_fresh_one():
    """model(idx, cache=...) with a KVCache that served a generation before, rewound to length 0
    (what StaticDecoder.prefill does): the same logits as with a fresh cache, at the prefill and
    for the steps that follow."""
    model = tiny_model()
    used = m.KVCache(model.cfg, 2, device=DEVICE, dtype=torch.float32)
    fresh = m.KVCache(model.cfg, 2, device=DEVICE, dtype=torch.float32)
    with torch.no_grad():
        model(torch.randint(0, TINY.vocab_size, (2, 20), device=DEVICE), cache=used)
        used.length = 20  # as generate() leaves it
        used.length = 0   # rewound: positions 0..19 still hold the first run's keys and values
        tokens = torch.randint(0, TINY.vocab_size, (2, 9), device=DEVICE)
        for start, stop in ((0, 5), (5, 6), (6, 9)):
            got = model(tokens[:, start:stop], start=start, cache=used)
            want = model(tokens[:, start:stop], start=start, cache=fresh)
            used.length = fresh.length = stop
            assert_close(got, want, name=f"logits of positions {start}..{stop - 1}")


@pytest.mark.gpu(reason="CUDA graphs need a CUDA GPU")
def test_static_decoder_in_a_cuda_graph_generates_what_generate_does():
    model = tiny_model()
    prompt = torch.randint(0, TINY.vocab_size, (2, 4), device=DEVICE)
    decoder = inf.StaticDecoder(model, 2, max_len=32, cuda_graph=True)
    assert decoder.graph is not None
    want = m.generate(model, prompt, 20)
    assert torch.equal(decoder.generate(prompt, 20), want)
    # Replays again after a fresh prefill: nothing in the graph remembers the last run.
    other = torch.randint(0, TINY.vocab_size, (2, 6), device=DEVICE)
    assert torch.equal(decoder.generate(other, 12), m.generate(model, other, 12))


def test_static_decoder_refuses_bad_arguments():
    model = tiny_model()
    with pytest.raises(ValueError, match="max_len"):
        inf.StaticDecoder(model, 1, max_len=TINY.max_seq_len + 1)
    with pytest.raises(ValueError, match="batch"):
        inf.StaticDecoder(model, 0)
    with pytest.raises(TypeError, match="GPT"):
        inf.StaticDecoder(nn.Linear(2, 2), 1)
    decoder = inf.StaticDecoder(model, 2, max_len=8)
    with pytest.raises(ValueError, match="idx must be"):
        decoder.prefill(torch.zeros(3, 4, dtype=torch.int64, device=DEVICE))
    with pytest.raises(ValueError, match="holds 8"):
        decoder.generate(torch.zeros(2, 4, dtype=torch.int64, device=DEVICE), 6)
    if not runtime.on_gpu():
        with pytest.raises(ValueError, match="CUDA"):
            inf.StaticDecoder(model, 1, cuda_graph=True)


# ------------------------------------------------------------------------------ measuring
@pytest.mark.parametrize("variant", ["no_cache", "cache", "cache_graph"])
def test_timed_generate_produces_generates_tokens(variant):
    model = tiny_model()
    prompt = torch.randint(0, TINY.vocab_size, (2, 5), device=DEVICE)
    tokens, prefill_s, decode_s = inf.timed_generate(model, prompt, 7, variant=variant)
    assert torch.equal(tokens, m.generate(model, prompt, 7))
    assert prefill_s > 0 and decode_s > 0


def test_measure_generate_reports_per_step_times():
    model = tiny_model()
    got = inf.measure_generate(model, batch=2, prompt=6, new_tokens=5, variant="cache", repeats=2)
    assert got["ms"] > 0 and got["prefill_ms"] > 0
    assert got["tokens_per_s"] == pytest.approx(2 / (got["ms"] * 1e-3))
    assert got["tokens"].shape == (2, 11)
    with pytest.raises(ValueError, match="new_tokens"):
        inf.measure_generate(model, batch=1, prompt=4, new_tokens=1, variant="cache")
    with pytest.raises(ValueError, match="variant"):
        inf.timed_generate(model, prompt_tokens(model), 3, variant="speculative")
    with pytest.raises(ValueError, match="max_seq_len"):
        inf.timed_generate(model, prompt_tokens(model, 40), 10, variant="cache")


def prompt_tokens(model, length=4):
    return torch.zeros(1, length, dtype=torch.int64, device=DEVICE)


def test_benchmark_record_is_course_bench_compatible(tmp_path):
    from week5_integration import inference_bench  # the benchmark (inference_bench.py) of the solution

    cfg = m.config(TINY, max_seq_len=24)
    plan = {"cfg": cfg, "batches": [2], "prompts": [4, 16], "new_tokens": 4, "dtype": torch.float32,
            "repeats": 1}
    result = inference_bench.kv_cache_benchmark(plan, progress=False)
    assert bench.is_result(result)
    for key in ("benchmark", "title", "simulated", "date", "machine", "ceilings", "rows"):
        assert key in result
    assert result["benchmark"] == "kv_cache_week5" and result["ceilings"]["copy_gbps"] > 0
    rows = result["rows"]
    assert len(rows) == 2 * 3 and all("skipped" not in r for r in rows), rows
    for row in rows:
        assert row["tokens_per_s"] == pytest.approx(row["batch"] / (row["ms"] * 1e-3))
        assert row["same_tokens_as_first_variant"], row  # fp32: every variant decodes alike
        assert row["predicted_tokens_per_s"] > 0 and row["bytes"] > 0 and row["flops"] > 0
        assert row["speedup_vs_no_cache"] > 0
    paths = inference_bench.save(result, tmp_path)
    assert [p.name for p in paths] == ["kv_cache_week5.json", "kv_cache_week5.md", "kv_cache_week5.png"]
    record = json.loads(paths[0].read_text())
    assert bench.is_result(record) and record["rows"][0]["variant"] == "no_cache"
    assert "tokens/s" in paths[1].read_text()
    # The course's generic table (what `python -m course report` puts in the README) reads it too.
    assert "B=2 prompt=16" in bench.markdown_table(record)
    with pytest.raises(ValueError, match="unknown variants"):
        inference_bench.kv_cache_benchmark(plan, variants=["cache", "paged"], progress=False)


# ------------------------------------------------------------------ whether the host paced the decode steps
def test_measure_generate_says_whether_the_host_paced_the_decode_steps(gpu_clock, monkeypatch):
    """Each run's decode steps go through the kit's clock (course/bench_clock.py): on a GPU the result says
    whether the host paced them; on the CPU the flag stays unknown. The GPU path runs here with stand-in
    events (conftest's gpu_clock): events that follow the host make a host-paced loop, a slow GPU does not."""
    model = tiny_model()
    got = inf.measure_generate(model, batch=2, prompt=6, new_tokens=5, variant="cache", repeats=2)
    assert [t.reps for t in got["timings"]] == [4, 4]  # new_tokens - 1 decode steps per run
    assert ("host_bound" in got) == runtime.on_gpu()
    monkeypatch.setattr(inf, "LoopClock", gpu_clock())
    for variant in inf.VARIANTS:
        got = inf.measure_generate(model, batch=2, prompt=6, new_tokens=5, variant=variant, repeats=2)
        assert got["host_bound"] is True and got["host_ms"] > 0, variant
        assert torch.equal(got["tokens"], m.generate(model, prompt_tokens_like(got["tokens"], 6), 5))
    monkeypatch.setattr(inf, "LoopClock", gpu_clock(gpu_ms=1e4))
    assert inf.measure_generate(model, batch=1, prompt=4, new_tokens=3, variant="cache")["host_bound"] is False


def prompt_tokens_like(tokens, prompt):
    return tokens[:, :prompt]


def test_kv_cache_rows_carry_the_flag_and_the_table_marks_them(gpu_clock, monkeypatch, tmp_path):
    from week5_integration import inference as solution
    from week5_integration import inference_bench

    monkeypatch.setattr(solution, "LoopClock", gpu_clock())
    plan = {"cfg": m.config(TINY, max_seq_len=24), "batches": [1], "prompts": [4], "new_tokens": 3,
            "dtype": torch.float32, "repeats": 1}
    result = inference_bench.kv_cache_benchmark(plan, progress=False)
    assert all(r["host_bound"] is True and r["host_ms"] > 0 for r in result["rows"])
    record = json.loads(inference_bench.save(result, tmp_path)[0].read_text())
    table = inference_bench.markdown_table(record)
    assert table.count("* |") == len(record["rows"]) and "host-bound" in table
    for r in record["rows"]:  # a record made before the flag: the same table, unmarked, no footnote
        del r["host_bound"], r["host_ms"]
    table = inference_bench.markdown_table(record)
    assert "* |" not in table and "host-bound" not in table
