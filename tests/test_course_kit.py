"""The kit itself: results blocks and comparisons made by `python -m course report`, the markdown
table, lines-of-code counting and the benchmark records (no GPU needed: results files are faked)."""
import copy
import json
import textwrap

import pytest
import torch

from course import bench, runtime, source_lines, weeks
from classroom import report as reports
from classroom import cli

MACHINE = {"backend": "gpu", "device": "cuda", "python": "3.12.3", "torch": "2.11.0+cu130", "triton": "3.6.0",
           "numba": "0.68.0", "gpu": "NVIDIA H100 80GB HBM3", "cuda_runtime": "13.0"}


def fake_result(name, sizes=("2^20", "2^24"), variants=("torch", "triton"), headline=("triton",), **extra):
    rows = []
    for k, size in enumerate(sizes):
        for j, variant in enumerate(variants):
            ms = 0.5 * (k + 1) * (1 + j / 10)
            rows.append({"size": size, "variant": variant, "ms": ms, "ms_min": ms, "reps": 10,
                         "bytes": 12_000_000, "flops": 0, "gbps": 12_000_000 / (ms * 1e-3) / 1e9, "tflops": None,
                         "pct_of_copy": 40.0 + j, "speedup_vs_torch": 0.5 * (k + 1) / ms,
                         **extra.get(variant, {})})
    return {"benchmark": name, "title": f"Fake {name}", "notes": "", "headline": list(headline),
            "simulated": False, "date": "2026-11-22 22:51 UTC", "machine": dict(MACHINE),
            "ceilings": {"copy_gbps": 3000.0}, "rows": rows}


def write_result(root, package, result):
    folder = root / package / "results"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{result['benchmark']}.json").write_text(json.dumps(result))


def report(root, *flags):
    return cli.main(["report", *flags, "--root", str(root)])


@pytest.fixture
def tree(tmp_path):
    """A checkout with one week folder, a notes file holding two blocks, and one result."""
    week = tmp_path / "week3_triton_kernels"
    week.mkdir()
    (week / "notes.md").write_text(textwrap.dedent("""\
        # Notes
        <!-- results:fake_add -->
        stale text
        <!-- /results -->
        between
        <!-- results:not_run_yet -->
        <!-- /results -->
        end
        """))
    write_result(tmp_path, "week3_triton_kernels", fake_result("fake_add"))
    return tmp_path


# ----------------------------------------------------------------------------- blocks
def test_report_fills_blocks_and_check_passes_afterwards(tree, capsys):
    assert report(tree, "--check") == 1
    assert "week3_triton_kernels/notes.md" in capsys.readouterr().out
    assert report(tree) == 0
    text = (tree / "week3_triton_kernels" / "notes.md").read_text()
    result = json.loads((tree / "week3_triton_kernels/results/fake_add.json").read_text())
    assert bench.markdown_table(result).strip() in text
    assert "stale text" not in text
    assert ("_Not measured on a GPU yet: run `python -m course bench week3 --only not_run_yet` on a GPU._"
            in text)
    assert text.startswith("# Notes\n<!-- results:fake_add -->\n") and text.endswith("-->\nend\n")
    assert report(tree, "--check") == 0
    assert report(tree) == 0
    assert "already up to date" in capsys.readouterr().out


def test_check_names_the_file_whose_block_went_stale(tree, capsys):
    report(tree)
    changed = fake_result("fake_add")
    changed["rows"][0]["ms"] = 9.0
    write_result(tree, "week3_triton_kernels", changed)
    capsys.readouterr()
    assert report(tree, "--check") == 1
    out = capsys.readouterr().out
    assert "week3_triton_kernels/notes.md" in out and "out of date" in out


def test_simulated_results_count_as_not_measured(tree):
    simulated = fake_result("fake_add")
    simulated["simulated"] = True
    write_result(tree, "week3_triton_kernels", simulated)
    report(tree)
    text = (tree / "week3_triton_kernels" / "notes.md").read_text()
    assert "--only fake_add` on a GPU" in text


