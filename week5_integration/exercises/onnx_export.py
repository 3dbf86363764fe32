"""Exercise: export the GPT to ONNX and run it with ONNX Runtime.

Same names as week5_integration/onnx_export.py (read its docstring first). Yours to write:
`ExportableGPT.forward` and `export_onnx`. Check with
`pytest tests/week5/test_onnx_export.py --impl=exercises` (needs onnx, onnxruntime, onnxscript).
"""
from __future__ import annotations

import argparse
import logging  # noqa: F401  (the solution uses it)
import sys
import time
import warnings  # noqa: F401  (the solution uses it)
from pathlib import Path

import torch
import torch.nn as nn

from week5_integration import model as m

TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}  # float32 ORT vs float32 torch, see the docstring
INSTALL_HINT = "pip install onnx onnxruntime onnxscript"


def missing_packages() -> list[str]:
    """The ONNX packages this lesson needs that cannot be imported here."""
    import importlib.util

    return [name for name in ("onnx", "onnxruntime", "onnxscript") if importlib.util.find_spec(name) is None]


def require_onnx() -> None:
    missing = missing_packages()
    if missing:
        raise ImportError(f"the ONNX lesson needs {', '.join(missing)}: {INSTALL_HINT}")


class ExportableGPT(nn.Module):
    """The same GPT (the same parameters, not a copy), with rotary tables as buffers.

    `forward(idx)` is `GPT.forward(idx)` for start = 0 and no cache: token (and position)
    embedding, the blocks, final norm, LM head. Only the rotary tables differ in how they are
    found: sliced from full-length buffers instead of looked up in a Python dict.
    """

    def __init__(self, gpt: m.GPT):
        super().__init__()
        if not isinstance(gpt, m.GPT):
            raise TypeError(f"gpt must be a week5 GPT, got {type(gpt).__name__}")
        self.gpt = gpt
        if gpt.pos is None:
            cos, sin = gpt.rope_tables(0, gpt.cfg.max_seq_len)
            # Rows of rope_tables(0, max) are rope_tables(0, T)'s rows: the same float32 values.
            self.register_buffer("cos", cos.clone(), persistent=False)
            self.register_buffer("sin", sin.clone(), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        # TODO: GPT.forward for start = 0 without a cache, but the rotary tables are
        #       self.cos[:T], self.sin[:T] (learned positions: gpt.pos.weight[:T]).
        raise NotImplementedError("not implemented yet: ExportableGPT.forward (week5 exercise)")


def _check_model(model) -> None:
    if not isinstance(model, m.GPT):
        raise TypeError(f"model must be a week5 GPT, got {type(model).__name__}")
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        raise TypeError(f"export a float32 model (ONNX Runtime's CPU kernels are float32); it has "
                        f"{sorted(str(d) for d in dtypes)}: call .float() first")
    devices = {p.device.type for p in model.parameters()}
    if devices != {"cpu"}:
        raise ValueError(f"export from the CPU (ONNX Runtime runs on the CPU here); the model is on {devices}: "
                         "call .cpu() first")


def export_onnx(model: m.GPT, path, *, batch: int = 2, seq_len: int = 8, dynamic: bool = True) -> Path:
    """Write `model` (eval mode, float32, CPU) to `path` as ONNX; return the path.

    Input "idx" (batch, seq) int64 token ids, output "logits" (batch, seq, vocab) float32.
    dynamic=True: batch and seq are symbolic (any batch, 1 <= seq <= max_seq_len); False: the
    graph is fixed to (batch, seq_len), the example's shape.
    """
    # TODO: require_onnx(); _check_model(model); refuse batch / seq_len < 1 and seq_len > max_seq_len;
    #       torch.onnx.export(ExportableGPT(model.eval()), (example,), dynamo=True, input_names=['idx'],
    #       output_names=['logits'], dynamic_shapes={'idx': {0: Dim, 1: Dim}} if dynamic); .save(path);
    #       restore the model's training mode; return the Path.
    raise NotImplementedError("not implemented yet: export_onnx (week5 exercise)")


def onnx_session(path):
    """An ONNX Runtime session on the CPU execution provider."""
    require_onnx()
    import onnxruntime as ort

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no ONNX file at {path}")
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_onnx(session, idx: torch.Tensor) -> torch.Tensor:
    """Logits (batch, seq, vocab) from an ONNX Runtime session, as a torch tensor."""
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2 or idx.dtype != torch.int64:
        raise ValueError(f"idx must be a (batch, seq) int64 tensor, got {getattr(idx, 'dtype', type(idx).__name__)} "
                         f"{tuple(getattr(idx, 'shape', ()))}")
    (logits,) = session.run(["logits"], {"idx": idx.detach().cpu().numpy()})
    return torch.from_numpy(logits)


def compare_with_torch(model: m.GPT, session, idx: torch.Tensor) -> dict:
    """Max abs and norm-wise relative difference of ONNX Runtime's logits from torch's."""
    with torch.no_grad():
        want = model.eval()(idx)
    got = run_onnx(session, idx)
    diff = (got.double() - want.double())
    return {"max_abs": float(diff.abs().max()), "rel": float(diff.norm() / want.double().norm()),
            "got": got, "want": want}


def time_cpu(fn, repeats: int = 10) -> float:
    """Median wall-clock ms of `fn()` on the CPU (after one warm-up call)."""
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return sorted(samples)[len(samples) // 2]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="gpt_small.onnx", help="where to write the .onnx file")
    parser.add_argument("--seq", type=int, default=128, help="sequence length to check and time")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = m.GPT(m.GPT_SMALL).eval()
    started = time.perf_counter()
    path = export_onnx(model, args.out)
    print(f"exported {path} ({path.stat().st_size / 2**20:.1f} MiB) in {time.perf_counter() - started:.1f} s")
    session = onnx_session(path)
    idx = torch.randint(0, model.cfg.vocab_size, (1, args.seq))
    check = compare_with_torch(model, session, idx)
    print(f"max |ORT - torch| = {check['max_abs']:.2e}, relative {check['rel']:.2e}")
    with torch.no_grad():
        t_torch = time_cpu(lambda: model(idx))
    t_ort = time_cpu(lambda: run_onnx(session, idx))
    print(f"CPU forward (1 x {args.seq}): torch {t_torch:.1f} ms, ONNX Runtime {t_ort:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
