"""Data parallelism across processes: DDP, ZeRO-1, and FSDP (ZeRO-2/3), the same step each way.

N processes (one per GPU; or per CPU core with the gloo backend) each hold a model and take a
1/N shard of every global batch. After backward the gradients must be averaged across processes,
so that every copy takes the same optimizer step as one process would on the whole batch. The
strategies differ in what each process keeps, and so in what they must communicate:

* ``ddp`` (`DistributedDataParallel`): every process keeps everything (parameters, gradients,
  optimizer state); backward all-reduces the gradients in buckets, overlapped with the rest of
  backward. With Adam in mixed precision that is 16 bytes per parameter on every GPU
  (bf16 weights 2 + bf16 grads 2 + fp32 master weights, m and v 12; Rajbhandari et al. 2020).
* ``zero1`` (DDP + `ZeroRedundancyOptimizer`): the optimizer state is sharded, each process
  updates only its 1/N of the parameters, then broadcasts them (ZeRO stage 1).
* ``fsdp_grad_op`` (`fully_shard(..., reshard_after_forward=False)`): parameters, gradients and
  optimizer state are sharded at rest; a layer's parameters are all-gathered for its forward
  and kept until its backward, and gradients are reduce-scattered (ZeRO stage 2 / FSDP's
  SHARD_GRAD_OP).
* ``fsdp`` (`fully_shard(...)`): the same, but the gathered parameters are freed after each
  layer's forward and gathered again for its backward (ZeRO stage 3 / FULL_SHARD): the least
  memory, 1.5x DDP's communication.

`fully_shard` is FSDP2 (`torch.distributed.fsdp.fully_shard`, public since torch 2.6, in both the
2.11 and 2.13 this course runs): each `Block` is its own unit, then the root module takes the rest
(embedding, tied head, final norm). Units are what gets gathered at once, so peak memory holds one
block's full parameters, not the model's.

Correctness: with equal shards, the mean of the per-shard mean losses is the global mean loss,
and averaging gradients across processes gives the global batch's gradient. So every strategy
must reproduce the single-process losses and weights up to float32 reduction order
(`tests/week5/test_distributed.py` checks it with 2 gloo processes on the CPU).

Byte counts (`zero_memory_per_gpu`, `zero_comm_bytes_per_gpu`, `tensor_parallel_comm_bytes_per_gpu`;
the lesson's notes work them out for the 124M model): ring all-reduce sends and receives
2 (N-1)/N x M bytes per process, a reduce-scatter or an all-gather (N-1)/N x M. DDP, ZeRO-1 and
ZeRO-2 move 2 Psi values per step (reduce-scatter + all-gather = all-reduce), ZeRO-3 3 Psi.
Megatron-style tensor parallelism (Shoeybi et al. 2019) splits every weight matrix instead and
all-reduces activations: 4 all-reduces of B x T x d values per layer per step.

The measurement (tokens/s per strategy) and its command line live in distributed_bench.py:

    python -m week5_integration.distributed_bench --gpus 2 --steps 20     # NCCL: tokens/s per strategy
"""
from __future__ import annotations

import faulthandler
import os
import statistics
import sys
import tempfile
import time
import warnings
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

from week5_integration import data
from week5_integration import model as m

STRATEGIES = ("ddp", "zero1", "fsdp_grad_op", "fsdp")
ZERO_STAGE = {"ddp": 0, "zero1": 1, "fsdp_grad_op": 2, "fsdp": 3}
BENCHMARK_NAME = "fsdp_week5"


# ------------------------------------------------------------------------------ byte counts
def _check_counts(**values):
    for name, value in values.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive number, got {value!r}")


