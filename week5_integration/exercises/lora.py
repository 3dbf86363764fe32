"""Exercise: LoRA adapters and a fused Triton kernel for y = x W^T + s (x A^T) B^T.

Same names as week5_integration/lora.py (read its docstring first: the cost model says what each
kernel saves). Yours to write: the two kernels (`lora_epilogue_kernel`, then `lora_fused_kernel`),
their launchers (`_epilogue`, `_fused`, `lora_forward`, `lora_epilogue`), the backward
(`lora_backward`, `LoRALinearFunction`), `lora_linear`, `lora_linear_two_pass`, `merged_weight`,
`LoRALinear.forward/merge/unmerge` and `apply_lora`. Given: the grouped tile order and the tile
store, the autotune configs, the input checks, the torch references, the model helpers, the
benchmarks. Check with `pytest tests/week5/test_lora.py --impl=exercises`; without a GPU the
kernels run in the Triton interpreter (print and pdb work inside them).
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from course import runtime  # before triton: chooses the GPU or the Triton interpreter
from course import validate
from course.bench import Benchmark
from course.check import random_tensor
from course.tl_dot import dot  # noqa: F401  tl.dot, with fp64 as plain FMAs (course/tl_dot.py)

import triton  # noqa: E402  (after course.runtime on purpose)
import triton.language as tl  # noqa: E402
# Week 3's grouped tile order (concurrent programs cover a squarish patch of output tiles, so
# the x row panels and W column panels they share are read from L2) and its config maker.
from week3_triton_kernels.matmul import _config, _grouped_tile  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TARGETS = ("qkv", "proj", "up", "down")  # the week-5 GPT's nn.Linear layers (head is tied to tok)
MAX_RANK = 128  # xa is a BLOCK_M x r fp32 block of registers: r = 128 is already 64 KB per program
KERNELS = ("auto", "triton", "torch")
INT32_MAX = 2**31 - 1


# ------------------------------------------------------------------------------ the kernels
@triton.jit
def _store_tile(acc, y_ptr, pid_m, pid_n, M, N, stride_ym, stride_yn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn,
             acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def lora_epilogue_kernel(x_ptr, w_ptr, xa_ptr, b_ptr, y_ptr, M, N, K, R,
                         stride_xm, stride_xk, stride_wn, stride_wk, stride_xam, stride_xar,
                         stride_bn, stride_br, stride_ym, stride_yn,
                         ACC_DTYPE: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         BLOCK_R: tl.constexpr, GROUP_M: tl.constexpr):
    """y = x W^T + xa B^T with xa (M x R, already scaled by s) read from memory."""
    # TODO: (pid_m, pid_n) = _grouped_tile(...); wrapped row/col offsets (% M, % N);
    #       loop over K in BLOCK_K steps: acc = dot(x tile [BM, BK], W^T tile [BK, BN], acc,
    #       INPUT_PRECISION) (course.tl_dot.dot: tl.dot, with fp64 as plain FMAs)
    #       (masks on k only, other=0); then load xa [BM, BLOCK_R] and B^T [BLOCK_R, BN] (mask r < R,
    #       other=0), acc = dot(xa, b, acc, INPUT_PRECISION); _store_tile(acc, ...).
    pass


@triton.jit
def lora_fused_kernel(x_ptr, w_ptr, a_ptr, b_ptr, y_ptr, xa_ptr, M, N, K, R, scale,
                      stride_xm, stride_xk, stride_wn, stride_wk, stride_ar, stride_ak,
                      stride_bn, stride_br, stride_ym, stride_yn, stride_xam, stride_xar,
                      STORE_XA: tl.constexpr, ACC_DTYPE: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      BLOCK_R: tl.constexpr, GROUP_M: tl.constexpr):
    """y = x W^T + (s x A^T) B^T; xa = s x A^T computed from the same x tiles, kept on chip."""
    # TODO: as lora_epilogue_kernel, but compute xa in the same K loop: also load the A^T tile
    #       [BK, BLOCK_R] and xa = dot(x, a, xa, INPUT_PRECISION) with the SAME x tile. After the loop: xa = where(r < R,
    #       xa * scale, 0) (Inf * 0 in the padding would be NaN), round it to x's dtype, one more dot with
    #       B^T, store y; if STORE_XA and pid_n == 0, store xa (masked rows < M, r < R).
    pass


# ------------------------------------------------------------------------------ autotuning
# Few on purpose: each config is a compile on the first call of every (M, N, K, r). The 128 x 256
# tile halves the recomputed xa (r / BLOCK_N); the 64-wide ones give small layers enough programs.
AUTOTUNE_CONFIGS = [
    _config(128, 128, 64, 3, 8),
    _config(128, 256, 64, 3, 8),
    _config(128, 64, 64, 4, 4),
    _config(64, 128, 64, 4, 4),
]
# When none fits (fp32 with a large r; a T4's 64 KB of shared memory): the first of these that does.
FALLBACK_CONFIGS = [_config(64, 64, 32, 2, 4), _config(32, 32, 32, 1, 4)]
# fp64 multiplies by broadcast FMAs (course/tl_dot.py): an (M, K, N) tile of products in registers.
FP64_CONFIG = _config(16, 16, 16, 1, 4)
SIM_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}  # the interpreter cannot time configs
SMALL_PROBLEM = 256 * 256


def _shared_memory_bytes(config, itemsize: int, block_r: int) -> int:
    kw = config.kwargs
    return config.num_stages * (kw["BLOCK_M"] + kw["BLOCK_N"] + block_r) * kw["BLOCK_K"] * itemsize


def _shared_memory_limit() -> int:
    if not runtime.on_gpu():
        return 1 << 30
    props = torch.cuda.get_device_properties(runtime.DEVICE)
    return int(getattr(props, "shared_memory_per_block_optin", 0) or 232448)


def _prune_configs(configs, named_args, **kwargs):
    # Drop tiles whose pipeline buffers overflow shared memory (fp32/fp64 tests, a T4's 64 KB);
    # if none fits, one small single-stage tile. For a small output, only the smallest tile.
    itemsize = named_args["x_ptr"].element_size()
    if named_args["x_ptr"].dtype == torch.float64:
        return [FP64_CONFIG]
    block_r = kwargs.get("BLOCK_R", 16)
    limit = _shared_memory_limit()
    fitting = [c for c in configs if _shared_memory_bytes(c, itemsize, block_r) <= limit]
    if not fitting:
        small = [c for c in FALLBACK_CONFIGS if _shared_memory_bytes(c, itemsize, block_r) <= limit]
        return small[:1] or FALLBACK_CONFIGS[-1:]
    if named_args["M"] * named_args["N"] <= SMALL_PROBLEM:
        return [min(fitting, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])]
    return fitting


_PRUNE = {"early_config_prune": _prune_configs}
lora_fused_autotuned = triton.autotune(configs=AUTOTUNE_CONFIGS, key=["M", "N", "K", "R", "STORE_XA"],
                                       prune_configs_by=_PRUNE)(lora_fused_kernel)
lora_epilogue_autotuned = triton.autotune(configs=AUTOTUNE_CONFIGS, key=["M", "N", "K", "R"],
                                          prune_configs_by=_PRUNE)(lora_epilogue_kernel)


# ------------------------------------------------------------------------------- launchers
def _acc_dtype(dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def _precision(dtype):
    # fp32/fp64: exact products (no TF32), so tests can hold the kernel to fp32 error bounds.
    return "ieee" if dtype in (torch.float32, torch.float64) else "tf32"


def _block_r(rank: int) -> int:
    return max(16, triton.next_power_of_2(rank))  # tl.dot needs every dimension >= 16


def _check_int32_span(t, name):
    if t.numel() and sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride())) > INT32_MAX:
        raise ValueError(f"{name} spans more than 2^31 elements: the kernels' offsets are int32")


def _check_base(x2, weight):
    """x2 (M, K) and weight (N, K): types, device, shapes."""
    validate.tensor(x2, "x", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.tensor(weight, "weight", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.same_dtype(x=x2, weight=weight)
    if x2.shape[1] != weight.shape[1]:
        raise ValueError(f"x's last dimension ({x2.shape[1]}) must equal weight's in_features "
                         f"(weight is {tuple(weight.shape)}, out x in)")
    _check_int32_span(x2, "x")
    _check_int32_span(weight, "weight")


def _check_rank(rank):
    if not 1 <= rank <= MAX_RANK:
        raise ValueError(f"the rank r must be in [1, {MAX_RANK}], got {rank}")


def _check_lora_b(lora_b, x2, weight, rank):
    validate.tensor(lora_b, "lora_b", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.same_dtype(x=x2, lora_b=lora_b)
    if tuple(lora_b.shape) != (weight.shape[0], rank):
        raise ValueError(f"lora_b must be (out_features, r) = {(weight.shape[0], rank)}; got {tuple(lora_b.shape)}")
    _check_int32_span(lora_b, "lora_b")


def _check_operands(x2, weight, lora_a, lora_b):
    """x2 (M, K), weight (N, K), lora_a (r, K), lora_b (N, r), one dtype, on the kernels' device."""
    _check_base(x2, weight)
    validate.tensor(lora_a, "lora_a", dtypes=DTYPES, ndim=2, contiguous=False)
    validate.same_dtype(x=x2, lora_a=lora_a)
    if lora_a.shape[1] != weight.shape[1]:
        raise ValueError(f"lora_a must be (r, in_features) = (r, {weight.shape[1]}); got {tuple(lora_a.shape)}")
    _check_rank(lora_a.shape[0])
    _check_int32_span(lora_a, "lora_a")
    _check_lora_b(lora_b, x2, weight, lora_a.shape[0])


