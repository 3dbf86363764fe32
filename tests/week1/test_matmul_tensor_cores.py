"""week1_cuda_python.matmul_tensor_cores: the WMMA rungs and the Hopper (wgmma + TMA) rung against
a float64 reference.

Error model (why these tolerances, not check.py's defaults). The inputs are exact fp16/bf16
values and each product a_ik * b_kj is exact in fp32 (11 + 11 significant bits fit in 24), so
all the error comes from two places:
* the K-term fp32 accumulation. Each step changes the running sum s_k by at most one fp32 ulp
  (2u |s_k|, u = 2^-24): a full ulp, not half, because studies of tensor cores (Fasi, Higham,
  Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021) found the
  additions inside one mma truncate rather than round, so the errors need not cancel. For
  random-sign products |s_k| grows like sqrt(k) * rms(product) <= sqrt(K) * mean|product| *
  (a modest factor), so the total is bounded by ~ 2u * sqrt(K) * sum_k |a_ik b_kj|. We allow
  twice that: atol = 4 u sqrt(K) max_ij (|A| @ |B|)_ij. At K = 4096 with unit-normal inputs
  that is ~0.04 on outputs of size ~64: a dropped 16-wide k-slice (~4) or a wrong tile
  (order 64) fails by orders of magnitude, and an unwritten output stays NaN (poison).
* the one rounding of the fp32 sum to the output type: rtol = 2^-11 (fp16) or 2^-8 (bf16),
  plus half the smallest fp16 subnormal for results that land there.
"""
import ctypes
import importlib
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course import holes, runtime
from course.check import assert_close, check_layouts, layouts, poisoned, random_tensor, sweep
from week1_cuda_python.hopper_ptx import HOPPER_PTX_INCLUDE  # the -I of every Hopper build

tc = runtime.lesson("week1_cuda_python.matmul_tensor_cores")
# The SASS parser is tooling, not an exercise: the bench module always (it measures the solution).
tc_bench = importlib.import_module("week1_cuda_python.matmul_tensor_cores_bench")

DEVICE = runtime.DEVICE
U32 = 2.0**-24
ROUNDING = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float32: 0.0}
SUBNORMAL = {torch.float16: 2.0**-25, torch.bfloat16: 0.0, torch.float32: 0.0}
gpu = pytest.mark.gpu(reason="PyCUDA launches of the WMMA kernels")
# The wgmma rung runs on compute capability 9.0 only (sm_90a): elsewhere its launches are refused
# (tested below with a patched capability) and its GPU tests skipped. In simulation nothing launches.
HOPPER = not runtime.on_gpu() or tc.wgmma_unsupported(torch.cuda.get_device_capability()) is None
hopper = pytest.mark.skipif(not HOPPER, reason="the wgmma rung needs compute capability 9.0 (H100/H200)")
LAUNCHERS = [pytest.param(name, marks=hopper) if "wgmma" in name else name for name in tc.TC_LAUNCHERS]


def tolerance(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) from the error model in the module docstring."""
    k = a.shape[1]
    products = (a.double().abs() @ b.double().abs()).max().item() if a.numel() and b.numel() else 0.0
    accumulation = 4 * U32 * math.sqrt(k) * products
    rtol = ROUNDING[out_dtype]
    return rtol, accumulation * (1 + rtol) + SUBNORMAL[out_dtype]


def check(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    rtol, atol = tolerance(a, b, c.dtype)
    assert_close(c.double(), a.double() @ b.double(), rtol=rtol, atol=atol, name="C")


def type_cases():
    """(input dtype, output dtype): C in the inputs' type, or in fp32."""
    return [pytest.param(d, o, id=f"{tc.TYPE_SUFFIX[d]}->{tc.TYPE_SUFFIX[o]}")
            for d in tc.DTYPES for o in (d, torch.float32)]


# (M, N, K): multiples of 16 and of the 128x128x32 block tile, and shapes that are neither
# (ones, primes, one past a tile), up to a K long enough for the accumulation to matter.
SHAPES = sweep([(16, 16, 16), (1, 1, 1), (31, 17, 5), (257, 511, 67), (1000, 1024, 999)],
               [(128, 128, 128), (256, 128, 64), (1, 129, 7), (127, 129, 131), (2048, 1024, 4096)])


