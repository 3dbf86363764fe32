"""Profiling a training step of the GPT: where the GPU time goes, grouped, and placed on the roofline.

What it teaches:
* read a profile by GROUPS, not by kernel: a training step launches hundreds of kernels with
  names like `nvjet_tst_128x256_...` or `vectorized_elementwise_kernel<4, ...>`; what matters
  is how the time splits between matmuls (GEMM), attention, normalizations, element-wise work,
  the loss, and the optimizer. `classify` puts each kernel in a group by its name; the ordered
  patterns are in `GROUP_PATTERNS` (first match wins, so "LpNorm" of gradient clipping is
  optimizer work, not a norm, and `fmha_cutlass` is attention, not a GEMM).
* each group on the roofline. `group_costs` counts, from the model's shapes alone, the FLOPs
  and the minimum bytes each group must move in one training step (formulas below). With the
  measured time per group that gives the achieved TFLOP/s and GB/s, hence how far each group is
  from ITS roof: GEMMs and attention against the bf16 tensor-core rate, everything else against
  the copy bandwidth. A group far below its roof is where a kernel can help; a group at its roof
  can only be made faster by moving fewer bytes (fusion) or doing fewer FLOPs.
* before/after: the same profile with `kernels.COURSE_OPS`, in the same run, shows which group
  each swap changed (profile_model_bench.py's `profile_run`); its `swaps_run` times the step for
  torch, each single swap, all swaps, and `torch.compile` of the torch twin (the practitioner's
  alternative: no hand-written kernel).
* the gaps: `gpu_busy_fraction` (week 2) of the trace. A step whose GPU is idle between kernels
  is bound by the CPU launching them, and faster kernels will not shorten it.

Cost model per training step (forward + backward; N = batch x seq tokens, T = seq, d = d_model,
h = MLP hidden, L layers, V vocab, P parameters, s = activation bytes (2 under bf16 autocast,
4 in fp32), norms read fp32 (the residual stream stays fp32 under autocast)):
* GEMM: every linear (in -> out): 3 x 2 N in out FLOPs (forward, dX, dW) and, each operand read
  once and each result written once, 3 (N (in + out) + in out) s bytes. Linears: qkv (d -> 3d),
  proj (d -> d), up (d -> k h, k = 2 SwiGLU / 1 GELU), down (h -> d) per layer, LM head (d -> V).
* attention (causal, FlashAttention's convention): forward 2 N T d FLOPs per layer, backward
  2.5x that: 7 L N T d. Bytes: forward reads q, k, v and writes o (4 N d s), backward reads
  q, k, v, o, do and writes dq, dk, dv (8 N d s): 12 L N d s.
* norm, 2L + 1 of them: forward reads x, writes y (2 N d 4), backward reads x, dy, writes dx
  (3 N d 4): 20 N d bytes each; ~12 N d FLOPs each (4 per element forward, 8 backward).
* element-wise, the MINIMUM (each fused): RoPE on q and k (4 N d s forward + 4 N d s backward,
  3 FLOPs per element each way), SwiGLU (3 N h s forward + 5 N h s backward, ~20 FLOPs per
  element in all) or GELU (2 + 3 N h s, ~30 FLOPs), two residual adds per layer (forward: read
  the fp32 stream and the branch, write fp32: (8 + s) N d; backward: add two fp32 gradients:
  12 N d). The eager model moves more (autocast casts, the `.contiguous()` copies of q, k, v
  and of gate/up): its achieved GB/s against this minimum shows that waste.
* loss: cross-entropy over the (N, V) logits: the minimum is one read forward and a read and a
  write backward, 3 N V s bytes; ~6 N V FLOPs. (The logits' GEMM is in the GEMM group.)
* optimizer: fused AdamW reads p, g, m, v and writes p, m, v in fp32 (28 P bytes, ~12 P FLOPs);
  gradient clipping reads g for the norm and scales it (12 P bytes, 3 P FLOPs): 40 P, 15 P.

GPU only: the kernel table, the traces and the results files come from a real profile (run
`python -m week5_integration.profile_model_bench` on a GPU: profile_model_bench.py holds the runs
that write profile_week5 and swaps_week5, and the command line); on the CPU the same code profiles
GPT_TINY's aten ops with host times (classification and formulas are what the tests check).
"""
from __future__ import annotations

import collections
import dataclasses
import gzip
import json
import re
import time
from pathlib import Path

import torch

from course import roofline, runtime
from week2_pytorch_optimizations import profiling
from week5_integration import model as m
from week5_integration import train as tr

GROUPS = ("gemm", "attention", "norm", "elementwise", "loss", "optimizer", "other")
STEP_LABEL = "train_step"

