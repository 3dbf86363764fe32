"""Figures in prose (classroom/figures.py): a measured number in a note's sentence is read from its
results file by `python -m course report`, and `report --check` fails once it is stale."""
import json

import pytest

from classroom import cli, figures

RECORD = {"benchmark": "fake_host", "simulated": False, "rows": [
    {"size": "8x50304", "variant": "torch", "ms": 0.0259, "tflops": None},
    {"size": "8x50304", "variant": "triton", "ms": 0.0345, "tflops": None},
    {"size": "1k", "variant": "torch", "ms": 1.0, "tflops": 500.0},
    {"size": "1k", "variant": "triton", "ms": 0.8, "tflops": 405.4},
    {"size": "4k", "variant": "triton", "ms": 0.7, "tflops": 484.6},
    {"size": "B=1, context 960+64", "variant": "triton", "ms": 0.635, "tflops": None},
]}


@pytest.mark.parametrize("spec, text", [
    ("fake variant=triton field=ms over=torch size=8x50304", "1.33"),
    ("fake variant=triton field=ms size=8x50304 scale=1000 fmt=.1f", "34.5"),
    ("fake variant=triton field=tflops", "405-485"),           # every measured size: a range
    ("fake variant=triton field=tflops agg=max", "485"),
    ("fake variant=triton field=tflops size=1k,4k agg=min", "405"),
    ("fake variant=triton field=tflops over=torch", "0.81"),   # 4k has no torch row: left out
    ("summary path=steps.1.loss fmt=.3f", "2.500"),
    ("summary path=err.torch.float16 fmt=.1e", "3.5e-04"),      # a key with a dot in it
    ('fake variant=triton field=ms size="B=1, context 960+64" fmt=.3f', "0.635"),  # ", " is inside a size
])
def test_a_spec_reads_its_number(spec, text):
    record = ({"steps": [{"loss": 3.0}, {"loss": 2.5}], "err": {"torch.float16": 3.5e-4, "torch": {"x": 1.0}}}
              if spec.startswith("summary") else RECORD)
    assert figures.render(record, spec) == text


@pytest.mark.parametrize("spec, message", [
    ("fake variant=cuda field=ms size=1k", "no row of variant 'cuda'"),
    ("fake variant=triton field=gbps", "no field 'gbps'"),
    ("fake variant=triton", "needs variant= and field="),
    ("fake variant=triton field=ms colour=red", "unknown word 'colour=red'"),
    ("fake path=rows.0.size", "not a number"),
])
def test_a_spec_that_reads_nothing_says_why(spec, message):
    with pytest.raises(ValueError, match=message):
        figures.render(RECORD, spec)


@pytest.fixture
def tree(tmp_path):
    week = tmp_path / "week4_triton_dl"
    (week / "results").mkdir(parents=True)
    (week / "results" / "fake_host.json").write_text(json.dumps(RECORD))
    (week / "notes").mkdir()
    return tmp_path


def report(root, *flags):
    return cli.main(["report", "--root", str(root), *flags])


def test_report_fills_a_figure_and_check_fails_when_its_results_change(tree, capsys):
    note = tree / "week4_triton_dl" / "notes" / "cross_entropy.md"
    note.write_text("Host cost <!-- fig fake_host variant=triton field=ms over=torch size=8x50304 -->"
                    "9.99<!-- /fig -->x torch's, and ``` in a line is not a fence.\n")
    assert report(tree, "--check") == 1                  # typed 9.99: not what the file says
    assert report(tree) == 0
    assert "-->1.33<!-- /fig -->x torch's" in note.read_text()
    assert report(tree, "--check") == 0
    record = json.loads((tree / "week4_triton_dl/results/fake_host.json").read_text())
    record["rows"][1]["ms"] = 0.0518                     # a re-run: the prose figure is now stale
    (tree / "week4_triton_dl/results/fake_host.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert report(tree, "--check") == 1
    assert "week4_triton_dl/notes/cross_entropy.md" in capsys.readouterr().out
    assert report(tree) == 0 and "-->2.00<!-- /fig -->" in note.read_text()


def test_another_weeks_results_and_figures_in_code_fences_and_spans(tree):
    (tree / "week3_triton_kernels").mkdir()
    note = tree / "week3_triton_kernels" / "notes.md"
    example = ("```\n<!-- fig fake_host variant=triton field=ms --><!-- /fig -->\n```\n"
               "written `<!-- fig NAME variant=V field=F -->` and `<!-- /fig -->`\n")
    other = dict(RECORD, rows=[dict(r, tflops=r["tflops"] and r["tflops"] / 2) for r in RECORD["rows"]])
    (tree / "week4_triton_dl/results/fake_half.json").write_text(json.dumps(other))
    note.write_text("peak <!-- fig week4/fake_host variant=triton field=tflops agg=max --><!-- /fig --> "
                    "TFLOP/s, both <!-- fig week4/fake_host+week4/fake_half variant=triton field=tflops -->"
                    "<!-- /fig -->\n" + example)
    assert report(tree) == 0
    assert note.read_text() == ("peak <!-- fig week4/fake_host variant=triton field=tflops agg=max -->485"
                                "<!-- /fig --> TFLOP/s, both <!-- fig week4/fake_host+week4/fake_half "
                                "variant=triton field=tflops -->203-485<!-- /fig -->\n" + example)


@pytest.mark.parametrize("text, message", [
    ("a <!-- fig fake_host variant=triton field=ms -->1", "notes.md:1: a `<!-- fig ... -->` without"),
    ("\nx <!-- fig missing variant=triton field=ms -->1<!-- /fig -->", "notes.md:2: figure `missing"),
    ("<!-- fig week9/fake_host variant=triton field=ms -->1<!-- /fig -->", "unknown week"),
])
def test_broken_figures_fail_naming_file_and_line(tree, capsys, text, message):
    (tree / "week4_triton_dl" / "notes.md").write_text(text)
    assert report(tree, "--check") == 1
    assert message in capsys.readouterr().out
