"""The compile matrix: kernels compiled for each GPU class without a GPU (classroom/compile_matrix.py),
from the launches a simulation run records (course/launch_record.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course import runtime
from classroom import compile_matrix

ROOT = Path(__file__).resolve().parent.parent
ADD = "week3_triton_kernels.vector_add:add_kernel"


def _spec(block: int, dtype: str = "*fp32", needs=None) -> dict:
    spec = {"kernel": ADD, "constexprs": {"BLOCK_SIZE": block}, "options": {"num_warps": 4},
            "signature": {"a_ptr": dtype, "b_ptr": dtype, "out_ptr": dtype, "n": "i32", "BLOCK_SIZE": "constexpr"}}
    if needs:
        spec["needs"] = needs
    return spec


def _matrix(tmp_path, specs) -> tuple[int, str]:
    record = tmp_path / "launches.jsonl"
    record.write_text("".join(json.dumps(s) + "\n" for s in specs))
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_BACKEND", "TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM")}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run([sys.executable, "-m", "course", "compile-matrix", "--record", str(record), "--jobs", "1"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return run.returncode, run.stdout + run.stderr


def test_a_kernel_that_fits_everywhere_and_one_refused_below_its_capability(tmp_path):
    needs = [{"minimum": [9, 0], "why": "demo needs compute capability >= 9.0: use the other one"}]
    status, out = _matrix(tmp_path, [_spec(1024), _spec(1024, "*fp16", needs)])
    assert status == 0, out
    assert "2 code paths x 5 GPU classes" in out and "6 fit" in out and "4 refused" in out and "0 FAIL" in out, out
    assert "sm_75 " + ADD + ": demo needs compute capability >= 9.0: use the other one" in out, out


def test_a_config_that_cannot_compile_fails_with_exit_1(tmp_path):
    # tl.arange needs a power of two: BLOCK_SIZE=3 compiles for no GPU, so it could launch on none.
    status, out = _matrix(tmp_path, [_spec(3)])
    assert status == 1 and "5 FAIL" in out and "compile error" in out, out


def test_representatives_keep_one_code_path_with_its_largest_tile():
    small, big, other = _spec(64), _spec(1024), _spec(64, "*fp16")
    kept = compile_matrix.representatives([small, big, other])
    assert len(kept) == 2 and big in kept and other in kept


def test_a_launch_under_a_capability_question_is_refused_or_routed_below_it():
    gpu = {g.arch: g for g in runtime.GPU_CLASSES}
    refused = _spec(64, needs=[{"minimum": [8, 9], "why": "fp8 needs 8.9: use fp16"}])
    routed = _spec(64, needs=[{"minimum": [9, 0], "route": True}])
    assert compile_matrix.refused_on(refused, gpu["sm_80"]) == ("refused", "fp8 needs 8.9: use fp16")
    assert compile_matrix.refused_on(refused, gpu["sm_89"]) is None
    assert compile_matrix.refused_on(routed, gpu["sm_86"])[0] == "other"
    assert compile_matrix.refused_on(routed, gpu["sm_90"]) is None


def test_pretended_capability_gives_that_class_limits(monkeypatch):
    if runtime.on_gpu():
        pytest.skip("off a GPU only: on a GPU the limits are the device's own")
    assert runtime.shared_memory_per_block() == 1 << 30  # the interpreter: nothing limits it
    monkeypatch.setattr(runtime, "capability", lambda device=None: (7, 5))
    assert runtime.gpu_class().name == "T4" and runtime.shared_memory_per_block() == 64 * 1024
    monkeypatch.setattr(runtime, "capability", lambda device=None: (8, 7))  # an Orin: the RTX 30 class
    assert runtime.gpu_class().arch == "sm_86"


def test_the_recorder_writes_a_launch_and_its_launcher_questions(tmp_path):
    if runtime.on_gpu():
        pytest.skip("the recorder watches the interpreter's launches: simulation only")
    record = tmp_path / "launches.jsonl"
    # A script's own kernel (a learner's file, a test's subprocess: module __main__) is not the
    # course's and could not be imported by the matrix: it is left out of the record.
    script = tmp_path / "learner.py"  # a file: @triton.jit reads the kernel's source
    script.write_text("import torch\nfrom course import runtime\nimport triton\nimport triton.language as tl\n"
                      "from week3_triton_kernels import vector_add as v\n\n@triton.jit\n"
                      "def own(x_ptr, n, BLOCK: tl.constexpr):\n"
                      "    o = tl.arange(0, BLOCK)\n    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n) + 1, mask=o < n)\n\n"
                      "x = torch.ones(100)\nv.vector_add(x, x)\nown[(1,)](x, 100, BLOCK=128)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), COURSE_BACKEND="sim", COURSE_RECORD_LAUNCHES=str(record))
    subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, check=True, timeout=300)
    specs = [json.loads(line) for line in record.read_text().splitlines()]
    assert [s["kernel"] for s in specs] == [ADD]
    assert specs[0]["signature"]["a_ptr"] == "*fp32" and specs[0]["signature"]["BLOCK_SIZE"] == "constexpr"
    assert "needs" not in specs[0]


def test_bf16_dot_is_refused_on_a_t4_naming_float16(monkeypatch):
    import torch

    runtime.require_bf16_tensor_cores(torch.bfloat16, "demo")  # this machine (or simulation): allowed
    monkeypatch.setattr(runtime, "capability", lambda device=None: (7, 5))
    runtime.require_bf16_tensor_cores(torch.float16, "demo")  # fp16 tensor cores: a T4 has them
    with pytest.raises(runtime.NotOnThisGpu, match=r"demo in bfloat16 .* >= 8\.0.*use float16"):
        runtime.require_bf16_tensor_cores(torch.bfloat16, "demo")
