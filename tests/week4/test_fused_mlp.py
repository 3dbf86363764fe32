"""week4_triton_dl.fused_mlp: epilogue-fused Linear + activation and the SwiGLU MLP vs float64 torch.

Error model. Every variant (eager torch in fp16/bf16 too) rounds each matmul output and each
stored intermediate (g, u, h; dh, dg, du) to the dtype once: relative error u = 2^-11 (fp16),
2^-8 (bf16), and fp32 accumulation adds ~sqrt(K) 2^-24 per K-term sum. Chained through two
matmuls that is a few u times the size of the largest entry, so outputs and gradients are
compared with atol = k u max|reference| (k = 8 for a forward, 16 for gradients, which pass
through two more roundings). A swapped gate and up, a missing silu', a transposed weight or an
unwritten tile are O(max|reference|) wrong: 100-1000 times over these tolerances.
"""
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor, with_specials

fm = runtime.lesson("week4_triton_dl.fused_mlp")
DEVICE = runtime.DEVICE
UNIT = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
MLP_DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16])
LINEAR_DTYPES = dtype_params([torch.float16, torch.bfloat16])
# (tokens M, width d, hidden F): ones, primes, not multiples of the 32-wide simulated tiles, K > BLOCK_K.
SHAPES = [(1, 1, 1), (17, 33, 20), (31, 45, 7), (64, 16, 32), (3, 97, 65)] + runtime.pick(
    gpu=[(127, 255, 129), (1000, 512, 1376), (2048, 1024, 2816)], sim=[])
# What the default run keeps (the rest is marked slow; `pytest --slow` runs it all). On a GPU the
# dual GEMM compiles once per dtype and size class (a dimension of 1, multiples of 16, neither)
# and autotunes every large (M, F, K): fp32 (true fp32 products, "ieee") is by far the costliest
# to compile. The default run keeps fp32 and fp16 on the ragged (17, 33, 20) (one tile), fp32 also
# on (127, 255, 129) and fp16 on (3, 97, 65) (several tiles of neither class), fp16 alone on the
# ones (1, 1, 1); bf16's dual GEMM runs (store_gu, against float64 through the gradients) in
# test_swiglu_mlp_forward_and_backward and, autotuned, in test_gate_up_autotuner_picked_a_config.
# Linear + activation once per dtype (fp16 gelu with a bias, bf16 silu without): every
# activation's epilogue is week 3's matmul, tested there, and its derivative is
# test_act_backward_kernel's. Slow adds the rest of the products and the large sizes, each of
# which the autotuner tunes (every config compiled and timed).
SLOW = pytest.mark.slow
GENERIC_SHAPES = [(17, 33, 20), (31, 45, 7), (3, 97, 65), (127, 255, 129)]  # no 1, no multiple of 16
GATE_UP_DEFAULTS = {torch.float32: [(17, 33, 20), (127, 255, 129)],
                    torch.float16: [(1, 1, 1), (17, 33, 20), (3, 97, 65)],
                    torch.bfloat16: []}


def case(*values, id, keep, marks=()):
    """One case of a sweep: marked slow unless the default run keeps it."""
    return pytest.param(*values, id=id, marks=[*marks, *([] if keep else [SLOW])])


def gate_up_default(dtype, shape):
    return shape in GATE_UP_DEFAULTS[dtype]


def cases(dtypes, shapes, keep):
    return [case(d.values[0], shape, id=f"{d.id}-{shape}", keep=keep(d.values[0], shape), marks=d.marks)
            for d in dtypes for shape in shapes]


def scaled_atol(ref, dtype, k):
    return k * UNIT[dtype] * float(ref.detach().abs().max().clamp_min(1e-30))


def mlp_inputs(m, d, f, dtype, requires_grad=False):
    x = random_tensor((m, d), dtype, DEVICE).requires_grad_(requires_grad)
    wgu = random_tensor((2 * f, d), dtype, DEVICE, scale=d**-0.5).requires_grad_(requires_grad)
    wd = random_tensor((d, f), dtype, DEVICE, scale=f**-0.5).requires_grad_(requires_grad)
    return x, wgu, wd


