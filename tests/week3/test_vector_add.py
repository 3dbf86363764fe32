"""week3_triton_kernels.vector_add: the Triton vector add against torch.add."""
import pytest
import torch

from course import runtime
from course.check import (INT32_LIMIT, assert_close, check_layouts, dtype_params, huge, last_programs, layouts,
                          past_int32_marks, poisoned, random_tensor, sizes_1d_params, with_specials)

va = runtime.lesson("week3_triton_kernels.vector_add")
DEVICE = runtime.DEVICE


@pytest.mark.parametrize("n", sizes_1d_params(block=va.BLOCK_SIZE))
@pytest.mark.parametrize("dtype", dtype_params(va.DTYPES))
def test_matches_torch(dtype, n):
    a, b = random_tensor(n, dtype, DEVICE), random_tensor(n, dtype, DEVICE)
    out = poisoned(n, dtype, DEVICE)
    assert va.vector_add(a, b, out=out) is out, "the launcher must write into the `out` it was given"
    assert_close(out, a + b)


def test_allocates_output_for_any_shape():
    a, b = random_tensor((5, 33, 7), torch.float16, DEVICE), random_tensor((5, 33, 7), torch.float16, DEVICE)
    assert_close(va.vector_add(a, b), a + b)


@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.bfloat16]))
def test_nan_and_inf_propagate_like_torch(dtype):
    a = with_specials(random_tensor(3001, dtype, DEVICE))
    b = with_specials(random_tensor(3001, dtype, DEVICE)).flip(0).contiguous()
    assert_close(va.vector_add(a, b), a + b)


@pytest.mark.parametrize("layout", layouts(2))
def test_non_dense_layouts(layout):
    """a, b or out sliced out of a bigger buffer work; strided or transposed ones are refused
    (the kernel indexes one dense block)."""
    a, b = random_tensor((33, 70), torch.float32, DEVICE), random_tensor((33, 70), torch.float32, DEVICE)
    check_layouts(lambda a, b, out=None: va.vector_add(a, b, out=out), {"a": a, "b": b}, a + b, layout,
                  strided_ok=False)


@pytest.mark.parametrize("n", [pytest.param(INT32_LIMIT + 1000, marks=past_int32_marks())])
def test_offsets_past_2_to_the_31(n):
    """pid * BLOCK_SIZE passes 2^31 in the last programs: int32 offsets would wrap negative.
    In simulation only the last two programs run (course.check.last_programs), on a GPU all."""
    a, b = huge(n, torch.float16, DEVICE), huge(n, torch.float16, DEVICE)
    out = huge(n, torch.float16, DEVICE, fill="poison")
    with last_programs(2):
        va.vector_add(a, b, out=out)
    assert_close(out[-2000:], a[-2000:] + b[-2000:])


def test_empty_input_gives_empty_output():
    a = torch.empty(0, device=DEVICE)
    assert va.vector_add(a, a.clone()).shape == (0,)


def bad_inputs():
    ok = lambda n=8: torch.ones(n, device=DEVICE)  # noqa: E731
    yield "not a tensor", TypeError, "must be a torch.Tensor", lambda: (ok(), [1.0] * 8, None)
    yield "dtype mismatch", TypeError, "dtype", lambda: (ok(), ok().half(), None)
    yield "integer dtype", TypeError, "expected one of", lambda: (ok().int(), ok().int(), None)
    yield "shape mismatch", ValueError, "shapes must match", lambda: (ok(8), ok(1), None)
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(8), ok(16)[::2], None)
    yield "wrong device", ValueError, "kernels run on", lambda: (ok(), torch.ones(8, device="meta"), None)
    yield "out wrong shape", ValueError, "out has shape", lambda: (ok(), ok(), ok(7))


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make):
    a, b, out = make()
    with pytest.raises(error, match=message):
        va.vector_add(a, b, out=out)
