"""The capstone's attention, one choice at a time (issue 33): the `*_attention` ops and their labels.

`fast` runs week 4's attention op, whose dispatch rule (week4_triton_dl/attention/dispatch.py) picks the
forward per GPU from the sweep's table (results/dispatch_attention.json): at the capstone's shape
(B = 8, H = 12, S = 1024, D = 64, causal, bf16) the H100's table names flash_blocked, the Triton kernel,
for (64, causal), so `fast` does NOT run the Hopper CUDA C kernel; its backward is always the Triton one.
To show what the attention contributes to the whole step, three siblings of `fast` change the attention
and nothing else:

    ops name            attention (forward + backward)                                   where
    sdpa_attention      torch's SDPA, the twin's (torch picks its backend)                anywhere
    triton_attention    week 4's op forced to flash_blocked (Triton fwd + Triton bwd)     anywhere
    hopper_attention    week 4's CUDA C FA3-style kernels (hopper.py, hopper_backward.py)  sm_90a only

`describe` names the attention a model runs at a shape (the rule's pick for `fast`, read from the
dispatch itself), so every row of capstone.measure says which attention it timed.

The Hopper adapter (`hopper_attention`), beyond calling week 4's op:
* layout. The kernels read q, k, v (and dO) as dense (B, H, S, D) blocks through TMA tensor maps. In the
  model q and k come dense out of the fused RoPE kernel, but v is a transposed view of the one QKV
  projection (strides (3C T, Dh, 3C, 1)), and dO arrives as the transpose of the (B, T, C) gradient. So
  the adapter copies v forward and the op copies dO backward: read + write of B T C 16-bit values each,
  ~25 MB a layer at the capstone's shape, ~2 x 8 us at ~3 TB/s, ~0.2 ms a step over 12 layers that the
  Triton kernel (any strides) never pays. It is part of what the row measures: the kernel as the model
  must call it. (`.contiguous()` is free where a tensor is already dense.)
* dtype. Week 4's kernels take fp16/bf16 only. Under autocast the model's q, k, v already are the
  autocast dtype (they come out of the QKV linear), and wider ones are cast to it (what SDPA does under
  autocast; a custom op gets no autocast rule); without autocast an fp32 model is refused (TypeError
  naming the fix) before any launch.
* torch.compile. Week 4's ops `course_attention_hopper::forward` and `course_attention_hopper::backward`
  (hopper.py), joined by the forward's autograd formula, are opaque to the compiler with fake functions,
  as week 4's Triton op is (attention/op.py): the adapter calls week 4's `attention_hopper` eager or
  compiled, and AOTAutograd traces the backward as one node (the backward's Python, which encodes the
  TMA tensor maps from data pointers, runs only at run time).
* the KV cache. Decoding calls attention with Tq != Tk (queries aligned with the END of the keys); the
  kernel's causal mask is top-left aligned, so such a call goes to `fast`'s attention, which hands it
  to SDPA and counts it (week5_integration/kernels.py's FALLBACKS). Training never makes such a call.

`unsupported()` says why this machine cannot run the Hopper kernels (no GPU, not sm_90, no toolchain),
naming the fallback; capstone.measure reports the hopper_attention variants as skipped with it, never
run on another kernel in their name.
"""
from __future__ import annotations

import dataclasses

import torch

from course import runtime
from week4_triton_dl.attention import dispatch, flash_attention, hopper
from week5_integration import kernels
from week5_integration import model as m

FALLBACK = ("week 4's Triton attention (week4_triton_dl.attention.flash_attention, forward and backward), "
            "which the fast and triton_attention variants run")
KINDS = ("sdpa", "triton", "hopper")  # the attentions a sibling of fast can force, by ops name "<kind>_attention"


def unsupported() -> str | None:
    """Why week 4's Hopper attention cannot run here (None: it can): an sm_90a GPU and a toolchain to build it."""
    if not runtime.on_gpu():
        return ("the Hopper attention is week 4's CUDA C for sm_90a (H100/H200; wgmma, setmaxnreg and the TMA); "
                f"this run has no GPU (simulation), so the hopper_attention variants are not measured; the fallback is "
                f"{FALLBACK}")
    capability = runtime.capability()
    if capability is None or tuple(capability) != hopper.CAPABILITY:
        where = "unknown" if capability is None else f"{capability[0]}.{capability[1]}"
        return (f"the Hopper attention needs an sm_90a GPU (compute capability 9.0: H100, H200; wgmma, setmaxnreg "
                f"and the TMA exist only there); this GPU is compute capability {where}, so the hopper_attention "
                f"variants are not measured; the fallback is {FALLBACK}")
    missing = hopper.toolchain_missing()
    if missing is not None:
        return (f"the Hopper attention's CUDA C is compiled for sm_90a at first use and cannot be built here: "
                f"{missing}; the fallback is {FALLBACK}")
    return None


