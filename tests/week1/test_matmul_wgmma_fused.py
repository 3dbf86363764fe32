"""week1_cuda_python.matmul_wgmma_fused: the persistent wgmma GEMM with fused epilogues (bias,
residual, SwiGLU), on nn.Linear's weight layout, against a float64 reference.

Error model. The products x_ik w_jk are exact in fp32 (11 + 11 significant bits), so the kernel's
fp32 accumulator differs from the exact dot product by its accumulation error alone, bounded as in
test_matmul_wgmma_persistent.py by E = 4 u sqrt(K) max (|x| @ |w|.T) (u = 2^-24; 4: truncating
additions inside the tensor cores and room for the sqrt(K) growth). The epilogue works in fp32:
  bias, residual: one more fp32 add, at most u |v|;
  SwiGLU: silu(g + e_g) (u + e_u) with |e_g|, |e_u| <= E; silu' lies in [-0.1, 1.1], so the error is
  at most 1.1 E |u| + |silu(g)| E + 1.1 E^2, plus the fp32 arithmetic of silu (__expf: a few ulps;
  2^-20 relative covers it).
Then C is rounded once to fp16 (rtol 2^-11, plus half the smallest subnormal) or bf16 (2^-8). The
reference is float64 from the same fp16/bf16 inputs. An unwritten element stays NaN (every output
is poisoned first); a dropped k step or a wrong tile is far past the bound.
"""
import math
import re
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, poisoned, random_tensor
from tests.week1 import wgmma_epilogues as epi
from week1_cuda_python.hopper_ptx import HOPPER_PTX_INCLUDE  # the -I of every Hopper build

wf = runtime.lesson("week1_cuda_python.matmul_wgmma_fused")
wp_tiles = runtime.lesson("week1_cuda_python.matmul_wgmma_persistent").schedule_tiles  # a build's tiles and -D flags

DEVICE = runtime.DEVICE
U32 = 2.0**-24
ROUNDING = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
SUBNORMAL = {torch.float16: 2.0**-25, torch.bfloat16: 0.0}
HOPPER = runtime.on_gpu() and wf.unsupported(torch.cuda.get_device_capability()) is None
hopper = pytest.mark.skipif(not HOPPER, reason="the fused wgmma GEMMs need an H100/H200 (compute capability 9.0)")
gpu = pytest.mark.gpu(reason="launches the sm_90a kernels")
nvcc = pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
DTYPES = [pytest.param(d, id=str(d).replace("torch.", "")) for d in wf.DTYPES]
EPILOGUES = list(wf.EPILOGUES)
SCHEDULES = list(wf.SCHEDULES)  # cooperative (the default) and ping-pong (kernels/matmul_wgmma_pingpong.cu)
TOKENS = 8 * 1024  # the capstone's batch of 8 x 1024 tokens


def inputs(m, n, k, dtype, epilogue):
    """x (M x K), w (N x K) scaled by 1/sqrt(K) (outputs ~ N(0, 1) at any K), the epilogue's operand."""
    x = random_tensor((m, k), dtype, DEVICE)
    w = random_tensor((n, k), dtype, DEVICE, scale=k**-0.5)
    return x, w, epi.extra_operand(epilogue, m, n, lambda shape: random_tensor(shape, dtype, DEVICE))


def check(c, x, w, epilogue, extra):
    """C against float64 with the module docstring's bound, element by element."""
    x64, w64 = x.double(), w.double()
    h = x64 @ w64.t()
    e = 4 * U32 * math.sqrt(x.shape[1]) * (x64.abs() @ w64.abs().t()).max().item()
    if epilogue == "swiglu":
        gate, up = h.chunk(2, dim=-1)
        silu = F.silu(gate)
        want = silu * up
        bound = 1.1 * e * up.abs() + e * silu.abs() + 1.1 * e * e + 2.0**-20 * want.abs()
    else:
        want = h + extra.double() if extra is not None else h
        bound = e + U32 * (want.abs() + e)
    rtol = ROUNDING[c.dtype]
    bound = bound * (1 + rtol) + rtol * want.abs() + SUBNORMAL[c.dtype]
    ok = (c.double() - want).abs() <= bound  # False where c is NaN (poison)
    if bool(ok.all()):
        return
    rows = (~ok).any(dim=1).nonzero().flatten()[:64]
    assert_close(c[rows].double(), want[rows], rtol=rtol, atol=bound[rows].max().item(),
                 name=f"C ({epilogue}, rows {rows.tolist()[:8]}...)")
    raise AssertionError(f"{int((~ok).sum())} elements of C ({epilogue}) are out of bounds")


