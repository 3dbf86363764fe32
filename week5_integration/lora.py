"""LoRA: fine-tune a frozen model through low-rank adapters, and one fused Triton kernel for the layer.

The kernels and their launchers: lora_kernels.py. Its benchmarks, tile sweep and command line:
lora_bench.py (`python -m week5_integration.lora_bench --sweep`).

Full fine-tuning updates every weight W (N x K) of a pre-trained model. LoRA (Hu et al. 2021,
"LoRA: Low-Rank Adaptation of Large Language Models", arXiv:2106.09685) freezes W and learns the
update as a product of two thin matrices, W + (alpha / r) B A, with A (r x K), B (N x r), r << K, N:

    y = x W^T + s (x A^T) B^T,        s = alpha / r

A starts random (here as `nn.Linear` initializes its weight), B starts at zero, so training starts
exactly at the pre-trained model. Only A and B get gradients and optimizer states: for the 124M
model's qkv projection (768 -> 2304) at r = 16 that is 16 x (768 + 2304) = 49k parameters
instead of 1.77M (2.8%). After training, `merge()` folds s B A into W: inference then costs
nothing extra (`unmerge()` takes it out again, to switch adapters).

What the module teaches, in order:
* `lora_linear_torch`: the unfused reference, as adapter libraries (PEFT) write it:
  F.linear(x, W) + F.linear(F.linear(x, A), B) * s. Five kernels in eager mode.
* The two kernels (lora_kernels.py): `lora_epilogue_kernel` ("two-pass": xa = s x A^T first, then
  ONE GEMM adds xa B^T in its epilogue) and `lora_fused_kernel` (xa computed inside the GEMM's K
  loop from the x tile already loaded: x read once); their cost model is there.
* `LoRALinearFunction`: the autograd op. Its backward runs the fused kernel again for dx (with
  G = s dY B computed on chip) and two thin torch matmuls for dA and dB; no dW: W is frozen, so a
  LoRA step skips one of the three big GEMMs of a training step.
* `LoRALinear` (an nn.Module with merge/unmerge), `apply_lora` (swap a model's nn.Linear layers).

Dropout on the adapter input (the LoRA paper's regularizer) needs dropout(x) for A but x for W:
the two-pass kernel then takes xa = s dropout(x) A^T from a torch matmul (x read twice).
Dtypes: fp16 and bf16 (tensor cores), fp32 (exact fp32 products, `input_precision="ieee"`) and
fp64 (for gradcheck); accumulation in fp32 (fp64 for fp64).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from course import ops, runtime, validate

# The kernels and their launchers, from the module beside this one (a stub's own sibling, in
# exercises/, for a learner).
from .lora_kernels import (DTYPES, MAX_RANK, check_operands, check_scale, launch_epilogue, launch_fused,
                           lora_backward, lora_epilogue, lora_epilogue_kernel, lora_forward, lora_fused_kernel)

TARGETS = ("qkv", "proj", "up", "down")  # the week-5 GPT's nn.Linear layers (head is tied to tok)
KERNELS = ("auto", "triton", "torch")
NAMESPACE = ops.namespace(__name__)  # "course" (solutions) or "course_exercises" (your stub)


class LoRALinearFunction(torch.autograd.Function):
    """y = x W^T + s (x_in A^T) B^T with W frozen: forward fused, backward as `lora_backward`."""

    @staticmethod
    def forward(ctx, x2, weight, lora_a, lora_b, scale, x_in):
        if x_in is None:
            y, xa = lora_forward(x2, weight, lora_a, lora_b, scale)
        else:  # dropout: the adapter sees another input, so xa comes from a torch matmul
            xa = (x_in @ lora_a.t()) * scale
            y = lora_epilogue(x2, weight, xa, lora_b)
        ctx.save_for_backward(x2 if x_in is None else x_in, xa, weight, lora_a, lora_b)
        ctx.scale, ctx.dropout = scale, x_in is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x_in, xa, weight, lora_a, lora_b = ctx.saved_tensors
        needs_dx = ctx.needs_input_grad[0] or ctx.needs_input_grad[5]
        dx, dx_in, d_a, d_b = lora_backward(dy.contiguous(), x_in, xa, weight, lora_a, lora_b, ctx.scale,
                                            needs_dx=needs_dx, fused_dx=not ctx.dropout)
        return (dx if ctx.needs_input_grad[0] else None, None,
                d_a if ctx.needs_input_grad[2] else None, d_b if ctx.needs_input_grad[3] else None,
                None, dx_in if ctx.needs_input_grad[5] else None)


# ------------------------------------------------------------------- the op torch.compile sees
# The same launchers as LoRALinearFunction, registered as ops (week 4's custom_ops.py is the
# lesson): under torch.compile Dynamo records one node for the forward and one for the backward,
# and Inductor compiles the model's torch code around them. Dropout (an adapter input other than
# x) stays on the eager path: compiled, that layer runs its torch form.
@torch.library.custom_op(f"{NAMESPACE}::lora_linear", mutates_args=())
def lora_linear_op(x2: torch.Tensor, weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
                   scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, xa) of the fused forward: y = x W^T + s (x A^T) B^T, xa = s x A^T (saved for the backward)."""
    return lora_forward(x2, weight, lora_a, lora_b, scale)


