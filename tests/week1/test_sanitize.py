"""`python -m course sanitize week1` (classroom/sanitize.py, with week1_cuda_python/sanitize.py's cases):
case discovery, the compute-sanitizer runner and its report, the ncu helpers (classroom/ncu.py). The runner is exercised end to end with a fake `compute-sanitizer` (a shell script
that prints what the real one prints); the real one runs in the GPU-only test at the end.

The runner is machinery, not a lesson with an exercise stub: it is imported directly.
"""
import json
import os
import stat
import textwrap
import time

import pytest
import torch

from course import runtime
from course.bench import is_result
from classroom import ncu, sanitizer_report
from classroom import sanitize as kit_sanitize
from week1_cuda_python import sanitize as week1_cases  # LOCAL_CASES: the cases of the older modules

sz = kit_sanitize.for_week("week1")  # the runner for week 1's package

# Modules whose kernels the runner must reach (their own SANITIZER_CASES or the ones in sanitize.py).
EXPECTED_MODULES = {"conv2d", "elementwise", "hello_gpu", "histogram", "matmul", "matmul_tensor_cores",
                    "reduction", "rotate", "scan", "streams", "transpose", "vector_add"}
NO_KERNELS = {"transfers",  # host <-> device copies and torch.add only
              "matmul_wgmma_schedule",  # the persistent GEMM's schedule rule: a table lookup, no kernel
              "matmul_wgmma_waves",  # the schedules' wave arithmetic: shapes and tiles, no kernel
              "hopper_ptx"}  # where the PTX wrappers' header is: two path constants, no kernel
# sm_90a-only kernels: cases on an H100/H200 (and in simulation, where nothing launches), none elsewhere.
HOPPER_ONLY = {"matmul_wgmma_persistent", "matmul_wgmma_fused", "matmul_wgmma_split_k"}
if runtime.capability() in (None, (9, 0)):
    EXPECTED_MODULES |= HOPPER_ONLY
else:
    NO_KERNELS |= HOPPER_ONLY


@pytest.fixture(scope="module")
def cases():
    return sz.discover()


# --- discovery -------------------------------------------------------------------------------------

def test_discovery_reaches_every_module_with_kernels(cases):
    modules = {name.split(":", 1)[0] for name in cases}
    assert EXPECTED_MODULES <= modules
    # A new lesson module must bring its cases (or be listed as kernel-free here).
    assert set(sz.lesson_modules()) - modules <= NO_KERNELS
    assert "sanitize" not in sz.lesson_modules()


def test_the_hopper_gemm_rungs_are_cases(cases):
    """Issue 32, item 4: the wgmma rungs (wgmma_tma, the persistent and cluster rungs, the fused
    epilogues) are cases of this sanitizer wherever they can run, so `python -m
    week1_cuda_python.sanitize` checks them (memcheck, racecheck, synccheck with --tools)."""
    if runtime.capability() not in (None, (9, 0)):
        pytest.skip("sm_90a-only kernels: no cases on this GPU (test_discovery checks there are none)")
    want = {"matmul_tensor_cores:wgmma_tma_bf16_bf16", "matmul_tensor_cores:wgmma_tma_f16_f16",
            "matmul_wgmma_persistent:wgmma_persistent_bf16", "matmul_wgmma_persistent:wgmma_persistent_f16",
            "matmul_wgmma_persistent:wgmma_cluster_bf16", "matmul_wgmma_persistent:wgmma_cluster_f16",
            "matmul_wgmma_fused:wgmma_linear_bf16", "matmul_wgmma_fused:wgmma_linear_bias_bf16",
            "matmul_wgmma_fused:wgmma_linear_residual_bf16", "matmul_wgmma_fused:wgmma_linear_swiglu_bf16"}
    assert want <= set(cases), f"missing: {sorted(want - set(cases))}"


