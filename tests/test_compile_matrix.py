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


def _matrix(tmp_path, specs, *options: str) -> tuple[int, str]:
    record = tmp_path / "launches.jsonl"
    record.write_text("".join(json.dumps(s) + "\n" for s in specs))
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_BACKEND", "TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM")}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run([sys.executable, "-m", "course", "compile-matrix", "--record", str(record), "--jobs", "1", *options],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return run.returncode, run.stdout + run.stderr


def test_a_kernel_that_fits_everywhere_and_one_refused_below_its_capability(tmp_path):
    needs = [{"minimum": [9, 0], "why": "demo needs compute capability >= 9.0: use the other one"}]
    status, out = _matrix(tmp_path, [_spec(1024), _spec(1024, "*fp16", needs)])
    assert status == 0, out
    assert "2 code paths (0 of them the bf16 twins of float16 launches) x 5 GPU classes" in out and "6 fit" in out and "4 refused" in out and "0 FAIL" in out, out
    assert "sm_75 " + ADD + ": demo needs compute capability >= 9.0: use the other one" in out, out


def test_a_config_that_cannot_compile_fails_with_exit_1(tmp_path):
    # tl.arange needs a power of two: BLOCK_SIZE=3 compiles for no GPU, so it could launch on none.
    status, out = _matrix(tmp_path, [_spec(3)])
    assert status == 1 and "5 FAIL" in out and "compile error" in out, out


def test_without_ptxas_where_registers_cannot_bind_the_verdicts_are_the_same(tmp_path):
    # CI's mode: ptxas only where the register limit can be reached. A path that fits and one that cannot
    # compile get the verdicts of the full mode; the 16-warp path goes through ptxas (its registers are read).
    wide = dict(_spec(2048), options={"num_warps": 16})
    status, out = _matrix(tmp_path, [_spec(1024), wide], "--ptxas", "needed")
    assert status == 0 and "(ptxas: needed)" in out and "10 fit" in out and "0 FAIL" in out, out
    status, out = _matrix(tmp_path, [_spec(3)], "--ptxas", "needed")
    assert status == 1 and "5 FAIL" in out and "compile error" in out, out


def test_ptxas_is_needed_only_where_the_register_limit_can_be_reached(monkeypatch):
    t4 = runtime.GPU_CLASSES[0]
    monkeypatch.setenv(compile_matrix.PTXAS_ENV, "needed")
    # 255 registers x 32 threads x 8 warps = 65,280 <= 65,536: no 8-warp block can run out of registers.
    assert not compile_matrix.ptxas_needed(8, t4) and compile_matrix.ptxas_needed(16, t4)
    monkeypatch.setenv(compile_matrix.PTXAS_ENV, "all")
    assert compile_matrix.ptxas_needed(1, t4)


def test_the_committed_matrix_is_written_with_ptxas_on_every_path(tmp_path):
    status, out = _matrix(tmp_path, [_spec(1024)], "--ptxas", "needed", "--write")
    assert status == 2 and "needs --ptxas all" in out, out


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
    # README's cell names the rung that runs there, as the question named it (has_capability(instead=)).
    named = _spec(64, needs=[{"minimum": [9, 0], "route": True, "asker": "week3_triton_kernels.matmul_fp8.matmul_fp8",
                              "instead": "the persistent rung (matmul_persistent_kernel)"}])
    verdict, why = compile_matrix.refused_on(named, gpu["sm_89"])
    assert verdict == "other" and "the persistent rung (matmul_persistent_kernel)" in why, why
    assert "runtime.has_capability(..., instead=)" in compile_matrix.refused_on(routed, gpu["sm_86"])[1]


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


MATMUL = "week3_triton_kernels.matmul_basic:matmul_plain_kernel"
NUMBA_ADD = {"numba": True, "kernel": "week1_cuda_python.vector_add:add_kernel",
             "args": [{"array": ["float32", 1, "C"]}] * 3}
