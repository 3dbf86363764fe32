"""Week 1's shared test fixtures: the Hopper GEMM launchers' host side (persistent, fused, split-K) run without a GPU
(`recorded`)."""
import sys

import pytest

from course import runtime

# The lessons are imported inside the fixture, not here: a conftest is imported before the plugins' configure hooks,
# and classroom.pytest_lesson's override (the must-fail harness's wrong module) must be in place first.
LESSONS = ("week1_cuda_python.matmul_wgmma_persistent", "week1_cuda_python.matmul_wgmma_fused",
           "week1_cuda_python.matmul_wgmma_split_k")


class _Driver:
    """Stands in for the CUDA driver: records what cuLaunchKernel is given."""
    def __init__(self):
        self.launches = []

    def cuLaunchKernel(self, kernel, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.launches.append({"kernel": kernel, "grid": (gx, gy, gz), "block": (bx, by, bz), "shared": shared})
        return 0


@pytest.fixture
def recorded(monkeypatch):
    """The launchers' host side run to cuLaunchKernel (tensors on the run's device, CPU or GPU), with the driver, the tensor maps and
    the cubin replaced by recorders: which kernel, boxes, shared memory and grid each schedule asks for."""
    import torch

    calls = {"maps": [], "kernels": []}
    driver = _Driver()

    class _Stream:
        cuda_stream = 0

    def fake_map(t, rows, cols):
        calls["maps"].append((tuple(t.shape), rows, cols))
        return bytes(128)

    def fake_kernel(*args):
        calls["kernels"].append(args)
        return args[0]

    for module in map(runtime.lesson, LESSONS):
        monkeypatch.setattr(module, "tensor_map", fake_map)
        monkeypatch.setattr(module, "_kernel", fake_kernel)
        # Each launches through the persistent rung's launch_kernel, which asks its own module's cuda_driver: the
        # solution's where an exercise stub imports it from there (--impl=exercises), the stub's own otherwise.
        monkeypatch.setattr(sys.modules[module.launch_kernel.__module__], "cuda_driver", lambda: driver)
    monkeypatch.setattr(runtime, "capability", lambda device=None: (9, 0))
    monkeypatch.setattr(runtime, "sm_count", lambda: 132)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream())
    calls["launches"] = driver.launches
    return calls
