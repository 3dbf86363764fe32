"""week5_integration.quantization: int8 weight-only quantization and the Triton int8 matmul.

Every kernel result is compared in float64 with x @ deq(q)^T, deq(q) = q * scale (rounded to x's
dtype for the kernel that dequantizes in its loop, exactly as it does), with the tolerance of an
error model (`error_bounds`): fp32 accumulation over K terms plus one rounding of the output.
"""
import json
import math

import pytest
import torch
import torch.nn as nn

from course import runtime
from course.check import (INT32_LIMIT, assert_close, check_layouts, dtype_params, huge, last_programs, layouts,
                          past_int32_marks, poisoned, random_tensor, sweep)

qz = runtime.lesson("week5_integration.quantization")
DEVICE = runtime.DEVICE
# bf16 stays on the GPU here: int8_matmul_dequant rounds q * scale to x's type inside the kernel and
# reference() models that rounding, which simulation (float32 inside, course/sim_bf16.py) does not do.
DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16], bf16_in_sim=False)
KERNELS = {"int8_matmul": False, "int8_matmul_dequant": True}  # name -> rounds W to x's dtype in the loop?
# Unit roundoff (half an ulp at 1) of each format: what one round-to-nearest can cost, relatively.
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}

# (M, K, N): one row, primes, exactly one block, one past it; K = 1 and K past several blocks.
SHAPES = [(1, 64, 96), (1, 1, 1), (3, 257, 130), (16, 16, 16), (17, 100, 7), (5, 33, 65)] + \
    runtime.pick(gpu=[(16, 4096, 4096), (64, 1000, 3001), (1, 16384, 4096)], sim=[])
# What the default run keeps (`--slow` or `-m slow` runs the rest). On a GPU each (kernel, dtype,
# tile config, size class) is a compile; the default checks every shape once per kernel (the small
# ones in fp32 or fp16, which simulation runs too) and every dtype at two to four shapes
# (SHAPES_BY_DTYPE), the large ones in fp16 and bf16, and the first two and
# the last of the swept configs; slow adds the rest of dtype x shape, (1, 16384, 4096) and the
# swept configs between.
SHAPES_BY_DTYPE = {"float32": [(1, 1, 1), (3, 257, 130), (17, 100, 7), (16, 16, 16)],
                   "float16": [(1, 64, 96), (5, 33, 65), (16, 4096, 4096)],
                   "bfloat16": [(3, 257, 130), (64, 1000, 3001)]}


def reference(x, q, scale, *, rounds_weight: bool = False):
    """x @ (q * scale)^T in float64; rounds_weight: with q * scale rounded to x's dtype first,
    as `int8_matmul_dequant` rounds it (and as torch's dequantize-then-matmul does)."""
    w = qz.dequantize_int8(q, scale, x.dtype if rounds_weight else torch.float64)
    return x.double() @ w.double().t()


def error_bounds(x, q, scale):
    """(rtol, atol) from the error model of an fp32-accumulated int8 matmul.

    With S = max over outputs of sum_k |x[m,k] w[n,k]|: the fp32 sum of K products errs by at
    most (K - 1) u32 S, the products by u32 S when x is fp32 (16-bit x times a 7-bit integer is
    exact in fp32), the scale multiply by u32 S: (K + 2) u32 S in the worst case. Rounding errors
    are rarely all of one sign: with probability >= 1 - 2 exp(-lambda^2 / 2) the error stays below
    lambda sqrt(K + 2) u32 S (Higham & Mary, SIAM J. Sci. Comput. 2019); lambda = 6 fails about
    once in 10^8 elements and keeps the bound tight for K in the thousands, where a lost K tile
    would still be caught. Rounding the output to x's dtype adds u_x relative: rtol.
    """
    K = x.shape[1]
    u32, u_x = 2.0**-24, UNIT_ROUNDOFF[x.dtype]
    if x.numel() == 0 or q.numel() == 0:
        return u_x, 0.0
    S = float((x.double().abs() @ (q.double().abs() * scale.double()[:, None]).t()).max())
    gamma = min(K + 2, 6 * math.sqrt(K + 2)) * u32
    return u_x, (1 + u_x) * gamma * S


