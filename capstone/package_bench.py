"""The deployment paths of the capstone GPT, timed side by side (the package: week 5's aot_package.py).

    python -m capstone.package_bench --out capstone/results     # on the GPU

One model (the capstone's fast model, `gpt2_124m` in bf16 on a GPU; `tiny` in fp32 in
simulation), one greedy generation (prompt P, N new tokens, batch 1 and 8), decoded each way:

* `eager cache`: the fast model's forward with week 5's KVCache, one Python call per token;
* `eager cache+graph`: week 5's StaticDecoder, one CUDA-graph replay per token;
* `torch.compile`: aot_package's Decode step (the very graph the package holds) JIT-compiled
  by torch.compile, mode "reduce-overhead" (Inductor + CUDA graphs), one call per token;
* `aoti package`: the .pt2, its decode function called directly (the loop a C++ server runs);
* `aoti package, checked`: the same through aot_runner.PackagedGPT, which checks every input
  against the package's metadata first (a host sync per token for the id range);
* `aoti int8 package`: week 5's aot_quant.py, the int8 weight-only twin (the quantization
  lesson's scheme and its int8_matmul_kernel, compiled in) packaged the same way, called as
  `aoti package` is; its floor counts the int8 weights (1 byte each, plus an fp32 scale per row);
* `aoti fp8 package`: aot_quant's fp8 twin (rowwise fp8 activations and weights, torch._scaled_mm)
  on GPUs with fp8 tensor cores (sm_89+); elsewhere the row carries the refusal, which names int8;
* `onnxruntime`: the ONNX export (onnx_export.py), prefill only (it has no KV cache; on the
  CPU execution provider unless onnxruntime-gpu is installed: the row says where it ran).

Each package (float, int8, fp8) has its line under the table: size, compile time, load time in
a fresh process. Each row: ms per decode step (one new token per sequence), tokens/s, prefill ms and tokens/s
(B x P / prefill time). Beside them: the memory floor of one step (weights + KV cache read once,
`inference.decode_step_bytes`, divided by the copy bandwidth measured in the same run), the
package's compile time, its size, its load time in a fresh process, and which kernels run:
the course kernels found in the package's generated code (`aot_package.package_kernels`) and a
torch.profiler trace of one package decode step and one prefill, each kernel name sorted into
course / Inductor-generated Triton / other (cuBLAS, aten, flash SDPA).

Runtime on an H100 (estimated, not yet measured): packaging ~60-120 s per package (two graphs,
Inductor + the course's Triton kernels compiled to cubins; three packages: float, int8, fp8),
torch.compile ~20-40 s per batch size, the timed loops a few seconds each: ~6-8 min in all; under
a 10-minute limit run the packages apart (`--variants` picks a subset; the float package's rows
and the quantized ones' in two runs, the second with `--name aot_package_quant --variants "aoti int8
package" "aoti fp8 package"` so that it writes its own results files).
On the CPU (tiny model, fp32) each package is minutes of Inductor's C++ on a small machine.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from capstone import model as cm
from course import bench, bench_timing, runtime
from course.bench_clock import LoopClock
from week5_integration import aot_package as ap
from week5_integration import aot_quant as aq
from week5_integration import inference

BENCHMARK_NAME = "aot_package"
RUNNER = Path(__file__).resolve().parents[1] / "week5_integration" / "aot_runner.py"  # torch only: what a server holds
VARIANTS = ("eager cache", "eager cache+graph", "torch.compile", "aoti package", "aoti package, checked",
            "aoti int8 package", "aoti fp8 package", "onnxruntime")
# Which package a variant runs: the float one (aot_package), or a quantized twin's (aot_quant).
PACKAGE_OF = {"aoti package": "float", "aoti package, checked": "float", "aoti int8 package": "int8",
              "aoti fp8 package": "fp8"}
BUILDERS = {"float": ap.package, "int8": aq.package_int8, "fp8": aq.package_fp8}
TWINS = {"float": lambda model: model, "int8": aq.int8_model, "fp8": aq.fp8_model}


def plan() -> dict:
    return {"config": runtime.pick(gpu="gpt2_124m", sim="tiny"), "dtype": runtime.pick(gpu=torch.bfloat16, sim=torch.float32),
            "prompt": runtime.pick(gpu=960, sim=16), "new": runtime.pick(gpu=64, sim=4),
            "batches": runtime.pick(gpu=[1, 8], sim=[1, 2]), "repeats": runtime.pick(gpu=3, sim=1)}


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def load_runner():
    spec = importlib.util.spec_from_file_location("aot_runner", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _decode_loop(step, prefill, idx, new: int) -> dict:
    """Time prefill() then new - 1 calls of step(token) -> logits: {"prefill_ms", "ms", "tokens", "timings"};
    the steps also on the kit's clock (course/bench_clock.py), whose Timing says whether the host paced them."""
    _sync()
    t0 = time.perf_counter()
    logits = prefill(idx)
    token = logits[:, -1].argmax(-1, keepdim=True)
    _sync()
    t1 = time.perf_counter()
    tokens = [idx, token]
    clock = LoopClock(new - 1)
    for _ in range(new - 1):
        clock.start()
        token = step(token).argmax(-1, keepdim=True)
        clock.stop()
        tokens.append(token)
    timing = clock.timing() if len(clock) else None  # its synchronize first: the drain is the rule's sign
    _sync()
    t2 = time.perf_counter()
    return {"prefill_ms": (t1 - t0) * 1e3, "ms": (t2 - t1) * 1e3 / (new - 1), "tokens": torch.cat(tokens, 1),
            **bench_timing.row_fields(timing), "timings": [timing] if timing else []}


