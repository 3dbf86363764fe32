"""week4_triton_dl.attention.hopper_backward: the sm_90a CUDA C backward (wgmma + TMA) against float64 autograd.

On an H100/H200: dq, dk, dv for ragged S (1, 63, 129, 1000: one query row; less than a query block; a key
block plus one key; many blocks with a ragged last one), causal and not, D 64 and 128, fp16 and bf16,
written into poisoned outputs with a poisoned dQ accumulator (so an element no kernel wrote, or an
accumulator the preprocess kernel failed to zero, fails). o and lse come from a float64 torch forward
(`reference_forward`), so these tests do not depend on any forward kernel. Tolerances: the error model of
attention_naive.attention_error_bounds (worst-case roundings, with a factor 2 of margin), the one week 4's
Triton backward is held to. Every GPU test runs both builds: dQ added by TMA reduce-adds of shared-memory tiles
(the default) and by per-element atomics (dq_tma=False, -DAHB_DQ_TMA=0, the benchmark's A/B variant).

Anywhere (CPU CI): bad input is refused before anything is built or launched; off an sm_90 GPU (or on the
CPU) the call is refused naming the fallback, week 4's Triton backward; nvcc compiles the .cu for sm_90a
with the launcher's own command (no spills; the PTX and, where cuobjdump exists, the SASS hold the wgmma /
TMA instructions), for both builds, and as a trapping stub for other targets.
"""
import math
import re
import shutil
import subprocess

import pytest
import torch

from course import runtime
from course.check import poisoned, random_tensor
from week1_cuda_python.hopper_ptx import HOPPER_PTX_INCLUDE  # the -I of every Hopper build
from tests.week4.attention_helpers import assert_within

from week4_triton_dl.attention import hopper_backward as hb
from week4_triton_dl.attention import naive as an  # the float64 reference and its error model

DEVICE = runtime.DEVICE
HOPPER = runtime.on_gpu() and hb.unsupported(torch.cuda.get_device_capability()) is None
hopper = pytest.mark.skipif(not HOPPER, reason="the Hopper attention backward needs an H100/H200 "
                                               "(compute capability 9.0, sm_90a)")
gpu = pytest.mark.gpu(reason="launches the sm_90a CUDA C kernels (a CUDA extension)")
nvcc = pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
DTYPES = [pytest.param(d, id=str(d).replace("torch.", "")) for d in hb.DTYPES]
SEQS = (1, 63, 129, 1000)
DQ_TMA = [pytest.param(True, id="dq_tma"), pytest.param(False, id="dq_atomics")]


def heads_for(S):
    """(B, H): two of each where it is cheap, fewer at S = 1000 (the float64 reference is S^2 per head)."""
    return (2, 2) if S < 1000 else (1, 2)


def run_and_check(B, H, S, D, dtype, causal, scale=None, dq_tma=True):
    scale = D**-0.5 if scale is None else scale
    q, k, v, do = (random_tensor((B, H, S, D), dtype, DEVICE) for _ in range(4))
    o, lse = hb.reference_forward(q, k, v, causal, scale)
    grads = tuple(poisoned(q.shape, dtype, DEVICE) for _ in range(3))
    acc = poisoned(q.shape, torch.float32, DEVICE)
    got = hb.attention_hopper_backward(q, k, v, o, do, lse, causal, scale, grads=grads, dq_accum=acc, dq_tma=dq_tma)
    assert all(g is w for g, w in zip(got, grads)), "the launcher must write into the `grads` it was given"
    bounds = an.attention_error_bounds(q, k, v, do, causal, scale)
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    out = an.attention_reference(qd, kd, vd, causal, scale)
    wanted = torch.autograd.grad(out, (qd, kd, vd), do.double())
    for name, g, w in zip(("dq", "dk", "dv"), got, wanted):
        assert g.dtype == dtype and g.shape == w.shape
        assert_within(g, w, bounds[name], name)
    return q, k, v, o, do, lse, got


# --- on the GPU (H100/H200) ---------------------------------------------------------------------------------

