"""Exercise: sparse matrix-vector product in CSR. Same names as week4_triton_dl/spmv.py.
Check your work with `pytest tests/week4/test_spmv.py --impl=exercises`.

The CSR container (with its validation) and the random matrices are given. Suggested order:
`spmv_csr_scalar_kernel` (one lane per row) with `spmv_scalar`; `spmv_csr_vector_kernel` (one
program per row) with `spmv_vector`; `spmv_bytes`; then the bucketed version: `_build_plan`
(rows grouped by length, long rows cut into segments), `spmv_csr_rows_kernel`,
`spmv_csr_split_kernel` (atomic_add of partial sums) and `spmv_bucketed`.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from course import runtime  # noqa: F401  before triton: GPU or interpreter
from course import validate

import triton  # noqa: E402, F401
import triton.language as tl  # noqa: E402

VALUE_DTYPES = (torch.float32,)
INDEX_DTYPES = (torch.int32, torch.int64)
SCALAR_ROWS = 128
VECTOR_BLOCK = 128
BUCKETS = ((8, 8, 256), (32, 32, 64), (128, 128, 16), (512, 512, 4))
LONG_BLOCK = 1024
SPLIT_LEN = 8192
SEGMENT = 2048


@triton.jit
def spmv_csr_scalar_kernel(crow_ptr, col_ptr, val_ptr, x_ptr, y_ptr, M, BLOCK_ROWS: tl.constexpr):
    """BLOCK_ROWS rows per program, one per lane; loop k up to the block's longest row."""
    # TODO
    pass


@triton.jit
def spmv_csr_vector_kernel(crow_ptr, col_ptr, val_ptr, x_ptr, y_ptr, BLOCK: tl.constexpr):
    """One program per row, BLOCK nonzeros per step, then one tl.sum."""
    # TODO
    pass


@triton.jit
def spmv_csr_rows_kernel(row_ids_ptr, n_ids, crow_ptr, col_ptr, val_ptr, x_ptr, y_ptr,
                         ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """ROWS rows (from row_ids) per program in a [ROWS, BLOCK] tile."""
    # TODO
    pass


@triton.jit
def spmv_csr_split_kernel(seg_rows_ptr, seg_starts_ptr, crow_ptr, col_ptr, val_ptr, x_ptr, y_ptr,
                          SEGMENT: tl.constexpr, BLOCK: tl.constexpr):
    """One segment of a long row per program; tl.atomic_add the partial sum into y[row]."""
    # TODO
    pass


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


def _build_plan(a, split_len, segment):
    """{"buckets": [(row_ids, BLOCK, ROWS), ...], "huge_rows", "seg_rows", "seg_starts", "segment"}."""
    raise NotImplementedError("not implemented yet: _build_plan (week4 exercise)")


def spmv_scalar(a, x, out=None):
    """y = A x, one lane per row (CSR-scalar)."""
    raise NotImplementedError("not implemented yet: spmv_scalar (week4 exercise)")


def spmv_vector(a, x, out=None, *, block=VECTOR_BLOCK):
    """y = A x, one program per row (CSR-vector)."""
    raise NotImplementedError("not implemented yet: spmv_vector (week4 exercise)")


def spmv_bucketed(a, x, out=None, *, split_len=SPLIT_LEN, segment=SEGMENT):
    """y = A x with rows bucketed by length and very long rows split."""
    raise NotImplementedError("not implemented yet: spmv_bucketed (week4 exercise)")


def spmv(a, x, out=None):
    """y = A x: your fastest version."""
    raise NotImplementedError("not implemented yet: spmv (week4 exercise)")


def spmv_torch(a, x):
    """torch.sparse: the reference, with the same NaN/Inf semantics."""
    return a.to_torch() @ x


def spmv_bytes(m, n, nnz, index_size=4):
    """Minimum traffic of one y = A x (values, column indices, row pointers, x once, y once)."""
    raise NotImplementedError("not implemented yet: spmv_bytes (week4 exercise)")


def random_csr(m: int, n: int, nnz_per_row: float, *, kind: str = "uniform", empty_rows: float = 0.0,
               index_dtype=torch.int32, device=None) -> CSR:
    """A random CSR matrix with sorted, distinct column indices in each row (made on `device`).

    kind "uniform": row lengths Poisson(nnz_per_row); "powerlaw": row lengths from a Pareto tail
    (alpha = 1.5, so the longest of 2^21 rows is ~10^4 x the median) with about the same mean.
    `empty_rows`: the fraction of rows forced empty.
    """
    if kind not in ("uniform", "powerlaw"):
        raise ValueError(f"kind must be 'uniform' or 'powerlaw', got {kind!r}")
    dev = device or runtime.DEVICE
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
