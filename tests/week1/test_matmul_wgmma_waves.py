"""week1_cuda_python.matmul_wgmma_waves: the wave arithmetic the notes cite, on the CPU: against tiles
dealt one by one to SMs and MACs counted over padded tiles, for every build (schedule and tile width),
against the schedule rule's own arithmetic and the launcher's grid, worked by hand at 5000 x 3000 x
4000 and at the capstone's N = 768 (which width fills the last wave), and the committed file equal to
what the module gives.
"""
import itertools

import pytest

from week1_cuda_python import matmul_wgmma_schedule as rule
from week1_cuda_python import matmul_wgmma_waves as w
from week1_cuda_python.matmul_wgmma_persistent import launch_geometry, schedule_tiles

CASES = [(5000, 3000, 4000), (4096, 4096, 4096), (8192, 768, 3072), (8192, 50304, 768), (8192, 768, 50304),
         (1, 1, 1), (129, 257, 65), (128 * 132, 256, 64)]


@pytest.mark.parametrize("mnk,schedule,sms", list(itertools.product(CASES, rule.BUILD_TILES, (132, 7))))
def test_against_tiles_dealt_one_by_one(mnk, schedule, sms):
    m, n, k = mnk
    tile = rule.BUILD_TILES[schedule]
    got = w.waves(m, n, k, tile, sms)
    counts = [0] * sms
    tiles = 0
    for row in range(0, m, tile.bm):          # every tile of C, whatever its order: t goes to block t mod SMs
        for col in range(0, n, tile.bn):
            counts[tiles % sms] += 1
            tiles += 1
    busiest = max(counts)
    assert (got["tiles"], got["busiest"]) == (tiles, busiest)
    assert got["last_wave_tiles"] == counts.count(busiest)
    assert got["full_waves"] == min(counts)  # every SM got at least this many
    assert got["sm_time_used_pct"] == round(100 * sum(counts) / (busiest * sms), 1)
    padded = got["tiles_m"] * tile.bm * got["tiles_n"] * tile.bn * got["k_steps"] * tile.bk
    assert padded >= m * n * k and got["mac_used_pct"] == round(100 * m * n * k / padded, 1)
    assert 0 < got["edge_m"] <= tile.bm and 0 < got["edge_n"] <= tile.bn and 0 < got["edge_k"] <= tile.bk
    assert got["ceiling_pct"] <= min(got["sm_time_used_pct"], got["mac_used_pct"])


@pytest.mark.parametrize("mnk", CASES)
def test_agrees_with_the_schedule_rule_and_the_launchers_grid(mnk):
    m, n, k = mnk
    theirs = rule.explain(m, n, k, 132)
    for schedule, tile in rule.BUILD_TILES.items():
        mine = w.waves(m, n, k, tile, 132)
        assert (mine["tiles"], mine["busiest"], mine["sm_time_used_pct"]) == (
            theirs[schedule]["tiles"], theirs[schedule]["busiest"], theirs[schedule]["used_pct"])
        assert mine["k_steps"] == theirs["k_steps"]
    # one block per SM, never more blocks than tiles: what the dealing above assumes
    grid, _ = launch_geometry(m, n, 132)
    assert grid[0] == min(132, w.waves(m, n, k, rule.TILE_SHAPES["cooperative"])["tiles"])
    for build in rule.BUILDS:  # and each build's own grid
        grid, _ = launch_geometry(m, n, 132, schedule_tiles(*build))
        assert grid[0] == min(132, w.waves(m, n, k, rule.BUILD_TILES[rule.build_label(*build)])["tiles"]), build


