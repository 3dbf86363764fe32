"""week1_cuda_python.matmul_wgmma_split_k: the persistent wgmma GEMM with K cut into ranges, fp32 partial sums in a
workspace, and their sum rounded once (kernels/matmul_wgmma_split_k.cu).

Error model: test_matmul_wgmma_persistent.py's `check` (products exact in fp32, two fp32 accumulations bounded by
4 u sqrt(K) max (|A| @ |B|) each, one rounding to C's type). Split-K reassociates the same fp32 sum (each range's
sum, then the ranges added): its error has the same bound. A range summed twice or left out changes C by a
K/splits-long partial sum, of the size of C, far past it; an unwritten element stays NaN (C is poisoned first).
"""
import re
import subprocess

import pytest
import torch

from course import runtime
from course.check import check_graph_replays, poisoned, random_tensor
from tests.week1 import wgmma_epilogues as epi
from tests.week1.test_matmul_wgmma_persistent import HOPPER, TOKENS, check

wk = runtime.lesson("week1_cuda_python.matmul_wgmma_split_k")
wp = runtime.lesson("week1_cuda_python.matmul_wgmma_persistent")

DEVICE = runtime.DEVICE
hopper = pytest.mark.skipif(not HOPPER, reason="the split-K wgmma rung needs an H100/H200 (compute capability 9.0)")
gpu = pytest.mark.gpu(reason="launches the sm_90a kernels")
nvcc = pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
LAYOUTS = [pytest.param(False, id="a_row"), pytest.param(True, id="a_col")]


def operands(m, n, k, dtype, a_col):
    a = random_tensor((k, m), dtype, DEVICE).t() if a_col else random_tensor((m, k), dtype, DEVICE)
    return a, random_tensor((k, n), dtype, DEVICE, scale=k**-0.5)  # C ~ N(0, 1) at any K


def run(shape, dtype, a_col, **kwargs):
    a, b = operands(*shape, dtype, a_col)
    out = poisoned(shape[:2], dtype, DEVICE)
    assert wk.launch_split_k(a, b, out, **kwargs) is out
    check(out, a, b)
    return a, b, out


# --- on the GPU (H100/H200) ----------------------------------------------------------------------

# (M, N, K, splits): 2 ranges of one k tile each; 3 uneven ranges (16 k tiles: 6, 6, 4) over partial tiles in M and
# N (the last column of tiles 72 wide: its second fp32 box partly outside C); K not a multiple of 64 in 7 ranges;
# more ranges asked than k tiles (10 for 3: 3 ranges of 1); the capstone's attention-projection dW as planned.
CASES = [(128, 256, 128, 2), (200, 328, 1000, 3), (136, 264, 4104, 7), (64, 512, 136, 10), (768, 768, TOKENS, None)]


@gpu
@hopper
@pytest.mark.parametrize("dtype", [pytest.param(d, id=str(d)[6:]) for d in wp.DTYPES])
@pytest.mark.parametrize("a_col", LAYOUTS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:3])) + f"-s{c[3]}")
def test_matches_float32_reference(case, a_col, dtype):
    *shape, splits = case
    run(tuple(shape), dtype, a_col, splits=splits)


@gpu
@hopper
@pytest.mark.parametrize("width", wp.WIDTHS[1:])
def test_width_builds(width):
    run((200, 328, 1000), torch.bfloat16, True, splits=3, width=width)


@gpu
@hopper
@pytest.mark.parametrize("shape", [(2304, 768, TOKENS), (3072, 768, TOKENS), (768, 3072, TOKENS)],
                         ids=lambda s: "x".join(map(str, s)))
def test_weight_gradients_as_planned(shape):
    run(shape, torch.bfloat16, True)


@gpu
@hopper
@pytest.mark.parametrize("blocks", [1, 5])
def test_few_blocks_walk_every_unit(blocks):
    """2 x 2 tiles x 3 ranges = 12 units on 1 or 5 blocks: the ring and the store buffers run on across units of
    different ranges."""
    run((200, 328, 1000), torch.bfloat16, True, splits=3, blocks=blocks)


@gpu
@hopper
def test_same_bits_every_run_and_one_range_is_the_plain_kernel():
    """The ranges are added in a fixed order: no run-to-run difference; splits=1 runs the plain kernel itself."""
    a, b = operands(768, 768, 4096, torch.bfloat16, True)
    first = wk.matmul_wgmma_split_k(a, b, splits=5)
    for _ in range(3):
        assert torch.equal(wk.matmul_wgmma_split_k(a, b, splits=5), first)
    assert torch.equal(wk.matmul_wgmma_split_k(a, b, splits=1), wp.launch_persistent(a, b, schedule="cooperative"))


