"""The capstone's targets, each beside its measured value: summary.md, the table the README quotes.

It reads the records `capstone.measure` writes (training, decode, loss curves) and the one
`capstone.fsdp` writes (2 GPUs); a target whose record is missing says "not measured". Where the
fused GEMMs' graphed steps were profiled, rows say what limits them against the twin, and
fused_roads.md (`fused_roads_markdown`) sets their kinds of kernels in columns. A training row
quoted here names the attention it ran (its record's "attention": the kernels, and for fast's, that week
4's dispatch rule picked them), since the attention is one of the choices the rows compare (issue 33).
"""
from __future__ import annotations

from capstone.step_profile import COURSE_GEMM, MATMUL, fused_road_limits, kinds_of, step_bounds

# Issue 16's targets (issue 8's were 1.5x eager, 1.0x compiled, decode 5x).
TARGETS = {"train_vs_eager": 2.0, "train_vs_compile": 1.25, "decode_vs_no_cache": 10.0,
           "decode_cache_no_graph_vs_no_cache": 1.0, "fsdp_2gpu_scaling": 1.8}


# Issue 32's targets for the fused GEMMs' model, compiled, and the dense bf16 peak its MFU divides by: the
# datasheet's, per GPU (H100 / H200 SXM: 989.4 TFLOP/s without sparsity). Two models fuse the GEMMs: week 4's
# Triton fused linears (fused_gemms) and week 1's CUDA C wgmma kernels (wgmma_gemms, sm_90a only); each row
# takes the faster of the two measured in that mode and names it.
TARGETS_32 = {"vs_compile": 1.25, "vs_compile_cudagraphs": 1.15, "vs_eager": 2.0, "mfu": 0.45}
PEAK_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4}


# Issue 33: the capstone uses week 4's attention where it wins. fast runs the dispatch rule's pick; the rule is
# right at this shape when fast is within week 4's dispatch margin (3%: the sweep names another forward only
# past it) of the fastest of the op's rungs forced (triton_attention, hopper_attention) in the same mode.
ATTENTION_SIBLINGS = {"fast": ("triton_attention", "hopper_attention", "sdpa_attention"),
                      "fast+compile": ("hopper_attention+compile",),
                      "fast+compile+cudagraphs": ("hopper_attention+compile+cudagraphs",)}


def _named(row: dict, name: str | None = None) -> str:
    """The row's variant (or `name`), and the attention it ran when the record says."""
    name = row["variant"] if name is None else name
    return f"{name} ({row['attention']})" if row.get("attention") else name


def _peak_tflops(machine: dict) -> float | None:
    gpu = machine.get("gpu") or ""
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in gpu), None)


def fused_gemm_rows(train: dict | None, loss: dict | None, add) -> None:
    """Issue 32's targets: the fused GEMMs' model against the twins, its MFU, its loss against the twin's.
    The model is the faster of fused_gemms (Triton) and wgmma_gemms (CUDA C) in each mode, named in the row."""
    fused = _fastest(train, ("fused_gemms+compile", "wgmma_gemms+compile"))
    fused_graphs = _fastest(train, ("fused_gemms+compile+cudagraphs", "wgmma_gemms+compile+cudagraphs"))
    eager, comp, twin_graphs = _row(train, "torch"), _row(train, "torch.compile"), _row(train, "torch.compile+cudagraphs")
    best = min((r for r in (fused, fused_graphs) if r), key=lambda r: r["ms"], default=None)
    for label, a, b, target in (("the compiled twin (default mode)", fused, comp, TARGETS_32["vs_compile"]),
                                ("the twin compiled with the same CUDA graphs", fused_graphs, twin_graphs,
                                 TARGETS_32["vs_compile_cudagraphs"]),
                                ("the eager twin", best, eager, TARGETS_32["vs_eager"])):
        what = f"fused GEMMs (issue 32): training tokens/s >= {target}x {label}"
        if a and b:
            add(what, f"{_named(a)} {a['tokens_per_s']:,.0f} vs {_named(b)} {b['tokens_per_s']:,.0f} tokens/s: "
                      f"{b['ms'] / a['ms']:.2f}x", b["ms"] / a["ms"] >= target)
        else:
            add(what, "not measured", None)
    peak = _peak_tflops((train or {}).get("machine", {}))
    if best and peak and best.get("tflops"):
        add(f"fused GEMMs: MFU >= {TARGETS_32['mfu']:.0%} (model FLOPs / the dense bf16 peak, {peak} TFLOP/s)",
            f"{_named(best)} {best['tflops']:.0f} TFLOP/s: {best['tflops'] / peak:.1%}", best["tflops"] / peak >= TARGETS_32["mfu"])
    else:
        add(f"fused GEMMs: MFU >= {TARGETS_32['mfu']:.0%}", "not measured", None)
    held = (loss or {}).get("fused_gemms")
    if held:
        held_rows("fused GEMMs", held, loss, add)
    else:
        add("fused GEMMs: loss tracks the eager twin", "not measured", None)
    held = (loss or {}).get("wgmma_gemms")
    counted = any(r and r["variant"].startswith("wgmma_gemms") for r in (fused, fused_graphs, best))
    if held:  # week 1's kernels keep the residual stream in bf16 (capstone/wgmma_ops.py): its own loss row
        held_rows("wgmma GEMMs (week 1's CUDA C, bf16 residual stream)", held, loss, add)
    elif counted:  # a row above counts the CUDA C model: its loss must be shown too
        add("wgmma GEMMs (week 1's CUDA C, bf16 residual stream): loss tracks the eager twin", "not measured", None)