def run(shape, dtype, epilogue, **kwargs):
    m, n, k = shape
    x, w, extra = inputs(m, n, k, dtype, epilogue)
    out = epi.poisoned_out(epilogue, m, n, dtype, DEVICE)
    assert wf.launch_fused(x, w, epilogue, extra, out, **kwargs) is out
    check(out, x, w, epilogue, extra)


# --- on the GPU (H100/H200) ----------------------------------------------------------------------

# (M, N, K): one tile; less than a tile; partial tiles in M and N, K one stage + a bit; many ring
# wraps with K not a multiple of 64; SwiGLU's F = 168 (a second tile whose gate slab runs into the
# up rows) and F = 8.
SMALL = [(128, 256, 64), (1, 16, 8), (129, 272, 72), (300, 336, 1000), (7, 528, 4104), (1000, 16, 64)]
# The capstone's GEMMs at 8 x 1024 tokens: qkv, attention projection (+ residual), MLP up (SwiGLU:
# [gate | up] = 2 x 2048), MLP down (K = 2048, + residual), LM head.
LARGE = [(TOKENS, 2304, 768), (TOKENS, 768, 768), (TOKENS, 4096, 768), (TOKENS, 768, 2048), (TOKENS, 50304, 768)]


@gpu
@hopper
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SMALL + LARGE, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_matches_float64_reference(schedule, epilogue, shape, dtype):
    if epilogue == "swiglu" and shape[1] % 16:
        pytest.fail("every shape here has N a multiple of 16 (SwiGLU's F a multiple of 8)")
    run(shape, dtype, epilogue, schedule=schedule)


# The tile width builds (-DWP_BN=192, 128; SwiGLU at 128 only: its refusal at 192 is a CPU test): odd shapes
# (partial tiles in M, N and K: 400 columns are 2 tiles of 192 + 16, 3 of 128 + 16; SwiGLU's F = 200 is 3 tiles
# of 64 + 8, F = 392 six + 8) and the capstone's GEMMs at N = 768 (the attention projection, MLP down at K =
# 3072) and its MLP up (N = 2 x 2048, not a multiple of 192).
WIDTH_SHAPES = [(1, 16, 8), (129, 400, 72), (300, 528, 1000), (7, 784, 4104), (TOKENS, 768, 768),
                (TOKENS, 768, 3072), (TOKENS, 4096, 768)]
WIDTH_CASES = [pytest.param(w, e, id=f"bn{w}-{e}") for w in wf.WIDTHS[1:] for e in EPILOGUES
               if e != "swiglu" or w in wf.SWIGLU_WIDTHS]
# The default run: bf16 at one tiny, one odd and the capstone's down and up shapes; the rest (fp16 included,
# the same kernel text per dtype) is `pytest -m slow`, so week 1's default GPU run stays within its minutes.
DEFAULT_WIDTH_SHAPES = {(1, 16, 8), (300, 528, 1000), (TOKENS, 768, 3072), (TOKENS, 4096, 768)}
WIDTH_SHAPE_DTYPES = [pytest.param(shape, dtype, id=f"{'x'.join(map(str, shape))}-{str(dtype)[6:]}",
                                   marks=() if shape in DEFAULT_WIDTH_SHAPES and dtype == torch.bfloat16
                                   else pytest.mark.slow)
                      for shape in WIDTH_SHAPES for dtype in wf.DTYPES]


