"""classroom/ncu.py: the Hopper table built from a small synthetic `ncu --page raw --csv` export, the
results record both tables and ncu_hopper.md are made from, and the launch driver's entry point for any week (the week-1 table and driver: tests/week1/test_sanitize.py)."""
import json
import textwrap
from pathlib import Path

import pytest

from classroom import ncu
from course import runtime

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


def test_record_holds_the_table_figures_as_numbers():
    # The figures are read once into the record; the table is rendered from it, so the two agree.
    record = ncu.hopper_record(HOPPER_CSV, ["wgmma_tma", "torch"])
    assert list(record) == ["wgmma_tma", "torch"]  # launch order, not sorted
    wgmma = record["wgmma_tma"]
    assert wgmma["time_us"] == 240.0 and wgmma["grid"] == 512.0 and wgmma["dram_mb"] == 154.0
    assert wgmma["l2_hit_pct"] == 82.2 and wgmma["tma_load_mb"] == 1611.0
    assert wgmma["top_stalls_warps_per_issue"] == "gmma 7.2, wait 2.5, long_scoreboard 0.5"
    assert "tensor_inst_mma_sync_wgmma" not in wgmma and "tma_load_mb" not in record["torch"]  # missing: no entry
    table = ncu.render_table(record, ncu.HOPPER_COLUMNS, keep_empty=True)
    assert table == ncu.hopper_table(HOPPER_CSV, ["wgmma_tma", "torch"])


def test_same_kernel_twice_keeps_both_rows():
    twice = HOPPER_CSV.replace('"1","nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNN"', '"1","wgmma_tma_f16_f16"')
    record = ncu.hopper_record(twice)
    assert list(record) == ["wgmma_tma_f16_f16", "wgmma_tma_f16_f16 #2"]


def test_record_and_render_from_the_json_alone(tmp_path, capsys):
    report, results = tmp_path / "r.csv", tmp_path / "ncu_hopper.json"
    report.write_text(HOPPER_CSV)
    for group in ("tc_4096", "tc_2048"):  # groups stay in the order they ran
        assert ncu.main(["--table", str(report), "--labels", "wgmma_tma", "torch", "--record", str(results),
                         "--group", group, "--title", f"matmul at {group}", "--meta", "gpu=H100", "ncu=2025.3",
                         "date=today", "how=bash tools/ncu_hopper.sh"]) == 0
    printed = capsys.readouterr().out  # each call prints its group's section
    assert printed.startswith("## tc_4096: matmul at tc_4096\n") and "\n## tc_2048: matmul at tc_2048\n" in printed
    record = json.loads(results.read_text())
    assert list(record["groups"]) == ["tc_4096", "tc_2048"] and record["gpu"] == "H100"
    assert record["groups"]["tc_4096"]["kernels"]["torch"]["grid"] == 132.0  # the notes' path
    assert ncu.main(["--render", str(results)]) == 0
    md = (tmp_path / "ncu_hopper.md").read_text()
    assert md.startswith("# Nsight Compute") and "H100, ncu 2025.3, today" in md
    assert md.index("## tc_4096") < md.index("## tc_2048")
    # both tables, exactly as made from the CSV
    assert md.count(ncu.hopper_table(HOPPER_CSV, ["wgmma_tma", "torch"])) == 2
    assert md.count(ncu.ncu_table(HOPPER_CSV, ["wgmma_tma", "torch"])) == 2
    with pytest.raises(SystemExit):
        ncu.main(["--render", str(tmp_path / "missing.json")])


def test_committed_markdown_is_rendered_from_its_json():
    # Each week's results/ncu_hopper.md is `python -m course ncu --render results/ncu_hopper.json`.
    found = sorted(Path(__file__).resolve().parent.parent.glob("week*/results/ncu_hopper.json"))
    assert found
    for path in found:
        assert ncu.render_record(json.loads(path.read_text())) == path.with_suffix(".md").read_text(), path


def test_record_keeps_every_stall_reason_as_a_number():
    # A note cites a stall as a figure (path=groups.G.kernels.K.stalls.barrier): the text column can't be read.
    record = ncu.hopper_record(HOPPER_CSV, ["wgmma_tma", "torch"])
    assert record["wgmma_tma"]["stalls"] == {"gmma": 7.25, "wait": 2.5, "long_scoreboard": 0.5, "barrier": 0.01}
    assert record["torch"]["stalls"]["barrier"] == 3.5 and "selected" not in record["torch"]["stalls"]
    assert "stalls" not in ncu.ncu_record(HOPPER_CSV, ["wgmma_tma", "torch"])["torch"]  # no stalls column there
    assert ncu.render_table(record, ncu.HOPPER_COLUMNS, keep_empty=True) == ncu.hopper_table(HOPPER_CSV,
                                                                                             ["wgmma_tma", "torch"])


