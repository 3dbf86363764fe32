"""The fused linears' rounds table (week4_triton_dl/fused_linear/bench.py): its "GPU ms (graph)" column
comes from the record, host-bound rows are marked, and a record made before the flag reads as unknown."""
import json

from week4_triton_dl.fused_linear import bench as fl_bench

ROW = {"size": "plain 8x32x16", "variant": "triton", "ms": 0.5, "ms_min": 0.4, "ms_max": 0.6, "tflops": 1.0,
       "speedup_vs_torch": 1.0, "speedup_min": 0.9, "speedup_max": 1.1, "rounds": 5}
RECORD = {"benchmark": "fused_linear_rounds", "title": "t", "simulated": True, "date": "d",
          "machine": {"torch": "x"}, "ceilings": {}}


def _cells(table: str, variant: str) -> list:
    line = next(row for row in table.splitlines() if f"| {variant} |" in row)
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_a_host_bound_row_shows_its_graph_replay_time_and_the_mark():
    rows = [dict(ROW, host_bound=True, host_ms=0.5, graphed_ms=0.0123),
            dict(ROW, variant="torch", host_bound=False, host_ms=0.1)]
    table = fl_bench.rounds_table(dict(RECORD, rows=rows))
    assert "GPU ms (graph)" in table.splitlines()[2]
    assert _cells(table, "triton")[2:4] == ["0.5000*", "0.0123"]
    assert _cells(table, "torch")[2:4] == ["0.5000", "-"]
    assert "host-bound" in table and "not measured" not in table


def test_a_record_made_before_the_flag_reads_as_unknown():
    table = fl_bench.rounds_table(dict(RECORD, rows=[ROW]))
    assert _cells(table, "triton")[2:4] == ["0.5000", "-"]
    assert "not measured in this record" in table and "\\* host-bound" not in table


def test_the_committed_table_is_the_committed_records():
    results = fl_bench.RESULTS
    record = json.loads((results / "fused_linear_rounds.json").read_text())
    assert (results / "fused_linear_rounds.md").read_text() == fl_bench.rounds_table(record), \
        "regenerate: python -m week4_triton_dl.fused_linear.bench --table"
