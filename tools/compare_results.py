"""Does a re-run reproduce the committed tables? New/old time per (benchmark, size, variant).

    python tools/compare_results.py OLD_DIR NEW_DIR [--out FILE.md] [--band 0.15]

Both folders hold `course bench` records (results/*.json). For every benchmark in both, the ratio
new ms / old ms of each row the two share: its median, extremes, and the rows outside the band
(default +-15%), each with its clock (events: GPU time; wall: host cost per call), because a
host-bound row moves with the machine's CPU, not with the kernel. Variants only in the new run
are listed (a rung added since). The markdown is generated from the files, never typed.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path


def records(folder: Path) -> dict:
    found = {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "benchmark" in data and isinstance(data.get("rows"), list):
            found[data["benchmark"]] = data
    return found


def compare(old_dir: Path, new_dir: Path, band: float = 0.15) -> str:
    old, new = records(old_dir), records(new_dir)
    lines = [f"# Re-run against the committed tables: {new_dir} vs {old_dir}", "",
             f"new ms / old ms per row both runs have; rows outside +-{band:.0%} listed under the table.", "",
             "| benchmark | old run | new run | rows | median | min | max | outside band | new variants |",
             "|---|---|---|---|---|---|---|---|---|"]
    outside_rows = []
    for name in sorted(set(old) & set(new)):
        o = {(r["size"], r["variant"]): r for r in old[name]["rows"] if "ms" in r}
        pairs = [(r, o[(r["size"], r["variant"])]) for r in new[name]["rows"]
                 if "ms" in r and (r["size"], r["variant"]) in o]
        added = sorted({r["variant"] for r in new[name]["rows"]} - {v for _, v in o})
        if not pairs:
            continue
        ratios = [n["ms"] / p["ms"] for n, p in pairs]
        out = [(n, p, n["ms"] / p["ms"]) for n, p in pairs if abs(math.log(n["ms"] / p["ms"])) > math.log(1 + band)]
        outside_rows += [(name, new[name].get("clock", "events"), *row) for row in out]
        lines.append(f"| {name} | {old[name].get('date', '?')} | {new[name].get('date', '?')} | {len(ratios)} | "
                     f"{statistics.median(ratios):.2f} | {min(ratios):.2f} | {max(ratios):.2f} | {len(out)} | "
                     f"{', '.join(added) or '-'} |")
    only_new = sorted(set(new) - set(old))
    if only_new:
        lines += ["", "Only in the new run (nothing to compare): " + ", ".join(only_new)]
    if outside_rows:
        lines += ["", "| benchmark | clock | size | variant | old ms | new ms | new/old |", "|---|---|---|---|---|---|---|"]
        for name, clock, n, p, ratio in outside_rows:
            lines.append(f"| {name} | {clock} | {n['size']} | {n['variant']} | {p['ms']:.4f} | {n['ms']:.4f} | "
                         f"{ratio:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--band", type=float, default=0.15)
    args = parser.parse_args(argv)
    text = compare(args.old, args.new, args.band)
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
