"""`python -m course time LESSON`: your kernel timed beside the course's solution and torch.

    python -m course time softmax                 your exercise (exercises/softmax.py), the solution, torch
    python -m course time softmax --impl solutions   the solution alone beside torch
    python -m course time softmax --ncu           and ncu's counters for each kernel (GPU, ncu on PATH)

The lesson's benchmarks (the `BENCHMARKS` tables `python -m course bench` runs, course/bench.py)
are reused as they are: the same inputs, byte and FLOP counts, clock and ceilings (copy bandwidth,
cuBLAS's matmul rate, measured in the same run). Each variant that calls the lesson's code runs
twice: as the solution ("solution:triton") and rebound to your stub ("yours:triton"): its function,
and every function of the week it calls, re-created with the stub's definitions in place of the
solution's (`Rebinder`), so a benchmark written against the solution times your code unchanged.
Your variants first run once on the smallest input: one that raises is reported, not timed; one
whose output differs from the solution's is timed and flagged (the tests say why).

In simulation a time measures Python, so instead the interpreter counts (classroom/sim_count.py) what
each Triton variant loads, stores and computes at the smallest size: bytes and FLOPs per output
element and their ratio, the arithmetic intensity, beside the lesson's cost model.

Every attempt is appended to .course/time_history.jsonl (git ignores .course/): date, GPU, impl,
the figures, and the git blob hash of your stub (`git hash-object`), so the best is shown with the
code that made it.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import functools
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

from course import weeks

ROOT = weeks.ROOT
HISTORY = Path(".course") / "time_history.jsonl"


# ------------------------------------------------------------------------------ the lesson
def find_lesson(name: str, root: Path = ROOT) -> tuple[str, str]:
    """(week package, lesson module in it) for a stub name ('softmax') or week/name ('week4/softmax');
    a lesson folder's module is dotted ('norms.rmsnorm': its stub is exercises/norms/rmsnorm.py)."""
    name = name.removesuffix(".py").strip("/")
    week, _, stem = name.rpartition("/")
    found = []
    for w in weeks.discover(root):
        if week and week.split("/")[0] not in (w.short, w.package):
            continue
        stubs = root / w.package / "exercises"  # it mirrors the week, lesson folders included
        found += [(w.package, ".".join(stub.relative_to(stubs).with_suffix("").parts))
                  for stub in sorted(stubs.rglob(f"{stem}.py"))]
    if len(found) == 1:
        return found[0]
    if found:
        raise ValueError(f"lesson {stem!r} is in several weeks: say which, e.g. "
                         + " or ".join(f"{weeks.short_name(root / p)}/{s.rsplit('.', 1)[-1]}" for p, s in found))
    raise ValueError(f"no exercise named {name!r}: its stub would be week*/exercises/{stem}.py")


def lesson_benchmarks(package: str, stem: str) -> list:
    """The BENCHMARKS of the lesson's module, its `<lesson>_bench.py`, or the bench module of the
    longest prefix of its name (layernorm_backward -> layernorm_bench.py), or its folder's bench.py."""
    parts = stem.split("_")
    candidates = [stem, f"{stem}_bench"] + [f"{'_'.join(parts[:k])}_bench" for k in range(len(parts) - 1, 0, -1)]
    candidates.append("bench")  # a lesson folder's bench.py (week4_triton_dl/attention/bench.py)
    found = []
    for module in candidates:
        if importlib.util.find_spec(f"{package}.{module}") is None:
            continue
        found += getattr(importlib.import_module(f"{package}.{module}"), "BENCHMARKS", [])
        if found:
            return found
    return found


