"""week1_cuda_python.matmul_wgmma_persistent: the persistent wgmma + TMA rung (cluster=1) and the
cluster rung (cluster=2: blocks paired, B multicast) against torch.

Error model. The reference is torch.matmul in float32 (TF32 off) of the same fp16/bf16 inputs:
float64 at the capstone's shapes (8192 x 50304 x 768) would cost seconds per case on the GPU.
The products a_ik b_kj are exact in fp32 (11 + 11 significant bits < 24), so the kernel's fp32
sum and the reference's differ from the exact one only by their accumulation errors, each
bounded as in test_matmul_tensor_cores.py by 4 u sqrt(K) max_ij (|A| @ |B|)_ij (u = 2^-24; the
factor 4: truncating additions inside the tensor cores, and room for the sqrt(K) growth); the two
together by twice that. Then C is rounded once to fp16 (rtol 2^-11, plus half the smallest
subnormal) or bf16 (2^-8). At K = 4096 with unit normal inputs atol is ~0.08 on outputs of size
~64; a dropped k step (~16) or a wrong tile is orders of magnitude past it, and an unwritten
element stays NaN (every output is poisoned first). The tile width builds (width=192, 128) are checked
against float64 (products and sums exact): the same bound then holds with room, as it allows two
accumulation errors and only the kernel's is left.
"""
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course import runtime
from course.check import assert_close, check_graph_replays, poisoned, random_tensor
from week1_cuda_python.hopper_ptx import HOPPER_PTX_INCLUDE  # the -I of every Hopper build

wp = runtime.lesson("week1_cuda_python.matmul_wgmma_persistent")



DEVICE = runtime.DEVICE
U32 = 2.0**-24
ROUNDING = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
SUBNORMAL = {torch.float16: 2.0**-25, torch.bfloat16: 0.0}
HOPPER = runtime.on_gpu() and wp.unsupported(torch.cuda.get_device_capability()) is None
hopper = pytest.mark.skipif(not HOPPER, reason="the wgmma_persistent rung needs an H100/H200 (compute capability 9.0)")
gpu = pytest.mark.gpu(reason="launches the sm_90a kernel")
DTYPES = [pytest.param(d, id=str(d).replace("torch.", "")) for d in wp.DTYPES]
nvcc = pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
TOKENS = 8 * 1024  # the capstone's batch 8 x 1024 tokens (capstone.measure)
# launch_persistent's keyword arguments for each rung: the cooperative schedule without and with
# clusters, and the ping-pong schedule (kernels/matmul_wgmma_pingpong.cu).
RUNGS = [pytest.param({"cluster": c, "schedule": "cooperative"}, id=name) for c, name in wp.CLUSTERS.items()] + [
    pytest.param({"schedule": "pingpong"}, id="wgmma_pingpong")]