def zero_memory_per_gpu(params: float, world: int, stage: int, *, param_bytes: int = 2, grad_bytes: int = 2,
                        optimizer_bytes: int = 12) -> float:
    """Bytes of model state per GPU under ZeRO stage 0 (DDP) to 3 (Rajbhandari et al. 2020, Fig. 1).

    Mixed-precision Adam: `param_bytes` (bf16 weights) + `grad_bytes` (bf16 grads) +
    `optimizer_bytes` (K = 12: fp32 master weights, m, v) per parameter. Stage 1 shards the
    optimizer state over `world` GPUs, 2 the gradients too, 3 the weights too. Activations,
    buffers and fragmentation are not included.
    """
    # BEGIN EXERCISE: check params and world (_check_counts) and stage in 0..3 (ValueError "stage must be ...");
    #   per parameter param + grad + optimizer bytes, of which stage 1 divides the optimizer's by world,
    #   stage 2 also the gradients', stage 3 also the parameters'
    # HINT: ZeRO removes the redundancy of data parallelism one state at a time: stage 1 shards the
    #   optimizer state over the GPUs, stage 2 also the gradients, stage 3 also the weights.
    # HINT: Validate first (_check_counts, then the stage); total bytes per parameter = param + grad +
    #   optimizer; the sharded part is the first `stage` of [optimizer, grad, param]; it counts 1/world, the
    #   rest in full.
    # HINT: `sharded = sum([optimizer_bytes, grad_bytes, param_bytes][:stage])`
    _check_counts(params=params, world=world)
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage!r}")
    total = param_bytes + grad_bytes + optimizer_bytes
    sharded = sum([optimizer_bytes, grad_bytes, param_bytes][:stage])  # stage 1 shards the first, ...
    return params * (total - sharded + sharded / world)
    # END EXERCISE


def ring_bytes(collective: str, nbytes: float, world: int) -> float:
    """Bytes each process sends (and receives) in a ring collective over `nbytes` of data."""
    _check_counts(world=world)
    factor = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}
    if collective not in factor:
        raise ValueError(f"collective must be one of {sorted(factor)}, got {collective!r}")
    return factor[collective] * (world - 1) / world * nbytes


def zero_comm_bytes_per_gpu(params: float, world: int, stage: int, *, value_bytes: int = 2) -> float:
    """Bytes each GPU sends per training step for data parallelism at ZeRO `stage`.

    Stage 0 (DDP): all-reduce the gradients. 1 and 2: reduce-scatter the gradients, all-gather
    the updated weights: the same bytes as the all-reduce. 3: all-gather the weights for the
    forward, again for the backward, reduce-scatter the gradients: 1.5x.
    """
    # BEGIN EXERCISE: check params and stage as zero_memory_per_gpu; stage 0: ring_bytes("all_reduce", params x
    #   value_bytes, world); stages 1-2: a reduce-scatter + one all-gather; stage 3: a reduce-scatter + two
    #   all-gathers
    # HINT: An all-reduce is a reduce-scatter plus an all-gather, so ZeRO 1-2 move the same bytes as DDP;
    #   stage 3 must gather the weights twice (forward and backward): 1.5x.
    # HINT: Validate; size = params * value_bytes; stage 0 returns one ring all-reduce; otherwise one ring
    #   reduce-scatter plus 1 or 2 ring all-gathers of the same size.
    # HINT: `ring_bytes("reduce_scatter", size, world) + gathers * ring_bytes("all_gather", size, world)`
    _check_counts(params=params)
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage!r}")
    size = params * value_bytes
    if stage == 0:
        return ring_bytes("all_reduce", size, world)
    gathers = 2 if stage == 3 else 1
    return ring_bytes("reduce_scatter", size, world) + gathers * ring_bytes("all_gather", size, world)
    # END EXERCISE


def tensor_parallel_comm_bytes_per_gpu(cfg: m.GPTConfig, *, batch: int, seq_len: int, tp: int,
                                       value_bytes: int = 2) -> float:
    """Bytes each GPU sends per step under Megatron-style tensor parallelism of degree `tp`.

    Per layer: attention (QKV column-parallel by heads, output projection row-parallel) and the
    MLP (up column-parallel, down row-parallel) each end in one all-reduce of the (B, T, d)
    activations in the forward and need one of the gradient in the backward: 4 all-reduces per
    layer (Shoeybi et al. 2019, Sec. 3). The vocabulary-parallel embedding/head adds a few more
    (left out: one layer's worth).
    """
    # BEGIN EXERCISE: check batch, seq_len, tp (_check_counts); n_layers x 4 ring all-reduces of batch x seq_len x
    #   d_model x value_bytes over tp processes
    # HINT: Megatron tensor parallelism all-reduces an activation-sized tensor twice per layer in the
    #   forward (after attention and after the MLP) and twice in the backward: 4 per layer.
    # HINT: Validate the counts; one activation is batch * seq_len * d_model * value_bytes; multiply a ring
    #   all-reduce of it over tp by n_layers * 4.
    _check_counts(batch=batch, seq_len=seq_len, tp=tp)
    activation = batch * seq_len * cfg.d_model * value_bytes
    return cfg.n_layers * 4 * ring_bytes("all_reduce", activation, tp)
    # END EXERCISE


