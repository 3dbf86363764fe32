"""Checking a kernel against its reference: tolerances, one assertion, poison and edge cases.

Every test in the course ends in `assert_close`. It compares in float64, treats NaN and Inf the
way torch does (NaN must meet NaN, Inf must meet the same Inf), and when it fails it names the
worst elements, so "3 of 4097 wrong, all at the end" points straight at a missing tail mask.

Also here, for the classes of bug a test must reach on purpose: `in_layout` / `check_layouts`
(inputs and `out` sliced out of bigger buffers, strided, transposed: a correct result or a clear
refusal), `huge` and `last_programs` (offsets past 2^31 elements, in simulation for free), and
`sweep` / `sizes_1d_params` (the default run's cases, the rest of a sweep marked slow).
"""
from __future__ import annotations

import math

import torch

# (rtol, atol) per dtype: torch.testing's defaults, which are about a few units in the last
# place of each format. A test that needs more (a long reduction, say) passes its own
# numbers and says why beside them.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    if dtype in TOLERANCES:
        return TOLERANCES[dtype]
    if not dtype.is_floating_point:
        return 0.0, 0.0
    raise KeyError(f"no default tolerance for {dtype}; pass rtol and atol")


def _mismatches(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float):
    """Boolean mask of wrong elements and a badness score to rank them by."""
    got, want = actual.double(), expected.double()
    nan_got, nan_want = torch.isnan(got), torch.isnan(want)
    inf_got, inf_want = torch.isinf(got), torch.isinf(want)
    finite = ~(nan_got | nan_want | inf_got | inf_want)
    err = torch.where(finite, (got - want).abs(), torch.zeros_like(got))
    limit = atol + rtol * want.abs()
    wrong = (nan_got != nan_want)
    wrong |= (inf_got | inf_want) & ~(nan_got | nan_want) & (got != want)
    wrong |= finite & (err > limit)
    # NaN/Inf mismatches first (often unwritten elements), then by how far past the limit.
    score = torch.where(finite, err / limit.clamp_min(1e-300), torch.full_like(got, math.inf))
    return wrong, torch.where(wrong, score, torch.zeros_like(score))


def assert_close(actual, expected, *, rtol: float | None = None, atol: float | None = None,
                 name: str = "output", show: int = 6) -> None:
    """Fail with the worst mismatching elements unless `actual` matches `expected`.

    Shapes and dtypes must be equal. Tolerances default to `TOLERANCES[expected.dtype]`.
    """
    for label, value in (("actual", actual), ("expected", expected)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"assert_close: {label} must be a torch.Tensor, got {type(value).__name__}")
    if actual.shape != expected.shape:
        raise AssertionError(f"{name}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{name}: dtype {actual.dtype} != expected {expected.dtype}")
    default_rtol, default_atol = tolerances(expected.dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol

    got, want = actual.detach().cpu(), expected.detach().cpu()
    wrong, score = _mismatches(got.reshape(-1), want.reshape(-1), rtol, atol)
    n_wrong = int(wrong.sum())
    if n_wrong == 0:
        return
    worst = torch.argsort(score, descending=True)[:min(show, n_wrong)]
    lines = [f"{name}: {n_wrong} of {got.numel()} elements differ "
             f"(dtype {expected.dtype}, rtol={rtol:g}, atol={atol:g}). Worst:"]
    flat_got, flat_want = got.reshape(-1), want.reshape(-1)
    for flat in worst.tolist():
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), got.shape)) if got.dim() else ()
        g, w = float(flat_got[flat]), float(flat_want[flat])
        hint = "  <- never written? (poison value)" if math.isnan(g) and not math.isnan(w) else ""
        lines.append(f"  at {index}: got {g!r}, expected {w!r}, |diff| {abs(g - w):.3g}{hint}")
    raise AssertionError("\n".join(lines))


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill `t` in place with a value no correct kernel writes there, and return it.

    NaN for floating types (any element the kernel forgets stays NaN and fails the
    comparison), the most negative integer for integer types.
    """
    if t.dtype.is_floating_point:
        return t.fill_(math.nan)
    if t.dtype == torch.bool:
        raise TypeError("poison: a bool tensor has no value to spare; compare it another way")
    return t.fill_(torch.iinfo(t.dtype).min)


def poisoned(shape, dtype: torch.dtype, device) -> torch.Tensor:
    return poison(torch.empty(shape, dtype=dtype, device=device))


def random_tensor(shape, dtype: torch.dtype, device, *, scale: float = 1.0) -> torch.Tensor:
    """Fresh normal random numbers (never zeros: zeros hide unwritten outputs)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if dtype.is_floating_point:
        return (torch.randn(shape, device=device) * scale).to(dtype)
    return torch.randint(-100, 100, shape, device=device, dtype=dtype)


