"""compute-sanitizer over every kernel of a week: one small launch each, under memcheck and racecheck.

    python -m course sanitize week1                     all cases, memcheck + racecheck
    python -m course sanitize week1 --list              the case names
    python -m course sanitize week1 --case NAME         one case, in this process
    python -m course sanitize week1 --only scan --tools memcheck --budget 120

What a case is and why the tool finds what tests cannot: course/sanitizer_cases.py, the kit's side
(the helpers a lesson writes its cases with). This module is the machinery that runs them:

* `memcheck`: out-of-bounds and misaligned accesses to global, shared and local memory,
  and CUDA API calls that fail;
* `racecheck`: shared-memory hazards, a read and a write (or two writes) of the same shared
  address by different threads with no barrier between them;
* `synccheck`, `initcheck` (available with `--tools`): barriers reached by only part of a block,
  reads of global memory nothing wrote.

Every kernel module of a week lists `SANITIZER_CASES`: a name and a function that does one
small launch (sizes with partial blocks and tiles, so the bounds checks run) and synchronizes
(course/sanitizer_cases.py helps write them; what the tool printed is read by
classroom/sanitizer_report.py). A week may also have a `sanitize` lesson module whose
`LOCAL_CASES` hold the cases of modules written before that convention (week 1's vector_add).
`for_week` makes the `Sanitizer` of a week; it starts, for every case and tool,

    compute-sanitizer --tool TOOL --error-exitcode 99 python -m course sanitize week1 --case NAME

in parallel, each with a timeout, inside one time budget, and writes `results/sanitizer.md|json`.
The environment sets PYTORCH_NO_CUDA_MEMORY_CACHING=1: torch's caching allocator carves tensors
out of large blocks, so a write just past a tensor lands inside the pool, where memcheck sees a
valid allocation; without the cache every tensor is its own cudaMalloc and its end is a real edge.

It also serves Nsight Compute (see week 1's `profile_ncu.sh`): `--launch BENCH` calls the variants
of a registered benchmark once each at one size, and `--ncu-table CSV` turns ncu's raw CSV export
into the markdown table `profiling_with_nsight.md` shows (both from classroom/ncu.py, which any
week can use directly: `python -m course ncu --package PACKAGE --launch BENCH ...`).

Cost: under the sanitizer a process is 10-100x slower on the GPU side and pays Python's imports,
the CUDA context and Numba's compilation before its one launch: several seconds per case, which
is why the cases are tiny and run in parallel.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime as _dt
import importlib
import json
import os
import pkgutil
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from course import runtime, weeks

from classroom import ncu
from classroom.sanitizer_report import ERROR_EXIT, Outcome, cell, parse_report, summary_counts

ROOT = weeks.ROOT
NOT_LESSONS = ("exercises", "notebooks", "results", "kernels", "sanitize")
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
DEFAULT_TOOLS = ("memcheck", "racecheck")
MIN_START_S = 1.0  # a sanitized Python process does nothing useful in less: not started then


# --- discovery -----------------------------------------------------------------------------------


def qualified(module: str, case: str) -> str:
    return f"{module}:{case}"


# --- running the tools --------------------------------------------------------------------------

def find_sanitizer() -> str | None:
    """compute-sanitizer from $COMPUTE_SANITIZER, PATH, or the CUDA toolkit's usual place."""
    for candidate in (os.environ.get("COMPUTE_SANITIZER"), shutil.which("compute-sanitizer"),
                      "/usr/local/cuda/bin/compute-sanitizer"):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def sanitizer_version(sanitizer: str) -> str:
    try:
        text = subprocess.run([sanitizer, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as error:
        return f"unknown ({error})"
    versions = [line.strip() for line in text.splitlines() if "version" in line.lower()]
    return versions[-1] if versions else (text.strip().splitlines() or ["unknown"])[-1]


def child_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        # One cudaMalloc per tensor: an access past a tensor's end leaves the allocation.
        "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
        "COURSE_BACKEND": env.get("COURSE_BACKEND", "gpu"),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
    })
    return env


