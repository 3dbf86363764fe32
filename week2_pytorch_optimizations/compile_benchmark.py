"""The assignment: one model, one training step, many ways to run it; measure each.

Over 500 lines: this module is the week's benchmark, no kernels: the step runners of every
configuration, the equivalence check against eager float32, the timing, the table, the plot and
the command line, one assignment.

Configurations (names are the row labels of the results table):
* ``eager``: plain PyTorch in float32, one kernel launch per op, Python between them. The
  reference every other configuration is checked against and divided by.
* ``eager+bf16``: autocast to bfloat16 around forward + loss. Matmuls go to the tensor cores
  at bf16 rate (float32 without TF32 runs at a fraction of it) and activations take half the
  bytes; no GradScaler, because bf16 has float32's exponent range.
* ``compile``, ``compile+bf16``: `torch.compile` (Dynamo traces the Python, Inductor fuses the
  elementwise ops and normalizations into generated Triton kernels; matmuls stay cuBLAS).
* ``reduce-overhead[+bf16]``: the same, replayed through CUDA graphs (cudagraph trees): one
  launch for the whole forward and one for the backward, so the CPU stops being the limit.
* ``max-autotune[+bf16]``: also benchmarks Triton matmul templates against cuBLAS for each
  shape at compile time, and uses CUDA graphs. Long compiles, sometimes faster GEMMs.
* ``cudagraph[+bf16]``: no compiler: the *whole* step (forward, backward and the optimizer)
  captured once with `torch.cuda.graph` and replayed. Removes launch overhead but fuses
  nothing. GPU only.
* ``compile+bf16+cudagraph``: Inductor's kernels inside a manual whole-step capture, so the
  optimizer step is in the graph too.

What each costs, per training step of the GPT at batch B, sequence T: about
`models.flops_per_token(cfg) * B * T` FLOPs; the table reports ms per step, tokens/s, peak
memory (`torch.cuda.max_memory_allocated` in the steady state, weights and optimizer state
included) and the speedup over `eager`.

Run it: ``python -m week2_pytorch_optimizations.compile_benchmark --out DIR`` (a GPU writes
the real table; on the CPU it runs the tiny models and says SIMULATION). Results are a json
record shaped like `course.bench.run`'s (benchmark, title, simulated, date, machine, ceilings,
rows), a markdown table and a bar chart, written by `save` below (not `course.bench.save`,
whose roofline plot needs byte counts that a training step does not have).
"""
from __future__ import annotations

import argparse
import copy
import datetime as _dt
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn

from course import bench, runtime
from course.bench import fmt

from week2_pytorch_optimizations import models

BENCHMARK_NAME = "compile_benchmark"
LR = 1e-3


@dataclass(frozen=True)
class Config:
    name: str
    compile_mode: str | None = None  # None: eager; else a torch.compile mode
    amp: bool = False  # autocast to bfloat16
    cuda_graph: bool = False  # capture the whole step by hand with torch.cuda.graph

    @property
    def needs_gpu(self) -> bool:
        return self.cuda_graph


CONFIGS = {c.name: c for c in [
    Config("eager"),
    Config("eager+bf16", amp=True),
    Config("compile", compile_mode="default"),
    Config("compile+bf16", compile_mode="default", amp=True),
    Config("reduce-overhead", compile_mode="reduce-overhead"),
    Config("reduce-overhead+bf16", compile_mode="reduce-overhead", amp=True),
    Config("max-autotune", compile_mode="max-autotune"),
    Config("max-autotune+bf16", compile_mode="max-autotune", amp=True),
    Config("cudagraph", cuda_graph=True),
    Config("cudagraph+bf16", amp=True, cuda_graph=True),
    Config("compile+bf16+cudagraph", compile_mode="default", amp=True, cuda_graph=True),
]}
REFERENCE = "eager"

