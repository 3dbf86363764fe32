"""week1_cuda_python.scan: every prefix-sum rung against float64 / int64 references.

Three kinds of check.
* Exact: int32 inputs, against an int64 cumsum wrapped to 32 bits (the kernels' defined
  overflow); and integer-valued float32 inputs in {-1, 0, 1}: every partial sum of any
  grouping is an integer of magnitude <= n <= 2^24, which fp32 holds exactly, so whatever
  order a kernel adds in, the answer must be exact. A dropped, doubled or misplaced element,
  or a tile that got the wrong offset, fails these at any size.
* Rounding (random normal float32): a scan's output i is a sum of i + 1 terms. If no term
  passes through more than D additions on its way to out[i] (the depth of the summation tree),
  then |out[i] - s_i| <= gamma_D * A_i with gamma_D = D u / (1 - D u) ~ D u, u = 2^-24, and
  A_i the sum of |x_j| over the terms out[i] is made of: |x_0| + ... + |x_i| (inclusive),
  |x_0| + ... + |x_{i-1}| (exclusive) (Higham, Accuracy and Stability of Numerical Algorithms,
  2nd ed., sec. 4.2: each addition rounds a partial sum, and each term sits in at most D of
  them). The test divides both sides by A_i and uses atol = D u with D counted for each
  algorithm below; every other comparison would be tighter than the data justifies or
  meaninglessly loose.
* NaN/Inf: from the first NaN on, every output is NaN; an Inf makes the rest Inf until a
  -Inf turns them NaN, as in torch.cumsum (any order of additions agrees on that).
"""
import math
import re

import pytest
import torch

from course import runtime
from course.check import assert_close, check_layout, in_layout, layouts, poisoned, random_tensor

sc = runtime.lesson("week1_cuda_python.scan")

DEVICE = runtime.DEVICE
U = 2.0**-24
NUMBA = list(sc.NUMBA_LAUNCHERS)
CUDA_C = list(sc.CUDA_C_LAUNCHERS)
ANY_LENGTH = [name for name in NUMBA + CUDA_C if sc.MAX_ELEMENTS[name] is None]


def _sizes(name: str) -> tuple[list[int], list[int]]:
    """(default, slow) sizes: 1, primes, warp and block edges, the one-block limit, tiles +- 1;
    tiny in simulation. The default run keeps a ragged size, the limit and several tiles."""
    limit = sc.MAX_ELEMENTS[name]
    if limit is not None:
        return runtime.pick(gpu=([1, 33, limit - 1, limit], [2, 31, 127, 1000]), sim=([1, 2, 7, 33, 64], []))
    tile = sc.LOOKBACK_TILE
    # In simulation the Numba multi-block tiles hold 32 elements: 161 spans 6 tiles. Recursion
    # over tile totals that themselves span several tiles: test_multiblock_recursion_over_several_levels.
    return runtime.pick(gpu=([1, 1025, tile + 1, 5 * tile + 3], [7, 1023, 65537, tile - 1, 1_000_003, (1 << 23) + 7]),
                        sim=([1, 7, 33, 161], []))


def cases(gpu_only_marked: bool = True, names=None) -> list:
    """(launcher, n) pairs; the CUDA C launchers are marked GPU-only (PyCUDA), the exhaustive sizes slow."""
    params = []
    for name in names or NUMBA + CUDA_C:
        marks = [pytest.mark.gpu] if gpu_only_marked and name in CUDA_C else []
        default, slow = _sizes(name)
        params += [pytest.param(name, n, marks=marks, id=f"{name}-{n}") for n in default]
        params += [pytest.param(name, n, marks=marks + [pytest.mark.slow], id=f"{name}-{n}") for n in slow]
    return params


def launchers(gpu_only_marked: bool = True, names=None) -> list:
    return [pytest.param(name, marks=pytest.mark.gpu if gpu_only_marked and name in CUDA_C else ())
            for name in names or NUMBA + CUDA_C]


def reference(x: torch.Tensor, exclusive: bool) -> torch.Tensor:
    """Inclusive or exclusive cumsum in float64 (floats) or int64 (ints), on the CPU."""
    wide = x.detach().cpu().to(torch.float64 if x.dtype.is_floating_point else torch.int64)
    inclusive = torch.cumsum(wide, 0)
    if not exclusive:
        return inclusive
    return torch.cat([torch.zeros(min(1, x.numel()), dtype=wide.dtype), inclusive[:-1]])


def wrap_int32(s: torch.Tensor) -> torch.Tensor:
    """An int64 tensor reduced modulo 2^32 into int32's range: two's complement overflow."""
    return ((s + 2**31) % 2**32 - 2**31).to(torch.int32)


