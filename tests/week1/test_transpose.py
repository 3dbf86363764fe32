"""week1_cuda_python.transpose: naive, shared-memory and padded transposes against x.T."""
import pytest
import torch

from course import runtime
from course.check import assert_close, poisoned, random_tensor, with_specials

tr = runtime.lesson("week1_cuda_python.transpose")

DEVICE = runtime.DEVICE
LAUNCHERS = ["transpose_naive", "transpose_shared", "transpose_padded"]
# 1, primes, one past a tile, tall and wide; in simulation a few tiles at most.
SHAPES = runtime.pick(gpu=[(1, 1), (1, 1000), (1000, 1), (31, 33), (257, 129), (4097, 1025)],
                      sim=[(1, 1), (1, 40), (40, 1), (33, 31)])


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


def bad_inputs():
    ok = lambda *s: torch.ones(*s, device=DEVICE)  # noqa: E731
    yield "not a tensor", TypeError, "x must be a torch.Tensor", lambda: ([[1.0]], None)
    yield "int dtype", TypeError, "x has dtype int32", lambda: (ok(2, 3).int(), None)
    yield "1-D", ValueError, "x must have 2 dimension", lambda: (ok(3), None)
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(3, 2).t(), None)
    yield "out shape", ValueError, "out has shape", lambda: (ok(2, 3), ok(2, 3))
    yield "out dtype", TypeError, "out has dtype", lambda: (ok(2, 3), ok(3, 2).double())


@pytest.mark.parametrize("name", LAUNCHERS)
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(name, case, error, message, make):
    x, out = make()
    with pytest.raises(error, match=message):
        getattr(tr, name)(x, out=out)