def _median(runs: list[dict]) -> dict:
    timings = [t for r in runs for t in r["timings"]]
    return {"prefill_ms": statistics.median(r["prefill_ms"] for r in runs), "ms": statistics.median(r["ms"] for r in runs),
            "tokens": runs[-1]["tokens"], "timings": timings}


class _Loop:
    """prefill / step closures over explicit caches for the Decode graph (torch.compile) or the
    package's raw functions: the position lives in a device tensor, as in the package."""

    def __init__(self, prefill_fn, decode_fn, cfg, batch, max_len, dtype):
        self.prefill_fn, self.decode_fn = prefill_fn, decode_fn
        shape = ap.cache_shape(cfg, batch, max_len)
        self.k = torch.zeros(shape, dtype=dtype, device=runtime.DEVICE)
        self.v = torch.zeros_like(self.k)
        self.pos = torch.zeros(1, dtype=torch.int64, device=runtime.DEVICE)

    @staticmethod
    def _first(out):
        return out[0] if isinstance(out, (list, tuple)) else out

    def prefill(self, idx):
        logits = self._first(self.prefill_fn(idx, self.k, self.v))
        self.pos.fill_(idx.shape[1])
        return logits

    def step(self, token):
        logits = self._first(self.decode_fn(token, self.pos, self.k, self.v))
        self.pos.add_(1)
        return logits


