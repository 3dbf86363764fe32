"""week4_triton_dl.fused_linear: GEMMs with a norm prologue and bias / SwiGLU / residual epilogues.

Forward against float64 at small odd shapes (primes, 1, non-multiples of every tile) with `out`
poisoned; gradients against torch autograd of the unfused sequence in float64; the registered op
through opcheck and torch.compile(fullgraph=True); bad input refused before launch; NaN and Inf as
torch propagates them; on the GPU, the capstone's shapes in bf16.

Error model (forward). Inputs are exact in their dtype; the kernel multiplies them exactly and adds
K products in fp32 (unit roundoff u32 = 2^-24), then rounds once to the output dtype (u_out). So, against the reference also rounded once,
|out - ref| <= 2 u_out |ref| + K u32 (|x| @ |W|^T) (Higham's gamma_K, first order), the second term
taken at its maximum over the output (one atol). The norm prologue also rounds the normalized A to
W's dtype, where the float64 reference rounds it too, but the two rstd values differ in the last
fp32 bits and may round an element of A the other way: one more u_in (|x_n| @ |W|^T). SwiGLU
propagates the dot's error delta through h = silu(g) u: |dh| <= (|silu'(g) u| + |silu(g)|) delta.
"""
import math

import pytest
import torch

from course import runtime
from course.check import assert_close, dtype_params, poisoned, random_tensor

from week4_triton_dl import fused_linear as fl
from week4_triton_dl.fused_linear import epilogues as ep
from week4_triton_dl.fused_linear import launch
from week4_triton_dl.fused_linear import prologue_norm as pn

# The kernel holds the exercise's holes (--impl=exercises loads the stub's): the forward tests launch it
# by name (`kernels=KERNELS`); the op's tests (backward, opcheck, compile) run the solution's.
kern = runtime.lesson("week4_triton_dl.fused_linear.kernel")
KERNELS = launch.kernels_of(kern.fused_linear_kernel)
DEVICE = runtime.DEVICE
DTYPES = dtype_params([torch.float32, torch.float16, torch.bfloat16])
U = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
# (M, K, N): one row, primes, and sizes past the simulated 32 x 32 x 32 tile in every dimension.
SHAPES = [(1, 16, 1), (7, 33, 5), (37, 45, 19), (64, 17, 70)]
EPS = 1e-5
KINDS = ("plain", "bias", "residual", "swiglu", "norm", "norm+swiglu", "norm+residual")


def _inputs(kind, M, K, N, dtype, *, x_dtype=None):
    """(x, weight, kwargs of launch.fused_linear) for one combination; weight (2N, K) with swiglu."""
    x = random_tensor((M, K), x_dtype or dtype, DEVICE)
    weight = random_tensor((2 * N if "swiglu" in kind else N, K), dtype, DEVICE, scale=max(K, 1) ** -0.5)
    kw = {}
    if "bias" in kind:
        kw["bias"] = random_tensor(N, dtype, DEVICE)
    if "residual" in kind:
        kw["residual"] = random_tensor((M, N), torch.float32, DEVICE)
    if "norm" in kind:
        kw["norm_weight"], kw["eps"] = random_tensor(K, x.dtype, DEVICE), EPS
    kw["swiglu"] = "swiglu" in kind
    return x, weight, kw


def _reference(x, weight, kw):
    """(float64 result, its atol by the error model, out dtype)."""
    a = x.double()
    a_abs = a.abs()
    norm_term = 0.0
    if kw.get("norm_weight") is not None:
        a = pn.normed_reference(x.double(), kw["norm_weight"].double(), EPS, weight.dtype).double()
        a_abs = a.abs()
        norm_term = U[weight.dtype] * _max(a_abs @ weight.double().abs().t()) if weight.dtype != torch.float32 else 0.0
    acc = a @ weight.double().t()
    K = x.shape[1]
    delta = K * U[torch.float32] * _max(a_abs @ weight.double().abs().t()) + norm_term
    if kw.get("bias") is not None:
        acc = acc + kw["bias"].double()
    if kw.get("swiglu"):
        g, u = acc.chunk(2, dim=-1)
        s = torch.sigmoid(g)
        acc = g * s * u
        delta *= _max((s * (1 + g * (1 - s)) * u).abs().add((g * s).abs()))
    if kw.get("residual") is not None:
        acc = acc + kw["residual"].double()
        return acc, delta, kw["residual"].dtype
    return acc, delta, weight.dtype


def _rtol(dtype):
    """Both the kernel's result and the float64 reference are rounded once to `dtype`: 2 u apart at most
    (an exact value near a rounding midpoint may go either way), beside the atol of the sum."""
    return 2 * U[dtype]


