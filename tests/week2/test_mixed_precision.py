"""week2_pytorch_optimizations.mixed_precision: autocast, where precision is lost, GradScaler."""
import pytest
import torch
import torch.nn as nn

from course import runtime
from course.check import random_tensor

mp = runtime.lesson("week2_pytorch_optimizations.mixed_precision")
DEVICE = runtime.DEVICE


def test_format_facts():
    facts = mp.format_facts()
    assert facts["bfloat16"]["mantissa_bits"] == 8 and facts["float16"]["mantissa_bits"] == 11
    assert facts["float32"]["mantissa_bits"] == 24
    assert facts["bfloat16"]["max"] > 1e38 and facts["float16"]["max"] == 65504.0


@pytest.mark.parametrize("dtype", mp.LOW, ids=str)
def test_autocast_runs_linear_low_and_keeps_weights_fp32(dtype):
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4)).to(DEVICE)
    seen = mp.autocast_dtypes(model, random_tensor((3, 8), torch.float32, DEVICE), dtype)
    assert seen["0"] == dtype and seen["2"] == dtype
    assert seen["<parameters>"] == torch.float32  # "mixed": master weights stay float32
    if runtime.on_gpu():
        assert seen["1"] == torch.float32  # CUDA autocast runs layer_norm in float32


def test_autocast_rejects_float32():
    with pytest.raises(ValueError, match="dtype must be"):
        mp.autocast_dtypes(nn.Linear(2, 2), torch.ones(1, 2), torch.float32)


@pytest.mark.parametrize("k", [1, 17, 256, runtime.pick(gpu=8191, sim=1031)])
def test_matmul_error_ranks_the_formats(k):
    err = {d: mp.matmul_error(k, d) for d in (torch.float32, torch.float16, torch.bfloat16)}
    # Each bound: a few units of the format's input rounding, independent of k (fp32 accumulation).
    assert err[torch.float32] < 1e-6 < err[torch.float16] < 2e-3 < err[torch.bfloat16] < 1.5e-2, err


@pytest.mark.parametrize("dtype, worse_than", [(torch.bfloat16, 0.5), (torch.float16, 0.01)], ids=str)
def test_low_precision_accumulator_stalls(dtype, worse_than):
    r = mp.accumulation_error(2000, dtype)
    # 2000 * 0.01 = 20: in bf16 the running total stops growing once 0.01 < half an ulp of it.
    assert r["rel_err"] > worse_than
    assert abs(r["fp32_accumulator"] - r["exact"]) / r["exact"] < 1e-6


def test_loss_scaling_rescues_small_fp16_gradients():
    grads = torch.logspace(-10, -2, 1000)  # typical tail of gradient magnitudes
    unscaled = mp.fp16_underflow_fraction(grads)
    scaled = mp.fp16_underflow_fraction(grads, scale=2.0 ** 16)
    assert unscaled > 0.2 and scaled < 0.01, (unscaled, scaled)


def test_gradscaler_skips_a_step_with_inf_gradients_and_halves_the_scale():
    torch.manual_seed(0)
    model = nn.Linear(4, 2).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = mp.make_scaler(init_scale=2.0 ** 10)
    x, y = random_tensor((8, 4), torch.float32, DEVICE), random_tensor((8, 2), torch.float32, DEVICE)
    ok = mp.fp16_step(model, opt, scaler, x, y)
    assert not ok["skipped"] and ok["scale_after"] == ok["scale_before"]
    before = [p.detach().clone() for p in model.parameters()]
    bad = mp.fp16_step(model, opt, scaler, x * 1e30, y)  # fp16 overflows to inf in the forward
    assert bad["skipped"] and bad["scale_after"] == bad["scale_before"] / 2
    for p, q in zip(model.parameters(), before):
        assert torch.equal(p.detach(), q)  # the step was skipped: weights unchanged


def test_loss_error_vs_float64():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).to(DEVICE)
    x, y = random_tensor((16, 32), torch.float32, DEVICE), random_tensor((16, 8), torch.float32, DEVICE)
    err = mp.loss_error_vs_fp64(model, x, y)
    assert err["float32"] < 1e-5 and err["float32"] < err["float16"] < 1e-2 and err["bfloat16"] < 3e-2, err