@gpu
@hopper
@pytest.mark.parametrize("shape, dtype", WIDTH_SHAPE_DTYPES)
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("width, epilogue", WIDTH_CASES)
def test_width_builds_match_float64_reference(width, epilogue, schedule, shape, dtype):
    run(shape, dtype, epilogue, schedule=schedule, width=width)


@gpu
@hopper
@pytest.mark.parametrize("blocks", [1, 3])
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("width, epilogue", WIDTH_CASES)
def test_width_builds_walk_many_tiles(width, epilogue, schedule, blocks):
    """test_one_block_walks_many_tiles at each width: 1008 columns of x @ w.T are 6 tiles of 192 (the last
    48 wide) or 8 of 128 (SwiGLU: F = 504, 8 tiles of 64, the last 56)."""
    run((800, 1008, 328), torch.bfloat16, epilogue, blocks=blocks, schedule=schedule, width=width)


@gpu
@hopper
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("blocks", [1, 3])
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_one_block_walks_many_tiles(schedule, epilogue, blocks):
    """7 x 4 tiles of 6 k steps (K = 328; ping-pong: 13 x 4 of 64 rows): the ring's position and the
    store buffers run on across tiles (ping-pong: each consumer skipping the other's positions)."""
    run((800, 1008, 328), torch.bfloat16, epilogue, blocks=blocks, schedule=schedule)


@gpu
@hopper
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_residual_in_place(schedule):
    """out is the residual: each element is read by the thread that later stores it, and by no other block."""
    x, w, r = inputs(300, 336, 200, torch.float16, "residual")
    want = r.clone()
    out = wf.launch_fused(x, w, "residual", r, out=r, schedule=schedule)
    assert out is r
    check(out, x, w, "residual", want)


@gpu
@hopper
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_stores_stay_inside_c(schedule, epilogue):
    """C is a view 16 bytes into a poisoned buffer: the TMA store clips at M and C's columns."""
    m, n, k = 200, 336, 72
    x, w, extra = inputs(m, n, k, torch.float16, epilogue)
    cols = epi.out_columns(epilogue, n)
    buffer = poisoned(8 + m * cols + 64 * cols, torch.float16, DEVICE)
    out = buffer[8:8 + m * cols].view(m, cols)
    wf.launch_fused(x, w, epilogue, extra, out, schedule=schedule)
    check(out, x, w, epilogue, extra)
    assert torch.isnan(buffer[:8]).all() and torch.isnan(buffer[8 + m * cols:]).all(), "a store landed outside C"


@gpu
@hopper
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_same_answer_twice(schedule, epilogue):
    x, w, extra = inputs(2048, 2304, 1024, torch.bfloat16, epilogue)
    first = wf.launch_fused(x, w, epilogue, extra, schedule=schedule)
    for _ in range(3):
        assert torch.equal(wf.launch_fused(x, w, epilogue, extra, schedule=schedule), first)
    if schedule == "pingpong":  # the same instructions per row in the same k order: the same bits
        assert torch.equal(wf.launch_fused(x, w, epilogue, extra), first)


def _op_call(epilogue, x, w, extra):
    fn = {"none": wf.linear, "bias": wf.linear_bias, "residual": wf.linear_residual, "swiglu": wf.linear_swiglu}
    return fn[epilogue](x, w) if extra is None else fn[epilogue](x, w, extra)


