"""week3_triton_kernels.matmul: tiled, persistent and TMA matmuls (and their epilogue) against float64.

Inputs: A ~ N(0, 1), B ~ N(0, 1/K), so every output is O(1) whatever K is (as in a real layer).

Error model, fp16/bf16 in, fp32 accumulate, fp16/bf16 out: a product of two fp16 (or bf16) values
is exact in fp32; the K-term fp32 sum errs by at most gamma_K * sum_k |a_k b_k| (Higham's gamma_K =
K u / (1 - K u), u = 2^-24) and typically by ~sqrt(K) u |c|: ~1e-6 for K <= 1024, far below the one
rounding to fp16 (2^-11 |c|) or bf16 (2^-8 |c|) that the default rtol covers. So those tests use the
default tolerances, which a wrong tile, a missing K step or a wrong scale all exceed by far.

The kernels' fp8 switches (scales in the epilogue, promotion of partial sums) are checked at the
end with the fp8 error model of tests/week3/test_matmul_fp8.py, which tests matmul_fp8 itself.
Rungs 1 and 2 (matmul_basic): tests/week3/test_matmul_basic.py; the sweep: test_matmul_sweep.py.
"""
import math

import pytest
import torch

from course import runtime, versions
from course.check import (INT32_LIMIT, TOLERANCES, assert_close, check_layouts, dtype_params, huge, layouts,
                          past_int32_marks, poisoned, random_tensor, sweep, with_specials)

mm = runtime.lesson("week3_triton_kernels.matmul")
# The oracle's error bound, always the course's own (the stub re-exports it too).
from week3_triton_kernels.matmul_fp8 import FP8_BLOCK_K, fp8_sum_error_bound, quantize_fp8  # noqa: E402
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float16, torch.bfloat16])
CAPABILITY = torch.cuda.get_device_capability() if runtime.on_gpu() else None
# Where TMA kernels cannot run: a GPU before Hopper, or a simulation whose Triton (3.5) refuses
# aligned descriptor strides (course/versions.py says why; the launcher refuses them too).
TMA_REFUSED = ("TMA tensor descriptors need compute capability >= 9.0 (Hopper)"
               if CAPABILITY is not None and CAPABILITY < (9, 0) else versions.interpreter_descriptor_limitation())
needs_tma = pytest.mark.skipif(TMA_REFUSED is not None, reason=str(TMA_REFUSED))
needs_fp8 = pytest.mark.skipif(CAPABILITY is not None and CAPABILITY < (8, 9),
                               reason="fp8 tensor cores need compute capability >= 8.9 (Ada, Hopper)")
VARIANTS = ["matmul", "matmul_persistent", pytest.param("matmul_tma", marks=needs_tma)]
# (M, N, K): ones, primes, shapes that are not multiples of any block (sim: 32; GPU: 64..256).
SHAPES = runtime.pick(gpu=[(1, 1, 1), (17, 33, 20), (3, 65, 97), (1000, 513, 777), (31, 7, 45), (64, 32, 16),
                           (127, 255, 129), (1024, 1024, 1024)],
                      sim=[(1, 1, 1), (17, 33, 20), (31, 7, 45), (64, 32, 16), (3, 65, 97)])
# What the default run keeps of the sweeps (`--slow` or `-m slow` runs the rest). On a GPU each
# (kernel, dtype, activation, M/N/K class) is its own compile, and every (M, N, K) with C above
# SMALL_PROBLEM is autotuned: each of ~5 configs compiled and timed (5-10 s per case). So the
# default keeps, per rung and dtype, the two ragged shapes (17, 33, 20) and (3, 65, 97), 1 x 1 x 1
# once per rung (fp16; fp32 out for fp8), and one autotuned case per tuner: test_autotuner_picked_a_config
# for the fp16 rungs, test_persistent_programs_loop_over_many_tiles (large, ragged, persistent and
# TMA), and fp8 TMA at (1000, 513, 777). Slow adds (1000, 513, 777) for every rung x dtype, the
# other shapes, 1 x 1 x 1 in the other dtypes and fp8's row-major b.
RAGGED = [(17, 33, 20), (3, 65, 97)]


def dtype_shapes(dtypes, default):
    """(dtype, shape) params over SHAPES, slow unless `default(dtype_id, shape)`."""
    return [pytest.param(d.values[0], s, id=f"{d.id}-{s}",
                         marks=[*d.marks, *(() if default(d.id, s) else [pytest.mark.slow])])
            for d in dtypes for s in SHAPES]


