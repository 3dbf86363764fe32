"""week3_triton_kernels.matmul_fp8: the fp8 (e4m3) matmul, the ladder's last rung, against float64.

Inputs: A ~ N(0, 1), B = W^T with W ~ N(0, 1/K), each quantized with a per-tensor amax scale.

Error model: a product of two e4m3 values is exact in fp32, but Hopper's tensor cores add fp8
products keeping only ~14 significant bits (DeepSeek-V3 report, arXiv:2412.19437, sec. 3.3.2). We
bound a tensor-core partial sum of n products by n * 2^-13 * sum |a b| (worst case: every add loses
a unit of the 14th bit), with n = 128 for fast_accum=False (the kernel moves partial sums to an fp32
accumulator every BLOCK_K = 128 products) and n = K for fast_accum=True, then add gamma for the fp32
sums of the partials (`fp8_sum_error_bound`). The interpreter sums in NumPy fp32: n u with u = 2^-24
there. This bound is loose (it is a worst case) but still far below the O(1) errors of a wrong tile
or a lost scale; the exact K-loop bookkeeping is checked tightly by the fp16 tests and by the fp8
tests with fp32 output in simulation, which run the same code.
"""

import pytest
import torch

from course import runtime, versions
from course.check import TOLERANCES, assert_close, dtype_params, poisoned, random_tensor, sweep

mm8 = runtime.lesson("week3_triton_kernels.matmul_fp8")
# The oracle's error bound, always the course's own.
from week3_triton_kernels.matmul_fp8 import fp8_sum_error_bound  # noqa: E402
DEVICE = runtime.DEVICE
CAPABILITY = torch.cuda.get_device_capability() if runtime.on_gpu() else None
# As in test_matmul.py: a GPU before Hopper, or a simulation whose Triton (3.5) refuses aligned
# descriptor strides (course/versions.py).
TMA_REFUSED = ("TMA tensor descriptors need compute capability >= 9.0 (Hopper)"
               if CAPABILITY is not None and CAPABILITY < (9, 0) else versions.interpreter_descriptor_limitation())
needs_tma = pytest.mark.skipif(TMA_REFUSED is not None, reason=str(TMA_REFUSED))
needs_fp8 = pytest.mark.skipif(CAPABILITY is not None and CAPABILITY < (8, 9),
                               reason="fp8 tensor cores need compute capability >= 8.9 (Ada, Hopper)")
# (M, N, K): ones, primes, shapes that are not multiples of any block (sim: 32; GPU: 64..256).
SHAPES = runtime.pick(gpu=[(1, 1, 1), (17, 33, 20), (3, 65, 97), (1000, 513, 777), (31, 7, 45), (64, 32, 16),
                           (127, 255, 129), (1024, 1024, 1024)],
                      sim=[(1, 1, 1), (17, 33, 20), (31, 7, 45), (64, 32, 16), (3, 65, 97)])
RAGGED = [(17, 33, 20), (3, 65, 97)]
TC_UNIT = 2.0**-13 if runtime.on_gpu() else 2.0**-24  # unit roundoff of the fp8 product sums


def _as_param(value):
    """A plain value or a pytest.param, as a pytest.param (so its marks can be combined)."""
    return value if hasattr(value, "values") else pytest.param(value)


def fp8_inputs(M, N, K, *, k_major=True):
    a, a_scale = mm8.quantize_fp8(random_tensor((M, K), torch.float32, DEVICE))
    w, b_scale = mm8.quantize_fp8(random_tensor((N, K), torch.float32, DEVICE, scale=max(K, 1) ** -0.5))
    b = w.t() if k_major else w.t().contiguous()
    return a, b, a_scale, b_scale


def fp8_atol(a, b, a_scale, b_scale, out_dtype, products_per_partial):
    """Default atol of out_dtype plus the worst-case error of the fp8 product sums (module docstring)."""
    return TOLERANCES[out_dtype][1] + fp8_sum_error_bound(a, b, a_scale, b_scale, products_per_partial,
                                                          unit=TC_UNIT)


