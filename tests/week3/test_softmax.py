"""week3_triton_kernels.softmax: fused, persistent and online softmax against torch.softmax (in float64)."""
import json
import math

import pytest
import torch

from course import runtime, tuning
from course.check import (INT32_LIMIT, assert_close, check_layouts, dtype_params, huge, last_programs, layouts,
                          past_int32_marks, poisoned, random_tensor, sweep, with_specials)

sm = runtime.lesson("week3_triton_kernels.softmax")
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16])

# Row widths: 1, primes, a power of two, one past it; wide rows only on the GPU (the
# interpreter runs each program in NumPy, so a 32k-wide row costs seconds there).
WIDTHS = runtime.pick(gpu=sweep([1, 7, 129, 1000, 32768], [64, 127, 4097]), sim=[1, 7, 64, 127, 129])
# One row, and 17 (not a multiple of rows per program) by default; 3 (the same size class as 17:
# the same compiled kernels) with --slow.
ROWS = sweep([1, 17], [3])


def reference(x):
    """torch.softmax in float64, rounded once to x's dtype: the best a kernel can return."""
    return torch.softmax(x.double(), dim=-1).to(x.dtype)


@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_matches_torch(dtype, rows, cols):
    x = random_tensor((rows, cols), dtype, DEVICE, scale=3.0)
    out = poisoned((rows, cols), dtype, DEVICE)
    assert sm.softmax(x, out=out) is out, "the launcher must write into the `out` it was given"
    assert_close(out, reference(x))


@pytest.mark.parametrize("rows_per_program", [1, 2, 8])
@pytest.mark.parametrize("cols", [1, 37, 128])
@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.bfloat16]))
def test_one_block_kernels(dtype, cols, rows_per_program):
    # 13 rows: not a multiple of rows_per_program, so the last program's row mask matters.
    x = random_tensor((13, cols), dtype, DEVICE, scale=3.0)
    out = poisoned((13, cols), dtype, DEVICE)
    sm.softmax_one_block(x, out, rows_per_program=rows_per_program)
    assert_close(out, reference(x))


@pytest.mark.parametrize("num_stages", sweep([2], [1]))
@pytest.mark.parametrize("rows_per_program", [1, 4])
@pytest.mark.parametrize("cols", sweep([1, 37], [128]))
@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.float16, torch.bfloat16]))
def test_persistent_kernel(dtype, cols, rows_per_program, num_stages):
    # More row blocks than the GPU holds programs (<= 32 per SM; 4 programs in simulation), so
    # every program loops over several blocks; a prime row count leaves the last block partial.
    rows = runtime.pick(gpu=20011, sim=29)
    x = random_tensor((rows, cols), dtype, DEVICE, scale=3.0)
    out = poisoned((rows, cols), dtype, DEVICE)
    sm.softmax_persistent(x, out, rows_per_program=rows_per_program, num_stages=num_stages)
    assert_close(out, reference(x))


def swept_configs(dtype, part):
    """Each swept config is a compile on a GPU (14 to 18 per dtype): the default checks the first two
    (the one-row kernel, the persistent one at one stage) and the last (most rows per block, two
    stages); `--slow` the ones between."""
    from week3_triton_kernels import softmax_bench  # the sweep (softmax_bench.py) times these configs

    configs = softmax_bench.sweep_configs(1024, dtype)
    ends = configs[:2] + configs[-1:]
    return ends if part == "ends" else [c for c in configs if c not in ends]


@pytest.mark.parametrize("part", sweep(["ends"], ["between"]))
@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.float16]))
def test_every_swept_config_computes_softmax(dtype, part):
    # The sweep may pick any of these for `softmax`; each must be right, not only fast.
    # Narrowest swept width; 1000 columns also exercises the column mask of a 1024 block.
    x = random_tensor((37, 1000), dtype, DEVICE, scale=3.0)
    for config in swept_configs(dtype, part):
        out = poisoned((37, 1000), dtype, DEVICE)
        if config.persistent:
            sm.softmax_persistent(x, out, rows_per_program=config.rows, num_warps=config.num_warps,
                                  num_stages=config.num_stages)
        else:
            sm.softmax_one_block(x, out, rows_per_program=config.rows, num_warps=config.num_warps)
        assert_close(out, reference(x), name=config.label())


