"""week5_integration.cuda_extension: the C++/CUDA RMSNorm op against torch, its autograd, its guards.

Without a GPU the extension's CPU half (plain C++ loops, same file as the CUDA kernels) is built
with g++ through torch.utils.cpp_extension.load_inline and tested here; the CUDA half is compiled
by nvcc in tests/test_cuda_sources.py (sm_75, sm_90) and run by the gpu-marked tests below.
The first build took 12-16 s on this course's 2-core CPU machine (g++ on the ATen headers; under
the 30 s that would make these tests `slow`) and is cached afterwards under
~/.cache/gpu-kernels-course, where later runs load it in well under a second.
"""
import re

import pytest
import torch
import torch.nn.functional as F

from course import runtime
from course.check import assert_close, poisoned, random_tensor, with_specials
from week5_integration import model as m

cx = runtime.lesson("week5_integration.cuda_extension")
DEVICE = runtime.DEVICE
CPU = torch.device("cpu")

# Error model: the kernel sums N squares (and, backward, N products and M rows of dW) in the
# input's precision (fp32 for fp32; fp32 inside for fp16/bf16 on the GPU): relative error ~ sqrt(N)
# units of fp32 rounding, ~1e-6 at N = 1000 against torch's fp64 result, then one rounding to the
# output dtype. dW sums M rows: ~sqrt(M) more. The fp32 tolerances below are 10x that; the 16-bit
# ones are the dtype's own rounding (course.check defaults, bf16's 1.6e-2); dW: see check_against_torch.
TOL = {torch.float64: (1e-10, 1e-12), torch.float32: (2e-5, 2e-6), torch.float16: (2e-3, 2e-4),
       torch.bfloat16: (1.6e-2, 2e-3)}
SHAPES = [(1, 1), (3, 7), (17, 33), (64, 512), (5, 1000), (2, 3, 129)]


@pytest.fixture(scope="module")
def ext():
    missing = cx.toolchain_missing()
    if missing:  # as tests/test_cuda_sources.py does without nvcc: say what is missing
        pytest.skip(f"cannot build the C++ extension here: {missing}")
    return cx.load_extension()


def test_the_kernel_file_includes_no_torch_header():
    # It must compile alone (nvcc -cubin, tests/test_cuda_sources.py) and be readable as plain CUDA.
    text = cx.SOURCE.read_text()
    assert not re.search(r"#include\s*[<\"](torch|ATen|c10)/", text)
    assert "__global__" in text and "#ifdef __CUDACC__" in text


def test_lines_of_code_are_counted_for_both_versions():
    loc = cx.lines_of_code()
    assert loc["cuda_total"] == loc["cuda_kernels_and_launchers"] + loc["cpp_binding"] + loc["python_launchers"]
    assert min(loc.values()) > 10


def run_forward_backward(x, w, eps, dy, programs=None):
    y, rstd = cx.rms_norm_ext_forward(x, w, eps, out=poisoned(x.shape, x.dtype, x.device),
                                      rstd=poisoned(x.shape[:-1], cx._stats_dtype(x), x.device))
    dx, dw = cx.rms_norm_ext_backward(dy, x, rstd, w, programs=programs)
    return y, dx, dw


def reference(x, w, eps, dy):
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    yr = F.rms_norm(xr, (x.shape[-1],), wr, eps)
    dx, dw = torch.autograd.grad(yr, (xr, wr), dy.double())
    return yr.detach(), dx, dw


def check_against_torch(x, w, eps, dy, programs=None):
    y, dx, dw = run_forward_backward(x, w, eps, dy, programs)
    want_y, want_dx, want_dw = reference(x, w, eps, dy)
    rtol, atol = TOL[x.dtype]
    assert_close(y, want_y.to(x.dtype), rtol=rtol, atol=atol, name="y")
    assert_close(dx, want_dx.to(x.dtype), rtol=rtol, atol=atol, name="dx")
    # dW adds M rows in the accumulator (fp32, fp64 for fp64): its rounding grows like sqrt(M) units of
    # the accumulator, on top of the one rounding to x's dtype; its size too grows like sqrt(M).
    rows = max(1, x.numel() // x.shape[-1])
    acc_eps = torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps
    assert_close(dw, want_dw.to(x.dtype), rtol=rtol + 8 * acc_eps * rows ** 0.5, atol=atol * rows ** 0.5, name="dw")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_cpu_version_matches_torch_forward_and_backward(ext, shape, dtype):
    x = random_tensor(shape, dtype, CPU)
    w = random_tensor(shape[-1], dtype, CPU)
    check_against_torch(x, w, 1e-6, random_tensor(shape, dtype, CPU))


@pytest.mark.parametrize("programs", [1, 2, 7, 64])
def test_dw_partials_sum_to_the_same_gradient_for_any_grid(ext, programs):
    x, dy = random_tensor((23, 40), torch.float64, CPU), random_tensor((23, 40), torch.float64, CPU)
    check_against_torch(x, random_tensor(40, torch.float64, CPU), 1e-5, dy, programs=programs)


def test_gradcheck_in_float64(ext):
    x = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    w = torch.randn(9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: cx.rms_norm_ext(a, b, 1e-5), (x, w))


def test_empty_batch_gives_empty_outputs_and_zero_weight_gradient(ext):
    x, w = torch.empty(0, 16), torch.ones(16)
    y, rstd = cx.rms_norm_ext_forward(x, w, 1e-6)
    dx, dw = cx.rms_norm_ext_backward(torch.empty(0, 16), x, rstd, w)
    assert y.shape == dx.shape == (0, 16) and rstd.shape == (0,)
    assert torch.equal(dw, torch.zeros(16))


def test_nan_and_inf_propagate_as_in_torch(ext):
    x = with_specials(random_tensor((6, 33), torch.float32, CPU))
    w = random_tensor(33, torch.float32, CPU)
    got = cx.rms_norm_ext(x, w, 1e-6)
    want = F.rms_norm(x, (33,), w, 1e-6)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got), torch.isinf(want))


