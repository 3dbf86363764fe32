"""Low-memory dropout: the random mask is recomputed from (seed, offset), never stored.

`torch.nn.functional.dropout` draws a random mask, applies it, and keeps the mask (one byte per
element) for the backward pass. Here each element's keep/drop decision is a pure function of a
seed and the element's index: `tl.rand(seed, offsets)` runs the Philox counter-based generator,
which needs no state in memory. The backward pass (or a re-run) regenerates exactly the same
mask from the same seed, so no mask tensor is written or read: 1 byte per element saved each
way, and the same seed always gives the same output, on any grid shape.

y_i = x_i / (1 - p) if rand(seed, i) > p else 0   (inverted dropout: E[y] = x, no rescale at eval)

Cost model: read x, write y, 2 * n * itemsize bytes (torch's fused dropout also writes a
1-byte mask: 2 * n * itemsize + n). Philox costs ~20 integer instructions per 4 random numbers,
still far under the memory time on an H100.
"""
from __future__ import annotations

import torch

from course import validate
from course.bench import Benchmark, pow2_label
from course.check import random_tensor
from course.gpu import triton, tl, DEVICE

BLOCK_SIZE = 1024
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def dropout_kernel(x_ptr, out_ptr, n, p, scale, seed, BLOCK_SIZE: tl.constexpr):
    # BEGIN EXERCISE: the element's random number r = tl.rand(seed, offset) (the global index as Philox
    #   counter: the same mask whatever the block size); keep where r >= p; out = x * scale there (in fp32),
    #   0 elsewhere; masked to n
    # HINT: The random number of element i must depend only on (seed, i), so the mask is reproducible for
    #   the backward pass and independent of the block size: use i as the Philox counter.
    # HINT: Offsets and mask as in vector_add; r = tl.rand(seed, offsets as int32) is uniform in [0, 1);
    #   keep where r >= p; tl.where picks x * scale or 0; store in out's dtype.
    # HINT: `y = tl.where(tl.rand(seed, offsets.to(tl.int32)) >= p, x.to(tl.float32) * scale, 0.0)`
    pid = tl.program_id(0)
    offsets = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    # Philox keyed by seed, counter = the element's global index: the decision for element i
    # does not depend on which program or block size computed it. uniform in [0, 1).
    r = tl.rand(seed, offsets.to(tl.int32))
    keep = r >= p  # P(keep) = 1 - p exactly for a uniform r
    y = tl.where(keep, x.to(tl.float32) * scale, 0.0)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)
    # END EXERCISE


def dropout(x: torch.Tensor, p: float, seed: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Inverted dropout with drop probability `p`; the same `seed` gives the same mask."""
    validate.tensor(x, "x", dtypes=DTYPES)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"p (the drop probability) must be a number in [0, 1], got {p!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
        raise TypeError(f"seed must be an int in [0, 2^31), got {seed!r}")
    out = validate.output(out, x)
    n = out.numel()
    if n >= 2**31:
        raise ValueError(f"x has {n} elements; the Philox counter here is int32 (< 2^31 elements)")
    if n == 0:
        return out
    # BEGIN EXERCISE: the inverted-dropout scale: kept elements are multiplied by 1 / (1 - p), so the
    #   expectation is unchanged (p = 1 drops everything: no 1/0)
    # HINT: Inverted dropout scales the survivors up at training time so that E[out] = x and inference needs
    #   no rescale.
    # HINT: scale is 1 / (1 - p), except p == 1, where nothing survives: any finite value works, and
    #   dividing by zero must not happen.
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)  # p = 1 drops everything; no 1/0
    # END EXERCISE
    dropout_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, float(p), scale, seed,
                                                  BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
    return out


def dropout_mask(n: int, p: float, seed: int) -> torch.Tensor:
    """The keep-mask `dropout` uses for n elements (recomputed, as a backward pass would)."""
    # BEGIN EXERCISE: the keep-mask of n elements, recomputed from the seed (as a backward pass would)
    #   rather than stored
    # HINT: The mask is never stored: rerun dropout with the same seed on an input whose kept elements are
    #   guaranteed nonzero.
    # HINT: Build a tensor of ones with n elements on the course device, call dropout on it with the same p
    #   and seed, and compare with 0.
    ones = torch.ones(n, device=DEVICE)
    return dropout(ones, p, seed) != 0
    # END EXERCISE


# BEGIN SOLUTION ONLY: the benchmarks, sweep and command line (they measure the solution's kernels)
# ---------------------------------------------------------------------------------- benchmarks
def _inputs(n):
    return (random_tensor(n, torch.float32, DEVICE),)


BENCHMARKS = [
    Benchmark(
        name="dropout",
        title="Dropout p=0.5, float32: seeded Triton (no mask) vs torch (stores a mask)",
        sizes=[1 << 24, 1 << 26],
        sim_sizes=[1 << 12],
        size_label=pow2_label,
        make_inputs=_inputs,
        variants={
            "torch": lambda x: torch.nn.functional.dropout(x, 0.5, training=True),
            "triton": lambda x: dropout(x, 0.5, 1234),
        },
        headline=("triton",),
        bytes=lambda n: 2 * 4 * n,
        notes="bytes = 2 x 4 x n (read x, write y); torch also writes a 1-byte mask per element, "
              "which the byte count does not credit it",
    ),
]
# END SOLUTION ONLY
