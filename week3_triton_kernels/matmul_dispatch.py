"""Which of week 3's matmul kernels runs, and with which tile: the rule, in one place.

`matmul` (matmul.py) has three kernels, its rungs, named by what they are (the ladder of
`python -m course rung matmul_triton` numbers them 3, 4 and 5):

* tiled: `matmul_kernel`, one program per tile of C, pointer loads;
* persistent: `matmul_persistent_kernel`, one program per SM looping over the tiles;
* tma: `matmul_tma_kernel`, the persistent loop with A, B (and C) moved by the TMA engine (sm_90).

The sweep (`python -m week3_triton_kernels.matmul_bench --sweep`, GPU) times candidate tiles of each
kernel at its shapes and writes results/dispatch_matmul.json (course/dispatch.py's format), two kinds
of rows per shape and dtype:

    {"key": [4096, 4096, 4096, "float16"], "rung": "tma", "tile": {...}}            the choice
    {"key": [4096, 4096, 4096, "float16", "tiled"], "rung": "tiled", "tile": {...}}  each rung's tile

`resolve` answers for one call: the caller's rung= and tile= when given; else the choice row of the
shape (exact, else the nearest swept shape of the same class: `nearest`); else tiled with its
autotuner. A named rung without a tile gets that rung's swept tile the same way, else its autotuner.
Rows apply only on the GPU that measured them (course/dispatch.py); in simulation every kernel runs
matmul_launch.SIM_CONFIG.
"""
from __future__ import annotations

import math

from course import dispatch
from course.dispatch import Choice

from week3_triton_kernels.matmul_basic import check_blocks
from week3_triton_kernels.matmul_launch import ALIGN

RUNGS = ("tiled", "persistent", "tma")
TABLE = dispatch.Table(__file__, "matmul")  # results/dispatch_matmul.json
DEFAULT = Choice("tiled")  # no row: the tiled kernel, its autotuner's tile


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def shape_class(dims) -> tuple:
    """Which dimensions are multiples of 16: that decides which operands get the padded copy and
    which loads are vectorised, so a tile tuned for 4096^3 says little about 4097^3."""
    return tuple(d % ALIGN == 0 for d in dims)


def nearest(rows: dict, M: int, N: int, K: int, tail: tuple):
    """The row keyed (M, N, K, *tail), else that of the nearest swept shape of the same class (the
    same dimensions multiples of 16, every dimension within 2x: sum of |log2| ratios smallest), else None."""
    exact = rows.get((M, N, K, *tail))
    if exact is not None or min(M, N, K) <= 0:
        return exact
    found, distance = None, math.inf
    for key, row in rows.items():
        if tuple(key[3:]) != tuple(tail) or shape_class(key[:3]) != shape_class((M, N, K)):
            continue
        logs = [abs(math.log2(want / have)) for want, have in zip((M, N, K), key[:3])]
        if max(logs) <= 1 and sum(logs) < distance:
            found, distance = row, sum(logs)
    return found


def tile_for(M: int, N: int, K: int, dtype, rung: str, rows: dict | None = None) -> dict | None:
    """The swept tile of `rung` for this problem (a copy: launchers may pop from it), or None."""
    row = nearest(TABLE.rows() if rows is None else rows, M, N, K, (dtype_name(dtype), rung))
    return dict(row.tile) if row is not None and row.tile is not None else None


def choose(M: int, N: int, K: int, dtype, rows: dict | None = None) -> Choice:
    """The rung and tile the sweep found fastest for this problem, else DEFAULT."""
    row = nearest(TABLE.rows() if rows is None else rows, M, N, K, (dtype_name(dtype),))
    if row is None or row.rung not in RUNGS:
        return DEFAULT
    return Choice(row.rung, None if row.tile is None else dict(row.tile))


def check_tile(tile) -> dict:
    """A tile given by a caller: a dict with BLOCK_M, BLOCK_N, BLOCK_K (and GROUP_M, num_warps,
    num_stages, ...), its blocks checked as matmul_fixed's are."""
    if not isinstance(tile, dict) or not {"BLOCK_M", "BLOCK_N", "BLOCK_K"} <= set(tile):
        raise ValueError(f"tile must be a dict with BLOCK_M, BLOCK_N and BLOCK_K, got {tile!r}")
    check_blocks(tile["BLOCK_M"], tile["BLOCK_N"], tile["BLOCK_K"], tile.get("GROUP_M", 8))
    return dict(tile)


def resolve(rung, tile, M: int, N: int, K: int, dtype, pad_strides: bool = True) -> Choice:
    """The Choice for one call of checked operands (the docstring's rule). pad_strides=False keeps
    the tiled kernel when no rung is named (only it runs unpadded operands as they are)."""
    if rung is None and tile is None and pad_strides:
        return choose(M, N, K, dtype)
    rung = DEFAULT.rung if rung is None else dispatch.check_rung("matmul", rung, RUNGS)
    return Choice(rung, check_tile(tile) if tile is not None else tile_for(M, N, K, dtype, rung))
