"""Every matmul of the course on one roofline, from the results files only (nothing is timed here).

Points: week 1's fp32 CUDA-core ladder (results/matmul_week1.json), week 1's WMMA tensor-core
rungs (results/matmul_tc_week1.json) and week 3's Triton matmuls (matmul_float16.json,
matmul_bfloat16.json, and any fp8 results file), each at 4096^3 where it was measured there.
Roofs: the device-to-device copy bandwidth (the slanted memory roof) and torch.matmul (cuBLAS)
in each format (the flat compute roofs), all measured by the same benchmark runs;
precision_week3.json adds tf32 and fp8 if it exists.

Every matmul at 4096^3 has an arithmetic intensity of ~700 (fp32) to ~1400 (fp16) FLOP per
byte of its minimum traffic, far right of every ridge point (H100 SXM datasheet: 67 fp32 and 989
fp16 TFLOP/s over 3.35 TB/s, ~20 and ~300 FLOP/byte): none is memory-bound in principle, and the
vertical gap to a flat roof is how much of the arithmetic engine a kernel leaves idle.

    python -m week3_triton_kernels.matmul_roofline        # -> week3_triton_kernels/results/matmul_ladder_roofline.png
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = Path(__file__).parent / "results" / "matmul_ladder_roofline.png"
PREFERRED_SIZE = "4096"  # the size every ladder reports as its headline


@dataclass(frozen=True)
class Family:
    label: str
    week_dir: str
    pattern: str  # results file glob
    marker: str
    colormap: str  # each rung a shade of its family's colour, darker = faster


FAMILIES = (
    Family("week 1 fp32, CUDA cores", "week1_cuda_python", "matmul_week1.json", "o", "Blues"),
    Family("week 1 WMMA, tensor cores", "week1_cuda_python", "matmul_tc_week1.json", "s", "Oranges"),
    Family("week 3 Triton fp16", "week3_triton_kernels", "matmul_float16.json", "^", "Greens"),
    Family("week 3 Triton bf16", "week3_triton_kernels", "matmul_bfloat16.json", "v", "Purples"),
    Family("week 3 Triton fp8", "week3_triton_kernels", "matmul_*f*8*.json", "D", "Reds"),
)
# torch's row of each file is a roof, named by the dtype the file's rows ran in.
ROOF_NAMES = {"matmul_week1": "fp32", "matmul_float16": "fp16", "matmul_bfloat16": "bf16"}
PRECISION_FILE = ("week3_triton_kernels", "precision_week3.json")


@dataclass(frozen=True)
class Point:
    family: str
    variant: str
    size: str
    intensity: float  # FLOP / byte of minimum traffic
    tflops: float
    marker: str
    colormap: str


def _load(path: Path) -> dict | None:
    """A results record measured on a GPU, or None (absent, unreadable or simulated)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return None if record.get("simulated") else record


def _headline_size(rows: list[dict]) -> str | None:
    """The 4096^3 size if measured (the fp16 one where several dtypes were), else the largest."""
    timed = [r for r in rows if r.get("tflops") and r.get("bytes")]
    sizes = list(dict.fromkeys(r["size"] for r in timed))
    preferred = [s for s in sizes if str(s).startswith(PREFERRED_SIZE)]
    fp16 = [s for s in preferred if "bf16" not in str(s)]
    return (fp16 or preferred or sizes[-1:] or [None])[0]


def _dtype_of_size(size: str, default: str) -> str:
    for name in ("bf16", "f16", "fp8", "f32"):
        if str(size).endswith(name):
            return {"f16": "fp16", "f32": "fp32"}.get(name, name)
    return default