# Ordered: the first pattern that matches the (lower-cased) kernel or op name decides.
GROUP_PATTERNS = [
    # AdamW (fused: multi_tensor_apply_kernel<...FusedAdamMathFunctor>), foreach ops, and the
    # gradient clipping's global norm (LpNormFunctor, lpnorm_cleanup): before "norm".
    ("optimizer", r"adam|multi_tensor_apply|_foreach_|lpnorm|clip_grad|optimizer\.|lerp_|addcdiv_|addcmul_"),
    # SDPA back-ends (flash_fwd/bwd, fmha_cutlass = memory-efficient, cuDNN sdpa) and the
    # course's flash_attention_*_kernel: before "gemm" (fmha_cutlass) and "loss" (softmax).
    ("attention", r"flash|fmha|attention|sdpa|_attn"),
    # torch: cunn_SoftMaxForward/Backward (log_softmax), nll_loss_*; course: cross_entropy_*_kernel.
    ("loss", r"cross_entropy|nll_loss|softmax|logsumexp"),
    # torch's fused layer/rms norm kernels (vectorized_layer_norm_kernel, RowwiseMoments,
    # GammaBetaBackward, ComputeInternalGradients); course: rmsnorm_*/layernorm_* and the dW
    # partial_sum_kernel; Inductor: fused kernels computing rsqrt or var_mean.
    ("norm", r"rms_?norm|layer_?norm|rowwisemoments|gammabeta|computeinternalgradients|"
             r"computegradientfusedparams|partial_sum_kernel|rsqrt|var_mean"),
    # cuBLAS/cuBLASLt (nvjet_*, sm90_xmma_gemm_*, cutlass*_gemm, gemv, splitKreduce), Triton
    # matmuls (week 3's matmul_kernel, week 4's swiglu_gate_up_kernel), aten's CPU ops.
    ("gemm", r"gemm|gemv|cublas|cutlass|nvjet|xmma|wgmma|splitkreduce|matmul|swiglu_gate_up|"
             r"^aten::(mm|addmm|bmm|baddbmm|linear)$"),
    # torch's element-wise and copy kernels, Inductor's pointwise kernels (triton_poi_*), the
    # course's rope / swiglu / gelu kernels, memcpy and memset; aten's CPU ops.
    ("elementwise", r"elementwise|vectorized|unrolled|triton_poi|rope|swiglu|silu|gelu|act_backward|"
                    r"catarray|copy|fill|memcpy|memset|^aten::(add|add_|mul|mul_|sub|div|div_|neg|cat|"
                    r"pow|clone|to|_to_copy|contiguous|where|zero_|zeros_like)$"),
]
_COMPILED = [(group, re.compile(pattern)) for group, pattern in GROUP_PATTERNS]


def classify(name: str) -> str:
    """The group of a kernel (GPU) or aten op (CPU) name: one of GROUPS, "other" if none matches."""
    # BEGIN EXERCISE: lower-case the name; the first (group, pattern) of _COMPILED whose pattern.search()es
    #   it wins; "other" if none does
    # HINT: Kernel names vary by library and case; an ordered table of regexes where the first match wins
    #   lets specific patterns (flash attention, say) take precedence over generic ones (gemm).
    # HINT: Lower-case once, loop over _COMPILED in order, return the group of the first pattern whose
    #   .search() finds it, fall back to "other".
    lowered = name.lower()
    for group, pattern in _COMPILED:
        if pattern.search(lowered):
            return group
    return "other"
    # END EXERCISE


# --- the cost model ----------------------------------------------------------------------------

def linear_shapes(cfg: m.GPTConfig) -> list[tuple[str, int, int, int]]:
    """(name, in, out, count) of every linear layer of a GPT with this config."""
    k = 2 if cfg.mlp == "swiglu" else 1
    d, h, L = cfg.d_model, cfg.hidden, cfg.n_layers
    return [("qkv", d, 3 * d, L), ("proj", d, d, L), ("up", d, k * h, L), ("down", h, d, L),
            ("head", d, cfg.vocab_size, 1)]