def _check_scale(scale) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a Python number (alpha / r), got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def _output(out, shape, like, name):
    if out is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    validate.tensor(out, name, dtypes=(like.dtype,), ndim=2, contiguous=False)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(out.shape)}; expected {tuple(shape)}")
    _check_int32_span(out, name)  # the stores' offsets are int32 too
    return out


def _fused(p, q, u, v, scale, out, xa_out, store_xa):
    """out = p q^T + (s p u^T) v^T, and xa_out = s p u^T: the fused kernel on any strides.

    Forward: (p, q, u, v) = (x, W, A, B). Backward dx: (dY, W^T, B^T, A^T), xa_out = s dY B.
    """
    # TODO: launch lora_fused_kernel (autotuned on a GPU, SIM_CONFIG in the interpreter) over
    #       cdiv(M, BM) * cdiv(N, BN) programs; pass every stride (the backward passes transposed views);
    #       return (out, xa_out). Nothing to launch when M or N is 0.
    raise NotImplementedError("not implemented yet: _fused (week5 exercise)")


def _epilogue(x2, weight, xa, lora_b, out):
    # TODO: as _fused, for lora_epilogue_kernel (no A, no xa store).
    raise NotImplementedError("not implemented yet: _epilogue (week5 exercise)")


def lora_forward(x2, weight, lora_a, lora_b, scale, *, out=None, xa_out=None, store_xa=True):
    """(y, xa): y = x W^T + s (x A^T) B^T by the fused kernel, xa = s x A^T (None if not stored).

    x2 (M, K), weight (N, K), lora_a (r, K), lora_b (N, r), one dtype; no autograd (see `lora_linear`).
    """
    # TODO: _check_operands, _check_scale, allocate (or check) out (M, N) and xa_out (M, r)
    #       with _output, then _fused(..., store_xa).
    raise NotImplementedError("not implemented yet: lora_forward (week5 exercise)")


