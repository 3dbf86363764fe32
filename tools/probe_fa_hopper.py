"""Probe (issue 21): what a Hopper FlashAttention forward in Triton 3.6 gains from TMA tensor
descriptors and Triton's warp specialisation, beside cuDNN (torch's default SDPA backend).

The ncu reading (week4_triton_dl/results/ncu_hopper.md) shows the course's forward with its tensor
pipe ~52% busy against cuDNN's ~76%: cuDNN runs one CTA per SM with three warpgroups (a TMA
producer and two consumers whose softmax overlaps the other's matmuls) and reads Q/K/V through
TMA; ours launches a CTA per (query block, head), loads through pointers and does its softmax
between its own two matmuls. This probe asks how much of that gap two switches close, one kernel
and a few configs, checked against SDPA on every shape before it is timed:
  * `TMA`: Q, K, V and O through host tensor descriptors (the copy engine moves whole tiles);
  * `WS`: `tl.range(..., warp_specialize=True)`: Triton splits the loop into producer and
    consumer warps itself (its automatic warp specialisation).
A probe, not a lesson: the winning switches move into week4_triton_dl/attention/flash.py.

    python tools/probe_fa_hopper.py [--quick]        (GPU, sm_90; ~2-3 min)
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import time

import torch
import torch.nn.functional as F

from course.gpu import triton, tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _attend(acc, l_i, m_i, q, desc_k, desc_v, row0, lo, hi, offs_m, qk_scale,
            BLOCK_N: tl.constexpr, MASK: tl.constexpr, WS: tl.constexpr, dtype: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([row0 + start_n, 0]).T
        qk = tl.dot(q, k)
        if MASK:
            qk = tl.where(offs_m[:, None] >= (start_n + offs_n)[None, :], qk, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([row0 + start_n, 0])
        acc = tl.dot(p.to(dtype), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def attention_fwd_probe(desc_q, desc_k, desc_v, desc_o, sm_scale, N_CTX,
                        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        CAUSAL: tl.constexpr, WS: tl.constexpr):
    dtype = desc_q.dtype
    start_m = tl.program_id(0)
    row0 = tl.program_id(1) * N_CTX           # first row of this (batch, head) in the (B*H*S, D) view
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q = desc_q.load([row0 + start_m * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # exp2 instead of exp
    if CAUSAL:
        # blocks wholly below the diagonal: no mask; then the diagonal block(s) with it
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, desc_k, desc_v, row0, 0, start_m * BLOCK_M, offs_m, qk_scale,
                                BLOCK_N, False, WS, dtype)
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, desc_k, desc_v, row0, start_m * BLOCK_M,
                                (start_m + 1) * BLOCK_M, offs_m, qk_scale, BLOCK_N, True, WS, dtype)
    else:
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, desc_k, desc_v, row0, 0, N_CTX, offs_m, qk_scale,
                                BLOCK_N, False, WS, dtype)
    desc_o.store([row0 + start_m * BLOCK_M, 0], (acc / l_i[:, None]).to(dtype))


def probe_call(q, k, v, causal, *, block_m, block_n, warps, stages, ws):
    b, h, s, d = q.shape
    if s % block_m or s % block_n:
        raise ValueError("the probe handles S a multiple of the blocks only")
    o = torch.empty_like(q)
    views = [t.view(b * h * s, d) for t in (q, k, v, o)]
    blocks = ([block_m, d], [block_n, d], [block_n, d], [block_m, d])
    descs = [TensorDescriptor(t, list(t.shape), list(t.stride()), blk) for t, blk in zip(views, blocks)]

    def run():
        attention_fwd_probe[(s // block_m, b * h)](*descs, 1 / math.sqrt(d), s, HEAD_DIM=d, BLOCK_M=block_m,
                                                   BLOCK_N=block_n, CAUSAL=causal, WS=ws,
                                                   num_warps=warps, num_stages=stages)
        return o
    return run


def flops(b, h, s, d, causal):
    return 4 * b * h * s * s * d / (2 if causal else 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="S=4096 non-causal only")
    parser.add_argument("--wide", action="store_true",
                        help="also BLOCK_M=256 (two warpgroups of 128 rows), BLOCK_N=64 with 8 warps, deeper pipelines")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        print("needs an sm_90 GPU (TMA descriptors, wgmma)")
        return 2
    torch.manual_seed(0)
    tokens, heads, d = 262144, 16, 128
    shapes = [(4096, False)] if args.quick else [(1024, False), (4096, False), (16384, False), (4096, True)]
    configs = [dict(block_m=bm, block_n=bn, warps=w, stages=st, ws=ws)
               for bm, bn, w, st, ws in itertools.product((128,), (64, 128), (4, 8), (2, 3), (False, True))]
    if args.wide:
        configs += [dict(block_m=bm, block_n=bn, warps=w, stages=st, ws=ws) for bm, bn, w, st, ws in
                    [(128, 64, 4, 4, False), (64, 64, 4, 3, False), (256, 64, 8, 2, False), (256, 64, 8, 3, False),
                     (256, 128, 8, 2, False), (256, 64, 8, 2, True), (256, 128, 8, 2, True), (128, 128, 8, 4, False),
                     (128, 32, 4, 3, False)]]
    try:  # the course's kernel, for the same inputs
        from week4_triton_dl.attention import flash_attention as course_fa
    except Exception as exc:  # noqa: BLE001  (a probe: report and go on)
        print(f"(course kernel not importable: {exc})")
        course_fa = None
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"bf16, D={d}, H={heads}, B*H*S={tokens}")
    best_rows = []
    for s, causal in shapes:
        b = tokens // (heads * s)
        q, k, v = (torch.randn(b, heads, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        fl = flops(b, heads, s, d, causal)
        sdpa_ms = triton.testing.do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                          warmup=50, rep=300, return_mode="median")
        tag = f"S={s} {'causal' if causal else 'full'}"
        print(f"\n{tag}: SDPA default (cuDNN) {sdpa_ms:.4f} ms = {fl / sdpa_ms / 1e9:.0f} TFLOP/s")
        rows = []
        if course_fa is not None:
            try:
                out = course_fa(q, k, v, causal=causal)
                err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                ms = triton.testing.do_bench(lambda: course_fa(q, k, v, causal=causal), warmup=50, rep=300,
                                             return_mode="median")
                rows.append(("course flash_attention", err, ms))
            except Exception as exc:  # noqa: BLE001
                print(f"  course kernel failed: {str(exc).splitlines()[0]}")
        for cfg in configs:
            name = (f"{cfg['block_m']}x{cfg['block_n']} w{cfg['warps']} s{cfg['stages']}"
                    f"{' ws' if cfg['ws'] else ''}")
            try:
                run = probe_call(q, k, v, causal, **cfg)
                start = time.perf_counter()
                out = run()
                torch.cuda.synchronize()
                compile_s = time.perf_counter() - start
                err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                if not err < 2e-2:  # bf16 attention: ~4e-3 norm-wise; NaN fails too
                    print(f"  {name:<24} WRONG rel err {err:.2e}")
                    continue
                ms = triton.testing.do_bench(run, warmup=50, rep=300, return_mode="median")
                rows.append((f"probe {name}", err, ms))
                if compile_s > 20:
                    print(f"  ({name}: {compile_s:.0f} s to compile)")
            except Exception as exc:  # noqa: BLE001  (a config the compiler refuses: say so, go on)
                print(f"  {name:<24} failed: {str(exc).splitlines()[0][:150]}")
        for label, err, ms in sorted(rows, key=lambda r: r[2]):
            print(f"  {label:<34} rel err {err:.1e}  {ms:.4f} ms  {fl / ms / 1e9:5.0f} TFLOP/s  "
                  f"{sdpa_ms / ms:.2f}x cuDNN")
        if rows:
            best = min(rows, key=lambda r: r[2])
            best_rows.append((tag, best[0], sdpa_ms / best[2]))
        del q, k, v, ref
        torch.cuda.empty_cache()
    print("\nbest per shape:")
    for tag, label, ratio in best_rows:
        print(f"  {tag:<18} {label:<34} {ratio:.2f}x cuDNN")
    return 0


if __name__ == "__main__":
    sys.exit(main())
