"""Launching a Triton kernel again without redoing what Triton does on every call.

`kernel[grid](*args)` is convenient and slow for a hot loop. On every call Triton's JIT path
reads the current device and stream, binds the arguments to the signature, specializes each one
(a tensor's dtype and whether its address is a multiple of 16, an int's value 1 or divisibility
by 16), hashes all that into a cache key, finds the compiled kernel and only then launches it.
On the H100 machine (torch 2.11, triton 3.6, 2026-11-26) that costs ~15 us of host time per
launch against ~8.5 us for calling the compiled kernel directly (tools/probe_op_overhead.py):
for an op that launches 3 kernels on a small tensor, the difference is the op's speed.

`launch(kernel, grid, key, args, **options)` does the JIT launch the first time it sees `key`
and keeps the compiled kernel it returns; later calls with the same key call it directly. The
caller's key must pin down everything the compiled kernel was specialized on, except the
tensors' addresses, which are checked here: a tensor not 16-byte aligned (a view starting at an
odd element, say) takes the JIT path, which compiles the right variant. So the key holds the
dtypes, the constexpr values, the launch options and every int argument that can vary (or its
class: 1, a multiple of 16, other). The ops of week 4 key their launch plans by shape and dtype,
which fixes all of those.

Two more costs of Triton 3.6's own launch are skipped here. It builds a launch-metadata
dictionary and passes two hook chains (`knobs.runtime.launch_enter_hook` / `launch_exit_hook`)
that the C launcher calls around every launch, even when no hook is registered (the chains are
empty objects, not None); and it asks for the current device through `torch.cuda.current_device()`,
which re-checks torch's lazy CUDA initialisation. Here an empty chain is passed as None (a
profiler that registers a hook, such as Triton's proton, still gets its calls), and the device
and stream come from torch's C getters.

Off the GPU (the interpreter) and with COURSE_FAST_LAUNCH=0 every call is the plain JIT launch.

`current_stream(device_index)` (the raw handle of torch's current stream on that device) and
`stream_capturing()` (whether that stream is capturing a CUDA graph) are those C getters, for an
op that keys a cache by stream on every call: a fraction of a microsecond, no Python wrapper.
Off the GPU there is one stream, 0, and nothing captures.

`next_power_of_2(n)`, the block a launcher sizes for n elements, is plain Python here: Triton's
own is a jitted helper that costs microseconds per call from the host, and every week-4 launcher
(norms, RoPE, SwiGLU, attention's plans) asks it on its hot path.
"""
from __future__ import annotations

import os

import torch

from course import runtime
from course.gpu import triton

knobs = triton.knobs  # launch hooks: the fast path calls them as Triton's own launcher would

_COMPILED: dict = {}
ENABLED = runtime.on_gpu() and os.environ.get("COURSE_FAST_LAUNCH", "1") != "0"
if runtime.on_gpu():
    # Called on every launch: torch's C getters, not torch.cuda.current_device() (Python, plus a
    # lazy-init check) behind Triton's driver proxy.
    _current_device = torch._C._cuda_getDevice
    current_stream = torch._C._cuda_getCurrentRawStream
    stream_capturing = torch._C._cuda_isCurrentStreamCapturing
else:
    def current_stream(device_index: int) -> int:
        """The raw handle of torch's current stream: 0, the only stream, in simulation."""
        return 0

    def stream_capturing() -> bool:
        """Whether the current stream is capturing a CUDA graph: never in simulation."""
        return False


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1), in plain Python (see the module docstring)."""
    return 1 << (n - 1).bit_length() if n > 1 else 1


def _aligned(args) -> bool:
    for a in args:
        if isinstance(a, torch.Tensor) and a.data_ptr() & 15:
            return False
    return True


def launch(kernel, grid: tuple, key, args: tuple, constexprs: dict | None = None, **options) -> None:
    """`kernel[grid](*args, **constexprs, **options)`, from a cache of compiled kernels after
    the first call for `key`.

    `args`: the kernel's parameters in signature order (positional), constexprs may be among
    them; `constexprs`: the remaining, trailing parameters by name; `options`: launch options
    only (num_warps, num_stages, enable_fp_fusion, ...).
    """
    if not ENABLED:
        kernel[grid](*args, **(constexprs or {}), **options)
        return
    device = _current_device()
    hit = _COMPILED.get((kernel, key, device))
    if hit is not None and _aligned(args):
        compiled, tail = hit
        _run(compiled, grid, args + tail, current_stream(device))
        return
    compiled = kernel[grid](*args, **(constexprs or {}), **options)
    if _aligned(args):
        # The compiled launcher takes every parameter positionally: the named trailing ones in
        # signature order.
        tail = tuple(constexprs[name] for name in kernel.arg_names[len(args):]) if constexprs else ()
        _COMPILED[(kernel, key, device)] = (compiled, tail)


def _hook(chain):
    """A launch hook to pass to the C launcher: None when nothing is registered (no Python call)."""
    if chain is None or (isinstance(chain, knobs.HookChain) and not chain.calls):
        return None
    return chain


def _run(compiled, grid, args, stream) -> None:
    enter, leave = _hook(knobs.runtime.launch_enter_hook), _hook(knobs.runtime.launch_exit_hook)
    metadata = compiled.launch_metadata(grid, stream, *args) if enter is not None or leave is not None else None
    compiled.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream,
                 compiled.function, compiled.packed_metadata, metadata, enter, leave, *args)


def cached_launch(kernel, key, device: int = 0):
    """(compiled kernel, trailing constexprs) that `launch` keeps for `key` on `device`, or None: what a
    probe needs to time a bare `compiled.run` against the whole call."""
    return _COMPILED.get((kernel, key, device))


def cached_kernels() -> int:
    """How many compiled kernels the fast path holds (for tests)."""
    return len(_COMPILED)
