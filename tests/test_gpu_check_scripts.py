"""tools/gpu_check_steps.sh, the setup and `step` runner of every tools/gpu_*check*.sh, on the CPU.

Each test writes a small check script in a temporary folder (a fake nvidia-smi on PATH), sources the
library the way the real scripts do, and runs fake steps: one that passes, one that fails and is
fatal, one that hangs past its limit, one the budget has no room for. The printed "=== " lines are
what GPU logs are read by (by eye and with grep "^=== "), so they are asserted word for word.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
LIBRARY = TOOLS / "gpu_check_steps.sh"
CHECK_SCRIPTS = sorted(p for p in TOOLS.glob("gpu_*check*.sh") if p != LIBRARY)


def _run(tmp_path: Path, body: str, budget: int = 100, settings: str = "") -> subprocess.CompletedProcess:
    """Run `body` (step lines) after the setup a check script does, in tmp_path; OUT is tmp_path/out."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/usr/bin/env bash\necho "FakeGPU $*"\n')
    smi.chmod(0o755)
    script = tmp_path / "check.sh"
    script.write_text(f'set -u\nOUT={tmp_path}/out\nBUDGET_S={budget}\n{settings}\nsource "{LIBRARY}"\n{body}\n'
                      'echo "=== done"\n')
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", TAIL="3")
    return subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def _marked(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("=== ")]


def test_passing_and_fatal_failing_steps(tmp_path):
    body = ('step 01_ok 30 1 "echo first line; echo hello from ok"\n'
            'step 02_soft 30 0 "echo soft; exit 2" || echo "soft returned $?"\n'
            'step 03_fatal 30 1 "echo broken; exit 3"\n'
            'step 04_never 30 0 "echo should not run"')
    run = _run(tmp_path, body)
    assert run.returncode == 3, run.stdout + run.stderr  # the script exits with the fatal step's status
    marked = _marked(run.stdout)
    assert re.fullmatch(r"=== 01_ok \(limit 30 s, (99|100) s left\)", marked[0]), marked
    assert re.fullmatch(r"=== 01_ok exit 0 after [01] s", marked[1]), marked
    assert re.fullmatch(r"=== 02_soft exit 2 after [01] s", marked[3]), marked
    assert "soft returned 2" in run.stdout  # a non-fatal step returns its status and the script goes on
    assert re.fullmatch(r"=== 03_fatal exit 3 after [01] s", marked[5]), marked
    assert marked[6:] == ["=== stopping: 03_fatal failed"]  # no TIMED OUT line, no step 04, no "done"
    assert "hello from ok" in run.stdout  # the log's tail is printed
    logs = tmp_path / "out" / "logs"
    assert (logs / "01_ok.log").read_text() == "first line\nhello from ok\n"
    assert (logs / "03_fatal.log").read_text() == "broken\n"
    assert not (logs / "04_never.log").exists()
    assert (tmp_path / "out" / "results").is_dir()
    # the setup: nvidia-smi's line printed and kept, with the default fields
    smi = (logs / "nvidia-smi.txt").read_text()
    assert smi.startswith("FakeGPU --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw ")
    assert run.stdout.startswith(smi)


def test_a_fatal_step_that_hangs_is_killed_and_named(tmp_path):
    settings = 'CHECK_HANG_HINT="a barrier phase / expect-tx mismatch"'
    run = _run(tmp_path, 'step 02_smoke 1 1 "echo launched; sleep 30"', settings=settings)
    assert run.returncode == 124, run.stdout + run.stderr
    marked = _marked(run.stdout)
    assert marked[0] == "=== 02_smoke (limit 1 s, 100 s left)" or marked[0] == "=== 02_smoke (limit 1 s, 99 s left)"
    assert re.fullmatch(r"=== 02_smoke exit 124 after [12] s", marked[1]), marked
    assert marked[2:] == ["=== 02_smoke TIMED OUT (a hang: look for a barrier phase / expect-tx mismatch)",
                          "=== stopping: 02_smoke failed"]
    assert (tmp_path / "out" / "logs" / "02_smoke.log").read_text() == "launched\n"


