"""week5_integration.lora: the fused LoRA kernel and its autograd op vs float64 torch, the module, apply_lora.

Error model. The kernel accumulates K products in fp32 (fp64 for fp64) and rounds the output once;
the low-rank term is rounded once more where it is stored (xa in the input dtype, as torch stores
x A^T). For inputs of size ~1 that is a few units of roundoff u times the largest output, plus
~sqrt(n) u from a sum of n products (random-walk rounding): outputs are compared with
atol = (8 + sqrt(n)) u max|reference|, gradients (two more roundings, one more sum) with
(16 + sqrt(n)) u max|reference|, n the longest sum of the shape. The sqrt(n) term matters in
fp32 only. At K = 2048 each output's sum error has a spread of ~u/sqrt(12) sqrt(2048) |partial
sums| ~ 9 u, and the worst of 200k outputs sits ~4.5 spreads out: ~40 u, past 8 u (the H100 run
of 2026-11-23 failed that fp32 shape at 8 u and passed K = 768). In fp16/bf16 the one rounding of
the output dominates. A missing scale, a transposed operand, an
unmasked tail or an unwritten tile is O(max|reference|) wrong: 10^4-10^6 times over these.
"""
import copy

import pytest
import torch
import torch.nn as nn

from course import runtime
from course.check import (INT32_LIMIT, assert_close, check_layouts, dtype_params, huge, layouts, past_int32_marks,
                          poisoned, random_tensor, with_specials)
from week5_integration import model as gpt