@lora_linear_op.register_fake
def _lora_linear_fake(x2, weight, lora_a, lora_b, scale):
    return x2.new_empty((x2.shape[0], weight.shape[0])), x2.new_empty((x2.shape[0], lora_a.shape[0]))


@torch.library.custom_op(f"{NAMESPACE}::lora_linear_backward", mutates_args=())
def lora_linear_backward_op(dy: torch.Tensor, x2: torch.Tensor, xa: torch.Tensor, weight: torch.Tensor,
                            lora_a: torch.Tensor, lora_b: torch.Tensor,
                            scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dA, dB), dx from the fused dx kernel (see lora_backward)."""
    dx, _, d_a, d_b = lora_backward(dy.contiguous(), x2, xa, weight, lora_a, lora_b, scale)
    return dx, d_a, d_b


@lora_linear_backward_op.register_fake
def _lora_linear_backward_fake(dy, x2, xa, weight, lora_a, lora_b, scale):
    return x2.new_empty(x2.shape), lora_a.new_empty(lora_a.shape), lora_b.new_empty(lora_b.shape)


def _lora_setup_context(ctx, inputs, output):
    x2, weight, lora_a, lora_b, scale = inputs
    ctx.save_for_backward(x2, output[1], weight, lora_a, lora_b)
    ctx.scale = scale


def _lora_backward_formula(ctx, dy, _dxa):
    x2, xa, weight, lora_a, lora_b = ctx.saved_tensors
    dx, d_a, d_b = lora_linear_backward_op(dy, x2, xa, weight, lora_a, lora_b, ctx.scale)
    return dx, None, d_a, d_b, None


lora_linear_op.register_autograd(_lora_backward_formula, setup_context=_lora_setup_context)


def _prepare(x, weight, lora_a, lora_b, scale, adapter_input):
    validate.tensor(x, "x", dtypes=DTYPES, contiguous=False)
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension (..., in_features)")
    if weight.requires_grad:
        raise ValueError("weight requires grad, but LoRA trains only lora_a and lora_b: freeze the "
                         "base weight with weight.requires_grad_(False)")
    x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # not -1: x may be empty
    check_operands(x2, weight, lora_a, lora_b)
    x_in = None
    if adapter_input is not None:
        validate.tensor(adapter_input, "adapter_input", dtypes=(x.dtype,), contiguous=False)
        if adapter_input.shape != x.shape:
            raise ValueError(f"adapter_input must have x's shape {tuple(x.shape)}, got {tuple(adapter_input.shape)}")
        x_in = adapter_input.reshape(x2.shape)
    return x2, x_in, check_scale(scale)


def lora_linear(x, weight, lora_a, lora_b, scale, *, adapter_input=None):
    """x W^T + scale (x A^T) B^T with autograd for x, lora_a, lora_b (W frozen); x (..., K).

    adapter_input: what the adapter sees instead of x (dropout(x) in training), same shape as x.
    """
    x2, x_in, scale = _prepare(x, weight, lora_a, lora_b, scale, adapter_input)
    if ops.compiling():  # one node per call in the graph (see lora_linear_op)
        if x_in is None:
            y = lora_linear_op(x2, weight, lora_a, lora_b, scale)[0]
        else:  # dropout: the unfused torch form, which Inductor compiles
            y = lora_linear_torch(x2, weight, lora_a, lora_b, scale, adapter_input=x_in)
        return y.reshape(*x.shape[:-1], weight.shape[0])
    y = LoRALinearFunction.apply(x2, weight, lora_a, lora_b, scale, x_in)
    return y.reshape(*x.shape[:-1], weight.shape[0])


def lora_linear_two_pass(x, weight, lora_a, lora_b, scale):
    """Inference: xa = s x A^T by torch, then one GEMM with xa B^T in its epilogue (no autograd)."""
    x2, _, scale = _prepare(x, weight, lora_a, lora_b, scale, None)
    y = lora_epilogue(x2, weight, (x2 @ lora_a.t()) * scale, lora_b)
    return y.reshape(*x.shape[:-1], weight.shape[0])


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
    # BEGIN EXERCISE: W + s B A computed in fp32 (fp64 for fp64), rounded once to W's dtype.
    # HINT: Merging folds the adapter into the base weight for inference; do the arithmetic in a wide type
    #   and round only once, or the tiny s B A update is lost in W's bf16 rounding.
    # HINT: Pick float64 for float64 weights, else float32; delta = (B @ A in the wide type) * scale; add to
    #   W in the wide type; cast back to W's dtype.
    wide = torch.float64 if weight.dtype == torch.float64 else torch.float32
    delta = (lora_b.to(wide) @ lora_a.to(wide)) * scale
    return (weight.to(wide) + delta).to(weight.dtype)
    # END EXERCISE


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


def check_hyper(r, alpha, dropout, in_features, out_features):
    """A LoRA layer's hyperparameters for an in_features -> out_features linear layer (ValueError naming the bad one)."""
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
        check_hyper(r, alpha, dropout, in_features, out_features)
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
        # BEGIN EXERCISE: merged: plain F.linear (refuse training: RuntimeError "... unmerge() ..."). Else
        #   cast x, W, A, B to compute_dtype(x); x_in = dropout(x) when training with dropout > 0;
        #   lora_linear_torch or lora_linear by resolve_kernel(self.kernel); add the bias.
        # HINT: A merged layer is a plain linear (and must not be trained, or the gradient would go to the
        #   merged weight); otherwise compute in one dtype, apply dropout to the adapter's input only, and
        #   dispatch to the torch or Triton path.
        # HINT: Merged: raise RuntimeError when training with grad enabled, else F.linear. Unmerged: dtype =
        #   compute_dtype(x); cast x, W, A, B; x_in = F.dropout(...) only when training with dropout > 0
        #   (else None); resolve_kernel picks lora_linear_torch or lora_linear; add the bias in y's dtype.
        # HINT: `x_in = F.dropout(x, self.dropout, training=True) if self.dropout and self.training else
        #   None` passed as adapter_input.
        if self.merged:
            if self.training and torch.is_grad_enabled():
                raise RuntimeError("this LoRALinear is merged (its update is folded into weight): "
                                   "call unmerge() before training it")
            return F.linear(x, self.weight, self.bias)
        # Everything in the compute dtype (autocast's, or x's): fp32 adapters meet a bf16 base there.
        dtype = compute_dtype(x)
        x = x.to(dtype)
        x_in = F.dropout(x, self.dropout, training=True) if self.dropout and self.training else None
        operands = (x, self.weight.to(dtype), self.lora_a.to(dtype), self.lora_b.to(dtype), self.scaling)
        if resolve_kernel(self.kernel) == "torch":
            y = lora_linear_torch(*operands, adapter_input=x_in)
        else:
            y = lora_linear(*operands, adapter_input=x_in)
        return y if self.bias is None else y + self.bias.to(y.dtype)
        # END EXERCISE

    @torch.no_grad()
    def merge(self) -> None:
        """Fold s B A into weight: inference then runs one plain F.linear."""
        if self.merged:
            raise RuntimeError("already merged")
        self.weight.copy_(merged_weight(self.weight, self.lora_a, self.lora_b, self.scaling))
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Take s B A out of weight again (exact up to one rounding of W's dtype)."""
        if not self.merged:
            raise RuntimeError("not merged")
        self.weight.copy_(merged_weight(self.weight, self.lora_a, self.lora_b, -self.scaling))
        self.merged = False


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
    # BEGIN EXERCISE: resolve_kernel(kernel); replace_linears(model, targets, LoRALinear.from_linear...);
    #   freeze_all_but(model, is_adapter); return model.
    # HINT: Applying LoRA = swap the target nn.Linear layers for LoRALinear, then freeze everything except
    #   the adapters; validate the kernel name first so a typo fails before any swap.
    # HINT: resolve_kernel(kernel); replace_linears with a factory calling LoRALinear.from_linear(lin, r,
    #   alpha, dropout, kernel=..., base_dtype=...); freeze_all_but(model, is_adapter); return the model.
    resolve_kernel(kernel)
    replace_linears(model, targets, lambda lin: LoRALinear.from_linear(lin, r, alpha, dropout, kernel=kernel,
                                                                       base_dtype=base_dtype))
    freeze_all_but(model, is_adapter)
    return model
    # END EXERCISE


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


# ------------------------------------------------------------------------- the code behind each entry
# What `lora_linear` (training, inference) and `lora_linear_two_pass` run, kernels to autograd: the
# benchmarks (lora_bench.py) count its lines beside each variant (`Benchmark.sources`).
LORA_TRAIN_CODE = (lora_fused_kernel, launch_fused, lora_forward, lora_backward, LoRALinearFunction.forward,
                   LoRALinearFunction.backward, lora_linear)
LORA_INFER_CODE = (lora_fused_kernel, launch_fused, lora_forward, LoRALinearFunction.forward, lora_linear)
LORA_TWO_PASS_CODE = (lora_epilogue_kernel, launch_epilogue, lora_epilogue, lora_linear_two_pass)
