"""The kit's two CI checks that need no GPU: `course versions` (the installed torch/triton against
the newest results record) and `course skips` (a CPU run's skips counted from pytest's summary)."""
import json

import pytest

from classroom import cli, skips
from course import versions

MACHINE = {"torch": "2.11.0+cu130", "triton": "3.6.0", "numba": "0.68.0", "numba_cuda": "0.30.4",
           "numpy": "2.4.6", "gpu": "NVIDIA H100 80GB HBM3"}


def write(root, relative, record):
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


@pytest.fixture
def tree(tmp_path):
    """Two weeks and the capstone, with records of several dates and kinds."""
    write(tmp_path, "week1_cuda_python/results/a.json",
          {"date": "2026-11-22 22:51 UTC", "machine": dict(MACHINE, torch="2.10.0+cu128")})
    write(tmp_path, "capstone/results/b.json", {"date": "2026-11-23 09:28 UTC", "machine": dict(MACHINE)})
    # newer, but not a measurement: simulated, or no machine, or a list
    write(tmp_path, "week3_triton_kernels/results/sim.json",
          {"date": "2026-11-24 10:00 UTC", "simulated": True, "machine": dict(MACHINE, torch="9.9")})
    write(tmp_path, "week3_triton_kernels/results/notes.json", {"date": "2026-11-25 10:00 UTC"})
    write(tmp_path, "week3_triton_kernels/results/list.json", [1, 2])
    (tmp_path / "week3_triton_kernels/results/broken.json").write_text("{not json")
    return tmp_path


def test_public_version_drops_the_build_label():
    assert versions.public("2.11.0+cu130") == "2.11.0" == versions.public("2.11.0")
    assert versions.public("3.6.0") == "3.6.0" and versions.public(None) is None


def test_newest_measured_record_wins_across_weeks_and_capstone(tree):
    path, record = versions.newest_record(tree)
    assert path == tree / "capstone/results/b.json" and record["machine"]["torch"] == "2.11.0+cu130"


def test_no_measured_record_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no measured results"):
        versions.newest_record(tmp_path)


@pytest.mark.parametrize("have, problems", [
    ({"torch": "2.11.0+cu130", "triton": "3.6.0"}, []),
    ({"torch": "2.11.0", "triton": "3.6.0"}, []),                      # CPU wheel metadata, same release
    ({"torch": "2.11.0+cpu", "triton": "3.6.0", "numpy": "2.3.5"}, []),  # numpy is shown, not checked
    ({"torch": "2.13.0", "triton": "3.6.0"}, ["torch"]),
    ({"torch": "2.11.0+cu130", "triton": "3.9.0"}, ["triton"]),
    ({"torch": "2.11.0", "triton": None}, ["triton"]),
])
def test_compare_checks_torch_and_triton_only(have, problems):
    found = versions.compare(have, MACHINE)
    assert [line.split()[0] for line in found] == problems


def test_check_fails_naming_the_difference_and_passes_when_equal(tree, capsys):
    assert versions.report(tree, check=True, have={"torch": "2.11.0+cpu", "triton": "3.6.0"}) == 0
    assert "capstone/results/b.json" in capsys.readouterr().out
    assert versions.report(tree, check=True, have={"torch": "2.13.0", "triton": "3.7.1"}) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "torch 2.13.0 is installed, the results were measured with 2.11.0+cu130" in out
    assert versions.report(tree, check=False, have={"torch": "2.13.0", "triton": "3.7.1"}) == 0


def test_cli_versions_on_a_tree_without_results_fails_clearly(tmp_path, capsys):
    assert cli.main(["versions", "--check", "--root", str(tmp_path)]) == 1
    assert "no measured results" in capsys.readouterr().out


def test_this_checkout_was_measured_with_torch_and_triton():
    _, record = versions.newest_record()
    assert record["machine"]["torch"] and record["machine"]["triton"]


