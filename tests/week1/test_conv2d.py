"""week1_cuda_python.conv2d: every rung against F.conv2d computed in float64."""
import math

import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, check_layouts, layouts, poisoned, random_tensor, sweep, with_specials

cv = runtime.lesson("week1_cuda_python.conv2d")

DEVICE = runtime.DEVICE
U = 2.0**-24  # fp32 unit roundoff
CUDA_C = set(cv.CUDA_C_LAUNCHERS)
LAUNCHERS = list(cv.NUMBA_LAUNCHERS) + list(cv.CUDA_C_LAUNCHERS)


def launchers(names=LAUNCHERS, gpu_only_marked=True):
    return [pytest.param(name, marks=pytest.mark.gpu if gpu_only_marked and name in CUDA_C else ())
            for name in names]


def reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    k = w.shape[0]
    exact = F.conv2d(x.double()[None, None], w.double()[None, None], padding=k // 2)[0, 0]
    return exact.float()


def filter_for(k: int) -> torch.Tensor:
    """A random K x K filter, the same in every test with this K: the constant-memory Numba rungs
    compile one kernel per filter (its values are part of the code: ~1 s each on a GPU), so
    repeating filters across tests saves compiles. test_reused_with_new_filters_of_the_same_size
    changes filters on purpose."""
    return torch.randn((k, k), generator=torch.Generator().manual_seed(1000 + k)).to(DEVICE)


def atol_for(k: int) -> float:
    # K^2 fp32 FMAs on unit normals: the rounding errors of the running sum grow like
    # ~0.2 u K^2 (standard deviation); 8 u K^2 is ~40 of those, while a missing tap is
    # off by O(1) and an unwritten output is NaN.
    return 8 * U * k * k


# (H, W), K: one pixel; tails of the 32 x 32 tile on both axes; K larger than the image;
# K = 1 (a scaling); the largest K the constant buffer holds.
CASES = runtime.pick(
    gpu=sweep([((1, 1), 1), ((33, 37), 5), ((3, 2), 7), ((6, 9), 15), ((257, 513), 3), ((50, 70), 13)],
              [((5, 7), 3), ((1000, 1001), 7), ((100, 100), 15), ((2048, 63), 9), ((1, 300), 5), ((300, 1), 11)],
              unpack=True),
    sim=[((1, 1), 1), ((5, 7), 3), ((33, 37), 5), ((3, 2), 7), ((6, 9), 15)])


@pytest.mark.parametrize("shape, k", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("name", launchers())
def test_matches_torch(name, shape, k):
    x = random_tensor(shape, torch.float32, DEVICE)
    w = filter_for(k)
    out = poisoned(shape, torch.float32, DEVICE)
    assert getattr(cv, name)(x, w, out=out) is out
    assert_close(out, reference(x, w), atol=atol_for(k))


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # Inf - Inf in the simulator's NumPy
@pytest.mark.parametrize("name", launchers())
def test_nan_and_inf_propagate_like_torch(name):
    x = with_specials(random_tensor((19, 35), torch.float32, DEVICE))
    # +-max(fp32) times a tap overflows at a point of the fp32 sum that depends on the order
    # of the taps, where float64 would not overflow at all: keep NaN, +-Inf and -0.0.
    x[x.abs() == torch.finfo(torch.float32).max] = 1.5
    w = filter_for(3)
    assert_close(getattr(cv, name)(x, w), reference(x, w), atol=atol_for(3))


@pytest.mark.parametrize("name", launchers())
def test_empty_image(name):
    w = random_tensor((3, 3), torch.float32, DEVICE)
    assert getattr(cv, name)(torch.empty(0, 5, device=DEVICE), w).shape == (0, 5)


@pytest.mark.parametrize("name", launchers(cv.ANY_K_LAUNCHERS))
def test_naive_rungs_take_any_odd_k(name):
    x, w = random_tensor((4, 5), torch.float32, DEVICE), random_tensor((17, 17), torch.float32, DEVICE)
    assert_close(getattr(cv, name)(x, w), reference(x, w), atol=atol_for(17))


@pytest.mark.parametrize("name", launchers([n for n in LAUNCHERS if n not in cv.ANY_K_LAUNCHERS],
                                           gpu_only_marked=False))
def test_constant_memory_rungs_refuse_k_above_max(name):
    x, w = torch.ones(4, 5, device=DEVICE), torch.ones(cv.MAX_K + 2, cv.MAX_K + 2, device=DEVICE)
    with pytest.raises(ValueError, match=f"up to {cv.MAX_K} x {cv.MAX_K}"):
        getattr(cv, name)(x, w)


@pytest.mark.gpu(reason="the torch variant of the benchmark runs cuDNN with TF32 off")
def test_torch_variant_is_true_fp32():
    x = random_tensor((64, 64), torch.float32, DEVICE)
    w = random_tensor((7, 7), torch.float32, DEVICE)
    assert_close(cv.conv2d_torch(x, w), reference(x, w), atol=atol_for(7))
    assert torch.backends.cudnn.allow_tf32 is True  # the setting is restored


@pytest.mark.gpu(reason="CUDA C: constant memory is rewritten for each call")
def test_cuda_const_sees_each_new_filter():
    x = random_tensor((40, 40), torch.float32, DEVICE)
    w1, w2 = random_tensor((5, 5), torch.float32, DEVICE), random_tensor((3, 3), torch.float32, DEVICE)
    first, second = cv.conv2d_cuda_const(x, w1), cv.conv2d_cuda_tiled(x, w2)
    assert_close(first, reference(x, w1), atol=atol_for(5))
    assert_close(second, reference(x, w2), atol=atol_for(3))


@pytest.mark.parametrize("name", launchers())
def test_reused_with_new_filters_of_the_same_size(name):
    """The constant-memory rungs keep a filter between calls (compiled into the Numba kernel,
    uploaded to `c_filter` for CUDA C): each call must see its own filter, also when the
    shape, and so any cache key made of the shape, stays the same."""
    x = random_tensor((40, 35), torch.float32, DEVICE)
    filters = [random_tensor((5, 5), torch.float32, DEVICE) for _ in range(2)]
    for w in (*filters, filters[0], filters[0] * -2.0):
        assert_close(getattr(cv, name)(x, w), reference(x, w), atol=atol_for(5))


@pytest.mark.parametrize("layout", layouts(2))
@pytest.mark.parametrize("name", launchers())
def test_non_dense_layouts(name, layout):
    """x, w or out sliced out of a bigger buffer work; strided or transposed ones are refused."""
    x, w = random_tensor((37, 45), torch.float32, DEVICE), filter_for(5)
    check_layouts(lambda x, w, out=None: getattr(cv, name)(x, w, out=out), {"x": x, "w": w}, reference(x, w),
                  layout, strided_ok=False, atol=atol_for(5))


def test_sanitizer_cases_cover_every_kernel():
    assert len(cv.SANITIZER_CASES) == len(LAUNCHERS)
    assert all(callable(case) for case in cv.SANITIZER_CASES.values())


def bad_inputs():
    ok = lambda *s: torch.ones(*s, device=DEVICE)  # noqa: E731
    yield "x not a tensor", TypeError, "x must be a torch.Tensor", lambda: ([[1.0]], ok(3, 3), None)
    yield "x float64", TypeError, "x has dtype float64", lambda: (ok(4, 4).double(), ok(3, 3), None)
    yield "w float64", TypeError, "w has dtype float64", lambda: (ok(4, 4), ok(3, 3).double(), None)
    yield "x 3-D", ValueError, "x must have 2 dimension", lambda: (ok(1, 4, 4), ok(3, 3), None)
    yield "w not square", ValueError, "square K x K", lambda: (ok(4, 4), ok(3, 5), None)
    yield "K even", ValueError, "K must be odd", lambda: (ok(4, 4), ok(4, 4), None)
    yield "K zero", ValueError, "K must be odd", lambda: (ok(4, 4), ok(0, 0), None)
    yield "x non-contiguous", ValueError, "not contiguous", lambda: (ok(4, 6).t(), ok(3, 3), None)
    yield "x on another device", ValueError, "kernels run on", lambda: (torch.ones(4, 4, device="meta"), ok(3, 3), None)
    yield "out shape", ValueError, "out has shape", lambda: (ok(4, 4), ok(3, 3), ok(4, 5))
    yield "out dtype", TypeError, "out has dtype", lambda: (ok(4, 4), ok(3, 3), ok(4, 4).half())


@pytest.mark.parametrize("name", launchers(gpu_only_marked=False))
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(name, case, error, message, make):
    x, w, out = make()
    with pytest.raises(error, match=message):
        getattr(cv, name)(x, w, out=out)


def test_cost_model_in_the_benchmark():
    from week1_cuda_python import conv2d as solution  # the benchmark lives with the solution only

    bench = next(b for b in solution.BENCHMARKS if b.name == "conv2d_week1")
    assert bench.flops((100, 5)) == 2 * 25 * 100 * 100
    assert bench.bytes((100, 5)) == 8 * 100 * 100
    # intensity K^2 / 4: below the H100's ~17 FLOP/byte ridge up to K = 7, above from K = 9
    assert [k for k in (3, 5, 7, 9, 15) if bench.flops((1, k)) / bench.bytes((1, k)) > 17] == [9, 15]
    assert math.isclose(bench.flops((1, 15)) / bench.bytes((1, 15)), 225 / 4)
