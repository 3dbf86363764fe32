"""Which forward the attention op runs, and with which tile: the rule, in one place.

The op `flash_attention` (attention/op.py) calls `forward` here, which runs one of its rungs:

* flash_blocked: attention/flash.py's kernel, Q/K/V tiles loaded through pointers (tl.load),
  any GPU, any dtype, any strides; its tiles picked by its autotuner per shape bucket.
* flash_tma: attention/tma.py's kernel, every tile moved by the Hopper TMA copy engine; sm_90
  and later, fp16 and bf16, strides TMA can walk, one tile per (head dim, causal).
* flash_hopper: attention/hopper.py, CUDA C for sm_90a (FlashAttention-3's structure: a TMA
  producer, two ping-ponging wgmma consumers); contiguous fp16/bf16, D = 64 or 128, no padding
  keys (a call with key_lengths goes to flash_blocked). Named only by the sweep's table.

(`python -m course rung attention` numbers them 3 and 4 in the ladder; that is the only place
the numbers live.) `resolve` answers for one call (`choose` for what the caller leaves open), in this order:

1. The caller's `rung=` (and `tile=`), when given: the tests and the benchmarks choose this way.
   `rung="flash_tma"` on inputs TMA cannot run is refused with the reason.
2. The interpreter, non-16-bit dtypes, and problems under MIN_TMA_SCORES scores: flash_blocked.
   Below that size the call is paced by the host, and a TMA call costs the host more than the
   engine saves on the GPU (measured: attention/bench.py's attention_host_week4).
3. The sweep's row for (head dim, causal) in results/dispatch_attention.json, when it was measured
   on this GPU (course/dispatch.py) and names flash_tma, and the inputs are TMA-eligible: flash_tma
   with the row's tile. On the H100 the sweep put D = 128 on flash_tma (7% faster than
   flash_blocked) and D = 64 on flash_blocked (no faster by the 3% margin, MARGIN).
4. Otherwise flash_blocked with its autotuned tile.

The op sits above this module and the rungs below it: the op passes its table of forwards
(`FORWARDS`, or `rungs_of` a learner's stubs) down, and nothing here calls back up.

A new forward plugs in as ONE row of `rungs_of` (flash_hopper did): its name, its launcher, and the
two questions every rung answers (can it run these inputs here; if not, why). The sweep's table
can then name it for a (head dim, causal) key.

Rows are keyed by (head dim, causal) and apply to fp16 and bf16 alike: the sweep measured bf16,
and fp16 moves the same bytes through the same tensor-core instructions.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from course import dispatch, runtime
from course.dispatch import Choice

from week4_triton_dl.attention import flash, hopper, tma  # the rungs: flash_blocked, flash_hopper, flash_tma
from week4_triton_dl.attention.plans import config_kwargs

MIN_TMA_SCORES = 1 << 22  # B * H * Sq * Sk below which the host, not the GPU, sets the pace
MARGIN = 1.03  # the sweep names flash_tma only where it beats flash_blocked by 3% (run-to-run noise ~2%)
TABLE = dispatch.Table(__file__, "attention")  # results/dispatch_attention.json
BLOCKED = Choice("flash_blocked")  # the default rule: the pointer kernel, its autotuner's tile


class Rung(NamedTuple):
    """One forward of the op, by what it is: how to launch it and whether it runs given inputs here."""
    launch: Callable    # (q, k, v, causal, scale, key_lengths, tile, out) -> (out, lse), checked inputs;
    #                     lse (B, H, Sq): each row's natural log-sum-exp, what the backward reads
    eligible: Callable  # (q, k, v, out) -> bool: this GPU, dtype and layout can run it (the rule asks)
    require: Callable   # (q, k, v, out, caller) -> None, or raise why not and which rung can (rung= asks)
    key_lengths: bool = True  # it masks padding keys (key_lengths=); the rule never sends a padded call elsewhere


def _anywhere(q, k, v, out=None, caller=None) -> bool:  # flash_blocked: any GPU, dtype and strides
    return True


def rungs_of(blocked, tma_rung) -> dict[str, Rung]:
    """The op's forwards from the modules that hold them: the solutions (`FORWARDS`), or a learner's
    stubs (attention/op.py's `over`). The first is the default rule's. The Hopper CUDA forward
    (attention/hopper.py, CUDA C, not an exercise of this lesson) is the same row in both: the rule
    names it only where the sweep measured it faster on this GPU."""
    return {"flash_blocked": Rung(blocked.launch_forward, _anywhere, _anywhere),
            "flash_tma": Rung(tma_rung.launch_forward_tma, tma_rung.tma_eligible, tma_rung.require_tma),
            "flash_hopper": Rung(hopper.launch_forward_hopper, hopper.eligible, hopper.require, key_lengths=False)}


FORWARDS = rungs_of(flash, tma)
RUNGS = tuple(FORWARDS)  # the op's forwards, by name


def _default(key) -> Choice:
    return BLOCKED


def resolve(rung, tile, q, k, v, causal, out=None, forwards=FORWARDS) -> Choice:
    """The Choice for one call of checked inputs: the caller's rung and tile, checked (ValueError,
    TypeError or RuntimeError before any launch), or the rule's (`choose`) for what they leave open."""
    if rung is None and tile is None:
        return choose(q, k, v, causal, out, forwards)
    if rung is None:  # a tile alone is a tile of the default forward (a TMA tile needs rung="flash_tma")
        rung = BLOCKED.rung
    dispatch.check_rung("flash_attention", rung, tuple(forwards))
    forwards[rung].require(q, k, v, out, caller=f'flash_attention(rung="{rung}")')
    return Choice(rung, None if tile is None else config_kwargs(tile))


def choose(q, k, v, causal, out=None, forwards=FORWARDS) -> Choice:
    """The rung and tile the op runs for checked inputs when the caller names none (the docstring's
    rules 2 to 4). Cheapest tests first: a model whose head dim the sweep left on flash_blocked
    (GPT-2's 64) pays one dict lookup per call, not the stride and address checks."""
    if not runtime.ON_GPU or q.dtype not in tma.TMA_DTYPES:  # the table's rows are for 16-bit inputs
        return BLOCKED
    B, H, Sq, D = q.shape
    if B * H * Sq * k.shape[2] < MIN_TMA_SCORES:
        return BLOCKED
    choice = dispatch.pick(TABLE, (D, causal), forwards, _default)
    if choice.rung != BLOCKED.rung and not forwards[choice.rung].eligible(q, k, v, out):
        return BLOCKED
    return choice


def forward(q, k, v, causal, scale, key_lengths, rung=None, tile=None, out=None, forwards=FORWARDS):
    """(out, lse) of checked inputs from the rung `rung` (checked by `resolve`) with `tile`, or, with
    neither, from the rule's choice: the one call through which the op runs a forward."""
    # Every forward passes here, whichever entry checked its inputs: the bf16 refusal below sm_80 is
    # asked again before any launch (a capability lookup), so no path reaches a T4 with a bf16 tl.dot.
    runtime.require_bf16_tensor_cores(q.dtype, "Triton attention (tl.dot)")
    if rung is None:
        rung, tile = choose(q, k, v, causal, out, forwards) if tile is None else (BLOCKED.rung, tile)
        if key_lengths is not None and not forwards[rung].key_lengths:  # padded keys: a rung that masks them
            rung, tile = BLOCKED.rung, None
    return forwards[rung].launch(q, k, v, causal, scale, key_lengths, tile, out)
