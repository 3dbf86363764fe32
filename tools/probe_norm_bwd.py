"""Probe (GPU): the norms' backward launch settings at narrow rows (issue 15), both norms, bf16.

For each shape: torch's backward, the current default, then num_warps x rows per step x stages x
programs per SM; prints ms and % of copy (bytes = read x, dy + write dx). Also the forward row
kernel against torch. Run: python tools/probe_norm_bwd.py [MxN ...]
"""
import sys

import torch

from course import bench, runtime
from week4_triton_dl.norms import bench as norm_bench
from week4_triton_dl.norms import layernorm as ln
from week4_triton_dl.norms import layernorm_backward as lnb
from week4_triton_dl.norms import layernorm_bench as ln_bench
from week4_triton_dl.norms import rmsnorm as rn
from week4_triton_dl.norms import rmsnorm_bench as rn_bench


def _ms(fn) -> float:
    """fn's median ms (norm_bench.timed gives the row's timing fields; a probe prints the ms)."""
    return norm_bench.timed(fn)["ms"]


def main(shapes):
    copy = bench.copy_bandwidth_gbps()
    sms = runtime.sm_count()
    print(f"copy {copy:.0f} GB/s, {sms} SMs")
    for M, N in shapes:
        x, w, b, dy = (torch.randn(s, device="cuda", dtype=torch.bfloat16) for s in ((M, N), N, N, (M, N)))
        nbytes = 3 * M * N * 2
        _, mean, rstd = ln.layer_norm_forward(x, w, b, 1e-5)
        _, rrstd = rn.rms_norm_forward(x, w, 1e-5)
        _, mt, rt = torch.ops.aten.native_layer_norm(x, [N], w, b, 1e-5)
        rows = [("ln torch", _ms(lambda: ln_bench.torch_backward(dy, x, w, b, mt, rt))),
                ("ln default", _ms(lambda: lnb.layer_norm_backward(dy, x, mean, rstd, w, True))),
                ("rms torch", _ms(lambda: rn_bench.torch_backward(dy, x, rn_bench.torch_rstd(x, w), w))),
                ("rms default", _ms(lambda: rn.rms_norm_backward(dy, x, rrstd, w)))]
        for nw in (4, 8):
            for bm in (1, 2, 4):
                for stages in (1, 2, 3):
                    for per_sm in (2, 4, 8):
                        kw = dict(block_m=bm, num_partials=per_sm * sms, num_warps=nw, num_stages=stages)
                        try:
                            rows.append((f"ln nw={nw} bm={bm} st={stages} P={per_sm}/SM",
                                         _ms(lambda: lnb.layer_norm_backward(dy, x, mean, rstd, w, True, **kw))))
                            rows.append((f"rms nw={nw} bm={bm} st={stages} P={per_sm}/SM",
                                         _ms(lambda: rn.rms_norm_backward(dy, x, rrstd, w, **kw))))
                        except Exception as error:  # noqa: BLE001 - a config that does not fit
                            rows.append((f"nw={nw} bm={bm} st={stages} P={per_sm}: {type(error).__name__}", float("nan")))
        fwd = [("ln fwd torch", _ms(lambda: ln_bench.torch_forward(x, w, b))),
               ("ln fwd row", _ms(lambda: ln.layer_norm_forward(x, w, b, 1e-5))),
               ("rms fwd torch", _ms(lambda: rn_bench.torch_forward(x, w))),
               ("rms fwd row", _ms(lambda: rn.rms_norm_forward(x, w, 1e-5)))]
        print(f"\n## {M}x{N} bf16 backward (bytes 3MNs)")
        for name, ms in sorted(rows, key=lambda r: (r[0].split()[0], r[1])):
            print(f"{name:36s} {ms * 1e3:9.1f} us {nbytes / ms / 1e6 / copy * 100:6.1f}% of copy")
        for name, ms in fwd:
            print(f"{name:36s} {ms * 1e3:9.1f} us {2 * M * N * 2 / ms / 1e6 / copy * 100:6.1f}% of copy")


if __name__ == "__main__":
    args = sys.argv[1:] or ["65536x768", "16384x1024", "8192x768", "16384x4096"]
    main([tuple(int(v) for v in a.split("x")) for a in args])