def quantized(N, K, *, scale=0.02):
    return qz.quantize_int8(random_tensor((N, K), torch.float32, DEVICE, scale=scale))


# ------------------------------------------------------------------------------ quantizing
@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (64, 257), (3, 1000)])
@pytest.mark.parametrize("wdtype", [torch.float32, torch.float64, torch.bfloat16])
def test_quantization_error_is_at_most_half_a_step(shape, wdtype):
    w = random_tensor(shape, wdtype, DEVICE, scale=0.05)
    q, scale = qz.quantize_int8(w)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32
    assert q.shape == shape and scale.shape == (shape[0],)
    assert int(q.abs().max()) <= 127
    w64, s64 = w.double(), scale.double()
    assert_close(s64, w.float().abs().amax(dim=1).double() / 127, rtol=2**-23, atol=0)
    # round(w / s) with w / s computed in fp32: 1/2 from rounding to an integer, plus the fp32
    # division's error of u32 * |w / s| <= u32 * 127 steps.
    err = (w64 - q.double() * s64[:, None]).abs()
    assert bool((err <= s64[:, None] * (0.5 + 127 * 2.0**-24)).all()), float((err / s64[:, None]).max())
    # Each row uses its full range: its largest |w| lands on +-127.
    assert bool((q.abs().amax(dim=1) == 127).all())


def test_zero_rows_get_a_harmless_scale():
    w = random_tensor((4, 9), torch.float32, DEVICE)
    w[2] = 0.0
    q, scale = qz.quantize_int8(w)
    assert float(scale[2]) == 1.0 and int(q[2].abs().max()) == 0
    assert_close(qz.dequantize_int8(q, scale)[2], torch.zeros(9, device=DEVICE))


def test_quantize_refuses_non_finite_weights():
    w = torch.ones(3, 4, device=DEVICE)
    w[1, 2] = math.inf
    with pytest.raises(ValueError, match="NaN or Inf"):
        qz.quantize_int8(w)
    w[1, 2] = math.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        qz.quantize_int8(w)
    with pytest.raises(ValueError, match="2 dimension"):
        qz.quantize_int8(torch.ones(4, device=DEVICE))


# ---------------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype, shape", [
    pytest.param(d.values[0], shape, id=f"{d.id}-{'x'.join(map(str, shape))}",
                 marks=[*d.marks, *(() if shape in SHAPES_BY_DTYPE[d.id] else [pytest.mark.slow])])
    for d in DTYPES for shape in SHAPES])
def test_int8_matmul_matches_float64(dtype, shape, kernel):
    M, K, N = shape
    q, scale = quantized(N, K)
    x = random_tensor((M, K), dtype, DEVICE)
    out = poisoned((M, N), dtype, DEVICE)
    assert getattr(qz, kernel)(x, q, scale, out) is out, "the launcher must write into the `out` it was given"
    rtol, atol = error_bounds(x, q, scale)
    assert_close(out.double(), reference(x, q, scale, rounds_weight=KERNELS[kernel]), rtol=rtol, atol=atol)


@pytest.mark.parametrize("layout", layouts(2))
@pytest.mark.parametrize("kernel", KERNELS)
def test_non_dense_layouts(kernel, layout):
    """x, q, scale or out sliced out of a bigger buffer work; strided, transposed or column-sliced
    ones are refused (the kernels take only row strides: rows must be dense)."""
    q, scale = quantized(35, 70)
    x = random_tensor((9, 70), torch.float32, DEVICE)
    rtol, atol = error_bounds(x, q, scale)
    want = reference(x, q, scale, rounds_weight=KERNELS[kernel]).float()
    check_layouts(lambda x, q, scale, out=None: getattr(qz, kernel)(x, q, scale, out), {"x": x, "q": q, "scale": scale},
                  want, layout, strided_ok=False, rtol=rtol, atol=atol)


