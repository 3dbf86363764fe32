"""Execute every lesson notebook headless, as CI does (in simulation on a CPU machine).

    python tools/run_notebooks.py [NOTEBOOK ...]      (default: all week*/ and capstone/ notebooks)

Outputs are not written back: the committed notebooks stay clean. A cell that raises
fails the run, and the failing notebook and cell are printed.
"""
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def main(paths) -> int:
    notebooks = [Path(p).resolve() for p in paths] or sorted(
        p for pattern in ("week*/notebooks/*.ipynb", "capstone/notebooks/*.ipynb") for p in ROOT.glob(pattern))
    failed = 0
    for path in notebooks:
        start = time.time()
        nb = nbformat.read(path, as_version=4)
        try:
            NotebookClient(nb, timeout=600, kernel_name="python3",
                           resources={"metadata": {"path": str(ROOT)}}).execute()
            print(f"ok    {path.relative_to(ROOT)} ({time.time() - start:.0f} s)", flush=True)
        except Exception as error:  # report every notebook, then fail
            failed += 1
            print(f"FAIL  {path.relative_to(ROOT)}: {str(error)[-2000:]}", flush=True)
    print(f"{len(notebooks) - failed} notebooks ran, {failed} failed")
    return 1 if failed or not notebooks else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
