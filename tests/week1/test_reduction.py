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
from course.check import assert_close, random_tensor, sizes_1d

rd = runtime.lesson("week1_cuda_python.reduction")

DEVICE = runtime.DEVICE
U = 2.0**-24
CUDA_C = {"sum_warp_shuffle"}
LAUNCHERS = ["sum_atomic", "sum_shared_tree", "sum_warp_shuffle"]
# In simulation every thread is a Python thread: the sizes that catch indexing bugs only.
SIZES = runtime.pick(gpu=sizes_1d(block=rd.THREADS_PER_BLOCK) + [(1 << 26) + 3],
                     sim=[0, 1, 7, rd.THREADS_PER_BLOCK + 1])


def launchers(gpu_only_marked=True):
    return [pytest.param(n, marks=pytest.mark.gpu if gpu_only_marked and n in CUDA_C else ()) for n in LAUNCHERS]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", launchers())
def test_integer_valued_sums_are_exact(name, n):
    x = torch.randint(-100, 101, (n,), device=DEVICE).float()
    got = getattr(rd, name)(x)
    assert got.shape == () and got.dtype == torch.float32
    assert_close(got.double(), x.double().sum(), rtol=0, atol=0)


@pytest.mark.parametrize("n", [n for n in SIZES if n])
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


@pytest.mark.gpu
def test_warp_shuffle_unaligned_view_and_any_shape():
    base = torch.randint(-100, 101, (4103,), device=DEVICE).float()
    for x in (base[1:], base[3:4102], base[:4100].view(41, 100)):
        assert_close(rd.sum_warp_shuffle(x).double(), x.double().sum(), rtol=0, atol=0)


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
