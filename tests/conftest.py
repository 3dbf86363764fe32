"""The suite's switches: backend (GPU or simulation), --impl, markers, seeds.

`course.runtime` is imported first, before any lesson imports triton or numba, so that
on a machine without a GPU the Triton interpreter and the Numba simulator are switched on.
"""
import hashlib
import os

import pytest

from course import runtime  # noqa: F401  (import order matters: see the docstring)


SLOW_ENV = "COURSE_SLOW"


def pytest_addoption(parser):
    parser.addoption("--impl", choices=("solutions", "exercises"), default="solutions",
                     help="test the course's solutions, or your code in each week's exercises/")
    parser.addoption("--slow", action="store_true", default=os.environ.get(SLOW_ENV, "") == "1",
                     help="also run the exhaustive sweeps marked slow (every size, config and dtype "
                          "product; end-to-end command lines); COURSE_SLOW=1 does the same")
    parser.addoption("--stage", type=int, default=None, metavar="N",
                     help="a lesson in stages: run only the tests of stage N (@pytest.mark.stage(N)), "
                          "which check that stage's holes while later ones are still open")


def pytest_configure(config):
    # Read by course.runtime.lesson() when the test modules are imported (collection).
    os.environ[runtime.IMPL_ENV] = config.getoption("--impl")


def pytest_report_header(config):
    where = runtime.describe().get("gpu") or "no GPU: Triton interpreter + Numba CUDA simulator"
    return f"course: backend={runtime.BACKEND} ({where}), impl={config.getoption('--impl')}"


def pytest_collection_modifyitems(config, items):
    _select_stage(config, items)
    _deselect_slow(config, items)
    if runtime.on_gpu():
        return
    for item in items:
        marker = item.get_closest_marker("gpu")
        if marker is not None:
            why = marker.kwargs.get("reason", "a PyCUDA launch needs the CUDA driver")
            item.add_marker(pytest.mark.skip(reason=f"needs a real NVIDIA GPU ({why}); "
                                                    "this run simulates on the CPU"))


def stage_of(item) -> int | None:
    """The stage a test checks (`@pytest.mark.stage(N)`, on the test or on one pytest.param), or None."""
    marker = item.get_closest_marker("stage")
    return int(marker.args[0]) if marker is not None else None


def _select_stage(config, items) -> None:
    """A staged lesson's test file marks every test with its stage (one left out would run, or be
    left out, unseen: refused); `--stage N` keeps the tests of stage N alone."""
    staged_files = {item.nodeid.split("::", 1)[0] for item in items if stage_of(item) is not None}
    unmarked = [item.nodeid for item in items
                if item.nodeid.split("::", 1)[0] in staged_files and stage_of(item) is None]
    if unmarked:
        raise pytest.UsageError(f"{unmarked[0]}: every test of a lesson in stages needs @pytest.mark.stage(N)")
    wanted = config.getoption("--stage")
    if wanted is None:
        return
    keep = [item for item in items if stage_of(item) == wanted]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if stage_of(item) != wanted])
        items[:] = keep


def _deselect_slow(config, items) -> None:
    """A learner's run leaves out the tests marked slow; `--slow` (or any `-m` expression) keeps them.

    The default run keeps, per kernel, every dtype, a ragged size and a non-contiguous case; the
    slow ones are the rest of each sweep. `-m slow` runs only those, `--slow` everything.
    """
    if config.getoption("--slow") or config.option.markexpr:
        return
    keep = [item for item in items if item.get_closest_marker("slow") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("slow")])
        items[:] = keep


FAILURE_LOG_ENV = "COURSE_FAILURE_LOG"
FAILURE_LOG_CHARS = 3000


def pytest_runtest_logreport(report):
    """With COURSE_FAILURE_LOG=PATH, append each failure's message to PATH the moment it happens.

    pytest prints the messages in its final summary, which a run killed by a time limit (a
    device call's budget) never reaches: the log then names the failed tests and nothing else.
    Under pytest-xdist the reports arrive here in the controller process, so one file holds all.
    """
    path = os.environ.get(FAILURE_LOG_ENV)
    if not path or not report.failed:
        return
    text = report.longreprtext
    if len(text) > FAILURE_LOG_CHARS:  # the assertion message is at the end of the traceback
        text = "...\n" + text[-FAILURE_LOG_CHARS:]
    with open(path, "a") as log:
        log.write(f"==== {report.when} FAILED {report.nodeid}\n{text}\n\n")


@pytest.fixture(autouse=True)
def _seed(request):
    """A different, reproducible random stream for every test (seeded by its name)."""
    import torch

    seed = int(hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:8], 16)
    torch.manual_seed(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """A launcher that refuses this GPU before any launch (runtime.NotOnThisGpu: a T4 asked for
    bf16 tensor cores or TMA) skips the test with its message, which names the fallback: the lesson
    does not run on this GPU, by design (`python -m course info` lists what does). Tests of the
    refusal itself catch it with pytest.raises first."""
    outcome = yield
    error = outcome.excinfo[1] if outcome.excinfo else None
    if isinstance(error, runtime.NotOnThisGpu):
        outcome.force_exception(pytest.skip.Exception(f"not on this GPU: {error}", _use_item_location=True))


# The stand-in GPU's busy time between two events, as a share of the host's interval between them: a GPU with
# little work of its own, waiting on the host. Half, not all of it: the host-bound rule compares the host's mean
# time per call with the events' median, and on a loaded CPU (CI's two cores running two workers) a few steps'
# host intervals can have a median up to twice their mean (one fast step, two slow ones). At half, the host's
# mean is at least the events' median, above HOST_RATIO of it whatever the skew, so the flag cannot flip.
GPU_SHARE_OF_HOST = 0.5


class _FakeEvent:
    """A CUDA event for the CPU tests of course.bench_clock.LoopClock's GPU path: `record` reads the
    host's clock; `elapsed_time` is GPU_SHARE_OF_HOST of the interval between two records, or a fixed `gpu_ms`
    when given."""

    def __init__(self, gpu_ms=None):
        self.gpu_ms, self.at = gpu_ms, None

    def record(self):
        import time

        self.at = time.perf_counter()

    def elapsed_time(self, end):
        return self.gpu_ms if self.gpu_ms is not None else GPU_SHARE_OF_HOST * (end.at - self.at) * 1e3


@pytest.fixture
def gpu_clock():
    """gpu_clock(gpu_ms=None): a LoopClock factory (its signature) whose loops take the GPU path on the CPU.
    Without `gpu_ms` each call's events read half the host's time between them (a GPU with little work of its
    own: the host paces every loop, GPU_SHARE_OF_HOST says why half); with it, every call's events read gpu_ms
    (a GPU far behind a fast host). Patched
    over a lesson's `LoopClock`, it makes a bench's rows carry the host-bound flag on the CPU."""
    from course.bench_clock import LoopClock

    def factory(gpu_ms=None):
        def make(reps=0, **_):
            return LoopClock(reps, events=True, event=lambda: _FakeEvent(gpu_ms), synchronize=lambda: None)
        return make
    return factory