def run_command(command: list[str], timeout: float, env: dict | None = None) -> tuple[str, int | None, bool, float]:
    """(output, exit status, timed out?, seconds); on timeout the whole process group is killed
    (compute-sanitizer and the Python process it started)."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env=env, cwd=ROOT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=max(timeout, 0.01))
        return out, proc.returncode, False, time.perf_counter() - start
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
        return out or "", proc.returncode, True, time.perf_counter() - start


@dataclass
class Plan:
    cases: list[str]
    tools: tuple[str, ...] = DEFAULT_TOOLS
    workers: int = 8
    case_timeout: float = 120.0
    budget: float = 330.0
    sanitizer: str = "compute-sanitizer"
    extra: tuple[str, ...] = ()


# --- command line -------------------------------------------------------------------------------

def default_workers() -> int:
    return max(1, min(12, os.cpu_count() or 1))


@dataclass(frozen=True)
class Sanitizer:
    """The tool for one week's package. `short` is the week's command-line name ("week1"), `label`
    names it in messages and the report ("week 1"); `local_cases`: {module: builder(module) -> cases}
    for the week's modules that have no SANITIZER_CASES of their own; each sanitized process runs
    `python -m course sanitize <short> --case NAME` (`entry`)."""
    package: str
    short: str
    label: str
    local_cases: dict = field(default_factory=dict)

    @property
    def entry(self) -> list[str]:
        """The command line each sanitized process runs, after the Python interpreter."""
        return ["-m", "course", "sanitize", self.short]

    @property
    def results(self) -> Path:
        """Where the report goes by default: the week's results/."""
        return ROOT / self.package / "results"

    def lesson_modules(self) -> list[str]:
        """The week's lesson modules (short names), in file order. Not a `<topic>_bench` module: it
        times the kernels of its lesson module, whose SANITIZER_CASES cover them."""
        package = importlib.import_module(self.package)
        return sorted(info.name for info in pkgutil.iter_modules(package.__path__)
                      if info.name not in NOT_LESSONS and not info.name.startswith("_")
                      and not info.name.endswith("_bench"))

    def module_cases(self, module: str) -> dict[str, Callable[[], None]]:
        """The module's own SANITIZER_CASES, else the ones defined here for it, else none."""
        m = importlib.import_module(f"{self.package}.{module}")
        if hasattr(m, "SANITIZER_CASES"):
            return dict(m.SANITIZER_CASES)
        builder = self.local_cases.get(module)
        return builder(m) if builder else {}

    def discover(self, only: list[str] | None = None) -> dict[str, Callable[[], None]]:
        """{"module:case": run} for every case of the week, filtered by `only` (module names, or
        substrings of the qualified names)."""
        found: dict[str, Callable[[], None]] = {}
        for module in self.lesson_modules():
            for case, run in self.module_cases(module).items():
                name = qualified(module, case)
                if only and not any(p == module or p in name for p in only):
                    continue
                if name in found:
                    raise ValueError(f"two sanitizer cases are named {name!r}")
                found[name] = run
        return found

    def resolve(self, name: str) -> tuple[str, Callable[[], None]]:
        """A case by its qualified name ("scan:scan_lookback_f32"), importing only its module; a bare
        case name ("scan_lookback_f32") is looked up in every module and must be unique."""
        if ":" in name:
            module, case = name.split(":", 1)
            if module not in self.lesson_modules():
                raise KeyError(f"no {self.label.replace(' ', '-')} module {module!r}; modules: {', '.join(self.lesson_modules())}")
            cases = self.module_cases(module)
            if case not in cases:
                raise KeyError(f"{module} has no sanitizer case {case!r}; it has: {', '.join(cases) or 'none'}")
            return name, cases[case]
        matches = [(n, run) for n, run in self.discover().items() if n.split(":", 1)[1] == name]
        if len(matches) != 1:
            why = "no case" if not matches else f"{len(matches)} cases ({', '.join(n for n, _ in matches)})"
            raise KeyError(f"{why} named {name!r}: use `--list` and pass module:case")
        return matches[0]

    def run_in_process(self, names: list[str]) -> int:
        """Run cases here, one after the other: what each sanitizer subprocess does (with one name)."""
        failed = 0
        for name in names:
            start = time.perf_counter()
            try:
                full, run = self.resolve(name)
                run()
            except Exception:
                failed += 1
                traceback.print_exc()
                print(f"case {name}: FAILED", flush=True)
            else:
                print(f"case {full}: ok ({time.perf_counter() - start:.2f} s)", flush=True)
        return 1 if failed else 0

    def sanitizer_command(self, sanitizer: str, tool: str, case: str, extra: tuple[str, ...] = ()) -> list[str]:
        command = [sanitizer, "--tool", tool, "--error-exitcode", str(ERROR_EXIT),
                   "--show-backtrace", "device",  # host frames of a Python process say nothing
                   "--print-limit", "100"]         # the count in the summary stays exact
        if tool == "racecheck":
            command += ["--racecheck-report", "all"]  # hazards and the analysis of their cause
        return command + list(extra) + [sys.executable, *self.entry, "--case", case]

    def cuda_modules(self, cases: list[str]) -> list[str]:
        """The modules of the selected cases that load a .cu file (a CUDA_SOURCE attribute)."""
        modules = sorted({case.split(":", 1)[0] for case in cases})
        return [m for m in modules if getattr(importlib.import_module(f"{self.package}.{m}"), "CUDA_SOURCE", None)]

    def compile_module(self, module: str) -> None:
        """Compile `module`'s CUDA_SOURCE exactly as its launchers do (the same path, hence the same
        nvcc options and the same PyCUDA cache entry)."""
        from course import interop

        interop.cuda_module(importlib.import_module(f"{self.package}.{module}").CUDA_SOURCE)

    def warm_up(self, modules: list[str], workers: int, timeout: float, env: dict) -> list[dict]:
        """Compile every .cu file once, in parallel, without the sanitizer. PyCUDA caches compiled
        modules on disk, so the sanitized processes load them instead of running nvcc all at once
        (and racing to write the same cache files)."""
        def compile_one(module: str) -> dict:
            command = [sys.executable, *self.entry, "--compile", module]
            out, code, timed_out, seconds = run_command(command, timeout, env)
            return {"module": module, "ok": code == 0 and not timed_out, "seconds": round(seconds, 1),
                    "tail": [] if code == 0 and not timed_out else out.strip().splitlines()[-5:]}

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            return list(pool.map(compile_one, modules))

    def run_plan(self, plan: Plan, *, start: float | None = None, env: dict | None = None,
                 report: Callable[[Outcome, int, int], None] | None = None) -> list[Outcome]:
        """Every (tool, case) of the plan through the sanitizer, `plan.workers` at a time.

        Tool-major order: all memcheck runs first, so a budget that runs out cuts racecheck runs.
        A job not started before the deadline is recorded "not run (time budget)"; one running at
        the deadline is killed and recorded as a timeout.
        """
        start = time.monotonic() if start is None else start
        deadline = start + plan.budget
        env = child_environment() if env is None else env
        jobs = [(tool, case) for tool in plan.tools for case in plan.cases]
        done = [0]
        lock = threading.Lock()

        def one(job) -> Outcome:
            tool, case = job
            left = deadline - time.monotonic()
            if left < MIN_START_S:
                outcome = Outcome(case, tool, status="not run (time budget)", ok=False)
            else:
                limit = min(plan.case_timeout, left)
                note = f" (killed at the {plan.budget:.0f} s budget)" if limit < plan.case_timeout else \
                    f" ({plan.case_timeout:.0f} s)"
                out, code, timed_out, seconds = run_command(
                    self.sanitizer_command(plan.sanitizer, tool, case, plan.extra), limit, env)
                outcome = parse_report(case, tool, out, code, timed_out=timed_out, seconds=round(seconds, 1),
                                       timeout_note=note)
            with lock:
                done[0] += 1
                if report:
                    report(outcome, done[0], len(jobs))
            return outcome

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, plan.workers)) as pool:
            return list(pool.map(one, jobs))

    def markdown_report(self, record: dict, outcomes: list[Outcome]) -> str:
        tools = record["tools"]
        machine = record["machine"]
        versions = ", ".join(f"{k} {machine[k]}" for k in ("torch", "numba", "numba_cuda", "pycuda", "cuda_runtime")
                             if machine.get(k))
        lines = [
            f"# compute-sanitizer on {self.label}'s kernels",
            "",
            f"{machine.get('gpu') or 'no GPU'}; {record['sanitizer_version']}; {versions}; {record['date']}.",
            f"`python {' '.join(self.entry)}` ({', '.join(tools)}; {record['workers']} workers; "
            f"{record['elapsed_s']:.0f} s of a {record['budget_s']:.0f} s budget; per-case limit "
            f"{record['case_timeout_s']:.0f} s; PYTORCH_NO_CUDA_MEMORY_CACHING=1).",
            "",
        ]
        for tool in tools:
            counts = summary_counts(outcomes, tool)
            lines.append(f"- **{tool}**: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v or k == "clean")
                         + f" of {sum(counts.values())} cases")
        failed_warmups = [w for w in record.get("warmup", []) if not w["ok"]]
        for w in failed_warmups:
            lines.append(f"- compiling the CUDA C of `{w['module']}` without the sanitizer failed: "
                         + " / ".join(w["tail"]))
        lines += ["", "| case | " + " | ".join(tools) + " |", "|---|" + "---|" * len(tools)]
        by_key = {(o.case, o.tool): o for o in outcomes}
        for case in record["cases"]:
            lines.append(f"| `{case}` | " + " | ".join(cell(by_key.get((case, t))) for t in tools) + " |")
        findings = [o for o in outcomes if not o.ok and o.excerpt]
        if findings:
            lines += ["", "## What was reported", ""]
            for o in findings:
                lines += [f"**{o.case}**, {o.tool}: {o.status}", "", "```", *o.excerpt, "```", ""]
        return "\n".join(lines).rstrip() + "\n"

    def write_report(self, out_dir: Path, record: dict, outcomes: list[Outcome]) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        record = dict(record, results=[o.__dict__ for o in outcomes])
        json_path, md_path = out_dir / "sanitizer.json", out_dir / "sanitizer.md"
        json_path.write_text(json.dumps(record, indent=1) + "\n")
        md_path.write_text(self.markdown_report(record, outcomes))
        return [json_path, md_path]

    def sanitize_all(self, plan: Plan, out_dir: Path, *, warmup: bool = True, env: dict | None = None) -> int:
        """Run the plan, write the report; exit status 0 only if every run was clean."""
        env = child_environment() if env is None else env
        start = time.monotonic()
        print(f"{len(plan.cases)} cases x {len(plan.tools)} tools ({', '.join(plan.tools)}) = "
              f"{len(plan.cases) * len(plan.tools)} runs, {plan.workers} at a time, budget {plan.budget:.0f} s, "
              f"per-case limit {plan.case_timeout:.0f} s", flush=True)
        warmups = []
        if warmup and runtime.on_gpu():
            modules = self.cuda_modules(plan.cases)
            warmups = self.warm_up(modules, plan.workers, min(plan.case_timeout, plan.budget), env)
            print(f"compiled the CUDA C of {len(modules)} modules in {time.monotonic() - start:.0f} s "
                  f"({sum(not w['ok'] for w in warmups)} failed)", flush=True)

        def progress(o: Outcome, done: int, total: int) -> None:
            print(f"[{done}/{total}] {o.tool:<9} {o.case}: {cell(o)}", flush=True)

        outcomes = self.run_plan(plan, start=start, env=env, report=progress)
        record = {
            "tool": "compute-sanitizer",
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": runtime.describe(),
            "sanitizer_version": sanitizer_version(plan.sanitizer),
            "tools": list(plan.tools),
            "workers": plan.workers,
            "budget_s": plan.budget,
            "case_timeout_s": plan.case_timeout,
            "elapsed_s": round(time.monotonic() - start, 1),
            "cases": plan.cases,
            "warmup": warmups,
        }
        for path in self.write_report(out_dir, record, outcomes):
            print("wrote", path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
        for tool in plan.tools:
            print(f"{tool}: " + ", ".join(f"{v} {k}" for k, v in summary_counts(outcomes, tool).items()))
        return 0 if all(o.ok for o in outcomes) else 1

    def launch_benchmark(self, name: str, size_label: str | None = None, variants: list[str] | None = None,
                         *, warmup: bool = False) -> list[str]:
        """Call each variant of benchmark `name` once, at the size labelled `size_label` (default: the
        largest), synchronizing after each: one launch per kernel for ncu (classroom.ncu.launch_benchmark)."""
        return ncu.launch_benchmark(self.package, name, size_label, variants, warmup=warmup)

    def main(self, argv=None) -> int:
        parser = argparse.ArgumentParser(prog=f"python {' '.join(self.entry)}",
                                         description=__doc__.split("\n\n")[0],
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--list", action="store_true", help="print the case names and stop")
        parser.add_argument("--case", action="append", metavar="NAME",
                            help="run this case in this process (repeatable); what each sanitizer run does")
        parser.add_argument("--only", nargs="+", metavar="PATTERN",
                            help="cases whose module is PATTERN or whose name contains it")
        parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(DEFAULT_TOOLS))
        parser.add_argument("--workers", type=int, default=default_workers(), help="sanitizer runs at a time")
        parser.add_argument("--timeout", type=float, default=120.0, help="seconds per run (default 120)")
        parser.add_argument("--budget", type=float, default=330.0,
                            help="seconds for everything; runs not started in time are reported as not run")
        parser.add_argument("--out", type=Path, default=self.results, help="where sanitizer.md|json go (default results/)")
        parser.add_argument("--no-warmup", action="store_true", help="skip compiling the .cu files first")
        parser.add_argument("--sanitizer-args", default="", help="extra compute-sanitizer options, one string")
        parser.add_argument("--compile", metavar="MODULE", help=argparse.SUPPRESS)  # the warm-up's worker
        parser.add_argument("--launch", metavar="BENCH", help="call each variant of a benchmark once (an ncu driver)")
        parser.add_argument("--size", help="with --launch: the size label (default: the largest)")
        parser.add_argument("--variants", nargs="+", help="with --launch: which variants (default: all but torch)")
        parser.add_argument("--warmup", action="store_true",
                            help="with --launch: call every variant once first, profile the second calls only "
                                 "(inside cudaProfilerStart/Stop: ncu --profile-from-start off)")
        parser.add_argument("--ncu-table", metavar="CSV", type=Path, help="ncu raw CSV -> markdown table")
        parser.add_argument("--labels", nargs="+", help="with --ncu-table: one label per kernel, launch order")
        args = parser.parse_args(argv)

        if args.ncu_table:
            print(ncu.ncu_table(args.ncu_table.read_text(), args.labels), end="")
            return 0
        if args.compile:
            self.compile_module(args.compile)
            return 0
        if args.launch:
            self.launch_benchmark(args.launch, args.size, args.variants, warmup=args.warmup)
            return 0
        if args.case:
            if not runtime.on_gpu():
                print("note: no GPU here, the case runs in simulation (cases that synchronize with "
                      "torch.cuda or launch CUDA C need a GPU)", file=sys.stderr)
            return self.run_in_process(args.case)

        cases = self.discover(args.only)
        if args.list:
            print("\n".join(cases))
            return 0
        if not cases:
            print(f"no sanitizer case matches {args.only}; see --list", file=sys.stderr)
            return 2
        sanitizer = find_sanitizer()
        if sanitizer is None:
            print("compute-sanitizer not found (looked at $COMPUTE_SANITIZER, PATH and /usr/local/cuda/bin): "
                  "NOTHING WAS CHECKED. It ships with the CUDA toolkit; run this on a machine with an "
                  "NVIDIA GPU and the toolkit.", file=sys.stderr)
            return 2
        if not runtime.on_gpu():
            print(f"compute-sanitizer is here ({sanitizer}) but torch sees no CUDA GPU "
                  f"(backend {runtime.BACKEND}): NOTHING WAS CHECKED; the sanitizer instruments real "
                  "kernel launches only.", file=sys.stderr)
            return 2
        plan = Plan(cases=list(cases), tools=tuple(args.tools), workers=args.workers, case_timeout=args.timeout,
                    budget=args.budget, sanitizer=sanitizer, extra=tuple(args.sanitizer_args.split()))
        return self.sanitize_all(plan, args.out, warmup=not args.no_warmup)


# --- the week, and `python -m course sanitize` ---------------------------------------------------

def for_week(name: str) -> Sanitizer:
    """The Sanitizer of week `name` ("week1", or its package's name), with the LOCAL_CASES of its
    `sanitize` lesson module when it has one."""
    for week in weeks.all_weeks():
        if name in (week.short, week.package):
            try:
                local = importlib.import_module(f"{week.package}.sanitize").LOCAL_CASES
            except ModuleNotFoundError:
                local = {}
            return Sanitizer(week.package, week.short, f"week {week.short.removeprefix('week')}", dict(local))
    raise SystemExit(f"no week {name!r}; weeks: {', '.join(w.short for w in weeks.all_weeks())}")

