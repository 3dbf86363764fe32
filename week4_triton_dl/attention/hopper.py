"""The Hopper attention rung: a FlashAttention-3-style forward in CUDA C (sm_90a), as a torch op.

    O = softmax(Q K^T * scale [+ causal mask]) V        q: (B, H, Sq, D), k and v: (B, H, Sk, D)

The kernel is kernels/attention_hopper_forward.cu; its header is the lesson (a TMA producer
warpgroup filling a ring of K/V slots, two consumer warpgroups taking turns on the tensor cores
so that one's softmax hides behind the other's wgmmas, P passed to the second GEMM in registers).
notes/attention_hopper.md builds it up step by step. This module is its host side:

* the build: `torch.utils.cpp_extension.load_inline` of the .cu (nvcc, for sm_90a only) and a small
  C++ binding that registers the launcher with the dispatcher (TORCH_LIBRARY, as
  week5_integration/cuda_extension.py does), cached on disk per source version;
* the checks, all before any launch: TypeError / ValueError naming the argument; then the refusal
  of anything that is not an sm_90 GPU (runtime.NotOnThisGpu, naming the fallback, Triton's
  `week4_triton_dl.attention.flash_attention`, which runs everywhere);
* the ops `torch.ops.course_attention_hopper.forward(q, k, v, causal, scale, key_lengths) -> (o, lse)` and
  `torch.ops.course_attention_hopper.backward(do, q, k, v, o, lse, causal, scale, key_lengths) -> (dq, dk, dv)`, each
  with a fake implementation (torch.compile traces them without a GPU), joined by the forward's autograd
  formula (it saves o and lse); the backward op runs
  `week4_triton_dl.attention.hopper_backward.attention_hopper_backward` (imported when first needed);
* `attention_hopper(q, k, v, causal=False, scale=None, *, key_lengths=None) -> o`, the public entry, and
  `hopper_unsupported(q, k, v) -> str | None`, the reason it cannot run on these inputs here (for
  week 4's dispatch: None means it can).

Contract: q, k, v contiguous (B, H, S, D), the layout of week 4's ops (a (B, S, H, D) tensor must be
transposed and made contiguous first), fp16 or bf16, D = 64 or 128, any B, H, Sq, Sk; causal masks
are top-left aligned (key j visible to query i when j <= i), as torch's is_causal. Padding keys: key_lengths
(B,) int32 or int64 on q's device, keys j >= key_lengths[b] hidden from every query of batch b (clamped to
[0, Sk]; whatever they hold, NaN included, reaches no output: the kernel's header says how). lse is float32
(B, H, Sq), natural log, -inf for a row with no key (Sk = 0 or key_lengths[b] = 0, where o is zeros, as SDPA).

Cost model per (batch, head), S = Sq = Sk: 4 S^2 D FLOPs (halved for causal), HBM traffic 4 S D
bytes x itemsize + 4 S (lse): compute-bound from S of a few hundred on (flash.py's docstring);
the yardstick is TFLOP/s beside SDPA's cuDNN backend (hopper_bench.py).
"""
from __future__ import annotations

import functools
import hashlib
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from course import holes, runtime
from week4_triton_dl.attention.padding_keys import check_key_lengths  # torch alone: no Triton import here
from week1_cuda_python.hopper_ptx import HOPPER_PTX, HOPPER_PTX_INCLUDE  # week 1 wraps the PTX

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "kernels"
# The kernel has exercise holes: under `pytest --impl=exercises` (COURSE_IMPL=exercises) this module builds the
# learner's copy, generated at the same path under the week's exercises/ (`python -m course exercises --write`).
# Its #include of the PTX header (week 1's hopper_ptx.cuh) resolves through the -I of every build: given, not a hole.
EXERCISE_KERNELS = HERE.parent / "exercises" / HERE.name / "kernels"
SOURCE = (EXERCISE_KERNELS if os.environ.get(runtime.IMPL_ENV) == "exercises" else KERNELS) \
    / "attention_hopper_forward.cu"
