"""tools/ncu_hopper.sh's ws_* groups (issue 32's GEMM schedules under ncu), on the CPU: each names the
week's registered benchmark (matmul_wgmma_persistent_bench.BENCHMARKS), one of its sizes and its
variants once each beside cuBLAS; the ncu driver reaches the benchmark; the week registers the command
that measures each group and the persistent note includes each group's table.
"""
import re

import torch

from classroom import ncu
from course import weeks
from week1_cuda_python import matmul_wgmma_persistent_bench as wpb

ROOT = weeks.ROOT
GROUPS = ("ws_5000", "ws_4096", "ws_fc2", "ws_fc", "ws_head", "ws_head_dx")


def ncu_groups() -> dict[str, tuple[str, ...]]:
    text = (ROOT / "tools" / "ncu_hopper.sh").read_text()
    table = re.search(r"^GROUPS_TABLE='\n(.*?)^'", text, re.M | re.S).group(1)
    return {line.split(";")[0]: tuple(line.split(";")[1:]) for line in table.splitlines() if line.strip()}


def test_every_schedule_group_names_the_registered_benchmark_a_size_and_its_variants():
    groups = ncu_groups()
    assert set(GROUPS) <= set(groups)
    bench = {b.name: b for b in weeks.benchmarks("week1_cuda_python")}["matmul_wgmma_shapes_week1"]
    labels = {bench.size_label(s) for s in bench.sizes}
    for name in GROUPS:
        package, bench_name, size, variants = groups[name]
        variants = variants.split()
        assert (package, bench_name) == ("week1_cuda_python", "matmul_wgmma_shapes_week1"), name
        assert size in labels and size.endswith(" bfloat16"), (name, size)
        assert len(set(variants)) == len(variants) and set(variants) <= set(bench.variants), (name, variants)
        # both schedules beside cuBLAS, cuBLAS last (the table's row order is the launch order)
        assert {"wgmma_persistent", "wgmma_pingpong"} <= set(variants) and variants[-1] == "torch", name
    assert "wgmma_cluster" in groups["ws_5000"][3].split()  # the best rung at the open gap
    sizes = {name: groups[name][2] for name in GROUPS}
    assert sizes["ws_5000"] == "5000x3000x4000 bfloat16" and sizes["ws_head_dx"] == "8192x768x50304 bfloat16"


def test_the_benchmark_runs_the_bench_modules_variants_and_counts_the_problem():
    bench = next(b for b in wpb.BENCHMARKS if b.name == "matmul_wgmma_shapes_week1")
    # here (no GPU: capability None) every sm_90a row is listed and gpu_only, as on an H100
    assert set(bench.variants) == {"torch", "wgmma_persistent", "wgmma_cluster", "wgmma_pingpong"}
    assert set(bench.gpu_only) == set(bench.variants) - {"torch"}
    assert all(bench.variants[v] is wpb.VARIANTS[v] for v in bench.variants)
    size = ((5000, 3000, 4000), torch.bfloat16)
    assert bench.flops(size) == 2 * 5000 * 3000 * 4000
    assert bench.bytes(size) == 2 * (5000 * 4000 + 4000 * 3000 + 5000 * 3000)
    assert bench.size_label(size) == wpb.size_label(*size)


def test_the_ncu_driver_reaches_it_and_leaves_the_gpu_rows_to_a_gpu(capsys):
    ran = ncu.launch_benchmark("week1_cuda_python", "matmul_wgmma_shapes_week1",
                               variants=["wgmma_persistent", "wgmma_pingpong", "torch"], warmup=True)
    assert ran == ["torch"]
    out = capsys.readouterr().out
    assert "wgmma_pingpong: skipped (needs a GPU)" in out and "torch: launched" in out


def test_the_week_names_the_command_and_the_note_includes_every_group():
    week = weeks.resolve("week1")
    note = (ROOT / "week1_cuda_python" / "notes" / "matmul_wgmma_persistent.md").read_text()
    for name in GROUPS:
        command = week.runner(f"ncu_{name}")
        assert command == "bash tools/ncu_hopper.sh " + " ".join(GROUPS), name
        assert f"<!-- results:ncu_{name}.md -->" in note, name
    assert "BUDGET=540 bash tools/ncu_hopper.sh " + " ".join(GROUPS) in note
