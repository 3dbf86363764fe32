"""week3_triton_kernels.matmul: tiled tl.dot matmul (and its epilogue) against a float64 reference.

Inputs: A ~ N(0, 1), B ~ N(0, 1/K), so every output is O(1) whatever K is (as in a real layer);
then fp32 accumulation error (~sqrt(K) * 2^-24) stays far below the default atol and the only
visible error is the final rounding to fp16/bf16, which the default rtol covers.
"""
import pytest
import torch

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor, with_specials

mm = runtime.lesson("week3_triton_kernels.matmul")
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float16, torch.bfloat16])
# (M, N, K): ones, primes, shapes that are not multiples of any block (sim: 32; GPU: 64..256).
SHAPES = [(1, 1, 1), (17, 33, 20), (31, 7, 45), (64, 32, 16), (3, 65, 97)] + runtime.pick(
    gpu=[(127, 255, 129), (1000, 513, 777), (1024, 1024, 1024)], sim=[])


def inputs(M, N, K, dtype):
    return random_tensor((M, K), dtype, DEVICE), random_tensor((K, N), dtype, DEVICE, scale=max(K, 1) ** -0.5)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_matches_torch(dtype, shape):
    a, b = inputs(*shape, dtype)
    out = poisoned((shape[0], shape[1]), dtype, DEVICE)
    assert mm.matmul(a, b, out=out) is out
    assert_close(out, mm.matmul_torch(a, b))


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_bias_and_activation(dtype, activation):
    a, b = inputs(37, 50, 41, dtype)
    bias = random_tensor(50, dtype, DEVICE)
    assert_close(mm.matmul(a, b, bias, activation), mm.matmul_torch(a, b, bias, activation))
    assert_close(mm.matmul(a, b, activation=activation), mm.matmul_torch(a, b, activation=activation))


@pytest.mark.parametrize("group_m", [1, 2, 8])
@pytest.mark.parametrize("blocks", [(16, 16, 16), (32, 16, 64)], ids=str)
def test_fixed_configs_and_grouping(blocks, group_m):
    # Grouping only reorders which program computes which tile: every order must give C.
    a, b = inputs(45, 70, 33, torch.float16)
    bm, bn, bk = blocks
    got = mm.matmul_fixed(a, b, block_m=bm, block_n=bn, block_k=bk, group_m=group_m, num_warps=4, num_stages=2)
    assert_close(got, mm.matmul_torch(a, b))


def test_strided_and_transposed_inputs():
    # The kernel takes strides, so a transposed view (column-major B) needs no copy.
    a = random_tensor((40, 24), torch.float16, DEVICE)
    bt = random_tensor((30, 24), torch.float16, DEVICE, scale=24 ** -0.5)
    out = torch.full((40, 60), float("nan"), dtype=torch.float16, device=DEVICE)[:, ::2]
    mm.matmul(a, bt.t(), out=out)
    assert_close(out, mm.matmul_torch(a, bt.t()))
    wide = random_tensor((40, 48), torch.float16, DEVICE)[:, ::2]  # row stride 48, col stride 2
    assert_close(mm.matmul(wide, bt.t()), mm.matmul_torch(wide, bt.t()))


def test_nan_and_inf_propagate_like_torch():
    a, b = inputs(20, 24, 18, torch.float16)
    a = with_specials(a)
    want = (a.float() @ b.float()).half()
    assert_close(mm.matmul(a, b), want, rtol=1e-3, atol=1e-3)  # fp32 sums in a different order


def test_empty_dimensions():
    a, b = inputs(5, 6, 0, torch.float16)
    assert_close(mm.matmul(a, b), torch.zeros(5, 6, dtype=torch.float16, device=DEVICE))
    bias = random_tensor(6, torch.float16, DEVICE)
    assert_close(mm.matmul(a, b, bias, "relu"), torch.relu(bias).expand(5, 6).contiguous())
    assert mm.matmul(*inputs(0, 6, 3, torch.float16)).shape == (0, 6)
    assert mm.matmul(*inputs(4, 0, 3, torch.float16)).shape == (4, 0)


@pytest.mark.gpu(reason="autotuning times configs on the device")
def test_autotuner_picked_a_config():
    a, b = inputs(1024, 768, 256, torch.float16)  # above SMALL_PROBLEM: every config is timed
    assert_close(mm.matmul(a, b), mm.matmul_torch(a, b))
    assert mm.matmul_kernel_autotuned.best_config in mm.AUTOTUNE_CONFIGS
    assert 4 <= len(mm.AUTOTUNE_CONFIGS) <= 6


def bad_inputs():
    h = lambda *s: torch.ones(*s, dtype=torch.float16, device=DEVICE)  # noqa: E731
    yield "a not a tensor", TypeError, "a must be a torch.Tensor", lambda: ([[1.0]], h(2, 2), None, None, None)
    yield "fp32", TypeError, "expected one of", lambda: (h(2, 2).float(), h(2, 2).float(), None, None, None)
    yield "dtype mismatch", TypeError, "dtypes must match", lambda: (h(2, 2), h(2, 2).bfloat16(), None, None, None)
    yield "1-D", ValueError, "must have 2 dimension", lambda: (h(4), h(4, 2), None, None, None)
    yield "inner dims", ValueError, "inner dimensions differ", lambda: (h(2, 3), h(4, 2), None, None, None)
    yield "bias length", ValueError, "bias has 3 elements", lambda: (h(2, 4), h(4, 2), h(3), None, None)
    yield "bias dtype", TypeError, "dtypes must match", lambda: (h(2, 4), h(4, 2), h(2).bfloat16(), None, None)
    yield "activation", ValueError, "activation must be", lambda: (h(2, 4), h(4, 2), None, "tanh", None)
    yield "wrong device", ValueError, "kernels run on", lambda: (h(2, 4), torch.ones(4, 2, device="meta").half(),
                                                                 None, None, None)
    yield "out shape", ValueError, "out has shape", lambda: (h(2, 4), h(4, 2), None, None, h(2, 3))


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make):
    a, b, bias, activation, out = make()
    with pytest.raises(error, match=message):
        mm.matmul(a, b, bias, activation, out=out)


def test_fixed_rejects_bad_blocks():
    a, b = inputs(8, 8, 8, torch.float16)
    with pytest.raises(ValueError, match="block_k"):
        mm.matmul_fixed(a, b, block_k=8)
    with pytest.raises(ValueError, match="group_m"):
        mm.matmul_fixed(a, b, group_m=0)