def measure(variant: str, model, p: dict, batch: int, idx, package_path, compiled: dict) -> dict:
    """One timed generation of `variant` (after a warm-up run)."""
    cfg, new, max_len = model.cfg, p["new"], p["max_len"]
    if variant in ("eager cache", "eager cache+graph"):
        got = inference.measure_generate(model, batch=batch, prompt=idx.shape[1], new_tokens=new, repeats=p["repeats"],
                                         variant="cache" if variant == "eager cache" else "cache_graph")
        return {"prefill_ms": got["prefill_ms"], "ms": got["ms"], "tokens": got["tokens"],
                **bench_timing.rounds_fields(got["timings"]), "timings": got["timings"]}
    if variant == "torch.compile":
        if batch not in compiled:
            old = model.ops
            model.use_ops(ap.AOT_OPS)  # the package's graph, JIT-compiled (the ops are kept swapped while it runs)
            compiled[batch] = (torch.compile(ap.Decode(model), mode="reduce-overhead", fullgraph=True), old)
        decode, old = compiled[batch]
        model.use_ops(ap.AOT_OPS)
        try:
            with torch.no_grad():
                make = lambda: _Loop(ap.Prefill(model), decode, cfg, batch, max_len, p["dtype"])  # noqa: E731
                runs = [_decode_loop((lp := make()).step, lp.prefill, idx, new) for _ in range(p["repeats"] + 1)]
        finally:
            model.use_ops(old)
        return _median(runs[1:])
    runner = load_runner()
    if variant in ("aoti package", "aoti int8 package", "aoti fp8 package"):
        gpt = runner.PackagedGPT(package_path)
        make = lambda: _Loop(gpt.prefill_fn, gpt.decode_fn, cfg, batch, max_len, p["dtype"])  # noqa: E731
        runs = [_decode_loop((lp := make()).step, lp.prefill, idx, new) for _ in range(p["repeats"] + 1)]
        return _median(runs[1:])
    if variant == "aoti package, checked":
        gpt = runner.PackagedGPT(package_path)
        runs = [_decode_loop(gpt.decode, gpt.prefill, idx, new) for _ in range(p["repeats"] + 1)]
        return _median(runs[1:])
    if variant == "onnxruntime":
        from week5_integration import onnx_export as ox


        ox.require_onnx()
        cpu_model = cm.build(cfg, "reference", device="cpu", dtype=torch.float32).eval()
        with tempfile.TemporaryDirectory() as tmp:
            session = ox.onnx_session(ox.export_onnx(cpu_model, Path(tmp) / "gpt.onnx"))
            ms = ox.time_cpu(lambda: ox.run_onnx(session, idx.cpu()), repeats=p["repeats"])
        return {"prefill_ms": ms, "ms": None, "tokens": None, "where": "CPU execution provider, fp32, no KV cache"}
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def load_time_fresh_process(path) -> dict:
    """Seconds to import torch and to load the package, in a new Python (what a server pays once)."""
    code = ("import time, json; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); "
            "from torch._inductor.package import load_package; t2 = time.perf_counter(); "
            f"a = load_package({str(path)!r}, 'prefill'); b = load_package({str(path)!r}, 'decode'); "
            "t3 = time.perf_counter(); print(json.dumps({'import_torch_s': t1 - t0, 'import_loader_s': t2 - t1, "
            "'load_s': t3 - t2}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if done.returncode:  # a negative code: the loader died of a signal (a crash in torch's C++ loader)
        return {"error": done.stderr[-500:], **({"signal": -done.returncode} if done.returncode < 0 else {})}
    import json
    return json.loads(done.stdout.strip().splitlines()[-1])


def matmul_weight_bytes(model) -> int:
    """Bytes of the weights every position multiplies by (the linear layers and the head): 1 per int8
    or fp8 weight plus 4 per row's scale in a quantized twin, the model's itemsize per weight elsewhere."""
    total = 0
    for module in model.modules():
        if isinstance(module, aq.Int8Linear):
            total += module.qweight.numel() + 4 * module.scale.numel()
        elif isinstance(module, aq.Fp8Linear):
            total += module.w8.numel() + 4 * module.w_scale.numel()
        elif isinstance(module, torch.nn.Linear):
            total += module.weight.numel() * module.weight.element_size()
    return total


def build_package(kind: str, model, p: dict, folder) -> dict:
    """Compile the `kind` package of `model` for plan `p`: {"path", "compile_s", package_kernels,
    fresh-process load times}, or {"refused": message} (fp8 without fp8 tensor cores)."""
    path = Path(folder) / f"gpt_{kind}.pt2"
    t0 = time.perf_counter()
    try:
        BUILDERS[kind](model, path, max_batch=max(p["batches"]), max_len=p["max_len"])
    except runtime.NotOnThisGpu as refusal:
        return {"refused": str(refusal)}
    return {"path": str(path), "compile_s": time.perf_counter() - t0, **ap.package_kernels(path),
            **load_time_fresh_process(path)}


def kernel_census(path, batch: int, prompt: int, max_len: int) -> dict:
    """Kernels one package prefill and one decode step launch (torch.profiler), by whose they are."""
    if not runtime.on_gpu():
        return {"note": "no GPU: the CPU package runs Inductor's C++, no kernels to list"}
    from torch.profiler import ProfilerActivity, profile

    gpt = load_runner().PackagedGPT(path)
    idx = torch.randint(0, gpt.vocab_size, (batch, prompt), device=runtime.DEVICE)
    gpt.prefill(idx)  # warm-up: the loader's lazy work, cuBLAS handles
    out = {}
    for phase in ("prefill", "decode"):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            gpt.prefill(idx) if phase == "prefill" else gpt.decode(idx[:, :1])
            _sync()
        names = {}
        for e in prof.key_averages():
            if e.device_type.name == "CUDA" or getattr(e, "device_time_total", 0):
                names[e.key] = names.get(e.key, 0) + e.count
        kinds = {"course": {}, "inductor": {}, "other": {}}
        for name, count in names.items():
            kind = ("course" if any(k in name for k in ap.COURSE_KERNELS) else
                    "inductor" if name.startswith(("triton_", "triton_poi", "triton_red", "triton_per")) else "other")
            kinds[kind][name] = count
        out[phase] = kinds
    return out


def run(p: dict, variants=VARIANTS, deadline_s: float = 170.0, package_path=None, prebuilt=None) -> dict:
    """Every variant at every batch of plan `p`; `package_path`: reuse a package of this plan's
    model (seed 0, dtype, max_len, max batch) instead of compiling one (compile_s then absent);
    `prebuilt`: {kind: {"path", "compile_s"}} for any of "float", "int8", "fp8", packages of this
    plan's model compiled elsewhere (the tests' session builds), their compile time as measured there."""
    started = time.perf_counter()
    cfg = cm.preset(p["config"])
    p["max_len"] = min(cfg.max_seq_len, -(-(p["prompt"] + p["new"] - 1) // 16) * 16)
    model = cm.build(cfg, "fast", dtype=p["dtype"]).eval()
    extra, packages = {}, {}
    folder = Path(tempfile.mkdtemp())
    for kind in dict.fromkeys(PACKAGE_OF[v] for v in variants if v in PACKAGE_OF):
        print(f"[aot_package] compiling the {kind} package", file=sys.stderr, flush=True)
        if kind in (prebuilt or {}):
            path = prebuilt[kind]["path"]
            packages[kind] = {"path": str(path), "compile_s": prebuilt[kind]["compile_s"], **ap.package_kernels(path),
                              **load_time_fresh_process(path)}
        elif kind == "float" and package_path is not None:  # reuse: no compile time to report
            packages[kind] = {"path": str(package_path), **ap.package_kernels(package_path),
                              **load_time_fresh_process(package_path)}
        else:
            packages[kind] = build_package(kind, model, p, folder)
    for kind, info in packages.items():
        extra["package" if kind == "float" else f"package_{kind}"] = info
    package_path = packages.get("float", {}).get("path", package_path)
    if package_path is not None and "path" in packages.get("float", {}):
        crashed = extra["package"].get("signal")  # then loading it here would end this process too
        try:
            extra["kernels"] = (kernel_census(package_path, 1, p["prompt"], p["max_len"]) if not crashed else
                                {"error": f"not run: loading the package killed a fresh process (signal {crashed})"})
        except Exception as error:  # the census is a reading aid: its failure is reported, not fatal
            extra["kernels"] = {"error": f"{type(error).__name__}: {error}"[:500]}
    copy_gbps = bench.copy_bandwidth_gbps()
    started = time.perf_counter()  # the budget is the timed rows': compiling the packages is not in it
    rows, compiled, twins = [], {}, {}
    for batch in p["batches"]:
        size = f"B={batch}, prompt {p['prompt']}+{p['new']}"
        idx = torch.randint(0, cfg.vocab_size, (batch, p["prompt"]), generator=torch.Generator().manual_seed(0))
        idx = idx.to(runtime.DEVICE)
        context = p["prompt"] + p["new"] // 2
        itemsize = bench.itemsize(p["dtype"])
        float_bytes = inference.decode_step_bytes(cfg, batch=batch, context=context, itemsize=itemsize)
        base_tokens = None
        for variant in variants:
            if time.perf_counter() - started > deadline_s:
                rows.append({"size": size, "variant": variant, "skipped": "time budget spent"})
                continue
            kind = PACKAGE_OF.get(variant)
            info = packages.get(kind, {})
            if "refused" in info:
                rows.append({"size": size, "variant": variant, "skipped": f"refused: {info['refused']}"[:300]})
                continue
            if info.get("signal"):
                rows.append({"size": size, "variant": variant, "skipped": "the package's loader crashed a fresh "
                             f"process (signal {info['signal']}): not loaded in this one"})
                continue
            # The floor of this variant's weights: a quantized twin reads 1 byte per weight and its scales.
            if kind in ("int8", "fp8") and kind not in twins:
                twins[kind] = matmul_weight_bytes(TWINS[kind](model))
            twin_weights = twins.get(kind)
            floor_bytes = (float_bytes if twin_weights is None else
                           float_bytes - inference.matmul_weights(cfg) * itemsize + twin_weights)
            floor_ms = floor_bytes / (copy_gbps * 1e9) * 1e3
            if variant == "onnxruntime" and batch > 1:  # a CPU forward of the whole model: batch 1 says it
                rows.append({"size": size, "variant": variant, "skipped": "run at batch 1 only (CPU, prefill)"})
                continue
            print(f"[aot_package] {size} {variant}", file=sys.stderr, flush=True)
            try:
                got = measure(variant, model, p, batch, idx, info.get("path", package_path), compiled)
            except Exception as error:
                traceback.print_exc()
                rows.append({"size": size, "variant": variant, "skipped": f"failed: {type(error).__name__}: {error}"[:300]})
                continue
            row = {"size": size, "variant": variant, "batch": batch, "prompt": p["prompt"], "ms": got["ms"],
                   "prefill_ms": got["prefill_ms"], "prefill_tokens_per_s": batch * p["prompt"] / (got["prefill_ms"] * 1e-3),
                   "floor_ms": floor_ms, "floor_bytes": floor_bytes,
                   # host-bound if the host paced any run's decode steps (course/bench_clock.py; none on the CPU)
                   **bench_timing.rounds_fields(got.get("timings", []))}
            if got.get("where"):
                row["where"] = got["where"]
            if got["ms"]:
                row["tokens_per_s"] = batch / (got["ms"] * 1e-3)
                row["pct_of_floor"] = 100 * floor_ms / got["ms"]
            if got["tokens"] is not None:
                base_tokens = got["tokens"] if base_tokens is None else base_tokens
                row["same_tokens_as_first"] = bool(torch.equal(got["tokens"].cpu(), base_tokens.cpu()))
            rows.append(row)
    return {"benchmark": BENCHMARK_NAME,
            "title": f"Deployment paths of the capstone GPT ({cfg.n_layers} x {cfg.d_model}, V={cfg.vocab_size}, "
                     f"{str(p['dtype']).removeprefix('torch.')}): greedy decode and prefill",
            "notes": ("ms = one decode step (one new token per sequence), median of the runs after a warm-up (* where "
                      "the host paced a run's steps); floor = "
                      "weights + KV cache at the mean context read once at the copy bandwidth measured in this run; "
                      "prefill tokens/s = batch x prompt / prefill time (logits of every position); onnxruntime: no "
                      "cache, prefill only, where it ran; same tokens: against the first variant of the batch "
                      "(bf16: a near-tie may flip; the int8 and fp8 packages run other weights: their tokens may differ); "
                      "the int8 and fp8 floors count their matmul weights at 1 byte plus an fp32 scale per row"),
            "simulated": not runtime.on_gpu(), "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": runtime.describe(), "ceilings": {"copy_gbps": copy_gbps}, "plan": {k: str(v) for k, v in p.items()},
            "rows": rows, **extra}


def table(record: dict) -> str:
    head = ["size", "variant", "ms/token", "tokens/s", "% of floor", "prefill ms", "prefill tokens/s", "same tokens"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    f = bench.fmt  # a cell: "-" where a value is missing
    for r in record["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['size']} | {r['variant']} | {r['skipped']} |" + " |" * (len(head) - 3))
            continue
        lines.append("| " + " | ".join([r["size"], r["variant"] + (f" ({r['where']})" if r.get("where") else ""),
                                        bench_timing.mark(f(r.get("ms"), ".3f"), r), f(r.get("tokens_per_s"), ",.0f"), f(r.get("pct_of_floor"), ".1f"),
                                        f(r["prefill_ms"], ".2f"), f(r["prefill_tokens_per_s"], ",.0f"),
                                        str(r.get("same_tokens_as_first", "-"))]) + " |")
    text = (f"**{record['title']}**: {bench.measured_on(record)}.\n\n" + "\n".join(lines) + f"\n\n{record['notes']}.\n"
            + bench_timing.footnote(record["rows"]))
    for key, label in (("package", "Package"), ("package_int8", "int8 package"), ("package_fp8", "fp8 package")):
        package = record.get(key)
        if not package:
            continue
        if "refused" in package:
            text += f"\n{label}: not built ({package['refused']}).\n"
            continue
        text += (f"\n{label}: {package.get('bytes', 0) / 2**20:.1f} MiB, compiled in {package.get('compile_s', float('nan')):.0f} s; "
                 f"fresh process: import torch {package.get('import_torch_s', float('nan')):.2f} s, the loader "
                 f"{package.get('import_loader_s', float('nan')):.2f} s, load {package.get('load_s', float('nan')):.2f} s; "
                 f"course kernels in its code: {', '.join(package.get('course', [])) or 'none'}.\n")
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="results directory (default: print only)")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--budget-s", type=float, default=170.0, help="stop starting new rows after this")
    parser.add_argument("--package", help="reuse this .pt2 (`python -m capstone.package` with the "
                                          "plan's config, dtype, --max-batch and --max-len) instead of compiling one")
    parser.add_argument("--name", default=BENCHMARK_NAME, help="results files' name (a run of some variants "
                                                               "beside a full one: another name keeps both)")
    args = parser.parse_args(argv)
    record = run(plan(), tuple(args.variants), args.budget_s, args.package)
    record["benchmark"] = args.name
    text = table(record)
    print(text)
    if args.out:
        for path in bench.write_record(record, args.out, text, json_default=str):
            print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
