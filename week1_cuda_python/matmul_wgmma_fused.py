"""Fused GEMM epilogues on the persistent wgmma + TMA kernel, as torch ops a model can call.

The kernel is kernels/matmul_wgmma_fused.cu (the body of kernels/matmul_wgmma_persistent.cu with
an epilogue and the weight layout as template parameters; its header is the lesson). Here:

    linear(x, w)                  x @ w.T                          (nn.Linear without bias)
    linear_bias(x, w, bias)       x @ w.T + bias
    linear_residual(x, w, r)      x @ w.T + r                      (r may be the output buffer)
    linear_swiglu(x, w_gu)        silu(x @ wg.T) * (x @ wu.T)      (w_gu = [wg; wu], 2F x K -> F)

x (..., K), w (N, K) as nn.Linear stores it: fp16 or bf16, contiguous, on an H100/H200. Each op
is a `torch.library.custom_op` (`course::wgmma_linear*`) with a fake implementation (shapes for
torch.compile) and a backward.

Why the backward is plain torch matmuls. The forward's win is the epilogue: the GEMM's output is
never written to DRAM and read back. The backward's GEMMs (dx = dy @ w, dw = dy.T @ x) have no
epilogue left to fuse except SwiGLU's elementwise derivative, and they need A transposed, a
layout this kernel does not read; cuBLAS runs them at its rate. So the backward is cuBLAS plus a
few elementwise torch ops, which torch.compile fuses. SwiGLU's backward recomputes the gate and up
projections with one GEMM (saving them would write and read the 2F-wide tensor the fused forward
removed: at the capstone's 8192 x 4096 bf16 that is 64 MB each way).

Cost model: as the persistent rung (2 M N K FLOPs), plus the epilogue's operand: bias N elements,
residual M N elements read; C is M N (M F for SwiGLU) written once.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
import torch.nn.functional as F

from course import ops, runtime  # runtime first: chooses the GPU or simulation
from course import validate
from week1_cuda_python.hopper_ptx import HOPPER_PTX_INCLUDE  # the -I of every Hopper build (one place)
from week1_cuda_python.matmul_tensor_cores import (
    TYPE_SUFFIX, WGMMA_CAPABILITY, WGMMA_GENCODE, tensor_map)
from week1_cuda_python.matmul_wgmma_persistent import (
    BODY_DEFINES, PERSISTENT_TILES, SCHEDULES, TMA_ALIGN_BYTES, WIDTHS, check_width, kernel_function, launch_geometry,
    launch_kernel, load_cubin, refuse_open_hole, schedule_tiles)

# BEGIN SOLUTION ONLY: the kernel source is the solution's (the stub has no copy of the .cu file)
FUSED_SOURCE = Path(__file__).parent / "kernels" / "matmul_wgmma_fused.cu"
PINGPONG_SOURCE = Path(__file__).parent / "kernels" / "matmul_wgmma_pingpong.cu"  # schedule="pingpong"
# END SOLUTION ONLY
DTYPES = (torch.float16, torch.bfloat16)
EPILOGUES = ("none", "bias", "residual", "swiglu")  # -> kernel wgmma_linear[_<epilogue>]_<dtype>
# The widths SwiGLU runs at: a tile's gate and up halves must be whole 64-column slabs of w and store chunks of
# C, so 256 and 128; at 192 each half would be 96 columns (kernels/matmul_wgmma_fused.cu, "SwiGLU without ...").
SWIGLU_WIDTHS = tuple(w for w in WIDTHS if w // 2 % 64 == 0)
# Off Hopper: week 3's Triton matmul (it takes a bias; the residual add and SwiGLU then in torch).
TRITON_FALLBACK = "week3_triton_kernels.matmul.matmul (Triton, with bias=; the residual add or SwiGLU in torch)"
NAMESPACE = ops.namespace(__name__)
INT32_MAX = 2**31 - 1


def kernel_name(epilogue: str, dtype: torch.dtype, schedule: str = "cooperative") -> str:
    pingpong = "_pingpong" if schedule == "pingpong" else ""
    return f"wgmma_linear{pingpong}{'' if epilogue == 'none' else '_' + epilogue}_{TYPE_SUFFIX[dtype]}"


def unsupported(capability: tuple[int, int] | None) -> str | None:
    """Why the fused ops cannot run on a GPU of this compute capability (None: they can, or no GPU)."""
    if capability is None or tuple(capability) == WGMMA_CAPABILITY:
        return None
    major, minor = capability
    return (f"the fused wgmma GEMMs need an sm_90a GPU (compute capability 9.0: H100, H200), because wgmma, "
            f"setmaxnreg and the TMA exist only there; this GPU is compute capability {major}.{minor}: "
            f"use {TRITON_FALLBACK}")


def nvcc_command(output: Path, nvcc: str = "nvcc", source: Path | None = None,
                 defines: tuple[str, ...] = ()) -> list[str]:
    """The nvcc command that builds every fused variant for sm_90a (the CPU test runs the same one);
    `source`: PINGPONG_SOURCE for the ping-pong schedule's entry points; `defines`: the width build's
    (PersistentTiles.defines)."""
    return [nvcc, "-cubin", WGMMA_GENCODE, "-O3", "-lineinfo", "-Werror", "all-warnings", *defines, *BODY_DEFINES,
            *HOPPER_PTX_INCLUDE, "-o", str(output), str(source or FUSED_SOURCE)]


@functools.cache
def _module(source: Path | None = None, defines: tuple[str, ...] = ()):
    refuse_open_hole()  # the body's exercise stub with a hole open: it could hang the GPU
    source = source or FUSED_SOURCE
    return load_cubin(source, lambda cubin, nvcc: nvcc_command(cubin, nvcc, source, defines), "the fused wgmma GEMMs")


@functools.cache
def _kernel(name: str, schedule: str = "cooperative", width: int = PERSISTENT_TILES.bn):
    tiles = schedule_tiles(schedule, width)
    module = _module(PINGPONG_SOURCE if schedule == "pingpong" else None, tiles.defines())
    return kernel_function(module, name, tiles.shared_bytes)


def _tma_problem(name: str, t: torch.Tensor, fix: str) -> str | None:
    row_bytes = t.stride(0) * t.element_size()
    if t.data_ptr() % TMA_ALIGN_BYTES == 0 and row_bytes % TMA_ALIGN_BYTES == 0:
        return None
    return (f"{name} has rows of {row_bytes} bytes starting {t.data_ptr() % TMA_ALIGN_BYTES} bytes past a 16-byte "
            f"boundary; the TMA needs both to be multiples of 16 bytes ({fix}): use {TRITON_FALLBACK}")


def _checked(x, w, epilogue, extra, out):
    """Validate everything; return (out, M, N, K, n_out). Nothing is launched before this."""
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue must be one of {EPILOGUES}, got {epilogue!r}")
    validate.tensor(x, "x", dtypes=DTYPES, ndim=2)
    validate.tensor(w, "w", dtypes=DTYPES, ndim=2)
    validate.same_dtype(x=x, w=w)
    (m, k), (n, k_w) = x.shape, w.shape
    if k != k_w:
        raise ValueError(f"w must be (N, K) as nn.Linear stores it, with K = x.shape[1] = {k}; got w of shape "
                         f"{tuple(w.shape)}")
    n_out = n
    if epilogue == "swiglu":
        if n % 16:
            raise ValueError(f"w must stack the gate and up weights, [w_gate; w_up], each F x K with F a multiple "
                             f"of 8 (C's rows for the TMA): w has {n} rows")
        n_out = n // 2
    name = {"bias": "bias", "residual": "residual"}.get(epilogue)
    if name is None and extra is not None:
        raise ValueError(f"the {epilogue!r} epilogue takes no extra operand")
    if name is not None:
        validate.tensor(extra, name, dtypes=(x.dtype,), ndim=1 if name == "bias" else 2)
        want = (n,) if name == "bias" else (m, n)
        if tuple(extra.shape) != want:
            raise ValueError(f"{name} has shape {tuple(extra.shape)}; expected {want}")
        if extra.data_ptr() % 4:  # read as 4-byte pairs
            raise ValueError(f"{name} starts {extra.data_ptr() % 4} bytes past a 4-byte boundary: pass a copy "
                             f"(.clone()), the epilogue reads it two elements at a time")
    if out is None:
        out = torch.empty((m, n_out), dtype=x.dtype, device=x.device)
    else:
        validate.tensor(out, "out", dtypes=(x.dtype,), ndim=2)
        if tuple(out.shape) != (m, n_out):
            raise ValueError(f"out has shape {tuple(out.shape)}; expected {(m, n_out)}")
    for label, t in (("w", w), ("out", out), (name, extra)):
        if t is not None and t.device != x.device:
            raise ValueError(f"{label} is on {t.device} but x is on {x.device}: put all on the same GPU")
    for label, size in (("M", m), ("N", n), ("K", k)):
        if size > INT32_MAX - 256:
            raise ValueError(f"{label} = {size} is too large: the kernel takes sizes as 32-bit ints")
    if m and n and k:
        for problem in (_tma_problem("x", x, "K a multiple of 8"), _tma_problem("w", w, "K a multiple of 8"),
                        _tma_problem("out", out, "its columns a multiple of 8")):
            if problem:
                raise ValueError(problem)
    return out, m, n, k, n_out


def choose_schedule(x, w, epilogue: str = "none") -> str:
    """The schedule the measured rule picks for epilogue(x @ w.T), x (M x K), w (N x K), from the shapes
    alone: nothing is launched (the CPU tests ask it)."""
    return choose_build(x, w, epilogue).schedule


def choose_build(x, w, epilogue: str = "none"):
    """The build (schedule and tile width: matmul_wgmma_schedule.Build) the measured rule picks for
    epilogue(x @ w.T), from the shapes alone."""
    from week1_cuda_python import matmul_wgmma_schedule
    (m, k), n = x.shape, w.shape[0]
    return matmul_wgmma_schedule.choose_build(m, n, k, x.dtype, epilogue)


def launch_fused(x, w, epilogue: str = "none", extra=None, out=None, blocks: int | None = None,
                 schedule: str | None = None, width: int | None = None) -> torch.Tensor:
    """C = epilogue(x @ w.T) with the fused kernel: 2-D x (M x K), w (N x K). `extra` is the bias or
    the residual; `blocks` caps the persistent grid (the tests make one block walk many tiles);
    `schedule` "pingpong": each consumer warpgroup on its own 64 x 256 tiles, alternately, one's
    epilogue beside the other's wgmmas (kernels/matmul_wgmma_pingpong.cu); `width`: the tile's columns
    of x @ w.T, one of WIDTHS (SWIGLU_WIDTHS for SwiGLU). Both None (what the torch ops, and so the
    capstone's wgmma_gemms model, pass): the measured rule's build for this shape and epilogue
    (matmul_wgmma_schedule.py); otherwise a schedule left open is cooperative and a width 256."""
    if blocks is not None and (not isinstance(blocks, int) or blocks < 1):
        raise ValueError(f"blocks must be a positive int (the most blocks to launch), got {blocks!r}")
    if schedule is not None and schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES} or None (the measured rule), got {schedule!r}")
    check_width(width)
    if epilogue == "swiglu" and width is not None and width not in SWIGLU_WIDTHS:
        raise ValueError(f"width={width} cannot run the swiglu epilogue: a tile's gate and up halves would be "
                         f"{width // 2} columns, not whole 64-column slabs; use width in {SWIGLU_WIDTHS}")
    out, m, n, k, n_out = _checked(x, w, epilogue, extra, out)
    if schedule is None and width is None:
        schedule, width = choose_build(x, w, epilogue)
    schedule, width = schedule or "cooperative", width or PERSISTENT_TILES.bn
    why = unsupported(runtime.capability())
    if why is not None:
        raise RuntimeError(why)
    if m == 0 or n_out == 0:
        return out
    if k == 0:  # empty dot products are 0; then the epilogue of 0 (silu(0) * 0 = 0)
        return out.copy_(extra.expand(m, n_out)) if extra is not None else out.zero_()
    tiles = schedule_tiles(schedule, width)
    map_a = tensor_map(x, tiles.bm, tiles.bk)                            # 128 rows (ping-pong: 64) x 64 k
    map_w = tensor_map(w, tiles.b_slab, tiles.bk)                        # 64 rows of w x 64 k
    map_c = tensor_map(out, 64, tiles.c_chunk)                           # one consumer's 64 x 64 chunk
    sms = runtime.sm_count()
    grid, block = launch_geometry(m, n, min(sms, blocks or sms), tiles)  # a tile computes `width` columns of x @ w.T
    args = [ctypes.create_string_buffer(map_a, 128), ctypes.create_string_buffer(map_w, 128),
            ctypes.create_string_buffer(map_c, 128), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k),
            ctypes.c_uint64(extra.data_ptr() if extra is not None else 0), ctypes.c_int(n_out)]
    kernel = _kernel(kernel_name(epilogue, x.dtype, schedule), schedule, width)
    launch_kernel(kernel, grid, block, tiles.shared_bytes, args, x.device)
    return out


# --- torch references (what the ops replace: a GEMM, then an elementwise op) -----------------------

def swiglu_reference(h: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for h = [gate | up] on its last dimension (the capstone's torch_swiglu)."""
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


def reference(x, w, epilogue: str = "none", extra=None):
    """The unfused sequence in x's dtype: cuBLAS's GEMM, then the elementwise op."""
    h = x @ w.t()
    if epilogue == "bias":
        return h + extra
    if epilogue == "residual":
        return h + extra
    return swiglu_reference(h) if epilogue == "swiglu" else h


# --- the torch ops -------------------------------------------------------------------------------

def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x


def _run(x, w, epilogue, extra, n_out):
    """The op's output in x's leading shape, written through a 2-D view of it (a custom op must not
    return a view); x and the residual flattened to 2-D (a view of a contiguous tensor: no copy)."""
    if x.dim() == 0:
        raise ValueError("x must have at least 1 dimension (..., K)")
    out = torch.empty(*x.shape[:-1], n_out, dtype=x.dtype, device=x.device)
    rows = out.numel() // n_out if n_out else 0
    launch_fused(_flat(x), w, epilogue, extra if epilogue != "residual" else _flat(extra),
                 out.view(rows, n_out))
    return out


@torch.library.custom_op(f"{NAMESPACE}::wgmma_linear", mutates_args=())
def linear_op(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _run(x, w, "none", None, w.shape[0])


@torch.library.custom_op(f"{NAMESPACE}::wgmma_linear_bias", mutates_args=())
def linear_bias_op(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return _run(x, w, "bias", bias, w.shape[0])


@torch.library.custom_op(f"{NAMESPACE}::wgmma_linear_residual", mutates_args=())
def linear_residual_op(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return _run(x, w, "residual", residual, w.shape[0])


@torch.library.custom_op(f"{NAMESPACE}::wgmma_linear_swiglu", mutates_args=())
def linear_swiglu_op(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _run(x, w, "swiglu", None, w.shape[0] // 2)


@linear_op.register_fake
def _(x, w):
    return x.new_empty(*x.shape[:-1], w.shape[0])


@linear_bias_op.register_fake
def _(x, w, bias):
    return x.new_empty(*x.shape[:-1], w.shape[0])


@linear_residual_op.register_fake
def _(x, w, residual):
    return x.new_empty(*x.shape[:-1], w.shape[0])


@linear_swiglu_op.register_fake
def _(x, w):
    return x.new_empty(*x.shape[:-1], w.shape[0] // 2)


def _linear_grads(ctx, g):
    """dx = g @ w, dw = g.T @ x (cuBLAS: the module docstring says why)."""
    x, w = ctx.saved_tensors[:2]
    g2 = _flat(g)
    dx = (g2 @ w).view(x.shape) if ctx.needs_input_grad[0] else None
    dw = g2.t() @ _flat(x) if ctx.needs_input_grad[1] else None
    return g2, dx, dw


def _save_xw(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])


def _linear_backward(ctx, g):
    _, dx, dw = _linear_grads(ctx, g)
    return dx, dw


def _bias_backward(ctx, g):
    g2, dx, dw = _linear_grads(ctx, g)
    return dx, dw, g2.sum(0) if ctx.needs_input_grad[2] else None


def _residual_backward(ctx, g):
    _, dx, dw = _linear_grads(ctx, g)
    return dx, dw, g if ctx.needs_input_grad[2] else None


def swiglu_grad(g: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """The gradient at h = [gate | up] (..., 2F) of silu(gate) * up, given g (..., F), the gradient at
    the output: fp32 arithmetic, the result in g's dtype (what the two backward GEMMs read)."""
    # BEGIN EXERCISE: split h (in fp32) into gate and up; d/d gate = g * up * silu'(gate), d/d up =
    #   g * silu(gate); both side by side on the last dimension, in g's dtype
    # HINT: silu(a) = a * sigmoid(a), so silu'(a) = s + a s (1 - s) = s (1 + a (1 - s)) with s = sigmoid(a):
    #   one sigmoid serves both derivatives.
    # HINT: gate, up = h.float().chunk(2, dim=-1); s = torch.sigmoid(gate); then torch.cat of the two
    #   products along dim=-1 and .to(g.dtype).
    gate, up = h.float().chunk(2, dim=-1)
    s = torch.sigmoid(gate)
    g32 = g.float()
    # The bounded factors first (silu'(gate) lies in [-0.1, 1.1], silu(gate) = gate * s is finite): g * up
    # would overflow fp32 for up near bf16's max, and g * gate first gives inf * 0 = NaN at gate = -max.
    return torch.cat([g32 * (s * (1 + gate * (1 - s))) * up, g32 * (gate * s)], dim=-1).to(g.dtype)
    # END EXERCISE


def _swiglu_backward(ctx, g):
    """Recompute h = x @ w.T (one GEMM: the module docstring says why), then swiglu_grad and cuBLAS."""
    x, w = ctx.saved_tensors
    x2 = _flat(x)
    dh = swiglu_grad(_flat(g), x2 @ w.t())
    dx = (dh @ w).view(x.shape) if ctx.needs_input_grad[0] else None
    dw = dh.t() @ x2 if ctx.needs_input_grad[1] else None
    return dx, dw


linear_op.register_autograd(_linear_backward, setup_context=_save_xw)
linear_bias_op.register_autograd(_bias_backward, setup_context=_save_xw)
linear_residual_op.register_autograd(_residual_backward, setup_context=_save_xw)
linear_swiglu_op.register_autograd(_swiglu_backward, setup_context=_save_xw)


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w.T (x: (..., K), w: (N, K) fp16/bf16, H100/H200; elsewhere RuntimeError naming the Triton fallback)."""
    return linear_op(x, w)


def linear_bias(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x @ w.T + bias (bias: (N,)), the add in fp32 before the one rounding."""
    return linear_bias_op(x, w, bias)


def linear_residual(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """x @ w.T + residual (residual: (..., N), x's leading shape), the add in fp32 before the one rounding."""
    return linear_residual_op(x, w, residual)


def linear_swiglu(x: torch.Tensor, w_gate_up: torch.Tensor) -> torch.Tensor:
    """silu(x @ w_gate.T) * (x @ w_up.T) for w_gate_up = [w_gate; w_up] (2F x K, F a multiple of 8): (..., F)."""
    return linear_swiglu_op(x, w_gate_up)


# --- compute-sanitizer cases (python -m course sanitize week1 --only matmul_wgmma_fused) ---

def _sanitizer_case(epilogue: str, dtype: torch.dtype, schedule: str = "cooperative", width: int = 256) -> None:
    # 300 rows (2 x 128 + 44), K = 328 (5 stages + a partial one), N = 336 (one store chunk partly
    # outside C, two wholly outside; SwiGLU: F = 168, two tiles, the second's gate slab running into
    # the up rows); 2 blocks, so each walks several tiles and the ring wraps across them. Width 192: 336 =
    # 192 + 144 (the last chunk 16 columns wide); 128: SwiGLU's F = 168 is 3 tiles of 64, the third's gate
    # slab again running into the up rows.
    from course.check import poisoned, random_tensor
    m, n, k = 300, 336, 328
    x, w = random_tensor((m, k), dtype, runtime.DEVICE), random_tensor((n, k), dtype, runtime.DEVICE)
    extra = {"bias": (n,), "residual": (m, n)}.get(epilogue)
    extra = random_tensor(extra, dtype, runtime.DEVICE) if extra else None
    out = poisoned((m, n // 2 if epilogue == "swiglu" else n), dtype, runtime.DEVICE)
    launch_fused(x, w, epilogue, extra, out, blocks=2, schedule=schedule, width=width)
    torch.cuda.synchronize()


def sanitizer_cases() -> dict:
    """Every case, on any machine (the CPU tests run each one's host side up to the launch)."""
    return {
        kernel_name(e, torch.bfloat16, s): functools.partial(_sanitizer_case, e, torch.bfloat16, s)
        for s in SCHEDULES for e in EPILOGUES
    } | {  # the width builds: the residual (global loads in the epilogue) and SwiGLU where the width runs it
        f"{kernel_name(e, torch.bfloat16, s)}_bn{width}":
            functools.partial(_sanitizer_case, e, torch.bfloat16, s, width)
        for width in WIDTHS[1:] for s in SCHEDULES for e in ("residual", "swiglu")
        if e != "swiglu" or width in SWIGLU_WIDTHS
    }


SANITIZER_CASES = sanitizer_cases() if unsupported(runtime.capability()) is None else {}
