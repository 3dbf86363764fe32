"""Helpers shared by the attention tests (test_flash_attention*.py): the op over the rungs `--impl`
names, fresh random q, k, v, and the element-wise check against an error bound that
attention_naive.attention_error_bounds derives."""
from course import runtime
from course.check import assert_close, random_tensor

DEVICE = runtime.DEVICE


def qkv(B, H, Sq, Sk, D, dtype, requires_grad=False):
    """q (B, H, Sq, D), k and v (B, H, Sk, D): fresh normal random numbers (never zeros)."""
    q = random_tensor((B, H, Sq, D), dtype, DEVICE)
    k = random_tensor((B, H, Sk, D), dtype, DEVICE)
    v = random_tensor((B, H, Sk, D), dtype, DEVICE)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))


def assert_within(actual, expected, bound, name="out"):
    """|actual - expected| <= bound element-wise; NaN must meet NaN and inf the same inf."""
    assert_close(actual.double() / bound, expected.double() / bound, rtol=0.0, atol=1.0,
                 name=f"{name} (in units of its error bound)")


def attention_op():
    """The op (attention/op.py's AttentionOp) over the forwards `--impl` names: the solutions' (the
    course's op), or your stubs' (exercises/attention/flash.py and tma.py) inside the same op, autograd
    and torch.compile included, registered as torch.ops.course_exercises.*."""
    from week4_triton_dl.attention import op

    return op.over(runtime.lesson("week4_triton_dl.attention.flash"), runtime.lesson("week4_triton_dl.attention.tma"))