# --- on the GPU ----------------------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype, out_dtype", type_cases())
@pytest.mark.parametrize("name", LAUNCHERS)
def test_matches_float64_reference(name, dtype, out_dtype, shape):
    m, n, k = shape
    a, b = random_tensor((m, k), dtype, DEVICE), random_tensor((k, n), dtype, DEVICE)
    out = poisoned((m, n), out_dtype, DEVICE)
    result = getattr(tc, name)(a, b, out=out)
    assert result is out, "the launcher must write into the `out` it was given"
    check(out, a, b)


@gpu
@pytest.mark.parametrize("name", LAUNCHERS)
def test_allocates_output_in_the_requested_dtype(name):
    a = random_tensor((33, 48), torch.float16, DEVICE)
    b = random_tensor((48, 20), torch.float16, DEVICE)
    c16 = getattr(tc, name)(a, b)
    c32 = getattr(tc, name)(a, b, out_dtype=torch.float32)
    assert c16.dtype == torch.float16 and c32.dtype == torch.float32 and c32.shape == (33, 20)
    check(c16, a, b)
    check(c32, a, b)


@gpu
@pytest.mark.parametrize("dtype, out_dtype", type_cases())
@pytest.mark.parametrize("name", LAUNCHERS)
def test_nan_and_inf_propagate_like_torch(name, dtype, out_dtype):
    m, n, k = 7, 5, 6
    a, b = random_tensor((m, k), dtype, DEVICE), random_tensor((k, n), dtype, DEVICE)
    a[0, 0] = math.nan    # row 0 of C: all NaN
    a[2, 1] = math.inf    # row 2: +-Inf (by the sign of b[1, j]) ...
    b[1, 3] = -math.inf   # ... and b[1, 3] makes C[:, 3] +-Inf, C[2, 3] = inf * -inf = -Inf
    b[4, 4] = math.inf
    a[3, 4] = -math.inf   # C[3, 4] meets -inf * inf
    c = getattr(tc, name)(a, b, out_dtype=out_dtype)
    expected = a.double().cpu() @ b.double().cpu()
    finite_a, finite_b = a.nan_to_num(0, 0, 0), b.nan_to_num(0, 0, 0)
    rtol, atol = tolerance(finite_a, finite_b, out_dtype)
    assert_close(c.double(), expected.to(c.device), rtol=rtol, atol=atol, name="C")


@gpu
@pytest.mark.parametrize("name", LAUNCHERS)
def test_fp16_output_overflows_where_the_fp32_accumulator_does_not(name):
    """C = 512 * 256 * 1 = 131072 > 65504, fp16's largest finite value: an fp16 C holds +Inf
    (as torch.matmul's does), an fp32 C the exact value, because the sum itself is fp32."""
    a = torch.full((32, 512), 256.0, dtype=torch.float16, device=DEVICE)
    b = torch.ones((512, 48), dtype=torch.float16, device=DEVICE)
    c16 = getattr(tc, name)(a, b)
    c32 = getattr(tc, name)(a, b, out_dtype=torch.float32)
    assert torch.isinf(c16).all() and (c16 > 0).all()
    assert torch.equal(torch.isinf(torch.matmul(a, b)), torch.isinf(c16))
    assert_close(c32, torch.full((32, 48), 131072.0, device=DEVICE), rtol=0, atol=0)


@gpu
@pytest.mark.parametrize("name", LAUNCHERS)
def test_unaligned_views(name):
    """Operands starting 2 bytes into their storage: wmma loads need 32-byte alignment."""
    base = random_tensor(1 + 64 * 48, torch.float16, DEVICE)
    a = base[1:].view(64, 48)
    b = random_tensor((48, 40), torch.float16, DEVICE)
    out = torch.empty(1 + 64 * 40, dtype=torch.float16, device=DEVICE)[1:].view(64, 40)
    getattr(tc, name)(a, b, out=out)
    check(out, a, b)