def test_results_folders_and_other_top_level_folders_are_left_alone(tree):
    block = "<!-- results:fake_add -->\nkeep\n<!-- /results -->\n"
    for path in (tree / "week3_triton_kernels/results/fake_add.md", tree / "docs/notes.md"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block)
    report(tree)
    assert (tree / "week3_triton_kernels/results/fake_add.md").read_text() == block
    assert (tree / "docs/notes.md").read_text() == block


def test_block_options_and_another_weeks_results(tmp_path):
    write_result(tmp_path, "week1_cuda_python", fake_result("w1", variants=("torch", "numba", "cuda_c"),
                                                            headline=("cuda_c",)))
    notes = tmp_path / "capstone" / "README.md"
    notes.parent.mkdir()
    notes.write_text("<!-- results:week1/w1 headline largest -->\n<!-- /results -->\n")
    assert report(tmp_path) == 0
    table = notes.read_text()
    assert "| 2^24 | torch |" in table and "| 2^24 | cuda_c |" in table
    assert "| numba |" not in table and "2^20" not in table


@pytest.mark.parametrize("text, message", [
    ("<!-- results:fake_add -->\nno end\n", "notes.md:1: results block"),
    ("a\n<!-- results:fake_add -->\n<!-- results:other -->\n<!-- /results -->\n", "notes.md:2"),
    ("text\n<!-- /results -->\n", "notes.md:2: `<!-- /results -->` without an opening"),
    ("<!-- results:fake_add sideways -->\n<!-- /results -->\n", "unknown option"),
    ("<!-- results:week9/fake_add -->\n<!-- /results -->\n", "unknown week"),
])
def test_broken_blocks_fail_naming_file_and_line(tree, capsys, text, message):
    (tree / "week3_triton_kernels" / "notes.md").write_text(text)
    assert report(tree, "--check") == 1
    assert message in capsys.readouterr().out


def test_markers_inside_code_fences_are_examples(tree):
    example = "```\n<!-- results:fake_add -->\n   <!-- /results -->\n```\n"
    (tree / "week3_triton_kernels" / "notes.md").write_text(example)
    assert report(tree) == 0
    assert (tree / "week3_triton_kernels" / "notes.md").read_text() == example


def test_readme_section_is_rebuilt_in_the_same_run(tree):
    readme = tree / "README.md"
    readme.write_text(f"intro\n{reports.README_BEGIN}\nold\n{reports.README_END}\noutro\n")
    report(tree)
    text = readme.read_text()
    assert "old" not in text and text.endswith("outro\n")
    assert "| `week3_triton_kernels` | 1 | NVIDIA H100 80GB HBM3 | 2026-11-22 | " \
           "[RESULTS.md](RESULTS.md#week3_triton_kernels) |" in text
    results = (tree / "RESULTS.md").read_text()  # the long table: README's companion, generated whole
    assert "## week3_triton_kernels" in results and "| fake_add | triton | 2^24 |" in results
    assert "| fake_add | triton | 2^20 |" not in results  # the largest size only
    assert report(tree, "--check") == 0


def test_results_file_drifting_fails_the_check(tree, capsys):
    (tree / "README.md").write_text(f"{reports.README_BEGIN}\n{reports.README_END}\n")
    report(tree)
    (tree / "RESULTS.md").write_text((tree / "RESULTS.md").read_text().replace("2^24", "2^25"))
    capsys.readouterr()
    assert report(tree, "--check") == 1
    assert "RESULTS.md" in capsys.readouterr().out


