"""What limits the fused roads (issue 32): the course's GEMM kernels are their own kind in a step's profile, the
fused roads' graphed steps are profiled, and the summary reads them against the twin's. No GPU needed: the
profiles are made up (kernel names as the profiler reports them, GPU us per step), the kinds are read from them."""
import json
from pathlib import Path

import pytest

from capstone import measure, step_profile, summary
from capstone.step_profile import COURSE_GEMM, MATMUL, kernel_kind
from tests.capstone.test_measure import pretend_gpu, record
from week1_cuda_python import matmul_wgmma_fused as wf
from week1_cuda_python.matmul_wgmma_persistent import SCHEDULES
from week4_triton_dl import swiglu
from week4_triton_dl.fused_linear import kernel, kernel_tma, prologue_norm

RESULTS = Path(measure.__file__).parent / "results"


def launched_names() -> list[str]:
    """The names the fused roads' GEMMs launch under, from their launchers, not typed here: week 1's
    `kernel_name` for every epilogue, dtype and schedule, and week 4's @triton.jit kernels (a Triton kernel
    runs under its function's name)."""
    week1 = [wf.kernel_name(e, d, s) for e in wf.EPILOGUES for d in wf.DTYPES for s in SCHEDULES]
    week4 = [kernel.fused_linear_kernel.fn.__name__, kernel_tma.fused_linear_tma_kernel.fn.__name__]
    return week1 + week4


def test_the_course_gemms_are_their_own_kind():
    """Every GEMM the fused roads launch is "matmul (course fused GEMM)", SwiGLU's epilogue included (its name
    carries "swiglu", which the SwiGLU kind would take); the kernels around them keep their kinds."""
    for name in launched_names():
        assert kernel_kind(name) == COURSE_GEMM, name
    # read from the sources: every entry point of week 1's wgmma .cu files, the plain and persistent rungs too
    names = step_profile.course_gemm_kernels()
    assert {n.lower() for n in launched_names()} <= set(names)
    assert {"wgmma_persistent_bf16", "wgmma_cluster_f16", "wgmma_pingpong_bf16", "wgmma_tma_bf16_f32"} <= set(names)
    assert "name" not in names  # a macro's #define line is not an entry point
    # the norm prologue's reduction, the SwiGLU backward, cuBLAS and Inductor keep their kinds
    assert kernel_kind(prologue_norm.row_rstd_kernel.fn.__name__) == "normalization"
    assert kernel_kind(swiglu.swiglu_bwd_kernel.fn.__name__) == "RoPE, SwiGLU"
    assert kernel_kind("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT") == MATMUL
    assert kernel_kind("triton_poi_fused__to_copy_add_mul_0") == step_profile.GLUE


def test_course_gemm_names_come_from_entry_points_and_jit_kernels(tmp_path):
    """The reader takes a macro's uses (not its #define) from the .cu files and the @triton.jit functions from
    week 4's kernel*.py; helpers elsewhere (the prologue's row_rstd_kernel) are not GEMMs."""
    cu = tmp_path / "week1_cuda_python" / "kernels"
    cu.mkdir(parents=True)
    (cu / "matmul_wgmma_new.cu").write_text(
        "#define NEW_ENTRY(name, T)  \\\n    extern \"C\" __global__ void name(T* x) {}\n"
        "NEW_ENTRY(wgmma_new_bf16, __nv_bfloat16)\n  NEW_ENTRY(wgmma_new_f16 , __half)\n")
    (cu / "matmul.cu").write_text("MM_ENTRY(not_a_wgmma_rung, float)\n")
    py = tmp_path / "week4_triton_dl" / "fused_linear"
    py.mkdir(parents=True)
    (py / "kernel_new.py").write_text("@triton.jit\ndef new_gemm_kernel(a_ptr):\n    pass\n\n\n"
                                      "def helper():\n    pass\n")
    (py / "prologue_norm.py").write_text("@triton.jit\ndef row_rstd_kernel(x_ptr):\n    pass\n")
    assert step_profile.course_gemm_kernels(tmp_path) == ("new_gemm_kernel", "wgmma_new_bf16", "wgmma_new_f16")


def kernels(ms: dict) -> list[dict]:
    """A profile's kernels ({"kernel", "us_per_step"}) from {kernel name: GPU ms per step}."""
    return [{"kernel": name, "us_per_step": v * 1e3} for name, v in ms.items()]