def test_the_capstones_n_768_by_hand():
    """fc2 (8192 x 768 x 3072): 768 columns are 3 tiles of 256, 4 of 192, 6 of 128. Cooperative: 64 row
    tiles, so 192, 256 or 384 tiles on 132 SMs: the second wave 45% full at 256 wide; at 192 two waves
    of 132 less 8; at 128 three less 12. 192 and 128 use the same share of the SMs' time (97.0%), and the
    tie goes to the wider tile."""
    shape = w.record()["shapes"]["fc2"]
    coop, coop192, coop128 = shape["cooperative"], shape["cooperative_bn192"], shape["cooperative_bn128"]
    assert (coop["tiles_n"], coop192["tiles_n"], coop128["tiles_n"]) == (3, 4, 6)
    assert (coop["tiles"], coop192["tiles"], coop128["tiles"]) == (192, 256, 384)
    assert (coop["busiest"], coop["last_wave_tiles"], coop["last_wave_fill_pct"]) == (2, 60, 45.5)
    assert (coop192["busiest"], coop192["last_wave_tiles"]) == (2, 124)
    assert (coop128["busiest"], coop128["last_wave_tiles"]) == (3, 120)
    assert coop192["sm_time_used_pct"] == coop128["sm_time_used_pct"] == 97.0 > coop["sm_time_used_pct"]
    assert shape["fullest_width"]["cooperative"] == 192
    # ping-pong's 64-row tiles already fill it at 256 (384 tiles): the tie keeps 256
    assert shape["pingpong"]["sm_time_used_pct"] == 97.0 and shape["fullest_width"]["pingpong"] == 256


@pytest.mark.parametrize("name", list(w.SHAPES))
def test_fullest_width_is_the_most_used_sm_time(name):
    shape = w.record()["shapes"][name]
    for schedule, width in shape["fullest_width"].items():
        used = {wd: shape[rule.build_label(schedule, wd)]["sm_time_used_pct"] for wd in rule.WIDTHS}
        assert used[width] == max(used.values())
        assert width == max(wd for wd in rule.WIDTHS if used[wd] == used[width])  # ties: the wider


def test_5000x3000x4000_by_hand():
    coop = w.waves(5000, 3000, 4000, rule.TILE_SHAPES["cooperative"])
    # 5000 = 39 x 128 + 8, 3000 = 11 x 256 + 184, 4000 = 62 x 64 + 32
    assert (coop["tiles_m"], coop["tiles_n"], coop["k_steps"]) == (40, 12, 63)
    assert (coop["edge_m"], coop["edge_n"], coop["edge_k"]) == (8, 184, 32)
    # 480 tiles: 3 full waves of 132 and a last of 84
    assert (coop["tiles"], coop["full_waves"], coop["busiest"], coop["last_wave_tiles"]) == (480, 3, 4, 84)
    assert coop["last_wave_fill_pct"] == 63.6 and coop["sm_time_used_pct"] == 90.9
    assert coop["mac_used_pct"] == round(100 * 5000 * 3000 * 4000 / (40 * 128 * 12 * 256 * 63 * 64), 1)
    pp = w.waves(5000, 3000, 4000, rule.TILE_SHAPES["pingpong"])
    assert (pp["tiles_m"], pp["edge_m"], pp["tiles"], pp["busiest"]) == (79, 8, 948, 8)


@pytest.mark.parametrize("bad", [dict(m=0), dict(n=-3), dict(k=2.5), dict(sms=0), dict(m=True)])
def test_bad_sizes_are_refused(bad):
    args = dict(m=64, n=64, k=64, sms=132) | bad
    name = next(iter(bad))
    with pytest.raises(ValueError, match=f"^{name} must be a positive int"):
        w.waves(args["m"], args["n"], args["k"], rule.TILE_SHAPES["cooperative"], args["sms"])


def test_the_committed_file_is_what_the_module_gives(capsys):
    assert w.main(["--check"]) == 0, capsys.readouterr().out
    shapes = w.record()["shapes"]
    assert set(shapes) >= {"4096^3", "8192^3", "5000x3000x4000", "lm_head_dx"}
    assert shapes["fc2"]["mnk"] == [8192, 768, 3072]


def test_a_stale_file_is_caught(tmp_path, capsys):
    stale = tmp_path / "waves.json"
    stale.write_text("{}\n")
    assert w.main(["--check", "--out", str(stale)]) == 1
    assert w.main(["--out", str(stale)]) == 0 and w.main(["--check", "--out", str(stale)]) == 0