# The fused roads whose CUDA-graphed steps measure.py profiles, each read against the twin compiled with the same
# graphs (the target they miss most narrowly), and fast's graphed step beside them: the same model on cuBLAS's GEMMs.
FUSED_ROADS = ("fused_gemms+compile+cudagraphs", "wgmma_gemms+compile+cudagraphs")
TWIN_GRAPHS, FAST_GRAPHS = "torch.compile+cudagraphs", "fast+compile+cudagraphs"
TWINS = ("torch", "torch.compile", TWIN_GRAPHS)


def _profiled(record: dict | None, variant: str) -> dict | None:
    row = _row(record, variant)
    return row if row and (row.get("gpu_kernels") or row.get("gpu_ms_by_kind")) else None


def _roads(train: dict | None) -> tuple[dict, list[dict], dict | None] | None:
    """The profiled graphed twin, the profiled fused roads and fast's graphed row if profiled; None without a
    profiled twin and at least one profiled road."""
    twin = _profiled(train, TWIN_GRAPHS)
    roads = [r for r in (_profiled(train, v) for v in FUSED_ROADS) if r]
    return (twin, roads, _profiled(train, FAST_GRAPHS)) if twin and roads else None


def fused_road_rows(train: dict | None, add) -> None:
    """Why a fused road does not beat the twin, from measured profiles: for each profiled road, its graphed step
    by kind of kernel beside the twin's, its GEMMs' ms against the twin's and what its fusions removed; then the
    best figure any variant reached for each of issue 32's targets. Without a profiled road and a profiled graphed
    twin: no row (a record from before the roads were profiled reads as it did)."""
    found = _roads(train)
    if not found:
        return
    twin, roads, fast = found
    for road in roads:
        add(f"what limits the fused roads: {road['variant']} against {twin['variant']}, GPU ms per step by kind of "
            "kernel (profiles of the two CUDA-graphed steps)", road_limits(road, twin, fast), None)
    add("issue 32's targets: the best figure reached by any variant of this run", best_figures(train), None)


def road_limits(road: dict, twin: dict, fast: dict | None) -> str:
    """One road in words: its kinds beside the twin's, then two readings of `fused_road_limits`. Against the twin
    (the ratio's other side): its GEMMs' ms against the twin's cuBLAS ms and the other kinds that shrank (fast's
    own kernels and the fusions together) or grew. Against fast's graphed step when profiled (the same model with
    cuBLAS's GEMMs, nothing fused into them): what the GEMMs added and what the fusions removed, alone."""
    a, b = kinds_of(road), kinds_of(twin)
    side = "; ".join(f"{k} {a.get(k, 0.0):.2f} vs {b.get(k, 0.0):.2f}"
                     for k in sorted(set(a) | set(b), key=lambda k: -max(a.get(k, 0.0), b.get(k, 0.0))))
    text = (f"{side}; GPU busy {sum(a.values()):.2f} vs {sum(b.values()):.2f} ms (timed steps {road['ms']:.2f} vs "
            f"{twin['ms']:.2f} ms: {twin['ms'] / road['ms']:.2f}x). Against the twin: GEMMs {gemms(a)} vs {gemms(b)}, "
            + _moves(fused_road_limits(a, b), "the other kinds shrank", "grew"))
    if fast:
        f = kinds_of(fast)
        text += (f". Against {fast['variant']} (the same model on cuBLAS's GEMMs, nothing fused into them): GEMMs "
                 f"{gemms(f)}, " + _moves(fused_road_limits(a, f), "the fusions removed", "other kinds grew"))
    return text


