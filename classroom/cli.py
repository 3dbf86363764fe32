"""The course's command line.

    python -m course info                 what hardware and which backend this machine uses
    python -m course check week1 [-- ...] run that week's tests, one process per core (extra args go to pytest)
    python -m course bench week1          time the week's kernels beside torch; save results/
    python -m course report [--check]     rebuild every generated table from the results/ files:
                                          RESULTS.md, README's results and skips sections, each
                                          `<!-- results:NAME -->` block in the weeks' markdown, each
                                          `[value][name]` figure in their prose (classroom/figures.py),
                                          and the performance comparisons (classroom/report.py)
    python -m course versions [--check]   installed torch/triton beside those results/ was measured
                                          with, and where they stand in the supported range
                                          (--check: fail if they differ; --newest: the newest tested, as pins)
    python -m course skips LOG [--write]  count a CPU pytest run's skips by reason (LOG: its output);
                                          fail if they differ from tests/skips_cpu.json (--write: update it)

    python -m course exercises --write    generate the exercise stubs from the solutions' marked regions
                                          (--check: fail if a committed stub differs; --must-fail: run
                                          the known-wrong solutions in tests/<week>/wrong/, each must fail)
    python -m course progress [week ...]  your exercises: done / failing (first test, reason) / not started
    python -m course stages [lesson ...]  lessons in stages: each stage passes with the later ones still holes
    python -m course rung [LADDER [N|all]] a ladder's rungs by number: check rung N against torch, time it
    python -m course hint LESSON [N]      an exercise's holes; hole N's next hint (--all: every level;
                                          --check: list holes with fewer than two hints)
    python -m course time LESSON          your kernel timed beside the solution and torch (simulation:
                                          bytes and FLOPs the interpreter counted); --ncu for counters
    python -m course compile-matrix       every Triton kernel the tests launch, compiled for T4, A100, RTX 30,
                                          L4 and H100 without a GPU: fits / refused (why) / FAILS
    python -m course sanitize week1       compute-sanitizer over every kernel of the week (GPU; --list,
                                          --case NAME, --only ...: classroom/sanitize.py)
    python -m course ncu --launch BENCH   Nsight Compute helpers: one launch per variant, tables from
                                          ncu's CSV (classroom/ncu.py)

`--backend gpu|sim` before the command overrides the automatic choice. The weeks are found by
course/weeks.py (each declares itself in its `__init__.py`); the generated tables are made by
classroom/report.py.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from course import weeks

ROOT = weeks.ROOT


def cmd_info(_args) -> int:
    from course import runtime, versions

    for key, value in runtime.describe().items():
        print(f"{key:>18}: {value}")
    print(versions.support_line())
    if not runtime.on_gpu():
        print("\nNo CUDA GPU: Triton runs in its interpreter and Numba in its CUDA simulator "
              "(correct results, meaningless timings); PyCUDA tests are skipped.")
    from classroom import compile_matrix

    gpu = runtime.gpu_class()
    if gpu is not None:
        print(f"\nWhat runs on this GPU (class {gpu.name}, {gpu.arch}; tests/compile_matrix.json):")
        print("\n".join(compile_matrix.summary_lines(gpu.name)))
    else:
        print("\nWhat runs on each GPU class (tests/compile_matrix.json; on a GPU this shows its own class):")
        print("\n".join(compile_matrix.summary_lines()))
    return 0


def check_command(week_short: str, pytest_args: list[str], jobs: int = 0) -> list[str]:
    """pytest on the week's tests, in `jobs` processes (pytest-xdist; 0: one per core, as README's
    `pytest -n 2`): a week's simulated tests take minutes serially. `-n` in pytest_args wins."""
    command = [sys.executable, "-m", "pytest", str(ROOT / "tests" / week_short)]
    jobs = jobs or os.cpu_count() or 1
    given = any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in pytest_args)
    if jobs > 1 and not given:
        import importlib.util

        if importlib.util.find_spec("xdist") is not None:
            command += ["-n", str(jobs)]
    return command + list(pytest_args)


def cmd_check(args) -> int:
    week = weeks.resolve(args.week)
    command = check_command(week.short, args.pytest_args, args.jobs)
    print("running:", " ".join(command), flush=True)
    return subprocess.call(command, cwd=ROOT)