BF16_NEED = {"minimum": [8, 0], "dtype": "bfloat16",
             "why": "demo matmul in bfloat16 (bf16 tensor cores) needs compute capability >= 8.0: use float16"}


def _matmul_spec(needs) -> dict:
    names = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
             "stride_cm", "stride_cn"]
    signature = {n: "*fp16" if n.endswith("_ptr") else "i32" for n in names}
    constexprs = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}
    import inspect
    from week3_triton_kernels import matmul_basic
    params = list(inspect.signature(matmul_basic.matmul_plain_kernel.fn).parameters)
    assert params[:len(names)] == names, params  # the kernel's arguments, as this test spells them
    for name in params[len(names):]:
        signature[name] = "constexpr"
        constexprs.setdefault(name, 32)
    return {"kernel": MATMUL, "signature": signature, "constexprs": constexprs, "options": {"num_warps": 4},
            "needs": needs}


def test_bf16_twins_carry_the_bf16_refusal_and_the_float16_launch_drops_it():
    from course import launch_record

    plain, twin = launch_record.bf16_twins([_matmul_spec([{"accepts": "bfloat16"}, BF16_NEED])])
    assert "needs" not in plain and set(plain["signature"].values()) == {"*fp16", "i32", "constexpr"}
    assert twin["twin"] and set(twin["signature"].values()) == {"*bf16", "i32", "constexpr"}
    assert twin["needs"] == [BF16_NEED]
    # An op whose dtype check takes float16 only gets no twin; an fp32 launch gets none either.
    assert len(launch_record.bf16_twins([_matmul_spec([BF16_NEED])])) == 1
    fp32 = _matmul_spec([{"accepts": "bfloat16"}])
    fp32["signature"] = {k: "*fp32" if v == "*fp16" else v for k, v in fp32["signature"].items()}
    assert len(launch_record.bf16_twins([fp32])) == 1


def test_a_bf16_dot_is_refused_on_a_t4_and_an_op_that_does_not_refuse_it_fails(tmp_path):
    status, out = _matrix(tmp_path, [_matmul_spec([{"accepts": "bfloat16"}, BF16_NEED])])
    assert status == 0 and "2 code paths (1 of them the bf16" in out and "1 refused" in out and "0 FAIL" in out, out
    assert "sm_75 " + MATMUL + ": demo matmul in bfloat16" in out, out
    # The same op without `runtime.require_bf16_tensor_cores`: its bf16 tl.dot would launch on a T4.
    status, out = _matrix(tmp_path, [_matmul_spec([{"accepts": "bfloat16"}])])
    assert status == 1 and "1 FAIL" in out and "require_bf16_tensor_cores" in out, out


def test_every_launcher_of_a_bf16_dot_refuses_bf16_on_a_t4(monkeypatch):
    """Each public op whose kernel does bf16 tensor-core math refuses bfloat16 on sm_75 before any
    launch, naming float16 (the matrix checks the same from the record: no bf16 twin FAILs)."""
    import torch
    from week3_triton_kernels import matmul_basic
    from week4_triton_dl.attention import naive as attention_naive

    monkeypatch.setattr(runtime, "capability", lambda device=None: (7, 5))
    # On the kernels' device: a CPU tensor on a GPU machine is refused first, for being on the CPU.
    a = torch.ones(16, 16, dtype=torch.bfloat16, device=runtime.DEVICE)
    with pytest.raises(runtime.NotOnThisGpu, match=r"bfloat16 .*>= 8\.0.*use float16"):
        matmul_basic.matmul_plain(a, a)
    q = torch.ones(1, 1, 16, 16, dtype=torch.bfloat16, device=runtime.DEVICE)
    with pytest.raises(runtime.NotOnThisGpu, match=r"bfloat16 .*use float16"):
        attention_naive.attention_naive(q, q, q)
    matmul_basic.matmul_plain(a.half(), a.half())  # float16 runs there


