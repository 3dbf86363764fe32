"""capstone.train under FSDP2: 2 gloo processes on the CPU take the single-process steps.

Each rank holds half of every parameter and takes half of every global batch; the mean of the
shard losses is the global loss and the reduce-scattered gradient is the global gradient, so the
losses and the final weights must be one process's, up to float32 reduction order.
Error model (week 5's test_distributed.py, which this mirrors with the fast model and gradient
clipping): the shard means are averaged in another order, so gradients differ in their last bits
(relative ~1e-7); AdamW bounds each update by ~lr = 1e-3, so 2 steps change a weight by at most
2e-3 and a last-bit gradient change moves that by ~2e-9, plus one rounding of the weight
(6e-8 at |w| ~ 1): 1e-6 absolute on the weights and 1e-6 relative on the losses hold it with a
margin, while a missing average or a rank counted twice is off by ~lr = 1e-3.
"""
import pytest
import torch

from course import runtime
from course.check import assert_close
from capstone import train as ct
from week5_integration import distributed as dd
from week5_integration.train import TrainConfig

STEPS = 2
TC = TrainConfig(steps=STEPS, batch=4, seq_len=16, warmup=1, corpus_bytes=1 << 14, grad_clip=1.0)
LOSS_RTOL, PARAM_ATOL = 1e-6, 1e-6
# gloo processes compute on the CPU. Without a GPU the Triton interpreter runs the fast model
# there; on a GPU machine Triton compiles for the GPU and cannot take CPU tensors, so the twin
# (same FSDP code path, torch ops) is what runs on the CPU (the NCCL run is the 2-GPU command).
OPS = runtime.pick(gpu="reference", sim="fast")


@pytest.fixture(scope="module")
def single():
    trainer = ct.Trainer("tiny", TC, ops=OPS, device="cpu")
    records = trainer.run()
    return {"records": records, "params": trainer.parameters_flat()}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    checkpoint = str(tmp_path_factory.mktemp("fsdp") / "ck.pt")
    return dd.launch(ct.distributed_worker, 2, "tiny", TC, OPS, STEPS, checkpoint, backend="gloo"), checkpoint


def test_fsdp_steps_match_one_process(single, two_ranks):
    ranks, _ = two_ranks
    want_losses = torch.tensor([r["loss"] for r in single["records"]], dtype=torch.float64)
    # Clipping was active (the norm exceeded 1.0), so the global norm across shards is tested too.
    assert single["records"][0]["grad_norm"] > TC.grad_clip
    for rank, got in enumerate(ranks):
        assert_close(torch.tensor([r["loss"] for r in got["records"]], dtype=torch.float64), want_losses,
                     rtol=LOSS_RTOL, atol=0, name=f"rank {rank} losses")
        assert_close(torch.tensor([r["grad_norm"] for r in got["records"]]),
                     torch.tensor([r["grad_norm"] for r in single["records"]]), rtol=1e-5, atol=0,
                     name=f"rank {rank} gradient norms")
        assert_close(got["params"], single["params"], rtol=0, atol=PARAM_ATOL, name=f"rank {rank} weights")
    start = ct.Trainer("tiny", TC, ops="reference", device="cpu").parameters_flat()
    assert float((single["params"] - start).abs().max()) > 100 * PARAM_ATOL  # the steps moved the weights


def test_fsdp_checkpoint_resumes_in_one_process(two_ranks):
    ranks, checkpoint = two_ranks
    trainer = ct.Trainer("tiny", TC, ops=OPS, device="cpu")
    trainer.load(checkpoint)
    assert trainer.step == STEPS
    assert torch.equal(trainer.parameters_flat(), ranks[0]["params"])  # the full weights, gathered
    assert torch.equal(ranks[0]["params"], ranks[1]["params"])