def _as_param(value):
    """A plain value or a pytest.param, as a pytest.param (so its marks can be combined)."""
    return value if hasattr(value, "values") else pytest.param(value)


TC_UNIT = 2.0**-13 if runtime.on_gpu() else 2.0**-24  # unit roundoff of the fp8 product sums


def inputs(M, N, K, dtype):
    return random_tensor((M, K), dtype, DEVICE), random_tensor((K, N), dtype, DEVICE, scale=max(K, 1) ** -0.5)


@pytest.mark.parametrize("dtype, shape", dtype_shapes(DTYPES, lambda d, s: s in RAGGED or (s == (1, 1, 1) and
                                                                                            d == "float16")))
@pytest.mark.parametrize("variant", VARIANTS)
def test_matmul_matches_torch(variant, dtype, shape):
    a, b = inputs(*shape, dtype)
    out = poisoned((shape[0], shape[1]), dtype, DEVICE)
    assert getattr(mm, variant)(a, b, out=out) is out
    assert_close(out, mm.matmul_torch(a, b))


# Each (rung, dtype, activation) is two compiled kernels (with and without bias). The epilogue is
# one function shared by the rungs: the default runs every activation in fp16 and silu in bf16 on
# the tiled rung, and one fp16 activation plus bf16 silu on each of the other two; slow, the rest.
DEFAULT_ACTIVATIONS = {"matmul": {("float16", a) for a in [None, "relu", "gelu", "gelu_tanh", "silu"]} |
                                 {("bfloat16", "silu")},
                       "matmul_persistent": {("float16", "relu"), ("bfloat16", "silu")},
                       "matmul_tma": {("float16", "gelu_tanh"), ("bfloat16", "silu")}}


def variant_activations():
    """(variant, dtype, activation) params: DEFAULT_ACTIVATIONS by default, the rest slow."""
    return [pytest.param(variant.values[0], dtype.values[0], act, id=f"{variant.values[0]}-{dtype.id}-{act}",
                         marks=[*variant.marks, *dtype.marks,
                                *(() if (dtype.id, act) in DEFAULT_ACTIVATIONS[variant.values[0]]
                                  else [pytest.mark.slow])])
            for variant in map(_as_param, VARIANTS) for dtype in DTYPES
            for act in [None, "relu", "gelu", "gelu_tanh", "silu"]]


@pytest.mark.parametrize("variant, dtype, activation", variant_activations())
def test_fused_bias_and_activation(variant, dtype, activation):
    a, b = inputs(37, 50, 41, dtype)
    bias = random_tensor(50, dtype, DEVICE)
    run = getattr(mm, variant)
    assert_close(run(a, b, bias, activation), mm.matmul_torch(a, b, bias, activation))
    assert_close(run(a, b, activation=activation), mm.matmul_torch(a, b, activation=activation))


def test_silu_epilogue_is_x_times_sigmoid_x():
    # silu(h) = h * sigmoid(h): near 0 it is h/2, for large |h| it is relu(h); the fused kernel
    # computes h / (1 + exp(-h)), which must not overflow into NaN for very negative h.
    a = torch.tensor([[-200.0], [-20.0], [-1.0], [0.0], [1e-3], [3.0], [60000.0]], device=DEVICE).half()
    b = torch.ones(1, 16, dtype=torch.float16, device=DEVICE)
    got = mm.matmul(a, b, activation="silu")
    assert torch.isfinite(got).all()
    assert_close(got, torch.nn.functional.silu(a.double() @ b.double()).half())


@pytest.mark.parametrize("group_m", [1, 2, 8])
@pytest.mark.parametrize("blocks", [(16, 16, 16), (32, 16, 64)], ids=str)
def test_fixed_configs_and_grouping(blocks, group_m):
    # Grouping only reorders which program computes which tile: every order must give C.
    a, b = inputs(45, 70, 33, torch.float16)
    bm, bn, bk = blocks
    got = mm.matmul_fixed(a, b, block_m=bm, block_n=bn, block_k=bk, group_m=group_m, num_warps=4, num_stages=2)
    assert_close(got, mm.matmul_torch(a, b))


