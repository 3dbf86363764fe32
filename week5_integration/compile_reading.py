"""Reading what torch.compile generates for the model, kernel by kernel, against the course's kernels.

`torch.compile` of the torch twin is the alternative to hand-written kernels that costs one line.
To judge it, read its output: Inductor writes a Python module per graph (one for the forward,
one for the backward of a training step) that launches generated kernels (Triton on a GPU, C++
on the CPU) and calls libraries for the rest. `capture` gets that source through week 2's
`compilation.generated_code` (the same text `TORCH_LOGS=output_code` prints) and `parse` lists:

* the generated kernels, named by Inductor after the aten ops they fuse:
  `triton_per_fused_add_mean_mul_pow_rsqrt_3` is a persistent-reduction ("per") kernel that fuses
  an add, a mean of squares and an rsqrt: the residual add AND the RMSNorm of the next layer, in
  one pass. ("poi" = pointwise, "red" = a looped reduction, "per" = a reduction that fits in one
  block; on the CPU the prefix is `cpp_fused_`.) `COUNTERPARTS` maps the fused ops to the
  course kernel doing the same job (fused norm, RoPE, SwiGLU, cross-entropy);
* the library calls: `extern_kernels.mm/addmm/bmm` (cuBLAS, or Triton templates under
  max-autotune) and attention, which stays `aten._scaled_dot_product_*_attention` (FlashAttention
  / cuDNN / memory-efficient kernels): Inductor does not generate attention, the course does;
* the fusions across op boundaries: where one generated kernel does the work of a course
  kernel AND of its neighbour (the residual add with the norm, the `.contiguous()` layout copy
  with RoPE, the chunk copy with SwiGLU), saving a round trip through HBM that the hand-written
  kernels, called op by op from the model, pay. And vice versa: the fused linear + cross-entropy
  of week 4 spans the LM-head GEMM and the loss in chunks, which Inductor (GEMM = library call,
  loss = generated kernel over materialized logits) does not do.

On a GPU, `reading_run` also profiles the compiled step and puts each generated kernel's time
beside its name (results/compile_reading_week5.json|md and the generated source
results/compile_week5_output_code.py to read). Cost: one compile of GPT_SMALL's training step
(forward + backward), tens of seconds; on the CPU one compile of GPT_TINY (C++ kernels).
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

import torch

from course import bench, runtime
from week2_pytorch_optimizations import compilation, profiling
from week5_integration import model as m
from week5_integration import profile_model as pm
from week5_integration import profile_model_bench as pm_bench
from week5_integration import train as tr

KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(triton|cpp_pybinding|cpp)\(", re.M)
SECTION = re.compile(r"^# AOT ID: \[?'?\d*_?(\w+?)'?\]?$", re.M)
LIBRARY_CALL = re.compile(r"\b(extern_kernels\.\w+|torch\.ops\.aten\.\w+)(?:\.default)?\(")
CALL_BODY = re.compile(r"^\s*def call\(", re.M)  # `def call(args)`, or `def call(self, args)` in a Runner class
ATTENTION_OPS = {"_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
                 "_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention"}
LAYOUT_OPS = {"clone", "transpose", "view", "_unsafe_view", "permute", "split", "slice", "expand", "_to_copy",
              "squeeze", "unsqueeze", "select", "cat_"}


def has_op(fused: str, op: str) -> bool:
    """Does the fused-op string of a kernel name contain this aten op as a whole word?"""
    return re.search(rf"(?:^|_){re.escape(op.strip('_'))}(?:_|$)", fused) is not None


# (counterpart label, test on the fused-op string, course kernel doing that job). Ordered:
# first match wins (cross-entropy kernels also contain "add" and "mul", norms contain "mul", ...).
COUNTERPARTS = [
    ("cross-entropy", lambda f: has_op(f, "log_softmax") or has_op(f, "nll_loss_forward") or has_op(f, "nll_loss_backward"),
     "week4 fused_linear_cross_entropy.py: cross_entropy_fwd_grad_kernel (inside fused_linear_cross_entropy)"),
    ("SwiGLU", lambda f: has_op(f, "silu") or has_op(f, "silu_backward") or has_op(f, "sigmoid"),
     "week4 swiglu.py: swiglu_fwd_kernel / swiglu_bwd_kernel"),
    ("GELU", lambda f: has_op(f, "gelu") or has_op(f, "tanh") or has_op(f, "gelu_backward"),
     "week3 fused_elementwise.py: bias_gelu_kernel / week4 fused_mlp.py: act_backward_kernel"),
    ("LayerNorm", lambda f: has_op(f, "native_layer_norm") or has_op(f, "var_mean") or has_op(f, "native_layer_norm_backward"),
     "week4 norms/layernorm.py, norms/layernorm_backward.py: layernorm_fwd_*_kernel / layernorm_bwd_kernel"),
    # torch >= 2.9 lowers F.rms_norm on CUDA to aten._fused_rms_norm(_backward), and Inductor names
    # its kernels after them; on the CPU (and in older torch) it is pow, mean, rsqrt, ... instead.
    ("RMSNorm backward", lambda f: has_op(f, "_fused_rms_norm_backward"),
     "week4 norms/rmsnorm.py: rmsnorm_bwd_kernel (+ norms/column_sums.py: partial_sum_kernel for dW)"),
    ("RMSNorm", lambda f: has_op(f, "rsqrt") or has_op(f, "_fused_rms_norm"), "week4 norms/rmsnorm.py: rmsnorm_fwd_*_kernel"),
    ("RMSNorm backward", lambda f: has_op(f, "pow") and has_op(f, "sum") and has_op(f, "mul"),
     "week4 norms/rmsnorm.py: rmsnorm_bwd_kernel (+ norms/column_sums.py: partial_sum_kernel for dW)"),
    ("RoPE", lambda f: has_op(f, "cat") and has_op(f, "mul"),  # rotate_half = cat(-x2, x1), times sin
     "week4 rope.py: rope_kernel (inverse=True for the backward)"),
    ("embedding", lambda f: has_op(f, "embedding") or has_op(f, "embedding_dense_backward"), None),
    # Copies between layouts (transposes, .contiguous()), possibly named after the op they feed.
    ("layout copy", lambda f: bool(ops_of(f)) and set(ops_of(f)) <= LAYOUT_OPS | ATTENTION_OPS, None),
]


def ops_of(fused: str) -> list[str]:
    """A best-effort split of the fused-op string into op names (for display)."""
    known = ["_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_flash_attention_for_cpu",
             "_log_softmax_backward_data", "_log_softmax", "nll_loss_backward", "nll_loss_forward",
             "embedding_dense_backward", "native_layer_norm_backward", "native_layer_norm", "silu_backward",
             "_fused_rms_norm_backward", "_fused_rms_norm",
             "gelu_backward", "_unsafe_view", "_to_copy", "scalar_tensor", "var_mean", "sigmoid"]
    ops, rest = [], fused.strip("_")
    while rest:
        for name in known:
            stripped = name.strip("_")
            if rest == stripped or rest.startswith(stripped + "_"):
                ops.append(name)
                rest = rest[len(stripped):].lstrip("_")
                break
        else:
            head, _, rest = rest.partition("_")
            ops.append(head)
    return ops


@dataclasses.dataclass
class GeneratedKernel:
    name: str
    graph: str                 # "forward", "backward" or "all" (no section markers found)
    ops: list                  # aten ops fused into it (from the name)
    call_sites: int            # launches per call of the graph (each layer launches its own)
    job: str | None            # what it does, in course terms ("RMSNorm", "RoPE", ...), None if none matched
    counterpart: str | None    # the course kernel doing that job
    cross_op: str | None       # what it fuses beyond that job (e.g. the residual add)
    reads: int | None = None   # tensors it reads (in_ptr / in_out_ptr parameters of its signature)


def fused_part(name: str) -> str:
    """'triton_per_fused_add_mean_mul_pow_rsqrt_3' -> 'add_mean_mul_pow_rsqrt'."""
    match = re.search(r"fused_(.*?)(?:_\d+)?$", name)
    return match.group(1) if match else name


# A norm reads x, its weight and (training) the rstd buffer it fills in place: 3 tensors. One that
# reads 4 also reads the residual branch: it does the residual add. The name cannot tell, since
# rsqrt(mean(x^2) + eps) has an add of its own. Backward: dy, x, rstd, weight = 4; 5 with the
# residual stream's gradient added in.
NORM_READS = {"forward": 3, "backward": 4}


def describe_kernel(name: str, graph: str, call_sites: int, reads: int | None = None) -> GeneratedKernel:
    """What a generated kernel does in course terms; `reads` (from its signature) decides fused adds."""
    # BEGIN EXERCISE: the job, its course counterpart and what else is fused in; fused = fused_part(name); the
    #   first COUNTERPARTS entry whose test accepts it gives the job and the course kernel; cross_op: the
    #   embedding fused into a norm, the residual add fused into a norm (it reads more tensors than
    #   NORM_READS: the name cannot tell, "+ eps" is an add too), a layout copy (clone/transpose/split) fused
    #   into RoPE or SwiGLU, the residual-gradient add in a norm backward.
    # HINT: Reading Inductor's output means naming each generated kernel in course terms: its fused name
    #   lists the ops it contains, and the ordered COUNTERPARTS table maps the first matching pattern to a
    #   job and the course kernel that does it.
    # HINT: fused_part and ops_of give the ops; a first-match loop over COUNTERPARTS (label, test, course);
    #   then an if/elif chain for the cross-op fusions, each a job plus an op test; build the
    #   GeneratedKernel.
    # HINT: The residual add cannot be told from the name (the norm's `+ eps` is an add too): require `reads
    #   > NORM_READS["forward"]` as well as has_op(fused, "add").
    fused = fused_part(name)
    ops = ops_of(fused)
    job, counterpart = None, None
    for label, test, course in COUNTERPARTS:
        if test(fused):
            job, counterpart = label, course
            break
    cross_op = None
    more_reads = reads is not None and reads > NORM_READS["forward"]
    if job in ("RMSNorm", "LayerNorm") and has_op(fused, "embedding"):
        cross_op = "embedding gather (+ the first norm)"
    elif job in ("RMSNorm", "LayerNorm") and more_reads and has_op(fused, "add"):
        cross_op = "residual add (+ norm): one pass instead of an add kernel then a norm kernel"
    elif job in ("RoPE", "SwiGLU") and any(has_op(fused, o) for o in ("clone", "transpose", "split")):
        cross_op = "layout copy (q, k out of the fused qkv projection, the halves of [gate | up]) fused in: the course kernels read those strided views in place"
    elif job == "RMSNorm backward" and reads is not None and reads > NORM_READS["backward"] and has_op(fused, "add"):
        cross_op = "residual-gradient add (+ norm backward)"
    return GeneratedKernel(name, graph, ops, call_sites, job, counterpart, cross_op, reads)
    # END EXERCISE


def kernel_reads(source: str, name: str) -> int | None:
    """How many tensors a generated kernel reads: its in_ptr / in_out_ptr parameters (Triton or C++)."""
    start = source.find(f"{name} = async_compile")
    if start < 0:
        return None
    body = source[start:]
    end = body.find("''')")  # the end of the kernel's source string
    body = body[:end] if end > 0 else body
    match = re.search(r"(?:def \w+|extern \"C\"\s+void\s+kernel)\s*\((.*?)\)", body, re.S)
    if match is None:
        return None
    return len(set(re.findall(r"\bin(?:_out)?_ptr\d+\b", match.group(1))))


def split_graphs(code: str) -> list[tuple[str, str]]:
    """[(graph name, its source)]: Inductor starts each module with '# AOT ID: ['0_forward']'."""
    marks = list(SECTION.finditer(code))
    if not marks:
        return [("all", code)]
    bounds = [mark.start() for mark in marks] + [len(code)]
    return [(marks[i].group(1), code[bounds[i]:bounds[i + 1]]) for i in range(len(marks))]


def parse(code: str) -> dict:
    """Generated kernels (with counterparts) and library calls of Inductor's output code."""
    # BEGIN EXERCISE: for each (graph, source) of split_graphs(code): kernel names from KERNEL_DEF, the launch
    #   sequence after CALL_BODY, call sites per kernel (name( or name.run( in it), then describe_kernel(name,
    #   graph, sites, kernel_reads(source, name)); library calls: LIBRARY_CALL matches in the launch sequence,
    #   counted as "graph: call".
    # HINT: Inductor's output code defines each kernel as a source string and then launches them in a `call`
    #   function: find the definitions, then count how often each name is called in that launch sequence.
    # HINT: Loop over split_graphs(code); names from KERNEL_DEF.finditer; the launch sequence is the part
    #   after CALL_BODY (split with maxsplit=1); count `name(` or `name.run(` occurrences with a regex;
    #   count LIBRARY_CALL matches into a dict keyed "graph: call".
    # HINT: `len(re.findall(rf"\b{re.escape(name)}(?:\.run)?\(", body))`: escape the name, and the word
    #   boundary keeps kernel_1 from counting kernel_10's calls.
    kernels, library = [], {}
    for graph, source in split_graphs(code):
        names = [match.group(1) for match in KERNEL_DEF.finditer(source)]
        parts = CALL_BODY.split(source, maxsplit=1)
        body = parts[-1]  # the launch sequence
        for name in names:
            sites = len(re.findall(rf"\b{re.escape(name)}(?:\.run)?\(", body))
            kernels.append(describe_kernel(name, graph, sites, kernel_reads(source, name)))
        for call in LIBRARY_CALL.findall(body):
            key = f"{graph}: {call}"
            library[key] = library.get(key, 0) + 1
    return {"kernels": kernels, "library_calls": library}
    # END EXERCISE


