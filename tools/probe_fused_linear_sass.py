"""Probe (CPU, no GPU needed): what the fused linear's two rungs compile to on an H100 (issue 32).

Compiles week 4's fused_linear_kernel (tiled rung) and fused_linear_tma_kernel (persistent TMA rung)
ahead of time for sm_90, specialized as an H100 launch at the capstone's shapes would be (unit K
strides as constants, sizes and pointers divisible by 16), with a tile of the launchers' candidates,
and prints from the TTGIR, PTX and SASS what the note's diagnosis rests on: shared memory per block,
registers and stack (spills) a thread, the tensor-core instruction (HGMMA: wgmma; HMMA: mma.sync),
how many wgmma groups stay in flight (WARPGROUP.DEPBAR's depth: 1 = pipelined), how operands arrive
(LDGSTS: cp.async; UTMALDG: TMA) and the epilogue's layout conversions.

    python tools/probe_fused_linear_sass.py                 the default rows (the note's evidence)
    python tools/probe_fused_linear_sass.py --cc 80         the tiled rung for another class
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("COURSE_BACKEND", "compile")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course.gpu import triton  # noqa: E402  (COURSE_BACKEND=compile above: kernels stay GPU kernels)
from triton.backends.compiler import GPUTarget  # noqa: E402

from week4_triton_dl.fused_linear.kernel import fused_linear_kernel  # noqa: E402
from week4_triton_dl.fused_linear.kernel_tma import fused_linear_tma_kernel  # noqa: E402

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
# (rung, epilogue, M x N x K, BLOCK_M, BLOCK_N, warps, stages): the first run's table choices and the candidates.
ROWS = [
    ("tiled", "plain", (8192, 2304, 768), 256, 128, 8, 3),
    ("tiled", "plain", (8192, 2304, 768), 128, 256, 8, 4),
    ("tiled", "plain", (8192, 2304, 768), 128, 128, 8, 3),
    ("tiled", "plain", (8192, 2304, 768), 128, 128, 4, 4),
    ("tiled", "residual", (8192, 768, 768), 128, 256, 8, 3),
    ("tiled", "residual", (8192, 768, 2048), 128, 128, 4, 4),
    ("tiled", "residual", (8192, 768, 768), 128, 128, 8, 3),
    ("tiled", "residual", (8192, 768, 768), 128, 128, 8, 4),
    ("tiled", "residual", (8192, 768, 768), 64, 128, 4, 4),
    ("tiled", "swiglu", (8192, 2048, 768), 128, 128, 8, 3),
    ("tma", "plain", (8192, 2304, 768), 128, 256, 8, 3),
    ("tma", "plain", (8192, 50304, 768), 128, 256, 8, 4),
    ("tma", "plain", (8192, 2304, 768), 128, 128, 8, 3),
    ("tma", "plain", (8192, 2304, 768), 128, 128, 4, 4),
    ("tma", "residual", (8192, 768, 768), 128, 128, 8, 3),
    ("tma", "residual", (8192, 768, 768), 128, 128, 8, 4),
]


def compile_row(rung, kind, shape, bm, bn, warps, stages, cc):
    M, N, K = shape
    res, sw, norm = "residual" in kind, "swiglu" in kind, "norm" in kind
    fn = fused_linear_tma_kernel if rung == "tma" else fused_linear_kernel
    ints = dict(M=M, N=N, K=K, stride_am=K, stride_ak=1, stride_wn=K, stride_wk=1, stride_cm=N, stride_cn=1,
                stride_rm=N if res else 0, stride_rn=1 if res else 0, stride_pm=2 * N if sw else 0)
    const = dict(HAS_BIAS=False, HAS_RESIDUAL=res, NORM=norm, SWIGLU=sw, STORE_PRE=sw, INPUT_PRECISION="tf32",
                 BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64, GROUP_M=8, NUM_PROGRAMS=132, FLATTEN=True)
    sig, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name == "a_desc":
            sig[name] = f"tensordesc<bf16[{bm}, 64]>"
        elif name == "w_desc":
            sig[name] = f"tensordesc<bf16[{bn}, 64]>"
        elif name in const:
            sig[name], constexprs[name] = "constexpr", const[name]
        elif name in ints and ints[name] == 1:  # what the JIT does with an argument equal to 1
            sig[name], constexprs[name] = "constexpr", 1
        elif name in ints:
            sig[name] = "i32"
            if ints[name] % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:  # pointers: C and the residual fp32 with the residual epilogue; x, rstd, norm weight fp32 with the norm
            fp32 = (res and name in ("c_ptr", "res_ptr")) or (norm and name in ("a_ptr", "rstd_ptr", "nw_ptr"))
            sig[name] = "*fp32" if fp32 else "*bf16"
            attrs[(i,)] = [["tt.divisibility", 16]]
    source = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", cc, 32), options={"num_warps": warps, "num_stages": stages})


def describe(kernel, cc: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cubin, ptx = Path(tmp) / "k.cubin", Path(tmp) / "k.ptx"
        cubin.write_bytes(kernel.asm["cubin"])
        ptx.write_text(kernel.asm["ptx"])
        # ptxas's own verdict (Triton's compile does not show it): C7515, wgmma serialized.
        arch = f"sm_{cc}a" if cc == 90 else f"sm_{cc}"
        log = subprocess.run([str(BIN / "ptxas"), f"-arch={arch}", "-v", str(ptx), "-o", str(Path(tmp) / "k.o")],
                             capture_output=True, text=True).stderr
        usage = subprocess.run([str(BIN / "cuobjdump"), "--dump-resource-usage", str(cubin)],
                               capture_output=True, text=True).stdout
        sass = subprocess.run([str(BIN / "nvdisasm"), str(cubin)], capture_output=True, text=True).stdout
    regs = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    depth = sorted({int(d, 16) for d in re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+)", sass)})
    return {"shared KB": kernel.metadata.shared // 1024, "regs": regs and int(regs[1]), "stack B": stack and int(stack[1]),
            "HGMMA": sass.count("HGMMA"), "HMMA": sass.count("HMMA"), "in flight": max(depth) if depth else "-",
            "LDGSTS": sass.count("LDGSTS"), "UTMALDG": sass.count("UTMALDG"),
            "STL": sass.count("STL"), "convert_layout": kernel.asm["ttgir"].count("ttg.convert_layout"),
            "wgmma serialized": "yes (C7515)" if "C7515" in log else "no"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cc", type=int, default=90, help="compute capability as 90, 80, ... (default 90; "
                        "the TMA rung only for 90)")
    args = parser.parse_args(argv)
    header = None
    for rung, kind, shape, bm, bn, warps, stages in ROWS:
        if rung == "tma" and args.cc < 90:
            continue
        facts = describe(compile_row(rung, kind, shape, bm, bn, warps, stages, args.cc), args.cc)
        if header is None:
            header = ["rung", "epilogue", "M x N x K", "tile", *facts]
            print(" | ".join(header))
        print(" | ".join(map(str, [rung, kind, "x".join(map(str, shape)), f"{bm}x{bn}x64 w{warps} s{stages}",
                                   *facts.values()])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
