"""The ping-pong schedule of the persistent Hopper GEMM (kernels/matmul_wgmma_pingpong.cu), on the CPU:
its source builds for sm_90a with the launchers' own nvcc command, every entry point and no spills;
its tiles, shared memory and grid are what the kernel expects. Its GPU checks are the persistent and
fused rungs' own tests, parametrized over the schedule (`-k pingpong` selects them), and its barrier
protocol is modelled in test_matmul_wgmma_persistent_protocol.py.
"""
import re
import subprocess

import pytest

from course import runtime
from tests.week1 import wgmma_epilogues as epi
from week1_cuda_python.hopper_ptx import HOPPER_PTX_INCLUDE  # the -I of every Hopper build

wp = runtime.lesson("week1_cuda_python.matmul_wgmma_persistent")
wf = runtime.lesson("week1_cuda_python.matmul_wgmma_fused")

nvcc = pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
ENTRIES = {f"wgmma_pingpong_{d}" for d in ("f16", "bf16")} | {
    wf.kernel_name(e, d, "pingpong") for e in wf.EPILOGUES for d in wf.DTYPES}


def test_every_entry_point_is_in_the_source():
    """The plain GEMM's two and one per fused epilogue and dtype, named as the launchers ask for them."""
    source = wp.PINGPONG_SOURCE.read_text()
    found = set(re.findall(r"^WPP_(?:FUSED_)?ENTRY\((\w+),", source, re.MULTILINE))
    assert found == ENTRIES and len(ENTRIES) == 2 + 2 * len(wf.EPILOGUES)
    assert wf.PINGPONG_SOURCE == wp.PINGPONG_SOURCE


def test_tiles_and_shared_memory():
    """64-row tiles; a stage is 64 x 64 of A + 64 x 256 of B (40 KB); 4 stages + the same epilogue
    buffers + 1 KB of alignment, within the 227 KB a block may have (5 stages would not fit)."""
    t = wp.PINGPONG_TILES
    assert (t.bm, t.bn, t.bk, t.stages, t.consumers) == (64, 256, 64, 4, 2)
    assert t.shared_bytes == 4 * 40 * 1024 + 2 * 2 * 8 * 1024 + 1024
    assert t.shared_bytes + 64 <= 227 * 1024 < t.shared_bytes + 40 * 1024
    assert "constexpr int TILE_M = PINGPONG ? 64 : WP_BM;" in wp.PERSISTENT_SOURCE.read_text()


@pytest.mark.parametrize("shape, sms, blocks", [((8192, 768), 132, 132), ((64, 256), 132, 1), ((65, 257), 132, 4),
                                                ((300, 328), 2, 2), ((128, 256), 132, 2)])
def test_launch_geometry_counts_64_row_tiles(shape, sms, blocks):
    """8192 x 768 is 128 x 3 = 384 tiles of 64 x 256: every SM gets 2 or 3 (cooperative: 192, 1 or 2)."""
    grid, block = wp.launch_geometry(*shape, sms, wp.PINGPONG_TILES)
    assert grid == (blocks, 1, 1) and block == (384, 1, 1)


@nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("width", wp.WIDTHS)
def test_source_compiles_for_sm_90a_without_spills(width, tmp_path):
    """Both launchers' nvcc commands (the same flags) build all 10 entry points at every tile width (8 at
    192: no SwiGLU), no spills; the SASS has the width's m64nNk16 wgmma, TMA loads and stores,
    setmaxnreg; the PTX the turn barriers' waits."""
    wp.refuse_open_hole()  # the stub (--impl=exercises) with a hole open: 'not implemented yet'
    cubin = tmp_path / "pp.cubin"
    defines = wp.schedule_tiles("pingpong", width).defines()
    assert bool(defines) == (width != 256)  # the default width builds the source as it is
    command = wp.nvcc_command(cubin, runtime.nvcc_path(), defines, source=wp.PINGPONG_SOURCE)
    assert command[:-3] == wf.nvcc_command(cubin, runtime.nvcc_path(), wf.PINGPONG_SOURCE, defines)[:-3]
    entries = {e for e in ENTRIES if "swiglu" not in e or width in wf.SWIGLU_WIDTHS}
    built = subprocess.run(command + ["-Xptxas", "-v"], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    for name in entries:
        assert f"Compiling entry function '{name}' for 'sm_90a'" in built.stderr, name
    assert built.stderr.count("0 bytes spill stores, 0 bytes spill loads") == len(entries), built.stderr
    tool = epi.cuobjdump()
    assert tool, "no cuobjdump (CUDA toolkit or Triton's copy): the SASS cannot be checked"
    sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    functions = re.split(r"\n\s*Function : ", sass)[1:]
    assert {text.split()[0] for text in functions} == entries
    for text in functions:
        assert re.findall(r"HGMMA\.64x(\d+)x16", text) and set(re.findall(r"HGMMA\.64x(\d+)x16", text)) == {str(width)}
        for opcode in (f"HGMMA.64x{width}x16.F32", "UTMALDG.2D", "UTMASTG.2D", "USETMAXREG", "SYNCS"):
            assert opcode in text, f"{opcode} is missing from the SASS of {text.split()[0]}"
        assert "MULTICAST" not in text, "ping-pong has no clusters"


@nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_source_compiles_as_a_stub_elsewhere(arch, tmp_path):
    """For any target but sm_90a the bodies are traps (the course compiles every kernel for sm_75, sm_90)."""
    built = subprocess.run([runtime.nvcc_path(), "-cubin", f"-arch={arch}", "-Werror", "all-warnings",
                            *HOPPER_PTX_INCLUDE, "-o", str(tmp_path / "x.cubin"), str(wp.PINGPONG_SOURCE)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr


def test_plain_launch_asks_for_the_pingpong_kernel(recorded):
    """8192 x 768: 64-row boxes of A, the ping-pong entry point from its own source, its shared memory,
    a grid of 132 for 384 tiles; the default schedule still asks for the cooperative kernel."""
    import torch

    a, b = torch.zeros(8192, 768, dtype=torch.bfloat16, device=runtime.DEVICE), torch.zeros(768, 768, dtype=torch.bfloat16, device=runtime.DEVICE)
    wp.launch_persistent(a, b, schedule="pingpong")
    assert recorded["maps"][0] == ((8192, 768), 64, 64)
    name, shared, defines, source = recorded["kernels"][0]
    assert (name, shared, defines, source) == ("wgmma_pingpong_bf16", wp.PINGPONG_TILES.shared_bytes, (),
                                               wp.PINGPONG_SOURCE)
    assert recorded["launches"][0] == {"kernel": name, "grid": (132, 1, 1), "block": (384, 1, 1),
                                       "shared": wp.PINGPONG_TILES.shared_bytes}
    wp.launch_persistent(a, b)
    assert recorded["maps"][3] == ((8192, 768), 128, 64)
    assert recorded["kernels"][1][0] == "wgmma_persistent_bf16" and recorded["kernels"][1][3] is None
    assert recorded["launches"][1]["shared"] == wp.PERSISTENT_TILES.shared_bytes


@pytest.mark.parametrize("epilogue", list(wf.EPILOGUES))
def test_fused_launch_asks_for_the_pingpong_kernel(recorded, epilogue):
    """The fused launcher: 64-row boxes of x, the epilogue's ping-pong entry point, its shared memory;
    300 rows and 528 columns of x @ w.T: 5 x 3 tiles of 64 x 256 on a grid capped at 2 blocks."""
    import torch

    m, n, k = 300, 528, 328
    x, w = torch.zeros(m, k, dtype=torch.float16, device=runtime.DEVICE), torch.zeros(n, k, dtype=torch.float16, device=runtime.DEVICE)
    extra = epi.extra_operand(epilogue, m, n, lambda shape: torch.zeros(shape, dtype=torch.float16, device=runtime.DEVICE))
    wf.launch_fused(x, w, epilogue, extra, blocks=2, schedule="pingpong")
    assert recorded["maps"][0] == ((m, k), 64, 64)
    assert recorded["kernels"][0] == (wf.kernel_name(epilogue, torch.float16, "pingpong"), "pingpong", 256)
    assert recorded["launches"][0]["grid"] == (2, 1, 1)
    assert recorded["launches"][0]["shared"] == wp.PINGPONG_TILES.shared_bytes


def _kernel_fixtures():
    from classroom.must_fail import load_fixtures
    return [f for f in load_fixtures() if f.solution.name == wp.PERSISTENT_SOURCE.name]  # (the solution's)


@nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("fixture", _kernel_fixtures(), ids=lambda f: f.wrong.name)
def test_known_wrong_bodies_build_the_pingpong_entries(fixture, tmp_path):
    """The known-wrong kernels patch the body both schedules share (tests/week1/wrong/
    matmul_wgmma_persistent.py; `pingpong_without_turns` only matters here): the ping-pong entry points
    still build on each, so the GPU's must-fail run of `-k pingpong` tests the bug, not a compile error."""
    from classroom.must_fail import wrong_source
    (tmp_path / wp.PERSISTENT_SOURCE.name).write_text(wrong_source(fixture))
    source = tmp_path / wp.PINGPONG_SOURCE.name
    source.write_text(wp.PINGPONG_SOURCE.read_text())
    command = wp.nvcc_command(tmp_path / "wrong.cubin", runtime.nvcc_path(), source=source)
    command = [a for a in command if not a.startswith("-DWP_BODY=")]  # the wrong body beside it, not the stub's
    built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr


def test_the_turnless_fixture_is_there():
    assert "pingpong_without_turns" in {f.wrong.name for f in _kernel_fixtures()}


@pytest.fixture
def rule_says(monkeypatch):
    """The schedule rule answering from a fake table (no GPU measured it here), and the questions asked:
    ping-pong at 8192 x 768 x 3072 and for SwiGLU at 8192 x 4096 x 768 (256 wide, the tile a table from
    before the widths implies), cooperative 192 wide at 8192 x 768 x 768 (a width row)."""
    from course import dispatch
    from week1_cuda_python import matmul_wgmma_schedule as rule

    asked = []
    rows = {key: dispatch.Row(key, "pingpong", None, {}) for key in
            [(8192, 768, 3072, "bfloat16", "gemm"), (8192, 4096, 768, "bfloat16", "swiglu")]}
    rows[(8192, 768, 768, "bfloat16", "gemm")] = dispatch.Row((8192, 768, 768, "bfloat16", "gemm"), "cooperative",
                                                              {"bn": 192}, {})
    choose_build = rule.choose_build
    monkeypatch.setattr(rule, "choose_build", lambda *args: asked.append(args) or choose_build(*args, rows=rows))
    return asked


def test_launchers_ask_the_rule_when_no_schedule_is_named(recorded, rule_says):
    """schedule=None: the rule's choice per shape (and epilogue); a named schedule or the cluster rung: never asked."""
    import torch

    def zeros(*shape):
        return torch.zeros(*shape, dtype=torch.bfloat16, device=runtime.DEVICE)

    wp.launch_persistent(zeros(8192, 3072), zeros(3072, 768))
    wp.launch_persistent(zeros(4096, 4096), zeros(4096, 4096))
    assert [k[0] for k in recorded["kernels"]] == ["wgmma_pingpong_bf16", "wgmma_persistent_bf16"]
    assert [a[:3] for a in rule_says] == [(8192, 768, 3072), (4096, 4096, 4096)]
    wp.launch_persistent(zeros(8192, 3072), zeros(3072, 768), schedule="cooperative")
    wp.matmul_wgmma_persistent(zeros(8192, 3072), zeros(3072, 768))
    assert [k[0] for k in recorded["kernels"][2:]] == ["wgmma_persistent_bf16"] * 2 and len(rule_says) == 2
    wf.launch_fused(zeros(8192, 768), zeros(4096, 768), "swiglu")
    wf.launch_fused(zeros(8192, 768), zeros(4096, 768), "bias", zeros(4096))
    assert [k[0] for k in recorded["kernels"][4:]] == ["wgmma_linear_pingpong_swiglu_bf16", "wgmma_linear_bias_bf16"]
    assert rule_says[2:] == [(8192, 4096, 768, torch.bfloat16, "swiglu"), (8192, 4096, 768, torch.bfloat16, "bias")]


def test_the_torch_ops_ask_the_rule(recorded, rule_says):
    """wf.linear_swiglu (what the capstone's wgmma_gemms model calls) leaves the schedule to the rule."""
    import torch

    wf.linear_swiglu(torch.zeros(8, 1024, 768, dtype=torch.bfloat16, device=runtime.DEVICE), torch.zeros(4096, 768, dtype=torch.bfloat16, device=runtime.DEVICE))
    assert rule_says == [(8192, 4096, 768, torch.bfloat16, "swiglu")]
    assert recorded["kernels"][0][0] == "wgmma_linear_pingpong_swiglu_bf16"


# --- the tile width builds (launch_persistent's and launch_fused's `width`: -DWP_BN) -----------------

def _zeros(*shape, dtype=None):
    import torch
    return torch.zeros(*shape, dtype=dtype or torch.bfloat16, device=runtime.DEVICE)


@pytest.mark.parametrize("width", [192, 128])
@pytest.mark.parametrize("schedule", ["cooperative", "pingpong"])
def test_a_width_launch_asks_for_its_build(recorded, schedule, width):
    """The width's build (-DWP_BN), its shared memory (B's stage: width / 64 slabs), a grid of its tiles
    (300 x 520: 3 row tiles of 128 or 5 of 64, times 3 column tiles at 192 or 5 at 128); the tensor maps'
    boxes are the same at every width: 64-column slabs of B and 64 x 64 chunks of C, width / 64 of each."""
    wp.launch_persistent(_zeros(300, 328), _zeros(328, 520), schedule=schedule, width=width)
    tiles = wp.schedule_tiles(schedule, width)
    assert (tiles.bm, tiles.bn) == (64 if schedule == "pingpong" else 128, width)
    name, shared, defines, source = recorded["kernels"][0]
    assert name == ("wgmma_pingpong_bf16" if schedule == "pingpong" else "wgmma_persistent_bf16")
    assert (shared, defines) == (tiles.shared_bytes, (f"-DWP_BN={width}",))
    assert source == (wp.PINGPONG_SOURCE if schedule == "pingpong" else None)
    assert recorded["maps"] == [((300, 328), tiles.bm, 64), ((328, 520), 64, 64), ((300, 520), 64, 64)]
    tile_count = {("cooperative", 192): 3 * 3, ("cooperative", 128): 3 * 5, ("pingpong", 192): 5 * 3,
                  ("pingpong", 128): 5 * 5}[schedule, width]
    assert recorded["launches"][0] == {"kernel": name, "grid": (tile_count, 1, 1), "block": (384, 1, 1),
                                       "shared": tiles.shared_bytes}


@pytest.mark.parametrize("epilogue, width", [(e, w) for e in wf.EPILOGUES for w in (192, 128)
                                             if e != "swiglu" or w in wf.SWIGLU_WIDTHS])
def test_a_fused_width_launch_asks_for_its_build(recorded, epilogue, width):
    """The fused launcher at a width: the epilogue's entry point from that width's build, its shared memory,
    a grid of its tiles: 528 columns of x @ w.T are 3 tiles at 192, 5 at 128 (SwiGLU's F = 264: 5 of 64)."""
    import torch

    m, n, k = 300, 528, 328
    x, w = _zeros(m, k, dtype=torch.float16), _zeros(n, k, dtype=torch.float16)
    extra = epi.extra_operand(epilogue, m, n, lambda shape: _zeros(*shape, dtype=torch.float16))
    wf.launch_fused(x, w, epilogue, extra, width=width)
    assert recorded["kernels"][0] == (wf.kernel_name(epilogue, torch.float16), "cooperative", width)
    assert recorded["maps"] == [((m, k), 128, 64), ((n, k), 64, 64), ((m, epi.out_columns(epilogue, n)), 64, 64)]
    assert recorded["launches"][0]["grid"] == (3 * (3 if width == 192 else 5), 1, 1)
    assert recorded["launches"][0]["shared"] == wp.schedule_tiles("cooperative", width).shared_bytes


def test_the_rules_width_reaches_the_launch(recorded, rule_says):
    """schedule=None and width=None: the rule's build, width included (8192 x 768 x 768: cooperative, 192
    wide), for the plain GEMM and for a fused epilogue without a row of its own (its shape's plain GEMM
    row); SwiGLU passes that row over (192 does not split into halves of whole slabs): the default build.
    A named schedule alone: width 256, the rule not asked."""
    wp.launch_persistent(_zeros(8192, 768), _zeros(768, 768))
    assert recorded["kernels"][0][0] == "wgmma_persistent_bf16" and recorded["kernels"][0][2] == ("-DWP_BN=192",)
    wp.launch_persistent(_zeros(8192, 768), _zeros(768, 768), schedule="cooperative")
    assert recorded["kernels"][1][2] == () and len(rule_says) == 1
    wf.launch_fused(_zeros(8192, 768), _zeros(768, 768), "residual", _zeros(8192, 768))
    wf.launch_fused(_zeros(8192, 768), _zeros(768, 768), "swiglu")
    assert recorded["kernels"][2:] == [("wgmma_linear_residual_bf16", "cooperative", 192),
                                       ("wgmma_linear_swiglu_bf16", "cooperative", 256)]
    assert [a[4] for a in rule_says[1:]] == ["residual", "swiglu"]


def test_a_hang_of_the_turnless_kernel_is_cut_and_counts_as_rejected(monkeypatch):
    """The fixture's test run is killed after its hang_s (inside gpu_gemm_check.sh's 240 s step) and, with
    no test failed or passed, reported 'hung', a rejection: the tests never pass on a kernel that hangs."""
    import subprocess as sp

    from classroom import must_fail

    fixture = next(f for f in _kernel_fixtures() if f.wrong.name == "pingpong_without_turns")
    assert fixture.wrong.hang_s is not None and fixture.wrong.hang_s < 200
    waited = []

    def hangs(command, timeout=None, **kwargs):
        waited.append(timeout)
        raise sp.TimeoutExpired(command, timeout)

    monkeypatch.setattr(must_fail.subprocess, "run", hangs)
    result = must_fail.run_fixture(fixture)
    assert waited == [fixture.wrong.hang_s]
    assert result["ok"] and result["verdict"] == "hung", result