def lora_epilogue(x2, weight, xa, lora_b, *, out=None):
    """y = x W^T + xa B^T, xa (M, r) given (already scaled): the two-pass kernel's GEMM."""
    # TODO: check x2/weight (_check_base), xa (M, r) and lora_b (_check_lora_b); _epilogue.
    raise NotImplementedError("not implemented yet: lora_epilogue (week5 exercise)")


def lora_backward(dy, x_in, xa, weight, lora_a, lora_b, scale, *, needs_dx=True, fused_dx=True):
    """(dx, dx_in, dA, dB) for y = x W^T + (s x_in A^T) B^T, given dy and xa = s x_in A^T.

    fused_dx (x_in is x): dx = dY W + G A in one fused kernel, G = s dY B computed on chip;
    dx_in is None. Otherwise (x_in = dropout(x)): dx = dY W and dx_in = G A, torch matmuls.
    """
    # TODO: fused_dx: dx, g = _fused(dy, W.t(), B.t(), A.t(), scale, ...) (g = s dY B);
    #       otherwise g = s dY B, dx = dY W, dx_in = g A with torch. Then dA = g^T x_in, dB = dY^T xa.
    raise NotImplementedError("not implemented yet: lora_backward (week5 exercise)")


class LoRALinearFunction(torch.autograd.Function):
    """y = x W^T + s (x_in A^T) B^T with W frozen: forward fused, backward as `lora_backward`."""

    @staticmethod
    def forward(ctx, x2, weight, lora_a, lora_b, scale, x_in):
        # TODO: x_in None: y, xa = lora_forward(...); else xa = s x_in A^T (torch) and
        #       y = lora_epilogue(...). Save (x2 or x_in, xa, weight, lora_a, lora_b) and the scale.
        raise NotImplementedError("not implemented yet: LoRALinearFunction.forward (week5 exercise)")

    @staticmethod
    def backward(ctx, dy):
        # TODO: lora_backward(dy.contiguous(), ...); return one gradient per forward input
        #       (None for weight, scale and whatever does not need one).
        raise NotImplementedError("not implemented yet: LoRALinearFunction.backward (week5 exercise)")