def group_costs(cfg: m.GPTConfig, batch: int, seq: int, *, act_bytes: int = 2,
                n_params: int | None = None) -> dict:
    """{group: {"flops": F, "bytes": B}} of one training step (the module docstring's formulas)."""
    if batch < 1 or seq < 1:
        raise ValueError(f"batch and seq must be >= 1, got {batch}, {seq}")
    if act_bytes not in (2, 4):
        raise ValueError(f"act_bytes must be 2 (bf16/fp16) or 4 (fp32), got {act_bytes}")
    # BEGIN EXERCISE: count the parameters on the meta device when n_params is None; then {"gemm",
    #   "attention", "norm", "elementwise", "loss", "optimizer"} -> {"flops": ..., "bytes": ...} per
    #   training step (use linear_shapes(cfg)): the formulas are in the docstring, derive them yourself
    #   first
    # HINT: A per-group cost model of one training step: for each group, how many flops it must do and how
    #   many bytes it must move at the least; the docstring gives the formulas (try deriving them first).
    # HINT: Count parameters on the meta device (no memory) when not given; gemm sums over
    #   linear_shapes(cfg): forward + two backward matmuls (x3) of 2 N i o flops each, and their
    #   operand/result bytes; norm, elementwise (rope, activation, residual), attention, loss and optimizer
    #   as per-token or per-parameter multiples.
    # HINT: `gemm_flops = sum(3 * 2 * N * i * o * c for _, i, o, c in linear_shapes(cfg))`
    N, T, d, h, L, V, s = batch * seq, seq, cfg.d_model, cfg.hidden, cfg.n_layers, cfg.vocab_size, act_bytes
    if n_params is None:
        with torch.device("meta"):
            n_params = m.count_parameters(m.GPT(cfg))
    gemm_flops = sum(3 * 2 * N * i * o * c for _, i, o, c in linear_shapes(cfg))
    gemm_bytes = sum(3 * (N * (i + o) + i * o) * s * c for _, i, o, c in linear_shapes(cfg))
    norms = 2 * L + 1
    rope = (8 * N * d * s, 12 * N * d) if cfg.pos == "rope" else (0, 0)
    act = (8 * N * h * s, 20 * N * h) if cfg.mlp == "swiglu" else (5 * N * h * s, 30 * N * h)
    residual = (2 * ((8 + s) + 12) * N * d, 4 * N * d)
    return {
        "gemm": {"flops": gemm_flops, "bytes": gemm_bytes},
        "attention": {"flops": 7 * L * N * T * d, "bytes": 12 * L * N * d * s},
        "norm": {"flops": norms * 12 * N * d, "bytes": norms * 20 * N * d},
        "elementwise": {"flops": L * (rope[1] + act[1] + residual[1]), "bytes": L * (rope[0] + act[0] + residual[0])},
        "loss": {"flops": 6 * N * V, "bytes": 3 * N * V * s},
        "optimizer": {"flops": 15 * n_params, "bytes": 40 * n_params},
    }
    # END EXERCISE


# --- profiling ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Profile:
    """What one profiled run measured: time per name, per step, and where the trace is."""
    ops: str
    entries: dict            # name -> {"us": total over the profiled steps, "calls": count}
    steps: int
    source: str              # "gpu kernels (trace)" or "cpu ops (self time)"
    trace: str | None
    gpu_busy: float | None
    wall_ms_per_step: float

    def per_step(self) -> list[dict]:
        """One row per name: group, calls and microseconds per step, share of the total."""
        total = sum(e["us"] for e in self.entries.values()) or 1.0
        rows = [{"name": name, "group": classify(name), "calls": e["calls"] / self.steps,
                 "us": e["us"] / self.steps, "share": e["us"] / total} for name, e in self.entries.items()]
        return sorted(rows, key=lambda r: r["us"], reverse=True)

    def groups(self) -> dict:
        """{group: {"us": per step, "share", "calls": per step, "top": [names]}} for every group."""
        out = {g: {"us": 0.0, "share": 0.0, "calls": 0.0, "top": []} for g in GROUPS}
        for row in self.per_step():
            g = out[row["group"]]
            g["us"] += row["us"]
            g["share"] += row["share"]
            g["calls"] += row["calls"]
            if len(g["top"]) < 3:
                g["top"].append(row["name"])
        return out


def kernels_from_trace(trace_path) -> dict:
    """{kernel name: {"us", "calls"}} from the GPU events of a chrome trace (.json or .json.gz)."""
    path = Path(trace_path)
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    entries: dict = collections.defaultdict(lambda: {"us": 0.0, "calls": 0})
    for event in json.loads(text).get("traceEvents", []):
        if event.get("ph") == "X" and event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            entry = entries[event.get("name", "?")]
            entry["us"] += float(event.get("dur", 0.0))
            entry["calls"] += 1
    return dict(entries)


def ops_from_profile(prof, exclude=(STEP_LABEL,)) -> dict:
    """{aten op name: {"us": self CPU time, "calls"}}: the CPU stand-in when there are no kernels."""
    return {e.key: {"us": float(e.self_cpu_time_total), "calls": e.count}
            for e in prof.key_averages() if e.self_cpu_time_total > 0 and e.key not in exclude}