def test_case_names_are_unique_and_qualified(cases):
    names = list(cases)
    assert len(names) == len(set(names))
    assert all(name.count(":") >= 1 and name.split(":", 1)[0] in sz.lesson_modules() for name in names)
    bare = [name.split(":", 1)[1] for name in names]
    assert len(bare) == len(set(bare)), "a bare case name is ambiguous: `--case NAME` would need module:NAME"
    assert all(callable(run) for run in cases.values())


def test_local_cases_cover_the_modules_without_their_own():
    for module in week1_cases.LOCAL_CASES:
        lesson = __import__(f"week1_cuda_python.{module}", fromlist=["_"])
        own = getattr(lesson, "SANITIZER_CASES", None)
        found = sz.module_cases(module)
        assert found, module
        if own is not None:  # the module grew its own: those win
            assert set(found) == set(own)
    from week1_cuda_python import matmul

    kernels = set(sz.module_cases("matmul"))
    assert {rung[0] for rung in matmul.CUDA_RUNGS.values()} <= kernels
    assert {"matmul_numba_naive_kernel", "matmul_numba_tiled_kernel", "matmul_numba_regblock_kernel"} <= kernels


def test_only_filters_by_module_or_substring(cases):
    assert set(sz.discover(["reduction"])) == {n for n in cases if n.startswith("reduction:")}
    assert set(sz.discover(["warp_shuffle"])) == {n for n in cases if "warp_shuffle" in n}
    assert sz.discover(["no-such-thing"]) == {}


def test_resolve_by_qualified_or_bare_name_and_errors():
    name, run = sz.resolve("vector_add:add_kernel")
    assert name == "vector_add:add_kernel" and callable(run)
    assert sz.resolve("add_kernel")[0] == "vector_add:add_kernel"
    with pytest.raises(KeyError, match="no week-1 module"):
        sz.resolve("nope:add_kernel")
    with pytest.raises(KeyError, match="has no sanitizer case"):
        sz.resolve("vector_add:nope")
    with pytest.raises(KeyError, match="no case named"):
        sz.resolve("nope_kernel")


LOCAL = [f"{module}:{case}" for module, build in week1_cases.LOCAL_CASES.items()
         for case in build(__import__(f"week1_cuda_python.{module}", fromlist=["_"]))]
CUDA_C = {"vector_add:vector_add_f32", "vector_add:vector_add_f32x4", "reduction:sum_warp_shuffle",
          "reduction:sum_warp_shuffle[unaligned]"} | {f"matmul:{rung[0]}" for rung in
                                                       __import__("week1_cuda_python.matmul", fromlist=["_"]).CUDA_RUNGS.values()}


@pytest.mark.parametrize("name", LOCAL)
def test_local_case_launches(name):
    # Every case defined here runs. In simulation the CUDA C launches are refused by PyCUDA's
    # guard, which runs after the launcher validated its inputs: the arguments are right.
    _, run = sz.resolve(name)
    if name in CUDA_C and not runtime.on_gpu():
        with pytest.raises(RuntimeError, match="need a real NVIDIA GPU"):
            run()
    else:
        run()


