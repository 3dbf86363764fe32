"""The course's kernels, wired into the week-5 model: `COURSE_OPS`, and one swap at a time.

`model.GPT` calls its hot operations through an `Ops` record (model.py); `TORCH_OPS` is the
pure-PyTorch twin. This module builds the same record from the kernels written in weeks 3 and 4:

    Ops field              course kernel (module)                         replaces (torch)
    norm                   rmsnorm.rms_norm / layernorm.layer_norm (wk 4)  F.rms_norm / F.layer_norm
    rope                   rope.apply_rope, layout "bhsd" (wk 4)           rotate-half in eager ops
    attention              attention.flash_attention (wk 4)                F.scaled_dot_product_attention
    swiglu                 swiglu.swiglu_packed (wk 4)                     g, u = h.chunk(2, -1); F.silu(g) * u
    gelu                   fused_elementwise.bias_gelu (wk 3) forward,     F.gelu(approximate="tanh")
                           fused_mlp.act_backward (wk 4) backward
    linear_cross_entropy   fused_linear_cross_entropy.                    h @ W^T, then F.cross_entropy
                           fused_linear_cross_entropy (wk 4)

`swap_plan(cfg)` lists the torch twin, then the twin with ONE field swapped for each field the
config uses, then all of them: a benchmark over that list measures what each kernel buys in the
whole model, separately, which is the only honest way to attribute a speed-up (two swaps can
interact: a faster norm may just expose a launch gap).

What the adapters below do beyond calling the kernel, and why:
* autocast. Under `torch.autocast(dtype=bf16)` torch's F.linear casts its inputs to bf16 by
  itself; a custom autograd Function does not. The fused loss therefore casts h and W to the
  autocast dtype explicitly (what F.linear would have done) and runs with autocast off, so its
  chunk matmuls run on bf16 tensor cores, as torch's LM head does. The loss is returned in fp32,
  like torch's `F.cross_entropy(logits.float(), ...)` in the twin.
* fallbacks, counted. The course's attention kernel aligns its causal mask top-left (query i
  sees keys 0..i), which is right when Tq == Tk (training, a prompt without cache). The model's
  KV-cache path calls attention with Tq < Tk, queries aligned with the END of the keys (query i
  is position Tk - Tq + i), and decoding with Tq == 1. For Tq != Tk the course op hands the
  call to torch (SDPA has decode kernels; a 1-row query would waste a 64-row tile here), and
  for head dimensions the kernel does not support (16, 32, 64, 128 only) too. Every such call
  is counted in `FALLBACKS` with its reason, so a benchmark can say "no fallback happened".
* the attention kernel is imported guarded: if `week4_triton_dl.attention` cannot be
  imported, `HAS_FLASH_ATTENTION` is False, the course op is torch's, and every call is counted
  as a fallback with the import error as reason.

Cost model: the swaps change no FLOPs of the model except the loss (the fused linear + CE does
the same 6 N V d matmul FLOPs) and move fewer bytes per layer; `profile_model.group_costs`
counts both per training step.
"""
from __future__ import annotations

import collections
import dataclasses

import torch
import torch.nn.functional as F

from week3_triton_kernels import fused_elementwise
from week4_triton_dl import fused_linear_cross_entropy, fused_mlp, swiglu
from week4_triton_dl.norms import add_rmsnorm, layernorm, rmsnorm
from week4_triton_dl import rope as rope_module
from week5_integration import model as m

try:  # written beside this lesson: used if present, else the op is torch's and says so
    from week4_triton_dl.attention import HEAD_DIMS as FLASH_HEAD_DIMS
    from week4_triton_dl.attention import flash_attention
    HAS_FLASH_ATTENTION, FLASH_IMPORT_ERROR = True, None
except ImportError as error:  # pragma: no cover - depends on the week-4 files present
    flash_attention, FLASH_HEAD_DIMS = None, ()
    HAS_FLASH_ATTENTION, FLASH_IMPORT_ERROR = False, f"{type(error).__name__}: {error}"

