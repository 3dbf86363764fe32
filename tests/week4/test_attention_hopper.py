"""week4_triton_dl.attention.hopper: the FlashAttention-3-style CUDA forward (sm_90a) against float64 torch.

On an H100/H200: o and lse against `attention_reference` (float64) within the element-wise bounds of
`attention_error_bounds` (attention/naive.py's error model: fp32 scores, P rounded to the input
dtype before P V, the final rounding; the kernel computes exactly that), written into poisoned
(NaN) outputs so an element the kernel forgets fails. Lengths 1, 63, 129, 1000 are ragged against
the kernel's 128-row tiles; B * H = 192 > the 132 SMs of an H100 SXM (several waves). The main checks run on
four builds: the default, -DAH_INTRA_OVERLAP=1 (overlap=True), -DAH_PERSISTENT=1 (persistent=True: one block
per SM walking the work tiles) and both, which must also give the default's bits, and the persistent two with
-DAH_DYNAMIC_TILES=1 (dynamic: the tiles drawn from a global counter); the persistent ones also on the shapes a
tile scheduler gets wrong (more work tiles than SMs, fewer, causal tiles of different lengths per block, ragged
S, B * H = 1), the dynamic ones on launches in a row and on two streams (the counter left at zero, one per stream).

Anywhere (these run in CI on a CPU): the PTX and the register/spill report of the sm_90a builds
(nvcc needs no GPU; no wgmma serialised), the SASS where cuobjdump is installed, the fake implementation under
torch.compile(fullgraph=True) and on meta tensors, the autograd plumbing to the backward module, the C++
bindings compiled (g++, torch's headers) and their one key_lengths header hashed into both extensions' names,
the refusals (CPU, other GPUs) naming the fallback, and bad input refused before any launch.
"""
import math
import os
import re
import shutil
import subprocess
import sys
import types

import pytest
import torch
import torch.nn.functional as F

from course import holes, runtime
from course.check import poisoned
from tests.week4.attention_helpers import BUILDS, DYNAMIC_BUILDS, PERSISTENT_BUILDS, assert_within, qkv

# Plain imports, not runtime.lesson(): the exercise is the kernel, not this module; under --impl=exercises
# hopper.py builds the kernel's stub (hopper.SOURCE), and the reference and its error model stay the solution's.
from week4_triton_dl.attention import hopper as hp
from week4_triton_dl.attention import naive as an

