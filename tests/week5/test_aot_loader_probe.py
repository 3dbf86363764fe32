"""The AOTInductor loader probe on the CPU: its verdicts, its record, its scheduler, its reproducer.

tools/gpu_aot_loader_probe.sh runs on the lent GPU once per session, so what it can get wrong there
is tested here: a run against a fake python (builds that write empty packages, loads that crash,
abort, hang with a child process, or pass) must give one verdict per hypothesis, stop a stuck load
at its limit with its Python stack and /proc state, and write a record; tools/aot_probe_record.py
must read the 2026-12-07 run's lines (the committed results file is its rendering); and the
std::regex reproducer the probe builds must show on this machine what the note says it shows.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tools" / "gpu_aot_loader_probe.sh"
RESULTS = ROOT / "week5_integration" / "results"

spec = importlib.util.spec_from_file_location("aot_probe_record", ROOT / "tools" / "aot_probe_record.py")
rec = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rec)

# The 2026-12-07 run's lines, in its own (older) shape
OLD_LOG = textwrap.dedent("""\
    BUILT linear_cuda: import+init 3.7 s, export 4.8 s, aoti_compile_and_package 60.3 s
    VERDICT in the building process (no fresh process): SIGSEGV (log: logs/build_linear_cuda.log)
    === builds done after 78 s
    === loading (limit 45 s each, side by side)
    VERDICT H0 baseline: load_package in a fresh process (the GPU check's step): SIGSEGV (signal 11)
    VERDICT H1 CUDA initialized first (torch.zeros(1, device='cuda')): timeout after 45 s
    VERDICT H5 load_metadata_from_package only (the step before the constructor): ok (METADATA {'a': 'b: c'})
    VERDICT H13 the wrapper compiled by another C++ compiler (CXX=/usr/bin/g++-12): exit 1: RuntimeError: x: y
    === loads done after 137 s
    """)
OLD_ENV = textwrap.dedent("""\
    --- nvidia-smi
    NVIDIA H100 80GB HBM3, 580.159.04, 9.0
    --- torch
    2.11.0+cu130 cuda 13.0 CUDA_HOME /usr/local/cuda
    torch built by ['GCC 13.3', 'CXX_COMPILER=/opt/rh/gcc-toolset-13/root/usr/bin/c++']
    --- compilers
    /usr/local/cuda/bin/nvcc
    c++ (Ubuntu 13.3.0-6ubuntu2~24.04.1) 13.3.0
    --- readelf -d /tmp/gpu-aot-probe-work/pkg/linear_cuda_x/linear_cuda/data/aotinductor/model/abc.wrapper.so
     0x0000000000000001 (NEEDED)             Shared library: [libtorch.so]
     0x0000000000000001 (NEEDED)             Shared library: [libgcc_s.so.1]
    --- ldd
    """)
OLD_BACKTRACE = textwrap.dedent("""\
    Thread 1 "python" received signal SIGSEGV, Segmentation fault.
    #0  0x00007fff11a2b4b4 in std::codecvt<char16_t, char, __mbstate_t>::do_unshift(__mbstate_t&, char*, char*, char*&) const () from /tmp/x/data/aotinductor/model/cufbol.wrapper.so
    #1  0x00007fff11a0f1ea in std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > std::__cxx11::regex_traits<char>::transform_primary<char const*>(char const*, char const*) const () from /tmp/x/cufbol.wrapper.so
    #2  0x00007fff11a1a62b in torch::aot_inductor::parse_device_str(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&, int&, int&) () from /tmp/x/cufbol.wrapper.so
    #3  0x00007fff44d0dbd9 in torch::inductor::(anonymous namespace)::create_aoti_runner_cuda(bool) () from /opt/torch/lib/libtorch_cuda.so
    #4  0x00007fff6f1ca53b in pybind11::cpp_function::dispatcher(_object*, _object*, _object*) () from /opt/torch/lib/libtorch_python.so
    #5  0x000000000058216f in ?? ()
    """)


def test_the_first_runs_verdict_lines_are_read():
    got = rec.parse_verdicts(OLD_LOG)
    assert [(v["id"], v["outcome"]) for v in got] == [
        ("INPROC", "SIGSEGV"), ("H0", "SIGSEGV"), ("H1", "timeout"), ("H5", "ok"), ("H13", "exit")]
    assert got[1]["hypothesis"] == "baseline: load_package in a fresh process (the GPU check's step)"
    assert got[2]["detail"] == "after 45 s"
    assert got[3]["detail"] == "(METADATA {'a': 'b: c'})"  # a colon inside the detail stays in it
    assert got[4]["detail"] == "1: RuntimeError: x: y" and got[4]["seconds"] is None
    with pytest.raises(ValueError, match="no VERDICT lines"):
        rec.parse_verdicts("BUILT x\n")


def test_a_record_names_the_machine_the_wrapper_and_the_crash_frames():
    r = rec.record(OLD_LOG, OLD_ENV, OLD_BACKTRACE, date="2026-12-07 10:31 UTC")
    assert r["environment"]["gpu"] == "NVIDIA H100 80GB HBM3" and r["environment"]["torch"] == "2.11.0+cu130"
    assert r["environment"]["cxx"].startswith("c++ (Ubuntu 13.3.0")
    assert r["wrappers"]["linear_cuda"] == {"needed": ["libtorch.so", "libgcc_s.so.1"], "libstdcxx": "not in NEEDED"}
    assert r["load_limit_s"] == 45 and r["phases_s"] == {"builds": 78, "loads": 137}
    assert r["builds"]["linear_cuda"]["package_s"] == 60.3
    frames = r["backtrace"]["frames"]
    assert r["backtrace"]["signal"] == "SIGSEGV"
    assert [f["function"] for f in frames[:4]] == [
        "std::codecvt::do_unshift", "std::__cxx11::regex_traits::transform_primary",
        "torch::aot_inductor::parse_device_str", "torch::inductor::{anonymous}::create_aoti_runner_cuda"]
    assert frames[0]["library"] == "wrapper.so" and frames[3]["library"] == "libtorch_cuda.so"
    md = rec.render(r)
    assert "| H1 | CUDA initialized first (torch.zeros(1, device='cuda')) | timeout | after 45 s | - |" in md
    assert "libtorch_python" not in md  # the frames stop where Python's begin
    assert "`torch::aot_inductor::parse_device_str` (wrapper.so)" in md


def test_the_next_runs_wrapper_lines_say_how_each_got_libstdcxx():
    env = ("--- wrapper linear_cuda 912345 bytes\n 0x1 (NEEDED)  Shared library: [libtorch.so]\n"
           "defines std::locale::classic(): 1\n--- wrapper linear_cuda_shared 512 bytes\n"
           " 0x1 (NEEDED)  Shared library: [libstdc++.so.6]\n")
    log = ("LINKTRACE linear_cuda: /usr/lib/gcc/x86_64-linux-gnu/13/libstdc++.a\n"
           "LINKED linear_cuda: libstdc++ its own copy (NEEDED: libtorch.so)\n"
           "LINKED linear_cuda_shared: libstdc++ shared (NEEDED: libstdc++.so.6)\n")
    assert rec.wrappers(env, log) == {
        "linear_cuda": {"needed": ["libtorch.so"], "libstdcxx": "its own copy",
                        "link_trace": ["/usr/lib/gcc/x86_64-linux-gnu/13/libstdc++.a"]},
        "linear_cuda_shared": {"needed": ["libstdc++.so.6"], "libstdcxx": "shared"}}


@pytest.mark.parametrize("status, log, stuck, want", [
    ("0", "STAGE imported 3.10\nSTAGE device_info 19.35\nRAN max error 0.00391\n", "",
     "ok (max error 0.00391; s at each stage: imported 3.1, device_info 19.4)"),
    ("0", "RAN metadata {'AOTI_DEVICE_KEY': 'cuda'}\n", "", "ok (metadata {'AOTI_DEVICE_KEY': 'cuda'})"),
    ("0", "", "", "ok"),
    ("139", "STAGE imported 3.10\nSTAGE constructing 3.52\nFatal Python error: Segmentation fault\n", "",
     "SIGSEGV (signal 11) in the loader's constructor (3.5 s in)"),
    ("139", "STAGE constructing 3.5\nSTAGE loaded 3.6\n", "", "SIGSEGV (signal 11) while running (3.6 s in)"),
    ("134", "STAGE constructing 2.0\nterminate called after throwing an instance of 'std::bad_cast'\n"
            "  what():  std::bad_cast\nFatal Python error: Aborted\n", "",
     "SIGABRT (signal 6) in the loader's constructor (2.0 s in): terminate called after throwing an instance "
     "of 'std::bad_cast'"),
    ("timeout after 60 s",
     "STAGE imported 4.0\nSTAGE inductor_imported 7.5\nTimeout (0:00:56)!\nThread 0x00007f01 (most recent call first):\n"
     '  File "/x/threading.py", line 359 in wait\nThread 0x00007f02 (most recent call first):\n'
     '  File "/t/torch/_inductor/cpu_vec_isa.py", line 128 in check_build\n  File "/w/load.py", line 60 in <module>\n',
     "state S cpu_ticks 410\nthread python S wchan=do_wait\nchild 4242 python -c \nimport torch\nfrom ctypes import cdll\n",
     "timeout after 60 s in load_package's CPU-ISA checks (7.5 s in) (python at cpu_vec_isa.py:128 check_build; "
     "state S; child: python -c)"),
    ("timeout after 30 s", "", "", "timeout after 30 s while importing torch"),
    ("not run: its file was not built", "", "", "not run: its file was not built"),
    ("1", "STAGE imported 1\nTraceback (most recent call last):\n  File x\nRuntimeError: no CUDA GPUs\n", "",
     "exit 1: RuntimeError: no CUDA GPUs"),
])
def test_one_loads_outcome_says_what_and_where(status, log, stuck, want):
    assert rec.outcome(status, log, stuck) == want


def test_an_unknown_status_is_refused():
    with pytest.raises(ValueError, match="load status 'weird'"):
        rec.outcome("weird", "")


def test_the_committed_results_file_is_its_records_rendering():
    record = json.loads((RESULTS / "aot_loader_probe.json").read_text())
    assert (RESULTS / "aot_loader_probe.md").read_text() == rec.render(record)
    assert record["environment"]["gpu"] and record["date"].startswith("20")
    assert {v["id"] for v in record["verdicts"]} >= {"H0"}


# ------------------------------------------------------------- the whole script, against fakes
FAKE_PYTHON = r'''#!/usr/bin/env python3
"""A stand-in for the GPU machine's python: what each probe step does, decided by its file name."""
import os, signal, subprocess, sys, time
args = sys.argv[1:]
if args and args[0].endswith("aot_probe_record.py"):
    os.execv(REAL_PYTHON, [REAL_PYTHON] + args)
if args[:1] == ["-c"] or args[:2] == ["-m", "zipfile"]:
    print("2.11.0+fake cuda 13.0"); print("torch built by ['GCC 13.3']"); sys.exit(0)
script = os.path.basename(args[0])
if script == "build.py":
    variant, folder = args[1], args[2]
    if variant == "linear_cpu_shared":
        print("RuntimeError: the build failed", flush=True); sys.exit(1)
    open(os.path.join(folder, variant + ".pt2"), "w").close()
    print(f"BUILT {variant}: import+init 0.1 s, export 0.1 s, aoti_compile_and_package 0.2 s", flush=True)
    print(f"LINKTRACE {variant}: /usr/lib/gcc/x86_64-linux-gnu/13/libstdc++.a", flush=True)
    if variant == "linear_cuda":
        print("INPROC loading", flush=True); os.kill(os.getpid(), signal.SIGSEGV)
    sys.exit(0)
path, modes = os.path.basename(args[1]), args[2]
def stage(name):
    print(f"STAGE {name} 0.50", flush=True)
stage("imported")
if path == "regex_static.so" and "torch" in modes:
    stage("calling"); print("terminate called after throwing an instance of 'std::bad_cast'", flush=True)
    os.kill(os.getpid(), signal.SIGABRT)
if "package" in modes and "shared" not in path:  # stuck in the ISA checks, a child importing torch
    stage("inductor_imported")
    child = subprocess.Popen(["sleep", "30"])
    time.sleep(30)
if "shared" in path or path.startswith("regex") or "metadata" in modes:
    stage("constructing"); stage("loaded"); print("RAN max error 0", flush=True); sys.exit(0)
stage("constructing"); os.kill(os.getpid(), signal.SIGSEGV)
'''
FAKE_GDB = '''#!/usr/bin/env bash
echo 'Thread 1 "python" received signal SIGSEGV, Segmentation fault.'
echo '#0  0x00007fff11a1a62b in torch::aot_inductor::parse_device_str(int&) () from /tmp/x/abc.wrapper.so'
'''
FAKE_TOOLS = {  # name: body; every other command the probe calls is the machine's own
    "nvidia-smi": 'echo "FakeGPU 80GB, 580.1, 9.0"',
    "c++": 'case "$*" in *--version*) echo "c++ (Fake) 13.3.0";; *-print-file-name*) echo "${1#*=}";; '
           '*) for a; do [ "$prev" = -o ] && : > "$a"; prev=$a; done;; esac',
    "g++-14": "exit 1",  # "another compiler": its package is built (by the fake python) and loaded
    "readelf": 'echo " 0x1 (NEEDED)             Shared library: [libtorch.so]"',
    "nm": "true",
}


@pytest.fixture
def fake_machine(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(FAKE_PYTHON.replace("REAL_PYTHON", repr(sys.executable)))
    (bin_dir / "gdb").write_text(FAKE_GDB)
    for name, body in FAKE_TOOLS.items():
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def test_every_hypothesis_gets_a_verdict_and_a_stuck_load_is_stopped_with_its_stack(tmp_path, fake_machine):
    out, work = tmp_path / "out", tmp_path / "work"
    env = dict(os.environ, PATH=f"{fake_machine}{os.pathsep}{os.environ['PATH']}", OUT=str(out), WORK=str(work),
               PYTHON=str(fake_machine / "python"), LOAD_S="4", PKG_LOAD_S="5", LOAD_JOBS="3", TOTAL_S="100")
    run = subprocess.run(["bash", str(PROBE)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    ids = [line.split()[1] for line in run.stdout.splitlines() if line.startswith("VERDICT ")]
    hypotheses = [line.split("|")[0] for line in (out / "logs" / "hypotheses.txt").read_text().splitlines()]
    assert ids == ["INPROC"] + hypotheses and len(hypotheses) == 13  # every one, in its order
    record = json.loads((out / "aot_loader_probe.json").read_text())
    got = {v["id"]: v for v in record["verdicts"]}
    assert got["INPROC"]["outcome"] == "SIGSEGV"
    assert got["R1"]["outcome"] == "SIGABRT" and "std::bad_cast" in got["R1"]["detail"]
    assert got["R2"]["outcome"] == got["R3"]["outcome"] == got["H3"]["outcome"] == "ok"
    assert got["H1"]["outcome"] == "SIGSEGV" and "in the loader's constructor" in got["H1"]["detail"]
    # H0 sat in load_package's ISA checks past its limit: stopped, with where it was and its child
    assert got["H0"]["outcome"] == "timeout"
    assert got["H0"]["detail"].startswith("after 5 s in load_package's CPU-ISA checks")
    assert "child: sleep 30" in got["H0"]["detail"]
    assert got["H0"]["seconds"] < 10 and all(v["seconds"] is not None for v in got.values()
                                                  if v["id"] != "INPROC" and v["outcome"] != "not run")
    assert got["H6"]["outcome"] == "not run"  # its build failed: no package to load
    assert got["H6"]["detail"] == "its file was not built" and "BUILD linear_cpu_shared failed (exit 1)" in run.stdout
    assert record["wrappers"]["linear_cuda"]["link_trace"] == ["/usr/lib/gcc/x86_64-linux-gnu/13/libstdc++.a"]
    assert record["backtrace"]["frames"][0]["function"] == "torch::aot_inductor::parse_device_str"
    assert (out / "aot_loader_probe.md").read_text() == rec.render(record)
    assert "=== backtrace of H5" in run.stdout  # the first of H3 H6 H5 that crashed
    assert "in the library's std::regex call" in got["R1"]["detail"]


def test_the_probe_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(PROBE)], capture_output=True).returncode == 0


# ------------------------------------------------------------- the reproducer, on this machine
def _compile(tmp_path: Path, static: bool) -> Path:
    out = tmp_path / ("regex_static.so" if static else "regex_shared.so")
    cmd = ["c++", "-O2", "-shared", "-fPIC"] + (["-static-libstdc++"] if static else []) + \
          [str(ROOT / "tools" / "aot_probe_regex.cpp"), "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return out


def _parse_in_fresh_process(so: Path, with_torch: bool) -> subprocess.CompletedProcess:
    code = ("import ctypes\n" + ("import torch\n" if with_torch else "") +
            f"lib = ctypes.CDLL({str(so)!r})\n"
            "print([lib.parse_device_index(s) for s in (b'cuda:3', b'cuda', b'gpu')])\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler on this machine")
def test_std_regex_in_a_library_with_its_own_libstdcxx_dies_after_import_torch(tmp_path):
    """The note's mechanism, on the CPU: model_base.h's std::regex in a .so that carries its own
    libstdc++ works alone and dies once torch has loaded the shared libstdc++; linked to the shared
    one, it works with torch too."""
    static, shared = _compile(tmp_path, static=True), _compile(tmp_path, static=False)
    alone = _parse_in_fresh_process(static, with_torch=False)
    assert alone.returncode == 0 and alone.stdout.strip() == "[3, -1, -2]", alone.stderr
    linked = _parse_in_fresh_process(shared, with_torch=True)
    assert linked.returncode == 0 and linked.stdout.strip() == "[3, -1, -2]", linked.stderr
    mixed = _parse_in_fresh_process(static, with_torch=True)
    assert mixed.returncode != 0, mixed.stdout  # bad_cast (terminate: SIGABRT) here, SIGSEGV on the H100
    assert mixed.stdout.strip() != "[3, -1, -2]"