def test_readme_skips_section_comes_from_the_recorded_run(tree):
    from classroom import skips

    readme = tree / "README.md"
    readme.write_text(f"{reports.README_BEGIN}\n{reports.README_END}\n{reports.SKIPS_BEGIN}\nold\n{reports.SKIPS_END}\n")
    report(tree)
    assert "_Not counted yet" in readme.read_text()
    (tree / "tests").mkdir()
    (tree / skips.SKIPS_FILE).write_text(json.dumps({
        "date": "2026-11-26", "command": "pytest -n 2", "cpu_count": 2, "torch": "2.11.0+cu130",
        "triton": "3.6.0", "totals": {"passed": 90, "skipped": 10, "warnings": 3}, "seconds": 125.4,
        "reasons": [{"reason": "needs a real NVIDIA GPU (a PyCUDA launch needs the CUDA driver); x",
                     "category": skips.CATEGORIES[0][0], "tests": 7, "files": ["tests/a.py"]},
                    {"reason": "this Triton still has tl.make_block_ptr",
                     "category": skips.NOT_HARDWARE[0][0], "tests": 3, "files": ["tests/b.py"]}]}))
    report(tree)
    text = readme.read_text()
    assert "Without a GPU, 10 of the 100 tests are skipped" in text and "7 of them need a GPU" in text
    assert f"| {skips.CATEGORIES[0][0]} | 7 |" in text
    assert "| not hardware: depends on the Triton version (to be removed" in text
    assert "Counted on 2026-11-26 from a `pytest -n 2` run on 2 CPU cores" in text and "old" not in text


# --------------------------------------------------------------------- comparisons
def test_comparisons_file_is_generated_from_results(tree):
    write_result(tree, "week3_triton_kernels",
                 fake_result("vector_add_week3", sizes=("2^28",), extra={}, triton={"loc": 17}))
    report(tree)
    text = (tree / reports.comparisons_file()).read_text()
    triton_row = next(line for line in text.splitlines() if line.startswith("| Triton | week3 `vector_add.py`"))
    assert "| 2^28 |" in triton_row and "| 17 |" in triton_row and "41.0%" in triton_row
    assert "`vector_add_week3`: NVIDIA H100 80GB HBM3" in text
    assert "run `python -m course bench week1 --only vector_add_week1` on a GPU" in text
    assert report(tree, "--check") == 0


def test_every_comparison_names_a_torch_row_and_known_units():
    shorts = {week.short for week in weeks.all_weeks()}
    for group in reports.comparisons():
        assert group.metric in ("gbps", "tflops"), group.title
        assert any(impl.variant == "torch" for impl in group.impls), group.title
        assert all(impl.week in shorts for impl in group.impls), group.title


def test_every_comparison_row_names_a_registered_benchmark_and_variant():
    registered = {}
    for week in weeks.all_weeks():
        registered.update({(week.short, b.name): b for b in weeks.benchmarks(week)})
    for group in reports.comparisons():
        for impl in group.impls:
            found = registered.get((impl.week, impl.bench))
            assert found is not None, f"{group.title}: no benchmark {impl.bench!r} in {impl.week}"
            assert impl.optional or impl.variant in found.variants, \
                f"{group.title}: {impl.bench} has no variant {impl.variant!r} (has {list(found.variants)})"
            assert impl.size is None or impl.size in [found.size_label(s) for s in found.sizes], \
                f"{group.title}: {impl.bench} measures no size {impl.size!r} on a GPU"


def test_comparison_of_missing_variant_says_so(tmp_path):
    (tmp_path / "week3_triton_kernels").mkdir()
    write_result(tmp_path, "week3_triton_kernels", fake_result("vector_add_week3", sizes=("2^28",),
                                                              variants=("torch",)))
    section = reports.comparison_section(reports.comparisons()[0], tmp_path)
    assert "no 'triton' at 2^28 in results/vector_add_week3.json" in section


# ------------------------------------------------------------------ markdown table
def test_markdown_table_leaves_out_empty_columns_and_shows_memory_and_loc():
    plain = fake_result("t")
    head = bench.markdown_table(plain).splitlines()[2]
    assert head == "| size | variant | ms | GB/s | % of copy | vs torch |"  # no TFLOP/s, memory, LoC
    rich = fake_result("t", triton={"peak_mem_bytes": 3 * 2**20, "loc": 12, "tflops": 1.5})
    rich["rows"].append({"size": "2^24", "variant": "cuda_c", "skipped": "needs a GPU"})
    lines = bench.markdown_table(rich).splitlines()
    assert lines[2] == "| size | variant | ms | GB/s | TFLOP/s | % of copy | vs torch | peak MiB | LoC |"
    assert lines[5].endswith("| 3.0 | 12 |") and lines[4].endswith("| - | - |")
    assert lines[-1] == "| 2^24 | cuda_c | skipped: needs a GPU |  |  |  |  |  |  |"
    assert "NVIDIA H100 80GB HBM3, copy ceiling 3000 GB/s" in lines[0]