@pytest.mark.parametrize("kernel", [pytest.param(k, marks=past_int32_marks()) for k in KERNELS])
def test_offsets_past_2_to_the_31(kernel):
    """x (M, 64) and y (M, 64) with M * 64 > 2^31: the row offsets are int64 in the kernels.
    Simulation runs only the last programs (the last row blocks)."""
    K = N = 64
    M = INT32_LIMIT // K + 40
    q, scale = quantized(N, K)
    x = huge(M * K, torch.float16, DEVICE, tail=256 * K).view(M, K)
    out = huge(M * N, torch.float16, DEVICE, tail=256 * N, fill="poison").view(M, N)
    config = qz.Int8Config(16, 64, 64)
    with last_programs(2):
        getattr(qz, kernel)(x, q, scale, out, config=config)
    rows = M % 16 + 16  # what the last two programs of 16 rows cover
    rtol, atol = error_bounds(x[-rows:], q, scale)
    assert_close(out[-rows:].double(), reference(x[-rows:], q, scale, rounds_weight=KERNELS[kernel]),
                 rtol=rtol, atol=atol)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("block_n, block_k", [(16, 16), (32, 64), (64, 16)])
def test_explicit_tiles_with_tails_in_every_dimension(kernel, block_n, block_k):
    # 100 = 6 x 16 + 4 and 70 = 4 x 16 + 6: K steps and N blocks end part-full; M = 19 > 16.
    M, K, N = 19, 100, 70
    q, scale = quantized(N, K)
    x = random_tensor((M, K), torch.float32, DEVICE)
    config = qz.Int8Config(16, block_n, block_k)
    out = poisoned((M, N), torch.float32, DEVICE)
    getattr(qz, kernel)(x, q, scale, out, config=config)
    rtol, atol = error_bounds(x, q, scale)
    assert_close(out.double(), reference(x, q, scale, rounds_weight=KERNELS[kernel]), rtol=rtol, atol=atol)


def swept_configs(M, part):
    """The first two and the last swept config ("ends": both stage counts, the narrowest and the
    widest tiles), or the ones between (each a compile on a GPU: slow)."""
    from week5_integration import quantization_bench  # the sweep (quantization_bench.py) times these configs

    configs = quantization_bench.sweep_configs(M)
    ends = configs[:2] + configs[-1:]
    return ends if part == "ends" else [c for c in configs if c not in ends]


@pytest.mark.parametrize("part", sweep(["ends"], ["between"]))
@pytest.mark.parametrize("M", [1, 16])
def test_every_swept_config_is_correct(M, part):
    # The sweep may pick any of these for its tuned table: each must be right, not only fast.
    K, N = 300, 70
    q, scale = quantized(N, K)
    x = random_tensor((M, K), torch.float16, DEVICE)
    rtol, atol = error_bounds(x, q, scale)
    for config in swept_configs(M, part):
        out = poisoned((M, N), torch.float16, DEVICE)
        qz.int8_matmul(x, q, scale, out, config=config)
        assert_close(out.double(), reference(x, q, scale), rtol=rtol, atol=atol, name=config.label())


def test_tuned_table_entries_are_launchable():
    # results/tuned_int8_matmul.json, when a sweep has written it: every entry launches and is right.
    path = qz.TUNED.path
    entries = json.loads(path.read_text())["entries"] if path.exists() else []
    for entry in entries:
        (bucket, N, K), config = entry["key"], qz.Int8Config(**entry["config"])
        assert bucket in (1, 16, 64) and N > 0 and K > 0
        q, scale = quantized(min(N, 64), min(K, 256))
        x = random_tensor((min(bucket, 16), min(K, 256)), torch.float32, DEVICE)
        rtol, atol = error_bounds(x, q, scale)
        assert_close(qz.int8_matmul(x, q, scale, config=config).double(), reference(x, q, scale),
                     rtol=rtol, atol=atol, name=str(config))
    if not entries:  # not swept yet: every shape takes the heuristic
        assert qz.config_for(1, 4096, 4096) == qz.heuristic_config(1, 4096, 4096)