def summary(parsed: dict) -> dict:
    """Counts for the notes: kernels per graph, launches, how many map to a course kernel, cross-op fusions."""
    kernels = parsed["kernels"]
    by_graph: dict = {}
    for k in kernels:
        g = by_graph.setdefault(k.graph, {"kernels": 0, "launches": 0})
        g["kernels"] += 1
        g["launches"] += k.call_sites
    jobs: dict = {}
    for k in kernels:
        jobs[k.job or "other"] = jobs.get(k.job or "other", 0) + 1
    gemm = sum(n for call, n in parsed["library_calls"].items() if re.search(r"extern_kernels\.(mm|addmm|bmm|baddbmm)", call))
    attention = sum(n for call, n in parsed["library_calls"].items() if "attention" in call)
    return {"graphs": by_graph, "jobs": jobs, "cross_op_fusions": sum(1 for k in kernels if k.cross_op),
            "gemm_library_calls": gemm, "attention_library_calls": attention}


# --- compiling the model ---------------------------------------------------------------------------

def training_step_fn(model: m.GPT, amp: bool):
    """step(x, y): forward under autocast, backward; what gets compiled (forward + backward graphs)."""
    device_type = next(model.parameters()).device.type

    def step(x, y):
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=amp):
            loss = model.loss(x, y)
        loss.backward()
        return loss.detach()

    return step


