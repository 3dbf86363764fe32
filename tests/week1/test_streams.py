"""week1_cuda_python.streams: chunking arithmetic (anywhere) and the pipelines (on a GPU)."""
import pytest
import torch

from course import runtime
from course.check import assert_close, random_tensor, sweep, with_specials

st = runtime.lesson("week1_cuda_python.streams")

GPU_PIPELINES = ["pipeline_serial", "pipeline_streams", "pipeline_torch_streams"]


# --- chunking: pure arithmetic, checked everywhere ---------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 1000, 10_007, 1 << 20, (1 << 20) + 3])
@pytest.mark.parametrize("chunks", [1, 2, 3, 7, 8, 64])
@pytest.mark.parametrize("align", [1, 64])
def test_chunks_cover_the_range_exactly(n, chunks, align):
    bounds = st.chunk_bounds(n, chunks, align)
    assert 1 <= len(bounds) <= chunks
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    for (lo, hi), (next_lo, _) in zip(bounds, bounds[1:]):
        assert hi == next_lo, "chunks must meet without gap or overlap"
    assert all(lo < hi for lo, hi in bounds), "no empty chunk"
    assert all(lo % align == 0 for lo, _ in bounds), "every chunk starts aligned"
    sizes = [hi - lo for lo, hi in bounds]
    assert all(s == sizes[0] for s in sizes[:-1]) and sizes[-1] <= sizes[0], "equal chunks, shorter last"


def test_chunk_bounds_examples():
    assert st.chunk_bounds(0, 4) == []
    assert st.chunk_bounds(10, 8) == [(0, 10)]  # one 64-element-aligned chunk covers it all
    assert st.chunk_bounds(129, 2, 1) == [(0, 65), (65, 129)]
    assert st.chunk_bounds(1000, 3) == [(0, 384), (384, 768), (768, 1000)]


@pytest.mark.parametrize("args, error, message", [
    ((-1, 2), ValueError, "n must be at least 0"),
    ((10, 0), ValueError, "chunks must be at least 1"),
    ((10, 2, 0), ValueError, "align must be at least 1"),
    ((10.0, 2), TypeError, "n must be a Python int"),
    ((10, True), TypeError, "chunks must be a Python int"),
], ids=["negative n", "no chunks", "zero align", "float n", "bool chunks"])
def test_chunk_bounds_rejects_bad_arguments(args, error, message):
    with pytest.raises(error, match=message):
        st.chunk_bounds(*args)


# --- the reference and the torch serial path (any backend) --------------------------------------

@pytest.mark.parametrize("iters", [0, 3, 40])
def test_torch_serial_pipeline_matches_reference(iters):
    a, b = random_tensor(1001, torch.float32, "cpu"), random_tensor(1001, torch.float32, "cpu")
    out = torch.full((1001,), float("nan"))
    assert st.pipeline_torch_serial(a, b, out, iters=iters) is out
    assert_close(out, reference64(a, b, iters))


def reference64(a, b, iters):
    """The float64 fixed-point iteration, rounded to float32 at the end.

    Each float32 step rounds once (relative error <= u) and halves the error it inherits, so
    the float32 result is within ~2u |v| of this: the default float32 tolerance (~22u) holds.
    """
    v = a.double() + b.double()
    for _ in range(iters):
        v = v * 0.5 + b.double()
    return v.float()


def test_reference_iterates_towards_twice_b():
    a, b = random_tensor(100, torch.float32, "cpu"), random_tensor(100, torch.float32, "cpu")
    assert_close(st.busy_add_reference(a, b, 60), 2 * b)  # the error halves each step: 2^-60 left


# --- the pipelines on a GPU ------------------------------------------------------------------------

def pinned(n, fill=None):
    t = random_tensor(n, torch.float32, "cpu") if fill is None else torch.full((n,), fill)
    return t.pin_memory()


# (n, streams, chunks): one element; fewer elements than chunks; odd n; more chunks than
# streams, not a multiple of them; a single chunk. GPU-only tests: no simulation sizes.
PIPELINE_CASES = sweep([(1, 4, 8), (1_000_003, 3, 7), (4099, 2, 3)],
                       [(100, 4, 8), (1_000_003, 4, 8), (65_536, 8, 64), (10_007, 1, 1)], unpack=True)


