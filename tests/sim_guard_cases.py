"""Cases for course.sim_triton's bounds check, run by tests/test_sim_triton.py in a separate process.

Every case makes a Triton kernel address memory outside the tensors it was given. With the guard
they fail cleanly (and the cases expect that); without it they corrupt or crash the process that
runs them, which is why this file is not collected with the suite (its name does not start with
test_) and runs only under `pytest tests/sim_guard_cases.py`, in a subprocess.
"""
import math

import pytest
import torch

from course import runtime

pytestmark = pytest.mark.skipif(runtime.on_gpu(), reason="checks the Triton interpreter")


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def gather(x_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        idx = tl.load(idx_ptr + offs, mask=offs < n)
        tl.store(out_ptr + offs, tl.load(x_ptr + idx, mask=offs < n), mask=offs < n)

    @triton.jit
    def scatter(x_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        idx = tl.load(idx_ptr + offs, mask=offs < n)
        tl.store(out_ptr + idx, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    @triton.jit
    def count(idx_ptr, counts_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        idx = tl.load(idx_ptr + offs, mask=offs < n)
        tl.atomic_add(counts_ptr + idx, 1, mask=offs < n)

    @triton.jit
    def row_sums(x_ptr, out_ptr, stride, BLOCK: tl.constexpr, WIDE: tl.constexpr):
        row = tl.program_id(0)
        if WIDE:
            row = row.to(tl.int64)
        tl.store(out_ptr + tl.program_id(0), tl.sum(tl.load(x_ptr + row * stride + tl.arange(0, BLOCK))))

    return gather, scatter, count, row_sums


def _oob(call, *needles):
    from course.sim_triton import OutOfBoundsAccess

    with pytest.raises(Exception) as info:
        call()
    cause = info.value if isinstance(info.value, OutOfBoundsAccess) else info.value.__cause__
    assert isinstance(cause, OutOfBoundsAccess), repr(info.value)
    for needle in needles:
        assert needle in str(cause), str(cause)


def test_loads_stores_and_atomics_are_checked_against_the_tensors_given():
    gather, scatter, count, *_ = _kernels()
    x, out = torch.arange(8.0), torch.full((4,), math.nan)
    gather[(1,)](x, torch.tensor([7, 0, 3, 1]), out, 4, BLOCK=4)  # inside: fine
    assert out.tolist() == [7.0, 0.0, 3.0, 1.0]
    _oob(lambda: gather[(1,)](x, torch.tensor([0, 8, 1, 2]), out, 4, BLOCK=4),
         "out-of-bounds load", "1 of 4 active lanes", "1 element(s) past the end of `x_ptr` (8 elements)")
    _oob(lambda: gather[(1,)](x, torch.tensor([0, -3, 1, 2]), out, 4, BLOCK=4),
         "3 element(s) before the start of `x_ptr`")
    _oob(lambda: scatter[(1,)](torch.ones(4), torch.tensor([0, 1, 2, 4]), out, 4, BLOCK=4),
         "out-of-bounds store", "past the end of `out_ptr` (4 elements)")
    counts = torch.zeros(3, dtype=torch.int32)
    count[(1,)](torch.tensor([0, 2, 2, 9]), counts, 3, BLOCK=4)  # the lane at 9 is masked off
    assert counts.tolist() == [1, 0, 2]
    _oob(lambda: count[(1,)](torch.tensor([0, 2, 2, 3]), counts, 4, BLOCK=4), "out-of-bounds atomic")


def test_a_view_is_checked_against_its_own_elements_not_its_buffer():
    """x[2:6] of a bigger buffer: reading x[4] would read the neighbour's data, silently."""
    gather, *_ = _kernels()
    base = torch.arange(10.0)
    out = torch.empty(4)
    gather[(1,)](base[2:6], torch.tensor([3, 2, 1, 0]), out, 4, BLOCK=4)
    assert out.tolist() == [5.0, 4.0, 3.0, 2.0]
    _oob(lambda: gather[(1,)](base[2:6], torch.tensor([0, 1, 2, 4]), out, 4, BLOCK=4),
         "past the end of `x_ptr` (4 elements)")


def test_int32_offsets_that_wrap_past_2_to_the_31_are_caught():
    """Row 2 of rows 2^30 apart starts 2^31 elements in: int32 row * stride wraps negative."""
    *_, row_sums = _kernels()
    base = torch.empty(2**31 + 16, dtype=torch.uint8)  # address space only: pages never touched
    x = base.as_strided((3, 16), (2**30, 1))
    x.copy_(torch.arange(48, dtype=torch.uint8).view(3, 16))
    out = torch.zeros(3, dtype=torch.int32)
    row_sums[(3,)](x, out, 2**30, BLOCK=16, WIDE=True)
    assert out.tolist() == [120, 376, 632]
    _oob(lambda: row_sums[(3,)](x, out, 2**30, BLOCK=16, WIDE=False),
         "program 2", "before the start of `x_ptr`", "int32 overflow past 2^31")