def test_the_recorder_writes_bf16_questions_and_numba_launches(tmp_path):
    if runtime.on_gpu():
        pytest.skip("the recorder watches the interpreter's and the simulator's launches: simulation only")
    record = tmp_path / "launches.jsonl"
    script = tmp_path / "learner.py"
    script.write_text("import torch\nfrom course import runtime\n"
                      "from week3_triton_kernels import matmul_basic\nfrom week1_cuda_python import vector_add\n"
                      "a = torch.ones(16, 16, dtype=torch.float16)\nmatmul_basic.matmul_plain(a, a)\n"
                      # the dtype checks are watched from the second launch on (launch_record._watch_dtype_checks)
                      "matmul_basic.matmul_plain(a, a)\n"
                      "x = torch.ones(100)\nvector_add.vector_add_numba(x, x)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), COURSE_BACKEND="sim", COURSE_RECORD_LAUNCHES=str(record))
    subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, check=True, timeout=300)
    specs = {s["kernel"]: s for s in map(json.loads, record.read_text().splitlines())}
    assert set(specs) == {MATMUL, "week1_cuda_python.vector_add:add_kernel"}, specs
    needs = specs[MATMUL]["needs"]
    assert {"accepts": "bfloat16"} in needs and any(n.get("dtype") == "bfloat16" and "use float16" in n["why"]
                                                    for n in needs), needs
    assert specs["week1_cuda_python.vector_add:add_kernel"] == NUMBA_ADD


@pytest.mark.nvcc
@pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
def test_numba_kernels_compile_to_ptx_for_every_class(tmp_path):
    add = NUMBA_ADD
    bad = dict(add, args=[{"array": ["float32", 2, "C"]}] * 3)  # a 2-D array: a[i] is a row, out[i] = ... fails
    # Blelloch's scan calls a device function (`padded`): numba_ptx.device_functions_for at work.
    scan = {"numba": True, "kernel": "week1_cuda_python.scan:scan_blelloch_kernel_f32",
            "args": [{"array": ["float32", 1, "C"]}] * 3 + ["int64"]}
    status, out = _matrix(tmp_path, [add, scan])
    assert status == 0 and "Numba: 2 kernels, 2 specializations" in out and "10 compile, 0 FAIL" in out, out
    launched_none = out.partition("not launched by any test (not checked): ")[2]
    assert "week1_cuda_python.vector_add:add_grid_stride_kernel" in launched_none, out
    status, out = _matrix(tmp_path, [add, bad])
    assert status == 1 and "5 FAIL" in out, out


def test_a_bf16_refusal_that_reached_a_kernel_without_a_dot_does_not_refuse_it(tmp_path):
    # vector_add has no tl.dot: a bf16 refusal beside its launch came from another op of its caller.
    status, out = _matrix(tmp_path, [_spec(1024, "*fp16", needs=[{"accepts": "bfloat16"}, BF16_NEED])])
    assert status == 0 and "(1 of them the bf16" in out and "10 fit" in out and "0 refused" in out, out


def test_numba_kernels_compile_under_a_numpy_without_row_stack(tmp_path):
    # numpy 2.4 removed np.row_stack, which numba-cuda 0.30.4 overloads when its array typing loads: on the
    # H200 (numpy 2.4.6) every Numba PTX compile failed until course/numba_ptx.py put the alias back.
    code = ("import numpy; del numpy.row_stack\n"
            "from course import numba_ptx, runtime\n"
            "spec = {'kernel': 'week1_cuda_python.vector_add:add_kernel', 'numba': True,\n"
            "        'args': [{'array': ['float32', 1, 'C']}] * 3}\n"
            "r = numba_ptx.compile_all([spec], runtime.GPU_CLASSES[:1])\n"
            "assert r.get('not_checked') or (r['compiled'], r['failed']) == (1, 0), r\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM")}
    env.update(PYTHONPATH=str(ROOT), COURSE_BACKEND="compile")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
