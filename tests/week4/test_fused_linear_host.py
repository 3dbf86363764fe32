"""week4_triton_dl.fused_linear's host path: the Python one call runs around its kernel.

A launcher's host cost is part of the lesson (a learner's model pays it every step). The H100 record of
2026-12-07 (results/fused_linear_rounds.*) had the TMA rung's plain and residual GEMMs host-bound, their
host time several times their GPU time: before every launch, launch_tma asked
versions.refuse_unsimulated_descriptors, which read Triton's version from its package metadata (a file
opened and parsed as a mail header; the note's "A file read on every launch"). These tests replace the
kernels by stubs (`kernel[grid](...)` does nothing) at the capstone's shapes, so only the host path runs,
on any backend:

* after the first call (which may read the dispatch table and ask torch for the GPU's facts) no call opens
  a file, reads a package's metadata or queries device properties;
* the TMA rung's host path costs at most HOST_RATIO times the tiled rung's (a ratio of two timings made in
  the same loop, so a slow or busy machine slows both; with the metadata read it was over ten times).
"""
import builtins
import io
import time
from importlib import metadata

import pytest
import torch

from course import runtime
from week4_triton_dl.fused_linear import launch, launch_tma

DEVICE = runtime.DEVICE
M, K = 8192, 768  # the capstone's tokens and model width; N below: its QKV (2304), its projections (768)
TMA_TILE = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "FLATTEN": True, "num_warps": 8, "num_stages": 4}
TILED_TILE = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
HOST_RATIO = 2.0  # the TMA rung adds two TensorDescriptor objects and an SM count: about 1.2x on a CPU
tma_gpu = pytest.mark.skipif(runtime.on_gpu() and not runtime.has_capability((9, 0)),
                             reason="the fused linear's TMA rung needs an sm_90 GPU (H100/H200)")


class _Stub:
    """A kernel that launches nothing: `stub[grid](*args, **meta)` counts the call and returns."""

    def __init__(self):
        self.launches = 0

    def __getitem__(self, grid):
        def launch_nothing(*args, **meta):
            self.launches += 1
        return launch_nothing


@pytest.fixture
def stub(monkeypatch):
    """Every kernel of the op stubbed: the TMA rung's (a module global of launch_tma), the tiled rung's
    (passed as `kernels=`), and the norm prologue's rstd kernel (its result only feeds the stubbed GEMM)."""
    s = _Stub()
    monkeypatch.setattr(launch_tma, "fused_linear_tma_kernel", s)
    monkeypatch.setattr(launch, "row_rstd", lambda x, eps: torch.empty(x.shape[0], dtype=torch.float32, device=x.device))
    return s


def _call(kind: str, rung, stub):
    """A no-argument call of fused_linear for `kind` at the capstone's shapes (rung None: the op's own
    choice, the dispatch table's row where this GPU measured one), with the tensors made once."""
    dt = torch.bfloat16 if runtime.on_gpu() else torch.float16  # the capstone's dtype where bf16 runs natively
    N = 768 if kind == "residual" else 2304
    x = torch.empty(M, K, dtype=dt, device=DEVICE)
    weight = torch.empty(2 * 2048 if kind == "swiglu" else N, K, dtype=dt, device=DEVICE)
    kw = {"kernels": launch.Kernels(stub, stub, stub), "rung": rung}
    if rung is not None:
        kw["tile"] = TMA_TILE if rung == launch_tma.RUNG else TILED_TILE
    if kind == "residual":
        kw["residual"] = torch.empty(M, N, dtype=dt, device=DEVICE)
    if kind == "swiglu":
        kw["swiglu"] = True
    if kind == "norm":
        kw["norm_weight"] = torch.empty(K, dtype=dt, device=DEVICE)
    if kind != "swiglu":
        kw["out"] = torch.empty(M, N, dtype=dt, device=DEVICE)
    return lambda: launch.fused_linear(x, weight, **kw)


CALLS = [("plain", None), ("residual", None), ("swiglu", None), ("norm", None),
         ("plain", launch_tma.RUNG), ("residual", launch_tma.RUNG), ("plain", "tiled")]


@tma_gpu
@pytest.mark.parametrize("kind, rung", CALLS, ids=[f"{k}-{r or 'dispatched'}" for k, r in CALLS])
def test_no_file_metadata_or_device_query_after_the_first_call(kind, rung, stub, monkeypatch):
    call = _call(kind, rung, stub)
    call()  # the first call may read the dispatch table and ask for the GPU's facts: then they are kept
    seen = []

    def counting(name, real):
        def wrapper(*args, **kwargs):
            seen.append(f"{name}{args[:1]}")
            return real(*args, **kwargs)
        return wrapper

    # pathlib and importlib.metadata open files through io.open; open() is builtins.open
    monkeypatch.setattr(io, "open", counting("open", io.open))
    monkeypatch.setattr(builtins, "open", counting("open", builtins.open))
    monkeypatch.setattr(metadata, "version", counting("metadata.version", metadata.version))
    monkeypatch.setattr(torch.cuda, "get_device_properties", counting("get_device_properties", torch.cuda.get_device_properties))
    monkeypatch.setattr(torch.cuda, "get_device_capability", counting("get_device_capability", torch.cuda.get_device_capability))
    launches = stub.launches
    for _ in range(3):
        call()
    assert not seen, f"fused_linear({kind}, rung={rung}) re-reads on every call: {seen[:4]}; cache it (per device/shape)"
    if kind in ("plain", "residual"):
        assert stub.launches == launches + 3  # the GEMM went through a stub, not a real kernel


def _best_microseconds(calls: dict, repeats: int = 9, per_repeat: int = 40) -> dict:
    """{name: the best, over `repeats`, of the mean time of `per_repeat` calls}; the calls are timed in
    turn within each repeat, so a burst of load on the machine falls on all of them alike."""
    best = dict.fromkeys(calls, float("inf"))
    for f in calls.values():
        f()
    for _ in range(repeats):
        for name, f in calls.items():
            start = time.perf_counter()
            for _ in range(per_repeat):
                f()
            best[name] = min(best[name], (time.perf_counter() - start) / per_repeat * 1e6)
    return best


@tma_gpu
@pytest.mark.parametrize("kind", ("plain", "residual"))
def test_the_tma_rungs_host_path_costs_about_the_tiled_rungs(kind, stub):
    us = _best_microseconds({"tma": _call(kind, launch_tma.RUNG, stub), "tiled": _call(kind, "tiled", stub)})
    assert us["tma"] <= HOST_RATIO * us["tiled"], (
        f"{kind}: the TMA rung's host path takes {us['tma']:.1f} us a call, the tiled rung's {us['tiled']:.1f} us "
        f"(more than {HOST_RATIO}x): something on launch_tma's path is per-call work that could be cached")