def test_a_timeout_without_a_hint_prints_no_hint(tmp_path):
    run = _run(tmp_path, 'step 01_smoke 1 1 "sleep 30"')
    assert run.returncode == 124
    assert _marked(run.stdout)[2:] == ["=== stopping: 01_smoke failed"]


def test_the_budget_caps_a_limit_and_skips_what_it_cannot_hold(tmp_path):
    run = _run(tmp_path, 'step 01_capped 300 0 "true"', budget=40)
    assert re.fullmatch(r"=== 01_capped \(limit (39|40) s, (39|40) s left\)", _marked(run.stdout)[0])
    run = _run(tmp_path, 'step 05_bench 90 1 "echo ran"\necho "bench returned $?"', budget=5)
    assert run.returncode == 0  # a skipped step is not a failure of the script, even a fatal one
    assert _marked(run.stdout) == ["=== 05_bench SKIPPED: out of budget", "=== done"]
    assert "bench returned 1" in run.stdout
    assert not (tmp_path / "out" / "logs" / "05_bench.log").exists()


def test_skip_leaves_named_steps_out(tmp_path):
    body = 'step 01_smoke 30 1 "echo smoke"\nstep 03_tests 30 1 "exit 7"\nstep 05_bench 30 0 "echo bench"'
    run = _run(tmp_path, body, settings='SKIP="03_tests 04_other"')
    assert run.returncode == 0, run.stdout + run.stderr
    marked = _marked(run.stdout)
    assert "=== 03_tests SKIPPED (SKIP)" in marked and any(m.startswith("=== 05_bench exit 0") for m in marked)
    assert not (tmp_path / "out" / "logs" / "03_tests.log").exists()


def test_devwheels_setup_is_sourced_unless_refused(tmp_path):
    wheels = tmp_path / ".devwheels"
    wheels.mkdir()
    (wheels / "setup.sh").write_text('echo installing\nWHEELS=plain\nexport WHEELS_EXPORTED=yes\n')
    body = 'echo "wheels=${WHEELS:-none} exported=${WHEELS_EXPORTED:-none}"\nstep 01_env 30 1 "echo backend=$COURSE_BACKEND"'
    run = _run(tmp_path, body, settings="CHECK_DEVWHEELS=1 CHECK_SMI_FIELDS=name,compute_cap")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "wheels=plain exported=yes" in run.stdout  # sourced in the script's own scope
    assert (tmp_path / "out" / "logs" / "00_setup.log").read_text() == "installing\n"
    assert (tmp_path / "out" / "logs" / "01_env.log").read_text() == "backend=gpu\n"
    assert run.stdout.startswith("FakeGPU --query-gpu=name,compute_cap --format=csv,noheader\n")
    run = _run(tmp_path, body)  # the default: sourced too (any step may import week 1's PyCUDA launchers)
    assert "wheels=plain exported=yes" in run.stdout
    run = _run(tmp_path, body, settings="CHECK_DEVWHEELS=0")
    assert "wheels=none exported=none" in run.stdout
    (wheels / "setup.sh").write_text("echo no such wheel; false\n")
    run = _run(tmp_path, body)
    assert run.returncode == 1 and run.stdout.startswith("setup failed\nno such wheel\n")
    assert _marked(run.stdout) == []


@pytest.mark.parametrize("script", CHECK_SCRIPTS, ids=lambda p: p.name)
def test_every_gpu_check_script_uses_the_library(script):
    text = script.read_text()
    assert 'source "$(dirname "${BASH_SOURCE[0]}")/gpu_check_steps.sh"' in text, \
        f"{script.name}: source tools/gpu_check_steps.sh for its setup and step runner"
    assert not re.search(r"^\s*step\(\)", text, re.M), f"{script.name}: defines its own step(); use the library's"
    assert "nvidia-smi --query-gpu" not in text, f"{script.name}: the library runs nvidia-smi (CHECK_SMI_FIELDS)"
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


def test_the_scripts_are_found():
    names = {p.name for p in CHECK_SCRIPTS}
    assert {"gpu_gemm_check.sh", "gpu_attention_hopper_check.sh", "gpu_attention_hopper_backward_check.sh",
            "gpu_fused_linear_check.sh", "gpu_aot_quant_check.sh"} <= names
    assert subprocess.run(["bash", "-n", str(LIBRARY)]).returncode == 0
