"""The dQ cost estimate of the Hopper attention backward (attention/hopper_backward_dq_estimate.py), on the CPU.

Its closed-form counts are checked against a walk of the kernel's own loops (every CTA, query step,
warpgroup, warp instruction and lane of the atomics build; every TMA box of the reduce-add build), and the
committed results file against what the module computes from today's benchmark results (so the note's figures
are never stale: rerun `python -m week4_triton_dl.attention.hopper_backward_dq_estimate` after a benchmark run).
"""
import json

import pytest

from week4_triton_dl.attention import hopper_backward as hb
from week4_triton_dl.attention import hopper_backward_dq_estimate as est


def walk(B, H, S, D, causal):
    """The kernel's loops, literally: (steps, fp32 adds, float2 atomics per thread per step, 32-byte sectors
    of the atomics build, 128-byte lines of the TMA build)."""
    steps = adds = sectors = lines = 0
    reds = set()
    q_blocks = -(-S // 64)
    for _bh in range(B * H):
        for n in range(-(-S // 128)):
            first = (n * 128) // 64 if causal else 0
            for i in range(first, q_blocks):
                steps += 1
                m0 = i * 64
                for _c in range(2):              # consumer warpgroups
                    for warp in range(4):
                        for cc in range(D // 64):
                            for h in range(2):
                                for j in range(8):   # one float2 RED per lane: one warp instruction
                                    touched = set()
                                    for lane in range(32):
                                        query = m0 + 16 * warp + lane // 4 + 8 * h
                                        if query >= S:
                                            continue
                                        col = cc * 64 + 8 * j + 2 * (lane % 4)
                                        touched.add(((query * D + col) * 4) // 32)
                                        adds += 2
                                    sectors += len(touched)
                    reds.add(D // 64 * 2 * 8)
                    for b in range(D // 32):     # TMA boxes [64 rows][32 fp32]: rows past S clipped
                        lines += sum(1 for r in range(64) if m0 + r < S)
    return steps, adds, reds, sectors, lines


@pytest.mark.parametrize("shape", [(1, 1, 256, 64, False), (1, 2, 384, 128, True), (2, 1, 128, 128, False)],
                         ids=str)
def test_counts_match_a_walk_of_the_kernels_loops(shape):
    B, H, S, D, causal = shape
    steps, adds, reds, sectors, lines = walk(*shape)
    c = est.counts(*shape)
    assert (c["steps"], c["adds"], c["sectors"], c["lines"]) == (steps, adds, sectors, lines)
    assert reds == {c["red_per_thread_per_step"]}
    if not causal and S % 64 == 0:  # every dQ element gets one add per warpgroup of every key block
        assert c["adds_per_dq_element"] == 2 * -(-S // 128)
    assert c["payload_bytes"] == 4 * adds


def test_the_tiles_are_the_kernels():
    assert (est.BLOCK_M, est.BLOCK_N) == (hb.BLOCK_M, hb.BLOCK_N)


def test_the_results_file_is_what_the_module_computes_now():
    committed = json.loads(est.OUT.read_text())
    assert committed == json.loads(json.dumps(est.estimate())), \
        "stale: python -m week4_triton_dl.attention.hopper_backward_dq_estimate"
    assert "not measurements" in committed["assumed"]["why"]