@pytest.mark.gpu(reason="CUDA streams, pinned memory and PyCUDA need a real GPU")
@pytest.mark.parametrize("name", GPU_PIPELINES)
@pytest.mark.parametrize("n, streams, chunks", PIPELINE_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("iters", [0, 5])
def test_pipeline_matches_serial_and_reference(name, n, streams, chunks, iters):
    a, b = pinned(n), pinned(n)
    out = pinned(n, fill=float("nan"))  # poison: a chunk never copied back stays NaN
    if name == "pipeline_serial":
        result = st.pipeline_serial(a, b, out, iters=iters)
    else:
        result = getattr(st, name)(a, b, out, iters=iters, streams=streams, chunks=chunks)
    assert result is out
    assert_close(out, reference64(a, b, iters))
    # Same kernel, same elements: the pipelined answer is the serial one, bit for bit.
    assert_close(out, st.pipeline_serial(a, b, iters=iters), rtol=0, atol=0)


@pytest.mark.gpu(reason="CUDA streams need a real GPU")
@pytest.mark.parametrize("name", GPU_PIPELINES)
def test_pipeline_specials_and_empty(name):
    a = with_specials(random_tensor(5000, torch.float32, "cpu")).pin_memory()
    b = with_specials(random_tensor(5000, torch.float32, "cpu")).flip(0).contiguous().pin_memory()
    assert_close(getattr(st, name)(a, b), st.busy_add_reference(a, b, 0))
    # Empty inputs cannot be pinned (torch.empty(0).pin_memory().is_pinned() is False: no
    # memory, a null pointer) and need not be: nothing is copied. Both ways of writing them work.
    for empty in (torch.empty(0), torch.empty(0).pin_memory()):
        assert getattr(st, name)(empty, empty.clone()).shape == (0,)
        out = torch.empty(0)
        assert getattr(st, name)(empty, empty.clone(), out) is out


@pytest.mark.gpu(reason="CUDA streams, pinned memory and PyCUDA need a real GPU")
@pytest.mark.parametrize("name", GPU_PIPELINES)
def test_pipeline_reused_gives_each_calls_answer(name):
    """The stream pools are kept between calls (and the caching allocator hands the last call's
    device buffers out again): a second and third call, shorter and then longer, must each give
    their own inputs' answer, never a stale chunk of the call before."""
    for n in (70_001, 1_003, 70_001):
        a, b = pinned(n), pinned(n)
        out = pinned(n, fill=float("nan"))
        getattr(st, name)(a, b, out, iters=3)
        assert_close(out, reference64(a, b, 3))


@pytest.mark.gpu(reason="CUDA streams, pinned memory and PyCUDA need a real GPU")
@pytest.mark.parametrize("layout", ["offset", "strided"])
@pytest.mark.parametrize("name", GPU_PIPELINES)
def test_non_dense_layouts(name, layout):
    """Pinned host tensors sliced out of a bigger pinned buffer work; strided ones are refused."""
    n = 4099

    def pinned_view(values):
        buffer = torch.full((2 * n + 2,), float("nan")).pin_memory()
        view = buffer[1:n + 1] if layout == "offset" else buffer[::2][:n]
        view.copy_(values)
        return view

    a, b = pinned(n), pinned(n)
    want = reference64(a, b, 0)
    for which in ("a", "b", "out"):
        args = {"a": a, "b": b, "out": None}
        args[which] = pinned_view(args[which] if which != "out" else torch.full((n,), float("nan")))
        if layout == "strided":
            with pytest.raises(ValueError, match="not contiguous"):
                getattr(st, name)(args["a"], args["b"], args["out"])
            continue
        got = getattr(st, name)(args["a"], args["b"], args["out"])
        assert_close(got, want, name=f"{which} {layout}")


@pytest.mark.gpu(reason="CUDA streams need a real GPU")
def test_pipelines_refuse_pageable_memory():
    a = random_tensor(100, torch.float32, "cpu")
    with pytest.raises(ValueError, match="pageable host memory"):
        st.pipeline_streams(a, a.clone())


@pytest.mark.gpu(reason="measures copies and kernels on a real GPU")
def test_overlap_report_is_consistent():
    r = st.overlap_report(1 << 22, iters=0, streams=4, chunks=8, reps=3)
    assert r["stage_sum_ms"] == pytest.approx(r["h2d_ms"] + r["kernel_ms"] + r["d2h_ms"])
    # No pipelined run beats its slowest stage. Compared run for run at their fastest: under xdist
    # other processes share the copy engines, and a stage timed while they copy (7.9 ms for a
    # 0.3 ms copy, seen on the H100 with 8 processes) says nothing about the pipeline timed later.
    assert r["overlapped_min_ms"] >= 0.9 * r["best_possible_min_ms"], r
    assert r["chunks"] == 8
    assert "| 2^22 | 0 | 4 | 8 |" in st.overlap_table([r])


@pytest.mark.skipif(runtime.on_gpu(), reason="checks the message given where there is no GPU")
def test_pipelines_say_they_need_a_gpu():
    a = random_tensor(10, torch.float32, "cpu")
    for name in GPU_PIPELINES:
        with pytest.raises(RuntimeError) as info:
            getattr(st, name)(a, a.clone())
        if info.type is NotImplementedError:  # a RuntimeError too: an unwritten exercise
            raise info.value
        assert "need a real GPU" in str(info.value)


def bad_inputs():
    ok = lambda n=8: torch.ones(n)  # noqa: E731
    yield "not a tensor", TypeError, "a must be a torch.Tensor", lambda: ([1.0] * 8, ok(), None, {})
    yield "float64", TypeError, "expected float32", lambda: (ok().double(), ok(), None, {})
    yield "on a device", ValueError, "starts and ends in host", lambda: (torch.ones(8, device="meta"), ok(), None, {})
    yield "shapes", ValueError, "shapes must match", lambda: (ok(8), ok(9), None, {})
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(16)[::2], ok(8), None, {})
    yield "out shape", ValueError, "out has shape", lambda: (ok(), ok(), ok(9), {})
    yield "negative iters", ValueError, "iters must be at least 0", lambda: (ok(), ok(), None, {"iters": -1})
    yield "zero streams", ValueError, "streams must be at least 1", lambda: (ok(), ok(), None, {"streams": 0})
    yield "float chunks", TypeError, "chunks must be a Python int", lambda: (ok(), ok(), None, {"chunks": 2.0})


@pytest.mark.parametrize("name", ["pipeline_streams", "pipeline_torch_streams"])
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_any_copy(name, case, error, message, make):
    a, b, out, knobs = make()
    with pytest.raises(error, match=message):
        getattr(st, name)(a, b, out, **knobs)