def reference(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """torch.matmul in float32 with TF32 off (every product exact, fp32 sums), or in float64."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return a.to(dtype) @ b.to(dtype)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def check(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, reference_dtype: torch.dtype = torch.float32) -> None:
    """C against the float32 (or float64) reference with the module docstring's bounds. The comparison
    runs on the GPU (an 8192 x 50304 C is 412 M elements: comparing on the CPU in float64 takes tens of
    seconds); where it finds a wrong element, assert_close reports the rows that hold one."""
    want = reference(a, b, reference_dtype)
    k = a.shape[1]
    products = (a.float().abs() @ b.float().abs()).max().item()
    rtol = ROUNDING[c.dtype]
    atol = 2 * 4 * U32 * math.sqrt(k) * products * (1 + rtol) + SUBNORMAL[c.dtype]
    ok = (c.to(want.dtype) - want).abs() <= atol + rtol * want.abs()  # False where c is NaN (poison)
    if bool(ok.all()):
        return
    rows = (~ok).any(dim=1).nonzero().flatten()[:64]
    assert_close(c[rows].double(), want[rows].double(), rtol=rtol, atol=atol, name=f"C (rows {rows.tolist()[:8]}...)")
    raise AssertionError(f"{int((~ok).sum())} elements of C are out of bounds")  # (assert_close found them)


def run(shape, dtype, reference_dtype=torch.float32, **kwargs):  # kwargs: launch_persistent's blocks, cluster,
    m, n, k = shape                                                  # schedule and width
    # B scaled by 1/sqrt(K) keeps C ~ N(0, 1) at any K: no fp16 overflow at the capstone's sizes.
    a = random_tensor((m, k), dtype, DEVICE)
    b = random_tensor((k, n), dtype, DEVICE, scale=k**-0.5)
    out = poisoned((m, n), dtype, DEVICE)
    assert wp.launch_persistent(a, b, out, **kwargs) is out
    check(out, a, b, reference_dtype)


# --- on the GPU (H100/H200) ----------------------------------------------------------------------

# (M, N, K): one exact tile; less than a tile; partial tiles in M and N with K one stage + a bit;
# small K; many ring wraps with K not a multiple of 64.
SMALL = [(128, 256, 64), (1, 8, 8), (129, 264, 72), (1000, 1000, 64), (300, 520, 1000), (7, 600, 4104)]
# The shapes: square, odd, and the capstone's GEMMs (tokens x 768 -> qkv, proj, fc, lm head;
# and fc2's K = 3072).
LARGE = [(4096, 4096, 4096), (5000, 3000, 4000), (TOKENS, 2304, 768), (TOKENS, 768, 768), (TOKENS, 3072, 768),
         (TOKENS, 768, 3072), (TOKENS, 50304, 768)]


@gpu
@hopper
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SMALL + LARGE, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("rung", RUNGS)
def test_matches_float32_reference(rung, shape, dtype):
    run(shape, dtype, **rung)


@gpu
@hopper
@pytest.mark.parametrize("cluster, blocks, schedule", [
    pytest.param(c, b, s, id=f"{'wgmma_pingpong' if s == 'pingpong' else wp.CLUSTERS[c]}-{b}blocks")
    for c, b, s in [(1, 1, "cooperative"), (1, 3, "cooperative"), (1, 7, "cooperative"), (2, 2, "cooperative"),
                    (2, 6, "cooperative"), (1, 1, "pingpong"), (1, 3, "pingpong"), (1, 7, "pingpong")]])
def test_one_block_walks_many_tiles(cluster, blocks, schedule):
    """Fewer blocks than tiles: 7 x 4 = 28 tiles of 6 k steps each (K = 328), so the ring's position
    runs on across tiles and lands on every stage at a tile's start (6 mod 4 = 2), and the store
    buffers are reused across tiles; 7 rows of tiles: a cluster's second block has no tile in the
    last row and must still take part in the B copies. Ping-pong: 13 x 4 = 52 tiles of 64 rows,
    each consumer skipping the other's ring positions (3 blocks: 18, 17, 17 tiles, odd and even)."""
    run((800, 1000, 328), torch.bfloat16, blocks=blocks, cluster=cluster, schedule=schedule)


# The tile width builds (-DWP_BN): odd shapes (partial tiles in M, N and K; N one or two tiles of each width
# and a few columns more) and the capstone's N = 768 GEMMs they exist for (768 = 4 x 192 = 6 x 128), each
# rung (the cluster rung builds with the same width), against float64.
# The default run takes bf16 at one tiny, one odd and one capstone shape (each width and rung: the same kernel
# text, instantiated per dtype); the rest, fp16 included, is `pytest -m slow` (week 1's default GPU run stays
# within its few minutes).
WIDTH_SHAPES = [(1, 8, 8), (129, 200, 72), (300, 392, 1000), (7, 520, 4104), (TOKENS, 768, 768), (TOKENS, 768, 3072)]
DEFAULT_WIDTH_SHAPES = {(1, 8, 8), (300, 392, 1000), (TOKENS, 768, 3072)}
WIDTH_SHAPE_DTYPES = [pytest.param(shape, dtype, id=f"{'x'.join(map(str, shape))}-{str(dtype)[6:]}",
                                   marks=() if shape in DEFAULT_WIDTH_SHAPES and dtype == torch.bfloat16
                                   else pytest.mark.slow)
                      for shape in WIDTH_SHAPES for dtype in wp.DTYPES]
WIDTHS = [pytest.param(w, id=f"bn{w}") for w in wp.WIDTHS[1:]]


@gpu
@hopper
@pytest.mark.parametrize("shape, dtype", WIDTH_SHAPE_DTYPES)
@pytest.mark.parametrize("rung", RUNGS)
@pytest.mark.parametrize("width", WIDTHS)
def test_width_builds_match_float64_reference(width, rung, shape, dtype):
    run(shape, dtype, torch.float64, width=width, **rung)


@gpu
@hopper
@pytest.mark.parametrize("width", wp.WIDTHS)
@pytest.mark.parametrize("rung", RUNGS)
def test_a_launch_captured_in_a_cuda_graph_computes_c_on_replay(rung, width):
    """The benches replay host-paced rounds from a CUDA graph (bench_timing.graph_replay_ms) and the capstone runs
    these GEMMs in graphs: the launch goes on torch's current stream, so a capture records it, and each replay
    computes C again, into a C poisoned after the capture."""
    a = random_tensor((TOKENS, 768), torch.bfloat16, DEVICE)
    b = random_tensor((768, 768), torch.bfloat16, DEVICE, scale=768**-0.5)
    out = poisoned((TOKENS, 768), torch.bfloat16, DEVICE)
    check_graph_replays(lambda: wp.launch_persistent(a, b, out, width=width, **rung), out, lambda: check(out, a, b))


@gpu
@hopper
@pytest.mark.parametrize("cluster, blocks, schedule", [(1, 1, "cooperative"), (1, 3, "cooperative"),
                                                       (2, 2, "cooperative"), (1, 3, "pingpong")])
@pytest.mark.parametrize("width", WIDTHS)
def test_width_builds_walk_many_tiles(width, cluster, blocks, schedule):
    """test_one_block_walks_many_tiles at each width: 1000 columns are 6 tiles of 192 (the last 40 wide)
    or 8 of 128 (the last 104), so the ring and the store buffers run on across many tiles."""
    run((800, 1000, 328), torch.bfloat16, torch.float64, blocks=blocks, cluster=cluster, schedule=schedule,
        width=width)


@gpu
@hopper
@pytest.mark.parametrize("width", wp.WIDTHS)
@pytest.mark.parametrize("rung", RUNGS)
def test_stores_stay_inside_c(rung, width):
    """C is a view into a poisoned buffer, 16 bytes in: the TMA store must clip at M and N, so the
    elements before and after C stay NaN (rows of tiles past M would land right after C)."""
    m, n, k = 200, 328, 72
    a = random_tensor((m, k), torch.float16, DEVICE)
    b = random_tensor((k, n), torch.float16, DEVICE)
    buffer = poisoned(8 + m * n + 64 * n, torch.float16, DEVICE)
    out = buffer[8:8 + m * n].view(m, n)
    wp.launch_persistent(a, b, out, width=width, **rung)
    check(out, a, b)
    assert torch.isnan(buffer[:8]).all() and torch.isnan(buffer[8 + m * n:]).all(), "a store landed outside C"


@gpu
@hopper
@pytest.mark.parametrize("launcher", ["matmul_wgmma_persistent", "matmul_wgmma_cluster", "matmul_wgmma_pingpong"])
def test_same_answer_twice(launcher):
    """A stage or store buffer reused too early would change the result from run to run."""
    a = random_tensor((2048, 1024), torch.bfloat16, DEVICE)
    b = random_tensor((1024, 2304), torch.bfloat16, DEVICE)
    first = getattr(wp, launcher)(a, b)
    for _ in range(3):
        assert torch.equal(getattr(wp, launcher)(a, b), first)


@gpu
@hopper
def test_cluster_rung_agrees_bit_for_bit():
    """Same tiles, same k order, same fp32 sums: pairing the blocks changes who copies B, not the math."""
    a = random_tensor((1000, 768), torch.float16, DEVICE)
    b = random_tensor((768, 2304), torch.float16, DEVICE)
    assert torch.equal(wp.matmul_wgmma_cluster(a, b), wp.matmul_wgmma_persistent(a, b))


@gpu
@hopper
def test_pingpong_agrees_bit_for_bit():
    """Each row of C from the same m64n256k16 instructions in the same k order: the schedule changes
    which warpgroup computes a row and when, not its fp32 sums."""
    a = random_tensor((1000, 768), torch.bfloat16, DEVICE)
    b = random_tensor((768, 2304), torch.bfloat16, DEVICE)
    assert torch.equal(wp.matmul_wgmma_pingpong(a, b), wp.matmul_wgmma_persistent(a, b))


@gpu
@hopper
def test_nan_and_inf_propagate_like_torch():
    m, n, k = 9, 16, 8
    a, b = random_tensor((m, k), torch.float16, DEVICE), random_tensor((k, n), torch.float16, DEVICE)
    a[0, 0] = math.nan
    a[2, 1] = math.inf
    b[1, 3] = -math.inf
    c = wp.matmul_wgmma_persistent(a, b)
    want = torch.matmul(a, b)
    assert torch.equal(torch.isnan(c), torch.isnan(want)) and torch.equal(torch.isinf(c), torch.isinf(want))


@gpu
@hopper
@pytest.mark.parametrize("name", list(wp.SANITIZER_CASES))
def test_sanitizer_cases_run(name):
    wp.SANITIZER_CASES[name]()


# --- anywhere: input checks, refusals, tile order, the source ---------------------------------------

@pytest.mark.parametrize("shape", [(0, 8, 8), (8, 0, 8), (8, 8, 0)], ids=["M=0", "N=0", "K=0"])
def test_empty_dimensions(shape, monkeypatch):
    m, n, k = shape
    monkeypatch.setattr(runtime, "capability", lambda device=None: None if not HOPPER else (9, 0))
    a, b = torch.ones(m, k, device=DEVICE).half(), torch.ones(k, n, device=DEVICE).half()
    c = wp.matmul_wgmma_persistent(a, b, out=poisoned((m, n), torch.float16, DEVICE))
    assert_close(c, torch.zeros(m, n, dtype=torch.float16, device=DEVICE))  # empty sums are 0


def bad_inputs():
    ok = lambda *s: torch.ones(*s, device=DEVICE, dtype=torch.float16)  # noqa: E731
    yield "a not a tensor", TypeError, "a must be a torch.Tensor", lambda: ([[1.0]], ok(8, 8), None)
    yield "a float32", TypeError, "a has dtype float32", lambda: (ok(8, 8).float(), ok(8, 8), None)
    yield "dtypes differ", TypeError, "dtypes must match", lambda: (ok(8, 8), ok(8, 8).bfloat16(), None)
    yield "b 1-D", ValueError, "b must have 2 dimension", lambda: (ok(8, 8), ok(8), None)
    yield "inner dims", ValueError, "inner dimensions must match", lambda: (ok(8, 16), ok(8, 8), None)
    # A row-major or column-major (a.t() contiguous: test_matmul_wgmma_a_col.py); any other strides refused
    yield "a strided", ValueError, "a must be row-major .* or column-major", lambda: (ok(8, 16)[:, ::2], ok(8, 8), None)
    yield "a column-major, M = 12", ValueError, r"a.t\(\) has rows of 24 bytes.*matmul_wgmma_tma", \
        lambda: (ok(8, 12).t(), ok(8, 8), None)
    yield "wrong device", ValueError, "kernels run on", \
        lambda: (torch.ones(8, 8, device="meta", dtype=torch.float16), ok(8, 8), None)
    yield "out float32", TypeError, "out has dtype float32", lambda: (ok(8, 8), ok(8, 8), ok(8, 8).float())
    yield "out wrong shape", ValueError, "out has shape", lambda: (ok(8, 8), ok(8, 8), ok(8, 16))
    # The TMA's 16-byte rule: K (a's rows) and N (b's and out's rows) multiples of 8; aligned bases.
    yield "K = 12", ValueError, "a has rows of 24 bytes.*matmul_wgmma_tma", lambda: (ok(8, 12), ok(12, 8), None)
    yield "N = 20", ValueError, "b has rows of 40 bytes.*matmul_wgmma_tma", lambda: (ok(8, 8), ok(8, 20), None)
    yield "a 2 bytes in", ValueError, "2 bytes past a 16-byte boundary.*matmul_wgmma_tma", \
        lambda: (ok(1 + 64)[1:].view(8, 8), ok(8, 8), None)
    yield "blocks 0", ValueError, "blocks must be a positive int", lambda: (ok(8, 8), ok(8, 8), None, 0)
    yield "blocks 1 < cluster 2", ValueError, "at least the cluster's 2", lambda: (ok(8, 8), ok(8, 8), None, 1, 2)
    yield "cluster 4", ValueError, "cluster must be one of", lambda: (ok(8, 8), ok(8, 8), None, None, 4)
    yield "schedule", ValueError, "schedule must be one of", lambda: (ok(8, 8), ok(8, 8), None, None, 1, "ping")
    yield "pingpong cluster 2", ValueError, "cluster must be 1", \
        lambda: (ok(8, 8), ok(8, 8), None, None, 2, "pingpong")
    # the tile width: one of the builds (-DWP_BN), an int
    for width in (512, 64, 192.0, True, "192"):
        yield f"width {width!r}", ValueError, r"width must be one of \(256, 192, 128\)", \
            lambda width=width: (ok(8, 8), ok(8, 8), None, None, 1, "cooperative", width)


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make):
    a, b, out, *rest = make()
    blocks, cluster = (rest[0] if rest else None), (rest[1] if len(rest) > 1 else 1)
    schedule = rest[2] if len(rest) > 2 else "cooperative"
    width = rest[3] if len(rest) > 3 else None
    with pytest.raises(error, match=message):
        wp.launch_persistent(a, b, out, blocks=blocks, cluster=cluster, schedule=schedule, width=width)