lr = runtime.lesson("week5_integration.lora")
kernels = runtime.lesson("week5_integration.lora_kernels")  # tested through lr's autograd op and module
DEVICE = runtime.DEVICE
UNIT = {torch.float64: 2.0**-52, torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
KERNEL_DTYPES = dtype_params([torch.float32, torch.float64, torch.float16, torch.bfloat16])
# (tokens M, in K, out N, rank r): ones, primes, not multiples of the 32-wide simulated tiles,
# K > BLOCK_K (several loop steps), r not a power of two, r = 16 and r above the 16-wide padding.
SHAPES = [(1, 1, 1, 1), (7, 33, 17, 3), (37, 64, 129, 8), (65, 100, 48, 16), (3, 20, 30, 20)] + runtime.pick(
    gpu=[(1000, 768, 2304, 16), (257, 2048, 768, 64)], sim=[])
# What the default run keeps (`--slow` or `-m slow` runs the rest of each cross product). On a GPU
# every (dtype, shape class) is a compile of the fused kernel (and of its backward), and fp32 is
# the costly one: its exact (ieee) tl.dot over a 128 x 64 x 64 tile takes 5-8 s to compile, each
# layout or size class anew (test_non_dense_layouts spent 36-39 s per layout on that). So each
# shape once outside bf16 (simulation skips bf16) and each dtype at least once (fp32 at (7, 33,
# 17, 3), the size class its other tests here share; fp64, the cheap one, three times): ones,
# primes, K > BLOCK_K, r = 16 and r above the 16-wide padding; and one autotuned case, fp16 at
# (1000, 768, 2304, 16). Slow: the rest of dtype x shape, the fp32 layouts and fp32 empty sums.
DEFAULT_SHAPES = {torch.float32: [(7, 33, 17, 3)],
                  torch.float64: [(1, 1, 1, 1), (37, 64, 129, 8), (65, 100, 48, 16)],
                  torch.float16: [(3, 20, 30, 20), (1000, 768, 2304, 16)], torch.bfloat16: [(37, 64, 129, 8)]}


def dtype_shapes(shapes, default):
    """(dtype, shape) params over KERNEL_DTYPES x shapes, slow unless shape in default[dtype]."""
    return [pytest.param(d.values[0], s, id=f"{d.id}-{s}",
                         marks=[*d.marks, *(() if s in default[d.values[0]] else [pytest.mark.slow])])
            for d in KERNEL_DTYPES for s in shapes]


def atol(ref, dtype, k, depth=1):
    """(k + sqrt(depth)) u max|ref|: k roundings of the largest value, and a depth-term fp32 sum."""
    return (k + depth ** 0.5) * UNIT[dtype] * float(ref.detach().abs().max().clamp_min(1e-30))


def operands(m, k, n, r, dtype, requires_grad=False):
    x = random_tensor((m, k), dtype, DEVICE)
    w = random_tensor((n, k), dtype, DEVICE, scale=max(k, 1) ** -0.5)
    a = random_tensor((r, k), dtype, DEVICE, scale=max(k, 1) ** -0.5)
    b = random_tensor((n, r), dtype, DEVICE, scale=r ** -0.5)  # a trained B: not the zero it starts at
    return x.requires_grad_(requires_grad), w, a.requires_grad_(requires_grad), b.requires_grad_(requires_grad)


def reference64(x, w, a, b, scale, x_in=None):
    """Output and the float64 leaves (x, A, B[, x_in]) of the unfused arithmetic."""
    leaves = [t.detach().double().requires_grad_() for t in (x, a, b)]
    extra = [] if x_in is None else [x_in.detach().double().requires_grad_()]
    y = lr.lora_linear_torch(leaves[0], w.double(), leaves[1], leaves[2], scale,
                             adapter_input=extra[0] if extra else None)
    return y, leaves + extra


def test_the_layer_runs_the_kernels_beside_it():
    # lora.py imports its kernels relatively: a stub's layer runs the learner's kernel stub
    # (exercises/lora_kernels.py), a solution's the solution's.
    assert lr.lora_forward is kernels.lora_forward and lr.lora_fused_kernel is kernels.lora_fused_kernel


# ------------------------------------------------------------------------------ the kernels
@pytest.mark.parametrize("dtype, shape", dtype_shapes(SHAPES, DEFAULT_SHAPES))
def test_fused_forward_matches_float64(dtype, shape):
    m, k, n, r = shape
    x, w, a, b = operands(m, k, n, r, dtype)
    out, xa = poisoned((m, n), dtype, DEVICE), poisoned((m, r), dtype, DEVICE)
    y, xa_got = lr.lora_forward(x, w, a, b, 2.0, out=out, xa_out=xa)
    assert y is out and xa_got is xa, "the launcher must write into the buffers it was given"
    want, _ = reference64(x, w, a, b, 2.0)
    assert_close(y, want.to(dtype), atol=atol(want, dtype, 8, max(shape)), name="y")
    xa_want = 2.0 * x.double() @ a.double().t()
    assert_close(xa, xa_want.to(dtype), atol=atol(xa_want, dtype, 8, max(shape)), name="xa = s x A^T")


# The same shapes as the forward (whose compiled kernels they reuse), but for the large one: the
# backward's kernels are autotuned anew there, slow (the forward is the default's autotuned case).
@pytest.mark.parametrize("dtype, shape", dtype_shapes(SHAPES, {d: [s for s in shapes if s != (1000, 768, 2304, 16)]
                                                               for d, shapes in DEFAULT_SHAPES.items()}))
def test_gradients_match_float64(dtype, shape):
    m, k, n, r = shape
    x, w, a, b = operands(m, k, n, r, dtype, requires_grad=True)
    y = lr.lora_linear(x, w, a, b, 0.5)
    dy = random_tensor((m, n), dtype, DEVICE)
    grads = torch.autograd.grad(y, (x, a, b), dy)
    want, leaves = reference64(x, w, a, b, 0.5)
    assert_close(y, want.to(dtype), atol=atol(want, dtype, 8, max(shape)), name="y")
    wants = torch.autograd.grad(want, leaves, dy.double())
    for name, got, ref in zip(("dx", "dA", "dB"), grads, wants):
        assert_close(got, ref.to(dtype), atol=atol(ref, dtype, 16, max(shape)), name=name)


def test_opcheck_lora_ops():
    # The registered ops (what torch.compile sees): schema (no mutation, no aliasing), fake
    # tensors, the autograd registration and the compiler's dispatch paths, run for real.
    x, w, a, b = operands(7, 33, 17, 3, torch.float32, requires_grad=True)
    torch.library.opcheck(lr.lora_linear_op, (x, w, a, b, 0.5))
    y, xa = lr.lora_linear_op(x.detach(), w, a.detach(), b.detach(), 0.5)
    dy = random_tensor(y.shape, torch.float32, DEVICE)
    torch.library.opcheck(lr.lora_linear_backward_op, (dy, x.detach(), xa, w, a.detach(), b.detach(), 0.5))


def test_compiled_lora_layer_has_no_graph_break_and_matches_eager():
    # fullgraph=True raises on any graph break; on the GPU Inductor compiles the torch code around
    # the two ops (forward, backward), in simulation aot_eager traces the same graphs.
    x, w, a, b = operands(7, 33, 17, 3, torch.float32, requires_grad=True)
    dy = random_tensor((7, 17), torch.float32, DEVICE)

    def layer(x, a, b):
        return torch.relu(lr.lora_linear(x * 2.0, w, a, b, 0.5)) + 1.0

    compiled = torch.compile(layer, fullgraph=True, backend=runtime.pick(gpu="inductor", sim="aot_eager"))
    got = compiled(x, a, b)
    want = layer(x, a, b)
    assert_close(got, want, name="compiled y")
    for name, g, ref in zip(("dx", "dA", "dB"), torch.autograd.grad(got, (x, a, b), dy),
                            torch.autograd.grad(want, (x, a, b), dy)):
        assert_close(g, ref, name=f"compiled {name}")


# Default: the ragged shape in fp32 and fp16, 1 x 1 in fp64 and bf16; slow: the other four.
@pytest.mark.parametrize("dtype, shape", dtype_shapes([(1, 1, 1, 1), (13, 40, 70, 5)], {
    torch.float32: [(13, 40, 70, 5)], torch.float16: [(13, 40, 70, 5)], torch.float64: [(1, 1, 1, 1)],
    torch.bfloat16: [(1, 1, 1, 1)]}))
def test_two_pass_kernel_matches_float64(dtype, shape):
    m, k, n, r = shape
    x, w, a, b = operands(m, k, n, r, dtype)
    xa = (x.double() @ a.double().t() * 3.0).to(dtype)
    out = poisoned((m, n), dtype, DEVICE)
    assert lr.lora_epilogue(x, w, xa, b, out=out) is out
    want = x.double() @ w.double().t() + xa.double() @ b.double().t()
    assert_close(out, want.to(dtype), atol=atol(want, dtype, 8, max(shape)))
    got = lr.lora_linear_two_pass(x, w, a, b, 3.0)
    want, _ = reference64(x, w, a, b, 3.0)
    assert_close(got, want.to(dtype), atol=atol(want, dtype, 8, max(shape)), name="lora_linear_two_pass")


# Each operand in each layout is a compile of its own (strides of 1 or 16k, unaligned starts): in
# fp32 that was 36-39 s per layout on the H100. The default runs the column block (q out of a
# fused qkv: row strides that are not the row length) in fp16; the backward already feeds the
# fused kernel transposed operands (W^T, B^T, A^T) in test_gradients_match_float64. Slow: every
# layout in fp32.
@pytest.mark.parametrize("dtype, layout", [pytest.param(torch.float16, "column_slice", id="float16-column_slice")] +
                         [pytest.param(torch.float32, layout, id=f"float32-{layout}", marks=pytest.mark.slow)
                          for layout in layouts(2)])
def test_non_dense_layouts(dtype, layout):
    """x (a column block of a wider buffer, as q from a fused qkv), W (transposed), A, B and out in
    every layout: the kernels take every operand's strides."""
    x, w, a, b = operands(19, 40, 33, 5, dtype)
    want, _ = reference64(x, w, a, b, 2.0)
    check_layouts(lambda x, w, a, b, out=None: lr.lora_forward(x, w, a, b, 2.0, out=out, store_xa=False)[0],
                  {"x": x, "w": w, "a": a, "b": b}, want.to(dtype), layout, strided_ok=True,
                  atol=atol(want, dtype, 8, 40))


@pytest.mark.parametrize("which", [pytest.param(w, marks=past_int32_marks())
                                   for w in ["x", "weight", "lora_a", "lora_b", "out", "xa_out"]])
def test_spans_past_2_to_the_31_are_refused(which):
    """The kernels' offsets are int32: an operand or output reaching 2^31 elements past its start
    is refused before launching (rows 2^30 apart: 4 GiB of fp16, address space only on the CPU)."""
    m, k, n, r = 3, 16, 3, 3
    x, w, a, b = operands(m, k, n, r, torch.float16)
    base = huge(INT32_LIMIT + 64, torch.float16, DEVICE, tail=64)
    far = lambda rows, cols: base.as_strided((rows, cols), (2**30, 1))  # noqa: E731
    args = {"x": x, "weight": w, "lora_a": a, "lora_b": b, "out": None, "xa_out": None}
    args[which] = far(*{"x": (m, k), "weight": (n, k), "lora_a": (r, k), "lora_b": (n, r), "out": (m, n),
                        "xa_out": (m, r)}[which])
    with pytest.raises(ValueError, match=f"{which} spans more than 2\\^31"):
        lr.lora_forward(args["x"], args["weight"], args["lora_a"], args["lora_b"], 1.0, out=args["out"],
                        xa_out=args["xa_out"])


def test_gradcheck_float64():
    # Small: gradcheck runs the kernels twice per input element.
    x, w, a, b = operands(3, 5, 4, 2, torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, a, b: lr.lora_linear(x, w, a, b, 1.5), (x, a, b))
    x_in = random_tensor((3, 5), torch.float64, DEVICE).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, a, b, xi: lr.lora_linear(x, w, a, b, 1.5, adapter_input=xi),
                                    (x, a, b, x_in))


