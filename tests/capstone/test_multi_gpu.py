"""capstone.train under FSDP2 on 2 GPUs over NCCL: the fast model's steps match one GPU's; and, on any
machine, capstone.fsdp's loss comparison and report.

The 2-GPU test mirrors tests/capstone/test_fsdp.py (2 gloo processes on the CPU, for CI) with
NCCL, one process per GPU, and the course's Triton kernels compiled for the GPU.

Error model (fp32: TrainConfig(amp=False); TF32 off, torch's default; the kernels' fp32 paths). The
2 ranks differ from one GPU in summation order only: each rank's GEMMs have half the rows (cuBLAS
may pick another kernel), the fused cross-entropy and the loss mean sum other partial sums, NCCL
sums the two gradient halves. FlashAttention, RMSNorm, RoPE and SwiGLU work row by row (sequence
by sequence for attention), so a row's result does not depend on the batch it is in. Each sum is off
by ~sqrt(n) u (u = 6e-8, n <= 2048 terms: ~3e-6 relative).
* losses: LOSS_RTOL = 1e-5; gradient norms (clipping is active, so the global norm across shards
  is exercised): 1e-5 relative.
* weights: AdamW's update is scale-free, lr m / (sqrt(v) + eps): a relative gradient error delta
  moves it by ~lr delta, except for gradient elements within rounding noise of zero (~eps), where
  it can move by up to lr |dg| / eps. So every weight within PARAM_ATOL = lr / 10 = 1e-4, and the
  total difference below 1e-3 of how far the weights moved. A lost or double-counted rank, or a
  missing average (caught by the clipped norm, which a sum would double), is off by ~lr per step.
"""
import json

import pytest
import torch

from course import runtime
from course.check import assert_close
from capstone import fsdp as cf
from capstone import train as ct
from week5_integration import distributed as dd
from week5_integration.train import TrainConfig

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
STEPS = 3
TC = TrainConfig(steps=STEPS, batch=8, seq_len=32, lr=1e-3, warmup=1, corpus_bytes=1 << 15, grad_clip=1.0, amp=False)
LOSS_RTOL, NORM_RTOL, PARAM_ATOL, MOVEMENT_RTOL = 1e-5, 1e-5, 1e-4, 1e-3


@pytest.mark.gpu(reason="needs 2 CUDA GPUs: NCCL, one process per GPU")
@pytest.mark.skipif(runtime.on_gpu() and GPUS < 2,
                    reason=f"needs 2 CUDA GPUs (NCCL, one process per GPU); this machine has {GPUS}")
def test_fast_model_fsdp_on_two_gpus_matches_one_gpu():
    start = ct.Trainer("tiny", TC, ops="reference", device="cpu").parameters_flat()
    single = ct.Trainer("tiny", TC, ops="fast", device="cuda")
    want = single.run()
    want_params = single.parameters_flat()
    del single
    assert want[0]["grad_norm"] > TC.grad_clip  # clipping active: the global norm over shards is tested
    moved = float((want_params - start).norm())
    assert moved > 100 * PARAM_ATOL
    ranks = dd.launch(ct.distributed_worker, 2, "tiny", TC, "fast", STEPS, None, backend="nccl")
    for rank, got in enumerate(ranks):
        assert_close(torch.tensor([r["loss"] for r in got["records"]], dtype=torch.float64),
                     torch.tensor([r["loss"] for r in want], dtype=torch.float64), rtol=LOSS_RTOL, atol=0,
                     name=f"rank {rank} losses")
        assert_close(torch.tensor([r["grad_norm"] for r in got["records"]]),
                     torch.tensor([r["grad_norm"] for r in want]), rtol=NORM_RTOL, atol=0, name=f"rank {rank} norms")
        assert_close(got["params"], want_params, rtol=0, atol=PARAM_ATOL, name=f"rank {rank} weights")
        assert float((got["params"] - want_params).norm()) <= MOVEMENT_RTOL * moved, rank


# ------------------------------------------------------------------------------ CPU: the report
def test_loss_comparison_holds_the_stated_tolerance():
    ref = [5.0 - 0.1 * i for i in range(20)]
    same = cf.compare_losses(ref, [x + 0.001 for x in ref])
    assert same["within_tolerance"] and same["step0_abs_diff"] == pytest.approx(0.001)
    drift = cf.compare_losses(ref, [x + (0.2 if i > 10 else 0.0) for i, x in enumerate(ref)])
    assert not drift["within_tolerance"] and drift["max_abs_diff"] == pytest.approx(0.2)
    assert not cf.compare_losses(ref, [x + 0.02 for x in ref])["within_tolerance"]  # step 0 beyond 0.01
    with pytest.raises(ValueError, match="no losses"):
        cf.compare_losses([], [])


def _run(world, global_batch, ms, losses, fsdp):
    return {"world": world, "fsdp": fsdp, "global_batch": global_batch, "batch_per_gpu": global_batch // world,
            "ms": ms, "tokens_per_step": global_batch * 1024, "tokens_per_s": global_batch * 1024 / (ms * 1e-3),
            "peak_mib": 9000.0 / world, "amp": True, "optimizer": "fused", "losses": losses,
            "grad_norms": [1.0] * len(losses), "params": 124_000_000}


def test_report_writes_the_record_the_summary_reads(tmp_path):
    from capstone import summary

    losses = [10.8 - 0.1 * i for i in range(40)]
    common = {"plan": {**cf.dataclasses.asdict(cf.GPU_PLAN)}, "model": {}, "date": "2026-11-26 12:00 UTC",
              "machine": {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130"}, "errors": {}, "copy_gbps": 3000.0}
    (tmp_path / "capstone_world1.json").write_text(json.dumps({**common, "world": 1, "backend": "nccl", "runs": {
        "one_gpu": _run(1, 16, 50.0, losses[:25], False), "one_gpu_global_batch": _run(1, 32, 100.0, losses, False)}}))
    (tmp_path / "capstone_world2.json").write_text(json.dumps({**common, "world": 2, "backend": "nccl", "runs": {
        "fsdp": _run(2, 32, 54.0, [x + 0.002 for x in losses], True)},
        "comm": {"all_gather_busbw_gbps": 300.0}}))
    record = cf.report(tmp_path)
    assert record["benchmark"] == "capstone_fsdp" and not record["simulated"]
    assert record["scaling"] == pytest.approx(50.0 / 54.0 * 2) and record["target_met"]
    assert record["loss"]["within_tolerance"] and record["loss"]["steps"] == 40
    text = cf.markdown(record)
    assert "| FSDP2, 2 GPUs | 2 | 32 |" in text and "met" in text and "all-gather 300" in text
    paths = cf.save(record, tmp_path / "out")
    assert [p.name for p in paths] == ["capstone_fsdp.json", "capstone_fsdp.md", cf.PLOT]
    row = summary.summary_markdown(None, None, None, json.loads(paths[0].read_text())).splitlines()[-1]
    assert row.startswith("| FSDP on 2 GPUs >= 1.8x one GPU | FSDP2, 2 GPUs") and row.endswith("| yes |"), row
    with pytest.raises(FileNotFoundError, match="capstone_world1"):
        cf.report(tmp_path / "out")
