"""week3_triton_kernels.matmul_basic: rung 1 (plain tiles, row-major order) and rung 2 (grouped
order) against float64.

Inputs: A ~ N(0, 1), B ~ N(0, 1/K), so every output is O(1) whatever K is.

Error model, fp16/bf16 in, fp32 accumulate, fp16/bf16 out: a product of two fp16 (or bf16) values
is exact in fp32, and the K-term fp32 sum errs by at most gamma_K * sum_k |a_k b_k| (gamma_K =
K u / (1 - K u), u = 2^-24); for K <= 1000 and these inputs that is ~1e-4 |c| at worst, ~sqrt(K) u
|c| ~ 2e-6 typically, far below the one rounding of C to fp16 (2^-11 relative) or bf16 (2^-8) that
the default tolerances (course.check.TOLERANCES) allow. A wrong tile, a lost K tail (a K step
reading past the end) or an unwritten element (outputs are poisoned with NaN) is O(1) off.

Shapes: ragged in M, N and K (none a multiple of any block), several tiles in each direction with
small blocks (the interpreter runs every program), and the fixed default blocks (128 x 128 x 32).
"""
import pytest
import torch

from course import runtime
from course.check import (INT32_LIMIT, assert_close, check_layouts, dtype_params, huge, layouts,
                          past_int32_marks, poisoned, random_tensor)

import triton
import triton.language as tl

basic = runtime.lesson("week3_triton_kernels.matmul_basic")
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float16, torch.bfloat16])
RUNGS = ["matmul_plain", "matmul_grouped"]
SMALL = dict(block_m=16, block_n=32, block_k=16)  # many tiles even at simulation sizes
# (M, N, K): one element, one ragged tile, several ragged tiles each way, K a few blocks plus a tail.
SHAPES = [(1, 1, 1), (17, 33, 20), (3, 65, 97), (70, 45, 50)] + runtime.pick(gpu=[(1000, 513, 777)], sim=[])


def inputs(M, N, K, dtype=torch.float16):
    return random_tensor((M, K), dtype, DEVICE), random_tensor((K, N), dtype, DEVICE, scale=max(K, 1) ** -0.5)


def reference(a, b):
    return (a.double() @ b.double()).to(a.dtype)  # exact products and sum, one rounding


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rung", RUNGS)
def test_rungs_match_float64(rung, dtype, shape):
    M, N, K = shape
    a, b = inputs(M, N, K, dtype)
    for blocks in (SMALL, {}):  # many small tiles; the rung's own fixed blocks
        out = poisoned((M, N), dtype, DEVICE)
        assert getattr(basic, rung)(a, b, out=out, **blocks) is out
        assert_close(out, reference(a, b))


@pytest.mark.parametrize("group_m", [1, 2, 3, 8, 100])
def test_every_group_size_gives_c(group_m):
    # Grouping only reorders which program computes which tile: every order must give C, with
    # a last group shorter than GROUP_M (5 rows of tiles) and GROUP_M past the whole grid.
    a, b = inputs(70, 90, 40)
    got = basic.matmul_grouped(a, b, group_m=group_m, **SMALL)
    assert_close(got, reference(a, b))


