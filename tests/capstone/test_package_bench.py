"""capstone.package_bench: the int8 (and fp8) packages are rows beside the float one, each package's
size, compile and load time under the table; fp8 without fp8 tensor cores is a row saying why."""
import importlib.util
from pathlib import Path

import pytest
import torch

from capstone import package_bench as pb
from course import runtime
from week5_integration import aot_quant as aq
from week5_integration import inference


def _builds():
    """tests/week5/aot_builds.py (loaded by path): the session's packages, built once for every test file."""
    path = Path(__file__).resolve().parents[1] / "week5" / "aot_builds.py"
    spec = importlib.util.spec_from_file_location("aot_builds_for_package_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runner_path_is_the_torch_only_runner():
    assert pb.RUNNER.is_file() and pb.RUNNER.parent.name == "week5_integration", pb.RUNNER


def test_int8_floor_counts_one_byte_per_weight_and_a_scale_per_row():
    from capstone import model as cm

    model = cm.build("tiny", "fast", dtype=torch.float32)
    cfg = model.cfg
    assert pb.matmul_weight_bytes(model) == inference.matmul_weights(cfg) * 4  # fp32: every matmul weight once
    rows = sum(mod.out_features for mod in model.modules() if isinstance(mod, torch.nn.Linear))
    assert pb.matmul_weight_bytes(aq.int8_model(model)) == inference.matmul_weights(cfg) + 4 * rows


@pytest.mark.slow  # the tiny model's int8 package (and fp8's on sm_89+): the session's builds, shared with tests/week5
def test_bench_reports_the_int8_package_beside_the_float_one(tmp_path_factory):
    # the tiny model everywhere (on a GPU the plan's gpt2_124m packages take minutes each), in the plan's dtype;
    # the packages are the ones tests/week5/test_aot_quant.py checks (aot_builds.py: compiled once per session)
    builds = _builds()
    p = dict(pb.plan(), config="tiny", prompt=16, new=3, batches=[1, 2], repeats=1)
    root, prebuilt = builds.shared_root(tmp_path_factory), {}
    for kind in ["int8"] + (["fp8"] if runtime.on_gpu() and runtime.has_capability(aq.FP8_MINIMUM) else []):
        package = builds.course_package(root, kind, p["dtype"], max_batch=builds.MAX_BATCH, max_len=builds.MAX_LEN)
        builds.require_loadable(package, root, runtime.DEVICE, p["dtype"])  # skip where the loader dies on any package
        prebuilt[kind] = package
    variants = ("aoti int8 package", "aoti fp8 package")
    record = pb.run(p, variants, deadline_s=600, prebuilt=prebuilt)
    assert record["plan"]["max_len"] == str(builds.MAX_LEN)  # the packages' cache length: the shared builds fit
    int8 = [r for r in record["rows"] if r["variant"] == "aoti int8 package"]
    assert [r["batch"] for r in int8] == [1, 2], record["rows"]
    for row in int8:
        assert row["ms"] > 0 and row["prefill_tokens_per_s"] > 0 and row["floor_bytes"] > 0, row
    package = record["package_int8"]
    assert package["bytes"] > 0 and package["compile_s"] > 0 and package["load_s"] > 0, package
    fp8 = [r for r in record["rows"] if r["variant"] == "aoti fp8 package"]
    if not (runtime.on_gpu() and runtime.has_capability(aq.FP8_MINIMUM)):
        assert all("refused" in r["skipped"] and "int8" in r["skipped"] for r in fp8), fp8
        assert "not built" in pb.table(record)
    assert "int8 package:" in pb.table(record)


def test_decode_loops_say_whether_the_host_paced_their_steps(monkeypatch, gpu_clock):
    """The deployment rows' decode steps go through the kit's clock (course/bench_clock.py); a row is host-bound
    when any run was. The GPU path on the CPU with stand-in events (conftest's gpu_clock), which follow the host."""
    monkeypatch.setattr(pb, "LoopClock", gpu_clock())
    steps = iter(range(10))

    def step(token):
        return torch.nn.functional.one_hot(torch.tensor([next(steps)]), 12).float()  # logits (B, V)

    def prefill(idx):
        return torch.zeros(1, idx.shape[1], 12)

    runs = [pb._decode_loop(step, prefill, torch.zeros(1, 3, dtype=torch.int64), 4) for _ in range(2)]
    assert runs[0]["tokens"].tolist() == [[0, 0, 0, 0, 0, 1, 2]] and runs[0]["host_bound"] is True
    got = pb._median(runs)
    assert [t.reps for t in got["timings"]] == [3, 3]
    monkeypatch.setattr(pb, "LoopClock", gpu_clock(gpu_ms=1e4))
    assert pb._decode_loop(step, prefill, torch.zeros(1, 3, dtype=torch.int64), 2)["host_bound"] is False
