"""Helpers shared by test_cross_entropy.py and test_fused_linear_cross_entropy.py: the sweep's
case marker, the error model's tolerances (test_cross_entropy.py's docstring derives them), the
float64 references, the inputs at logits ~1e4, and the compile-and-compare check.

Both lessons share their row loss (fused_linear_cross_entropy.py imports cross_entropy.py's
kernels, IGNORE_INDEX and BLOCK_V), so one set of helpers serves both. `ce` is loaded through
runtime.lesson: under --impl=exercises it is the stub, whose constants are the solution's.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, random_tensor

ce = runtime.lesson("week4_triton_dl.cross_entropy")
DEVICE = runtime.DEVICE
SLOW = pytest.mark.slow


def case(*values, id=None, keep, marks=()):
    """One case of a sweep: marked slow unless the default run keeps it."""
    return pytest.param(*values, id=id, marks=[*marks, *([] if keep else [SLOW])])


UNIT = {torch.float64: 2.0**-52, torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}


def grad_atol(ref, dtype, k=8):
    """k units of the gradient dtype's precision (fp32 at best: the kernel's arithmetic) times max |ref|."""
    unit = max(UNIT[dtype], UNIT[torch.float32]) if dtype != torch.float64 else UNIT[dtype]
    return k * unit * float(ref.detach().abs().max().clamp_min(1e-30))


def make_targets(n, v, ignore_some=True):
    t = torch.randint(0, v, (n,), device=DEVICE)
    if ignore_some and n > 2:
        t[1] = ce.IGNORE_INDEX
    return t


def reference_grad(logits, targets, **kwargs):
    x = logits.detach().double().requires_grad_()
    loss = F.cross_entropy(x, targets, **kwargs)
    (g,) = torch.autograd.grad(loss.sum(), x)
    return loss, g


# --------------------------------------------------------------------- precision at |x| ~ 1e4
U32 = 2.0**-24  # fp32's unit roundoff


def large_loss_tolerance(v, block_v=ce.BLOCK_V):
    """(rtol, atol) of the error model: 8u * loss + 8u (log2 V + V / BLOCK_V + 4)."""
    return 8 * U32, 8 * U32 * (math.log2(v) + v / min(block_v, 2 ** math.ceil(math.log2(v))) + 4)


def large_logits(n, v):
    """The realistic case: three logits per row near 1e4 (1e4 + N(0, 1)), the rest N(0, 10) far
    below, at columns that cross block edges; a row of +-1e4 only; a row all near 1e4 (a large
    shift of ordinary logits: the loss is ~log V, and CE is shift-invariant). Targets: the top
    logit, a near one, a far one, an ignored row."""
    x = random_tensor((n, v), torch.float32, DEVICE, scale=10.0)
    near = [2, v // 2, v - 1]
    x[:, near] = 1e4 + random_tensor((n, 3), torch.float32, DEVICE)
    x[-2] = 1e4 + random_tensor(v, torch.float32, DEVICE)
    x[-1] = 1e4 * torch.sign(random_tensor(v, torch.float32, DEVICE))
    t = torch.randint(0, v, (n,), device=DEVICE)
    t[0] = near[int(x[0, near].argmax())]  # the largest logit: a loss of ~0.1-1, where 1e-3 errors showed
    t[1] = near[0]
    t[2] = 5  # far below: a loss of ~1e4
    t[3] = ce.IGNORE_INDEX
    t[-1] = int((x[-1] > 0).nonzero()[0])  # one of the +1e4 entries: loss = log(count of them)
    return x, t


# --------------------------------------------------------------------- under torch.compile
def compile_and_compare(fn, leaves, t, dtype, rtol):
    """fn compiled with fullgraph=True (a graph break raises) against fn run eagerly: loss and grads."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend=runtime.pick(gpu="inductor", sim="aot_eager"))
    ours = [x.clone().requires_grad_(True) for x in leaves]
    loss = compiled(*ours, t)
    grads = torch.autograd.grad(loss, ours)
    eager = [x.clone().requires_grad_(True) for x in leaves]
    want = fn(*eager, t)
    want_grads = torch.autograd.grad(want, eager)
    # The same kernels: only the torch ops around them may round differently once fused.
    assert_close(loss, want, rtol=2 * rtol, atol=1e-5, name="loss")
    for got, ref in zip(grads, want_grads):
        assert_close(got, ref, rtol=4 * rtol, atol=16 * rtol * float(ref.abs().max()), name="grad")


def rtol_for(dtype):
    return {torch.float32: 1.3e-6, torch.bfloat16: 1.6e-2}[dtype]
