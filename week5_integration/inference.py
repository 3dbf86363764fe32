"""Inference: what the KV cache saves, what bounds a decode step, and how fast `generate` runs.

A language model writes one token at a time. Without a cache (`generate(..., use_cache=False)`)
every new token re-runs the model over the whole sequence so far: step t processes P + t
positions (P = prompt length), so n new tokens cost

    sum_t [(P + t) * W + 2 L d (P + t)^2]  FLOPs   ~  n (P + n/2) W   (+ the attention term)

with W = 2 x (matmul weights) FLOPs per position (the `flops_per_token` of model.py without its
attention term): *quadratic* in the sequence length. With the cache each layer keeps the keys and
values of past positions; the prompt is run once (prefill) and every later step feeds ONE
position, whose query attends to the cached keys: n new tokens cost ~ P W + n W (+ attention
4 L d per cached position): *linear*. `generation_flops` counts both exactly.

What bounds one cached decode step? It reads every weight once (the LM head too: V x d) and the
whole KV cache (2 x L x B x context x d values), and does only 2 FLOPs per weight per sequence:
at batch B that is ~B FLOPs per byte in bf16, hopelessly left of the H100's ridge (722 TFLOP/s /
3.0 TB/s = 240 FLOP/byte). So a step can take no less than

    (weight bytes + KV-cache bytes) / copy bandwidth        (`decode_step_bytes`, `predict_decode`)

The 124M GPT-2-small-sized model in bf16 reads ~250 MB of weights per step: ~83 us at 3 TB/s,
~12,000 tokens/s at batch 1; batch 16 reads the weights once for 16 tokens: nearly 16x the
tokens/s until the KV cache (which grows with batch x context) dominates the bytes.

Two more floors, which a small model hits first (`ops_per_decode_step` counts what they count):
* eager PyTorch launches every op from Python: ~67 aten ops per layer here (~40 of them real
  kernels, the rest views), each ~5-20 us of CPU time (dispatch + launch), so 12 layers take
  milliseconds per token however fast the GPU is. The GPU idles: the step is *launch-bound*,
  and the cache's savings hardly show at batch 1.
* a CUDA graph (`StaticDecoder(cuda_graph=True)`) replays the whole step with one launch; what
  remains is each kernel's own start-up and tail, ~2-4 us per kernel for kernels this small.
  Fusing kernels (torch.compile, or the course's Triton kernels) is the next lever.
A CUDA graph needs fixed shapes and addresses, but the cache grows by one position per step.
`StaticDecoder` keeps the shapes fixed: every step attends over the whole cache buffer with a
mask hiding the positions not yet written, and the position lives in a device tensor.

`measure_generate` times prefill and decode separately (host clock around synchronised work);
inference_bench.py's `kv_cache_benchmark` runs the grid (context, batch, variant) and `save`
writes results/kv_cache_week5.json|md|png, a record shaped like `course.bench.run`'s.

    python -m week5_integration.inference_bench --out week5_integration/results    # on the GPU
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from course import bench_timing
from course.bench_clock import LoopClock
from week5_integration import model as m

VARIANTS = ("no_cache", "cache", "cache_graph")
# Assumed per-op costs for the launch-bound predictions (the GPU run measures the real ones):
# eager PyTorch spends ~10 us of CPU per op (Python, dispatcher, launch); a kernel replayed
# from a CUDA graph costs ~3 us (launch latency, ramp-up and tail of a small grid).
EAGER_US_PER_OP = 10.0
GRAPH_US_PER_KERNEL = 3.0


# ------------------------------------------------------------------------------ cost model
def _check_positive(**values):
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def matmul_weights(cfg: m.GPTConfig) -> int:
    """Weights every position multiplies by: the blocks' linear layers and the LM head."""
    d, L = cfg.d_model, cfg.n_layers
    mlp = (3 if cfg.mlp == "swiglu" else 2) * d * cfg.hidden
    return L * (4 * d * d + mlp) + cfg.vocab_size * d


