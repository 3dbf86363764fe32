"""Package the capstone GPT with AOTInductor: one .pt2 that serves it without the course's Python.

    python -m capstone.package --config tiny --out /tmp/gpt.pt2                 # the CPU's tiny model
    python -m capstone.package --config gpt2_124m --out /tmp/gpt.pt2            # on a GPU, bf16
    python -m capstone.package --config gpt2_124m --weights int8 --out /tmp/gpt_int8.pt2   # int8 weight-only
    python week5_integration/aot_runner.py /tmp/gpt.pt2 --prompt "The fox" -n 20  # serve it (torch only)

The lesson is week 5's `aot_package.py` (export, the course's kernels as triton_ops, the cache
inputs the package mutates, the error model) with `aot_quant.py` (its int8 and fp8 twins); this
is its command line for the capstone's presets, and `package_bench.py` beside it times the
packages against the other deployment paths.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from capstone import model as cm
from course import runtime
from week5_integration import aot_package as ap
from week5_integration import aot_quant as aq

BUILDERS = {"float": ap.package, "int8": aq.package_int8, "fp8": aq.package_fp8}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="tiny", choices=sorted(cm.PRESETS))
    p.add_argument("--out", required=True, help="the .pt2 file to write")
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--max-len", type=int, default=None, help="cache length (default: the model's max_seq_len)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                   help="default: bfloat16 on a GPU, float32 on the CPU")
    p.add_argument("--weights", choices=sorted(BUILDERS), default="float",
                   help="int8: weight-only int8 (week 5's quantization); fp8: rowwise fp8, sm_89+ only")
    args = p.parse_args(argv)
    dtype = getattr(torch, args.dtype or ("bfloat16" if runtime.on_gpu() else "float32"))
    model = cm.build(args.config, "fast", dtype=dtype)
    started = time.perf_counter()
    path = BUILDERS[args.weights](model, args.out, max_batch=args.max_batch, max_len=args.max_len)
    kernels = ap.package_kernels(path)
    print(f"packaged {path} ({kernels['bytes'] / 2**20:.1f} MiB) in {time.perf_counter() - started:.0f} s; "
          f"course kernels inside: {kernels['course'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
