"""Build a lesson notebook from a percent-format script, with the Colab set-up cell first.

    python tools/build_notebook.py lesson.py week1_cuda_python/notebooks/01_vector_add.ipynb
    python tools/build_notebook.py --setup-cells [--check]   rewrite (check) every notebook's first cell

The script marks cells with `# %%` (code) and `# %% [markdown]` (markdown; each line
starts with `# `). Every notebook gets the same first cell, so setting up Colab is
written once, here; `--setup-cells` puts it into the committed notebooks (never edit it there).
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COLAB_CELL = '''\
# Set-up. On Colab (Runtime > Change runtime type > T4 GPU) this fetches the course and installs
# its GPU requirements, about a minute; on your own machine, after `pip install -r
# requirements.txt`, it only says whether your torch/triton are in the range the course supports.
# COURSE_REPO is the git URL you got the course from.
import os, subprocess, sys
if "google.colab" in sys.modules and not os.path.isdir("/content/gpu-kernels-course"):
    repo = os.environ.get("COURSE_REPO", "https://github.com/gpu-kernels-course/gpu-kernels-course")
    subprocess.run(["git", "clone", "-q", repo, "/content/gpu-kernels-course"], check=True)
    # numba-cuda with CUDA bindings of the machine torch's CUDA major (a CUDA 13 runtime does not
    # load on a CUDA 12 driver); requirements-gpu.txt keeps that torch and its triton.
    import torch
    cuda = (torch.version.cuda or "").split(".")[0]
    extra = [f"numba-cuda[cu{cuda}]"] if cuda in ("12", "13") else []
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", "requirements-gpu.txt", *extra],
                   cwd="/content/gpu-kernels-course", check=True)
if "google.colab" in sys.modules:
    os.chdir("/content/gpu-kernels-course")
    sys.path.insert(0, "/content/gpu-kernels-course")
from course import versions  # imports neither torch nor triton: course.runtime still comes first
print(versions.support_line())  # whether this torch/triton is in the range the course supports'''


def notebooks() -> list[Path]:
    return sorted(p for pattern in ("week*/notebooks/*.ipynb", "capstone/notebooks/*.ipynb") for p in ROOT.glob(pattern))


def setup_cells(check: bool) -> int:
    """Make (check) every notebook's first cell COLAB_CELL; 1 if one differed under `check`."""
    stale = []
    for path in notebooks():
        nb = json.loads(path.read_text())
        first = nb["cells"][0]
        if first["cell_type"] == "code" and "".join(first["source"]) == COLAB_CELL:
            continue
        stale.append(path.relative_to(ROOT))
        if not check:
            first.update(cell_type="code", source=COLAB_CELL.splitlines(keepends=True), outputs=[], execution_count=None)
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    for path in stale:
        print(("differs from COLAB_CELL: " if check else "rewrote the set-up cell of ") + str(path))
    return 1 if check and stale else 0


def cells_from_script(text: str):
    import nbformat

    cells, kind, lines = [], None, []

    def flush():
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.splitlines())
        if kind and body:
            cells.append(nbformat.v4.new_markdown_cell(body) if kind == "markdown" else nbformat.v4.new_code_cell(body))

    for line in text.splitlines():
        if line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        else:
            lines.append(line)
    flush()
    return cells


def main(src: str, dst: str) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "accelerator": "GPU", "colab": {"provenance": []}}
    nb.cells = [nbformat.v4.new_code_cell(COLAB_CELL)] + cells_from_script(Path(src).read_text())
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dst)
    print("wrote", dst)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--setup-cells"]:
        sys.exit(setup_cells(check="--check" in sys.argv[2:]))
    main(*sys.argv[1:3])