@pytest.mark.parametrize("dtype", dtype_params([torch.float32, torch.bfloat16]))
def test_separate_adapter_input_matches_float64(dtype):
    # Dropout gives the adapter dropout(x) while W sees x: the two-pass path, gradients to both.
    x, w, a, b = operands(29, 50, 35, 6, dtype, requires_grad=True)
    x_in = random_tensor((29, 50), dtype, DEVICE).requires_grad_()
    y = lr.lora_linear(x, w, a, b, 2.0, adapter_input=x_in)
    dy = random_tensor(y.shape, dtype, DEVICE)
    grads = torch.autograd.grad(y, (x, a, b, x_in), dy)
    want, leaves = reference64(x, w, a, b, 2.0, x_in)
    assert_close(y, want.to(dtype), atol=atol(want, dtype, 8), name="y")
    for name, got, ref in zip(("dx", "dA", "dB", "dx_in"), grads, torch.autograd.grad(want, leaves, dy.double())):
        assert_close(got, ref.to(dtype), atol=atol(ref, dtype, 16), name=name)


def test_leading_dimensions_and_frozen_weight_get_no_gradient():
    x, w, a, b = operands(12, 24, 10, 4, torch.float32, requires_grad=True)
    x3 = x.detach().reshape(3, 4, 24).requires_grad_()
    y = lr.lora_linear(x3, w, a, b, 1.0)
    assert y.shape == (3, 4, 10)
    y.sum().backward()
    assert x3.grad.shape == x3.shape and w.grad is None
    want, _ = reference64(x, w, a, b, 1.0)
    assert_close(y.reshape(12, 10), want.float(), atol=atol(want, torch.float32, 8))


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # NumPy, running the interpreter's dots
def test_nan_and_inf_propagate_as_in_torch():
    # Specials in a few rows of x; each must poison its own rows exactly as the unfused fp32
    # arithmetic does (NaN where torch has NaN, the same Inf where it has Inf) and no other row.
    # W and B are small so that finite rows cannot overflow in either summation order.
    m, k, n, r = 9, 40, 23, 3
    x, w, a, b = operands(m, k, n, r, torch.float32)
    x = with_specials(x)
    w, b = w * 0.01, b * 0.01
    got = lr.lora_linear(x, w, a, b, 2.0)
    want = lr.lora_linear_torch(x, w, a, b, 2.0)
    assert_close(got, want, rtol=1e-5, atol=1e-5)


