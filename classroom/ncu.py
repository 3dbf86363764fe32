"""Nsight Compute (ncu) helpers: a driver that launches any week's benchmark variants once each,
and ncu's CSV export turned into markdown tables.

ncu profiles a process: it needs one that does little besides the launches we want to read. The
driver is that process:

    python -m course ncu --package week3_triton_kernels --launch matmul_bfloat16 \\
        --size 4096x4096x4096 --variants triton triton_tma torch --warmup

calls each variant of a registered benchmark (course/bench.py) once, at one size, synchronizing
after each. `--warmup` first calls every variant once *outside* a CUDA profiler range and then
again inside it (cudaProfilerStart/Stop): with `ncu --profile-from-start off` only the second
round is profiled, so Triton's autotuning, nvcc builds and cuBLAS's heuristics stay out of the
report. (week 1's `python -m course sanitize week1 --launch ...` is the same driver.)

    python -m course ncu --table report.csv --labels naive tiled          the week-1 table
    python -m course ncu --table report.csv --labels a b --hopper         the Hopper table
    python -m course ncu --table report.csv --labels a b --record R.json --group G --title T
    python -m course ncu --render results/ncu_hopper.json                 writes results/ncu_hopper.md
    python -m course ncu --render results/ncu_hopper.json --sections G    and results/ncu_G.md (one group)

take `ncu --import R --page raw --csv --print-units base` and print one row per profiled kernel.
The first table (NCU_COLUMNS) is the one profiling_with_nsight.md reads: time, launch shape,
occupancy, DRAM, bank conflicts, sectors per request. The second (HOPPER_COLUMNS) is for
tensor-core kernels on sm_90: how busy the tensor pipe was (wgmma and mma.sync alike; the
instruction counts tell them apart), issue slots, occupancy, the three largest warp-stall reasons, DRAM and L2, TMA traffic.
Metric names change between ncu versions and GPUs, so each Hopper column lists alternatives and
takes the first one the CSV has; a column whose names are all absent shows "-" (kept, so a
wrong name is visible, not silently dropped).

The figures are read from the CSV once, into a record ({kernel: {column: number}}, ncu_record);
the tables are rendered from it, and `--record` keeps it in a week's results/ncu_hopper.json (the
figures the notes quote), from which `--render` writes the matching ncu_hopper.md. Beside the two
tables a group keeps HOPPER_EXTRAS (the SMs' active share, clocks, L2 read requests, each kernel's name):
what a reading of waves, clocks and L2 traffic needs.
"""
from __future__ import annotations

import argparse
import csv
import json
import io
import re
import sys
from pathlib import Path

import torch

from course import runtime, weeks

# (column header, ncu metric, unit conversion) for the profile table; missing metrics show "-".
# A tuple of metrics: summed (a unit conversion), their ratio ("ratio"), or the first present (None).
NCU_COLUMNS = (
    ("time us", "gpu__time_duration.sum", "us"),
    ("block", "launch__block_size", None),
    ("grid", "launch__grid_size", None),
    ("regs/thread", "launch__registers_per_thread", None),
    ("smem/block KB", ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic"), "KB"),
    ("occupancy theor. %", "sm__maximum_warps_per_active_cycle_pct", None),
    ("occupancy achieved %", "sm__warps_active.avg.pct_of_peak_sustained_active", None),
    ("SM throughput %", "sm__throughput.avg.pct_of_peak_sustained_elapsed", None),
    ("DRAM throughput %", ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                           "dram__throughput.avg.pct_of_peak_sustained_elapsed"), None),
    ("DRAM MB", ("dram__bytes_read.sum", "dram__bytes_write.sum"), "MB"),
    ("smem ld conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", None),
    ("smem st conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", None),
    ("smem atom conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_atom.sum", None),
    ("ld sectors/req", ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"), "ratio"),
    ("st sectors/req", ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
                        "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"), "ratio"),
)

