"""A CUDA C++ extension: RMSNorm forward + backward as a torch op, beside its Triton twin of week 4.

Over 500 lines: the build (load_inline and its cache), the op registration with fake and
backward, and the comparison with week 4's Triton twin belong to one lesson; the holes carry their hints.

Sometimes the kernel you need is best written in CUDA C++ (a library you already have, a feature
Triton does not expose: warp-level intrinsics, clusters, inline PTX) and called from PyTorch. The
standard route is a C++ extension built by `torch.utils.cpp_extension`; `load_inline` compiles
sources given as strings on first use and caches the shared library. This module walks through it
with the op week 4 wrote in Triton (`week4_triton_dl/norms/rmsnorm.py`), so the two can be compared on
lines of code, speed, build time and portability.

The pieces, each in its own place:
* `kernels/rmsnorm_ext.cu`: the kernels and their launchers, NO torch header. One block per row
  for the forward (a block-wide sum: warp shuffles, then shared memory), a fixed grid of P blocks
  for the backward, each keeping its rows' dW contributions in shared memory and writing one
  partial row (the same two-stage dW reduction as the Triton twin). The same file holds a plain
  C++ version of the op (loops), which g++ builds where there is no GPU: this machine's tests.
* `BINDING` (below): ~100 lines of C++ that register two operators with the PyTorch dispatcher,
  `rmsnorm_fwd` and `rmsnorm_bwd`, check their tensors and call the CPU loops or the CUDA
  launchers. Registering with `TORCH_LIBRARY` (instead of pybind11) keeps the build light (no
  Python headers: the compile takes a fraction of `#include <torch/extension.h>`'s time) and gives
  ops that `torch.ops.<namespace>` exposes to Python, to torch.compile and to the profiler.
* the Python side: launchers that validate inputs BEFORE anything runs (the C++ checks again),
  allocate the outputs (so tests can poison them), and a `torch.autograd.Function`.

Build: `load_extension()` compiles once per source version into
`~/.cache/gpu-kernels-course/torch_extensions/torch-<version>/<name>` (XDG_CACHE_HOME honoured)
and later processes load the cached library in well under a second. On a GPU the build compiles
the .cu with nvcc for the GPU's architecture (torch's default; TORCH_CUDA_ARCH_LIST overrides)
and registers both the CPU and the CUDA kernels; without one (torch CPU build, no CUDA) only the
CPU half is built. It needs a C++ compiler and ninja, and on a GPU machine nvcc of a CUDA version
matching torch's: the portability price of C++ against Triton's JIT, which needs none of them.

Cost model (M rows of N, itemsize s): forward reads x, writes y: 2MNs (+ w, rstd: 4M); backward
reads x, dy, writes dx: 3MNs, plus P x N fp32 partials written and read again. ~4 FLOPs per
element forward, ~8 backward: memory-bound; the yardstick is % of copy bandwidth.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from course import runtime
from course.bench import Benchmark, c_function, count_source_lines, itemsize
from course.check import random_tensor
from week4_triton_dl.norms import column_sums as triton_column_sums
from week4_triton_dl.norms import rmsnorm as triton_rmsnorm

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "kernels" / "rmsnorm_ext.cu"
MAX_N = 8192             # the backward keeps N fp32 partial sums in shared memory: 32 KB < 48 KB
MAX_ROWS = 2**31 - 1     # the forward's grid: one block per row, gridDim.x < 2^31
CPU_DTYPES = (torch.float32, torch.float64)
CUDA_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
PROGRAMS_PER_SM = 2      # backward blocks per SM: enough to fill the GPU, few partial rows

# The C++ side of the op: checks, dispatch to the CPU loops or the CUDA launchers, registration.
# NAMESPACE is replaced by a name unique to the source version (see `load_extension`).
BINDING = r"""
#include <ATen/core/Tensor.h>
#include <torch/library.h>
#ifdef RMSNORM_EXT_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
int rmsnorm_ext_forward_cuda(int dtype, const void* x, const void* w, void* y, float* rstd, int64_t M,
                             int64_t N, float eps, void* stream);