@pytest.mark.parametrize("kernel", KERNELS)
def test_empty_and_k_zero(kernel):
    fn = getattr(qz, kernel)
    q, scale = quantized(5, 8)
    assert fn(torch.empty(0, 8, device=DEVICE), q, scale).shape == (0, 5)
    q0, s0 = quantized(0, 8)
    assert fn(torch.ones(3, 8, device=DEVICE), q0, s0).shape == (3, 0)
    # K = 0: every output is an empty sum.
    qk, sk = quantized(4, 0)
    out = poisoned((3, 4), torch.float32, DEVICE)
    fn(torch.empty(3, 0, device=DEVICE), qk, sk, out)
    assert_close(out, torch.zeros(3, 4, device=DEVICE))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's NumPy: inf - inf
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf_propagate_like_torch(dtype, kernel):
    M, K, N = 6, 40, 24
    q, scale = quantized(N, K)
    x = random_tensor((M, K), dtype, DEVICE)
    x[0, 3] = math.nan                    # NaN row: NaN everywhere (NaN * 0 is NaN too)
    x[1, 5] = math.inf                    # +inf times weights of either sign: +-inf, or NaN where q = 0
    x[2, 7] = -math.inf
    x[3, 1], x[3, 2] = math.inf, -math.inf  # inf - inf: NaN wherever both weights have one sign
    x[4, 0] = -0.0
    got = getattr(qz, kernel)(x, q, scale)
    want = reference(x, q, scale, rounds_weight=KERNELS[kernel])
    rtol, atol = error_bounds(torch.nan_to_num(x, posinf=0.0, neginf=0.0, nan=0.0), q, scale)
    assert_close(got.double(), want, rtol=rtol, atol=atol)


def test_predicted_speedup_is_the_byte_ratio():
    # bf16: 2NK + 2MK + 2MN bytes; int8: NK + 4N + 2MK + 2MN.
    assert qz.predicted_speedup(1, 4096, 16384) == pytest.approx(
        (2 * 4096 * 16384 + 2 * 4096 + 2 * 16384) / (4096 * 16384 + 4 * 16384 + 2 * 4096 + 2 * 16384))
    assert 1.99 < qz.predicted_speedup(1, 4096, 16384) < 2.0
    assert qz.predicted_speedup(16, 4096, 4096) < qz.predicted_speedup(1, 4096, 4096)
    assert qz.predicted_speedup(4096, 4096, 4096) < 1.4  # prefill: activations weigh as much as weights
    with pytest.raises(ValueError, match="positive"):
        qz.predicted_speedup(0, 16, 16)


def bad_inputs():
    # Built lazily (inside `make`): collection must not call the code under test.
    x = lambda: torch.ones(3, 8, device=DEVICE)  # noqa: E731
    yield "x not a tensor", TypeError, "must be a torch.Tensor", lambda q, s: ([[1.0] * 8], q, s, None)
    yield "x int", TypeError, "expected one of", lambda q, s: (x().int(), q, s, None)
    yield "x float64", TypeError, "expected one of", lambda q, s: (x().double(), q, s, None)
    yield "x 3-D", ValueError, "2 dimension", lambda q, s: (x()[None], q, s, None)
    yield "x non-contiguous", ValueError, "not contiguous", lambda q, s: (torch.ones(8, 3, device=DEVICE).t(), q, s, None)
    yield "x wrong device", ValueError, "kernels run on", lambda q, s: (torch.ones(3, 8, device="meta"), q, s, None)
    yield "q not int8", TypeError, "q has dtype", lambda q, s: (x(), q.float(), s, None)
    yield "q wrong K", ValueError, "q has shape", lambda q, s: (x(), q[:, :7].contiguous(), s, None)
    yield "scale fp16", TypeError, "scale has dtype", lambda q, s: (x(), q, s.half(), None)
    yield "scale wrong length", ValueError, "scale has 5 elements", lambda q, s: (x(), q, s[:5].contiguous(), None)
    yield "out wrong shape", ValueError, "out has shape", lambda q, s: (x(), q, s, torch.empty(3, 5, device=DEVICE))
    yield "out wrong dtype", TypeError, "out has dtype", lambda q, s: (x(), q, s, torch.empty(3, 6, device=DEVICE).half())


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make, kernel):
    # int8 weights made by hand (not by quantize_int8): this test is about the launcher alone.
    q = torch.randint(-127, 128, (6, 8), dtype=torch.int8, device=DEVICE)
    s = torch.rand(6, device=DEVICE) + 0.5
    x, q, s, out = make(q, s)
    with pytest.raises(error, match=message):
        getattr(qz, kernel)(x, q, s, out)


