"""course.sim_bf16: bfloat16 in Triton's interpreter is bf16 storage with float32 arithmetic, or refused.

Without the correction the interpreter computes bf16 on raw 16-bit patterns: an add of two bf16
blocks is NumPy's uint16 add, a bf16 tl.dot multiplies the patterns as integers (~1e10 for inputs
~1), fp32 -> bf16 truncates. The capstone's fast model under bf16 autocast on a CPU got
FlashAttention gradients ~1e11 where its twin's are ~0.1, silently.

Error models: an elementwise kernel that computes in float32 and rounds once to bf16 on the store is
torch's bf16 op exactly (torch computes bf16 ops in float32 and rounds to nearest even: so does
the widened launch). A bf16 tl.dot: exact products, float32 sums over K (<= K u32 sum|a b|), one
rounding of the output to bf16 (<= 2^-8 relative).
"""
import numpy as np
import pytest
import torch

from course import runtime
from course.check import assert_close, poisoned

DEVICE = runtime.DEVICE
sim_only = pytest.mark.skipif(runtime.on_gpu(), reason="checks the Triton interpreter; a GPU runs compiled kernels")

from course.gpu import tl, triton  # noqa: E402  (after course.runtime: the interpreter in simulation)


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask)  # no cast: a bf16 + bf16 add on a GPU
    tl.store(out_ptr + offs, (x * y + y).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    m, k, n = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    tl.store(c_ptr + m[:, None] * N + n[None, :], tl.dot(a, b).to(c_ptr.dtype.element_ty))


@triton.jit
def _round_in_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x.to(tl.bfloat16).to(tl.float32), mask=offs < n)


def _bits(t):
    return t.view(torch.int16)


@sim_only
def test_the_interpreter_internals_the_correction_depends_on():
    """The private names course/sim_bf16.py uses, on this Triton. If this fails after a Triton
    upgrade: a renamed name (fix NAMES and the wrappers), or a Triton whose interpreter has real bf16
    (`_get_np_dtype(tl.bfloat16)` no longer uint16: the correction may no longer be needed)."""
    import inspect

    import triton.runtime.interpreter as interpreter

    from course import sim_bf16, sim_triton

    as_numpy = getattr(interpreter, "_get_np_dtype", None)
    assert as_numpy is not None, ("triton.runtime.interpreter._get_np_dtype is gone: find how this interpreter "
                                  "stores bf16 before trusting course/sim_bf16.py")
    assert as_numpy(tl.bfloat16) == np.dtype(np.uint16), "bf16 is no longer raw uint16 bits: is the correction needed?"
    executor, builder = interpreter.GridExecutor, interpreter.InterpreterBuilder
    restore = inspect.unwrap(executor._restore_args_dev)
    assert list(inspect.signature(executor._restore_args_dev).parameters)[1:] == list(sim_bf16.RESTORE_PARAMETERS)
    assert restore.__module__ == "course.sim_bf16", "the widening is not installed"
    assert builder.get_bf16_ty.__wrapped__ is not None  # Triton's own, kept by the refusal
    assert not any(what.startswith("bf16") or "bf16 values" in what for what in sim_triton.LOST), sim_triton.LOST


@sim_only
@pytest.mark.parametrize("n", [1, 37, 1000])
def test_elementwise_bf16_is_torchs_bf16_bit_for_bit(n):
    """Inputs as views inside bigger buffers (offsets kept), y read as bf16 and added as bf16."""
    gen = torch.Generator().manual_seed(n)
    buf = torch.randn(2 * n + 5, generator=gen).bfloat16()
    buf.view(torch.int16)[0] = 0x7F81  # a NaN with a payload, outside the views: its bits must survive
    before = buf.clone()
    x, y = buf[3:3 + n], buf[3 + n:3 + 2 * n]
    out = poisoned((n,), torch.bfloat16, DEVICE)
    _add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    want = (x.float() * y.float() + y.float()).bfloat16()  # one rounding, to nearest even
    assert torch.equal(_bits(out), _bits(want)), (out - want).abs().max()
    assert torch.equal(_bits(buf), _bits(before))  # the inputs came back bit for bit


