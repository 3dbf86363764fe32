"""week1_cuda_python.hello_gpu: every thread's coordinates, checked one by one; device facts."""
import math

import pytest
import torch

from course import runtime
from course.check import assert_close, poisoned

hg = runtime.lesson("week1_cuda_python.hello_gpu")

DEVICE = runtime.DEVICE
WARP = 32


def expected_1d(n: int, threads: int) -> torch.Tensor:
    i = torch.arange(n, dtype=torch.int32)
    t = i % threads
    return torch.stack([i // threads, t, i, t // WARP, t % WARP], dim=1)


def expected_2d(rows: int, cols: int, block: tuple) -> torch.Tensor:
    bx, by = block
    row, col = torch.meshgrid(torch.arange(rows, dtype=torch.int32), torch.arange(cols, dtype=torch.int32),
                              indexing="ij")
    tx, ty = col % bx, row % by
    linear = ty * bx + tx  # warps are cut from the linear id, x fastest
    return torch.stack([col // bx, row // by, tx, ty, col, row, linear // WARP, linear % WARP], dim=2)


def expected_grid_stride(n: int, blocks: int, threads: int) -> torch.Tensor:
    i = torch.arange(n, dtype=torch.int32)
    grid = blocks * threads
    return torch.stack([i % grid, i // grid], dim=1)


def exact(actual, expected):
    assert_close(actual.cpu(), expected, rtol=0, atol=0)


# (n, threads per block): one partial block, one element, a warp and one, exact multiples.
CASES_1D = runtime.pick(gpu=[(1, 256), (31, 32), (33, 32), (1000, 256), (4097, 1024), (100_003, 96), (70, 50)],
                        sim=[(1, 256), (33, 32), (70, 50), (300, 128)])


@pytest.mark.parametrize("n, threads", CASES_1D, ids=lambda v: str(v))
def test_1d_every_thread_reports_its_coordinates(n, threads):
    out = poisoned((n, len(hg.WHO_1D)), torch.int32, DEVICE)
    assert hg.who_am_i_1d(n, threads, out=out) is out
    exact(out, expected_1d(n, threads))


def test_1d_column_names_match_the_table():
    assert hg.WHO_1D == ("block", "thread", "global", "warp", "lane")
    assert hg.WHO_2D == ("block_x", "block_y", "thread_x", "thread_y", "col", "row", "warp", "lane")
    assert hg.WHO_GRID_STRIDE == ("thread", "step")


def test_1d_guard_leaves_nothing_past_the_end():
    # 33 elements in blocks of 32: the second block has 31 idle threads. A kernel without
    # `if i < n` would write rows 33..63 of a bigger buffer: give it one and look.
    big = poisoned((64, len(hg.WHO_1D)), torch.int32, DEVICE)
    hg.who_am_i_1d(33, 32, out=big[:33])
    exact(big[:33], expected_1d(33, 32))
    assert bool((big[33:] == torch.iinfo(torch.int32).min).all()), "a thread past n wrote"


# (rows, cols, block): blocks whose warps straddle rows (16 x 3, 40 x 1), odd sizes.
CASES_2D = runtime.pick(gpu=[(1, 1, (16, 16)), (37, 45, (16, 16)), (17, 100, (16, 3)), (5, 129, (40, 1)),
                             (129, 3, (1, 64)), (1000, 1001, (32, 8))],
                        sim=[(1, 1, (16, 16)), (5, 7, (4, 3)), (9, 50, (40, 1)), (19, 20, (16, 3))])


@pytest.mark.parametrize("rows, cols, block", CASES_2D, ids=lambda v: str(v))
def test_2d_every_thread_reports_its_coordinates(rows, cols, block):
    out = poisoned((rows, cols, len(hg.WHO_2D)), torch.int32, DEVICE)
    assert hg.who_am_i_2d(rows, cols, block, out=out) is out
    exact(out, expected_2d(rows, cols, block))


CASES_STRIDE = runtime.pick(gpu=[(1, 1, 32), (1000, 2, 128), (100_003, 7, 96), (5, 4, 256)],
                            sim=[(1, 1, 32), (200, 2, 32), (5, 4, 64)])


@pytest.mark.parametrize("n, blocks, threads", CASES_STRIDE, ids=lambda v: str(v))
def test_grid_stride_covers_every_element_once(n, blocks, threads):
    out = poisoned((n, len(hg.WHO_GRID_STRIDE)), torch.int32, DEVICE)
    hg.who_am_i_grid_stride(n, blocks, threads, out=out)
    exact(out, expected_grid_stride(n, blocks, threads))


def test_empty_launches_nothing():
    assert hg.who_am_i_1d(0).shape == (0, 5)
    assert hg.who_am_i_2d(0, 7).shape == (0, 7, 8)
    assert hg.who_am_i_grid_stride(0, 3).shape == (0, 2)


def test_print_kernel_runs():
    hg.hello_print(1, 2)


def bad_calls():
    yield "n not int", TypeError, "n must be a Python int", lambda: hg.who_am_i_1d(3.0)
    yield "n bool", TypeError, "n must be a Python int", lambda: hg.who_am_i_1d(True)
    yield "n negative", ValueError, "n must be at least 0", lambda: hg.who_am_i_1d(-1)
    yield "block too big", ValueError, "at most 1024", lambda: hg.who_am_i_1d(10, 2048)
    yield "zero threads", ValueError, "threads_per_block must be at least 1", lambda: hg.who_am_i_1d(10, 0)
    yield "2d block > 1024", ValueError, "1056 threads", lambda: hg.who_am_i_2d(4, 4, (33, 32))
    yield "2d block list", TypeError, "block must be a tuple", lambda: hg.who_am_i_2d(4, 4, [16, 16])
    yield "no blocks", ValueError, "blocks must be at least 1", lambda: hg.who_am_i_grid_stride(4, 0)
    yield "out dtype", TypeError, "expected int32", \
        lambda: hg.who_am_i_1d(4, out=torch.zeros(4, 5, dtype=torch.int64, device=DEVICE))
    yield "out shape", ValueError, r"expected \(4, 5\)", \
        lambda: hg.who_am_i_1d(4, out=torch.zeros(4, 4, dtype=torch.int32, device=DEVICE))
    yield "out device", ValueError, "kernels run on", \
        lambda: hg.who_am_i_1d(4, out=torch.zeros(4, 5, dtype=torch.int32, device="meta"))
    yield "out not tensor", TypeError, "out must be a torch.Tensor", lambda: hg.who_am_i_1d(4, out=[0] * 20)


@pytest.mark.parametrize("case, error, message, call", [pytest.param(*c, id=c[0]) for c in bad_calls()])
def test_rejects_bad_arguments_before_launch(case, error, message, call):
    with pytest.raises(error, match=message):
        call()


def test_facts_table_names_every_fact():
    facts = hg.device_facts(measure=False)
    assert facts["warp_size"] == WARP
    assert facts["max_threads_per_block"] == 1024
    table = hg.facts_table(facts)
    assert "| warp size | 32 |" in table
    assert ("SIMULATION" in table) == facts["simulated"]


@pytest.mark.skipif(runtime.on_gpu(), reason="checks the simulator's labelling")
def test_simulation_facts_are_labelled():
    facts = hg.device_facts()
    assert facts["simulated"] is True
    assert "simulator" in facts["name"].lower()
    assert facts["copy_bandwidth_gbps"] is None  # nothing measured where there is no GPU


@pytest.mark.gpu(reason="the facts of a real GPU")
def test_gpu_facts_agree_with_torch_and_are_plausible():
    facts = hg.device_facts()
    props = torch.cuda.get_device_properties(DEVICE)
    assert facts["simulated"] is False
    assert facts["sm_count"] == props.multi_processor_count
    assert facts["compute_capability"] == "{}.{}".format(*torch.cuda.get_device_capability(DEVICE))
    assert facts["global_memory_bytes"] == props.total_memory
    assert facts["shared_memory_per_sm_bytes"] >= facts["shared_memory_per_block_bytes"] >= 48 * 1024
    assert facts["registers_per_sm"] >= facts["registers_per_block"] >= 32 * 1024
    assert facts["max_threads_per_sm"] % facts["warp_size"] == 0
    assert facts["l2_cache_bytes"] > 0
    assert facts["copy_bandwidth_gbps"] > 0
    if facts.get("peak_memory_bandwidth_gbps"):
        # A measured copy cannot beat the pins (a few % slack for clock reporting).
        assert facts["copy_bandwidth_gbps"] < 1.05 * facts["peak_memory_bandwidth_gbps"]
    assert math.isfinite(facts["copy_bandwidth_gbps"])
