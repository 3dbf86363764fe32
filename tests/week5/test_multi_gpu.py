"""week5_integration.distributed on 2 GPUs over NCCL: DDP, ZeRO-1 and FSDP2 reproduce one GPU's training;
and, on any machine, the measuring bench's arithmetic (week5_integration.scaleout, .communication).

The 2-GPU tests spawn one NCCL process per GPU (`distributed.launch`) and train the tiny GPT 4
AdamW steps with each strategy on the same global batches as one GPU alone (tests/week5/
test_distributed.py runs the same check with 2 gloo processes on the CPU, for CI).

Error model (fp32 on the GPU: no autocast; TF32 off, torch's default for matmuls). The 2-GPU runs
differ from one GPU only in the order of floating-point sums: each rank's GEMMs have half the rows
(cuBLAS may choose another kernel, and so another summation order within a row's dot products), the
two shard means are averaged instead of one mean being taken, and NCCL sums the ranks' gradients in
its own order. Each such sum is off by ~sqrt(n) u relative (u = 6e-8; n <= 128 terms here: ~1e-6).
* Losses: means over 128 tokens of values computed that way, after weights that differ as below:
  LOSS_RTOL = 1e-5.
* Weights: AdamW's step is lr m / (sqrt(v) + eps): scale-free, so a gradient off by a relative
  delta moves an update by ~lr delta (~1e-9 per step at lr = 1e-3). The exception is a gradient
  element within rounding noise of zero (|g| ~ eps = 1e-8), where the update can change by up to
  lr |dg| / eps. So: every weight within PARAM_ATOL = 1e-4 = lr / 10, and the whole difference
  small against how far the weights moved: ||w_2gpu - w_1gpu|| <= 1e-3 ||w_1gpu - w_0||. A rank's
  gradient left out of the average, a rank counted twice or a shard trained on the wrong rows
  changes updates by ~lr per step and fails both. (A sum instead of a mean is invisible to a
  scale-free optimizer; the capstone's 2-GPU test, with gradient clipping, checks the norm.)
"""
import dataclasses
import json

import pytest
import torch

from course import runtime
from course.check import assert_close
from week5_integration import distributed as dd
from week5_integration import model as m
from week5_integration import communication as comm
from week5_integration import scaleout as so

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def two_gpus_only(test):
    """On a CPU the `gpu` marker skips (tests/conftest.py says why); on a machine with one GPU, skipif."""
    test = pytest.mark.skipif(runtime.on_gpu() and GPUS < 2,
                              reason=f"needs 2 CUDA GPUs (NCCL, one process per GPU); this machine has {GPUS}")(test)
    return pytest.mark.gpu(reason="needs 2 CUDA GPUs: NCCL, one process per GPU")(test)


STEPS, GLOBAL_BATCH, LR = 4, 4, 1e-3
LOSS_RTOL, PARAM_ATOL, MOVEMENT_RTOL = 1e-5, 1e-4, 1e-3
STRATEGIES = dd.STRATEGIES  # ddp, zero1, fsdp_grad_op, fsdp
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.*:DeprecationWarning")  # ZeroRedundancyOptimizer


@pytest.fixture(scope="module")
def one_gpu():
    return dd.train("single", steps=STEPS, global_batch=GLOBAL_BATCH, lr=LR, device="cuda")


@pytest.fixture(scope="module")
def two_gpus():
    return dd.launch(so.match_worker, 2, STRATEGIES, {"steps": STEPS, "global_batch": GLOBAL_BATCH, "lr": LR},
                     backend="nccl")


def _start():
    torch.manual_seed(0)  # distributed.train's seed: the weights every run starts from
    return torch.cat([p.detach().reshape(-1) for p in m.GPT(m.config(m.GPT_TINY, vocab_size=256)).parameters()])


@two_gpus_only
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_gpus_match_one_gpu(strategy, one_gpu, two_gpus):
    want_losses = torch.tensor(one_gpu["losses"], dtype=torch.float64)
    moved = float((one_gpu["params"] - _start()).norm())
    assert moved > 100 * PARAM_ATOL  # the steps really moved the weights: the comparison is not vacuous
    for rank, ranks in enumerate(two_gpus):
        got = ranks[strategy]
        assert_close(torch.tensor(got["losses"], dtype=torch.float64), want_losses, rtol=LOSS_RTOL, atol=0,
                     name=f"{strategy} rank {rank} losses")
        assert_close(got["params"], one_gpu["params"], rtol=0, atol=PARAM_ATOL, name=f"{strategy} rank {rank} weights")
        assert float((got["params"] - one_gpu["params"]).norm()) <= MOVEMENT_RTOL * moved, (strategy, rank)
    # Each rank trained on its own half of every batch: the shard losses differ, their mean is the loss.
    local = [torch.tensor(r[strategy]["local_losses"], dtype=torch.float64) for r in two_gpus]
    assert bool((local[0] != local[1]).all()), local
    assert_close((local[0] + local[1]) / 2, want_losses, rtol=LOSS_RTOL, atol=0, name=f"{strategy} mean of shards")


