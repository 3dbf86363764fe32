"""week1_cuda_python.vector_add: Numba and CUDA C (PyCUDA) vector add against torch.add."""
import pytest
import torch

from course import runtime
from course.check import assert_close, check_layouts, layouts, poisoned, random_tensor, sizes_1d_params, with_specials

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


@pytest.mark.parametrize("n", sizes_1d_params(block=va.THREADS_PER_BLOCK))
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


@pytest.mark.parametrize("layout", layouts(1))
@pytest.mark.parametrize("name", launchers())
def test_non_dense_layouts(name, layout):
    """a, b or out sliced out of a bigger buffer (unaligned: vec4 falls back) work; strided ones are refused."""
    n = runtime.pick(gpu=4099, sim=131)
    a, b = random_tensor(n, torch.float32, DEVICE), random_tensor(n, torch.float32, DEVICE)
    check_layouts(lambda a, b, out=None: getattr(va, name)(a, b, out=out), {"a": a, "b": b}, a + b, layout,
                  strided_ok=False)


# n % 4 = 1, 2, 3 (the float4 body leaves a scalar tail), below one float4, and one past a block of
# float4s and of the grid's last block: every path of vector_add_f32x4's tail.
VEC4_TAILS = [1, 2, 3, 5, 6, 7, 4 * 256 - 1, 4 * 256 + 1, 4 * 256 + 2, 4 * 256 * 9 + 3]


@pytest.mark.gpu(reason="CUDA C vector tails: nvcc compiles them on the CPU, only a GPU runs them")
@pytest.mark.parametrize("n", VEC4_TAILS)
def test_vec4_tails(n):
    a, b = random_tensor(n, torch.float32, DEVICE), random_tensor(n, torch.float32, DEVICE)
    out = poisoned(n, torch.float32, DEVICE)
    assert_close(va.vector_add_cuda_vec4(a, b, out=out), a + b)


@pytest.mark.slow  # 3 x 8 GiB of GPU memory
@pytest.mark.gpu(reason="2^31 + 5 float32 elements (24 GiB with b and out) need a real GPU's memory")
@pytest.mark.parametrize("name", LAUNCHERS)
def test_past_2_to_the_31_elements(name):
    """Element indices past 2^31 - 1: the kernels index with 64-bit integers (long long in CUDA C;
    Numba's cuda.grid is 64-bit), an int index would wrap and write below the buffer."""
    n = (1 << 31) + 5
    a = torch.rand(n, device=DEVICE)
    b = torch.rand(n, device=DEVICE)
    out = getattr(va, name)(a, b)
    for part in (slice(0, 4096), slice(n - 4096, n), slice(0, n, 1 << 20)):
        assert_close(out[part], a[part] + b[part])
    del a, b, out
    torch.cuda.empty_cache()


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