# Order matters twice: cheap, informative configurations first (a time budget cuts the
# tail), and max-autotune last because its GEMM search takes minutes.
TRAIN_PLAN = ["eager", "eager+bf16", "cudagraph+bf16", "compile+bf16", "reduce-overhead+bf16",
              "compile+bf16+cudagraph", "compile", "cudagraph", "max-autotune+bf16"]
INFER_PLAN = ["eager", "eager+bf16", "cudagraph+bf16", "compile+bf16", "reduce-overhead+bf16",
              "max-autotune+bf16"]


def tolerance(config: Config) -> dict:
    """(rtol, atol) for a configuration's loss and gradients against eager float32.

    float32 configurations differ from eager only in the order of additions (Inductor fuses
    and re-associates the reductions of LayerNorm, softmax, cross-entropy and bias
    gradients): rounding noise, a few hundred float32 ulps after several layers, so 1e-4
    relative. bf16 autocast rounds every matmul input to 8 significant bits (unit
    roundoff 2^-8 = 0.4%) and those errors add up through the layers: 2e-2 relative on the
    loss and 5e-2 in the norm of the gradient, a real precision change, not noise.
    """
    if config.amp:
        return {"loss_rtol": 2e-2, "grad_rel": 5e-2}
    return {"loss_rtol": 1e-4, "grad_rel": 1e-4}


def get_config(name) -> Config:
    if isinstance(name, Config):
        return name
    if name not in CONFIGS:
        raise ValueError(f"config {name!r} is unknown; choose one of: {', '.join(CONFIGS)}")
    return CONFIGS[name]


# --- models and optimizers ---------------------------------------------------------------------

@dataclass
class Task:
    """A model, its loss and a batch maker: what a step runner needs."""
    kind: str  # "gpt" or "mlp"
    model: nn.Module
    loss_fn: Callable
    batch: tuple  # (inputs, targets) on the device
    items: int  # tokens (GPT) or samples (MLP) per step
    unit: str
    label: str


def make_task(kind: str = "gpt", cfg=None, batch: int | None = None, *, device=None, seed: int = 0) -> Task:
    """Build the model with a fixed seed (so every configuration starts from the same weights)."""
    device = runtime.DEVICE if device is None else torch.device(device)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    if kind == "gpt":
        cfg = cfg or runtime.pick(gpu=models.GPT_BENCH, sim=models.GPT_TINY)
        batch = batch or runtime.pick(gpu=8, sim=2)
        model = models.GPT(cfg)
        data = models.gpt_batch(cfg, batch, device, generator=gen)
        return Task("gpt", model.to(device), models.gpt_loss, data, batch * cfg.seq_len, "tokens/s",
                    f"GPT d{cfg.d_model} L{cfg.n_layers} h{cfg.n_heads} V{cfg.vocab_size}, B{batch} x T{cfg.seq_len}")
    if kind == "mlp":
        cfg = cfg or runtime.pick(gpu=models.MLP_BENCH, sim=models.MLP_TINY)
        batch = batch or runtime.pick(gpu=256, sim=4)
        model = models.MLP(cfg)
        data = models.mlp_batch(cfg, batch, device, generator=gen)
        return Task("mlp", model.to(device), models.mlp_loss, data, batch, "samples/s",
                    f"MLP {cfg.d_in}-{cfg.d_hidden}x{cfg.n_layers - 1}-{cfg.d_out}, B{batch}")
    raise ValueError(f"kind must be 'gpt' or 'mlp', got {kind!r}")


def make_optimizer(model: nn.Module, *, capturable: bool = False) -> torch.optim.Optimizer:
    # foreach: a handful of multi-tensor kernels instead of ~10 per parameter.
    # capturable: keeps the step count on the GPU, so the update can live inside a CUDA graph.
    return torch.optim.AdamW(model.parameters(), lr=LR, foreach=True, capturable=capturable)


def _autocast(config: Config, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.amp)


