"""week1_cuda_python.histogram: every rung against torch.bincount, exactly.

Counting is exact arithmetic: whatever order the atomics land in, each counter must equal the
reference, so every comparison here has zero tolerance. The output is poisoned (int32 min)
before each call: the launcher must zero it and the kernels must add every element. Inputs
mix in values outside [0, bins) (negative int32, uint8 >= bins), which are defined as not
counted; all-equal inputs are the worst case for atomic contention.
"""
import pytest
import torch

from course import runtime
from course.check import assert_close, check_layouts, layouts, poisoned, sweep

hg = runtime.lesson("week1_cuda_python.histogram")

DEVICE = runtime.DEVICE
NUMBA = list(hg.NUMBA_LAUNCHERS)
CUDA_C = list(hg.CUDA_C_LAUNCHERS)
GLOBAL_ONLY = ("histogram_numba_global", "histogram_cuda_global")  # no shared-memory bin limit
DTYPE_PARAMS = [pytest.param(torch.uint8, id="uint8"), pytest.param(torch.int32, id="int32")]
# (n, bins): one element, one bin, primes, not multiples of a 16-byte vector, of a block or of
# the grid; bins from 1 past a warp to the shared-memory limit. Tiny in simulation.
# The default run keeps a vector-less tail (15), one vector + a tail (17), a large ragged size
# and the shared-memory limit; the rest of the sweep is slow.
SHAPES = runtime.pick(
    gpu=sweep([(1, 1), (15, 7), (17, 256), (65537, 256), (1_000_003, 33), (4099, hg.MAX_SHARED_BINS)],
              [(16, 256), (1000, 1), (1_000_003, 1000), ((1 << 24) + 5, 256)]),
    sim=[(1, 1), (17, 5), (300, 256), (200, 1)],
)


def launchers(gpu_only_marked=True, names=None):
    return [pytest.param(n, marks=pytest.mark.gpu if gpu_only_marked and n in CUDA_C else ())
            for n in names or NUMBA + CUDA_C]


