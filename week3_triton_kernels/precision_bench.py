"""Precision's measurements: speed and error of one matmul in five formats, written as results files.

The error model and the matmul in each format are precision.py's (the lesson); this module times
them (GPU), measures their errors against float64, and writes the two records:
results/precision_week3.* (speed and error at 4096^3: `precision_benchmark`, the kit's Benchmark,
with error columns added) and results/precision_k_sweep_week3.* (error for K = 256 .. 16384).

    python -m week3_triton_kernels.precision_bench --write    # on a GPU; --out DIR also in simulation
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import torch

from course import bench, runtime  # runtime first: chooses the GPU or simulation
from course.bench import Benchmark

from week3_triton_kernels.precision import (
    FORMAT_NAMES, FORMATS, OUTPUT_DTYPES, fp8_native_available, matmul_emulated, matmul_in, predicted_rel_error,
    prepare, relative_error, run_prepared)

RESULTS_DIR = Path(__file__).parent / "results"


# --- measuring: speed (GPU) and error ------------------------------------------------------------

def _random_operands(m: int, n: int, k: int, seed: int = 0):
    generator = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(m, k, generator=generator).to(runtime.DEVICE)
    b = torch.randn(k, n, generator=generator).to(runtime.DEVICE)
    return a, b


def timed_formats() -> tuple[str, ...]:
    """Formats with a torch kernel to time here (fp8 needs sm_89+; none in simulation but fp32)."""
    if not runtime.on_gpu():
        return FORMAT_NAMES  # timed too, but the host clock measures the emulation, not a GPU
    return tuple(f for f in FORMAT_NAMES if f != "fp8_e4m3" or fp8_native_available())


def _operand_slices() -> dict[str, slice]:
    """Where each format's operands sit in the flat input tuple (fp8: q_a, s_a, q_b, s_b)."""
    slices, start = {}, 0
    for fmt in timed_formats():
        count = 4 if fmt == "fp8_e4m3" and runtime.on_gpu() else 2
        slices[fmt] = slice(start, start + count)
        start += count
    return slices


def _speed_inputs(size):
    """One flat tuple of tensors (so the timer can count their bytes), every format's operands."""
    m, n, k = size
    a, b = _random_operands(m, n, k, seed=1)
    return tuple(t for fmt in timed_formats() for t in (prepare(fmt, a, b) if runtime.on_gpu() else (a, b)))


def _speed_variant(fmt: str):
    where = _operand_slices()[fmt]
    if runtime.on_gpu():
        return lambda *inputs: run_prepared(fmt, *inputs[where])
    return lambda *inputs: matmul_emulated(fmt, *inputs[where])


def _size_label(size) -> str:
    m, n, k = size
    return f"{m}x{n}x{k}"


def precision_benchmark(sizes=None) -> Benchmark:
    """The speed half of the precision table: torch.matmul in every format, same problem."""
    formats = timed_formats()
    return Benchmark(
        name="precision_week3",
        title="One matmul in five formats: TFLOP/s and relative error vs float64",
        sizes=sizes or [(4096, 4096, 4096)],
        sim_sizes=sizes or [(64, 64, 64)],
        size_label=_size_label,
        make_inputs=_speed_inputs,
        variants={fmt: _speed_variant(fmt) for fmt in formats},
        headline=formats,
        bytes=lambda size: 0,  # per format: filled in by write_results
        flops=lambda size: 2 * size[0] * size[1] * size[2],
        notes="A, B random normal fp32; each format converts them once, outside the timing. "
              "rel_error = ||C - C64|| / ||C64|| against the float64 product of the fp32 data; "
              "fp8 = torch._scaled_mm with per-tensor scales, bf16 output.",
    )


def _bytes(fmt: str, m: int, n: int, k: int) -> int:
    """Each operand read once in its storage type, C written once in its output type."""
    f = FORMATS[fmt]
    itemsize = torch.empty((), dtype=f.storage).element_size()
    out_itemsize = torch.empty((), dtype=OUTPUT_DTYPES[f.output]).element_size()
    return itemsize * (m * k + k * n) + out_itemsize * m * n


def _error_fields(fmt: str, a, b, reference) -> dict:
    c, how = matmul_in(fmt, a, b)
    k = a.shape[1]
    return {"rel_error": relative_error(c, reference), "predicted_rel_error": predicted_rel_error(fmt, k),
            "unit_roundoff": FORMATS[fmt].unit_roundoff, "significand_bits": FORMATS[fmt].significand_bits,
            "path": how}


def measure_speed_and_error(sizes=None) -> dict:
    """precision_week3: the benchmark record, each row with its measured and predicted error."""
    record = bench.run(precision_benchmark(sizes))
    for size in precision_benchmark(sizes).active_sizes():
        m, n, k = size
        a, b = _random_operands(m, n, k, seed=2)
        reference = a.double() @ b.double()
        fp32_ms = next((r["ms"] for r in record["rows"] if r["size"] == _size_label(size)
                        and r["variant"] == "fp32" and "ms" in r), None)
        for row in record["rows"]:
            if row["size"] != _size_label(size):
                continue
            fmt = row["variant"]
            row.update(_error_fields(fmt, a, b, reference))
            if "ms" in row:
                row["bytes"] = _bytes(fmt, m, n, k)
                seconds = row["ms"] * 1e-3
                row["gbps"] = row["bytes"] / seconds / 1e9
                row["pct_of_copy"] = 100 * row["gbps"] / record["ceilings"]["copy_gbps"]
                row["speedup_vs_fp32"] = fp32_ms / row["ms"] if fp32_ms else None
        missing = [f for f in FORMAT_NAMES if f not in timed_formats()]
        for fmt in missing:  # no kernel to time here, but the error is still worth a row
            record["rows"].append({"size": _size_label(size), "variant": fmt, "skipped": "no fp8 GPU kernel here",
                                   **_error_fields(fmt, a, b, reference)})
    return record