def _moves(lim: dict, shrank: str, grew: str) -> str:
    listed = lambda kinds: ", ".join(f"{k} {ms:.2f}" for k, ms in kinds.items()) or "none"  # noqa: E731
    return (f"the GEMMs added {lim['gemm_added']:+.2f} ms; {shrank} {sum(lim['removed'].values()):.2f} ms "
            f"({listed(lim['removed'])}); {grew} {sum(lim['grew'].values()):.2f} ms ({listed(lim['grew'])}); "
            f"net {lim['net']:+.2f} ms of GPU time a step")


def gemms(kinds: dict) -> str:
    """A step's GEMM ms: the course's and cuBLAS's, and their sum when both ran."""
    course, cublas = kinds.get(COURSE_GEMM, 0.0), kinds.get(MATMUL, 0.0)
    if not course:
        return f"cuBLAS {cublas:.2f} ms"
    return f"course {course:.2f} + cuBLAS {cublas:.2f} = {course + cublas:.2f} ms"


def best_figures(train: dict) -> str:
    """For each of issue 32's targets, the best figure reached by any timed variant but the twins, named: against
    the graphed twin only the graphed variants count (the target is "with the same CUDA graphs")."""
    rows = [r for r in train["rows"] if "ms" in r and r["variant"] not in TWINS]
    eager, comp, twin_graphs = _row(train, "torch"), _row(train, "torch.compile"), _row(train, TWIN_GRAPHS)
    parts = []
    for label, twin, target, mode in (("the compiled twin (default mode)", comp, TARGETS_32["vs_compile"], ""),
                                      ("the twin with the same CUDA graphs", twin_graphs,
                                       TARGETS_32["vs_compile_cudagraphs"], "+cudagraphs"),
                                      ("the eager twin", eager, TARGETS_32["vs_eager"], "")):
        best = min((r for r in rows if r["variant"].endswith(mode)), key=lambda r: r["ms"], default=None)
        if twin and best:
            parts.append(f"{target}x {label}: {_named(best)} {twin['ms'] / best['ms']:.2f}x")
    peak = _peak_tflops(train.get("machine", {}))
    best = max((r for r in rows if r.get("tflops")), key=lambda r: r["tflops"], default=None)
    if peak and best:
        parts.append(f"MFU {TARGETS_32['mfu']:.0%}: {_named(best)} {best['tflops'] / peak:.1%}")
    return "; ".join(parts) or "not measured"


def held_rows(what: str, held: dict, loss: dict, add) -> None:
    """A model's loss against the eager twin in two rows, as the fast model's: the pre-stated bound
    (LOSS_TOLERANCE, reported as missed when it is), then the control (twice the distance between the
    compiled and the eager twin, and settled at the same loss) when the control was measured. One verdict
    for both would hide which one a curve misses, and the control itself can miss the pre-stated bound:
    the 20-step means, while the loss falls ~0.05 a step, part by a step or two of the trajectories' timing.
    The last row says which of the three it is (`loss_verdict`)."""
    t = loss["tolerance"]
    control = held.get("control")
    bound = f"step 0: {held['step0_abs_diff']:.4f}; {t['window']}-step means: {held['moving_avg_max_abs_diff']:.4f}"
    add(f"{what}: loss tracks the eager twin (step 0 within {t['step0_abs']}, {t['window']}-step means within "
        f"{t['moving_avg_abs']})", bound + ("" if control else f": {loss_verdict(held)}"), held["within_tolerance"])
    if control:
        add(f"{what}: the same, held to the control (as the fast model)",
            f"{held['moving_avg_max_abs_diff']:.4f} (control {control['moving_avg_max_abs_diff']:.4f}); last 50 steps "
            f"{held['final_mean_abs_diff']:.4f} (control {control['final_mean_abs_diff']:.4f}): {loss_verdict(held)}",
            held["within_control"])


def loss_verdict(held: dict) -> str:
    """Where a curve stands: within the pre-stated bound; beyond it but within the control's drift (what
    rounding alone does to a trajectory, measured in the same run); beyond both. Without a control, the
    bound's verdict alone, saying that no control was measured."""
    if held["within_tolerance"]:
        return "within the bound"
    if "within_control" not in held:
        return "beyond the bound (no control measured)"
    return "beyond the bound, within the control's drift" if held["within_control"] else "beyond both"