def default_setup():
    """GPT_SMALL, batch 32 x 512, bf16 on a GPU; GPT_TINY, 2 x 16, fp32 on the CPU."""
    cfg, tc = pm_bench.default_setup()
    return cfg, tc


def capture(cfg=None, tc=None) -> dict:
    """Compile the torch twin's training step once: {"code": Inductor's source, and what made it}."""
    default_cfg, default_tc = default_setup()
    cfg, tc = tr.byte_vocab(cfg or default_cfg), tc or default_tc
    model = tr.build_model(cfg, "torch", seed=tc.seed)
    batches, _ = tr.make_batches(model.cfg, tc)
    x, y = batches.next()
    step = training_step_fn(model, tr.amp_enabled(tc, runtime.DEVICE))
    pm_bench.warm_rope_cache(model, tc)  # else the first graph computes the RoPE tables (see there)
    code = compilation.generated_code(step, x, y)  # week 2's helper: run_and_get_code, dynamo reset around it
    return {"code": code, "model": model, "step": step, "batch": (x, y), "cfg": cfg, "tc": tc}


def kernel_times(captured: dict, *, steps: int = 3, trace_path=None) -> dict:
    """{kernel name: us per step} of the compiled step on a GPU (names as in the generated code)."""
    if not runtime.on_gpu():
        raise ValueError("kernel times come from a GPU trace; this run uses the CPU")
    compiled = torch.compile(captured["step"])  # same function, same inputs: same kernels (FX graph cache)
    x, y = captured["batch"]
    profiling.profile_steps(lambda: compiled(x, y), steps=steps, warmup=2, trace_path=trace_path, label="compiled_step")
    entries = pm.kernels_from_trace(trace_path)
    torch._dynamo.reset()
    return {name: {"us": e["us"] / steps, "calls": e["calls"] / steps} for name, e in entries.items()}


