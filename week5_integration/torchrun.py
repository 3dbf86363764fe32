"""One torchrun job, from either side: a process joining the group, and the driver that starts the jobs.

Week 5's measuring bench (`scaleout.py`) and the capstone's (`capstone/fsdp.py`) run the same way:
`torchrun --nproc-per-node 1 -m MODULE run --stage DIR`, then the same with N processes, each rank
0 writing `DIR/<name>.json` after every job; then `MODULE report` merges the files into one results
record. This module is that shape, once:
* in each process: `init_from_env` (join the group torchrun describes, or a group of one),
  `max_over_ranks` (the slowest rank sets a step's time), `from_every_rank`, `free_memory`, `sync`,
  `write_stage`;
* on the driving side: `drive` (the two torchrun jobs, then the report) and `publish` (print the
  table; save it only when GPUs measured it).
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist


# ------------------------------------------------------------------------------ in each process
def init_from_env(device_kind: str) -> tuple[int, int, torch.device]:
    """Join the group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT); without
    torchrun, a group of one through a file in a temporary folder. Returns (rank, world, device)."""
    if device_kind not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device_kind!r}")
    if device_kind == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: no CUDA GPU here (use --device cpu --tiny for a gloo dry run)")
    local = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if device_kind == "cuda" else torch.device("cpu")
    backend = "nccl" if device_kind == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        kwargs = {"device_id": device} if backend == "nccl" else {}
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            dist.init_process_group(backend, **kwargs)
        else:
            folder = tempfile.mkdtemp(prefix="scaleout-")
            dist.init_process_group(backend, init_method=f"file://{folder}/rendezvous", rank=0, world_size=1,
                                    **kwargs)
    if backend == "gloo" and "RANK" in os.environ:  # N processes on the cores: a share each
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // dist.get_world_size()))
    return dist.get_rank(), dist.get_world_size(), device


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_memory(device: torch.device) -> None:
    """Collect garbage and return cached blocks, so the next measurement's peak memory is its own."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def max_over_ranks(values: list[float], device: torch.device) -> list[float]:
    """Each value's maximum over the ranks (the slowest rank sets a step's time); values as they
    are without a process group."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()



def from_every_rank(value) -> list:
    """`value` of every rank, in rank order (every rank calls it); [value] without a group of several."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return [value]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def write_stage(record: dict, stage: Path, name: str) -> None:
    """Write one job's record into the stage folder atomically (a reader never sees half a file)."""
    stage = Path(stage)
    stage.mkdir(parents=True, exist_ok=True)
    tmp = stage / f".{name}.tmp"
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(stage / name)


# ------------------------------------------------------------------------------ the driver
def torchrun_command(module: str, nproc: int, args: list[str]) -> list[str]:
    """`python -m torch.distributed.run --standalone --nproc-per-node=NPROC -m MODULE run ARGS`."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", module, "run", *args]


def publish(record: dict, out: Path | None, markdown: Callable[[dict], str],
            save: Callable[[dict, Path], list[Path]]) -> None:
    """Print the record's table; write it into `out` only when GPUs measured it (results/ holds no
    figures of a gloo dry run)."""
    print(markdown(record))
    if out is not None and not record["simulated"]:
        for path in save(record, Path(out)):
            print("wrote", path)
    elif out is not None:
        print("(gloo on the CPU: nothing saved; results/ holds only figures measured on GPUs)")


def drive(module: str, gpus: int, *, report: Callable[[Path], dict], markdown: Callable[[dict], str],
          save: Callable[[dict, Path], list[Path]], out: Path | None = None, stage: Path | None = None,
          run_args: list[str] = (), extra: list[str] = ()) -> int:
    """`MODULE run` under torchrun with 1 process, then with `gpus` (profiled), then `report(stage)`,
    published: what each bench's `all` does. `run_args` go to both jobs (the bench's own flags),
    `extra` too (a caller's). Without a GPU both jobs are gloo dry runs of the same path (`--device
    cpu --tiny`). Returns the first non-zero exit status of the two jobs, or 0."""
    stage = Path(stage or tempfile.mkdtemp(prefix=module.rpartition(".")[2] + "-"))
    extra = list(extra)
    if not torch.cuda.is_available():
        extra += ["--device", "cpu", "--tiny"]
    status = 0
    for nproc, flags in ((1, []), (gpus, ["--profile"])):
        command = torchrun_command(module, nproc, ["--stage", str(stage), *run_args, *flags, *extra])
        print("running:", " ".join(command), file=sys.stderr, flush=True)
        status = status or subprocess.call(command)
    publish(report(stage), out, markdown, save)
    return status