def attention_rows(train: dict | None, loss: dict | None, add) -> None:
    """Issue 33: fast against the same model with each attention forced, mode for mode (ATTENTION_SIBLINGS), and
    the Hopper attention's loss against the twin's. Nothing measured: no row (the sm_90a rows' skips say why)."""
    from week4_triton_dl.attention.dispatch import MARGIN

    for mode, siblings in ATTENTION_SIBLINGS.items():
        base = _row(train, mode)
        rows = [r for r in (_row(train, v) for v in siblings) if r]
        if not (base and rows):
            continue
        parts = [f"{_named(r)} {r['tokens_per_s']:,.0f}: {base['ms'] / r['ms']:.2f}x" for r in rows]
        rungs = [base] + [r for r in rows if not r["variant"].startswith("sdpa")]  # the op's forwards, forced
        fastest = min(rungs, key=lambda r: r["ms"])
        add(f"attention (issue 33): {mode}'s attention, week 4's dispatch rule's pick, within {MARGIN}x of the "
            "fastest of the op's kernels forced in the same model (tokens/s; x: the row's speed over fast's)",
            f"{_named(base)} {base['tokens_per_s']:,.0f} tokens/s; " + "; ".join(parts),
            base["ms"] <= MARGIN * fastest["ms"])
    held = (loss or {}).get("hopper_attention")
    if held:  # the bound and the control in their own rows, as every other model's loss
        held_rows("Hopper attention (week 4's CUDA C, forward and backward)", held, loss, add)
    elif any(_row(train, v) for v in ("hopper_attention", "hopper_attention+compile",
                                      "hopper_attention+compile+cudagraphs")):
        add("Hopper attention (week 4's CUDA C): loss tracks the eager twin", "not measured", None)


def _fastest(record: dict | None, variants: tuple[str, ...]) -> dict | None:
    """The timed row of the fastest of `variants` (None when none was timed)."""
    return min((r for r in (_row(record, v) for v in variants) if r), key=lambda r: r["ms"], default=None)


def _row(record: dict | None, variant: str, size_prefix: str = "") -> dict | None:
    if not record:
        return None
    return next((r for r in record.get("rows", []) if r["variant"] == variant and "ms" in r
                 and str(r["size"]).startswith(size_prefix)), None)