# ------------------------------------------------------------------- lines of code
def sample(x):
    """A docstring:

    two lines of it, not counted."""
    # a comment, not counted

    y = x + 1  # counted
    return (y,
            y)  # a statement over two lines counts two


def test_count_source_lines_skips_blanks_comments_and_docstrings():
    assert source_lines.count_source_lines(sample) == 4  # def, y =, return, continuation
    assert source_lines.count_source_lines([sample, sample]) == 4  # counted once
    import functools
    assert source_lines.count_source_lines(functools.partial(sample, 1)) == 4


def test_count_source_lines_reads_triton_and_cuda_c(tmp_path):
    from week3_triton_kernels import vector_add

    assert source_lines.count_source_lines(vector_add.add_kernel) == 8  # @triton.jit, def and 6 statements
    cu = tmp_path / "k.cu"
    cu.write_text(textwrap.dedent("""\
        // a file comment
        __device__ float helper(float x) { return x; }
        template <int N>
        __global__ void kern(float* out,
                             int n)
        {
            /* a block
               comment */
            int i = helper(threadIdx.x);  // trailing comment

            if (i < n) { out[i] = 0.f; }
        }
        void host() { kern<1><<<1, 1>>>(nullptr, 0); }
        """))
    assert source_lines.count_source_lines(source_lines.c_function(cu, "kern")) == 7
    with pytest.raises(ValueError, match="no definition"):
        source_lines.count_source_lines(source_lines.c_function(cu, "missing"))
    with pytest.raises(TypeError, match="cannot find Python source"):
        source_lines.count_source_lines(42)


# -------------------------------------------------------------------- benchmark run
def tiny_benchmark(**kw):
    def add(a, b):
        return a + b

    return bench.Benchmark(name="tiny", title="tiny", sizes=[8], sim_sizes=[8],
                           make_inputs=lambda n: (torch.ones(n), torch.ones(n)),
                           variants={"torch": torch.add, "mine": add}, bytes=lambda n: 12 * n, **kw)


def test_run_records_memory_and_loc_columns():
    result = bench.run(tiny_benchmark(sources={"mine": sample}))
    mine = next(r for r in result["rows"] if r["variant"] == "mine")
    # Off the GPU there is no device memory to count; on it, this CPU-only callable allocates none.
    assert mine["loc"] == 4 and mine["peak_mem_bytes"] == (0 if runtime.on_gpu() else None)
    assert next(r for r in result["rows"] if r["variant"] == "torch")["loc"] is None
    assert "| LoC |" in bench.markdown_table(result)


def test_sources_for_unknown_variant_are_refused():
    with pytest.raises(ValueError, match="sources= names variants that do not exist"):
        tiny_benchmark(sources={"theirs": sample}).lines_of_code()


def test_benchmark_keeps_its_fields_without_sources():
    b = tiny_benchmark()
    assert b.sources == {} and b.lines_of_code() == {}
    assert copy.copy(b).name == "tiny"


def test_every_registered_benchmark_is_well_formed():
    seen = {}
    for week in weeks.all_weeks():
        package = week.package
        for b in weeks.benchmarks(week):
            assert b.name not in seen, f"benchmark name {b.name!r} in {package} and {seen.get(b.name)}"
            seen[b.name] = package
            assert "torch" in b.variants, f"{b.name} has no 'torch' reference variant"
            counts = b.lines_of_code()  # every sources= entry must be readable
            assert all(n > 0 for n in counts.values()), (b.name, counts)


