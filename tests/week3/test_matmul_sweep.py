"""week3_triton_kernels.matmul_bench --sweep and the tuned table the matmul launchers read.

The sweep's plumbing runs anywhere: under the interpreter at a tiny shape with a few candidates
it must time each, pick a best per kernel, and write dispatch_matmul.json in course/dispatch.py's
format (marked simulated, so no launcher ever reads it). matmul_dispatch's lookups are checked on
rows built in the test: exact (M, N, K, dtype[, rung]) rows first, else the nearest swept shape of
the same class, else None (a tile) or the tiled kernel (a rung). The persistent launch settings the sweep adds (PER_SM: two programs
per SM, or one program per tile) are checked against float64 like every other config.
"""
import json

import pytest
import torch

from course import runtime, versions
from course.check import assert_close, poisoned, random_tensor

from course.dispatch import Row
from week3_triton_kernels import matmul as mm
from week3_triton_kernels import matmul_bench
from week3_triton_kernels import matmul_dispatch as md

DEVICE = runtime.DEVICE
SMALL = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=2)


def inputs(M, N, K, dtype=torch.float16):
    return random_tensor((M, K), dtype, DEVICE), random_tensor((K, N), dtype, DEVICE, scale=max(K, 1) ** -0.5)


@pytest.mark.skipif(runtime.on_gpu(), reason="plumbing at a tiny shape; on a GPU run the real sweep")
@pytest.mark.skipif(versions.interpreter_descriptor_limitation() is not None,  # its TMA candidate
                    reason=str(versions.interpreter_descriptor_limitation()))
def test_sweep_times_each_candidate_and_writes_the_table(tmp_path, capsys):
    candidates = {"tiled": [SMALL, dict(SMALL, BLOCK_N=16, GROUP_M=1)],
                  "tma": [dict(SMALL, FLATTEN=True, PER_SM=0)]}
    entries = matmul_bench.sweep(("float16",), [(40, 24, 48)], kinds=("tiled", "tma"), candidates=candidates,
                                 workers=0, out_dir=tmp_path)
    printed = capsys.readouterr().out
    assert "40x24x48" in printed and "ratio" in printed
    record = json.loads((tmp_path / "dispatch_matmul.json").read_text())
    assert record["op"] == "matmul" and record["simulated"] and "--sweep" in record["how"]
    keys = {tuple(e["key"]) for e in record["rows"]}
    assert keys == {(40, 24, 48, "float16", kind) for kind in ("tiled", "tma")} | {(40, 24, 48, "float16")}
    assert record["rows"] == entries
    by_kind = {e["key"][-1] if len(e["key"]) == 5 else "best": e for e in entries}
    assert by_kind["tma"]["tile"] == candidates["tma"][0] and by_kind["tma"]["rung"] == "tma"
    assert by_kind["tiled"]["tile"] in candidates["tiled"]
    best = by_kind["best"]
    assert best["rung"] in ("tiled", "tma") and best["tile"] == by_kind[best["rung"]]["tile"]
    assert best["measured"]["ms"] == min(by_kind[k]["measured"]["ms"] for k in ("tiled", "tma"))
    assert set(best["measured"]) == {"ms", "tflops", "cublas_ms", "cublas_tflops", "vs_cublas"}
    log = (tmp_path / "sweep_matmul.log").read_text()
    assert log.count("ms ") >= 3 and "WRONG" not in log and "failed" not in log
    assert "C: TMA store" in log  # out (40 x 24 fp16, 48-byte rows) is TMA-storable: the log says so


def test_tma_candidates_cover_the_tile_shapes_of_issue_21():
    # 5000 x 3000 x 4000 (issue 21): the TMA kernel with its C store, in 128 x 256, 256 x 128 and
    # 128 x 128 tiles, and the 4-stage 128 x 256 / 256 x 128 pipelines with C stored in halves.
    tiles = {(c["BLOCK_M"], c["BLOCK_N"], c.get("EPILOGUE_SUBTILE", False), c["num_stages"])
             for c in matmul_bench.SWEEP_CANDIDATES["tma"]}
    assert {(128, 256, False, 3), (256, 128, False, 3), (128, 128, False, 4)} <= tiles
    assert {(128, 256, True, 4), (256, 128, True, 4)} <= tiles
    assert (5000, 3000, 4000) in matmul_bench.SWEEP_SHAPES