# EXERCISE NOTE: Each adapter takes the arguments of one field of `model.Ops` and calls a kernel of week 3 or 4
#   (the solution's docstring has the table of which kernel replaces which torch op); the plumbing (fallback
#   counting, the swap plan) is given. After test_kernels.py, test_train.py and test_profile_model.py run
#   COURSE_OPS too.
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
    # BEGIN EXERCISE: kind "rmsnorm": rmsnorm.rms_norm(x, (d,), weight, eps); "layernorm": layernorm.layer_norm
    #   (with the bias); any other kind: ValueError "kind must be one of ..." (m.NORMS)
    # HINT: An adapter translates the model's Ops signature to the week 4 kernel's: the normalized shape is
    #   the last dimension; only the two known kinds are accepted.
    # HINT: Branch on kind: rmsnorm.rms_norm with the normalized shape (d,) and weight; layernorm.layer_norm
    #   with the bias too; otherwise a ValueError that lists m.NORMS and shows the bad kind.
    if kind == "rmsnorm":
        return rmsnorm.rms_norm(x, (x.shape[-1],), weight, eps)
    if kind == "layernorm":
        return layernorm.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    raise ValueError(f"kind must be one of {m.NORMS}, got {kind!r}")
    # END EXERCISE


def course_add_norm(x, delta, weight, bias, eps: float, kind: str, out_dtype=None):
    """(x + delta, norm(x + delta)): RMSNorm fused with the residual add (week 4's add_rmsnorm), y in
    out_dtype; LayerNorm has no fused kernel: the add, then course_norm."""
    # BEGIN EXERCISE: kind "rmsnorm": week 4's add_rmsnorm.add_rms_norm(x, delta, weight, eps, out_dtype) (one
    #   kernel); otherwise h = x + delta, then course_norm of h, cast to out_dtype when one is given
    # HINT: Only RMSNorm has a fused add+norm kernel (one pass over h); LayerNorm falls back to a separate
    #   add and course_norm, with the same return shape (h, y).
    # HINT: For rmsnorm return add_rmsnorm.add_rms_norm(...) directly; else h = x + delta, y =
    #   course_norm(h, ...), converted to out_dtype only when one was given; return (h, y).
    if kind == "rmsnorm":
        return add_rmsnorm.add_rms_norm(x, delta, weight, eps, out_dtype)
    h = x + delta
    y = course_norm(h, weight, bias, eps, kind)
    return h, (y if out_dtype is None else y.to(out_dtype))
    # END EXERCISE


def course_rope(q, k, cos, sin):
    """Triton RoPE on (B, H, T, Dh) q and k; cos/sin (T, Dh/2) fp32 are the rows of these positions."""
    # BEGIN EXERCISE: rope_module.apply_rope with position offset 0 and layout "bhsd"
    # HINT: The model keeps q and k as (B, H, T, Dh) and passes cos/sin rows for exactly these positions, so
    #   no position offset is needed.
    # HINT: One call of week 4's apply_rope with an offset of 0 and the layout string for (B, H, S, D).
    return rope_module.apply_rope(q, k, cos, sin, 0, "bhsd")
    # END EXERCISE


def _attention_fallback_reason(q, k) -> str | None:
    if not HAS_FLASH_ATTENTION:
        return f"week4_triton_dl.attention is not importable ({FLASH_IMPORT_ERROR})"
    if q.shape[2] != k.shape[2]:
        return ("Tq != Tk (KV-cache prefill or decode): the kernel's causal mask is top-left aligned, "
                "the model's queries are the LAST Tq positions")
    if q.shape[-1] not in FLASH_HEAD_DIMS:
        return f"head dim {q.shape[-1]} is not one the kernel supports {tuple(FLASH_HEAD_DIMS)}"
    return None


def course_attention(q, k, v, causal: bool):
    """FlashAttention-2 in Triton (week 4) when Tq == Tk; torch's SDPA otherwise (counted)."""
    # BEGIN EXERCISE: reason = _attention_fallback_reason(q, k); if there is one, count it (_fallback("attention",
    #   reason)) and return m.torch_attention(q, k, v, causal); else flash_attention(q, k, v, causal=causal)
    # HINT: The Triton FlashAttention covers the common case; anything else goes to torch's SDPA, and each
    #   fallback is counted so a benchmark can tell what actually ran.
    # HINT: Ask _attention_fallback_reason; if it returns a reason, record it with _fallback("attention",
    #   reason) and return m.torch_attention(...); otherwise call flash_attention with causal as a keyword.
    reason = _attention_fallback_reason(q, k)
    if reason is not None:
        _fallback("attention", reason)
        return m.torch_attention(q, k, v, causal)
    return flash_attention(q, k, v, causal=causal)
    # END EXERCISE


