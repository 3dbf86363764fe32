"""course.holes: a CUDA C stub with a `#define HOLE_OPEN` line left is refused with 'not implemented yet'
and its hole; every stub that uses the marker holds one per hole, and its solution none. The launchers'
own refusals (before nvcc or torch's build is asked) are tested beside each lesson: tests/week1/
test_matmul_tensor_cores.py, test_matmul_wgmma_persistent.py, test_matmul_wgmma_fused.py and tests/week4/
test_attention_hopper.py."""
from pathlib import Path

import pytest

from course import holes

ROOT = Path(__file__).resolve().parents[1]
STUB = """__device__ void f()
{
    // TODO (about 3 lines): the ring's producer
    //   (its continuation)
    #define HOLE_OPEN 1  // delete once this hole is filled
}
"""


def test_an_open_hole_is_refused_with_its_file_line_and_todo(tmp_path):
    source = tmp_path / "k.cu"
    source.write_text(STUB)
    with pytest.raises(NotImplementedError) as refused:
        holes.refuse_open_hole(source)
    message = str(refused.value)
    assert message.startswith(f"not implemented yet: {source} line 5 has a hole open")
    assert "TODO (about 3 lines): the ring's producer" in message


@pytest.mark.parametrize("line", ["// #define HOLE_OPEN 1", "// STUB: #define HOLE_OPEN 1", "#define HOLE_OPENED 1",
                                  "#define WP_HOLE_OPEN 1", "int x = 1;"])
def test_a_filled_hole_or_a_quotation_of_the_marker_is_built(tmp_path, line):
    source = tmp_path / "k.cu"
    source.write_text(STUB.replace("#define HOLE_OPEN 1", line))
    holes.refuse_open_hole(source)


def test_every_source_is_read_and_the_first_open_hole_is_named(tmp_path):
    filled, body = tmp_path / "filled.cu", tmp_path / "body.cu"
    filled.write_text("int x;\n")
    body.write_text(STUB)
    with pytest.raises(NotImplementedError, match="body.cu line 5"):
        holes.refuse_open_hole(filled, body)


STUBS = sorted(p for p in ROOT.glob("*/exercises/**/*.cu") if holes.MARKER in p.read_text())


def test_some_stubs_use_the_marker():
    assert {p.name for p in STUBS} >= {"matmul_wgmma.cu", "matmul_wgmma_persistent.cu", "attention_hopper_forward.cu"}


@pytest.mark.parametrize("stub", STUBS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_marker_in_every_hole_of_the_stub_and_none_in_the_solution(stub):
    text = stub.read_text()
    markers = sum(1 for line in text.splitlines() if line.strip().startswith(f"{holes.MARKER} 1"))
    assert markers == text.count("// TODO ("), "one `#define HOLE_OPEN 1` line per hole"
    solution = ROOT / stub.relative_to(ROOT).as_posix().replace("exercises/", "", 1)
    holes.refuse_open_hole(solution)  # the solution's markers are `// STUB:` lines: nothing open