def summary_markdown(train: dict | None, decode: dict | None, loss: dict | None,
                     fsdp: dict | None = None) -> str:
    """Every target of issue 8 beside its measured value: the table the README quotes."""
    lines = ["| target | measured | met? |", "|---|---|---|"]

    def add(target, value, ok):
        lines.append(f"| {target} | {value} | {'-' if ok is None else ('yes' if ok else 'NO')} |")

    fast, eager, comp = _row(train, "fast"), _row(train, "torch"), _row(train, "torch.compile")
    best = min((r for r in (fast, _row(train, "fast, one-thread backward"), _row(train, "fast+compile"),
                            _row(train, "fast+compile+cudagraphs")) if r),
               key=lambda r: r["ms"], default=None)
    if fast and eager:
        add(f"training tokens/s >= {TARGETS['train_vs_eager']}x the eager twin",
            f"{_named(fast)} {fast['tokens_per_s']:,.0f} vs {_named(eager, 'eager')} {eager['tokens_per_s']:,.0f} tokens/s: "
            f"{eager['ms'] / fast['ms']:.2f}x" + (f" (best, {_named(best)}: {eager['ms'] / best['ms']:.2f}x)"
                                                   if best is not fast else ""),
            eager["ms"] / best["ms"] >= TARGETS["train_vs_eager"])
    else:
        add(f"training tokens/s >= {TARGETS['train_vs_eager']}x the eager twin", "not measured", None)
    if best and comp:
        add(f"training tokens/s >= {TARGETS['train_vs_compile']}x the compiled twin",
            f"{_named(best)} {best['tokens_per_s']:,.0f} vs {_named(comp)} {comp['tokens_per_s']:,.0f}: "
            f"{comp['ms'] / best['ms']:.2f}x", comp["ms"] / best["ms"] >= TARGETS["train_vs_compile"])
    else:
        add(f"training tokens/s >= {TARGETS['train_vs_compile']}x the compiled twin", "not measured", None)
    twin_graphs, fast_graphs = _row(train, "torch.compile+cudagraphs"), _row(train, "fast+compile+cudagraphs")
    if twin_graphs and fast_graphs:
        add("the same comparison with both compiled in reduce-overhead mode (CUDA graphs)",
            f"{_named(fast_graphs)} {fast_graphs['tokens_per_s']:,.0f} vs {_named(twin_graphs)} "
            f"{twin_graphs['tokens_per_s']:,.0f} tokens/s: "
            f"{twin_graphs['ms'] / fast_graphs['ms']:.2f}x", None)
    fastest_twin = min((r for r in (comp, twin_graphs) if r), key=lambda r: r["ms"], default=None)
    bound = _matmul_bound(twin_graphs, fast_graphs, fastest_twin)
    if bound:
        add("what limits the ratio to the compiled twin: GPU ms per step by kind of kernel (profiles of the two "
            "CUDA-graphed steps)", bound, None)
    if fast and eager and fast.get("peak_mib") and eager.get("peak_mib"):
        add("peak memory <= the eager twin's", f"fast {fast['peak_mib']:,.0f} MiB vs eager {eager['peak_mib']:,.0f} MiB",
            fast["peak_mib"] <= eager["peak_mib"])
    else:
        add("peak memory <= the eager twin's", "not measured", None)
    if loss and "max_abs_diff" in loss:
        t = loss["tolerance"]
        add(f"loss over {loss['steps']} steps tracks the eager twin (step 0 within {t['step0_abs']}, "
            f"{t['window']}-step means within {t['moving_avg_abs']})",
            f"step 0: {loss['step0_abs_diff']:.4f}; {t['window']}-step means: {loss['moving_avg_max_abs_diff']:.4f}; "
            f"largest single-step difference {loss['max_abs_diff']:.4f}" + ("" if "control" in loss else
                                                                            f": {loss_verdict(loss)}"),
            loss["within_tolerance"])
    else:
        add("loss tracks the eager twin", "not measured", None)
    if loss and "control" in loss:
        c = loss["control"]
        add("the same, held to a control: within twice the distance between the compiled and the eager "
            f"torch twin ({loss['tolerance']['window']}-step means), and the last 50 steps' means within "
            f"max(2 x the control's, {loss['tolerance']['final_abs']})",
            f"fast vs eager {loss['moving_avg_max_abs_diff']:.4f} (control {c['moving_avg_max_abs_diff']:.4f}); "
            f"last 50 steps {loss['final_mean_abs_diff']:.4f} (control {c['final_mean_abs_diff']:.4f}): "
            f"{loss_verdict(loss)}", loss["within_control"])
    fused_gemm_rows(train, loss, add)
    fused_road_rows(train, add)
    attention_rows(train, loss, add)
    cached, base = _row(decode, "fast cache", "B=1"), _row(decode, "torch no_cache", "B=1")
    if cached and base:
        add(f"decode tokens/s with the KV cache, no graph, >= {TARGETS['decode_cache_no_graph_vs_no_cache']}x the "
            "no-cache eager loop at ~1k",
            f"{cached['tokens_per_s']:,.0f} vs {base['tokens_per_s']:,.0f} tokens/s (batch 1): {base['ms'] / cached['ms']:.2f}x",
            base["ms"] / cached["ms"] >= TARGETS["decode_cache_no_graph_vs_no_cache"])
    else:
        add("decode with the KV cache, no graph, >= 1x the no-cache loop", "not measured", None)
    graph = _row(decode, "fast cache+graph", "B=1")
    if graph and base:
        add(f"decode tokens/s (KV cache + CUDA graph) >= {TARGETS['decode_vs_no_cache']}x the no-cache eager loop at ~1k",
            f"{graph['tokens_per_s']:,.0f} vs {base['tokens_per_s']:,.0f} tokens/s (batch 1): {base['ms'] / graph['ms']:.1f}x",
            base["ms"] / graph["ms"] >= TARGETS["decode_vs_no_cache"])
    else:
        add(f"decode >= {TARGETS['decode_vs_no_cache']}x the no-cache loop", "not measured", None)
    fsdp_row = max((r for r in (fsdp or {}).get("rows", []) if r.get("scaling_efficiency") is not None),
                   key=lambda r: r["speedup_vs_one_gpu"], default=None)  # the better like-for-like comparison
    if fsdp_row:  # capstone/fsdp.py's record: its own machine and date
        add(f"FSDP on 2 GPUs >= {TARGETS['fsdp_2gpu_scaling']}x one GPU",
            f"{fsdp_row['variant']} {fsdp_row['tokens_per_s']:,.0f} vs 1 GPU "
            f"{fsdp_row['tokens_per_s'] / fsdp_row['speedup_vs_one_gpu']:,.0f} tokens/s at the same per-GPU batch: "
            f"{fsdp_row['speedup_vs_one_gpu']:.2f}x ({fsdp['machine'].get('gpu')}, {fsdp['date']}; "
            "`capstone_fsdp.md`)", fsdp_row["speedup_vs_one_gpu"] >= TARGETS["fsdp_2gpu_scaling"])
    else:
        add(f"FSDP on 2 GPUs >= {TARGETS['fsdp_2gpu_scaling']}x one GPU", "not measured by this command "
            "(2-GPU run pending; correctness: tests/capstone/test_fsdp.py, 2 gloo processes)", None)
    where = (train or decode or loss or {}).get("machine", {})
    head = (f"Measured on {where.get('gpu') or 'the CPU (SIMULATION: Python and the Triton interpreter, not a GPU)'}; "
            f"torch {where.get('torch')}, triton {where.get('triton')}, CUDA {where.get('cuda_runtime')}; "
            f"{(train or decode or loss or {}).get('date')}.")
    return head + "\n\n" + "\n".join(lines) + "\n"