@gpu
@pytest.mark.parametrize("layout", layouts(2))
@pytest.mark.parametrize("name", LAUNCHERS)
def test_non_dense_layouts(name, layout):
    """a, b or out sliced out of a bigger buffer work (padded copies where wmma's alignment is not
    met); strided, transposed and column-sliced ones are refused."""
    a = random_tensor((67, 45), torch.float16, DEVICE)
    b = random_tensor((45, 33), torch.float16, DEVICE)
    rtol, atol = tolerance(a, b, torch.float16)
    # Against the exact product, as `check` does: the error model bounds the kernel's distance
    # to it (half an ulp of fp16 + the fp32 accumulation). A reference rounded to fp16 first
    # would add its own half ulp (seen on the H100: 1 of 2211 elements 1 ulp off, 2026-11-26).
    check_layouts(lambda a, b, out=None: getattr(tc, name)(a, b, out=out), {"a": a, "b": b},
                  a.double() @ b.double(), layout, strided_ok=False, rtol=rtol, atol=atol, out_dtype=torch.float16)


@gpu
def test_sanitizer_cases_run():
    for name, case in tc.SANITIZER_CASES.items():
        if "bf16" in name and torch.cuda.get_device_capability() < (8, 0):
            continue  # bf16 tensor cores start at sm_80: the launcher refuses them (tested below)
        case()


# --- anywhere: input checks, shapes, padding, names ------------------------------------------------

@pytest.mark.parametrize("name", LAUNCHERS)
@pytest.mark.parametrize("shape", [(0, 4, 3), (4, 0, 3), (3, 4, 0)], ids=["M=0", "N=0", "K=0"])
def test_empty_dimensions(name, shape):
    m, n, k = shape
    a = torch.randn(m, k, device=DEVICE).half()
    b = torch.randn(k, n, device=DEVICE).half()
    c = getattr(tc, name)(a, b, out=poisoned((m, n), torch.float16, DEVICE))
    assert c.shape == (m, n)
    assert_close(c, torch.zeros(m, n, dtype=torch.float16, device=DEVICE))  # empty sums are 0


def bad_inputs():
    ok = lambda *s: torch.ones(*s, device=DEVICE, dtype=torch.float16)  # noqa: E731
    yield "a not a tensor", TypeError, "a must be a torch.Tensor", lambda: ([[1.0]], ok(1, 1), None, None)
    yield "a float32", TypeError, "a has dtype float32", lambda: (ok(2, 3).float(), ok(3, 2), None, None)
    yield "b int8", TypeError, "b has dtype int8", lambda: (ok(2, 3), ok(3, 2).to(torch.int8), None, None)
    yield "dtypes differ", TypeError, "dtypes must match", lambda: (ok(2, 3), ok(3, 2).bfloat16(), None, None)
    yield "a 1-D", ValueError, "a must have 2 dimension", lambda: (ok(3), ok(3, 2), None, None)
    yield "b 3-D", ValueError, "b must have 2 dimension", lambda: (ok(2, 3), ok(1, 3, 2), None, None)
    yield "inner dims", ValueError, "inner dimensions must match", lambda: (ok(2, 3), ok(4, 2), None, None)
    yield "a transposed", ValueError, "a is not contiguous", lambda: (ok(3, 2).t(), ok(3, 2), None, None)
    yield "wrong device", ValueError, "kernels run on", \
        lambda: (torch.ones(2, 3, device="meta", dtype=torch.float16), ok(3, 2), None, None)
    yield "out wrong shape", ValueError, "out has shape", lambda: (ok(2, 3), ok(3, 2), ok(2, 3), None)
    yield "out float64", TypeError, "out has dtype float64", lambda: (ok(2, 3), ok(3, 2), ok(2, 2).double(), None)
    yield "out_dtype bf16 for fp16", TypeError, "out_dtype", lambda: (ok(2, 3), ok(3, 2), None, torch.bfloat16)
    yield "out and out_dtype differ", TypeError, "out_dtype", \
        lambda: (ok(2, 3), ok(3, 2), ok(2, 2), torch.float32)


@pytest.mark.parametrize("name", LAUNCHERS)
@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(name, case, error, message, make):
    a, b, out, out_dtype = make()
    with pytest.raises(error, match=message):
        getattr(tc, name)(a, b, out=out, out_dtype=out_dtype)


def patch_capability(monkeypatch, name: str, capability) -> None:
    """Pretend the GPU has this compute capability: every launcher (the solution's, and the one an
    exercise stub imports from it) asks course.runtime."""
    monkeypatch.setattr(runtime, "capability", lambda device=None: capability)


