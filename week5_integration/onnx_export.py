"""Exporting the GPT to ONNX and running it with ONNX Runtime (CPU), checked against torch.

ONNX is a file format for a computation graph: operators (MatMul, Softmax, ...) with their
weights, independent of the framework that produced it. A model exported once runs wherever an
ONNX runtime does: ONNX Runtime on CPUs and GPUs, TensorRT (NVIDIA's inference compiler), phones,
browsers. Serving stacks use it to leave Python (and its per-op launch cost) behind.

`torch.onnx.export(..., dynamo=True)` (the default exporter since torch 2.9) captures the model
with `torch.export`: it runs `forward` symbolically and records the aten operations, then
translates each to ONNX operators (onnxscript holds the translations). What it needs from a model:
* no Python side effects that depend on shapes: `GPT.rope_tables` caches its cos/sin tables in a
  dict keyed by the sequence length, a Python lookup that pins the length to the example's. So
  `ExportableGPT` holds the tables for every position as buffers and slices them in the graph:
  `cos[:T]` is an ONNX Slice whose end is the input's length.
* dynamic dimensions declared: `dynamic_shapes={"idx": {0: batch, 1: seq}}` makes batch and
  sequence length graph inputs instead of constants (`dynamic=False`: a fixed (batch, seq) model,
  which ONNX Runtime refuses to run at another shape).
* eval mode (this GPT has no dropout, but a model that has must not export it).

The exported graph is run by ONNX Runtime's CPU execution provider in float32 and compared with
torch's logits: the same arithmetic in another order (ORT's own GEMM blocking, softmax and norm
kernels), so they agree to float32 rounding compounded over the layers, not bit for bit;
`TOLERANCE` (rtol 1e-4, atol 1e-5 on logits of order 1) holds that with a wide margin and is
still 1000x below what a wrong mask or a wrong rotary table gives (errors of order 1).

TensorRT (not exercised by the tests: its wheels come from NVIDIA's own package index, which the
course's CI machine cannot reach; the inference notebook has a cell for the learner to run on
Colab) compiles an ONNX graph for one GPU: it fuses layers, picks kernels by timing them, and can
run in fp16/bf16/fp8/int8 with calibration. `trtexec --onnx=model.onnx --fp16` builds an engine
from the file this module writes; Torch-TensorRT does the same from a torch.export program
without the file. aot_package.py is the path that keeps the course's own kernels: AOTInductor.

Packages: `pip install onnx onnxruntime onnxscript` (not needed by the rest of the course;
`require_onnx` says so when they are missing).
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
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
        # BEGIN EXERCISE: GPT.forward for start = 0 without a cache, but the rotary tables are self.cos[:T],
        #   self.sin[:T] (learned positions: gpt.pos.weight[:T])
        # HINT: The ONNX graph must be a pure function of idx: no KV cache, start at 0, and the rotary
        #   tables as registered buffers sliced to T, so the exporter sees plain tensor ops.
        # HINT: Embed the tokens; learned positions add gpt.pos.weight[:T], rope uses (self.cos[:T],
        #   self.sin[:T]); run each block as block(x, rope, None, layer, pending), threading `pending`
        #   through; finish with the final norm's add_forward and the head.
        # HINT: `gpt.head(gpt.norm_f.add_forward(x, pending)[1])`: the last block left its residual add
        #   pending.
        gpt = self.gpt
        T = idx.shape[1]
        x = gpt.tok(idx)
        rope = None
        if gpt.pos is not None:
            x = x + gpt.pos.weight[:T]
        else:
            rope = (self.cos[:T], self.sin[:T])
        pending = None  # a block returns (x, pending): its last residual add, left to the next norm
        for layer, block in enumerate(gpt.blocks):
            x, pending = block(x, rope, None, layer, pending)
        return gpt.head(gpt.norm_f.add_forward(x, pending)[1])
        # END EXERCISE


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
    require_onnx()
    _check_model(model)
    for name, value in (("batch", batch), ("seq_len", seq_len)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if seq_len > model.cfg.max_seq_len:
        raise ValueError(f"seq_len {seq_len} exceeds the model's max_seq_len {model.cfg.max_seq_len}")
    # BEGIN EXERCISE: the export: ExportableGPT(model.eval()) traced on an example idx (mind that
    #   torch.export specializes sizes 0 and 1 to constants), torch.onnx.export(..., dynamo=True,
    #   input_names=['idx'], output_names=['logits'], dynamic_shapes={'idx': {0: Dim, 1: Dim}} if dynamic);
    #   .save(path); restore the model's training mode; return the Path
    # HINT: torch.onnx.export with dynamo=True traces the model with torch.export on an example input;
    #   dynamic axes must be declared, and sizes 0 or 1 in the example would be baked in as constants.
    # HINT: Make the parent directory; remember model.training; wrap ExportableGPT(model.eval()); an int64
    #   example of shape (batch, max(seq_len, 2) when dynamic); dynamic_shapes {"idx": {0: Dim("batch"), 1:
    #   Dim("seq", max=max_seq_len)}}; export, program.save(path); restore the mode in a finally.
    # HINT: `torch.onnx.export(wrapper, (example,), dynamo=True, input_names=["idx"],
    #   output_names=["logits"], dynamic_shapes=...)`
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    was_training = model.training
    wrapper = ExportableGPT(model.eval()).eval()
    # Example length >= 2: torch.export specializes dimensions of size 0 or 1 to constants.
    example = torch.zeros(batch, max(seq_len, 2) if dynamic else seq_len, dtype=torch.int64)
    dynamic_shapes = None
    if dynamic:
        dims = {0: torch.export.Dim("batch", max=1 << 16), 1: torch.export.Dim("seq", max=model.cfg.max_seq_len)}
        dynamic_shapes = {"idx": dims}
    # The exporter's chatter (deprecations, "torchvision is not installed") is not the learner's.
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    onnx_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(wrapper, (example,), dynamo=True, input_names=["idx"],
                                        output_names=["logits"], dynamic_shapes=dynamic_shapes,
                                        verbose=False)
        program.save(str(path))
    finally:
        onnx_logger.setLevel(level)
        model.train(was_training)
    return path
    # END EXERCISE


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