@pytest.mark.parametrize("variant", ["matmul_persistent", pytest.param("matmul_tma", marks=needs_tma)])
def test_persistent_programs_loop_over_many_tiles(variant):
    # More tiles than programs (132 SMs on an H100, 2 programs in simulation): each program
    # takes several tiles, and the last ones are partial in both M and N.
    M, N, K = runtime.pick(gpu=(2065, 2081, 96), sim=(70, 100, 33))
    a, b = inputs(M, N, K, torch.float16)
    out = poisoned((M, N), torch.float16, DEVICE)
    getattr(mm, variant)(a, b, out=out)
    assert_close(out, mm.matmul_torch(a, b))


@pytest.mark.parametrize("variant", VARIANTS)
def test_strided_and_transposed_inputs(variant):
    # The kernels take strides, so a transposed view (column-major B) and a strided `out` work.
    run = getattr(mm, variant)
    a = random_tensor((40, 24), torch.float16, DEVICE)
    bt = random_tensor((32, 24), torch.float16, DEVICE, scale=24 ** -0.5)
    out = torch.full((40, 64), float("nan"), dtype=torch.float16, device=DEVICE)[:, ::2]
    run(a, bt.t(), out=out)
    assert_close(out, mm.matmul_torch(a, bt.t()))
    wide = random_tensor((40, 48), torch.float16, DEVICE)[:, ::2]  # row stride 48, col stride 2
    assert_close(run(wide, bt.t()), mm.matmul_torch(wide, bt.t()))
    assert_close(run(a.t().contiguous().t(), bt.t()), mm.matmul_torch(a, bt.t()))  # column-major A


# Every layout on the tiled rung; on the other two the layouts that are their own compile (an
# unaligned start, a column-major operand) one each by default: strided and transposed inputs on
# every rung are in test_strided_and_transposed_inputs too. Slow: every (rung, layout).
NON_DENSE_DEFAULT = {"matmul": set(layouts(2)), "matmul_persistent": {"transposed", "column_slice"},
                     "matmul_tma": {"offset", "column_slice"}}


@pytest.mark.parametrize("variant, layout", [
    pytest.param(v.values[0], layout, id=f"{v.values[0]}-{layout}",
                 marks=[*v.marks, *(() if layout in NON_DENSE_DEFAULT[v.values[0]] else [pytest.mark.slow])])
    for v in map(_as_param, VARIANTS) for layout in layouts(2)])
def test_non_dense_layouts(variant, layout):
    """a, b and out in every layout (sliced from a bigger buffer, strided, transposed, a column
    block of a wider buffer): the kernels take strides, so each must give the product."""
    a, b = inputs(37, 45, 33, torch.float16)
    check_layouts(lambda a, b, out=None: getattr(mm, variant)(a, b, out=out), {"a": a, "b": b},
                  mm.matmul_torch(a, b), layout, strided_ok=True)


def past_int32_cases():
    """(operand, view) whose last element lies >= 2^31 elements past its first (4 GiB of fp16)."""
    base = huge(INT32_LIMIT + 64, torch.float16, DEVICE, tail=64)
    yield "a", base.as_strided((3, 16), (2**30, 1))
    yield "b", base.as_strided((16, 3), (1, 2**30))
    yield "out", base.as_strided((3, 8), (2**30, 1))
    yield "a (rows + columns)", base.as_strided((2, 2), (2**30 + 16, 2**30))  # neither stride alone


@pytest.mark.parametrize("variant", [pytest.param(v, marks=past_int32_marks()) for v in ["matmul", "matmul_persistent"]])
def test_spans_past_2_to_the_31_are_refused(variant):
    """The kernels add row and column offsets in int32: an operand, or out, reaching 2^31
    elements past its start is refused before launching (never written wrapped around)."""
    for name, view in past_int32_cases():
        a = view if name.startswith("a") else random_tensor((3 if name != "a (rows + columns)" else 2, 16),
                                                               torch.float16, DEVICE)
        k = a.shape[1]
        b = view if name == "b" else random_tensor((k, 8 if name == "out" else 3), torch.float16, DEVICE)
        out = view if name == "out" else None
        with pytest.raises(ValueError, match="spans more than 2\\^31"):
            getattr(mm, variant)(a, b, out=out)


# ------------------------------------------------------------------------------ odd strides
ODD = [(33, 50, 45), (20, 19, 16), (16, 32, 17)] + runtime.pick(gpu=sweep([], [(517, 3000, 400), (129, 4097, 97)]),
                                                                   sim=[])