FP8_KERNELS = [pytest.param("tma", marks=needs_tma), "persistent"]
FP8_OUT = dtype_params([torch.float32, torch.float16, torch.bfloat16])


def fp8_cases():
    """(kernel, out_dtype, shape): by default every out dtype at the ragged shapes, 1 x 1 x 1 in fp32
    and one autotuned case (TMA, bf16, (1000, 513, 777)); slow, the rest of SHAPES."""
    def default(kernel, out_dtype, shape):
        return (shape in RAGGED or (shape == (1, 1, 1) and out_dtype == "float32")
                or (shape == (1000, 513, 777) and kernel == "tma" and out_dtype == "bfloat16"))

    return [pytest.param(k.values[0], d.values[0], s, id=f"{k.values[0]}-{d.id}-{s}",
                         marks=[*k.marks, *d.marks, *(() if default(k.values[0], d.id, s) else [pytest.mark.slow])])
            for k in map(_as_param, FP8_KERNELS) for d in FP8_OUT for s in SHAPES]


@needs_fp8
@pytest.mark.parametrize("k_major", sweep([True], [False]), ids=["b=w.t()", "b row-major"])
@pytest.mark.parametrize("kernel, out_dtype, shape", fp8_cases())
def test_fp8_matches_float64(kernel, out_dtype, shape, k_major):
    M, N, K = shape
    a, b, sa, sb = fp8_inputs(M, N, K, k_major=k_major)
    out = poisoned((M, N), out_dtype, DEVICE)
    assert mm8.matmul_fp8(a, b, sa, sb, out=out, out_dtype=out_dtype, rung=kernel) is out
    want = mm8.matmul_fp8_torch(a, b, sa, sb, out_dtype=out_dtype)
    assert_close(out, want, atol=fp8_atol(a, b, sa, sb, out_dtype, mm8.FP8_BLOCK_K))


# Default: both shapes on TMA, the ragged K on persistent; slow: the rest (each its own compile).
@needs_fp8
@pytest.mark.parametrize("kernel, shape", [
    pytest.param(k.values[0], s, id=f"{k.values[0]}-{s}",
                 marks=[*k.marks, *(() if s != (512, 384, 256) and (k.values[0] == "tma" or s == (64, 48, 129))
                                    else [pytest.mark.slow])])
    for k in map(_as_param, FP8_KERNELS)
    for s in [(33, 40, 64), (64, 48, 129)] + runtime.pick(gpu=[(512, 384, 256)], sim=[])])
def test_fp8_fast_accum(kernel, shape):
    M, N, K = shape
    a, b, sa, sb = fp8_inputs(M, N, K)
    got = mm8.matmul_fp8(a, b, sa, sb, out_dtype=torch.float32, fast_accum=True, rung=kernel)
    want = mm8.matmul_fp8_torch(a, b, sa, sb, out_dtype=torch.float32)
    assert_close(got, want, atol=fp8_atol(a, b, sa, sb, torch.float32, K))  # all K in the tensor core


# Default: each activation and each out dtype once (fp16 silu, bf16 gelu_tanh and relu); slow: the rest.
FP8_EPILOGUES = {("float16", "silu"), ("bfloat16", "gelu_tanh"), ("bfloat16", "relu")}


@needs_fp8
@pytest.mark.parametrize("out_dtype, activation", [
    pytest.param(d.values[0], act, id=f"{d.id}-{act}",
                 marks=[*d.marks, *(() if (d.id, act) in FP8_EPILOGUES else [pytest.mark.slow])])
    for d in dtype_params([torch.float16, torch.bfloat16]) for act in ["silu", "gelu_tanh", "relu"]])
def test_fp8_bias_and_activation(out_dtype, activation):
    a, b, sa, sb = fp8_inputs(37, 50, 41)
    bias = random_tensor(50, out_dtype, DEVICE)
    got = mm8.matmul_fp8(a, b, float(sa), sb, bias, activation, out_dtype=out_dtype)  # a Python float scale too
    want = mm8.matmul_fp8_torch(a, b, sa, sb, bias, activation, out_dtype=out_dtype)
    assert_close(got, want, atol=fp8_atol(a, b, sa, sb, out_dtype, mm8.FP8_BLOCK_K))