def test_case_command_line_runs_in_process(capsys):
    assert sz.main(["--case", "elementwise:relu_kernel", "--case", "relu_x4_kernel"]) == 0
    out = capsys.readouterr().out
    assert "case elementwise:relu_kernel: ok" in out and "case elementwise:relu_x4_kernel: ok" in out
    assert sz.main(["--case", "elementwise:nope"]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_list_prints_the_case_names(capsys):
    assert sz.main(["--list", "--only", "reduction"]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == list(sz.discover(["reduction"]))


# --- reading compute-sanitizer's output -------------------------------------------------------------

MEMCHECK_CLEAN = """\
========= COMPUTE-SANITIZER
case vector_add:add_kernel: ok (0.31 s)
========= ERROR SUMMARY: 0 errors
"""
MEMCHECK_ERRORS = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at vector_add_f32+0x90 in /work/week1_cuda_python/kernels/vector_add.cu:12
=========     by thread (232,0,0) in block (3,0,0)
=========     Address 0x7f3a00000fa0 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a00000000 of size 4000 bytes
=========
========= Invalid __global__ write of size 4 bytes
=========     at vector_add_f32+0x90 in /work/week1_cuda_python/kernels/vector_add.cu:12
=========
========= ERROR SUMMARY: 2 errors
"""
RACECHECK_HAZARDS = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at sum_tree+0x1a0 in reduction.cu:30
=========     and Read access at sum_tree+0x1c0 in reduction.cu:31 [2048 hazards]
=========
========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)
"""
RACECHECK_CLEAN = """\
========= COMPUTE-SANITIZER
case reduction:sum_shared_tree_kernel: ok (1.2 s)
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""
CASE_RAISED = """\
========= COMPUTE-SANITIZER
Traceback (most recent call last):
  File "sanitize.py", line 1, in run
ValueError: x has shape (3,); expected 2 dimensions
case scan:x: FAILED
========= Target application returned an error
========= ERROR SUMMARY: 0 errors
"""
LOOKUP = ('========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to "invalid argument" on CUDA API call '
          'to cuGetProcAddress_v2.\n=========     Saved host backtrace up to driver entry point at error\n')
NUMBA_LOOKUPS = "========= COMPUTE-SANITIZER\ncase hello_gpu:hello_1d_kernel: ok (0.2 s)\n" + 3 * LOOKUP + \
    "========= ERROR SUMMARY: 3 errors\n"
OTHER_API_ERROR = NUMBA_LOOKUPS.replace("cuGetProcAddress_v2.", "cuMemcpyHtoD_v2.", 1)


def test_parse_clean_memcheck():
    o = sanitizer_report.parse_report("vector_add:add_kernel", "memcheck", MEMCHECK_CLEAN, 0)
    assert o.ok and o.status == "clean" and o.errors == 0 and o.excerpt == []


def test_parse_memcheck_errors_keeps_the_first_lines():
    o = sanitizer_report.parse_report("vector_add:vector_add_f32", "memcheck", MEMCHECK_ERRORS, sanitizer_report.ERROR_EXIT)
    assert not o.ok and o.status == "2 errors" and o.errors == 2
    assert o.excerpt[0] == "========= Invalid __global__ write of size 4 bytes"
    assert any("out of bounds" in line for line in o.excerpt)
    assert len(o.excerpt) <= sanitizer_report.EXCERPT_LINES
    assert not any("SUMMARY" in line or "COMPUTE-SANITIZER" in line for line in o.excerpt)


def test_refused_symbol_lookups_are_not_kernel_errors():
    # numba-cuda's binding probes the driver for entry points it may lack: counted apart, clean.
    o = sanitizer_report.parse_report("hello_gpu:hello_1d_kernel", "memcheck", NUMBA_LOOKUPS, sanitizer_report.ERROR_EXIT)
    assert o.ok and o.errors == 0 and o.symbol_lookups == 3 and o.status.startswith("clean (3 refused")
    # Any other failing API call is a finding, and so are lookups mixed with a real error.
    other = sanitizer_report.parse_report("hello_gpu:hello_1d_kernel", "memcheck", OTHER_API_ERROR, sanitizer_report.ERROR_EXIT)
    assert not other.ok and other.status == "3 errors" and other.symbol_lookups == 0
    mixed = NUMBA_LOOKUPS.replace("ERROR SUMMARY: 3 errors", "ERROR SUMMARY: 4 errors")
    assert not sanitizer_report.parse_report("a:b", "memcheck", mixed, sanitizer_report.ERROR_EXIT).ok


def test_parse_racecheck_hazards_and_clean():
    o = sanitizer_report.parse_report("reduction:sum_shared_tree_kernel", "racecheck", RACECHECK_HAZARDS, sanitizer_report.ERROR_EXIT)
    assert not o.ok and (o.hazards, o.errors, o.warnings) == (3, 2, 1)
    assert o.status == "3 hazards (2 errors, 1 warnings)"
    assert o.excerpt[0].startswith("========= Error: Race reported")
    clean = sanitizer_report.parse_report("reduction:sum_shared_tree_kernel", "racecheck", RACECHECK_CLEAN, 0)
    assert clean.ok and clean.hazards == 0


def test_parse_a_failing_case_is_not_clean():
    o = sanitizer_report.parse_report("scan:x", "memcheck", CASE_RAISED, 1)
    assert not o.ok and o.status == "failed (exit 1)" and o.errors == 0
    assert any("ValueError" in line for line in o.excerpt)


def test_parse_timeout_and_missing_summary():
    o = sanitizer_report.parse_report("a:b", "racecheck", "========= COMPUTE-SANITIZER\nstarting\n", None, timed_out=True,
                        timeout_note=" (120 s)")
    assert not o.ok and o.status == "timeout (120 s)"
    silent = sanitizer_report.parse_report("a:b", "memcheck", "no sanitizer here\n", 0)
    assert not silent.ok and silent.status.startswith("no sanitizer summary")


def test_command_and_environment():
    memcheck = sz.sanitizer_command("/x/compute-sanitizer", "memcheck", "scan:scan_lookback_f32")
    assert memcheck[:5] == ["/x/compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "99"]
    assert memcheck[-6:] == ["-m", "course", "sanitize", "week1", "--case", "scan:scan_lookback_f32"]
    assert "--racecheck-report" not in memcheck
    racecheck = sz.sanitizer_command("cs", "racecheck", "a:b", ("--padding", "32"))
    assert racecheck[racecheck.index("--racecheck-report") + 1] == "all"
    assert racecheck[racecheck.index("--padding") + 1] == "32"
    env = kit_sanitize.child_environment()
    assert env["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"
    assert str(kit_sanitize.ROOT) in env["PYTHONPATH"].split(os.pathsep)


# --- the runner, with a fake compute-sanitizer --------------------------------------------------------

FAKE = """\
#!/usr/bin/env bash
# Prints what compute-sanitizer prints; the case name says how the "kernel" behaves.
if [ "$1" = "--version" ]; then echo "NVIDIA (R) Compute Sanitizer"; echo "Version 2099.1.0 (fake)"; exit 0; fi
tool=$2; case_name=${@: -1}
echo "========= COMPUTE-SANITIZER"
case "$case_name" in
  *slow*) sleep 30 ;;
  *bad*) printf '========= Invalid __global__ read of size 4 bytes\\n=========     by thread (1,0,0)\\n'
         echo "========= ERROR SUMMARY: 1 error"; exit 99 ;;
  *raises*) echo "ValueError: boom"; echo "========= ERROR SUMMARY: 0 errors"; exit 1 ;;
