"""Exercise: CUDA streams with pinned memory. Same names as week1_cuda_python/streams.py.

Check your work with `pytest tests/week1/test_streams.py --impl=exercises` (the pipelines
themselves are tested on a GPU only; chunk_bounds and the torch serial path everywhere).

The pipeline: for each chunk (lo, hi) of chunk_bounds(n, chunks), on stream c % streams:
copy a[lo:hi] and b[lo:hi] in (drv.memcpy_htod_async(device_ptr + 4 * lo, a_numpy[lo:hi],
stream)), launch busy_add_f32 on the chunk, copy out[lo:hi] back (drv.memcpy_dtoh_async);
then synchronise the streams before returning. drv = runtime.pycuda_driver(); streams are
drv.Stream(); host tensors must be float32, on the CPU, contiguous, same shape, and pinned
(except empty ones: they hold no memory to pin, and the pipeline returns an empty out).
Input errors: TypeError/ValueError naming the argument; RuntimeError without a GPU.
"""
from __future__ import annotations

from pathlib import Path

import torch  # noqa: F401

from course import runtime  # noqa: F401
from course import interop  # noqa: F401
from course.check import random_tensor

CUDA_SOURCE = Path(__file__).parent / "kernels" / "streams.cu"  # your CUDA C file
THREADS_PER_BLOCK = 256
CHUNK_ALIGN = 64
DEFAULT_STREAMS = 4
DEFAULT_CHUNKS = 8


def chunk_bounds(n, chunks, align=CHUNK_ALIGN):
    """[(lo, hi), ...] covering range(n) in order: at most `chunks` non-empty pieces of one
    size (a multiple of `align`; the last may be shorter). [] for n = 0. TypeError for
    non-int (or bool) arguments, ValueError for n < 0, chunks < 1, align < 1."""
    raise NotImplementedError("not implemented yet: chunk_bounds (week1 exercise)")


def busy_add_reference(a, b, iters=0, out=None):
    """The reference (given): v = a + b, then `iters` times v = v * 0.5 + b."""
    v = torch.add(a, b, out=out)
    for _ in range(iters):
        v.mul_(0.5).add_(b)
    return v


def pipeline_serial(a, b, out=None, *, iters=0):
    """One stream, one chunk: the baseline."""
    raise NotImplementedError("not implemented yet: pipeline_serial (week1 exercise)")


def pipeline_streams(a, b, out=None, *, iters=0, streams=DEFAULT_STREAMS, chunks=DEFAULT_CHUNKS):
    """Chunks on PyCUDA streams, round-robin."""
    raise NotImplementedError("not implemented yet: pipeline_streams (week1 exercise)")


def pipeline_torch_serial(a, b, out=None, *, iters=0):
    """The same in torch on one stream: copies in, busy_add_reference on the device, copy out.
    Works from pageable memory and in simulation too."""
    raise NotImplementedError("not implemented yet: pipeline_torch_serial (week1 exercise)")


def pipeline_torch_streams(a, b, out=None, *, iters=0, streams=DEFAULT_STREAMS, chunks=DEFAULT_CHUNKS):
    """Chunks on torch.cuda.Stream()s (`with torch.cuda.stream(s):`, non_blocking copies).
    torch's side streams do not wait for the default stream: s.wait_stream(...) first."""
    raise NotImplementedError("not implemented yet: pipeline_torch_streams (week1 exercise)")


def overlap_report(n, *, iters=0, streams=DEFAULT_STREAMS, chunks=DEFAULT_CHUNKS, reps=5):
    """{"n", "iters", "streams", "chunks", "h2d_ms", "kernel_ms", "d2h_ms", "stage_sum_ms",
    "serial_ms", "overlapped_ms", "best_possible_ms", "speedup", "hidden_fraction"}, timed
    with drv.Event()s."""
    raise NotImplementedError("not implemented yet: overlap_report (week1 exercise)")


def overlap_table(rows):
    """Markdown rows starting '| 2^22 | iters | streams | chunks | ...'."""
    raise NotImplementedError("not implemented yet: overlap_table (week1 exercise)")


def _sanitizer_case(streams, chunks):
    def run():
        a, b = (random_tensor(10_007, torch.float32, "cpu").pin_memory() for _ in range(2))
        pipeline_streams(a, b, iters=3, streams=streams, chunks=chunks)
        torch.cuda.synchronize()
    return run


SANITIZER_CASES = {
    "busy_add_f32 (one stream)": _sanitizer_case(1, 1),
    "busy_add_f32 (3 streams, 7 chunks)": _sanitizer_case(3, 7),
}