def reading_record(captured: dict, times: dict | None = None) -> dict:
    """The compile_reading_week5 record: one row per generated kernel (+ its GPU time on a GPU)."""
    parsed = parse(captured["code"])
    rows = []
    for k in parsed["kernels"]:
        t = (times or {}).get(k.name)
        rows.append({"size": k.graph, "variant": k.name, "ms": t["us"] / 1e3 if t else None,
                     "launches_per_step": t["calls"] if t else k.call_sites, "job": k.job,
                     "course_counterpart": k.counterpart, "fuses_beyond_the_job": k.cross_op, "ops": k.ops})
    rows = [r for r in rows if r["ms"] is not None] + [r for r in rows if r["ms"] is None]
    if times:  # library kernels (cuBLAS, attention) by the profile's grouping
        groups: dict = {}
        for name, t in times.items():
            if not name.startswith(("triton_", "cpp_")):
                group = pm.classify(name)
                groups[group] = groups.get(group, 0.0) + t["us"]
        for group, us in sorted(groups.items(), key=lambda kv: -kv[1]):
            rows.append({"size": "library", "variant": f"{group} (not generated)", "ms": us / 1e3})
    cfg, tc = captured["cfg"], captured["tc"]
    title = f"What torch.compile generates for the torch twin's training step: {pm_bench.model_size_label(cfg, tc)}"
    return pm_bench.results_record(
        "compile_reading_week5", title,
        "one row per generated kernel: ms = its GPU time per step (GPU only), its job in course terms "
        "and the course kernel doing that job; 'library' rows = kernels Inductor did not generate",
        [r for r in rows if r.get("ms") is not None] if times else rows,
        {"ceilings": {"copy_gbps": bench.copy_bandwidth_gbps()}, "summary": summary(parsed),
         "headline": ["gemm (not generated)", "attention (not generated)"],
         "library_calls": parsed["library_calls"],
         "all_kernels": [dataclasses.asdict(k) for k in parsed["kernels"]]})