@gpu
@hopper
def test_stores_stay_inside_c():
    """C a view 16 bytes into a poisoned buffer: the sum writes C's elements and nothing around them."""
    m, n, k = 200, 328, 1000
    a, b = operands(m, n, k, torch.float16, True)
    buffer = poisoned(8 + m * n + 64 * n, torch.float16, DEVICE)
    out = buffer[8:8 + m * n].view(m, n)
    wk.launch_split_k(a, b, out, splits=3)
    check(out, a, b)
    assert torch.isnan(buffer[:8]).all() and torch.isnan(buffer[8 + m * n:]).all(), "a store landed outside C"


@gpu
@hopper
def test_a_launch_captured_in_a_cuda_graph_computes_c_on_replay():
    """Both kernels and the workspace (from the graph's pool) are captured; each replay recomputes C."""
    a, b = operands(768, 768, TOKENS, torch.bfloat16, True)
    out = poisoned((768, 768), torch.bfloat16, DEVICE)
    check_graph_replays(lambda: wk.launch_split_k(a, b, out), out, lambda: check(out, a, b))


@gpu
@hopper
def test_nan_and_inf_propagate_like_torch():
    a, b = operands(16, 16, 256, torch.float16, True)
    a[0, 0], a[2, 200], b[100, 3] = float("nan"), float("inf"), -float("inf")
    c, want = wk.matmul_wgmma_split_k(a, b, splits=4), torch.matmul(a, b)
    assert torch.equal(torch.isnan(c), torch.isnan(want)) and torch.equal(torch.isinf(c), torch.isinf(want))


@gpu
@hopper
@pytest.mark.parametrize("name", list(wk.SANITIZER_CASES))
def test_sanitizer_cases_run(name):
    wk.SANITIZER_CASES[name]()


# --- anywhere: the plan, what the launcher asks for, refusals, the source -------------------------

@pytest.mark.parametrize("k_tiles, asked, want", [(128, 7, (7, 19)), (10, 4, (4, 3)), (9, 4, (3, 3)), (3, 10, (3, 1)),
                                                  (1, 1, (1, 1)), (16, 3, (3, 6))])
def test_every_range_holds_k_tiles(k_tiles, asked, want):
    ranges, per = wk.split(k_tiles, asked)
    assert (ranges, per) == want and (ranges - 1) * per < k_tiles <= ranges * per