# ----------------------------------------------------------------------------- the step
class LossModel(nn.Module):
    """GPT + loss in one forward, so DDP/FSDP see the whole step through `forward` (DDP prepares
    its gradient reduction in forward; calling `model.loss` on the inner module would bypass it)."""

    def __init__(self, gpt: m.GPT):
        super().__init__()
        self.gpt = gpt

    def forward(self, x, y):
        return self.gpt.loss(x, y)


def shard_batch(x: torch.Tensor, y: torch.Tensor, rank: int, world: int):
    """This rank's contiguous 1/world of the global batch (rows), inputs and targets."""
    # BEGIN EXERCISE: check 0 <= rank < world (ValueError naming rank) and that the rows split evenly (ValueError
    #   "... does not split evenly ..."); return rows [rank B / world, (rank + 1) B / world) of x and of y
    # HINT: Each rank trains on its own contiguous slice of the global batch; the slices must be equal, or
    #   averaging the ranks' mean losses would weight tokens unequally.
    # HINT: Validate rank and world (ints, 0 <= rank < world) and divisibility, each with a ValueError
    #   naming the values; rows = B // world; slice x and y identically.
    # HINT: `x[rank * rows:(rank + 1) * rows]`
    if not isinstance(world, int) or world < 1 or not isinstance(rank, int) or not 0 <= rank < world:
        raise ValueError(f"need 0 <= rank < world, got rank={rank!r}, world={world!r}")
    if x.shape[0] % world:
        raise ValueError(f"global batch of {x.shape[0]} rows does not split evenly over {world} processes: "
                         "unequal shards would weight their tokens unequally in the averaged gradient")
    rows = x.shape[0] // world
    return x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows]
    # END EXERCISE


def fsdp_mesh(device: torch.device):
    """All the processes of the group as one 1-D mesh on `device`'s type.

    Without a mesh, fully_shard builds one on the machine's accelerator: with gloo processes
    computing on the CPU of a GPU machine it would move every shard to cuda:0.
    """
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh(torch.device(device).type, (dist.get_world_size(),))