@triton.jit
def _tile_order_kernel(out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    tile_id = tl.program_id(0)
    pid_m, pid_n = basic.grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    tl.store(out_ptr + 2 * tile_id, pid_m)
    tl.store(out_ptr + 2 * tile_id + 1, pid_n)


@pytest.mark.parametrize("grid_m, grid_n, group_m", [(5, 3, 2), (4, 7, 4), (3, 2, 8), (6, 1, 1), (1, 5, 3)])
def test_grouped_tile_visits_every_tile_once(grid_m, grid_n, group_m):
    order = torch.full((grid_m * grid_n, 2), -1, dtype=torch.int32, device=DEVICE)
    _tile_order_kernel[(grid_m * grid_n,)](order, grid_m * 16, grid_n * 16, 16, 16, group_m)
    tiles = [tuple(t) for t in order.cpu().tolist()]
    assert sorted(tiles) == [(m, n) for m in range(grid_m) for n in range(grid_n)]
    # grouped order: consecutive ids walk down a column of (at most) group_m tiles first
    assert tiles[0] == (0, 0)
    if grid_m > 1 and group_m > 1:
        assert tiles[1] == (1, 0)


@pytest.mark.parametrize("rung", RUNGS)
def test_strided_transposed_and_sliced_operands(rung):
    # The kernels take strides: a column-major B (w.t()), a strided A, a strided out all work.
    run = getattr(basic, rung)
    a = random_tensor((40, 48), torch.float16, DEVICE)[:, ::2]  # row stride 48, column stride 2
    w = random_tensor((36, 24), torch.float16, DEVICE, scale=24 ** -0.5)
    out = poisoned((40, 72), torch.float16, DEVICE)[:, ::2]
    run(a, w.t(), out=out, **SMALL)
    assert_close(out, reference(a, w.t()))


@pytest.mark.parametrize("layout", layouts(2))
@pytest.mark.parametrize("rung", RUNGS)
def test_non_dense_layouts(rung, layout):
    a, b = inputs(37, 45, 33)
    check_layouts(lambda a, b, out=None: getattr(basic, rung)(a, b, out=out, **SMALL), {"a": a, "b": b},
                  reference(a, b), layout, strided_ok=True)


@pytest.mark.parametrize("rung", RUNGS)
def test_empty_dimensions(rung):
    run = getattr(basic, rung)
    a, b = inputs(5, 6, 0)
    assert_close(run(a, b, out=poisoned((5, 6), torch.float16, DEVICE)),
                 torch.zeros(5, 6, dtype=torch.float16, device=DEVICE))  # an empty sum is 0
    assert run(*inputs(0, 6, 3)).shape == (0, 6)
    assert run(*inputs(4, 0, 3)).shape == (4, 0)


def bad_inputs():
    h = lambda *s: torch.ones(*s, dtype=torch.float16, device=DEVICE)  # noqa: E731
    yield "a not a tensor", TypeError, "a must be a torch.Tensor", lambda: ([[1.0]], h(2, 2), None, {})
    yield "fp32", TypeError, "expected one of", lambda: (h(2, 2).float(), h(2, 2).float(), None, {})
    yield "dtype mismatch", TypeError, "dtypes must match", lambda: (h(2, 2), h(2, 2).bfloat16(), None, {})
    yield "1-D", ValueError, "must have 2 dimension", lambda: (h(4), h(4, 2), None, {})
    yield "inner dims", ValueError, "inner dimensions differ", lambda: (h(2, 3), h(4, 2), None, {})
    yield "wrong device", ValueError, "kernels run on", lambda: (h(2, 4), torch.ones(4, 2, device="meta").half(),
                                                                 None, {})
    yield "out shape", ValueError, "out has shape", lambda: (h(2, 4), h(4, 2), h(2, 3), {})
    yield "out dtype", TypeError, "out has dtype", lambda: (h(2, 4), h(4, 2), h(2, 2).bfloat16(), {})
    yield "block_k 8", ValueError, "block_k must be a power of two >= 16", lambda: (h(2, 4), h(4, 2), None,
                                                                                    {"block_k": 8})
    yield "block_m 48", ValueError, "block_m must be a power of two", lambda: (h(2, 4), h(4, 2), None,
                                                                               {"block_m": 48})
    yield "block_n float", ValueError, "block_n must be", lambda: (h(2, 4), h(4, 2), None, {"block_n": 32.0})


@pytest.mark.parametrize("rung", RUNGS)
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make, rung):
    a, b, out, blocks = make()
    with pytest.raises(error, match=message):
        getattr(basic, rung)(a, b, out=out, **blocks)


@pytest.mark.parametrize("group_m", [0, -1, 2.0, True])
def test_grouped_rejects_bad_group_sizes(group_m):
    a, b = inputs(8, 8, 8)
    with pytest.raises(ValueError, match="group_m must be a positive int"):
        basic.matmul_grouped(a, b, group_m=group_m)


@pytest.mark.parametrize("rung", [pytest.param(r, marks=past_int32_marks()) for r in RUNGS])
def test_spans_past_2_to_the_31_are_refused(rung):
    """Offsets are int32: an operand, or out, reaching 2^31 elements past its start is refused
    before launching (never written wrapped around)."""
    base = huge(INT32_LIMIT + 64, torch.float16, DEVICE, tail=64)
    a, b = inputs(3, 3, 16)
    for name, view in (("a", base.as_strided((3, 16), (2**30, 1))), ("b", base.as_strided((16, 3), (1, 2**30))),
                       ("out", base.as_strided((3, 3), (2**30, 1)))):
        args = {"a": a, "b": b, "out": None, name: view}
        with pytest.raises(ValueError, match="spans more than 2\\^31"):
            getattr(basic, rung)(args["a"], args["b"], out=args["out"])
