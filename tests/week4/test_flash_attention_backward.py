"""week4_triton_dl.attention.backward: dQ, dK, dV from the forward's out and lse, against float64 torch.

The lesson comes in stages (`--stage N` runs one): 1, delta = rowsum(dO * O) (`backward_delta`);
2, dK and dV of one key block, full attention (`launch_dkdv`); 3, the causal skip (`launch_dkdv`,
causal); 4, dQ (`launch_dq`) and the whole backward (`flash_attention_backward`); 5, dQ with
atomics (strategy "atomic"). A stage's tests call its own launcher, with what earlier stages
compute taken from torch, so they pass while later stages are still holes.

The launchers are called directly, on out and lse from the solution's forward (so
`--impl=exercises` checks your backward alone), and compared with float64 autograd of
`attention_reference` within the error model of `attention_error_bounds` (attention/naive.py).
The backward through autograd, gradcheck and the registered ops are test_flash_attention.py's.
"""
import math

import pytest
import torch

from course import runtime
from course.check import dtype_params, poisoned, random_tensor
from tests.week4.attention_helpers import assert_within, qkv

from week4_triton_dl.attention.op import flash_attention_forward  # the solution's forward

fab = runtime.lesson("week4_triton_dl.attention.backward")
an = runtime.lesson("week4_triton_dl.attention.naive")
DEVICE = runtime.DEVICE
SLOW = pytest.mark.slow
MASKS = ((False, "full"), (True, "causal"))
# One head in simulation (half the interpreted work); on a GPU two, as test_flash_attention.py uses,
# so these tests run the kernels its tests compiled.
HEADS = runtime.pick(gpu=2, sim=1)
stage = pytest.mark.stage


def case(*values, id, keep, marks=()):
    """One case of a sweep: marked slow unless the default run keeps it."""
    return pytest.param(*values, id=id, marks=[*marks, *([] if keep else [SLOW])])


def check_grads(grads, q, k, v, do, causal, key_lengths=None, names=("dq", "dk", "dv")):
    """The gradients `names` (dq, dk, dv or a part of them, in that order) against float64 autograd."""
    bounds = an.attention_error_bounds(q, k, v, do, causal, key_lengths=key_lengths)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = an.attention_reference(qd, kd, vd, causal, key_lengths=key_lengths)
    wanted = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(out, (qd, kd, vd), do.double())))
    for name, got in zip(names, grads):
        assert got.dtype == q.dtype and got.shape == wanted[name].shape
        assert_within(got, wanted[name], bounds[name], name)


def backward_of(q, k, v, causal, **kwargs):
    """(do, grads) from the launcher, writing into poisoned tensors (unwritten elements fail)."""
    out, lse = flash_attention_forward(q, k, v, causal, key_lengths=kwargs.get("key_lengths"))
    do = random_tensor(q.shape, q.dtype, DEVICE)
    grads = tuple(poisoned(t.shape, t.dtype, DEVICE) for t in (q, k, v))
    got = fab.flash_attention_backward(do, q, k, v, out, lse, causal, grads=grads, **kwargs)
    assert all(g is w for g, w in zip(got, grads)), "the launcher must write into the `grads` it was given"
    return do, got


def stage_inputs(q, k, v, causal, key_lengths=None):
    """(do, lse, delta) for one stage's launcher: the solution's forward, delta from torch (stage 1's)."""
    out, lse = flash_attention_forward(q, k, v, causal, key_lengths=key_lengths)
    do = random_tensor(q.shape, q.dtype, DEVICE)
    delta = (do.double() * out.double()).sum(-1).to(lse.dtype)
    return do, lse, delta


# ---------------------------------------------------------------------------------------- stage 1
@stage(1)
@pytest.mark.parametrize("dtype, seq_q", [
    case(p.values[0], sq, id=f"{p.id}-{sq}", marks=p.marks, keep=(p.values[0], sq) in ((torch.float16, 37),
                                                                                      (torch.float32, 1)))
    for p in dtype_params([torch.float32, torch.float16, torch.bfloat16, torch.float64]) for sq in (37, 1, 50)])
def test_delta_is_the_row_sum_of_do_times_out(dtype, seq_q):
    # dO in a transposed layout (B, S, H, D in memory): the kernel takes strides, never copies.
    B, D = 2, 64
    out = random_tensor((B, HEADS, seq_q, D), dtype, DEVICE)
    do = random_tensor((B, seq_q, HEADS, D), dtype, DEVICE).transpose(1, 2)
    lse_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    delta = poisoned((B, HEADS, seq_q), lse_dtype, DEVICE)
    got = fab.backward_delta(out, do, lse_dtype, delta=delta)
    assert got is delta, "backward_delta must write into the `delta` it was given"
    products = out.double() * do.double()
    # D products and D - 1 additions in the accumulator's format: (D + 1) u_acc relative to sum |o do|,
    # with a factor 2 of margin (the error model of attention_error_bounds).
    bound = 2 * (D + 1) * an.UNIT_ROUNDOFF[lse_dtype] * products.abs().sum(-1)
    assert_within(got, products.sum(-1), bound, "delta")


# ------------------------------------------------------------------------------------ stages 2 and 3
# The dK/dV kernel alone, with delta from torch. Key padding and Sq != Sk, with both orders of tile
# sizes: a ragged last key block and the causal bounds for BLOCK_M < BLOCK_N and BLOCK_M > BLOCK_N.
DKDV_CASES = [(torch.float16, 1, 37, 37, 64, None, None), (torch.float32, 2, 35, 37, 16, 22, (16, 32)),
              (torch.float32, 2, 35, 37, 16, 22, (32, 16)), (torch.float32, 1, 20, 45, 16, None, (16, 32)),
              (torch.float32, 1, 50, 19, 16, None, (32, 16))]


