"""course.launch: the cached launch computes what Triton's own launch computes, or falls back to it."""
import pytest
import torch

from course import launch as fast
from course import runtime
from course.check import assert_close, poisoned, random_tensor
from course.gpu import triton, tl

DEVICE = runtime.DEVICE


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr, NEGATE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    out = alpha * x + y
    if NEGATE:
        out = -out
    tl.store(out_ptr + offsets, out, mask=mask)


def axpy(x, y, alpha, negate=False, block=128):
    out = poisoned(x.shape, x.dtype, DEVICE)
    n = x.numel()
    # The key pins what the compiled kernel is specialized on: dtype, constexprs, and n (an int
    # argument: Triton specializes it on == 1 and on divisibility by 16).
    fast.launch(axpy_kernel, (triton.cdiv(n, block),), (x.dtype, n, block, negate),
                (x, y, out, n, alpha, block, negate), num_warps=4)
    return out


@pytest.mark.parametrize("n", [1, 16, 1000, 4099])
@pytest.mark.parametrize("negate", [False, True])
def test_cached_launch_matches_the_reference(n, negate):
    x, y = random_tensor(n, torch.float32, DEVICE), random_tensor(n, torch.float32, DEVICE)
    for alpha in (2.0, -0.5):  # the second call with the same key takes the cached path on a GPU
        want = (alpha * x.double() + y.double()) * (-1 if negate else 1)
        assert_close(axpy(x, y, alpha, negate), want.float())


def test_a_misaligned_view_takes_triton_own_path():
    base = random_tensor(1025, torch.float32, DEVICE)
    y = random_tensor(1024, torch.float32, DEVICE)
    axpy(base[:1024], y, 1.0)  # cache the aligned variant for this key
    x = base[1:]  # 4 bytes past a 16-byte boundary: the cached kernel assumed alignment
    assert x.data_ptr() % 16
    assert_close(axpy(x, y, 3.0), (3.0 * x.double() + y.double()).float())


@pytest.mark.gpu(reason="CUDA graphs exist only on a GPU")
def test_cached_launch_is_captured_by_a_cuda_graph():
    x, y = random_tensor(4096, torch.float32, DEVICE), random_tensor(4096, torch.float32, DEVICE)
    out = torch.empty_like(x)
    key = (x.dtype, 4096, 128, False)
    fast.launch(axpy_kernel, (32,), key, (x, y, out, 4096, 2.0, 128, False), num_warps=4)  # compile + cache
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # the cached path must launch on the capturing stream
        fast.launch(axpy_kernel, (32,), key, (x, y, out, 4096, 2.0, 128, False), num_warps=4)
    x.copy_(random_tensor(4096, torch.float32, DEVICE))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert_close(out, (2.0 * x.double() + y.double()).float())
    assert fast.cached_kernels() >= 1


@pytest.mark.gpu(reason="the cached path exists only on a GPU")
def test_a_registered_launch_hook_still_sees_cached_launches():
    """Empty hook chains are skipped for speed; a registered hook (a profiler's) must still run."""
    from triton import knobs

    x, y = random_tensor(256, torch.float32, DEVICE), random_tensor(256, torch.float32, DEVICE)
    axpy(x, y, 1.0)  # compile + cache this key
    seen = []
    hook = lambda metadata: seen.append(metadata.get()["name"])  # noqa: E731  (a LazyDict)
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        out = axpy(x, y, 2.0)  # the cached path
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert seen == ["axpy_kernel"]
    assert_close(out, (2.0 * x.double() + y.double()).float())
    axpy(x, y, 3.0)
    assert seen == ["axpy_kernel"], "a removed hook must not be called again"
