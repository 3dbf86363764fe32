"""Every CUDA C source in the course (exercise stubs included) compiles for every GPU class its
launcher accepts: the five of `runtime.GPU_CLASSES` (T4 sm_75, A100 sm_80, RTX 30 sm_86, L4 / RTX 40
sm_89, H100 sm_90), except a source built for one architecture only, which compiles for that one
while its launcher refuses every other class, naming the fallback.

nvcc needs no GPU, so this runs on CPU machines too; where nvcc is absent it is skipped.
"""
import subprocess
from pathlib import Path

import pytest

from course import interop, runtime
from week1_cuda_python.hopper_ptx import HOPPER_PTX_INCLUDE  # the Hopper kernels' shared header

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for p in ROOT.glob("*/**/kernels/*.cu") if ".venv" not in p.parts)
ARCHS = [gpu.arch for gpu in runtime.GPU_CLASSES]
# The wgmma rung (week 1, matmul_tensor_cores): wgmma and setmaxnreg exist on sm_90a alone, so its
# launcher builds it for sm_90a with its own nvcc command and refuses every other GPU.
SM_90A_ONLY = {"week1_cuda_python/kernels/matmul_wgmma.cu",
               "week1_cuda_python/exercises/kernels/matmul_wgmma.cu",  # its exercise stub
               "week4_triton_dl/attention/kernels/attention_hopper_backward.cu",
               "week4_triton_dl/attention/kernels/attention_hopper_forward.cu",
               "week4_triton_dl/exercises/attention/kernels/attention_hopper_forward.cu"}  # its exercise stub


def sm_90a_command(source, output):
    """The launcher's own nvcc command for an SM_90A_ONLY source (-gencode=arch=compute_90a,code=sm_90a)."""
    from week1_cuda_python import matmul_tensor_cores as tc
    from week4_triton_dl.attention import hopper, hopper_backward

    commands = {hopper_backward.SOURCE: hopper_backward.nvcc_command}
    for kernels in ("kernels", "exercises/kernels"):  # the wgmma rung and its stub (whatever --impl says)
        path = Path(tc.__file__).parent / kernels / "matmul_wgmma.cu"
        commands[path] = lambda out, nvcc, path=path: tc.wgmma_nvcc_command(out, nvcc, source=path)
    for kernels in (hopper.KERNELS, hopper.EXERCISE_KERNELS):  # the forward and its stub (whatever --impl says)
        path = kernels / hopper.SOURCE.name
        commands[path] = lambda out, nvcc, path=path: hopper.nvcc_command(out, nvcc, source=path)
    return commands[source](output, runtime.nvcc_path())
CASES = [(source, arch) for source in SOURCES
         for arch in (["sm_90a"] if str(source.relative_to(ROOT)) in SM_90A_ONLY else ARCHS)]


def wrong_cuda_cases():
    """(fixture label, fixture, arch) for every known-wrong CUDA C file
    (tests/<week>/wrong/), for each arch its solution is compiled for."""
    from classroom import must_fail

    cases = []
    for fixture in must_fail.load_fixtures(ROOT):
        if fixture.solution.suffix == ".cu":
            arches = [arch for source, arch in CASES if source == fixture.solution]
            cases += [(fixture.label, fixture, arch) for arch in arches]
    return cases


def test_sources_were_found():
    assert SOURCES, "no kernels/*.cu files found under the lesson folders"
    assert {str(s.relative_to(ROOT)) for s in SOURCES} >= SM_90A_ONLY, "an sm_90a-only source moved: update SM_90A_ONLY"


@pytest.mark.nvcc
@pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
@pytest.mark.parametrize("source, arch", CASES, ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else v)
def test_compiles(source, arch, tmp_path):
    if arch == "sm_90a":
        result = subprocess.run(sm_90a_command(source, tmp_path / "sm_90a.cubin"), capture_output=True, text=True)
    else:
        result = interop.nvcc_compile(source, arch, tmp_path, HOPPER_PTX_INCLUDE)
    assert result.returncode == 0, f"nvcc for {arch}: {source.name} failed:\n{result.stderr}"


@pytest.mark.nvcc
@pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
@pytest.mark.parametrize("label, fixture, arch", wrong_cuda_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_known_wrong_sources_compile(label, fixture, arch, tmp_path):
    """A known-wrong .cu is a learner's bug the TESTS must catch: it builds wherever its solution builds
    (same command, warnings as errors), so a fixture that broke the build would prove nothing."""
    from classroom import must_fail

    kernels = tmp_path / "kernels"
    kernels.mkdir()
    for other in (f for f in fixture.solution.parent.iterdir() if f.is_file()):  # its headers too
        (kernels / other.name).write_text(other.read_text())
    wrong = kernels / fixture.solution.name
    wrong.write_text(must_fail.wrong_source(fixture))
    if arch == "sm_90a":
        command = [str(wrong) if a == str(fixture.solution) else a
                   for a in sm_90a_command(fixture.solution, tmp_path / "sm_90a.cubin")]
        assert str(wrong) in command
        result = subprocess.run(command, capture_output=True, text=True)
    else:
        result = interop.nvcc_compile(wrong, arch, tmp_path, HOPPER_PTX_INCLUDE)
    assert result.returncode == 0, f"{label}: nvcc for {arch} failed:\n{result.stderr}"


@pytest.mark.parametrize("gpu", runtime.GPU_CLASSES, ids=lambda g: g.arch)
def test_the_sm_90a_rung_is_refused_on_every_other_class_naming_the_fallback(gpu):
    from week1_cuda_python import matmul_tensor_cores as tc

    why = tc.wgmma_unsupported(gpu.capability)
    if gpu.capability == tc.WGMMA_CAPABILITY:
        assert why is None
    else:
        assert why is not None and f"matmul_{tc.WGMMA_FALLBACK}" in why
        assert f"compute capability {gpu.capability[0]}.{gpu.capability[1]}" in why
