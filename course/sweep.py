"""A lesson's `--sweep` command line: one for every lesson that has a sweep.

A sweep times a kernel's candidate launch settings (tile shapes, warps, threads per block, ...)
at the sizes that matter and prints what it saw; some write the fastest per shape to
results/tuned_<name>.json (course/tuning.py). It lives in the lesson's `<topic>_bench.py`, beside
the benchmarks, and is run the same way everywhere:

    python -m week5_integration.lora_bench --sweep

    def main(argv=None) -> int:
        return sweep_main(sweep, argv, doc=__doc__, help="time the fused kernel's tile configs", gpu_only=True)

Without --sweep the command prints its help and exits with 2 (it was asked nothing). A sweep with
knobs of its own (the widths, the dtypes) adds them with `options(parser)`; each parsed option is
passed to the sweep as the keyword argparse names it (`--widths` -> `sweep(widths=...)`), so its
defaults should be the sweep's own.
"""
from __future__ import annotations

import argparse
from typing import Callable

from course import runtime


def sweep_main(sweep: Callable[..., object], argv: list[str] | None = None, *, doc: str | None, help: str,
               gpu_only: bool = False, options: Callable[[argparse.ArgumentParser], None] | None = None,
               prog: str | None = None) -> int:
    """Parse `argv` (default: the command line), then call `sweep(**options)` when --sweep is given.

    doc: the bench module's docstring (its first line describes the command); help: what --sweep
    does, for `--help`; gpu_only: refuse with a sentence when this machine simulates the
    GPU (a sweep times kernels: the Triton interpreter's or the simulator's times mean nothing);
    options: adds the sweep's own arguments to the parser; prog: the command's name in the help
    (`python -m PACKAGE.MODULE`; argparse's default is the file's name). Returns the exit status (0, or 2 and
    the help when --sweep is missing).
    """
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").strip().split("\n")[0] or None)
    parser.add_argument("--sweep", action="store_true", help=help + (" (GPU)" if gpu_only else ""))
    if options is not None:
        options(parser)
    args = vars(parser.parse_args(argv))
    if not args.pop("sweep"):
        parser.print_help()
        return 2
    if gpu_only and not runtime.on_gpu():
        raise SystemExit("--sweep times kernels on a GPU; this machine has none (it runs them in simulation, "
                         "where times say nothing about a GPU)")
    sweep(**args)
    return 0
