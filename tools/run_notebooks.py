"""Execute every lesson notebook headless, as CI does (in simulation on a CPU machine).

    python tools/run_notebooks.py [--jobs N] [NOTEBOOK ...]   (default: all week*/ and capstone/ notebooks)

Outputs are not written back: the committed notebooks stay clean. A cell that raises
fails the run, and the failing notebook and cell are printed. `--jobs N` runs N notebooks at a
time, each in its own kernel process (CI: one per core).
"""
import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def execute(path: Path) -> tuple[bool, str]:
    """Run one notebook in a fresh kernel: (ok, the line to print)."""
    start = time.time()
    nb = nbformat.read(path, as_version=4)
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(ROOT)}}).execute()
        return True, f"ok    {path.relative_to(ROOT)} ({time.time() - start:.0f} s)"
    except Exception as error:  # report every notebook, then fail
        return False, f"FAIL  {path.relative_to(ROOT)}: {str(error)[-2000:]}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run at a time (default 1)")
    parser.add_argument("notebooks", nargs="*")
    args = parser.parse_args(argv)
    notebooks = [Path(p).resolve() for p in args.notebooks] or sorted(
        p for pattern in ("week*/notebooks/*.ipynb", "capstone/notebooks/*.ipynb") for p in ROOT.glob(pattern))
    failed = 0
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        for ok, line in pool.map(execute, notebooks):  # printed in order, each as its turn comes
            failed += not ok
            print(line, flush=True)
    print(f"{len(notebooks) - failed} notebooks ran, {failed} failed")
    return 1 if failed or not notebooks else 0


if __name__ == "__main__":
    sys.exit(main())