# Warp-stall reasons, per family of metric names: (pattern whose group 1 is the reason). ncu's
# WarpStateStats section reports "warps stalled for this reason per issued instruction" (the
# first family); the per-PC sampler (SourceCounters) counts samples (the last). The first family
# the CSV has is used; "selected" (the warp that issued) and the *_not_issued twins are no stalls.
STALL_FAMILIES = (
    r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio",
    r"smsp__average_warp_latency_issue_stalled_(\w+?)\.ratio",
    r"smsp__warp_issue_stalled_(\w+?)_per_warp_active\.pct",
    r"smsp__pcsamp_warps_issue_stalled_(\w+)",
)
NOT_STALLS = ("selected",)

# The Hopper table: alternatives (first present wins) because names differ by ncu version.
HOPPER_COLUMNS = (
    ("time us", "gpu__time_duration.sum", "us"),
    ("grid", "launch__grid_size", None),
    ("regs/thread", "launch__registers_per_thread", None),
    # ncu 2025.3 on sm_90 has no separate wgmma pipe counter: the HMMA pipe's cycles count HMMA,
    # HGMMA and QGMMA alike; the instruction counters tell the two apart (the "hmma" one counts
    # HGMMA too, so mma.sync instructions = hmma inst - gmma inst).
    ("tensor pipe busy %", ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"), None),
    ("wgmma inst", ("sm__inst_executed_pipe_tensor_op_gmma.sum", "smsp__inst_executed_pipe_tensor_op_gmma.sum"),
     None),
    ("tensor inst (mma.sync + wgmma)", ("sm__inst_executed_pipe_tensor_op_hmma.sum",
                                        "smsp__inst_executed_pipe_tensor_op_hmma.sum"), None),
    ("issue slots busy %", ("sm__inst_issued.avg.pct_of_peak_sustained_active",
                            "smsp__issue_active.avg.pct_of_peak_sustained_active"), None),
    ("occupancy achieved %", "sm__warps_active.avg.pct_of_peak_sustained_active", None),
    ("top stalls (warps per issue)", STALL_FAMILIES, "stalls"),
    ("DRAM MB", ("dram__bytes_read.sum", "dram__bytes_write.sum"), "MB"),
    ("DRAM throughput %", ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                           "dram__throughput.avg.pct_of_peak_sustained_elapsed"), None),
    ("DRAM GB/s", ("dram__bytes.sum.per_second",), "GB/s"),
    ("L2 hit %", ("lts__t_sector_hit_rate.pct",), None),
    ("L2 MB", ("lts__t_bytes.sum",), "MB"),
    ("TMA load MB", ("l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum",), "MB"),
    ("smem wavefronts", ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",), None),
)
# What a reading needs beside the Hopper table (a group's record keeps it as "extra", ncu_hopper.md shows
# it as a third table). The tensor pipe's busy % counts the SMs' *active* cycles, so the SMs left idle by
# a last, partly empty wave are invisible in it: "SMs active %" shows them. ncu replays each kernel at the
# clock it finds (--clock-control none), so two kernels' times also differ by their clocks: the SM clock
# and the elapsed cycles tell. L2 read requests and sectors per request: a TMA box row of 128 bytes is one
# 4-sector request when it starts on a 128-byte line, two when it straddles two lines. The kernel's own
# name: a library's says which of its kernels ran (cuBLAS's nvjet_* names carry the tile).
HOPPER_EXTRAS = (
    ("kernel name", "Kernel Name", "name"),
    ("SMs active %", ("sm__cycles_active.avg", "sm__cycles_elapsed.avg"), "pct"),
    ("SM clock GHz", "sm__cycles_elapsed.avg.per_second", "GHz"),
    ("elapsed kcycles", "gpc__cycles_elapsed.max", "k"),
    ("L2 throughput %", "lts__throughput.avg.pct_of_peak_sustained_elapsed", None),
    ("L2 read requests M", "lts__t_requests_srcunit_tex_op_read.sum", "M"),
    ("L2 sectors per read request", ("lts__t_sectors_srcunit_tex_op_read.sum",
                                     "lts__t_requests_srcunit_tex_op_read.sum"), "ratio"),
)
EXTRA_KEY = "extra"  # a group's {kernel: {slug: value}} of HOPPER_EXTRAS
# Metrics worth asking for by name on top of `--set full` (tools/ncu_hopper.sh keeps those this
# ncu knows): every plain metric name above.
HOPPER_METRICS = tuple(dict.fromkeys(
    m for _, spec, convert in HOPPER_COLUMNS + HOPPER_EXTRAS if convert not in ("stalls", "name")
    for m in (spec if isinstance(spec, tuple) else (spec,))))

_SCALE = {"": 1, "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9,
          "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1, "ns": 1e-9, "us": 1e-6, "ms": 1e-3,
          "byte/second": 1, "Kbyte/second": 1e3, "Mbyte/second": 1e6, "Gbyte/second": 1e9,
          "Tbyte/second": 1e12}


def _number(text: str, unit: str) -> float | None:
    text = (text or "").strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value * _SCALE.get(unit.strip(), 1)


def short_kernel_name(name: str) -> str:
    """'week1_cuda_python::transpose::_tiled_kernel::<locals>::kernel[abi:v1](Array<...>)' ->
    '_tiled_kernel.<locals>.kernel'; C names pass through."""
    base = re.sub(r"\[abi:[^\]]*\]", "", name).split("(")[0].strip()
    base = re.sub(r"^void\s+", "", base)
    parts = [p for p in base.split("::") if p]
    parts = [p for p in parts if p != "cudapy" and p not in {w.package for w in weeks.all_weeks()}]
    if len(parts) > 1 and parts[0].isidentifier():
        parts = parts[1:]  # the module name
    return ".".join(parts) or name


# Each column keeps one number format, in the table and in the results JSON alike, so that a table
# rendered back from the JSON (`--render`) reads as the one made from the CSV: times, kilobytes,
# ratios and percentages with one decimal; megabytes, GB/s and counts (instructions, registers,
# conflicts) with none.
DECIMALS = {"us": 1, "KB": 1, "ratio": 1, "pct": 1, "MB": 0, "GB/s": 0, "GHz": 2, "k": 0, "M": 2}
STALLS_KEY = "stalls"  # a record's {reason: value} of every stall reason (not a table column)
# the column's unit, in ncu's base units
_IN_UNIT = {"us": 1e-6, "KB": 1e3, "MB": 1e6, "GB/s": 1e9, "GHz": 1e9, "k": 1e3, "M": 1e6}


def column_decimals(header: str, convert: str | None) -> int:
    """Decimals a column keeps: by its unit conversion, else one for a percentage, none for a count."""
    return DECIMALS.get(convert, 1 if header.endswith("%") else 0)


def slug(header: str) -> str:
    """A table column as a results key: 'DRAM MB' -> 'dram_mb', 'tensor pipe busy %' -> 'tensor_pipe_busy_pct'."""
    return re.sub(r"[^a-z0-9]+", "_", header.lower().replace("%", "pct")).strip("_")


def _kernel_rows(csv_text: str) -> tuple[list[str], list[str], list[list[str]]]:
    """ncu's raw-page CSV split into (metric names, their units, one row per profiled kernel)."""
    rows = list(csv.reader(io.StringIO(csv_text)))
    rows = [r for r in rows if r and not r[0].startswith("==")]  # ==PROF== / ==WARNING== lines
    if not rows:
        return [], [], []
    header, body = rows[0], rows[1:]
    units = body[0] if body and not body[0][0].strip().isdigit() else [""] * len(header)
    return header, units, [r for r in body if r and r[0].strip().isdigit()]


def ncu_record(csv_text: str, labels: list[str] | None = None, columns=NCU_COLUMNS) -> dict[str, dict]:
    """ncu's raw-page CSV (`ncu --import R --page raw --csv --print-units base`) as numbers:
    {kernel label: {column slug: value}}, kernels in launch order, each value in its column's unit
    rounded to the decimals the table shows (the stalls column: its text). Kernels are labelled by
    `labels` when their count matches, else by their short names; a metric ncu did not export has
    no entry. With a stalls column, `stalls` holds every stall reason of its family as a number
    ({reason: warps per issue}, three significant digits; what a note cites: path=...stalls.barrier).
    Both the tables and the results JSON are made from this record."""
    header, units, kernels = _kernel_rows(csv_text)
    column = {name: i for i, name in enumerate(header)}

    def value(row, metric):
        if metric not in column or column[metric] >= len(row):
            return None
        return _number(row[column[metric]], units[column[metric]] if column[metric] < len(units) else "")

    def stall_values(row, families) -> list[tuple[str, float]]:
        """(reason, value) of the first family the CSV has, largest first."""
        for family in families:
            found = [(m.group(1), value(row, name)) for name in header if (m := re.fullmatch(family, name))]
            found = [(reason, v) for reason, v in found
                     if v is not None and reason not in NOT_STALLS and not reason.endswith("_not_issued")]
            if found:
                return sorted(found, key=lambda item: -item[1])
        return []

    def stalls(found) -> str | None:
        return ", ".join(f"{reason} {v:.2g}" for reason, v in found[:3]) or None

    def number(row, metric, convert) -> float | None:
        if convert in ("ratio", "pct"):  # a ratio of two metrics; "pct": as a percentage
            top, bottom = (value(row, m) for m in metric)
            return None if top is None or not bottom else top / bottom * (100 if convert == "pct" else 1)
        if isinstance(metric, tuple):
            present = [v for v in (value(row, m) for m in metric) if v is not None]
            if not present:
                return None
            # alternatives (no conversion, or a rate): the first present; parts of one quantity: their sum
            total = present[0] if convert in (None, "GB/s") else sum(present)
        else:
            total = value(row, metric)
        return None if total is None else total / _IN_UNIT.get(convert, 1)

    name_index = column.get("Kernel Name")
    use_labels = labels and len(labels) == len(kernels)
    record = {}
    for i, row in enumerate(kernels):
        name = labels[i] if use_labels else short_kernel_name(row[name_index]) if name_index is not None else str(i)
        key, copy = name, 1
        while key in record:  # the same kernel launched twice: both rows kept
            copy += 1
            key = f"{name} #{copy}"
        values = {}
        for header_text, metric, convert in columns:
            if convert == "stalls":
                found = stall_values(row, metric)
                cell = stalls(found)
                if found:  # every reason as a number too, for the notes' figures: stalls.barrier, ...
                    values[STALLS_KEY] = {reason: float(f"{v:.3g}") for reason, v in found if v}
            elif convert == "name":
                cell = short_kernel_name(row[column[metric]]) if column.get(metric, len(row)) < len(row) else None
            else:
                cell = number(row, metric, convert)
                if cell is not None:
                    cell = float(f"{cell:.{column_decimals(header_text, convert)}f}")
            if cell is not None:
                values[slug(header_text)] = cell
        record[key] = values
    return record


def render_table(kernels: dict[str, dict], columns=NCU_COLUMNS, *, keep_empty: bool = False) -> str:
    """A record of ncu_record's shape as a markdown table, one row per kernel. Columns no kernel has
    a value for are left out, unless `keep_empty` (then they show "-", as does any missing value)."""
    def cell(values, header_text, convert) -> str:
        v = values.get(slug(header_text))
        if v is None:
            return "-"
        return v if isinstance(v, str) else f"{v:.{column_decimals(header_text, convert)}f}"

    shown = [c for c in columns if keep_empty or any(slug(c[0]) in values for values in kernels.values())]
    lines = ["| kernel | " + " | ".join(c[0] for c in shown) + " |", "|---|" + "---|" * len(shown)]
    for name, values in kernels.items():
        lines.append(f"| {name} | " + " | ".join(cell(values, c[0], c[2]) for c in shown) + " |")
    return "\n".join(lines) + "\n"


def ncu_table(csv_text: str, labels: list[str] | None = None, columns=NCU_COLUMNS, *,
              keep_empty: bool = False) -> str:
    """ncu's raw-page CSV (`ncu --import R --page raw --csv --print-units base`) as a markdown table:
    one row per profiled kernel, labelled by `labels` in launch order when their count matches.
    Columns no kernel has a value for are left out, unless `keep_empty` (then they show "-")."""
    kernels = ncu_record(csv_text, labels, columns)
    if not kernels:
        return "_ncu exported no kernels: check the kernel-name regex._\n"
    text = render_table(kernels, columns, keep_empty=keep_empty)
    if labels and len(labels) != len(kernels):
        text += f"\n_{len(kernels)} kernels profiled but {len(labels)} labels given: kernel names shown._\n"
    return text


def hopper_table(csv_text: str, labels: list[str] | None = None) -> str:
    """The Hopper (sm_90) table: HOPPER_COLUMNS, every column kept ("-" where ncu had no such metric)."""
    return ncu_table(csv_text, labels, HOPPER_COLUMNS, keep_empty=True)


def hopper_record(csv_text: str, labels: list[str] | None = None) -> dict:
    """The Hopper table as numbers, {kernel label: {column slug: value}}: what a results JSON keeps
    so that notes quote ncu's figures by `path=...` (classroom/figures.py)."""
    return ncu_record(csv_text, labels, HOPPER_COLUMNS)


# --- the results record: ncu_hopper.json, and ncu_hopper.md rendered from it ---------------------------
#
# {"gpu": ..., "ncu": ..., "date": ..., "how": ...,
#  "groups": {GROUP: {"title": "BENCH at SIZE",
#                     "kernels": {LABEL: {slug: value}},    the Hopper table (notes quote these)
#                     "profile": {LABEL: {slug: value}},    week 1's profiling table
#                     "extra": {LABEL: {slug: value}}}}}    HOPPER_EXTRAS (where the CSV has them)
# Groups, kernels and columns are kept in the order they were profiled and shown.

def group_record(csv_text: str, labels: list[str] | None, title: str) -> dict:
    """One profiled group (one ncu run) as its results entry: both tables' figures, and HOPPER_EXTRAS'
    where the CSV has them (a report's raw page from `--set full` does)."""
    entry = {"title": title, "kernels": hopper_record(csv_text, labels),
             "profile": ncu_record(csv_text, labels, NCU_COLUMNS)}
    extra = ncu_record(csv_text, labels, HOPPER_EXTRAS)
    if any(len(values) > 1 for values in extra.values()):  # more than the kernel's name
        entry[EXTRA_KEY] = extra
    return entry


def add_to_record(path: Path, group: str, title: str, csv_text: str, labels: list[str] | None, meta: dict) -> dict:
    """Merge one group's figures into the results JSON at `path` (other groups kept); returns the group."""
    record = json.loads(path.read_text()) if path.is_file() else {}
    if record.get("date") != meta.get("date"):  # an earlier run's groups: stamped with that run's meta first
        for kept in record.get("groups", {}).values():
            if not kept.get("date"):
                kept.update({k: record[k] for k in GROUP_META if record.get(k)})
    record.update({k: v for k, v in meta.items() if v})
    entry = record.setdefault("groups", {})[group] = group_record(csv_text, labels, title)
    # The file's meta is its latest run's; a group kept from an earlier run (a seeded record) keeps its own.
    entry.update({k: meta[k] for k in GROUP_META if meta.get(k)})
    path.write_text(json.dumps(record, indent=1) + "\n")
    return entry


GROUP_META = ("gpu", "date")  # kept in each group too: a record merges groups of several runs


def render_group(name: str, group: dict, heading: str = "## ") -> str:
    """One group's section of ncu_hopper.md: the Hopper table, then week 1's profiling table. `heading`
    opens its title line ("## ": a section; "" in the group's own file, which a note includes)."""
    when = ", ".join(group[k] for k in GROUP_META if group.get(k))
    title = f"{heading}{name}: {group.get('title', '')}" if heading else f"**{name}: {group.get('title', '')}**"
    text = (f"{title}\n\n" + (f"_{when}_\n\n" if when else "")
            + render_table(group["kernels"], HOPPER_COLUMNS, keep_empty=True))
    if group.get("profile"):
        text += ("\nLaunch, memory and store/load efficiency (week 1's profiling table):\n\n"
                 + render_table(group["profile"], NCU_COLUMNS))
    if group.get(EXTRA_KEY):
        text += ("\nSMs' active share, clocks and L2 read requests (the record's `extra`):\n\n"
                 + render_table(group[EXTRA_KEY], HOPPER_EXTRAS))
    return text


def render_record(record: dict) -> str:
    """ncu_hopper.md from ncu_hopper.json alone: where and how it was measured, then every group."""
    meta = {key: record.get(key, "?") for key in ("gpu", "ncu", "date", "how")}
    head = (
        "# Nsight Compute on the H100: the Hopper table\n\n"
        f"{meta['gpu']}, ncu {meta['ncu']}, {meta['date']}; `{meta['how']}` (ncu --set full --clock-control none, "
        "after one warm-up call of each variant). Times are ncu's replays (caches flushed before each pass): "
        "compare kernels with each other, take speed from the benchmarks. Raw metrics: `ncu_GROUP.csv` beside "
        "this file; the figures the notes quote: `ncu_hopper.json`, which this file is rendered from "
        "(`python -m course ncu --render ncu_hopper.json`).\n\n"
        "Columns: tensor pipe busy % = sm__pipe_tensor_op_hmma_cycles_active (HMMA, HGMMA and QGMMA alike) over "
        "active cycles; wgmma inst = HGMMA instructions; tensor inst = HMMA + HGMMA; stalls: warps stalled per "
        "issued instruction, the largest three.\n")
    return head + "".join("\n" + render_group(name, group) for name, group in record.get("groups", {}).items())


def render_file(json_path: Path) -> Path:
    """Write the ncu_hopper.md that matches `json_path`, beside it; returns its path."""
    md_path = json_path.with_suffix(".md")
    md_path.write_text(render_record(json.loads(json_path.read_text())))
    return md_path


def group_file(json_path: Path, group: str) -> Path:
    """Where a group's own markdown goes: ncu_GROUP.md beside the record (a note's results block includes it)."""
    return json_path.parent / f"ncu_{group}.md"


def render_group_file(json_path: Path, group: str) -> Path:
    """Write ncu_GROUP.md beside `json_path`: that group's tables alone, from the JSON alone."""
    groups = json.loads(json_path.read_text()).get("groups", {})
    if group not in groups:
        raise KeyError(f"{json_path} has no group {group!r}; it has: {', '.join(groups)}")
    path = group_file(json_path, group)
    path.write_text(render_group(group, groups[group], heading=""))
    return path


# --- the launch driver ------------------------------------------------------------------------------

def _synchronize() -> None:
    if runtime.on_gpu():
        torch.cuda.synchronize()


def launch_benchmark(package: str, name: str, size_label: str | None = None, variants: list[str] | None = None,
                     *, warmup: bool = False) -> list[str]:
    """Call each variant of benchmark `name` (of week `package`) once, at the size labelled
    `size_label` (default: the largest), synchronizing after each: one launch per kernel for ncu.
    With `warmup`, every variant is called once first, and the calls that count run inside a
    CUDA profiler range (for `ncu --profile-from-start off`)."""
    benchmarks = {b.name: b for b in weeks.benchmarks(package)}
    if name not in benchmarks:
        raise KeyError(f"no benchmark {name!r}; {package} has: {', '.join(sorted(benchmarks))}")
    bench = benchmarks[name]
    sizes = {bench.size_label(s): s for s in bench.active_sizes()}
    label = size_label or list(sizes)[-1]
    if label not in sizes:
        raise KeyError(f"{name} has no size {label!r} here; sizes: {', '.join(sizes)}")
    chosen = variants or [v for v in bench.variants if v != "torch"]
    unknown = [v for v in chosen if v not in bench.variants]
    if unknown:
        raise KeyError(f"{name} has no variant(s) {unknown}; variants: {', '.join(bench.variants)}")
    runnable = []
    for variant in chosen:
        if variant in bench.gpu_only and not runtime.on_gpu():
            print(f"{name} {label} {variant}: skipped (needs a GPU)", flush=True)
        else:
            runnable.append(variant)
    inputs = bench.make_inputs(sizes[label])
    _synchronize()
    if warmup:
        for variant in runnable:  # autotuning, compilation, library heuristics: before the range
            bench.variants[variant](*inputs)
            _synchronize()
    profiled = warmup and runtime.on_gpu()
    if profiled:
        torch.cuda.profiler.start()
    for variant in runnable:
        bench.variants[variant](*inputs)
        _synchronize()
        print(f"{name} {label} {variant}: launched", flush=True)
    if profiled:
        torch.cuda.profiler.stop()
    return runnable


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course ncu", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", help="with --launch: the week's package, e.g. week3_triton_kernels")
    parser.add_argument("--launch", metavar="BENCH", help="call each variant of a benchmark once (an ncu driver)")
    parser.add_argument("--size", help="with --launch: the size label (default: the largest)")
    parser.add_argument("--variants", nargs="+", help="with --launch: which variants (default: all but torch)")
    parser.add_argument("--warmup", action="store_true",
                        help="with --launch: call every variant once first; profile the second calls only "
                             "(inside cudaProfilerStart/Stop: ncu --profile-from-start off)")
    parser.add_argument("--table", metavar="CSV", type=Path, help="ncu raw CSV -> markdown table")
    parser.add_argument("--labels", nargs="+", help="with --table: one label per kernel, launch order")
    parser.add_argument("--hopper", action="store_true", help="with --table: the Hopper columns")
    parser.add_argument("--record", metavar="JSON", type=Path,
                        help="with --table: merge the group's figures (both tables) into this results JSON, "
                             "and print the group's section of ncu_hopper.md")
    parser.add_argument("--group", help="with --record: the group's key (e.g. tc_8192)")
    parser.add_argument("--title", default="", help="with --record: what the group profiled")
    parser.add_argument("--meta", nargs="*", default=[], metavar="KEY=VALUE",
                        help="with --record: gpu=..., ncu=..., date=..., how=... kept at the top")
    parser.add_argument("--render", metavar="JSON", type=Path,
                        help="write the ncu_hopper.md matching this results JSON beside it, from the JSON alone")
    parser.add_argument("--sections", nargs="+", metavar="GROUP", default=[],
                        help="with --render: also write ncu_GROUP.md of each group (its tables alone, for a note)")
    args = parser.parse_args(argv)
    if args.render:
        if not args.render.is_file():
            parser.error(f"--render: no such file {args.render}")
        print(f"wrote {render_file(args.render)}")
        for group in args.sections:
            print(f"wrote {render_group_file(args.render, group)}")
        return 0
    if args.table:
        text = args.table.read_text()
        if args.record:
            if not args.group:
                parser.error("--record needs --group")
            meta = dict(item.split("=", 1) for item in args.meta)
            print(render_group(args.group, add_to_record(args.record, args.group, args.title, text, args.labels,
                                                         meta)), end="")
            return 0
        print(hopper_table(text, args.labels) if args.hopper else ncu_table(text, args.labels), end="")
        return 0
    if args.launch:
        if not args.package:
            parser.error("--launch needs --package (the week's package name)")
        launch_benchmark(args.package, args.launch, args.size, args.variants, warmup=args.warmup)
        return 0
    parser.print_help()
    return 2