def test_tuned_table_is_well_formed_and_correct():
    # results/tuned_softmax.json is written by the sweep: every entry must be a launchable config
    # and give the right answer at its width, checked on any machine (whatever GPU measured it).
    record = json.loads(sm.TUNED.path.read_text())
    assert record["entries"] and record["machine"]["gpu"] and record["date"]
    for entry in record["entries"]:
        (itemsize, width), config = entry["key"], sm.SoftmaxConfig(**entry["config"])
        assert itemsize in (2, 4) and width & (width - 1) == 0 and width <= sm.MAX_ONE_BLOCK
        assert config.rows >= 1 and config.num_warps in (1, 2, 4, 8, 16, 32) and config.num_stages in (1, 2, 3, 4)
        dtype = torch.float32 if itemsize == 4 else torch.float16
        x = random_tensor((3, width - 1), dtype, DEVICE, scale=3.0)
        out = torch.full_like(x, float("nan"))  # poisoned: an unwritten element fails
        sm.softmax_with_config(x, out, config)
        assert_close(out, reference(x), name=f"tuned {entry['key']}: {config.label()}")


def test_tuned_table_is_used_only_on_the_gpu_it_was_measured_on(monkeypatch):
    record = json.loads(sm.TUNED.path.read_text())
    first = record["entries"][0]
    sm.TUNED.forget()
    monkeypatch.setattr(tuning.runtime, "on_gpu", lambda: True)
    monkeypatch.setattr(tuning.runtime, "describe", lambda: {"gpu": record["machine"]["gpu"]})
    assert sm.TUNED.configs()[tuple(first["key"])] == sm.SoftmaxConfig(**first["config"])
    sm.TUNED.forget()
    monkeypatch.setattr(tuning.runtime, "describe", lambda: {"gpu": "Tesla T4"})
    assert sm.TUNED.configs() == {}
    sm.TUNED.forget()  # the next test reads the table for this machine again


def test_config_for_falls_back_to_the_heuristic():
    for dtype in (torch.float32, torch.bfloat16):
        for cols in (1, 1000, 4096, 32768):
            config = sm.config_for(cols, dtype)
            assert isinstance(config, sm.SoftmaxConfig)
            if not runtime.on_gpu():
                assert config == sm.heuristic_config(cols, dtype)


@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("cols", [1, 15, 16, 17, 100, 300])
@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.bfloat16]))
def test_online_softmax_over_many_chunks(dtype, cols, block_size):
    # A small block forces many chunks, so the running max really changes between them.
    x = random_tensor((5, cols), dtype, DEVICE, scale=5.0)
    out = poisoned((5, cols), dtype, DEVICE)
    sm.softmax_online(x, out, block_size=block_size)
    assert_close(out, reference(x))


VARIANTS = ["softmax", "softmax_one_block", "softmax_persistent", "softmax_online"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_large_inputs_do_not_overflow(variant):
    # exp(1000) overflows fp32; only the max subtraction keeps this finite.
    x = random_tensor((4, 50), torch.float32, DEVICE) * 10 + 1000.0
    x[1] -= 2000.0  # and a row far below zero, where exp underflows without it
    kwargs = {"block_size": 16} if variant == "softmax_online" else {}
    got = getattr(sm, variant)(x, **kwargs)
    assert torch.isfinite(got).all()
    assert_close(got, reference(x))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.bfloat16]))
def test_nan_and_inf_rows_like_torch(dtype, variant):
    x = random_tensor((8, 40), dtype, DEVICE)
    x[0] = with_specials(x[0])                 # NaN, +inf, -inf in one row: all NaN
    x[1, 3] = math.nan                          # one NaN poisons its row
    x[2] = -math.inf                            # all -inf: 0/0 = NaN in torch
    x[3, :20] = -math.inf                       # masked prefix (a first chunk of only -inf)
    x[4, 7] = math.inf                          # +inf: inf - inf = NaN
    x[5, ::2] = -math.inf                       # every other lane masked
    kwargs = {"block_size": 16} if variant == "softmax_online" else {}
    got = getattr(sm, variant)(x, **kwargs)
    assert_close(got, torch.softmax(x.float(), dim=-1).to(dtype))


def test_any_leading_shape_and_empty():
    x = random_tensor((2, 3, 5, 33), torch.float32, DEVICE)
    assert_close(sm.softmax(x), reference(x))
    assert sm.softmax(torch.empty(0, 7, device=DEVICE)).shape == (0, 7)
    assert sm.softmax(torch.empty(3, 0, device=DEVICE)).shape == (3, 0)
    assert sm.softmax_persistent(torch.empty(0, 7, device=DEVICE)).shape == (0, 7)
    assert_close(sm.softmax_persistent(x), reference(x))
    v = random_tensor(19, torch.float32, DEVICE)  # 1-D: one row
    assert_close(sm.softmax(v), reference(v))


