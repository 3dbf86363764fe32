"""Ladders: a lesson's kernels as numbered rungs, simplest first, each runnable by its number.

    python -m course rung                       every ladder of the course and where it lives
    python -m course rung matmul_triton         the rungs of one ladder, one line of story each
    python -m course rung matmul_triton 3       rung 3: check it against torch, then time both
    python -m course rung matmul_triton all     every rung in turn, one table
        --size LABEL                            one of the benchmark's size labels (default: the largest)

The way llm.c's dev/cuda kernels are run (`./matmul_forward 3`): read rung N, run it, read rung
N + 1 and see what the one new idea bought. A ladder is a registered benchmark (course/bench.py)
plus the order of its variants, so its inputs, sizes, FLOP and byte counts and its torch
reference are the benchmark's own, and a rung's number here is made the way results/ is made.

Each run first checks the rung: its output beside the torch variant's on the same fresh random
inputs, as the norm-wise relative error ||out - ref|| / ||ref|| in float64 (one number that a
wrong tile, a missed tail or a NaN moves far past rounding), against the ladder's `rel_tol`,
which its module justifies from the dtype's rounding. Tests do the element-wise checking; this is
the learner's quick "is it right, and how fast" at full size. A rung that fails the check is
reported as wrong and not timed.

Where the ladders are: each week's `COURSE` registry maps a ladder's name to the module that
defines it ("ladders": {"matmul_triton": "matmul_bench"}), so listing them imports nothing; that
module holds a `LADDERS` list of `Ladder`s.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass

import torch

from course import weeks


@dataclass(frozen=True)
class Rung:
    variant: str    # the benchmark variant this rung runs
    story: str      # the one idea it adds over the rung before, in a line


@dataclass
class Ladder:
    """A benchmark's variants in teaching order. `rel_tol`: the norm-wise relative error a correct
    rung stays under (the module says why, from the dtype's rounding and the sum's length)."""
    name: str
    benchmark: object               # course.bench.Benchmark
    rungs: list                     # Rung, simplest first; rung 1 is rungs[0]
    rel_tol: float
    reference: str = "torch"

    def __post_init__(self):
        missing = [r.variant for r in self.rungs if r.variant not in self.benchmark.variants]
        if missing or self.reference not in self.benchmark.variants:
            raise ValueError(f"ladder {self.name}: benchmark {self.benchmark.name} has no variant(s) "
                             f"{missing or [self.reference]}; it has {', '.join(self.benchmark.variants)}")

    def rung(self, number: int) -> Rung:
        if not 1 <= number <= len(self.rungs):
            raise ValueError(f"ladder {self.name} has rungs 1 to {len(self.rungs)}, not {number}: "
                             f"`python -m course rung {self.name}` lists them")
        return self.rungs[number - 1]


def registered() -> dict[str, tuple[str, str]]:
    """{ladder name: (week short name, module)} from every week's registry (imports nothing)."""
    found = {}
    for week in weeks.all_weeks():
        for name, module in week.ladders.items():
            found[name] = (week.short, f"{week.package}.{module}")
    return found


def find(name: str) -> Ladder:
    """The ladder called `name` (imports only the module that defines it)."""
    known = registered()
    if name not in known:
        raise SystemExit(f"no ladder {name!r}; ladders: {', '.join(sorted(known)) or 'none'}")
    module = importlib.import_module(known[name][1])
    for ladder in getattr(module, "LADDERS", []):
        if ladder.name == name:
            return ladder
    raise SystemExit(f"{known[name][1]} is registered for ladder {name!r} but its LADDERS list lacks it")