def _matmul_bound(twin: dict | None, fast: dict | None, comp: dict | None) -> str | None:
    """The profiles' kernel kinds side by side, and the ceilings they set on fast / compiled twin
    (`step_bounds`)."""
    if not (twin and fast and comp and twin.get("gpu_ms_by_kind") and fast.get("gpu_ms_by_kind")):
        return None
    a, b = kinds_of(fast), kinds_of(twin)
    parts = [f"{k} {a.get(k, 0.0):.2f} vs {b.get(k, 0.0):.2f}" for k in sorted(set(a) | set(b), key=lambda k: -b.get(k, a.get(k, 0)))]
    bounds = step_bounds(a, b)
    text = (f"fast vs twin: {'; '.join(parts)}; GPU busy {bounds['total']:.2f} vs {sum(b.values()):.2f} ms")
    if bounds["floor"]:
        text += (f". Bounds on fast / compiled twin (its faster mode, {comp['variant']}, {comp['ms']:.2f} ms): with "
                 f"attention at the twin's time and "
                 f"no Inductor-generated kernel, {bounds['best_today']:.2f} ms = "
                 f"{comp['ms'] / bounds['best_today']:.2f}x; matmuls + optimizer alone {bounds['floor']:.2f} ms = "
                 f"{comp['ms'] / bounds['floor']:.2f}x")
    return text


def fused_roads_markdown(train: dict | None) -> str | None:
    """fused_roads.md (measure.py writes it beside summary.md): the profiled fused roads' graphed steps by kind of
    kernel in columns beside the twin's and fast's, then the summary's rows on them. None where
    `fused_road_rows` adds no row."""
    found = _roads(train)
    if not found:
        return None
    twin, roads, fast = found
    columns = [twin, *([fast] if fast else []), *roads]
    kinds = [kinds_of(r) for r in columns]
    order = sorted({k for ks in kinds for k in ks}, key=lambda k: -max(ks.get(k, 0.0) for ks in kinds))
    lines = ["| GPU ms per step | " + " | ".join(r["variant"] for r in columns) + " |",
             "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {k} | " + " | ".join(f"{ks.get(k, 0.0):.2f}" for ks in kinds) + " |" for k in order]
    lines += ["| GPU busy (the kinds' sum) | " + " | ".join(f"{sum(ks.values()):.2f}" for ks in kinds) + " |",
              "| timed step (ms, not profiled) | " + " | ".join(f"{r['ms']:.2f}" for r in columns) + " |"]
    where = train.get("machine", {})
    words = [f"* **{road['variant']}** against {twin['variant']}: {road_limits(road, twin, fast)}." for road in roads]
    words.append(f"* Issue 32's targets, the best figure reached by any variant of this run: {best_figures(train)}.")
    return (f"**What limits the fused roads**: {where.get('gpu') or 'the CPU (SIMULATION)'}, {train.get('date')}; "
            "GPU ms per step by kind of kernel (`capstone.step_profile.KERNEL_KINDS`; the course's GEMMs: the names "
            "week 1's and week 4's sources give them), from the profiles of the CUDA-graphed steps (3 steps each, "
            "`profile_*.md` of the run).\n\n" + "\n".join(lines) + "\n\n" + "\n".join(words) + "\n")