def cmd_bench(args) -> int:
    from course import bench, runtime

    package = weeks.resolve(args.week).package
    benchmarks = [b for b in weeks.benchmarks(package) if not args.only or b.name in args.only]
    if not benchmarks:
        print(f"{package} has no benchmarks{' named ' + ', '.join(args.only) if args.only else ''}")
        return 1
    steps = sum(len(b.active_sizes()) * len(b.variants) for b in benchmarks)
    progress = bench.Progress(steps)
    out_dir = Path(args.out) if args.out else (ROOT / package / "results" if runtime.on_gpu() else None)
    for b in benchmarks:
        result = bench.run(b, progress)
        print()
        print(bench.markdown_table(result))
        if out_dir is not None and not args.no_save:
            for path in bench.save(result, out_dir):
                print("wrote", path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    if out_dir is None:
        print("(simulation: nothing saved; results/ holds only figures measured on a GPU)")
    return 0


def cmd_report(args) -> int:
    from classroom import report

    root = Path(args.root).resolve() if getattr(args, "root", None) else ROOT
    return report.update(root, check=args.check)


def cmd_versions(args) -> int:
    from course import versions

    if args.newest:  # CI's second venv: `pip install $(python -m course versions --newest)`
        print(" ".join(f"{name}=={version}" for name, version in versions.NEWEST.items()))
        return 0
    root = Path(args.root).resolve() if getattr(args, "root", None) else ROOT
    try:
        return versions.report(root, check=args.check)
    except ValueError as error:
        print(f"versions: {error}")
        return 1


def cmd_skips(args) -> int:
    from classroom import skips

    root = Path(args.root).resolve() if getattr(args, "root", None) else ROOT
    return skips.main(Path(args.log), root, write=args.write)


def cmd_timings(args) -> int:
    """Sum a GPU run's timing log per week into tests/timings_gpu.json (run it on the GPU machine)."""
    from course import runtime
    from classroom import timings

    if args.other_gpu:  # a whole-suite run on another GPU, beside the reference GPU's record
        env = json.loads(Path(args.other_gpu).read_text())
        rec = timings.with_other_gpu(timings.load(), gpu=env["gpu"], versions={"torch": env["torch"], "triton": env["triton"]},
                                     command=args.run_command, wall_s=args.wall_s, cache=args.cache, date=args.date,
                                     pytest_output=Path(args.suite_output).read_text())
        (ROOT / timings.TIMINGS_FILE).write_text(json.dumps(rec, indent=1) + "\n")
        print(timings.section())
        return 0
    if args.suite_output:  # only the whole-suite run (its GPU: the committed record's), the per-week serial runs kept
        rec = timings.with_suite(timings.load(), Path(args.log).read_text(), command=args.run_command,
                                 wall_s=args.wall_s, pytest_output=Path(args.suite_output).read_text(),
                                 cache=args.cache, date=args.date)
        (ROOT / timings.TIMINGS_FILE).write_text(json.dumps(rec, indent=1) + "\n")
        print(timings.section())
        return 0
    info = runtime.describe()
    if not info.get("gpu"):
        print("timings: run this on the GPU machine the log comes from (it records that GPU's name)")
        return 1
    serial = timings.serial_weeks(Path(args.serial)) if args.serial else None
    rec = timings.record(Path(args.log).read_text(), gpu=info["gpu"], command=args.run_command, wall_s=args.wall_s,
                         versions={"torch": info["torch"], "triton": info["triton"]}, serial=serial,
                         serial_command=args.serial_command)
    (ROOT / timings.TIMINGS_FILE).write_text(json.dumps(rec, indent=1) + "\n")
    print(timings.section())
    return 0


def cmd_sanitize(args) -> int:
    from classroom import sanitize
    return sanitize.for_week(args.week).main(args.args)


def cmd_ncu(args) -> int:
    from classroom import ncu
    return ncu.main(args.args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("auto", "gpu", "sim"), help="override GPU/simulation choice")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="hardware, backend and versions")
    check = sub.add_parser("check", help="run a week's tests")
    check.add_argument("week")
    check.add_argument("--jobs", type=int, default=0, help="pytest processes (pytest -n; default: one per CPU core)")
    check.add_argument("pytest_args", nargs=argparse.REMAINDER, help="passed to pytest")
    bench_p = sub.add_parser("bench", help="time a week's kernels")
    bench_p.add_argument("week")
    bench_p.add_argument("--only", nargs="*", help="benchmark names to run")
    bench_p.add_argument("--out", help="where to save results (default: the week's results/ on a GPU)")
    bench_p.add_argument("--no-save", action="store_true", help="print only")
    report = sub.add_parser("report", help="rebuild the generated tables (RESULTS.md, README, results blocks, "
                                           "comparisons)")
    report.add_argument("--check", action="store_true", help="fail, naming the files, if any table is out of date")
    report.add_argument("--root", help=argparse.SUPPRESS)  # another checkout (the kit's tests use a temp dir)
    versions_p = sub.add_parser("versions", help="installed torch/triton beside the measured ones")
    versions_p.add_argument("--check", action="store_true", help="fail if torch or triton differ from results/")
    versions_p.add_argument("--newest", action="store_true", help="print the newest torch/triton CI tests, as pip pins")
    versions_p.add_argument("--root", help=argparse.SUPPRESS)
    skips_p = sub.add_parser("skips", help="count a CPU pytest run's skips by reason")
    skips_p.add_argument("log", help="the output of a pytest run (its -ra summary lists the skips)")
    skips_p.add_argument("--write", action="store_true", help="update tests/skips_cpu.json instead of checking it")
    skips_p.add_argument("--root", help=argparse.SUPPRESS)
    timings_p = sub.add_parser("timings", help="per-week GPU test time from a `-p pytest_timelog` log")
    timings_p.add_argument("log")
    timings_p.add_argument("--wall-s", type=float, required=True, help="the run's wall time in seconds")
    timings_p.add_argument("--run-command", default="pytest -n 14 -p pytest_timelog tests")
    timings_p.add_argument("--serial", help="a folder of per-week serial runs (tools/gpu_week_times.sh): "
                                            "serial_<week>.txt timing logs and walls.txt")
    timings_p.add_argument("--serial-command", default="pytest -p pytest_timelog tests/<week>")
    timings_p.add_argument("--suite-output", help="pytest's output of the whole-suite run: update only that run "
                           "in the committed record, keeping its per-week serial runs")
    timings_p.add_argument("--other-gpu", metavar="ENV_JSON", help="with --suite-output: a run on another GPU; ENV_JSON "
                           "holds its {gpu, torch, triton} (written on that machine)")
    timings_p.add_argument("--cache", default="cold", help="with --suite-output: the Triton cache, cold or warm")
    timings_p.add_argument("--date", default=None, help="with --suite-output: the run's date (default: today)")
    # The commands with a module each:
    from course import rungs
    from classroom import attempts, compile_matrix, exercises, hints, install_size, progress, stages
    exercises.add_parser(sub)
    install_size.add_parser(sub)
    stages.add_parser(sub)
    progress.add_parser(sub)
    rungs.add_parser(sub)
    hints.add_parser(sub)
    attempts.add_parser(sub)
    compile_matrix.add_parser(sub)
    # sanitize and ncu load course.runtime when imported: they are imported when they run, after
    # the backend is chosen (compile-matrix must choose its own before anything loads runtime).
    sanitize_p = sub.add_parser("sanitize", add_help=False, help="compute-sanitizer over every kernel of a week "
                                "(`python -m course sanitize week1 --help`)")
    sanitize_p.add_argument("week")
    sanitize_p.add_argument("args", nargs=argparse.REMAINDER, help="the runner's options (--list, --case, --only, ...)")
    ncu_p = sub.add_parser("ncu", add_help=False, help="Nsight Compute helpers: a benchmark's variants launched once, "
                           "tables from ncu's CSV (`python -m course ncu --help`)")
    ncu_p.add_argument("args", nargs=argparse.REMAINDER, help="its options (--launch, --table, --render, ...)")
    # `sanitize` and `ncu` hand their options to their own parsers; argparse leaves a REMAINDER empty
    # when the first of them is an option (`ncu --render X`), so those come back as unknown: theirs.
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command in ("sanitize", "ncu"):
        args.args = unknown + args.args
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "compile-matrix":
        compile_matrix.prepare()  # no GPU, no interpreter: kernels stay GPU kernels to compile
    elif args.backend:
        os.environ["COURSE_BACKEND"] = args.backend  # read when course.runtime is imported
    if getattr(args, "pytest_args", None) and args.pytest_args[0] == "--":
        args.pytest_args = args.pytest_args[1:]
    return {"info": cmd_info, "check": cmd_check, "bench": cmd_bench, "report": cmd_report,
            "versions": cmd_versions, "skips": cmd_skips, "timings": cmd_timings,
            "exercises": exercises.main, "progress": progress.main, "rung": rungs.main,
            "install-size": install_size.command, "hint": hints.main, "time": attempts.main,
            "stages": stages.main, "compile-matrix": compile_matrix.main, "sanitize": cmd_sanitize,
            "ncu": cmd_ncu}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
