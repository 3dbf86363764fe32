"""week3_triton_kernels.access_patterns: strided and 2-D copies against torch's .contiguous().

Every kernel here copies, and a copy has no rounding: outputs must equal torch's bit for bit
(tolerance 0, NaN payloads and -0.0 included). bf16 is tested in simulation too: the
interpreter's bf16 *arithmetic* is wrong (see course.check.dtype_params), but loading and
storing raw 16-bit values is exact, and a copy does nothing else.
"""
import pytest
import torch

from course import runtime, versions
from course.check import (INT32_LIMIT, assert_close, check_layout, huge, in_layout, last_programs, layouts,
                          past_int32_marks, poisoned, random_tensor, sweep, with_specials)

ap = runtime.lesson("week3_triton_kernels.access_patterns")
DEVICE = runtime.DEVICE

block_ptr_only = pytest.mark.skipif(
    not ap.BLOCK_PTR_SUPPORTED, reason="this Triton removed tl.make_block_ptr (Triton >= 3.8); "
                                       "the GPU machine's Triton 3.6 runs these")
# Triton 3.5's interpreter refuses descriptor strides that are not 16 elements (course/versions.py);
# copy2d_descriptor refuses them there too, naming why. A GPU, or Triton >= 3.6, runs these.
descriptors_simulated = pytest.mark.skipif(versions.interpreter_descriptor_limitation() is not None,
                                           reason=str(versions.interpreter_descriptor_limitation()))
COPY2D = [pytest.param("copy2d_gather"), pytest.param("copy2d"),
          pytest.param("copy2d_block_ptr", marks=block_ptr_only)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32]


def assert_exact(got, want):
    """Equal values, and equal bits for floats (NaN payloads, -0.0): a copy may not round."""
    assert_close(got, want, rtol=0, atol=0)
    if want.dtype.is_floating_point and want.numel():
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[want.element_size()]
        assert torch.equal(got.contiguous().view(bits), want.contiguous().view(bits)), "bit patterns differ"


def base_matrix(rows, cols, dtype):
    return random_tensor((rows, cols), dtype, DEVICE, scale=100.0)


def views(dtype):
    """2-D inputs of every layout the kernels must follow through their strides."""
    a = base_matrix(37, 29, dtype)
    b = base_matrix(6, 5, dtype)
    c = random_tensor((4, 3, 33), dtype, DEVICE)
    return {
        "contiguous": a,
        "transposed": a.t(),
        "sliced": a[3:, 5:20],
        "stepped": a[::2, ::3],
        "stepped_transposed": a.t()[::3, 1::2],
        "broadcast_rows": random_tensor((1, 29), dtype, DEVICE).expand(13, 29),
        "middle_of_3d": c[:, 1, :],
        "one_row": a[4:5],
        "one_column": a[:, 7:8],
        "one_element": b[2:3, 3:4],
        "tiny_transposed": b.t(),
        "wide": base_matrix(3, 200, dtype)[:, 1:],
        "tall_transposed": base_matrix(3, 140, dtype).t(),
        # GPU only: many tiles in both directions (the interpreter runs programs one by one)
        **runtime.pick(gpu={"large_transposed": base_matrix(1031, 2053, dtype).t(),
                            "large_stepped": base_matrix(2000, 3001, dtype)[1::3, ::2]}, sim={}),
    }


# -------------------------------------------------------------------------- the cost model
@pytest.mark.parametrize("stride, itemsize, expected", [
    (1, 4, 1), (2, 4, 2), (4, 4, 4), (8, 4, 8), (16, 4, 8), (32, 4, 8),   # fp32: 8 per sector
    (8, 2, 8), (16, 2, 16), (64, 2, 16),                                   # fp16: 16 per sector
    (3, 8, 3), (4, 8, 4), (5, 8, 4),                                       # fp64: 4 per sector
])
def test_read_amplification_counts_sectors(stride, itemsize, expected):
    assert ap.read_amplification(stride, itemsize) == expected


