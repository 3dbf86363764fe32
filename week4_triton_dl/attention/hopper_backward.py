"""The backward of the Hopper attention rung: dQ, dK, dV by CUDA C kernels on wgmma + TMA (sm_90a).

The forward (attention/hopper.py) saves O and the log-sum-exp of each query row, as week 4's Triton
forward does; its autograd calls the op `course_attention_hopper::backward` (hopper.py, with a fake, so
torch.compile never runs this module's Python on fake tensors), which calls `attention_hopper_backward` here. The kernels are in
kernels/attention_hopper_backward.cu (its header is the lesson: the pipeline, the operand layouts, the
masks and why dQ is accumulated with atomics), their PTX wrappers in week 1's kernels/hopper_ptx.cuh.
This module is the host side:

* the build: `torch.utils.cpp_extension.load_inline` compiles the .cu for sm_90a (-gencode=arch=
  compute_90a,code=sm_90a: wgmma, setmaxnreg and the TMA exist there only) with a small C++ binding
  registered by TORCH_LIBRARY, once per source version, cached on disk (extension name
  attention_hopper_bwd_<hash>, distinct from the forward's);
* the TMA tensor maps of q, k, v, dO (and of the fp32 dQ accumulator, which the kernel adds its dQ tiles
  into by TMA reduce-adds), encoded by the driver (cuTensorMapEncodeTiled through ctypes, as
  week 1's wgmma rung does) over the tensors viewed as [B*H, S, D]: a box that runs past S reads zeros,
  never the next head's rows;
* input checks (TypeError / ValueError naming the argument) before anything is built or launched, then the
  refusal of anything but an sm_90 GPU, naming the fallback: week 4's Triton backward.

Cost model, per (batch, head), S queries and keys, head dim D: 5 matmuls of 2 S^2 D FLOPs each
(S^T, dP^T, dV, dK, dQ), halved when causal; HBM traffic: q, k, v, o, dO read, dq, dk, dv written (16-bit),
lse read, plus the fp32 dQ accumulator, added into by 2 S / 128 warpgroups per query row (TMA reduce-adds of
whole tiles; per-element atomics in the dq_tma=False build) and read once.

`dq_tma=False` (everywhere it is accepted) selects the A/B build -DAHB_DQ_TMA=0, which adds dQ with float2
atomics from registers instead: the benchmark times both in the same rounds, the tests run both.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import struct
from pathlib import Path

import torch

from course import runtime  # first: chooses the GPU or simulation
from course import validate
from week1_cuda_python.hopper_ptx import HOPPER_PTX, HOPPER_PTX_INCLUDE  # week 1 wraps the PTX
from week4_triton_dl.attention.padding_keys import check_key_lengths  # torch alone, as hopper.py's

KERNELS = Path(__file__).resolve().parent / "kernels"
SOURCE = KERNELS / "attention_hopper_backward.cu"
KEYS_HEADER = KERNELS / "attention_hopper_keys.cuh"  # AhKeys: the keys of a (batch, head), key_lengths or S
KEY_LENGTHS_HEADER = KERNELS / "attention_hopper_key_lengths.h"  # BINDING's key_lengths check (the forward's too)
PTX_HEADER = HOPPER_PTX  # the Hopper PTX wrappers: week 1's kernels/hopper_ptx.cuh, the one copy
DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (64, 128)
CAPABILITY = (9, 0)
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"
FALLBACK = "week4_triton_dl.attention.flash_attention_backward"  # the Triton backward: any GPU, the interpreter
BLOCK_M, BLOCK_N, SLAB = 64, 128, 64  # the .cu's AHB_BM, AHB_BN, AHB_SLAB (tests check they match)
_TMA_DTYPE = {torch.float16: 6, torch.float32: 7, torch.bfloat16: 9}  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16, _FLOAT32, _BFLOAT16
DQ_BOX_COLS = 32  # the dQ accumulator's TMA box: [64 rows][32 fp32] = 128 bytes a row, the swizzle span
_TMA_SWIZZLE_128B, _TMA_L2_PROMOTION_256B, _TMA_INTERLEAVE_NONE, _TMA_OOB_ZEROS = 3, 3, 0, 0

# The C++ side: shape checks again (the Python ones come first), the call of the .cu's launcher on torch's
# current stream. NAMESPACE becomes the extension's name. The tensor maps come as 80 int64s (640 bytes):
# a list argument, so every tensor of the op is a CUDA tensor and it dispatches to the CUDA kernel.
BINDING = r"""
#include <ATen/core/Tensor.h>
#include <torch/library.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cstring>