int rmsnorm_ext_backward_cuda(int dtype, const void* dy, const void* x, const void* w, const float* rstd,
                              void* dx, float* dw_partial, int64_t M, int64_t N, int64_t programs, void* stream);
const char* rmsnorm_ext_error_string(int code);
#endif

namespace {

void check_rows(const at::Tensor& t, const at::Tensor& x, const char* name) {
    TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
    TORCH_CHECK(t.sizes() == x.sizes(), name, " must have x's shape");
    TORCH_CHECK(t.scalar_type() == x.scalar_type(), name, " must have x's dtype");
    TORCH_CHECK(t.device() == x.device(), name, " must be on x's device");
}

void check_common(const at::Tensor& x, const at::Tensor& w, const at::Tensor& stats, at::ScalarType stats_type) {
    TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "x must be a contiguous (M, N) tensor");
    TORCH_CHECK(w.dim() == 1 && w.size(0) == x.size(1) && w.is_contiguous(), "w must be a contiguous (N,) tensor");
    TORCH_CHECK(w.scalar_type() == x.scalar_type() && w.device() == x.device(), "w must match x's dtype and device");
    TORCH_CHECK(stats.dim() == 1 && stats.size(0) == x.size(0) && stats.is_contiguous(), "rstd must be (M,)");
    TORCH_CHECK(stats.scalar_type() == stats_type && stats.device() == x.device(), "rstd has the wrong dtype or device");
}

at::ScalarType cpu_stats_type(const at::Tensor& x) { return x.scalar_type(); }

void fwd_cpu(const at::Tensor& x, const at::Tensor& w, double eps, const at::Tensor& y, const at::Tensor& rstd) {
    check_common(x, w, rstd, cpu_stats_type(x));
    check_rows(y, x, "y");
    const int64_t M = x.size(0), N = x.size(1);
    if (x.scalar_type() == at::kFloat)
        rmsnorm_forward_cpu<float>(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(),
                                   rstd.data_ptr<float>(), M, N, eps);
    else if (x.scalar_type() == at::kDouble)
        rmsnorm_forward_cpu<double>(x.data_ptr<double>(), w.data_ptr<double>(), y.data_ptr<double>(),
                                    rstd.data_ptr<double>(), M, N, eps);
    else
        TORCH_CHECK(false, "the CPU kernel takes float32 or float64, got ", x.scalar_type());
}

void bwd_cpu(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, const at::Tensor& rstd,
             const at::Tensor& dx, const at::Tensor& dw_partial) {
    check_common(x, w, rstd, cpu_stats_type(x));
    check_rows(dy, x, "dy");
    check_rows(dx, x, "dx");
    TORCH_CHECK(dw_partial.dim() == 2 && dw_partial.size(1) == x.size(1) && dw_partial.size(0) >= 1 &&
                dw_partial.is_contiguous() && dw_partial.scalar_type() == x.scalar_type(),
                "dw_partial must be a contiguous (P, N) tensor of x's dtype");
    const int64_t M = x.size(0), N = x.size(1), P = dw_partial.size(0);
    if (x.scalar_type() == at::kFloat)
        rmsnorm_backward_cpu<float>(dy.data_ptr<float>(), x.data_ptr<float>(), w.data_ptr<float>(),
                                    rstd.data_ptr<float>(), dx.data_ptr<float>(), dw_partial.data_ptr<float>(), M, N, P);
    else if (x.scalar_type() == at::kDouble)
        rmsnorm_backward_cpu<double>(dy.data_ptr<double>(), x.data_ptr<double>(), w.data_ptr<double>(),
                                     rstd.data_ptr<double>(), dx.data_ptr<double>(), dw_partial.data_ptr<double>(), M, N, P);
    else
        TORCH_CHECK(false, "the CPU kernel takes float32 or float64, got ", x.scalar_type());
}