# K = 0 (and the backward's N = 0) launch kernels of their own size class: fp16 by default (a
# short compile), fp32 (5-8 s per compile on the GPU) slow.
@pytest.mark.parametrize("dtype", [pytest.param(torch.float16, id="float16"),
                                   pytest.param(torch.float32, marks=pytest.mark.slow, id="float32")])
@pytest.mark.parametrize("shape", [(0, 8, 5, 2), (4, 0, 5, 1), (4, 8, 0, 1)], ids=str)
def test_empty_inputs(shape, dtype):
    m, k, n, r = shape
    x, w, a, b = operands(m, k, n, r, dtype, requires_grad=True)
    y = lr.lora_linear(x, w, a, b, 2.0)
    assert y.shape == (m, n)
    assert_close(y, torch.zeros(m, n, dtype=dtype, device=DEVICE))  # K = 0: empty sums
    dx, da, db = torch.autograd.grad(y, (x, a, b), torch.ones_like(y))
    assert dx.shape == x.shape and da.shape == a.shape and db.shape == b.shape


def test_bad_inputs_are_refused():
    x, w, a, b = operands(4, 8, 6, 2, torch.float32)
    with pytest.raises(TypeError, match="x has dtype int64"):
        lr.lora_linear(x.long(), w, a, b, 1.0)
    with pytest.raises(TypeError, match="dtypes must match"):
        lr.lora_linear(x, w.double(), a, b, 1.0)
    with pytest.raises(ValueError, match="in_features"):
        lr.lora_linear(x[:, :5], w, a, b, 1.0)
    with pytest.raises(ValueError, match="lora_a must be"):
        lr.lora_linear(x, w, a[:, :5], b, 1.0)
    with pytest.raises(ValueError, match="lora_b must be"):
        lr.lora_linear(x, w, a, b.t(), 1.0)
    with pytest.raises(ValueError, match="rank r must be"):
        big = random_tensor((lr.MAX_RANK + 1, 8), torch.float32, DEVICE)
        lr.lora_linear(x, w, big, random_tensor((6, lr.MAX_RANK + 1), torch.float32, DEVICE), 1.0)
    with pytest.raises(ValueError, match="freeze the base weight"):
        lr.lora_linear(x, w.clone().requires_grad_(), a, b, 1.0)
    with pytest.raises(TypeError, match="scale must be a Python number"):
        lr.lora_linear(x, w, a, b, torch.tensor(1.0))
    with pytest.raises(ValueError, match="scale must be finite"):
        lr.lora_linear(x, w, a, b, float("inf"))
    with pytest.raises(ValueError, match="out has shape"):
        lr.lora_forward(x, w, a, b, 1.0, out=torch.empty(4, 7, device=DEVICE))
    with pytest.raises(ValueError, match="adapter_input must have"):
        lr.lora_linear(x, w, a, b, 1.0, adapter_input=x[:2])
    if runtime.on_gpu():
        with pytest.raises(ValueError, match="is on cpu"):
            lr.lora_linear(x.cpu(), w, a, b, 1.0)