def backward_bounds(x, w, g, epilogue, rtol):
    """Element bounds on |dx|, |dw| of the op's backward against float64 (float64 in, float64 out).
    dh (the gradient at x @ w.T): g itself, or for SwiGLU computed in fp32 from gate and up recomputed
    in x's dtype (each rounded once: rtol) and rounded once more: with silu' <= 1.1 and silu'' <= 0.5,
    |err dh_gate| <= rtol |g| |up| (2.2 + 0.5 |gate|), |err dh_up| <= rtol |g| (|silu(gate)| + 1.1 |gate|).
    Then cuBLAS: dx = dh @ w, dw = dh.T @ x, each with fp32 accumulation and one rounding."""
    x64, w64, g64 = x.double().reshape(-1, x.shape[-1]), w.double(), g.double().reshape(-1, g.shape[-1])
    if epilogue == "swiglu":
        gate, up = (x64 @ w64.t()).chunk(2, dim=-1)
        s = torch.sigmoid(gate)
        dh = torch.cat([g64 * up * s * (1 + gate * (1 - s)), g64 * gate * s], dim=-1).abs()
        err = rtol * torch.cat([g64.abs() * up.abs() * (2.2 + 0.5 * gate.abs()),
                                g64.abs() * (F.silu(gate).abs() + 1.1 * gate.abs())], dim=-1)
    else:
        dh, err = g64.abs(), torch.zeros_like(g64)
    bounds = []
    for a, b in ((dh, w64.abs()), (dh.t(), x64.abs())):  # dx = dh @ w, dw = dh.T @ x
        mag = a @ b
        k = a.shape[1]
        e_a = err if a is dh else err.t()
        bounds.append(e_a @ b + 4 * U32 * math.sqrt(k) * mag + rtol * mag)
    return bounds


@gpu
@hopper
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_backward_matches_float64(epilogue):
    """Gradients of the op (3-D x, as a model calls it) against float64 autograd of the reference,
    within `backward_bounds` (dx, dw) and, for the bias and residual, the one rounding of g's sum or g."""
    dtype = torch.bfloat16
    rtol = ROUNDING[dtype]
    x, w, extra = inputs(2 * 150, 336, 264, dtype, epilogue)
    x = x.view(2, 150, 264)
    extra = extra.view(2, 150, 336) if epilogue == "residual" else extra
    leaves = [t.detach().requires_grad_() for t in (x, w, extra) if t is not None]
    out = _op_call(epilogue, *leaves, *([None] if extra is None else []))
    g = random_tensor(out.shape, dtype, DEVICE)
    out.backward(g)
    ref = [t.detach().double().requires_grad_() for t in leaves]
    want = wf.reference(ref[0].reshape(-1, 264), ref[1], epilogue,
                        ref[2].reshape(-1, 336) if epilogue == "residual" else (ref[2] if len(ref) > 2 else None))
    want.backward(g.double().reshape(want.shape))
    bound_dx, bound_dw = backward_bounds(x, w, g, epilogue, rtol)
    for name, got, want_, bound in (("dx", leaves[0], ref[0], bound_dx.reshape(x.shape)), ("dw", leaves[1], ref[1], bound_dw)):
        ok = (got.grad.double() - want_.grad).abs() <= bound
        assert bool(ok.all()), f"{name}: {int((~ok).sum())} elements out of bounds"
    if len(leaves) > 2:  # dbias = g summed over rows (fp32 sums, one rounding); dresidual = g exactly
        m = g.numel() // g.shape[-1]
        gsum = g.double().reshape(-1, g.shape[-1]).abs().sum(0)
        bound = (rtol + m * U32) * gsum if epilogue == "bias" else torch.zeros_like(ref[2].grad)
        assert bool(((leaves[2].grad.double() - ref[2].grad).abs() <= bound).all()), "d" + epilogue


@gpu
@hopper
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_opcheck_and_compile_without_graph_breaks(epilogue):
    x, w, extra = inputs(64, 272, 128, torch.bfloat16, epilogue)
    op = {"none": wf.linear_op, "bias": wf.linear_bias_op, "residual": wf.linear_residual_op,
          "swiglu": wf.linear_swiglu_op}[epilogue]
    args = (x, w) if extra is None else (x, w, extra)
    torch.library.opcheck(op, args)
    compiled = torch.compile(lambda *a: _op_call(epilogue, *a, *([None] if extra is None else [])), fullgraph=True)
    assert torch.equal(compiled(*args), _op_call(epilogue, *args, *([None] if extra is None else [])))


@gpu
@hopper
@pytest.mark.parametrize("name", list(wf.SANITIZER_CASES))
def test_sanitizer_cases_run(name):
    wf.SANITIZER_CASES[name]()


# --- anywhere: input checks, refusals, fake shapes, the source ------------------------------------