@pytest.mark.parametrize("rows, cols", [(5, 3), (16, 16), (7, 45)])
def test_padded_copy(rows, cols):
    t = random_tensor((rows, cols), torch.float16, DEVICE)
    padded = mm.padded_copy(t, rows + 2, cols + 5)
    assert padded.shape == (rows + 2, cols + 5)
    assert padded.stride() == (math.ceil((cols + 5) / 16) * 16, 1)
    assert padded.data_ptr() % 16 == 0
    assert_close(padded[:rows, :cols], t)
    assert (padded[rows:] == 0).all() and (padded[:, cols:] == 0).all()


@pytest.mark.parametrize("shape", ODD, ids=str)
def test_pad_for_vector_loads_aligns_and_keeps_values(shape):
    M, N, K = shape
    a, b = inputs(M, N, K, torch.float16)
    a2, b2, k2, a_rows, b_cols = mm.pad_for_vector_loads(a, b)
    assert k2 % 16 == 0 and k2 >= K and a_rows == M
    assert b_cols == N or (b_cols % 16 == 0 and b2.stride(0) >= b_cols)  # padded columns: inside the rows
    for t in (a2, b2):
        assert t.data_ptr() % 16 == 0
        assert t.stride(1) == 1 and t.stride(0) % 16 == 0 or t.stride(0) == 1 and t.stride(1) % 16 == 0
    assert_close(a2[:, :K], a)
    assert_close(b2[:K, :N], b)
    assert (a2[:, K:] == 0).all() and (b2[K:, :N] == 0).all()  # zeros in K add nothing
    assert_close(mm.matmul_torch(a2, b2[:, :N]), mm.matmul_torch(a, b))


def test_pad_for_vector_loads_leaves_aligned_operands_alone():
    a, b = inputs(64, 48, 32, torch.float16)
    a2, b2, k2, a_rows, b_cols = mm.pad_for_vector_loads(a, b)
    assert (a2.data_ptr(), b2.data_ptr(), k2, a_rows, b_cols) == (a.data_ptr(), b.data_ptr(), 32, 64, 48)
    bt = random_tensor((48, 32), torch.float16, DEVICE).t()  # column-major, aligned: no copy either
    assert mm.pad_for_vector_loads(a, bt)[1].data_ptr() == bt.data_ptr()


# Every odd shape on the tiled rung, the first (every dimension odd) on the persistent one; slow:
# the persistent rung's other shapes (each unpadded shape is its own compile).
@pytest.mark.parametrize("pad_strides", [True, False])
@pytest.mark.parametrize("variant, shape", [
    pytest.param(v, shape.values[0], id=f"{v}-{shape.values[0]}",
                 marks=[*shape.marks, *(() if v == "matmul" or shape.values[0] == ODD[0] else [pytest.mark.slow])])
    for v in ["matmul", "matmul_persistent"] for shape in map(_as_param, ODD)])
def test_odd_strides_with_and_without_padding(variant, shape, pad_strides):
    M, N, K = shape
    a, b = inputs(M, N, K, torch.float16)
    bias = random_tensor(N, torch.float16, DEVICE)
    out = poisoned((M, N + 3), torch.float16, DEVICE)[:, :N]  # an output row stride of N + 3 too
    getattr(mm, variant)(a, b, bias, "silu", out=out, pad_strides=pad_strides)
    assert_close(out, mm.matmul_torch(a, b, bias, "silu"))


# ------------------------------------------------------ rows on 16-byte boundaries (issue 21)
# N and K multiples of 8 but not of 16 (fp16/bf16: rows of 16-byte multiples that Triton's own
# divisibility-by-16 check does not see): the pointer kernels are told (ROW_ALIGN) and copy nothing,
# the TMA kernel stores C through a descriptor. Ragged against every block size.
ALIGNED_ROWS = [(37, 40, 24), (19, 56, 40)] + runtime.pick(gpu=[(517, 3000, 408)], sim=[])


def test_row_align_says_when_rows_start_on_16_byte_boundaries():
    h = lambda *s: torch.ones(*s, dtype=torch.float16, device=DEVICE)  # noqa: E731
    a, b, out = h(5, 24), h(24, 40), h(5, 40)
    assert mm.row_align(a, b, out) == 8  # 8 fp16 elements = 16 bytes
    assert mm.row_align(a, h(40, 24).t(), out) == 1  # a column-major b: not row-major
    assert mm.row_align(a, b, h(5, 43)[:, :40]) == 1  # out's rows 86 bytes apart
    assert mm.row_align(h(5, 20), h(20, 40), out) == 1  # K = 20: a row of A ends inside a vector
    assert mm.row_align(h(5, 25)[:, 1:], b, out) == 1  # a's base 2 bytes past a 16-byte boundary
    assert mm.rows_16_byte_aligned(h(5, 48)[:, :45]) and not mm.rows_16_byte_aligned(h(5, 47)[:, :45])