# ------------------------------------------------------------------------------- the module
def linear(k=24, n=40, dtype=torch.float32):
    layer = nn.Linear(k, n, bias=False).to(DEVICE, dtype)
    with torch.no_grad():
        layer.weight.copy_(random_tensor((n, k), dtype, DEVICE, scale=k ** -0.5))
    return layer


@pytest.mark.parametrize("kernel", ["torch", "triton"])
def test_a_fresh_adapter_leaves_the_layer_unchanged(kernel):
    base = linear()
    module = lr.LoRALinear.from_linear(base, r=4, alpha=8, kernel=kernel)
    assert module.weight.requires_grad is False and module.lora_b.abs().max() == 0
    assert module.lora_a.abs().max() > 0  # A random, B zero: the product starts at zero
    x = random_tensor((5, 24), torch.float32, DEVICE)
    if kernel == "torch":  # x W^T + 0: bitwise the base layer
        assert torch.equal(module(x), base(x))
    else:
        assert_close(module(x), base(x), rtol=1e-5, atol=1e-6)


def test_merge_and_unmerge_are_exact_to_rounding():
    module = lr.LoRALinear.from_linear(linear(), r=4, alpha=8, kernel="torch")
    with torch.no_grad():
        module.lora_b.copy_(random_tensor(module.lora_b.shape, torch.float32, DEVICE, scale=0.5))
    original = module.weight.detach().clone()
    x = random_tensor((7, 24), torch.float32, DEVICE)
    module.eval()
    before = module(x)
    module.merge()
    delta = module.lora_b.detach().double() @ module.lora_a.detach().double() * module.scaling
    # One fp32 rounding of W + s B A per element; the outputs then differ by fp32 sums of 24 terms.
    assert_close(module.weight, (original.double() + delta).float())
    assert_close(module(x), before, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="already merged"):
        module.merge()
    module.train()
    with pytest.raises(RuntimeError, match="unmerge"):
        module(x)
    module.unmerge()
    # Two roundings (merge, unmerge), each at most half an ulp of |W + s B A|.
    assert_close(module.weight, original, rtol=0, atol=2 * 2**-24 * float((original.double() + delta).abs().max()))
    with pytest.raises(RuntimeError, match="not merged"):
        module.unmerge()