def _prepare(x, weight, lora_a, lora_b, scale, adapter_input):
    validate.tensor(x, "x", dtypes=DTYPES, contiguous=False)
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension (..., in_features)")
    if weight.requires_grad:
        raise ValueError("weight requires grad, but LoRA trains only lora_a and lora_b: freeze the "
                         "base weight with weight.requires_grad_(False)")
    x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # not -1: x may be empty
    _check_operands(x2, weight, lora_a, lora_b)
    x_in = None
    if adapter_input is not None:
        validate.tensor(adapter_input, "adapter_input", dtypes=(x.dtype,), contiguous=False)
        if adapter_input.shape != x.shape:
            raise ValueError(f"adapter_input must have x's shape {tuple(x.shape)}, got {tuple(adapter_input.shape)}")
        x_in = adapter_input.reshape(x2.shape)
    return x2, x_in, _check_scale(scale)


def lora_linear(x, weight, lora_a, lora_b, scale, *, adapter_input=None):
    """x W^T + scale (x A^T) B^T with autograd for x, lora_a, lora_b (W frozen); x (..., K).

    adapter_input: what the adapter sees instead of x (dropout(x) in training), same shape as x.
    """
    # TODO: _prepare(...), LoRALinearFunction.apply, reshape to (..., N).
    raise NotImplementedError("not implemented yet: lora_linear (week5 exercise)")


def lora_linear_two_pass(x, weight, lora_a, lora_b, scale):
    """Inference: xa = s x A^T by torch, then one GEMM with xa B^T in its epilogue (no autograd)."""
    # TODO: _prepare, xa = s x A^T by torch, lora_epilogue, reshape.
    raise NotImplementedError("not implemented yet: lora_linear_two_pass (week5 exercise)")


# ------------------------------------------------------------------------- torch references
def lora_linear_torch(x, weight, lora_a, lora_b, scale, *, adapter_input=None):
    """The unfused reference: PEFT's arithmetic, F.linear(x, W) + F.linear(F.linear(x, A), B) * s."""
    x_in = x if adapter_input is None else adapter_input
    return F.linear(x, weight) + F.linear(F.linear(x_in, lora_a), lora_b) * scale


def lora_linear_torch_addmm(x, weight, lora_a, lora_b, scale):
    """Torch's best eager form: the low-rank product added in the second GEMM's epilogue (beta = 1)."""
    x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
    y = torch.addmm(F.linear(x2, weight), x2 @ lora_a.t(), lora_b.t(), alpha=scale)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def merged_weight(weight, lora_a, lora_b, scale):
    """W + s B A, computed in fp32 (fp64 for fp64) and rounded once to W's dtype."""
    # TODO: W + s B A computed in fp32 (fp64 for fp64), rounded once to W's dtype.
    raise NotImplementedError("not implemented yet: merged_weight (week5 exercise)")