#include "attention_hopper_key_lengths.h"  // ah_key_lengths: key_lengths checked, as a pointer and a width

int attention_hopper_bwd_cuda(int dtype, int head_dim, int causal, const unsigned char* maps, const void* o,
                              const void* dout, const float* lse, float* lse2, float* delta, float* dq_acc,
                              void* dq, void* dk, void* dv, int BH, int S, float scale, const void* key_lengths,
                              int lengths_wide, int heads, void* stream);
const char* attention_hopper_bwd_error_string(int code);

namespace {
void backward(c10::IntArrayRef maps, const at::Tensor& o, const at::Tensor& dout, const at::Tensor& lse,
              const at::Tensor& lse2, const at::Tensor& delta, const at::Tensor& dq_acc, const at::Tensor& dq,
              const at::Tensor& dk, const at::Tensor& dv, bool causal, double scale,
              const c10::optional<at::Tensor>& key_lengths) {
    TORCH_CHECK(maps.size() == 80, "maps must be 5 tensor maps of 128 bytes (80 int64s)");
    TORCH_CHECK(o.dim() == 4 && o.is_contiguous(), "o must be a contiguous (B, H, S, D) tensor");
    const int64_t BH = o.size(0) * o.size(1), S = o.size(2), D = o.size(3);
    TORCH_CHECK(o.scalar_type() == at::kHalf || o.scalar_type() == at::kBFloat16, "o must be float16 or bfloat16");
    for (const at::Tensor* t : {&dout, &dq, &dk, &dv})
        TORCH_CHECK(t->sizes() == o.sizes() && t->scalar_type() == o.scalar_type() && t->is_contiguous() &&
                    t->device() == o.device(), "dout, dq, dk, dv must be contiguous and match o");
    TORCH_CHECK(dq_acc.sizes() == o.sizes() && dq_acc.scalar_type() == at::kFloat && dq_acc.is_contiguous(),
                "dq_acc must be a contiguous float32 tensor of o's shape");
    const int64_t S_pad = (S + 63) / 64 * 64;
    TORCH_CHECK(lse.numel() == BH * S && lse.scalar_type() == at::kFloat && lse.is_contiguous(), "lse: (B, H, S) float32");
    TORCH_CHECK(lse2.numel() == BH * S_pad && delta.numel() == BH * S_pad && lse2.scalar_type() == at::kFloat &&
                delta.scalar_type() == at::kFloat, "lse2 and delta: B * H * S_pad float32");
    const AhKeyLengths padding = ah_key_lengths(key_lengths, o);
    if (BH == 0 || S == 0) return;
    unsigned char bytes[640];
    for (int i = 0; i < 80; ++i) { int64_t v = maps[i]; std::memcpy(bytes + 8 * i, &v, 8); }
    const c10::cuda::CUDAGuard guard(o.device());
    const int err = attention_hopper_bwd_cuda(
        o.scalar_type() == at::kHalf ? 0 : 1, (int)D, causal ? 1 : 0, bytes, o.data_ptr(), dout.data_ptr(),
        lse.data_ptr<float>(), lse2.data_ptr<float>(), delta.data_ptr<float>(), dq_acc.data_ptr<float>(),
        dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), (int)BH, (int)S, (float)scale, padding.lengths, padding.wide,
        (int)o.size(1),
        c10::cuda::getCurrentCUDAStream(o.device().index()).stream());
    TORCH_CHECK(err == 0, "attention_hopper_backward launch failed: ", attention_hopper_bwd_error_string(err));
}
}  // namespace

