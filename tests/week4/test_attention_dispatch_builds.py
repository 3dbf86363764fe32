"""Week 4's attention op runs the Hopper forward's build its sweep's table names, per sequence band.

The table (results/dispatch_attention.json, written by attention/sweep_forward.py on a GPU) may name
flash_hopper with a build ({"overlap", "persistent"}: compile-time variants, same bits) for a key
(head dim, causal, band). On the CPU, the rule is asked as on the H100 that measured the table: a table
file written here is read back as that GPU's (course/dispatch.py's runtime answers so), the dispatch
module sees a GPU, flash_hopper counts as eligible, and the kernel's launch is the float64 stand-in
(tests/week4/hopper_stand_ins.py) that records the build flags it was given. The sweep's choice
(`table_row`) is checked on fake timings: the fastest candidate, a build included, only past the margin.
"""
import types

import pytest
import torch

from course import dispatch as cd
from course import runtime
from tests.week4 import hopper_stand_ins
from tests.week4.attention_helpers import qkv
from week4_triton_dl.attention import dispatch, sweep_forward
from week4_triton_dl.attention import hopper as hp
from week4_triton_dl.attention import naive as an
from week4_triton_dl.attention.op import flash_attention, flash_attention_op

GPU = "NVIDIA H100 80GB HBM3 (the table's, stood in)"
SHORT, LONG = dispatch.seq_band(4096), dispatch.seq_band(16384)
DEFAULT = {"overlap": False, "persistent": False, "dynamic": False}  # hp.check_build(None)
TILE = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}


def hopper_row(key, build=None):
    return {"key": list(key), "rung": "flash_hopper", "tile": None, "measured": {},
            **({} if build is None else {"build": build})}


@pytest.fixture
def table(tmp_path, monkeypatch):
    """write(rows): a table file with these rows, read back by dispatch.TABLE as the measuring GPU's; the
    dispatch module on a GPU with flash_hopper eligible, and any key over MIN_TMA_SCORES."""
    monkeypatch.setattr(cd, "runtime", types.SimpleNamespace(on_gpu=lambda: True, describe=lambda: {"gpu": GPU}))
    monkeypatch.setattr(dispatch, "runtime", types.SimpleNamespace(
        ON_GPU=True, require_bf16_tensor_cores=runtime.require_bf16_tensor_cores))
    monkeypatch.setattr(dispatch, "MIN_TMA_SCORES", 1)
    monkeypatch.setitem(dispatch.FORWARDS, "flash_hopper",
                        dispatch.FORWARDS["flash_hopper"]._replace(eligible=lambda *args: True))
    table = cd.Table(dispatch.__file__, "attention", check_row=dispatch.check_row)  # as dispatch.TABLE reads
    table.results = tmp_path
    monkeypatch.setattr(dispatch, "TABLE", table)

    def write(rows):
        cd.save(tmp_path, "attention", rows, "tests/week4/test_attention_dispatch_builds.py")
        table.forget()
        return table
    return write


@pytest.fixture
def launched(monkeypatch):
    """The build flags of each launch of the Hopper forward (its stand-in computes in float64)."""
    hopper_stand_ins.install(monkeypatch)
    flags = []

    def launch(q, k, v, causal, scale, out, lse, pingpong=True, overlap=False, persistent=False, dynamic=False,
               key_lengths=None):
        flags.append({"overlap": overlap, "persistent": persistent, "dynamic": dynamic})
        return hopper_stand_ins.forward_stand_in(q, k, v, causal, scale, out, lse, key_lengths=key_lengths)
    monkeypatch.setattr(hp, "launch", launch)
    return flags


def empty(Sq, D=128):  # shapes only: the rule never reads the data
    return (torch.empty(1, 1, Sq, D, dtype=torch.bfloat16),) * 3


@pytest.mark.parametrize("build", [{"overlap": True, "persistent": False}, {"overlap": False, "persistent": True},
                                   {"overlap": True, "persistent": True}, {"persistent": True, "dynamic": True}])
def test_the_op_launches_the_build_the_table_names(build, table, launched):
    table([hopper_row((128, True, SHORT), build), {"key": [128, True, LONG], "rung": "flash_tma", "tile": TILE,
                                                    "measured": {}}])
    q, k, v = qkv(1, 2, 80, 80, 128, torch.bfloat16)
    want = an.attention_reference(q, k, v, True).to(q.dtype)
    assert torch.equal(flash_attention(q, k, v, True), want)  # eager
    assert torch.equal(flash_attention_op(q, k, v, True, 128 ** -0.5, None)[0], want)  # the registered op
    assert launched == [hp.check_build(build)] * 2
    assert dispatch.choose(q, k, v, True) == ("flash_hopper", hp.check_build(build))
    assert dispatch.choose(*empty(16384), True) == ("flash_tma", TILE)  # the other band's row


