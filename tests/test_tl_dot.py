"""course.tl_dot.dot: tl.dot for 16/32-bit tiles, plain FMAs for float64, with and without acc.

Error model: a 32-term dot product. fp64 FMAs are exact to ~32 u64 (u = 2^-53) of the sum of
|products|; fp32 with input_precision="ieee" to ~32 u32; fp16 inputs are exact in the fp32
accumulator (11-bit products), so only the fp32 sum rounds. A transposed operand or a dropped acc
is O(1) off. float64 is the case this helper exists for: Triton 3.6 lowers an fp64 tl.dot on sm_90
to mma.m16n8k16.f64 and the course's fp64 kernel tests failed there (see course/tl_dot.py).
"""
import pytest
import torch

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor
from course.gpu import triton, tl
from course.tl_dot import dot

DEVICE = runtime.DEVICE
ACC = {torch.float64: tl.float64, torch.float32: tl.float32, torch.float16: tl.float32}
UNIT = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-24}


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, out_ptr, WITH_ACC: tl.constexpr, ACC_DTYPE: tl.constexpr,
                PRECISION: tl.constexpr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    rm, rk, rn = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    if WITH_ACC:
        acc = tl.load(c_ptr + rm[:, None] * N + rn[None, :]).to(ACC_DTYPE)
        out = dot(a, b, acc, PRECISION)
    else:
        out = dot(a, b, None, PRECISION)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], out.to(out_ptr.dtype.element_ty))


@pytest.mark.parametrize("with_acc", [False, True], ids=["no_acc", "acc"])
@pytest.mark.parametrize("shape", [(16, 16, 16), (16, 32, 64), (32, 16, 16)], ids=str)
@pytest.mark.parametrize("dtype", dtype_params([torch.float64, torch.float32, torch.float16]))
def test_dot_matches_float64(dtype, shape, with_acc):
    m, k, n = shape
    a, b = random_tensor((m, k), dtype, DEVICE), random_tensor((k, n), dtype, DEVICE)
    c = random_tensor((m, n), torch.float32 if dtype != torch.float64 else dtype, DEVICE)
    out_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    out = poisoned((m, n), out_dtype, DEVICE)
    precision = "tf32" if dtype == torch.float16 else "ieee"
    _dot_kernel[(1,)](a, b, c, out, WITH_ACC=with_acc, ACC_DTYPE=ACC[dtype], PRECISION=precision, M=m, K=k, N=n)
    want = a.double() @ b.double() + (c.double() if with_acc else 0)
    scale = float((a.double().abs() @ b.double().abs()).max()) + (float(c.abs().max()) if with_acc else 0)
    assert_close(out, want.to(out_dtype), rtol=0, atol=2 * (k + 1) * UNIT[dtype] * scale)
