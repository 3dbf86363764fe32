"""The roofline: where a kernel sits between the memory ceiling and the compute ceiling.

A kernel doing F FLOPs while moving B bytes has arithmetic intensity I = F / B. It cannot
run faster than min(peak_flops, bandwidth * I): left of the ridge point the bytes bound it
(vector add: 1 FLOP per 12 bytes, hopelessly memory-bound), right of it the arithmetic does
(a large matmul). Both ceilings here are *measured* on the machine that ran the benchmark.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: works on headless machines and in CI
import matplotlib.pyplot as plt  # noqa: E402


def points_from_result(result: dict) -> list[tuple[str, float, float]]:
    """(label, FLOP/byte, TFLOP/s) for each variant at the largest size measured."""
    timed = [r for r in result["rows"] if r.get("tflops") and r.get("bytes")]
    if not timed:
        return []
    largest = timed[-1]["size"]
    return [(r["variant"], r["flops"] / r["bytes"], r["tflops"]) for r in timed if r["size"] == largest]


def plot(points, *, copy_gbps: float, compute_tflops: dict | None = None, title: str = "", path: Path) -> Path:
    """Draw the measured ceilings and one dot per kernel; save to `path`."""
    compute_tflops = compute_tflops or {}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    intensities = [p[1] for p in points] or [1.0]
    peak = max(compute_tflops.values(), default=None)
    ridge = peak * 1e3 / copy_gbps if peak else 100.0  # FLOP/byte where the two roofs meet
    lo = min(intensities + [ridge / 1e3]) / 4
    hi = max(intensities + [ridge]) * 8
    xs = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    memory_roof = [copy_gbps * x / 1e3 for x in xs]  # GB/s * FLOP/B = GFLOP/s -> TFLOP/s
    ax.plot(xs, [min(m, peak) if peak else m for m in memory_roof], "k-",
            label=f"copy bandwidth {copy_gbps:.0f} GB/s")
    for name, tflops in compute_tflops.items():
        ax.axhline(tflops, linestyle="--", linewidth=1, label=f"{name} {tflops:.3g} TFLOP/s")
    for label, intensity, tflops in points:
        ax.plot([intensity], [tflops], "o", label=f"{label}: {tflops:.3g} TFLOP/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_result(result: dict, path: Path) -> Path:
    ceilings = result["ceilings"]
    compute = {k.replace("_tflops", "").replace("_", " "): v for k, v in ceilings.items() if k.endswith("_tflops")}
    where = result["machine"].get("gpu") or "simulation (CPU)"
    return plot(points_from_result(result), copy_gbps=ceilings["copy_gbps"], compute_tflops=compute,
                title=f"{result['title']} on {where}", path=path)
