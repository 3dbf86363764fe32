"""The norms' inference path: a call no backward follows computes y alone (no mean/rstd stored).

`layer_norm` and `rms_norm` take this path when grad mode is off or no input requires a gradient
(`_infer`: the forward kernels with STORE_STATS=False). It must give the training path's y and
match float64 torch, for rows that fit in one block and for wider rows (the looped kernels). Not
bit for bit: without the stores the compiler may contract a*b+c into FMAs elsewhere (the H100 run
of 2026-11-26 showed LayerNorm at 300 columns differ in the last bit), so the two paths must agree
within a few units of fp32 roundoff of the row's scale, far below any real bug.
"""
import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, random_tensor

ln = runtime.lesson("week4_triton_dl.norms.layernorm")
rn = runtime.lesson("week4_triton_dl.norms.rmsnorm")
DEVICE = runtime.DEVICE
WIDE = ln.MAX_N + 37  # past one block: the looped kernels
# The default run leaves out only LayerNorm without weight and bias on the looped kernels (their
# two extra compiled variants on a GPU); `-m slow` runs it.


def same_formula(a, b):
    """One formula compiled twice: at most 4 units of fp32 roundoff of the largest |y| apart."""
    assert_close(a, b, rtol=0.0, atol=4 * 2.0**-24 * float(b.abs().max()), name="inference vs training path")


@pytest.mark.parametrize("cols", [1, 300, WIDE], ids=["one", "ragged", "looped"])
def test_rms_norm_inference_equals_the_training_forward(cols):
    x, w = random_tensor((3, cols), torch.float32, DEVICE), random_tensor(cols, torch.float32, DEVICE)
    with torch.no_grad():
        y = rn.rms_norm(x, cols, w, 1e-6)
    trained = rn.rms_norm(x.clone().requires_grad_(True), cols, w, 1e-6)
    same_formula(y, trained.detach())
    assert_close(y, F.rms_norm(x.double(), (cols,), w.double(), 1e-6).float())


@pytest.mark.parametrize("affine, cols", [  # every width with the parameters, the one-block widths without
    pytest.param(affine, cols, id=f"{affine}-{name}",
                 marks=[pytest.mark.slow] if (affine, name) == (False, "looped") else [])
    for affine in (True, False) for cols, name in ((1, "one"), (300, "ragged"), (WIDE, "looped"))])
def test_layer_norm_inference_equals_the_training_forward(cols, affine):
    x = random_tensor((3, cols), torch.float32, DEVICE)
    w, b = (random_tensor(cols, torch.float32, DEVICE) for _ in range(2)) if affine else (None, None)
    y = ln.layer_norm(x, cols, w, b)  # nothing requires grad: the inference path
    trained = ln.layer_norm(x.clone().requires_grad_(True), cols, w, b)
    same_formula(y, trained.detach())
    want = F.layer_norm(x.double(), (cols,), None if w is None else w.double(), None if b is None else b.double())
    assert_close(y, want.float())
