"""Serving the capstone GPT: greedy generation three ways, batched, the same tokens each way.

    python -m capstone.generate --checkpoint /tmp/run/checkpoint.pt --prompt "The fox" --prompt "A cat" -n 60

Methods (`METHODS`), slowest to fastest at long context:

* ``no_cache``: every new token re-runs the model over the whole sequence so far; the t-th
  token costs a forward over P + t positions (quadratic in the length).
* ``cache``: week 5's `KVCache`; the prompt runs once (prefill), then each step feeds ONE
  position whose query attends to the cached keys and values (linear).
* ``graph``: week 5's `StaticDecoder`: the decode step has fixed shapes and addresses (the
  cache buffer is attended whole, positions not yet written masked by a device-side position),
  so on a GPU it is recorded once as a CUDA graph and replayed: one launch per token instead of
  one per kernel (~13 per layer), which is what bounds a small model's decode step. On the CPU
  the same step runs eagerly (no graphs there), so the tests check the very code the GPU replays.

With the fast ops the prefill (Tq == Tk) runs the course's flash attention; decode steps
(Tq = 1 query against the cache) use torch's SDPA, which has kernels for one query row (the
course kernel's 64-row query tiles would be 63/64 idle; week5_integration/kernels.py counts
these hand-offs in FALLBACKS). Norms, RoPE and SwiGLU are the course kernels in every method.

Batches. The model has no padding mask, so one batch holds prompts of one length:
`generate_texts` groups the prompts by their length in bytes and runs one batch per group
(sequences of a batch share every weight read, the cost that bounds a decode step: batch B
costs little more than batch 1 until the KV cache dominates the bytes).

Sampling (`sample`, `--temperature`): greedy decoding of a model trained on real text tends to
fall into a loop (the likeliest next byte of "the " leads back to "the "); drawing each byte from
softmax(logits / temperature) reads more like the text. Only the 256 byte ids are drawn: the
124M preset's 50048 ids that no byte uses (see README) stay out of the text whatever their small
probability. Seeded: one seed, one text, on a given device.

Greedy decoding is a function of the logits only, so the fast model and the reference twin
must emit the same tokens (in fp32; in bf16 a near-tie may round either way).
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import torch

from course import runtime
from capstone import model as cm
from week5_integration import data
from week5_integration import model as m
from week5_integration.inference import StaticDecoder, static_cache_len

METHODS = ("no_cache", "cache", "graph")


def _check_prompt(model: m.GPT, idx, max_new_tokens: int) -> None:
    if not isinstance(model, m.GPT):
        raise TypeError(f"model must be a week5 GPT, got {type(model).__name__}")
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.dtype != torch.int64:
        raise ValueError(f"idx must be a (batch, prompt) int64 tensor of token ids, got "
                         f"{getattr(idx, 'dtype', type(idx).__name__)} {tuple(getattr(idx, 'shape', ()))}")
    if idx.shape[0] < 1 or idx.shape[1] < 1:
        raise ValueError(f"idx must hold at least one prompt of at least one token, got shape {tuple(idx.shape)}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if idx.shape[1] + max_new_tokens > model.cfg.max_seq_len:
        raise ValueError(f"prompt ({idx.shape[1]}) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"max_seq_len {model.cfg.max_seq_len}")
    if idx.device != model.tok.weight.device:
        raise ValueError(f"idx is on {idx.device}, the model on {model.tok.weight.device}")
    if int(idx.min()) < 0 or int(idx.max()) >= model.cfg.vocab_size:
        raise ValueError(f"token ids must be in [0, {model.cfg.vocab_size}), got {int(idx.min())}..{int(idx.max())}")


@torch.no_grad()
def generate(model: m.GPT, idx: torch.Tensor, max_new_tokens: int, *, method: str = "graph") -> torch.Tensor:
    """Greedy continuation of idx (B, P) by max_new_tokens tokens: (B, P + max_new_tokens)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    _check_prompt(model, idx, max_new_tokens)
    was_training = model.training
    model.eval()
    try:
        if method == "graph":
            on_gpu = idx.device.type == "cuda"
            max_len = static_cache_len(idx.shape[1], max_new_tokens, model.cfg.max_seq_len)
            decoder = StaticDecoder(model, idx.shape[0], max_len=max_len, cuda_graph=on_gpu)
            return decoder.generate(idx, max_new_tokens)
        return m.generate(model, idx, max_new_tokens, use_cache=method == "cache")
    finally:
        model.train(was_training)