def test_the_compiled_op_launches_the_build_the_table_names(table, launched):
    # Under torch.compile the op is one opaque node; the rule runs inside it, on the real tensors, at run time.
    build = {"overlap": True, "persistent": True}
    table([hopper_row((128, False, SHORT), build)])
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: flash_attention(q, k, v, False) * 2, fullgraph=True, backend="eager")
    q, k, v = qkv(1, 2, 80, 80, 128, torch.bfloat16)
    assert torch.equal(compiled(q, k, v), an.attention_reference(q, k, v, False).to(q.dtype) * 2)
    assert launched == [hp.check_build(build)]
    torch._dynamo.reset()


def test_a_row_from_before_the_builds_and_bands_still_works(table, launched):
    # The committed table of 2026-12-07 00:58 UTC: keys (head dim, causal), no build; flash_hopper then had one.
    table([hopper_row((128, True)), {"key": [64, True], "rung": "flash_blocked", "tile": None, "measured": {}}])
    for seq in (4096, 8192, 8193, 16384):  # measured at S = 4096, it applies at every S, as it always did
        assert dispatch.choose(*empty(seq), True) == ("flash_hopper", None), seq
        assert dispatch.choose(*empty(seq, 64), True) == ("flash_blocked", None), seq
    assert dispatch.choose(*empty(4096), False) == ("flash_blocked", None)  # no row
    q, k, v = qkv(1, 2, 80, 80, 128, torch.bfloat16)
    assert torch.equal(flash_attention(q, k, v, True), an.attention_reference(q, k, v, True).to(q.dtype))
    assert launched == [DEFAULT]


def test_the_band_row_comes_before_a_row_without_a_band(table):
    persistent = {"overlap": False, "persistent": True}
    table([hopper_row((128, True)), hopper_row((128, True, SHORT), persistent)])
    assert dispatch.choose(*empty(8192), True) == ("flash_hopper", hp.check_build(persistent))
    assert dispatch.choose(*empty(8193), True) == ("flash_hopper", None)  # no long row: the one without a band


@pytest.mark.parametrize("row, message", [
    (hopper_row((128, True, SHORT), {"overlap": "yes"}), "build must be None .* got {'overlap': 'yes'}"),
    (hopper_row((128, True, SHORT), {"pingpong": False}), "build must be None .* got {'pingpong': False}"),
    (hopper_row((128, True, SHORT), {"dynamic": True}), "dynamic schedules the persistent build's work tiles"),
    (hopper_row((128, True, SHORT), ["overlap"]), r"build must be None .* got \['overlap'\]"),
    ({"key": [128, True, SHORT], "rung": "flash_tma", "tile": TILE, "measured": {}, "build": DEFAULT},
     "names rung 'flash_tma' with a build"),
    # a good row beside a bad one: the file is refused whole, whichever key the call looks up
    ([hopper_row((128, True, SHORT), {"persistent": True}), hopper_row((64, True, SHORT), {"dynamic": True})],
     "the row for \\[64, True, 'S<=8192'\\]: build: dynamic schedules"),
])
def test_a_bad_build_in_the_table_is_refused_before_any_launch(row, message, table, monkeypatch):
    path = table(row if isinstance(row, list) else [row]).path
    monkeypatch.setattr(hp, "launch", lambda *a, **k: pytest.fail("launched despite a bad table row"))
    q, k, v = qkv(1, 2, 80, 80, 128, torch.bfloat16)
    with pytest.raises(ValueError, match=message) as error:
        flash_attention(q, k, v, True)
    assert str(path) in str(error.value) and "True, 'S<=8192']" in str(error.value)


def test_the_launcher_checks_its_build_argument(monkeypatch):
    monkeypatch.setattr(hp, "launch", lambda *a, **k: pytest.fail("launched despite a bad build"))
    q, k, v = qkv(1, 2, 8, 8, 64, torch.bfloat16)
    for bad in ({"overlap": 1}, {"pingpong": False}, "persistent", True):
        with pytest.raises(ValueError, match="build must be None"):
            hp.launch_forward_hopper(q, k, v, True, 0.125, build=bad)
    with pytest.raises(ValueError, match="build: dynamic .* needs persistent=True"):
        hp.launch_forward_hopper(q, k, v, True, 0.125, build={"dynamic": True, "overlap": True})
    assert hp.check_build(None) == DEFAULT and hp.check_build({"persistent": True}) == {**DEFAULT, "persistent": True}
    assert [hp.build_label(b) for b in sweep_forward.HOPPER_BUILDS.values()] == list(sweep_forward.HOPPER_BUILDS)
    assert list(sweep_forward.HOPPER_BUILDS) == ["default", "overlap", "persistent", "persistent+overlap",
                                                 "persistent+dynamic", "persistent+dynamic+overlap"]


