"""What adding dQ costs the Hopper attention backward, counted on the CPU (no GPU): the estimate behind its
TMA reduce-add rung (kernels/attention_hopper_backward.cu, "dQ"; note attention_hopper_backward.md).

    python -m week4_triton_dl.attention.hopper_backward_dq_estimate     (writes results/..._dq_estimate.json)

Counted exactly from the kernel's loops (`counts`; the tests walk the loops to check the formulas): per
(CTA, query step) each of the 2 consumer warpgroups adds a [64 queries][D] fp32 partial into dQ_accum.
* atomics build (-DAHB_DQ_TMA=0): every thread issues D / 4 float2 reductions per step (RED.E.ADD.F32x2);
  one warp instruction covers 8 rows x 32 bytes, so 8 separate 32-byte sectors reach L2 per instruction;
* TMA build: D / 32 reduce-adds per warpgroup per step, each a [64][32] fp32 box sent as 64 whole 128-byte
  lines; the threads store the tile to shared memory instead (2 wavefronts per warp instruction).
The payload is the same either way (4 bytes per add); what changes is the request count at L2 (4x fewer)
and who issues them (the TMA unit instead of the consumer warps' load/store pipe).

Set against the kernel's measured time (the benchmark's results file, read, not typed), the counts give
rates: fp32 adds per second, payload bytes per second, sectors per SM clock. What the H100 can sustain for
L2 reductions is NOT published by NVIDIA (no figure found in the CUDA guides or the Hopper whitepaper;
microbenchmark papers, e.g. Luo et al., arXiv:2501.12084, measure L2 loads, not reductions): the two
throughputs below are ASSUMPTIONS, labelled so in the results file, to turn counts into a time share.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"
BENCH = RESULTS / "attention_hopper_backward_week4.json"
OUT = RESULTS / "attention_hopper_backward_dq_estimate.json"
BLOCK_M, BLOCK_N = 64, 128           # the .cu's AHB_BM (queries per step), AHB_BN (keys per CTA)
SHAPE = (16, 16, 1024, 128, False)   # B, H, S, D, causal: the shape (the benchmark's first size)
SMS = 132                            # H100 SXM (the NVIDIA H100 whitepaper)
# ASSUMPTIONS (estimates, not published figures): the SM clock under this load, and how many 32-byte
# sector requests one SM's L1 passes on to L2 per clock (one per clock: the usual tag-stage width).
ASSUMED_CLOCK_HZ = 1.755e9
ASSUMED_SECTORS_PER_SM_CLOCK = 1.0


def steps(B: int, H: int, S: int, causal: bool) -> int:
    """(CTA, query step) pairs: CTAs walk the query blocks from the first that sees one of their keys."""
    q_blocks = -(-S // BLOCK_M)
    per_head = sum(q_blocks - ((n * BLOCK_N) // BLOCK_M if causal else 0) for n in range(-(-S // BLOCK_N)))
    return B * H * per_head


def counts(B: int, H: int, S: int, D: int, causal: bool) -> dict:
    """Per step and in total: the fp32 adds into dQ_accum and what carries them, in both builds."""
    pairs = steps(B, H, S, causal)
    adds_per_step = 2 * BLOCK_M * D              # 2 warpgroups x [64][D]
    red_per_thread = D // 4                      # D / 64 column blocks x 2 rows x 8 float2
    warp_reds_per_step = 8 * red_per_thread      # 8 consumer warps
    return {
        "steps": pairs,
        "adds_per_step": adds_per_step,
        "red_per_thread_per_step": red_per_thread,
        "warp_reds_per_step": warp_reds_per_step,
        "sectors_per_step": warp_reds_per_step * 8,          # 8 rows x 32 bytes per warp instruction
        "tma_reduces_per_step": 2 * (D // 32),
        "lines_per_step": adds_per_step * 4 // 128,
        "adds": pairs * adds_per_step,
        "payload_bytes": pairs * adds_per_step * 4,
        "sectors": pairs * warp_reds_per_step * 8,
        "lines": pairs * adds_per_step * 4 // 128,
        "adds_per_dq_element": (pairs * adds_per_step) / (B * H * S * D),
        "qdo_load_bytes": pairs * 2 * BLOCK_M * D * 2,       # the ring's Q and dO boxes, 16-bit
    }


def measured_ms(size: str, path: Path = BENCH) -> tuple[str, float]:
    """(variant, ms) of the atomics build at `size`: `hopper_atomics` where the file has the A/B, else
    `hopper` (a file from before the TMA rung, when hopper was the atomics build)."""
    rows = {r["variant"]: r["ms"] for r in json.loads(path.read_text())["rows"] if r["size"] == size}
    variant = "hopper_atomics" if "hopper_atomics" in rows else "hopper"
    return variant, rows[variant]


def estimate(shape=SHAPE, path: Path = BENCH) -> dict:
    B, H, S, D, causal = shape
    size = f"B{B} H{H} S{S} D{D} {'causal' if causal else 'full'}"
    c = counts(B, H, S, D, causal)
    variant, ms = measured_ms(size, path=path)
    seconds = ms * 1e-3
    clocks_per_step = seconds * ASSUMED_CLOCK_HZ / (c["steps"] / SMS)   # one CTA per SM at a time
    sector_clocks = c["sectors_per_step"] / ASSUMED_SECTORS_PER_SM_CLOCK
    return {
        "benchmark": "attention_hopper_backward_dq_estimate",
        "size": size,
        "measured_from": f"{path.name}: variant={variant} size='{size}' field=ms (the atomics build)",
        "measured_ms": ms,
        "counts": c,
        "rates": {
            "payload_tbps": c["payload_bytes"] / seconds / 1e12,
            "adds_per_s": c["adds"] / seconds,
            "payload_over_qdo_loads": c["payload_bytes"] / c["qdo_load_bytes"],
        },
        "assumed": {"clock_hz": ASSUMED_CLOCK_HZ, "sectors_per_sm_clock": ASSUMED_SECTORS_PER_SM_CLOCK, "sms": SMS,
                    "why": "no published H100 figure for L2 reduction throughput: estimates, not measurements"},
        "estimate": {
            "clocks_per_step": clocks_per_step,
            "sector_clocks_per_step": sector_clocks,
            "atomics_share_of_step_pct": 100 * sector_clocks / clocks_per_step,
            "chip_sectors_per_clock": c["sectors"] / (seconds * ASSUMED_CLOCK_HZ),
        },
    }


def main(argv=None) -> int:
    result = estimate()
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    print("wrote", OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