def test_swapped_into_the_model_it_matches_the_torch_twin(ext):
    # float32, 2 layers: differences are rounding order only (see tests/week5/test_kernels.py).
    torch.manual_seed(0)
    reference_model = m.GPT(m.GPT_TINY)
    swapped = m.GPT(m.GPT_TINY)
    swapped.load_state_dict(reference_model.state_dict())
    swapped.use_ops(m.Ops("cuda_ext", norm=cx.ext_norm))
    idx = torch.randint(0, 96, (2, 9))
    for model in (reference_model, swapped):
        model.loss(idx, idx).backward()
    assert_close(swapped(idx), reference_model(idx), rtol=1e-4, atol=1e-6)
    for (name, p), q in zip(reference_model.named_parameters(), swapped.parameters()):
        assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5 * float(p.grad.abs().max()), name=name)


def test_bad_inputs_are_refused_before_any_launch():
    x, w = torch.randn(4, 8), torch.randn(8)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        cx.rms_norm_ext_forward(x.tolist(), w, 1e-6)
    with pytest.raises(TypeError, match="dtype int64"):
        cx.rms_norm_ext_forward(x.long(), w.long(), 1e-6)
    with pytest.raises(TypeError, match="dtype float16"):  # the CPU loops take fp32/fp64
        cx.rms_norm_ext_forward(x.half(), w.half(), 1e-6)
    with pytest.raises(ValueError, match="weight has shape"):
        cx.rms_norm_ext_forward(x, torch.randn(7), 1e-6)
    with pytest.raises(TypeError, match="must match x"):
        cx.rms_norm_ext_forward(x, w.double(), 1e-6)
    with pytest.raises(ValueError, match="not contiguous"):
        cx.rms_norm_ext_forward(torch.randn(8, 4).t(), w, 1e-6)
    with pytest.raises(ValueError, match="1 <= N <= 8192"):
        cx.rms_norm_ext_forward(torch.randn(2, 8193), torch.randn(8193), 1e-6)
    with pytest.raises(ValueError, match="eps"):
        cx.rms_norm_ext_forward(x, w, -1.0)
    with pytest.raises(ValueError, match="programs"):
        cx.rms_norm_ext_backward(x, x, torch.ones(4), w, programs=0)
    with pytest.raises(ValueError, match="RMSNorm only"):
        cx.ext_norm(x, w, None, 1e-5, "layernorm")


def test_build_directory_is_under_the_user_cache():
    root = cx.cache_root()
    assert "gpu-kernels-course" in root.parts and f"torch-{torch.__version__}" in root.parts
    cpp, cuda, namespace = cx.sources("cpu")
    assert namespace.startswith("week5_rmsnorm_cpu_") and not cuda
    assert namespace in cpp[1] and "#define RMSNORM_EXT_WITH_CUDA" not in cpp[1]
    assert "#define RMSNORM_EXT_WITH_CUDA" in cx.sources("cuda")[0][1] if torch.cuda.is_available() else True


# Each large shape costs ~1-2 s on the GPU (a float64 autograd reference and three comparisons of
# millions of elements): the default runs the small shapes in every dtype and each large one in one
# dtype (LARGE_DEFAULT); slow, the other six (large shape, dtype) pairs.
LARGE_DEFAULT = {(4096, 512): torch.float32, (333, 4096): torch.bfloat16, (8, 8192): torch.float16}


@pytest.mark.gpu(reason="runs the CUDA kernels")
@pytest.mark.parametrize("shape, dtype", [
    pytest.param(shape, dtype, id=f"{shape}-{dtype}",
                 marks=[pytest.mark.slow] if LARGE_DEFAULT.get(shape, dtype) != dtype else [])
    for shape in [(1, 1), (17, 33), (4096, 512), (333, 4096), (8, 8192)]
    for dtype in [torch.float32, torch.float16, torch.bfloat16]])
def test_cuda_version_matches_torch(ext, shape, dtype):
    assert ext.kind == "cuda"
    x = random_tensor(shape, dtype, DEVICE)
    w = (1 + 0.1 * random_tensor(shape[-1], torch.float32, DEVICE)).to(dtype)
    check_against_torch(x, w, 1e-6, random_tensor(shape, dtype, DEVICE))


@pytest.mark.gpu(reason="runs the CUDA kernels")
def test_cuda_version_in_the_bf16_model_tracks_the_torch_twin(ext):
    cfg = m.config(m.GPT_SMALL, n_layers=2)
    torch.manual_seed(0)
    a, b = m.GPT(cfg).to(DEVICE), m.GPT(cfg).to(DEVICE)
    b.load_state_dict(a.state_dict())
    b.use_ops(m.Ops("cuda_ext", norm=cx.ext_norm))
    idx = torch.randint(0, cfg.vocab_size, (4, 128), device=DEVICE)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        losses = [model.loss(idx, idx) for model in (a, b)]
    assert_close(losses[1], losses[0], rtol=1e-3, atol=1e-4)  # the norm runs in fp32 either way