def test_a_later_run_adds_its_groups_and_the_earlier_ones_keep_their_date(tmp_path):
    # tools/ncu_hopper.sh starts from the committed record: its groups stay, stamped with their own run.
    results = tmp_path / "ncu_hopper.json"
    ncu.add_to_record(results, "fa_4096", "old", HOPPER_CSV, ["a", "b"], {"gpu": "H100 #1", "date": "day 1"})
    ncu.add_to_record(results, "fah_4096", "new", HOPPER_CSV, ["a", "b"], {"gpu": "H100 #2", "date": "day 2"})
    record = json.loads(results.read_text())
    assert list(record["groups"]) == ["fa_4096", "fah_4096"] and record["date"] == "day 2"
    assert record["groups"]["fa_4096"]["date"] == "day 1" and record["groups"]["fa_4096"]["gpu"] == "H100 #1"
    assert record["groups"]["fah_4096"]["date"] == "day 2"
    md = ncu.render_record(record)
    assert "## fa_4096: old\n\n_H100 #1, day 1_\n" in md and "## fah_4096: new\n\n_H100 #2, day 2_\n" in md
    ncu.add_to_record(results, "fa_4096", "again", HOPPER_CSV, ["a", "b"], {"gpu": "H100 #2", "date": "day 2"})
    again = json.loads(results.read_text())
    assert list(again["groups"]) == ["fa_4096", "fah_4096"] and again["groups"]["fa_4096"]["date"] == "day 2"


def test_a_groups_own_file_holds_its_tables_for_a_note(tmp_path, capsys):
    results = tmp_path / "ncu_hopper.json"
    ncu.add_to_record(results, "fah_4096", "attention at S=4096", HOPPER_CSV, ["hopper", "sdpa_cudnn"],
                      {"gpu": "H100", "date": "today"})
    assert ncu.main(["--render", str(results), "--sections", "fah_4096"]) == 0
    text = (tmp_path / "ncu_fah_4096.md").read_text()
    assert text.startswith("**fah_4096: attention at S=4096**\n\n_H100, today_\n\n")  # no heading: it sits in a note
    assert ncu.hopper_table(HOPPER_CSV, ["hopper", "sdpa_cudnn"]) in text
    assert "wrote" in capsys.readouterr().out and (tmp_path / "ncu_hopper.md").is_file()
    with pytest.raises(KeyError, match="no group 'nope'"):
        ncu.main(["--render", str(results), "--sections", "nope"])


def test_committed_group_files_are_rendered_from_their_json():
    # results/ncu_GROUP.md (what a note's results block includes) is `--render ... --sections GROUP`.
    for path in sorted(Path(__file__).resolve().parent.parent.glob("week*/results/ncu_hopper.json")):
        for group, entry in json.loads(path.read_text())["groups"].items():
            md = ncu.group_file(path, group)
            if md.is_file():
                assert ncu.render_group(group, entry, heading="") == md.read_text(), md


def test_a_group_keeps_the_extras_a_reading_needs_and_renders_them():
    # The tensor pipe's busy % counts active cycles only: the SMs idle in a last wave show in `extra`,
    # beside each replay's clock and the L2 read requests (a TMA row straddling two lines: two requests).
    names = ("sm__cycles_active.avg", "sm__cycles_elapsed.avg", "sm__cycles_elapsed.avg.per_second",
             "gpc__cycles_elapsed.max", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
             "lts__t_requests_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum")
    rows = HOPPER_CSV.splitlines()
    extra_csv = "\n".join([rows[0], rows[1] + "," + ",".join(f'"{n}"' for n in names),
                           rows[2] + ',"cycle","cycle","hz","cycle","%","request","sector"',
                           rows[3] + ',"70,000","100,000","1,730,000,000","101,000","76.84","2,000,000","4,000,000"',
                           rows[4] + ',"95,000","100,000","1,600,000,000","99,500","60","1,000,000","4,000,000"'])
    entry = ncu.group_record(extra_csv, ["wgmma_tma", "torch"], "matmul")
    ours, blas = entry["extra"]["wgmma_tma"], entry["extra"]["torch"]
    assert ours == {"kernel_name": "wgmma_tma_f16_f16", "sms_active_pct": 70.0, "sm_clock_ghz": 1.73,
                    "elapsed_kcycles": 101.0, "l2_throughput_pct": 76.8, "l2_read_requests_m": 2.0,
                    "l2_sectors_per_read_request": 2.0}
    assert blas["kernel_name"].startswith("nvjet_hsh_256x128") and blas["l2_sectors_per_read_request"] == 4.0
    assert entry["kernels"] == ncu.hopper_record(HOPPER_CSV, ["wgmma_tma", "torch"])  # the tables unchanged
    text = ncu.render_group("tc_4096", entry)
    assert "the record's `extra`" in text and "| wgmma_tma | wgmma_tma_f16_f16 | 70.0 | 1.73 | 101 |" in text
    # an export without them (an older run, a small --metrics list): no extra, no third table
    bare = ncu.group_record(HOPPER_CSV, ["wgmma_tma", "torch"], "matmul")
    assert "extra" not in bare and "extra" not in ncu.render_group("tc_4096", bare)
    assert "sm__cycles_active.avg" in ncu.HOPPER_METRICS and "Kernel Name" not in ncu.HOPPER_METRICS
