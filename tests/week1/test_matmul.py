"""week1_cuda_python.matmul: every rung of the fp32 matmul ladder against a float64 reference.

Tolerance (why not check.py's fp32 default): each output is a sum of K products computed in
fp32. Every addition rounds the running sum (size ~ sqrt(k) for unit-normal inputs) by up to
u = 2^-24 of itself, and those errors have random signs, so the total error is about
u * K / sqrt(2) (one standard deviation); summation order (per thread, per tile, per warp)
changes which errors occur, not their size. atol = 8 u K is about 11 such deviations: a
correct kernel never reaches it over millions of outputs, while a dropped or doubled product
(an error of order 1) or an unwritten output (NaN poison) fails by orders of magnitude.
rtol covers the final rounding of large outputs to fp32 (a few ulps).
"""
import math

import pytest
import torch

from course import runtime
from course.check import assert_close, check_layouts, layouts, poisoned, random_tensor, sweep

mm = runtime.lesson("week1_cuda_python.matmul")

DEVICE = runtime.DEVICE
U = 2.0**-24  # fp32 unit roundoff
NUMBA = list(mm.NUMBA_LAUNCHERS)
CUDA_C = list(mm.CUDA_C_LAUNCHERS)


def launchers(gpu_only_marked=True):
    return [pytest.param(name, marks=pytest.mark.gpu if gpu_only_marked and name in CUDA_C else ())
            for name in NUMBA + CUDA_C]



def check(c, a, b):
    k = a.shape[1]
    assert_close(c.double(), (a.double() @ b.double()), rtol=4 * U, atol=8 * U * max(k, 1), name="C")


# (M, N, K): ones, primes, and sizes that straddle every rung's tile (16, 32, 64, 128) on a
# GPU; in simulation (each thread a Python thread) only shapes of a block or two.
SHAPES = runtime.pick(
    gpu=sweep([(1, 1, 1), (31, 17, 5), (127, 129, 131), (257, 511, 67)],
              [(1, 129, 7), (128, 128, 128), (1000, 1024, 999), (2048, 1024, 4096)]),
    sim=[(1, 1, 1), (17, 33, 9), (5, 3, 19)],
)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", launchers())
def test_matches_float64_reference(name, shape):
    m, n, k = shape
    a, b = random_tensor((m, k), torch.float32, DEVICE), random_tensor((k, n), torch.float32, DEVICE)
    out = poisoned((m, n), torch.float32, DEVICE)
    result = getattr(mm, name)(a, b, out=out)
    assert result is out, "the launcher must write into the `out` it was given"
    check(out, a, b)


@pytest.mark.parametrize("name", launchers())
def test_allocates_output(name):
    a, b = random_tensor((9, 6), torch.float32, DEVICE), random_tensor((6, 11), torch.float32, DEVICE)
    c = getattr(mm, name)(a, b)
    assert c.shape == (9, 11) and c.dtype == torch.float32
    check(c, a, b)


@pytest.mark.parametrize("name", launchers())
def test_nan_and_inf_propagate_like_torch(name):
    m, n, k = 7, 5, 6
    a, b = random_tensor((m, k), torch.float32, DEVICE), random_tensor((k, n), torch.float32, DEVICE)
    a[0, 0] = math.nan    # row 0 of C: all NaN
    a[2, 1] = math.inf    # row 2: +-Inf (by the sign of b[1, j]) ...
    b[1, 3] = -math.inf   # ... and b[1, 3] makes C[:, 3] +-Inf, C[2, 3] = inf * -inf = -Inf
    b[4, 4] = math.inf
    a[3, 4] = -math.inf   # C[3, 4] meets -inf * inf
    c = getattr(mm, name)(a, b)
    expected = a.double().cpu() @ b.double().cpu()
    assert_close(c.double(), expected.to(c.device), rtol=4 * U, atol=8 * U * k, name="C")


