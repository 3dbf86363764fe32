"""Every CUDA C source in the course (exercise stubs included) compiles for the T4 and the H100.

nvcc needs no GPU, so this runs on CPU machines too; where nvcc is absent it is skipped.
"""
from pathlib import Path

import pytest

from course import interop, runtime

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for p in ROOT.glob("*/**/kernels/*.cu") if ".venv" not in p.parts)
ARCHS = ["sm_75", "sm_90"]  # Colab's T4 (Turing) and the H100 (Hopper)


def test_sources_were_found():
    assert SOURCES, "no kernels/*.cu files found under the lesson folders"


@pytest.mark.nvcc
@pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_compiles(source, arch, tmp_path):
    result = interop.nvcc_compile(source, arch, tmp_path)
    assert result.returncode == 0, f"nvcc -arch={arch} {source.name} failed:\n{result.stderr}"
