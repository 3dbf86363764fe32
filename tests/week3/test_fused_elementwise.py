"""week3_triton_kernels.fused_elementwise: fused bias + GELU and x * y + z against torch."""
import pytest
import torch

from course import runtime
from course.check import (INT32_LIMIT, assert_close, check_layouts, dtype_params, huge, last_programs, layouts,
                          past_int32_marks, poisoned, random_tensor, sizes_1d_params, sweep, with_specials)

fe = runtime.lesson("week3_triton_kernels.fused_elementwise")
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16])
SHAPES = [(1, 1), (1, 7), (3, 127), (5, 1023), (2, 1025)] + runtime.pick(
    gpu=sweep([(257, 4099)], [(4096, 1024)]), sim=[])


def gelu_reference(x, bias, approximate):
    """torch's gelu in float64 on the same inputs, rounded once to the input dtype."""
    return torch.nn.functional.gelu(x.double() + bias.double(), approximate=approximate).to(x.dtype)


# Default: every shape in float32, and in fp16/bf16 every shape but the large (257, 4099), which
# is slow there (a million-element float64 reference per case on the GPU, the same kernel as the
# small shapes); the same for mul_add's 1_000_003. Slow adds those and (4096, 1024).
def dtype_cases(dtypes, values, large):
    """(dtype, value) params: slow for `large` values unless float32, and for values already slow."""
    return [pytest.param(d.values[0], v.values[0], id=f"{d.id}-{v.id if v.id else v.values[0]}",
                         marks=[*d.marks, *v.marks, *([pytest.mark.slow] if v.values[0] == large and d.id != "float32"
                                                      else [])])
            for d in dtypes for v in (x if hasattr(x, "values") else pytest.param(x) for x in values)]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype, shape", dtype_cases(DTYPES, SHAPES, (257, 4099)))
def test_bias_gelu_matches_torch(dtype, shape, approximate):
    x = random_tensor(shape, dtype, DEVICE, scale=3.0)
    bias = random_tensor(shape[-1], dtype, DEVICE)
    out = poisoned(shape, dtype, DEVICE)
    assert fe.bias_gelu(x, bias, approximate, out=out) is out
    assert_close(out, gelu_reference(x, bias, approximate))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_bias_gelu_is_torchs_function(approximate):
    # The two approximations differ by up to ~5e-4 (fp32): the kernel must pick the right one.
    x = torch.linspace(-6, 6, 1201, device=DEVICE)
    zero = torch.zeros(1201, device=DEVICE)
    got = fe.bias_gelu(x.reshape(1, -1), zero, approximate).reshape(-1)
    assert_close(got, torch.nn.functional.gelu(x.double(), approximate=approximate).float())
    other = "tanh" if approximate == "none" else "none"
    assert (got.double() - torch.nn.functional.gelu(x.double(), approximate=other)).abs().max() > 1e-4


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.bfloat16]))
def test_bias_gelu_nan_and_inf_like_torch(dtype, approximate):
    x = with_specials(random_tensor((3, 401), dtype, DEVICE))
    bias = random_tensor(401, dtype, DEVICE)
    # Reference in float64: torch's fp32 CPU kernel returns NaN for gelu(+inf) and overflows
    # gelu(max) to inf (its vectorized path), while CUDA and float64 give the limits, inf and max.
    assert_close(fe.bias_gelu(x, bias, approximate), gelu_reference(x, bias, approximate))


@pytest.mark.parametrize("dtype, n", dtype_cases(DTYPES, sizes_1d_params(block=fe.BLOCK_SIZE), 1_000_003))
def test_mul_add_matches_torch(dtype, n):
    x, y, z = (random_tensor(n, dtype, DEVICE) for _ in range(3))
    out = poisoned(n, dtype, DEVICE)
    assert fe.mul_add(x, y, z, out=out) is out
    # Reference: the exact x*y+z (float64), rounded once; the kernel fuses into one fma.
    assert_close(out, (x.double() * y.double() + z.double()).to(dtype))


@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.bfloat16]))
def test_mul_add_nan_and_inf_like_torch(dtype):
    x = with_specials(random_tensor(2001, dtype, DEVICE))
    y = with_specials(random_tensor(2001, dtype, DEVICE)).flip(0).contiguous()
    z = random_tensor(2001, dtype, DEVICE)
    assert_close(fe.mul_add(x, y, z), (x.double() * y.double() + z.double()).to(dtype))


def test_unfused_references_agree():
    x, bias = random_tensor((4, 33), torch.float32, DEVICE), random_tensor(33, torch.float32, DEVICE)
    assert_close(fe.bias_gelu(x, bias, "tanh"), fe.bias_gelu_torch(x, bias, "tanh"))
    a, b, c = (random_tensor(77, torch.float32, DEVICE) for _ in range(3))
    assert_close(fe.mul_add(a, b, c), (a.double() * b.double() + c.double()).float())
    assert_close(fe.mul_add_torch(a, b, c), a * b + c)


