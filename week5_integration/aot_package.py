"""Inference without the course's Python: the capstone GPT exported, compiled ahead of time, packaged.

`torch.export` records a model's forward as a graph of aten operations (no Python left in it);
AOTInductor (`torch._inductor.aot_compile`) compiles that graph into a shared library (C++ that
calls cuBLAS/aten and launches Triton kernels compiled to cubins on a GPU; C++ loops with SIMD on
a CPU), and `package_aoti` zips the library, its weights and its metadata into one `.pt2` file.
Loading it (`torch._inductor.package.load_package`, or `AOTIModelPackageLoader` in C++) needs
torch and the file: no model code, no course, no Triton, no Python at all from C++.

What the compiler needs to see, and what the course's ops give it
-------------------------------------------------------------------
The capstone's fast model calls the course's kernels through `torch.library.custom_op`s
(week 4's custom_ops.py). A custom_op is OPAQUE: the exported graph holds a node
`course::rms_norm` and nothing else, and a package built from it calls back into the Python
registration of that op when it runs: a process that did not import the course cannot run it.
`torch.library.triton_op` is TRANSPARENT: its body is torch ops plus `wrap_triton(kernel)[grid]`
launches, which torch.export keeps as one node (the program stays high-level) and AOTInductor
traces through when it compiles: the Triton kernel itself (its source, compiled to a cubin for
this GPU) goes into the package. So this lesson registers the five inference forwards the
model calls as triton_ops (`AOT_OPS`), each launching the SAME week-4 kernel the fast model
runs (RMSNorm row kernel, add+RMSNorm, RoPE on q and k in one launch, FlashAttention-2 forward,
packed SwiGLU), with the launch settings the week-4 launchers choose for these shapes, and no
backward (inference only).

Off the GPU there is no Triton kernel to compile in: the kernels run in Triton's interpreter
(Python), which no package can hold. There each triton_op's body is the op's torch reference
(F.rms_norm, rotate-half RoPE, SDPA, silu * up), and Inductor writes C++ for it: the CPU package
is the same graph with Inductor's code where the GPU package has the course's kernels.
`package_kernels(path)` lists what a package holds (its generated source: the course kernels'
names appear in a GPU package, none in a CPU one).

Two functions, one package
--------------------------
* `prefill(idx, k_cache, v_cache) -> logits (B, T, V)`: the prompt, positions 0..T-1, writing
  their keys and values into the caches (in place) and returning the logits of every position.
  Attention is the course's causal FlashAttention (Tq == Tk).
* `decode(token, pos, k_cache, v_cache) -> logits (B, V)`: one new position per sequence, the
  design of week 5's `StaticDecoder`: the position is a device tensor, the step writes K and V at
  `pos` (index_copy_, in place) and attends over the whole cache with positions > pos masked
  (torch's SDPA: the course kernel's 64-row query tiles have no 1-row decode path). Every shape
  is fixed but the batch, so one compiled step serves every position.
The caches are explicit inputs (n_layers, B, H, max_len, Dh) that the package MUTATES: nothing
is copied per step, and the caller owns the memory (`aot_runner.PackagedGPT` allocates them).
Batch (1..max_batch) and prompt length (1..max_len) are dynamic dimensions of the graphs;
`max_len` (the cache length, at most the model's max_seq_len) is the packaged maximum and is
written in the package's metadata with everything a loader must check before running
(`aot_runner.PackagedGPT` refuses a wrong dtype or a too-long sequence with a clear error:
the compiled code checks nothing and would read past its buffers).

Cost: compiling is minutes of C++ (CPU) or C++ plus Triton (GPU); loading is milliseconds to
a second (`capstone/package_bench.py` measures both, and what the package's decode step costs
against eager, torch.compile and the CUDA-graph decoder, and against the memory floor).
Error model: fp32 on the CPU, the package's C++ and the eager model's kernels sum in other
orders: logits agree to float32 rounding compounded over the layers (`TOLERANCE`); in bf16 on
the GPU, the package and eager run the same Triton kernels but Inductor fuses the torch code
around them differently (another rounding of each bf16 intermediate): the bound is that of
two bf16 evaluations of one model (`TOLERANCE_BF16`, relative to the logits' scale).

    python -m capstone.package --config tiny --out /tmp/gpt.pt2     # package it (capstone/package.py)
    python week5_integration/aot_runner.py /tmp/gpt.pt2 --prompt "The fox" -n 20  # serve it (torch only)
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from course import ops, runtime
from course.launch import next_power_of_2
from week4_triton_dl import rope as rope_module, swiglu
from week4_triton_dl.norms import add_rmsnorm, plumbing as nc, rmsnorm
from week4_triton_dl.attention import flash as fa
from week4_triton_dl.attention import plans as fap
from week4_triton_dl.attention.naive import dot_precision
from week5_integration import model as m

NAMESPACE = ops.namespace(__name__)
# fp32 on the CPU: relative (norm-wise) and absolute bounds on the logits (order 1); float32
# rounding over a few layers is ~1e-6 relative: 1e-4 is a wide margin, and a wrong mask or table
# gives errors of order 1.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
# bf16 (8 mantissa bits, unit roundoff 2^-8 = 3.9e-3): two evaluations that round their
# intermediates differently differ by a few units of roundoff per layer, relative to the logits.
TOLERANCE_BF16 = {"rtol": 3e-2, "atol": 3e-2}
MODEL_NAMES = ("prefill", "decode")
COURSE_KERNELS = ("rmsnorm_fwd_row_kernel", "add_rmsnorm_fwd_kernel", "rope_kernel",
                  "flash_attention_fwd_kernel", "swiglu_fwd_kernel")


def on_gpu_tensor(t: torch.Tensor) -> bool:
    # The branch is taken while tracing (fake tensors have a device): on a CUDA tensor the course
    # kernel, compiled into the package; elsewhere the torch reference, which Inductor compiles.
    return t.device.type == "cuda" and runtime.on_gpu()


# ----------------------------------------------------------------------- the ops, transparent
@torch.library.triton_op(f"{NAMESPACE}::aot_rms_norm", mutates_args=())
def aot_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """F.rms_norm(x, (N,), weight, eps): week 4's row kernel (one program per row) on a GPU."""
    N = x.shape[-1]
    if not on_gpu_tensor(x) or N > rmsnorm.MAX_N:
        return F.rms_norm(x, (N,), weight, eps)
    x = x.contiguous()
    y = torch.empty_like(x)
    block = next_power_of_2(N)  # the row kernel's plan (rmsnorm.py): a row in one block
    # rstd is not stored (STORE_STATS=False: no backward follows), y is passed as its dummy pointer.
    torch.library.wrap_triton(rmsnorm.rmsnorm_fwd_row_kernel)[(x.numel() // N,)](
        x, weight, y, y, N, eps, HAS_WEIGHT=True, BLOCK_N=block, ACC=nc.acc_type(x.dtype), STORE_STATS=False,
        num_warps=nc.warps_for(block))
    return y


@torch.library.triton_op(f"{NAMESPACE}::aot_add_rms_norm", mutates_args=())
def aot_add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(h, y) = (x + delta, rms_norm(h)): week 4's add_rmsnorm kernel (one pass) on a GPU."""
    N = x.shape[-1]
    if not on_gpu_tensor(x) or N > add_rmsnorm.MAX_N or x.dtype != delta.dtype:
        h = x + delta
        return h, F.rms_norm(h, (N,), weight, eps)
    x, delta = x.contiguous(), delta.contiguous()
    h, y = torch.empty_like(x), torch.empty_like(x)
    rstd = torch.empty(x.numel() // N, dtype=nc.acc_dtype(x.dtype), device=x.device)  # the kernel stores it
    block = next_power_of_2(N)
    torch.library.wrap_triton(add_rmsnorm.add_rmsnorm_fwd_kernel)[(x.numel() // N,)](
        x, delta, weight, h, y, rstd, N, eps, HAS_WEIGHT=True, BLOCK_N=block, ACC=nc.acc_type(x.dtype),
        num_warps=nc.warps_for(block))
    return h, y


@torch.library.triton_op(f"{NAMESPACE}::aot_rope", mutates_args=())
def aot_rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
             sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE of q and k (B, H, T, Dh), any strides with a contiguous last dim (views of
    the qkv projection); cos/sin (T, Dh/2) fp32: week 4's rope kernel, q and k in one launch."""
    if not on_gpu_tensor(q):
        return m.torch_rope(q, k, cos, sin)
    B, H, S, D = q.shape
    q_out = torch.empty_like(q, memory_format=torch.contiguous_format)
    k_out = torch.empty_like(k, memory_format=torch.contiguous_format)
    half = D // 2
    # rope.py's launch plan for (H, H, D/2, dtype), written out (its _plan is the module's own).
    block_d = next_power_of_2(half)
    block_h = min(next_power_of_2(H), max(1, rope_module.TILE // block_d))
    blocks = -(-H // block_h)

    def bsh(t):  # (batch, seq, head) strides of a (B, H, S, D) tensor
        return t.stride(0), t.stride(2), t.stride(1)

    torch.library.wrap_triton(rope_module.rope_kernel)[(B * S, 2 * blocks)](
        q, k, q_out, k_out, cos, sin, S, H, H, half, 0, blocks, *bsh(q), *bsh(k), *bsh(q_out), *bsh(k_out),
        INVERSE=False, BLOCK_H=block_h, BLOCK_D=block_d, ACC=nc.acc_type(q.dtype),
        num_warps=max(1, min(4, block_h * block_d // 256)))
    return q_out, k_out


@torch.library.triton_op(f"{NAMESPACE}::aot_causal_attention", mutates_args=())
def aot_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention of a prompt (Tq == Tk, top-left aligned): week 4's FlashAttention-2
    forward on a GPU, with ONE tile config for every length (the eager launcher tunes one per
    power-of-two length; a package has no autotuner at run time): the config the eager path
    uses for short 16-bit sequences, fp32's own for fp32."""
    B, H, S, D = q.shape
    if not on_gpu_tensor(q) or D not in fa.HEAD_DIMS:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    config = fap.fixed_config(fa.SMALL_FWD, q.dtype, 1)  # bucket 1: "short", never None
    out = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, S), dtype=fap.stats_dtype(q.dtype), device=q.device)
    block_m = config.kwargs["BLOCK_M"]
    torch.library.wrap_triton(fa.flash_attention_fwd_kernel)[(-(-S // block_m), B * H)](
        q, k, v, out, lse, lse, H, S, S, fap.LOG2E / D ** 0.5, S,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        CAUSAL=True, HAS_KEY_LENGTHS=False, DOT_PRECISION=dot_precision(q.dtype), HEAD_DIM=D,
        BLOCK_M=block_m, BLOCK_N=config.kwargs["BLOCK_N"], num_warps=config.num_warps,
        num_stages=config.num_stages)
    return out


@torch.library.triton_op(f"{NAMESPACE}::aot_swiglu", mutates_args=())
def aot_swiglu(h: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of h = [gate | up] (..., 2N), read in place: week 4's swiglu kernel."""
    n = h.shape[-1] // 2
    if not on_gpu_tensor(h):
        return m.torch_swiglu(h)
    h2 = h.contiguous().view(-1, 2 * n)
    M = h2.shape[0]
    y = torch.empty((M, n), dtype=h.dtype, device=h.device)
    # swiglu.py's plan without the row-count clamp (M is symbolic here: masks cover a ragged tail).
    block_n = min(next_power_of_2(n), 1024)
    while block_n > 128 and n % block_n:
        block_n //= 2
    block_m = max(1, swiglu.TILE // block_n)
    grid = (-(-M // block_m) * -(-n // block_n),)
    a, b = h2[:, :n], h2[:, n:]
    torch.library.wrap_triton(swiglu.swiglu_fwd_kernel)[grid](
        a, b, y, M, n, 2 * n, 2 * n, n, BLOCK_M=block_m, BLOCK_N=block_n, ACC=nc.acc_type(h.dtype), num_warps=4)
    return y.view(*h.shape[:-1], n)


# ------------------------------------------------------------- the Ops record the export runs
def _norm(x, weight, bias, eps, kind):
    if kind != "rmsnorm":
        return m.torch_norm(x, weight, bias, eps, kind)
    return aot_rms_norm(x, weight, eps)


def _add_norm(x, delta, weight, bias, eps, kind, out_dtype=None):
    if kind != "rmsnorm":
        h = x + delta
        y = m.torch_norm(h, weight, bias, eps, kind)
    else:
        h, y = aot_add_rms_norm(x, delta, weight, eps)
    return h, (y if out_dtype is None else y.to(out_dtype))


def _attention(q, k, v, causal):
    if causal and q.shape[2] == k.shape[2]:
        return aot_causal_attention(q, k, v)
    return m.torch_attention(q, k, v, causal)


AOT_OPS = m.Ops("aot", norm=_norm, rope=aot_rope, attention=_attention,
                swiglu=aot_swiglu, add_norm=_add_norm)


# ---------------------------------------------------------------------- the exported functions
class _CacheWriter:
    """What `Attention.forward` calls as a KV cache during prefill: writes the prompt's keys and
    values at positions [0, T) of the caller's buffers and returns them (Tq == Tk attention)."""

    def __init__(self, k_cache, v_cache):
        self.k, self.v = k_cache, v_cache

    def append(self, layer, k, v):
        # Positions arange(T), not a copy into the slice [:T]: the slice's layout depends on
        # whether T is the whole cache, which would split the graph on T == max_len.
        write_cache(self.k, layer, torch.arange(k.shape[2], device=k.device), k)
        write_cache(self.v, layer, torch.arange(k.shape[2], device=k.device), v)
        return k, v


def write_cache(cache, layer: int, positions, new):
    """cache[layer, :, :, positions] = new (B, H, T, Dh), as ONE index_put_ on the whole cache.

    Why not `cache[layer].index_copy_(2, positions, new)`: that writes through a view (the layer's
    select), which functionalization turns into "copy the layer out, write, scatter it back"
    (select_scatter), and Inductor's generated code then copies every layer's cache through a
    buffer and back into the input at the end of the step: the whole cache read and written per
    token, where the step should write one position. An index_put_ on the input itself is what
    Inductor's re-inplacing pass turns back into a write of those positions alone."""
    layer_index = torch.full((1,), layer, dtype=torch.int64, device=cache.device)
    # Two index tensors around two slices: the indexed dims go first, (T, B, H, Dh).
    cache[layer_index, :, :, positions] = new.permute(2, 0, 1, 3)


class Prefill(nn.Module):
    """prefill(idx (B, T) int64, k_cache, v_cache) -> logits (B, T, V); writes the caches' [0, T)."""

    def __init__(self, gpt: m.GPT):
        super().__init__()
        self.gpt = gpt

    def forward(self, idx, k_cache, v_cache):
        gpt = self.gpt
        T = idx.shape[1]
        x = gpt.tok(idx)
        rope = (gpt.rope_cos[:T], gpt.rope_sin[:T]) if gpt.pos is None else None
        if gpt.pos is not None:
            x = x + gpt.pos.weight[:T]
        cache, pending = _CacheWriter(k_cache, v_cache), None
        for layer, block in enumerate(gpt.blocks):
            x, pending = block(x, rope, cache, layer, pending)
        return gpt.head(gpt.norm_f.add_forward(x, pending)[1])


class Decode(nn.Module):
    """decode(token (B, 1) int64, pos (1,) int64, k_cache, v_cache) -> logits (B, V): position
    `pos` of every sequence, its K and V written into the caches at `pos` (StaticDecoder's step)."""

    def __init__(self, gpt: m.GPT):
        super().__init__()
        self.gpt = gpt

    def _attention(self, block, h, rope, visible, layer, k_cache, v_cache, pos):
        cfg, attn = self.gpt.cfg, block.attn
        B = h.shape[0]
        q, k, v = attn.qkv(h).view(B, 1, 3, cfg.n_heads, cfg.head_dim).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if rope is not None:
            q, k = attn.ops.rope(q, k, *rope)
        write_cache(k_cache, layer, pos, k)
        write_cache(v_cache, layer, pos, v)
        y = F.scaled_dot_product_attention(q, k_cache[layer], v_cache[layer], attn_mask=visible.view(1, 1, 1, -1))
        return attn.proj(y.transpose(1, 2).reshape(B, 1, cfg.d_model))

    def forward(self, token, pos, k_cache, v_cache):
        gpt = self.gpt
        x = gpt.tok(token)
        if gpt.pos is not None:
            x = x + gpt.pos(pos)
        rope = None if gpt.pos is not None else (gpt.rope_cos.index_select(0, pos), gpt.rope_sin.index_select(0, pos))
        visible = torch.arange(k_cache.shape[3], device=token.device) <= pos
        pending = None
        for layer, block in enumerate(gpt.blocks):  # Block.forward's order, attention replaced
            x, h = block.norm1.add_forward(x, pending)
            x, y = block.norm2.add_forward(x, self._attention(block, h, rope, visible, layer, k_cache, v_cache, pos))
            if block.norm2.ops.add_norm is None:
                x, pending = x + block.mlp(y), None
            else:
                pending = block.mlp(y)
        return gpt.head(gpt.norm_f.add_forward(x, pending)[1])[:, -1]


def cache_shape(cfg: m.GPTConfig, batch: int, max_len: int) -> tuple:
    return (cfg.n_layers, batch, cfg.n_heads, max_len, cfg.head_dim)


def _check_model(model, max_batch, max_len) -> None:
    if not isinstance(model, m.GPT):
        raise TypeError(f"model must be a week5 GPT, got {type(model).__name__}")
    for name, value in (("max_batch", max_batch), ("max_len", max_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise ValueError(f"{name} must be an int >= 2 (torch.export needs an example of 2), got {value!r}")
    if max_len > model.cfg.max_seq_len:
        raise ValueError(f"max_len {max_len} exceeds the model's max_seq_len {model.cfg.max_seq_len}")


def export_programs(model: m.GPT, *, max_batch: int = 8, max_len: int | None = None) -> dict:
    """{"prefill": ExportedProgram, "decode": ExportedProgram} of `model` running AOT_OPS.

    Dynamic: batch in [1, max_batch], prompt length in [1, max_len]; the caches hold max_len
    positions (default the model's max_seq_len). The model's own ops are restored afterwards.
    """
    max_len = model.cfg.max_seq_len if max_len is None and isinstance(model, m.GPT) else max_len
    _check_model(model, max_batch, max_len)
    weight = model.tok.weight
    device, dtype = weight.device, weight.dtype
    was_training, old_ops = model.training, model.ops
    model.eval().use_ops(AOT_OPS)
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    seq = torch.export.Dim("seq", min=1, max=max_len)
    # Examples of size 2: torch.export specializes a dimension whose example is 0 or 1.
    cache = torch.zeros(cache_shape(model.cfg, 2, max_len), device=device, dtype=dtype)
    idx = torch.zeros(2, 2, dtype=torch.int64, device=device)
    token = torch.zeros(2, 1, dtype=torch.int64, device=device)
    pos = torch.ones(1, dtype=torch.int64, device=device)
    cache_dims = {1: batch}
    try:
        with torch.no_grad():
            prefill = torch.export.export(Prefill(model), (idx, cache, cache.clone()),
                                          dynamic_shapes=({0: batch, 1: seq}, cache_dims, cache_dims))
            decode = torch.export.export(Decode(model), (token, pos, cache, cache.clone()),
                                         dynamic_shapes=({0: batch}, None, cache_dims, cache_dims))
    finally:
        model.use_ops(old_ops).train(was_training)
    return {"prefill": prefill, "decode": decode}


def metadata(model: m.GPT, *, max_batch: int, max_len: int) -> dict[str, str]:
    """What a loader checks before running, flat str -> str (the package's metadata format, which
    the C++ runner reads with std::stol: no JSON parser needed there)."""
    cfg = model.cfg
    return {"course.vocab_size": str(cfg.vocab_size), "course.n_layers": str(cfg.n_layers),
            "course.n_heads": str(cfg.n_heads), "course.head_dim": str(cfg.head_dim),
            "course.max_batch": str(max_batch), "course.max_len": str(max_len),
            "course.dtype": str(model.tok.weight.dtype).removeprefix("torch."),
            "course.device": model.tok.weight.device.type, "course.weights": "float"}


# The package's wrapper .so linked to the process's shared libstdc++ by file name (ld's -l:FILE, ahead of the
# driver's own -lstdc++). Without it, on the lent H100's image ld took libstdc++.a from a toolchain folder that
# holds only the archive (the probe's -Wl,--trace: results/aot_loader_probe.json, "wrappers"), so the wrapper
# carried its own copy of libstdc++ into a process where torch had loaded the shared one, and the model's
# constructor died in std::regex (notes/aot_package.md, "Where it does not load"). Linked this way the same
# packages load and run there (the probe's H3, H4, H6); where the link already took the shared one, it changes
# nothing.
LINK_OPTIONS = {"aot_inductor.custom_op_libs": [":libstdc++.so.6"]}


def package(model: m.GPT, path, *, max_batch: int = 8, max_len: int | None = None,
            extra_metadata: dict[str, str] | None = None) -> Path:
    """Export, AOT-compile and package `model` (prefill + decode) into the .pt2 file `path`.
    `extra_metadata`: more "course.*" keys for the loader (aot_quant: course.weights = int8 / fp8)."""
    from torch._inductor.package import package_aoti

    path = Path(path)
    if path.suffix != ".pt2":
        raise ValueError(f"path must end in .pt2 (what the loaders expect), got {str(path)!r}")
    max_len = model.cfg.max_seq_len if max_len is None and isinstance(model, m.GPT) else max_len
    programs = export_programs(model, max_batch=max_batch, max_len=max_len)
    options = {"aot_inductor.package": True, **LINK_OPTIONS,
               "aot_inductor.metadata": {**metadata(model, max_batch=max_batch, max_len=max_len), **(extra_metadata or {})}}
    files = {}
    for name, program in programs.items():
        args, kwargs = program.example_inputs
        files[name] = torch._inductor.aot_compile(program.module(check_guards=False), args, kwargs,
                                                  options=dict(options, **{"aot_inductor.model_name_for_generated_files": name}))
    path.parent.mkdir(parents=True, exist_ok=True)
    package_aoti(str(path), files)
    return path


def package_kernels(path) -> dict:
    """What the package's generated code launches: {"course": [course kernel names found],
    "triton": [every Triton kernel name], "files": number of files, "bytes": package size}."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no package at {path}")
    text = []
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        for name in names:
            if name.endswith((".cpp", ".py", ".json", ".h")):
                text.append(archive.read(name).decode("utf-8", "replace"))
    source = "\n".join(text)
    import re
    # (a kernel's name may hold digits: aot_quant's int8_matmul_kernel)
    triton = sorted(set(re.findall(r"\b(triton_[a-z_]*\d+|[a-z_][a-z0-9_]*_kernel(?:_\d+)?)\b", source)))
    return {"course": [k for k in COURSE_KERNELS if k in source], "triton": triton,
            "files": len(names), "bytes": path.stat().st_size}


# ------------------------------------------------------------------------------ the C++ runner
def build_cpp_runner(out_dir) -> Path:
    """Compile aot_runner.cpp against the installed torch (its headers and libraries, the way
    torch.utils.cpp_extension finds them; g++ directly, no CMake: torch's CMake config of a CUDA
    build looks for the CUDA toolkit even for a CPU program). Returns the executable's path."""
    import shutil
    import subprocess

    from torch.utils import cpp_extension

    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise RuntimeError("no C++ compiler (c++ or g++) on PATH: the C++ runner cannot be built here")
    source = Path(__file__).with_name("aot_runner.cpp")
    exe = Path(out_dir) / "aot_runner"
    exe.parent.mkdir(parents=True, exist_ok=True)
    libs = cpp_extension.library_paths()
    # torch_cuda when the wheel has it: the loader finds the CUDA model runner there (a GPU package)
    names = [n for n in ("torch", "torch_cpu", "torch_cuda", "c10", "c10_cuda") if any((Path(d) / f"lib{n}.so").exists() for d in libs)]
    command = [compiler, "-O2", "-std=c++17", str(source), "-o", str(exe),
               f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
               *[f"-I{d}" for d in cpp_extension.include_paths()], *[f"-L{d}" for d in libs],
               *[f"-Wl,-rpath,{d}" for d in libs], "-Wl,--no-as-needed", *[f"-l{n}" for n in names]]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"building the C++ runner failed ({' '.join(command[:6])} ...):\n{done.stderr[-3000:]}")
    return exe


# --------------------------------------------------------------------------- eager references
@torch.no_grad()
def eager_prefill_and_decode(model: m.GPT, idx: torch.Tensor, new_tokens: int):
    """The eager model's (prefill logits (B, T, V), [decode logits (B, V) per step], tokens):
    greedy, through week 5's KVCache, the numbers a package must reproduce."""
    was_training = model.training
    model.eval()
    try:
        cache = m.KVCache(model.cfg, idx.shape[0], device=idx.device, dtype=model.tok.weight.dtype)
        logits = model(idx, cache=cache)
        cache.length = start = idx.shape[1]
        token = logits[:, -1].argmax(-1, keepdim=True)
        tokens, steps = [token], []
        for _ in range(new_tokens - 1):
            step = model(token, start=start, cache=cache)[:, -1]
            start = cache.length = start + 1
            steps.append(step)
            token = step.argmax(-1, keepdim=True)
            tokens.append(token)
        return logits, steps, torch.cat([idx, *tokens], dim=1)
    finally:
        model.train(was_training)
