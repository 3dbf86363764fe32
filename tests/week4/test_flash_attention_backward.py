"""week4_triton_dl.flash_attention_backward: dQ, dK, dV from the forward's out and lse, against float64 torch.

The launcher `flash_attention_backward` is called directly, on out and lse from the solution's
forward (so `--impl=exercises` checks your backward alone), and compared with float64 autograd of
`attention_reference` within the error model of `attention_error_bounds` (attention_naive.py).
The backward through autograd, gradcheck and the registered ops are test_flash_attention.py's.
"""
import pytest
import torch

from course import runtime
from course.check import dtype_params, poisoned, random_tensor
from tests.week4.attention_helpers import assert_within, qkv

from week4_triton_dl.flash_attention import flash_attention_forward  # noqa: E402  (the solution's forward)

fab = runtime.lesson("week4_triton_dl.flash_attention_backward")
an = runtime.lesson("week4_triton_dl.attention_naive")
DEVICE = runtime.DEVICE
SLOW = pytest.mark.slow
MASKS = ((False, "full"), (True, "causal"))
# One head in simulation (half the interpreted work); on a GPU two, as test_flash_attention.py uses,
# so these tests run the kernels its tests compiled.
HEADS = runtime.pick(gpu=2, sim=1)


def case(*values, id, keep, marks=()):
    """One case of a sweep: marked slow unless the default run keeps it."""
    return pytest.param(*values, id=id, marks=[*marks, *([] if keep else [SLOW])])


def check_grads(grads, q, k, v, do, causal, key_lengths=None):
    bounds = an.attention_error_bounds(q, k, v, do, causal, key_lengths=key_lengths)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = an.attention_reference(qd, kd, vd, causal, key_lengths=key_lengths)
    wanted = torch.autograd.grad(out, (qd, kd, vd), do.double())
    for name, got, want in zip(("dq", "dk", "dv"), grads, wanted):
        assert got.dtype == q.dtype and got.shape == want.shape
        assert_within(got, want, bounds[name], name)


def backward_of(q, k, v, causal, **kwargs):
    """(do, grads) from the launcher, writing into poisoned tensors (unwritten elements fail)."""
    out, lse = flash_attention_forward(q, k, v, causal, key_lengths=kwargs.get("key_lengths"))
    do = random_tensor(q.shape, q.dtype, DEVICE)
    grads = tuple(poisoned(t.shape, t.dtype, DEVICE) for t in (q, k, v))
    got = fab.flash_attention_backward(do, q, k, v, out, lse, causal, grads=grads, **kwargs)
    assert all(g is w for g, w in zip(got, grads)), "the launcher must write into the `grads` it was given"
    return do, got


# Ragged lengths (none a multiple of the simulator's 16/32 blocks), fewer queries than keys and more
# (top-left causal); the default run keeps fp16 causal at D = 64, the dtype and head dim of
# test_flash_attention.py's default backward (its kernels, on a GPU).
@pytest.mark.parametrize("dtype, causal, seq_q, seq_k", [
    case(p.values[0], causal, sq, sk, id=f"{p.id}-{mask}-{sq}-{sk}", marks=p.marks,
         keep=p.values[0] == torch.float16 and causal and (sq, sk) == (37, 37))
    for p in dtype_params([torch.float32, torch.float16, torch.bfloat16]) for causal, mask in MASKS
    for sq, sk in ((37, 37), (20, 45), (50, 19))])
def test_launcher_gradients_match_float64(dtype, causal, seq_q, seq_k):
    q, k, v = qkv(1, HEADS, seq_q, seq_k, 64, dtype)
    do, grads = backward_of(q, k, v, causal)
    check_grads(grads, q, k, v, do, causal)


@pytest.mark.parametrize("causal, blocks, strategy", [
    case(causal, blocks, strategy, id="{}-kv{}x{}-q{}x{}-{}".format(mask, *blocks, strategy),
         keep=(causal, blocks, strategy) == (True, (16, 32, 32, 16), "atomic"))
    for causal, mask in MASKS for blocks in ((16, 32, 32, 16), (32, 16, 16, 32)) for strategy in ("split", "atomic")])
def test_backward_strategies_and_block_shapes(causal, blocks, strategy):
    # key padding too: a ragged last key block is where the atomic dQ must mask padding keys. The
    # shapes of test_flash_attention.py's key-padding test: its forward kernel, on a GPU.
    B, H, Sq, Sk, D = 2, HEADS, 35, 37, 16
    q, k, v = qkv(B, H, Sq, Sk, D, torch.float32)
    lengths = torch.tensor([Sk, 22], device=DEVICE)
    kv_m, kv_n, q_m, q_n = blocks
    do, got = backward_of(q, k, v, causal, key_lengths=lengths, strategy=strategy,
                          kv_config={"BLOCK_M": kv_m, "BLOCK_N": kv_n}, q_config={"BLOCK_M": q_m, "BLOCK_N": q_n})
    check_grads(got, q, k, v, do, causal, key_lengths=lengths)
    assert torch.equal(got[1][1, :, 22:], torch.zeros_like(got[1][1, :, 22:])), "padding keys get dK = 0"


def test_split_backward_is_deterministic():
    # fp16, causal, D = 64 and a ragged length: the kernels test_launcher_gradients_match_float64 ran.
    q, k, v = qkv(1, HEADS, 45, 45, 64, torch.float16)
    out, lse = flash_attention_forward(q, k, v, True)
    do = random_tensor(q.shape, torch.float16, DEVICE)
    first = fab.flash_attention_backward(do, q, k, v, out, lse, True)
    second = fab.flash_attention_backward(do, q, k, v, out, lse, True)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_no_query_or_no_key_gives_zero_gradients():
    for Sq, Sk in ((0, 4), (5, 0)):
        q, k, v = qkv(1, 2, Sq, Sk, 16, torch.float32)
        out, lse = flash_attention_forward(q, k, v)
        grads = tuple(poisoned(t.shape, t.dtype, DEVICE) for t in (q, k, v))
        got = fab.flash_attention_backward(torch.ones_like(out), q, k, v, out, lse, grads=grads)
        assert all(torch.equal(g, torch.zeros_like(g)) for g in got), "an empty sum is zero"


def test_rejects_bad_outputs_configs_and_strategies():
    q, k, v = qkv(1, 2, 12, 12, 16, torch.float32)
    out, lse = flash_attention_forward(q, k, v)
    with pytest.raises(TypeError, match="lse has dtype"):
        fab.flash_attention_backward(q, q, k, v, out, lse.double())
    with pytest.raises(ValueError, match="do has shape"):
        fab.flash_attention_backward(q[:, :1], q, k, v, out, lse)
    with pytest.raises(ValueError, match="lse has shape"):
        fab.flash_attention_backward(q, q, k, v, out, lse[:, :1])
    with pytest.raises(TypeError, match="dk has dtype"):
        fab.flash_attention_backward(q, q, k, v, out, lse, grads=(torch.empty_like(q), k.half(), torch.empty_like(v)))
    with pytest.raises(ValueError, match="power of two"):
        fab.flash_attention_backward(q, q, k, v, out, lse, kv_config={"BLOCK_M": 24, "BLOCK_N": 16})
    with pytest.raises(ValueError, match="strategy"):
        fab.flash_attention_backward(q, q, k, v, out, lse, strategy="fast")
