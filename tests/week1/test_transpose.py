"""week1_cuda_python.transpose: every transpose rung (Numba and CUDA C) against x.T, exactly."""
import re

import pytest
import torch

from course import runtime
from course.check import assert_close, check_layouts, layouts, poisoned, random_tensor, sweep, with_specials

tr = runtime.lesson("week1_cuda_python.transpose")

DEVICE = runtime.DEVICE
NUMBA = list(tr.NUMBA_LAUNCHERS)
CUDA_C = list(tr.CUDA_C_LAUNCHERS)
# 1, primes, one past a tile (32 and 64), odd and even widths, tall and wide; in simulation a
# few tiles at most.
# The default run keeps 1 x 1, tails of both tiles, full 64-tiles (the vector path) and a large one.
SHAPES = runtime.pick(gpu=sweep([(1, 1), (31, 33), (65, 63), (257, 129), (1030, 4096)],
                                [(1, 1000), (1000, 1), (64, 64), (128, 192), (4097, 1025)]),
                      sim=[(1, 1), (1, 40), (40, 1), (33, 31)])


def launchers(gpu_only_marked=True):
    return [pytest.param(n, marks=pytest.mark.gpu if gpu_only_marked and n in CUDA_C else ()) for n in NUMBA + CUDA_C]


LAUNCHERS = launchers()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", [pytest.param(d, id=str(d)[6:]) for d in tr.DTYPES])
@pytest.mark.parametrize("name", LAUNCHERS)
def test_matches_torch(name, dtype, shape):
    x = random_tensor(shape, dtype, DEVICE)
    out = poisoned(shape[::-1], dtype, DEVICE)
    assert getattr(tr, name)(x, out=out) is out
    assert_close(out, x.t().contiguous(), rtol=0, atol=0)  # a transpose moves bits: exact


@pytest.mark.parametrize("name", LAUNCHERS)
def test_specials_and_empty(name):
    x = with_specials(random_tensor((17, 35), torch.float32, DEVICE))
    assert_close(getattr(tr, name)(x), x.t().contiguous(), rtol=0, atol=0)
    assert getattr(tr, name)(torch.empty(0, 3, device=DEVICE)).shape == (3, 0)


@pytest.mark.parametrize("layout", layouts(2))
@pytest.mark.parametrize("name", LAUNCHERS)
def test_non_dense_layouts(name, layout):
    """x or out sliced out of a bigger buffer (unaligned: tile64 falls back to element loads) work;
    strided, transposed and column-sliced ones are refused."""
    x = random_tensor(runtime.pick(gpu=(130, 66), sim=(33, 9)), torch.float32, DEVICE)
    check_layouts(lambda x, out=None: getattr(tr, name)(x, out=out), {"x": x}, x.t().contiguous(), layout,
                  strided_ok=False, rtol=0, atol=0)


def bad_inputs():
    ok = lambda *s: torch.ones(*s, device=DEVICE)  # noqa: E731
    yield "not a tensor", TypeError, "x must be a torch.Tensor", lambda: ([[1.0]], None)
    yield "int dtype", TypeError, "x has dtype int32", lambda: (ok(2, 3).int(), None)
    yield "1-D", ValueError, "x must have 2 dimension", lambda: (ok(3), None)
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(3, 2).t(), None)
    yield "out shape", ValueError, "out has shape", lambda: (ok(2, 3), ok(2, 3))
    yield "out dtype", TypeError, "out has dtype", lambda: (ok(2, 3), ok(3, 2).double())


@pytest.mark.parametrize("name", launchers(gpu_only_marked=False))
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(name, case, error, message, make):
    x, out = make()
    with pytest.raises(error, match=message):
        getattr(tr, name)(x, out=out)


@pytest.mark.gpu(reason="CUDA C vector tails: nvcc compiles them on the CPU, only a GPU runs them")
@pytest.mark.parametrize("dtype", [pytest.param(d, id=str(d)[6:]) for d in tr.DTYPES])
def test_tile64_vector_tails(dtype):
    """Full 64-tiles read rows as pairs; edge tiles (a partial tile in rows, in columns, or an
    odd width where no row starts on a pair) read element by element."""
    for shape in ((64, 64), (64, 63), (63, 64), (65, 66), (128, 130), (129, 128), (130, 193)):
        x = random_tensor(shape, dtype, DEVICE)
        out = poisoned(shape[::-1], dtype, DEVICE)
        assert_close(tr.transpose_cuda_tile64(x, out=out), x.t().contiguous(), rtol=0, atol=0, name=str(shape))


@pytest.mark.gpu(reason="the CUDA C 64x64-tile kernel through PyCUDA")
@pytest.mark.parametrize("dtype", [pytest.param(d, id=str(d)[6:]) for d in tr.DTYPES])
def test_tile64_unaligned_views_fall_back_to_element_loads(dtype):
    base = random_tensor(130 * 128 + 1, dtype, DEVICE)
    x = base[1:].view(130, 128)  # even width, but every row starts one element off a pair
    assert_close(tr.transpose_cuda_tile64(x), x.t().contiguous(), rtol=0, atol=0)


def test_too_many_rows_for_the_grid_are_refused():
    tall = torch.empty(tr.MAX_GRID_Y * tr.BLOCK_ROWS + 1, 1, device=DEVICE)
    for name in NUMBA + CUDA_C:
        with pytest.raises(ValueError, match="at most"):
            getattr(tr, name)(tall)


def test_cuda_source_constants_match_python():
    source = tr.CUDA_SOURCE.read_text()
    match = re.search(r"#define TILE64_ROWS (\d+)", source)
    assert match and int(match.group(1)) == tr.TILE64_ROWS, "TILE64_ROWS in transpose.cu != transpose.py"
