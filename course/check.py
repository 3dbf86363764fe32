"""Checking a kernel against its reference: tolerances, one assertion, poison and edge cases.

Every test in the course ends in `assert_close`. It compares in float64, treats NaN and Inf the
way torch does (NaN must meet NaN, Inf must meet the same Inf), and when it fails it names the
worst elements, so "3 of 4097 wrong, all at the end" points straight at a missing tail mask.
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


def dtype_params(dtypes) -> list:
    """pytest params for Triton dtypes; bf16 is marked GPU-only, with the reason.

    The Triton 3.9 interpreter adds bf16 values as raw 16-bit integers (NumPy has no bf16)
    and truncates instead of rounding when it converts to bf16, so bf16 results in
    simulation are wrong by design of the interpreter, not of the kernel.
    """
    import pytest

    gpu_only = pytest.mark.gpu(reason="the Triton interpreter computes bf16 on raw bits")
    return [pytest.param(d, marks=gpu_only if d == torch.bfloat16 else (), id=str(d).replace("torch.", ""))
            for d in dtypes]