def wrap_model(strategy: str, gpt: m.GPT, lr: float, device: torch.device):
    """(module to call, optimizer) for a strategy; the model is already on `device`."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    # BEGIN EXERCISE: module = LossModel(gpt). single: AdamW on it. ddp: DDP(module, device_ids=[device.index]
    #   on CUDA, None on the CPU), AdamW on its parameters. zero1: DDP + ZeroRedundancyOptimizer
    #   (optimizer_class=torch.optim.AdamW). fsdp / fsdp_grad_op: fully_shard each block, then the root module,
    #   with mesh=fsdp_mesh(device) and reshard_after_forward True / False; AdamW on module.parameters()
    # HINT: Each strategy is a wrapper plus an optimizer: DDP replicates and all-reduces gradients; ZeRO-1
    #   keeps DDP but shards the optimizer state; FSDP (fully_shard) shards parameters per block.
    # HINT: Wrap LossModel(gpt); device_ids only on CUDA; for FSDP call fully_shard on every block first,
    #   then on the root module (embedding, head, final norm), with reshard_after_forward True for fsdp and
    #   False for fsdp_grad_op; the optimizer always gets the wrapped module's parameters.
    # HINT: `ZeroRedundancyOptimizer(wrapped.parameters(), optimizer_class=torch.optim.AdamW, lr=lr)`
    module = LossModel(gpt)
    ids = [device.index] if device.type == "cuda" else None
    if strategy == "single":
        return module, torch.optim.AdamW(module.parameters(), lr=lr)
    if strategy == "ddp":
        wrapped = DDP(module, device_ids=ids)
        return wrapped, torch.optim.AdamW(wrapped.parameters(), lr=lr)
    if strategy == "zero1":
        wrapped = DDP(module, device_ids=ids)
        return wrapped, ZeroRedundancyOptimizer(wrapped.parameters(), optimizer_class=torch.optim.AdamW, lr=lr)
    reshard = strategy == "fsdp"
    mesh = fsdp_mesh(device)
    for block in gpt.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(module, mesh=mesh, reshard_after_forward=reshard)  # the root: embedding, tied head, final norm
    return module, torch.optim.AdamW(module.parameters(), lr=lr)
    # END EXERCISE


def full_parameters(module: nn.Module) -> torch.Tensor:
    """Every parameter, unsharded, flattened into one float32 vector (a collective under FSDP:
    every rank must call it)."""
    parts = []
    for p in module.parameters():
        t = p.detach()
        if hasattr(t, "full_tensor"):  # a DTensor shard (FSDP2): gather the whole tensor
            t = t.full_tensor()
        parts.append(t.float().reshape(-1).cpu())
    return torch.cat(parts)


def global_batches(cfg: m.GPTConfig, global_batch: int, seq_len: int, seed: int):
    """The same batches, in the same order, in every process (the corpus and Batches are seeded)."""
    tokens = data.encode(data.corpus("stories", 40_000, seed=seed))
    return data.Batches(tokens, global_batch, seq_len, seed=seed)


def train(strategy: str, *, rank: int = 0, world: int = 1, cfg: m.GPTConfig | None = None, steps: int = 3,
          global_batch: int = 4, seq_len: int | None = None, seed: int = 0, lr: float = 1e-3,
          device=None, amp: bool = False, warmup: int = 0, return_params: bool = True) -> dict:
    """Train `steps` steps with `strategy` ("single" without a process group); return
    {"losses": global mean loss per step, "local_losses": this rank's shard's, "params": final weights (flat fp32; None unless
    return_params), "step_ms": median step time after `warmup` extra steps, "peak_mib": peak
    GPU memory or None}. Rank r takes rows [r B/N, (r+1) B/N) of each global batch of B rows.
    """
    if strategy != "single" and strategy not in STRATEGIES:
        raise ValueError(f"strategy must be 'single' or one of {STRATEGIES}, got {strategy!r}")
    if strategy != "single" and not dist.is_initialized():
        raise RuntimeError(f"strategy {strategy!r} needs a process group: run it through `launch`")
    cfg = cfg or m.config(m.GPT_TINY, vocab_size=data.VOCAB_SIZE)
    seq_len = seq_len or cfg.max_seq_len
    device = torch.device("cpu") if device is None else torch.device(device)
    torch.manual_seed(seed)  # the same initial weights in every process (FSDP does not broadcast)
    gpt = m.GPT(cfg).to(device)
    module, opt = wrap_model(strategy, gpt, lr, device)
    batches = global_batches(cfg, global_batch, seq_len, seed)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if amp else nullcontext()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses, local_losses, times = [], [], []
    for step in range(warmup + steps):
        x, y = batches.next()
        x, y = (t.to(device) for t in shard_batch(x, y, rank, world))
        _sync(device)
        t0 = time.perf_counter()
        with autocast:
            loss = module(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss = loss.detach().float()
        local = float(loss)  # this rank's shard mean, before averaging
        # BEGIN EXERCISE: the global batch's mean loss from this rank's shard mean: with world > 1, all-reduce
        #   `loss` (a sum over the ranks) and divide by world (equal shards)
        # HINT: Each rank's loss is the mean over its shard; with equal shards the global mean is the mean
        #   of the ranks' means: sum them with a collective, divide by world.
        # HINT: Only when world > 1: an in-place dist.all_reduce (default op SUM) on the loss tensor, then
        #   divide by world.
        if world > 1:
            dist.all_reduce(loss)  # sum of the shard means; / world = the global mean (equal shards)
            loss /= world
        # END EXERCISE
        _sync(device)
        if step >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
            losses.append(float(loss))
            local_losses.append(local)
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    params = full_parameters(module) if return_params else None
    return {"losses": losses, "local_losses": local_losses, "params": params, "step_ms": statistics.median(times),
            "peak_mib": peak}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------------------- launching
def _entry(rank: int, world: int, backend: str, out_dir: str, fn, args: tuple) -> None:
    # A rank that dies in native code (a signal, no Python exception) prints every thread's Python
    # stack first, so a log shows where it was: in `fn`, or in the process group's teardown.
    faulthandler.enable(all_threads=True)
    if backend == "gloo":
        torch.set_num_threads(1)  # N processes on a few cores: one thread each, no oversubscription
    device_id = None
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device_id = torch.device("cuda", rank)
    # The processes meet through a file in the launcher's temporary folder (a FileStore) rather
    # than a TCP port: no race with other programs for a "free" port between choosing and binding.
    # NCCL and gloo still make their own connections for the collectives.
    dist.init_process_group(backend, init_method=f"file://{os.path.join(out_dir, 'rendezvous')}", rank=rank,
                            world_size=world, device_id=device_id)
    try:
        result = fn(rank, world, *args)
    except BaseException:
        dist.destroy_process_group()  # then the exception travels to the launcher as before
        raise
    path = os.path.join(out_dir, f"rank{rank}.pt")
    torch.save(result, path + ".part")
    os.replace(path + ".part", path)  # whole or absent: a rank that dies later leaves a complete result
    # Leave together: a rank that tears its process group down while another still has
    # gloo work in flight with it can make that rank's background thread abort the process
    # ("terminate called without an active exception", seen once in CI under xdist).
    dist.barrier()
    dist.destroy_process_group()
    # Leave without the interpreter's shutdown: gloo's worker threads can still hold tensors whose
    # destruction needs the GIL while Python is being torn down, which aborts a finished process
    # (SIGABRT, "malloc(): unaligned fastbin chunk detected", seen once in CI). Nothing is left to
    # run or flush but the standard streams.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def launch(fn, world_size: int, *args, backend: str | None = None) -> list:
    """Run `fn(rank, world_size, *args)` in `world_size` new processes; return each rank's result.

    `fn` must be a module-level function (the processes are spawned: fresh interpreters that
    import it by name). Backend: "nccl" (one GPU per rank) or "gloo" (CPU); default nccl when
    there are enough GPUs. Each rank's return value travels back through a file (torch.save),
    not a pipe, so a large result cannot deadlock a process at exit. A rank that dies from a signal
    after every rank saved its result died tearing the process group down, not computing: the
    results stand, with a warning. A death before that is an error naming the ranks without a result.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = backend or ("nccl" if gpus >= world_size else "gloo")
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend must be 'nccl' or 'gloo', got {backend!r}")
    if backend == "nccl" and gpus < world_size:
        raise ValueError(f"nccl needs one GPU per process: {world_size} processes, {gpus} GPU(s) here")
    with tempfile.TemporaryDirectory() as out_dir:
        try:
            mp.start_processes(_entry, args=(world_size, backend, out_dir, fn, args),
                               nprocs=world_size, join=True, start_method="spawn")
        except mp.ProcessRaisedException as error:
            last = str(error).strip().splitlines()[-1]
            raise RuntimeError(f"a worker process failed: {last}\n{error}") from None
        except mp.ProcessExitedException as error:  # died without a Python exception (killed, OOM)
            running = [r for r in range(world_size) if not os.path.exists(os.path.join(out_dir, f"rank{r}.pt"))]
            if running:
                raise RuntimeError(f"a worker process died: {error} (rank(s) {running} had not saved a result; "
                                   f"a rank killed by a signal printed every thread's Python stack to stderr, "
                                   f"above)") from None
            warnings.warn(f"a worker process died after every rank had saved its result ({error}): "
                          f"a crash in {backend}'s teardown; the results are complete and are used",
                          RuntimeWarning, stacklevel=2)
        return [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(world_size)]


def _compare_worker(rank: int, world: int, strategies: tuple, kwargs: dict) -> dict:
    device = torch.device("cuda", rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    results = {}
    for strategy in strategies:
        results[strategy] = train(strategy, rank=rank, world=world, device=device, **kwargs)
        dist.barrier()
    return results


def run_strategies(strategies=STRATEGIES, *, world_size: int = 2, backend: str | None = None, **kwargs) -> dict:
    """{strategy: [rank 0's result, rank 1's, ...]}: each strategy trained in the same
    `world_size` processes one after the other (one spawn for all). kwargs go to `train`."""
    strategies = tuple(strategies)
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; choose from {STRATEGIES}")
    per_rank = launch(_compare_worker, world_size, strategies, kwargs, backend=backend)
    return {s: [r[s] for r in per_rank] for s in strategies}
