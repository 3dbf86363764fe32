"""week5_integration.aot_package: the capstone GPT exported, AOTInductor-compiled, loaded without the course.

One package of the tiny capstone model is built per test session (aot_builds.py: shared by every
test, file and xdist worker; compiling is the cost, C++ on a CPU, C++ and Triton on a GPU, so the
tests that need it are marked slow) and checked three ways: a FRESH Python process
running week5_integration/aot_runner.py by path loads it with torch alone (no course, week or
capstone module in its sys.modules) and reproduces the eager model's prefill logits, decode
logits and greedy tokens; the same runner, loaded here, serves other batch sizes and lengths
(the graphs' dynamic dimensions) and refuses bad input before running; and the package's
generated code holds the course's kernels on a GPU (none on a CPU, where Inductor writes C++).

Error model (aot_package's docstring): fp32 on the CPU: `TOLERANCE`; bf16 on a GPU: `TOLERANCE_BF16`.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from capstone import model as cm
from course import runtime
from course.check import assert_close
from week5_integration import aot_package as ap

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "week5_integration" / "aot_runner.py"
DTYPE = torch.bfloat16 if runtime.on_gpu() else torch.float32
TOL = ap.TOLERANCE_BF16 if DTYPE == torch.bfloat16 else ap.TOLERANCE


def load_runner():
    """aot_runner.py as a module of this process (it imports torch only)."""
    spec = importlib.util.spec_from_file_location("aot_runner_under_test", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_model():
    return cm.build("tiny", "fast", dtype=DTYPE).eval()


def _sibling(name: str):
    """A module beside this one, loaded by path (pytest's importlib mode puts no test folder on sys.path)."""
    spec = importlib.util.spec_from_file_location(f"{name}_for_{Path(__file__).stem}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The session's shared packages (built once for every test, file and xdist worker) and the loader probe.
builds = _sibling("aot_builds")
MAX_BATCH, MAX_LEN = builds.MAX_BATCH, builds.MAX_LEN  # the tiny config's max_seq_len: the packaged maximum


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(model, the float package's path): compiled, not loaded (the file's own checks need no loader)."""
    record = builds.course_package(builds.shared_root(tmp_path_factory), "float", DTYPE, max_batch=MAX_BATCH, max_len=MAX_LEN)
    return tiny_model(), Path(record["path"])


@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    """(model, path) of the float package once a fresh process has loaded it: skipped where the loader
    dies on a one-Linear package too (the lent H100's torch 2.11.0+cu130), failed where only this one dies."""
    root = builds.shared_root(tmp_path_factory)
    record = builds.course_package(root, "float", DTYPE, max_batch=MAX_BATCH, max_len=MAX_LEN)
    return tiny_model(), builds.require_loadable(record, root, runtime.DEVICE, DTYPE)


def prompt(batch, length, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (batch, length), generator=gen).to(runtime.DEVICE)


# --------------------------------------------------------------------------- before compiling
def test_export_modules_are_the_fast_models_function():
    # Prefill / Decode with AOT_OPS, run eagerly, against the fast model (its own course ops) and
    # its KV cache: the graphs torch.export records compute what the capstone computes.
    model = tiny_model()
    idx = prompt(2, 7)
    want_prefill, want_steps, _ = ap.eager_prefill_and_decode(model, idx, 3)
    k = torch.full(ap.cache_shape(model.cfg, 2, MAX_LEN), float("nan"), dtype=DTYPE, device=runtime.DEVICE)
    v = k.clone()  # poisoned: a position the graphs read but never wrote would turn the logits NaN
    k[:, :, :, 7:] = 0
    v[:, :, :, 7:] = 0
    old = model.ops
    model.use_ops(ap.AOT_OPS)
    try:
        with torch.no_grad():
            got = ap.Prefill(model)(idx, k, v)
            token = got[:, -1].argmax(-1, keepdim=True)
            step = ap.Decode(model)(token, torch.tensor([7], device=runtime.DEVICE), k, v)
    finally:
        model.use_ops(old)
    assert_close(got, want_prefill, **TOL, name="prefill logits")
    assert_close(step, want_steps[0], **TOL, name="decode logits")


def test_exported_graphs_hold_the_transparent_ops_and_no_opaque_course_op():
    programs = ap.export_programs(tiny_model(), max_batch=MAX_BATCH, max_len=MAX_LEN)
    for name, program in programs.items():
        targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
        course = {t for t in targets if t.startswith("course.")}
        # the triton_ops stay nodes in the exported program (AOTInductor traces into them later);
        # none of the custom_ops of weeks 4-5, which a package could only call back in Python
        assert course and all(t.startswith("course.aot_") for t in course), (name, sorted(course))
    prefill = {str(n.target) for n in programs["prefill"].graph.nodes}
    assert "course.aot_causal_attention.default" in prefill  # the course's attention, Tq == Tk
    # caches are inputs the graphs write (in place), and the logits their one output: after
    # functionalization (what AOTInductor compiles) the writes are mutations of user inputs
    for name, program in programs.items():
        signature = program.run_decompositions({}).graph_signature
        assert set(signature.user_inputs_to_mutate.values()) == {"k_cache", "v_cache"}, name
        assert [s.kind.name for s in signature.output_specs].count("USER_OUTPUT") == 1, name


def test_gpu_branch_traces_and_compiles_to_ttir_without_a_gpu():
    # The triton_ops' GPU bodies (the course kernels launched through wrap_triton) traced under
    # functionalization in a fresh process that believes in a GPU, each kernel compiled to TTIR
    # for sm_90: catches a wrong argument, constexpr or grid on any machine (aot_gpu_trace.py).
    # This process's simulation switches (TRITON_INTERPRET=1 ...) must not reach the script: its
    # kernels have to be JITFunctions.
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM", "COURSE_BACKEND")}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("aot_gpu_trace.py"))],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("aot_")]
    assert done.returncode == 0 and len(lines) == 5, done.stdout + done.stderr[-3000:]
    written = {line.split()[0]: line.split(" ok ")[1] for line in lines}
    # the mutation analysis finds only the outputs written (no input of the model is touched)
    assert written == {"aot_rms_norm": "['y_ptr']", "aot_add_rms_norm": "['h_ptr', 'rstd_ptr', 'y_ptr']",
                       "aot_rope": "['ko_ptr', 'qo_ptr']", "aot_causal_attention": "['lse_ptr', 'o_ptr']",
                       "aot_swiglu": "['y_ptr']"}, written


@pytest.mark.parametrize("bad", ["not a model", "path", "max_len", "max_batch"])
def test_package_refuses_bad_arguments_before_compiling(tmp_path, bad):
    model = tiny_model()
    args = dict(model=model, path=tmp_path / "x.pt2", max_batch=4, max_len=16)
    if bad == "not a model":
        args["model"], error = torch.nn.Linear(2, 2), TypeError
    elif bad == "path":
        args["path"], error = tmp_path / "x.zip", ValueError
    elif bad == "max_len":
        args["max_len"], error = MAX_LEN + 1, ValueError
    else:
        args["max_batch"], error = 1, ValueError
    with pytest.raises(error, match={"not a model": "GPT", "path": ".pt2", "max_len": "max_seq_len",
                                     "max_batch": "max_batch"}[bad]):
        ap.package(args.pop("model"), args.pop("path"), **args)
    assert not (tmp_path / "x.pt2").exists()


def test_shared_builds_run_once_and_record_a_failure(tmp_path, monkeypatch):
    # aot_builds.build_once: the first caller builds, later ones (other tests, files, xdist workers)
    # read the record; a build that raised is not retried by every test after it, it fails them.
    monkeypatch.setattr(builds, "load_signal", lambda path, *args: None)  # no fresh process for a fake file
    calls = []

    def build(path):
        calls.append(path)
        path.write_bytes(b"package")

    first = builds.build_once(tmp_path, {"kind": "test"}, build)
    again = builds.build_once(tmp_path, {"kind": "test"}, build)
    assert len(calls) == 1 and first == again and Path(first["path"]).read_bytes() == b"package"
    assert first["compile_s"] >= 0 and first["load_signal"] is None

    def broken(path):
        raise ValueError("no compiler")

    with pytest.raises(ValueError, match="no compiler"):
        builds.build_once(tmp_path, {"kind": "broken"}, broken)
    with pytest.raises(pytest.fail.Exception, match="failed in this session already: ValueError: no compiler"):
        builds.build_once(tmp_path, {"kind": "broken"}, build)


@pytest.mark.parametrize("probe", [11, None], ids=["one-Linear dies too", "one-Linear loads"])
def test_a_crashing_loader_skips_only_when_the_smallest_package_crashes_too(tmp_path, monkeypatch, probe):
    monkeypatch.setattr(builds, "one_linear", lambda root, device, dtype: {"load_signal": probe})
    crashed = {"path": str(tmp_path / "x.pt2"), "load_signal": 11}
    outcome = pytest.skip.Exception if probe is not None else pytest.fail.Exception
    with pytest.raises(outcome, match="signal 11"):
        builds.require_loadable(crashed, tmp_path, runtime.DEVICE, DTYPE)
    assert builds.require_loadable({**crashed, "load_signal": None}, tmp_path, runtime.DEVICE, DTYPE) == tmp_path / "x.pt2"


# ------------------------------------------------------------------------------ the package
# Each of these needs the compiled package: the first to run in a session builds it (a minute or
# more, the loader probe included), which is over a whole-suite run's per-test budget: slow.
PACKAGE_SLOW = pytest.mark.slow


@PACKAGE_SLOW
def test_fresh_process_loads_the_package_with_torch_alone(packaged, tmp_path):
    model, path = packaged
    idx = prompt(3, 6, seed=1)
    torch.save(idx.cpu(), tmp_path / "idx.pt")
    new = 8
    done = subprocess.run([sys.executable, str(RUNNER), str(path), "--tokens", str(tmp_path / "idx.pt"),
                           "-n", str(new), "--out", str(tmp_path / "out.pt")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = torch.load(tmp_path / "out.pt")
    assert out["modules"] == [], f"the runner imported course modules: {out['modules']}"
    want_prefill, want_steps, want_tokens = ap.eager_prefill_and_decode(model, idx, new)
    assert_close(out["prefill_logits"], want_prefill.cpu(), **TOL, name="prefill logits")
    assert len(out["decode_logits"]) == new - 1
    for i, (got, want) in enumerate(zip(out["decode_logits"], want_steps)):
        assert_close(got, want.cpu(), **TOL, name=f"decode step {i + 1} logits")
    assert torch.equal(out["tokens"], want_tokens.cpu()), "greedy tokens differ from the eager model's"


@PACKAGE_SLOW
@pytest.mark.parametrize("batch,length", [(1, 1), (1, MAX_LEN), (MAX_BATCH, 5)], ids=str)
def test_dynamic_batch_and_length(packaged, batch, length):
    model, path = packaged
    gpt = load_runner().PackagedGPT(path)
    idx = prompt(batch, length, seed=batch + length)
    new = min(3, MAX_LEN - length + 1)
    tokens, logits, steps = gpt.generate(idx, new)
    want_prefill, want_steps, want_tokens = ap.eager_prefill_and_decode(model, idx, new)
    assert_close(logits, want_prefill, **TOL, name="prefill logits")
    for got, want in zip(steps, want_steps):
        assert_close(got, want, **TOL, name="decode logits")
    assert torch.equal(tokens, want_tokens)


@PACKAGE_SLOW
def test_runner_refuses_bad_input_before_running(packaged):
    _, path = packaged
    gpt = load_runner().PackagedGPT(path)
    assert (gpt.max_batch, gpt.max_len, gpt.dtype) == (MAX_BATCH, MAX_LEN, DTYPE)
    good = prompt(2, 4)
    with pytest.raises(ValueError, match="prefill first"):
        gpt.decode(good[:, :1])
    with pytest.raises(TypeError, match="int64"):
        gpt.prefill(good.to(torch.int32))
    with pytest.raises(TypeError, match="int64"):
        gpt.prefill(good.float())
    with pytest.raises(ValueError, match="at most 32"):
        gpt.prefill(prompt(1, MAX_LEN + 1))
    with pytest.raises(ValueError, match="batch <= 4"):
        gpt.prefill(prompt(MAX_BATCH + 1, 3))
    with pytest.raises(ValueError, match=r"\[0, 256\)"):
        gpt.prefill(torch.full((1, 3), 256, dtype=torch.int64, device=runtime.DEVICE))
    with pytest.raises(ValueError, match="needs 34 cache positions"):
        gpt.generate(prompt(1, MAX_LEN), 3)
    gpt.prefill(prompt(1, MAX_LEN))
    with pytest.raises(ValueError, match="cache is full"):
        gpt.decode(prompt(1, 1))
    gpt.prefill(good)
    with pytest.raises(ValueError, match="batch 2"):
        gpt.decode(prompt(1, 1))
    with pytest.raises(ValueError, match="1 position"):
        gpt.decode(good)


@PACKAGE_SLOW
def test_package_kernels_say_whose_code_runs(built):
    # the generated code, read from the file: checked even where the loader cannot load it
    _, path = built
    found = ap.package_kernels(path)
    assert found["bytes"] == path.stat().st_size > 0 and found["files"] > 0
    if runtime.on_gpu():
        # every course kernel the model calls was compiled into the package
        assert set(found["course"]) == set(ap.COURSE_KERNELS), found
    else:
        # no Triton on a CPU package: Inductor's C++ for the ops' torch references
        assert found["course"] == [], found


@PACKAGE_SLOW
def test_package_wrappers_link_the_shared_libstdcxx(built, tmp_path):
    # aot_package.LINK_OPTIONS: a wrapper with its own copy of libstdc++ dies in std::regex once torch has loaded
    # the shared one (the lent H100, notes/aot_package.md); each wrapper of the package must NEED the shared one.
    import shutil
    import zipfile

    readelf = shutil.which("readelf")
    assert readelf, "readelf (binutils, installed with the C++ compiler AOTInductor needs) is not on PATH"
    _, path = built
    with zipfile.ZipFile(path) as archive:
        wrappers = [name for name in archive.namelist() if name.endswith(".so")]
        assert wrappers, f"no shared library in {path.name}: {archive.namelist()[:20]}"
        for name in wrappers:
            target = tmp_path / Path(name).name
            target.write_bytes(archive.read(name))
            dynamic = subprocess.run([readelf, "-d", str(target)], capture_output=True, text=True, check=True).stdout
            needed = [line.split("[")[-1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
            assert "libstdc++.so.6" in needed, f"{name} does not need the shared libstdc++: NEEDED {needed}"


@pytest.mark.slow  # g++ over torch's headers: minutes on a small CPU machine
def test_cpp_runner_generates_the_same_tokens(packaged, tmp_path):
    # No Python at all: aot_runner.cpp (AOTIModelPackageLoader) built against the installed torch.
    model, path = packaged
    exe = ap.build_cpp_runner(tmp_path)
    idx = prompt(1, 5, seed=3)
    done = subprocess.run([str(exe), str(path), "6", *map(str, idx[0].tolist())],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    _, _, want = ap.eager_prefill_and_decode(model, idx, 6)
    assert [int(t) for t in done.stdout.split()] == want[0].tolist()
    # and it refuses a prompt past the packaged maximum before running anything
    too_long = subprocess.run([str(exe), str(path), "2", *["1"] * MAX_LEN], capture_output=True, text=True)
    assert too_long.returncode == 2 and "the package holds 32" in too_long.stderr