@pytest.mark.parametrize("layout", layouts(2))
@pytest.mark.parametrize("variant", VARIANTS)
def test_non_dense_layouts(variant, layout):
    """x or out sliced out of a bigger buffer work; a strided, transposed or column-sliced x (q
    out of a fused qkv, say) is refused: the kernels take the row stride to be the row length."""
    x = random_tensor((9, 70), torch.float32, DEVICE, scale=3.0)
    kwargs = {"block_size": 16} if variant == "softmax_online" else {}
    check_layouts(lambda x, out=None: getattr(sm, variant)(x, out, **kwargs), {"x": x}, reference(x), layout,
                  strided_ok=False)


@pytest.mark.parametrize("variant, kwargs", [
    pytest.param("softmax_one_block", {"rows_per_program": 1}, marks=past_int32_marks(), id="one_row"),
    pytest.param("softmax_one_block", {"rows_per_program": 4}, marks=past_int32_marks(), id="four_rows"),
    pytest.param("softmax_online", {"block_size": 16}, marks=past_int32_marks(), id="online")])
def test_row_offsets_past_2_to_the_31(variant, kwargs):
    """row * row_stride passes 2^31 in the last rows (int64 in the kernels); simulation runs only
    the last programs of the launch."""
    cols = 64
    rows = INT32_LIMIT // cols + 5
    x, out = huge(rows * cols, torch.float16, DEVICE), huge(rows * cols, torch.float16, DEVICE, fill="poison")
    with last_programs(2):
        getattr(sm, variant)(x.view(rows, cols), out.view(rows, cols), **kwargs)
    assert_close(out[-cols:], reference(x[-cols:]))


def test_rows_wider_than_one_block_dispatch_to_online():
    cols = runtime.pick(gpu=sm.MAX_ONE_BLOCK * 2 + 3, sim=sm.MAX_ONE_BLOCK + 1)
    x = random_tensor((2, cols), torch.float32, DEVICE)
    with pytest.raises(ValueError, match="more than one block"):
        sm.softmax_one_block(x)
    with pytest.raises(ValueError, match="more than one block"):
        sm.softmax_persistent(x)
    assert_close(sm.softmax(x), reference(x))


def bad_inputs():
    ok = lambda *shape: torch.ones(*(shape or (4, 8)), device=DEVICE)  # noqa: E731
    yield "not a tensor", TypeError, "must be a torch.Tensor", lambda: ([[1.0]], None)
    yield "integer dtype", TypeError, "expected one of", lambda: (ok().int(), None)
    yield "float64", TypeError, "expected one of", lambda: (ok().double(), None)
    yield "scalar", ValueError, "at least 1 dimension", lambda: (torch.tensor(1.0, device=DEVICE), None)
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(8, 4).t(), None)
    yield "wrong device", ValueError, "kernels run on", lambda: (torch.ones(4, 8, device="meta"), None)
    yield "out wrong shape", ValueError, "out has shape", lambda: (ok(), ok(4, 7))
    yield "out wrong dtype", TypeError, "out has dtype", lambda: (ok(), ok().half())


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make, variant):
    x, out = make()
    with pytest.raises(error, match=message):
        getattr(sm, variant)(x, out)


@pytest.mark.parametrize("kwargs", [{"block_size": 12}, {"block_size": 8}, {"block_size": "64"}])
def test_online_rejects_bad_block_size(kwargs):
    with pytest.raises(ValueError, match="block_size"):
        sm.softmax_online(torch.ones(2, 8, device=DEVICE), **kwargs)


@pytest.mark.parametrize("variant", ["softmax_one_block", "softmax_persistent"])
@pytest.mark.parametrize("kwargs, message", [
    ({"rows_per_program": 3}, "rows_per_program"), ({"rows_per_program": 0}, "rows_per_program"),
    ({"num_warps": 6}, "num_warps"), ({"num_warps": 64}, "num_warps"), ({"num_warps": 4.0}, "num_warps"),
], ids=str)
def test_one_block_launchers_reject_bad_knobs(variant, kwargs, message):
    with pytest.raises(ValueError, match=message):
        getattr(sm, variant)(torch.ones(2, 8, device=DEVICE), **kwargs)


@pytest.mark.parametrize("num_stages", [0, 5, 1.5, True])
def test_persistent_rejects_bad_num_stages(num_stages):
    with pytest.raises(ValueError, match="num_stages"):
        sm.softmax_persistent(torch.ones(2, 8, device=DEVICE), num_stages=num_stages)