def test_failure_log_keeps_each_failure_message_as_it_happens(tmp_path, monkeypatch, request):
    # A GPU run cut off by its time limit never prints pytest's summary: the log must not need it.
    from types import SimpleNamespace
    suite_conftest, = (p for p in request.config.pluginmanager.get_plugins() if hasattr(p, "FAILURE_LOG_ENV"))
    path = tmp_path / "failures.log"
    monkeypatch.setenv(suite_conftest.FAILURE_LOG_ENV, str(path))
    failed = SimpleNamespace(failed=True, when="call", nodeid="tests/x.py::test_y",
                             longreprtext="x" * 5000 + "\nE   AssertionError: 3 of 7 elements differ")
    suite_conftest.pytest_runtest_logreport(failed)
    suite_conftest.pytest_runtest_logreport(SimpleNamespace(failed=False, when="call", nodeid="tests/x.py::test_z",
                                                            longreprtext=""))
    text = path.read_text()
    assert text.startswith("==== call FAILED tests/x.py::test_y\n...\n")
    assert "3 of 7 elements differ" in text and "test_z" not in text
    assert len(text) < suite_conftest.FAILURE_LOG_CHARS + 200


def test_compile_on_first_call_compiles_once_lazily_with_its_options(monkeypatch):
    compiled = []

    def fake_compile(fn, **options):
        compiled.append(options)
        return lambda *args, **kwargs: ("compiled", fn(*args, **kwargs))

    monkeypatch.setattr(bench.torch, "compile", fake_compile)
    run = bench.compile_on_first_call(lambda x, y=1: x + y, dynamic=False)
    assert compiled == []  # nothing at definition: a bench module's import stays cheap
    assert run(1, y=2) == ("compiled", 3) and run(2) == ("compiled", 3)
    assert compiled == [{"dynamic": False}]


# ------------------------------------------------------------------- sweep command line
def test_sweep_main_asks_for_sweep_passes_its_options_and_refuses_simulation(monkeypatch, capsys):
    from course.sweep import sweep_main

    calls = []

    def sweep(widths=(1, 2)):
        calls.append(widths)

    def options(parser):
        parser.add_argument("--widths", type=int, nargs="*", default=(1, 2))

    doc = "Demo's benchmarks and sweep.\n\nMore."
    assert sweep_main(sweep, [], doc=doc, help="time configs", options=options) == 2 and calls == []
    assert "Demo's benchmarks and sweep." in capsys.readouterr().out  # no --sweep: the help
    assert sweep_main(sweep, ["--sweep"], doc=doc, help="time configs", options=options) == 0
    assert sweep_main(sweep, ["--sweep", "--widths", "8", "16"], doc=doc, help="time configs", options=options) == 0
    assert calls == [(1, 2), [8, 16]]
    monkeypatch.setattr(runtime, "on_gpu", lambda: False)
    with pytest.raises(SystemExit, match="on a GPU"):
        sweep_main(sweep, ["--sweep"], doc=doc, help="time configs", gpu_only=True)
    assert len(calls) == 2