def measure_k_sweep(mn: int | None = None, k_values=None) -> dict:
    """precision_k_sweep_week3: relative error of every format for K = 256 .. 16384 (no timing)."""
    mn = mn or runtime.pick(gpu=4096, sim=64)
    k_values = k_values or runtime.pick(gpu=[256, 512, 1024, 2048, 4096, 8192, 16384], sim=[256, 1024, 4096])
    rows = []
    for k in k_values:
        a, b = _random_operands(mn, mn, k, seed=3)
        reference = a.double() @ b.double()
        for fmt in FORMAT_NAMES:
            rows.append({"size": f"{mn}x{mn}x{k}", "variant": fmt, "k": k, **_error_fields(fmt, a, b, reference)})
        del a, b, reference
    return {
        "benchmark": "precision_k_sweep_week3",
        "title": f"Relative error vs K ({mn} x {mn} x K), five formats, against float64",
        "notes": "rel_error = ||C - C64|| / ||C64||; predicted_rel_error from the model in precision.py",
        "headline": [],
        "simulated": not runtime.on_gpu(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": runtime.describe(),
        "ceilings": {"copy_gbps": bench.copy_bandwidth_gbps()},
        "rows": rows,
    }


def precision_markdown(record: dict) -> str:
    """The speed-and-error table (the shared markdown_table has no error columns)."""
    head = ["size", "format", "significand bits", "u", "ms", "TFLOP/s", "vs fp32", "rel. error",
            "predicted", "how"]
    lines = [f"**{record['title']}**: {bench.measured_on(record)}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in record["rows"]:
        lines.append("| " + " | ".join([
            str(r["size"]), r["variant"], str(r.get("significand_bits", "-")),
            bench.fmt(r.get("unit_roundoff"), ".1e"),
            bench.fmt(r.get("ms"), ".4f"), bench.fmt(r.get("tflops"), ".1f"),
            "-" if not r.get("speedup_vs_fp32") else f"{r['speedup_vs_fp32']:.1f}x",
            bench.fmt(r.get("rel_error"), ".2e"), bench.fmt(r.get("predicted_rel_error"), ".1e"),
            r.get("path", r.get("skipped", "-"))]) + " |")
    return "\n".join(lines) + "\n"


def _plot_speed_and_error(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = record["rows"][-1]["size"]
    rows = [r for r in record["rows"] if r["size"] == size]
    names = [r["variant"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(names, [r.get("tflops") or 0 for r in rows], color="tab:blue")
    left.set_ylabel("TFLOP/s")
    left.set_title(f"speed, {size}")
    right.bar(names, [r["rel_error"] for r in rows], color="tab:orange", label="measured")
    right.plot(names, [r["predicted_rel_error"] for r in rows], "k_", markersize=20, label="model")
    right.set_yscale("log")
    right.set_ylabel("||C - C64|| / ||C64||")
    right.set_title("relative error")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=8)
    where = record["machine"].get("gpu") or "simulation (CPU)"
    fig.suptitle(f"{record['title']} on {where}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_k_sweep(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, fmt in enumerate(FORMAT_NAMES):
        rows = [r for r in record["rows"] if r["variant"] == fmt]
        color = f"C{i}"
        ax.plot([r["k"] for r in rows], [r["rel_error"] for r in rows], "o-", color=color, label=fmt)
        ax.plot([r["k"] for r in rows], [r["predicted_rel_error"] for r in rows], "--", color=color, linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("K (length of each dot product)")
    ax.set_ylabel("||C - C64|| / ||C64||  (dashed: model)")
    where = record["machine"].get("gpu") or "simulation (CPU)"
    ax.set_title(f"{record['title']}\non {where}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def k_sweep_markdown(record: dict) -> str:
    ks = sorted({r["k"] for r in record["rows"]})
    lines = [f"**{record['title']}**: {bench.measured_on(record)}. Measured (model in brackets).", "",
             "| format | " + " | ".join(f"K = {k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for fmt in FORMAT_NAMES:
        by_k = {r["k"]: r for r in record["rows"] if r["variant"] == fmt}
        lines.append(f"| {fmt} | " + " | ".join(
            f"{by_k[k]['rel_error']:.2e} ({by_k[k]['predicted_rel_error']:.1e})" for k in ks) + " |")
    return "\n".join(lines) + "\n"


def write_results(out_dir: Path | None, sizes=None, k_values=None, mn: int | None = None) -> list[Path]:
    """Measure both records, print their tables; save json, md and png to `out_dir` if given."""
    speed = measure_speed_and_error(sizes)
    sweep = measure_k_sweep(mn, k_values)
    print(precision_markdown(speed))
    print(k_sweep_markdown(sweep))
    if out_dir is None:
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for record, table, plot in ((speed, precision_markdown, _plot_speed_and_error),
                                (sweep, k_sweep_markdown, _plot_k_sweep)):
        base = out_dir / record["benchmark"]
        base.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
        base.with_suffix(".md").write_text(table(record))
        plot(record, base.with_suffix(".png"))
        written += [base.with_suffix(s) for s in (".json", ".md", ".png")]
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true",
                        help="measure speed and error; on a GPU save results/precision_week3.* and "
                             "results/precision_k_sweep_week3.*")
    parser.add_argument("--out", help="save here instead (also in simulation)")
    args = parser.parse_args(argv)
    if not args.write:
        parser.print_help()
        return 2
    out = Path(args.out) if args.out else (RESULTS_DIR if runtime.on_gpu() else None)
    for path in write_results(out):
        print("wrote", path)
    if out is None:
        print("(simulation: errors are the exact emulation, times measure the CPU; nothing saved)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
