"""week5_integration.distributed: DDP, ZeRO-1 and FSDP reproduce one process's training.

Two gloo processes on the CPU (any machine) each take half of every global batch; every
strategy must give the single-process losses and final weights, up to float32 reduction order.
"""
from pathlib import Path

import pytest
import torch

from course import runtime
from course.check import assert_close
from week5_integration import model as m

dd = runtime.lesson("week5_integration.distributed")
STEPS, GLOBAL_BATCH = 3, 4
# Error model: the per-rank means are averaged in another order than one process's mean, so
# gradients differ in their last bits (relative ~1e-7). AdamW normalizes each update to <= lr =
# 1e-3, so 3 steps move a weight by at most 3e-3 and a last-bit change in its gradient changes
# that by ~3e-3 x 1e-6; add one rounding of each weight (6e-8 at |w| ~ 1): 1e-6 absolute holds it
# with a margin, while a rank counted twice or a missing average is off by ~lr = 1e-3. The
# losses are means over 128 tokens in another order: 1e-6 relative.
LOSS_RTOL = 1e-6
PARAM_ATOL = 1e-6
# torch.distributed.optim (ZeroRedundancyOptimizer) still scripts its functional optimizers.
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.*:DeprecationWarning")


@pytest.fixture(scope="module")
def single():
    return dd.train("single", steps=STEPS, global_batch=GLOBAL_BATCH)


@pytest.fixture(scope="module")
def two_gloo_processes():
    return dd.run_strategies(dd.STRATEGIES, world_size=2, backend="gloo", steps=STEPS, global_batch=GLOBAL_BATCH)


@pytest.mark.parametrize("strategy", dd.STRATEGIES)
def test_strategy_matches_single_process(two_gloo_processes, single, strategy):
    ranks = two_gloo_processes[strategy]
    assert len(ranks) == 2
    want_losses = torch.tensor(single["losses"], dtype=torch.float64)
    assert want_losses[-1] < want_losses[0] + 0.5  # a sane run (AdamW on real text, 3 steps)
    for rank, got in enumerate(ranks):
        assert_close(torch.tensor(got["losses"], dtype=torch.float64), want_losses, rtol=LOSS_RTOL, atol=0,
                     name=f"{strategy} rank {rank} losses")
        assert_close(got["params"], single["params"], rtol=0, atol=PARAM_ATOL, name=f"{strategy} rank {rank} weights")
    # Each rank saw its own half of the batch (a rank training on the whole batch would also
    # match the losses above, doing twice the work): the shard means differ, their mean is the loss.
    local = [torch.tensor(r["local_losses"], dtype=torch.float64) for r in ranks]
    assert bool((local[0] != local[1]).all()), local
    assert_close((local[0] + local[1]) / 2, want_losses, rtol=LOSS_RTOL, atol=0, name=f"{strategy} mean of shards")


def test_weights_actually_moved(single):
    # Guard against a vacuous comparison: the steps changed the weights by far more than the tolerance.
    torch.manual_seed(0)
    start = torch.cat([p.detach().reshape(-1) for p in m.GPT(m.config(m.GPT_TINY, vocab_size=256)).parameters()])
    assert float((single["params"] - start).abs().max()) > 100 * PARAM_ATOL


def test_launcher_reports_a_failing_worker():
    with pytest.raises(RuntimeError, match="worker process failed.*strategy must be"):
        dd.launch(dd._compare_worker, 1, ("bogus",), {}, backend="gloo")