def weights_read_per_step(cfg: m.GPTConfig, batch: int = 1) -> int:
    """Parameters a forward step reads: matmul weights, norm weights, and one embedding row per
    sequence (a lookup, not the table; the head reads the whole V x d table even when tied)."""
    norm = cfg.d_model * (2 if cfg.norm == "layernorm" else 1)
    embedding_rows = batch * cfg.d_model * (2 if cfg.pos == "learned" else 1)
    return matmul_weights(cfg) + (2 * cfg.n_layers + 1) * norm + embedding_rows


def decode_step_bytes(cfg: m.GPTConfig, *, batch: int, context: int, itemsize: int = 2) -> int:
    """Least bytes one cached decode step moves: weights once, the KV cache of `context`
    positions per sequence (K and V, every layer) read, one new K and V written. Activations
    (a few d-vectors per sequence) are left out: kilobytes against megabytes."""
    _check_positive(batch=batch, context=context, itemsize=itemsize)
    # BEGIN EXERCISE: weights_read_per_step(cfg, batch) values, plus K and V (2 x n_layers x batch x d_model
    #   values) for each of the `context` cached positions read and for the one new position written;
    #   everything times itemsize.
    # HINT: A decode step is memory-bound: count the bytes that must cross HBM at least once, the weights
    #   and the whole KV cache read, plus one new K and V written.
    # HINT: One K-and-V entry for every layer and sequence is 2 * n_layers * batch * d_model values; it is
    #   read for each of the `context` positions and written once; add the weight values; everything in
    #   bytes via itemsize.
    kv = 2 * cfg.n_layers * batch * cfg.d_model * itemsize
    return weights_read_per_step(cfg, batch) * itemsize + kv * context + kv
    # END EXERCISE


def decode_step_flops(cfg: m.GPTConfig, *, batch: int, context: int, attention: bool = True) -> int:
    """FLOPs of one cached decode step: 2 per weight per sequence, plus (attention=True) one
    query against `context` keys (q.k and p.v: 4 d per key per layer)."""
    _check_positive(batch=batch, context=context)
    return batch * (2 * matmul_weights(cfg) + attention * 4 * cfg.n_layers * context * cfg.d_model)


def forward_flops(cfg: m.GPTConfig, *, batch: int, length: int, attention: bool = True) -> int:
    """FLOPs of a full causal forward over `length` positions (the uncached step)."""
    _check_positive(batch=batch, length=length)
    # Causal attention: query i meets i + 1 keys; sum 4 d (i + 1) = 2 d T (T + 1).
    causal = 2 * cfg.n_layers * cfg.d_model * length * (length + 1)
    return batch * (2 * matmul_weights(cfg) * length + attention * causal)


def generation_flops(cfg: m.GPTConfig, *, prompt: int, new_tokens: int, use_cache: bool, batch: int = 1,
                     attention: bool = True) -> int:
    """Total FLOPs of `generate(model, prompt, new_tokens)`: n model calls.

    Without the cache call t (t = 0..n-1) is a full forward over P + t positions; with it,
    call 0 is the prefill over P positions and call t >= 1 feeds one position that attends to
    P + t keys (the prompt, the t - 1 fed tokens and itself). attention=False counts the
    weight matmuls only (what `torch.utils.flop_counter` sees on the CPU).
    """
    _check_positive(prompt=prompt, new_tokens=new_tokens, batch=batch)
    # BEGIN EXERCISE: without the cache: sum of forward_flops over lengths prompt + t, t = 0..n-1; with it:
    #   forward_flops over the prompt, then decode_step_flops at context prompt + t for t = 1..n-1. Pass
    #   `attention` through.
    # HINT: Without a cache every new token reruns the whole growing sequence; with it, the prompt runs once
    #   and each later token costs one decode step against a growing context.
    # HINT: Without cache: a sum of forward_flops at length prompt + t for t in range(new_tokens). With
    #   cache: forward_flops of the prompt, plus decode_step_flops at context prompt + t for t from 1 to
    #   new_tokens - 1; pass `attention` everywhere.
    if not use_cache:
        return sum(forward_flops(cfg, batch=batch, length=prompt + t, attention=attention)
                   for t in range(new_tokens))
    return forward_flops(cfg, batch=batch, length=prompt, attention=attention) + sum(
        decode_step_flops(cfg, batch=batch, context=prompt + t, attention=attention) for t in range(1, new_tokens))
    # END EXERCISE