def grads64(fn, inputs, grad_out):
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    out = fn(*leaves)
    return out, torch.autograd.grad(out, leaves, grad_out.double())


# ------------------------------------------------------------------------------ the dual GEMM
@pytest.mark.parametrize("dtype, shape", cases(MLP_DTYPES, SHAPES, gate_up_default))
def test_gate_up_kernel_matches_reference(dtype, shape):
    m, d, f = shape
    x, wgu, _ = mlp_inputs(m, d, f, dtype)
    out = poisoned((m, f), dtype, DEVICE)
    assert fm.swiglu_gate_up(x, wgu, out=out) is out
    g = x.double() @ wgu[:f].double().t()
    u = x.double() @ wgu[f:].double().t()
    want = torch.nn.functional.silu(g) * u
    assert_close(out, want.to(dtype), atol=scaled_atol(want, dtype, 8), name="h")
    h, g_, u_ = fm.swiglu_gate_up(x, wgu, store_gu=True)
    assert_close(h, out, rtol=0, atol=0, name="h with store_gu")  # the same kernel, bit for bit
    assert_close(g_, g.to(dtype), atol=scaled_atol(g, dtype, 8), name="g")
    assert_close(u_, u.to(dtype), atol=scaled_atol(u, dtype, 8), name="u")


def test_gate_up_strided_input_and_empty():
    x = random_tensor((20, 64), torch.float16, DEVICE)[:, ::2]  # row stride 64, column stride 2
    wgu = random_tensor((2 * 9, 32), torch.float16, DEVICE, scale=32**-0.5)
    want = torch.nn.functional.silu(x.double() @ wgu[:9].double().t()) * (x.double() @ wgu[9:].double().t())
    assert_close(fm.swiglu_gate_up(x, wgu), want.half(), atol=scaled_atol(want, torch.float16, 8))
    assert fm.swiglu_gate_up(torch.empty(0, 8, device=DEVICE), torch.ones(6, 8, device=DEVICE)).shape == (0, 3)
    h = fm.swiglu_gate_up(torch.empty(4, 0, device=DEVICE), torch.empty(6, 0, device=DEVICE))
    assert_close(h, torch.zeros(4, 3, device=DEVICE))  # K = 0: empty sums, silu(0) * 0 = 0