@pytest.mark.parametrize("launcher", ["matmul_wgmma_persistent", "matmul_wgmma_cluster", "matmul_wgmma_pingpong"])
@pytest.mark.parametrize("capability", [(7, 5), (8, 0), (8, 9), (10, 0), (12, 0)], ids=lambda c: f"sm_{c[0]}{c[1]}")
def test_refused_off_hopper(capability, launcher, monkeypatch):
    """sm_90a code runs on compute capability 9.0 alone: a sentence naming the GPU's capability and
    the rung to use instead, before anything is compiled or launched."""
    monkeypatch.setattr(runtime, "capability", lambda device=None: capability)
    a = torch.ones(16, 16, device=DEVICE, dtype=torch.float16)
    with pytest.raises(RuntimeError, match=rf"compute capability {capability[0]}\.{capability[1]}.*matmul_wmma_cp_async"):
        getattr(wp, launcher)(a, a.clone())


@pytest.mark.parametrize("tiles_m, tiles_n, group_m", [(32, 16, 16), (64, 32, 16), (37, 5, 16), (3, 7, 16),
                                                       (1, 1, 16), (10, 4, 1), (9, 9, 8), (64, 197, 16)])
def test_tile_order_is_a_permutation(tiles_m, tiles_n, group_m):
    """Every tile of C to exactly one step of the persistent loop, ragged last group included."""
    order = [wp.persistent_tile(i, tiles_m, tiles_n, group_m) for i in range(tiles_m * tiles_n)]
    assert sorted(order) == [(r, c) for r in range(tiles_m) for c in range(tiles_n)]
    if group_m == 1:
        assert order == [(r, c) for r in range(tiles_m) for c in range(tiles_n)]
    elif tiles_m >= 2:
        assert order[1] == (1, 0)  # down the column first