def test_hyperparameters_are_checked():
    with pytest.raises(ValueError, match="r must be an int"):
        lr.LoRALinear.from_linear(linear(), r=0)
    with pytest.raises(ValueError, match="exceeds min"):
        lr.LoRALinear.from_linear(linear(k=8, n=40), r=9)
    with pytest.raises(ValueError, match="alpha must be"):
        lr.LoRALinear.from_linear(linear(), r=4, alpha=-1)
    with pytest.raises(ValueError, match="dropout must be"):
        lr.LoRALinear.from_linear(linear(), r=4, dropout=1.0)
    with pytest.raises(ValueError, match="kernel must be"):
        lr.LoRALinear.from_linear(linear(), r=4, kernel="cuda")
    with pytest.raises(TypeError, match="nn.Linear"):
        lr.LoRALinear.from_linear(nn.Conv1d(3, 3, 1), r=1)


def test_dropout_is_the_same_in_both_kernels_and_off_in_eval():
    base = linear()
    mods = {k: lr.LoRALinear.from_linear(copy.deepcopy(base), r=4, alpha=8, dropout=0.5, kernel=k)
            for k in ("torch", "triton")}
    b = random_tensor(mods["torch"].lora_b.shape, torch.float32, DEVICE)
    for module in mods.values():
        with torch.no_grad():
            module.lora_a.copy_(mods["torch"].lora_a)
            module.lora_b.copy_(b)
    x = random_tensor((6, 24), torch.float32, DEVICE)
    outs = {}
    for kernel, module in mods.items():
        torch.manual_seed(123)  # the same dropout mask for both
        outs[kernel] = module(x)
    assert_close(outs["triton"], outs["torch"], rtol=1e-5, atol=1e-5)
    mods["torch"].eval()
    no_dropout = lr.lora_linear_torch(x, base.weight.detach(), mods["torch"].lora_a, b, 2.0)
    assert not torch.allclose(outs["torch"], no_dropout)
    assert_close(mods["torch"](x), no_dropout)


# ------------------------------------------------------------------------------ whole models
def tiny_model():
    torch.manual_seed(0)
    return gpt.GPT(gpt.config(gpt.GPT_TINY, vocab_size=64)).to(DEVICE)


