"""Serving a packaged GPT with torch alone: no course, no model code, no Triton.

This file imports torch and the standard library, nothing else: it is what a server holds.
Run it by path (`python week5_integration/aot_runner.py PACKAGE ...`), so that Python does
not import the course's package around it; tests/week5/test_aot_package.py runs it in a fresh
process and checks that no course, week or capstone module was loaded.

A package (aot_package.py wrote it) holds two compiled functions and their metadata:
* prefill(idx (B, T) int64, k_cache, v_cache) -> logits (B, T, V), writing cache positions [0, T);
* decode(token (B, 1) int64, pos (1,) int64, k_cache, v_cache) -> logits (B, V), writing `pos`.
The compiled code trusts its inputs: a float token tensor, a batch above the packaged maximum
or a position past the cache is read as whatever its bytes are, or past the end of a buffer.
So `PackagedGPT` checks every call against the metadata first and raises TypeError/ValueError
saying what was expected; only then does it run the package. Layout is the one thing it fixes
instead of refusing: the compiled code indexes its inputs with the strides of the examples it was
traced with (contiguous), so a strided view of token ids (`idx[:, ::2]`, a transpose) would be read
as the wrong tokens, silently; the runner passes a contiguous copy of such a view (a few bytes).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# Run by path, Python puts this file's folder first on sys.path, and the lesson folder holds
# modules named model.py, data.py, train.py...: drop it, so that no import can find them.
HERE = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0] or ".").resolve() == HERE:
    sys.path.pop(0)

import torch  # noqa: E402
from torch._inductor.package import load_package  # noqa: E402


class PackagedGPT:
    """prefill / decode / generate of a .pt2 package, with the caches it needs."""

    def __init__(self, path: str):
        started = time.perf_counter()
        self.prefill_fn = load_package(str(path), "prefill")
        self.decode_fn = load_package(str(path), "decode")
        self.load_s = time.perf_counter() - started
        meta = self.prefill_fn.get_metadata()
        if "course.vocab_size" not in meta:
            raise ValueError(f"{path} is not a package of the course's GPT (no course.* keys in its metadata)")
        self.vocab_size, self.n_layers = int(meta["course.vocab_size"]), int(meta["course.n_layers"])
        self.n_heads, self.head_dim = int(meta["course.n_heads"]), int(meta["course.head_dim"])
        self.max_batch, self.max_len = int(meta["course.max_batch"]), int(meta["course.max_len"])
        self.dtype = getattr(torch, meta["course.dtype"])
        self.device = torch.device(meta["course.device"])
        self.weights = meta.get("course.weights", "float")  # "int8" / "fp8": aot_quant.py's packages
        self.k_cache = self.v_cache = None
        self.pos = torch.zeros(1, dtype=torch.int64, device=self.device)
        self.length = 0  # positions written so far (host copy of pos)

    def _check_tokens(self, idx, name: str, length: int | None = None) -> None:
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(idx).__name__}")
        if idx.dtype != torch.int64:
            raise TypeError(f"{name} must be int64 token ids, got {idx.dtype}")
        if idx.dim() != 2 or not 1 <= idx.shape[0] <= self.max_batch or idx.shape[1] < 1:
            raise ValueError(f"{name} must be (batch, positions) with 1 <= batch <= {self.max_batch} (the packaged "
                             f"maximum) and at least one position, got shape {tuple(idx.shape)}")
        if length is not None and idx.shape[1] != length:
            raise ValueError(f"{name} must hold {length} position(s) per sequence, got {idx.shape[1]}")
        if idx.device != self.device:
            raise ValueError(f"{name} is on {idx.device}; this package runs on {self.device}")
        if int(idx.min()) < 0 or int(idx.max()) >= self.vocab_size:
            raise ValueError(f"{name} must hold ids in [0, {self.vocab_size}), got {int(idx.min())}..{int(idx.max())}")

    def prefill(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) of the prompt idx (B, T); starts new caches for this batch."""
        self._check_tokens(idx, "idx")
        if idx.shape[1] > self.max_len:
            raise ValueError(f"idx has {idx.shape[1]} positions; the package holds at most {self.max_len} "
                             "(its max_len, the cache length it was compiled for)")
        shape = (self.n_layers, idx.shape[0], self.n_heads, self.max_len, self.head_dim)
        if self.k_cache is None or self.k_cache.shape != shape:
            self.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
            self.v_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        out = self.prefill_fn(idx.contiguous(), self.k_cache, self.v_cache)
        logits = out[0] if isinstance(out, (list, tuple)) else out
        self.length = idx.shape[1]
        self.pos.fill_(self.length)
        return logits

    def decode(self, token: torch.Tensor) -> torch.Tensor:
        """Logits (B, V) of one new position per sequence, after a prefill of this batch."""
        if self.k_cache is None:
            raise ValueError("decode needs a prefill first (it fills the caches)")
        self._check_tokens(token, "token", length=1)
        if token.shape[0] != self.k_cache.shape[1]:
            raise ValueError(f"token has batch {token.shape[0]}; the caches were filled for batch {self.k_cache.shape[1]}")
        if self.length >= self.max_len:
            raise ValueError(f"position {self.length} is past the package's max_len {self.max_len}: the cache is full")
        out = self.decode_fn(token.contiguous(), self.pos, self.k_cache, self.v_cache)
        logits = out[0] if isinstance(out, (list, tuple)) else out
        self.length += 1
        self.pos.add_(1)
        return logits

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, new_tokens: int):
        """Greedy: (tokens (B, T + new_tokens), prefill logits, [decode logits per step])."""
        if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
            raise ValueError(f"new_tokens must be a positive int, got {new_tokens!r}")
        if isinstance(idx, torch.Tensor) and idx.dim() == 2 and idx.shape[1] + new_tokens - 1 > self.max_len:
            raise ValueError(f"prompt ({idx.shape[1]}) + new_tokens ({new_tokens}) needs {idx.shape[1] + new_tokens - 1} "
                             f"cache positions; the package holds {self.max_len}")
        logits = self.prefill(idx)
        token = logits[:, -1].argmax(-1, keepdim=True)
        tokens, steps = [idx, token], []
        for _ in range(new_tokens - 1):
            step = self.decode(token)
            steps.append(step)
            token = step.argmax(-1, keepdim=True)
            tokens.append(token)
        return torch.cat(tokens, dim=1), logits, steps