@pytest.mark.parametrize("stride", [0, -1, 1.5])
def test_read_amplification_rejects_bad_stride(stride):
    with pytest.raises(ValueError, match="stride"):
        ap.read_amplification(stride, 4)


# --------------------------------------------------------------------------- strided copy
# Default and slow, per sweep: on a GPU each distinct (dtype, size and stride class: 1, a multiple
# of 16 or neither) is its own compile, so the default keeps each class once per kernel, every
# dtype, a ragged size and a large one; slow adds the rest of each cross product.
STRIDED_DEFAULT = {(1, 1), (1, 3), (1025, 1), (3 * 1024 + 17, 33), (1_000_003, 3)}


def strided_cases():
    """(dtype, n, stride): float32 over strides 1, 3, 33 and the size classes (STRIDED_DEFAULT) by
    default; the other dtypes (the same index arithmetic, other element sizes) at n = 1025, stride 3;
    all of it with --slow."""
    sizes = [1, 7, 1023, 1025, 3 * 1024 + 17] + runtime.pick(gpu=[65537, 1_000_003], sim=[])
    for dtype in DTYPES:
        for n in sizes:
            for stride in (1, 2, 3, 8, 33):
                default = ((n, stride) in STRIDED_DEFAULT if dtype == torch.float32 else (n, stride) == (1025, 3))
                yield pytest.param(dtype, n, stride, id=f"{dtype}-{n}-{stride}",
                                   marks=() if default else pytest.mark.slow)


@pytest.mark.parametrize("dtype, n, stride", list(strided_cases()))
def test_strided_copy_matches_torch(dtype, n, stride):
    base = random_tensor(n * stride, dtype, DEVICE)
    x = base[::stride]
    out = poisoned(n, dtype, DEVICE)
    assert ap.strided_copy(x, out) is out, "the launcher must write into the `out` it was given"
    assert_exact(out, x.contiguous())


def test_strided_copy_of_a_sliced_and_broadcast_view():
    base = random_tensor(1000, torch.float32, DEVICE)
    assert_exact(ap.strided_copy(base[5::7]), base[5::7].contiguous())   # starts mid-buffer
    one = random_tensor(1, torch.float32, DEVICE).expand(300)          # stride 0
    assert_exact(ap.strided_copy(one), one.contiguous())
    column = random_tensor((50, 9), torch.float32, DEVICE)[:, 4]          # a column: stride 9
    assert_exact(ap.strided_copy(column), column.contiguous())


def test_strided_copy_keeps_nan_inf_and_signed_zero_bits():
    x = with_specials(random_tensor(3 * 500, torch.float32, DEVICE))[::3]
    assert_exact(ap.strided_copy(x), x.contiguous())


# ---------------------------------------------------------------------------- 2-D copies
# float32 runs every layout by default; the other dtypes (the same index arithmetic on other
# element sizes) a representative few, and every layout with --slow.
DEFAULT_LAYOUTS = {"contiguous", "transposed", "stepped_transposed"}


def dtype_layouts(names, default):
    return [pytest.param(d, name, id=f"{d}-{name}",
                         marks=pytest.mark.slow if d != torch.float32 and name not in default else ())
            for d in DTYPES for name in names]


# test_copy2d_follows_any_strides, by default: copy2d (the pointer version the others are read
# against) in every float32 layout; the gather and block-pointer versions in the float32 layouts
# that are each a bug class (both strides odd, a zero stride, one element, many tiles both ways);
# each other dtype once per version. Slow: every (version, dtype, layout).
COPY2D_FLOAT32_LAYOUTS = {"stepped_transposed", "broadcast_rows", "one_element", "large_stepped"}
COPY2D_DTYPE_LAYOUT = {torch.float16: "transposed", torch.bfloat16: "stepped_transposed", torch.int32: "contiguous"}


