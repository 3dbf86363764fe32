"""week1_cuda_python.elementwise: scale, ReLU, SAXPY and 2-D matrix add against torch."""
import pytest
import torch

from course import runtime
from course.check import assert_close, check_layouts, layouts, poisoned, random_tensor, sizes_1d, with_specials

ew = runtime.lesson("week1_cuda_python.elementwise")

DEVICE = runtime.DEVICE
# block + 1 etc. are not enough for the x4 kernels, whose blocks cover 4 x 256 elements.
SIZES = sorted(set(sizes_1d(block=ew.THREADS_PER_BLOCK) + [1023, 1025]))
# float64 takes the same path as float32 (only the scalar's type differs): in simulation,
# where every thread is a Python thread, it gets the sizes that catch indexing bugs only.
# On a GPU the 65537 and 4M sizes are slow-only (1_000_003 keeps a large ragged size by default).
SLOW_SIZES = {65537, (1 << 22) + 5}
CASES = [pytest.param(d, n, id=f"{str(d)[6:]}-{n}", marks=pytest.mark.slow if n in SLOW_SIZES else ())
         for d in ew.DTYPES for n in SIZES if d == torch.float32 or runtime.on_gpu() or n in (0, 1, 1025)]
DTYPES = [pytest.param(d, id=str(d)[6:]) for d in ew.DTYPES]
SPECIALS_N = runtime.pick(gpu=4099, sim=523)  # odd sizes: a partial last block
ALPHA = -1.75  # exact in every float format: the reference and kernel round alike

# name -> (call(inputs, out), torch reference(inputs), number of inputs)
OPS = {
    "scale": (lambda x, out: ew.scale(x, ALPHA, out=out), lambda x: ALPHA * x, 1),
    "relu": (lambda x, out: ew.relu(x, out=out), torch.relu, 1),
    "scale_x4": (lambda x, out: ew.scale_x4(x, ALPHA, out=out), lambda x: ALPHA * x, 1),
    "relu_x4": (lambda x, out: ew.relu_x4(x, out=out), torch.relu, 1),
    "saxpy": (lambda x, y, out: ew.saxpy(ALPHA, x, y, out=out), lambda x, y: torch.add(y, x, alpha=ALPHA), 2),
    "saxpy_grid_stride": (lambda x, y, out: ew.saxpy_grid_stride(ALPHA, x, y, out=out),
                          lambda x, y: torch.add(y, x, alpha=ALPHA), 2),
}


@pytest.mark.parametrize("dtype, n", CASES)
@pytest.mark.parametrize("op", list(OPS))
def test_matches_torch(op, dtype, n):
    call, ref, arity = OPS[op]
    inputs = [random_tensor(n, dtype, DEVICE) for _ in range(arity)]
    out = poisoned(n, dtype, DEVICE)
    assert call(*inputs, out) is out, "the launcher must write into the `out` it was given"
    assert_close(out, ref(*inputs))


@pytest.mark.parametrize("op", list(OPS))
def test_nan_and_inf_propagate_like_torch(op):
    call, ref, arity = OPS[op]
    # Scaled down so alpha * max stays finite on both sides; specials still go in.
    inputs = [with_specials(random_tensor(SPECIALS_N, torch.float32, DEVICE)) * 0.25 for _ in range(arity)]
    inputs = [t.flip(0).contiguous() if i else t for i, t in enumerate(inputs)]
    assert_close(call(*inputs, None), ref(*inputs))


@pytest.mark.parametrize("op", list(OPS))
def test_any_shape_and_empty(op):
    call, ref, arity = OPS[op]
    inputs = [random_tensor((13, 7, 3), torch.float32, DEVICE) for _ in range(arity)]
    assert_close(call(*inputs, None), ref(*inputs))
    empty = [torch.empty(0, 5, device=DEVICE) for _ in range(arity)]
    assert call(*empty, None).shape == (0, 5)


