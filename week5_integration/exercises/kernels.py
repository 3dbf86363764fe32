"""Exercise: wire the course's kernels into the week-5 model. Same names as week5_integration/kernels.py.

Check your work with `pytest tests/week5/test_kernels.py --impl=exercises` (then test_train.py and
test_profile_model.py, which use COURSE_OPS too). Each adapter below takes the arguments of one
field of `model.Ops` and calls a kernel from week 3 or 4; read the solution module's docstring for
the table of which kernel replaces which torch op. The plumbing (fallback counting, the swap plan)
is given.
"""
from __future__ import annotations

import collections
import dataclasses

import torch
import torch.nn.functional as F

from course import runtime  # noqa: F401  before triton: chooses the GPU or the Triton interpreter
from week3_triton_kernels import fused_elementwise
from week4_triton_dl import cross_entropy, fused_mlp, layernorm, rmsnorm, swiglu
from week4_triton_dl import rope as rope_module
from week5_integration import model as m

try:  # written beside this lesson: used if present, else the op is torch's and says so
    from week4_triton_dl.flash_attention import HEAD_DIMS as FLASH_HEAD_DIMS
    from week4_triton_dl.flash_attention import flash_attention
    HAS_FLASH_ATTENTION, FLASH_IMPORT_ERROR = True, None
except ImportError as error:  # pragma: no cover - depends on the week-4 files present
    flash_attention, FLASH_HEAD_DIMS = None, ()
    HAS_FLASH_ATTENTION, FLASH_IMPORT_ERROR = False, f"{type(error).__name__}: {error}"

# (op, reason) -> number of calls the course op handed to torch.
FALLBACKS: collections.Counter = collections.Counter()


def reset_fallbacks() -> None:
    FALLBACKS.clear()


def _fallback(op: str, reason: str) -> None:
    FALLBACKS[(op, reason)] += 1


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype autocast casts matmul inputs to on this device, or None when autocast is off."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return None


# --- the adapters: Ops signatures -> course kernels -----------------------------------------

def course_norm(x, weight, bias, eps: float, kind: str):
    """Triton RMSNorm / LayerNorm (week 4), forward and backward; x (..., d), weight (d,)."""
    # TODO: kind "rmsnorm" -> rmsnorm.rms_norm(x, (d,), weight, eps); "layernorm" -> layernorm.layer_norm
    # (with bias); any other kind: ValueError naming the allowed kinds (m.NORMS).
    raise NotImplementedError("not implemented yet: course_norm (week5 exercise)")


def course_rope(q, k, cos, sin):
    """Triton RoPE on (B, H, T, Dh) q and k; cos/sin (T, Dh/2) fp32 are the rows of these positions."""
    # TODO: rope_module.apply_rope with position offset 0 and layout "bhsd".
    raise NotImplementedError("not implemented yet: course_rope (week5 exercise)")


def _attention_fallback_reason(q, k) -> str | None:
    if not HAS_FLASH_ATTENTION:
        return f"week4_triton_dl.flash_attention is not importable ({FLASH_IMPORT_ERROR})"
    if q.shape[2] != k.shape[2]:
        return ("Tq != Tk (KV-cache prefill or decode): the kernel's causal mask is top-left aligned, "
                "the model's queries are the LAST Tq positions")
    if q.shape[-1] not in FLASH_HEAD_DIMS:
        return f"head dim {q.shape[-1]} is not one the kernel supports {tuple(FLASH_HEAD_DIMS)}"
    return None


def course_attention(q, k, v, causal: bool):
    """FlashAttention-2 in Triton (week 4) when Tq == Tk; torch's SDPA otherwise (counted)."""
    # TODO: reason = _attention_fallback_reason(q, k); if there is one, _fallback("attention", reason)
    # and return m.torch_attention(q, k, v, causal); else flash_attention(q, k, v, causal=causal).
    raise NotImplementedError("not implemented yet: course_attention (week5 exercise)")


def course_swiglu(h):
    """silu(gate) * up, forward and backward one Triton kernel each (week 4)."""
    # TODO: week 4's swiglu.swiglu_packed (h = [gate | up]).
    raise NotImplementedError("not implemented yet: course_swiglu (week5 exercise)")