#ifdef RMSNORM_EXT_WITH_CUDA
int dtype_code(const at::Tensor& x) {
    switch (x.scalar_type()) {
        case at::kFloat: return 0;
        case at::kHalf: return 1;
        case at::kBFloat16: return 2;
        default: TORCH_CHECK(false, "the CUDA kernels take float32, float16 or bfloat16, got ", x.scalar_type());
    }
    return -1;
}

void fwd_cuda(const at::Tensor& x, const at::Tensor& w, double eps, const at::Tensor& y, const at::Tensor& rstd) {
    check_common(x, w, rstd, at::kFloat);
    check_rows(y, x, "y");
    if (x.numel() == 0) return;
    const int err = rmsnorm_ext_forward_cuda(dtype_code(x), x.data_ptr(), w.data_ptr(), y.data_ptr(),
                                             rstd.data_ptr<float>(), x.size(0), x.size(1), static_cast<float>(eps),
                                             c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
    TORCH_CHECK(err == 0, "rmsnorm forward launch failed: ", rmsnorm_ext_error_string(err));
}

void bwd_cuda(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w, const at::Tensor& rstd,
              const at::Tensor& dx, const at::Tensor& dw_partial) {
    check_common(x, w, rstd, at::kFloat);
    check_rows(dy, x, "dy");
    check_rows(dx, x, "dx");
    TORCH_CHECK(dw_partial.dim() == 2 && dw_partial.size(1) == x.size(1) && dw_partial.size(0) >= 1 &&
                dw_partial.is_contiguous() && dw_partial.scalar_type() == at::kFloat,
                "dw_partial must be a contiguous (P, N) float32 tensor");
    if (x.numel() == 0) return;
    const int err = rmsnorm_ext_backward_cuda(dtype_code(x), dy.data_ptr(), x.data_ptr(), w.data_ptr(),
                                              rstd.data_ptr<float>(), dx.data_ptr(), dw_partial.data_ptr<float>(),
                                              x.size(0), x.size(1), dw_partial.size(0),
                                              c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
    TORCH_CHECK(err == 0, "rmsnorm backward launch failed: ", rmsnorm_ext_error_string(err));
}
#endif

}  // namespace

TORCH_LIBRARY(NAMESPACE, m) {
    m.def("rmsnorm_fwd(Tensor x, Tensor w, float eps, Tensor(a!) y, Tensor(b!) rstd) -> ()");
    m.def("rmsnorm_bwd(Tensor dy, Tensor x, Tensor w, Tensor rstd, Tensor(a!) dx, Tensor(b!) dw_partial) -> ()");
}

TORCH_LIBRARY_IMPL(NAMESPACE, CPU, m) {
    m.impl("rmsnorm_fwd", &fwd_cpu);
    m.impl("rmsnorm_bwd", &bwd_cpu);
}

#ifdef RMSNORM_EXT_WITH_CUDA
TORCH_LIBRARY_IMPL(NAMESPACE, CUDA, m) {
    m.impl("rmsnorm_fwd", &fwd_cuda);
    m.impl("rmsnorm_bwd", &bwd_cuda);
}
#endif
"""


# --- building -------------------------------------------------------------------------------------

@dataclass
class Extension:
    ops: object          # torch.ops.<namespace>: .rmsnorm_fwd, .rmsnorm_bwd
    namespace: str
    kind: str            # "cpu" or "cuda"
    library: str         # path of the shared library
    build_seconds: float
    cached: bool         # the library was already built (this call only loaded it)


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpu-kernels-course" / "torch_extensions" / f"torch-{torch.__version__}"


def default_kind() -> str:
    """"cuda" where torch has CUDA and a GPU (the build then holds the CPU kernels too), else "cpu"."""
    return "cuda" if runtime.on_gpu() else "cpu"


def sources(kind: str) -> tuple[list[str], list[str], str]:
    """(cpp sources, cuda sources, namespace) for a build of this kind; the namespace hashes them all."""
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"kind must be 'cpu' or 'cuda', got {kind!r}")
    kernel = SOURCE.read_text()
    digest = hashlib.sha256("\0".join([kernel, BINDING, kind, torch.__version__]).encode()).hexdigest()[:12]
    namespace = f"week5_rmsnorm_{kind}_{digest}"
    binding = BINDING.replace("NAMESPACE", namespace)
    cpp = [kernel, ("#define RMSNORM_EXT_WITH_CUDA\n" if kind == "cuda" else "") + binding]
    return cpp, ([kernel] if kind == "cuda" else []), namespace


def toolchain_missing(kind: str | None = None) -> str | None:
    """Why this machine cannot build the extension (None if it can): a C++ compiler, ninja, nvcc for CUDA."""
    from torch.utils.cpp_extension import is_ninja_available

    kind = default_kind() if kind is None else kind
    if not (shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")):
        return "no C++ compiler (c++/g++) on PATH"
    if not is_ninja_available():
        return "ninja is not installed (torch.utils.cpp_extension builds with it: pip install ninja)"
    if kind == "cuda" and runtime.nvcc_path() is None:
        return "nvcc (the CUDA toolkit) is not on PATH"
    return None


def build(kind: str | None = None, *, build_directory: Path | None = None, verbose: bool = False) -> Extension:
    """Compile (or load the cached) extension; `build_directory` elsewhere forces a cold build."""
    from torch.utils.cpp_extension import load_inline

    kind = default_kind() if kind is None else kind
    if kind == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("a CUDA build needs torch with CUDA and a GPU; use kind='cpu' here")
    missing = toolchain_missing(kind)
    if missing:
        raise RuntimeError(f"cannot build the {kind} extension: {missing}")
    cpp, cuda, namespace = sources(kind)
    directory = Path(build_directory) if build_directory is not None else cache_root() / namespace
    directory.mkdir(parents=True, exist_ok=True)
    cached = any(directory.glob(f"{namespace}*.so"))
    start = time.perf_counter()
    library = load_inline(namespace, cpp_sources=cpp, cuda_sources=cuda or None, with_cuda=kind == "cuda",
                          extra_cflags=["-O3"], extra_cuda_cflags=["-O3", "-lineinfo"],
                          build_directory=str(directory), is_python_module=False, no_implicit_headers=True,
                          verbose=verbose)
    seconds = time.perf_counter() - start
    return Extension(getattr(torch.ops, namespace), namespace, kind, str(library), seconds, cached)


@functools.cache
def load_extension(kind: str | None = None) -> Extension:
    """The extension for this process (built on first use, then cached on disk)."""
    return build(kind)


# --- the launchers --------------------------------------------------------------------------------

def _check_tensor(t, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    allowed = CUDA_DTYPES if t.device.type == "cuda" else CPU_DTYPES
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name} is on {t.device}; the extension has CPU and CUDA kernels only")
    if t.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise TypeError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; on {t.device.type} the "
                        f"extension takes {names}")
    if not t.is_contiguous():
        raise ValueError(f"{name} is not contiguous (strides {t.stride()}): pass .contiguous()")


def _check_inputs(x, weight) -> tuple[int, int]:
    _check_tensor(x, "x")
    _check_tensor(weight, "weight")
    if x.dim() == 0:
        raise ValueError("x must have at least 1 dimension (normalized over the last one), got a scalar")
    n = x.shape[-1]
    if not 1 <= n <= MAX_N:
        raise ValueError(f"x's last dimension is {n}; the kernels take 1 <= N <= {MAX_N} "
                         "(the backward holds N fp32 partial sums in shared memory)")
    if tuple(weight.shape) != (n,):
        raise ValueError(f"weight has shape {tuple(weight.shape)}; expected ({n},), x's last dimension")
    if weight.dtype != x.dtype or weight.device != x.device:
        raise TypeError(f"weight ({weight.dtype}, {weight.device}) must match x ({x.dtype}, {x.device})")
    rows = x.numel() // n
    if rows > MAX_ROWS:
        raise ValueError(f"x has {rows} rows; the forward launches one block per row, at most {MAX_ROWS}")
    if x.device.type == "cuda" and load_extension().kind != "cuda":
        raise ValueError("x is on a GPU but this process built the CPU-only extension")
    return rows, n


def _stats_dtype(x: torch.Tensor) -> torch.dtype:
    """rstd is fp32 on the GPU (16-bit inputs are computed in fp32), x's dtype on the CPU (fp32/fp64)."""
    return torch.float32 if x.device.type == "cuda" else x.dtype


def default_programs(rows: int, device: torch.device) -> int:
    """Backward blocks: ~2 per SM on a GPU (a few on the CPU, to exercise the partial sums)."""
    wanted = PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count \
        if device.type == "cuda" else 4
    return max(1, min(wanted, rows))


def rms_norm_ext_forward(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
                         out: torch.Tensor | None = None, rstd: torch.Tensor | None = None):
    """(y, rstd) of RMSNorm over x's last dimension; `out`/`rstd` may be given (any values)."""
    rows, n = _check_inputs(x, weight)
    if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    y = torch.empty_like(x) if out is None else out
    r = torch.empty(x.shape[:-1], dtype=_stats_dtype(x), device=x.device) if rstd is None else rstd
    if y.shape != x.shape or y.dtype != x.dtype or not y.is_contiguous():
        raise ValueError(f"out must be a contiguous {x.dtype} tensor of shape {tuple(x.shape)}")
    if r.shape != x.shape[:-1] or r.dtype != _stats_dtype(x) or not r.is_contiguous():
        raise ValueError(f"rstd must be a contiguous {_stats_dtype(x)} tensor of shape {tuple(x.shape[:-1])}")
    # BEGIN EXERCISE: call the extension op on (rows, n) views: load_extension().ops.rmsnorm_fwd(x, weight,
    #   eps, y, rstd), nothing to launch for 0 rows; then write the C++ loops and the CUDA kernels of
    #   exercises/kernels/rmsnorm_ext.cu (its TODOs)
    # HINT: The Python side only hands the extension 2-D (rows, n) views of the already-checked tensors; the
    #   real work is the C++/CUDA file's TODOs.
    # HINT: Guard against zero rows (an empty grid is an invalid launch), then one call of
    #   load_extension().ops.rmsnorm_fwd with x, weight, eps as a float, y and rstd viewed as (rows, n) and
    #   (rows,).
    # HINT: Views, not reshapes/copies: `y.view(rows, n)` writes straight into the caller's tensor.
    if rows:
        load_extension().ops.rmsnorm_fwd(x.view(rows, n), weight, float(eps), y.view(rows, n), r.view(rows))
    # END EXERCISE
    return y, r


def rms_norm_ext_backward(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor, *,
                          programs: int | None = None):
    """(dx, dweight): dx by the kernel, dweight = sum of the P partial rows it writes."""
    rows, n = _check_inputs(x, weight)
    _check_tensor(dy, "dy")
    if dy.shape != x.shape or dy.dtype != x.dtype:
        raise ValueError(f"dy ({dy.dtype}, {tuple(dy.shape)}) must match x ({x.dtype}, {tuple(x.shape)})")
    if rstd.shape != x.shape[:-1] or rstd.dtype != _stats_dtype(x) or not rstd.is_contiguous():
        raise ValueError(f"rstd must be a contiguous {_stats_dtype(x)} tensor of shape {tuple(x.shape[:-1])}")
    if programs is not None and (isinstance(programs, bool) or not isinstance(programs, int) or programs < 1):
        raise ValueError(f"programs must be a positive int, got {programs!r}")
    dx = torch.empty_like(x)
    if rows == 0:
        return dx, torch.zeros_like(weight)
    # BEGIN EXERCISE: dW in two stages: P = min(programs or default_programs(rows, device), rows) partial
    #   rows (P, n) in _stats_dtype(x) written by load_extension().ops.rmsnorm_bwd on (rows, n) views, then
    #   summed here in weight's dtype
    # HINT: dW sums over all rows: the CUDA kernel writes one partial row per program (no atomics), and a
    #   small torch sum finishes the reduction here.
    # HINT: Clamp the program count to the rows (no program without a row); allocate the (P, n) partials in
    #   the stats dtype (empty: every row is written); call ops.rmsnorm_bwd on (rows, n) views; return dx
    #   and the partials' column sum.
    # HINT: `return dx, partial.sum(0).to(weight.dtype)`
    programs = min(programs or default_programs(rows, x.device), rows)
    partial = torch.empty((programs, n), dtype=_stats_dtype(x), device=x.device)
    load_extension().ops.rmsnorm_bwd(dy.view(rows, n), x.view(rows, n), weight, rstd.view(rows), dx.view(rows, n),
                                     partial)
    return dx, partial.sum(0).to(weight.dtype)  # stage two: P rows, a small torch reduction
    # END EXERCISE


class RMSNormExtFunction(torch.autograd.Function):
    """y = rms_norm(x) * w over the last dimension; forward and backward by the C++/CUDA kernels."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = rms_norm_ext_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = rms_norm_ext_backward(dy.contiguous(), x, rstd, weight)
        return dx, dw, None


def rms_norm_ext(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """F.rms_norm(x, (N,), weight, eps) by the extension, differentiable; eps None as torch's."""
    if eps is None:
        eps = torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps
    return RMSNormExtFunction.apply(x.contiguous(), weight, eps)


def ext_norm(x, weight, bias, eps: float, kind: str):
    """The model's `norm` op (model.Ops) by the extension: RMSNorm only (LayerNorm was not written in C++)."""
    if kind != "rmsnorm":
        raise ValueError(f"the CUDA C++ extension implements RMSNorm only, got norm kind {kind!r}")
    return rms_norm_ext(x, weight, eps)


def rms_norm_reference(x, weight, eps):
    """torch's RMSNorm in float64: the tests' reference."""
    return F.rms_norm(x.double(), (x.shape[-1],), weight.double(), eps)


# --- comparing with the Triton twin ----------------------------------------------------------------

def binding_lines() -> int:
    """Non-blank, non-comment lines of the C++ binding (counted like course.bench counts C)."""
    return sum(1 for line in BINDING.splitlines() if line.strip() and not line.strip().startswith("//"))


def lines_of_code() -> dict:
    """Lines of the kernels + launchers each version needs (course.bench's counting rules)."""
    cuda_kernels = count_source_lines([c_function(SOURCE, n) for n in (
        "block_sum", "rmsnorm_fwd_kernel", "rmsnorm_bwd_kernel", "threads_for", "launch_forward",
        "launch_backward", "rmsnorm_ext_forward_cuda", "rmsnorm_ext_backward_cuda")])
    python = count_source_lines([rms_norm_ext_forward, rms_norm_ext_backward, _check_inputs, _check_tensor])
    triton = count_source_lines(TRITON_SOURCES)
    return {"cuda_kernels_and_launchers": cuda_kernels, "cpp_binding": binding_lines(), "python_launchers": python,
            "cuda_total": cuda_kernels + binding_lines() + python, "triton_total": triton}


def build_report(*, cold: bool = True) -> dict:
    """Lines of code, cold build time (fresh directory), warm load time, what the build needs."""
    kind = default_kind()
    report = {"kind": kind, "lines_of_code": lines_of_code(), "compilers": {
        "c++": shutil.which("c++") or shutil.which("g++"), "ninja": shutil.which("ninja"),
        "nvcc": runtime.nvcc_path(), "torch_cuda": torch.version.cuda}}
    if cold:
        with tempfile.TemporaryDirectory() as tmp:
            report["cold_build_s"] = build(kind, build_directory=Path(tmp)).build_seconds
    ext = load_extension(kind)
    report["cache_dir"] = str(cache_root())
    report["load_s" if ext.cached else "first_build_s"] = ext.build_seconds
    return report


# BEGIN SOLUTION ONLY: the benchmarks, sweep and command line (they measure the solution's kernels)
def _bench_inputs(size):
    M, N, dtype = size
    dtype = dtype if runtime.on_gpu() else torch.float32
    x = random_tensor((M, N), dtype, runtime.DEVICE).requires_grad_()
    w = (1 + 0.1 * random_tensor(N, torch.float32, runtime.DEVICE)).to(dtype).requires_grad_()
    return x, w, random_tensor((M, N), dtype, runtime.DEVICE)


def _fwd_bwd(op):
    # autograd.grad, not .backward(): nothing accumulates into .grad between calls.
    return lambda x, w, dy: torch.autograd.grad(op(x, w), (x, w), dy)


EPS = 1e-6
# What the Triton twin runs for forward + backward (kernels and launchers).
TRITON_SOURCES = [triton_rmsnorm.rmsnorm_fwd_persistent_kernel, triton_rmsnorm.rmsnorm_bwd_kernel,
                  triton_column_sums.partial_sum_kernel, triton_rmsnorm.rms_norm_forward,
                  triton_rmsnorm.rms_norm_backward]
BENCHMARKS = [
    Benchmark(
        name="cuda_ext_vs_triton_week5",
        title="RMSNorm forward + backward: CUDA C++ extension vs the Triton kernels of week 4 vs torch",
        # The model's norm under autocast (fp32 residual stream, d = 512, 32 x 512 tokens), then
        # week 4's bf16 shapes.
        sizes=[(16384, 512, torch.float32), (65536, 1024, torch.bfloat16), (16384, 4096, torch.bfloat16)],
        sim_sizes=[(64, 256, torch.float32)],
        size_label=lambda s: f"{s[0]}x{s[1]} {str(s[2]).replace('torch.', '')}",
        make_inputs=_bench_inputs,
        variants={
            "torch": _fwd_bwd(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS)),
            "triton": _fwd_bwd(lambda x, w: triton_rmsnorm.rms_norm(x, (x.shape[-1],), w, EPS)),
            "cuda_ext": _fwd_bwd(lambda x, w: rms_norm_ext(x, w, EPS)),
        },
        gpu_only=("cuda_ext",),  # in simulation it would build the CPU extension just to time loops
        headline=("triton", "cuda_ext"),
        bytes=lambda s: 5 * s[0] * s[1] * itemsize(s[2] if runtime.on_gpu() else torch.float32),
        notes="one call = forward + backward (torch.autograd.grad); bytes = read x, write y, read x and dy, "
              "write dx (5 M N s); torch = F.rms_norm (fused CUDA kernels in torch >= 2.9); the "
              "extension's first call builds it (excluded: warm-up)",
        sources={"cuda_ext": [c_function(SOURCE, n) for n in ("block_sum", "rmsnorm_fwd_kernel", "rmsnorm_bwd_kernel",
                                                              "launch_forward", "launch_backward")]
                 + [rms_norm_ext_forward, rms_norm_ext_backward],
                 "triton": TRITON_SOURCES},
    ),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", action="store_true", help="lines of code, cold build time, load time")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold build (it takes tens of seconds)")
    args = parser.parse_args(argv)
    if not args.report:
        parser.print_help()
        return 0
    report = build_report(cold=not args.no_cold)
    width = max(len(k) for k in report)
    for key, value in report.items():
        print(f"{key:>{width}}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
# END SOLUTION ONLY
