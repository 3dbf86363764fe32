"""Workers for tests/week5/test_distributed.py's launcher tests: ranks that die the way native code dies.

`launch` spawns fresh interpreters that import a worker by its module's name; a test module is not
importable by name under pytest's importlib mode, so the workers live here and the tests put this
folder on sys.path (which spawned processes inherit). Not collected: the name does not start with test_.
"""
import os
import signal

import torch.distributed as dist


def dies_mid_work(rank, world):
    if rank == 1:
        os.kill(os.getpid(), signal.SIGABRT)  # a crash in native code: a signal, no Python exception
    return rank


def dies_tearing_down(rank, world):
    real = dist.destroy_process_group

    def destroy_then_crash(*args, **kwargs):  # what gloo's teardown did once in CI
        real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGABRT)

    dist.destroy_process_group = destroy_then_crash  # this process's module: the launcher calls it next
    return {"rank": rank}
