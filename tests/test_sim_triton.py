"""course.sim_triton: what the course corrects in Triton's interpreter, checked.

* The crash guard: in simulation an out-of-bounds load or store (a missing or wrong mask) is a
  failed test that names the likely cause, never "Fatal Python error: Aborted" with no summary.
  The end-to-end check runs a learner's test file with unmasked kernels in a separate pytest
  process (so that a guard that failed could not take this run down with it), on any machine.
* The guard's parts (loads, stores and atomics; views inside a bigger buffer; int32 offsets that
  wrap): tests/sim_guard_cases.py, in another pytest process too, for the same reason.
* `programs`, which runs only some programs of a launch (simulation only).
* tl.fma rounds once in the interpreter, as on a GPU.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from course import runtime

ROOT = Path(__file__).resolve().parent.parent
sim_only = pytest.mark.skipif(runtime.on_gpu(), reason="checks the Triton interpreter; a GPU runs compiled kernels")

LEARNER_TESTS = '''
from course import runtime  # before triton: the interpreter in simulation
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASKED:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
    else:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))  # the bug: no mask on the last block


def copy(x, masked, block):
    out = torch.empty_like(x)
    copy_kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block, MASKED=masked)
    return out


def test_masked_copy():
    x = torch.arange(1000, dtype=torch.float32)
    assert torch.equal(copy(x, True, 1024), x)


def test_unmasked_tail_a_little_past_the_end():
    x = torch.arange(1000, dtype=torch.float32)  # unguarded: heap corruption, or nothing visible
    assert torch.equal(copy(x, False, 1024), x)


def test_unmasked_tail_far_past_the_end():
    x = torch.arange(1000, dtype=torch.float32)  # unguarded: the whole Python process aborts
    assert torch.equal(copy(x, False, 1 << 16), x)
'''


def test_an_unmasked_kernel_fails_its_test_and_names_the_mask(tmp_path):
    (tmp_path / "test_learner.py").write_text(textwrap.dedent(LEARNER_TESTS))
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM")}
    env.update(COURSE_BACKEND="sim", PYTHONPATH=str(ROOT), PYTHONFAULTHANDLER="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_learner.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert "Fatal Python error" not in output and done.returncode == 1, output[-3000:]
    assert "2 failed, 1 passed" in output, output[-3000:]
    assert "OutOfBoundsAccess: out-of-bounds load in Triton kernel `copy_kernel`" in output
    assert "past the end of `x_ptr` (1000 elements)" in output
    assert "Likely cause: a missing or wrong mask" in output


# ------------------------------------------------------------------------- the guard's parts
def test_guard_cases_fail_cleanly_in_a_separate_process():
    """tests/sim_guard_cases.py: loads, stores and atomics out of bounds, a view's neighbours in
    its buffer, int32 offsets wrapping past 2^31. Each access would corrupt or crash a process
    without the guard, so they run in another one: all must pass (each expects its clean error)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM")}
    env.update(COURSE_BACKEND="sim", PYTHONFAULTHANDLER="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/sim_guard_cases.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "3 passed" in output, output[-3000:]


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def fma(x_ptr, y_ptr, z_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.fma(tl.load(x_ptr + offs), tl.load(y_ptr + offs), tl.load(z_ptr + offs)))

    @triton.jit
    def who_ran(out_ptr):
        pid = tl.program_id(0)
        tl.store(out_ptr + pid, pid + 1000 * tl.num_programs(0))

    return fma, who_ran


@sim_only
def test_programs_runs_only_the_selected_programs_of_the_full_grid():
    from course import sim_triton

    _, who_ran = _kernels()
    out = torch.zeros(10, dtype=torch.int32)
    with sim_triton.programs(sim_triton.last_programs(3)):
        who_ran[(10,)](out)
    assert out.tolist() == [0] * 7 + [10007, 10008, 10009]  # program ids and num_programs of the full grid
    who_ran[(10,)](out)
    assert out.tolist() == [10000 + i for i in range(10)]


@sim_only
def test_a_block_mask_anded_with_a_scalar_comparison_loads_as_on_a_gpu():
    """`mask & (row > first)` (week 4's norm backwards): Triton 3.9's interpreter carried that bool
    as int32 data and refused it in tl.load; the course hands it on as a bool."""
    import triton
    import triton.language as tl

    @triton.jit
    def accumulate(out_ptr, n_rows):
        first = tl.program_id(0).to(tl.int64) * n_rows
        cols = tl.arange(0, 16)
        mask = cols < 10
        for row in range(first, first + n_rows):
            before = tl.load(out_ptr + cols, mask=mask & (row > first), other=0.0)  # the first row starts at 0
            tl.store(out_ptr + cols, before + 1, mask=mask)

    out = torch.full((16,), 100.0)
    accumulate[(1,)](out, 3)
    assert out.tolist() == [3.0] * 10 + [100.0] * 6


def rounded_once(exact, dtype):
    """The float of `dtype` nearest to the Fraction `exact` (ties to even): one rounding."""
    from fractions import Fraction

    near = dtype(float(exact))  # float64, then dtype: two roundings, so look at the neighbours too
    candidates = [near, np.nextafter(near, dtype(np.inf)), np.nextafter(near, dtype(-np.inf))]
    bits = {np.float32: np.uint32, np.float16: np.uint16}[dtype]
    return min(candidates, key=lambda c: (abs(Fraction(float(c)) - exact), int(np.array(c).view(bits)) & 1))


@sim_only
def test_fma_rounds_once_as_on_a_gpu():
    """Two float32 roundings (the interpreter's x * y + z) and one (a GPU's fma) differ here."""
    from fractions import Fraction

    fma, _ = _kernels()
    x = torch.tensor([1 + 2**-23, 1 + 2**-23, -(1 + 2**-23), 3.0], dtype=torch.float32)
    y = torch.tensor([2**-24 * (1 - 2**-23), 2**-24 * (1 - 2**-23), 2**-24 * (1 - 2**-23), 1 / 3], dtype=torch.float32)
    z = torch.tensor([1 + 2**-23, 1.0, -(1 + 2**-23), -1.0], dtype=torch.float32)
    out = torch.empty(4)
    fma[(1,)](x, y, z, out, BLOCK=4)
    for i in range(4):
        exact = Fraction(float(x[i])) * Fraction(float(y[i])) + Fraction(float(z[i]))
        assert float(out[i]) == float(rounded_once(exact, np.float32)), i
    assert float(out[0]) == 1 + 2**-23 and float(x[0] * y[0] + z[0]) == 1 + 2**-22  # a tie broken to even
    assert float(out[3]) != 0.0 == float(x[3] * y[3] + z[3])  # 3 * fl(1/3) - 1: the residual, not 0


def test_fma_helper_matches_exact_rounding():
    from fractions import Fraction

    from course.sim_triton import fma_round_once

    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float16):
        x, y = (rng.standard_normal(400).astype(dtype) for _ in range(2))
        # z close to -x*y: cancellation, where a rounded product would show most
        z = (-(x.astype(np.float64) * y.astype(np.float64)) * (1 + rng.standard_normal(400) * 1e-3)).astype(dtype)
        got = fma_round_once(x, y, z)
        for i in range(400):
            exact = Fraction(float(x[i])) * Fraction(float(y[i])) + Fraction(float(z[i]))
            assert got[i] == rounded_once(exact, dtype), (dtype, i, got[i], rounded_once(exact, dtype))