def course_swiglu(h):
    """silu(gate) * up of h = [gate | up], forward and backward one Triton kernel each (week 4);
    the halves are read in place and the backward writes one dh (no chunk, no cat)."""
    # BEGIN EXERCISE: week 4's swiglu.swiglu_packed (h = [gate | up], read in place)
    # HINT: The MLP's up projection produces [gate | up] side by side; week 4's packed SwiGLU reads both
    #   halves in place, so no chunk or cat is needed.
    # HINT: A single call into week 4's swiglu module, the packed variant, on h as it is.
    return swiglu.swiglu_packed(h)
    # END EXERCISE


class GeluTanhFunction(torch.autograd.Function):
    """gelu_tanh(x): week 3's bias_gelu kernel with a zero bias forward, week 4's act_backward backward."""

    @staticmethod
    def forward(ctx, x):
        # BEGIN EXERCISE: save x; return week 3's fused_elementwise.bias_gelu(x, a zero bias of d elements, "tanh")
        # HINT: Forward of a custom autograd Function: keep what the backward needs (x) and reuse week 3's
        #   fused bias+GELU kernel with a bias of zeros.
        # HINT: ctx.save_for_backward(x); a zeros bias of x.shape[-1] elements in x's dtype and device; call
        #   bias_gelu with the "tanh" variant.
        ctx.save_for_backward(x)
        zero_bias = torch.zeros(x.shape[-1], dtype=x.dtype, device=x.device)  # d elements: negligible
        return fused_elementwise.bias_gelu(x, zero_bias, "tanh")
        # END EXERCISE

    @staticmethod
    def backward(ctx, dy):
        # BEGIN EXERCISE: week 4's fused_mlp.act_backward(dy.contiguous(), x, "gelu_tanh") with the saved x
        # HINT: The backward multiplies dy by gelu_tanh'(x) in one fused pass: week 4's act_backward does
        #   exactly that.
        # HINT: Unpack the saved x from ctx.saved_tensors; call fused_mlp.act_backward on a contiguous dy
        #   (the kernel indexes flat memory) with the "gelu_tanh" activation.
        (x,) = ctx.saved_tensors
        return fused_mlp.act_backward(dy.contiguous(), x, "gelu_tanh")
        # END EXERCISE


def course_gelu(x):
    """gelu(x, approximate="tanh"), forward and backward one Triton kernel each."""
    # BEGIN EXERCISE: GeluTanhFunction.apply on a contiguous x
    # HINT: Calling a custom autograd Function goes through .apply; its kernels assume dense memory.
    # HINT: Apply GeluTanhFunction to x made contiguous.
    return GeluTanhFunction.apply(x.contiguous())
    # END EXERCISE


def course_linear_cross_entropy(hidden, weight, targets, ignore_index: int = -100):
    """mean CE of hidden @ weight^T, chunked: the (N, V) logits never exist (week 4)."""
    # BEGIN EXERCISE: under autocast (autocast_dtype(hidden.device) is not None) cast hidden and weight to that
    #   dtype, as F.linear would; call fused_linear_cross_entropy.fused_linear_cross_entropy (ignore_index too) with
    #   autocast disabled; return the loss in float32
    # HINT: The fused kernel bypasses F.linear, so autocast no longer casts for it: do by hand what autocast
    #   would (cast hidden and weight to its dtype), then run with autocast off so nothing is cast twice.
    # HINT: dtype = autocast_dtype(hidden.device); if not None cast both; inside `with
    #   torch.autocast(device_type, enabled=False):` call the fused loss with ignore_index; return it in
    #   float32.
    # HINT: `with torch.autocast(hidden.device.type, enabled=False):`
    dtype = autocast_dtype(hidden.device)
    if dtype is not None:  # what F.linear does under autocast, done by hand (see the docstring)
        hidden, weight = hidden.to(dtype), weight.to(dtype)
    with torch.autocast(hidden.device.type, enabled=False):
        loss = fused_linear_cross_entropy.fused_linear_cross_entropy(hidden, weight, targets, ignore_index=ignore_index)
    return loss.float()
    # END EXERCISE


