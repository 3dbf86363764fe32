"""The learner's commands: `course hint` (graded hints, their coverage check), `course time` (your stub
rebound into the lesson's benchmarks; the interpreter's byte and FLOP counts in simulation; the
history), the stubs' pointers to their notes, progress's real exercises, notebooks' marker-free
sources and `course check`'s processes. CPU only: Triton runs in its interpreter here."""
from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from classroom import attempts, hints, lesson_files, progress, sim_count, stubs
from classroom.cli import check_command
from course import runtime, show
from course.gpu import triton, tl

SOLUTION = '''\
"""A toy lesson."""


def add_one(x):
    """x + 1."""
    # BEGIN EXERCISE: add one
    # HINT: the idea: one more than x
    # HINT: the shape: a return of a sum
    #   (continued on a second line)
    y = x + 1  # SECRET-SOLUTION-LINE
    # END EXERCISE
    return y


def double(x):
    """2 x."""
    # BEGIN EXERCISE: double it
    #   (more TODO text)
    # HINT: only one hint here
    z = x * 2
    # END EXERCISE
    return z
'''


def _toy_week(root: Path, package: str = "week9_toy", short: str = "week9") -> Path:
    week = root / package
    (week / "exercises").mkdir(parents=True)
    (week / "__init__.py").write_text('"""Week 9."""\n')
    (week / "exercises" / "__init__.py").write_text("")
    (root / "tests" / short).mkdir(parents=True, exist_ok=True)
    (week / "lesson.py").write_text(SOLUTION)
    return week


def _args(**kw):
    base = dict(lesson=None, n=None, all=False, check=False, root=None)
    return argparse.Namespace(**{**base, **kw})


# ------------------------------------------------------------------------------ course hint
def test_hints_are_read_per_hole_with_their_continuation_lines(tmp_path):
    week = _toy_week(tmp_path)
    holes = hints.holes_of(week / "lesson.py", tmp_path)
    assert [h.where for h in holes] == ["`add_one`", "`double`"]
    assert holes[0].hints == ["the idea: one more than x", "the shape: a return of a sum (continued on a second line)"]
    assert holes[1].todo == "double it (more TODO text)" and holes[1].hints == ["only one hint here"]


def test_hint_check_names_every_hole_with_fewer_than_two_hints(tmp_path, capsys):
    _toy_week(tmp_path)
    problems = hints.check(tmp_path)
    assert len(problems) == 1 and problems[0].startswith("week9/lesson hole 2 (`double`")
    assert "1 hint" in problems[0]
    assert hints.main(_args(check=True, root=str(tmp_path))) == 1
    assert "1 of 2 holes have fewer than 2 hints" in capsys.readouterr().out


def test_hint_shows_one_more_level_per_call_never_the_code_and_progress_counts_them(tmp_path, capsys):
    _toy_week(tmp_path)
    assert hints.main(_args(lesson="lesson", root=str(tmp_path))) == 0
    listing = capsys.readouterr().out
    assert "2 holes" in listing and "`add_one` (about 1 lines; 2 hints, 0 seen)" in listing
    hints.main(_args(lesson="lesson", n=1, root=str(tmp_path)))
    first = capsys.readouterr().out
    assert "one more than x" in first and "a return of a sum" not in first
    hints.main(_args(lesson="week9/lesson", n=1, root=str(tmp_path)))
    second = capsys.readouterr().out
    assert "a return of a sum" in second and "That was the last hint" in second
    assert "SECRET-SOLUTION-LINE" not in first + second
    hints.main(_args(lesson="lesson", n=2, all=True, root=str(tmp_path)))
    assert hints.used("week9/lesson", tmp_path) == 3
    assert (tmp_path / hints.STATE).exists()
    assert hints.main(_args(lesson="lesson", n=3, root=str(tmp_path))) == 2


def test_a_lesson_name_in_two_weeks_must_be_told_apart(tmp_path):
    _toy_week(tmp_path)
    _toy_week(tmp_path, "week8_toy", "week8")
    with pytest.raises(ValueError, match="week8/lesson or week9/lesson"):
        hints.resolve("lesson", tmp_path)
    assert hints.resolve("week8/lesson", tmp_path)[0] == "week8/lesson"