PTX_HEADER = HOPPER_PTX  # the Hopper PTX wrappers: week 1's kernels/hopper_ptx.cuh, the one copy
HOST_HEADER = KERNELS / "attention_hopper_host.cuh"  # the tensor maps, the grid, the launch
DYNAMIC_HEADER = KERNELS / "attention_hopper_dynamic.cuh"  # the persistent build's dynamic tile scheduler
PRODUCER_HEADER = KERNELS / "attention_hopper_producer.cuh"  # the producer thread's copies (ah_produce)
DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (64, 128)
CAPABILITY = (9, 0)                   # wgmma, setmaxnreg, the TMA: sm_90a (H100, H200)
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"
FALLBACK = "week4_triton_dl.attention.flash_attention"
OP = "course_attention_hopper::forward"
BACKWARD_OP = "course_attention_hopper::backward"
BLOCK_M = 128                         # query rows per block (AH_BM in the kernel)
TMA_ALIGN = 16                        # bytes: the base address of every TMA tensor
INT32_MAX = 2**31 - 1
LOG2E = 1.4426950408889634
NVCC_FLAGS = (GENCODE, "-O3", "-lineinfo")


# =============================================================================== the build
# The C++ side (kernels/attention_hopper_binding.cpp): the op's schema, the checks again, the stream, the call.
BINDING_SOURCE = KERNELS / "attention_hopper_binding.cpp"
KEY_LENGTHS_HEADER = KERNELS / "attention_hopper_key_lengths.h"  # the bindings' key_lengths check (the backward's too)
KEYS_HEADER = KERNELS / "attention_hopper_keys.cuh"  # AhKeys: the keys of a (batch, head), key_lengths or Sk