def _reset_optimizer_state(opt: torch.optim.Optimizer) -> None:
    """Zero every state tensor in place (same addresses: a captured graph keeps using them).

    Zeroed AdamW state (step 0, both moments 0) is exactly the state before a first step.
    """
    for state in opt.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                value.zero_()


def _require_gpu(config: Config) -> None:
    if config.needs_gpu and not runtime.on_gpu():
        raise ValueError(f"config {config.name!r} captures a CUDA graph and needs a CUDA GPU; "
                         f"this run uses {runtime.DEVICE}")


# --- step runners ------------------------------------------------------------------------------

def make_train_step(task: Task, config, optimizer: torch.optim.Optimizer | None = None):
    """A function `step(x, y) -> loss` doing forward, backward and an AdamW update.

    The returned loss is a device tensor (no `.item()`: that would synchronize every step);
    with CUDA graphs it is the graph's static output, overwritten by the next step.
    The model's weights after N calls are those of N eager steps (up to rounding): the
    CUDA-graph warm-up steps are undone before the first real one.
    """
    config = get_config(config)
    _require_gpu(config)
    model, loss_fn = task.model, task.loss_fn
    device = next(model.parameters()).device
    model.train()
    opt = optimizer or make_optimizer(model, capturable=config.cuda_graph)
    forward = torch.compile(model, mode=config.compile_mode) if config.compile_mode else model

    def eager_step(x, y):
        opt.zero_grad(set_to_none=True)
        with _autocast(config, device):
            loss = loss_fn(forward(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    if not config.cuda_graph:
        return eager_step

    # Whole-step capture (the recipe of the CUDA-graphs section of the PyTorch docs):
    # warm up on a side stream (lazy inits, cuBLAS workspaces, compilation, optimizer state),
    # then record one step. Replays reuse every address, so inputs are copied into static ones.
    static_x, static_y = (t.clone() for t in task.batch)
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            eager_step(static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)  # backward in the graph then allocates .grad from its pool
    with torch.cuda.graph(graph):
        with _autocast(config, device):
            static_loss = loss_fn(forward(static_x), static_y)
        static_loss.backward()
        opt.step()
    # Capture records kernels without running them; undo the warm-up's updates in place.
    with torch.no_grad():
        for k, v in model.state_dict().items():
            v.copy_(weights[k])
    _reset_optimizer_state(opt)

    def graph_step(x, y):
        if x.data_ptr() != static_x.data_ptr():
            static_x.copy_(x)
            static_y.copy_(y)
        graph.replay()
        return static_loss.detach()

    graph_step.graph = graph  # keep it alive as long as the step function
    return graph_step


def make_infer_step(task: Task, config):
    """A function `step(x) -> outputs` (logits for the GPT), no autograd graph recorded."""
    config = get_config(config)
    _require_gpu(config)
    model = task.model
    device = next(model.parameters()).device
    model.eval()
    forward = torch.compile(model, mode=config.compile_mode) if config.compile_mode else model

    def eager_step(x):
        # no_grad rather than inference_mode: inference tensors cannot be captured into the
        # cudagraph trees of mode="reduce-overhead" on every torch version.
        with torch.no_grad(), _autocast(config, device):
            return forward(x)

    if not config.cuda_graph:
        return eager_step
    static_x = task.batch[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            eager_step(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = eager_step(static_x)

    def graph_step(x):
        if x.data_ptr() != static_x.data_ptr():
            static_x.copy_(x)
        graph.replay()
        return static_out

    graph_step.graph = graph
    return graph_step


def make_graphed_mlp(task: Task):
    """`torch.cuda.make_graphed_callables` on the model alone: forward and backward become
    two graph replays while the optimizer and loss stay eager. The other way to use
    CUDA graphs: partial capture, for when the whole step cannot be captured."""
    if not runtime.on_gpu():
        raise ValueError("make_graphed_callables needs a CUDA GPU; this run uses the CPU")
    x = task.batch[0].clone().requires_grad_(False)
    return torch.cuda.make_graphed_callables(task.model, (x,))


# --- numerical equivalence ---------------------------------------------------------------------

def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def train_trace(kind: str, config, *, steps: int = 3, cfg=None, batch=None) -> dict:
    """Losses of `steps` training steps and the gradients of the first, from the fixed seed."""
    config = get_config(config)
    task = make_task(kind, cfg, batch)
    step = make_train_step(task, config)
    x, y = task.batch
    losses, grads = [], None
    for i in range(steps):
        losses.append(float(step(x, y)))  # float(): copy out before a graph overwrites it
        if i == 0:
            grads = torch.cat([p.grad.detach().float().reshape(-1) for p in task.model.parameters()])
    return {"losses": losses, "grads": grads}


def infer_output(kind: str, config, *, cfg=None, batch=None) -> torch.Tensor:
    task = make_task(kind, cfg, batch)
    step = make_infer_step(task, config)
    out = step(task.batch[0])
    return out.float().clone()


def compare(config, trace: dict, reference: dict) -> dict:
    """Relative errors of a trace against the eager float32 one, and whether they pass."""
    config = get_config(config)
    tol = tolerance(config)
    loss_err = max(abs(a - b) / abs(b) for a, b in zip(trace["losses"], reference["losses"]))
    grad_err = rel_err(trace["grads"], reference["grads"])
    return {"loss_rel_err": loss_err, "grad_rel_err": grad_err,
            "ok": loss_err <= tol["loss_rtol"] and grad_err <= tol["grad_rel"]}


# --- timing ------------------------------------------------------------------------------------

def _release() -> None:
    torch._dynamo.reset()  # drops compiled code and the cudagraph trees' memory pools
    if runtime.on_gpu():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def measure(kind: str, phase: str, config, *, cfg=None, batch=None, reference: dict | None = None) -> dict:
    """One row of the table: set up, warm up (compile), then time steady-state steps."""
    config = get_config(config)
    task = make_task(kind, cfg, batch)
    x, y = task.batch
    row = {"size": f"{phase} {task.label}", "model": kind, "phase": phase, "variant": config.name}
    if config.needs_gpu and not runtime.on_gpu():
        return {**row, "skipped": "needs a CUDA GPU"}
    if runtime.on_gpu():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    if phase == "train":
        step = make_train_step(task, config)
        fn = lambda: step(x, y)  # noqa: E731
        # Three steps from the seeded weights: the first loss checks the forward, the third
        # the backward and the optimizer (two updates later). float(): copy out at once.
        losses = [float(fn()) for _ in range(3)]
        row["losses"] = losses
    else:
        step = make_infer_step(task, config)
        fn = lambda: step(x)  # noqa: E731
        out0 = fn().float().clone()
        for _ in range(2):  # reduce-overhead records its graphs on the 2nd/3rd call
            fn()
    if runtime.on_gpu():
        torch.cuda.synchronize()
    row["setup_s"] = time.perf_counter() - t0  # compile, autotune, capture, warm-up
    if runtime.on_gpu():
        torch.cuda.reset_peak_memory_stats()
    timing = bench.time_call(lambda: fn(), [()])
    row.update({**bench.timing_fields(timing), "ms_min": timing.min_ms, "reps": timing.reps,
                "throughput": task.items / (timing.median_ms * 1e-3), "unit": task.unit})
    if kind == "gpt":
        row["tokens_per_s"] = row["throughput"]
        training = phase == "train"
        row["tflops"] = models.flops_per_token(task.model.cfg, training=training) * task.items / (timing.median_ms * 1e-3) / 1e12
    row["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20 if runtime.on_gpu() else None
    if reference is not None:
        if phase == "train":
            err = max(abs(a - b) / abs(b) for a, b in zip(losses, reference["losses"]))
        else:
            err = rel_err(out0, reference["out0"])
        row["check_rel_err"] = err
        row["within_tolerance"] = err <= tolerance(config)["loss_rtol"]
    elif config.name == REFERENCE:
        row["_reference"] = {"losses": losses} if phase == "train" else {"out0": out0}
    del step, fn, task
    _release()
    return row


def benchmark(plans=None, *, budget_s: float | None = None, progress: bool = True, sizes: dict | None = None,
              on_row: Callable | None = None) -> dict:
    """Time each (model, phase, configs) plan; returns the results record.

    `plans` is a list of (kind, phase, [config names]); the first config of each must be
    "eager". Configs that need a GPU are listed as skipped on the CPU; past `budget_s`
    seconds the remaining ones are listed as skipped (time budget) instead of run.
    `on_row(result)` is called after each row (the CLI saves the partial record there).
    """
    plans = plans or default_plans()
    sizes = sizes or {}
    start = time.perf_counter()
    result = {
        "benchmark": BENCHMARK_NAME,
        "title": "torch.compile, AMP and CUDA graphs on a training and an inference step",
        "notes": ("step time is the median of CUDA-event-timed steps after warm-up; peak = "
                  "torch.cuda.max_memory_allocated in the steady state; speedup over eager float32; "
                  "rel. err: train = largest relative difference of the first three losses from eager's, "
                  "infer = norm-wise relative difference of the logits"),
        "headline": ["compile+bf16+cudagraph", "reduce-overhead+bf16"],
        "simulated": not runtime.on_gpu(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": runtime.describe(),
        "ceilings": {"copy_gbps": bench.copy_bandwidth_gbps()},  # `python -m course report` reads it
        "rows": [],
    }
    for kind, phase, names in plans:
        if names[0] != REFERENCE:
            raise ValueError(f"each plan must start with {REFERENCE!r}, got {names[0]!r}")
        reference, ref_ms = None, None
        for name in names:
            if budget_s is not None and time.perf_counter() - start > budget_s:
                row = {"size": f"{phase} {kind}", "model": kind, "phase": phase, "variant": name,
                       "skipped": f"time budget of {budget_s:.0f} s spent"}
            else:
                if progress:
                    print(f"[{time.perf_counter() - start:6.1f} s] {kind} {phase} {name}", file=sys.stderr, flush=True)
                try:
                    row = measure(kind, phase, name, reference=reference, **sizes.get(kind, {}))
                except Exception as error:  # one broken configuration must not lose the table
                    row = {"size": f"{phase} {kind}", "model": kind, "phase": phase, "variant": name,
                           "skipped": f"failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"}
                    _release()
            if "_reference" in row:
                reference, ref_ms = row.pop("_reference"), row["ms"]
            if "ms" in row and ref_ms:
                row["speedup_vs_eager"] = row["speedup_vs_torch"] = ref_ms / row["ms"]
            result["rows"].append(row)
            if on_row:
                on_row(result)
    return result


def default_plans() -> list:
    return [("mlp", "train", ["eager", "eager+bf16", "cudagraph+bf16", "reduce-overhead+bf16"]),
            ("gpt", "infer", INFER_PLAN),
            ("gpt", "train", TRAIN_PLAN)]  # last: `course report` shows the last size's rows


def best(result: dict, model: str = "gpt", phase: str = "train") -> dict | None:
    rows = [r for r in result["rows"] if r.get("model") == model and r.get("phase") == phase and "ms" in r]
    return min(rows, key=lambda r: r["ms"]) if rows else None


# --- the table and its files -------------------------------------------------------------------

def markdown_table(result: dict) -> str:
    head = ["phase / model", "config", "ms / step", "throughput", "TFLOP/s", "peak MiB", "vs eager",
            "rel. err vs eager", "setup s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['size']} | {r['variant']} | skipped: {r['skipped']} |" + " |" * (len(head) - 3))
            continue
        thr = f"{r['throughput']:,.0f} {r['unit']}"
        speed = f"{r['speedup_vs_eager']:.2f}x" if r.get("speedup_vs_eager") else "-"
        err = fmt(r.get("check_rel_err"), ".1e") + ("" if r.get("within_tolerance", True) else " (OUT OF TOL.)")
        lines.append("| " + " | ".join([r["size"], r["variant"], bench.ms_cell(r, ".3f"), thr, fmt(r.get("tflops"), ".1f"),
                                        fmt(r.get("peak_mib"), ".0f"), speed, err, fmt(r.get("setup_s"), ".1f")]) + " |")
    m = result["machine"]
    where = ("SIMULATION on the CPU: these times measure the CPU, not a GPU" if result["simulated"]
             else f"{m.get('gpu')}, CUDA {m.get('cuda_runtime')}")
    versions = ", ".join(f"{k} {m[k]}" for k in ("torch", "triton", "python") if m.get(k))
    text = (f"**{result['title']}**: {where}; {versions}; {result['date']}.\n\n" + "\n".join(lines) + "\n"
            + bench.footnote(result["rows"]))
    text += f"\n{result['notes']}.\n"
    top = best(result)
    if top and top.get("speedup_vs_eager"):
        text += f"\nBest GPT training step: `{top['variant']}`, {top['ms']:.3f} ms, {top['speedup_vs_eager']:.2f}x eager.\n"
    return text


def plot(result: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = []
    for r in result["rows"]:
        if r.get("speedup_vs_eager") and r["size"] not in groups:
            groups.append(r["size"])
    fig, axes = plt.subplots(len(groups) or 1, 1, figsize=(8, 2.6 * max(len(groups), 1)), squeeze=False)
    for ax, group in zip(axes[:, 0], groups):
        rows = [r for r in result["rows"] if r["size"] == group and r.get("speedup_vs_eager")]
        ax.barh([r["variant"] for r in rows], [r["speedup_vs_eager"] for r in rows], color="tab:blue")
        ax.axvline(1.0, color="k", linewidth=1)
        for i, r in enumerate(rows):
            ax.text(r["speedup_vs_eager"], i, f" {r['speedup_vs_eager']:.2f}x", va="center", fontsize=7)
        ax.set_title(group, fontsize=9)
        ax.invert_yaxis()
        ax.tick_params(labelsize=7)
    where = result["machine"].get("gpu") or "CPU (simulation)"
    axes[-1, 0].set_xlabel(f"speedup over eager float32 on {where}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def save(result: dict, results_dir: Path) -> list[Path]:
    """`compile_benchmark.json` (the record), `.md` (the table), `.png` (speedup bars)."""
    paths = bench.write_record(result, results_dir, markdown_table(result))
    png = paths[0].with_suffix(".png")
    plot(result, png)
    return paths + [png]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="folder for the json/md/png (default: print only)")
    parser.add_argument("--budget-s", type=float, default=None, help="stop starting configs after this many seconds")
    parser.add_argument("--train", nargs="*", help="GPT training configs (default: TRAIN_PLAN)")
    parser.add_argument("--infer", nargs="*", help="GPT inference configs (default: INFER_PLAN)")
    parser.add_argument("--no-mlp", action="store_true")
    args = parser.parse_args(argv)
    plans = default_plans()
    if args.no_mlp:
        plans = [p for p in plans if p[0] != "mlp"]
    if args.infer is not None:
        plans = [p if p[:2] != ("gpt", "infer") else ("gpt", "infer", args.infer) for p in plans]
    if args.train is not None:
        plans = [p if p[:2] != ("gpt", "train") else ("gpt", "train", args.train) for p in plans]
    plans = [p for p in plans if p[2]]
    out = Path(args.out) if args.out else None
    result = benchmark(plans, budget_s=args.budget_s, on_row=(lambda r: save(r, out)) if out else None)
    print(markdown_table(result))
    if out:
        for path in save(result, out):
            print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