# ------------------------------------------------------------------------ element-wise kernels
@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.float16, torch.bfloat16]))
def test_swiglu_backward_kernel(dtype):
    g = random_tensor((13, 37), dtype, DEVICE, scale=3.0)
    u = random_tensor((13, 37), dtype, DEVICE)
    dh = random_tensor((13, 37), dtype, DEVICE)
    dgu = fm.swiglu_backward(dh, g, u)
    gd, ud = g.double().requires_grad_(), u.double().requires_grad_()
    (torch.nn.functional.silu(gd) * ud).backward(dh.double())
    want = torch.cat([gd.grad, ud.grad], dim=1)
    # fp32 arithmetic, one rounding to the dtype at the store: the dtype's default tolerance
    # (plus fp32 rounding of sigmoid for fp32 inputs).
    assert_close(dgu, want.to(dtype), atol=scaled_atol(want, dtype, 4) if dtype == torch.float32 else None)


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu"])
def test_act_backward_kernel(activation):
    z = random_tensor((7, 129), torch.float32, DEVICE, scale=3.0)
    dy = random_tensor((7, 129), torch.float32, DEVICE)
    zd = z.double().requires_grad_()
    act = {"relu": torch.relu, "silu": torch.nn.functional.silu,
           "gelu": lambda t: torch.nn.functional.gelu(t),
           "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[activation]
    act(zd).backward(dy.double())
    assert_close(fm.act_backward(dy, z, activation), zd.grad.float(), atol=scaled_atol(zd.grad, torch.float32, 8))


# ------------------------------------------------------------------------------ SwiGLU MLP
@pytest.mark.parametrize("dtype, shape", cases(MLP_DTYPES, SHAPES[1:4], lambda d, shape: shape != (64, 16, 32)))
def test_swiglu_mlp_forward_and_backward(dtype, shape):
    m, d, f = shape
    inputs = mlp_inputs(m, d, f, dtype, requires_grad=True)
    out = fm.swiglu_mlp(*inputs)
    grad_out = random_tensor(out.shape, dtype, DEVICE)
    got = torch.autograd.grad(out, inputs, grad_out)
    want, want_grads = grads64(fm.swiglu_mlp_torch, inputs, grad_out)
    assert_close(out, want.to(dtype), atol=scaled_atol(want, dtype, 8), name="out")
    for name, g, w in zip(("dx", "dW_gate_up", "dW_down"), got, want_grads):
        assert_close(g, w.to(dtype), atol=scaled_atol(w, dtype, 16), name=name)


def test_swiglu_module_matches_eager_module_and_batched_shapes():
    torch.manual_seed(0)
    fused = fm.SwiGLUMLP(24, 40, device=DEVICE, dtype=torch.float32)
    eager = fm.SwiGLUMLPTorch.from_fused(fused)
    x = random_tensor((2, 5, 24), torch.float32, DEVICE)
    got, want = fused(x), eager(x)
    assert got.shape == (2, 5, 24)
    assert_close(got, want, atol=scaled_atol(want, torch.float32, 64))  # two fp32 roundings orders apart
    with torch.no_grad():
        assert_close(fused(x), got.detach(), atol=0, rtol=0)  # inference path: the same kernel, no g, u


class StorageCounter(TorchDispatchMode):
    """Counts the new storages of a given size that aten ops allocate (views of inputs excluded)."""

    def __init__(self, nbytes):
        super().__init__()
        self.nbytes, self.allocations = nbytes, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func._schema.is_mutable or func.is_view:  # in-place ops and views allocate nothing
            return out
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and leaf.untyped_storage().nbytes() == self.nbytes \
                    and leaf.untyped_storage().data_ptr() not in inputs:
                self.allocations += 1
        return out


def test_inference_writes_only_h_and_training_keeps_three_intermediates():
    m, d, f = 12, 8, 40  # N x F = 480 elements: no other tensor has that size
    x, wgu, wd = mlp_inputs(m, d, f, torch.float32)
    with torch.no_grad(), StorageCounter(m * f * 4) as inference:
        fm.swiglu_mlp(x, wgu, wd)
    assert inference.allocations == 1  # h only: g and u stay in registers
    with StorageCounter(m * f * 4) as eager:
        fm.swiglu_mlp_torch(x, wgu, wd)
    assert eager.allocations == 4      # g, u, silu(g), h
    counts = fm.activation_bytes(8192, 4096, 14336, 2)
    assert counts["swiglu_fused_inference"] < counts["swiglu_fused_training"] < counts["swiglu_torch"]
    assert counts["swiglu_torch"] - counts["swiglu_fused_inference"] == (8192 * 4096 + 6 * 8192 * 14336) * 2


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # inf - inf in NumPy, on purpose
def test_swiglu_nan_and_inf_rows_like_torch():
    # d = 20, not 16: the fp32 kernels of the sizes above, not one more costly fp32 compile.
    x, wgu, wd = mlp_inputs(6, 20, 24, torch.float32)
    x[1, 3] = math.nan
    x[4] = with_specials(x[4])
    got = fm.swiglu_mlp(x, wgu, wd)
    want = fm.swiglu_mlp_torch(x, wgu, wd)
    assert torch.isnan(got[1]).all() and torch.isnan(got[4]).all()
    assert_close(got, want, atol=scaled_atol(want.nan_to_num(0.0), torch.float32, 64))


# -------------------------------------------------------------------------- Linear + act
def _activation_params():
    for act in fm.BACKWARD_ACTIVATIONS:
        missing = act not in fm.ACTIVATIONS
        yield pytest.param(act, marks=pytest.mark.skipif(
            missing, reason=f"week3_triton_kernels.matmul has no {act!r} epilogue yet"), id=act)


def _linear_cases():
    # fp16 gelu with a bias, bf16 silu without one.
    for d in LINEAR_DTYPES:
        for act in _activation_params():
            for bias, name in ((True, "bias"), (False, "no_bias")):
                keep = (d.id, act.id, bias) in (("float16", "gelu", True), ("bfloat16", "silu", False))
                yield case(d.values[0], *act.values, bias, id=f"{d.id}-{act.id}-{name}", keep=keep,
                           marks=[*d.marks, *act.marks])


@pytest.mark.parametrize("dtype, activation, bias", list(_linear_cases()))
def test_linear_act_forward_and_backward(dtype, activation, bias):
    x = random_tensor((3, 7, 41), dtype, DEVICE).requires_grad_()
    w = random_tensor((50, 41), dtype, DEVICE, scale=41**-0.5).requires_grad_()
    b = random_tensor(50, dtype, DEVICE).requires_grad_() if bias else None
    inputs = [t for t in (x, w, b) if t is not None]
    y = fm.linear_act(x, w, b, activation)
    assert y.shape == (3, 7, 50)
    grad_out = random_tensor(y.shape, dtype, DEVICE)
    got = torch.autograd.grad(y, inputs, grad_out)
    want, want_grads = grads64(lambda *t: fm.linear_act_torch(t[0], t[1], t[2] if bias else None, activation),
                               inputs, grad_out)
    assert_close(y, want.to(dtype), atol=scaled_atol(want, dtype, 8), name="y")
    for name, g, w_ in zip(("dx", "dW", "db"), got, want_grads):
        assert_close(g, w_.to(dtype), atol=scaled_atol(w_, dtype, 16), name=name)


def bad_inputs():
    h = lambda *s: torch.ones(*s, dtype=torch.float16, device=DEVICE)  # noqa: E731
    yield "odd gate_up rows", ValueError, "odd", lambda: fm.swiglu_gate_up(h(4, 8), h(5, 8))
    yield "gate_up width", ValueError, "columns", lambda: fm.swiglu_gate_up(h(4, 8), h(6, 7))
    yield "gate_up dtypes", TypeError, "dtypes must match", lambda: fm.swiglu_gate_up(h(4, 8), h(6, 8).float())
    yield "gate_up fp64", TypeError, "expected one of", lambda: fm.swiglu_gate_up(h(4, 8).double(), h(6, 8).double())
    yield "gate_up out", ValueError, "out has shape", lambda: fm.swiglu_gate_up(h(4, 8), h(6, 8), out=h(4, 4))
    yield "mlp w_down", ValueError, "w_down must be", lambda: fm.swiglu_mlp(h(4, 8), h(6, 8), h(3, 8))
    yield "mlp device", ValueError, "kernels run on", lambda: fm.swiglu_mlp(
        h(4, 8), torch.ones(6, 8, device="meta").half(), h(8, 3))
    yield "linear fp32", TypeError, "expected one of", lambda: fm.linear_act(h(4, 8).float(), h(6, 8).float())
    yield "linear width", ValueError, "in_features", lambda: fm.linear_act(h(4, 8), h(6, 7))
    yield "linear bias", ValueError, "bias has 5", lambda: fm.linear_act(h(4, 8), h(6, 8), h(5))
    yield "linear activation", ValueError, "activation must be", lambda: fm.linear_act(h(4, 8), h(6, 8), None, "tanh")
    yield "act_backward shape", ValueError, "shapes must match", lambda: fm.act_backward(h(4), h(5), "gelu")
    yield "swiglu_backward dtype", TypeError, "dtypes must match", lambda: fm.swiglu_backward(h(2, 3), h(2, 3),
                                                                                           h(2, 3).float())


@pytest.mark.parametrize("case, error, message, call", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input(case, error, message, call):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.gpu(reason="autotuning times configs on the device")
def test_gate_up_autotuner_picked_a_config():
    x, wgu, _ = mlp_inputs(1024, 512, 768, torch.bfloat16)  # above SMALL_PROBLEM: every config is timed
    fm.swiglu_gate_up(x, wgu)
    assert fm.swiglu_gate_up_kernel_autotuned.best_config in fm.AUTOTUNE_CONFIGS