def _check_flags(pingpong, overlap, persistent=False, dynamic=False) -> None:
    for name, value in (("pingpong", pingpong), ("overlap", overlap), ("persistent", persistent),
                        ("dynamic", dynamic)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    if dynamic and not persistent:
        raise ValueError("dynamic=True schedules the persistent build's work tiles: pass persistent=True with it "
                         "(-DAH_DYNAMIC_TILES=1 needs -DAH_PERSISTENT=1)")


def nvcc_flags(pingpong: bool = True, overlap: bool = False, persistent: bool = False,
               dynamic: bool = False) -> tuple[str, ...]:
    """nvcc's flags; pingpong=False builds the A/B variant whose consumers never take turns, overlap=True
    the one whose softmax of tile j runs under the warpgroup's own P V wgmma of tile j - 1 (-DAH_INTRA_OVERLAP=1),
    persistent=True the one with a block per SM walking the work tiles (-DAH_PERSISTENT=1), and dynamic=True
    (with persistent) the one whose blocks draw their tiles from a global counter (-DAH_DYNAMIC_TILES=1)."""
    _check_flags(pingpong, overlap, persistent, dynamic)
    return (*NVCC_FLAGS, *(() if pingpong else ("-DAH_PINGPONG=0",)), *(("-DAH_INTRA_OVERLAP=1",) if overlap else ()),
            *(("-DAH_PERSISTENT=1",) if persistent else ()), *(("-DAH_DYNAMIC_TILES=1",) if dynamic else ()))


def nvcc_command(output: Path, nvcc: str = "nvcc", pingpong: bool = True, source: Path | None = None, *,
                 overlap: bool = False, persistent: bool = False, dynamic: bool = False) -> list[str]:
    """The nvcc command that builds the kernel (`source`: SOURCE, or its exercise stub) alone as an sm_90a
    cubin, with the flags load_inline passes (the CPU tests and tools/gpu_attention_hopper_check.sh run it)."""
    return [nvcc, "-cubin", *nvcc_flags(pingpong, overlap, persistent, dynamic), "-Werror", "all-warnings",
            "-I", str(KERNELS), *HOPPER_PTX_INCLUDE, "-o",
            str(output), str(source or SOURCE)]


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpu-kernels-course" / "torch_extensions" / f"torch-{torch.__version__}"


def namespace(pingpong: bool = True, overlap: bool = False, persistent: bool = False, dynamic: bool = False) -> str:
    """The extension's name: one per version of the sources and flags (a changed kernel is rebuilt, never stale)."""
    text = "\0".join([SOURCE.read_text(), PTX_HEADER.read_text(), HOST_HEADER.read_text(), KEYS_HEADER.read_text(),
                      PRODUCER_HEADER.read_text(), BINDING_SOURCE.read_text(), KEY_LENGTHS_HEADER.read_text(),
                      " ".join(nvcc_flags(pingpong, overlap, persistent, dynamic)), torch.__version__]
                     + ([DYNAMIC_HEADER.read_text()] if dynamic else []))
    return "course_attention_hopper_" + hashlib.sha256(text.encode()).hexdigest()[:12]


@functools.cache
def toolchain_missing() -> str | None:
    """Why this machine cannot build the extension (None if it can). Asked once per process: ninja's
    check runs a subprocess, and hopper_unsupported (a dispatch rule's question) asks on every call."""
    from torch.utils.cpp_extension import is_ninja_available

    if torch.version.cuda is None:
        return "this torch has no CUDA (a CPU build)"
    if not (shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")):
        return "no C++ compiler (c++/g++) on PATH"
    if not is_ninja_available():
        return "ninja is not installed (torch.utils.cpp_extension builds with it: pip install ninja)"
    if runtime.nvcc_path() is None:
        return "nvcc (the CUDA toolkit) is not on PATH"
    return None


@dataclass
class Extension:
    ops: object          # torch.ops.<namespace>: .forward
    namespace: str
    build_seconds: float
    cached: bool         # the library was on disk already: this call only loaded it


def _find_cuda_headers() -> None:
    """torch guesses the toolkit's root from `which nvcc` without following links: /usr/local/bin/nvcc
    (a link or a wrapper script of /usr/local/cuda-13.0/bin/nvcc) gives /usr/local, which has no
    cuda_runtime.h. Where CUDA_HOME is unset and the guess is wrong, nvcc's real root or /usr/local/cuda
    is used instead."""
    from torch.utils import cpp_extension

    home = cpp_extension.CUDA_HOME
    if home and (Path(home) / "include" / "cuda_runtime.h").exists():
        return
    for root in (Path(os.path.realpath(runtime.nvcc_path())).parent.parent, Path("/usr/local/cuda")):
        if (root / "include" / "cuda_runtime.h").exists():
            cpp_extension.CUDA_HOME = str(root)
            return


@functools.cache
def load_extension(verbose: bool = False, pingpong: bool = True, overlap: bool = False,
                   persistent: bool = False, dynamic: bool = False) -> Extension:
    """Compile the kernel and the binding once per source version (cached under cache_root()), load it.
    pingpong=False: the A/B build without the consumers' turn-taking (the benchmark's `hopper_no_pingpong`);
    overlap=True: the intra-warpgroup overlap build (the benchmark's `hopper_overlap`); persistent=True: the
    persistent build (`hopper_persistent`); dynamic=True (with persistent) its dynamic scheduler (`hopper_dynamic`)."""
    from torch.utils.cpp_extension import load_inline

    _check_flags(pingpong, overlap, persistent, dynamic)
    # The exercise's stub with a hole open hangs the GPU (a slot never released) or traps and takes the
    # process's CUDA context with it: refused before the toolchain is asked (course/holes.py).
    holes.refuse_open_hole(SOURCE)
    missing = toolchain_missing()
    if missing:
        raise RuntimeError(f"cannot build the attention_hopper extension: {missing}")
    _find_cuda_headers()
    name = namespace(pingpong, overlap, persistent, dynamic)
    directory = cache_root() / name
    directory.mkdir(parents=True, exist_ok=True)
    cached = any(directory.glob(f"{name}*.so"))
    start = time.perf_counter()
    # The kernel's own #include of the PTX header resolves through extra_include_paths; the arch
    # flag in extra_cuda_cflags makes torch add none of its own (it would build for sm_90, not 90a).
    load_inline(name, cpp_sources=[BINDING_SOURCE.read_text().replace("NAMESPACE", name)],
                cuda_sources=[SOURCE.read_text()],
                extra_cflags=["-O3"], extra_cuda_cflags=list(nvcc_flags(pingpong, overlap, persistent, dynamic)),
                extra_include_paths=[str(KERNELS), str(PTX_HEADER.parent)],
                build_directory=str(directory), with_cuda=True, is_python_module=False,
                no_implicit_headers=True, verbose=verbose)
    return Extension(getattr(torch.ops, name), name, time.perf_counter() - start, cached)


# =============================================================================== the checks
def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_inputs(q, k, v, causal, scale, key_lengths=None) -> float:
    """TypeError / ValueError naming the argument, for anything the kernel cannot take; the scale to use.
    Shapes, dtypes and flags only (no data pointer): torch.compile runs this on fake tensors."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name} has dtype {_name(t.dtype)}; attention_hopper takes float16 or bfloat16 "
                            f"(wgmma's 16-bit inputs; {FALLBACK} takes float32 too)")
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dimensions (B, H, S, D), got shape {tuple(t.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"dtypes must match: q {_name(q.dtype)}, k {_name(k.dtype)}, v {_name(v.dtype)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape (B, H, Sk, D): k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[:2] != k.shape[:2]:
        raise ValueError(f"q and k must agree on batch and heads (B, H): q {tuple(q.shape)}, k {tuple(k.shape)}")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"q and k must have the same head dimension D: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if q.shape[3] not in HEAD_DIMS:
        raise ValueError(f"head dimension D = {q.shape[3]} is not supported by attention_hopper; expected one of "
                         f"{list(HEAD_DIMS)} (the kernel's tiles are built for them; {FALLBACK} takes 16 and 32)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous():
            raise ValueError(f"{name} is not contiguous (strides {t.stride()} for shape {tuple(t.shape)}): the TMA "
                             "reads (B, H, S, D) as one dense block; pass .contiguous() (a (B, S, H, D) tensor: "
                             ".transpose(1, 2).contiguous())")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device: q {q.device}, k {k.device}, v {v.device}")
    check_key_lengths(key_lengths, q)  # padding_keys: the one check every rung's launcher calls
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if scale is None:
        return 1.0 / math.sqrt(q.shape[3])
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float (or None for 1/sqrt(D)), got {type(scale).__name__}")
    if not (math.isfinite(scale) and scale > 0):
        # The running max is taken of the raw scores and scaled once: that needs scale > 0.
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    B, H, Sq, _ = q.shape
    if B * H * -(-Sq // BLOCK_M) > INT32_MAX or max(Sq, k.shape[2]) > INT32_MAX - BLOCK_M:
        raise ValueError(f"B * H = {B * H} blocks of {BLOCK_M} query rows each (Sq = {Sq}) and the lengths must "
                         "fit the kernel's 32-bit grid and indices: split the batch")
    return float(scale)


def check_outputs(q, out, lse):
    """`out` (q's shape and dtype) and `lse` (float32 (B, H, Sq)), contiguous, or freshly allocated."""
    B, H, Sq, _ = q.shape
    if out is None:
        out = torch.empty_like(q)
    elif not (isinstance(out, torch.Tensor) and out.dtype == q.dtype and out.shape == q.shape
              and out.is_contiguous() and out.device == q.device):
        raise ValueError(f"out must be a contiguous {_name(q.dtype)} tensor of shape {tuple(q.shape)} on {q.device}")
    if lse is None:
        lse = torch.empty((B, H, Sq), dtype=torch.float32, device=q.device)
    elif not (isinstance(lse, torch.Tensor) and lse.dtype == torch.float32 and lse.shape == (B, H, Sq)
              and lse.is_contiguous() and lse.device == q.device):
        raise ValueError(f"lse must be a contiguous float32 tensor of shape {(B, H, Sq)} on {q.device}")
    return out, lse


def device_refusal(device: torch.device) -> str | None:
    """Why the kernel cannot run on `device` (None: an sm_90 GPU)."""
    if device.type != "cuda":
        return (f"attention_hopper runs on an H100/H200 GPU (sm_90a: wgmma, TMA, setmaxnreg); these tensors are on "
                f"{device}: use {FALLBACK}, which runs on every GPU and in the Triton interpreter on the CPU")
    capability = torch.cuda.get_device_capability(device)
    if tuple(capability) != CAPABILITY:
        return (f"attention_hopper needs compute capability 9.0 (H100, H200: wgmma and setmaxnreg exist on sm_90a "
                f"only); this GPU is {capability[0]}.{capability[1]}: use {FALLBACK}")
    return None


def _check_pointers(*tensors) -> None:
    """The TMA's rule (base addresses 16-byte aligned); row strides (D * 2 bytes) always are."""
    for name, t in zip(("q", "k", "v", "out"), tensors):
        if t.numel() and t.data_ptr() % TMA_ALIGN:
            raise ValueError(f"{name} starts {t.data_ptr() % TMA_ALIGN} bytes past a 16-byte boundary; the TMA needs "
                             f"aligned tensors: pass .clone() (or use {FALLBACK}, which takes any strides)")


def hopper_unsupported(q, k, v, causal=False, scale=None) -> str | None:
    """The reason `attention_hopper(q, k, v, causal, scale)` cannot run here, or None (it can)."""
    try:
        check_inputs(q, k, v, causal, scale)
    except (TypeError, ValueError) as error:
        return str(error)
    why = device_refusal(q.device)
    if why is None and any(t.numel() and t.data_ptr() % TMA_ALIGN for t in (q, k, v)):
        why = f"q, k or v is not 16-byte aligned (the TMA's rule): use {FALLBACK}"
    if why is None:
        missing = toolchain_missing()
        why = f"the extension cannot be built here: {missing}; use {FALLBACK}" if missing else None
    return why


# =============================================================================== the launch
def launch(q, k, v, causal: bool, scale: float, out, lse, pingpong: bool = True, overlap: bool = False,
           persistent: bool = False, dynamic: bool = False, key_lengths=None):
    """Write o into `out` and lse into `lse` for checked inputs (the op's real implementation)."""
    why = device_refusal(q.device)
    if why is not None:
        raise runtime.NotOnThisGpu(why)
    _check_pointers(q, k, v, out)
    B, H, Sq, _ = q.shape
    if B * H * Sq == 0:
        return out, lse
    if k.shape[2] == 0:  # no keys: an empty sum; zeros and log(0), as SDPA and flash_attention
        out.zero_()
        lse.fill_(-math.inf)
        return out, lse
    load_extension(pingpong=pingpong, overlap=overlap, persistent=persistent,
                   dynamic=dynamic).ops.forward(q, k, v, causal, scale * LOG2E, key_lengths, out, lse)
    return out, lse


# =============================================================================== a rung of week 4's op
def eligible(q, k, v, out=None) -> bool:
    """Whether week 4's op may run this forward for these inputs here (attention/dispatch.py asks,
    after its cheaper questions): an sm_90 GPU, contiguous 16-bit q/k/v of a supported head dim,
    16-byte aligned, the extension buildable."""
    return (q.is_cuda and q.dtype in DTYPES and all(t.is_contiguous() for t in (q, k, v))
            and (out is None or out.is_contiguous()) and hopper_unsupported(q, k, v) is None)


def require(q, k, v, out=None, caller: str = "attention_hopper") -> None:
    """Raise why `caller` cannot run this forward for these inputs here (None: it can)."""
    why = hopper_unsupported(q, k, v)
    if why is None and out is not None and not out.is_contiguous():
        why = "out is not contiguous (the kernel stores rows of D elements)"
    if why is not None:
        error = runtime.NotOnThisGpu if device_refusal(q.device) else ValueError
        raise error(f"{caller}: {why}")


# The builds week 4's op may run (its sweep times each; a table row names one): launch's flags that give the same
# bits at another speed. pingpong is not one: its A/B build (pingpong=False) is only ever slower.
BUILD_FLAGS = ("overlap", "persistent", "dynamic")


def check_build(build) -> dict[str, bool]:
    """{flag: bool for BUILD_FLAGS} of `build` (None: the default build; a missing flag is False); ValueError naming
    the argument for anything else, dynamic without persistent included (the dispatch checks its table with it)."""
    if build is None:
        return dict.fromkeys(BUILD_FLAGS, False)
    if (not isinstance(build, dict) or not set(build) <= set(BUILD_FLAGS)
            or not all(isinstance(value, bool) for value in build.values())):
        raise ValueError(f"build must be None (the default build) or a dict of {', '.join(map(repr, BUILD_FLAGS))} "
                         f"to bools (-DAH_INTRA_OVERLAP=1, -DAH_PERSISTENT=1, -DAH_DYNAMIC_TILES=1), got {build!r}")
    if build.get("dynamic") and not build.get("persistent"):
        raise ValueError(f"build: dynamic schedules the persistent build's work tiles, so it needs "
                         f"persistent=True too, got {build!r}")
    return {flag: build.get(flag, False) for flag in BUILD_FLAGS}


def build_label(build) -> str:
    """The build's short name: 'default', or its flags joined by '+' ('persistent+dynamic+overlap'); check_build's errors."""
    flags = check_build(build)
    return "+".join(flag for flag in ("persistent", "dynamic", "overlap") if flags[flag]) or "default"


def launch_forward_hopper(q, k, v, causal, scale, key_lengths=None, tile=None, out=None, build=None):
    """(out, lse) as week 4's op calls its forwards (attention/dispatch.py's Rung.launch): one tile, padding keys
    by key_lengths; `build` checked first (check_build: None, or BUILD_FLAGS)."""
    if tile is not None:
        raise ValueError(f"flash_hopper has one tile (128 query rows, 128 keys); got tile={tile!r}")
    return launch_build(q, k, v, causal, scale, key_lengths, out, check_build(build))


def launch_build(q, k, v, causal, scale, key_lengths, out, flags):
    """launch_forward_hopper with `flags` checked already (check_build's dict: the dispatch checks its table once)."""
    out, lse = check_outputs(q, out, None)
    return launch(q, k, v, bool(causal), float(scale), out, lse, **flags, key_lengths=key_lengths)


# =============================================================================== the ops
# Two opaque ops joined by an autograd formula, as week 4's Triton attention (attention/op.py): torch.compile
# records each as one node and traces only their fake functions. The backward must be an op of its own:
# its Python encodes the TMA tensor maps from data pointers, which AOTAutograd's fake tensors do not have
# ("Cannot access data pointer of Tensor") were the formula to call it directly.
@torch.library.custom_op(OP, mutates_args=())
def forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
               key_lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of contiguous q, k, v: fresh tensors. Checked here too (before the launch's device
    refusal): a caller of the raw op gets the course's TypeError / ValueError, not a C++ check."""
    check_inputs(q, k, v, causal, scale, key_lengths)
    out, lse = check_outputs(q, None, None)
    return launch(q, k, v, causal, scale, out, lse, key_lengths=key_lengths)


@forward_op.register_fake
def _forward_fake(q, k, v, causal, scale, key_lengths=None):
    B, H, Sq, D = q.shape
    return q.new_empty((B, H, Sq, D)), q.new_empty((B, H, Sq), dtype=torch.float32)


@torch.library.custom_op(BACKWARD_OP, mutates_args=())
def backward_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                lse: torch.Tensor, causal: bool, scale: float,
                key_lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv), fresh contiguous tensors, by hopper_backward.attention_hopper_backward (its checks, then
    its refusal of anything but an sm_90 GPU naming the Triton backward). dO of any strides is made dense
    here: the kernels read it through a TMA map. Imported at call time: the forward's module must not need
    the backward's (and the tests stand in for it)."""
    from week4_triton_dl.attention.hopper_backward import attention_hopper_backward

    return attention_hopper_backward(q, k, v, o, do.contiguous(), lse, causal, scale, key_lengths=key_lengths)


@backward_op.register_fake
def _backward_fake(do, q, k, v, o, lse, causal, scale, key_lengths=None):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, key_lengths = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1], key_lengths)  # o and lse: the backward's statistics
    ctx.causal, ctx.scale = causal, scale
    ctx.mark_non_differentiable(output[1])  # lse: a statistic for the backward, not a result