# ------------------------------------------------------------------------------ the model's attentions
def _kernel_dtype(q: torch.Tensor) -> torch.dtype:
    """The 16-bit dtype the Hopper kernels run in: q's, or autocast's when q is wider and autocast is on."""
    if q.dtype in hopper.DTYPES:
        return q.dtype
    if torch.is_autocast_enabled(q.device.type):
        dtype = torch.get_autocast_dtype(q.device.type)
        if dtype in hopper.DTYPES:
            return dtype
    raise TypeError(f"hopper_attention: q is {str(q.dtype).replace('torch.', '')} with autocast off; week 4's Hopper "
                    "kernels take float16/bfloat16: run the step under torch.autocast(dtype=torch.bfloat16) (the "
                    "Trainer's amp) or use a bf16 model")


def hopper_attention(q, k, v, causal: bool):
    """Attention of the model's (B, H, T, Dh) q, k, v by week 4's CUDA C Hopper forward and backward (sm_90a).
    Tq != Tk (the KV cache) goes to fast's attention, counted there. Off sm_90a, week 4's op refuses before
    any launch (runtime.NotOnThisGpu naming the Triton attention)."""
    if q.shape[2] != k.shape[2]:
        return kernels.course_attention(q, k, v, causal)
    dtype = _kernel_dtype(q)
    q, k, v = (t.to(dtype).contiguous() for t in (q, k, v))  # .contiguous(): the module docstring's copies
    return hopper.attention_hopper(q, k, v, causal)


def triton_attention(q, k, v, causal: bool):
    """Week 4's attention op with its forward forced to flash_blocked (Triton; the backward is Triton's
    whatever the forward): what `fast` runs wherever the rule picks it. Calls the op cannot take (Tq != Tk,
    a head dim outside its list) go to fast's attention, which counts them."""
    if q.shape[2] != k.shape[2] or q.shape[-1] not in kernels.FLASH_HEAD_DIMS:
        return kernels.course_attention(q, k, v, causal)
    return flash_attention(q, k, v, causal=causal, rung=dispatch.BLOCKED.rung)


ATTENTIONS = {"sdpa": m.torch_attention, "triton": triton_attention, "hopper": hopper_attention}


def attention_ops(base: m.Ops, kind: str) -> m.Ops:
    """`base` (fast's ops) with its attention forced to `kind` ("sdpa", "triton" or "hopper"), named
    "<kind>_attention"; everything else base's."""
    if kind not in ATTENTIONS:
        raise ValueError(f"kind must be one of {list(ATTENTIONS)}, got {kind!r}")
    return dataclasses.replace(base, name=f"{kind}_attention", attention=ATTENTIONS[kind])


# ------------------------------------------------------------------------------ which attention ran
def _sdpa_backend(q) -> str:
    """The backend SDPA picks for causal q, k, v like these (torch's own choice function), lower case."""
    from torch.nn.attention import SDPBackend

    choice = int(torch._fused_sdp_choice(q, q, q, None, 0.0, True))
    names = {int(b.value): name for name, b in SDPBackend.__members__.items()}
    return names.get(choice, str(choice)).lower().replace("_attention", "")


def describe(attention, shape: tuple[int, int, int, int], dtype: torch.dtype, device=None) -> str:
    """A short name of the attention `attention` (an Ops.attention) runs for causal training calls of
    `shape` (B, H, S, D) and `dtype` here: for fast's, the forward week 4's dispatch rule picks (asked of
    the dispatch itself, with one probe tensor); the backward of week 4's op is Triton's in every case, so
    "Triton flash_blocked" is Triton both ways. SDPA's: the backend torch's own choice function names."""
    if attention is hopper_attention:
        return "CUDA C flash_hopper fwd + bwd: forced"
    if attention is triton_attention:
        return "Triton flash_blocked: forced"
    device = torch.device(runtime.DEVICE if device is None else device)
    if attention not in (m.torch_attention, kernels.course_attention):
        return getattr(attention, "__name__", type(attention).__name__)
    try:
        probe = torch.empty(shape, dtype=dtype, device=device)
        if attention is m.torch_attention:
            return f"SDPA {_sdpa_backend(probe)}"
        if shape[3] not in kernels.FLASH_HEAD_DIMS:
            return "SDPA: fast's fallback (head dim)"
        choice = dispatch.choose(probe, probe, probe, True)
    except (RuntimeError, TypeError, ValueError) as error:  # a label never stops a measurement
        return f"{getattr(attention, '__name__', 'attention')} (choice not read: {type(error).__name__})"
    if choice.rung == dispatch.HOPPER:  # the build the table names, where not the default: "flash_hopper (overlap)"
        return f"CUDA C {dispatch.label(choice)} fwd, Triton bwd: dispatch rule"
    return f"Triton {choice.rung}: dispatch rule"