def dkdv_params(causal):
    return [case(*c, id="{}-b{}-{}-{}-d{}-len{}-kv{}".format(str(c[0])[6:], *c[1:6], "x".join(map(str, c[6] or ()))),
                 keep=i < 3) for i, c in enumerate(DKDV_CASES)]


def check_dkdv(causal, dtype, B, Sq, Sk, D, length, blocks):
    q, k, v = qkv(B, HEADS, Sq, Sk, D, dtype)
    lengths = torch.tensor([Sk, length], device=DEVICE) if length is not None else None
    do, lse, delta = stage_inputs(q, k, v, causal, lengths)
    dk, dv = (poisoned(t.shape, t.dtype, DEVICE) for t in (k, v))
    config = {"BLOCK_M": blocks[0], "BLOCK_N": blocks[1]} if blocks else None
    got = fab.launch_dkdv(q, k, v, do, lse, delta, dk, dv, causal, 1 / math.sqrt(D), lengths, kv_config=config)
    assert got is None, "without atomic, launch_dkdv returns no dQ"
    check_grads((dk, dv), q, k, v, do, causal, key_lengths=lengths, names=("dk", "dv"))
    if lengths is not None:
        assert torch.equal(dk[1, :, length:], torch.zeros_like(dk[1, :, length:])), "padding keys get dK = 0"


@stage(2)
@pytest.mark.parametrize("dtype, B, Sq, Sk, D, length, blocks", dkdv_params(False))
def test_dkdv_of_each_key_block_match_float64(dtype, B, Sq, Sk, D, length, blocks):
    check_dkdv(False, dtype, B, Sq, Sk, D, length, blocks)


@stage(3)
@pytest.mark.parametrize("dtype, B, Sq, Sk, D, length, blocks", dkdv_params(True))
def test_causal_dkdv_skip_and_mask_the_right_blocks(dtype, B, Sq, Sk, D, length, blocks):
    check_dkdv(True, dtype, B, Sq, Sk, D, length, blocks)


# ----------------------------------------------------------------------------------------- stage 4
@stage(4)
@pytest.mark.parametrize("causal, blocks", [
    case(causal, blocks, id="{}-q{}x{}".format(mask, *blocks), keep=causal) for causal, mask in MASKS
    for blocks in ((32, 16), (16, 32))])
def test_dq_alone_matches_float64(causal, blocks):
    B, Sq, Sk, D = 2, 35, 37, 16
    q, k, v = qkv(B, HEADS, Sq, Sk, D, torch.float32)
    lengths = torch.tensor([Sk, 22], device=DEVICE)
    do, lse, delta = stage_inputs(q, k, v, causal, lengths)
    dq = poisoned(q.shape, q.dtype, DEVICE)
    fab.launch_dq(q, k, v, do, lse, delta, dq, causal, 1 / math.sqrt(D), lengths,
                  q_config={"BLOCK_M": blocks[0], "BLOCK_N": blocks[1]})
    check_grads((dq,), q, k, v, do, causal, key_lengths=lengths, names=("dq",))


# Ragged lengths (none a multiple of the simulator's 16/32 blocks), fewer queries than keys and more
# (top-left causal); the default run keeps fp16 causal at D = 64, the dtype and head dim of
# test_flash_attention.py's default backward (its kernels, on a GPU).
@pytest.mark.parametrize("dtype, causal, seq_q, seq_k", [
    case(p.values[0], causal, sq, sk, id=f"{p.id}-{mask}-{sq}-{sk}", marks=p.marks,
         keep=p.values[0] == torch.float16 and causal and (sq, sk) == (37, 37))
    for p in dtype_params([torch.float32, torch.float16, torch.bfloat16]) for causal, mask in MASKS
    for sq, sk in ((37, 37), (20, 45), (50, 19))])
@stage(4)
def test_launcher_gradients_match_float64(dtype, causal, seq_q, seq_k):
    q, k, v = qkv(1, HEADS, seq_q, seq_k, 64, dtype)
    do, grads = backward_of(q, k, v, causal)
    check_grads(grads, q, k, v, do, causal)


# Stage 4: the split strategy, stage 5: atomic.
@pytest.mark.parametrize("causal, blocks, strategy", [
    case(causal, blocks, strategy, id="{}-kv{}x{}-q{}x{}-{}".format(mask, *blocks, strategy),
         keep=(causal, blocks, strategy) == (True, (16, 32, 32, 16), "atomic"),
         marks=[stage(4 if strategy == "split" else 5)])
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


@stage(4)
def test_split_backward_is_deterministic():
    # fp16, causal, D = 64 and a ragged length: the kernels test_launcher_gradients_match_float64 ran.
    q, k, v = qkv(1, HEADS, 45, 45, 64, torch.float16)
    out, lse = flash_attention_forward(q, k, v, True)
    do = random_tensor(q.shape, torch.float16, DEVICE)
    first = fab.flash_attention_backward(do, q, k, v, out, lse, True)
    second = fab.flash_attention_backward(do, q, k, v, out, lse, True)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


@stage(4)
def test_no_query_or_no_key_gives_zero_gradients():
    for Sq, Sk in ((0, 4), (5, 0)):
        q, k, v = qkv(1, 2, Sq, Sk, 16, torch.float32)
        out, lse = flash_attention_forward(q, k, v)
        grads = tuple(poisoned(t.shape, t.dtype, DEVICE) for t in (q, k, v))
        got = fab.flash_attention_backward(torch.ones_like(out), q, k, v, out, lse, grads=grads)
        assert all(torch.equal(g, torch.zeros_like(g)) for g in got), "an empty sum is zero"


@stage(4)
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
