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


BLOCK = figures.BLOCK_LINE


def test_report_fills_a_figure_and_check_fails_when_its_results_change(tree, capsys):
    note = tree / "week4_triton_dl" / "notes" / "cross_entropy.md"
    note.write_text("Host cost [9.99][ce_host]x torch's, and ``` in a line is not a fence.\n\n" + BLOCK + "\n"
                    '[ce_host]: ../results/fake_host.json "variant=triton field=ms over=torch size=8x50304"\n')
    assert report(tree, "--check") == 1                  # typed 9.99: not what the file says
    assert report(tree) == 0
    assert "Host cost [1.33][ce_host]x torch's" in note.read_text()
    assert report(tree, "--check") == 0
    record = json.loads((tree / "week4_triton_dl/results/fake_host.json").read_text())
    record["rows"][1]["ms"] = 0.0518                     # a re-run: the prose figure is now stale
    (tree / "week4_triton_dl/results/fake_host.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert report(tree, "--check") == 1
    assert "week4_triton_dl/notes/cross_entropy.md" in capsys.readouterr().out
    assert report(tree) == 0 and "Host cost [2.00][ce_host]x" in note.read_text()


def test_a_drift_planted_in_a_real_note_fails_the_check(tmp_path, capsys):
    """The course's own notes: change one cited number by hand and `report --check` names the note."""
    import shutil

    from classroom import report as report_module
    from course import weeks

    root = tmp_path / "course"
    for one in weeks.all_weeks():     # every week's results: week 4's README cites other weeks too
        if (report_module.ROOT / one.package / "results").is_dir():
            shutil.copytree(report_module.ROOT / one.package / "results", root / one.package / "results")
    week = weeks.resolve("week4")
    readme = root / week.package / "README.md"
    text = (report_module.ROOT / week.package / "README.md").read_text()
    match = figures.CITE.search(text)
    assert match is not None, "week 4's README cites no figure"
    planted = text[:match.start()] + f"[{match['value']}9][{match['name']}]" + text[match.end():]
    readme.write_text(planted)
    old, new = report_module.generated_texts(root)[readme]
    assert old == planted and new == text                # the check sees the drift; report puts it back
    readme.write_text(text)
    old, new = report_module.generated_texts(root)[readme]
    assert old == new == text


def test_another_weeks_results_pools_and_figures_in_code_fences_and_spans(tree):
    (tree / "week3_triton_kernels").mkdir()
    note = tree / "week3_triton_kernels" / "notes.md"
    example = ("```\n[1][peak]\n```\nwritten `[value][peak]` and `[peak]: x.json \"variant=...\"`\n")
    other = dict(RECORD, rows=[dict(r, tflops=r["tflops"] and r["tflops"] / 2) for r in RECORD["rows"]])
    (tree / "week4_triton_dl/results/fake_half.json").write_text(json.dumps(other))
    block = ("\n" + BLOCK + "\n"   # another week's file, and a pool: a folder and the names of its files
             "[peak]: ../week4_triton_dl/results/fake_host.json \"variant=triton field=tflops agg=max\"\n"
             "[both]: ../week4_triton_dl/results/ \"fake_host+fake_half variant=triton field=tflops\"\n")
    note.write_text("peak [][peak] TFLOP/s, both [][both], peak again [1][peak]\n" + example + block)
    assert report(tree) == 0
    assert note.read_text() == ("peak [485][peak] TFLOP/s, both [203-485][both], peak again [485][peak]\n"
                                + example + block)


DEFINE = "\n\n" + BLOCK + "\n[a]: results/fake_host.json \"variant=triton field=ms size=1k\"\n"


@pytest.mark.parametrize("text, message", [
    ("a [1][a]" + DEFINE + "[a]: results/fake_host.json \"variant=torch field=ms\"\n",
     "notes.md:5: figure `a` is defined twice"),
    ("a [1][b]" + DEFINE, "`[1][b]` cites `b`, defined nowhere"),
    ("no citation" + DEFINE, "notes.md:4: figure `a` is defined but never cited"),
    ("a [1][a]" + DEFINE + "not a definition\n", "notes.md:5: the figures block holds only"),
    ("x" * 100 + " [1][a] [1][a] [1][a]" + DEFINE, "notes.md:1: 121 characters, 15 of them figure citations"),
    ("| " + "x" * 180 + " | [1][a] [1][a] [1][a] |" + DEFINE, "207 characters, 15 of them figure citations: "
     "wrap the sentence or shorten the names (at most 200)"),      # a table row cannot wrap: 200
    ("a <!-- fig fake_host variant=triton field=ms -->1<!-- /fig -->", "an old `<!-- fig ...-->` marker"),
    ("\nx [1][a]\n\n" + BLOCK + "\n[a]: results/missing.json \"variant=triton field=ms\"",
     "notes.md:5: figure `a` (results/missing.json \"variant=triton field=ms\"): no results file missing.json"),
    ("[1][a]\n\n" + BLOCK + "\n[a]: results/fake_host \"variant=triton field=ms\"", "is not a results .json file"),
    ("[1][a]\n\n" + BLOCK + "\n[a]: results/fake_host.json \"fake_host+x variant=triton field=ms\"",
     "pools files of a folder: link the folder"),
    ("[1][a]\n\n" + BLOCK + "\n[a]: results/fake_host.json \"variant=triton field=ms colour=red\"", "unknown word"),
])
def test_broken_figures_fail_naming_file_and_line(tree, capsys, text, message):
    (tree / "week4_triton_dl" / "notes.md").write_text(text)
    assert report(tree, "--check") == 1
    assert message in capsys.readouterr().out


def test_every_note_names_its_figures_once_and_cites_them_by_name():
    """The course's markdown: names unique per note, every figure cited, every citation defined,
    no line pushed past figures.MAX_LINE by citations, no old `<!-- fig` marker left."""
    from classroom import report as report_module

    root = report_module.ROOT
    paths = [root / "README.md", *report_module.markdown_files(root)]
    found = [p for path in paths if path.is_file()
             for p in figures.problems(path.read_text(), str(path.relative_to(root)))]
    assert found == []
    assert sum(bool(figures.definitions(p.read_text())) for p in paths if p.is_file()) >= 40