# ------------------------------------------------------------------------------- the module
def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a layer computes in: autocast's when it is on for x's device, else x's."""
    if x.is_floating_point() and torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def resolve_kernel(kernel: str) -> str:
    """'auto' -> 'triton' on a GPU, 'torch' in simulation (the interpreter is for checking, not speed)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if kernel == "auto":
        return "triton" if runtime.on_gpu() else "torch"
    return kernel


def _check_hyper(r, alpha, dropout, in_features, out_features):
    if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= MAX_RANK:
        raise ValueError(f"r must be an int in [1, {MAX_RANK}], got {r!r}")
    if r > min(in_features, out_features):
        raise ValueError(f"r = {r} exceeds min(in_features, out_features) = {min(in_features, out_features)}: "
                         "a rank that high is no longer a low-rank update")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0 or not math.isfinite(alpha):
        raise ValueError(f"alpha must be a positive number, got {alpha!r}")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable low-rank update: y = x W^T + b + (alpha/r) drop(x) A^T B^T.

    The base `weight` (and `bias`) keep their names (so a pre-trained state_dict still loads) and
    are frozen; `lora_a` (r, in) starts like nn.Linear's weight, `lora_b` (out, r) at zero.
    Adapters are kept in fp32 when the base is 16-bit (they are what the optimizer updates).
    kernel: "triton" (the fused autograd op), "torch" (the unfused reference) or "auto".
    """

    def __init__(self, in_features: int, out_features: int, r: int = 8, alpha: float = 16.0,
                 dropout: float = 0.0, *, bias: bool = False, kernel: str = "auto", device=None, dtype=None,
                 adapter_dtype=None):
        super().__init__()
        _check_hyper(r, alpha, dropout, in_features, out_features)
        resolve_kernel(kernel)
        self.in_features, self.out_features = in_features, out_features
        self.r, self.alpha, self.scaling = r, float(alpha), float(alpha) / r
        self.dropout, self.kernel, self.merged = float(dropout), kernel, False
        factory = dict(device=device, dtype=dtype)
        self.weight = nn.Parameter(torch.empty(out_features, in_features, **factory), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(out_features, **factory), requires_grad=False) if bias else None
        base_dtype = self.weight.dtype
        if adapter_dtype is None:
            adapter_dtype = torch.float32 if base_dtype in (torch.float16, torch.bfloat16) else base_dtype
        self.lora_a = nn.Parameter(torch.empty(r, in_features, device=device, dtype=adapter_dtype))
        self.lora_b = nn.Parameter(torch.zeros(out_features, r, device=device, dtype=adapter_dtype))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        self.reset_adapters()

    @classmethod
    def from_linear(cls, linear: nn.Linear, r: int = 8, alpha: float = 16.0, dropout: float = 0.0, *,
                    kernel: str = "auto", base_dtype=None) -> "LoRALinear":
        """Wrap an existing nn.Linear: its weight (and bias) become the frozen base (cast to base_dtype)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear needs an nn.Linear, got {type(linear).__name__}")
        with torch.device("meta"):
            module = cls(linear.in_features, linear.out_features, r, alpha, dropout, bias=linear.bias is not None,
                         kernel=kernel)
        dtype = base_dtype or linear.weight.dtype
        device = linear.weight.device
        # A copy, not a view: merge() writes into the weight, which must not change `linear`'s.
        module.weight = nn.Parameter(linear.weight.detach().to(dtype, copy=True), requires_grad=False)
        if linear.bias is not None:
            module.bias = nn.Parameter(linear.bias.detach().to(dtype, copy=True), requires_grad=False)
        adapter_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        module.lora_a = nn.Parameter(torch.empty(r, linear.in_features, device=device, dtype=adapter_dtype))
        module.lora_b = nn.Parameter(torch.zeros(linear.out_features, r, device=device, dtype=adapter_dtype))
        module.reset_adapters()
        return module

    def reset_adapters(self) -> None:
        """A like nn.Linear's weight (uniform, bound 1/sqrt(in)), B = 0: the layer equals its base."""
        with torch.no_grad():
            nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
            self.lora_b.zero_()

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, r={self.r}, "
                f"alpha={self.alpha:g}, dropout={self.dropout:g}, kernel={self.kernel!r}, merged={self.merged}")

    def forward(self, x):
        # TODO: merged: plain F.linear (refuse training: RuntimeError "... unmerge() ...").
        #       Else cast x, W, A, B to compute_dtype(x); x_in = dropout(x) when training with dropout > 0;
        #       lora_linear_torch or lora_linear by resolve_kernel(self.kernel); add the bias.
        raise NotImplementedError("not implemented yet: LoRALinear.forward (week5 exercise)")

    @torch.no_grad()
    def merge(self) -> None:
        """Fold s B A into weight: inference then runs one plain F.linear."""
        # TODO: RuntimeError('already merged') if merged; weight <- merged_weight(...); merged = True.
        raise NotImplementedError("not implemented yet: LoRALinear.merge (week5 exercise)")

    @torch.no_grad()
    def unmerge(self) -> None:
        """Take s B A out of weight again (exact up to one rounding of W's dtype)."""
        # TODO: RuntimeError('not merged') if not merged; weight <- merged_weight(..., -scaling).
        raise NotImplementedError("not implemented yet: LoRALinear.unmerge (week5 exercise)")