def collect(root: Path = ROOT) -> tuple[list[Point], dict[str, float], float | None, list[str]]:
    """(points, roofs in TFLOP/s by format, copy GB/s, files used) from the results files."""
    points, roofs, copies, used = [], {}, [], []
    for family in FAMILIES:
        for path in sorted((root / family.week_dir / "results").glob(family.pattern)):
            record = _load(path)
            if record is None or path.stem.startswith("precision"):
                continue
            used.append(str(path.relative_to(root)))
            copies.append(record.get("ceilings", {}).get("copy_gbps"))
            size = _headline_size(record["rows"])
            default_dtype = ROOF_NAMES.get(path.stem, "fp8" if "8" in path.stem else "fp16")
            roof_sizes = {s for s in (r["size"] for r in record["rows"]) if str(s).startswith(PREFERRED_SIZE)}
            for row in record["rows"]:
                if not (row.get("tflops") and row.get("bytes")):
                    continue
                if row["variant"] == "torch" and row["size"] in (roof_sizes or {size}):
                    # the same roof measured by two files: keep the higher (it is a ceiling)
                    roof = f"cuBLAS {_dtype_of_size(row['size'], default_dtype)}"
                    roofs[roof] = max(roofs.get(roof, 0.0), row["tflops"])
                elif row["variant"] != "torch" and row["size"] == size:
                    points.append(Point(family.label, row["variant"], str(row["size"]),
                                        row["flops"] / row["bytes"], row["tflops"], family.marker, family.colormap))
    precision = _load(root / PRECISION_FILE[0] / "results" / PRECISION_FILE[1])
    if precision is not None:
        used.append(f"{PRECISION_FILE[0]}/results/{PRECISION_FILE[1]}")
        copies.append(precision.get("ceilings", {}).get("copy_gbps"))
        for row in precision["rows"]:
            if row.get("tflops"):
                roof = f"cuBLAS {row['variant']}"
                roofs.setdefault(roof, row["tflops"])  # the ladders' own runs take precedence
    copies = [c for c in copies if c]
    return points, roofs, (statistics.median(copies) if copies else None), used


def plot(points: list[Point], roofs: dict[str, float], copy_gbps: float | None, path: Path,
         title: str = "Every matmul of the course at 4096^3 (results files)") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 6))
    intensities = [p.intensity for p in points] or [1000.0]
    peak = max(roofs.values(), default=None)
    lo = min(intensities + ([peak * 1e3 / copy_gbps / 8] if peak and copy_gbps else [])) / 2
    hi = max(intensities) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    if copy_gbps:
        ax.plot(xs, [min(copy_gbps * x / 1e3, peak or float("inf")) for x in xs], "k-", linewidth=1.5,
                label=f"memory roof: copy {copy_gbps:.0f} GB/s")
    for i, (name, tflops) in enumerate(sorted(roofs.items(), key=lambda kv: -kv[1])):
        ax.axhline(tflops, color=f"C{i}", linestyle="--", linewidth=1, label=f"{name}: {tflops:.0f} TFLOP/s")
    for family in dict.fromkeys(p.family for p in points):
        members = sorted((p for p in points if p.family == family), key=lambda p: -p.tflops)
        shades = plt.get_cmap(members[0].colormap)
        for rank, p in enumerate(members):
            shade = shades(0.95 - 0.6 * rank / max(len(members) - 1, 1))
            ax.plot([p.intensity], [p.tflops], p.marker, color=shade, markeredgecolor="black", markeredgewidth=0.5,
                    markersize=7, label=f"{p.family}: {p.variant} {p.tflops:.3g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of minimum DRAM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(points: list[Point], roofs: dict[str, float], copy_gbps: float | None, used: list[str]) -> str:
    """The plotted numbers as a table, each point as % of the cuBLAS roof of its own format."""
    lines = ["| family | variant | size | FLOP/byte | TFLOP/s | % of cuBLAS, same format |", "|---|---|---|---|---|---|"]
    for p in points:
        fmt = "fp32" if "fp32" in p.family else _dtype_of_size(p.size, "fp8" if "fp8" in p.family else
                                                               ("bf16" if "bf16" in p.family else "fp16"))
        roof = roofs.get(f"cuBLAS {fmt}")
        pct = f"{100 * p.tflops / roof:.0f}%" if roof else "-"
        lines.append(f"| {p.family} | {p.variant} | {p.size} | {p.intensity:.0f} | {p.tflops:.1f} | {pct} |")
    roof_text = ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in roofs.items())
    copy_text = f"copy {copy_gbps:.0f} GB/s" if copy_gbps else "no copy ceiling"
    return "\n".join(lines) + f"\n\nRoofs: {roof_text}; {copy_text}. From: {', '.join(used)}.\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(OUTPUT), help=f"the PNG to write (default {OUTPUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    points, roofs, copy_gbps, used = collect()
    if not points:
        print("no GPU results found: run `python -m course bench week1 --only matmul_week1 matmul_tc_week1` "
              "and `python -m course bench week3 --only matmul_float16 matmul_bfloat16` on a GPU first")
        return 1
    out = plot(points, roofs, copy_gbps, Path(args.out))
    table = markdown(points, roofs, copy_gbps, used)
    out.with_suffix(".md").write_text(table)
    print(table)
    print("wrote", out, "and", out.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