def values(n: int, bins: int, dtype: torch.dtype) -> torch.Tensor:
    """Uniform values, some outside [0, bins): uint8 over all of 0..255 (out of range when
    bins < 256), int32 from about -bins/4 to 5 bins/4 (negatives and values >= bins)."""
    if dtype == torch.uint8:
        return torch.randint(0, 256, (n,), device=DEVICE, dtype=torch.uint8)
    return torch.randint(-(bins // 4) - 1, bins + bins // 4 + 1, (n,), device=DEVICE, dtype=torch.int32)


def expected_counts(x: torch.Tensor, bins: int) -> torch.Tensor:
    wide = x.cpu().long()
    return torch.bincount(wide[(wide >= 0) & (wide < bins)], minlength=bins).to(torch.int32)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"n{s[0]}-bins{s[1]}")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("name", launchers())
def test_matches_bincount(name, dtype, shape):
    n, bins = shape
    x = values(n, bins, dtype)
    out = poisoned(bins, torch.int32, DEVICE)
    assert getattr(hg, name)(x, bins, out=out) is out, "must write into the given out"
    assert_close(out.cpu(), expected_counts(x, bins))


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("name", launchers())
def test_all_equal_values(name, dtype):
    n = runtime.pick(gpu=(1 << 22) + 3, sim=300)
    for value, bins in ((0, 1), (7, 256), (255, 256)):
        x = torch.full((n,), value, device=DEVICE, dtype=dtype)
        counts = getattr(hg, name)(x, bins)
        assert counts.dtype == torch.int32 and counts.shape == (bins,)
        assert_close(counts.cpu(), expected_counts(x, bins))
        assert int(counts[value]) == n


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("name", launchers())
def test_out_of_range_values_are_not_counted(name, dtype):
    bins = 10
    x = torch.randint(bins, 256, (runtime.pick(gpu=5000, sim=100),), device=DEVICE).to(dtype)
    if dtype == torch.int32:
        x[::2] = -x[::2]  # negatives too: compared as unsigned, they are huge
    assert_close(getattr(hg, name)(x, bins).cpu(), torch.zeros(bins, dtype=torch.int32))


@pytest.mark.parametrize("name", launchers())
def test_empty_input_gives_zeros(name):
    for dtype in hg.DTYPES:
        out = poisoned(5, torch.int32, DEVICE)
        assert getattr(hg, name)(torch.empty(0, dtype=dtype, device=DEVICE), 5, out=out) is out
        assert_close(out.cpu(), torch.zeros(5, dtype=torch.int32))


@pytest.mark.parametrize("name", launchers(names=list(GLOBAL_ONLY)))
def test_global_rungs_take_many_bins(name):
    bins = hg.MAX_SHARED_BINS + 1000
    x = torch.randint(-5, bins + 5, (runtime.pick(gpu=100_000, sim=100),), device=DEVICE, dtype=torch.int32)
    assert_close(getattr(hg, name)(x, bins).cpu(), expected_counts(x, bins))


def contended(distribution: str, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Values that send many threads to few counters at once (bins = 256)."""
    if distribution == "one_bin":
        return torch.full((n,), 3, device=DEVICE, dtype=dtype)
    if distribution == "two_bins":  # neighbouring threads alternate between two counters
        return (torch.arange(n, device=DEVICE) % 2 * 255).to(dtype)
    # skewed: 90% of the values in one bin, the rest spread over all 256
    x = torch.randint(0, 256, (n,), device=DEVICE)
    return torch.where(torch.rand(n, device=DEVICE) < 0.9, torch.full_like(x, 200), x).to(dtype)


@pytest.mark.gpu(reason="contention needs threads that really run concurrently: the CUDA simulator runs them "
                        "one by one, so a missing atomic (counts[v] += 1) passes there")
@pytest.mark.parametrize("distribution", ["one_bin", "two_bins", "skewed"])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("name", NUMBA + CUDA_C)
def test_contention_many_threads_few_bins(name, dtype, distribution):
    """Every rung's atomics (global, shared, and the merge of per-block copies) under contention:
    ~16M increments on a few counters from every SM, compared with torch.bincount exactly."""
    x = contended(distribution, (1 << 24) + 7, dtype)
    out = poisoned(256, torch.int32, DEVICE)
    getattr(hg, name)(x, 256, out=out)
    assert_close(out.cpu(), expected_counts(x, 256))
    assert int(out.sum()) == x.numel()


@pytest.mark.parametrize("layout", layouts(1))
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("name", launchers())
def test_non_dense_layouts(name, dtype, layout):
    """x or out sliced out of a bigger buffer (unaligned: the vector rungs fall back) are counted;
    strided ones are refused."""
    bins = 37
    x = values(runtime.pick(gpu=70_001, sim=67), bins, dtype)
    check_layouts(lambda x, out=None: getattr(hg, name)(x, bins, out=out), {"x": x},
                  expected_counts(x, bins).to(DEVICE), layout, strided_ok=False)


@pytest.mark.gpu(reason="CUDA C vector tails: nvcc compiles them on the CPU, only a GPU runs them")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("name", ["histogram_cuda_per_warp", "histogram_cuda_per_lane"])
def test_vector_tails(name, dtype):
    """16-byte vectors (16 uint8 or 4 int32), HISTOGRAM_UNROLL = 2 in flight: fewer elements than a
    vector, a vector and a tail, an odd number of vectors (the unroll's remainder), and tails
    after many grid strides."""
    per = 16 // torch.empty(0, dtype=dtype).element_size()
    for n in (1, per - 1, per + 1, 3 * per, 3 * per + per - 1, 1_000_000 * per + 1, 1_000_001 * per + per - 1):
        x = values(n, 256, dtype)
        assert_close(getattr(hg, name)(x, 256).cpu(), expected_counts(x, 256), name=f"n={n}")


@pytest.mark.slow
@pytest.mark.gpu(reason="the CUDA C vector-load rungs through PyCUDA")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("name", ["histogram_cuda_per_warp", "histogram_cuda_per_lane"])
def test_unaligned_views_and_long_inputs(name, dtype):
    base = values((1 << 26) + 37, 256, dtype)
    for x in (base[1:], base[3:100_003], base[16:]):
        assert_close(getattr(hg, name)(x, 256).cpu(), expected_counts(x, 256))


def test_reference_counts_only_values_in_range():
    x = torch.tensor([-1, 0, 0, 3, 4, 9], dtype=torch.int32, device=DEVICE)
    assert hg.torch_histogram(x, 4).tolist() == [2, 0, 0, 1]


def bad_inputs():
    ok = lambda *s: torch.zeros(*s, device=DEVICE, dtype=torch.uint8)  # noqa: E731
    counts = lambda n: torch.zeros(n, device=DEVICE, dtype=torch.int32)  # noqa: E731
    yield "not a tensor", TypeError, "x must be a torch.Tensor", lambda: ([1, 2], 4, None)
    yield "float32 x", TypeError, "x has dtype float32", lambda: (ok(4).float(), 4, None)
    yield "2-D", ValueError, "x must have 1 dimension", lambda: (ok(2, 3), 4, None)
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(8)[::2], 4, None)
    on_meta = lambda: torch.zeros(4, device="meta", dtype=torch.uint8)  # noqa: E731
    yield "wrong device", ValueError, "kernels run on", lambda: (on_meta(), 4, None)
    yield "bins float", TypeError, "bins must be an int", lambda: (ok(4), 4.0, None)
    yield "bins bool", TypeError, "bins must be an int", lambda: (ok(4), True, None)
    yield "bins zero", ValueError, "at least 1", lambda: (ok(4), 0, None)
    yield "out dtype", TypeError, "out has dtype int64", lambda: (ok(4), 4, counts(4).long())
    yield "out length", ValueError, "out has shape", lambda: (ok(4), 4, counts(5))


@pytest.mark.parametrize("name", launchers(gpu_only_marked=False))
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(name, case, error, message, make):
    x, bins, out = make()
    with pytest.raises(error, match=message):
        getattr(hg, name)(x, bins, out=out)


@pytest.mark.parametrize("name", [n for n in NUMBA + CUDA_C if n not in GLOBAL_ONLY])
def test_shared_memory_rungs_refuse_too_many_bins(name):
    with pytest.raises(ValueError, match=f"at most {hg.MAX_SHARED_BINS}"):
        getattr(hg, name)(torch.zeros(4, device=DEVICE, dtype=torch.uint8), hg.MAX_SHARED_BINS + 1)