def predict_decode(cfg: m.GPTConfig, *, batch: int, context: int, copy_gbps: float,
                   tflops: float | None = None, itemsize: int = 2) -> dict:
    """The roofline's answer for one cached decode step: max(bytes / bandwidth, FLOPs / peak).

    Returns bytes, flops, ms_memory, ms_compute, ms (the larger) and tokens_per_s (batch
    tokens per step). `copy_gbps` in GB/s (1e9 bytes/s), `tflops` the matmul peak (None:
    memory only).
    """
    if not copy_gbps or copy_gbps <= 0:
        raise ValueError(f"copy_gbps must be a positive bandwidth in GB/s, got {copy_gbps!r}")
    # BEGIN EXERCISE: bytes and flops from decode_step_bytes / decode_step_flops; ms_memory = bytes / (GB/s
    #   x 1e9) in ms, ms_compute = flops / (TFLOP/s x 1e12) in ms (0 when tflops is None); ms = the larger;
    #   tokens_per_s = batch / seconds.
    # HINT: A roofline estimate: the step takes as long as the slower of moving its bytes at the copy
    #   bandwidth and doing its flops at peak compute.
    # HINT: Get bytes and flops from the two helpers; convert each to milliseconds (bytes / (GB/s * 1e9) *
    #   1e3, flops / (TFLOP/s * 1e12) * 1e3, or 0 with no tflops); take the max; tokens per second is batch
    #   over the step's seconds.
    # HINT: `"tokens_per_s": batch / (ms * 1e-3)`: every step produces one token per sequence.
    nbytes = decode_step_bytes(cfg, batch=batch, context=context, itemsize=itemsize)
    flops = decode_step_flops(cfg, batch=batch, context=context)
    ms_memory = nbytes / (copy_gbps * 1e9) * 1e3
    ms_compute = flops / (tflops * 1e12) * 1e3 if tflops else 0.0
    ms = max(ms_memory, ms_compute)
    return {"bytes": nbytes, "flops": flops, "ms_memory": ms_memory, "ms_compute": ms_compute,
            "ms": ms, "tokens_per_s": batch / (ms * 1e-3)}
    # END EXERCISE