@needs_fp8
def test_fp8_empty_dimensions():
    a, b, sa, sb = fp8_inputs(5, 6, 0)
    assert_close(mm8.matmul_fp8(a, b, sa, sb), torch.zeros(5, 6, dtype=torch.bfloat16, device=DEVICE))
    assert mm8.matmul_fp8(*fp8_inputs(0, 6, 3)).shape == (0, 6)


def test_quantize_fp8_scales_to_the_e4m3_range():
    x = random_tensor((64, 33), torch.float32, DEVICE) * 7.0
    q, scale = mm8.quantize_fp8(x)
    assert q.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32 and scale.dim() == 0
    assert float(q.float().abs().max()) == mm8.FP8_MAX  # amax lands on the largest finite e4m3
    # e4m3 keeps 3 mantissa bits: rounding errs by <= 2^-4 relative, or half the subnormal
    # spacing 2^-9 (in units of the scale) near zero.
    err = (q.double() * float(scale) - x.double()).abs()
    assert (err <= 2.0**-4 * x.double().abs() + 2.0**-10 * float(scale)).all()


@pytest.mark.parametrize("capability, call, message", [
    ((7, 5), "fp8", "compute capability >= 8.9"),
    ((8, 0), "fp8", "compute capability >= 8.9"),
    ((8, 9), "fp8_tma", "compute capability >= 9.0"),
])
def test_refuses_gpus_without_the_hardware(monkeypatch, capability, call, message):
    # matmul_fp8 asks course.runtime both which kernel to use and whether to refuse: pretend there.
    monkeypatch.setattr(runtime, "capability", lambda device=None: capability)
    a, b, sa, sb = fp8_inputs(16, 16, 16)
    run = {"fp8": lambda: mm8.matmul_fp8(a, b, sa, sb),
           "fp8_tma": lambda: mm8.matmul_fp8(a, b, sa, sb, rung="tma")}[call]
    try:
        run()
    except NotImplementedError:  # a RuntimeError too: an unfinished exercise must say so, not pass
        raise
    except RuntimeError as error:
        assert message in str(error), str(error)
    else:
        pytest.fail(f"no RuntimeError on a GPU of compute capability {capability}")


def fp8_bad_inputs():
    a, b, sa, sb = fp8_inputs(4, 6, 8)
    yield "fp16 a", TypeError, "expected one of: float8_e4m3fn", dict(a=a.half())
    yield "e5m2 b", TypeError, "expected one of: float8_e4m3fn", dict(b=b.to(torch.float8_e5m2))
    yield "two scales", ValueError, "one value", dict(a_scale=torch.ones(2, device=DEVICE))
    yield "fp16 scale", TypeError, "b_scale has dtype float16", dict(b_scale=sb.half())
    yield "fp8 out", TypeError, "out_dtype must be", dict(out_dtype=torch.float8_e4m3fn)
    yield "rung", ValueError, "matmul_fp8: rung must be one of 'tma', 'persistent'", dict(rung="tiled")
    h = lambda *s: torch.ones(*s, dtype=torch.float16, device=DEVICE)  # noqa: E731
    yield "bias dtype", TypeError, "bias has dtype float16", dict(bias=h(6))
    yield "out dtype", TypeError, "out has dtype float16", dict(out=h(4, 6))
    yield "inner dims", ValueError, "inner dimensions differ", dict(b=b[:7])


@pytest.mark.parametrize("case, error, message, change", [pytest.param(*c, id=c[0]) for c in fp8_bad_inputs()])
def test_fp8_rejects_bad_input_before_launch(case, error, message, change):
    a, b, sa, sb = fp8_inputs(4, 6, 8)
    kwargs = dict(a=a, b=b, a_scale=sa, b_scale=sb)
    kwargs.update(change)
    with pytest.raises(error, match=message):
        mm8.matmul_fp8(**kwargs)
