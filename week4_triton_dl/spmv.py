"""Sparse matrix-vector product y = A x with A in CSR: irregular memory access and load balance.

CSR stores an M x N matrix with nnz nonzeros as three arrays: `values` (nnz) and `col_indices`
(nnz), row by row, and `crow_indices` (M + 1), where row r owns positions crow[r] to crow[r+1].
y[r] = sum over those positions p of values[p] * x[col[p]].

What it teaches:
* There is almost no arithmetic: 2 FLOPs per nonzero against >= 8 bytes (a 4-byte value and a
  4-byte column index) plus the gather of x. SpMV is memory-bound at ~0.25 FLOP/byte, and
  what matters is how well the bytes move.
* The gather x[col[p]] is irregular: neighbouring nonzeros point anywhere in x. The GPU moves
  memory in 32-byte sectors, so a scattered 4-byte load can cost a whole sector (8x). It is
  cheap only when x is reused from cache: x of 2^21 floats is 8 MB and fits in the H100's
  50 MB L2, so at these sizes the gathers mostly hit L2; an x bigger than L2 pays sectors.
* Row lengths are irregular too. Real matrices (graphs, web links, recommendation data) have
  power-law row lengths: most rows hold a handful of nonzeros, a few hold thousands.
  - `spmv_csr_scalar_kernel`: one LANE per row (CUDA's classic "CSR-scalar"), a block of rows
    per program. Neighbouring lanes read values[start_r + k] of different rows: addresses far
    apart, so the loads are not coalesced; and every lane waits for the longest row in its
    block (divergence, load imbalance inside the warp).
  - `spmv_csr_vector_kernel`: one PROGRAM per row, its lanes sweeping the row's nonzeros
    BLOCK at a time ("CSR-vector"): contiguous, coalesced loads of values and col_indices.
    But a 3-nonzero row leaves 125 of 128 lanes idle, and one 100k-nonzero row keeps one
    program busy long after every other has finished.
  - `spmv_csr_rows_kernel` + `spmv_csr_split_kernel` ("bucketed", our version of the CSR-
    adaptive idea, Greathouse & Daga 2014): rows are sorted once into buckets by length. Short
    rows are packed many to a program (a 2-D [ROWS, BLOCK] tile: lanes busy, loads within a
    row contiguous), medium and long rows get wider blocks, and rows longer than `split_len`
    are cut into segments of `segment` nonzeros handled by separate programs that `atomic_add`
    their partial sums into y (float atomics: the summation order varies from run to run).
    The bucketing is an "analysis" step (a few small kernels and one host sync) done once per
    matrix and cached on it: iterative solvers and GNN layers multiply by the same A many times.

Cost model (M rows, N columns, nnz nonzeros, index size i bytes, fp32 values): minimum traffic
= nnz (4 + i) + (M + 1) i + 4 N (x, once) + 4 M (y). With 16 nonzeros per row and int32
indices, ~8.7 bytes per nonzero: the yardstick is % of copy bandwidth. A dense matvec moves
4 M N bytes, so sparse wins on bytes below ~50% density (int32) and, because of the gathers and
imbalance, the crossover in time comes lower: `spmv_vs_dense_week4` measures it.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from course import validate
from course.bench import Benchmark, pow2_label
from course.gpu import triton, tl, DEVICE

VALUE_DTYPES = (torch.float32,)
INDEX_DTYPES = (torch.int32, torch.int64)
SCALAR_ROWS = 128      # rows per program of the scalar kernel: one per lane of 4 warps
VECTOR_BLOCK = 128     # nonzeros per step of the vector kernel
# Buckets of the adaptive version: (longest row in the bucket, nonzeros per step, rows per program).
# Each tile holds ROWS x BLOCK = 1024-2048 elements: 8-16 per thread at 4 warps.
BUCKETS = ((8, 8, 256), (32, 32, 64), (128, 128, 16), (512, 512, 4))
LONG_BLOCK = 1024      # rows longer than the last bucket, up to split_len: one program, loops of 1024
SPLIT_LEN = 8192       # rows longer than this are cut into segments, each its own program
SEGMENT = 2048         # nonzeros per segment of a split row


# ----------------------------------------------------------------------------------- kernels
@triton.jit
def spmv_csr_scalar_kernel(crow_ptr, col_ptr, val_ptr, x_ptr, y_ptr, M, BLOCK_ROWS: tl.constexpr):
    # BEGIN EXERCISE: CSR-scalar: BLOCK_ROWS rows per program, one lane per row: each lane reads its row's
    #   start and end from crow and loops k up to the LONGEST row of the block (lanes past their own row
    #   masked), acc += val * x[col] in fp32; store y for the rows < M
    # HINT: The simplest CSR kernel: one lane per row, each lane walks its own row's nonzeros. Simple, but
    #   lanes of a block wait for the longest row and their loads are scattered (not coalesced).
    # HINT: rows = a block of row indices, masked to M; start and end from crow; loop k from 0 to the
    #   block's longest length; each lane is live while k < its length; load value and column at start + k,
    #   gather x[col], accumulate in fp32; store y.
    # HINT: `for k in range(0, tl.max(length, axis=0)):` with `live = k < length` as the mask of every load.
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    rmask = rows < M
    start = tl.load(crow_ptr + rows, mask=rmask, other=0)
    end = tl.load(crow_ptr + rows + 1, mask=rmask, other=0)
    length = end - start
    acc = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    # Every lane loops as long as the longest row of the block: the others idle (imbalance).
    for k in range(0, tl.max(length, axis=0)):
        live = k < length
        # Lane r reads position start_r + k: addresses scattered by row, not coalesced.
        a = tl.load(val_ptr + start + k, mask=live, other=0.0)
        c = tl.load(col_ptr + start + k, mask=live, other=0)
        acc += a * tl.load(x_ptr + c, mask=live, other=0.0)
    tl.store(y_ptr + rows, acc, mask=rmask)
    # END EXERCISE


@triton.jit
def spmv_csr_vector_kernel(crow_ptr, col_ptr, val_ptr, x_ptr, y_ptr, BLOCK: tl.constexpr):
    # BEGIN EXERCISE: CSR-vector: one program per row, BLOCK consecutive nonzeros per step (coalesced loads
    #   of values and columns, masked at the row's end), the x gather, then one tl.sum
    # HINT: One program per row, its lanes reading BLOCK consecutive nonzeros at once: coalesced loads of
    #   values and columns; only the x gather stays irregular.
    # HINT: start/end from crow for this row; `for k in range(start, end, BLOCK)`: idx = k + arange, live =
    #   idx < end, masked loads of val and col, gather x[col], accumulate a [BLOCK] vector; store its
    #   tl.sum.
    # HINT: `acc += a * tl.load(x_ptr + c, mask=live, other=0.0)`
    row = tl.program_id(0)
    start = tl.load(crow_ptr + row)
    end = tl.load(crow_ptr + row + 1)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(start, end, BLOCK):
        idx = k + lanes
        live = idx < end
        # Consecutive lanes read consecutive positions: coalesced loads of values and columns.
        a = tl.load(val_ptr + idx, mask=live, other=0.0)
        c = tl.load(col_ptr + idx, mask=live, other=0)
        acc += a * tl.load(x_ptr + c, mask=live, other=0.0)  # the gather: irregular whatever we do
    tl.store(y_ptr + row, tl.sum(acc, axis=0))
    # END EXERCISE


@triton.jit
def spmv_csr_rows_kernel(row_ids_ptr, n_ids, crow_ptr, col_ptr, val_ptr, x_ptr, y_ptr,
                         ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # ROWS rows of similar length per program, one row per line of a [ROWS, BLOCK] tile.
    # BEGIN EXERCISE: ROWS rows of similar length (row_ids[slot]) per program, one row per line of a [ROWS,
    #   BLOCK] tile: loop k up to the block's longest row in BLOCK steps, each line masked to its own
    #   length; store the row sums for the slots < n_ids
    # HINT: Bucket rows by length so a program's ROWS rows are similar: a [ROWS, BLOCK] tile wastes little
    #   when the longest row is at most a few times the shortest.
    # HINT: slots -> row ids (masked to n_ids); start, end, length per row; loop k over the longest length
    #   in BLOCK steps; idx = start[:, None] + k + lanes[None, :], live = (k + lanes) < length[:, None]; 2-D
    #   accumulate; store row sums (axis=1).
    # HINT: `live = (k + lanes[None, :]) < length[:, None]`: each line is masked to its own row's length.
    slots = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    smask = slots < n_ids
    rows = tl.load(row_ids_ptr + slots, mask=smask, other=0)
    start = tl.load(crow_ptr + rows, mask=smask, other=0)
    end = tl.load(crow_ptr + rows + 1, mask=smask, other=0)
    length = end - start
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
    # Rows in a bucket differ by < 4x in length, so the longest wastes little of the tile.
    for k in range(0, tl.max(length, axis=0), BLOCK):
        idx = start[:, None] + k + lanes[None, :]
        live = (k + lanes[None, :]) < length[:, None]
        a = tl.load(val_ptr + idx, mask=live, other=0.0)
        c = tl.load(col_ptr + idx, mask=live, other=0)
        acc += a * tl.load(x_ptr + c, mask=live, other=0.0)
    tl.store(y_ptr + rows, tl.sum(acc, axis=1), mask=smask)
    # END EXERCISE


@triton.jit
def spmv_csr_split_kernel(seg_rows_ptr, seg_starts_ptr, crow_ptr, col_ptr, val_ptr, x_ptr, y_ptr,
                          SEGMENT: tl.constexpr, BLOCK: tl.constexpr):
    # One segment of one very long row per program; partial sums meet in y through atomics
    # (y[row] was zeroed). Many programs share a long row: no single straggler.
    # BEGIN EXERCISE: one SEGMENT of one very long row per program (seg_rows, seg_starts; the segment ends
    #   at the row's end at the latest), BLOCK nonzeros per step; several programs share the row:
    #   tl.atomic_add the partial sum into y[row] (zeroed by the launcher)
    # HINT: A single very long row would make one program a straggler; cut it into segments handled by
    #   separate programs, whose partial sums meet through atomics.
    # HINT: Load this segment's row and first position; its end is min(first + SEGMENT, the row's end from
    #   crow); a CSR-vector style loop over [first, last) in BLOCK steps; one atomic add of the sum.
    # HINT: `last = tl.minimum(first + SEGMENT, tl.load(crow_ptr + row + 1))` and `tl.atomic_add(y_ptr +
    #   row, tl.sum(acc, axis=0))`.
    seg = tl.program_id(0)
    row = tl.load(seg_rows_ptr + seg)
    first = tl.load(seg_starts_ptr + seg)
    last = tl.minimum(first + SEGMENT, tl.load(crow_ptr + row + 1))
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(first, last, BLOCK):
        idx = k + lanes
        live = idx < last
        a = tl.load(val_ptr + idx, mask=live, other=0.0)
        c = tl.load(col_ptr + idx, mask=live, other=0)
        acc += a * tl.load(x_ptr + c, mask=live, other=0.0)
    tl.atomic_add(y_ptr + row, tl.sum(acc, axis=0))
    # END EXERCISE


# ------------------------------------------------------------------------------- the matrix
@dataclass
class CSR:
    """A validated CSR matrix (validated once: the checks need a host sync), plus its cached plan."""
    crow: torch.Tensor
    col: torch.Tensor
    values: torch.Tensor
    shape: tuple
    _plans: dict = field(default_factory=dict, repr=False)

    @property
    def nnz(self) -> int:
        return self.values.shape[0]

    @classmethod
    def make(cls, crow, col, values, shape) -> "CSR":
        """Check the arrays (types, lengths, then contents: one reduction, one sync) and wrap them."""
        validate.tensor(crow, "crow_indices", dtypes=INDEX_DTYPES, ndim=1)
        validate.tensor(col, "col_indices", dtypes=INDEX_DTYPES, ndim=1)
        validate.tensor(values, "values", dtypes=VALUE_DTYPES, ndim=1)
        if crow.dtype != col.dtype:
            raise TypeError(f"crow_indices ({crow.dtype}) and col_indices ({col.dtype}) must share one index dtype")
        if not (isinstance(shape, (tuple, list)) and len(shape) == 2 and all(isinstance(s, int) and s >= 0
                                                                           for s in shape)):
            raise ValueError(f"shape must be (rows, cols) of non-negative ints, got {shape!r}")
        m, n = shape
        if crow.shape[0] != m + 1:
            raise ValueError(f"crow_indices has {crow.shape[0]} entries; expected rows + 1 = {m + 1}")
        if col.shape[0] != values.shape[0]:
            raise ValueError(f"col_indices has {col.shape[0]} entries but values has {values.shape[0]}")
        if max(m, n, values.shape[0]) > 2**31 - 1 and crow.dtype == torch.int32:
            raise ValueError("more than 2^31 rows, columns or nonzeros: use int64 indices")
        cls._check_contents(crow, col, values.shape[0], n)
        return cls(crow, col, values, (m, n))

    @staticmethod
    def _check_contents(crow, col, nnz, n):
        # A bad index would make a kernel read outside an array: on a GPU that kills the process.
        checks = torch.stack([
            crow[0] != 0, crow[-1] != nnz,
            (crow[1:] < crow[:-1]).any() if crow.shape[0] > 1 else crow[0] != crow[0],
            ((col < 0) | (col >= n)).any() if nnz else crow[0] != crow[0],
        ]).tolist()
        problems = ["crow_indices[0] must be 0", f"crow_indices[-1] must equal the number of nonzeros ({nnz})",
                    "crow_indices must never decrease", f"col_indices must lie in [0, {n})"]
        bad = [p for p, failed in zip(problems, checks) if failed]
        if bad:
            raise ValueError("not a valid CSR matrix: " + "; ".join(bad))

    @classmethod
    def from_torch(cls, a: torch.Tensor) -> "CSR":
        if a.layout != torch.sparse_csr:
            raise TypeError(f"expected a torch.sparse_csr tensor, got layout {a.layout}")
        return cls.make(a.crow_indices(), a.col_indices(), a.values(), tuple(a.shape))

    @classmethod
    def from_dense(cls, dense: torch.Tensor, index_dtype=torch.int32) -> "CSR":
        validate.tensor(dense, "dense", dtypes=VALUE_DTYPES, ndim=2)
        with warnings.catch_warnings():  # "sparse CSR support is in beta": known, and not the learner's doing
            warnings.simplefilter("ignore", UserWarning)
            a = dense.to_sparse_csr()
        return cls.make(a.crow_indices().to(index_dtype), a.col_indices().to(index_dtype), a.values(),
                        tuple(dense.shape))

    def to_torch(self) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            # Already validated by make(): torch need not check the invariants again.
            return torch.sparse_csr_tensor(self.crow, self.col, self.values, self.shape, check_invariants=False)

    def to_dense(self) -> torch.Tensor:
        dense = torch.zeros(self.shape, dtype=self.values.dtype, device=self.values.device)
        rows = torch.repeat_interleave(torch.arange(self.shape[0], device=self.crow.device),
                                       (self.crow[1:] - self.crow[:-1]).long())
        return dense.index_put_((rows, self.col.long()), self.values, accumulate=True)

    def row_lengths(self) -> torch.Tensor:
        return self.crow[1:] - self.crow[:-1]

    def plan(self, split_len: int = SPLIT_LEN, segment: int = SEGMENT) -> dict:
        """Rows grouped by length for the bucketed kernels; built once per (split_len, segment)."""
        key = (split_len, segment)
        if key not in self._plans:
            self._plans[key] = _build_plan(self, split_len, segment)
        return self._plans[key]


def _build_plan(a: CSR, split_len: int, segment: int) -> dict:
    # BEGIN EXERCISE: the plan: rows grouped into the BUCKETS by length (each row in exactly one bucket:
    #   lengths in (previous longest, longest], capped at split_len), then one bucket (split_len,
    #   LONG_BLOCK, 1); rows longer than split_len cut into segments of segment nonzeros: seg_rows (the row
    #   of each segment) and seg_starts (its first position); drop empty buckets; index tensors in crow's
    #   dtype
    # HINT: The plan is built once per matrix on the device: every row belongs to exactly one length bucket
    #   (half-open ranges (lower, upper]), and rows beyond split_len go to the segment kernel instead.
    # HINT: Loop over BUCKETS plus the long bucket, with upper capped at split_len, torch.nonzero of the
    #   length range for the ids; then for the huge rows: segments per row by ceil division,
    #   repeat_interleave for seg_rows, and each segment's index within its row for seg_starts; drop empty
    #   buckets.
    # HINT: `seg_starts = a.crow.long()[seg_rows] + j * segment`, where j = position of the segment among
    #   its row's segments (arange minus the repeated cumsum offsets).
    lengths = a.row_lengths().long()
    dev, idx = lengths.device, a.crow.dtype
    buckets, lower = [], -1
    for longest, block, rows in (*BUCKETS, (split_len, LONG_BLOCK, 1)):
        upper = min(longest, split_len)  # rows past split_len belong to the split kernel only
        if upper > lower:
            ids = torch.nonzero((lengths > lower) & (lengths <= upper)).flatten().to(idx)
            buckets.append((ids, block, rows))
        lower = max(lower, upper)
    huge = torch.nonzero(lengths > split_len).flatten()
    per_row = (lengths[huge] + segment - 1) // segment
    seg_rows = torch.repeat_interleave(huge, per_row)
    # Segment j of a row starts j * segment positions after the row's start.
    first_seg = torch.cumsum(per_row, 0) - per_row
    j = torch.arange(seg_rows.shape[0], device=dev) - torch.repeat_interleave(first_seg, per_row)
    seg_starts = a.crow.long()[seg_rows] + j * segment
    sizes = [b[0].shape[0] for b in buckets]  # .shape of nonzero(): the plan's one host sync
    return {"buckets": [b for b, n in zip(buckets, sizes) if n], "huge_rows": huge.to(idx),
            "seg_rows": seg_rows.to(idx), "seg_starts": seg_starts.to(idx), "segment": segment}
    # END EXERCISE


# ------------------------------------------------------------------------------- launchers
def _prepare(a, x, out):
    if not isinstance(a, CSR):
        raise TypeError(f"a must be a CSR matrix (CSR.make / from_dense / from_torch), got {type(a).__name__}")
    validate.tensor(x, "x", dtypes=VALUE_DTYPES, ndim=1)
    if x.shape[0] != a.shape[1]:
        raise ValueError(f"x has {x.shape[0]} elements; expected the matrix's {a.shape[1]} columns")
    if out is None:
        return torch.empty(a.shape[0], dtype=x.dtype, device=x.device)
    validate.tensor(out, "out", dtypes=VALUE_DTYPES, ndim=1)
    if out.shape[0] != a.shape[0]:
        raise ValueError(f"out has {out.shape[0]} elements; expected the matrix's {a.shape[0]} rows")
    return out


def spmv_scalar(a: CSR, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """y = A x, one lane per row (CSR-scalar)."""
    y = _prepare(a, x, out)
    if a.shape[0]:
        spmv_csr_scalar_kernel[(triton.cdiv(a.shape[0], SCALAR_ROWS),)](a.crow, a.col, a.values, x, y, a.shape[0],
                                                                       BLOCK_ROWS=SCALAR_ROWS, num_warps=4)
    return y


def spmv_vector(a: CSR, x: torch.Tensor, out: torch.Tensor | None = None, *, block: int = VECTOR_BLOCK) -> torch.Tensor:
    """y = A x, one program per row, `block` nonzeros per step (CSR-vector)."""
    if not isinstance(block, int) or block < 16 or block & (block - 1):
        raise ValueError(f"block must be a power of two >= 16, got {block!r}")
    y = _prepare(a, x, out)
    if a.shape[0]:
        spmv_csr_vector_kernel[(a.shape[0],)](a.crow, a.col, a.values, x, y, BLOCK=block, num_warps=4)
    return y


def spmv_bucketed(a: CSR, x: torch.Tensor, out: torch.Tensor | None = None, *, split_len: int = SPLIT_LEN,
                  segment: int = SEGMENT) -> torch.Tensor:
    """y = A x with rows bucketed by length and very long rows split (plan cached on `a`)."""
    for name, v in (("split_len", split_len), ("segment", segment)):
        if not isinstance(v, int) or v < 16 or v & (v - 1):
            raise ValueError(f"{name} must be a power of two >= 16, got {v!r}")
    y = _prepare(a, x, out)
    if not a.shape[0]:
        return y
    plan = a.plan(split_len, segment)
    for ids, block, rows in plan["buckets"]:
        spmv_csr_rows_kernel[(triton.cdiv(ids.shape[0], rows),)](ids, ids.shape[0], a.crow, a.col, a.values, x, y,
                                                                 ROWS=rows, BLOCK=block, num_warps=4)
    n_segments = plan["seg_rows"].shape[0]
    if n_segments:
        y[plan["huge_rows"].long()] = 0.0  # the atomics add into it
        spmv_csr_split_kernel[(n_segments,)](plan["seg_rows"], plan["seg_starts"], a.crow, a.col, a.values, x, y,
                                            SEGMENT=segment, BLOCK=min(segment, LONG_BLOCK), num_warps=4)
    return y


def spmv(a: CSR, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """y = A x: the bucketed kernels (the fastest here on irregular matrices)."""
    return spmv_bucketed(a, x, out)


def spmv_torch(a: CSR, x: torch.Tensor) -> torch.Tensor:
    """torch.sparse (cuSPARSE on a GPU): the reference, with the same NaN/Inf semantics."""
    return a.to_torch() @ x


def spmv_bytes(m: int, n: int, nnz: int, index_size: int = 4) -> int:
    """Minimum traffic: values, column indices, row pointers, x read once, y written once."""
    # BEGIN EXERCISE: the minimum traffic, in bytes: values (fp32) and column indices for every nonzero, the
    #   m + 1 row pointers, x read once, y written once
    # HINT: The lower bound on traffic: each stored array read once and y written once; the x gather's
    #   repeats are not counted.
    # HINT: Per nonzero a 4-byte value plus an index; m + 1 row pointers of index_size; n fp32 x values; m
    #   fp32 y values.
    return nnz * (4 + index_size) + (m + 1) * index_size + 4 * n + 4 * m
    # END EXERCISE


# ------------------------------------------------------------------------- test matrices
def random_csr(m: int, n: int, nnz_per_row: float, *, kind: str = "uniform", empty_rows: float = 0.0,
               index_dtype=torch.int32, device=None) -> CSR:
    """A random CSR matrix with sorted, distinct column indices in each row (made on `device`).

    kind "uniform": row lengths Poisson(nnz_per_row); "powerlaw": row lengths from a Pareto tail
    (alpha = 1.5, so the longest of 2^21 rows is ~10^4 x the median) with about the same mean.
    `empty_rows`: the fraction of rows forced empty.
    """
    if kind not in ("uniform", "powerlaw"):
        raise ValueError(f"kind must be 'uniform' or 'powerlaw', got {kind!r}")
    dev = device or DEVICE
    if kind == "uniform":
        lengths = torch.poisson(torch.full((m,), float(nnz_per_row), device=dev))
    else:
        u = torch.rand(m, device=dev).clamp_min(1e-12)
        lengths = u ** (-1 / 1.5) * (nnz_per_row / 3.0)  # Pareto(1.5) has mean 3
    lengths = lengths.floor().clamp(0, n).long()
    if empty_rows:
        lengths[torch.rand(m, device=dev) < empty_rows] = 0
    rows = torch.repeat_interleave(torch.arange(m, device=dev), lengths)
    cols = (torch.rand(rows.shape[0], device=dev) * n).long().clamp(max=max(n - 1, 0))
    width = max(n, 1)
    keys = torch.unique(rows * width + cols)  # sorted by (row, col), duplicates merged
    rows, cols = keys // width, keys % width
    crow = torch.zeros(m + 1, dtype=torch.long, device=dev)
    crow[1:] = torch.cumsum(torch.bincount(rows, minlength=m), 0)
    values = torch.randn(keys.shape[0], device=dev)
    return CSR.make(crow.to(index_dtype), cols.to(index_dtype), values, (m, n))


# BEGIN SOLUTION ONLY: the benchmarks, sweep and command line (they measure the solution's kernels)
# ---------------------------------------------------------------------------------- benchmarks
def _inputs(size):
    kind, m, per_row = size
    a = random_csr(m, m, per_row, kind=kind)
    a.plan()  # the analysis step, once per matrix: not part of the timed multiply
    return a, torch.randn(m, device=DEVICE), a.to_torch()


def _dense_inputs(size):
    n, density = size
    a = random_csr(n, n, density * n)
    a.plan()
    return a, torch.randn(n, device=DEVICE), a.to_torch(), a.to_dense()


def _expected_nnz(size):
    kind, m, per_row = size
    return int(m * per_row)


SIZES = [("uniform", 1 << 21, 16), ("powerlaw", 1 << 21, 16), ("uniform", 1 << 20, 64), ("powerlaw", 1 << 20, 64)]
BENCHMARKS = [
    Benchmark(
        name="spmv_week4",
        title="Sparse matrix-vector product, CSR fp32, int32 indices (square, n rows)",
        sizes=SIZES,
        sim_sizes=[("uniform", 300, 6), ("powerlaw", 300, 6)],
        size_label=lambda s: f"{s[0]} n={pow2_label(s[1])} {s[2]}/row",
        make_inputs=_inputs,
        variants={
            "torch": lambda a, x, at: at @ x,
            "torch_sparse_mm": lambda a, x, at: torch.sparse.mm(at, x.unsqueeze(1)).squeeze(1),
            "triton_scalar": lambda a, x, at: spmv_scalar(a, x),
            "triton_vector": lambda a, x, at: spmv_vector(a, x),
            "triton_bucketed": lambda a, x, at: spmv_bucketed(a, x),
        },
        headline=("triton_bucketed",),
        sources={"triton_scalar": [spmv_csr_scalar_kernel, spmv_scalar],
                 "triton_vector": [spmv_csr_vector_kernel, spmv_vector],
                 "triton_bucketed": [spmv_csr_rows_kernel, spmv_csr_split_kernel, _build_plan, spmv_bucketed]},
        bytes=lambda s: spmv_bytes(s[1], s[1], _expected_nnz(s)),
        flops=lambda s: 2 * _expected_nnz(s),
        notes="bytes = nnz (4 + 4) + 4 (n + 1) + 4 n (x once) + 4 n (y), with nnz = n x (nonzeros per row), "
              "the generator's mean; torch = torch.sparse CSR (cuSPARSE); the bucketing plan is built "
              "once per matrix, outside the timing",
    ),
    Benchmark(
        name="spmv_vs_dense_week4",
        title="Sparse vs dense matvec, n = 16384 fp32, by density",
        sizes=[(16384, 0.001), (16384, 0.01), (16384, 0.1), (16384, 0.3)],
        sim_sizes=[(128, 0.05)],
        size_label=lambda s: f"n={s[0]} density={s[1]:g}",
        make_inputs=_dense_inputs,
        variants={
            "torch": lambda a, x, at, d: at @ x,
            "torch_dense": lambda a, x, at, d: d @ x,
            "triton_bucketed": lambda a, x, at, d: spmv_bucketed(a, x),
        },
        headline=("triton_bucketed", "torch_dense"),
        bytes=lambda s: spmv_bytes(s[0], s[0], int(s[0] * s[0] * s[1])),
        flops=lambda s: 2 * int(s[0] * s[0] * s[1]),
        notes="bytes and flops count the sparse minimum (nonzeros only) for every variant, so the dense "
              "row's GB/s is what it would need to match; dense really moves 4 n^2 bytes",
    ),
]
# END SOLUTION ONLY