@pytest.mark.parametrize("name", tc.TC_LAUNCHERS)
def test_refuses_bf16_below_sm80(name, monkeypatch):
    """A T4 (sm_75) has fp16 tensor cores but no bf16 ones: refused with a sentence, not a trap."""
    patch_capability(monkeypatch, name, (7, 5))
    a = torch.ones(16, 16, device=DEVICE, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="bf16 tensor cores need compute capability 8.0"):
        getattr(tc, name)(a, a.clone())


@pytest.mark.parametrize("rung", list(tc.RUNGS))
@pytest.mark.parametrize("shape", [(1, 1, 1), (16, 16, 16), (17, 129, 33), (128, 128, 32), (4096, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_padded_shape_covers_the_tiles(rung, shape):
    m, n, k = shape
    mp, np_, kp = tc.padded_shape(rung, m, n, k)
    tm, tn, tk = tc.RUNGS[rung].tiles()
    assert (mp % tm, np_ % tn, kp % tk) == (0, 0, 0)
    assert 0 <= mp - m < tm and 0 <= np_ - n < tn and 0 <= kp - k < tk  # no more than one tile
    grid, block = tc.launch_geometry(rung, m, n)
    block_m, block_n = tc.NAIVE_BLOCK if rung == "naive" else (tc.DEFAULT_TILES.bm, tc.DEFAULT_TILES.bn)
    assert grid[0] * block_n >= n and grid[1] * block_m >= m  # every output has a block
    assert (grid[0] - 1) * block_n < n and (grid[1] - 1) * block_m < m  # and no block is idle
    if rung != "naive":
        assert (grid[1] * block_m, grid[0] * block_n) == (mp, np_)  # blocks read only padded rows
    assert block[0] == (tc.NAIVE_THREADS if rung == "naive" else tc.DEFAULT_TILES.threads)


def test_zero_padding_is_exact():
    """Small integers are exact in fp16 and in float64 sums: padded or not, the same product."""
    m, n, k = 37, 53, 29
    a = torch.randint(-8, 9, (m, k)).to(torch.float16)
    b = torch.randint(-8, 9, (k, n)).to(torch.float16)
    mp, np_, kp = tc.padded_shape("shared", m, n, k)
    a_p, b_p = tc.padded(a, mp, kp), tc.padded(b, kp, np_)
    assert a_p.shape == (mp, kp) and b_p.shape == (kp, np_)
    assert torch.equal(a_p[:m, :k], a) and not a_p[m:].any() and not a_p[:, k:].any()
    assert torch.equal((a_p.double() @ b_p.double())[:m, :n], a.double() @ b.double())


def test_padded_leaves_aligned_operands_alone():
    a = torch.ones(128, 64, dtype=torch.float16)
    assert tc.padded(a, 128, 64) is a  # the 4096^3 benchmark copies nothing
    view = torch.ones(1 + 128 * 64, dtype=torch.float16)[1:].view(128, 64)  # 2 bytes in: misaligned
    copy = tc.padded(view, 128, 64)
    assert copy is not view and copy.data_ptr() % tc.ALIGNMENT == 0 and torch.equal(copy, view)


def test_a_build_with_a_hole_open_is_refused_before_nvcc(monkeypatch):
    """The exercise stub of kernels/matmul_wgmma.cu, holes open (a `#define HOLE_OPEN` line each): the
    launcher refuses it, naming the file and the hole, before nvcc is asked (course/holes.py): its barriers
    would never complete and the GPU would hang. (The host side is the solution's, imported by the stub:
    patch WGMMA_SOURCE where _wgmma_module reads it.)"""
    host = sys.modules[tc._wgmma_module.__module__]
    stub = Path(__file__).resolve().parents[2] / "week1_cuda_python" / "exercises" / "kernels" / "matmul_wgmma.cu"
    monkeypatch.setattr(host, "WGMMA_SOURCE", stub)
    monkeypatch.setattr(runtime, "nvcc_path", lambda: pytest.fail("nvcc was asked"))
    with pytest.raises(NotImplementedError, match=r"not implemented yet: .*matmul_wgmma.cu line \d+ has a hole open"):
        host._wgmma_module.__wrapped__()


def test_default_tiles_match_the_cuda_source():
    source = tc.CUDA_SOURCE.read_text()
    for name in ("bm", "bn", "bk", "wm", "wn", "stages"):
        found = re.search(rf"#define TC_{name.upper()} (\d+)", source)
        assert found, f"TC_{name.upper()} is not defined in {tc.CUDA_SOURCE.name}"
        assert int(found.group(1)) == getattr(tc.DEFAULT_TILES, name), f"TC_{name.upper()} differs"
    assert tc.DEFAULT_TILES.problems() == []
    assert tc.TileConfig(128, 256, 32, 64, 64, 2).problems()  # 54 KB of static shared memory
    assert tc.TileConfig(128, 128, 24, 64, 64, 2).problems()  # not a multiple of 16


def test_sanitizer_cases_name_every_kernel():
    """Every WMMA kernel, and the wgmma_tma ones where that rung runs (sm_90, and in simulation)."""
    names = {tc.kernel_name(r, d, o) for r in tc.RUNGS for d in tc.DTYPES for o in (d, torch.float32)}
    wgmma = {f"wgmma_tma_{tc.TYPE_SUFFIX[d]}_{tc.TYPE_SUFFIX[o]}" for d in tc.DTYPES for o in (d, torch.float32)}
    expected = names | wgmma if HOPPER else names
    assert set(tc.SANITIZER_CASES) == expected and len(expected) == (16 if HOPPER else 12)


@pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
def test_every_kernel_name_exists_in_the_source(tmp_path):
    """The launcher looks kernels up by name: each must be an entry point of the compiled source."""
    ptx = tmp_path / "tc.ptx"
    subprocess.run([runtime.nvcc_path(), "-ptx", "-arch=sm_90", "-o", str(ptx), str(tc.CUDA_SOURCE)],
                   check=True, capture_output=True)
    entries = set(re.findall(r"\.entry (\w+)\(", ptx.read_text()))
    for name in (n for n in tc.SANITIZER_CASES if not n.startswith("wgmma")):  # wgmma: matmul_wgmma.cu
        assert name in entries, f"kernel {name} is not defined in {tc.CUDA_SOURCE.name}"


def test_sass_opcode_counts_parses_cuobjdump_output():
    sass = """
        Function : wmma_shared_f16_f16
        /*0100*/                   LDSM.16.M88.4 R4, [R2] ;
        /*0110*/              @!PT LDS RZ, [RZ] ;
        /*0120*/                   HMMA.16816.F32 R8, R4, R6, R8 ;
        /*0130*/              @P0 LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64] ;
        Function : wmma_naive_f16_f16
        /*0100*/                   HMMA.16816.F32 R8, R4, R6, R8 ;
    """
    counts = tc_bench.sass_opcode_counts(sass)
    assert counts["wmma_shared_f16_f16"]["HMMA"] == 1 and counts["wmma_shared_f16_f16"]["LDSM"] == 1
    assert counts["wmma_shared_f16_f16"]["LDGSTS"] == 1 and counts["wmma_shared_f16_f16"]["LDS"] == 1
    assert counts["wmma_naive_f16_f16"]["HMMA"] == 1 and counts["wmma_naive_f16_f16"]["LDSM"] == 0


# --- the Hopper rung: wgmma + TMA (kernels/matmul_wgmma.cu) -----------------------------------------

@gpu
@hopper
@pytest.mark.parametrize("dtype, out_dtype", type_cases())
@pytest.mark.parametrize("shape", [(128, 256, 64), (64, 64, 16), (129, 257, 65), (300, 520, 1000), (7, 600, 4100)],
                         ids=lambda s: "x".join(map(str, s)))
def test_wgmma_tiles_and_tails(shape, dtype, out_dtype):
    """One exact tile; less than one (TMA's zero fill); one past a tile in M, N and K; many ring
    wraps (4100 / 64 = 65 k tiles through 4 stages) with K and N not multiples of 8 (padded copies)."""
    m, n, k = shape
    a, b = random_tensor((m, k), dtype, DEVICE), random_tensor((k, n), dtype, DEVICE)
    out = poisoned((m, n), out_dtype, DEVICE)
    assert tc.matmul_wgmma_tma(a, b, out=out) is out
    check(out, a, b)


@gpu
@hopper
def test_wgmma_same_answer_twice():
    """A race between the copy engine and the tensor cores (a stage reused too early) would change
    the result from run to run; the fp32 sums in one fixed order do not."""
    a = random_tensor((1024, 2048), torch.bfloat16, DEVICE)
    b = random_tensor((2048, 768), torch.bfloat16, DEVICE)
    first = tc.matmul_wgmma_tma(a, b, out_dtype=torch.float32)
    for _ in range(3):
        assert torch.equal(tc.matmul_wgmma_tma(a, b, out_dtype=torch.float32), first)


@pytest.mark.parametrize("capability", [(7, 5), (8, 0), (8, 9), (10, 0), (12, 0)], ids=lambda c: f"sm_{c[0]}{c[1]}")
def test_wgmma_refused_off_hopper(capability, monkeypatch):
    """sm_90a code runs on compute capability 9.0 alone (not on Blackwell either): a sentence that
    names the GPU's capability and the rung to use instead, before anything is compiled or launched."""
    patch_capability(monkeypatch, "matmul_wgmma_tma", capability)
    a = torch.ones(16, 16, device=DEVICE, dtype=torch.float16)
    with pytest.raises(RuntimeError, match=rf"compute capability {capability[0]}\.{capability[1]}.*wmma_cp_async"):
        tc.matmul_wgmma_tma(a, a.clone())


def test_wgmma_allowed_on_hopper_and_in_simulation():
    assert tc.wgmma_unsupported((9, 0)) is None and tc.wgmma_unsupported(None) is None


@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 17, 3), (128, 256, 64), (129, 257, 65), (4096, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_wgmma_padding_and_geometry(shape):
    """Only the TMA's 16-byte row rule pads (N and K to multiples of 8); the grid covers C exactly."""
    m, n, k = shape
    mp, np_, kp = tc.wgmma_padded_shape(m, n, k)
    assert mp == m and np_ % 8 == 0 and kp % 8 == 0 and 0 <= np_ - n < 8 and 0 <= kp - k < 8
    grid, block = tc.wgmma_launch_geometry(m, n)
    t = tc.WGMMA_TILES
    assert grid[0] * t.bn >= n and grid[1] * t.bm >= m
    assert (grid[0] - 1) * t.bn < n and (grid[1] - 1) * t.bm < m
    assert block == (t.threads, 1, 1) and t.threads == 384
    assert t.shared_bytes <= 227 * 1024  # the H100's shared memory per block


def test_wgmma_tiles_match_the_cuda_source():
    source = tc.WGMMA_SOURCE.read_text()
    for name in ("bm", "bn", "bk", "stages", "consumers", "b_slab", "group_m"):
        found = re.search(rf"#define WG_{name.upper()} (\d+)", source)
        assert found, f"WG_{name.upper()} is not defined in {tc.WGMMA_SOURCE.name}"
        assert int(found.group(1)) == getattr(tc.WGMMA_TILES, name), f"WG_{name.upper()} differs"


@pytest.mark.parametrize("tiles_m, tiles_n, group_m", [(64, 32, 16), (32, 16, 16), (16, 8, 16), (37, 5, 16),
                                                       (3, 7, 16), (1, 1, 16), (10, 4, 1), (9, 9, 8)])
def test_wgmma_block_order_is_a_permutation(tiles_m, tiles_n, group_m):
    """The grouped order gives every tile of C to exactly one block, ragged last group included;
    inside a group consecutive blocks walk down a column of tiles; group_m = 1 is row-major."""
    order = [tc.wgmma_block_tile(i, tiles_m, tiles_n, group_m) for i in range(tiles_m * tiles_n)]
    assert sorted(order) == [(r, c) for r in range(tiles_m) for c in range(tiles_n)]
    if group_m == 1:
        assert order == [(r, c) for r in range(tiles_m) for c in range(tiles_n)]
    elif tiles_m >= 2:
        assert order[1] == (1, 0)  # the second block goes down, not across


def test_wgmma_block_order_matches_the_cuda_source():
    """wgmma_block_tile mirrors grouped_tile in kernels/matmul_wgmma.cu: same three lines."""
    source = tc.WGMMA_SOURCE.read_text()
    body = source[source.index("void grouped_tile("):]
    body = body[:body.index("\n}")]
    for line in ("per_group = WG_GROUP_M * tiles_n", "first_m = (id / per_group) * WG_GROUP_M",
                 "rows = min(tiles_m - first_m, WG_GROUP_M)", "in_group = id % per_group",
                 "tile_m = first_m + in_group % rows", "tile_n = in_group / rows"):
        assert line in body, f"grouped_tile no longer has `{line}`: update wgmma_block_tile and this test"


# The ring's formulas, as the holes of kernels/matmul_wgmma.cu must write them (whitespace aside): the
# persistent rung's protocol model (test_matmul_wgmma_persistent_protocol.py) simulates these with one tile
# per block (its ring position `it` is this kernel's k tile t); the rest is what the TMA and wgmma read.
WGMMA_RING = {
    "the producer waits for the stage's previous use: phase t / STAGES - 1 of empty[s]":
        "if (t >= WG_STAGES) mbar_wait(&empty[s], (t / WG_STAGES - 1) & 1);",
    "the full barrier expects every byte the copies deliver: A's box and each copied slab of B":
        "mbar_arrive_expect_tx(&full[s], WG_A_BYTES + b_slabs * WG_B_SLAB_BYTES);",
    "a box is addressed (column, row): B's slab j of k tile t starts at column n0 + 64 j, row 64 t":
        "n0 + j * WG_B_SLAB, t * WG_BK);",
    "a consumer waits for phase t / STAGES of full[s]": "mbar_wait(&full[s], (t / WG_STAGES) & 1);",
    "16 k of A are 32 bytes along its 128-byte rows": "const uint64_t desc_a = smem_desc(a_base + kk * 32, 16, 1024);",
    "a stage is released only once the wgmmas that read it are done (wait_group 1, then the previous stage)":
        "wgmma_wait<1>(); if (t > 0 && lane == 0) mbar_arrive(&empty[(t - 1) % WG_STAGES]);",
}


def wgmma_ring_problems(source: str) -> list[str]:
    """What of WGMMA_RING a text of kernels/matmul_wgmma.cu lacks (whitespace-insensitive), in its code:
    whole-line comments out, since the exercise's hints quote some of these lines."""
    flat = " ".join(" ".join(line for line in source.splitlines() if not line.lstrip().startswith("//")).split())
    return [why for why, line in WGMMA_RING.items() if " ".join(line.split()) not in flat]


def test_wgmma_ring_follows_the_protocol_model():
    holes.refuse_open_hole(tc.WGMMA_SOURCE)  # the stub (--impl=exercises) with a hole open: 'not implemented yet'
    assert wgmma_ring_problems(tc.WGMMA_SOURCE.read_text()) == []


def _wgmma_fixtures():
    from classroom.must_fail import load_fixtures
    return [f for f in load_fixtures() if f.solution.name == "matmul_wgmma.cu"]


@pytest.mark.parametrize("fixture", _wgmma_fixtures(), ids=lambda f: f.wrong.name)
def test_known_wrong_wgmma_kernels_are_seen_on_the_cpu_too(fixture):
    """Each known-wrong kernel (tests/week1/wrong/matmul_wgmma.py; the GPU tests must reject it) breaks
    one of the ring's formulas, so a CPU run already points at it."""
    from classroom.must_fail import wrong_source
    assert wgmma_ring_problems(wrong_source(fixture)), f"{fixture.wrong.name}: the CPU check does not see it"


def test_wgmma_row_major_variant_only_changes_the_block_order():
    assert tc.WGMMA_TILES.defines() == ()
    row_major = tc.WgmmaTiles(group_m=1)
    assert row_major.defines() == ("-DWG_GROUP_M=1",)
    assert (row_major.bm, row_major.bn, row_major.shared_bytes) == (tc.WGMMA_TILES.bm, tc.WGMMA_TILES.bn,
                                                                    tc.WGMMA_TILES.shared_bytes)


def test_tensor_maps_are_cached_per_address_shape_stride_dtype_and_box(monkeypatch):
    """The launcher encodes a tensor map once per distinct tensor description, not once per call;
    a tensor that reuses an address with another shape, stride, dtype or box gets its own map
    (the driver is stubbed: the key, not the encoding, is under test, so this runs on the CPU)."""
    encoded = []

    class Driver:
        def cuTensorMapEncodeTiled(self, address, dtype, rank, base, sizes, strides, box, *rest):
            encoded.append((base, dtype, sizes[0], sizes[1], strides[0], box[0], box[1]))
            ctypes.memmove(address, bytes([len(encoded)]) * 128, 128)  # a distinct map per encoding
            return 0

    # patched where encoded_tensor_map is defined (an exercise stub imports the Hopper rung from the solution)
    monkeypatch.setattr(importlib.import_module(tc.encoded_tensor_map.__wrapped__.__module__), "cuda_driver", Driver)
    tc.encoded_tensor_map.cache_clear()
    storage = torch.zeros(64 * 64, dtype=torch.float16)
    square = storage.view(64, 64)
    first = tc.tensor_map(square, 64, 64)
    assert tc.tensor_map(square, 64, 64) == first and len(encoded) == 1  # the same tensor: cached
    same_address = [
        storage.view(32, 128),                       # another shape
        storage[: 32 * 64].view(32, 64),             # 32 x 64, rows 64 apart
        storage.view(32, 128)[:, :64],               # 32 x 64 again, rows 128 apart: only the stride differs
        storage.view(torch.bfloat16).view(64, 64),   # the same shape and stride, another dtype
    ]
    maps = {first}
    for t in same_address:
        assert t.data_ptr() == square.data_ptr()
        maps.add(tc.tensor_map(t, 64, 64))
    maps.add(tc.tensor_map(square, 128, 64))         # another box
    assert len(maps) == 1 + len(same_address) + 1, "a tensor with the same address got a stale map"
    tc.encoded_tensor_map.cache_clear()


def test_tensor_map_refuses_strides_the_tma_cannot_read():
    """Checked before the driver is called (so this runs on the CPU): rows of 3 halves = 6 bytes."""
    with pytest.raises(ValueError, match="16-byte"):
        tc.tensor_map(torch.ones(4, 3, dtype=torch.float16), 128, 64)


@pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
def test_wgmma_source_compiles_for_sm_90a(tmp_path):
    """The launcher's own nvcc command (-gencode=arch=compute_90a,code=sm_90a, warnings as errors:
    ptxas warns when it serialises wgmmas or ignores setmaxnreg) builds all four kernels, and the
    PTX holds the instructions this rung is about."""
    holes.refuse_open_hole(tc.WGMMA_SOURCE)  # the stub (--impl=exercises) with a hole open: 'not implemented yet'
    cubin = tmp_path / "wgmma.cubin"
    built = subprocess.run(tc.wgmma_nvcc_command(cubin, runtime.nvcc_path()), capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    ptx = tmp_path / "wgmma.ptx"
    subprocess.run([runtime.nvcc_path(), "-ptx", "-arch=compute_90a", *HOPPER_PTX_INCLUDE, "-o", str(ptx),
                    str(tc.WGMMA_SOURCE)],
                   check=True, capture_output=True)
    text = ptx.read_text()
    names = {f"wgmma_tma_{tc.TYPE_SUFFIX[d]}_{tc.TYPE_SUFFIX[o]}" for d in tc.DTYPES for o in (d, torch.float32)}
    entries = set(re.findall(r"\.entry (\w+)\(", text))
    assert entries == names, entries
    # Each hole's instructions, per kernel: the producer's TMA loads, its expect_tx arrive and its wait on
    # the empty barriers; the consumers' waits on the full barriers, wgmmas, wait_group 1 and arrives.
    for body in re.split(r"\.entry ", text)[1:]:
        name = body.split("(", 1)[0]
        for instruction in ("cp.async.bulk.tensor.2d", "mbarrier.arrive.expect_tx", "mbarrier.try_wait.parity",
                            "wgmma.mma_async", "wgmma.commit_group", "wgmma.wait_group.sync.aligned 1",
                            "wgmma.wait_group.sync.aligned 0", "mbarrier.arrive.shared"):
            assert instruction in body, f"{name}: {instruction} is missing from the PTX"
    for instruction in ("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16",
                        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
                        "cp.async.bulk.tensor.2d", "mbarrier.try_wait.parity", "setmaxnreg.inc"):
        assert instruction in text, f"{instruction} is missing from the PTX"
    if shutil.which("cuobjdump"):  # the SASS: HGMMA, the tensor cores' asynchronous instruction
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
        counts = tc_bench.sass_opcode_counts(sass)
        assert set(counts) == names
        assert all(c["HGMMA"] >= 4 and c["UTMALDG"] >= 2 and c["HMMA"] == 0 for c in counts.values()), counts
