"""Which forward the attention op runs, and with which tile: the rule, in one place.

The op `flash_attention` (attention/op.py) calls `forward` here, which runs one of its rungs:

* flash_blocked: attention/flash.py's kernel, Q/K/V tiles loaded through pointers (tl.load),
  any GPU, any dtype, any strides; its tiles picked by its autotuner per shape bucket.
* flash_tma: attention/tma.py's kernel, every tile moved by the Hopper TMA copy engine; sm_90
  and later, fp16 and bf16, strides TMA can walk, one tile per (head dim, causal).
* flash_hopper: attention/hopper.py, CUDA C for sm_90a (FlashAttention-3's structure: a TMA
  producer, two ping-ponging wgmma consumers); contiguous fp16/bf16, D = 64 or 128, padding keys
  (key_lengths) masked in the kernel. Named only by the sweep's table, which also
  names its build (hopper.BUILD_FLAGS: overlap, persistent, dynamic; same bits, other speeds), carried to
  the launcher in the Choice's tile field: the kernel has one tile, and its build is its launch setting.
  The table's rows are checked once, when the file is read (`check_row`), so a call trusts its Choice.

(`python -m course rung attention` numbers them 3 and 4 in the ladder; that is the only place
the numbers live.) `resolve` answers for one call (`choose` for what the caller leaves open), in this order:

1. The caller's `rung=` (and `tile=`), when given: the tests and the benchmarks choose this way.
   `rung="flash_tma"` on inputs TMA cannot run is refused with the reason.
2. The interpreter, non-16-bit dtypes, and problems under MIN_TMA_SCORES scores: flash_blocked.
   Below that size the call is paced by the host, and a TMA call costs the host more than the
   engine saves on the GPU (measured: attention/bench.py's attention_host_week4).
3. The sweep's row for (head dim, causal, sequence band) in results/dispatch_attention.json, when it
   was measured on this GPU (course/dispatch.py) and names a rung these inputs can run: that rung
   with the row's tile (flash_tma) or build (flash_hopper). The sweep names a rung only where it beat
   flash_blocked by the 3% margin (MARGIN).
4. Otherwise flash_blocked with its autotuned tile.

Why a sequence band in the key (`seq_band`: S <= 8192, and above): the Hopper forward's persistent
build walks its work tiles in a static order, and at causal S = 16k that walk leaves some blocks far
more work than others (attention/persistent_balance.py); the H100's benchmark (results/
attention_hopper.json) measured it the fastest build at D = 128, causal S = 1k-8k, the slowest at 16k. One
row per (head dim, causal) would carry S = 4096's choice to 16k. Two bands, each measured at one S
(sweep_forward.BAND_SEQ), keep the table small. A table written before the bands (rows keyed
(head dim, causal), measured at S = 4096) still works: its row applies at every S, as it always did.

The op sits above this module and the rungs below it: the op passes its table of forwards
(`FORWARDS`, or `rungs_of` a learner's stubs) down, and nothing here calls back up.

A new forward plugs in as ONE row of `rungs_of` (flash_hopper did): its name, its launcher, and the
two questions every rung answers (can it run these inputs here; if not, why). The sweep's table
can then name it for a (head dim, causal, band) key.

Rows are keyed by (head dim, causal, band) and apply to fp16 and bf16 alike: the sweep measured
bf16, and fp16 moves the same bytes through the same tensor-core instructions.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from course import dispatch, runtime
from course.dispatch import Choice

from week4_triton_dl.attention import flash, hopper, tma  # the rungs: flash_blocked, flash_hopper, flash_tma
from week4_triton_dl.attention.plans import config_kwargs

MIN_TMA_SCORES = 1 << 22  # B * H * Sq * Sk below which the host, not the GPU, sets the pace
MARGIN = 1.03  # the sweep names a rung only where it beats flash_blocked by 3% (run-to-run noise ~2%)
SEQ_SPLIT = 8192  # the sequence bands' border: Sq <= SEQ_SPLIT, and above (the docstring says why)
HOPPER = "flash_hopper"  # the rung whose row may name a build (hopper.check_build)
BLOCKED = Choice("flash_blocked")  # the default rule: the pointer kernel, its autotuner's tile


class Rung(NamedTuple):
    """One forward of the op, by what it is: how to launch it and whether it runs given inputs here."""
    launch: Callable    # (q, k, v, causal, scale, key_lengths, tile, out) -> (out, lse), checked inputs;
    #                     lse (B, H, Sq): each row's natural log-sum-exp, what the backward reads
    eligible: Callable  # (q, k, v, out) -> bool: this GPU, dtype and layout can run it (the rule asks)
    require: Callable   # (q, k, v, out, caller) -> None, or raise why not and which rung can (rung= asks)
    #                     Every rung masks padding keys (key_lengths=): a padded call follows the same rule.


def _anywhere(q, k, v, out=None, caller=None) -> bool:  # flash_blocked: any GPU, dtype and strides
    return True


def _launch_hopper(q, k, v, causal, scale, key_lengths, build, out):
    """flash_hopper as a Rung: the Choice's tile field carries its build, checked when the table was read
    (`check_row`; None: the caller named the rung, the default build)."""
    return hopper.launch_build(q, k, v, causal, scale, key_lengths, out, build or hopper.check_build(None))


def rungs_of(blocked, tma_rung) -> dict[str, Rung]:
    """The op's forwards from the modules that hold them: the solutions (`FORWARDS`), or a learner's
    stubs (attention/op.py's `over`). The first is the default rule's. The Hopper CUDA forward
    (attention/hopper.py, CUDA C, not an exercise of this lesson) is the same row in both: the rule
    names it only where the sweep measured it faster on this GPU."""
    return {"flash_blocked": Rung(blocked.launch_forward, _anywhere, _anywhere),
            "flash_tma": Rung(tma_rung.launch_forward_tma, tma_rung.tma_eligible, tma_rung.require_tma),
            HOPPER: Rung(_launch_hopper, hopper.eligible, hopper.require)}


FORWARDS = rungs_of(flash, tma)
RUNGS = tuple(FORWARDS)  # the op's forwards, by name


def seq_band(seq_q: int) -> str:
    """The sequence band of a call with `seq_q` query rows: the third field of a table row's key."""
    return f"S<={SEQ_SPLIT}" if seq_q <= SEQ_SPLIT else f"S>{SEQ_SPLIT}"


def check_row(row: dispatch.Row) -> dispatch.Row:
    """A table row as the rule will use it, checked once when the file is read (course/dispatch.Table): a
    flash_hopper row's build made whole (hopper.check_build); a bad build, or a build on another rung, is a
    ValueError (the Table adds the file and the row's key), before any launch."""
    if row.build is None:  # a row of another rung, or a flash_hopper row from before the builds: the default one
        return row
    if row.rung != HOPPER:
        raise ValueError(f"it names rung {row.rung!r} with a build ({row.build!r}); only {HOPPER} has builds: "
                         f"re-run the sweep")
    return row._replace(build=hopper.check_build(row.build))


TABLE = dispatch.Table(__file__, "attention", check_row=check_row)  # results/dispatch_attention.json


def row_choice(row: dispatch.Row) -> Choice:
    """The Choice a checked table row names: its rung and tile, or for flash_hopper its build."""
    return Choice(row.rung, row.tile if row.build is None else row.build)


def label(choice: Choice) -> str:
    """What a Choice runs, in a few words: the rung, and for flash_hopper a build other than the default
    ("flash_hopper (persistent+overlap)"): for the benchmarks' and the capstone's labels."""
    if choice.rung != HOPPER or choice.tile is None or hopper.build_label(choice.tile) == "default":
        return choice.rung
    return f"{choice.rung} ({hopper.build_label(choice.tile)})"


def resolve(rung, tile, q, k, v, causal, out=None, forwards=FORWARDS) -> Choice:
    """The Choice for one call of checked inputs: the caller's rung and tile, checked (ValueError,
    TypeError or RuntimeError before any launch), or the rule's (`choose`) for what they leave open."""
    if rung is None and tile is None:
        return choose(q, k, v, causal, out, forwards)
    if rung is None:  # a tile alone is a tile of the default forward (a TMA tile needs rung="flash_tma")
        rung = BLOCKED.rung
    dispatch.check_rung("flash_attention", rung, tuple(forwards))
    if rung == HOPPER and tile is not None:  # its Choice's tile field is the table's build, never a caller's tile
        raise ValueError(f"flash_attention(rung={HOPPER!r}): the kernel has one tile (128 query rows, 128 keys); "
                         f"got tile={tile!r}")
    forwards[rung].require(q, k, v, out, caller=f'flash_attention(rung="{rung}")')
    return Choice(rung, None if tile is None else config_kwargs(tile))


def choose(q, k, v, causal, out=None, forwards=FORWARDS) -> Choice:
    """The rung and tile (flash_hopper: build) the op runs for checked inputs when the caller names none
    (the docstring's rules 2 to 4). Cheapest tests first: a model whose head dim the sweep left on
    flash_blocked (GPT-2's 64) pays two dict lookups per call, not the stride and address checks."""
    if not runtime.ON_GPU or q.dtype not in tma.TMA_DTYPES:  # the table's rows are for 16-bit inputs
        return BLOCKED
    B, H, Sq, D = q.shape
    if B * H * Sq * k.shape[2] < MIN_TMA_SCORES:
        return BLOCKED
    # The band's row, else a row from before the bands (its key has no band: it applies at every S).
    row = TABLE.get((D, causal, seq_band(Sq))) or TABLE.get((D, causal))
    if row is None or row.rung not in forwards:
        return BLOCKED
    choice = row_choice(row)
    return choice if forwards[choice.rung].eligible(q, k, v, out) else BLOCKED


def forward(q, k, v, causal, scale, key_lengths, rung=None, tile=None, out=None, forwards=FORWARDS):
    """(out, lse) of checked inputs from the rung `rung` (checked by `resolve`) with `tile`, or, with
    neither, from the rule's choice: the one call through which the op runs a forward."""
    # Every forward passes here, whichever entry checked its inputs: the bf16 refusal below sm_80 is
    # asked again before any launch (a capability lookup), so no path reaches a T4 with a bf16 tl.dot.
    runtime.require_bf16_tensor_cores(q.dtype, "Triton attention (tl.dot)")
    if rung is None:
        rung, tile = choose(q, k, v, causal, out, forwards) if tile is None else (BLOCKED.rung, tile)
    return forwards[rung].launch(q, k, v, causal, scale, key_lengths, tile, out)