@gpu
@hopper
@pytest.mark.parametrize("dq_tma", DQ_TMA)
@pytest.mark.parametrize("S", SEQS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D", hb.HEAD_DIMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_match_float64(dtype, D, causal, S, dq_tma):
    run_and_check(*heads_for(S), S, D, dtype, causal, dq_tma=dq_tma)


@gpu
@hopper
@pytest.mark.parametrize("dq_tma", DQ_TMA)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_many_heads_and_another_scale(causal, dq_tma):
    """B * H = 15 heads (the head index of every TMA box and store), S = 300 (3 key blocks, 5 query
    blocks, ragged), a scale that is not 1 / sqrt(D)."""
    run_and_check(3, 5, 300, 128, torch.float16, causal, scale=0.3, dq_tma=dq_tma)


@gpu
@hopper
@pytest.mark.parametrize("dq_tma", DQ_TMA)
def test_dk_dv_are_deterministic_and_dq_nearly(dq_tma):
    """dK and dV are written once from registers: bit for bit the same on every call. dQ is summed (TMA
    reduce-adds or atomics) in an order that varies: equal within the fp32 rounding of the sum, not
    necessarily bitwise."""
    q, k, v, o, do, lse, first = run_and_check(2, 3, 777, 64, torch.bfloat16, True, dq_tma=dq_tma)
    for _ in range(2):
        again = hb.attention_hopper_backward(q, k, v, o, do, lse, True, 64**-0.5, dq_tma=dq_tma)
        assert torch.equal(again[1], first[1]) and torch.equal(again[2], first[2])
        torch.testing.assert_close(again[0], first[0], rtol=2**-7, atol=1e-3)


@gpu
@hopper
@pytest.mark.parametrize("dq_tma", DQ_TMA)
def test_stores_stay_inside_the_outputs(dq_tma):
    """Outputs (and the dQ accumulator, which the TMA reduce-adds write: rows past S must be clipped) that
    are views into a poisoned buffer: nothing before or after them is written."""
    B, H, S, D = 1, 2, 129, 64
    q, k, v, do = (random_tensor((B, H, S, D), torch.float16, DEVICE) for _ in range(4))
    o, lse = hb.reference_forward(q, k, v, False, D**-0.5)
    n = B * H * S * D
    buffers = [poisoned(n + 2 * 4096, torch.float16, DEVICE) for _ in range(3)]
    grads = tuple(b[4096:4096 + n].view(B, H, S, D) for b in buffers)
    acc_buffer = poisoned(n + 2 * 4096, torch.float32, DEVICE)
    acc = acc_buffer[4096:4096 + n].view(B, H, S, D)  # 16 KB in: still 16-byte aligned, as a tensor map needs
    hb.attention_hopper_backward(q, k, v, o, do, lse, False, D**-0.5, grads=grads, dq_accum=acc, dq_tma=dq_tma)
    for b, g in zip((*buffers, acc_buffer), (*grads, acc)):
        assert not torch.isnan(g).any()
        assert torch.isnan(b[:4096]).all() and torch.isnan(b[4096 + n:]).all(), "a store landed outside"


@gpu
@hopper
@pytest.mark.parametrize("dq_tma", DQ_TMA)
def test_sanitizer_case_runs(dq_tma):
    hb.sanitizer_case(dq_tma=dq_tma)


# --- anywhere: input checks, refusals, the source ---------------------------------------------------------------

def bad_inputs():
    def ok(S=8, D=64, dtype=torch.float16):
        q, k, v, o, do = (torch.ones(1, 2, S, D, dtype=dtype, device=DEVICE) for _ in range(5))
        return [q, k, v, o, do, torch.zeros(1, 2, S, device=DEVICE), False, 0.125]

    def with_(i, value, **kw):
        args = ok(**kw)
        args[i] = value(args) if callable(value) else value
        return args

    yield "q not a tensor", TypeError, "q must be a torch.Tensor", with_(0, [[1.0]])
    yield "q float32", TypeError, "q has dtype float32", with_(0, lambda a: a[0].float())
    yield "k bf16, q fp16", TypeError, "dtypes must match", with_(1, lambda a: a[1].bfloat16())
    yield "v 3-D", ValueError, "v must have 4 dimension", with_(2, lambda a: a[2][0])
    yield "o wrong shape", ValueError, "shapes must match", with_(3, lambda a: a[3][:, :1])
    yield "do transposed", ValueError, "do is not contiguous", with_(4, lambda a: a[4].transpose(2, 3))
    yield "D = 32", ValueError, "head dim 32.*flash_attention_backward", ok(D=32)
    yield "lse fp16", TypeError, "lse has dtype float16", with_(5, lambda a: a[5].half())
    yield "lse wrong shape", ValueError, r"lse has shape \(1, 2, 7\)", with_(5, lambda a: a[5][..., :7].contiguous())
    yield "causal 1", TypeError, "causal must be a bool", with_(6, 1)
    yield "scale str", TypeError, "scale must be a float", with_(7, "0.1")
    yield "scale 0", ValueError, "scale must be a finite number > 0", with_(7, 0.0)
    yield "scale nan", ValueError, "scale must be a finite number > 0", with_(7, math.nan)


@pytest.mark.parametrize("case, error, message, args", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, args):
    with pytest.raises(error, match=message):
        hb.attention_hopper_backward(*args)


def test_rejects_bad_outputs_before_launch():
    q = torch.ones(1, 2, 8, 64, dtype=torch.float16, device=DEVICE)
    lse = torch.zeros(1, 2, 8, device=DEVICE)
    with pytest.raises(TypeError, match="dk has dtype bfloat16"):
        hb.attention_hopper_backward(q, q, q, q, q, lse, False, 0.1, grads=(q.clone(), q.bfloat16(), q.clone()))
    with pytest.raises(TypeError, match="grads must be a tuple"):
        hb.attention_hopper_backward(q, q, q, q, q, lse, False, 0.1, grads=q)
    with pytest.raises(TypeError, match="dq_accum has dtype float16"):
        hb.attention_hopper_backward(q, q, q, q, q, lse, False, 0.1, dq_accum=q.clone())
    with pytest.raises(TypeError, match="dq_tma must be a bool"):
        hb.attention_hopper_backward(q, q, q, q, q, lse, False, 0.1, dq_tma=1)


@pytest.mark.skipif(HOPPER, reason="checks the refusal; this GPU runs the kernels")
def test_refused_here_naming_the_triton_backward():
    """On the CPU (CI) and on any GPU but compute capability 9.0: valid inputs, refused before anything is
    built, with runtime.NotOnThisGpu (a RuntimeError; the suite skips other tests with its message)."""
    q = torch.ones(1, 2, 8, 64, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(runtime.NotOnThisGpu, match=r"sm_90a.*week4_triton_dl\.attention\.flash_attention_backward"):
        hb.attention_hopper_backward(q, q, q, q, q, torch.zeros(1, 2, 8, device=DEVICE), True, 0.125)


@pytest.mark.parametrize("capability", [None, (7, 5), (8, 0), (8, 9), (10, 0), (12, 0), (9, 0)],
                         ids=lambda c: "cpu" if c is None else f"sm_{c[0]}{c[1]}")
def test_unsupported_names_the_gpu_and_the_fallback(capability):
    why = hb.unsupported(capability)
    if capability == (9, 0):
        assert why is None
    else:
        assert hb.FALLBACK in why
        assert ("compute capability {}.{}".format(*capability) if capability else "no GPU") in why


def test_tiles_match_the_cuda_source():
    source = hb.SOURCE.read_text()
    for name, value in (("AHB_BM", hb.BLOCK_M), ("AHB_BN", hb.BLOCK_N), ("AHB_SLAB", hb.SLAB)):
        found = re.search(rf"#define {name} (\d+)", source)
        assert found and int(found.group(1)) == value, f"{name} differs between the .cu and hopper_backward.py"


def test_reference_forward_is_softmax_attention():
    """The tests' o and lse: the float64 reference of attention_naive, rounded (o) and in float32 (lse)."""
    q, k, v = (random_tensor((1, 2, 37, 16), torch.float32, DEVICE) for _ in range(3))
    o, lse = hb.reference_forward(q, k, v, True, 0.25)
    want_o, want_lse = an.attention_reference(q.double(), k.double(), v.double(), True, 0.25, return_lse=True)
    torch.testing.assert_close(o.double(), want_o, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-6, atol=1e-6)


DQ_REDUCE = "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"


@nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("dq_tma", DQ_TMA)
def test_source_compiles_for_sm_90a(dq_tma, tmp_path):
    """The launcher's nvcc command (warnings as errors, torch's no-implicit-half flags, the build's -D flags)
    builds all 14 kernels (main: 2 dtypes x 2 head dims x causal or not; preprocess: 4; convert: 2) without
    spills; the PTX holds the wgmma shapes (both operands in shared memory, and A in registers), the 3-D TMA
    copies (and no 1-D bulk copy: the note's racecheck paragraph says why), the proxy fence, setmaxnreg, and
    dQ's additions: the TMA reduce-add with its bulk-group waits, or (dq_tma=False) the float2 atomics alone."""
    cubin = tmp_path / "ahb.cubin"
    built = subprocess.run(hb.nvcc_command(cubin, runtime.nvcc_path(), dq_tma) + ["-Xptxas", "-v"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert built.stderr.count("0 bytes spill stores, 0 bytes spill loads") == 14, built.stderr
    ptx = tmp_path / "ahb.ptx"
    subprocess.run([runtime.nvcc_path(), "-ptx", "-arch=compute_90a", *hb.variant_flags(dq_tma), *HOPPER_PTX_INCLUDE,
                    "-o", str(ptx), str(hb.SOURCE)], check=True, capture_output=True)
    text = ptx.read_text()
    for instruction in ("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16",
                        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
                        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
                        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes",
                        "fence.proxy.async.shared::cta", "mbarrier.try_wait.parity", "setmaxnreg.inc",
                        "setmaxnreg.dec"):
        assert instruction in text, f"{instruction} is missing from the PTX"
    assert "cp.async.bulk.shared::cluster.global" not in text, "lse2 / Delta are back in the ring"
    dq_tma_instructions = (DQ_REDUCE, "cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read 0",
                           "cp.async.bulk.wait_group 0")
    for instruction in dq_tma_instructions:
        assert (instruction in text) == dq_tma, f"{instruction} {'missing from' if dq_tma else 'in'} the PTX"
    assert ("add.v2.f32" in text) != dq_tma, "the float2 atomics belong to the dq_tma=False build alone"
    if shutil.which("cuobjdump"):  # SASS: HGMMA (wgmma), UTMALDG (TMA load)
        sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
        for opcode in ("HGMMA.64x64x16.F32", "HGMMA.64x128x16.F32", "UTMALDG", "USETMAXREG"):
            assert opcode in sass, f"{opcode} is missing from the SASS"


def test_dq_tiles_fit_shared_memory():
    """The layout's sum, as the .cu's AhbLayout computes it for D = 128 with the dQ tiles: K, V (2 x 32 KB),
    the ring (2 stages x (Q + dO) = 64 KB), dS (2 x 8 KB), the dQ tiles (2 x 64 rows x 128 fp32 = 64 KB), 1 KB
    of alignment slack: within the 227 KB a block may have (the .cu static_asserts the same)."""
    D = 128
    kv, q = 2 * (D // 64) * hb.BLOCK_N * 128, (D // 64) * hb.BLOCK_M * 128
    total = kv + 2 * 2 * q + 2 * hb.BLOCK_M * 64 * 2 + 2 * hb.BLOCK_M * D * 4 + 1024
    assert total <= 227 * 1024
    assert "static_assert(AhbLayout<128>::smem_bytes <= 227 * 1024" in hb.SOURCE.read_text()


@nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_source_compiles_as_a_stub_elsewhere(arch, tmp_path):
    """For any target but sm_90a the main kernel's body is a trap (the launcher never gets there)."""
    built = subprocess.run([runtime.nvcc_path(), "-cubin", f"-arch={arch}", "-Werror", "all-warnings",
                            *HOPPER_PTX_INCLUDE, "-o", str(tmp_path / "x.cubin"), str(hb.SOURCE)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr


@nvcc
@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.skipif(torch.version.cuda is None, reason="the extension links torch's CUDA libraries: a CPU-only torch cannot build it")
def test_extension_builds_and_registers_the_op():
    """load_inline builds the .cu and the TORCH_LIBRARY binding (no GPU needed: about a minute on two cores,
    hence slow) and torch.ops holds the op under the extension's own name (one per build)."""
    ops = hb.load_extension()
    assert hb.extension_name().startswith("attention_hopper_bwd_")
    assert hb.extension_name(True) != hb.extension_name(False)
    assert hasattr(ops, "backward")