# ------------------------------------------- the private Triton names the corrections depend on
# course.sim_triton wraps private methods of Triton's interpreter. Each name is pinned here: on a
# Triton release that renames one, this test names it (and the course warns which correction is off).
PRIVATE_NAMES = {  # triton.runtime.interpreter.<name>: the parameters read by name
    "InterpreterBuilder.create_masked_load": ("ptrs", "mask"),
    "InterpreterBuilder.create_masked_store": ("ptrs", "mask"),
    "InterpreterBuilder.create_atomic_rmw": ("ptr", "mask"),
    "InterpreterBuilder.create_atomic_cas": ("ptr",),
    "InterpreterBuilder.set_grid_idx": (),
    "InterpreterBuilder.create_fma": (),
    "InterpreterBuilder.create_get_program_id": (),
    "InterpreterBuilder.create_get_num_programs": (),
    "GridExecutor._init_args_hst": (),
    "GridExecutor.__call__": (),
    "TensorHandle": (),
}


@sim_only
def test_the_private_interpreter_names_the_corrections_wrap_exist_here():
    import inspect

    import triton.runtime.interpreter as interpreter

    from course import sim_triton

    for dotted, parameters in PRIVATE_NAMES.items():
        owner, _, name = dotted.rpartition(".")
        target = getattr(getattr(interpreter, owner) if owner else interpreter, name, None)
        assert target is not None, f"triton.runtime.interpreter.{dotted} is gone: course/sim_triton.py wraps it"
        if parameters:
            found = inspect.signature(target).parameters
            assert all(p in found for p in parameters), (dotted, list(found))
    assert sim_triton._missing(interpreter) == []
    assert sim_triton.LOST == {}, sim_triton.LOST  # every correction is on with this Triton
    assert getattr(interpreter, "_course_patched", False)


class _Recorder:
    """Stands in for course.sim_triton._check: records (kind, pointer, mask)."""

    def __init__(self):
        self.calls = []

    def __call__(self, kind, ptrs, mask=None):
        self.calls.append((kind, ptrs, mask))