def with_specials(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` with NaN, +Inf, -Inf, -0.0 and the largest finite value spread through it."""
    out = t.clone()
    flat = out.view(-1)
    n = flat.numel()
    if n == 0:
        return out
    info = torch.finfo(t.dtype)
    specials = [math.nan, math.inf, -math.inf, -0.0, info.max, -info.max]
    # Put them at the ends and in the middle, where tail masks and block edges live.
    for k, value in enumerate(specials):
        for position in (k, n // 2 + k, n - 1 - k):
            if 0 <= position < n:
                flat[position] = value
    return out


def sizes_1d(*, block: int = 1024) -> list[int]:
    """Element counts that catch indexing bugs: empty, one, primes, one past a block."""
    from course import runtime

    small = [0, 1, 7, 127, block - 1, block + 1, 3 * block + 17]
    return small + runtime.pick(gpu=[65537, 1_000_003, (1 << 22) + 5], sim=[])


def dtype_params(dtypes, *, bf16_in_sim: bool = True) -> list:
    """pytest params for Triton dtypes; bf16 runs in simulation too, unless the test says it can't.

    In simulation a bf16 launch computes in float32 on a float32 copy of its bf16 tensors, rounded
    to bf16 when the launch ends (course/sim_bf16.py: the interpreter itself computes bf16 on raw
    16-bit integers). That is right within bf16's error wherever a reference rounds only what the
    kernel stores, which is most of them. It is not a GPU's rounding INSIDE a kernel (`.to(x.dtype)`
    stays float32 there), so a test whose reference models an intermediate rounded to bf16 (week 5's
    dequantizing int8 matmul rounds q * scale to x's type before the dot) passes `bf16_in_sim=False`,
    and its bf16 cases are marked GPU-only with the reason.
    """
    import pytest

    gpu_only = pytest.mark.gpu(reason="bf16 rounding inside kernels: the interpreter computes bf16 in float32")
    return [pytest.param(d, marks=gpu_only if d == torch.bfloat16 and not bf16_in_sim else (),
                         id=str(d).replace("torch.", "")) for d in dtypes]


# --------------------------------------------------------------------------- memory layouts
# The layouts a strided op meets in a model besides a fresh dense tensor. Every view lives inside
# a larger buffer poisoned around it, so reads past the view find NaN and writes past it show.
#   offset        contiguous, but starting one element into its buffer (not 16-byte aligned):
#                 x[1:] of a bigger tensor; a dense kernel must take it
#   strided       every other element along the last dimension (last stride 2): x[..., ::2]
#   transposed    the last two dimensions swapped in memory (column-major for a matrix): w.t()
#   column_slice  a block of columns of a wider buffer: q sliced out of a fused qkv projection
LAYOUTS = ("offset", "strided", "transposed", "column_slice")


def layouts(ndim: int) -> list[str]:
    """The LAYOUTS that exist for a tensor of `ndim` dimensions (1-D: offset and strided)."""
    return [name for name in LAYOUTS if ndim >= 2 or name in ("offset", "strided")]


def in_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """A view equal to `t` laid out as `layout` (see LAYOUTS), in a larger buffer poisoned around it."""
    shape = tuple(t.shape)
    if layout == "offset":
        buffer = poisoned(t.numel() + 2, t.dtype, t.device)
        view = buffer[1:1 + t.numel()].view(shape)
    elif layout == "strided":
        buffer = poisoned((*shape[:-1], 2 * shape[-1]) if shape else (2,), t.dtype, t.device)
        view = buffer[..., ::2] if shape else buffer[0]
    elif layout in ("transposed", "column_slice") and len(shape) < 2:
        raise ValueError(f"layout {layout!r} needs at least 2 dimensions; t has shape {shape}")
    elif layout == "transposed":
        buffer = poisoned((*shape[:-2], shape[-1], shape[-2]), t.dtype, t.device)
        view = buffer.transpose(-1, -2)
    elif layout == "column_slice":
        cols = shape[-1]
        buffer = poisoned((*shape[:-1], 3 * cols), t.dtype, t.device)
        view = buffer[..., cols:2 * cols]
    else:
        raise ValueError(f"unknown layout {layout!r}; one of {LAYOUTS}")
    view.copy_(t)
    return view


def outside(view: torch.Tensor) -> torch.Tensor:
    """The elements of `view`'s buffer that are not in the view (1-D): they must stay poisoned."""
    base = view._base if view._base is not None else view
    mine = torch.zeros(base.numel(), dtype=torch.bool, device=view.device)
    index = torch.arange(base.numel(), device=view.device)
    mine[index.as_strided(view.shape, view.stride(), view.storage_offset() - base.storage_offset())] = True
    return base.reshape(-1)[~mine]


def check_layout(call, expected: torch.Tensor, views, *, strided_ok: bool, out: torch.Tensor | None = None,
                 rtol: float | None = None, atol: float | None = None, name: str = "output"):
    """One layout case of an op: correct on contiguous views, correct or refused on strided ones.

    `call()` runs the op on `views` (its inputs, and `out` if it takes one, made by `in_layout`).
    If every view is contiguous, or the op reads strides (`strided_ok`), the result must equal
    `expected` and nothing of `out`'s buffer outside `out` may be written. Otherwise the op must
    refuse before launching, with a ValueError that names contiguity or strides. `expected` may be
    the exact float64 reference (an error model for the op's own rounding, against a reference
    that has not been rounded to the output type yet): the result is then compared in float64.
    """
    import pytest

    views = [v for v in views if v is not None]
    if strided_ok or all(v.is_contiguous() for v in views):
        got = call()
        if out is not None:
            assert got is out, f"{name}: the op must write into (and return) the `out` it was given"
            left = outside(out)
            assert_close(left, poison(left.clone()), name=f"{name}: elements of out's buffer outside out")
        exact = expected.dtype == torch.float64 and got.dtype != torch.float64
        assert_close(got.double() if exact else got, expected, rtol=rtol, atol=atol, name=name)
        return got
    with pytest.raises(ValueError, match="contiguous|stride"):
        call()
    return None


def sweep(default, slow=(), *, unpack: bool = False) -> list:
    """Values for `pytest.mark.parametrize`: `default` ones always, `slow` ones marked slow.

    The default run keeps the cases that catch a bug class (a ragged size, a block edge, one
    large size); the rest of an exhaustive sweep runs with `pytest --slow`. With `unpack`, each
    value is a tuple of several arguments ("name, n").
    """
    import pytest

    def param(value, marks=()):
        return pytest.param(*value, marks=marks) if unpack else pytest.param(value, marks=marks)

    return [param(v) for v in default] + [param(v, pytest.mark.slow) for v in slow]


def check_layouts(op, inputs: dict, expected: torch.Tensor, layout: str, *, strided_ok: bool,
                  takes_out: bool = True, strided_out_ok: bool | None = None,
                  rtol: float | None = None, atol: float | None = None,
                  out_dtype: torch.dtype | None = None) -> None:
    """`check_layout` for each tensor input of `op` in turn put in `layout`, then for `out`.

    `op(**inputs, out=None)` runs the op (keyword arguments). Inputs that cannot take the layout
    (transposed for 1-D) are left dense. `strided_out_ok` (default: `strided_ok`) says whether a
    non-contiguous `out` is written through its strides rather than refused. `out_dtype`: the
    op's output type when `expected` is the exact float64 reference.
    """
    for key, value in inputs.items():
        if not isinstance(value, torch.Tensor) or layout not in layouts(value.dim()):
            continue
        view = in_layout(value, layout)
        check_layout(lambda: op(**{**inputs, key: view}), expected, [view], strided_ok=strided_ok,
                     rtol=rtol, atol=atol, name=f"{key} {layout}")
    if takes_out and layout in layouts(expected.dim()):
        out = in_layout(poison(torch.empty_like(expected, dtype=out_dtype or expected.dtype,
                                                memory_format=torch.contiguous_format)), layout)
        check_layout(lambda: op(**inputs, out=out), expected, [out], out=out,
                     strided_ok=strided_ok if strided_out_ok is None else strided_out_ok,
                     rtol=rtol, atol=atol, name=f"out {layout}")


def sizes_1d_params(*, block: int = 1024) -> list:
    """`sizes_1d` as pytest params: the GPU's 65537 and 4M sizes marked slow (1_000_003, a large
    ragged size, stays in the default run, as do the block edges)."""
    from course import runtime

    small = [0, 1, 7, 127, block - 1, block + 1, 3 * block + 17]
    return sweep(small + runtime.pick(gpu=[1_000_003], sim=[]), runtime.pick(gpu=[65537, (1 << 22) + 5], sim=[]))


# ------------------------------------------------------------------------ past 2^31 elements
INT32_LIMIT = 2**31


def huge(numel: int, dtype: torch.dtype, device, *, tail: int = 4096, fill: str = "random") -> torch.Tensor:
    """A flat tensor of `numel` (> 2^31) elements whose last `tail` are set (random, or poison).

    Element offsets past 2^31 - 1 do not fit int32: a kernel must compute them in int64. On the
    CPU `torch.empty` reserves address space and the pages never touched cost no memory, so
    simulation reaches such offsets for free (with `last_programs`); on a GPU the memory is real
    (2^31 fp16 = 4 GiB), which is why the GPU's runs of these tests are marked slow.
    """
    t = torch.empty(numel, dtype=dtype, device=device)
    end = t[numel - tail:]
    if fill == "random":
        end.copy_(random_tensor(tail, dtype, device))
    else:
        poison(end)
    return t


def last_programs(count: int = 2):
    """A context: in simulation, each Triton launch runs only its last `count` programs (the
    ones whose offsets pass 2^31 in a `huge` launch; see course.sim_triton.programs); on a GPU
    every program runs."""
    import contextlib

    from course import runtime

    if runtime.on_gpu():
        return contextlib.nullcontext()
    from course import sim_triton

    return sim_triton.programs(sim_triton.last_programs(count))


def past_int32_marks():
    """pytest marks for a test that launches on `huge` tensors: slow on a GPU (real GiBs)."""
    import pytest

    from course import runtime

    return [pytest.mark.slow] if runtime.on_gpu() else []


def check_graph_replays(launch, out: torch.Tensor, check, *, replays: int = 2) -> None:
    """A launch captured in a CUDA graph computes `out` again on every replay: `launch()` runs once first (its build
    loaded, its allocations made, outside the capture), is captured, and each replay writes into an `out` poisoned
    after the capture, then `check()` reads it. The capstone and the benches run kernels in graphs: a launch on
    another stream than torch's current one, or one whose result the capture froze, fails here."""
    launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    for _ in range(replays):
        out.copy_(poisoned(out.shape, out.dtype, out.device))
        graph.replay()
        torch.cuda.synchronize()
        check()