# --------------------------------------------------------------------- the supported range
@pytest.mark.parametrize("have, status, words", [
    ({"torch": "2.11.0+cu130", "triton": "3.6.0"}, "measured", "measured with"),
    (dict(versions.NEWEST, torch=versions.NEWEST["torch"] + "+cu130"), "tested", "an end of the supported range"),
    (dict(versions.OLDEST, torch=versions.OLDEST["torch"] + "+cu128"), "tested", "when the range was set"),
    ({"torch": "2.10.0+cu128", "triton": "3.6.0"}, "untested", "not itself tested"),
    ({"torch": "2.8.0+cu126", "triton": "3.4.0"}, "outside", "torch 2.8.0+cu126 is older than the supported"),
    ({"torch": "9.0.0", "triton": "3.6.0"}, "outside", "torch 9.0.0 is newer than the supported"),
    ({"torch": "2.11.0", "triton": "99.1"}, "outside", "triton 99.1 is newer"),
    ({"torch": "2.16.0.dev20261201+cu130", "triton": "3.6.0"}, "outside", "newer"),
    ({"torch": "nightly", "triton": "3.6.0"}, "outside", "not a version this course can read"),
    ({"torch": "2.11.0", "triton": None}, "absent", "triton not installed"),
])
def test_support_says_where_the_installed_pair_stands(have, status, words):
    found, sentence = versions.support(have, MACHINE)
    assert found == status and words in sentence, sentence
    if status == "outside":
        assert "OUTSIDE the supported range" in sentence and "Which PyTorch" in sentence


def test_the_range_runs_from_oldest_to_newest_and_each_end_says_why():
    for name in ("torch", "triton"):
        assert versions.release(versions.OLDEST[name]) <= versions.release(MACHINE[name]) <= versions.release(
            versions.NEWEST[name])
    assert "CUDA 12" in versions.OLDEST_WHY and "PyPI" in versions.NEWEST_WHY
    assert versions.release("3.9") == (3, 9, 0) and versions.release("2.15.0+cu130") == (2, 15, 0)


def test_info_and_versions_print_the_support_line(capsys):
    assert cli.main(["info"]) == 0
    assert "versions: torch " in capsys.readouterr().out
    assert cli.main(["versions", "--newest"]) == 0
    assert capsys.readouterr().out.split() == [f"{k}=={v}" for k, v in versions.NEWEST.items()]


def test_readme_states_the_supported_range_of_versions_py():
    readme = (versions.ROOT / "README.md").read_text()
    section = readme[readme.index("### Which PyTorch"):][:2500]
    for end in (versions.OLDEST, versions.NEWEST):
        assert f"torch {end['torch']}" in section and f"triton {end['triton']}" in section