def depth(name: str, n: int) -> int:
    """Most additions any term passes through on its way to an output (see the docstring)."""
    log = max(1, math.ceil(math.log2(n)))
    if "hillis_steele" in name:
        return log + 1                          # one addition per step
    if "blelloch" in name:
        return 2 * log + 1                      # up-sweep, down-sweep, + x[i] for inclusive
    if "multiblock" in name:
        threads = sc.MULTIBLOCK_THREADS if "numba" in name else sc.CUDA_MULTIBLOCK_THREADS
        tile_log = int(math.log2(2 * threads))
        levels = max(1, math.ceil(math.log(n, 2 * threads) - 1e-9))
        return levels * (2 * tile_log + 2)      # per level: a Blelloch tile and the offset add
    # Look-back: inside a tile <= 2 + 5 + 4 + 8 + 6 (lane sums, warp scan, chunk chain, warp
    # totals, offsets and the serial scan of 4); each tile's prefix adds <= 7 + 1 per window
    # (warp reduction, accumulation, + its own total) to the prefix it found.
    return 8 * math.ceil(n / sc.LOOKBACK_TILE) + 64


def check_rounding(out: torch.Tensor, x: torch.Tensor, exclusive: bool, name: str) -> None:
    expected = reference(x, exclusive)
    # A_i over exactly the terms of out[i]: for exclusive, the shifted sum A_{i-1}, never x[i].
    # (Using the inclusive A_i for both broke at an injected NaN/Inf: its own exclusive output is
    # a finite sum of i terms, but A_i was NaN/Inf there and fell back to 1, a bound ~i times
    # too tight; every kernel computes exclusive out[i] from x[0..i-1] only.)
    scale = reference(x.detach().abs(), exclusive)
    # Where A_i is NaN/Inf the output is too and assert_close compares those exactly; where it
    # is 0 every term is 0 and so is the output.
    scale = torch.where(torch.isfinite(scale) & (scale > 0), scale, torch.ones_like(scale))
    assert_close(out.detach().cpu().double() / scale, expected / scale, rtol=0,
                 atol=depth(name, x.numel()) * U, name="out / sum|x|")


@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
@pytest.mark.parametrize("name, n", cases())
def test_integer_valued_floats_are_exact(name, n, exclusive):
    assert n <= 2**24, "beyond 2^24 a partial sum of +-1s may not be exact in fp32"
    x = torch.randint(-1, 2, (n,), device=DEVICE).float()
    out = poisoned(n, torch.float32, DEVICE)
    assert getattr(sc, name)(x, out=out, exclusive=exclusive) is out, "must write into the given out"
    assert_close(out.double().cpu(), reference(x, exclusive), rtol=0, atol=0)


@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
@pytest.mark.parametrize("name, n", cases())
def test_int32_is_exact(name, n, exclusive):
    x = torch.randint(-1000, 1001, (n,), device=DEVICE, dtype=torch.int32)
    out = poisoned(n, torch.int32, DEVICE)
    getattr(sc, name)(x, out=out, exclusive=exclusive)
    assert_close(out.cpu(), wrap_int32(reference(x, exclusive)), rtol=0, atol=0)


