"""course.runtime's guard: Triton code made before the backend was chosen is refused clearly.

Without a GPU, `triton.jit` must make interpreted kernels (`TRITON_INTERPRET=1`, set by
course.runtime), and it decides when it decorates a function: a kernel decorated before, and
Triton's own library (`tl.max`, `tl.cdiv`: @triton.jit functions decorated when triton is first
imported), are GPU code. Launching a GPU kernel without a GPU fails inside Triton with "0 active
drivers ([]). There should only be one." Each case runs a learner's script in a fresh Python (the
order of imports is the point), in simulation (`COURSE_BACKEND=sim`), so on any machine.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

IMPORTS = "import torch\nimport triton\nimport triton.language as tl\n"
KERNEL = """
@triton.jit
def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    # tl.max and tl.cdiv are Triton library functions, themselves @triton.jit
    tl.store(out_ptr + offsets, x + 1 + 0 * tl.max(x, axis=0) + 0 * tl.cdiv(n, BLOCK), mask=mask)
"""
LAUNCH = """
x = torch.arange(8, dtype=torch.float32)
out = torch.empty_like(x)
add_one[(1,)](x, out, 8, BLOCK=8)
print("launched:", out.tolist())
"""
RUNTIME = "from course import runtime\n"


def run(script: str, folder: Path, **env_extra) -> subprocess.CompletedProcess:
    path = folder / "learner.py"  # a file: @triton.jit reads the kernel's source
    path.write_text(textwrap.dedent(script))
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM")}
    env.update(COURSE_BACKEND="sim", PYTHONPATH=str(ROOT), **env_extra)
    return subprocess.run([sys.executable, str(path)], env=env, cwd=folder,
                          capture_output=True, text=True, timeout=300)


def last_line(done: subprocess.CompletedProcess) -> str:
    return done.stderr.strip().splitlines()[-1]


def test_course_runtime_first_then_triton_runs_in_the_interpreter(tmp_path):
    done = run(RUNTIME + IMPORTS + KERNEL + LAUNCH, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "launched: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]" in done.stdout


def test_kernel_defined_before_course_runtime_is_refused_naming_it_with_the_fix(tmp_path):
    done = run(IMPORTS + KERNEL + RUNTIME + LAUNCH, tmp_path)
    assert done.returncode != 0
    message = last_line(done)
    assert message.startswith("RuntimeError: Triton kernel(s) __main__.add_one were defined (@triton.jit) "
                              "before course.runtime was imported")
    assert "`from course import runtime` above `import triton`" in message and "0 active drivers" in message


def test_triton_imported_before_course_runtime_is_refused_too(tmp_path):
    """Even with every kernel defined after: Triton's own tl.max and tl.cdiv are GPU code by then."""
    done = run(IMPORTS + RUNTIME + KERNEL + LAUNCH, tmp_path)
    assert done.returncode != 0
    assert last_line(done).startswith("RuntimeError: triton was imported before course.runtime was imported")


def test_interpreter_switched_on_before_python_starts_needs_no_order(tmp_path):
    done = run(IMPORTS + KERNEL + RUNTIME + LAUNCH, tmp_path, TRITON_INTERPRET="1")
    assert done.returncode == 0, done.stderr
    assert "launched: [1.0," in done.stdout


def test_without_the_course_triton_says_0_active_drivers(tmp_path):
    """The raw message README's troubleshooting quotes (no GPU visible, no interpreter)."""
    hide_gpu = "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = ''\n"
    done = run(hide_gpu + IMPORTS + KERNEL + LAUNCH, tmp_path)
    assert done.returncode != 0
    assert "0 active drivers ([]). There should only be one." in done.stderr
