"""The persistent wgmma GEMM with A column-major (`wgmma_persistent_a_col_*`): C = A @ B where A is given as
`at.t()`, the transpose of a row-major K x M tensor, as a weight gradient dW = dY^T X has dY (stored tokens x N).
The kernel loads A in 64 k x 64 m boxes, as it loads B, and wgmma transposes them as it reads (imm-trans-a).

Error model: test_matmul_wgmma_persistent.py's (the same fp32 accumulation and one rounding; its `check`), against
torch.matmul in float32 of the same inputs. A wrong slab, a missing transpose or a wrong k step gives errors of the
size of C itself, far past the bound; an unwritten element stays NaN (C is poisoned first).
"""
import re
import subprocess

import pytest
import torch

from course import runtime
from course.check import check_graph_replays, poisoned, random_tensor
from tests.week1 import wgmma_epilogues as epi
from tests.week1.test_matmul_wgmma_persistent import HOPPER, TOKENS, check
from week1_cuda_python.hopper_ptx import HOPPER_PTX_INCLUDE

wp = runtime.lesson("week1_cuda_python.matmul_wgmma_persistent")

DEVICE = runtime.DEVICE
hopper = pytest.mark.skipif(not HOPPER, reason="the wgmma_persistent rung needs an H100/H200 (compute capability 9.0)")
gpu = pytest.mark.gpu(reason="launches the sm_90a kernel")
nvcc = pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
DTYPES = [pytest.param(d, id=str(d).replace("torch.", "")) for d in wp.DTYPES]