# ----------------------------------------------------------------------------- whole models
def _check_targets(targets):
    if isinstance(targets, str) or not targets or not all(isinstance(t, str) for t in targets):
        raise ValueError(f"targets must be a non-empty tuple of module names like {TARGETS}, got {targets!r}")


def replace_linears(model: nn.Module, targets, make) -> list[str]:
    """Replace every nn.Linear whose attribute name is in `targets` by make(linear); return their paths."""
    _check_targets(targets)
    replaced, names = [], set()
    for path, module in list(model.named_modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                names.add(name)
                if name in targets:
                    setattr(module, name, make(child))
                    replaced.append(f"{path}.{name}" if path else name)
    missing = [t for t in targets if t not in {p.rsplit(".", 1)[-1] for p in replaced}]
    if missing:
        raise ValueError(f"no nn.Linear named {missing} in the model; its nn.Linear layers are named "
                         f"{sorted(names)}")
    return replaced


def freeze_all_but(model: nn.Module, predicate) -> None:
    for name, p in model.named_parameters():
        p.requires_grad_(bool(predicate(name)))


def is_adapter(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ("lora_a", "lora_b")


def apply_lora(model: nn.Module, targets=TARGETS, r: int = 8, alpha: float = 16.0, dropout: float = 0.0, *,
               kernel: str = "auto", base_dtype=None) -> nn.Module:
    """Swap the model's nn.Linear layers named in `targets` for LoRALinear and freeze everything else.

    In place; returns the model. base_dtype (e.g. torch.bfloat16) casts the frozen base weights of
    the swapped layers: a frozen weight needs no fp32 master copy.
    """
    # TODO: resolve_kernel(kernel); replace_linears(model, targets, LoRALinear.from_linear...);
    #       freeze_all_but(model, is_adapter); return model.
    raise NotImplementedError("not implemented yet: apply_lora (week5 exercise)")


def adapter_modules(model: nn.Module):
    return [m for m in model.modules() if isinstance(m, LoRALinear)]


def merge_lora(model: nn.Module) -> nn.Module:
    for module in adapter_modules(model):
        module.merge()
    return model


def unmerge_lora(model: nn.Module) -> nn.Module:
    for module in adapter_modules(model):
        module.unmerge()
    return model


def lora_state_dict(model: nn.Module) -> dict:
    """Only the adapters: what a LoRA fine-tune has to save (KBs to MBs, not the model)."""
    return {k: v for k, v in model.state_dict().items() if is_adapter(k)}


def count_trainable(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def adapter_parameter_count(in_features: int, out_features: int, r: int) -> int:
    return r * (in_features + out_features)


# ---------------------------------------------------------------------------------- benchmarks
# The 124M model's layers at 4096 tokens (8 x 512): qkv, proj, up (gate and up stacked), down.
LORA_SHAPES = [(4096, 768, 2304), (4096, 768, 768), (4096, 768, 4096), (4096, 2048, 768)]
RANK, ALPHA = 16, 32.0


def _itemsize(dtype):
    return torch.empty((), dtype=dtype).element_size()


def _inputs(size, train=True):
    m, k, n, r, dtype = size
    dev = runtime.DEVICE
    x = random_tensor((m, k), dtype, dev).requires_grad_(train)
    w = random_tensor((n, k), dtype, dev, scale=k ** -0.5)
    a = random_tensor((r, k), dtype, dev, scale=k ** -0.5).requires_grad_(train)
    b = random_tensor((n, r), dtype, dev, scale=r ** -0.5).requires_grad_(train)  # trained B: not zero
    if train:
        return x, w, a, b, random_tensor((m, n), dtype, dev)
    return x, w, a, b, merged_weight(w, a, b, ALPHA / r)


def _train_step(fn):
    def run(x, w, a, b, dy):
        y = fn(x, w, a, b, ALPHA / a.shape[0])
        return torch.autograd.grad(y, (x, a, b), dy)
    return run


def _infer(fn):
    def run(x, w, a, b, w_merged):
        with torch.no_grad():
            return fn(x, w, a, b, ALPHA / a.shape[0])
    return run


_compiled = {}


def _compiled_torch(x, w, a, b, scale):
    if "lora" not in _compiled:
        _compiled["lora"] = torch.compile(lora_linear_torch)
    return _compiled["lora"](x, w, a, b, scale)


def _label(size):
    m, k, n, r, dtype = size
    return f"M={m} K={k} N={n} r={r} {str(dtype).replace('torch.', '')}"


def _train_bytes(s):
    m, k, n, r, dtype = s
    # read x, W, A, B, dY; write y, dx, dA, dB (each once)
    return (2 * m * k + n * k + 2 * r * k + 2 * n * r + 2 * m * n) * _itemsize(dtype)


def _infer_bytes(s):
    m, k, n, r, dtype = s
    return (m * k + n * k + r * k + n * r + m * n) * _itemsize(dtype)


SIZES = [(m, k, n, RANK, torch.bfloat16) for m, k, n in LORA_SHAPES]
SIM_SIZES = [(40, 48, 33, 4, torch.float32)]
BENCHMARKS = [
    Benchmark(
        name="lora_linear_week5",
        title="LoRA linear, training step (forward + backward for x, A, B; W frozen), r=16",
        sizes=SIZES,
        sim_sizes=SIM_SIZES,
        size_label=_label,
        make_inputs=_inputs,
        variants={
            "torch": _train_step(lora_linear_torch),
            "torch_addmm": _train_step(lora_linear_torch_addmm),
            "torch_compile": _train_step(_compiled_torch),
            "triton": _train_step(lora_linear),
        },
        gpu_only=("torch_compile",),
        headline=("triton",),
        sources={"triton": [lora_fused_kernel, _fused, lora_forward, lora_backward, LoRALinearFunction.forward,
                            LoRALinearFunction.backward, lora_linear]},
        bytes=_train_bytes,
        flops=lambda s: 4 * s[0] * s[1] * s[2] + 6 * s[0] * s[3] * (s[1] + s[2]),
        compute_dtype=torch.bfloat16,
        notes="torch = PEFT's unfused arithmetic under autograd; flops = 4MNK + 6Mr(K+N) (no dW); bytes "
              "= x, W, A, B, dY read and y, dx, dA, dB written once",
    ),
    Benchmark(
        name="lora_linear_infer_week5",
        title="LoRA linear, inference forward, r=16: unfused, merged weight, two-pass and fused kernels",
        sizes=SIZES,
        sim_sizes=SIM_SIZES,
        size_label=_label,
        make_inputs=lambda s: _inputs(s, train=False),
        variants={
            "torch": _infer(lora_linear_torch),
            "torch_addmm": _infer(lora_linear_torch_addmm),
            "torch_merged": lambda x, w, a, b, wm: F.linear(x, wm),
            "triton_two_pass": _infer(lora_linear_two_pass),
            "triton": _infer(lora_linear),
        },
        headline=("triton", "torch_merged"),
        sources={"triton": [lora_fused_kernel, _fused, lora_forward, LoRALinearFunction.forward, lora_linear],
                 "triton_two_pass": [lora_epilogue_kernel, _epilogue, lora_epilogue, lora_linear_two_pass]},
        bytes=_infer_bytes,
        flops=lambda s: 2 * s[0] * s[1] * s[2] + 2 * s[0] * s[3] * (s[1] + s[2]),
        compute_dtype=torch.bfloat16,
        notes="torch_merged = F.linear with W + sBA precomputed (one adapter, merged: the floor); "
              "flops = 2MNK + 2Mr(K+N)",
    ),
]


# --------------------------------------------------------------------------------- the sweep
def sweep(shapes=LORA_SHAPES, rank: int = RANK) -> None:
    """Time every autotune config of the fused kernel (forward, and dx in the backward's layout)."""
    from course import bench

    if not runtime.on_gpu():
        raise SystemExit("--sweep times kernels on the GPU; this machine runs the Triton interpreter")
    started = time.perf_counter()
    dtype = torch.bfloat16
    print(f"fused LoRA kernel, bf16, r={rank}; TFLOP/s of the base GEMM (2MNK) over the time")
    for m, k, n in shapes:
        x, w, a, b, dy = _inputs((m, k, n, rank, dtype))
        x, a, b = x.detach(), a.detach(), b.detach()
        scale = ALPHA / rank
        cases = {"forward": (x, w, a, b, n), "backward dx": (dy, w.t(), b.t(), a.t(), k)}
        for what, (p, q, u, v, n_out) in cases.items():
            flops = 2 * m * n * k

            def rate(fn):
                t = bench.time_gpu(fn, [()], warmup_ms=5, rep_ms=40)
                return t.median_ms, flops / (t.median_ms * 1e-3) / 1e12

            ms, tf = rate(lambda: p @ q.t())
            print(f"\nM={m} K={k} N={n} {what}: torch matmul (no adapter) {ms:.4f} ms {tf:6.1f} TFLOP/s")
            out = torch.empty((m, n_out), dtype=dtype, device=p.device)
            xa = torch.empty((m, rank), dtype=dtype, device=p.device)
            for config in AUTOTUNE_CONFIGS:
                kw = config.kwargs
                grid = (triton.cdiv(m, kw["BLOCK_M"]) * triton.cdiv(n_out, kw["BLOCK_N"]),)
                args = (p, q, u, v, out, xa, m, n_out, p.shape[1], rank, scale, p.stride(0), p.stride(1),
                        q.stride(0), q.stride(1), u.stride(0), u.stride(1), v.stride(0), v.stride(1),
                        out.stride(0), out.stride(1), xa.stride(0), xa.stride(1))

                def launch():
                    lora_fused_kernel[grid](*args, STORE_XA=True, ACC_DTYPE=tl.float32, INPUT_PRECISION="tf32",
                                            BLOCK_R=_block_r(rank), num_warps=config.num_warps,
                                            num_stages=config.num_stages, **kw)
                try:
                    ms, tf = rate(launch)
                except Exception as error:  # a config that does not compile or fit: say so, go on
                    print(f"  {kw} failed: {str(error).splitlines()[0][:70]}")
                    continue
                print(f"  BM={kw['BLOCK_M']:<3} BN={kw['BLOCK_N']:<3} BK={kw['BLOCK_K']} stages={config.num_stages} "
                      f"warps={config.num_warps}: {ms:.4f} ms {tf:6.1f} TFLOP/s")
    print(f"\nswept in {time.perf_counter() - started:.0f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", action="store_true", help="time the fused kernel's tile configs (GPU)")
    args = parser.parse_args(argv)
    if not args.sweep:
        parser.print_help()
        return 2
    sweep()
    return 0


if __name__ == "__main__":
    sys.exit(main())