# ------------------------------------------------------------------------------ notes, progress, notebooks, check
def test_a_stub_names_its_own_note(tmp_path):
    week = _toy_week(tmp_path)
    assert lesson_files.note_of(week / "lesson.py") == week / "README.md"  # no notes/: the README
    (week / "notes").mkdir()
    (week / "notes" / "other.md").write_text("# 02 · Other things (`other.py`, `lesson.py`)\n")
    assert lesson_files.note_of(week / "lesson.py") == week / "notes" / "other.md"  # its title names the file
    (week / "notes" / "lesson.md").write_text("# 01 · The lesson\n")
    assert lesson_files.note_of(week / "lesson.py") == week / "notes" / "lesson.md"
    assert "week9_toy/notes/lesson.md" in " ".join(stubs.generate(week / "lesson.py", tmp_path).split())
    softmax_stub = Path(lesson_files.ROOT, "week3_triton_kernels", "exercises", "softmax.py").read_text()
    assert "week3_triton_kernels/notes/softmax.md" in softmax_stub and "the week's README" not in softmax_stub


def test_progress_counts_only_real_exercises():
    week3 = lesson_files.ROOT / "week3_triton_kernels"
    names = [name for name, _, _ in progress.lessons(week3)]
    assert "softmax" in names and "matmul_fp8" not in names  # "Not an exercise": a re-export, nothing to fill


def test_notebooks_show_a_solution_without_markers_after_pointing_to_the_exercise():
    from week3_triton_kernels import vector_add

    text = show.solution_source(vector_add.add_kernel)
    assert text.index("week3_triton_kernels/exercises/vector_add.py") < text.index("def add_kernel")
    assert "BEGIN EXERCISE" not in text and "END EXERCISE" not in text and "HINT:" not in text
    assert "tl.store(out_ptr + offsets" in text
    assert show.strip_markers("a\n  # BEGIN EXERCISE: x\n  #   more\n  # HINT: h\n  #   h2\n  b\n  # END EXERCISE\n"
                              "  #   kept: a comment of the code\n") == "a\n  b\n  #   kept: a comment of the code\n"


def test_course_check_runs_the_week_in_parallel_unless_told():
    assert check_command("week3", [], jobs=2)[-2:] == ["-n", "2"]
    assert check_command("week3", ["-n", "1"], jobs=4).count("-n") == 1
    assert "-n" not in check_command("week3", [], jobs=1)


# ------------------------------------------------------------------------------ course time
@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    a = tl.load(a_ptr + i[:, None] * N + i[None, :])
    b = tl.load(b_ptr + i[:, None] * N + i[None, :])
    tl.store(c_ptr + i[:, None] * N + i[None, :], tl.dot(a, b) * 2.0)


@pytest.mark.skipif(runtime.ON_GPU, reason="counts what the Triton interpreter runs: on a GPU the kernels run "
                    "compiled, and `course time` times them instead (tested by the GPU-branch test)")
def test_the_interpreter_counts_active_lanes_and_dot_flops():
    from week3_triton_kernels import vector_add

    a, b = torch.randn(1000), torch.randn(1000)
    with sim_count.counting() as counts:
        vector_add.vector_add(a, b)
    assert (counts.loaded, counts.stored, counts.launches) == (8000, 4000, 1)  # the masked tail is not counted
    a, b, c = torch.randn(16, 16), torch.randn(16, 16), torch.empty(16, 16)
    with sim_count.counting() as counts:
        _dot_kernel[(1,)](a, b, c, N=16)
    assert counts.flops == 2 * 16 ** 3 + 16 * 16 and counts.dots == 1
    assert counts.intensity() == counts.flops / (3 * 16 * 16 * 4)
    with sim_count.counting() as after:  # the builder is restored: a new block starts from zero
        pass
    assert after.loaded == 0