def test_tile_order_matches_the_cuda_source():
    wp.refuse_open_hole()  # the stub (--impl=exercises) with a hole open: 'not implemented yet'
    # whole-line comments out: the exercise's hints quote some of these lines
    lines = wp.PERSISTENT_SOURCE.read_text().splitlines()
    source = "\n".join(line for line in lines if not line.lstrip().startswith("//"))
    body = source[source.index("void wp_tile("):]
    body = body[:body.index("\n}")]
    for line in ("per_group = group_m * tiles_n", "first_m = (id / per_group) * group_m",
                 "rows = min(tiles_m - first_m, group_m)", "in_group = id % per_group",
                 "tile_m = first_m + in_group % rows", "tile_n = in_group / rows"):
        assert line in body, f"wp_tile no longer has `{line}`: update persistent_tile and this test"


def test_tiles_match_the_cuda_source():
    source = wp.PERSISTENT_SOURCE.read_text()
    t = wp.PERSISTENT_TILES
    for name in ("bm", "bn", "bk", "stages", "consumers", "b_slab", "c_chunk", "c_buffers", "group_m"):
        found = re.search(rf"#define WP_{name.upper()} (\d+)", source)
        assert found, f"WP_{name.upper()} is not defined in {wp.PERSISTENT_SOURCE.name}"
        assert int(found.group(1)) == getattr(t, name), f"WP_{name.upper()} differs"
    assert t.threads == 384 and t.shared_bytes == 4 * 48 * 1024 + 2 * 2 * 8 * 1024 + 1024
    assert t.shared_bytes + 64 <= 227 * 1024  # + the barriers: the H100's limit per block
    assert re.search(r"#ifndef WP_BN\n#define WP_BN (\d+)", source).group(1) == str(t.bn)  # -DWP_BN overrides it
    assert "static_assert(WP_BN == 256 || WP_BN == 192 || WP_BN == 128" in source and t.bn == wp.WIDTHS[0]