def to_text(tokens) -> str:
    """Token ids as text: ids 0..255 are bytes (decoded as UTF-8, U+FFFD where they do not decode);
    an id no byte uses (the 124M preset has 50048 of them, which greedy decoding of an undertrained
    model may pick) shows as U+FFFD too, instead of failing the run at its last step."""
    return b"".join(bytes((t,)) if t < data.VOCAB_SIZE else "\ufffd".encode() for t in map(int, tokens)).decode(
        "utf-8", errors="replace")


def generate_texts(model: m.GPT, prompts: list[str], max_new_tokens: int, *, method: str = "graph") -> list[str]:
    """Continue each prompt (bytes as tokens); prompts of equal byte length share one batch."""
    if not isinstance(prompts, (list, tuple)) or not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty strings")
    device = model.tok.weight.device
    groups = defaultdict(list)
    for i, text in enumerate(prompts):
        groups[len(text.encode("utf-8"))].append(i)
    out = [None] * len(prompts)
    for indices in groups.values():
        idx = torch.stack([data.encode(prompts[i]) for i in indices]).to(device)
        tokens = generate(model, idx, max_new_tokens, method=method)
        for row, i in enumerate(indices):
            out[i] = to_text(tokens[row].tolist())
    return out


@torch.no_grad()
def sample(model: m.GPT, idx: torch.Tensor, max_new_tokens: int, *, temperature: float = 0.8,
           seed: int = 0) -> torch.Tensor:
    """idx (B, P) continued by max_new_tokens bytes drawn from softmax(logits[:256] / temperature),
    with week 5's KV cache: (B, P + max_new_tokens)."""
    _check_prompt(model, idx, max_new_tokens)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a number > 0 (0 is greedy: use generate), got {temperature!r}")
    generator = torch.Generator(device=idx.device).manual_seed(seed)
    was_training = model.training
    model.eval()
    try:
        cache = m.KVCache(model.cfg, idx.shape[0], device=idx.device, dtype=model.tok.weight.dtype)
        out, step_input = [idx], idx
        for _ in range(max_new_tokens):
            start = cache.length
            logits = model(step_input, start=start, cache=cache)[:, -1, :data.VOCAB_SIZE].float()
            cache.length = start + step_input.shape[1]
            step_input = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator)
            out.append(step_input)
        return torch.cat(out, dim=1)
    finally:
        model.train(was_training)


def sample_text(model: m.GPT, prompt: str, max_new_tokens: int, **kwargs) -> str:
    """`sample` for one prompt, as text (a multi-byte character cut at the end shows as U+FFFD)."""
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"prompt must be a non-empty string, got {prompt!r}")
    idx = data.encode(prompt)[None].to(model.tok.weight.device)
    return to_text(sample(model, idx, max_new_tokens, **kwargs)[0].tolist())


def load_model(checkpoint, *, ops: str = "fast", device=None, dtype=None) -> m.GPT:
    """The model of a `capstone.train` checkpoint (any number of processes wrote it)."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    cfg = m.GPTConfig(**state["config"])
    model = cm.build(cfg, ops, device="cpu")
    model.load_state_dict({k.removeprefix("gpt."): v for k, v in state["model"].items()})
    model = model.to(runtime.DEVICE if device is None else device)
    return model.to(dtype) if dtype is not None else model


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", help="a capstone.train checkpoint (default: untrained tiny model)")
    p.add_argument("--prompt", action="append", help="repeat for a batch (default: two story openings)")
    p.add_argument("-n", "--max-new-tokens", type=int, default=40)
    p.add_argument("--method", choices=METHODS, default="graph")
    p.add_argument("--ops", choices=cm.OPS_NAMES, default="fast")
    p.add_argument("--temperature", type=float, default=0.0, help="> 0: sample bytes (seeded) instead of greedy")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    model = load_model(args.checkpoint, ops=args.ops) if args.checkpoint else cm.build("tiny", args.ops)
    prompts = args.prompt or ["The fox saw", "A cat found"]
    n = min(args.max_new_tokens, model.cfg.max_seq_len - max(len(t.encode()) for t in prompts))
    if args.temperature > 0:
        for prompt in prompts:
            print(repr(sample_text(model, prompt, n, temperature=args.temperature, seed=args.seed)))
        return 0
    for text in generate_texts(model, prompts, n, method=args.method):
        print(repr(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