def training_step(model: m.GPT, tc: tr.TrainConfig, *, loss_fn=None):
    """A closure running one training step on one fixed batch (profiling wants the same work each time)."""
    batches, _ = tr.make_batches(model.cfg, tc)
    x, y = batches.next()
    step = tr.make_step(model, tr.make_optimizer(model, tc), tc, loss_fn=loss_fn)
    return lambda: step(x, y, tc.lr)


def profile_training(ops: m.Ops, cfg: m.GPTConfig, tc: tr.TrainConfig, *, steps: int = 3, warmup: int = 3,
                     trace_path=None, loss_fn_factory=None) -> Profile:
    """Profile `steps` training steps of a fresh seeded model using `ops` (after `warmup` steps).

    On a GPU the entries are the kernels of the chrome trace (written to `trace_path`, gzipped
    if it ends in .gz); on the CPU they are the aten ops' self times.
    """
    model = tr.build_model(cfg, ops, seed=tc.seed)
    loss_fn = loss_fn_factory(model, tc) if loss_fn_factory else None
    step = training_step(model, tc, loss_fn=loss_fn)
    if runtime.on_gpu() and trace_path is None:
        raise ValueError("on a GPU the kernels are read from the chrome trace: pass trace_path")
    t0 = time.perf_counter()
    prof = profiling.profile_steps(step, steps=steps, warmup=warmup, trace_path=trace_path, label=STEP_LABEL)
    wall_ms = (time.perf_counter() - t0) * 1e3 / (steps + warmup)
    if runtime.on_gpu():
        entries, source = kernels_from_trace(trace_path), "gpu kernels (trace)"
        busy = profiling.gpu_busy_fraction(trace_path)
    else:
        entries, source, busy = ops_from_profile(prof), "cpu ops (self time)", None
    del model, step
    if runtime.on_gpu():
        torch.cuda.empty_cache()
    return Profile(ops.name, entries, steps, source, str(trace_path) if trace_path else None, busy, wall_ms)


# --- the roofline ------------------------------------------------------------------------------

def place_on_roofline(profile: Profile, costs: dict, *, copy_gbps: float, peak_tflops: float) -> dict:
    """{group: achieved TFLOP/s, GB/s, FLOP/byte, the roof at that intensity, % of it} per step."""
    # BEGIN EXERCISE: for each group with time (profile.groups()) and a cost: seconds per step, intensity =
    #   flops / bytes, roof = min(peak_tflops, copy_gbps * intensity / 1e3), achieved TFLOP/s and GB/s, % of
    #   the roof, and "compute" or "memory" bound (the keys the tests read)
    # HINT: The roofline: at arithmetic intensity I = flops / bytes the hardware allows min(peak compute,
    #   bandwidth x I); compare what each group achieved with that roof.
    # HINT: For each group with time and a cost: seconds from its microseconds, intensity, the roof in
    #   TFLOP/s, achieved TFLOP/s and GB/s, percent of the roof, and "compute" when bandwidth x I reaches
    #   peak, else "memory".
    # HINT: `roof = min(peak_tflops, copy_gbps * intensity / 1e3)` (GB/s x FLOP/byte / 1e3 = TFLOP/s).
    placed = {}
    for group, g in profile.groups().items():
        cost = costs.get(group)
        if cost is None or g["us"] <= 0:
            continue
        seconds = g["us"] * 1e-6
        intensity = cost["flops"] / cost["bytes"]
        roof = min(peak_tflops, copy_gbps * intensity / 1e3)  # TFLOP/s the hardware allows here
        tflops = cost["flops"] / seconds / 1e12
        placed[group] = {"ms": g["us"] / 1e3, "flops": cost["flops"], "bytes": cost["bytes"],
                         "intensity": intensity, "tflops": tflops, "gbps": cost["bytes"] / seconds / 1e9,
                         "roof_tflops": roof, "pct_of_roof": 100 * tflops / roof,
                         "bound": "compute" if copy_gbps * intensity / 1e3 >= peak_tflops else "memory"}
    return placed
    # END EXERCISE


def plot_roofline(placed_by_ops: dict, *, copy_gbps: float, peak_tflops: float, title: str, path: Path) -> Path:
    points = [(f"{ops} {group}", p["intensity"], p["tflops"])
              for ops, placed in placed_by_ops.items() for group, p in placed.items()]
    return roofline.plot(points, copy_gbps=copy_gbps, compute_tflops={"bf16 matmul": peak_tflops},
                         title=title, path=path)
