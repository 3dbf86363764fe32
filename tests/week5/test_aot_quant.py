"""week5_integration.aot_quant: the int8 weight-only GPT (and fp8 on sm_89+) through the same AOTInductor package.

One int8 package of the tiny capstone model per test session (aot_builds.py: shared by every test,
file and xdist worker; Inductor compiles C++ on a CPU, C++ and Triton on a GPU: the tests that
need it are slow), loaded by week5_integration/aot_runner.py in a FRESH process
that imports none of the course. Two checks, the quantization lesson's:
* against the int8 EAGER model (`quantization.quantize_model`, its Triton kernel; the same
  arithmetic in another order): aot_package's error model, `TOLERANCE` in fp32 (CPU),
  `TOLERANCE_BF16` in bf16 (GPU); greedy tokens equal;
* against the FLOAT model: the lesson's accuracy bound on the logits, `quantization.LOGITS_REL_ERR`
  (norm-wise relative).
fp8: refused before anything is exported where there are no fp8 tensor cores (the CPU, GPUs
below sm_89), naming the int8 package; its export graphs are checked on any machine with fake
CUDA tensors (aot_quant_gpu_trace.py); on an sm_89+ GPU the package is built, loaded in a fresh
process and held to `aot_quant.FP8_LOGITS_REL_ERR` against the float model.
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
from week5_integration import aot_quant as aq
from week5_integration import quantization as qz


def _sibling(name: str):
    """A test module beside this one, loaded by path (pytest's importlib mode puts no test folder on sys.path)."""
    spec = importlib.util.spec_from_file_location(f"{name}_for_aot_quant", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# One copy of the package helpers: the runner's path and loader, prompts; the session's shared packages.
_package_tests = _sibling("test_aot_package")
RUNNER, load_runner, prompt = _package_tests.RUNNER, _package_tests.load_runner, _package_tests.prompt
builds = _package_tests.builds

MAX_BATCH, MAX_LEN = builds.MAX_BATCH, builds.MAX_LEN  # the packaged maximum (shared builds)
DTYPE = torch.bfloat16 if runtime.on_gpu() else torch.float32
TOL = ap.TOLERANCE_BF16 if DTYPE == torch.bfloat16 else ap.TOLERANCE
HAS_FP8 = runtime.on_gpu() and runtime.has_capability(aq.FP8_MINIMUM)
# Each test that needs a compiled package: the first in a session builds it (aot_builds.py), a
# minute or more: over a whole-suite run's per-test budget, so slow.
PACKAGE_SLOW = pytest.mark.slow


def tiny_model(dtype=DTYPE):
    return cm.build("tiny", "fast", dtype=dtype).eval()


def package_record(tmp_path_factory, kind, dtype=DTYPE):
    """(shared folder, record) of the session's `kind` package of the tiny model (built once)."""
    root = builds.shared_root(tmp_path_factory)
    return root, builds.course_package(root, kind, dtype, max_batch=MAX_BATCH, max_len=MAX_LEN)


@pytest.fixture(scope="module")
def int8_built(tmp_path_factory):
    """(model, path) of the int8 package: compiled, not loaded."""
    return tiny_model(), Path(package_record(tmp_path_factory, "int8")[1]["path"])


@pytest.fixture(scope="module")
def int8_packaged(tmp_path_factory):
    """(model, path) once a fresh process loaded it (the loader probe: skip only when a one-Linear
    CUDA package dies too)."""
    root, record = package_record(tmp_path_factory, "int8")
    return tiny_model(), builds.require_loadable(record, root, runtime.DEVICE, DTYPE)


def run_fresh(path, idx, new, folder):
    """aot_runner.py by path in a new Python: its outputs, and the course modules it loaded."""
    torch.save(idx.cpu(), folder / "idx.pt")
    done = subprocess.run([sys.executable, str(RUNNER), str(path), "--tokens", str(folder / "idx.pt"),
                           "-n", str(new), "--out", str(folder / "out.pt")],
                          capture_output=True, text=True, timeout=300, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(folder / "out.pt")


# --------------------------------------------------------------------------- before compiling
def test_int8_model_swaps_every_linear_and_keeps_the_original():
    model = tiny_model()
    twin = aq.int8_model(model)
    linears = [n for n, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)]
    assert linears and all(isinstance(twin.get_submodule(n), aq.Int8Linear) for n in linears)
    assert all(isinstance(model.get_submodule(n), torch.nn.Linear) for n in linears), "the original changed"
    head = twin.get_submodule("head")
    assert head.qweight.dtype == torch.int8 and twin.tok.weight.dtype == DTYPE  # the embedding stays
    with pytest.raises(TypeError, match="GPT"):
        aq.int8_model(torch.nn.Linear(2, 2))


def test_int8_graphs_multiply_by_int8_weights_only():
    # Every matmul of the exported graphs by a weight is the int8 op on an int8 buffer: no float
    # copy of a weight is stored or formed outside it (the package holds q and the scales).
    programs = ap.export_programs(aq.int8_model(tiny_model()), max_batch=MAX_BATCH, max_len=MAX_LEN)
    cfg = cm.preset("tiny")
    for name, program in programs.items():
        nodes = [n for n in program.graph.nodes if n.op == "call_function"]
        int8_calls = [n for n in nodes if str(n.target) == "course.aot_int8_linear.default"]
        assert len(int8_calls) == 4 * cfg.n_layers + 1, (name, len(int8_calls))  # qkv, proj, up, down; the head
        assert not [n for n in nodes if n.target in (torch.ops.aten.linear.default, torch.ops.aten.mm.default)], name
        int8 = [k for k, t in program.state_dict.items() if t.dtype == torch.int8]
        assert len(int8) == len(int8_calls), (name, int8)


# ------------------------------------------------------------------------------ the package
@PACKAGE_SLOW
def test_fresh_process_serves_the_int8_package(int8_packaged, tmp_path):
    model, path = int8_packaged
    idx = prompt(3, 6, seed=1)
    new = 8
    out = run_fresh(path, idx, new, tmp_path)
    assert out["modules"] == [], f"the runner imported course modules: {out['modules']}"
    # (a) the int8 eager model, the lesson's Triton kernel: the same arithmetic, another order
    eager = qz.quantize_model(model, kernel="triton")
    want_prefill, want_steps, want_tokens = ap.eager_prefill_and_decode(eager, idx, new)
    assert_close(out["prefill_logits"], want_prefill.cpu(), **TOL, name="prefill logits vs int8 eager")
    assert len(out["decode_logits"]) == new - 1
    for i, (got, want) in enumerate(zip(out["decode_logits"], want_steps)):
        assert_close(got, want.cpu(), **TOL, name=f"decode step {i + 1} logits vs int8 eager")
    assert torch.equal(out["tokens"], want_tokens.cpu()), "greedy tokens differ from the int8 eager model's"
    # (b) the float model, fed the package's own tokens (so each step sees the same context):
    # within the quantization lesson's accuracy bound
    float_logits = model(out["tokens"].to(runtime.DEVICE)).detach()
    P = idx.shape[1]
    assert aq.logits_rel_err(out["prefill_logits"], float_logits[:, :P].cpu()) < qz.LOGITS_REL_ERR
    for i, got in enumerate(out["decode_logits"]):
        err = aq.logits_rel_err(got, float_logits[:, P + i].cpu())
        assert err < qz.LOGITS_REL_ERR, f"decode step {i + 1}: logits moved {err:.4f} from the float model's"


@PACKAGE_SLOW
def test_int8_package_says_what_it_holds(int8_packaged):
    _, path = int8_packaged
    gpt = load_runner().PackagedGPT(path)
    assert (gpt.weights, gpt.max_batch, gpt.max_len, gpt.dtype) == ("int8", MAX_BATCH, MAX_LEN, DTYPE)


@PACKAGE_SLOW
def test_int8_package_holds_the_lessons_kernel(int8_built):
    # the generated code, read from the file: checked even where the loader cannot load it
    _, path = int8_built
    found = ap.package_kernels(path)
    if runtime.on_gpu():  # the lesson's int8 kernel compiled in beside the course's five
        assert any(k.startswith("int8_matmul_kernel") for k in found["triton"]), found
        assert set(found["course"]) == set(ap.COURSE_KERNELS), found
    else:
        assert found["course"] == [], found


@PACKAGE_SLOW
@pytest.mark.parametrize("bad", ["int32 tokens", "float tokens", "too long", "batch too big", "3-D", "not a tensor"])
def test_int8_package_refuses_bad_input_before_running(int8_packaged, bad):
    # The compiled code checks nothing (aot_runner's docstring): every refusal comes from the
    # metadata, before the package runs; the caches stay unallocated.
    _, path = int8_packaged
    gpt = load_runner().PackagedGPT(path)
    good = prompt(2, 4)
    idx, error, match = {
        "int32 tokens": (good.to(torch.int32), TypeError, "int64"),
        "float tokens": (good.float(), TypeError, "int64"),
        "too long": (prompt(1, MAX_LEN + 1), ValueError, f"at most {MAX_LEN}"),
        "batch too big": (prompt(MAX_BATCH + 1, 3), ValueError, f"batch <= {MAX_BATCH}"),
        "3-D": (good[None], ValueError, r"\(batch, positions\)"),
        "not a tensor": (good.tolist(), TypeError, "torch.Tensor"),
    }[bad]
    with pytest.raises(error, match=match):
        gpt.prefill(idx)
    assert gpt.k_cache is None


@PACKAGE_SLOW
def test_strided_token_views_read_as_their_values(int8_packaged):
    # The compiled code indexes its inputs with contiguous strides: a strided view of ids, passed
    # as it is, is read as other tokens (measured on the CPU package: logits off by order 1). The
    # runner passes a contiguous copy, so a view and its copy give the same logits.
    model, path = int8_packaged
    gpt = load_runner().PackagedGPT(path)
    wide = prompt(3, 12, seed=4)
    for view in (wide[:, ::2], wide[:2, :6].t().contiguous().t()):
        assert not view.is_contiguous()
        want = gpt.prefill(view.contiguous()).clone()
        assert torch.equal(gpt.prefill(view), want)
        token = want[:, -1].argmax(-1, keepdim=True)
        step_want = gpt.decode(token).clone()
        gpt.prefill(view)
        strided = torch.cat([token, token], dim=1)[:, :1]  # (B, 1) with a row stride of 2
        assert not strided.is_contiguous()
        assert torch.equal(gpt.decode(strided), step_want)


# --------------------------------------------------------------------------------------- fp8
@pytest.mark.skipif(HAS_FP8, reason="this GPU has fp8 tensor cores: the fp8 package is built (test below)")
def test_fp8_package_is_refused_without_fp8_tensor_cores_naming_int8(tmp_path):
    model = tiny_model(torch.bfloat16)
    with pytest.raises(runtime.NotOnThisGpu, match=r"8\.9.*int8"):
        aq.package_fp8(model, tmp_path / "fp8.pt2", max_batch=MAX_BATCH, max_len=MAX_LEN)
    assert not (tmp_path / "fp8.pt2").exists()


def test_gpu_side_traces_and_exports_without_a_gpu():
    # The int8 op's GPU body (the lesson's kernel through wrap_triton, compiled to TTIR for sm_90)
    # and the fp8 model's export graphs, on fake CUDA tensors: aot_quant_gpu_trace.py in a fresh
    # process that believes in a GPU (this process's simulation switches must not reach it).
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM", "COURSE_BACKEND")}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("aot_quant_gpu_trace.py"))],
                          capture_output=True, text=True, timeout=600, cwd=RUNNER.parents[1], env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "aot_int8_linear ok ['y_ptr']" in lines, done.stdout  # writes its output only
    linears = 4 * cm.preset("tiny").n_layers + 1  # every Linear of the tiny model fits _scaled_mm (K, N % 16 == 0)
    assert (f"fp8 prefill scaled_mm={linears} float8_buffers={linears} course_ops=['aot_add_rms_norm', "
            "'aot_causal_attention', 'aot_rms_norm', 'aot_rope', 'aot_swiglu']") in lines, done.stdout
    assert (f"fp8 decode scaled_mm={linears} float8_buffers={linears} course_ops=['aot_add_rms_norm', "
            "'aot_rms_norm', 'aot_rope', 'aot_swiglu']") in lines, done.stdout


def test_fp8_weights_round_within_half_an_e4m3_step():
    # Quantizing runs anywhere (float8_e4m3fn exists on the CPU): each weight is within 2^-4 of
    # itself relative (3 mantissa bits, round to nearest), or within e4m3's subnormal spacing
    # (2^-9 of the scale) near zero; the row's largest magnitude maps to 448.
    w = torch.randn(48, 80, generator=torch.Generator().manual_seed(0)) * 0.02
    w[3] = 0  # an all-zero row: scale 1, no 0/0
    w8, scale = aq.quantize_fp8_rows(w)
    assert w8.dtype == torch.float8_e4m3fn and scale.shape == (48,) and float(scale[3]) == 1.0
    back = w8.float() * scale[:, None]
    bound = torch.maximum(w.abs() * 2.0**-4, scale[:, None] * 2.0**-10)
    assert bool(((back - w).abs() <= bound + 1e-12).all())
    assert torch.equal(w8.float().abs().amax(1)[scale != 1], torch.full((47,), aq.FP8_MAX))
    with pytest.raises(TypeError, match="2-D"):
        aq.quantize_fp8_rows(torch.ones(4, dtype=torch.int8))


@pytest.mark.skipif(not HAS_FP8, reason="fp8 tensor cores (torch._scaled_mm) need compute capability >= 8.9")
def test_fp8_linear_matches_its_error_model():
    linear = torch.nn.Linear(256, 96, bias=False).to(runtime.DEVICE, torch.bfloat16)
    layer = aq.Fp8Linear(linear)
    x = torch.randn(5, 256, device=runtime.DEVICE, dtype=torch.bfloat16)
    want = aq.fp8_linear_reference(x.float(), layer).double()  # from the same fp8 values, in fp32
    # The fp8 products are exact; the tensor core's running sums keep ~14 bits (2^-13 per addition,
    # week 3's matmul_fp8 error model, no promotion assumed: K products), then one bf16 rounding.
    x8, sx = aq.quantize_activation_fp8(x)
    S = float(((x8.float().abs() * sx) @ layer.weight.abs().t()).max())
    assert_close(layer(x).double(), want, rtol=2.0**-8, atol=256 * 2.0**-13 * S)


@pytest.mark.skipif(not HAS_FP8, reason="fp8 tensor cores (torch._scaled_mm) need compute capability >= 8.9")
@PACKAGE_SLOW
def test_fp8_package_in_a_fresh_process(tmp_path_factory, tmp_path):
    model = tiny_model(torch.bfloat16)
    root, record = package_record(tmp_path_factory, "fp8", torch.bfloat16)
    path = builds.require_loadable(record, root, runtime.DEVICE, torch.bfloat16)
    idx = prompt(2, 6, seed=2)
    out = run_fresh(path, idx, 4, tmp_path)
    assert out["modules"] == []
    float_logits = model(out["tokens"].to(runtime.DEVICE)).detach().float().cpu()
    P = idx.shape[1]
    assert aq.logits_rel_err(out["prefill_logits"].float(), float_logits[:, :P]) < aq.FP8_LOGITS_REL_ERR
    for i, got in enumerate(out["decode_logits"]):
        assert aq.logits_rel_err(got.float(), float_logits[:, P + i]) < aq.FP8_LOGITS_REL_ERR, i