# ------------------------------------------------------------------------ the weeks
def test_the_kit_names_no_week_outside_the_registries():
    """course/ finds the weeks (course/weeks.py): a week's name may stand in a docstring, a comment or
    a command's help text (an example), never in the code of the kit or of the machinery (classroom/)."""
    import ast

    names = {w.short for w in weeks.all_weeks()} | {w.package for w in weeks.all_weeks()}
    found = []
    for path in sorted((weeks.ROOT / "course").glob("*.py")) + sorted((weeks.ROOT / "classroom").glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        docstrings |= {id(c) for kw in ast.walk(tree) if isinstance(kw, ast.keyword) and kw.arg == "help"
                       for c in ast.walk(kw.value)}
        for node in ast.walk(tree):
            text = (node.value if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings else node.id if isinstance(node, ast.Name) else "")
            found += [f"{path.name}:{node.lineno}: {name}" for name in names
                      if name in text.replace("_", " ").split() or name == text or f"{name}_" in text
                      or f"{name}/" in text or f"{name}." in text]
    assert not found, found


def test_weeks_are_discovered_in_course_order_from_their_registries(tmp_path):
    found = weeks.all_weeks()
    assert [w.order for w in found] == sorted(w.order for w in found)
    assert all((weeks.ROOT / "tests" / w.short).is_dir() for w in found)
    assert weeks.resolve(found[0].package) == weeks.resolve(found[0].short) == weeks.resolve(str(found[0].order))
    with pytest.raises(SystemExit, match="unknown week 'nine'; choose one of"):
        weeks.resolve("nine")
    # a registry, a package found by its tests' folder, and packages that are no lesson
    for name, init in [("alpha_one", 'COURSE = {"short": "a1", "order": 2}\n'), ("beta_two", '"""Beta: b."""\n'),
                       ("kit", ""), ("gamma_three", '"""Not a lesson: no tests."""\n')]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(init)
    (tmp_path / "tests" / "beta").mkdir(parents=True)
    found = weeks.discover(tmp_path)
    assert [(w.short, w.package, w.title) for w in found] == [("a1", "alpha_one", "alpha_one"),
                                                              ("beta", "beta_two", "Beta: b.")]
    (tmp_path / "alpha_one" / "__init__.py").write_text('COURSE = {"short": "a1", "order": ORDER}\n')
    with pytest.raises(ValueError, match="COURSE must be a literal"):
        weeks.discover(tmp_path)
    (tmp_path / "alpha_one" / "__init__.py").write_text('COURSE = {"shrot": "a1"}\n')
    with pytest.raises(ValueError, match="keys among"):
        weeks.discover(tmp_path)


def test_a_record_a_lessons_own_command_writes_names_that_command():
    week, (record, command) = next((w, next(iter(w.runners.items()))) for w in weeks.all_weeks() if w.runners)
    assert reports.not_measured(week.short, record) == f"_Not measured on a GPU yet: run `{command}` on a GPU._"
    assert reports.not_measured(week.short, "other") == \
        f"_Not measured on a GPU yet: run `python -m course bench {week.short} --only other` on a GPU._"


# Lesson modules another change is splitting (benchmarks out, or a reason at the top).
LONG_MODULES_PENDING: set[str] = set()
LESSON_MAX_LINES = 500   # above this a module says why, in its docstring's first paragraphs
MIXED_MAX_LINES = 600    # above this a module holds kernels or benchmarks, not both


def test_long_lesson_modules_say_why_and_keep_kernels_and_benchmarks_apart():
    """A lesson module reads like a lesson: its benchmarks, sweeps and command line live in
    <topic>_bench.py; one over 500 lines says why at its top ('Over 500 lines: ...')."""
    import ast
    import re

    kernel = re.compile(r"^@(triton\.jit|cuda\.jit|numba\.cuda\.jit)|^CUDA_SOURCE\b|\bcuda_(kernel|module)\(", re.M)
    benchmark = re.compile(r"\bBenchmark\(|^BENCHMARKS\b", re.M)
    unexplained, mixed = [], []
    for week in weeks.all_weeks():
        folder = weeks.ROOT / week.package
        lesson_folders = [d for d in sorted(folder.iterdir()) if (d / "__init__.py").is_file()
                          and d.name not in weeks.NOT_MODULES]  # a lesson in several modules: norms/
        for path in [*sorted(folder.glob("*.py")), *(p for d in lesson_folders for p in sorted(d.glob("*.py")))]:
            rel = str(path.relative_to(weeks.ROOT))
            text = path.read_text()
            lines = len(text.splitlines())
            if rel in LONG_MODULES_PENDING or path.name == "__init__.py":
                continue
            head = "\n\n".join((ast.get_docstring(ast.parse(text)) or "").split("\n\n")[:3])
            if lines > LESSON_MAX_LINES and "Over 500 lines" not in head:
                unexplained.append(f"{rel}: {lines} lines")
            if lines > MIXED_MAX_LINES and kernel.search(text) and benchmark.search(text):
                mixed.append(f"{rel}: {lines} lines")
    assert not unexplained, f"over {LESSON_MAX_LINES} lines with no 'Over 500 lines: why' at the top: {unexplained}"
    assert not mixed, f"over {MIXED_MAX_LINES} lines, kernels and benchmarks in one file: {mixed}"


# Imports of another module's private names still to be made public (files another change owns).
PRIVATE_IMPORTS_PENDING: set[str] = set()


def _kit_and_lesson_modules() -> dict:
    """{dotted module name: path} of the kit's, the machinery's and the lessons' own modules, in order;
    an exercise stub is its solution's copy, and tests and tools probe, so neither counts."""
    packages = sorted({w.package for w in weeks.all_weeks()} | {"course", "classroom"})
    modules = {}
    for package in packages:
        for path in sorted((weeks.ROOT / package).rglob("*.py")):
            if "exercises" not in path.parts:
                name = ".".join(path.relative_to(weeks.ROOT).with_suffix("").parts)
                modules[name.removesuffix(".__init__")] = path
    return modules


# A named tuple's own methods start with "_" so as not to clash with its fields: public API.
NAMED_TUPLE_API = ("_replace", "_asdict", "_fields", "_make", "_field_defaults")


def test_no_module_uses_another_modules_private_names():
    """What one module needs of another is public and documented; a `_name` stays in its module.
    (Lesson packages and the kit; an exercise stub is its solution's copy; tests and tools probe.)"""
    import ast

    root = weeks.ROOT
    packages = {w.package for w in weeks.all_weeks()} | {"course", "classroom"}
    found = []
    for path in _kit_and_lesson_modules().values():
        rel = str(path.relative_to(root))
        if rel in PRIVATE_IMPORTS_PENDING:
            continue
        tree = ast.parse(path.read_text())
        modules = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in packages:
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{rel}:{node.lineno}: from {node.module} import {alias.name}")
                    modules[alias.asname or alias.name] = node.module
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in packages:
                        modules[alias.asname or alias.name.split(".")[0]] = alias.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                    and node.attr.startswith("_") and not node.attr.startswith("__")
                    and node.attr not in NAMED_TUPLE_API):
                found.append(f"{rel}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not found, found


def test_no_two_modules_import_each_other_even_lazily():
    """The house has floors: a lesson imports the kit and earlier lessons, never the other way
    round, and no two modules reach each other through any chain of imports, a lazy one inside a
    function included (that is how the last circle hid: a command line importing its caller)."""
    import ast

    names = _kit_and_lesson_modules()
    imports = {name: set() for name in names}
    for name, path in names.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            # a package's own __init__ runs before any of its modules: not an edge back
            imports[name] |= {t for t in targets if t in names and t != name and not name.startswith(t + ".")}

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for nxt in imports[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    circles = sorted({tuple(sorted((a, b))) for a in names for b in imports[a] if a in reach(b)})
    assert not circles, f"modules that import each other (directly or through others): {circles}"


def test_every_input_set_is_warmed_up_before_timing():
    """A graphed variant captures one CUDA graph per input set; a set first reached inside the
    timing loop would time its capture (tiny sizes rotate through 64 sets)."""
    seen = []
    sets = [(torch.tensor(float(i)),) for i in range(7)]
    bench.warm_up(lambda t: seen.append(float(t)), sets)
    assert seen == [float(i) for i in range(7)]


@pytest.mark.skipif(not runtime.on_gpu(), reason="needs a real NVIDIA GPU (timing CUDA-graph replays)")
def test_graphed_tiny_op_times_replays_not_captures():
    sets = [(torch.randn(8, 768, device="cuda"),) for _ in range(64)]
    timing = bench.time_gpu(bench.graphed(lambda x: x * 2 + 1), sets)
    assert timing.median_ms < 0.2, timing  # a replay of one tiny kernel: microseconds, not a capture


def test_capability_questions_are_answered_in_one_place(monkeypatch):
    """course.runtime answers "can this GPU run it?" for every week (sm_90: TMA and wgmma, sm_89:
    fp8, sm_80: bf16 tensor cores): the interpreters emulate everything, and a refusal names the
    need, the GPU's capability and what to use instead."""
    if runtime.on_gpu():
        import torch
        assert runtime.capability() == torch.cuda.get_device_capability()
    else:
        assert runtime.capability() is None and runtime.has_capability((99, 0))
        runtime.require_capability((99, 0), "anything", "nothing")  # no refusal in simulation
    monkeypatch.setattr(runtime, "capability", lambda device=None: (8, 0))
    assert runtime.has_capability((8, 0)) and not runtime.has_capability((8, 9))
    runtime.require_capability((7, 5), "bf16", "-")
    with pytest.raises(RuntimeError, match=r"the TMA engine needs compute capability >= 9.0; this GPU \(.*\) "
                                           r"is 8.0: use the previous rung"):
        runtime.require_capability((9, 0), "the TMA engine", "use the previous rung")