@pytest.mark.parametrize("name", launchers())
def test_int32_overflow_wraps_like_torch(name):
    n = min(sc.MAX_ELEMENTS[name] or 1000, runtime.pick(gpu=1000, sim=40))
    x = torch.full((n,), 2**30 + 12345, device=DEVICE, dtype=torch.int32)  # wraps every 4 terms
    expected = wrap_int32(reference(x, False))
    assert_close(getattr(sc, name)(x).cpu(), expected, rtol=0, atol=0)
    assert_close(sc.torch_scan(x).cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("name, n", cases())
def test_random_float32_within_rounding_bound(name, n):
    x = random_tensor(n, torch.float32, DEVICE)
    for exclusive in (False, True):
        out = poisoned(n, torch.float32, DEVICE)
        getattr(sc, name)(x, out=out, exclusive=exclusive)
        check_rounding(out, x, exclusive, name)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf in NumPy (simulator)
@pytest.mark.parametrize("name", launchers())
@pytest.mark.parametrize("specials", ["nan", "inf_then_minus_inf"])
def test_nan_and_inf_propagate_like_torch(name, specials):
    n = min(sc.MAX_ELEMENTS[name] or 10**9, runtime.pick(gpu=9000, sim=60))
    x = random_tensor(n, torch.float32, DEVICE)
    if specials == "nan":
        x[n // 3] = math.nan
    else:
        x[n // 3], x[2 * n // 3] = math.inf, -math.inf
    for exclusive in (False, True):
        out = getattr(sc, name)(x, exclusive=exclusive)
        # The float64 reference has NaN and +-Inf exactly where torch.cumsum(x) (shifted for
        # exclusive) has them; assert_close requires NaN to meet NaN and Inf the same Inf.
        check_rounding(out, x, exclusive, name)
        assert_close(torch.isnan(out).cpu(), torch.isnan(sc.torch_scan(x, exclusive)).cpu())


@pytest.mark.parametrize("name", launchers())
def test_empty_and_allocated_output(name):
    for dtype in sc.DTYPES:
        empty = getattr(sc, name)(torch.empty(0, dtype=dtype, device=DEVICE))
        assert empty.shape == (0,) and empty.dtype == dtype
    x = torch.randint(-5, 6, (10,), device=DEVICE, dtype=torch.int32)
    out = getattr(sc, name)(x)
    assert out.dtype == torch.int32 and out.device == x.device
    assert_close(out.cpu(), reference(x, False).to(torch.int32), rtol=0, atol=0)


@pytest.mark.gpu(reason="CUDA C vector tails: nvcc compiles them on the CPU, only a GPU runs them")
@pytest.mark.parametrize("dtype", [torch.int32, torch.float32], ids=["int32", "float32"])
def test_lookback_vector_tails(dtype):
    """Full tiles load 16-byte vectors; a partial last tile loads element by element: the
    partial tile's every shape (1, a warp chunk -+ 1, one short of a tile) after full tiles."""
    tile, chunk = sc.LOOKBACK_TILE, 128
    for n in (1, 3, chunk - 1, chunk + 1, tile - 1, tile, tile + 1, 3 * tile + chunk + 5, 3 * tile + tile - 3):
        x = torch.randint(-1, 2, (n,), device=DEVICE).to(dtype)
        for exclusive in (False, True):
            got = sc.scan_cuda_lookback(x, exclusive=exclusive)
            assert_close(got.cpu().to(reference(x, exclusive).dtype), reference(x, exclusive), rtol=0, atol=0,
                         name=f"n={n} {exclusive=}")


@pytest.mark.gpu(reason="the CUDA C look-back kernel through PyCUDA")
@pytest.mark.parametrize("dtype", [torch.int32, torch.float32], ids=["int32", "float32"])
def test_lookback_unaligned_views(dtype):
    n = 3 * sc.LOOKBACK_TILE + 5
    base = torch.randint(-1, 2, (n + 4,), device=DEVICE).to(dtype)
    for x_offset, out_offset in ((1, 0), (0, 3), (2, 2)):
        x = base[x_offset:x_offset + n]
        out_base = poisoned(n + 4, dtype, DEVICE)
        out = out_base[out_offset:out_offset + n]
        sc.scan_cuda_lookback(x, out=out)
        assert_close(out.cpu().to(reference(x, False).dtype), reference(x, False), rtol=0, atol=0)
        # Nothing written before or after the view (still the poison value).
        for untouched in (out_base[:out_offset], out_base[out_offset + n:]):
            assert_close(untouched, poisoned(untouched.numel(), dtype, DEVICE))


@pytest.mark.gpu(reason="CUDA C launches at 2^26 elements: thousands of tiles looking back")
@pytest.mark.parametrize("name", ["scan_cuda_multiblock", "scan_cuda_lookback"])
def test_long_int32_inputs_are_exact(name):
    """Also the look-back's contention test: 16k tiles take tile numbers from one atomic counter
    and publish and poll each other's status words concurrently (a missing fence or a flag set
    before its value shows here, never in the simulator, which runs blocks one at a time)."""
    n = (1 << 26) + 3
    x = torch.randint(-1000, 1001, (n,), device=DEVICE, dtype=torch.int32)
    for exclusive in (False, True):
        got = getattr(sc, name)(x, exclusive=exclusive)
        assert torch.equal(got.cpu(), wrap_int32(reference(x, exclusive)))


MULTIBLOCK = ["scan_numba_multiblock", "scan_cuda_multiblock"]


# Tiles hold 2 x threads elements. threads=2 (tiles of 4), n = 67: 17 tiles, whose 17 totals
# span 5 tiles, whose 5 totals span 2: four levels, each but the last across several tiles.
# threads=1 (tiles of 2), n = 33: six levels. threads=4, n = 8^3 + 5: four levels. The default
# tiles (32 elements in simulation, 1024 on a GPU) would need n > 1024 (> 10^6) for the scan of
# the totals to recurse across tiles even once; a bug there (the totals scanned as one tile,
# say) passes every other test.
DEEP_RECURSION = [(1, 33), (2, 67), (4, 8**3 + 5)]


def recursion_levels(n: int, threads: int) -> int:
    levels, tile = 1, 2 * threads
    while n > tile:
        n, levels = math.ceil(n / tile), levels + 1
    return levels


@pytest.mark.parametrize("threads, n", DEEP_RECURSION, ids=lambda v: str(v))
@pytest.mark.parametrize("name", launchers(names=MULTIBLOCK))
def test_multiblock_recursion_over_several_levels(name, threads, n):
    assert recursion_levels(n, threads) >= 4
    ints = torch.randint(-1000, 1001, (n,), device=DEVICE, dtype=torch.int32)
    signs = torch.randint(-1, 2, (n,), device=DEVICE).float()
    for exclusive in (False, True):
        out = poisoned(n, torch.int32, DEVICE)
        assert getattr(sc, name)(ints, out=out, exclusive=exclusive, threads=threads) is out
        assert_close(out.cpu(), wrap_int32(reference(ints, exclusive)), rtol=0, atol=0, name=f"int32 {exclusive=}")
        got = getattr(sc, name)(signs, exclusive=exclusive, threads=threads)
        assert_close(got.double().cpu(), reference(signs, exclusive), rtol=0, atol=0, name=f"+-1 {exclusive=}")


@pytest.mark.parametrize("threads", [0, 3, 2048, 2.0, True])
@pytest.mark.parametrize("name", MULTIBLOCK)
def test_multiblock_refuses_bad_threads(name, threads):
    with pytest.raises(ValueError, match="power of two"):
        getattr(sc, name)(torch.ones(8, device=DEVICE), threads=threads)


@pytest.mark.parametrize("layout", layouts(1))
@pytest.mark.parametrize("name", launchers())
def test_non_dense_layouts(name, layout):
    """x sliced out of a bigger buffer (and unaligned) is scanned; a strided x or out is refused."""
    n = min(sc.MAX_ELEMENTS[name] or 10**9, runtime.pick(gpu=3 * sc.LOOKBACK_TILE + 5, sim=37))
    x = torch.randint(-1000, 1001, (n,), device=DEVICE, dtype=torch.int32)
    want = wrap_int32(reference(x, False)).to(DEVICE)
    view = in_layout(x, layout)
    check_layout(lambda: getattr(sc, name)(view), want, [view], strided_ok=False)
    out = in_layout(poisoned(n, torch.int32, DEVICE), layout)
    check_layout(lambda: getattr(sc, name)(x, out=out), want, [out], out=out, strided_ok=False)


@pytest.mark.parametrize("name", [n for n in NUMBA + CUDA_C if sc.MAX_ELEMENTS[n] is not None])
def test_one_block_rungs_refuse_long_inputs(name):
    x = torch.zeros(sc.MAX_ELEMENTS[name] + 1, device=DEVICE)
    with pytest.raises(ValueError, match="at most"):
        getattr(sc, name)(x)


def test_cuda_source_constants_match_python():
    """The launcher sizes its grid from these; kernels/scan.cu sizes its tiles from its #defines."""
    source = sc.CUDA_SOURCE.read_text()
    for macro, value in (("HILLIS_STEELE_MAX", sc.HILLIS_STEELE_MAX), ("BLELLOCH_MAX", sc.BLELLOCH_MAX),
                         ("LOOKBACK_THREADS", sc.LOOKBACK_THREADS), ("LOOKBACK_VECTORS", sc.LOOKBACK_VECTORS)):
        match = re.search(rf"#define {macro} (\d+)", source)
        assert match and int(match.group(1)) == value, f"{macro} in {sc.CUDA_SOURCE.name} != {value}"


def bad_inputs():
    ok = lambda *s: torch.ones(*s, device=DEVICE)  # noqa: E731
    yield "not a tensor", TypeError, "x must be a torch.Tensor", lambda: ([1.0, 2.0], None, False)
    yield "float64", TypeError, "x has dtype float64", lambda: (ok(4).double(), None, False)
    yield "2-D", ValueError, "x must have 1 dimension", lambda: (ok(2, 3), None, False)
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(8)[::2], None, False)
    yield "wrong device", ValueError, "kernels run on", lambda: (torch.ones(4, device="meta"), None, False)
    yield "out shape", ValueError, "out has shape", lambda: (ok(4), ok(5), False)
    yield "out dtype", TypeError, "out has dtype", lambda: (ok(4), ok(4).int(), False)
    yield "exclusive not bool", TypeError, "exclusive must be", lambda: (ok(4), None, 1)


@pytest.mark.parametrize("name", launchers(gpu_only_marked=False))
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(name, case, error, message, make):
    x, out, exclusive = make()
    with pytest.raises(error, match=message):
        getattr(sc, name)(x, out=out, exclusive=exclusive)