TORCH_LIBRARY(NAMESPACE, m) {
    m.def("backward(int[] maps, Tensor o, Tensor dout, Tensor lse, Tensor(a!) lse2, Tensor(b!) delta, "
          "Tensor(c!) dq_acc, Tensor(d!) dq, Tensor(e!) dk, Tensor(f!) dv, bool causal, float scale, "
          "Tensor? key_lengths) -> ()");
}
TORCH_LIBRARY_IMPL(NAMESPACE, CUDA, m) { m.impl("backward", &backward); }
"""


# --- where it runs ------------------------------------------------------------------------------------

def unsupported(capability: tuple[int, int] | None) -> str | None:
    """Why the kernels cannot run on a GPU of this compute capability (None: they can)."""
    if capability is not None and tuple(capability) == CAPABILITY:
        return None
    where = ("this run has no GPU (tensors on the CPU)" if capability is None
             else f"this GPU is compute capability {capability[0]}.{capability[1]}")
    return (f"attention_hopper_backward needs an sm_90a GPU (compute capability 9.0: H100, H200), because "
            f"wgmma, setmaxnreg and the TMA exist only there; {where}: use week 4's Triton backward, "
            f"{FALLBACK}, which runs on every GPU and in the Triton interpreter")


def refuse_unless_hopper(device: torch.device) -> None:
    """runtime.NotOnThisGpu (a RuntimeError) naming the fallback, unless `device` is an sm_90 GPU."""
    why = unsupported(runtime.capability(device) if device.type == "cuda" else None)
    if why is not None:
        raise runtime.NotOnThisGpu(why)


def _check_dq_tma(dq_tma) -> None:
    if not isinstance(dq_tma, bool):
        raise TypeError(f"dq_tma must be a bool (True: TMA reduce-add of dQ tiles; False: atomics), "
                        f"got {type(dq_tma).__name__}")


def variant_flags(dq_tma: bool = True) -> list[str]:
    """The -D flags of a build: none for the default, -DAHB_DQ_TMA=0 for the atomics A/B variant."""
    _check_dq_tma(dq_tma)
    return [] if dq_tma else ["-DAHB_DQ_TMA=0"]


def nvcc_command(output: Path, nvcc: str = "nvcc", dq_tma: bool = True) -> list[str]:
    """The nvcc command that compiles the kernels for sm_90a alone (the CPU test and the GPU check run
    it; load_inline passes the same -gencode and -D flags, and torch's flags that forbid implicit half
    conversions). dq_tma=False: the atomics build."""
    return [nvcc, "-cubin", GENCODE, "-O3", "-lineinfo", "-Werror", "all-warnings", *variant_flags(dq_tma),
            "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
            "-D__CUDA_NO_HALF2_OPERATORS__", "-I", str(KERNELS), *HOPPER_PTX_INCLUDE, "-o", str(output), str(SOURCE)]


# --- the build ------------------------------------------------------------------------------------------

def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpu-kernels-course" / "torch_extensions" / f"torch-{torch.__version__}"


def extension_name(dq_tma: bool = True) -> str:
    """attention_hopper_bwd_<hash of the sources, the binding, the -D flags and torch's version>."""
    text = "\0".join([SOURCE.read_text(), PTX_HEADER.read_text(), KEYS_HEADER.read_text(), BINDING,
                      KEY_LENGTHS_HEADER.read_text(),
                      " ".join(variant_flags(dq_tma)),
                      torch.__version__])
    return f"attention_hopper_bwd_{hashlib.sha256(text.encode()).hexdigest()[:12]}"


@functools.cache
def load_extension(dq_tma: bool = True):
    """torch.ops.<extension name> with the `backward` op, built on first use (tens of seconds), then
    loaded from the disk cache. dq_tma=False: the atomics A/B build (its own extension name)."""
    from torch.utils import cpp_extension

    if runtime.nvcc_path() is None:
        raise RuntimeError("nvcc is not on PATH: the Hopper attention backward is compiled at first use")
    # torch finds the toolkit through `which nvcc`; where nvcc is a wrapper outside the toolkit (seen:
    # /usr/local/bin/nvcc) it guesses /usr/local and the binding misses cuda_runtime.h. Use the standard
    # toolkit folder then (CUDA_HOME, when set, is never overridden).
    standard = Path("/usr/local/cuda")
    found = cpp_extension.CUDA_HOME
    if (not os.environ.get("CUDA_HOME") and (standard / "include" / "cuda_runtime.h").exists()
            and not (found and (Path(found) / "include" / "cuda_runtime.h").exists())):
        cpp_extension.CUDA_HOME = str(standard)
    name = extension_name(dq_tma)
    directory = cache_root() / name
    directory.mkdir(parents=True, exist_ok=True)
    # An -gencode flag in extra_cuda_cflags stops torch adding its own -gencode for the GPU (sm_90 without
    # the "a", which has no wgmma).
    cpp_extension.load_inline(name, cpp_sources=[BINDING.replace("NAMESPACE", name)], cuda_sources=[SOURCE.read_text()],
                              extra_cflags=["-O3"], extra_cuda_cflags=["-O3", "-lineinfo", GENCODE, *variant_flags(dq_tma)],
                              extra_include_paths=[str(KERNELS), str(PTX_HEADER.parent)], build_directory=str(directory),
                              is_python_module=False, no_implicit_headers=True, with_cuda=True)
    return getattr(torch.ops, name)


