"""week1_cuda_python.vector_add: Numba and CUDA C (PyCUDA) vector add against torch.add."""
import pytest
import torch

from course import runtime
from course.check import assert_close, poisoned, random_tensor, sizes_1d, with_specials

va = runtime.lesson("week1_cuda_python.vector_add")

# PyCUDA launches need a driver: they run on a GPU and are skipped (with the reason) elsewhere.
# Their input checks run before any launch, so those tests run everywhere.
LAUNCHERS = ["vector_add_numba", "vector_add_numba_grid_stride", "vector_add_cuda", "vector_add_cuda_vec4"]
CUDA_C = {"vector_add_cuda", "vector_add_cuda_vec4"}
DTYPES = {name: va.CUDA_C_DTYPES if name in CUDA_C else va.NUMBA_DTYPES for name in LAUNCHERS}
DEVICE = runtime.DEVICE


def launchers(gpu_only_marked=True):
    return [pytest.param(name, marks=pytest.mark.gpu if gpu_only_marked and name in CUDA_C else ())
            for name in LAUNCHERS]



def cases():
    return [pytest.param(name, dtype, marks=pytest.mark.gpu if name in CUDA_C else (),
                         id=f"{name}-{str(dtype)[6:]}")
            for name in LAUNCHERS for dtype in DTYPES[name]]


@pytest.mark.parametrize("n", sizes_1d(block=va.THREADS_PER_BLOCK))
@pytest.mark.parametrize("name, dtype", cases())
def test_matches_torch(name, dtype, n):
    a, b = random_tensor(n, dtype, DEVICE), random_tensor(n, dtype, DEVICE)
    out = poisoned(n, dtype, DEVICE)
    result = getattr(va, name)(a, b, out=out)
    assert result is out, "the launcher must write into the `out` it was given"
    assert_close(out, a + b)


@pytest.mark.parametrize("name", launchers())
def test_allocates_output_for_any_shape(name):
    a, b = random_tensor((37, 129), torch.float32, DEVICE), random_tensor((37, 129), torch.float32, DEVICE)
    assert_close(getattr(va, name)(a, b), a + b)


@pytest.mark.parametrize("name", launchers())
def test_nan_and_inf_propagate_like_torch(name):
    a = with_specials(random_tensor(4099, torch.float32, DEVICE))
    b = with_specials(random_tensor(4099, torch.float32, DEVICE)).flip(0).contiguous()
    assert_close(getattr(va, name)(a, b), a + b)


@pytest.mark.parametrize("name", launchers())
def test_empty_input_gives_empty_output(name):
    a = torch.empty(0, device=DEVICE)
    assert getattr(va, name)(a, a.clone()).shape == (0,)


@pytest.mark.gpu
def test_vec4_handles_unaligned_views():
    base_a, base_b = random_tensor(4101, torch.float32, DEVICE), random_tensor(4101, torch.float32, DEVICE)
    a, b = base_a[1:4098], base_b[3:4100]  # 4097 elements starting 4 and 12 bytes in
    assert_close(va.vector_add_cuda_vec4(a, b), a + b)


def bad_inputs():
    ok = lambda n=8: torch.ones(n, device=DEVICE)  # noqa: E731
    yield "not a tensor", TypeError, "must be a torch.Tensor", lambda: ([1.0] * 8, ok(), None)
    yield "dtype mismatch", TypeError, "dtype", lambda: (ok(), ok().double(), None)
    yield "unsupported dtype", TypeError, "expected one of", lambda: (ok().bool(), ok().bool(), None)
    yield "shape mismatch", ValueError, "shapes must match", lambda: (ok(8), ok(9), None)
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(16)[::2], ok(8), None)
    yield "wrong device", ValueError, "kernels run on", lambda: (torch.ones(8, device="meta"), ok(), None)
    yield "out wrong shape", ValueError, "out has shape", lambda: (ok(), ok(), ok(9))
    yield "out wrong dtype", TypeError, "out has dtype", lambda: (ok(), ok(), ok().half())


@pytest.mark.parametrize("name", launchers(gpu_only_marked=False))
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(name, case, error, message, make):
    a, b, out = make()
    with pytest.raises(error, match=message):
        getattr(va, name)(a, b, out=out)
