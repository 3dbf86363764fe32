"""week1_cuda_python.transfers: the add on either side, copies, and the GPU memory footprint."""
import numpy as np
import pytest
import torch

from course import runtime
from course.check import assert_close, poisoned, random_tensor, with_specials

tf = runtime.lesson("week1_cuda_python.transfers")

DEVICE = runtime.DEVICE
MIB = 2**20
SIZES = [0, 1, 7, 1023, 4097] + runtime.pick(gpu=[1_000_003], sim=[])


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
def test_gpu_add_with_transfers_matches_cpu(n, pinned):
    # In simulation "pinned" buffers are ordinary host memory: the same code path, no DMA.
    a, b = tf.host_buffer(n, pinned=pinned), tf.host_buffer(n, pinned=pinned)
    a.copy_(random_tensor(n, torch.float32, "cpu"))
    b.copy_(random_tensor(n, torch.float32, "cpu"))
    out = tf.host_buffer(n, pinned=pinned).fill_(float("nan"))
    assert tf.add_gpu_with_transfers(a, b, out) is out
    assert_close(out, a + b)  # one fp32 rounding on either side: identical


def test_cpu_adds_match_torch():
    a, b = random_tensor(1001, torch.float32, "cpu"), random_tensor(1001, torch.float32, "cpu")
    assert_close(tf.add_cpu_torch(a, b), a + b)
    out = np.full(1001, np.nan, dtype=np.float32)
    assert tf.add_cpu_numpy(a.numpy(), b.numpy(), out=out) is out
    assert_close(torch.from_numpy(out), a + b)


def test_specials_cross_the_bus_unchanged():
    a = with_specials(random_tensor(513, torch.float32, "cpu"))
    b = with_specials(random_tensor(513, torch.float32, "cpu")).flip(0).contiguous()
    assert_close(tf.add_gpu_with_transfers(a, b), a + b)


@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
def test_round_trip_is_bit_exact(pinned):
    host = tf.host_buffer(3001, pinned=pinned).copy_(with_specials(random_tensor(3001, torch.float32, "cpu")))
    dev = poisoned(3001, torch.float32, DEVICE)
    back = tf.host_buffer(3001, pinned=pinned).fill_(float("nan"))
    tf.h2d(host, dev)
    tf.d2h(dev, back)
    if runtime.on_gpu():
        torch.cuda.synchronize()  # a pinned d2h returns before the bytes land
    assert_close(back, host, rtol=0, atol=0)


@pytest.mark.gpu(reason="page-locked memory needs the CUDA driver")
def test_pinned_buffers_are_page_locked():
    assert tf.host_buffer(16, pinned=True).is_pinned()
    assert not tf.host_buffer(16, pinned=False).is_pinned()


def bad_inputs():
    ok = lambda n=8: torch.ones(n)  # noqa: E731
    yield "not a tensor", TypeError, "a must be a torch.Tensor", lambda: ([1.0] * 8, ok(), None)
    yield "float64", TypeError, "expected float32", lambda: (ok().double(), ok(), None)
    yield "on a device", ValueError, "starts from host", lambda: (torch.ones(8, device="meta"), ok(), None)
    yield "shapes", ValueError, "shapes must match", lambda: (ok(8), ok(9), None)
    yield "non-contiguous", ValueError, "not contiguous", lambda: (ok(16)[::2], ok(8), None)
    yield "out shape", ValueError, "shapes must match", lambda: (ok(), ok(), ok(9))
    yield "out dtype", TypeError, "out has dtype", lambda: (ok(), ok(), ok().half())


@pytest.mark.parametrize("case, error, message, make", [pytest.param(*c, id=c[0]) for c in bad_inputs()])
def test_rejects_bad_input_before_any_copy(case, error, message, make):
    a, b, out = make()
    with pytest.raises(error, match=message):
        tf.add_gpu_with_transfers(a, b, out)


def test_numpy_add_rejects_other_types():
    with pytest.raises(TypeError, match="float32 numpy array"):
        tf.add_cpu_numpy(np.ones(3), np.ones(3, dtype=np.float32))


def test_footprint_table_in_mib():
    row = {"stage": "start", "driver_free": 1024 * MIB, "driver_total": 2048 * MIB, "numba_free": 1024 * MIB,
           "numba_total": 2048 * MIB, "torch_allocated": 256 * MIB, "torch_reserved": 512 * MIB,
           "not_torch": 512 * MIB, "process_used": 700 * MIB}
    table = tf.footprint_table([row, {**row, "stage": "no NVML", "process_used": None}])
    assert "total 2,048 MiB" in table
    assert "| start | 1,024 | 700 | 256 | 512 | 512 |" in table
    assert "| no NVML | 1,024 | - | 256 | 512 | 512 |" in table


@pytest.mark.skipif(runtime.on_gpu(), reason="checks the message given where there is no GPU")
def test_footprint_needs_a_gpu():
    # Not pytest.raises(RuntimeError): NotImplementedError is a RuntimeError, and an
    # unwritten exercise should fail as "not implemented yet", not as a wrong message.
    with pytest.raises(RuntimeError) as info:
        tf.memory_footprint()
    if info.type is NotImplementedError:
        raise info.value
    assert "needs a GPU" in str(info.value)


@pytest.mark.gpu(reason="device memory exists only on a GPU")
def test_footprint_shows_the_caching_allocator():
    # Driver-side changes are read from THIS process's share (NVML), not from the GPU's free
    # memory: under `pytest -n 8` other processes allocate and free at the same time.
    nbytes = 256 * MIB
    start, alloc, deleted, emptied, numba_alloc, numba_freed = tf.memory_footprint(nbytes)
    assert all(r["process_used"] is not None for r in (start, alloc, deleted, emptied, numba_alloc, numba_freed)), \
        "NVML must report this process's GPU memory (pip install nvidia-ml-py)"
    # torch counts the tensor exactly, and takes at least its bytes from the driver.
    assert alloc["torch_allocated"] - start["torch_allocated"] == nbytes
    assert alloc["torch_reserved"] >= alloc["torch_allocated"]
    assert nbytes <= alloc["process_used"] - start["process_used"] <= nbytes + 64 * MIB
    # del: the tensor is gone, its memory stays in torch's cache, the driver sees no change.
    assert deleted["torch_allocated"] == start["torch_allocated"]
    assert deleted["torch_reserved"] == alloc["torch_reserved"]
    assert deleted["process_used"] == alloc["process_used"]
    # empty_cache gives it back.
    assert emptied["torch_reserved"] == start["torch_reserved"]
    assert deleted["process_used"] - emptied["process_used"] >= nbytes
    # Numba's allocation bypasses torch: the driver sees it, torch's counters do not.
    assert numba_alloc["torch_reserved"] == emptied["torch_reserved"]
    assert nbytes <= numba_alloc["process_used"] - emptied["process_used"] <= nbytes + 64 * MIB
    assert numba_alloc["process_used"] - numba_freed["process_used"] >= nbytes
    # Numba and torch ask the same driver about the same GPU.
    for row in (start, alloc, numba_alloc):
        assert row["numba_total"] == row["driver_total"]