esac
if [ "$tool" = racecheck ]; then echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
else echo "========= ERROR SUMMARY: 0 errors"; fi
"""


@pytest.fixture()
def fake_sanitizer(tmp_path):
    path = tmp_path / "compute-sanitizer"
    path.write_text(FAKE)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_runner_classifies_every_run(fake_sanitizer):
    plan = kit_sanitize.Plan(cases=["m:good", "m:bad", "m:raises", "m:slow"], tools=("memcheck", "racecheck"),
                   workers=4, case_timeout=2.0, budget=60.0, sanitizer=fake_sanitizer)
    start = time.monotonic()
    outcomes = sz.run_plan(plan)
    assert time.monotonic() - start < 20  # the slow runs were killed at their 2 s limit
    status = {(o.case, o.tool): o.status for o in outcomes}
    assert status[("m:good", "memcheck")] == "clean" and status[("m:good", "racecheck")] == "clean"
    assert status[("m:bad", "memcheck")] == "1 error"
    assert status[("m:raises", "racecheck")] == "failed (exit 1)"
    assert status[("m:slow", "memcheck")] == "timeout (2 s)"
    assert [(o.tool, o.case) for o in outcomes] == [(t, c) for t in plan.tools for c in plan.cases]


def test_runner_records_what_the_budget_left_out(fake_sanitizer):
    plan = kit_sanitize.Plan(cases=["m:slow1", "m:slow2", "m:slow3"], tools=("memcheck",), workers=1,
                   case_timeout=30.0, budget=2.0, sanitizer=fake_sanitizer)
    outcomes = sz.run_plan(plan)
    assert outcomes[0].status == "timeout (killed at the 2 s budget)"
    assert [o.status for o in outcomes[1:]] == ["not run (time budget)"] * 2
    assert sanitizer_report.summary_counts(outcomes, "memcheck") == {"clean": 0, "with findings": 0, "failed": 0,
                                                       "timeout": 1, "not run": 2}


def test_sanitize_all_writes_the_report(fake_sanitizer, tmp_path, capsys):
    out_dir = tmp_path / "results"
    plan = kit_sanitize.Plan(cases=["vector_add:add_kernel", "m:bad"], tools=("memcheck", "racecheck"), workers=2,
                   case_timeout=10.0, budget=60.0, sanitizer=fake_sanitizer)
    assert sz.sanitize_all(plan, out_dir, warmup=False) == 1  # one finding: not all clean
    record = json.loads((out_dir / "sanitizer.json").read_text())
    assert not is_result(record)  # `python -m course report` must not mistake it for a benchmark
    assert record["sanitizer_version"] == "Version 2099.1.0 (fake)"
    assert record["tools"] == ["memcheck", "racecheck"] and len(record["results"]) == 4
    md = (out_dir / "sanitizer.md").read_text()
    assert "| `vector_add:add_kernel` | clean (" in md
    assert "| `m:bad` | 1 error (" in md
    assert "- **memcheck**: 1 clean, 1 with findings of 2 cases" in md
    assert "Invalid __global__ read of size 4 bytes" in md  # the excerpt of the finding
    assert "wrote" in capsys.readouterr().out


def test_without_compute_sanitizer_nothing_passes_silently(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(kit_sanitize, "find_sanitizer", lambda: None)
    assert sz.main(["--only", "vector_add", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "compute-sanitizer not found" in err and "NOTHING WAS CHECKED" in err
    assert not list(tmp_path.iterdir())


def test_without_a_gpu_nothing_passes_silently(monkeypatch, tmp_path, capsys, fake_sanitizer):
    monkeypatch.setattr(kit_sanitize, "find_sanitizer", lambda: fake_sanitizer)
    monkeypatch.setattr(runtime, "on_gpu", lambda: False)
    assert sz.main(["--only", "vector_add", "--out", str(tmp_path / "results")]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_find_sanitizer_honours_the_environment(monkeypatch, fake_sanitizer):
    monkeypatch.setenv("COMPUTE_SANITIZER", fake_sanitizer)
    assert kit_sanitize.find_sanitizer() == fake_sanitizer


# --- ncu helpers ----------------------------------------------------------------------------------------

NCU_CSV = textwrap.dedent('''\
    ==PROF== Disconnected from process 1234
    "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum","l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum","l1tex__t_requests_pipe_lsu_mem_global_op_st.sum","l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum","launch__block_size","launch__registers_per_thread","launch__shared_mem_per_block_static","sm__warps_active.avg.pct_of_peak_sustained_active"
    "","","","","","","","","","","","byte","byte","nsecond","","","","","register/thread","byte/block","%"
    "0","1234","python3","h","week1_cuda_python::transpose::transpose_naive_kernel[abi:v1,cw51](Array<float, 2, C, mutable, aligned>)","1","7","(32, 8, 1)","(256, 1024, 1)","0","9.0","268,435,456","268,500,000","1,159,300","0","2,097,152","16,777,216","256","22","0","87.5"
    "1","1234","python3","h","transpose_padded_f32","1","7","(32, 8, 1)","(256, 256, 1)","0","9.0","268,435,456","268,435,456","193,800","0","2,097,152","8,388,608","256","30","4,224","91.25"
''')


def test_ncu_table_with_labels():
    table = ncu.ncu_table(NCU_CSV, ["naive", "cuda_padded"])
    lines = table.strip().splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["kernel", "time us", "block", "regs/thread", "smem/block KB", "occupancy achieved %",
                      "DRAM MB", "smem ld conflicts", "st sectors/req"]
    naive = [c.strip() for c in lines[2].strip("|").split("|")]
    assert naive == ["naive", "1159.3", "256", "22", "0.0", "87.5", "537", "0", "8.0"]
    padded = [c.strip() for c in lines[3].strip("|").split("|")]
    assert padded[0] == "cuda_padded" and padded[4] == "4.2" and padded[-1] == "4.0"


def test_ncu_table_falls_back_to_kernel_names():
    table = ncu.ncu_table(NCU_CSV, ["only-one-label"])
    assert "| transpose_naive_kernel |" in table and "| transpose_padded_f32 |" in table
    assert "2 kernels profiled but 1 labels given" in table
    assert "no kernels" in ncu.ncu_table("==PROF== nothing matched\n")


def test_short_kernel_names():
    assert ncu.short_kernel_name("sgemm_warptiling") == "sgemm_warptiling"
    assert ncu.short_kernel_name(
        "week1_cuda_python::transpose::_tiled_kernel::<locals>::kernel[abi:v1,cw77](Array<float, 2, C>)") \
        == "_tiled_kernel.<locals>.kernel"


def test_launch_benchmark_calls_each_variant_once():
    size = runtime.pick(gpu="2^20", sim="2^10")
    assert sz.launch_benchmark("vector_add_week1", size, ["numba", "numba_grid_stride"]) == \
        ["numba", "numba_grid_stride"]
    with pytest.raises(KeyError, match="no benchmark"):
        sz.launch_benchmark("nope_week1")
    with pytest.raises(KeyError, match="no size"):
        sz.launch_benchmark("vector_add_week1", "3^3")
    with pytest.raises(KeyError, match="no variant"):
        sz.launch_benchmark("vector_add_week1", size, ["nope"])


# --- the real thing -----------------------------------------------------------------------------------------

@pytest.mark.slow  # a compute-sanitizer process per case, tens of seconds each; the full sweep: python -m course sanitize week1
@pytest.mark.gpu(reason="compute-sanitizer instruments real kernel launches")
@pytest.mark.parametrize("tool, case", [("memcheck", "vector_add:vector_add_f32x4"),
                                        ("racecheck", "reduction:sum_shared_tree_kernel")])
def test_real_compute_sanitizer_finds_these_kernels_clean(tool, case):
    sanitizer = kit_sanitize.find_sanitizer()
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not installed on this GPU machine")
    out, code, timed_out, seconds = kit_sanitize.run_command(sz.sanitizer_command(sanitizer, tool, case), 180,
                                                   kit_sanitize.child_environment())
    outcome = sanitizer_report.parse_report(case, tool, out, code, timed_out=timed_out)
    assert outcome.ok, f"{outcome.status}:\n{out[-3000:]}"


@pytest.mark.parametrize("lesson", ["week1_cuda_python.matmul_wgmma_persistent", "week1_cuda_python.matmul_wgmma_fused",
                                    "week1_cuda_python.matmul_wgmma_split_k"])
def test_hopper_gemm_cases_reach_their_launches(lesson, recorded, monkeypatch):
    """Every compute-sanitizer case of the Hopper GEMMs, run on any machine with the driver recorded
    (tests/week1/conftest.py): each reaches cuLaunchKernel, so no case asks for a shape its launcher refuses. On the
    H100 such a case shows up only as a failed sanitizer run (the column-major-A cases once had M = 300, which the
    TMA cannot read column-major)."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    # The cluster rung asks the driver how many clusters fit (a cached query): "cannot say" here, never cached.
    monkeypatch.setattr(runtime.lesson("week1_cuda_python.matmul_wgmma_persistent"), "resident_clusters",
                        lambda *args: None)
    cases = runtime.lesson(lesson).sanitizer_cases()
    assert cases
    for name, case in cases.items():
        before = len(recorded["launches"])
        case()
        assert len(recorded["launches"]) > before, f"{name} launched nothing"