def copy2d_cases():
    def default(variant, dtype, layout):
        if dtype != torch.float32:
            return layout == COPY2D_DTYPE_LAYOUT[dtype]
        return variant == "copy2d" or layout in COPY2D_FLOAT32_LAYOUTS

    return [pytest.param(v.values[0], d, name, id=f"{d}-{name}-{v.values[0]}",
                         marks=[*v.marks, *(() if default(v.values[0], d, name) else [pytest.mark.slow])])
            for d in DTYPES for name in views(torch.float32) for v in COPY2D]


@pytest.mark.parametrize("variant, dtype, layout", copy2d_cases())
def test_copy2d_follows_any_strides(dtype, layout, variant):
    x = views(dtype)[layout]
    out = poisoned(tuple(x.shape), dtype, DEVICE)
    assert getattr(ap, variant)(x, out) is out
    assert_exact(out, x.contiguous())


# A tile larger than the matrix, (128, 128), is a long compile: the default runs it on copy2d,
# slow on the block-pointer version (whose edge tiles the other shapes reach too).
@pytest.mark.parametrize("variant, tile", [
    pytest.param(v.values[0], tile, id=f"tile{i}-{v.values[0]}",
                 marks=[*v.marks, *([pytest.mark.slow] if tile == (128, 128) and v.values[0] == "copy2d_block_ptr"
                                    else [])])
    for i, tile in enumerate([(1, 16), (16, 1), (8, 32), (32, 8), (128, 128)]) for v in COPY2D])
def test_copy2d_tile_shapes(variant, tile):
    # Tiles of one row or one column, and a tile larger than the matrix: every edge mask.
    x = base_matrix(45, 70, torch.float32).t()
    out = poisoned(tuple(x.shape), torch.float32, DEVICE)
    extra = {} if variant == "copy2d_gather" else {"tile": tile}
    getattr(ap, variant)(x, out, **extra)
    assert_exact(out, x.contiguous())


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (7, 1), (33, 65), (64, 64), (130, 3)])
def test_transpose_matches_torch(shape):
    x = base_matrix(*shape, torch.float32)
    out = poisoned((shape[1], shape[0]), torch.float32, DEVICE)
    assert ap.transpose(x, out) is out
    assert_exact(out, x.t().contiguous())


@pytest.mark.parametrize("variant", ["copy2d_gather", "copy2d",
                                     pytest.param("copy2d_descriptor", marks=descriptors_simulated), "transpose",
                                     pytest.param("copy2d_block_ptr", marks=block_ptr_only)])
def test_copy2d_keeps_nan_inf_and_signed_zero_bits(variant):
    x = with_specials(base_matrix(24, 36, torch.float32)).t()
    want = x.t().contiguous() if variant == "transpose" else x.contiguous()
    assert_exact(getattr(ap, variant)(x), want)


# ------------------------------------------------------------------ tensor descriptors (TMA)
def aligned_views(dtype):
    """Views a tensor descriptor can describe: a unit stride and rows 16-byte aligned."""
    per16 = 16 // torch.empty((), dtype=dtype).element_size()
    a = base_matrix(9 * per16, 5 * per16, dtype)  # neither side a multiple of the 64 x 64 tile
    return {
        "contiguous": a,
        "transposed": a.t(),
        "left_columns": a[:, :3 * per16],
        "lower_rows": a[4:],
        "one_row": a[2:3],
        "one_column": a[:, per16:per16 + 1].t(),
        "square_transposed": base_matrix(16 * per16, 16 * per16, dtype).t(),
        **runtime.pick(gpu={"large_transposed": base_matrix(1000 * per16, 257 * per16, dtype).t()}, sim={}),
    }


# Default: every float32 layout, and three per other dtype (the large transposed copy, a long
# compile per dtype on the GPU, only in float32); slow: the rest.
@pytest.mark.parametrize("dtype, layout", dtype_layouts(list(aligned_views(torch.float32)),
                                                       {"contiguous", "transposed", "one_column"}))
@descriptors_simulated
def test_descriptor_copy_matches_torch(dtype, layout):
    x = aligned_views(dtype)[layout]
    out = poisoned(tuple(x.shape), dtype, DEVICE)
    assert ap.copy2d_descriptor(x, out) is out
    assert_exact(out, x.contiguous())