def bad_inputs():
    ok = lambda *s: torch.ones(*s, device=DEVICE, dtype=torch.float16)  # noqa: E731
    yield "x not a tensor", TypeError, "x must be a torch.Tensor", lambda: ([[1.0]], ok(8, 8), "none", None, None)
    yield "x float32", TypeError, "x has dtype float32", lambda: (ok(8, 8).float(), ok(8, 8), "none", None, None)
    yield "dtypes differ", TypeError, "dtypes must match", lambda: (ok(8, 8), ok(8, 8).bfloat16(), "none", None, None)
    yield "w not N x K", ValueError, "w must be \\(N, K\\)", lambda: (ok(8, 16), ok(16, 8), "none", None, None)
    yield "epilogue", ValueError, "epilogue must be one of", lambda: (ok(8, 8), ok(8, 8), "gelu", None, None)
    yield "swiglu odd rows", ValueError, "w must stack the gate and up", lambda: (ok(8, 8), ok(24, 8), "swiglu", None, None)
    yield "bias missing", TypeError, "bias must be a torch.Tensor", lambda: (ok(8, 8), ok(16, 8), "bias", None, None)
    yield "bias shape", ValueError, "bias has shape \\(8,\\); expected \\(16,\\)", \
        lambda: (ok(8, 8), ok(16, 8), "bias", ok(8), None)
    yield "bias dtype", TypeError, "bias has dtype bfloat16", \
        lambda: (ok(8, 8), ok(16, 8), "bias", ok(16).bfloat16(), None)
    yield "residual shape", ValueError, "residual has shape", lambda: (ok(8, 8), ok(16, 8), "residual", ok(16, 8), None)
    yield "residual odd start", ValueError, "residual starts 2 bytes past a 4-byte boundary", \
        lambda: (ok(8, 8), ok(16, 8), "residual", ok(1 + 128)[1:].view(8, 16), None)
    yield "extra for none", ValueError, "takes no extra operand", lambda: (ok(8, 8), ok(16, 8), "none", ok(16), None)
    yield "out shape", ValueError, "out has shape", lambda: (ok(8, 8), ok(16, 8), "swiglu", None, ok(8, 16))
    yield "K = 12", ValueError, "x has rows of 24 bytes.*week3_triton_kernels.matmul", \
        lambda: (ok(8, 12), ok(16, 12), "none", None, None)
    yield "N = 20", ValueError, "out has rows of 40 bytes.*Triton", lambda: (ok(8, 8), ok(20, 8), "none", None, None)
    yield "x transposed", ValueError, "x is not contiguous", lambda: (ok(16, 8).t(), ok(16, 16), "none", None, None)
    yield "wrong device", ValueError, "kernels run on", \
        lambda: (torch.ones(8, 8, device="meta", dtype=torch.float16), ok(8, 8), "none", None, None)
    yield "schedule", ValueError, "schedule must be one of", lambda: (ok(8, 8), ok(8, 8), "none", None, None, None, "pp")
    # the tile width: one of the builds (-DWP_BN), an int; SwiGLU's halves need whole 64-column slabs
    for width in (512, 64, 192.0, True):
        yield f"width {width!r}", ValueError, r"width must be one of \(256, 192, 128\)", \
            lambda width=width: (ok(8, 8), ok(8, 8), "none", None, None, None, None, width)
    yield "swiglu width 192", ValueError, r"width=192 cannot run the swiglu epilogue.*\(256, 128\)", \
        lambda: (ok(8, 8), ok(16, 8), "swiglu", None, None, None, "pingpong", 192)


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make, monkeypatch):
    launched = []
    monkeypatch.setattr(wf, "_kernel", lambda *a: launched.append(a))
    with pytest.raises(error, match=message):
        wf.launch_fused(*make())
    assert not launched