def test_a_caller_cannot_pass_the_hopper_rung_a_tile():
    q, k, v = qkv(1, 2, 8, 8, 64, torch.bfloat16)
    with pytest.raises(ValueError, match="flash_hopper.*one tile"):
        dispatch.resolve("flash_hopper", TILE, q, k, v, True)


def test_the_label_names_the_build():
    assert dispatch.label(cd.Choice("flash_hopper")) == "flash_hopper"
    assert dispatch.label(cd.Choice("flash_hopper", DEFAULT)) == "flash_hopper"
    assert dispatch.label(cd.Choice("flash_hopper", {"overlap": True, "persistent": True})) == \
        "flash_hopper (persistent+overlap)"
    assert dispatch.label(cd.Choice("flash_tma", TILE)) == "flash_tma"


# ------------------------------------------------------------------------------------ the sweep's choice
def row_of(blocked, tma=None, **hopper_ms):
    """table_row for key (128, True, SHORT) with cuDNN at 1.0 ms; hopper_ms by build label (persistent_overlap:
    'persistent+overlap')."""
    builds = {label.replace("_", "+"): ms for label, ms in hopper_ms.items()}
    return sweep_forward.table_row((128, True, SHORT), 1.0, blocked, None if tma is None else (tma, TILE),
                                   builds, 4096, 4, 1e12)


def test_the_sweep_names_the_fastest_build_past_the_margin(table):
    row = row_of(1.0, tma=0.99, default=0.97, overlap=0.95, persistent=0.90, persistent_overlap=0.92)
    assert (row["rung"], row["tile"], row["build"]) == ("flash_hopper", None, {"overlap": False, "persistent": True})
    measured = row["measured"]
    assert measured["flash_hopper_builds"]["persistent"] == {"ms": 0.9, "vs_cudnn": round(1 / 0.9, 3),
                                                             "tflops": round(1e12 / 0.9 / 1e9, 1)}
    assert set(measured["flash_hopper_builds"]) == {"default", "overlap", "persistent", "persistent+overlap"}
    # the fields of the tables from before the builds are the default build's
    assert (measured["flash_hopper_ms"], measured["flash_hopper_vs_cudnn"]) == (0.97, round(1 / 0.97, 3))
    # written and read back as the op reads it: the same choice
    table([row])
    assert dispatch.choose(*empty(4096), True) == ("flash_hopper", hp.check_build({"persistent": True}))


def test_the_fastest_stays_off_the_op_inside_the_margin():
    margin = dispatch.MARGIN
    inside = 1.0 / margin * 1.001  # faster than flash_blocked, but by less than the margin
    row = row_of(1.0, tma=inside + 0.01, default=inside + 0.02, overlap=inside)
    assert (row["rung"], row["tile"], "build" in row) == ("flash_blocked", None, False)
    assert set(row["measured"]["flash_hopper_builds"]) == {"default", "overlap"}
    past = row_of(1.0, tma=0.5, overlap=0.6)  # flash_tma fastest, past the margin: its tile, no build
    assert (past["rung"], past["tile"], "build" in past) == ("flash_tma", TILE, False)
    only_one = row_of(1.0, persistent_overlap=1 / margin)  # exactly the margin: named (>= MARGIN)
    assert (only_one["rung"], only_one["build"]) == ("flash_hopper", {"overlap": True, "persistent": True})
    assert "flash_hopper_ms" not in only_one["measured"]  # no default build timed: no default's fields
    nothing = row_of(1.0)  # no candidate ran
    assert (nothing["rung"], nothing["tile"]) == ("flash_blocked", None) and "flash_tma_ms" not in nothing["measured"]


def test_the_sweep_measures_one_seq_per_band():
    assert {dispatch.seq_band(seq) for seq in sweep_forward.BAND_SEQ.values()} == set(sweep_forward.BAND_SEQ)
    assert list(sweep_forward.BAND_SEQ) == [SHORT, LONG] and SHORT == "S<=8192" and LONG == "S>8192"
