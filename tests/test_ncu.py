"""course/ncu.py: the Hopper table built from a small synthetic `ncu --page raw --csv` export, and
the launch driver's entry point for any week (the week-1 table and driver: tests/week1/test_sanitize.py)."""
import textwrap

import pytest

from course import ncu, runtime

# Two kernels, as ncu 2025 writes them with --print-units base: a wgmma kernel (gmma pipe busy,
# stalls from the WarpStateStats family) and a cuBLAS one that lacks the TMA metric (an empty cell).
HOPPER_CSV = textwrap.dedent('''\
    ==PROF== Disconnected from process 42
    "ID","Kernel Name","gpu__time_duration.sum","launch__grid_size","launch__registers_per_thread","sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active","sm__inst_executed_pipe_tensor_op_gmma.sum","sm__inst_issued.avg.pct_of_peak_sustained_active","sm__warps_active.avg.pct_of_peak_sustained_active","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio","smsp__average_warps_issue_stalled_selected_per_issue_active.ratio","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","smsp__pcsamp_warps_issue_stalled_math_pipe_throttle","dram__bytes_read.sum","dram__bytes_write.sum","dram__bytes.sum.per_second","lts__t_sector_hit_rate.pct","l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum"
    "","","nsecond","","register/thread","%","inst","%","%","","","","","","","byte","byte","byte/second","%","byte"
    "0","wgmma_tma_f16_f16","240,000","512","168","71.5","1,048,576","9.5","18.7","0.5","7.25","1.0","2.5","0.01","900","120,000,000","33,554,432","640,000,000,000","82.25","1,610,612,736"
    "1","nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNN","212,000","132","168","80.1","1,048,576","8.0","18.0","0.25","6.0","1.0","0.5","3.5","","110,000,000","33,554,432","680,000,000,000","85.5",""
''')


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_hopper_table_columns_values_and_missing_metrics():
    lines = ncu.hopper_table(HOPPER_CSV, ["wgmma_tma", "torch"]).strip().splitlines()
    header = cells(lines[0])
    assert header[0] == "kernel" and header[1:] == [c[0] for c in ncu.HOPPER_COLUMNS]  # every column kept
    row = dict(zip(header, cells(lines[2])))
    assert row["kernel"] == "wgmma_tma" and row["time us"] == "240.0" and row["grid"] == "512"
    assert row["tensor pipe busy %"] == "71.5" and row["wgmma inst"] == "1048576"
    assert row["tensor inst (mma.sync + wgmma)"] == "-"  # no such metric in the export: shown, not dropped
    assert row["issue slots busy %"] == "9.5" and row["occupancy achieved %"] == "18.7"
    # the top three of the first stall family present; "selected" is the issuing warp, no stall
    assert row["top stalls (warps per issue)"] == "gmma 7.2, wait 2.5, long_scoreboard 0.5"
    assert row["DRAM MB"] == "154" and row["DRAM GB/s"] == "640" and row["L2 hit %"] == "82.2"
    assert row["TMA load MB"] == "1611"
    torch_row = dict(zip(header, cells(lines[3])))
    assert torch_row["kernel"] == "torch" and torch_row["TMA load MB"] == "-"
    assert torch_row["top stalls (warps per issue)"] == "gmma 6, barrier 3.5, wait 0.5"


def test_hopper_table_stalls_fall_back_to_the_sampler_and_names_to_kernels():
    only_sampled = textwrap.dedent('''\
        "ID","Kernel Name","smsp__pcsamp_warps_issue_stalled_long_scoreboard","smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued","smsp__pcsamp_warps_issue_stalled_math_pipe_throttle"
        "","","","",""
        "0","void flash_fwd_kernel<Flash_fwd_kernel_traits<128>>(Flash_fwd_params)","10","500","30"
    ''')
    lines = ncu.hopper_table(only_sampled, ["a", "b"]).strip().splitlines()
    row = dict(zip(cells(lines[0]), cells(lines[2])))
    assert row["kernel"] == "flash_fwd_kernel<Flash_fwd_kernel_traits<128>>"  # 1 kernel, 2 labels: its name
    assert row["top stalls (warps per issue)"] == "math_pipe_throttle 30, long_scoreboard 10"
    assert "1 kernels profiled but 2 labels given" in lines[-1]


def test_hopper_metrics_are_plain_names_for_ncu():
    assert "sm__inst_executed_pipe_tensor_op_gmma.sum" in ncu.HOPPER_METRICS
    assert all(isinstance(m, str) and "(" not in m for m in ncu.HOPPER_METRICS)


def test_table_command_line(tmp_path, capsys):
    report = tmp_path / "r.csv"
    report.write_text(HOPPER_CSV)
    assert ncu.main(["--table", str(report), "--labels", "wgmma_tma", "torch", "--hopper"]) == 0
    assert "| wgmma_tma | 240.0 |" in capsys.readouterr().out


def test_launch_driver_for_any_week(capsys):
    size = runtime.pick(gpu="2^20", sim="2^10")
    assert ncu.main(["--package", "week1_cuda_python", "--launch", "vector_add_week1", "--size", size,
                     "--variants", "numba", "--warmup"]) == 0
    assert "vector_add_week1 " + size + " numba: launched" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        ncu.main(["--launch", "vector_add_week1"])  # which week's benchmark: --package is required
    with pytest.raises(KeyError, match="no benchmark"):
        ncu.launch_benchmark("week3_triton_kernels", "nope")