@pytest.mark.parametrize("shape", ALIGNED_ROWS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", ["matmul", "matmul_persistent"])
def test_aligned_rows_are_used_in_place(variant, dtype, shape, monkeypatch):
    """Rows 16-byte aligned but strides not multiples of 16 elements: no padded copy (the kernel is
    told instead), and the product, bias and activation still right at every ragged edge."""
    M, N, K = shape
    a, b = inputs(M, N, K, dtype)
    bias = random_tensor(N, dtype, DEVICE)
    out = poisoned((M, N), dtype, DEVICE)
    assert mm.row_align(a, b, out) == 16 // a.element_size()

    def no_copy(*args, **kwargs):
        raise AssertionError("padded_copy called although every row is 16-byte aligned")
    monkeypatch.setattr(mm, "padded_copy", no_copy)
    getattr(mm, variant)(a, b, bias, "gelu", out=out)
    assert_close(out, mm.matmul_torch(a, b, bias, "gelu"))


def descriptor_spy(monkeypatch):
    """The tensors the launchers build TMA descriptors of, as they build them."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    described, build = [], TensorDescriptor.from_tensor

    def from_tensor(tensor, block_shape, *args, **kwargs):
        described.append(tensor)
        return build(tensor, block_shape, *args, **kwargs)
    monkeypatch.setattr(TensorDescriptor, "from_tensor", staticmethod(from_tensor))
    return described


def stored_through_tma(described, out):
    return any(t.data_ptr() == out.data_ptr() and t.shape == out.shape for t in described)


@needs_tma
@pytest.mark.parametrize("shape", ALIGNED_ROWS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_tma_store_clips_at_the_edges(dtype, shape, monkeypatch):
    """C through a TMA store: `out` is the first N columns of a buffer 8 columns wider (rows
    16-byte aligned), so a store that ignored C's bounds would overwrite the poison beside it;
    and a ragged N (N - 3 columns) whose rows end mid-vector, which must take the masked stores."""
    M, N, K = shape
    a, b = inputs(M, N, K, dtype)
    bias = random_tensor(N, dtype, DEVICE)
    for cols in (N, N - 3):
        described = descriptor_spy(monkeypatch)
        buffer = poisoned((M, N + 8), dtype, DEVICE)
        out = buffer[:, :cols]
        mm.matmul_tma(a, b[:, :cols], bias[:cols], "silu", out=out)
        # N - 3 columns end inside a 16-byte piece: on the H100 a TMA store wrote that piece whole
        # (tools/probe_tma_store_edge.py), so such a C must go out through masked stores.
        assert stored_through_tma(described, out) == (cols == N), \
            "C should go through a TMA store exactly when its rows are whole 16-byte pieces"
        assert_close(out, mm.matmul_torch(a, b[:, :cols], bias[:cols], "silu"))
        assert buffer[:, cols:].isnan().all(), "the TMA store wrote past C's last column"


@needs_tma
@pytest.mark.parametrize("subtile", [False, True], ids=["whole_tile", "two_halves"])
def test_tma_store_of_a_fixed_config(subtile, monkeypatch):
    # EPILOGUE_SUBTILE stores each tile as two halves along N: both must land, in the right place.
    M, N, K = 45, 72, 40
    a, b = inputs(M, N, K, torch.float16)
    bias = random_tensor(N, torch.float16, DEVICE)
    described = descriptor_spy(monkeypatch)
    out = poisoned((M, N), torch.float16, DEVICE)
    config = dict(mm.SIM_CONFIG, FLATTEN=True, EPILOGUE_SUBTILE=subtile, num_warps=4, num_stages=2)
    mm.run_kernel("tma", a, b, bias, "relu", out, M, N, K, config=config)
    assert stored_through_tma(described, out)
    assert_close(out, mm.matmul_torch(a, b, bias, "relu"))


@needs_tma
@pytest.mark.parametrize("dtype", DTYPES)
def test_tma_kernel_falls_back_to_masked_stores(dtype, monkeypatch):
    """`out` a column slice with an odd row stride (N + 3 elements, not a multiple of 16 bytes):
    TMA cannot write it, so the TMA kernel stores C with masked stores instead."""
    M, N, K = ALIGNED_ROWS[0]
    a, b = inputs(M, N, K, dtype)
    bias = random_tensor(N, dtype, DEVICE)
    buffer = poisoned((M, N + 3), dtype, DEVICE)
    out = buffer[:, :N]
    assert not mm.rows_16_byte_aligned(out)
    described = descriptor_spy(monkeypatch)
    mm.matmul_tma(a, b, bias, "relu", out=out)
    assert not stored_through_tma(described, out)
    assert_close(out, mm.matmul_torch(a, b, bias, "relu"))
    assert buffer[:, N:].isnan().all()


def test_shared_memory_estimate_counts_the_c_staging_buffer():
    pipeline = 3 * (128 + 256) * 64 * 2  # stages x (BLOCK_M + BLOCK_N) x BLOCK_K x 2 bytes
    config = mm.tile_config(128, 256, 64, 3, 8)
    assert mm.shared_memory_bytes(config, 2) == pipeline
    assert mm.shared_memory_bytes(config, 2, c_itemsize=2) == pipeline + 128 * 256 * 2
    halves = mm.tile_config(128, 256, 64, 3, 8, EPILOGUE_SUBTILE=True)
    assert mm.shared_memory_bytes(halves, 2, c_itemsize=2) == pipeline + 128 * 128 * 2


# ------------------------------------------------------------------------ specials and edges
@pytest.mark.parametrize("activation", [None, "relu", "silu"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_nan_and_inf_propagate_like_torch(variant, activation):
    a, b = inputs(20, 24, 18, torch.float16)
    a = with_specials(a)
    acc = a.float() @ b.float()
    want = {None: acc, "relu": torch.relu(acc), "silu": torch.nn.functional.silu(acc)}[activation].half()
    # fp32 sums in a different order: ~K u |c| apart before the fp16 rounding, well inside 1e-3.
    assert_close(getattr(mm, variant)(a, b, activation=activation), want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("variant", VARIANTS)
def test_empty_dimensions(variant):
    run = getattr(mm, variant)
    a, b = inputs(5, 6, 0, torch.float16)
    assert_close(run(a, b), torch.zeros(5, 6, dtype=torch.float16, device=DEVICE))
    bias = random_tensor(6, torch.float16, DEVICE)
    assert_close(run(a, b, bias, "relu"), torch.relu(bias).expand(5, 6).contiguous())
    assert run(*inputs(0, 6, 3, torch.float16)).shape == (0, 6)
    assert run(*inputs(4, 0, 3, torch.float16)).shape == (4, 0)


# The tiled rung by default; the persistent and TMA tuners are autotuned by default in
# test_persistent_programs_loop_over_many_tiles, and checked here with --slow.
@pytest.mark.gpu(reason="autotuning times configs on the device")
@pytest.mark.parametrize("variant, tuner, configs", [
    ("matmul_tiled", "matmul_kernel_autotuned", "AUTOTUNE_CONFIGS"),
    pytest.param("matmul_persistent", "matmul_persistent_autotuned", "PERSISTENT_CONFIGS", marks=pytest.mark.slow),
    pytest.param("matmul_tma", "matmul_tma_autotuned", "PERSISTENT_CONFIGS", marks=[needs_tma, pytest.mark.slow])])
def test_autotuner_picked_a_config(variant, tuner, configs):
    a, b = inputs(1024, 768, 256, torch.float16)  # above SMALL_PROBLEM: every config is timed
    assert_close(getattr(mm, variant)(a, b), mm.matmul_torch(a, b))
    space = getattr(mm, configs)
    assert getattr(mm, tuner).best_config.kwargs in [c.kwargs for c in space]
    assert 4 <= len(space) <= 6


def bad_inputs():
    h = lambda *s: torch.ones(*s, dtype=torch.float16, device=DEVICE)  # noqa: E731
    yield "a not a tensor", TypeError, "a must be a torch.Tensor", lambda: ([[1.0]], h(2, 2), None, None, None)
    yield "fp32", TypeError, "expected one of", lambda: (h(2, 2).float(), h(2, 2).float(), None, None, None)
    yield "dtype mismatch", TypeError, "dtypes must match", lambda: (h(2, 2), h(2, 2).bfloat16(), None, None, None)
    yield "1-D", ValueError, "must have 2 dimension", lambda: (h(4), h(4, 2), None, None, None)
    yield "inner dims", ValueError, "inner dimensions differ", lambda: (h(2, 3), h(4, 2), None, None, None)
    yield "bias length", ValueError, "bias has 3 elements", lambda: (h(2, 4), h(4, 2), h(3), None, None)
    yield "bias dtype", TypeError, "bias has dtype bfloat16", lambda: (h(2, 4), h(4, 2), h(2).bfloat16(), None, None)
    yield "activation", ValueError, "activation must be", lambda: (h(2, 4), h(4, 2), None, "tanh", None)
    yield "wrong device", ValueError, "kernels run on", lambda: (h(2, 4), torch.ones(4, 2, device="meta").half(),
                                                                 None, None, None)
    yield "out shape", ValueError, "out has shape", lambda: (h(2, 4), h(4, 2), None, None, h(2, 3))
    yield "out dtype", TypeError, "out has dtype", lambda: (h(2, 4), h(4, 2), None, None, h(2, 2).bfloat16())


@pytest.mark.parametrize("variant", ["matmul", "matmul_tiled", "matmul_persistent", "matmul_tma"])
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make, variant):
    a, b, bias, activation, out = make()
    with pytest.raises(error, match=message):
        getattr(mm, variant)(a, b, bias, activation, out=out)


def test_fixed_rejects_bad_blocks():
    a, b = inputs(8, 8, 8, torch.float16)
    with pytest.raises(ValueError, match="block_k"):
        mm.matmul_fixed(a, b, block_k=8)
    with pytest.raises(ValueError, match="group_m"):
        mm.matmul_fixed(a, b, group_m=0)




def test_tma_refuses_gpus_before_hopper(monkeypatch):
    monkeypatch.setattr(runtime, "capability", lambda device=None: (8, 0))  # an A100
    h = random_tensor((16, 16), torch.float16, DEVICE)
    try:
        mm.matmul_tma(h, h)
    except NotImplementedError:  # a RuntimeError too: an unfinished exercise must say so, not pass
        raise
    except RuntimeError as error:
        assert "compute capability >= 9.0" in str(error), str(error)
    else:
        pytest.fail("no RuntimeError on a GPU of compute capability 8.0")


# ------------------------------------------------------------------- the kernels' fp8 switches
# matmul_fp8.py (tests/week3/test_matmul_fp8.py) runs these kernels with HAS_SCALE (the scales in
# the epilogue) and FP8_PRECISE (promotion every BLOCK_K products) on; here they are checked
# directly, so --impl=exercises tests the learner's _dot and _epilogue in fp8 too. fp32 out:
# the error model of test_matmul_fp8.py with u = 2^-24 in simulation, 2^-13 on the tensor cores.
@pytest.mark.skipif(CAPABILITY is not None and CAPABILITY < (8, 9), reason="fp8 tensor cores need sm_89+")
@pytest.mark.parametrize("kind", [pytest.param("tma", marks=needs_tma), "persistent"])
@pytest.mark.parametrize("precise", [True, False], ids=["promoted", "fast_accum"])
def test_kernels_scale_and_promote_fp8(kind, precise):
    M, N, K = 33, 40, 150
    a, sa = quantize_fp8(random_tensor((M, K), torch.float32, DEVICE))
    w, sb = quantize_fp8(random_tensor((N, K), torch.float32, DEVICE, scale=K ** -0.5))
    b = w.t()
    bias = random_tensor(N, torch.float32, DEVICE)
    out = poisoned((M, N), torch.float32, DEVICE)
    mm.run_kernel(kind, a, b, bias, "relu", out, M, N, K, scales=(sa.reshape(1), sb.reshape(1)),
                  fp8_precise=precise, config=dict(mm.SIM_CONFIG, BLOCK_K=FP8_BLOCK_K, FLATTEN=True,
                                                   num_warps=4, num_stages=2))
    acc = (a.double() @ b.double()) * (float(sa) * float(sb))
    want = torch.relu(acc + bias.double()).float()
    bound = fp8_sum_error_bound(a, b, sa, sb, FP8_BLOCK_K if precise else K, unit=TC_UNIT)
    assert_close(out, want, atol=TOLERANCES[torch.float32][1] + bound)