@pytest.mark.parametrize("config", [qz.Int8Config(8, 16, 16), qz.Int8Config(16, 24, 16), (16, 16, 16)],
                         ids=["block_m 8", "block_n 24", "tuple"])
def test_rejects_bad_configs(config):
    q, s = quantized(6, 8)
    with pytest.raises((ValueError, TypeError), match="config"):
        qz.int8_matmul(torch.ones(3, 8, device=DEVICE), q, s, config=config)


# --------------------------------------------------------------------------- the module
@pytest.mark.parametrize("kernel", qz.KERNELS)
def test_quant_linear_equals_linear_with_dequantized_weight(kernel):
    linear = nn.Linear(33, 20, bias=True).to(DEVICE)
    qlinear = qz.QuantLinear.from_linear(linear, kernel=kernel)
    x = random_tensor((2, 5, 33), torch.float32, DEVICE)
    w = qlinear.weight
    assert w.shape == linear.weight.shape and w.dtype == torch.float32
    # fp32 x: the fp32-rounded weight is what the "torch" and "triton_dequant" paths multiply by;
    # the "triton" path multiplies exact integers. Either is within the error model of the other.
    want = x.double() @ w.double().t() + linear.bias.detach().double()
    rtol, atol = error_bounds(x.reshape(-1, 33), qlinear.qweight, qlinear.scale)
    # Plus one fp32 rounding of each weight (the exact-integer path against the rounded w) and
    # one of the bias addition.
    S = float((x.reshape(-1, 33).double().abs() @ w.double().abs().t()).max())
    atol += 2.0**-24 * (S + float(want.abs().max()))
    with torch.no_grad():
        assert_close(qlinear(x).double(), want, rtol=rtol, atol=atol)
    with pytest.raises(ValueError, match="features"):
        qlinear(torch.ones(2, 32, device=DEVICE))


def test_quantize_model_replaces_every_linear_and_keeps_the_original():
    from week5_integration import model as m

    gpt = m.GPT(m.GPT_TINY).to(DEVICE)
    n_linear = sum(isinstance(mod, nn.Linear) for mod in gpt.modules())
    assert n_linear == 4 * m.GPT_TINY.n_layers + 1  # qkv, proj, up, down per block; the head
    qgpt = qz.quantize_model(gpt, kernel="torch")
    assert sum(isinstance(mod, nn.Linear) for mod in gpt.modules()) == n_linear, "the original changed"
    assert not any(isinstance(mod, nn.Linear) for mod in qgpt.modules())
    assert sum(isinstance(mod, qz.QuantLinear) for mod in qgpt.modules()) == n_linear
    kept = qz.quantize_model(gpt, kernel="torch", skip=("head",))
    assert isinstance(kept.head, nn.Linear)
    with pytest.raises(ValueError, match="skip"):
        qz.quantize_model(gpt, skip=("blocks.0.attn",))
    with pytest.raises(ValueError, match="kernel"):
        qz.quantize_model(gpt, kernel="cuda")
    with pytest.raises(TypeError, match="nn.Module"):
        qz.quantize_model("gpt")


def test_briefly_trained_model_keeps_its_accuracy_in_int8():
    # Error model (module docstring): each weight errs by <= s / 2, RMS s / sqrt(12) ~ 0.3-1% of
    # the weights' RMS for these short rows, and the logits inherit about that relative error.
    # 3% (logits) and 1% (loss), qz.LOGITS_REL_ERR and qz.LOSS_REL_CHANGE, would catch a wrong scale,
    # a transposed weight or a lost row.
    model, val = qz.train_briefly(steps=60)
    report = qz.quantization_report(model, val, kernel="triton")
    assert report["val_loss"] < 3.5, report  # it learned something (uniform is ln 256 = 5.5)
    assert report["logits_rel_err"] < qz.LOGITS_REL_ERR, report
    assert abs(report["val_loss_int8"] - report["val_loss"]) < qz.LOSS_REL_CHANGE * report["val_loss"], report
    assert report["max_weight_err_in_steps"] <= 0.5 + 1e-4, report
    assert report["weight_bytes_int8"] < report["weight_bytes"], report
