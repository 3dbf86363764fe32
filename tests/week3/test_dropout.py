"""week3_triton_kernels.dropout: seeded, mask-free dropout: determinism, statistics, scaling."""
import math

import pytest
import torch

from course import runtime
from course.check import (INT32_LIMIT, assert_close, check_layouts, dtype_params, huge, layouts, past_int32_marks,
                          poisoned, random_tensor, sizes_1d_params)

do = runtime.lesson("week3_triton_kernels.dropout")
DEVICE = runtime.DEVICE


# Default: every size in float32, every size but the large 1_000_003 in fp16/bf16 (the same
# compiled kernel as the smaller ragged sizes there); slow: those and the sizes already slow.
@pytest.mark.parametrize("dtype, n", [
    pytest.param(d.values[0], n.values[0], id=f"{d.id}-{n.values[0]}",
                 marks=[*d.marks, *n.marks, *([pytest.mark.slow] if n.values[0] == 1_000_003 and d.id != "float32"
                                              else [])])
    for d in dtype_params([torch.float32, torch.float16, torch.bfloat16])
    for n in sizes_1d_params(block=do.BLOCK_SIZE)])
def test_kept_elements_are_scaled_and_dropped_are_zero(dtype, n):
    p = 0.3
    x = random_tensor(n, dtype, DEVICE)
    out = poisoned(n, dtype, DEVICE)
    assert do.dropout(x, p, seed=7, out=out) is out
    keep = do.dropout_mask(n, p, seed=7)
    # Expected: x / (1 - p) where kept (computed in fp32 and rounded once, as the kernel does).
    want = torch.where(keep, x.float() / (1 - p), torch.zeros((), device=DEVICE)).to(dtype)
    assert_close(out, want)


@pytest.mark.parametrize("layout", layouts(2))
def test_non_dense_layouts(layout):
    """x or out sliced out of a bigger buffer get the same mask (it depends on the index in x,
    not on the address); strided or transposed ones are refused."""
    x = random_tensor((9, 70), torch.float32, DEVICE)
    want = do.dropout(x, 0.3, 5)
    check_layouts(lambda x, out=None: do.dropout(x, 0.3, 5, out=out), {"x": x}, want, layout, strided_ok=False)


@pytest.mark.parametrize("n", [pytest.param(INT32_LIMIT, marks=past_int32_marks())])
def test_refuses_2_to_the_31_elements(n):
    """The Philox counter is the int32 element index: 2^31 elements are refused before launching."""
    x = huge(n, torch.float16, DEVICE, tail=16)
    with pytest.raises(ValueError, match="2\\^31"):
        do.dropout(x, 0.5, 1)


def test_same_seed_same_output_other_seed_other_mask():
    x = random_tensor(5000, torch.float32, DEVICE)
    a, b = do.dropout(x, 0.5, seed=123), do.dropout(x, 0.5, seed=123)
    assert torch.equal(a, b)
    c = do.dropout(x, 0.5, seed=124)
    assert not torch.equal(a != 0, c != 0)


def test_mask_depends_on_index_not_on_the_data():
    # The decision for element i is a function of (seed, i) alone: the backward pass can
    # rebuild it from the seed, without the input and without a stored mask.
    x = random_tensor(3001, torch.float32, DEVICE).abs() + 1  # nonzero, so 0 means dropped
    y = random_tensor(3001, torch.float32, DEVICE).abs() + 1
    assert torch.equal(do.dropout(x, 0.4, 99) != 0, do.dropout(y, 0.4, 99) != 0)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_probability(p):
    n = runtime.pick(gpu=1 << 20, sim=1 << 14)
    kept = do.dropout_mask(n, p, seed=2024).double().mean().item()
    # The kept count is Binomial(n, 1 - p): 5 standard deviations is a 1-in-3.5-million miss.
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(kept - (1 - p)) < 5 * sigma, f"kept {kept:.4f}, expected {1 - p} +- {5 * sigma:.4f}"


def test_expectation_is_preserved():
    n = runtime.pick(gpu=1 << 20, sim=1 << 14)
    x = torch.ones(n, device=DEVICE)
    mean = do.dropout(x, 0.25, seed=5).double().mean().item()
    # y_i is 4/3 with probability 3/4: variance (4/3)^2 * 3/4 * 1/4 = 1/3.
    assert abs(mean - 1.0) < 5 * math.sqrt(1 / 3 / n)


def test_p_zero_is_identity_and_p_one_drops_everything():
    x = random_tensor(1000, torch.float32, DEVICE)
    assert_close(do.dropout(x, 0.0, seed=1), x)
    assert torch.equal(do.dropout(x, 1.0, seed=1), torch.zeros_like(x))


def test_any_shape_and_empty():
    x = random_tensor((3, 5, 7), torch.float32, DEVICE)
    y = do.dropout(x, 0.5, seed=3)
    assert y.shape == x.shape
    assert torch.equal(y.reshape(-1), do.dropout(x.reshape(-1), 0.5, seed=3))
    assert do.dropout(torch.empty(0, device=DEVICE), 0.5, seed=3).shape == (0,)


def bad_inputs():
    ok = lambda: torch.ones(8, device=DEVICE)  # noqa: E731
    yield "not a tensor", TypeError, "must be a torch.Tensor", lambda: ([1.0], 0.5, 1, None)
    yield "int dtype", TypeError, "expected one of", lambda: (ok().int(), 0.5, 1, None)
    yield "p too big", ValueError, "p \\(the drop probability\\)", lambda: (ok(), 1.5, 1, None)
    yield "p negative", ValueError, "p \\(the drop probability\\)", lambda: (ok(), -0.1, 1, None)
    yield "p not a number", ValueError, "p \\(the drop probability\\)", lambda: (ok(), "0.5", 1, None)
    yield "seed float", TypeError, "seed must be an int", lambda: (ok(), 0.5, 1.5, None)
    yield "seed negative", TypeError, "seed must be an int", lambda: (ok(), 0.5, -1, None)
    yield "non-contiguous", ValueError, "not contiguous", lambda: (torch.ones(16, device=DEVICE)[::2], 0.5, 1, None)
    yield "out shape", ValueError, "out has shape", lambda: (ok(), 0.5, 1, torch.ones(7, device=DEVICE))


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make):
    x, p, seed, out = make()
    with pytest.raises(error, match=message):
        do.dropout(x, p, seed, out=out)
