"""week5_integration.onnx_export: the GPT exported with torch.onnx and run by ONNX Runtime (CPU).

Runs on the CPU on every machine (ONNX Runtime's CPU execution provider); skipped, saying
which package is missing, where onnx / onnxruntime / onnxscript are not installed.
"""
import pytest
import torch
import torch.nn as nn

from course import runtime
from course.check import assert_close
from week5_integration import model as m

ox = runtime.lesson("week5_integration.onnx_export")
TINY = m.GPT_TINY
GPT2_STYLE = {"norm": "layernorm", "mlp": "gelu", "pos": "learned"}
MISSING = ox.missing_packages()
needs_onnx = pytest.mark.skipif(bool(MISSING), reason=f"ONNX packages not installed ({', '.join(MISSING)}): "
                                                       f"{ox.INSTALL_HINT}")


def tiny_cpu_model(**changes):
    torch.manual_seed(0)
    return m.GPT(m.config(TINY, **changes)).eval()  # the CPU on every machine: ONNX Runtime runs there


@pytest.mark.parametrize("changes", [{}, GPT2_STYLE], ids=["llama", "gpt2"])
def test_exportable_wrapper_is_the_same_function(changes):
    model = tiny_cpu_model(**changes)
    wrapper = ox.ExportableGPT(model)
    assert wrapper.gpt is model  # the same parameters, not a copy
    for shape in [(1, 1), (2, 7), (3, TINY.max_seq_len)]:
        idx = torch.randint(0, TINY.vocab_size, shape)
        with torch.no_grad():
            assert_close(wrapper(idx), model(idx), rtol=0, atol=0)  # the same ops on the same values


@pytest.fixture(scope="module")
def dynamic_export(tmp_path_factory):
    model = tiny_cpu_model()
    path = ox.export_onnx(model, tmp_path_factory.mktemp("onnx") / "tiny.onnx", dynamic=True)
    return model, ox.onnx_session(path)


@needs_onnx
@pytest.mark.parametrize("shape", [(1, 1), (2, 11), (1, TINY.max_seq_len), (5, 7)], ids=str)
def test_onnx_runtime_matches_torch_at_any_shape(dynamic_export, shape):
    model, session = dynamic_export
    idx = torch.randint(0, TINY.vocab_size, shape)
    check = ox.compare_with_torch(model, session, idx)
    assert check["got"].shape == (*shape, TINY.vocab_size) and check["got"].dtype == torch.float32
    # float32 in another summation order, compounded over the layers (module docstring).
    assert_close(check["got"], check["want"], **ox.TOLERANCE)


@needs_onnx
def test_fixed_shape_export_runs_only_at_its_shape(tmp_path):
    model = tiny_cpu_model(**GPT2_STYLE)
    model.train()  # export must not depend on (or change) the mode it finds
    path = ox.export_onnx(model, tmp_path / "fixed.onnx", batch=2, seq_len=9, dynamic=False)
    assert model.training
    session = ox.onnx_session(path)
    idx = torch.randint(0, TINY.vocab_size, (2, 9))
    check = ox.compare_with_torch(model, session, idx)
    assert_close(check["got"], check["want"], **ox.TOLERANCE)
    with pytest.raises(Exception, match="dimensions"):
        ox.run_onnx(session, torch.zeros(2, 10, dtype=torch.int64))


@needs_onnx
def test_export_refuses_what_it_cannot_export(tmp_path):
    model = tiny_cpu_model()
    with pytest.raises(TypeError, match="week5 GPT"):
        ox.export_onnx(nn.Linear(3, 3), tmp_path / "x.onnx")
    with pytest.raises(TypeError, match="float32"):
        ox.export_onnx(tiny_cpu_model().to(torch.bfloat16), tmp_path / "x.onnx")
    with pytest.raises(ValueError, match="max_seq_len"):
        ox.export_onnx(model, tmp_path / "x.onnx", seq_len=TINY.max_seq_len + 1)
    with pytest.raises(ValueError, match="batch"):
        ox.export_onnx(model, tmp_path / "x.onnx", batch=0)
    with pytest.raises(FileNotFoundError, match="no ONNX file"):
        ox.onnx_session(tmp_path / "absent.onnx")


@needs_onnx
def test_run_onnx_refuses_bad_token_ids(dynamic_export):
    _, session = dynamic_export
    with pytest.raises(ValueError, match="int64"):
        ox.run_onnx(session, torch.zeros(1, 4))
    with pytest.raises(ValueError, match="int64"):
        ox.run_onnx(session, torch.zeros(4, dtype=torch.int64))


def test_require_onnx_names_the_missing_packages(monkeypatch):
    monkeypatch.setattr(ox, "missing_packages", lambda: ["onnxruntime"])
    with pytest.raises(ImportError, match="onnxruntime.*pip install"):
        ox.require_onnx()