def _toy_lesson(tmp_path, monkeypatch, stub_body: str):
    """A package with a solution, a bench module calling it through a helper, and a stub."""
    pkg = tmp_path / "toylearner_pkg"
    (pkg / "exercises").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "exercises" / "__init__.py").write_text("")
    (pkg / "lesson.py").write_text("def kernel(x):\n    return x + 1\n\n\ndef launcher(x):\n    return kernel(x)\n")
    (pkg / "exercises" / "lesson.py").write_text(stub_body)
    (pkg / "lesson_bench.py").write_text(textwrap.dedent("""
        import torch
        from course.bench import Benchmark
        from toylearner_pkg.lesson import launcher

        def helper(x):
            return launcher(x)

        BENCHMARKS = [Benchmark(name="toy", title="Toy", sizes=[8], sim_sizes=[8],
                                make_inputs=lambda n: (torch.zeros(n),),
                                variants={"torch": lambda x: x + 1, "mine": lambda x: helper(x)},
                                bytes=lambda n: 8 * n, headline=("mine",))]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("toylearner_pkg")]:
        monkeypatch.delitem(sys.modules, name)
    import importlib

    solution = importlib.import_module("toylearner_pkg.lesson")
    stub = importlib.import_module("toylearner_pkg.exercises.lesson")
    bench = importlib.import_module("toylearner_pkg.lesson_bench").BENCHMARKS[0]
    return attempts.Rebinder(solution, stub, "toylearner_pkg"), bench


def test_time_rebinds_the_benchmark_to_the_stub_through_helpers(tmp_path, monkeypatch):
    rebinder, bench = _toy_lesson(tmp_path, monkeypatch, "from toylearner_pkg.lesson import launcher\n\n\n"
                                  "def kernel(x):\n    return x + 2\n\n\ndef launcher(x):\n    return kernel(x)\n")
    p = attempts.plan(bench, rebinder, "exercises", every_variant=False, every_size=False)
    assert list(p.bench.variants) == ["torch", "solution:mine", "yours:mine"] and p.impl_labels == ["yours:mine"]
    x = torch.zeros(3)
    assert p.bench.variants["solution:mine"](x).tolist() == [1, 1, 1]
    assert p.bench.variants["yours:mine"](x).tolist() == [2, 2, 2]  # the bench's helper now calls the stub
    assert attempts.preflight(p) == {"yours:mine": "output differs from the solution's: timed, but run the tests"}
    record = __import__("course.bench", fromlist=["run"]).run(p.bench)  # host clock in simulation
    table = attempts.gpu_table(attempts.gpu_rows(record), {"yours:mine": "differs"})
    assert "| yours:mine (!) |" in table and "| torch |" in table
    only = attempts.plan(bench, rebinder, "solutions", every_variant=False, every_size=False)
    assert list(only.bench.variants) == ["torch", "solution:mine"] and only.impl_labels == ["solution:mine"]


def test_time_reports_an_unfilled_stub_instead_of_timing_it(tmp_path, monkeypatch):
    stub = ("def kernel(x):\n    raise NotImplementedError('not implemented yet: kernel: add one')\n\n\n"
            "def launcher(x):\n    return kernel(x)\n")
    rebinder, bench = _toy_lesson(tmp_path, monkeypatch, stub)
    p = attempts.plan(bench, rebinder, "exercises", every_variant=False, every_size=False)
    problems = attempts.preflight(p)
    assert problems["yours:mine"].startswith("not timed: NotImplementedError: not implemented yet: kernel")
    assert "yours:mine" not in p.bench.variants


def test_time_keeps_every_attempt_and_shows_the_best(tmp_path):
    stub = tmp_path / "stub.py"
    stub.write_text("x = 1\n")
    assert attempts.blob_hash(stub) == "7d4290a117a4ddcc11daae7ea675841033830c8f"  # `git hash-object stub.py`
    key = {"lesson": "week3/softmax", "benchmark": "b", "size": "s", "variant": "yours:triton", "gpu": "H100"}
    attempts.append_history([{**key, "ms": 2.0, "date": "d1"}, {**key, "ms": 1.5, "date": "d2"},
                             {**key, "gpu": "T4", "ms": 0.1}], tmp_path)
    (tmp_path / attempts.HISTORY).open("a").write("{cut sho")
    history = attempts.load_history(tmp_path)
    assert len(history) == 3 and attempts.best(history, key)["date"] == "d2"


@pytest.mark.skipif(runtime.ON_GPU, reason="counts what the Triton interpreter runs: on a GPU the kernels run "
                    "compiled, and `course time` times them instead (tested by the GPU-branch test)")
def test_time_in_simulation_prints_what_the_interpreter_counted(capsys):
    args = argparse.Namespace(lesson="week3/vector_add", impl="exercises", ncu=False, only=None, all_variants=False,
                              all_sizes=False, launch=None)
    plans = attempts.build(args.lesson, args.impl, False, False)
    rows = attempts.count_sim(plans[0])
    solution = next(r for r in rows if r["variant"] == "solution:triton")
    model = next(r for r in rows if r["variant"] == "cost model")
    assert solution["loaded"] + solution["stored"] == model["moved"]  # the kernel moves its cost model's bytes
    table = attempts.sim_table(rows)
    assert "| solution:triton | 1 |" in table and "12.0" in table and "not a Triton kernel" in table


def test_time_ncu_profiles_the_variants_with_the_notes_metrics_and_prints_their_table(tmp_path, monkeypatch, capsys):
    """A stand-in `ncu` on PATH: it records its command line, writes a report, and exports a small CSV."""
    csv = ('"ID","Kernel Name","gpu__time_duration.sum","launch__grid_size","dram__bytes_read.sum"\\n'
           '"","","nsecond","","byte"\\n"0","add_kernel","12,000","4096","8,000,000"\\n')
    fake = tmp_path / "ncu"
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "$@" >> {tmp_path}/calls.txt
        case "$1" in
          --query-metrics) echo "dram__bytes_read   Counter  bytes read from DRAM";;
          --import) printf '{csv}';;
          *) while [ "$1" != "-o" ]; do shift; done; touch "$2.ncu-rep";;
        esac
    """))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    assert attempts.run_ncu("week3/vector_add", "exercises", "vector_add_week3", ["solution:triton", "yours:triton"]) == 0
    calls = (tmp_path / "calls.txt").read_text()
    assert "--profile-from-start off" in calls and "--launch week3/vector_add" in calls
    assert "dram__bytes_read.sum" in calls and "l1tex__data_bank_conflicts" not in calls  # only metrics ncu knows
    table = capsys.readouterr().out
    assert "| add_kernel | 12.0 | 4096 | 8 |" in table  # classroom/ncu.py's table: us, grid, DRAM MB


