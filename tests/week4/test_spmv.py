"""week4_triton_dl.spmv: CSR SpMV kernels against a float64 dense product (and torch.sparse for NaN/Inf).

Error model: y[r] is a sum of L_r fp32 products, so |error| <= ~L_r 2^-24 sum_j |a_rj x_j| (any
summation order, the atomics' included). The tests use that bound with L = the longest row and
the largest row of |A| |x|, times 2: a dropped nonzero, a wrong column or an unwritten row is
off by O(|a x|), thousands of times more.
"""
import math

import pytest
import torch

from course import runtime
from course.check import assert_close, poisoned

sp = runtime.lesson("week4_triton_dl.spmv")
pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
DEVICE = runtime.DEVICE
VARIANTS = {
    "scalar": lambda a, x, out=None: sp.spmv_scalar(a, x, out),
    "vector": lambda a, x, out=None: sp.spmv_vector(a, x, out),
    "vector_block16": lambda a, x, out=None: sp.spmv_vector(a, x, out, block=16),
    "bucketed": lambda a, x, out=None: sp.spmv_bucketed(a, x, out),
    # Tiny thresholds so that the split-row kernel (segments + atomics) runs on small matrices.
    "bucketed_split": lambda a, x, out=None: sp.spmv_bucketed(a, x, out, split_len=16, segment=16),
    "spmv": lambda a, x, out=None: sp.spmv(a, x, out),
}
# GPU only: the float64 dense reference of a 12000 x 12000 matrix is already 1.1 GB.
BIG = runtime.pick(gpu=[("uniform", 8000, 30), ("powerlaw", 12000, 16)], sim=[])
# What the default run keeps (the rest is marked slow; `pytest --slow` runs it all). Each variant
# x index dtype is its own compiled kernel: the default run takes every variant on the small
# matrices with int32 indices and on the first one with int64, and the large GPU matrices through
# the public entry (`spmv`) only; slow adds the other variants and int64 on the rest.
SMALL = [("uniform", 300, 200, 6), ("powerlaw", 257, 400, 8), ("uniform", 33, 1000, 150)]


def random_cases():
    for index_dtype, name in ((torch.int32, "int32"), (torch.int64, "int64")):
        for matrix in SMALL + [(k, m, m, r) for k, m, r in BIG]:
            for variant in VARIANTS:
                if matrix in SMALL:
                    keep = index_dtype == torch.int32 or matrix == SMALL[0]
                else:
                    keep = index_dtype == torch.int32 and variant == "spmv"
                yield pytest.param(variant, matrix, index_dtype, id=f"{name}-{matrix}-{variant}",
                                   marks=[] if keep else [pytest.mark.slow])


def reference(a, x):
    return a.to_dense().double() @ x.double()


def error_bound(a, x):
    longest = int(a.row_lengths().max()) if a.shape[0] else 0
    magnitude = (a.to_dense().double().abs() @ x.double().abs()).max() if a.shape[0] and a.shape[1] else 0.0
    return 2 * max(longest, 1) * 2.0**-24 * float(magnitude) + 1e-30


def check(a, x, variant):
    out = poisoned(a.shape[0], torch.float32, DEVICE)
    assert VARIANTS[variant](a, x, out) is out, "the launcher must write into the `out` it was given"
    assert_close(out, reference(a, x).float(), rtol=0, atol=error_bound(a, x))


@pytest.mark.parametrize("variant, matrix, index_dtype", list(random_cases()))
def test_random_matrices(variant, matrix, index_dtype):
    kind, m, n, per_row = matrix
    a = sp.random_csr(m, n, per_row, kind=kind, empty_rows=0.1, index_dtype=index_dtype)
    check(a, torch.randn(n, device=DEVICE), variant)


def _one_long_row():
    wide = torch.zeros(3, 700, device=DEVICE)
    wide[1] = torch.randn(700, device=DEVICE)  # longer than the last bucket, between empty rows
    return sp.CSR.from_dense(wide)


def _alternate_empty_rows():
    dense = torch.randn(9, 13, device=DEVICE)
    dense[::2] = 0
    return sp.CSR.from_dense(dense)