DEVICE = runtime.DEVICE
HOPPER = runtime.on_gpu() and hp.device_refusal(torch.device("cuda")) is None
gpu = pytest.mark.gpu(reason="launches the sm_90a kernel")
hopper = pytest.mark.skipif(not HOPPER, reason="the attention_hopper rung needs an sm_90 GPU (H100/H200, sm_90a)")
nvcc = pytest.mark.skipif(runtime.nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed here")
DTYPES = [pytest.param(d, id=str(d).replace("torch.", "")) for d in hp.DTYPES]
MASKS = [pytest.param(False, id="full"), pytest.param(True, id="causal")]


def check(B, H, Sq, Sk, D, dtype, causal, scale=None, build=None):
    q, k, v = qkv(B, H, Sq, Sk, D, dtype)
    out = poisoned((B, H, Sq, D), dtype, DEVICE)
    lse = poisoned((B, H, Sq), torch.float32, DEVICE)
    got, got_lse = hp.attention_hopper_forward(q, k, v, causal, scale, out=out, lse=lse, **(build or {}))
    assert got is out and got_lse is lse, "the launcher must write into the `out` and `lse` it was given"
    want, want_lse = an.attention_reference(q, k, v, causal, scale, return_lse=True)
    bounds = an.attention_error_bounds(q, k, v, None, causal, scale)
    assert_within(got, want, bounds["out"])
    assert_within(got_lse, want_lse, bounds["lse"], name="lse")


# --- on the GPU (H100/H200) ------------------------------------------------------------------------

@gpu
@hopper
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("head_dim", hp.HEAD_DIMS)
@pytest.mark.parametrize("seq", [1, 63, 128, 129, 1000])
@pytest.mark.parametrize("build", BUILDS)
def test_matches_float64(build, seq, head_dim, causal, dtype):
    check(1, 2, seq, seq, head_dim, dtype, causal, build=build)


@gpu
@hopper
@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("seq_q, seq_k", [(20, 45), (300, 129), (129, 300), (1, 257)])
@pytest.mark.parametrize("build", BUILDS)
def test_different_query_and_key_lengths(build, seq_q, seq_k, causal):
    # Top-left causal: query i sees keys 0..i; with Sq > Sk the last rows see every key.
    check(2, 1, seq_q, seq_k, 64, torch.bfloat16, causal, build=build)


@gpu
@hopper
@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("build", [pytest.param({}, id="default"), *PERSISTENT_BUILDS])
def test_more_heads_than_sms(build, causal):
    # 3 x 64 = 192 (batch, head) pairs x 2 query tiles: several waves of blocks on 132 SMs (persistent: each
    # block walks about 3 work tiles).
    check(3, 64, 200, 200, 64, torch.float16, causal, build=build)


@gpu
@hopper
@pytest.mark.parametrize("causal", MASKS)
@pytest.mark.parametrize("B, H, Sq, Sk, D", [
    pytest.param(4, 32, 1024, 1024, 64, id="more_tiles_than_sms"),     # 1,024 work tiles: ~8 per block
    pytest.param(1, 3, 700, 700, 128, id="fewer_tiles_than_sms"),      # 18 work tiles: grid 18
    pytest.param(2, 40, 1000, 1000, 128, id="S1000"),                  # 640: causal lengths differ per block
    pytest.param(1, 1, 2048 + 77, 2048 + 77, 128, id="one_head"),      # B * H = 1, S not a multiple of 128
    pytest.param(3, 50, 129, 300, 64, id="Sq_ne_Sk"),                  # 300 work tiles of 3 key tiles
])
@pytest.mark.parametrize("build", PERSISTENT_BUILDS)
def test_persistent_scheduler_shapes(build, B, H, Sq, Sk, D, causal):
    # The persistent build's work tiles: one Q slot reused per block, the ring and the ping-pong running on
    # across tiles of different lengths, the last round partial.
    check(B, H, Sq, Sk, D, torch.bfloat16, causal, build=build)


@gpu
@hopper
def test_explicit_scale_and_long_sequence():
    check(1, 1, 2048 + 77, 2048 + 77, 128, torch.bfloat16, True, scale=0.05)


@gpu
@hopper
@pytest.mark.parametrize("causal", MASKS)
def test_large_scores_stay_finite(causal):
    # Scores of thousands: 2^(s c) overflows unless the running max is subtracted first.
    q, k, v = qkv(1, 1, 150, 150, 64, torch.float32)
    q, k, v = (q + 8.0).half(), (k + 8.0).half(), v.half()
    out = hp.attention_hopper(q, k, v, causal)
    assert torch.isfinite(out).all()
    assert_within(out, an.attention_reference(q, k, v, causal), an.attention_error_bounds(q, k, v, None, causal)["out"])


@gpu
@hopper
@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_nan_propagates_like_sdpa(where):
    # NaN in q row 5 spoils that row; in k row 5, every row of the head; in v[5, 3], column 3 of
    # every row of the head. The other head stays clean (the TMA reads zeros past S, never the
    # next head's rows).
    q, k, v = qkv(1, 2, 12, 12, 64, torch.float16)
    {"q": q, "k": k, "v": v}[where][0, 1, 5, 3] = math.nan
    got = hp.attention_hopper(q, k, v)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert not torch.isnan(got[0, 0]).any()


@gpu
@hopper
def test_nan_key_with_causal_mask_reaches_only_later_queries():
    # The causal mask is a select, not an added -inf: queries before key 7 never see its NaN.
    q, k, v = qkv(1, 1, 40, 40, 128, torch.bfloat16)
    k[0, 0, 7, 0] = math.nan
    got = hp.attention_hopper(q, k, v, True)
    assert torch.isnan(got[0, 0, 7:]).all() and not torch.isnan(got[0, 0, :7]).any()


@gpu
@hopper
def test_heads_do_not_leak_into_each_other():
    # S = 100 < one 128-row tile: every tile of head 0 runs past its end. Head 1 full of NaN must
    # leave head 0 clean (a 2-D tensor map would have read head 1's rows as head 0's keys 100..127).
    q, k, v = qkv(1, 2, 100, 100, 64, torch.bfloat16)
    for t in (q, k, v):
        t[0, 1] = math.nan
    got = hp.attention_hopper(q, k, v)
    assert not torch.isnan(got[0, 0]).any() and torch.isnan(got[0, 1]).all()


@gpu
@hopper
@pytest.mark.parametrize("build", BUILDS)
def test_same_answer_twice(build):
    # A ring slot refilled too early, a ping-pong turn taken out of order, (overlap) P or O touched under the
    # running P V wgmma, or (persistent) Q reloaded under a running S, changes results run to run.
    q, k, v = qkv(2, 8, 1536, 1536, 128, torch.bfloat16)
    first = hp.attention_hopper_forward(q, k, v, True, **build)[0]
    for _ in range(3):
        assert torch.equal(hp.attention_hopper_forward(q, k, v, True, **build)[0], first)


@gpu
@hopper
@pytest.mark.parametrize("head_dim", hp.HEAD_DIMS)
@pytest.mark.parametrize("build", PERSISTENT_BUILDS)
def test_persistent_same_bits(build, head_dim):
    # The persistent walk changes which block runs a work tile and when, not what a tile computes: the same
    # bits as the one-tile-per-block build (B4 H32 S2048: 2,048 work tiles, ~16 per block).
    q, k, v = qkv(4, 32, 2048, 2048, head_dim, torch.bfloat16)
    for causal in (False, True):
        want = hp.attention_hopper_forward(q, k, v, causal, overlap=build.get("overlap", False))
        got = hp.attention_hopper_forward(q, k, v, causal, **build)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@gpu
@hopper
@pytest.mark.parametrize("build", DYNAMIC_BUILDS)
def test_dynamic_counter_left_at_zero_per_stream(build):
    # Each launch must leave its stream's counter at zero (the launch's last draw resets it): a counter left
    # past the end makes the next launch skip tiles (NaN left in the poisoned output), one left short runs tiles
    # twice. Launches alternate between the current stream and a second one, each with its own counter, and
    # between problems of different tile counts (the reset's `tiles - 1` differs).
    problems = [qkv(2, 40, 1000, 1000, 128, torch.bfloat16), qkv(1, 3, 700, 700, 64, torch.bfloat16)]
    want = [hp.attention_hopper_forward(q, k, v, True, overlap=build.get("overlap", False)) for q, k, v in problems]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # q, k, v and the references were made on the current stream
    for round_ in range(3):
        for i, (q, k, v) in enumerate(problems):
            with torch.cuda.stream(side if (round_ + i) % 2 else torch.cuda.current_stream()):
                out = poisoned(q.shape, q.dtype, DEVICE)
                got = hp.attention_hopper_forward(q, k, v, True, out=out, **build)
            torch.cuda.current_stream().wait_stream(side)
            assert torch.equal(got[0], want[i][0]) and torch.equal(got[1], want[i][1]), (round_, i)


@gpu
@hopper
@pytest.mark.parametrize("head_dim", hp.HEAD_DIMS)
def test_without_pingpong_same_bits(head_dim):
    # The turn-taking orders when the two consumers issue, not what they compute: the A/B build
    # (-DAH_PINGPONG=0) must give the same bits.
    q, k, v = qkv(2, 3, 700, 700, head_dim, torch.bfloat16)
    for causal in (False, True):
        want = hp.attention_hopper_forward(q, k, v, causal)
        got = hp.attention_hopper_forward(q, k, v, causal, pingpong=False)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@gpu
@hopper
@pytest.mark.parametrize("head_dim", hp.HEAD_DIMS)
def test_overlap_same_bits(head_dim):
    # The overlap moves the wait for P V after the softmax of the next tile; every multiply and add is the
    # same, in the same order (O is rescaled by the same alpha after the wait): the same bits.
    q, k, v = qkv(2, 3, 700, 700, head_dim, torch.bfloat16)
    for causal in (False, True):
        want = hp.attention_hopper_forward(q, k, v, causal)
        got = hp.attention_hopper_forward(q, k, v, causal, overlap=True)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@gpu
@hopper
def test_empty_inputs():
    q, k, v = qkv(0, 2, 5, 5, 64, torch.float16)
    assert hp.attention_hopper(q, k, v).shape == (0, 2, 5, 64)
    q, k, v = qkv(1, 2, 5, 0, 64, torch.float16)  # no keys: zeros and lse -inf, as SDPA
    out, lse = hp.attention_hopper_forward(q, k, v, out=poisoned((1, 2, 5, 64), torch.float16, DEVICE))
    assert torch.equal(out, torch.zeros_like(out)) and bool((lse == -math.inf).all())


@gpu
@hopper
def test_compiled_model_calls_the_op():
    q, k, v = qkv(2, 4, 300, 300, 64, torch.bfloat16)
    compiled = torch.compile(lambda q, k, v: hp.attention_hopper(q, k, v, True) * 2, fullgraph=True)
    assert torch.equal(compiled(q, k, v), hp.attention_hopper(q, k, v, True) * 2)


# --- anywhere: the build's PTX and SASS, the fake, the autograd plumbing, refusals, checks ------------

@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    if runtime.nvcc_path() is None:
        pytest.skip("nvcc (CUDA toolkit) is not installed here")
    path = tmp_path_factory.mktemp("attention_hopper") / "attention_hopper.ptx"
    command = hp.nvcc_command(path, runtime.nvcc_path())
    command[command.index("-cubin")] = "-ptx"
    built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return path.read_text()


@nvcc
def test_ptx_has_the_fa3_pieces(ptx):
    """Per kernel: the SS wgmma (S = Q K^T), the RS wgmma with A from registers (O += P V), 3-D TMA
    loads, the named-barrier ping-pong, setmaxnreg for both roles, ex2 for the softmax."""
    kernels = re.split(r"\.entry ", ptx)[1:]
    assert len(kernels) == 4, "fp16 and bf16, D = 64 and 128"
    for body in kernels:
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.(b?f16)\.(b?f16)\s*\{[^}]*\},\s*%rd", body)
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n(64|128)k16[^{]*\{[^}]*\},\s*\{", body), "P from registers"
        assert "cp.async.bulk.tensor.3d" in body
        assert "bar.arrive" in body and "bar.sync" in body
        assert "setmaxnreg.dec" in body and "setmaxnreg.inc" in body
        assert "ex2.approx" in body, "not implemented yet: no ex2, the online softmax (a hole of the exercise) is not written"


@nvcc
@pytest.mark.parametrize("pingpong, overlap, persistent, dynamic", [
    (True, False, False, False), (False, False, False, False), (True, True, False, False), (True, False, True, False),
    (True, True, True, False), (False, False, True, False), (True, False, True, True), (True, True, True, True),
    (False, False, True, True)], ids=["pingpong", "no_pingpong", "overlap", "persistent", "persistent_overlap",
                                      "persistent_no_pingpong", "dynamic", "dynamic_overlap", "dynamic_no_pingpong"])
def test_sm90a_build_does_not_spill(pingpong, overlap, persistent, dynamic, tmp_path):
    """No spills, and no wgmma serialised: ptxas reports it (C7514 and kin, 'wgmma.mma_async instructions are
    serialized') as info, not as a warning, when an ordinary instruction touches a register of a wgmma
    before its wait_group, e.g. the overlap's softmax reading S before S's group is waited; it then waits
    after every wgmma, which is correct and slow (-Werror does not catch an info line: this does)."""
    command = hp.nvcc_command(tmp_path / "a.cubin", runtime.nvcc_path(), pingpong, overlap=overlap,
                              persistent=persistent, dynamic=dynamic)
    built = subprocess.run(command + ["-Xptxas", "-v"], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", built.stderr)
    assert len(spills) == 4 and all(s == ("0", "0") for s in spills), built.stderr
    assert "serialized" not in built.stderr, built.stderr


@nvcc
@pytest.mark.parametrize("build", [pytest.param({}, id="default"),
                                   pytest.param({"persistent": True, "dynamic": True}, id="persistent_dynamic")])
def test_host_side_compiles(build, tmp_path):
    """-cubin compiles the device side only: the host side (the launch, the module variables it registers: the zero
    buffer of padding keys, the dynamic build's counters and per-stream slots) is compiled here, with the same flags
    (warnings as errors), as load_inline will."""
    command = hp.nvcc_command(tmp_path / "a.o", runtime.nvcc_path(), **build)
    command[command.index("-cubin")] = "-c"
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr


def binding_sources() -> dict:
    """{op: the C++ binding's text as load_inline gets it}: the forward's .cpp (hopper.py) and the backward's
    BINDING (hopper_backward.py), NAMESPACE replaced as their builds replace it."""
    from week4_triton_dl.attention import hopper_backward as hb

    return {"forward": hp.BINDING_SOURCE.read_text().replace("NAMESPACE", "course_attention_hopper_check"),
            "backward": hb.BINDING.replace("NAMESPACE", "attention_hopper_bwd_check")}


def load_inline_std() -> str:
    """The C++ standard torch's extension build passes (-std=c++17 up to torch 2.11, -std=c++20 in 2.15: its headers
    need it), read from the installed torch.utils.cpp_extension, so the binding builds as load_inline will."""
    from pathlib import Path
    import torch.utils.cpp_extension as ext
    found = re.findall(r"common_cflags \+= \['(-std=c\+\+\d+)'", Path(ext.__file__).read_text())
    assert found, "torch.utils.cpp_extension no longer says which -std its builds use: update load_inline_std"
    return found[0]


@nvcc
@pytest.mark.parametrize("op", ["forward", "backward"])
def test_binding_compiles(op, tmp_path):
    """The C++ binding (torch's headers, the key_lengths header both include) compiled as load_inline's ninja file
    compiles it (torch's -std, -DTORCH_EXTENSION_NAME, -I the kernels, -isystem torch's and CUDA's headers), warnings
    as errors: a few seconds each, no GPU, so a broken binding fails here and not at an H100's first call."""
    import sysconfig
    from pathlib import Path
    from torch.utils.cpp_extension import include_paths

    # The toolkit's headers where the builds find them: nvcc's real folder (nvcc may be a wrapper script
    # elsewhere: hopper.py's load_extension says so), else /usr/local/cuda.
    toolkits = (Path(os.path.realpath(runtime.nvcc_path())).parent.parent, Path("/usr/local/cuda"))
    cuda_include = next((t / "include" for t in toolkits if (t / "include" / "cuda_runtime.h").exists()), None)
    torch_headers = include_paths()
    if cuda_include is None or not (Path(torch_headers[0]) / "c10" / "cuda" / "CUDAGuard.h").exists():
        pytest.skip("no CUDA toolkit headers beside nvcc, or a torch without c10/cuda headers: the binding needs both")
    compiler = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    source = tmp_path / "main.cpp"
    source.write_text(binding_sources()[op])
    command = [compiler, "-DTORCH_EXTENSION_NAME=check", "-DTORCH_API_INCLUDE_EXTENSION_H", "-I", str(hp.KERNELS),
               *(f for path in (*torch_headers, str(cuda_include), sysconfig.get_path("include"))
                 for f in ("-isystem", path)),
               "-fPIC", load_inline_std(), "-O3", "-Wall", "-Werror", "-c", str(source), "-o", str(tmp_path / "main.o")]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr


def test_bindings_check_key_lengths_in_one_header(monkeypatch, tmp_path):
    """Both bindings take key_lengths through kernels/attention_hopper_key_lengths.h (no check of their own), and
    the header is hashed into both extensions' names: a changed check rebuilds them, never a stale library."""
    from week4_triton_dl.attention import hopper_backward as hb

    assert hp.KEY_LENGTHS_HEADER == hb.KEY_LENGTHS_HEADER and hp.KEY_LENGTHS_HEADER.is_file()
    for text in binding_sources().values():
        assert f'#include "{hp.KEY_LENGTHS_HEADER.name}"' in text and "ah_key_lengths(key_lengths," in text
        assert "kl.scalar_type()" not in text and "kLong" not in text
    names = (hp.namespace(), hb.extension_name())
    changed = tmp_path / hp.KEY_LENGTHS_HEADER.name
    changed.write_text(hp.KEY_LENGTHS_HEADER.read_text() + "// another version\n")
    monkeypatch.setattr(hp, "KEY_LENGTHS_HEADER", changed)
    monkeypatch.setattr(hb, "KEY_LENGTHS_HEADER", changed)
    assert hp.namespace() != names[0] and hb.extension_name() != names[1]

def test_overlap_and_persistent_are_flags_of_their_own_builds():
    assert hp.nvcc_flags() == hp.NVCC_FLAGS and "-DAH_INTRA_OVERLAP=1" in hp.nvcc_flags(overlap=True)
    assert "-DAH_PERSISTENT=1" in hp.nvcc_flags(persistent=True) and "-DAH_PERSISTENT=1" not in hp.nvcc_flags()
    assert "-DAH_DYNAMIC_TILES=1" in hp.nvcc_flags(persistent=True, dynamic=True)
    assert not any("DYNAMIC" in f for f in hp.nvcc_flags(persistent=True))
    names = {hp.namespace(), hp.namespace(overlap=True), hp.namespace(persistent=True),
             hp.namespace(overlap=True, persistent=True), hp.namespace(persistent=True, dynamic=True),
             hp.namespace(overlap=True, persistent=True, dynamic=True)}
    assert len(names) == 6
    for flag in ("overlap", "persistent", "dynamic"):
        with pytest.raises(TypeError, match=f"{flag} must be a bool"):
            hp.nvcc_flags(**{flag: "yes"})
    with pytest.raises(ValueError, match="dynamic=True .* pass persistent=True"):
        hp.nvcc_flags(dynamic=True)


def test_dynamic_without_persistent_is_refused_before_launch(monkeypatch):
    monkeypatch.setattr(hp, "launch", lambda *args: pytest.fail("launched despite dynamic=True without persistent"))
    q, k, v = (torch.zeros(1, 2, 8, 64, dtype=torch.float16) for _ in range(3))
    with pytest.raises(ValueError, match="dynamic=True schedules the persistent build's work tiles"):
        hp.attention_hopper_forward(q, k, v, dynamic=True)
    with pytest.raises(ValueError, match="pass persistent=True"):
        hp.load_extension(dynamic=True)


@nvcc
def test_overlap_ptx_waits_for_s_alone(tmp_path):
    """The overlap build commits S = Q K^T and P V as two groups and waits for S alone (wait_group 1)
    before the softmax; the default waits for both at once (wait_group 0 only)."""
    texts = {}
    for overlap in (False, True):
        path = tmp_path / f"{overlap}.ptx"
        command = hp.nvcc_command(path, runtime.nvcc_path(), overlap=overlap)
        command[command.index("-cubin")] = "-ptx"
        built = subprocess.run(command, capture_output=True, text=True, check=False)
        assert built.returncode == 0, built.stderr
        texts[overlap] = path.read_text()
    assert "wgmma.wait_group.sync.aligned 1" not in texts[False]
    for body in re.split(r"\.entry ", texts[True])[1:]:
        assert body.count("wgmma.wait_group.sync.aligned 1") == 1, \
            "one wait for S alone: the middle phase's (or not implemented yet: the overlap is a hole of the exercise)"


@nvcc
@pytest.mark.skipif(shutil.which("cuobjdump") is None, reason="cuobjdump (CUDA toolkit's binary utilities) is not installed")
def test_overlap_sass_runs_the_softmax_between_the_waits(tmp_path):
    """In the SASS of the overlap build the exponentials of the middle phase sit between the wait for S
    (WARPGROUP.DEPBAR.LE gsb0, 0x1) and the wait for P V (0x0): ptxas kept the overlap."""
    cubin = tmp_path / "overlap.cubin"
    built = subprocess.run(hp.nvcc_command(cubin, runtime.nvcc_path(), overlap=True), capture_output=True, text=True,
                           check=False)
    assert built.returncode == 0, built.stderr
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    for kernel in re.split(r"Function : ", sass)[1:]:
        between = re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x1(.*?)WARPGROUP\.DEPBAR\.LE gsb0, 0x0", kernel, re.DOTALL)
        assert between and between.group(1).count("MUFU.EX2") >= 64, \
            "the softmax is not under the P V wgmma (or not implemented yet: the online softmax is a hole of the exercise)"


@nvcc
@pytest.mark.skipif(shutil.which("cuobjdump") is None, reason="cuobjdump (CUDA toolkit's binary utilities) is not installed")
def test_sass_has_hgmma_and_utmaldg(tmp_path):
    cubin = tmp_path / "attention_hopper.sm_90a.cubin"
    built = subprocess.run(hp.nvcc_command(cubin, runtime.nvcc_path()), capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    for opcode in ("HGMMA", "UTMALDG", "MUFU.EX2"):
        assert opcode in sass, f"{opcode} is missing from the SASS"


def test_fake_gives_shapes_under_compile_fullgraph():
    """torch.compile traces the op with fake tensors (never launching it): o like q, lse float32."""
    seen = {}

    def backend(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_function" and "course_attention_hopper" in str(node.target):
                seen["out"] = node.meta["example_value"]
        shapes = [(t.shape, t.dtype) for t in seen["out"]]
        return lambda *args: tuple(torch.zeros(s, dtype=d) for s, d in shapes)

    f = torch.compile(lambda q, k, v: torch.ops.course_attention_hopper.forward(q, k, v, True, 0.125),
                      fullgraph=True, backend=backend)
    q, k, v = (torch.empty(2, 3, 77, 64, dtype=torch.bfloat16) for _ in range(3))
    f(q, k, v)
    o, lse = seen["out"]
    assert (o.shape, o.dtype) == ((2, 3, 77, 64), torch.bfloat16)
    assert (lse.shape, lse.dtype) == ((2, 3, 77), torch.float32)


def test_fake_on_meta_tensors():
    q = torch.empty(1, 2, 130, 128, dtype=torch.float16, device="meta")
    k = v = torch.empty(1, 2, 50, 128, dtype=torch.float16, device="meta")
    o, lse = torch.ops.course_attention_hopper.forward(q, k, v, False, 0.1)
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == (1, 2, 130) and lse.dtype == torch.float32


def test_backward_calls_the_backward_module(monkeypatch):
    """The autograd formula hands (q, k, v, o, do, lse, causal, scale, key_lengths) through the backward op to
    hopper_backward (imported only then) and returns its (dq, dk, dv). The kernel is replaced by the
    float64 reference here."""
    calls = []

    def fake_launch(q, k, v, causal, scale, out, lse, key_lengths=None):
        o, l = an.attention_reference(q, k, v, causal, scale, key_lengths=key_lengths, return_lse=True)
        return out.copy_(o), lse.copy_(l)

    def fake_backward(q, k, v, o, do, lse, causal, scale, key_lengths=None):
        calls.append((q, k, v, o, do, lse, causal, scale, key_lengths))
        return torch.full_like(q, 1.0), torch.full_like(k, 2.0), torch.full_like(v, 3.0)

    monkeypatch.setattr(hp, "launch", fake_launch)
    monkeypatch.setitem(sys.modules, "week4_triton_dl.attention.hopper_backward",
                        types.SimpleNamespace(attention_hopper_backward=fake_backward))
    q, k, v = qkv(2, 2, 9, 11, 64, torch.float16, requires_grad=True)
    lengths = torch.tensor([11, 4], device=q.device)  # on q's device: the kernel reads it
    o, lse = hp.forward_op(q, k, v, True, 0.3, lengths)
    o.sum().backward()
    (cq, ck, cv, co, cdo, clse, causal, scale, clengths), = calls
    assert cq is not None and torch.equal(co, o.detach()) and torch.equal(clse, lse) and (causal, scale) == (True, 0.3)
    assert torch.equal(clengths, lengths), "the backward must mask the forward's padding keys"
    assert cdo.shape == o.shape and bool((cdo == 1).all())
    assert bool((q.grad == 1).all()) and bool((k.grad == 2).all()) and bool((v.grad == 3).all())


def test_refuses_the_cpu_naming_the_fallback():
    q, k, v = (torch.zeros(1, 1, 8, 64, dtype=torch.float16) for _ in range(3))
    with pytest.raises(runtime.NotOnThisGpu, match=re.escape(hp.FALLBACK)):
        hp.attention_hopper(q, k, v)
    assert hp.FALLBACK in hp.hopper_unsupported(q, k, v)


@pytest.mark.parametrize("capability", [(7, 5), (8, 0), (8, 9), (10, 0), (12, 0)])
def test_refuses_every_other_gpu_naming_the_fallback(capability, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    why = hp.device_refusal(torch.device("cuda", 0))
    assert hp.FALLBACK in why and f"{capability[0]}.{capability[1]}" in why


def test_accepts_compute_capability_9_0(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert hp.device_refusal(torch.device("cuda", 0)) is None


def bad_inputs():
    def ok(*shape, dtype=torch.float16):
        return torch.zeros(*(shape or (1, 2, 8, 64)), dtype=dtype)
    yield "not a tensor", TypeError, "q must be a torch.Tensor", lambda: ([[1.0]], ok(), ok(), {})
    yield "float32", TypeError, "q has dtype float32", lambda: (ok(dtype=torch.float32), ok(), ok(), {})
    yield "mixed dtypes", TypeError, "dtypes must match", lambda: (ok(), ok(), ok(dtype=torch.bfloat16), {})
    yield "3-D", ValueError, "k must have 4 dimensions", lambda: (ok(), ok(2, 8, 64), ok(), {})
    yield "head dim 96", ValueError, "head dimension D = 96", lambda: (ok(1, 2, 8, 96), ok(1, 2, 8, 96), ok(1, 2, 8, 96), {})
    yield "head dims differ", ValueError, "same head dimension", lambda: (ok(1, 2, 8, 128), ok(), ok(), {})
    yield "k v differ", ValueError, "k and v must have the same shape", lambda: (ok(), ok(), ok(1, 2, 9, 64), {})
    yield "batch differs", ValueError, "batch and heads", lambda: (ok(2, 2, 8, 64), ok(), ok(), {})
    yield "transposed", ValueError, "v is not contiguous", lambda: (ok(), ok(), ok(1, 8, 2, 64).transpose(1, 2), {})
    yield "causal str", TypeError, "causal must be a bool", lambda: (ok(), ok(), ok(), {"causal": "yes"})
    yield "scale nan", ValueError, "scale must be a finite number > 0", lambda: (ok(), ok(), ok(), {"scale": math.nan})
    yield "scale negative", ValueError, "scale must be a finite number > 0", lambda: (ok(), ok(), ok(), {"scale": -1.0})
    yield "scale str", TypeError, "scale must be a float", lambda: (ok(), ok(), ok(), {"scale": "0.1"})


@pytest.mark.parametrize("flag", ["pingpong", "overlap", "persistent", "dynamic"])
def test_rejects_a_build_flag_that_is_not_a_bool(flag, monkeypatch):
    monkeypatch.setattr(hp, "launch", lambda *args: pytest.fail("launched despite a bad flag"))
    q, k, v = (torch.zeros(1, 2, 8, 64, dtype=torch.float16) for _ in range(3))
    with pytest.raises(TypeError, match=f"{flag} must be a bool"):
        hp.attention_hopper_forward(q, k, v, **{flag: 0})


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_launch(case, error, message, make, monkeypatch):
    def no_launch(*args):
        raise AssertionError("launched despite bad input")

    monkeypatch.setattr(hp, "launch", no_launch)
    q, k, v, kwargs = make()
    with pytest.raises(error, match=message):
        hp.attention_hopper(q, k, v, **kwargs)
    assert hp.hopper_unsupported(q, k, v, **kwargs) is not None


def test_rejects_bad_outputs():
    q, k, v = (torch.zeros(1, 2, 8, 64, dtype=torch.float16) for _ in range(3))
    with pytest.raises(ValueError, match="out must be"):
        hp.attention_hopper_forward(q, k, v, out=torch.zeros(1, 2, 7, 64, dtype=torch.float16))
    with pytest.raises(ValueError, match="lse must be"):
        hp.attention_hopper_forward(q, k, v, lse=torch.zeros(1, 2, 8, dtype=torch.float16))


@pytest.mark.slow
@pytest.mark.skipif(hp.toolchain_missing() is not None, reason=f"cannot build the extension here: {hp.toolchain_missing()}")
def test_extension_builds_and_registers_its_op(tmp_path, monkeypatch):
    """load_inline builds the kernel and the binding with no GPU (~30 s on 2 cores): the op's schema."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    hp.load_extension.cache_clear()
    try:
        ext = hp.load_extension()
        assert "Tensor(a!) out" in str(ext.ops.forward.default._schema) and not ext.cached
    finally:
        hp.load_extension.cache_clear()


def test_an_open_hole_is_refused_before_any_build(monkeypatch):
    """The exercise's stub (every hole holds `#define HOLE_OPEN 1`) is refused with 'not implemented yet'
    and the hole before the toolchain is even asked (course/holes.py): on an H100 a half-written ring hangs
    or traps, it does not fail."""
    stub = hp.EXERCISE_KERNELS / hp.KERNELS.joinpath("attention_hopper_forward.cu").name
    holes.refuse_open_hole(hp.KERNELS / stub.name)  # the solution has no hole
    monkeypatch.setattr(hp, "SOURCE", stub)
    monkeypatch.setattr(hp, "toolchain_missing", lambda: pytest.fail("the toolchain was asked"))
    with pytest.raises(NotImplementedError, match=r"not implemented yet: .*attention_hopper_forward.cu line \d+ "
                                                  r"has a hole open .*TODO \(about \d+ lines\)"):
        hp.load_extension.__wrapped__()