def test_sweep_candidates_are_valid_configs():
    for table in (matmul_bench.SWEEP_CANDIDATES, matmul_bench.FP8_SWEEP_CANDIDATES):
        for kind, configs in table.items():
            labels = [matmul_bench.config_label(c) for c in configs]
            assert len(set(labels)) == len(labels), f"{kind}: a candidate twice"
            for c in configs:
                assert {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"} <= set(c)
                assert ("FLATTEN" in c) == (kind != "tiled")
                # the pipeline's buffers fit an H100's 227 KB of shared memory
                itemsize = 1 if table is matmul_bench.FP8_SWEEP_CANDIDATES else 2
                assert c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * itemsize <= 227 * 1024


def test_sweep_refuses_big_shapes_in_simulation():
    if runtime.on_gpu():
        pytest.skip("the GPU sweeps any shape")
    with pytest.raises(SystemExit):
        matmul_bench.main(["--sweep", "--shapes", "4096x4096x4096"])


def _rows():
    config = dict(SMALL, FLATTEN=True)
    rows = [((4096, 4096, 4096, "float16", "tma"), "tma", config),
            ((4096, 4096, 4096, "float16"), "tma", config),
            ((8192, 8192, 8192, "float16", "tma"), "tma", dict(config, BLOCK_N=64)),
            ((5000, 3000, 4000, "float16", "tma"), "tma", dict(config, BLOCK_M=64))]
    return {key: Row(key, rung, tile, {}) for key, rung, tile in rows}


def test_tile_for_exact_then_nearest_of_the_same_class():
    rows = _rows()
    assert md.tile_for(4096, 4096, 4096, torch.float16, "tma", rows) == rows[(4096, 4096, 4096, "float16", "tma")].tile
    assert md.choose(4096, 4096, 4096, torch.float16, rows) == ("tma", rows[(4096, 4096, 4096, "float16")].tile)
    # 7168^3 lies within 2x of both aligned entries; 8192^3 is the nearer (log2 ratios 0.19 vs 0.81 a dimension)
    assert md.tile_for(7168, 7168, 7168, torch.float16, "tma", rows)["BLOCK_N"] == 64
    assert md.tile_for(4096, 4096, 2048, torch.float16, "tma", rows) == rows[(4096, 4096, 4096, "float16", "tma")].tile
    # same class as 5000 x 3000 x 4000 (N and M not multiples of 16, K one)
    assert md.tile_for(4500, 2900, 4000, torch.float16, "tma", rows)["BLOCK_M"] == 64


def test_tile_for_none_and_the_default_rung_elsewhere():
    rows = _rows()
    assert md.tile_for(4097, 4097, 4097, torch.float16, "tma", rows) is None  # another class
    assert md.tile_for(1024, 4096, 4096, torch.float16, "tma", rows) is None  # 4x away
    assert md.tile_for(4096, 4096, 4096, torch.bfloat16, "tma", rows) is None  # another dtype
    assert md.tile_for(4096, 4096, 4096, torch.float16, "tiled", rows) is None  # another kernel
    assert md.tile_for(0, 4096, 4096, torch.float16, "tma", rows) is None
    assert md.choose(4097, 4097, 4097, torch.float16, rows) == ("tiled", None)  # no row: the autotuned tiled kernel
    tile = md.tile_for(4096, 4096, 4096, torch.float16, "tma", rows)
    tile.pop("FLATTEN")  # a copy: the table keeps its row
    assert rows[(4096, 4096, 4096, "float16", "tma")].tile["FLATTEN"]


def test_rungs_are_chosen_by_argument_and_named_by_what_they_are():
    with pytest.raises(ValueError, match=r"matmul: rung must be one of 'tiled', 'persistent', 'tma', got 'best'"):
        md.resolve("best", None, 64, 64, 64, torch.float16)
    with pytest.raises(ValueError, match="tile must be a dict with BLOCK_M, BLOCK_N and BLOCK_K"):
        md.resolve("tiled", {"BLOCK_M": 32}, 64, 64, 64, torch.float16)
    assert md.resolve(None, dict(SMALL), 64, 64, 64, torch.float16, pad_strides=False) == ("tiled", SMALL)
    a, b = inputs(40, 24, 48)
    out = poisoned((40, 24), torch.float16, DEVICE)
    assert_close(mm.matmul(a, b, out=out, rung="persistent", tile=dict(SMALL, FLATTEN=True)), mm.matmul_torch(a, b))


def test_no_dispatch_rows_in_simulation():
    if runtime.on_gpu():
        pytest.skip("on a GPU the table is read when it was measured there")
    assert md.TABLE.rows() == {}
    assert md.TABLE.record()["rows"], "results/dispatch_matmul.json: the sweep's table is committed"


# PER_SM = 2: twice as many programs as SMs, each looping over tiles; PER_SM = 0: one per tile.
@pytest.mark.parametrize("per_sm", [0, 2])
@pytest.mark.parametrize("kind", ["persistent", pytest.param("tma", marks=pytest.mark.skipif(
    runtime.on_gpu() and torch.cuda.get_device_capability() < (9, 0), reason="TMA needs sm_90"))])
def test_programs_per_sm_settings_match_float64(kind, per_sm):
    M, N, K = 150, 70, 45  # 5 x 3 tiles of 32 x 32: more tiles than programs either way
    a, b = inputs(M, N, K)
    out = poisoned((M, N), torch.float16, DEVICE)
    mm.run_kernel(kind, a, b, None, None, out, M, N, K, config=dict(SMALL, FLATTEN=True, PER_SM=per_sm))
    assert_close(out, mm.matmul_torch(a, b))