class Rebinder:
    """Variants of a benchmark with the stub's definitions in place of the solution's.

    `mapping`: every function, kernel or class the stub defines anew, keyed by the identity of the
    solution's object of the same name. A variant is rebuilt (`rebind`) as a new function over a
    copy of its module's globals in which those objects are swapped and every function of the
    week's package is rebuilt the same way (so a helper that calls the solution calls the stub).
    """

    def __init__(self, solution: types.ModuleType, stub: types.ModuleType, package: str):
        self.package = package
        self.mapping = {}
        for name, value in vars(stub).items():
            old = vars(solution).get(name)
            if old is not None and old is not value and not name.startswith("__") \
                    and (callable(old) or isinstance(old, type)):
                self.mapping[id(old)] = value
        self._keep = [vars(solution)]  # the ids above stay valid while the solution's objects live
        self._globals: dict[int, dict] = {}

    def _ours(self, fn) -> bool:
        module = getattr(fn, "__module__", "") or ""
        return isinstance(fn, types.FunctionType) and module.startswith(self.package + ".") \
            and ".exercises." not in module

    def touches(self, obj, seen=None) -> bool:
        """Does calling `obj` reach the solution's code that the stub replaces?"""
        seen = set() if seen is None else seen
        if id(obj) in self.mapping:
            return True
        if isinstance(obj, functools.partial):
            return self.touches(obj.func, seen)
        if not self._ours(obj) or id(obj) in seen:
            return False
        seen.add(id(obj))
        cells = [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
        values = [obj.__globals__.get(name) for name in _names(obj.__code__)] + cells
        return any(v is not None and self.touches(v, seen) for v in values)

    def rebind(self, obj):
        if id(obj) in self.mapping:
            return self.mapping[id(obj)]
        if isinstance(obj, functools.partial):
            return functools.partial(self.rebind(obj.func), *obj.args, **obj.keywords)
        if not self._ours(obj):
            return obj
        closure = tuple(types.CellType(self.rebind(c.cell_contents)) if _filled(c) else c
                        for c in obj.__closure__ or ()) or None
        fn = types.FunctionType(obj.__code__, self._globals_for(obj.__globals__), obj.__name__, obj.__defaults__,
                                closure)
        fn.__kwdefaults__ = obj.__kwdefaults__
        return fn

    def _globals_for(self, g: dict) -> dict:
        if id(g) not in self._globals:
            new = self._globals[id(g)] = dict(g)  # registered first: the module's functions refer to it
            for name, value in g.items():
                if id(value) in self.mapping or isinstance(value, functools.partial) or \
                        (self._ours(value) and value.__globals__ is g):
                    new[name] = self.rebind(value)
        return self._globals[id(g)]


def _filled(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def _names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


@dataclasses.dataclass
class Plan:
    """One benchmark as `course time` runs it: the variants to time and which of them are the learner's."""
    bench: object        # course.bench.Benchmark, with the chosen variants and sizes
    impl_labels: list    # "yours:..." (or "solution:..." with --impl solutions): what the history keeps
    pairs: dict          # impl label -> the solution's label beside it (for the output check)


def plan(bench, rebinder: Rebinder, impl: str, every_variant: bool, every_size: bool) -> Plan | None:
    from course import runtime

    lesson = [label for label, fn in bench.variants.items() if rebinder.touches(fn)]
    if not lesson:
        return None
    shown = [label for label in lesson if every_variant or not bench.headline or label in bench.headline]
    variants, impl_labels, pairs = {}, [], {}
    for label, fn in bench.variants.items():
        if label in lesson and label not in shown:
            continue
        if label in lesson and not (label in bench.gpu_only and not runtime.on_gpu()):
            variants[f"solution:{label}"] = fn
            if impl == "exercises":
                variants[f"yours:{label}"] = rebinder.rebind(fn)
                pairs[f"yours:{label}"] = f"solution:{label}"
            impl_labels.append(f"yours:{label}" if impl == "exercises" else f"solution:{label}")
        elif label not in lesson:
            variants[label] = fn
    sizes = bench.sizes if every_size else bench.sizes[-1:]
    sim_sizes = bench.sim_sizes[:1]
    gpu_only = tuple(label for label in variants if label.split(":")[-1] in bench.gpu_only)
    return Plan(dataclasses.replace(bench, variants=variants, sizes=sizes, sim_sizes=sim_sizes, graphed=(),
                                    gpu_only=gpu_only, sources={}), impl_labels, pairs)


# ------------------------------------------------------------------------------ running
def _tensors(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


def _fresh(inputs):
    import torch

    return [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[-1] if text else ''}"[:200]


def preflight(p: Plan) -> dict[str, str]:
    """{label: problem} for the learner's variants: one that raises is dropped from the timing;
    one whose output differs from the solution's is kept, flagged."""
    import torch

    from course import runtime

    problems = {}
    size = p.bench.active_sizes()[0]
    inputs = p.bench.make_inputs(size)
    for mine, theirs in p.pairs.items():
        if mine in p.bench.gpu_only and not runtime.on_gpu():
            continue
        print(f"checking {mine} once at {p.bench.size_label(size)}...", flush=True)
        try:
            got = _tensors(p.bench.variants[mine](*_fresh(inputs)))
        except Exception as error:  # a learner's hole, a compile error: reported, the others still timed
            problems[mine] = f"not timed: {_first_line(error)}"
            continue
        want = _tensors(p.bench.variants[theirs](*_fresh(inputs)))
        for g, w in zip(got, want):
            if g.shape != w.shape or not torch.allclose(g.float(), w.float(), rtol=2e-2, atol=2e-2, equal_nan=True):
                problems[mine] = "output differs from the solution's: timed, but run the tests"
                break
    for label in problems:
        if problems[label].startswith("not timed"):
            del p.bench.variants[label]
    return problems


def count_sim(p: Plan) -> list[dict]:
    """What each variant's interpreted Triton kernels loaded, stored and computed at the smallest size."""
    from classroom import sim_count

    size = p.bench.active_sizes()[0]
    inputs = p.bench.make_inputs(size)
    rows = []
    for label, fn in p.bench.variants.items():
        if label in p.bench.gpu_only:
            rows.append({"variant": label, "skipped": "needs a GPU"})
            continue
        print(f"counting {label} at {p.bench.size_label(size)}...", flush=True)
        try:
            with sim_count.counting() as counts:
                out = fn(*_fresh(inputs))
        except Exception as error:  # a hole not yet filled: its row says so, the others are counted
            rows.append({"variant": label, "skipped": _first_line(error)})
            continue
        outputs = sum(t.numel() for t in _tensors(out))
        rows.append({"variant": label, "size": p.bench.size_label(size), "launches": counts.launches,
                     "loaded": counts.loaded, "stored": counts.stored, "flops": counts.flops, "outputs": outputs,
                     "intensity": counts.intensity()})
    rows.append({"variant": "cost model", "size": p.bench.size_label(size), "launches": None, "loaded": None,
                 "stored": None, "moved": p.bench.bytes(size), "flops": p.bench.flops(size),
                 "outputs": next((r["outputs"] for r in rows if r.get("outputs")), 0)})
    return rows


def sim_table(rows: list[dict]) -> str:
    from course.bench import fmt

    lines = ["| variant | launches | loaded B | stored B | FLOPs | B / output | FLOPs / output | FLOP / B |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['variant']} | skipped: {r['skipped']} |  |  |  |  |  |  |")
            continue
        moved = r.get("moved", (r["loaded"] or 0) + (r["stored"] or 0))
        n = r["outputs"] or 0
        if r["variant"] != "cost model" and not r["launches"]:
            lines.append(f"| {r['variant']} | 0 | not a Triton kernel: nothing counted |  |  |  |  |  |")
            continue
        lines.append(" | ".join([f"| {r['variant']}", fmt(r["launches"], "d"), fmt(r["loaded"], ",d"),
                                 fmt(r["stored"], ",d"), f"{r['flops']:,d}", fmt(moved / n if n else None, ".1f"),
                                 fmt(r["flops"] / n if n else None, ".2f"),
                                 fmt(r["flops"] / moved if moved else None, ".3f")]) + " |")
    return "\n".join(lines)


def gpu_rows(record: dict) -> list[dict]:
    """The record's timed rows with '% of peak': TFLOP/s over the matmul ceiling measured in the run."""
    peak = next((v for k, v in record.get("ceilings", {}).items() if k.startswith("matmul_")), None)
    rows = []
    for row in record["rows"]:
        row = dict(row)
        row["pct_of_peak"] = 100 * row["tflops"] / peak if peak and row.get("tflops") else None
        rows.append(row)
    return rows


def gpu_table(rows: list[dict], problems: dict) -> str:
    from course.bench import fmt

    lines = ["| size | variant | ms | GB/s | TFLOP/s | % of copy | % of peak | vs torch |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['size']} | {r['variant']} | skipped: {r['skipped']} |  |  |  |  |  |")
            continue
        flag = " (!)" if r["variant"] in problems else ""
        speed = f"{r['speedup_vs_torch']:.2f}x" if r.get("speedup_vs_torch") else "-"
        lines.append(f"| {r['size']} | {r['variant']}{flag} | {r['ms']:.4f} | {fmt(r['gbps'], '.0f')} | "
                     f"{fmt(r['tflops'], '.2f')} | {fmt(r['pct_of_copy'], '.1f')} | {fmt(r['pct_of_peak'], '.1f')} | "
                     f"{speed} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ history
def blob_hash(path: Path) -> str:
    """`git hash-object path`, computed here (works where git is not installed)."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def append_history(entries: list[dict], root: Path = ROOT) -> Path:
    path = root / HISTORY
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for entry in entries:
            f.write(json.dumps(entry) + "\n")
    return path


def load_history(root: Path = ROOT) -> list[dict]:
    path = root / HISTORY
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short (an interrupted write): the others still count
    return out


def best(history: list[dict], entry: dict) -> dict | None:
    """The fastest timed attempt of the same lesson, benchmark, size, variant and GPU."""
    keys = ("lesson", "benchmark", "size", "variant", "gpu")
    same = [h for h in history if all(h.get(k) == entry.get(k) for k in keys) and h.get("ms")]
    return min(same, key=lambda h: h["ms"]) if same else None


# ------------------------------------------------------------------------------ ncu
def ncu_metrics() -> list[str]:
    from classroom import ncu

    names = []
    for _, metric, _ in ncu.NCU_COLUMNS:
        names += list(metric) if isinstance(metric, tuple) else [metric]
    return names


def run_ncu(lesson: str, impl: str, bench_name: str, labels: list[str], root: Path = ROOT) -> int:
    """ncu (as week 1's profile_ncu.sh runs it: its sections, the notes' metrics that this ncu knows,
    clocks not locked) on a child process that calls each variant once inside a profiler range."""
    import re
    import tempfile

    from classroom import ncu

    known = subprocess.run(["ncu", "--query-metrics"], capture_output=True, text=True).stdout
    # only the metrics this ncu knows on this GPU: one unknown name would stop the run
    metrics = [m for m in ncu_metrics()
               if "__" not in known or re.search(rf"^{re.escape(m.split('.')[0])}\b", known, re.M)]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "attempt"
        command = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--section", "LaunchStats",
                   "--section", "Occupancy", "--section", "SpeedOfLight", *(["--metrics", ",".join(metrics)] if metrics
                                                                           else []),
                   "-f", "-o", str(report), sys.executable, "-m", "classroom.attempts", "--launch", lesson,
                   "--impl", impl, "--bench", bench_name, "--variants", *labels]
        print(f"profiling {', '.join(labels)} with ncu (one pass per section: a minute or so)...", flush=True)
        run = subprocess.run(command, cwd=root, capture_output=True, text=True)
        if not report.with_suffix(".ncu-rep").exists():
            print(f"ncu wrote no report (exit {run.returncode}): {(run.stderr or run.stdout).strip()[-800:]}")
            return 1
        csv_text = subprocess.run(["ncu", "--import", str(report.with_suffix(".ncu-rep")), "--page", "raw", "--csv",
                                   "--print-units", "base"], capture_output=True, text=True).stdout
    print(ncu.ncu_table(csv_text), end="")
    print("(each column is explained in the lesson's note and in week 1's profiling_with_nsight.md)")
    return 0


def launch_for_ncu(lesson: str, impl: str, bench_name: str, labels: list[str]) -> int:
    """The ncu child: every chosen variant once to warm up (compile, autotune), then once profiled."""
    import torch

    plans = build(lesson, impl, every_variant=True, every_size=False)
    p = next(p for p in plans if p.bench.name == bench_name)
    inputs = p.bench.make_inputs(p.bench.active_sizes()[-1])
    for label in labels:
        p.bench.variants[label](*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for label in labels:
        p.bench.variants[label](*inputs)
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


# ------------------------------------------------------------------------------ command line
def build(lesson: str, impl: str, every_variant: bool, every_size: bool, only=None) -> list[Plan]:
    package, stem = find_lesson(lesson)
    solution = importlib.import_module(f"{package}.{stem}")
    stub = importlib.import_module(f"{package}.exercises.{stem}")
    rebinder = Rebinder(solution, stub, package)
    plans = []
    for bench in lesson_benchmarks(package, stem):
        if only and bench.name not in only:
            continue
        p = plan(bench, rebinder, impl, every_variant, every_size)
        if p is not None:
            plans.append(p)
    return plans


def main(args) -> int:
    if getattr(args, "launch", None):  # the ncu child
        return launch_for_ncu(args.launch, args.impl, args.bench, args.variants)
    from course import bench, runtime

    try:
        package, stem = find_lesson(args.lesson)
    except ValueError as error:
        print(f"time: {error}")
        return 2
    lesson = f"{weeks.short_name(ROOT / package)}/{stem.rsplit('.', 1)[-1]}"
    print(f"{lesson}: loading the lesson, its stub and its benchmarks...", flush=True)
    plans = build(lesson, args.impl, args.all_variants, args.all_sizes, args.only)
    if not plans:
        print(f"{lesson} has no benchmark that runs its code (`python -m course bench "
              f"{weeks.short_name(ROOT / package.split('.')[0])}` lists the week's)")
        return 1
    stub_file = ROOT / package / ("exercises" if args.impl == "exercises" else "") / f"{stem.replace('.', '/')}.py"
    info = runtime.describe()
    common = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "lesson": lesson,
              "impl": args.impl, "gpu": info.get("gpu") or "CPU (simulation)", "stub_hash": blob_hash(stub_file)}
    where = Path(args.root) if getattr(args, "root", None) else ROOT  # the history's checkout (tests: a temp dir)
    history, entries = load_history(where), []
    for p in plans:
        problems = preflight(p) if args.impl == "exercises" else {}
        for label, problem in problems.items():
            print(f"  {label}: {problem}")
        if not runtime.on_gpu():
            rows = count_sim(p)
            print(f"\n**{p.bench.title}**: SIMULATION, so no times: what the interpreter counted at the smallest "
                  "size (bytes every active lane loads and stores; FLOPs: tl.dot 2MNK, float arithmetic 1 per lane, "
                  "reductions not counted; see classroom/sim_count.py).\n")
            print(sim_table(rows))
            entries += [{**common, "benchmark": p.bench.name, "simulated": True, **r}
                        for r in rows if r["variant"] in p.impl_labels and "skipped" not in r]
            continue
        steps = len(p.bench.active_sizes()) * len(p.bench.variants)
        record = bench.run(p.bench, bench.Progress(steps))
        rows = gpu_rows(record)
        print(f"\n**{p.bench.title}**: {bench.measured_on(record)}.\n")
        print(gpu_table(rows, problems))
        for r in rows:
            if r["variant"] in p.impl_labels and "ms" in r:
                entry = {**common, "benchmark": p.bench.name, "simulated": False, "size": r["size"],
                         "variant": r["variant"], **{k: r.get(k) for k in ("ms", "gbps", "tflops", "pct_of_copy",
                                                                          "pct_of_peak")}}
                entries.append(entry)
                top = best(history + [entry], entry)
                if top is not None:
                    print(f"  best {entry['variant']} at {entry['size']} on this GPU: {top['ms']:.4f} ms "
                          f"({top['date']}, stub {top['stub_hash'][:10]})" + ("  <- this run" if top is entry else ""))
        if args.ncu:
            if not shutil.which("ncu"):
                print("--ncu: ncu is not on PATH (Nsight Compute comes with the CUDA toolkit)")
            else:
                run_ncu(lesson, args.impl, p.bench.name, [v for v in p.bench.variants if v != "torch"])
    if args.ncu and not runtime.on_gpu():
        print("--ncu: ncu profiles a GPU; in simulation the counts above are what there is")
    if entries:
        path = append_history(entries, where)
        print(f"\n{len(entries)} result(s) added to {path.relative_to(where)} "
              f"({len(history) + len(entries)} in all)")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("time", help="your kernel timed beside the solution and torch (simulation: bytes and FLOPs "
                                    "counted)")
    p.add_argument("lesson", help="the exercise: its stub's name (softmax) or week/name (week4/softmax)")
    p.add_argument("--impl", choices=("exercises", "solutions"), default="exercises",
                   help="exercises (default): your stub beside the solution; solutions: the solution alone")
    p.add_argument("--ncu", action="store_true", help="also print ncu's counters per kernel (GPU, ncu on PATH)")
    p.add_argument("--only", nargs="*", help="benchmark names (default: every benchmark of the lesson)")
    p.add_argument("--all-variants", action="store_true", help="every variant of the lesson, not the headline ones")
    p.add_argument("--all-sizes", action="store_true", help="every size (default: the largest)")
    p.add_argument("--root", help=argparse.SUPPRESS)  # where .course/ is (the kit's tests use a temp dir)


if __name__ == "__main__":  # the ncu child: python -m classroom.attempts --launch LESSON --impl I --bench B --variants ...
    parser = argparse.ArgumentParser(prog="python -m classroom.attempts")
    parser.add_argument("--launch", required=True)
    parser.add_argument("--impl", default="exercises")
    parser.add_argument("--bench", required=True)
    parser.add_argument("--variants", nargs="+", required=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(parser.parse_args()))