# --- tensor maps ------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=256)
def _encoded_map(address: int, dtype: torch.dtype, bh: int, seq: int, head_dim: int, box_rows: int,
                 box_cols: int = SLAB) -> bytes:
    """cuTensorMapEncodeTiled's 128 bytes for a contiguous [bh, seq, head_dim] tensor, boxes of box_rows x
    box_cols (box_cols x the element size = 128 bytes: the 128-byte swizzle's span).
    Cached: a pure function of its arguments (matmul_tensor_cores.encoded_tensor_map says why that is safe)."""
    from week1_cuda_python.matmul_tensor_cores import cuda_driver, driver_check

    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    storage = ctypes.create_string_buffer(256)
    aligned = (ctypes.addressof(storage) + 127) // 128 * 128
    item = torch.empty((), dtype=dtype).element_size()
    result = cuda_driver().cuTensorMapEncodeTiled(
        aligned, _TMA_DTYPE[dtype], 3, address,
        (u64 * 3)(head_dim, seq, bh),                          # sizes, innermost first
        (u64 * 2)(head_dim * item, seq * head_dim * item),     # byte strides of dims 1 and 2
        (u32 * 3)(box_cols, box_rows, 1),                      # the box: box_cols columns x box_rows rows x 1 head
        (u32 * 3)(1, 1, 1),
        _TMA_INTERLEAVE_NONE, _TMA_SWIZZLE_128B, _TMA_L2_PROMOTION_256B, _TMA_OOB_ZEROS)
    driver_check(result, f"cuTensorMapEncodeTiled ([{bh}, {seq}, {head_dim}] {dtype}, boxes of {box_rows} x {box_cols})")
    return ctypes.string_at(aligned, 128)


def tensor_map(t: torch.Tensor, box_rows: int, box_cols: int = SLAB) -> bytes:
    B, H, S, D = t.shape
    return _encoded_map(t.data_ptr(), t.dtype, B * H, S, D, box_rows, box_cols)


# --- the launcher -------------------------------------------------------------------------------------------

def check_inputs(q, k, v, o, do, lse, causal, scale, key_lengths=None) -> tuple[int, int, int, int]:
    """(B, H, S, D) of valid inputs; TypeError / ValueError naming the argument otherwise."""
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do)):
        validate.tensor(t, name, dtypes=DTYPES, ndim=4)
    validate.same_dtype(q=q, k=k, v=v, o=o, do=do)
    validate.same_shape(q=q, k=k, v=v, o=o, do=do)
    B, H, S, D = q.shape
    if D not in HEAD_DIMS:
        raise ValueError(f"q has head dim {D}; the Hopper backward is built for D in {HEAD_DIMS}: use {FALLBACK}")
    validate.tensor(lse, "lse", dtypes=(torch.float32,), ndim=3)
    if tuple(lse.shape) != (B, H, S):
        raise ValueError(f"lse has shape {tuple(lse.shape)}; expected (B, H, S) = {(B, H, S)}")
    for name, t in (("k", k), ("v", v), ("o", o), ("do", do), ("lse", lse)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}: put all on one GPU")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float (softmax scale, usually 1 / sqrt(D)), got {type(scale).__name__}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    check_key_lengths(key_lengths, q)  # padding_keys: the one check, the forward's too
    if B * H * S * D >= 2**31 or B * H >= 2**16:
        raise ValueError(f"q has {B * H} heads of {S} x {D}: the kernels index with 32-bit sizes "
                         f"(B * H * S * D < 2^31, B * H < 65536)")
    return B, H, S, D


def _checked_out(t, like, name):
    validate.tensor(t, name, dtypes=(like.dtype,), ndim=4)
    if t.shape != like.shape or t.device != like.device:
        raise ValueError(f"{name} has shape {tuple(t.shape)} on {t.device}; expected {tuple(like.shape)} on {like.device}")
    return t