@pytest.fixture
def launch_cases(monkeypatch):
    """tests/week5/launch_cases.py, importable by name in the spawned processes too."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    import launch_cases
    return launch_cases


def test_launcher_reports_a_worker_killed_by_a_signal_and_which_ranks_were_at_work(launch_cases):
    with pytest.raises(RuntimeError, match=r"worker process died.*SIGABRT.*rank\(s\) \[1\] had not saved a result"):
        dd.launch(launch_cases.dies_mid_work, 2, backend="gloo")


def test_a_rank_that_dies_after_every_rank_saved_its_result_costs_a_warning_not_the_results(launch_cases):
    with pytest.warns(RuntimeWarning, match="after every rank had saved its result.*teardown"):
        got = dd.launch(launch_cases.dies_tearing_down, 2, backend="gloo")
    assert got == [{"rank": 0}, {"rank": 1}]


def test_shard_batch_takes_contiguous_equal_shards():
    x, y = torch.arange(12).reshape(6, 2), -torch.arange(12).reshape(6, 2)
    parts = [dd.shard_batch(x, y, r, 3) for r in range(3)]
    assert torch.equal(torch.cat([p[0] for p in parts]), x) and torch.equal(torch.cat([p[1] for p in parts]), y)
    with pytest.raises(ValueError, match="does not split evenly"):
        dd.shard_batch(x, y, 0, 4)
    with pytest.raises(ValueError, match="rank"):
        dd.shard_batch(x, y, 3, 3)


def test_bad_arguments_are_refused_before_spawning():
    with pytest.raises(ValueError, match="unknown strategies"):
        dd.run_strategies(["ddp", "zero4"], world_size=2)
    with pytest.raises(ValueError, match="world_size"):
        dd.launch(dd._compare_worker, 0)
    with pytest.raises(ValueError, match="backend"):
        dd.launch(dd._compare_worker, 1, backend="mpi")
    if torch.cuda.device_count() < 64:
        with pytest.raises(ValueError, match="one GPU per process"):
            dd.launch(dd._compare_worker, 64, backend="nccl")
    with pytest.raises(RuntimeError, match="process group"):
        dd.train("ddp")
    with pytest.raises(ValueError, match="strategy must be"):
        dd.train("zero4")


# slow: with 2 GPUs, tests/week5/test_multi_gpu.py runs every strategy over NCCL by default (and
# more tightly); on one GPU this is a one-process NCCL group, no communication, and 16 s of process
# start-up and NCCL initialization on the H100.
@pytest.mark.slow
@pytest.mark.gpu(reason="NCCL needs CUDA GPUs")
def test_nccl_strategies_match_single_gpu():
    # One process per GPU, up to 2. fp32 on the GPU: the shards' GEMMs have half the rows and
    # may use other kernels (another summation order), so 1e-5 relative on the losses.
    world = min(2, torch.cuda.device_count())
    want = dd.train("single", steps=STEPS, global_batch=GLOBAL_BATCH, device="cuda")
    got = dd.run_strategies(("ddp", "fsdp"), world_size=world, backend="nccl", steps=STEPS,
                            global_batch=GLOBAL_BATCH)
    for strategy, ranks in got.items():
        for rank, result in enumerate(ranks):
            assert_close(torch.tensor(result["losses"]), torch.tensor(want["losses"]), rtol=1e-5, atol=0,
                         name=f"{strategy} rank {rank}")
            assert_close(result["params"], want["params"], rtol=0, atol=1e-5, name=f"{strategy} rank {rank} weights")


# ------------------------------------------------------------------------------ byte counts
def test_zero_memory_matches_the_papers_figure_1():
    # Rajbhandari et al. 2020, Fig. 1: Psi = 7.5B parameters, N = 64 GPUs, K = 12:
    # 120 GB (baseline), 31.4 GB (P_os), 16.6 GB (P_os+g), 1.88 GB (P_os+g+p).
    psi, n = 7.5e9, 64
    got = [dd.zero_memory_per_gpu(psi, n, stage) / 1e9 for stage in range(4)]
    assert got == pytest.approx([120.0, 31.40625, 16.640625, 1.875])
    # One GPU: sharding saves nothing.
    assert {dd.zero_memory_per_gpu(psi, 1, s) for s in range(4)} == {16 * psi}
    with pytest.raises(ValueError, match="stage"):
        dd.zero_memory_per_gpu(psi, n, 4)


def test_communication_bytes():
    psi, n = 124e6, 8
    ddp = dd.zero_comm_bytes_per_gpu(psi, n, 0)
    assert ddp == pytest.approx(2 * (n - 1) / n * 2 * psi)  # ring all-reduce of bf16 gradients
    assert dd.zero_comm_bytes_per_gpu(psi, n, 1) == pytest.approx(ddp)
    assert dd.zero_comm_bytes_per_gpu(psi, n, 2) == pytest.approx(ddp)
    assert dd.zero_comm_bytes_per_gpu(psi, n, 3) == pytest.approx(1.5 * ddp)  # ZeRO-3: 1.5x DDP
    assert dd.zero_comm_bytes_per_gpu(psi, 1, 3) == 0  # alone, nothing to exchange
    cfg = m.GPT2_SMALL
    tp = dd.tensor_parallel_comm_bytes_per_gpu(cfg, batch=8, seq_len=1024, tp=2)
    # 4 all-reduces of B T d bf16 values per layer; ring factor 2 (tp - 1) / tp = 1 at tp = 2.
    assert tp == 12 * 4 * 8 * 1024 * 768 * 2
    with pytest.raises(ValueError, match="collective"):
        dd.ring_bytes("broadcast", 1.0, 2)
    with pytest.raises(ValueError, match="tp"):
        dd.tensor_parallel_comm_bytes_per_gpu(cfg, batch=8, seq_len=1024, tp=0)