def test_time_on_a_gpu_prints_rates_and_ceilings_keeps_the_attempt_and_shows_the_best(tmp_path, monkeypatch, capsys):
    """The GPU branch, with course/bench.py's run replaced by a record as a GPU writes it (no GPU here)."""
    from course import bench

    def fake_run(b, progress=None):
        rows = [{"size": "2^28", "variant": "torch", "ms": 1.0, "gbps": 3000.0, "tflops": None, "pct_of_copy": 90.0},
                {"size": "2^28", "variant": "solution:triton", "ms": 0.8, "gbps": 3750.0, "tflops": 0.3,
                 "pct_of_copy": 95.0, "speedup_vs_torch": 1.25}]
        return {"title": b.title, "rows": rows, "ceilings": {"copy_gbps": 3950.0, "matmul_bfloat16_tflops": 600.0},
                "machine": {"gpu": "Fake GPU", "torch": "2.11"}, "simulated": False, "date": "today"}

    monkeypatch.setattr(runtime, "on_gpu", lambda: True)
    monkeypatch.setattr(runtime, "describe", lambda: {"gpu": "Fake GPU"})
    monkeypatch.setattr(bench, "run", fake_run)
    args = argparse.Namespace(lesson="week3/vector_add", impl="solutions", ncu=False, only=None, all_variants=False,
                              all_sizes=False, launch=None, root=str(tmp_path))
    assert attempts.main(args) == 0
    assert attempts.main(args) == 0
    out = capsys.readouterr().out
    assert "| 2^28 | solution:triton | 0.8000 | 3750 | 0.30 | 95.0 | 0.1 | 1.25x |" in out  # 0.3 of 600 TFLOP/s
    assert "Fake GPU, copy ceiling 3950 GB/s measured in the same run" in out
    assert out.count("best solution:triton at 2^28 on this GPU: 0.8000 ms") == 2 and "<- this run" in out
    history = attempts.load_history(tmp_path)
    assert len(history) == 2 and history[0]["gpu"] == "Fake GPU" and history[0]["impl"] == "solutions"
    assert history[0]["stub_hash"] == attempts.blob_hash(lesson_files.ROOT / "week3_triton_kernels" / "vector_add.py")