def attention_hopper_backward(q, k, v, o, do, lse, causal: bool, scale: float, *, grads=None, dq_accum=None,
                              dq_tma: bool = True, key_lengths=None):
    """(dq, dk, dv) of softmax(scale q k^T [causal mask]) v, from the forward's o and lse.

    q, k, v, o, do: contiguous [B, H, S, D], one dtype (float16 or bfloat16), D 64 or 128, any B, H, S;
    lse: float32 [B, H, S], natural-log log-sum-exp of the scaled scores per query row. `grads` = (dq, dk,
    dv) to write into; `dq_accum` = the float32 [B, H, S, D] workspace dQ is accumulated in (the kernels
    zero it first): given by the tests, to poison it. `dq_tma=False`: the A/B build that adds dQ with
    per-element atomics instead of TMA reduce-adds of shared-memory tiles. `key_lengths` (B,) int32/int64 or None:
    keys j >= key_lengths[b] are padding (the forward's); their dk and dv are zero, they add nothing to dq. Runs on an H100/H200 only: elsewhere (another GPU,
    the CPU) runtime.NotOnThisGpu names the fallback, week 4's Triton backward.
    """
    B, H, S, D = check_inputs(q, k, v, o, do, lse, causal, scale, key_lengths)
    _check_dq_tma(dq_tma)
    if grads is not None:
        if not isinstance(grads, (tuple, list)) or len(grads) != 3:
            raise TypeError("grads must be a tuple (dq, dk, dv) of tensors")
        grads = tuple(_checked_out(g, q, name) for g, name in zip(grads, ("dq", "dk", "dv")))
    if dq_accum is not None:
        validate.tensor(dq_accum, "dq_accum", dtypes=(torch.float32,), ndim=4)
        if dq_accum.shape != q.shape or dq_accum.device != q.device:
            raise ValueError(f"dq_accum has shape {tuple(dq_accum.shape)}; expected q's {tuple(q.shape)}")
    refuse_unless_hopper(q.device)
    dq, dk, dv = grads if grads is not None else tuple(torch.empty_like(q) for _ in range(3))
    if B * H * S == 0:
        return dq, dk, dv
    s_pad = -(-S // BLOCK_M) * BLOCK_M
    lse2 = torch.empty((B * H, s_pad), dtype=torch.float32, device=q.device)
    delta = torch.empty((B * H, s_pad), dtype=torch.float32, device=q.device)
    acc = dq_accum if dq_accum is not None else torch.empty(q.shape, dtype=torch.float32, device=q.device)
    maps = b"".join((tensor_map(q, BLOCK_M), tensor_map(k, BLOCK_N), tensor_map(v, BLOCK_N), tensor_map(do, BLOCK_M),
                     tensor_map(acc, BLOCK_M, DQ_BOX_COLS)))
    ops = load_extension(dq_tma)
    with torch.cuda.device(q.device):
        ops.backward(list(struct.unpack("<80q", maps)), o, do, lse, lse2, delta, acc, dq, dk, dv, causal, float(scale),
                     key_lengths)
    return dq, dk, dv


# --- references (the tests' and the GPU check's) ------------------------------------------------------------

def reference_forward(q, k, v, causal: bool, scale: float, key_lengths=None):
    """(o in q's dtype, lse float32) by float64 torch: the inputs the backward is tested on, independent of
    any forward kernel. key_lengths: keys j >= key_lengths[b] hidden (never read: NaN there stays out); a row
    with no key gives o = 0 and lse = -inf, as the forward does."""
    from week4_triton_dl.attention.naive import allowed_keys  # the mask every attention test uses

    qd, kd, vd = q.double(), k.double(), v.double()
    keep = allowed_keys(q.shape[2], k.shape[2], causal, key_lengths, batch=q.shape[0], device=q.device)
    kd, vd = kd.where(keep.any(-2)[..., None], 0), vd.where(keep.any(-2)[..., None], 0)  # hidden keys never read
    s = ((qd @ kd.transpose(-1, -2)) * scale).masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).where(keep.any(-1, keepdim=True), 0)  # no key: exp(-inf - -inf) -> 0
    return (p @ vd).to(q.dtype), lse.float()


# --- compute-sanitizer case -----------------------------------------------------------------------------------

def sanitizer_case(dtype=torch.bfloat16, causal=True, S=129, D=64, dq_tma=True) -> None:
    """One small synchronized call: ragged S (two key blocks, the second nearly empty; three query blocks), and a
    second batch element padded to S // 2 keys (key_lengths: its border block zeroes K/V rows, its last leaves)."""
    from course.check import random_tensor

    q, k, v, do = (random_tensor((2, 2, S, D), dtype, "cuda") for _ in range(4))
    lengths = torch.tensor([S, S // 2], device="cuda")
    o, lse = reference_forward(q, k, v, causal, D**-0.5, lengths)
    attention_hopper_backward(q, k, v, o, do, lse, causal, D**-0.5, dq_tma=dq_tma, key_lengths=lengths)
    torch.cuda.synchronize()
