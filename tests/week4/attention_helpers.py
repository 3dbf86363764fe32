"""Helpers shared by the attention tests (test_flash_attention*.py): the op over the rungs `--impl`
names, fresh random q, k, v, and the element-wise check against an error bound that
attention_naive.attention_error_bounds derives; the Hopper CUDA rung's builds as test parameters."""
import pytest

from course import runtime
from course.check import assert_close, random_tensor

DEVICE = runtime.DEVICE
# The Hopper forward's builds (week4_triton_dl/attention/hopper.py), each its own extension: the default, -DAH_INTRA_OVERLAP=1 (overlap: the softmax of key tile j under
# the warpgroup's own P V wgmma of tile j - 1), -DAH_PERSISTENT=1 (persistent: grid = min(SMs, work tiles), each
# block walking work tiles, the next tile's loads under this one's epilogue) and the two together; both persistent
# ones with -DAH_DYNAMIC_TILES=1 (dynamic: the blocks draw their tiles from a global counter, causal longest first).
DYNAMIC_BUILDS = [pytest.param({"persistent": True, "dynamic": True}, id="persistent_dynamic"),
                  pytest.param({"persistent": True, "overlap": True, "dynamic": True}, id="persistent_dynamic_overlap")]
PERSISTENT_BUILDS = [pytest.param({"persistent": True}, id="persistent"),
                     pytest.param({"persistent": True, "overlap": True}, id="persistent_overlap"), *DYNAMIC_BUILDS]
BUILDS = [pytest.param({}, id="default"), pytest.param({"overlap": True}, id="overlap"), *PERSISTENT_BUILDS]


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