def test_the_memory_wrappers_forward_every_signature_and_read_pointer_and_mask_by_name(monkeypatch):
    from course import sim_triton

    class Triton36:  # triton 3.6: cache_modifier, eviction_policy
        def create_masked_load(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile):
            return ("load", ptrs, mask, other, cache_modifier, eviction_policy, is_volatile)

        def create_masked_store(self, ptrs, value, mask, cache_modifier, eviction_policy):
            return ("store", ptrs, value, mask, cache_modifier, eviction_policy)

        def create_atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope):
            return ("rmw", ptr, mask)

        def create_atomic_cas(self, ptr, cmp, val, sem, scope):
            return ("cas", ptr)

    class Triton39:  # triton 3.9: one cache_policy
        create_atomic_rmw, create_atomic_cas = Triton36.create_atomic_rmw, Triton36.create_atomic_cas

        def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
            return ("load", ptrs, mask, other, cache_policy, is_volatile)

        def create_masked_store(self, ptrs, value, mask, cache_policy):
            return ("store", ptrs, value, mask, cache_policy)

    record = _Recorder()
    monkeypatch.setattr(sim_triton, "_check", record)
    for builder in (Triton36, Triton39):
        assert sim_triton._wrap_memory_hooks(builder) == {}
        b = builder()
        if builder is Triton36:
            assert b.create_masked_load("P", "M", 0, "cm", "ep", False) == ("load", "P", "M", 0, "cm", "ep", False)
            assert b.create_masked_store("P", "V", "M", "cm", "ep") == ("store", "P", "V", "M", "cm", "ep")
        else:
            assert b.create_masked_load("P", "M", 0, "cp", False) == ("load", "P", "M", 0, "cp", False)
            assert b.create_masked_store("P", "V", mask="M", cache_policy="cp") == ("store", "P", "V", "M", "cp")
        assert b.create_atomic_rmw("add", ptr="Q", val=1, mask="N", sem=0, scope=0) == ("rmw", "Q", "N")
        assert b.create_atomic_cas("R", 0, 1, 0, 0) == ("cas", "R")
        assert record.calls[-4:] == [("load", "P", "M"), ("store", "P", "M"), ("atomic", "Q", "N"),
                                     ("atomic compare-and-swap", "R", None)]


def test_a_hook_this_triton_lacks_leaves_the_original_and_is_named(monkeypatch):
    from course import sim_triton

    class Renamed:
        def create_masked_load(self, pointers, m, *rest):  # parameters renamed in some release
            return "original"

        def create_masked_store(self, ptrs, value, mask, cache_policy):
            return "store"

    monkeypatch.setattr(sim_triton, "_check", _Recorder())
    lost = sim_triton._wrap_memory_hooks(Renamed)
    assert set(lost) == {"create_masked_load", "create_atomic_rmw", "create_atomic_cas"}
    assert "no parameter named ptrs or ptr and mask" in lost["create_masked_load"]
    assert lost["create_atomic_rmw"] == "absent"
    assert Renamed().create_masked_load(1, 2) == "original"  # left as Triton made it, not broken


def test_an_interpreter_without_the_hooks_warns_which_corrections_are_off(monkeypatch):
    """A Triton whose interpreter lacks the private names: the course still imports and runs
    kernels, and one RuntimeWarning names each correction that is off and why."""
    import types

    from course import sim_triton

    class InterpreterBuilder:  # no memory hooks, no fma, no program ids
        def set_grid_idx(self, x, y, z):
            pass

    class GridExecutor:
        def __init__(self, fn, arg_names, grid):
            pass

        def __call__(self, *args, **kwargs):
            return "ran"

    fake = types.SimpleNamespace(InterpreterBuilder=InterpreterBuilder, GridExecutor=GridExecutor)
    saved = dict(sim_triton.LOST)
    monkeypatch.setattr(sim_triton, "_PATCHED", sim_triton._PATCHED)
    monkeypatch.setattr(sim_triton, "_INSTALLED", True)
    try:
        with pytest.warns(RuntimeWarning) as caught:
            sim_triton._patch(fake)
        message = str(caught[0].message)
        assert "OFF in simulation" in message and "supported range" in message
        assert "bounds check" in message and "GridExecutor._init_args_hst" in message
        assert "one-rounding tl.fma" in message and "InterpreterBuilder.create_fma" in message
        assert "programs(select)" in message
        assert GridExecutor(None, [], (1,))() == "ran"  # launches still run, unchecked
        with pytest.raises(RuntimeError, match="programs is off with this Triton"):
            with sim_triton.programs(sim_triton.last_programs(1)):
                pass
    finally:
        sim_triton.LOST.clear()
        sim_triton.LOST.update(saved)