MATRIX_SHAPES = runtime.pick(gpu=[(1, 1), (1, 1000), (1000, 1), (31, 33), (257, 511), (4097, 1025)],
                             sim=[(1, 1), (1, 40), (40, 1), (9, 33)])


@pytest.mark.parametrize("shape", MATRIX_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPES)
def test_matrix_add_matches_torch(shape, dtype):
    a, b = random_tensor(shape, dtype, DEVICE), random_tensor(shape, dtype, DEVICE)
    out = poisoned(shape, dtype, DEVICE)
    assert ew.matrix_add(a, b, out=out) is out
    assert_close(out, a + b)


def test_matrix_add_specials_and_empty():
    a = with_specials(random_tensor((17, 19), torch.float32, DEVICE))
    b = with_specials(random_tensor((17, 19), torch.float32, DEVICE)).flip(0).contiguous()
    assert_close(ew.matrix_add(a, b), a + b)
    assert ew.matrix_add(torch.empty(0, 3, device=DEVICE), torch.empty(0, 3, device=DEVICE)).shape == (0, 3)


@pytest.mark.parametrize("layout", layouts(2))
@pytest.mark.parametrize("op", list(OPS) + ["matrix_add"])
def test_non_dense_layouts(op, layout):
    """Inputs or out sliced out of a bigger buffer work (any shape: the kernels see them flat);
    strided or transposed ones are refused with a sentence that says so."""
    shape = (13, 37)
    if op == "matrix_add":
        call = lambda a, b, out=None: ew.matrix_add(a, b, out=out)  # noqa: E731
        inputs = {"a": random_tensor(shape, torch.float32, DEVICE), "b": random_tensor(shape, torch.float32, DEVICE)}
        want = inputs["a"] + inputs["b"]
    else:
        run, ref, arity = OPS[op]
        names = ("x", "y")[:arity]
        call = lambda out=None, **kw: run(*(kw[k] for k in names), out)  # noqa: E731
        inputs = {k: random_tensor(shape, torch.float32, DEVICE) for k in names}
        want = ref(*inputs.values())
    check_layouts(call, inputs, want, layout, strided_ok=False)


def bad_inputs():
    ok = lambda *s: torch.ones(*(s or (8,)), device=DEVICE)  # noqa: E731
    yield "scale x list", lambda: ew.scale([1.0], 2.0), TypeError, "x must be a torch.Tensor"
    yield "scale int dtype", lambda: ew.scale(ok().int(), 2.0), TypeError, "x has dtype int32"
    yield "scale alpha tensor", lambda: ew.scale(ok(), ok(1)), TypeError, "alpha must be"
    yield "relu non-contiguous", lambda: ew.relu(ok(16)[::2]), ValueError, "not contiguous"
    yield "relu out shape", lambda: ew.relu(ok(), out=ok(9)), ValueError, "out has shape"
    yield "saxpy shapes", lambda: ew.saxpy(2.0, ok(8), ok(9)), ValueError, "shapes must match"
    yield "saxpy dtypes", lambda: ew.saxpy(2.0, ok(), ok().double()), TypeError, "dtypes must match"
    yield "saxpy alpha str", lambda: ew.saxpy("2", ok(), ok()), TypeError, "alpha must be"
    yield "saxpy_gs device", lambda: ew.saxpy_grid_stride(2.0, torch.ones(8, device="meta"), ok()), \
        ValueError, "kernels run on"
    yield "matrix_add 1-D", lambda: ew.matrix_add(ok(), ok()), ValueError, "a must have 2 dimension"
    yield "matrix_add shapes", lambda: ew.matrix_add(ok(2, 3), ok(3, 2)), ValueError, "shapes must match"
    yield "matrix_add out dtype", lambda: ew.matrix_add(ok(2, 3), ok(2, 3), out=ok(2, 3).double()), \
        TypeError, "out has dtype"


@pytest.mark.parametrize("case, call, error, message", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, call, error, message):
    with pytest.raises(error, match=message):
        call()