class GeluTanhFunction(torch.autograd.Function):
    """gelu_tanh(x): week 3's bias_gelu kernel with a zero bias forward, week 4's act_backward backward."""

    @staticmethod
    def forward(ctx, x):
        # TODO: save x; return week 3's fused_elementwise.bias_gelu(x, zero bias of d elements, "tanh").
        raise NotImplementedError("not implemented yet: GeluTanhFunction.forward (week5 exercise)")

    @staticmethod
    def backward(ctx, dy):
        # TODO: week 4's fused_mlp.act_backward(dy.contiguous(), x, "gelu_tanh").
        raise NotImplementedError("not implemented yet: GeluTanhFunction.backward (week5 exercise)")


def course_gelu(x):
    """gelu(x, approximate="tanh"), forward and backward one Triton kernel each."""
    # TODO: GeluTanhFunction.apply on a contiguous x.
    raise NotImplementedError("not implemented yet: course_gelu (week5 exercise)")


def course_linear_cross_entropy(hidden, weight, targets, ignore_index: int = -100):
    """mean CE of hidden @ weight^T, chunked: the (N, V) logits never exist (week 4)."""
    # TODO: under autocast (autocast_dtype(hidden.device) is not None) cast hidden and weight to that
    # dtype, as F.linear would; call cross_entropy.fused_linear_cross_entropy with autocast disabled;
    # return the loss as float32.
    raise NotImplementedError("not implemented yet: course_linear_cross_entropy (week5 exercise)")


def course_mlp(x, w_up, w_down, kind: str):
    """The whole MLP with week 4's fused kernels: (x, up weight (k h, d), down weight (d, h)) -> y.

    SwiGLU: `fused_mlp.swiglu_mlp`, one dual-GEMM kernel for gate and up with silu(g) * u in
    its epilogue (the model stores W_up as [W_gate; W_up], the layout that kernel takes).
    GELU: the GEMMs stay torch's and the activation is `course_gelu`.
    Not wired into `COURSE_OPS`: model.Ops has no `mlp` field yet (the MLP module calls the
    up and down projections itself). `swap_plan` picks it up once the field exists.
    """
    # TODO: "gelu": F.linear, course_gelu, F.linear. "swiglu": fused_mlp.swiglu_mlp(x, w_up, w_down)
    # (cast x and the weights to the autocast dtype first, as in course_linear_cross_entropy);
    # any other kind: ValueError.
    raise NotImplementedError("not implemented yet: course_mlp (week5 exercise)")


OPS_FIELDS = tuple(f.name for f in dataclasses.fields(m.Ops) if f.name != "name")
HAS_MLP_OP = "mlp" in OPS_FIELDS  # see course_mlp

COURSE_OPS = m.Ops("course", norm=course_norm, rope=course_rope, attention=course_attention,
                   swiglu=course_swiglu, gelu=course_gelu, linear_cross_entropy=course_linear_cross_entropy,
                   **({"mlp": course_mlp} if HAS_MLP_OP else {}))
COURSE_FUNCTIONS = {"norm": course_norm, "rope": course_rope, "attention": course_attention,
                    "swiglu": course_swiglu, "gelu": course_gelu,
                    "linear_cross_entropy": course_linear_cross_entropy, "mlp": course_mlp}


# --- which swaps a model uses, one at a time ----------------------------------------------------

def used_fields(cfg: m.GPTConfig | None = None) -> tuple[str, ...]:
    """The Ops fields a GPT with this config calls (all fields when cfg is None)."""
    if cfg is None:
        return OPS_FIELDS
    used = {"norm", "attention", "linear_cross_entropy", "mlp", cfg.mlp}  # cfg.mlp: "swiglu" or "gelu"
    if cfg.pos == "rope":
        used.add("rope")
    return tuple(f for f in OPS_FIELDS if f in used)


def swap_plan(cfg: m.GPTConfig | None = None, course: m.Ops | None = None) -> list[m.Ops]:
    """[torch twin, torch twin + one course op (one per field cfg uses), all course ops].

    Names: "torch", "+norm", "+rope", ..., "course". `course` defaults to COURSE_OPS.
    """
    course = COURSE_OPS if course is None else course
    if not isinstance(course, m.Ops):
        raise TypeError(f"course must be an Ops record, got {type(course).__name__}")
    singles = [dataclasses.replace(m.TORCH_OPS, name=f"+{field}", **{field: getattr(course, field)})
               for field in used_fields(cfg)]
    return [m.TORCH_OPS, *singles, dataclasses.replace(course, name="course")]


def describe(ops: m.Ops) -> dict:
    """{field: "module.function"} of an Ops record: which code each hot spot runs."""
    return {f: (f"{getattr(ops, f).__module__}.{getattr(ops, f).__qualname__}" if getattr(ops, f) is not None
                else "none (the model's own code)") for f in OPS_FIELDS}
