"""week1_cuda_python.reduction: atomic, shared-tree and warp-shuffle sums against torch.

Two kinds of check. Integer-valued float32 inputs (|x| <= 100) have sums that fp32 holds
exactly while every partial sum stays below 2^24, which these sizes do by orders of
magnitude: there the answer must be exact, whatever order the atomics land in, so a
dropped or doubled element fails. For normal random inputs the order changes the rounding:
a sum built from additions at most D deep (elements per thread, then log2 of the block,
then the atomics) is off by at most about D * u * sum|x|; atol = 4 u log2(n + 1) sum|x|
covers the tree's depth, and sequential atomics whose rounding errors have random signs
(about u * n for unit normals, i.e. ~1.25 u sum|x|) sit far inside it.
"""
import math

import pytest
import torch

from course import runtime
from course.check import assert_close, check_layouts, layouts, random_tensor, sizes_1d

rd = runtime.lesson("week1_cuda_python.reduction")

DEVICE = runtime.DEVICE
U = 2.0**-24
CUDA_C = {"sum_warp_shuffle"}
LAUNCHERS = ["sum_atomic", "sum_shared_tree", "sum_warp_shuffle"]
# In simulation every thread is a Python thread: the sizes that catch indexing bugs only.
SIZES = runtime.pick(gpu=sizes_1d(block=rd.THREADS_PER_BLOCK) + [(1 << 26) + 3],
                     sim=[0, 1, 7, rd.THREADS_PER_BLOCK + 1])
SLOW_SIZES = {65537, (1 << 22) + 5, (1 << 26) + 3}  # the default run keeps 1_000_003 (and the contention test)


def sizes(nonzero: bool = False) -> list:
    return [pytest.param(n, marks=pytest.mark.slow if n in SLOW_SIZES else ()) for n in SIZES if n or not nonzero]


def launchers(gpu_only_marked=True):
    return [pytest.param(n, marks=pytest.mark.gpu if gpu_only_marked and n in CUDA_C else ()) for n in LAUNCHERS]


@pytest.mark.parametrize("n", sizes())
@pytest.mark.parametrize("name", launchers())
def test_integer_valued_sums_are_exact(name, n):
    x = torch.randint(-100, 101, (n,), device=DEVICE).float()
    got = getattr(rd, name)(x)
    assert got.shape == () and got.dtype == torch.float32
    assert_close(got.double(), x.double().sum(), rtol=0, atol=0)


@pytest.mark.parametrize("n", sizes(nonzero=True))
@pytest.mark.parametrize("name", launchers())
def test_random_sums_within_rounding(name, n):
    x = random_tensor(n, torch.float32, DEVICE)
    atol = 4 * U * math.log2(n + 1) * x.double().abs().sum().item()
    assert_close(getattr(rd, name)(x).double(), x.double().sum(), rtol=0, atol=atol)


@pytest.mark.parametrize("name", launchers())
@pytest.mark.parametrize("special, expected", [(math.nan, math.nan), (math.inf, math.inf), (-math.inf, -math.inf)])
def test_nan_and_inf_propagate_like_torch(name, special, expected):
    x = random_tensor(runtime.pick(gpu=1031, sim=263), torch.float32, DEVICE)
    x[130] = special
    assert_close(getattr(rd, name)(x), torch.tensor(expected, device=DEVICE))


@pytest.mark.parametrize("name", launchers())
def test_inf_minus_inf_is_nan_and_empty_is_zero(name):
    x = random_tensor(300, torch.float32, DEVICE)
    x[3], x[299] = math.inf, -math.inf
    assert torch.isnan(getattr(rd, name)(x))
    assert_close(getattr(rd, name)(torch.empty(0, device=DEVICE)), torch.zeros((), device=DEVICE))


@pytest.mark.gpu(reason="CUDA C vector tails: nvcc compiles them on the CPU, only a GPU runs them")
@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 4 * 256 - 1, 4 * 256 + 3, 4 * 256 * 8 * 132 + 1, 4 * 256 * 8 * 132 * 3 + 2])
def test_warp_shuffle_float4_tails(n):
    """n % 4 != 0 (the scalar tail after the float4 loads), fewer than 4 elements, and past one
    full grid-stride pass of the grid (8 blocks per SM on 132 SMs)."""
    x = torch.randint(-100, 101, (n,), device=DEVICE).float()
    assert_close(rd.sum_warp_shuffle(x).double(), x.double().sum(), rtol=0, atol=0)


@pytest.mark.gpu
def test_warp_shuffle_unaligned_view_and_any_shape():
    base = torch.randint(-100, 101, (4103,), device=DEVICE).float()
    for x in (base[1:], base[3:4102], base[:4100].view(41, 100)):
        assert_close(rd.sum_warp_shuffle(x).double(), x.double().sum(), rtol=0, atol=0)


@pytest.mark.gpu(reason="contention needs threads that really run concurrently: the CUDA simulator runs them "
                        "one by one, so a missing atomic (out[0] += v) passes there")
@pytest.mark.parametrize("name", LAUNCHERS)
def test_contention_every_thread_adds_to_one_address(name):
    """All of the grid's atomics land on out[0] (per element for sum_atomic, per block for the
    others): 2^24 - 1 ones sum to 2^24 - 1 exactly in fp32 (every partial sum is an integer
    below 2^24), so one lost update shows as an exact miss."""
    n = (1 << 24) - 1
    assert float(getattr(rd, name)(torch.ones(n, device=DEVICE))) == n
    x = torch.randint(0, 3, (n // 2,), device=DEVICE).float()  # 0, 1, 2: every partial sum < 2^24, exact
    assert_close(getattr(rd, name)(x).double(), x.double().sum(), rtol=0, atol=0)


@pytest.mark.parametrize("layout", layouts(2))
@pytest.mark.parametrize("name", launchers())
def test_non_dense_layouts(name, layout):
    """x sliced out of a bigger buffer (unaligned: no float4) is summed; a strided x is refused."""
    x = torch.randint(-100, 101, (runtime.pick(gpu=257, sim=9), 41), device=DEVICE).float()
    check_layouts(lambda x, out=None: getattr(rd, name)(x), {"x": x}, x.double().sum().float(), layout,
                  strided_ok=False, takes_out=False, rtol=0, atol=0)


def bad_inputs():
    yield "not a tensor", TypeError, "x must be a torch.Tensor", lambda: [1.0, 2.0]
    yield "float64", TypeError, "x has dtype float64", lambda: torch.ones(4, device=DEVICE, dtype=torch.float64)
    yield "non-contiguous", ValueError, "not contiguous", lambda: torch.ones(8, device=DEVICE)[::2]
    yield "wrong device", ValueError, "kernels run on", lambda: torch.ones(4, device="meta")


@pytest.mark.parametrize("name", launchers(gpu_only_marked=False))
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(name, case, error, message, make):
    with pytest.raises(error, match=message):
        getattr(rd, name)(make())
