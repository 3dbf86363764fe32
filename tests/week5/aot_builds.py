"""The AOTInductor packages the package tests share: each built ONCE per test session, whatever
the number of tests, test files or pytest-xdist workers that ask for it.

Why: compiling a package is the whole cost of these tests (two graphs, each lowered twice on a
GPU, its Triton kernels compiled and its C++ wrapper built: tens of seconds to minutes per
package), and a module fixture is per module AND per xdist worker: under `pytest -n 14` the tests
of one file spread over several workers, each compiled its own copy of the same package, and
test_package_bench.py compiled the int8 and fp8 packages a third time. Here a package is a file
under the session's shared temporary folder, named by a hash of everything it depends on (its
kind, model config, dtype, device, max batch, max length, torch's version); the first process
to ask builds it under an exclusive lock (fcntl), the others wait on that lock and read the
record it leaves: the path, the build time, and whether a fresh process could load it.

The loader probe. On the lent H100 (torch 2.11.0+cu130, 2026-12-06/07) AOTIModelPackageLoader
killed every process that loaded a CUDA package (SIGSEGV). Loading happens in a fresh process
first (`load_signal`); a package that kills it is compared with the smallest CUDA package there
is, one nn.Linear (`one_linear`, built once per session too): when that one dies as well, the
loader is broken on this machine and the tests skip, saying so; when only the course's package
dies, they fail (`require_loadable`).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from course import runtime

# The packaged shape every test shares (one build per kind): the tiny config's max_seq_len, 4 sequences.
MAX_BATCH, MAX_LEN = 4, 32
LOAD = "import sys, torch; from torch._inductor.package import load_package; load_package(sys.argv[1], *sys.argv[2:])"


def shared_root(tmp_path_factory) -> Path:
    """A folder every process of this session sees: under xdist each worker's basetemp is a
    child (popen-gwN) of one session folder, which holds the packages."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "aot_packages"
    root.mkdir(parents=True, exist_ok=True)
    return root


def load_signal(path, *model_name) -> int | None:
    """Load a package in a fresh process: the signal that killed it (a crash inside torch's C++
    loader), or None. In this process a crash would take the test worker down with it."""
    done = subprocess.run([sys.executable, "-c", LOAD, str(path), *model_name], capture_output=True, text=True,
                          timeout=300, cwd=Path(path).parent)
    return -done.returncode if done.returncode < 0 else None


def build_once(root: Path, key: dict, build, load_args=()) -> dict:
    """build(path) once per `key` in this session: {"path", "compile_s", "load_signal"}.

    A build that raised is recorded too: the process that ran it raises the error itself, every
    later one fails with its message (rather than compiling it again, as many times as there are
    tests)."""
    key = {**key, "torch": torch.__version__}
    name = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    record_path = root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if record_path.exists():
            record = json.loads(record_path.read_text())
            if "error" in record:
                pytest.fail(f"building the package {key} failed in this session already: {record['error']}")
            return record
        path = root / f"{name}.pt2"
        started = time.perf_counter()
        try:
            build(path)
        except BaseException as error:
            if not isinstance(error, (pytest.skip.Exception, runtime.NotOnThisGpu)):  # a refusal is no build error
                record_path.write_text(json.dumps({"key": key, "error": f"{type(error).__name__}: {error}"[-3000:]}))
            raise
        record = {"key": key, "path": str(path), "compile_s": time.perf_counter() - started,
                  "load_signal": load_signal(path, *load_args)}
        record_path.write_text(json.dumps(record))
        return record


def course_package(root: Path, kind: str, dtype, *, max_batch: int, max_len: int, config: str = "tiny") -> dict:
    """The record of the `kind` package ("float": aot_package.package, "int8": aot_quant.package_int8,
    "fp8": aot_quant.package_fp8) of capstone.model.build(config, "fast", dtype) (seeded: every
    process builds the same weights), loaded in a fresh process once built."""
    from capstone import model as cm
    from week5_integration import aot_package as ap
    from week5_integration import aot_quant as aq

    builder = {"float": ap.package, "int8": aq.package_int8, "fp8": aq.package_fp8}[kind]

    def build(path):
        builder(cm.build(config, "fast", dtype=dtype).eval(), path, max_batch=max_batch, max_len=max_len)

    key = {"kind": kind, "config": config, "dtype": str(dtype), "device": str(runtime.DEVICE),
           "max_batch": max_batch, "max_len": max_len}
    return build_once(root, key, build, load_args=("prefill",))


def one_linear(root: Path, device, dtype) -> dict:
    """The smallest CUDA package there is (one nn.Linear, exported and AOT-compiled with the course's link
    options, aot_package.LINK_OPTIONS), its record: a crash of it too is torch's or the machine's, not the
    course package's (with other options a skip could hide a package that the course's link breaks)."""
    from week5_integration import aot_package as ap

    def build(path):
        linear = torch.nn.Linear(64, 64).to(device, dtype)
        program = torch.export.export(linear, (torch.randn(4, 64, device=device, dtype=dtype),))
        torch._inductor.aoti_compile_and_package(program, package_path=str(path),
                                                 inductor_configs=dict(ap.LINK_OPTIONS))

    return build_once(root, {"kind": "one nn.Linear", "device": str(device), "dtype": str(dtype),
                             "link": ap.LINK_OPTIONS}, build)


def require_loadable(record: dict, root: Path, device, dtype) -> Path:
    """The package's path when a fresh process loaded it; else skip (the loader dies on a
    one-Linear package here too) or fail (only the course's package kills it)."""
    crash = record["load_signal"]
    if crash is None:
        return Path(record["path"])
    probe = one_linear(root, device, dtype)["load_signal"]
    if probe is not None:
        pytest.skip(f"torch {torch.__version__}'s AOTInductor loader dies of signal {crash} loading any CUDA "
                    f"package on this machine, a one-Linear model's too, linked the same way (signal {probe}): a fault of "
                    "torch or the "
                    "driver here, not of this package (notes/aot_package.md, 'Where it does not load'; "
                    "tools/gpu_aot_loader_probe.sh tests the hypotheses)")
    pytest.fail(f"loading the package kills a fresh process with signal {crash}, while a one-Linear package loads")