def course_mlp(x, w_up, w_down, kind: str):
    """The whole MLP with week 4's fused kernels: (x, up weight (k h, d), down weight (d, h)) -> y.

    SwiGLU: `fused_mlp.swiglu_mlp`, one dual-GEMM kernel for gate and up with silu(g) * u in
    its epilogue (the model stores W_up as [W_gate; W_up], the layout that kernel takes).
    GELU: the GEMMs stay torch's and the activation is `course_gelu`.
    Not wired into `COURSE_OPS`: model.Ops has no `mlp` field yet (the MLP module calls the
    up and down projections itself). `swap_plan` picks it up once the field exists.
    """
    # BEGIN EXERCISE: "gelu": F.linear, course_gelu, F.linear. "swiglu": fused_mlp.swiglu_mlp(x, w_up, w_down)
    #   with x and the weights cast to the autocast dtype first and autocast off, as in
    #   course_linear_cross_entropy; any other kind: ValueError "kind must be one of ..." (m.MLPS)
    # HINT: Two MLP kinds: GELU keeps torch's GEMMs around course_gelu; SwiGLU goes entirely to week 4's
    #   fused dual-GEMM MLP, which, like the fused loss, must be given inputs already in the autocast dtype.
    # HINT: gelu: linear, course_gelu, linear; reject unknown kinds with a ValueError naming m.MLPS; swiglu:
    #   cast x and both weights when autocast_dtype is set, then call swiglu_mlp inside an autocast-disabled
    #   block.
    if kind == "gelu":
        return F.linear(course_gelu(F.linear(x, w_up)), w_down)
    if kind != "swiglu":
        raise ValueError(f"kind must be one of {m.MLPS}, got {kind!r}")
    dtype = autocast_dtype(x.device)
    if dtype is not None:
        x, w_up, w_down = x.to(dtype), w_up.to(dtype), w_down.to(dtype)
    with torch.autocast(x.device.type, enabled=False):
        return fused_mlp.swiglu_mlp(x, w_up, w_down)
    # END EXERCISE


OPS_FIELDS = tuple(f.name for f in dataclasses.fields(m.Ops) if f.name != "name")
HAS_MLP_OP = "mlp" in OPS_FIELDS  # see course_mlp

COURSE_OPS = m.Ops("course", norm=course_norm, rope=course_rope, attention=course_attention,
                   swiglu=course_swiglu, gelu=course_gelu, linear_cross_entropy=course_linear_cross_entropy,
                   add_norm=course_add_norm, **({"mlp": course_mlp} if HAS_MLP_OP else {}))
COURSE_FUNCTIONS = {"norm": course_norm, "rope": course_rope, "attention": course_attention,
                    "swiglu": course_swiglu, "gelu": course_gelu,
                    "linear_cross_entropy": course_linear_cross_entropy, "mlp": course_mlp,
                    "add_norm": course_add_norm}
# Fields swapped together: the fused residual add + norm is the norm's kernel too.
FIELD_GROUPS = {"norm": ("norm", "add_norm")}


# --- which swaps a model uses, one at a time ----------------------------------------------------

def used_fields(cfg: m.GPTConfig | None = None) -> tuple[str, ...]:
    """The Ops fields a GPT with this config calls (all fields when cfg is None)."""
    grouped = {f for fields in FIELD_GROUPS.values() for f in fields[1:]}  # swapped with their group's head
    if cfg is None:
        return tuple(f for f in OPS_FIELDS if f not in grouped)
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
    singles = [dataclasses.replace(m.TORCH_OPS, name=f"+{field}",
                                   **{f: getattr(course, f) for f in FIELD_GROUPS.get(field, (field,))})
               for field in used_fields(cfg)]
    return [m.TORCH_OPS, *singles, dataclasses.replace(course, name="course")]


def describe(ops: m.Ops) -> dict:
    """{field: "module.function"} of an Ops record: which code each hot spot runs."""
    return {f: (f"{getattr(ops, f).__module__}.{getattr(ops, f).__qualname__}" if getattr(ops, f) is not None
                else "none (the model's own code)") for f in OPS_FIELDS}