@sim_only
def test_bf16_dot_matches_float64_within_the_bf16_error_model():
    M, K, N = 16, 64, 32
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(M, K, generator=gen).bfloat16(), torch.randn(K, N, generator=gen).bfloat16()
    c = poisoned((M, N), torch.bfloat16, DEVICE)
    _dot_kernel[(1,)](a, b, c, M=M, K=K, N=N)
    want = a.double() @ b.double()
    spread = a.double().abs() @ b.double().abs()
    bound = 2.0 ** -8 * want.abs() + K * 2.0 ** -24 * spread
    err = (c.double() - want).abs()
    assert bool((err <= bound).all()), f"worst excess {float((err - bound).max()):.3g}"


@sim_only
def test_fast_model_under_bf16_autocast_has_its_twins_gradients():
    """The bug as a learner met it: capstone's fast model (week 4's FlashAttention, ...) under bf16
    autocast on a CPU. Bound: the capstone's own bf16 bound (REL_NORM = 2^-4 relative in norm)."""
    from capstone import model as cm

    fast = cm.build("tiny", "fast", seed=3)
    ref = cm.reference_twin(fast)
    gen = torch.Generator().manual_seed(1)
    x, y = (torch.randint(0, fast.cfg.vocab_size, (2, 24), generator=gen).to(DEVICE) for _ in range(2))
    grads = []
    for model in (fast, ref):
        model.zero_grad(set_to_none=True)
        with torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16):
            model.loss(x, y).backward()
        grads.append({name: p.grad.float() for name, p in model.named_parameters()})
    for name in grads[1]:
        got, want = grads[0][name], grads[1][name]
        assert bool(torch.isfinite(got).all()), name
        assert float((got - want).norm() / want.norm()) <= 2.0 ** -4, name


@sim_only
def test_a_bf16_value_made_inside_a_kernel_is_refused_with_what_to_do():
    x = torch.randn(8)
    out = poisoned((8,), torch.float32, DEVICE)
    with pytest.raises(Exception, match=r"made a bfloat16 value.*out_ptr.dtype.element_ty.*float32 or float16"):
        _round_in_kernel[(1,)](x, out, 8, BLOCK=8)


@sim_only
def test_bf16_sharing_memory_with_another_dtype_or_reinterpreted_is_refused():
    buf = torch.zeros(16, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="share memory.*float32 or float16"):
        _add_kernel[(1,)](buf, buf, buf.view(torch.int16), 16, BLOCK=16)
    with pytest.raises(TypeError, match="reinterpreted as bfloat16.*float32 or float16"):
        _add_kernel[(1,)](triton.reinterpret(buf.view(torch.int16), tl.bfloat16), buf, buf, 16, BLOCK=16)


def test_without_the_private_names_bf16_arguments_are_refused_at_launch():
    """A Triton whose GridExecutor lacks _restore_args_dev: bf16 tensors are refused before the
    kernel runs (never computed on raw bits), float32 ones run, and what is off is named."""
    import types

    from course import sim_bf16

    class GridExecutor:
        fn = types.SimpleNamespace(__name__="k")

        def _init_args_hst(self, args_dev, kwargs):
            return args_dev, kwargs

        def __call__(self, *args, **kwargs):
            return "ran"

    class InterpreterBuilder:
        def get_bf16_ty(self):
            return "bf16"

    lost = sim_bf16.patch(types.SimpleNamespace(GridExecutor=GridExecutor, InterpreterBuilder=InterpreterBuilder))
    assert list(lost.values()) == ["missing GridExecutor._restore_args_dev"]
    assert GridExecutor()(torch.zeros(2)) == "ran"
    with pytest.raises(TypeError, match="`k` was given a bfloat16 tensor.*float32 or float16.*GPU"):
        GridExecutor()(torch.zeros(2), out=(torch.zeros(2, dtype=torch.bfloat16),))
    with pytest.raises(TypeError, match="made a bfloat16 value"):
        InterpreterBuilder().get_bf16_ty()