@pytest.mark.parametrize("width", wp.WIDTHS)
@pytest.mark.parametrize("schedule", wp.SCHEDULES)
def test_width_builds_tiles_and_defines(schedule, width):
    """A build's tiles: the schedule's rows, the width's columns; a ring stage of A's rows + width / 64 slabs
    of B (cooperative 192: 16 + 24 KB), the same epilogue buffers, within the H100's 227 KB; -DWP_BN only
    where the width is not the source's (the default build is the source as it is)."""
    t = wp.schedule_tiles(schedule, width, group_m=8)
    assert (t.bm, t.bn, t.group_m) == (64 if schedule == "pingpong" else 128, width, 8)
    stage = (t.bm * 64 + 64 * width) * 2
    assert t.shared_bytes == 4 * stage + 2 * 2 * 8 * 1024 + 1024 and t.shared_bytes + 64 <= 227 * 1024
    assert t.defines() == ("-DWP_GROUP_M=8",) + (() if width == 256 else (f"-DWP_BN={width}",))
    assert wp.schedule_tiles(schedule, 256).defines() == ()

@pytest.mark.parametrize("shape, sms, cluster, blocks", [
    ((4096, 4096), 132, 1, 132), ((128, 256), 132, 1, 1), ((129, 257), 132, 1, 4), ((8192, 50304), 132, 1, 132),
    ((1000, 1000), 2, 1, 2), ((4096, 4096), 132, 2, 132), ((128, 256), 132, 2, 2), ((129, 257), 132, 2, 4),
    ((385, 257), 132, 2, 8), ((1000, 1000), 3, 2, 2), ((4096, 4096), 131, 2, 130)])