def test_the_plan_splits_small_c_long_k_and_nothing_else():
    """The attention projection's dW (18 tiles) is split so every range's units fit one wave; a GEMM whose tiles
    already fill the SMs several times (4096^3, the forward's fc) is not; no range is shorter than MIN_K_TILES."""
    proj = wk.plan_splits(768, 768, TOKENS, 132)
    assert proj.splits > 1 and proj.tiles == 18 and proj.tiles * proj.splits <= 132 and proj.busiest == 1
    assert proj.workspace_bytes == proj.splits * 768 * 768 * 4
    for shape in [(4096, 4096, 4096), (TOKENS, 3072, 768), (TOKENS, 50304, 768)]:
        assert wk.plan_splits(*shape, 132).splits == 1, shape
    for shape in [(768, 768, 512), (128, 128, 64), (768, 768, TOKENS)]:
        plan = wk.plan_splits(*shape, 132)
        assert plan.k_per_split >= min(wk.MIN_K_TILES, -(-shape[2] // 64)), (shape, plan)
    # a faster memory makes the workspace cheaper: never fewer ranges
    assert wk.plan_splits(768, 768, TOKENS, 132, workspace_gbps=1e6).splits >= proj.splits


@pytest.mark.parametrize("shape, width, splits", [
    ((2304, 768, TOKENS), 128, 1),   # qkv's dW: 108 tiles of 128 x 128 fill the SMs whole
    ((768, 768, TOKENS), 128, 3),    # the projection's: 36 tiles, x 3 ranges in one wave
    ((3072, 768, TOKENS), 192, 1),   # fc's: 96 tiles at 192 beat 72 at 256 in 3 ranges
    ((768, 3072, TOKENS), 192, 1),   # fc2's
    ((4096, 4096, 4096), 256, 1),    # a big square GEMM: the widest tile, whole
])
def test_the_plan_weighs_the_width_with_the_ranges(shape, width, splits):
    """plan_build keeps the width and ranges of least modelled time, the wider tile on a tie. On the capstone's weight
    gradients it picks what the H100 timed fastest of the rung's builds (results/matmul_wgmma_backward_week1.*):
    for the MLP's dW the whole 192-wide tile, not the 256-wide one plan_splits alone would split."""
    got_width, plan = wk.plan_build(*shape, 132)
    assert (got_width, plan.splits) == (width, splits)
    assert all(plan.model_us <= wk.plan_splits(*shape, 132, wp.schedule_tiles("cooperative", w)).model_us
               for w in wp.WIDTHS)


def test_a_launch_with_neither_width_nor_ranges_runs_the_plans_build(recorded):
    """The projection's dW with no width and no ranges: plan_build's 128-wide build in 3 ranges (A's boxes 64 k x 64 m,
    the workspace's 3 x 768 rows), where the same call at width 256 asks plan_splits for its own ranges."""
    dy, x = _zeros(TOKENS, 768), _zeros(TOKENS, 768)
    wk.launch_split_k(dy.t(), x)
    assert [k[:2] for k in recorded["kernels"]] == [("wgmma_persistent_a_col_split_k_bf16", 128),
                                                    ("wgmma_split_k_sum_bf16", 128)]
    assert recorded["maps"][2] == ((3 * 768, 768), 64, 32)
    wk.launch_split_k(dy.t(), x, width=256)
    assert recorded["kernels"][2][1] == 256
    assert recorded["maps"][5] == ((wk.plan_splits(768, 768, TOKENS, 132).splits * 768, 768), 64, 32)


@pytest.mark.parametrize("arg, value", [("m", 0), ("n", -1), ("k", 1.5), ("sms", True)])
def test_the_plan_refuses_bad_sizes(arg, value):
    sizes = {"m": 8, "n": 8, "k": 8, "sms": 132} | {arg: value}
    with pytest.raises(ValueError, match=f"{arg} must be a positive int"):
        wk.plan_splits(**sizes)


def _zeros(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16, device=runtime.DEVICE)


def test_launch_asks_for_the_gemm_then_the_sum(recorded):
    """dW of the attention projection in 3 ranges: A's map over dY (tokens x 768) in 64 x 64 boxes, B's over X, the
    workspace's fp32 map (3 x 768 rows) in 64 x 32 boxes; the a_col split-K GEMM on min(132, 54 units) blocks, then
    the sum over 768 x 768 / 4 quads of 256 threads."""
    dy, x = _zeros(TOKENS, 768), _zeros(TOKENS, 768)
    wk.launch_split_k(dy.t(), x, splits=3)
    assert recorded["maps"] == [((TOKENS, 768), 64, 64), ((TOKENS, 768), 64, 64), ((3 * 768, 768), 64, 32)]
    assert [k[0] for k in recorded["kernels"]] == ["wgmma_persistent_a_col_split_k_bf16", "wgmma_split_k_sum_bf16"]
    gemm, total = recorded["launches"]
    assert gemm["grid"] == (54, 1, 1) and gemm["block"] == (384, 1, 1)
    assert gemm["shared"] == wp.PERSISTENT_TILES.shared_bytes
    assert total["block"] == (wk.SUM_THREADS, 1, 1) and total["shared"] == 0
    assert total["grid"] == (min(4 * 132, -(-768 * 768 // 4 // wk.SUM_THREADS)), 1, 1)


def test_row_major_a_and_one_range(recorded):
    """A row-major takes the row-major split-K entry; one range is the plain persistent kernel, no workspace."""
    wk.launch_split_k(_zeros(300, 4096), _zeros(4096, 328), splits=4)
    assert recorded["kernels"][0][0] == "wgmma_persistent_split_k_bf16"
    assert recorded["maps"][2] == ((4 * 384, 328), 64, 32)  # 300 rows rounded up to 3 tiles of 128, per range
    wk.launch_split_k(_zeros(300, 4096), _zeros(4096, 328), splits=1)
    assert recorded["kernels"][2][0] == "wgmma_persistent_bf16" and len(recorded["launches"]) == 3


@pytest.mark.parametrize("kwargs, message", [({"splits": 0}, "splits must be a positive int"),
                                             ({"splits": True}, "splits must be a positive int"),
                                             ({"splits": "2"}, "splits must be a positive int"),
                                             ({"blocks": 0}, "blocks must be a positive int"),
                                             ({"width": 96}, "width must be one of")])
def test_bad_arguments_are_refused_before_launch(kwargs, message, monkeypatch):
    monkeypatch.setattr(wk, "_kernel", lambda *args: pytest.fail("launched despite a bad argument"))
    with pytest.raises(ValueError, match=message):
        wk.launch_split_k(_zeros(64, 64), _zeros(64, 64), **kwargs)


def test_a_sum_with_its_hole_open_is_refused_before_nvcc(monkeypatch):
    """The exercise's copy of kernels/matmul_wgmma_split_k.cu with the sum's hole open is refused, naming it, before
    nvcc is asked (course/holes.py), as the body's holes are."""
    stub = wk.SPLIT_K_SOURCE.parents[1] / "exercises" / "kernels" / wk.SPLIT_K_SOURCE.name
    if wk.SPLIT_K_SOURCE.parent.parent.name == "exercises":  # --impl=exercises: the learner's copy already
        stub = wk.SPLIT_K_SOURCE
    monkeypatch.setattr(wk, "SPLIT_K_SOURCE", stub)
    monkeypatch.setattr(runtime, "nvcc_path", lambda: pytest.fail("nvcc was asked"))
    with pytest.raises(NotImplementedError, match=r"not implemented yet: .*matmul_wgmma_split_k.cu line \d+ has a hole"):
        wk._kernel.__wrapped__("wgmma_split_k_sum_bf16", 256)


def test_refused_off_hopper(monkeypatch):
    monkeypatch.setattr(runtime, "capability", lambda device=None: (8, 0))
    with pytest.raises(RuntimeError, match="matmul_wmma_cp_async"):
        wk.matmul_wgmma_split_k(_zeros(64, 64), _zeros(64, 64))


@nvcc
@pytest.mark.nvcc
def test_source_compiles_for_sm_90a_without_spills(tmp_path):
    """Four GEMM entries and two sums, no spills; the GEMMs store through the TMA (fp32 boxes) and the a_col ones
    transpose A (HGMMA .tnspA)."""
    wp.refuse_open_hole()
    cubin = tmp_path / "sk.cubin"
    built = subprocess.run(wk.nvcc_split_k_command(cubin, runtime.nvcc_path()) + ["-Xptxas", "-v"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    names = {f"wgmma_persistent{a}_split_k_{d}" for a in ("", "_a_col") for d in ("f16", "bf16")} | {
        f"wgmma_split_k_sum_{d}" for d in ("f16", "bf16")}
    assert set(re.findall(r"Compiling entry function '(\w+)'", built.stderr)) == names
    assert built.stderr.count("0 bytes spill stores, 0 bytes spill loads") == len(names), built.stderr
    tool = epi.cuobjdump()
    assert tool, "no cuobjdump (CUDA toolkit or Triton's copy): the SASS cannot be checked"
    sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    for text in re.split(r"\n\s*Function : ", sass)[1:]:
        name = text.split()[0]
        if "sum" in name:
            assert "HGMMA" not in text and "UTMASTG" not in text, name
            continue
        assert "UTMASTG.2D" in text and "UTMALDG.2D" in text, name
        assert ("tnspA" in text) == ("a_col" in name), name


def _kernel_fixtures():
    from classroom.must_fail import load_fixtures
    return [f for f in load_fixtures() if f.solution.name == "matmul_wgmma_split_k.cu"
            or (f.solution.name == "matmul_wgmma_persistent.cu" and "split_k" in f.wrong.name)]


def test_there_are_known_wrong_split_k_kernels():
    assert {f.wrong.name for f in _kernel_fixtures()} == {"sum_drops_the_last_range",
                                                          "split_k_range_adds_the_previous_units_sums"}


@nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("fixture", _kernel_fixtures(), ids=lambda f: f.wrong.name)
def test_known_wrong_kernels_apply_and_build(fixture, tmp_path):
    """Each known-wrong kernel still applies to its source and the split-K entries build on it (the wrong body
    named by -DWP_BODY, as the launcher names the persistent module's): the GPU's must-fail run then tests the bug,
    not a compile error."""
    from classroom.must_fail import wrong_source
    for name in (wp.PERSISTENT_SOURCE.name, wk.SPLIT_K_SOURCE.name):  # the solutions' sources, one of them wrong
        (tmp_path / name).write_text(wrong_source(fixture) if name == fixture.solution.name
                                     else (fixture.solution.parent / name).read_text())
    command = [a for a in wk.nvcc_split_k_command(tmp_path / "wrong.cubin", runtime.nvcc_path())
               if not a.startswith("-DWP_BODY=")]
    command[-1:-1] = [f'-DWP_BODY="{tmp_path / wp.PERSISTENT_SOURCE.name}"']  # before the source, as the launcher's
    command[-1] = str(tmp_path / wk.SPLIT_K_SOURCE.name)
    built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
