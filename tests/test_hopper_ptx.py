"""The Hopper PTX wrappers are written once: week1_cuda_python/kernels/hopper_ptx.cuh.

Week 1's wgmma GEMMs and week 4's Hopper attention (forward and backward) all include it; a second copy of
an mbarrier wait or a wgmma in a kernel file would drift from it (the four copies this header replaced had
already drifted in names and formatting). And every build of those kernels must find it: the launchers'
nvcc commands, their load_inline builds, the generic compile check, for the solution and for the learner's
exercise stub alike.
"""
import re
import subprocess
from pathlib import Path

import pytest

from course import runtime
from week1_cuda_python.hopper_ptx import HOPPER_PTX, HOPPER_PTX_INCLUDE

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "week1_cuda_python" / "kernels" / "hopper_ptx.cuh"
# Instructions that exist only on sm_90a (and the cluster ones that came with it): inline asm naming any of
# them belongs in the header.
HOPPER_ONLY = re.compile(r"\b(wgmma\.|mbarrier\.|cp\.async\.bulk|cp\.reduce\.async\.bulk|setmaxnreg|fence\.proxy\.async"
                         r"|fence\.mbarrier_init|barrier\.cluster|mapa\.|%%cluster_ctarank)")
SOURCES = sorted(p for p in ROOT.glob("*/**/kernels/*.cu*") if ".venv" not in p.parts)


def test_the_header_is_where_the_launchers_say():
    assert HOPPER_PTX == HEADER and HEADER.is_file()
    assert HOPPER_PTX_INCLUDE == ("-I", str(HEADER.parent))


@pytest.mark.parametrize("source", [s for s in SOURCES if s != HEADER], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_kernel_writes_a_hopper_instruction_itself(source):
    text = source.read_text()
    asm = re.findall(r"asm\s*(?:volatile\s*)?\((.*?)\)\s*;", text, flags=re.S)
    written = [a for a in asm if HOPPER_ONLY.search(a)]
    assert not written, f"{source.name} wraps a Hopper instruction itself; use (or add to) hopper_ptx.cuh: {written[0][:80]}"


INCLUDERS = ("week1_cuda_python/kernels/matmul_wgmma.cu", "week1_cuda_python/exercises/kernels/matmul_wgmma.cu",
             "week1_cuda_python/kernels/matmul_wgmma_persistent.cu",  # (matmul_wgmma_fused.cu, _pingpong.cu include it)
             "week1_cuda_python/exercises/kernels/matmul_wgmma_persistent.cu",
             "week4_triton_dl/attention/kernels/attention_hopper_forward.cu",
             "week4_triton_dl/exercises/attention/kernels/attention_hopper_forward.cu",
             "week4_triton_dl/attention/kernels/attention_hopper_backward.cu")


@pytest.mark.parametrize("source", INCLUDERS)
def test_the_hopper_kernels_include_the_header(source):
    assert '#include "hopper_ptx.cuh"' in (ROOT / source).read_text()


def test_every_build_command_names_the_header_folder(tmp_path):
    from week1_cuda_python import matmul_tensor_cores as tc
    from week1_cuda_python import matmul_wgmma_fused as wf
    from week1_cuda_python import matmul_wgmma_persistent as wp
    from week4_triton_dl.attention import hopper, hopper_backward

    out = tmp_path / "x.cubin"
    commands = [tc.wgmma_nvcc_command(out), wp.nvcc_command(out), wp.nvcc_command(out, source=wp.PINGPONG_SOURCE),
                wf.nvcc_command(out), hopper.nvcc_command(out), hopper.nvcc_command(out, overlap=True),
                hopper_backward.nvcc_command(out), hopper_backward.nvcc_command(out, dq_tma=False)]
    for command in commands:
        joined = " ".join(command)
        assert " ".join(HOPPER_PTX_INCLUDE) in joined, joined
    # The extension caches are keyed on the header's text too: a changed wrapper rebuilds them.
    assert hopper.PTX_HEADER == hopper_backward.PTX_HEADER == HEADER


@pytest.mark.nvcc
@pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
def test_the_header_compiles_alone_everywhere(tmp_path):
    """Included first, by itself, for sm_90a (the wrappers) and sm_75 (none of them): it carries its own includes."""
    source = tmp_path / "only_the_header.cu"
    source.write_text('#include "hopper_ptx.cuh"\n__global__ void k(float* p) { p[0] = 1.0f; }\n')
    for arch in ("-gencode=arch=compute_90a,code=sm_90a", "-arch=sm_75"):
        built = subprocess.run([runtime.nvcc_path(), "-cubin", arch, "-Werror", "all-warnings", *HOPPER_PTX_INCLUDE,
                                "-o", str(tmp_path / "x.cubin"), str(source)], capture_output=True, text=True)
        assert built.returncode == 0, built.stderr