@pytest.mark.parametrize("layout", layouts(2))
@pytest.mark.parametrize("op", ["bias_gelu", "mul_add"])
def test_non_dense_layouts(op, layout):
    """Inputs or out sliced out of a bigger buffer work; strided or transposed ones are refused."""
    x = random_tensor((9, 70), torch.float32, DEVICE)
    if op == "bias_gelu":
        bias = random_tensor(70, torch.float32, DEVICE)
        check_layouts(lambda x, bias, out=None: fe.bias_gelu(x, bias, "tanh", out=out), {"x": x, "bias": bias},
                      gelu_reference(x, bias, "tanh"), layout, strided_ok=False)
    else:
        y, z = random_tensor((9, 70), torch.float32, DEVICE), random_tensor((9, 70), torch.float32, DEVICE)
        check_layouts(lambda x, y, z, out=None: fe.mul_add(x, y, z, out=out), {"x": x, "y": y, "z": z},
                      (x.double() * y.double() + z.double()).float(), layout, strided_ok=False)


@pytest.mark.parametrize("op", [pytest.param(op, marks=past_int32_marks()) for op in ("bias_gelu", "mul_add")])
def test_offsets_past_2_to_the_31(op):
    """The last programs' offsets pass 2^31 (int64 in the kernels); simulation runs only those."""
    cols = 1000
    n = (INT32_LIMIT // cols + 2) * cols
    x, out = huge(n, torch.float16, DEVICE), huge(n, torch.float16, DEVICE, fill="poison")
    if op == "bias_gelu":
        bias = random_tensor(cols, torch.float16, DEVICE)
        with last_programs(3):  # >= 2049 elements: the 2000 checked below
            fe.bias_gelu(x.view(-1, cols), bias, out=out.view(-1, cols))
        want = gelu_reference(x[-2000:].view(-1, cols), bias, "none").reshape(-1)
    else:
        y, z = huge(n, torch.float16, DEVICE), huge(n, torch.float16, DEVICE)
        with last_programs(3):  # >= 2049 elements: the 2000 checked below
            fe.mul_add(x, y, z, out=out)
        want = (x[-2000:].double() * y[-2000:].double() + z[-2000:].double()).half()
    assert_close(out[-2000:], want)


def test_empty_inputs():
    e = torch.empty(0, 5, device=DEVICE)
    assert fe.bias_gelu(e, torch.ones(5, device=DEVICE)).shape == (0, 5)
    assert fe.mul_add(e, e.clone(), e.clone()).shape == (0, 5)


def gelu_bad_inputs():
    x = lambda *s: torch.ones(*(s or (4, 8)), device=DEVICE)  # noqa: E731
    yield "x not a tensor", TypeError, "x must be a torch.Tensor", lambda: ([1.0], x(8), "none", None)
    yield "bias 2-D", ValueError, "bias must have 1 dimension", lambda: (x(), x(1, 8), "none", None)
    yield "bias length", ValueError, "bias has 7 elements", lambda: (x(), x(7), "none", None)
    yield "dtype mismatch", TypeError, "dtypes must match", lambda: (x(), x(8).half(), "none", None)
    yield "int dtype", TypeError, "expected one of", lambda: (x().int(), x(8).int(), "none", None)
    yield "approximate", ValueError, "approximate must be", lambda: (x(), x(8), "erf", None)
    yield "non-contiguous", ValueError, "not contiguous", lambda: (x(8, 4).t(), x(8), "none", None)
    yield "out shape", ValueError, "out has shape", lambda: (x(), x(8), "none", x(4, 7))


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in gelu_bad_inputs()])
def test_bias_gelu_rejects_bad_input(case, error, message, make):
    x, bias, approximate, out = make()
    with pytest.raises(error, match=message):
        fe.bias_gelu(x, bias, approximate, out=out)


def mul_add_bad_inputs():
    ok = lambda n=8: torch.ones(n, device=DEVICE)  # noqa: E731
    yield "z not a tensor", TypeError, "z must be a torch.Tensor", lambda: (ok(), ok(), 1.0, None)
    yield "dtype mismatch", TypeError, "dtypes must match", lambda: (ok(), ok(), ok().half(), None)
    yield "shape mismatch", ValueError, "shapes must match", lambda: (ok(), ok(3), ok(), None)
    yield "wrong device", ValueError, "kernels run on", lambda: (ok(), ok(), torch.ones(8, device="meta"), None)
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(), ok(16)[::2], ok(), None)
    yield "out shape", ValueError, "out has shape", lambda: (ok(), ok(), ok(), ok(7))


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in mul_add_bad_inputs()])
def test_mul_add_rejects_bad_input(case, error, message, make):
    x, y, z, out = make()
    with pytest.raises(error, match=message):
        fe.mul_add(x, y, z, out=out)