def reading_markdown(record: dict) -> str:
    s = record["summary"]
    lines = [f"**{record['title']}**: {bench.measured_on(record)}.", "",
             "Graphs: " + ", ".join(f"{g}: {v['kernels']} generated kernels, {v['launches']} launches"
                                    for g, v in s["graphs"].items()),
             f"; library calls: {s['gemm_library_calls']} GEMM, {s['attention_library_calls']} attention; "
             f"{s['cross_op_fusions']} kernels fuse across a course-kernel boundary.", "",
             "| graph | kernel | ms / step | job | course counterpart | fuses beyond the job |",
             "|---|---|---|---|---|---|"]
    for k in record["all_kernels"]:
        row = next((r for r in record["rows"] if r["variant"] == k["name"]), {})
        ms = "-" if row.get("ms") is None else f"{row['ms']:.3f}"
        lines.append(f"| {k['graph']} | `{k['name']}` | {ms} | {k['job'] or '-'} | {k['counterpart'] or '-'} | "
                     f"{k['cross_op'] or '-'} |")
    lib = [r for r in record["rows"] if r["size"] == "library"]
    if lib:
        lines += ["", "| not generated (library) | ms / step |", "|---|---|"]
        lines += [f"| {r['variant']} | {r['ms']:.3f} |" for r in lib]
    lines += ["", "Library calls in the generated code: " +
              ", ".join(f"`{c}` x{n}" for c, n in record["library_calls"].items()), ""]
    return "\n".join(lines)


def reading_run(out: Path | None = None, *, cfg=None, tc=None) -> dict:
    captured = capture(cfg, tc)
    times = None
    if runtime.on_gpu():
        trace = (Path(out) / "trace_week5_compiled.json.gz") if out is not None else Path("/tmp/trace_week5_compiled.json.gz")
        times = kernel_times(captured, trace_path=trace)
    record = reading_record(captured, times)
    if out is not None:
        pm_bench.save(record, out, reading_markdown(record))
        (Path(out) / "compile_week5_output_code.py").write_text(captured["code"])
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="results folder (default: week5_integration/results on a GPU, none on the CPU)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else (pm_bench.RESULTS if runtime.on_gpu() else None)
    record = reading_run(out)
    print(reading_markdown(record))
    if out is not None:
        print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