@descriptors_simulated
@pytest.mark.parametrize("tile", [(16, 16), (32, 64), (64, 32)])
def test_descriptor_tiles(tile):
    x = base_matrix(100, 52, torch.float32).t()
    assert_exact(ap.copy2d_descriptor(x, tile=tile), x.contiguous())


def refused_by_descriptors():
    a = base_matrix(12, 20, torch.float32)
    yield "no unit stride", a[::2, ::2], "stride 1"
    yield "rows not 16-byte aligned", base_matrix(7, 5, torch.float32), "multiple of 16 bytes"
    yield "start not aligned", a[:, 1:], "16-byte boundary"
    yield "broadcast", random_tensor((1, 8), torch.float32, DEVICE).expand(4, 8), "broadcast"


@pytest.mark.parametrize("case, x, message", [pytest.param(*c, id=c[0]) for c in refused_by_descriptors()])
def test_descriptor_refuses_what_tma_cannot_read(case, x, message):
    with pytest.raises(ValueError, match=message):
        ap.copy2d_descriptor(x)
    assert_exact(ap.copy2d(x), x.contiguous())  # the pointer version copes


def test_descriptor_copy_refuses_strides_an_older_interpreter_cannot_take(monkeypatch):
    """Where the interpreter cannot take a descriptor stride (Triton 3.5: course/versions.py), the
    launcher refuses it before the launch, naming why and what to use; other strides still run."""
    monkeypatch.setattr(versions, "interpreter_descriptor_limitation",
                        lambda: "Triton 3.5.1's interpreter checks tensor-descriptor strides in elements")
    with pytest.raises(RuntimeError, match=r"copy2d_descriptor: Triton 3.5.1's interpreter .*Strides \(20, 1\).*copy2d"):
        ap.copy2d_descriptor(base_matrix(12, 20, torch.float32))  # rows of 80 bytes: aligned, not 16 elements
    x = base_matrix(12, 32, torch.float32)
    assert_exact(ap.copy2d_descriptor(x), x)


def test_descriptor_refuses_too_narrow_tile():
    with pytest.raises(ValueError, match="16 bytes"):
        ap.copy2d_descriptor(base_matrix(8, 8, torch.float32), tile=(2, 2))


def test_block_ptr_is_refused_clearly_where_triton_removed_it(monkeypatch):
    # The course pins a Triton that has block pointers; a learner's newer one (>= 3.8) does not,
    # and must get this message rather than Triton's. Pretend to be that Triton.
    monkeypatch.setattr(ap, "BLOCK_PTR_SUPPORTED", False)
    with pytest.raises(RuntimeError) as error:
        ap.copy2d_block_ptr(base_matrix(4, 4, torch.float32))
    if error.type is NotImplementedError:  # an unwritten exercise says so, not "wrong message"
        raise error.value
    assert "make_block_ptr" in str(error.value)


# ---------------------------------------------------------------- the plain (sweep) copy
@pytest.mark.parametrize("config", [
    {}, {"block_size": 16}, {"block_size": 256, "num_warps": 1}, {"block_size": 4096, "num_warps": 16},
    {"programs": 1}, {"programs": 3, "block_size": 64, "num_stages": 3}, {"programs": 1000},
])
@pytest.mark.parametrize("n", sweep([3 * 1024 + 17], [1, 1000]))
def test_copy_with_any_launch_config(n, config):
    x = random_tensor(n, torch.float32, DEVICE)
    out = poisoned(n, torch.float32, DEVICE)
    assert ap.copy(x, out, **config) is out
    assert_exact(out, x)


# ------------------------------------------------------- nothing written outside `out`
ALL_COPIES = ["strided_copy", "copy2d_gather", "copy2d", "copy2d_descriptor", "copy",
              pytest.param("copy2d_block_ptr", marks=block_ptr_only)]