# Made-up profiles of the graphed steps (GPU ms per step by kernel): the twin runs cuBLAS and Inductor's kernels;
# fast, the course's norm and SwiGLU kernels around the same cuBLAS GEMMs; the wgmma road, week 1's fused GEMMs for
# the up and the proj/down GEMMs (their SwiGLU and residual adds gone), cuBLAS for the rest and the backward.
TWIN = {"nvjet_sm90_tst_a": 8.0, "triton_poi_fused_add_0": 2.0, "triton_per_fused_rms_norm_1": 1.5,
        "cudnn_flash_attention": 2.5, "multi_tensor_apply_kernel_adam": 1.9}
FAST = {"nvjet_sm90_tst_a": 8.4, "triton_poi_fused_add_0": 1.0, "rms_norm_fwd": 1.5, "swiglu_fwd": 0.6,
        "swiglu_bwd": 0.9, "cudnn_flash_attention": 2.5, "multi_tensor_apply_kernel_adam": 1.9}
WGMMA = {"wgmma_linear_swiglu_bf16": 1.8, "wgmma_linear_residual_bf16": 1.2, "nvjet_sm90_tst_a": 6.0,
         "triton_poi_fused_add_0": 0.6, "rms_norm_fwd": 1.5, "swiglu_bwd": 0.9, "cudnn_flash_attention": 2.5,
         "multi_tensor_apply_kernel_adam": 1.91}


def test_fused_road_limits_split_the_gemms_from_what_the_fusions_removed():
    road, fast = step_profile.ms_by_kind(kernels(WGMMA)), step_profile.ms_by_kind(kernels(FAST))
    lim = step_profile.fused_road_limits(road, fast)
    assert lim["gemm"] == pytest.approx(9.0) and lim["course_gemm"] == pytest.approx(3.0)
    assert lim["gemm_added"] == pytest.approx(9.0 - 8.4)
    # the forward's SwiGLU kernel and part of the residual adds gone; the optimizer's 0.01 is noise, not growth
    assert lim["removed"] == pytest.approx({"RoPE, SwiGLU": 0.6, step_profile.GLUE: 0.4})
    assert list(lim["removed"]) == ["RoPE, SwiGLU", step_profile.GLUE] and lim["grew"] == {}
    assert lim["net"] == pytest.approx(sum(WGMMA.values()) - sum(FAST.values()))


def train_record(profiled: tuple[str, ...]) -> dict:
    ms = {"torch": 36.0, "torch.compile": 20.0, "torch.compile+cudagraphs": 19.5, "fast+compile+cudagraphs": 19.1,
          "fused_gemms+compile+cudagraphs": 21.5, "wgmma_gemms+compile+cudagraphs": 19.7}
    profiles = {"torch.compile+cudagraphs": TWIN, "fast+compile+cudagraphs": FAST,
                "wgmma_gemms+compile+cudagraphs": WGMMA,
                "fused_gemms+compile+cudagraphs": {**WGMMA, "fused_linear_kernel": 3.0, "fused_linear_tma_kernel": 1.0}}
    rows = []
    for variant, v in ms.items():
        row = {"size": "s", "variant": variant, "ms": v, "tokens_per_s": 8192 / v * 1e3, "tflops": 6.0 / v * 1e3}
        if variant in profiled:
            row["gpu_kernels"] = kernels(profiles[variant])
            row["gpu_ms_by_kind"] = step_profile.ms_by_kind(row["gpu_kernels"])
        rows.append(row)
    return {**record(rows), "machine": {"gpu": "NVIDIA H100 80GB HBM3 (made up for the test)"}}


def test_summary_says_what_limits_each_profiled_fused_road():
    train = train_record(("torch.compile+cudagraphs", "fast+compile+cudagraphs", "wgmma_gemms+compile+cudagraphs"))
    lines = [line for line in summary.summary_markdown(train, None, None).splitlines() if "fused roads" in line
             or "best figure" in line]
    assert len(lines) == 2  # the wgmma road alone was profiled; then the best figures
    road, best = lines
    assert "wgmma_gemms+compile+cudagraphs against torch.compile+cudagraphs" in road
    assert f"{COURSE_GEMM} 3.00 vs 0.00" in road and f"{MATMUL} 6.00 vs 8.00" in road
    assert "GEMMs course 3.00 + cuBLAS 6.00 = 9.00 ms vs cuBLAS 8.00 ms, the GEMMs added +1.00 ms" in road
    # against fast (the same model unfused): the GEMMs added 0.60, the fusions removed SwiGLU's 0.60 and 0.40 of glue
    assert "GEMMs cuBLAS 8.40 ms, the GEMMs added +0.60 ms; the fusions removed 1.00 ms (RoPE, SwiGLU 0.60" in road
    assert "timed steps 19.70 vs 19.50 ms: 0.99x" in road and road.endswith("| - |")
    # each target's best, named; against the graphed twin only graphed variants count
    assert "1.25x the compiled twin (default mode): fast+compile+cudagraphs 1.05x" in best
    assert "1.15x the twin with the same CUDA graphs: fast+compile+cudagraphs 1.02x" in best
    assert "2.0x the eager twin: fast+compile+cudagraphs 1.88x" in best and "MFU 45%: fast+compile+cudagraphs" in best


