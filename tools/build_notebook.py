"""Build a lesson notebook from a percent-format script, with the Colab set-up cell first.

    python tools/build_notebook.py lesson.py week1_cuda_python/notebooks/01_vector_add.ipynb

The script marks cells with `# %%` (code) and `# %% [markdown]` (markdown; each line
starts with `# `). Every notebook gets the same first cell, so setting up Colab is
written once, here.
"""
import sys
from pathlib import Path

import nbformat

COLAB_CELL = '''\
# Set-up. On Colab (Runtime > Change runtime type > T4 GPU) this fetches the course and installs
# its GPU requirements, about a minute; on your own machine, after `pip install -r
# requirements.txt`, it does nothing. COURSE_REPO is the git URL you got the course from.
import os, subprocess, sys
if "google.colab" in sys.modules and not os.path.isdir("/content/gpu-kernels-course"):
    repo = os.environ.get("COURSE_REPO", "https://github.com/gpu-kernels-course/gpu-kernels-course")
    subprocess.run(["git", "clone", "-q", repo, "/content/gpu-kernels-course"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", "requirements-gpu.txt"],
                   cwd="/content/gpu-kernels-course", check=True)
if "google.colab" in sys.modules:
    os.chdir("/content/gpu-kernels-course")
    sys.path.insert(0, "/content/gpu-kernels-course")'''


def cells_from_script(text: str):
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
    main(*sys.argv[1:3])