# Built inside the test, not at collection: a module that fails to build one fails that test only.
SMALL_MATRICES = {
    "1x1": lambda: sp.CSR.from_dense(torch.tensor([[2.5]], device=DEVICE)),
    "1x1 zero": lambda: sp.CSR.from_dense(torch.zeros(1, 1, device=DEVICE)),
    "all rows empty": lambda: sp.CSR.from_dense(torch.zeros(5, 3, device=DEVICE)),
    "0x0": lambda: sp.CSR.from_dense(torch.zeros(0, 0, device=DEVICE)),
    "0x7": lambda: sp.CSR.from_dense(torch.zeros(0, 7, device=DEVICE)),
    "4x0": lambda: sp.CSR.make(torch.zeros(5, dtype=torch.int32, device=DEVICE),
                               torch.zeros(0, dtype=torch.int32, device=DEVICE), torch.zeros(0, device=DEVICE), (4, 0)),
    "alternate empty rows": _alternate_empty_rows,
    "one long row": _one_long_row,
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name", list(SMALL_MATRICES))
def test_edge_matrices(variant, name):
    a = SMALL_MATRICES[name]()
    check(a, torch.randn(a.shape[1], device=DEVICE), variant)


def test_plan_covers_every_row_once():
    a = sp.random_csr(500, 3000, 20, kind="powerlaw", empty_rows=0.2)
    plan = a.plan(split_len=64, segment=32)
    rows = torch.cat([ids.long() for ids, _, _ in plan["buckets"]] + [plan["huge_rows"].long()])
    assert sorted(rows.tolist()) == list(range(500))
    # Segments of each split row tile it exactly: starts step by `segment` from the row's start.
    lengths = a.row_lengths().long()
    for r in plan["huge_rows"].long().tolist():
        starts = plan["seg_starts"][plan["seg_rows"].long() == r].long()
        assert starts.tolist() == list(range(int(a.crow[r]), int(a.crow[r + 1]), 32))
        assert lengths[r] > 64
    assert a.plan(split_len=64, segment=32) is plan  # cached on the matrix


@pytest.mark.parametrize("variant", ["scalar", "vector", "bucketed_split"])
def test_nan_and_inf_follow_torch_sparse(variant):
    # Structural zeros do not multiply: a NaN in x spoils only the rows that store that column,
    # unlike a dense product, where 0 * NaN = NaN spoils every row.
    a = sp.random_csr(40, 30, 5, kind="powerlaw", empty_rows=0.1)
    x = torch.randn(30, device=DEVICE)
    x[3], x[7], x[11] = math.nan, math.inf, -math.inf
    got = VARIANTS[variant](a, x)
    want = sp.spmv_torch(a, x)
    assert_close(got, want, rtol=1e-5, atol=1e-5)  # summation orders differ: a few fp32 units
    assert not torch.isnan(got).all()


def test_round_trips_with_torch_sparse():
    dense = torch.randn(6, 9, device=DEVICE)
    dense[dense.abs() < 0.8] = 0
    a = sp.CSR.from_torch(dense.to_sparse_csr())
    assert_close(a.to_dense(), dense, rtol=0, atol=0)
    assert_close(a.to_torch().to_dense(), dense, rtol=0, atol=0)
    assert a.nnz == int((dense != 0).sum())


def bad_matrices():
    i32 = lambda *v: torch.tensor(v, dtype=torch.int32, device=DEVICE)  # noqa: E731
    f = lambda n: torch.ones(n, device=DEVICE)  # noqa: E731
    yield "crow length", ValueError, "rows \\+ 1", lambda: sp.CSR.make(i32(0, 1), i32(0), f(1), (2, 3))
    yield "crow start", ValueError, r"crow_indices\[0\] must be 0", lambda: sp.CSR.make(i32(1, 1), i32(0), f(1), (1, 3))
    yield "crow end", ValueError, "must equal the number of nonzeros", lambda: sp.CSR.make(i32(0, 2), i32(0), f(1),
                                                                                             (1, 3))
    yield "crow decreasing", ValueError, "never decrease", lambda: sp.CSR.make(i32(0, 2, 1, 2), i32(0, 1), f(2), (3, 3))
    yield "column range", ValueError, r"lie in \[0, 3\)", lambda: sp.CSR.make(i32(0, 1), i32(3), f(1), (1, 3))
    yield "negative column", ValueError, r"lie in \[0, 3\)", lambda: sp.CSR.make(i32(0, 1), i32(-1), f(1), (1, 3))
    yield "lengths", ValueError, "col_indices has 2", lambda: sp.CSR.make(i32(0, 1), i32(0, 1), f(1), (1, 3))
    yield "index dtypes", TypeError, "one index dtype", lambda: sp.CSR.make(i32(0, 1), i32(0).long(), f(1), (1, 3))
    yield "float indices", TypeError, "crow_indices has dtype", lambda: sp.CSR.make(f(2), i32(0), f(1), (1, 3))
    yield "fp64 values", TypeError, "values has dtype", lambda: sp.CSR.make(i32(0, 1), i32(0), f(1).double(), (1, 3))
    yield "shape", ValueError, "shape must be", lambda: sp.CSR.make(i32(0, 1), i32(0), f(1), (1, -3))
    yield "not sparse", TypeError, "sparse_csr", lambda: sp.CSR.from_torch(torch.ones(2, 2, device=DEVICE))


@pytest.mark.parametrize("case, error, message, call", [pytest.param(*c, id=c[0]) for c in bad_matrices()])
def test_rejects_bad_matrices(case, error, message, call):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("variant", ["scalar", "vector", "bucketed"])
def test_rejects_bad_vectors(variant):
    a = sp.CSR.from_dense(torch.eye(4, device=DEVICE))
    fn = VARIANTS[variant]
    with pytest.raises(ValueError, match="x has 3 elements"):
        fn(a, torch.ones(3, device=DEVICE))
    with pytest.raises(TypeError, match="x has dtype"):
        fn(a, torch.ones(4, device=DEVICE, dtype=torch.float64))
    with pytest.raises(ValueError, match="1 dimension"):
        fn(a, torch.ones(4, 1, device=DEVICE))
    with pytest.raises(ValueError, match="out has 3 elements"):
        fn(a, torch.ones(4, device=DEVICE), torch.empty(3, device=DEVICE))
    with pytest.raises(TypeError, match="a must be a CSR matrix"):
        fn(torch.eye(4, device=DEVICE).to_sparse_csr(), torch.ones(4, device=DEVICE))


def test_rejects_bad_block_and_split():
    a, x = sp.CSR.from_dense(torch.eye(4, device=DEVICE)), torch.ones(4, device=DEVICE)
    with pytest.raises(ValueError, match="block"):
        sp.spmv_vector(a, x, block=24)
    with pytest.raises(ValueError, match="split_len"):
        sp.spmv_bucketed(a, x, split_len=100)


def test_byte_count():
    # 16 nonzeros per row, int32: 8 bytes per nonzero + row pointers + x + y.
    assert sp.spmv_bytes(1000, 1000, 16000) == 16000 * 8 + 1001 * 4 + 4000 + 4000