def test_apply_lora_trains_only_the_adapters():
    model = tiny_model()
    frozen = {n: p.detach().clone() for n, p in model.named_parameters()}
    lr.apply_lora(model, r=4, alpha=8, kernel="torch")
    cfg = model.cfg
    per_layer = sum(lr.adapter_parameter_count(k, n, 4) for k, n in [
        (cfg.d_model, 3 * cfg.d_model), (cfg.d_model, cfg.d_model), (cfg.d_model, 2 * cfg.hidden),
        (cfg.hidden, cfg.d_model)])
    assert lr.count_trainable(model) == cfg.n_layers * per_layer
    assert len(lr.adapter_modules(model)) == 4 * cfg.n_layers
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.endswith(("lora_a", "lora_b")) for n in trainable)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    idx = torch.randint(0, 64, (2, 16), device=DEVICE)
    for _ in range(2):  # B = 0 at first, so A gets a nonzero gradient only from the second step
        opt.zero_grad()
        model.loss(idx, idx).backward()
        for n, p in model.named_parameters():
            assert (p.grad is not None) == (n in trainable), n
        opt.step()
    assert all(p.grad.abs().max() > 0 for p in model.parameters() if p.requires_grad)
    params = dict(model.named_parameters())
    for name, before in frozen.items():  # every pre-trained weight, bitwise
        assert torch.equal(params[name], before), name
    assert set(lr.lora_state_dict(model)) == {n for n in trainable}


def test_triton_and_torch_adapters_agree_in_the_model():
    models = {}
    for kernel in ("torch", "triton"):
        model = tiny_model()
        lr.apply_lora(model, r=4, alpha=8, kernel=kernel)
        torch.manual_seed(1)
        for module in lr.adapter_modules(model):
            with torch.no_grad():
                module.lora_b.copy_(torch.randn(module.lora_b.shape, device=DEVICE) * 0.1)
        models[kernel] = model
    idx = torch.randint(0, 64, (2, 16), device=DEVICE)
    losses = {k: m.loss(idx, idx) for k, m in models.items()}
    for loss in losses.values():
        loss.backward()
    assert_close(losses["triton"], losses["torch"], rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(models["torch"].named_parameters(), models["triton"].parameters()):
        if p.requires_grad:
            assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5 * float(p.grad.abs().max()), name=name)


def test_merged_model_equals_the_adapted_model():
    model = tiny_model()
    lr.apply_lora(model, r=4, alpha=8, kernel="torch")
    for module in lr.adapter_modules(model):
        with torch.no_grad():
            module.lora_b.normal_(0, 0.1)
    model.eval()
    idx = torch.randint(0, 64, (2, 16), device=DEVICE)
    with torch.no_grad():
        before = model(idx)
        after = lr.merge_lora(model)(idx)
        lr.unmerge_lora(model)
        again = model(idx)
    assert_close(after, before, rtol=1e-4, atol=1e-5)
    assert_close(again, before, rtol=1e-4, atol=1e-5)


def test_apply_lora_refuses_unknown_targets():
    with pytest.raises(ValueError, match=r"no nn.Linear named \['wq'\]"):
        lr.apply_lora(tiny_model(), targets=("qkv", "wq"))
    with pytest.raises(ValueError, match="non-empty tuple"):
        lr.apply_lora(tiny_model(), targets="qkv")


# -------------------------------------------------------------------------------- benchmarks
# On a GPU these run the benchmarks' real sizes (4096 tokens, bf16: every kernel autotuned anew,
# 5-8 s each): slow there, and by default in simulation (SIM_SIZES, tiny).
@pytest.mark.parametrize("index", [pytest.param(i, marks=runtime.pick(gpu=[pytest.mark.slow], sim=[]))
                                   for i in (0, 1)])
def test_benchmark_variants_compute_the_same_thing(index):
    from week5_integration import lora_bench  # the solution's benchmarks (lora_bench.py)

    bench = lora_bench.BENCHMARKS[index]
    size = bench.active_sizes()[0]
    inputs = bench.make_inputs(size)
    results = {label: fn(*inputs) for label, fn in bench.variants.items()
               if label not in bench.gpu_only}
    want = results.pop("torch")
    want = want if isinstance(want, (tuple, list)) else [want]
    for label, got in results.items():
        got = got if isinstance(got, (tuple, list)) else [got]
        for g, w in zip(got, want):
            assert_close(g, w, rtol=2e-2 if runtime.on_gpu() else 1e-4,
                         atol=(2e-2 if runtime.on_gpu() else 1e-4) * float(w.abs().max()), name=label)
    assert all(v > 0 for v in bench.lines_of_code().values())