def _max(t):
    return float(t.max()) if t.numel() else 0.0


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("M, K, N", SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_matches_float64(kind, M, K, N, dtype):
    x, weight, kw = _inputs(kind, M, K, N, dtype)
    want, atol, out_dtype = _reference(x, weight, kw)
    out = poisoned((M, N), out_dtype, DEVICE)
    got = launch.fused_linear(x, weight, out=out, kernels=KERNELS, **kw)
    assert got.out is out, "the launcher must write into the `out` it was given"
    assert_close(out, want.to(out_dtype), rtol=_rtol(out_dtype), atol=atol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_prologue_takes_the_fp32_residual_stream(dtype):
    """Under autocast the norm reads fp32 x and the matmul runs in 16-bit: mixed dtypes in one launch."""
    x, weight, kw = _inputs("norm", 37, 45, 19, dtype, x_dtype=torch.float32)
    want, atol, out_dtype = _reference(x, weight, kw)
    got = launch.fused_linear(x, weight, kernels=KERNELS, **kw).out
    assert_close(got, want.to(out_dtype), rtol=_rtol(out_dtype), atol=atol)


def test_swiglu_store_pre_writes_g_and_u():
    x, weight, kw = _inputs("swiglu", 37, 45, 19, torch.float32)
    r = launch.fused_linear(x, weight, store_pre=True, kernels=KERNELS, **kw)
    want = x.double() @ weight.double().t()
    assert_close(r.pre, want.float(), atol=45 * U[torch.float32] * float((x.abs() @ weight.abs().t()).max()))


def test_row_rstd_matches_float64():
    x = random_tensor((37, 300), torch.float32, DEVICE)  # 300: two column blocks of 256
    assert_close(pn.row_rstd(x, EPS), pn.row_rstd_reference(x, EPS).float(), rtol=300 * U[torch.float32], atol=0)


def _grads(fn, ref_fn, tensors, ref_tensors=None):
    """Gradients of fn(*tensors) and of ref_fn in float64 for the same upstream gradient."""
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    out = fn(*leaves)
    dout = random_tensor(out.shape, out.dtype, DEVICE)
    out.backward(dout)
    ref_leaves = [t.detach().double().clone().requires_grad_(True) for t in tensors]
    ref_fn(*ref_leaves).backward(dout.double())
    return [t.grad for t in leaves], [t.grad for t in ref_leaves]


# The backward in fp32 chains up to three fp32 reductions (the GEMMs over N or M <= 74 terms, the
# norm's row sum over K): each within L u32 ~ 4.4e-6 of its absolute sum, and the absolute sums here
# are within ~10x of the gradient's largest value: 1e-4 of that value bounds it with margin, where a
# wrong formula is off by O(1).
BACKWARD_CASES = {
    "swiglu": (lambda x, w: fl.linear_swiglu(x, w), fl.linear_swiglu_torch, ("x", "w2")),
    "residual": (lambda x, w, r: fl.linear_residual(x, w, r), fl.linear_residual_torch, ("x", "w", "r")),
    "residual+bias": (lambda x, w, r, b: fl.linear_residual(x, w, r, b), fl.linear_residual_torch, ("x", "w", "r", "b")),
    "bias": (lambda x, w, b: fl.linear_bias(x, w, b), torch.nn.functional.linear, ("x", "w", "b")),
    "norm": (lambda x, n, w: fl.norm_linear(x, n, w, EPS), lambda x, n, w: fl.norm_linear_torch(x, n, w, EPS), ("x", "n", "w")),
    "norm+swiglu": (lambda x, n, w: fl.norm_linear(x, n, w, EPS, swiglu=True),
                    lambda x, n, w: fl.norm_linear_torch(x, n, w, EPS, swiglu=True), ("x", "n", "w2")),
}


@pytest.mark.parametrize("case", list(BACKWARD_CASES))
@pytest.mark.parametrize("lead", [(37,), (2, 3)], ids=["rows", "batched"])
def test_backward_matches_torch_autograd(case, lead):
    fn, ref_fn, names = BACKWARD_CASES[case]
    K, N = 45, 19
    pool = {"x": random_tensor((*lead, K), torch.float32, DEVICE), "w": random_tensor((N, K), torch.float32, DEVICE),
            "w2": random_tensor((2 * N, K), torch.float32, DEVICE), "r": random_tensor((*lead, N), torch.float32, DEVICE),
            "b": random_tensor(N, torch.float32, DEVICE), "n": random_tensor(K, torch.float32, DEVICE)}
    got, want = _grads(fn, ref_fn, [pool[n] for n in names])
    for name, g, w in zip(names, got, want):
        scale = float(w.abs().max())
        assert_close(g, w.float(), rtol=1e-4, atol=1e-4 * scale, name=f"d{name}")


@pytest.mark.parametrize("kind", KINDS)
def test_registered_op_passes_opcheck(kind):
    x, weight, kw = _inputs(kind, 7, 33, 5, torch.float32)
    args = [t.requires_grad_(True) if isinstance(t, torch.Tensor) else t
            for t in (x, weight, kw.get("bias"), kw.get("residual"), kw.get("norm_weight"))]
    torch.library.opcheck(fl.fused_linear_op, (*args, EPS, kw["swiglu"], kw["swiglu"]))


def _block(linear_residual, norm_linear):
    def block(x, n1, w_qkv, w_proj, n2, w_up, w_down):
        h = norm_linear(x, n1, w_qkv, EPS)[..., :x.shape[-1]]
        x = linear_residual(h, w_proj, x)
        return linear_residual(norm_linear(x, n2, w_up, EPS, swiglu=True), w_down, x)
    return block


def test_block_compiles_without_graph_breaks():
    """A pre-norm block as the capstone writes it with every fusion: one graph (fullgraph=True), and
    the values and gradients of the same block of torch ops in float64."""
    d, f = 32, 48
    shapes = [(2, 7, d), (d,), (3 * d, d), (d, d), (d,), (2 * f, d), (d, f)]
    inputs = [random_tensor(s, torch.float32, DEVICE, scale=0.3) for s in shapes]
    compiled = torch.compile(_block(fl.linear_residual, fl.norm_linear), fullgraph=True,
                             backend=runtime.pick(gpu="inductor", sim="aot_eager"))
    got, want = _grads(compiled, _block(fl.linear_residual_torch, fl.norm_linear_torch), inputs)
    for g, w in zip(got, want):
        assert_close(g, w.float(), rtol=1e-4, atol=1e-4 * float(w.abs().max()))


def test_autocast_casts_like_f_linear():
    """Under autocast the 16-bit matmul and the fp32 residual stream, as in the capstone's step."""
    low = runtime.pick(gpu=torch.bfloat16, sim=torch.float16)
    x = random_tensor((2, 5, 32), torch.float32, DEVICE).requires_grad_(True)
    w, n = random_tensor((64, 32), torch.float32, DEVICE), random_tensor(32, torch.float32, DEVICE)
    with torch.autocast(DEVICE.type, dtype=low):
        h = fl.norm_linear(x, n, w, EPS, swiglu=True)
        y = fl.linear_residual(h, random_tensor((32, 32), torch.float32, DEVICE), x)
    assert h.dtype == low and y.dtype == torch.float32
    y.sum().backward()
    assert x.grad.dtype == torch.float32 and torch.isfinite(x.grad).all()


# ----------------------------------------------------------------------------- refused inputs
def _good():
    x, weight, kw = _inputs("residual", 7, 33, 5, torch.float32)
    return dict(x=x, weight=weight, residual=kw["residual"])


BAD = {
    "x not a tensor": (dict(x=[[1.0]]), TypeError),
    "x int": (dict(x=torch.ones(7, 33, dtype=torch.int32, device=DEVICE)), TypeError),
    "x 3-D": (dict(x=torch.ones(1, 7, 33, device=DEVICE)), ValueError),
    "K mismatch": (dict(weight=torch.ones(5, 32, device=DEVICE)), ValueError),
    "dtypes differ": (dict(weight=torch.ones(5, 33, dtype=torch.float16, device=DEVICE)), TypeError),
    "residual shape": (dict(residual=torch.ones(7, 6, device=DEVICE)), ValueError),
    "bias shape": (dict(bias=torch.ones(6, device=DEVICE)), ValueError),
    "odd swiglu weight": (dict(swiglu=True, residual=None), ValueError),
    "swiglu with bias": (dict(swiglu=True, residual=None, weight=torch.ones(6, 33, device=DEVICE),
                              bias=torch.ones(3, device=DEVICE)), ValueError),
    "store_pre without swiglu": (dict(store_pre=True), ValueError),
    "norm_weight shape": (dict(norm_weight=torch.ones(32, device=DEVICE)), ValueError),
    "norm_weight dtype": (dict(norm_weight=torch.ones(33, dtype=torch.float16, device=DEVICE)), TypeError),
    "eps zero": (dict(norm_weight=torch.ones(33, device=DEVICE), eps=0.0), ValueError),
    "out dtype": (dict(out=torch.empty(7, 5, dtype=torch.float16, device=DEVICE)), TypeError),
    "out shape": (dict(out=torch.empty(7, 6, device=DEVICE)), ValueError),
    "tile": (dict(tile={"BLOCK_M": 32}), ValueError),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_refused_before_launch(case, monkeypatch):
    changes, error = BAD[case]
    args = {**_good(), **changes}
    def no_launch(*a, **k):
        raise AssertionError("launched before the inputs were checked")
    monkeypatch.setattr(launch, "row_rstd", no_launch)
    monkeypatch.setattr(launch, "_default_kernels", no_launch)
    with pytest.raises(error):
        launch.fused_linear(**args)


# ---------------------------------------------------------------------------- NaN and Inf
def test_nan_and_inf_propagate_as_in_torch():
    x, weight, kw = _inputs("residual", 37, 45, 19, torch.float32)
    x[3, 7] = math.nan           # row 3 of the product is NaN in every column
    kw["residual"][5, 2] = math.inf  # one output element is Inf
    want, _, _ = _reference(x, weight, kw)
    got = launch.fused_linear(x, weight, **kw).out
    assert torch.isnan(got[3]).all() and torch.isinf(got[5, 2]) and torch.isfinite(got[6]).all()
    assert torch.equal(torch.isnan(got), torch.isnan(want)) and torch.equal(torch.isinf(got), torch.isinf(want))
    # The norm: a row holding an Inf has rstd NaN in torch (inf / inf): the whole row comes out NaN.
    x, weight, kw = _inputs("norm", 37, 45, 19, torch.float32)
    x[4, 1] = math.inf
    got = launch.fused_linear(x, weight, **kw).out
    want = fl.norm_linear_torch(x, kw["norm_weight"], weight, EPS)
    assert torch.isnan(got[4]).all() and torch.equal(torch.isnan(got), torch.isnan(want))


def test_empty_and_k_zero():
    x, weight, kw = _inputs("residual", 0, 16, 5, torch.float32)
    assert launch.fused_linear(x, weight, **kw).out.shape == (0, 5)
    x, weight, kw = _inputs("swiglu", 4, 0, 5, torch.float32)
    r = launch.fused_linear(x, weight, store_pre=True, **kw)
    assert torch.equal(r.out, torch.zeros(4, 5, device=DEVICE)) and torch.equal(r.pre, torch.zeros(4, 10, device=DEVICE))


# ----------------------------------------------------------------------------- the capstone's GEMMs
# tokens x K -> N of the 124M capstone step (8 x 1024 tokens, d = 768, SwiGLU hidden 2048): QKV 2304
# (norm prologue), proj 768 (residual), up 2 x 2048 (norm + SwiGLU), down 2048 -> 768 (residual).
GPU_SIZE = pytest.mark.gpu(reason="bf16 at 8192 rows (too slow to simulate; simulation computes bf16 in float32)")
CAPSTONE = [pytest.param(*case, marks=GPU_SIZE, id="-".join(map(str, case)))
            for case in [("norm", 8192, 768, 2304), ("residual", 8192, 768, 768), ("norm+swiglu", 8192, 768, 2048),
                         ("swiglu", 8192, 768, 2048), ("residual", 8192, 2048, 768), ("plain", 8192, 768, 50304)]]


@pytest.mark.parametrize("kind, M, K, N", CAPSTONE)
def test_capstone_shapes_bf16(kind, M, K, N):
    x, weight, kw = _inputs(kind, M, K, N, torch.bfloat16, x_dtype=torch.float32 if "norm" in kind else None)
    want, atol, out_dtype = _reference(x, weight, kw)
    out = poisoned((M, N), out_dtype, DEVICE)
    launch.fused_linear(x, weight, out=out, kernels=KERNELS, **kw)
    assert_close(out, want.to(out_dtype), rtol=_rtol(out_dtype), atol=atol)


def test_bf16_is_refused_on_a_t4_naming_float16(monkeypatch):
    """A bf16 tl.dot on sm_75 would run a slow fallback: refused before launch, as week 3's matmul does."""
    monkeypatch.setattr(runtime, "capability", lambda device=None: (7, 5))
    x, w = torch.ones(16, 16, dtype=torch.bfloat16, device=DEVICE), torch.ones(8, 16, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(runtime.NotOnThisGpu, match=r"bfloat16 .*use float16"):
        launch.fused_linear(x, w)
    with pytest.raises(runtime.NotOnThisGpu, match=r"bfloat16 .*use float16"):
        fl.norm_linear(torch.ones(4, 16, device=DEVICE), torch.ones(16, device=DEVICE), w)


def test_residual_tiles_keep_registers_and_stale_rows_are_ignored(monkeypatch):
    """The residual epilogue holds an fp32 residual tile beside the accumulator: on sm_90 tiles with 128
    accumulator elements a thread spill (255 registers and a stack, compiled ahead of time), so a
    residual launch may only take tiles with at most RESIDUAL_ACC_PER_THREAD; others keep every tile
    that fits, the Hopper shapes included. A table row swept before the rule is not used."""
    monkeypatch.setattr(runtime, "shared_memory_per_block", lambda: 227 * 1024)  # an H100's
    every = launch.candidates(launch.SINGLE_CONFIGS, 2, 2, 1, residual=False)
    residual = launch.candidates(launch.SINGLE_CONFIGS, 2, 2, 1, residual=True)
    assert len(every) == len(launch.SINGLE_CONFIGS)
    assert residual and all(launch.accumulator_per_thread(c) <= launch.RESIDUAL_ACC_PER_THREAD for c in residual)
    assert any((c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) == (128, 128, 8, 3) for c in residual)
    spilling = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
    row = type("Row", (), {"tile": spilling})()
    monkeypatch.setattr(launch.TABLE, "get", lambda key: row)
    assert launch.tile_for(8192, 768, 768, torch.bfloat16, "residual", None) is None
    assert launch.tile_for(8192, 768, 768, torch.bfloat16, "plain", None) == spilling


# ----------------------------------------------------------------------------- the TMA rung (kernel_tma.py)
# 16-bit rows of K elements must start on 16-byte boundaries (TMA): K a multiple of 8. Shapes past the
# simulated 32 x 32 x 32 tile in every dimension, K short of one tile (zero-filled by the descriptor).
TMA_SHAPES = [(1, 16, 1), (7, 32, 5), (37, 48, 19), (64, 24, 70), (65, 72, 33)]
tma_gpu = pytest.mark.skipif(runtime.on_gpu() and not runtime.has_capability((9, 0)),
                             reason="the fused linear's TMA rung needs an sm_90 GPU (H100/H200)")


@tma_gpu
@pytest.mark.parametrize("kind", ("plain", "bias", "residual", "bias+residual"))
@pytest.mark.parametrize("M, K, N", TMA_SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in TMA_SHAPES])
@pytest.mark.parametrize("dtype", dtype_params([torch.float16, torch.bfloat16]))
def test_tma_rung_matches_float64(kind, M, K, N, dtype):
    x, weight, kw = _inputs(kind, M, K, N, dtype)
    want, atol, out_dtype = _reference(x, weight, kw)
    out = poisoned((M, N), out_dtype, DEVICE)
    got = launch.fused_linear(x, weight, out=out, rung="tma", **kw)
    assert got.out is out, "the TMA rung must write into the `out` it was given"
    assert_close(out, want.to(out_dtype), rtol=_rtol(out_dtype), atol=atol)


@pytest.mark.parametrize("case", ["norm", "swiglu", "fp32", "unaligned K", "bad rung"])
def test_tma_rung_refused_where_it_cannot_run(case):
    """rung='tma' where TMA cannot run this call: ValueError naming rung and why, before any launch."""
    dtype = torch.float32 if case == "fp32" else torch.float16
    x, weight, kw = _inputs(case if case in ("norm", "swiglu") else "plain", 7, 45 if case == "unaligned K" else 32, 5, dtype)
    with pytest.raises(ValueError, match="rung"):
        launch.fused_linear(x, weight, rung="bogus" if case == "bad rung" else "tma", **kw)


def test_a_tma_table_row_falls_back_to_the_tiled_rung_where_tma_cannot_run(monkeypatch):
    """A table row swept on the TMA rung, for a call TMA cannot take (fp32 here): the tiled rung runs
    with the row's block sizes (its TMA-only keys dropped)."""
    tma_tile = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, FLATTEN=True)
    row = type("Row", (), {"tile": tma_tile, "rung": "tma"})()
    monkeypatch.setattr(launch.TABLE, "get", lambda key: row)
    x, weight, kw = _inputs("bias", 37, 45, 19, torch.float32)
    want, atol, out_dtype = _reference(x, weight, kw)
    out = poisoned((37, 19), out_dtype, DEVICE)
    launch.fused_linear(x, weight, out=out, **kw)
    assert_close(out, want.to(out_dtype), rtol=_rtol(out_dtype), atol=atol)