@two_gpus_only
def test_fsdp_keeps_half_of_every_parameter_on_each_gpu(two_gpus):
    shards = [r["shards"] for r in two_gpus]
    assert shards[0].keys() == shards[1].keys() and shards[0]
    for name, (local0, full, shape) in shards[0].items():
        local1 = shards[1][name][0]
        # fully_shard splits dim 0 as torch.chunk does: ceil(rows / 2) rows on rank 0, the rest on rank 1.
        row = full // shape[0]
        assert (local0, local1) == (-(-shape[0] // 2) * row, (shape[0] - -(-shape[0] // 2)) * row), name


# ------------------------------------------------------------------------------ CPU: the bench's arithmetic
def _kernel(name, start, dur, cat="kernel", device=0):
    return {"ph": "X", "cat": cat, "name": name, "ts": start, "dur": dur, "args": {"device": device}}


def test_overlap_splits_communication_into_hidden_and_exposed():
    events = [
        _kernel("ampere_sgemm_128x64_nn", 0, 100),                       # compute 0-100
        _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 50, 100),     # comm 50-150: 50 hidden, 50 exposed
        _kernel("void at::native::elementwise_kernel", 200, 50),         # compute 200-250
        _kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t", 220, 20),     # comm 220-240: all hidden
        _kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 240, 40),  # comm 240-280: 10 hidden, 30 exposed
        _kernel("Memcpy DtoD", 300, 10, cat="gpu_memcpy"),                 # other device work
        _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0, 500, device=1),  # another GPU: ignored
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 1000},  # host: ignored
    ]
    o = comm.overlap(events, steps=2, device=0)
    assert o["device_events"] == 6
    assert o["comm_ms"] == pytest.approx((100 + 60) / 2 / 1e3)
    assert o["hidden_ms"] == pytest.approx((50 + 20 + 10) / 2 / 1e3)
    assert o["exposed_ms"] == pytest.approx((50 + 30) / 2 / 1e3)
    assert o["hidden_fraction"] == pytest.approx(80 / 160)
    assert o["kernel_ms"] == pytest.approx({"all_reduce": 0.05, "all_gather": 0.01, "reduce_scatter": 0.02})
    assert o["compute_ms"] == pytest.approx((100 + 50 + 10) / 2 / 1e3)
    assert o["span_ms"] == pytest.approx(310 / 2 / 1e3)
    assert o["idle_ms"] == pytest.approx((310 - 240) / 2 / 1e3)  # busy: 0-150, 200-280, 300-310
    empty = comm.overlap([{"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "ts": 0, "dur": 5}])
    assert empty["device_events"] == 0 and empty["comm_ms"] == 0 and empty["hidden_fraction"] is None
    with pytest.raises(ValueError, match="steps"):
        comm.overlap(events, steps=0)


def test_state_and_wire_bytes_follow_the_zero_stages():
    assert [so.predicted_state_bytes_per_param(s, 2) for s in ("single", "ddp", "zero1", "fsdp_grad_op", "fsdp")] \
        == [16, 16, 12, 8, 8]
    assert so.predicted_state_bytes_per_param("fsdp", 8) == 2
    psi = 1000
    ddp, fsdp = so.wire_bytes_per_step("ddp", psi, 2), so.wire_bytes_per_step("fsdp", psi, 2)
    assert ddp == {"all_reduce": 2 * 0.5 * 4 * psi}
    assert sum(fsdp.values()) == pytest.approx(1.5 * sum(ddp.values()))  # ZeRO-3 moves 1.5x DDP's bytes
    bf16 = so.wire_bytes_per_step("fsdp_bf16", psi, 2)
    assert bf16["all_gather"] == fsdp["all_gather"] / 2 and bf16["reduce_scatter"] == fsdp["reduce_scatter"]
    assert so.wire_bytes_per_step("fsdp", psi, 1) == {} and so.wire_bytes_per_step("single", psi, 2) == {}


def _fake_world(world, backend="nccl", ms=10.0, overlap=None):
    plan = dataclasses.asdict(so.GPU_PLAN)
    strategies = ["single", "ddp", "fsdp"] if world == 1 else ["ddp", "fsdp"]
    runs = {}
    for i, s in enumerate(strategies):
        t = ms * (1 + 0.05 * i)
        runs[s] = {"zero_stage": so.ZERO_STAGE[s], "ms": t, "ms_median_step": t,
                   "tokens_per_s": plan["batch"] * world * plan["seq_len"] / (t * 1e-3), "peak_mib": 1000.0 - world,
                   "reserved_mib": 1100.0, "state_bytes": {"total": 16 * 2**20 / world},
                   "state_bytes_per_param": so.predicted_state_bytes_per_param(s, world),
                   "predicted_state_bytes_per_param": so.predicted_state_bytes_per_param(s, world)}
        if overlap and s != "single":
            runs[s]["overlap"] = overlap
    return {"world": world, "backend": backend, "plan": plan, "model": dataclasses.asdict(m.GPT2_SMALL),
            "date": "2026-11-26 12:00 UTC", "machine": {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130"},
            "gpus": 2, "copy_gbps": 3000.0, "strategies": runs, "errors": {"zero1": "RuntimeError: boom"} if world == 2 else {},
            "comm": {} if world == 1 else {"bytes": 2**28, "all_reduce_busbw_gbps": 300.0,
                                           "all_gather_busbw_gbps": 280.0, "reduce_scatter_busbw_gbps": 290.0}}


def test_report_merges_the_worlds_into_one_record(tmp_path):
    o = comm.overlap([_kernel("gemm", 0, 100), _kernel("ncclDevKernel_AllReduce_Sum_f32", 50, 100)], steps=1)
    for world in (1, 2):
        (tmp_path / f"world{world}.json").write_text(json.dumps(_fake_world(world, overlap=o)))
    record = so.report(tmp_path)
    assert record["benchmark"] == "fsdp_week5" and not record["simulated"]
    rows = {(r.get("world"), r["variant"]): r for r in record["rows"]}
    single = rows[(1, "single")]
    assert single["scaling_efficiency"] == pytest.approx(1.0)
    ddp2 = rows[(2, "ddp")]
    assert ddp2["scaling_efficiency"] == pytest.approx(ddp2["tokens_per_s"] / (2 * single["tokens_per_s"]))
    # wire ms = bytes each GPU sends / bus bandwidth: 2 (N-1)/N x 4 Psi bytes at 300 GB/s for DDP.
    psi = record["params"]
    assert ddp2["wire_ms"] == pytest.approx(4 * psi / 300e9 * 1e3)
    assert any(r.get("skipped", "").startswith("failed: RuntimeError") for r in record["rows"])
    assert record["ceilings"]["copy_gbps"] == 3000.0
    text = so.markdown(record)
    assert "| 2 | fsdp | 3 |" in text and "Communication against computation" in text and "| 2 | ddp | 0 | 10.00 |" in text
    paths = so.save(record, tmp_path / "out")
    assert [p.name for p in paths] == ["fsdp_week5.json", "fsdp_week5.md"]
    gloo = _fake_world(2, backend="gloo")
    (tmp_path / "world2.json").write_text(json.dumps(gloo))
    assert so.report(tmp_path)["simulated"]
    with pytest.raises(FileNotFoundError, match="world"):
        so.report(tmp_path / "nothing")


def test_one_process_runs_every_strategy_on_the_cpu(tmp_path):
    # The measuring path itself, in this process as a group of one (gloo): every wrapper, the timed
    # loop, the state count, the stage file. (The 2-process run is tools/gpu_scaleout.sh's, on GPUs.)
    plan = dataclasses.replace(so.TINY_PLAN, steps=2, warmup=1)
    record = so.run(plan, ["ddp", "fsdp", "fsdp_bf16"], tmp_path, device_kind="cpu")
    assert list(record["strategies"]) == ["single", "ddp", "fsdp", "fsdp_bf16"] and not record["errors"]
    for name, r in record["strategies"].items():
        assert r["state_bytes_per_param"] == pytest.approx(16.0, rel=0.01), name  # one process: nothing sharded
        assert len(r["losses"]) == plan.warmup + plan.steps
    # The same initial weights and batches: every wrapper's first loss is the plain model's.
    first = {name: r["losses"][0] for name, r in record["strategies"].items()}
    assert first["ddp"] == first["fsdp"] == first["single"], first
    assert (tmp_path / "world1.json").is_file()


def test_command_line_refuses_bad_arguments():
    with pytest.raises(SystemExit):
        so.main(["run", "--stage", "/tmp/x", "--strategies", "zero4"])
    with pytest.raises(SystemExit):
        so.main(["run", "--stage", "/tmp/x", "--steps", "0"])
    with pytest.raises(ValueError, match="single"):
        so.measure_strategy("single", so.TINY_PLAN, 0, 2, torch.device("cpu"))


def test_a_strategy_says_whether_the_host_paced_its_steps(tmp_path, monkeypatch, gpu_clock):
    """The timed steps go through the kit's clock (course/bench_clock.py); its flag (any rank host-paced) and
    the slowest rank's host ms per step reach the stage file, the record and the table's mark. The GPU path
    runs here in one gloo process with stand-in events (conftest's gpu_clock), which follow the host."""
    monkeypatch.setattr(so, "LoopClock", gpu_clock())
    plan = dataclasses.replace(so.TINY_PLAN, steps=2, warmup=1)
    record = so.run(plan, ["ddp"], tmp_path, device_kind="cpu")
    for name, r in record["strategies"].items():
        assert r["host_bound"] is True and r["host_ms"] > 0, name
    report = so.report(tmp_path)
    rows = [r for r in report["rows"] if "ms" in r]
    assert len(rows) == 2 and all(r["host_bound"] is True for r in rows)
    text = so.markdown(report)
    assert text.count("* |") == 2 and "host-bound" in text
    # a stage file made before the flag (test_report_merges_the_worlds_into_one_record's): no mark, no footnote
    (tmp_path / "world1.json").write_text(json.dumps(_fake_world(1)))
    text = so.markdown(so.report(tmp_path))
    assert "* |" not in text and "host-bound" not in text