@pytest.mark.parametrize("capability", [(7, 5), (8, 0), (8, 9), (10, 0), (12, 0)], ids=lambda c: f"sm_{c[0]}{c[1]}")
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_refused_off_hopper_naming_the_triton_fallback(capability, epilogue, monkeypatch):
    monkeypatch.setattr(runtime, "capability", lambda device=None: capability)
    x = torch.ones(16, 16, device=DEVICE, dtype=torch.float16)
    w = torch.ones(32, 16, device=DEVICE, dtype=torch.float16)
    extra = epi.extra_operand(epilogue, 16, 32, lambda shape: torch.ones(shape, device=DEVICE, dtype=torch.float16))
    with pytest.raises(RuntimeError, match=rf"compute capability {capability[0]}\.{capability[1]}.*"
                                           r"week3_triton_kernels\.matmul\.matmul \(Triton"):
        wf.launch_fused(x, w, epilogue, extra)


def test_the_named_fallback_exists():
    from week3_triton_kernels import matmul
    assert callable(matmul.matmul) and "bias" in matmul.matmul.__code__.co_varnames


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("lead", [(4096,), (8, 1024), (3, 5)], ids=lambda s: "x".join(map(str, s)))
def test_fake_impl_shapes(epilogue, lead):
    """What torch.compile sees without running anything: (..., N), or (..., N / 2) for SwiGLU."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(*lead, 768, dtype=torch.bfloat16)
        w = torch.empty(4096, 768, dtype=torch.bfloat16)
        extra = {"bias": torch.empty(4096, dtype=torch.bfloat16),
                 "residual": torch.empty(*lead, 4096, dtype=torch.bfloat16)}.get(epilogue)
        out = _op_call(epilogue, x, w, extra)
    assert tuple(out.shape) == (*lead, 2048 if epilogue == "swiglu" else 4096) and out.dtype == torch.bfloat16


def test_every_epilogue_has_an_entry_point():
    source = wf.FUSED_SOURCE.read_text()
    entries = set(re.findall(r"^WF_ENTRY\((\w+),", source, re.MULTILINE))
    assert entries == {wf.kernel_name(e, d) for e in wf.EPILOGUES for d in wf.DTYPES}


@nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("width", wf.WIDTHS)
def test_every_variant_compiles_for_sm_90a_with_the_launchers_command(width, tmp_path):
    """The launcher's own nvcc command (warnings as errors) builds all 8 entry points without spills at
    every tile width (its -DWP_BN; at 192 the 6 without SwiGLU, whose halves need whole slabs); the SASS
    holds the width's warpgroup MMA (HGMMA), TMA loads (UTMALDG) and the epilogue's TMA stores (UTMASTG)."""
    wf.refuse_open_hole()  # the stub (--impl=exercises) with a hole open: 'not implemented yet'
    cubin = tmp_path / "wf.cubin"
    defines = wp_tiles("cooperative", width).defines()
    built = subprocess.run(wf.nvcc_command(cubin, runtime.nvcc_path(), None, defines) + ["-Xptxas", "-v"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    epilogues = [e for e in wf.EPILOGUES if e != "swiglu" or width in wf.SWIGLU_WIDTHS]
    assert built.stderr.count("0 bytes spill stores, 0 bytes spill loads") == 2 * len(epilogues), built.stderr
    for e in wf.EPILOGUES:
        for d in wf.DTYPES:
            entry = f"Compiling entry function '{wf.kernel_name(e, d)}' for 'sm_90a'"
            assert (entry in built.stderr) == (e in epilogues), entry
    tool = epi.cuobjdump()
    assert tool, "no cuobjdump (CUDA toolkit or Triton's copy): the SASS cannot be checked"
    sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    functions = re.split(r"\n\s*Function : ", sass)[1:]
    assert len(functions) == 2 * len(epilogues)
    for text in functions:
        name = text.split()[0]
        assert set(re.findall(r"HGMMA\.64x(\d+)x16", text)) == {str(width)}, name
        for opcode in (f"HGMMA.64x{width}x16.F32", "UTMALDG.2D", "UTMASTG.2D", "USETMAXREG"):
            assert opcode in text, f"{opcode} is missing from the SASS of {name}"
        if "swiglu" in name:
            assert "MUFU.EX2" in text, f"{name}: silu's exponential is missing"


def test_built_on_a_body_with_a_hole_open_is_refused_before_nvcc(monkeypatch):
    """The fused entry points include the body (-DWP_BODY under --impl=exercises): with the body's exercise
    stub, holes open, the launcher refuses the build before nvcc is asked (course/holes.py)."""
    import sys
    body = sys.modules[wf.refuse_open_hole.__module__]  # the persistent rung's, which knows the body's path
    stub = Path(__file__).resolve().parents[2] / "week1_cuda_python/exercises/kernels/matmul_wgmma_persistent.cu"
    monkeypatch.setattr(body, "PERSISTENT_SOURCE", stub)
    monkeypatch.setattr(runtime, "nvcc_path", lambda: pytest.fail("nvcc was asked"))
    with pytest.raises(NotImplementedError, match=r"not implemented yet: .*matmul_wgmma_persistent.cu line \d+ has a hole open"):
        wf._module.__wrapped__()


@nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_source_compiles_as_a_stub_elsewhere(arch, tmp_path):
    built = subprocess.run([runtime.nvcc_path(), "-cubin", f"-arch={arch}", "-Werror", "all-warnings",
                            *HOPPER_PTX_INCLUDE, "-o", str(tmp_path / "x.cubin"), str(wf.FUSED_SOURCE)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr


class _Ctx:
    """What setup_context saved, as the backward functions read it (they are plain torch)."""
    def __init__(self, x, w):
        self.saved_tensors, self.needs_input_grad = (x, w), (True, True, True)


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_formulas_match_float64(epilogue, dtype):
    """The ops' backward (cuBLAS and torch, no custom kernel: it runs on the CPU too) against float64
    autograd of the reference, within `backward_bounds`; swiglu_grad is the exercise."""
    rtol = ROUNDING[dtype]
    x, w, extra = inputs(2 * 50, 336, 264, dtype, epilogue)
    x = x.view(2, 50, 264).to(DEVICE)
    g = random_tensor((2, 50, 168 if epilogue == "swiglu" else 336), dtype, DEVICE)
    backward = {"none": wf._linear_backward, "bias": wf._bias_backward, "residual": wf._residual_backward,
                "swiglu": wf._swiglu_backward}[epilogue]
    grads = backward(_Ctx(x, w), g)
    ref = [t.detach().double().requires_grad_() for t in (x, w, extra) if t is not None]
    want = wf.reference(ref[0].reshape(-1, 264), ref[1], epilogue,
                        ref[2].reshape(-1, 336) if epilogue == "residual" else (ref[2] if len(ref) > 2 else None))
    want.backward(g.double().reshape(want.shape))
    bound_dx, bound_dw = backward_bounds(x, w, g, epilogue, rtol)
    for name, got, want_, bound in (("dx", grads[0], ref[0].grad, bound_dx.reshape(x.shape)),
                                    ("dw", grads[1], ref[1].grad, bound_dw)):
        assert got.shape == want_.shape and got.dtype == dtype, name
        ok = (got.double() - want_).abs() <= bound
        assert bool(ok.all()), f"{name}: {int((~ok).sum())} elements out of bounds (max error " \
                               f"{(got.double() - want_).abs().max().item():.3g})"


@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_the_ops_refuse_off_hopper_too(epilogue, monkeypatch):
    """Through the registered op (3-D x, as a model calls it), the same refusal before any launch."""
    monkeypatch.setattr(runtime, "capability", lambda device=None: (8, 0))
    x = torch.ones(2, 8, 16, device=DEVICE, dtype=torch.bfloat16)
    w = torch.ones(32, 16, device=DEVICE, dtype=torch.bfloat16)
    extra = epi.extra_operand(epilogue, 2 * 8, 32, lambda s: torch.ones(s, device=DEVICE, dtype=torch.bfloat16))
    extra = extra.view(2, 8, 32) if epilogue == "residual" else extra  # the residual is shaped like the output
    with pytest.raises(RuntimeError, match=r"compute capability 8\.0.*week3_triton_kernels\.matmul\.matmul"):
        _op_call(epilogue, x, w, extra)