def loaded_course_modules() -> list[str]:
    """Course modules in this process, by name or by file (anything loaded from the course's
    folder but this script): empty is the point of this file."""
    root = HERE.parent
    found = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        # (some modules have a relative, made-up __file__: torch.ops says "_ops.py"): absolute paths only
        resolved = Path(path).resolve() if isinstance(path, str) and Path(path).is_absolute() else None
        # (a virtual environment inside the course's folder holds torch: not a course module)
        inside = (resolved is not None and resolved.is_relative_to(root) and resolved != Path(__file__).resolve()
                  and not {"site-packages", "dist-packages"} & set(resolved.parts))
        if inside or name.split(".")[0] in ("course", "capstone") or name.startswith("week"):
            found.append(name)
    return sorted(found)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("package", help="a .pt2 file written by week5_integration.aot_package")
    p.add_argument("--prompt", action="append", help="text (bytes are the tokens); repeat for a batch")
    p.add_argument("--tokens", help="a torch.save'd (B, T) int64 tensor instead of --prompt")
    p.add_argument("-n", "--new-tokens", type=int, default=20)
    p.add_argument("--out", help="torch.save the tokens, the logits and the loaded modules here")
    args = p.parse_args(argv)
    gpt = PackagedGPT(args.package)
    if args.tokens:
        idx = torch.load(args.tokens).to(gpt.device)
    else:
        texts = args.prompt or ["The fox saw"]
        if len({len(t.encode()) for t in texts}) != 1:
            raise SystemExit("prompts of one batch must have one length in bytes (the model has no padding mask)")
        idx = torch.tensor([list(t.encode()) for t in texts], dtype=torch.int64, device=gpt.device)
    tokens, logits, steps = gpt.generate(idx, args.new_tokens)
    if args.out:
        torch.save({"tokens": tokens.cpu(), "prefill_logits": logits.cpu(),
                    "decode_logits": [s.cpu() for s in steps], "modules": loaded_course_modules(),
                    "load_s": gpt.load_s}, args.out)
    else:
        for row in tokens.tolist():
            print(repr(bytes(t % 256 for t in row).decode("utf-8", "replace")))
    print(f"loaded in {gpt.load_s * 1e3:.0f} ms; course modules loaded: {loaded_course_modules() or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