def test_every_notebook_starts_with_the_generated_setup_cell():
    """The set-up cell (Colab install, then the support line) is tools/build_notebook.py's
    COLAB_CELL in every notebook: `python tools/build_notebook.py --setup-cells` rewrites them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_notebook", versions.ROOT / "tools/build_notebook.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert build.notebooks() and build.setup_cells(check=True) == 0
    assert "versions.support_line()" in build.COLAB_CELL


def test_gpu_requirements_keep_the_machines_torch_and_pull_no_cuda_runtime():
    """requirements-gpu.txt names no torch/triton pin and no CUDA runtime wheel: the machine's
    torch (and its CUDA) stays; numba-cuda's bindings come with the extra of that torch's CUDA
    major (the set-up cell adds it; README says how by hand)."""
    lines = [line.split("#")[0].strip() for line in (versions.ROOT / "requirements-gpu.txt").read_text().splitlines()]
    names = [line for line in lines if line]
    assert not [n for n in names if n.split("[")[0].split("=")[0].split("<")[0].split(">")[0].strip().lower()
                in ("torch", "triton")
                or (n.lower().startswith(("nvidia-", "cuda-")) and n != "nvidia-ml-py")], names  # NVML: pure Python
    assert not [n for n in names if n.startswith("numba-cuda[")], "the cu12/cu13 extra depends on the machine"


def test_descriptor_refusal_names_the_strides_and_the_way_out(monkeypatch):
    monkeypatch.setattr(versions, "interpreter_descriptor_limitation", lambda: None)  # a GPU, or Triton >= 3.6
    versions.refuse_unsimulated_descriptors("k", "use x", (20, 1))
    monkeypatch.setattr(versions, "interpreter_descriptor_limitation", lambda: "LIMIT")
    versions.refuse_unsimulated_descriptors("k", "use x", [32, 1], (16, 1), [7])  # 1-D: no row stride
    with pytest.raises(RuntimeError, match=r"^k: LIMIT. Strides \(20, 1\) here; use x$"):
        versions.refuse_unsimulated_descriptors("k", "use x", [32, 1], [20, 1])


# ------------------------------------------------------------------------------ skips
LOG = """\
........ss
=========================== short test summary info ============================
SKIPPED [309] tests/week1/test_vector_add.py:59: needs a real NVIDIA GPU (a PyCUDA launch needs the CUDA driver); this run simulates on the CPU
SKIPPED [2] tests/week1/test_matmul.py:91: needs a real NVIDIA GPU (a PyCUDA launch needs the CUDA driver); this run simulates on the CPU
SKIPPED [430] tests/week3/test_softmax.py:40: needs a real NVIDIA GPU (bf16 rounding inside kernels: the interpreter computes bf16 in float32); this run simulates on the CPU
SKIPPED [4] tests/week4/test_rmsnorm.py:222: needs a real NVIDIA GPU (rows of 20k-32k columns take minutes in the interpreter); this run simulates on the CPU
SKIPPED [1] tests/week4/test_autotuning.py:9: needs a real NVIDIA GPU (timing configs needs the device clock); this run simulates on the CPU
SKIPPED [9] tests/week2/test_x.py:22: needs a real NVIDIA GPU (CUDA graphs capture CUDA kernels); this run simulates on the CPU
SKIPPED [1] tests/week3/test_access_patterns.py:194: this Triton still has tl.make_block_ptr
SKIPPED [1] tests/week5/test_y.py:1: something new
FAILED tests/week4/test_z.py::test_q - AssertionError: no
====== 1 failed, 2895 passed, 757 skipped, 15 warnings, 2 errors in 367.52s (0:06:07) ======
"""


def test_parse_counts_each_reason_over_its_files():
    parsed = skips.parse(LOG)
    assert parsed["totals"] == {"failed": 1, "passed": 2895, "skipped": 757, "warnings": 15, "errors": 2}
    assert parsed["seconds"] == 367.52
    pycuda = next(e for e in parsed["reasons"] if "PyCUDA launch" in e["reason"])
    assert pycuda["tests"] == 311
    assert pycuda["files"] == ["tests/week1/test_matmul.py", "tests/week1/test_vector_add.py"]
    assert sum(e["tests"] for e in parsed["reasons"]) == 757


def test_reasons_fall_into_categories_and_the_rest_is_other():
    counts = dict(skips.by_category(skips.parse(LOG)))
    assert counts == {
        "PyCUDA launches of the CUDA C kernels": 311,
        "bf16 (rounding inside kernels, which simulation computes in float32; bf16 autocast)": 430,
        "sizes too slow to simulate (long rows and sequences, torch.compile of whole models)": 4,
        "timing, autotuning, profiling, GPU memory": 1,
        "CUDA graphs and streams, NCCL, cuBLAS/cuDNN, CUDA extensions, compute-sanitizer": 9,
        "not hardware: depends on the Triton version": 1,
        skips.OTHER: 1,
    }


def test_every_reason_in_the_suite_has_a_category():
    record = skips.load()
    assert record is not None, "tests/skips_cpu.json is missing: `python -m course skips LOG --write`"
    assert [e["reason"] for e in record["reasons"] if e["category"] == skips.OTHER] == []
    assert all(skips.category(e["reason"]) == e["category"] for e in record["reasons"])


def test_skips_check_fails_on_a_changed_count_and_write_fixes_it(tmp_path, capsys):
    log = tmp_path / "pytest.log"
    log.write_text(LOG)
    (tmp_path / "tests").mkdir()
    assert skips.main(log, tmp_path) == 1  # nothing recorded yet
    assert skips.main(log, tmp_path, write=True) == 0
    assert skips.main(log, tmp_path) == 0
    log.write_text(LOG.replace("SKIPPED [430]", "SKIPPED [431]"))
    capsys.readouterr()
    assert skips.main(log, tmp_path) == 1
    out = capsys.readouterr().out
    assert "430 -> 431" in out and "--write" in out


def test_skips_check_fails_when_the_passed_count_moves(tmp_path, capsys):
    """README quotes the recorded run's passed count: a run that passes more (a test added) must
    send the developer to --write, or README's count goes stale."""
    log = tmp_path / "pytest.log"
    log.write_text(LOG)
    (tmp_path / "tests").mkdir()
    assert skips.main(log, tmp_path, write=True) == 0
    passed = skips.load(tmp_path)["totals"]["passed"]
    log.write_text(LOG.replace(f"{passed} passed", f"{passed + 1} passed"))
    capsys.readouterr()
    assert skips.main(log, tmp_path) == 1
    assert f"{passed} -> {passed + 1}" in capsys.readouterr().out


def test_a_log_without_totals_is_refused(tmp_path, capsys):
    log = tmp_path / "pytest.log"
    log.write_text("SKIPPED [1] tests/a.py:1: why\n")
    assert skips.main(log, tmp_path) == 1
    assert "no pytest totals line" in capsys.readouterr().out