def column_major(m: int, k: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    """An M x K operand stored column-major: the transpose of a fresh row-major K x M tensor."""
    return random_tensor((k, m), dtype, DEVICE, scale=scale).t()


def run(shape, dtype, **kwargs):
    m, n, k = shape
    a = column_major(m, k, dtype)
    assert not a.is_contiguous() and a.t().is_contiguous()
    b = random_tensor((k, n), dtype, DEVICE, scale=k**-0.5)  # C ~ N(0, 1) at any K
    out = poisoned((m, n), dtype, DEVICE)
    assert wp.launch_persistent(a, b, out, **kwargs) is out
    check(out, a, b)


# --- on the GPU (H100/H200) ----------------------------------------------------------------------

# (M, N, K), M a multiple of 8 (A's rows in memory are M long): one slab; a tile whose second slab is all outside
# A (136 = 128 + 8); partial tiles in M, N and K; K not a multiple of 64 with many ring wraps.
SMALL = [(8, 8, 8), (136, 264, 72), (200, 328, 1000), (64, 600, 4104)]
# The capstone's weight gradients dW = dY^T X (N x K = dY's columns x X's columns, over its 8192 tokens): qkv, the
# attention projection, fc, fc2 and the LM head.
WEIGHT_GRADIENTS = [(2304, 768, TOKENS), (768, 768, TOKENS), (3072, 768, TOKENS), (768, 3072, TOKENS),
                    (50304, 768, TOKENS)]


@gpu
@hopper
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SMALL, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("width", [pytest.param(w, id=f"bn{w}") for w in wp.WIDTHS])
def test_matches_float32_reference(width, shape, dtype):
    run(shape, dtype, width=width)


@gpu
@hopper
@pytest.mark.parametrize("shape", WEIGHT_GRADIENTS, ids=lambda s: "x".join(map(str, s)))
def test_weight_gradient_shapes(shape):
    run(shape, torch.bfloat16)


@gpu
@hopper
@pytest.mark.parametrize("blocks", [1, 3])
def test_one_block_walks_many_tiles(blocks):
    """7 x 4 = 28 tiles of 6 k steps (K = 328) on 1 or 3 blocks: the ring and the store buffers run on across tiles."""
    run((800, 1000, 328), torch.bfloat16, blocks=blocks)


@gpu
@hopper
def test_agrees_bit_for_bit_with_row_major_a():
    """The same m64n256k16 instructions over the same k order: where A sits in shared memory (K-major or MN-major)
    changes how wgmma reads it, not the products or their fp32 sums."""
    a = column_major(1000, 768, torch.bfloat16)
    b = random_tensor((768, 2304), torch.bfloat16, DEVICE)
    assert torch.equal(wp.matmul_wgmma_persistent(a, b), wp.matmul_wgmma_persistent(a.contiguous(), b))


@gpu
@hopper
def test_stores_stay_inside_c():
    """C a view 16 bytes into a poisoned buffer: the elements around it stay NaN."""
    m, n, k = 200, 328, 72
    a, b = column_major(m, k, torch.float16), random_tensor((k, n), torch.float16, DEVICE)
    buffer = poisoned(8 + m * n + 64 * n, torch.float16, DEVICE)
    out = buffer[8:8 + m * n].view(m, n)
    wp.launch_persistent(a, b, out)
    check(out, a, b)
    assert torch.isnan(buffer[:8]).all() and torch.isnan(buffer[8 + m * n:]).all(), "a store landed outside C"


@gpu
@hopper
def test_a_launch_captured_in_a_cuda_graph_computes_c_on_replay():
    """The capstone's backward runs in CUDA graphs: the launch is captured and each replay recomputes C."""
    a, b = column_major(768, TOKENS, torch.bfloat16), random_tensor((TOKENS, 768), torch.bfloat16, DEVICE,
                                                                    scale=TOKENS**-0.5)
    out = poisoned((768, 768), torch.bfloat16, DEVICE)
    check_graph_replays(lambda: wp.launch_persistent(a, b, out), out, lambda: check(out, a, b))


@gpu
@hopper
def test_nan_and_inf_propagate_like_torch():
    a, b = column_major(16, 8, torch.float16), random_tensor((8, 16), torch.float16, DEVICE)
    a[0, 0], a[2, 1], b[1, 3] = float("nan"), float("inf"), -float("inf")
    c, want = wp.matmul_wgmma_persistent(a, b), torch.matmul(a, b)
    assert torch.equal(torch.isnan(c), torch.isnan(want)) and torch.equal(torch.isinf(c), torch.isinf(want))


# --- anywhere: which kernel and boxes the launcher asks for, refusals, the source ----------------

def _zeros(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16, device=runtime.DEVICE)


@pytest.mark.parametrize("width", wp.WIDTHS)
def test_column_major_a_asks_for_the_a_col_kernel(recorded, width, monkeypatch):
    """dW of the attention projection, 768 x 768 over 8192 tokens: A's map is over the K x M tensor in 64 x 64 boxes,
    the a_col entry of the cooperative build at the width asked for; the schedule rule (measured for row-major A)
    is not asked."""
    from week1_cuda_python import matmul_wgmma_schedule as rule
    monkeypatch.setattr(rule, "choose_build", lambda *args: pytest.fail("the rule was asked for a column-major A"))
    dy, x = _zeros(TOKENS, 768), _zeros(TOKENS, 768)
    wp.launch_persistent(dy.t(), x, width=None if width == 256 else width)
    tiles = wp.schedule_tiles("cooperative", width)
    assert recorded["maps"] == [((TOKENS, 768), 64, 64), ((TOKENS, 768), 64, 64), ((768, 768), 64, 64)]
    assert recorded["kernels"] == [("wgmma_persistent_a_col_bf16", tiles.shared_bytes, tiles.defines(), None)]
    assert recorded["launches"][0]["grid"] == (6 * 768 // width, 1, 1)  # 6 row tiles x 768 / width column tiles


def test_row_major_and_one_column_a_keep_the_row_major_kernel(recorded):
    """A tensor with one row is both row- and column-major: the row-major entry takes it (its map is A itself)."""
    wp.matmul_wgmma_persistent(_zeros(TOKENS, 768), _zeros(768, 768))
    wp.matmul_wgmma_persistent(_zeros(8, 1).t(), _zeros(8, 8))
    assert [k[0] for k in recorded["kernels"]] == ["wgmma_persistent_bf16"] * 2
    assert recorded["maps"][3] == ((1, 8), 128, 64)


@pytest.mark.parametrize("kwargs", [{"cluster": 2}, {"schedule": "pingpong"}], ids=["cluster", "pingpong"])
def test_other_schedules_refuse_a_column_major_a(kwargs, monkeypatch):
    monkeypatch.setattr(wp, "_kernel", lambda *args: pytest.fail("launched a column-major A on another schedule"))
    with pytest.raises(ValueError, match="column-major a .* runs the cooperative schedule without clusters"):
        wp.launch_persistent(_zeros(64, 16).t(), _zeros(64, 8), **kwargs)


@nvcc
@pytest.mark.nvcc
def test_only_the_a_col_entries_transpose_a(tmp_path):
    """In the PTX, the a_col entries' wgmmas carry imm-trans-a = 1 and every other entry's 0 (both read B MN-major:
    trans-b 1); in the SASS, HGMMA's descriptor operand is marked .tnspA in the a_col functions only."""
    wp.refuse_open_hole()
    ptx = tmp_path / "wp.ptx"
    subprocess.run([runtime.nvcc_path(), "-ptx", "-arch=compute_90a", *HOPPER_PTX_INCLUDE, "-o", str(ptx),
                    str(wp.PERSISTENT_SOURCE)], check=True, capture_output=True)
    entries = re.split(r"\.entry ", ptx.read_text())[1:]
    flags = {text.split("(")[0]: set(re.findall(r"wgmma\.mma_async[^;]*?p, 1, 1, (\d), (\d);", text, re.S))
             for text in entries}
    assert {name for name in flags if "a_col" in name} == {"wgmma_persistent_a_col_f16", "wgmma_persistent_a_col_bf16"}
    for name, found in flags.items():
        assert found == ({("1", "1")} if "a_col" in name else {("0", "1")}), (name, found)
    cubin = tmp_path / "wp.cubin"
    subprocess.run(wp.nvcc_command(cubin, runtime.nvcc_path()), check=True, capture_output=True)
    tool = epi.cuobjdump()
    assert tool, "no cuobjdump (CUDA toolkit or Triton's copy): the SASS cannot be checked"
    sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    for text in re.split(r"\n\s*Function : ", sass)[1:]:
        hgmma = re.findall(r"HGMMA\.\S+ \S+ gdesc\[\w+\]([.\w]*)", text)
        assert hgmma and set(hgmma) == ({".tnspA.tnspB"} if "a_col" in text.split()[0] else {".tnspB"}), text.split()[0]