@pytest.mark.parametrize("name", launchers())
@pytest.mark.parametrize("shape", [(0, 4, 3), (4, 0, 3), (3, 4, 0)], ids=["M=0", "N=0", "K=0"])
def test_empty_dimensions(name, shape):
    m, n, k = shape
    a, b = torch.randn(m, k, device=DEVICE), torch.randn(k, n, device=DEVICE)
    c = getattr(mm, name)(a, b, out=poisoned((m, n), torch.float32, DEVICE))
    assert c.shape == (m, n)
    assert_close(c, torch.zeros(m, n, device=DEVICE))  # K = 0: empty sums are 0, as torch gives


@pytest.mark.parametrize("layout", layouts(2))
@pytest.mark.parametrize("name", launchers())
def test_non_dense_layouts(name, layout):
    """a, b or out sliced out of a bigger buffer work (the float4 rungs pad unaligned operands);
    strided, transposed and column-sliced ones are refused: these kernels index dense rows."""
    m, n, k = runtime.pick(gpu=(67, 45, 33), sim=(9, 7, 5))
    a, b = random_tensor((m, k), torch.float32, DEVICE), random_tensor((k, n), torch.float32, DEVICE)
    want = (a.double() @ b.double()).float()
    check_layouts(lambda a, b, out=None: getattr(mm, name)(a, b, out=out), {"a": a, "b": b}, want, layout,
                  strided_ok=False, rtol=4 * U, atol=8 * U * k)


@pytest.mark.gpu
@pytest.mark.parametrize("name", CUDA_C)
def test_unaligned_views(name):
    """Rows of a contiguous view that starts 4 bytes into its storage: float4 would fault."""
    base = random_tensor(1 + 64 * 48, torch.float32, DEVICE)
    a = base[1:].view(64, 48)
    b = random_tensor((48, 40), torch.float32, DEVICE)
    out = torch.empty(1 + 64 * 40, device=DEVICE)[1:].view(64, 40)
    getattr(mm, name)(a, b, out=out)
    check(out, a, b)


def bad_inputs():
    ok = lambda *s: torch.ones(*s, device=DEVICE)  # noqa: E731
    yield "a not a tensor", TypeError, "a must be a torch.Tensor", lambda: ([[1.0]], ok(1, 1), None)
    yield "a float64", TypeError, "a has dtype float64", lambda: (ok(2, 3).double(), ok(3, 2), None)
    yield "b float16", TypeError, "b has dtype float16", lambda: (ok(2, 3), ok(3, 2).half(), None)
    yield "a 1-D", ValueError, "a must have 2 dimension", lambda: (ok(3), ok(3, 2), None)
    yield "b 3-D", ValueError, "b must have 2 dimension", lambda: (ok(2, 3), ok(1, 3, 2), None)
    yield "inner dims", ValueError, "inner dimensions must match", lambda: (ok(2, 3), ok(4, 2), None)
    yield "a transposed", ValueError, "a is not contiguous", lambda: (ok(3, 2).t(), ok(3, 2), None)
    yield "wrong device", ValueError, "kernels run on", lambda: (torch.ones(2, 3, device="meta"), ok(3, 2), None)
    yield "out wrong shape", ValueError, "out has shape", lambda: (ok(2, 3), ok(3, 2), ok(2, 3))
    yield "out wrong dtype", TypeError, "out has dtype", lambda: (ok(2, 3), ok(3, 2), ok(2, 2).double())


@pytest.mark.parametrize("name", launchers(gpu_only_marked=False))
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(name, case, error, message, make):
    a, b, out = make()
    with pytest.raises(error, match=message):
        getattr(mm, name)(a, b, out=out)


def test_torch_reference_restores_tf32_setting():
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        a, b = random_tensor((8, 8), torch.float32, DEVICE), random_tensor((8, 8), torch.float32, DEVICE)
        check(mm.torch_matmul_fp32(a, b), a, b)
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
