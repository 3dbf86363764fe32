"""week1_cuda_python.rotate: 90-degree rotations, both ways, against torch.rot90."""
import pytest
import torch

from course import runtime
from course.check import assert_close, check_layouts, layouts, poisoned, random_tensor, sweep, with_specials

rt = runtime.lesson("week1_cuda_python.rotate")

DEVICE = runtime.DEVICE
LAUNCHERS = ["rotate90_naive", "rotate90_shared", "rotate90_padded"]
# 1 x 1, a single row and column, tails of the 32 x 32 tile, tall and wide, primes.
SHAPES = runtime.pick(gpu=sweep([(1, 1), (31, 33), (257, 129)], [(1, 1000), (1000, 1), (45, 70), (4097, 1025)]),
                      sim=[(1, 1), (1, 40), (40, 1), (33, 31), (3, 5)])
DIRECTIONS = [pytest.param(True, id="clockwise"), pytest.param(False, id="counter-clockwise")]


def expected(x: torch.Tensor, clockwise: bool) -> torch.Tensor:
    return torch.rot90(x, -1 if clockwise else 1, dims=(0, 1)).contiguous()  # k = -1: clockwise


def test_reference_directions():
    # The reference itself, on a matrix small enough to read: clockwise takes the first
    # column, bottom to top, as the first row.
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert expected(x, True).tolist() == [[4.0, 1.0], [5.0, 2.0], [6.0, 3.0]]
    assert expected(x, False).tolist() == [[3.0, 6.0], [2.0, 5.0], [1.0, 4.0]]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("clockwise", DIRECTIONS)
@pytest.mark.parametrize("dtype", [pytest.param(d, id=str(d)[6:]) for d in rt.DTYPES])
@pytest.mark.parametrize("name", LAUNCHERS)
def test_matches_torch_rot90(name, dtype, clockwise, shape):
    x = random_tensor(shape, dtype, DEVICE)
    out = poisoned(shape[::-1], dtype, DEVICE)
    assert getattr(rt, name)(x, clockwise, out=out) is out
    assert_close(out, expected(x, clockwise), rtol=0, atol=0)  # a rotation moves bits: exact


@pytest.mark.parametrize("name", LAUNCHERS)
def test_four_quarter_turns_are_the_identity(name):
    x = random_tensor((9, 35), torch.float32, DEVICE)  # partial tiles both ways
    y = x
    for _ in range(4):
        y = getattr(rt, name)(y, True)
    assert_close(y, x, rtol=0, atol=0)
    assert_close(getattr(rt, name)(getattr(rt, name)(x, True), False), x, rtol=0, atol=0)


@pytest.mark.parametrize("name", LAUNCHERS)
def test_specials_and_empty(name):
    x = with_specials(random_tensor((17, 35), torch.float32, DEVICE))
    assert_close(getattr(rt, name)(x, True), expected(x, True), rtol=0, atol=0)
    assert getattr(rt, name)(torch.empty(0, 3, device=DEVICE)).shape == (3, 0)
    assert getattr(rt, name)(torch.empty(4, 0, device=DEVICE), False).shape == (0, 4)


def test_torch_reference_writes_out():
    x = random_tensor((5, 3), torch.float32, DEVICE)
    out = poisoned((3, 5), torch.float32, DEVICE)
    assert rt.rotate90_torch(x, False, out=out) is out
    assert_close(out, expected(x, False), rtol=0, atol=0)


@pytest.mark.parametrize("layout", layouts(2))
@pytest.mark.parametrize("name", LAUNCHERS)
def test_non_dense_layouts(name, layout):
    """x or out sliced out of a bigger buffer work; strided or transposed ones are refused."""
    x = random_tensor(runtime.pick(gpu=(70, 45), sim=(9, 5)), torch.float32, DEVICE)
    check_layouts(lambda x, out=None: getattr(rt, name)(x, True, out=out), {"x": x}, expected(x, True), layout,
                  strided_ok=False, rtol=0, atol=0)


def bad_inputs():
    ok = lambda *s: torch.ones(*s, device=DEVICE)  # noqa: E731
    yield "not a tensor", TypeError, "x must be a torch.Tensor", lambda: ([[1.0]], True, None)
    yield "int dtype", TypeError, "x has dtype int32", lambda: (ok(2, 3).int(), True, None)
    yield "1-D", ValueError, "x must have 2 dimension", lambda: (ok(3), True, None)
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(3, 2).t(), True, None)
    yield "direction not bool", TypeError, "clockwise must be True or False", lambda: (ok(2, 3), 1, None)
    yield "out shape", ValueError, "out has shape", lambda: (ok(2, 3), True, ok(2, 3))
    yield "out dtype", TypeError, "out has dtype", lambda: (ok(2, 3), True, ok(3, 2).double())


@pytest.mark.parametrize("name", LAUNCHERS)
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(name, case, error, message, make):
    x, clockwise, out = make()
    with pytest.raises(error, match=message):
        getattr(rt, name)(x, clockwise, out=out)