def _backward(ctx, do, _dlse):
    q, k, v, o, lse, key_lengths = ctx.saved_tensors
    dq, dk, dv = backward_op(do, q, k, v, o, lse, ctx.causal, ctx.scale, key_lengths)
    return dq, dk, dv, None, None, None


forward_op.register_autograd(_backward, setup_context=_setup_context)


# =============================================================================== the public entries
def attention_hopper_forward(q, k, v, causal: bool = False, scale: float | None = None, *, out=None, lse=None,
                             pingpong: bool = True, overlap: bool = False, persistent: bool = False,
                             dynamic: bool = False, key_lengths=None):
    """(o, lse) without autograd, written into `out` / `lse` when given (the tests poison them); key_lengths:
    padding keys, as attention_hopper's.
    pingpong=False runs the A/B build whose two consumers issue their wgmmas without taking turns;
    overlap=True the build with the intra-warpgroup overlap (-DAH_INTRA_OVERLAP=1: each warpgroup's
    softmax of key tile j under its own P V wgmma of tile j - 1), same bits, its own cached extension;
    persistent=True the persistent build (-DAH_PERSISTENT=1: one block per SM walking the work tiles, each
    tile's loads under the previous one's epilogue), same bits too; the two combine. dynamic=True (persistent=True
    too, else ValueError) has the blocks draw their tiles from a global counter, causal ones longest first
    (-DAH_DYNAMIC_TILES=1), same bits again."""
    scale = check_inputs(q, k, v, causal, scale, key_lengths)
    out, lse = check_outputs(q, out, lse)
    _check_flags(pingpong, overlap, persistent, dynamic)
    return launch(q, k, v, causal, scale, out, lse, pingpong, overlap, persistent, dynamic, key_lengths)


def attention_hopper(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                     scale: float | None = None, *, key_lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Like F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale), on an H100/H200.

    q (B, H, Sq, D), k and v (B, H, Sk, D): contiguous fp16 or bf16, D = 64 or 128; key_lengths (B,) int32/int64
    on q's device, or None: keys j >= key_lengths[b] are padding, seen by no query of batch b. Differentiable
    (the backward: week4_triton_dl.attention.hopper_backward). Bad input raises TypeError / ValueError
    before anything runs; another GPU, or the CPU, raises runtime.NotOnThisGpu naming
    week4_triton_dl.attention.flash_attention, the rung that runs there.
    """
    scale = check_inputs(q, k, v, causal, scale, key_lengths)
    if not torch.compiler.is_compiling():  # traced: the device is the op's concern at run time
        why = device_refusal(q.device)
        if why is not None:
            raise runtime.NotOnThisGpu(why)
    return forward_op(q, k, v, causal, scale, key_lengths)[0]