def test_launch_geometry_is_persistent(shape, sms, cluster, blocks):
    """One block per SM at most, no more than the units of work (pairs of row tiles for a cluster of
    2: 385 rows are 4 row tiles, 2 pairs, x 2 column tiles), whole clusters only."""
    grid, block = wp.launch_geometry(*shape, sms, cluster=cluster)
    assert grid == (blocks, 1, 1) and block == (384, 1, 1) and blocks % cluster == 0


@nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("width", wp.WIDTHS)
def test_source_compiles_for_sm_90a(width, tmp_path):
    """The launcher's own nvcc command (warnings as errors) builds both kernels without spills at every
    tile width (its -DWP_BN), and the PTX holds what the rung is about: the width's wgmma, TMA loads and
    stores, the proxy fence, setmaxnreg."""
    wp.refuse_open_hole()  # the stub (--impl=exercises) with a hole open: 'not implemented yet'
    cubin = tmp_path / "wp.cubin"
    defines = wp.schedule_tiles("cooperative", width).defines()
    built = subprocess.run(wp.nvcc_command(cubin, runtime.nvcc_path(), defines) + ["-Xptxas", "-v"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert built.stderr.count("0 bytes spill stores, 0 bytes spill loads") == 6, built.stderr  # 4 + 2 a_col
    ptx = tmp_path / "wp.ptx"
    subprocess.run([runtime.nvcc_path(), "-ptx", "-arch=compute_90a", *defines, *HOPPER_PTX_INCLUDE, "-o", str(ptx),
                    str(wp.PERSISTENT_SOURCE)],
                   check=True, capture_output=True)
    text = ptx.read_text()
    names = {f"{rung}_{d}" for rung in (*wp.CLUSTERS.values(), "wgmma_persistent_a_col") for d in ("f16", "bf16")}
    assert names <= set(re.findall(r"\.entry (\w+)\(", text))
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16", text)) == {str(width)}
    for instruction in (f"wgmma.mma_async.sync.aligned.m64n{width}k16.f32.f16.f16",
                        f"wgmma.mma_async.sync.aligned.m64n{width}k16.f32.bf16.bf16",
                        "cp.async.bulk.tensor.2d.shared::cluster.global", "cp.async.bulk.tensor.2d.global.shared::cta",
                        "cp.async.bulk.wait_group.read", "fence.proxy.async.shared::cta", "mbarrier.try_wait.parity",
                        "setmaxnreg.inc", "setmaxnreg.dec", ".multicast::cluster", "mapa.shared::cluster",
                        "barrier.cluster.arrive", ".reqnctapercluster 2"):
        assert instruction in text, f"{instruction} is missing from the PTX"
    if shutil.which("cuobjdump"):  # the SASS: HGMMA (wgmma), UTMALDG / UTMASTG (TMA load / store)
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
        for opcode in (f"HGMMA.64x{width}x16.F32.BF16", f"HGMMA.64x{width}x16.F32 ", "UTMALDG.2D", "UTMASTG.2D",
                       "USETMAXREG", "UTMALDG.2D.MULTICAST"):
            assert opcode in sass, f"{opcode} is missing from the SASS"


@nvcc
@pytest.mark.nvcc
def test_a_width_without_a_build_does_not_compile(tmp_path):
    """-DWP_BN=160 (a legal wgmma N, but not one of the course's builds): the source's static_assert
    stops it, naming the widths, before any cubin exists."""
    built = subprocess.run(wp.nvcc_command(tmp_path / "x.cubin", runtime.nvcc_path(), ("-DWP_BN=160",)),
                           capture_output=True, text=True)
    assert built.returncode != 0 and "WP_BN: 256, 192 or 128" in built.stderr, built.stderr


@nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_source_compiles_as_a_stub_elsewhere(arch, tmp_path):
    """For any target but sm_90a the body is a trap (the course compiles every kernel for sm_75, sm_90)."""
    built = subprocess.run([runtime.nvcc_path(), "-cubin", f"-arch={arch}", "-Werror", "all-warnings",
                            *HOPPER_PTX_INCLUDE, "-o", str(tmp_path / "x.cubin"), str(wp.PERSISTENT_SOURCE)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr


@pytest.mark.parametrize("schedule", ["cooperative", "pingpong"])
def test_a_body_with_a_hole_open_is_refused_before_nvcc(schedule, monkeypatch):
    """The body's exercise stub, holes open (a `#define HOLE_OPEN` line each): its builds (alone, and under
    the ping-pong entry points, which include it by -DWP_BODY) are refused, naming the body and the hole,
    before nvcc is asked (course/holes.py): its barriers could hang the GPU."""
    host = sys.modules[wp.cubin_module.__module__]  # the stub imports the sources: patch them where cubin_module reads
    stub = Path(__file__).resolve().parents[2] / "week1_cuda_python/exercises/kernels/matmul_wgmma_persistent.cu"
    monkeypatch.setattr(host, "PERSISTENT_SOURCE", stub)
    monkeypatch.setattr(runtime, "nvcc_path", lambda: pytest.fail("nvcc was asked"))
    with pytest.raises(NotImplementedError, match=r"not implemented yet: .*matmul_wgmma_persistent.cu line \d+ has a hole open"):
        host.cubin_module.__wrapped__((), host.PINGPONG_SOURCE if schedule == "pingpong" else None)


def _kernel_fixtures():
    from classroom.must_fail import load_fixtures
    return [f for f in load_fixtures() if f.solution.name == wp.PERSISTENT_SOURCE.name]  # (the solution's)


@nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("fixture", _kernel_fixtures(), ids=lambda f: f.wrong.name)
def test_known_wrong_kernels_still_apply_and_build(fixture, tmp_path):
    """The known-wrong kernels (tests/week1/wrong/matmul_wgmma_persistent.py; only a GPU run can show
    their bugs) still apply to the source and build with the launcher's command, so that the GPU's
    must-fail run tests the bug, not a compile error: the wrong text replaces the right one exactly once."""
    from classroom.must_fail import wrong_source
    assert fixture.wrong.gpu, "a kernel bug shows only on the GPU: mark the fixture gpu=True"
    source = tmp_path / wp.PERSISTENT_SOURCE.name
    source.write_text(wrong_source(fixture))
    command = wp.nvcc_command(tmp_path / "wrong.cubin", runtime.nvcc_path(), source=source)
    built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr


def test_there_are_known_wrong_kernels():
    names = {f.wrong.name for f in _kernel_fixtures()}
    assert {"expect_tx_one_slab_short", "stage_released_before_its_wgmmas_finish", "epilogue_chunk_not_swizzled"} <= names