@pytest.mark.parametrize("variant", [pytest.param(v, marks=descriptors_simulated) if v == "copy2d_descriptor" else v
                                     for v in ALL_COPIES])
def test_writes_nothing_past_the_end_of_out(variant):
    # `out` is the front of a larger poisoned buffer: a store that forgets its mask writes
    # into the rest, which the poison check below catches (poisoning `out` alone would not).
    rows, cols = 20, 36  # 720 elements: neither a multiple of 1024 nor of a 64 x 64 tile
    x = base_matrix(rows, cols, torch.float32)
    if variant in ("strided_copy", "copy"):
        x = x.reshape(-1)
    buffer = poisoned(rows * cols + 4096, torch.float32, DEVICE)
    out = buffer[:rows * cols].view(x.shape)
    getattr(ap, variant)(x, out)
    assert_exact(out, x)
    assert torch.isnan(buffer[rows * cols:]).all(), "the kernel wrote past the end of out"


@pytest.mark.parametrize("layout", layouts(2))
@pytest.mark.parametrize("variant", ALL_COPIES + ["transpose"])
def test_out_in_other_layouts(variant, layout):
    """x in any layout is followed through its strides (test_copy2d_follows_any_strides); an `out`
    sliced out of a bigger buffer is written there and nowhere else (the descriptor copy refuses
    an unaligned one: TMA cannot write it), and a non-contiguous `out` is refused."""
    x = base_matrix(18, 40, torch.float32)
    if variant in ("strided_copy", "copy"):
        x = x.reshape(-1)
    want = x.t().contiguous() if variant == "transpose" else x
    if layout not in layouts(want.dim()):
        return
    out = in_layout(poisoned(want.shape, torch.float32, DEVICE), layout)
    if variant == "copy2d_descriptor" and layout == "offset":
        with pytest.raises(ValueError, match="16-byte"):
            ap.copy2d_descriptor(x, out)
        return
    check_layout(lambda: getattr(ap, variant)(x, out), want, [out], out=out, strided_ok=False, rtol=0, atol=0)


# Offsets past 2^31 elements: a view whose last element lies 2^31 elements past its first (row
# stride 2^30, three rows; or every 2^20-th element of a 2^31 + 1 buffer), or the last programs
# of a contiguous 2^31-element copy. The kernels compute offsets in int64; int32 ones would wrap.
def past_int32_views():
    base = huge(INT32_LIMIT + 64, torch.float16, DEVICE, tail=64)
    base[:64] = random_tensor(64, torch.float16, DEVICE)
    base[2**30:2**30 + 64] = random_tensor(64, torch.float16, DEVICE)
    rows = base.as_strided((3, 64), (2**30, 1))
    return {"rows": rows, "columns": rows.t(), "every_2^20th": base.as_strided((2049,), (2**20,))}


@pytest.mark.parametrize("variant", [pytest.param(v, marks=past_int32_marks() + ([block_ptr_only] if "ptr" in v else []))
                                     for v in ["strided_copy", "copy2d_gather", "copy2d", "copy2d_descriptor",
                                               "transpose", "copy", "copy2d_block_ptr"]])
def test_offsets_past_2_to_the_31(variant):
    if variant == "copy":
        n = INT32_LIMIT + 1000
        x, out = huge(n, torch.float16, DEVICE), huge(n, torch.float16, DEVICE, fill="poison")
        with last_programs(2):
            ap.copy(x, out)
        assert_exact(out[-1000:], x[-1000:])
        return
    views_ = past_int32_views()
    for name, x in views_.items():
        if (x.dim() == 1) != (variant == "strided_copy"):
            continue
        if variant == "copy2d_descriptor" and name == "columns":
            continue  # TMA reads along the unit stride: the same as "rows"
        want = x.t().contiguous() if variant == "transpose" else x.contiguous()
        assert_exact(getattr(ap, variant)(x), want)


@pytest.mark.parametrize("variant", ["copy2d_gather", "copy2d", "copy2d_descriptor", "transpose",
                                     pytest.param("copy2d_block_ptr", marks=block_ptr_only)])