def test_without_road_profiles_the_summary_reads_as_before():
    """No profiled road, or no profiled twin: no row, no fused_roads.md."""
    for profiled in (("torch.compile+cudagraphs", "fast+compile+cudagraphs"), ("wgmma_gemms+compile+cudagraphs",)):
        train = train_record(profiled)
        assert "fused roads" not in summary.summary_markdown(train, None, None)
        assert summary.fused_roads_markdown(train) is None


@pytest.mark.parametrize("folder", ["wgmma_gemms", "fused_gemms"])
def test_committed_summaries_render_as_committed(folder, tmp_path):
    """The committed runs (no road profiled) give their committed summary.md byte for byte."""
    for path in (RESULTS / folder).glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    assert measure.main(["--out", str(tmp_path), "--summary-only"]) == 0
    assert (tmp_path / "summary.md").read_text() == (RESULTS / folder / "summary.md").read_text()
    assert not (tmp_path / "fused_roads.md").exists()


def test_summary_only_writes_fused_roads_md(tmp_path):
    train = train_record(tuple(measure.PROFILES))
    (tmp_path / f"{measure.TRAIN_BENCH}.json").write_text(json.dumps(train))
    assert measure.main(["--out", str(tmp_path), "--summary-only"]) == 0
    text = (tmp_path / "fused_roads.md").read_text()
    head = ("| GPU ms per step | torch.compile+cudagraphs | fast+compile+cudagraphs | fused_gemms+compile+cudagraphs | "
            "wgmma_gemms+compile+cudagraphs |")
    assert head in text.splitlines()
    assert f"| {COURSE_GEMM} | 0.00 | 0.00 | 7.00 | 3.00 |" in text  # fused_gemms: 1.8 + 1.2 + 3.0 + 1.0
    assert "| timed step (ms, not profiled) | 19.50 | 19.10 | 21.50 | 19.70 |" in text
    assert text.count("* **") == 2 and "best figure reached" in text
    rows = (tmp_path / "summary.md").read_text().splitlines()
    assert sum("what limits the fused roads" in line for line in rows) == 2


def test_the_fused_roads_graphed_steps_are_profiled(monkeypatch, tmp_path):
    """measure_training profiles each variant of PROFILES to its own file, the two fused roads' graphed steps
    among them, and no other variant (time_training is stood in for: the routing is what is tested)."""
    pretend_gpu(monkeypatch, (9, 0))
    monkeypatch.setattr(measure, "refusal", lambda name: None)
    seen = {}

    def timed(p, ops, *, compile, profile_to=None, name=""):
        seen[name] = profile_to
        return {"ms": 20.0}

    monkeypatch.setattr(measure, "time_training", timed)
    only = ("torch", "torch.compile+cudagraphs", "fast+compile+cudagraphs", "fused_gemms+compile+cudagraphs",
            "wgmma_gemms+compile+cudagraphs", "wgmma_gemms+compile")
    measure.measure_training({**measure.plan(), "compile": True}, tmp_path, deadline=float("inf"), only=only)
    assert seen["fused_gemms+compile+cudagraphs"] == tmp_path / "profile_fused_gemms.md"
    assert seen["wgmma_gemms+compile+cudagraphs"] == tmp_path / "profile_wgmma_gemms.md"
    assert seen["torch.compile+cudagraphs"] == tmp_path / "profile_twin_compiled.md"
    assert seen["torch"] is None and seen["wgmma_gemms+compile"] is None
    assert len(set(measure.PROFILES.values())) == len(measure.PROFILES)


def test_the_runner_measures_what_the_rows_read():
    """The command the README's pending block names (capstone's COURSE runners) trains only known variants, among
    them every graphed step the rows read, and copies fused_roads.md to where the block reads it."""
    from course import weeks

    command = weeks.runner_command("fused_roads")
    measure_part, copy_part = command.split(" && ")
    args = measure_part.split()
    variants = args[args.index("--variants") + 1:]
    assert set(variants) <= {name for name, _, _ in measure.train_variants()}
    assert {summary.TWIN_GRAPHS, summary.FAST_GRAPHS, *summary.FUSED_ROADS} <= set(variants)
    assert set(summary.FUSED_ROADS) | {summary.TWIN_GRAPHS, summary.FAST_GRAPHS} <= set(measure.PROFILES)
    out = args[args.index("--out") + 1]
    assert copy_part.split() == ["cp", f"{out}/fused_roads.md", "capstone/results/"]