def relative_error(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64 over every tensor of the outputs; NaN where out has a
    NaN or Inf that ref has not (an unwritten or overflowed element is never 'close')."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    outs = [t for t in outs if isinstance(t, torch.Tensor)]
    refs = [t for t in refs if isinstance(t, torch.Tensor)]
    if not outs or len(outs) != len(refs):
        raise ValueError("a rung and its reference must return the same number of tensors")
    diff = ref_norm = 0.0
    for o, r in zip(outs, refs):
        if o.shape != r.shape:
            raise ValueError(f"rung output shape {tuple(o.shape)} differs from the reference's {tuple(r.shape)}")
        o, r = o.double(), r.double()
        if not torch.equal(torch.isfinite(o), torch.isfinite(r)):
            return math.nan
        finite = torch.isfinite(r)
        diff += float(((o - r)[finite] ** 2).sum())
        ref_norm += float((r[finite] ** 2).sum())
    return math.sqrt(diff) / max(math.sqrt(ref_norm), 1e-300)


def _size(ladder: Ladder, label: str | None):
    sizes = {ladder.benchmark.size_label(s): s for s in ladder.benchmark.active_sizes()}
    if label is None:
        return list(sizes.items())[-1]
    if label not in sizes:
        raise SystemExit(f"{ladder.benchmark.name} has no size {label!r} here; sizes: {', '.join(sizes)}")
    return label, sizes[label]


def run_rungs(ladder: Ladder, numbers: list[int], size_label: str | None = None) -> list[dict]:
    """Check, then time, each rung in `numbers` beside the reference at one size; print a table."""
    from course import bench, runtime

    label, size = _size(ladder, size_label)
    b = ladder.benchmark
    sets = bench.input_sets(b.make_inputs, size)
    flops, nbytes = b.flops(size), b.bytes(size)
    reference = b.variants[ladder.reference]
    ref_out = reference(*sets[0])
    ref = bench.timing_fields(bench.time_call(reference, sets))  # ms, and whether the host paced it
    ref_ms = ref["ms"]
    rows = []
    print(f"{ladder.name} at {label} ({runtime.BACKEND}; {'GPU times' if runtime.on_gpu() else 'SIMULATION: host times, not GPU'})")
    rate = "TFLOP/s" if flops else "GB/s"
    print(f"{'rung':>4}  {'variant':<24} {'rel err':>9} {'ms':>9} {rate:>8} {'vs ' + ladder.reference:>9}  story")

    def line(number, variant, err, timing, verdict, story):
        ms = timing["ms"]
        value = (flops / ms / 1e9 if flops else nbytes / ms / 1e6) if ms else None
        speed = f"{ref_ms / ms:.2f}x" if ms else "-"
        print(f"{number:>4}  {variant:<24} {err:>9} {bench.ms_cell(timing):>9} "
              f"{value and f'{value:.1f}' or '-':>8} {speed:>9}  {verdict}{story}")

    line("-", ladder.reference, "-", ref, "", "the reference")
    for number in numbers:
        rung = ladder.rung(number)
        if rung.variant in b.gpu_only and not runtime.on_gpu():
            line(number, rung.variant, "-", {"ms": None}, "needs a GPU: ", rung.story)
            rows.append({"rung": number, "variant": rung.variant, "skipped": "needs a GPU"})
            continue
        err = relative_error(b.variants[rung.variant](*sets[0]), ref_out)
        ok = err <= ladder.rel_tol
        timing = bench.timing_fields(bench.time_call(b.variants[rung.variant], sets)) if ok else {"ms": None}
        line(number, rung.variant, f"{err:.1e}", timing, "" if ok else f"WRONG (> {ladder.rel_tol:g}): ", rung.story)
        rows.append({"rung": number, "variant": rung.variant, "rel_err": err, "ok": ok, **timing,
                     "reference_ms": ref_ms})
    print(bench.footnote(rows + [ref]), end="")
    return rows


def main(args) -> int:
    """`python -m course rung [LADDER [N|all]] [--size LABEL]`."""
    if not args.ladder:
        for name, (week, module) in sorted(registered().items(), key=lambda kv: (kv[1], kv[0])):
            print(f"{name:<24} {week:<9} {module}")
        return 0
    ladder = find(args.ladder)
    if args.number is None:
        print(f"{ladder.name}: benchmark {ladder.benchmark.name}, reference {ladder.reference}, "
              f"relative error allowed {ladder.rel_tol:g}")
        for number, rung in enumerate(ladder.rungs, 1):
            print(f"{number:>4}  {rung.variant:<24} {rung.story}")
        return 0
    if args.number == "all":
        numbers = list(range(1, len(ladder.rungs) + 1))
    elif args.number.isdigit():
        numbers = [int(args.number)]
        ladder.rung(numbers[0])  # a clear message for a number off the ladder, before any work
    else:
        raise SystemExit(f"rung must be a number or 'all', got {args.number!r}")
    rows = run_rungs(ladder, numbers, args.size)
    return 0 if all(r.get("ok", True) for r in rows) else 1


def add_parser(sub) -> None:
    p = sub.add_parser("rung", help="run a ladder's rung by number: check it, time it beside torch")
    p.add_argument("ladder", nargs="?", help="the ladder's name (none: list the ladders)")
    p.add_argument("number", nargs="?", help="the rung's number, or 'all' (none: list the rungs)")
    p.add_argument("--size", help="one of the benchmark's size labels (default: the largest)")
