"""What `pip install -r requirements.txt` puts on disk, kept in tests/install_size.json for README.

    python -m course install-size            print the sizes of this environment
    python -m course install-size --write    record them (then `python -m course report`)
    python -m course install-size --check    fail if this environment differs by more than 10 %

README says how much a learner's disk must hold, and how much of it is NVIDIA's CUDA libraries
(the nvidia-* wheels PyPI's Linux torch depends on). Typed, that figure was wrong by half; here
it is measured in the environment CI has just installed from PyPI alone, and CI fails when the
installed sizes move away from the record (a new torch, a new dependency).
"""
from __future__ import annotations

import json
import os
import site
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES_FILE = "tests/install_size.json"
TOLERANCE = 0.10  # the same pins install the same wheels; 10 % leaves room for pip's own files


def _bytes(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            file = Path(folder, name)
            if not file.is_symlink():
                total += file.stat().st_size
    return total


def measure() -> dict:
    """Sizes in GB (10^9 bytes) of this environment: all of it, its CUDA libraries, torch, triton."""
    packages = Path(site.getsitepackages()[0])
    gb = lambda n: round(n / 1e9, 2)  # noqa: E731
    return {"environment_gb": gb(_bytes(Path(sys.prefix))),
            "cuda_libraries_gb": gb(sum(_bytes(p) for p in packages.glob("nvidia*") if p.is_dir())),
            "torch_gb": gb(_bytes(packages / "torch")),
            "triton_gb": gb(_bytes(packages / "triton"))}


def load(root: Path = ROOT) -> dict | None:
    path = root / SIZES_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def main(write: bool = False, check: bool = False, root: Path = ROOT) -> int:
    if sys.prefix == sys.base_prefix:
        print("install-size: run it inside the virtual environment that `pip install -r requirements.txt` "
              "made (README's Start here): outside one it would measure the whole Python installation")
        return 1
    sizes = measure()
    for key, value in sizes.items():
        print(f"{value:>8.2f} GB  {key[:-3].replace('_', ' ')}")
    if write:
        record = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                  "python": ".".join(map(str, sys.version_info[:2])), **sizes}
        (root / SIZES_FILE).write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {SIZES_FILE}; now run `python -m course report` to update README")
        return 0
    if check:
        kept = load(root)
        if kept is None:
            print(f"install-size: no {SIZES_FILE}: run `python -m course install-size --write`")
            return 1
        off = {k: (kept.get(k), v) for k, v in sizes.items()
               if not kept.get(k) or abs(v - kept[k]) > TOLERANCE * kept[k]}
        for key, (was, now) in off.items():
            print(f"  {key}: recorded {was} GB, installed {now} GB")
        if off:
            print(f"the installed sizes differ from {SIZES_FILE} by more than {TOLERANCE:.0%}, and README quotes "
                  "them: run `python -m course install-size --write` and `python -m course report`")
            return 1
        print(f"installed sizes match {SIZES_FILE} (within {TOLERANCE:.0%})")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("install-size", help="the installed environment's size, beside tests/install_size.json")
    p.add_argument("--write", action="store_true", help="record this environment's sizes")
    p.add_argument("--check", action="store_true", help="fail if they differ from the record by more than 10 %%")


def command(args) -> int:
    return main(write=args.write, check=args.check)