def ops_per_decode_step(model: m.GPT, *, batch: int = 1, context: int = 8) -> dict:
    """Count the torch operations of one cached decode step (runs it once, on the model's device).

    Returns {"ops": all aten ops, "kernels": those that are not views (a view launches nothing)}:
    multiply by a per-op cost for the launch-bound floors of the module docstring.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    _check_positive(batch=batch, context=context)
    if context + 1 > model.cfg.max_seq_len:
        raise ValueError(f"context {context} + 1 exceeds max_seq_len {model.cfg.max_seq_len}")
    device, dtype = model.tok.weight.device, model.tok.weight.dtype
    cache = m.KVCache(model.cfg, batch, device=device, dtype=dtype)
    prompt = torch.zeros(batch, context, dtype=torch.int64, device=device)
    token = torch.zeros(batch, 1, dtype=torch.int64, device=device)

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops, self.views = 0, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            self.views += bool(getattr(func, "is_view", False))
            return func(*args, **(kwargs or {}))

    with torch.no_grad():
        model(prompt, cache=cache)
        cache.length = context
        with Count() as count:
            model(token, start=context, cache=cache)
    return {"ops": count.ops, "kernels": count.ops - count.views}


# ------------------------------------------------------------------- fixed-shape decoding
class StaticDecoder:
    """Greedy decoding whose decode step has fixed shapes and addresses (CUDA-graph ready).

    The prompt is prefilled through the model as usual (`model(idx, cache=...)`); each decode
    step then reads the token in `self.token` at the position in the device tensor `self.pos`,
    writes its K and V into the cache at that position (`index_copy_`), attends over the whole
    cache buffer with positions > pos masked out, and leaves the next token (argmax) in
    `self.token` and the logits in `self.logits`. Nothing in the step depends on a Python
    number that changes, so `cuda_graph=True` records it once and replays it every step.
    The cache holds `max_len` positions (default: the model's max_seq_len): every step reads
    all of them, so size it to prompt + new tokens.
    """

    def __init__(self, model: m.GPT, batch: int, *, max_len: int | None = None, cuda_graph: bool = False):
        if not isinstance(model, m.GPT):
            raise TypeError(f"model must be a week5 GPT, got {type(model).__name__}")
        cfg = model.cfg
        max_len = cfg.max_seq_len if max_len is None else max_len
        _check_positive(batch=batch, max_len=max_len)
        if max_len > cfg.max_seq_len:
            raise ValueError(f"max_len {max_len} exceeds the model's max_seq_len {cfg.max_seq_len}")
        device, dtype = model.tok.weight.device, model.tok.weight.dtype
        if cuda_graph and device.type != "cuda":
            raise ValueError(f"cuda_graph=True needs the model on a CUDA GPU; it is on {device}")
        self.model, self.batch, self.max_len = model, batch, max_len
        self.cache = m.KVCache(m.config(cfg, max_seq_len=max_len), batch, device=device, dtype=dtype)
        self.token = torch.zeros(batch, 1, dtype=torch.int64, device=device)
        self.pos = torch.zeros(1, dtype=torch.int64, device=device)
        self.logits = torch.zeros(batch, cfg.vocab_size, dtype=dtype, device=device)
        self.key_positions = torch.arange(max_len, device=device)
        self.rope = model.rope_tables(0, max_len) if model.pos is None else None
        self.graph = self._capture() if cuda_graph else None

    def _attention(self, block: m.Block, h: torch.Tensor, rope, visible, layer: int) -> torch.Tensor:
        # BEGIN EXERCISE: qkv projection of h (B, 1, d), split and reshape to (B, H, 1, Dh); rope if given;
        #   write k, v into self.cache.k[layer] / .v[layer] at self.pos (index_copy_ along dim 2); SDPA of q
        #   against the WHOLE cache with attn_mask=visible (shaped to broadcast); output projection back to
        #   (B, 1, d).
        # HINT: For CUDA graphs every step must run the same kernels on the same buffers: write this token's
        #   K and V into a preallocated cache at the device-side position, and attend over the whole cache
        #   with a mask instead of slicing it.
        # HINT: Project with attn.qkv and split into q, k, v; view each as (B, 1, H, Dh) and transpose to
        #   (B, H, 1, Dh); rope when given; index_copy_ k and v into the layer's cache along the sequence
        #   dim at self.pos; SDPA against the full cache with the mask reshaped to broadcast; transpose back
        #   and project.
        # HINT: `self.cache.k[layer].index_copy_(2, self.pos, k)` (a tensor position, not a Python int: no
        #   host sync, graph-safe).
        cfg, attn = self.model.cfg, block.attn
        B = h.shape[0]
        q, k, v = attn.qkv(h).split(cfg.d_model, dim=2)
        q, k, v = (t.view(B, 1, cfg.n_heads, cfg.head_dim).transpose(1, 2) for t in (q, k, v))
        if rope is not None:
            q, k = attn.ops.rope(q, k, *rope)
        self.cache.k[layer].index_copy_(2, self.pos, k)
        self.cache.v[layer].index_copy_(2, self.pos, v)
        # The mask is built from self.pos on the device: the same kernels work at every step.
        y = F.scaled_dot_product_attention(q, self.cache.k[layer], self.cache.v[layer],
                                           attn_mask=visible.view(1, 1, 1, -1))
        return attn.proj(y.transpose(1, 2).reshape(B, 1, cfg.d_model))
        # END EXERCISE

    def _step(self) -> None:
        # BEGIN EXERCISE: embed self.token (+ model.pos(self.pos) for learned positions); rope tables = rows
        #   self.pos of self.rope (index_select); visible = self.key_positions <= self.pos; the blocks (x +
        #   attention(norm1 x); x + mlp(norm2 x)), final norm, head; copy the logits into self.logits and
        #   their argmax into self.token; self.pos += 1, in place.
        # HINT: One decode step of the whole model, written only with device-side state (token, pos, logits
        #   buffers) so it can be captured once as a CUDA graph and replayed.
        # HINT: Embed the token (plus learned positions), pick this position's rope rows with index_select,
        #   build the visibility mask by comparing key positions with pos; pre-norm residual blocks; final
        #   norm and head; copy_ the last logits and their argmax into the persistent buffers; increment pos
        #   in place.
        # HINT: Everything in place: `self.logits.copy_(...)`, `self.token.copy_(...)`, `self.pos.add_(1)`:
        #   a graph replays addresses, new tensors would not be seen.
        model = self.model
        x = model.tok(self.token)
        if model.pos is not None:
            x = x + model.pos(self.pos)
        rope = None if self.rope is None else tuple(t.index_select(0, self.pos) for t in self.rope)
        visible = self.key_positions <= self.pos
        for layer, block in enumerate(model.blocks):
            x = x + self._attention(block, block.norm1(x), rope, visible, layer)
            x = x + block.mlp(block.norm2(x))
        self.logits.copy_(model.head(model.norm_f(x))[:, -1])
        self.token.copy_(self.logits.argmax(dim=-1, keepdim=True))
        self.pos.add_(1)
        # END EXERCISE

    def _capture(self):
        # The recipe of the PyTorch CUDA-graphs docs: warm up on a side stream (cuBLAS
        # workspaces, lazy inits), then record one step. Recording runs nothing, so only the
        # warm-up's writes (cache position 0..1, pos) need undoing; prefill overwrites the cache.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(2):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            self._step()
        self.pos.zero_()
        self.token.zero_()
        return graph

    @torch.no_grad()
    def prefill(self, idx: torch.Tensor) -> None:
        """Run the prompt (B, P) through the model into the cache; the first new token is then
        in `self.token` and its logits in `self.logits`."""
        if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.shape[0] != self.batch:
            raise ValueError(f"idx must be a ({self.batch}, prompt) tensor of token ids, got "
                             f"{tuple(getattr(idx, 'shape', ()))}")
        if idx.shape[1] > self.max_len:
            raise ValueError(f"prompt of {idx.shape[1]} positions leaves no room in a cache of {self.max_len}")
        self.cache.length = 0
        logits = self.model(idx, cache=self.cache)
        self.cache.length = idx.shape[1]
        self.logits.copy_(logits[:, -1])
        self.token.copy_(self.logits.argmax(dim=-1, keepdim=True))
        self.pos.fill_(idx.shape[1])

    @torch.no_grad()
    def step(self) -> torch.Tensor:
        """Feed `self.token` at `self.pos`; returns `self.token`, now the next token."""
        if self.graph is not None:
            self.graph.replay()
        else:
            self._step()
        return self.token

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Greedy: the same tokens as `model.generate(model, idx, max_new_tokens)`."""
        _check_positive(max_new_tokens=max_new_tokens)
        P = idx.shape[1]
        if P + max_new_tokens > self.max_len + 1:
            raise ValueError(f"prompt ({P}) + max_new_tokens ({max_new_tokens}) needs a cache of "
                             f"{P + max_new_tokens - 1} positions; this one holds {self.max_len}")
        out = torch.empty(idx.shape[0], P + max_new_tokens, dtype=torch.int64, device=idx.device)
        out[:, :P] = idx
        self.prefill(idx)
        out[:, P] = self.token[:, 0]
        for i in range(1, max_new_tokens):
            out[:, P + i] = self.step()[:, 0]
        return out


# ------------------------------------------------------------------------------ measuring
def static_cache_len(prompt: int, new_tokens: int, max_seq_len: int) -> int:
    """Positions a `StaticDecoder` needs (prompt + new - 1), rounded up to a multiple of 16.

    16 positions keep each row of the attention mask 16-byte aligned, which the fused SDPA
    kernels want (otherwise torch pads the mask: one more copy per layer and step).
    """
    return min(-(-(prompt + new_tokens - 1) // 16) * 16, max_seq_len)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def timed_generate(model: m.GPT, idx: torch.Tensor, max_new_tokens: int, *, variant: str = "cache",
                   clock: LoopClock | None = None):
    """`generate`'s greedy loop with the prefill (first call) and the decode steps timed apart.

    Returns (tokens, prefill_s, decode_s). Variants: "no_cache" (every call re-runs the whole
    sequence), "cache" (`KVCache`, eager) and "cache_graph" (`StaticDecoder`, a CUDA graph on
    the GPU; eager fixed shapes elsewhere). The clock is the host's around synchronised work:
    one synchronize after the prefill, one after the last step. Each decode step is also
    bracketed by `clock` (the kit's, course/bench_clock.py; a new one when None): its events and
    the drain after the loop say whether the GPU waited for the host's Python between steps.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    _check_positive(max_new_tokens=max_new_tokens)
    device = idx.device
    clock = LoopClock(max_new_tokens - 1, events=device.type == "cuda") if clock is None else clock
    if variant == "cache_graph":
        max_len = static_cache_len(idx.shape[1], max_new_tokens, model.cfg.max_seq_len)
        decoder = StaticDecoder(model, idx.shape[0], max_len=max_len, cuda_graph=device.type == "cuda")
        out = torch.empty(idx.shape[0], idx.shape[1] + max_new_tokens, dtype=torch.int64, device=device)
        out[:, :idx.shape[1]] = idx
        _sync(device)
        t0 = time.perf_counter()
        decoder.prefill(idx)
        out[:, idx.shape[1]] = decoder.token[:, 0]
        _sync(device)
        t1 = time.perf_counter()
        for i in range(1, max_new_tokens):
            clock.start()
            out[:, idx.shape[1] + i] = decoder.step()[:, 0]
            clock.stop()
        return out, t1 - t0, _drained(clock, device) - t1
    use_cache = variant == "cache"
    if idx.shape[1] + max_new_tokens > model.cfg.max_seq_len:
        raise ValueError(f"prompt ({idx.shape[1]}) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"max_seq_len {model.cfg.max_seq_len}")
    cache = m.KVCache(model.cfg, idx.shape[0], device=device, dtype=model.tok.weight.dtype) if use_cache else None
    out, step_input, start = idx, idx, 0
    _sync(device)
    t0 = t1 = time.perf_counter()
    for i in range(max_new_tokens):
        if i > 0:
            clock.start()
        if use_cache:
            logits = model(step_input, start=start, cache=cache)
            start = cache.length = start + step_input.shape[1]
        else:
            logits = model(out)
        step_input = m.pick_token(logits[:, -1].float(), 0.0)
        out = torch.cat((out, step_input), dim=1)
        if i == 0:
            _sync(device)
            t1 = time.perf_counter()
        else:
            clock.stop()
    return out, t1 - t0, _drained(clock, device) - t1


def _drained(clock: LoopClock, device: torch.device) -> float:
    """The host's clock once the GPU has finished the decode steps; the clock's synchronize is that wait
    (its drain is one of the host-bound rule's signs, so nothing may synchronise before it)."""
    if len(clock):
        clock.timing()
    _sync(device)
    return time.perf_counter()


def measure_generate(model: m.GPT, *, batch: int, prompt: int, new_tokens: int, variant: str,
                     repeats: int = 3, seed: int = 0) -> dict:
    """Median prefill and per-step decode times of `repeats` runs (after one warm-up run).

    Returns {"prefill_ms", "ms" (one decode step: one new token per sequence), "tokens_per_s"
    (batch / step time), "tokens"} for a random prompt (batch, prompt); on a GPU also whether the host
    paced the decode steps of any run ("host_bound", then "ms" is the host's time) and the host's ms per
    step ("host_ms", median of the runs), from the runs' Timings ("timings": course/bench_clock.py).
    """
    _check_positive(batch=batch, prompt=prompt, new_tokens=new_tokens, repeats=repeats)
    if new_tokens < 2:
        raise ValueError("new_tokens must be >= 2: the first new token comes from the prefill")
    device = model.tok.weight.device
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, model.cfg.vocab_size, (batch, prompt), generator=gen).to(device)
    timed_generate(model, idx, new_tokens, variant=variant)  # warm-up: allocator, cuBLAS, graphs
    prefill, decode, timings, tokens = [], [], [], None
    for _ in range(repeats):
        clock = LoopClock(new_tokens - 1, events=device.type == "cuda")
        tokens, p, d = timed_generate(model, idx, new_tokens, variant=variant, clock=clock)
        prefill.append(p)
        decode.append(d / (new_tokens - 1))
        timings.append(clock.timing())
    step = statistics.median(decode)
    return {"prefill_ms": statistics.median(prefill) * 1e3, "ms": step * 1e3,
            "tokens_per_s": batch / step, "tokens": tokens, **bench_timing.rounds_fields(timings), "timings": timings}