@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)])
def test_empty_matrices(variant, shape):
    x = torch.empty(shape, device=DEVICE)
    got = getattr(ap, variant)(x)
    assert got.shape == (x.t().shape if variant == "transpose" else x.shape)


@pytest.mark.parametrize("variant", ["strided_copy", "copy"])
def test_empty_vectors(variant):
    assert getattr(ap, variant)(torch.empty(0, device=DEVICE)).shape == (0,)


# ---------------------------------------------------------------------------- bad inputs
def bad_inputs(ndim):
    def ok(*shape):
        return torch.ones(*(shape or ((64,) if ndim == 1 else (8, 16))), device=DEVICE)
    shape = (64,) if ndim == 1 else (8, 16)
    yield "not a tensor", TypeError, "must be a torch.Tensor", lambda: ([[1.0]], None)
    yield "bool dtype", TypeError, "expected one of", lambda: (ok().bool(), None)
    yield "complex dtype", TypeError, "expected one of", lambda: (ok().to(torch.complex64), None)
    yield "wrong ndim", ValueError, "dimension", lambda: (torch.ones((2,) * (ndim + 1), device=DEVICE), None)
    yield "wrong device", ValueError, "kernels run on", lambda: (torch.ones(shape, device="meta"), None)
    yield "out wrong shape", ValueError, "out has shape", lambda: (ok(), torch.ones(3, device=DEVICE))
    yield "out wrong dtype", TypeError, "out has dtype", lambda: (ok(), ok().half())
    yield "out not contiguous", ValueError, "not contiguous", lambda: (
        ok(), torch.ones(128, device=DEVICE)[::2] if ndim == 1 else torch.ones(16, 8, device=DEVICE).t())
    yield "out overlaps x", ValueError, "overlaps", lambda: (lambda t: (t, t))(ok())


def bad_input_params():
    launchers = [("strided_copy", 1), ("copy", 1), ("copy2d_gather", 2), ("copy2d", 2), ("copy2d_descriptor", 2),
                 ("copy2d_block_ptr", 2)]
    for variant, ndim in launchers:
        for case in [c[0] for c in bad_inputs(ndim)]:
            if variant == "copy" and case == "wrong ndim":
                continue  # copy() copies a contiguous tensor of any shape
            marks = block_ptr_only if variant == "copy2d_block_ptr" else ()
            yield pytest.param(variant, ndim, case, marks=marks, id=f"{variant}-{case}")


@pytest.mark.parametrize("variant, ndim, case", list(bad_input_params()))
def test_rejects_bad_input_before_launch(variant, ndim, case):
    _, error, message, make = next(c for c in bad_inputs(ndim) if c[0] == case)
    x, out = make()
    with pytest.raises(error, match=message):
        getattr(ap, variant)(x, out)


@pytest.mark.parametrize("kwargs, message", [
    ({"block_size": 1000}, "block_size"), ({"block_size": 8}, "block_size"), ({"num_warps": 3}, "num_warps"),
    ({"num_stages": 0}, "num_stages"), ({"programs": 0}, "programs"),
])
def test_copy_rejects_bad_launch_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ap.copy(torch.ones(64, device=DEVICE), **kwargs)


@pytest.mark.parametrize("variant", ["copy2d", "copy2d_descriptor",
                                     pytest.param("copy2d_block_ptr", marks=block_ptr_only)])
@pytest.mark.parametrize("kwargs, message", [({"tile": (3, 64)}, "tile"), ({"tile": (64, 0)}, "tile"),
                                             ({"num_warps": 5}, "num_warps")])
def test_copy2d_rejects_bad_tile(variant, kwargs, message):
    with pytest.raises(ValueError, match=message):
        getattr(ap, variant)(torch.ones(8, 16, device=DEVICE), **kwargs)


def test_transpose_rejects_a_vector():
    with pytest.raises(ValueError, match="dimension"):
        ap.transpose(torch.ones(5, device=DEVICE))
