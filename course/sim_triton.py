"""Two corrections to Triton's interpreter, installed by course.runtime in simulation.

1. Bounds-checked memory. The interpreter (`TRITON_INTERPRET=1`) runs a kernel's loads and stores
   on raw host addresses, in C++, without checking them. A load or store past the end of a tensor
   (a missing mask, or a mask that does not cover the last, partial block) then either reads and
   writes the neighbouring heap silently, or kills the whole Python process: "free(): invalid
   pointer", "Fatal Python error: Aborted", and pytest dies without a summary. On a GPU the same
   bug reads garbage or faults ("an illegal memory access was encountered").
   Here every load, store and atomic of an interpreted kernel is checked first: each active lane
   (mask true) must address an element inside one of the launch's tensor arguments (the memory
   the view can reach: from its first to its last element, not the rest of its storage). If one
   does not, the launch raises `OutOfBoundsAccess` naming the kernel, the access, the tensor
   argument it missed and by how many elements, and the likely cause (a missing or wrong mask),
   before any byte is touched. `COURSE_TRITON_BOUNDS=0` turns the check off. A bool mask that
   Triton 3.9's interpreter carries as int32 data (a block `&` a scalar comparison), which its own
   load then refuses ("mask has unsupported dtype"), is handed on as the bool it is.

2. A fused multiply-add. Triton 3.6's interpreter computes `tl.fma(x, y, z)` as `x * y + z` in
   NumPy, in the operands' dtype: two roundings. A GPU's fma rounds once (that is its point, and
   what `week5_integration.nf4` relies on to dequantize a scale identically in the kernel and in
   its reference). Here float16 and float32 fma round once: the product of two float32 values is
   exact in float64 (24 + 24 bits < 53), the float64 sum's own rounding error is recovered exactly
   (Knuth's TwoSum), and the result rounded to the operands' format with that error deciding the
   ties that the float64 rounding could have made. Other dtypes keep the interpreter's formula.

3. `programs(select)`: a context in which interpreted launches run only the programs `select`
   picks (the grid keeps its size: tl.program_id and tl.num_programs say what they would). With a
   tensor whose pages are never touched (torch.empty of 2^31 elements costs address space, not
   memory, on the CPU), the last program of a 2^31-element launch runs in a second and shows
   whether the kernel's offsets are computed in int64 where they pass 2^31: an int32 offset
   wraps negative and the bounds check above names it.

4. bfloat16: the interpreter computes bf16 on raw 16-bit integers; course/sim_bf16.py hands each
   launch float32 copies of its bf16 tensors and rounds them back, and refuses bf16 made in-kernel.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys

import numpy as np

BOUNDS_ENV = "COURSE_TRITON_BOUNDS"
_INSTALLED = False
_launches: list[dict] = []  # one entry per running interpreted launch: kernel name, argument extents
_select = None    # programs(select): which program ids the interpreted launches run
_override = None  # (program id, full grid) of the one program running under `programs`


class OutOfBoundsAccess(IndexError):
    """A Triton kernel in the interpreter addressed memory outside every tensor it was given."""


# --------------------------------------------------------------------------- tensor extents
def _extent(t) -> tuple[int, int] | None:
    """[first byte, one past the last byte] the view `t` can reach through its strides."""
    if t.numel() == 0:
        return None
    low = high = 0
    for size, stride in zip(t.shape, t.stride()):
        reach = (size - 1) * stride
        if reach < 0:
            low += reach
        else:
            high += reach
    start = t.data_ptr()
    return start + low * t.element_size(), start + (high + 1) * t.element_size()


def _tensor_args(name: str, value, out: list) -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            _tensor_args(f"{name}[{i}]", item, out)
    elif isinstance(value, TensorDescriptor):
        _tensor_args(name, value.base, out)
    elif hasattr(value, "data_ptr") and hasattr(value, "untyped_storage"):
        base = getattr(value, "base", value)  # triton's TensorWrapper (a reinterpreted dtype)
        if hasattr(base, "stride"):
            reach = _extent(base)
            if reach is not None:
                out.append((name, reach[0], reach[1], base.element_size(), base.numel()))


# ------------------------------------------------------------------------------ the checks
def _describe_miss(address: int, itemsize: int, args: list) -> str:
    if not args:
        return "the launch has no tensor arguments"
    name, start, end, size, numel = min(
        args, key=lambda a: 0 if a[1] <= address < a[2] else min(abs(address - a[1]), abs(address - a[2])))
    if address >= end:
        elements = (address - end) // size + 1
        where = f"{elements} element(s) past the end of `{name}` ({numel} elements)"
    elif address < start:
        elements = -(-(start - address) // size)
        where = f"{elements} element(s) before the start of `{name}` ({numel} elements)"
    else:
        where = f"straddling the end of `{name}` ({numel} elements) with a {itemsize}-byte access"
    return where


def _check(kind: str, ptrs, mask=None) -> None:
    if not _launches:
        return
    launch = _launches[-1]
    addresses = np.asarray(ptrs.data, dtype=np.uint64)
    if mask is not None:
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        addresses = addresses[active]
    else:
        addresses = addresses.reshape(-1)
    if addresses.size == 0:
        return
    element = ptrs.get_element_ty()
    itemsize = max(1, getattr(element, "primitive_bitwidth", 8) // 8)
    low, high = int(addresses.min()), int(addresses.max()) + itemsize
    args = launch["args"]
    if any(start <= low and high <= end for _, start, end, _, _ in args):
        return  # the common case: one tensor holds every lane's element
    ok = np.zeros(addresses.shape, dtype=bool)
    for _, start, end, _, _ in args:
        ok |= (addresses >= np.uint64(start)) & (addresses <= np.uint64(max(start, end - itemsize)))
    if ok.all():
        return
    bad = addresses[~ok]
    program = launch.get("program")
    raise OutOfBoundsAccess(
        f"out-of-bounds {kind} in Triton kernel `{launch['kernel']}` (program {program}): "
        f"{bad.size} of {addresses.size} active lanes address memory outside every tensor argument; "
        f"the first is {_describe_miss(int(bad[0]), itemsize, args)}. Likely cause: a missing or wrong "
        f"mask. Every tl.load/tl.store whose offsets can pass the end of a tensor needs one "
        f"(`mask=offsets < n`, for 2-D tiles the row AND column masks), and it must cover the last, "
        f"partial block; check also the offsets themselves (strides, int32 overflow past 2^31). "
        f"(Caught by course.sim_triton before the access: unchecked, the interpreter would read or "
        f"write another object's memory or abort the whole Python process.)")


# ------------------------------------------------------------------------------ a fused fma
def fma_round_once(x, y, z):
    """x * y + z rounded once to z's dtype (float16 or float32), elementwise, in NumPy."""
    dtype = np.result_type(x, y, z)
    p = np.asarray(x, dtype=np.float64) * np.asarray(y, dtype=np.float64)  # exact for <= 26-bit significands
    w = np.asarray(z, dtype=np.float64)
    s = p + w
    with np.errstate(invalid="ignore", over="ignore"):
        b = s - p  # TwoSum: s + e == p + w exactly
        e = (p - (s - b)) + (w - b)
        r = s.astype(dtype)
        # s rounds to r; if s lies exactly halfway between r and its neighbour towards s, the
        # tie must go the way the lost part e points, not to the even neighbour.
        r64 = r.astype(np.float64)
        toward = np.where(s > r64, np.inf, -np.inf).astype(dtype)
        other = np.nextafter(r, toward)
        tie = np.isfinite(s) & (s != r64) & ((r64 + other.astype(np.float64)) / 2 == s) & (e != 0)
        pick_other = tie & (np.sign(e) == np.sign(s - r64))
        return np.where(pick_other, other, r).astype(dtype)


# ------------------------------------------------------------------------------- installing
@contextlib.contextmanager
def programs(select):
    """Run only some programs of each interpreted launch: `select(grid)` -> the (x, y, z) ids.

    `grid` is the launch's full grid, a 3-tuple. Example: `programs(last_programs(2))`.
    """
    global _select
    if not _INSTALLED or _PATCHED is None:
        raise RuntimeError("course.sim_triton.programs works in simulation only (the Triton interpreter)")
    lost = [f"{what}: {why}" for what, why in LOST.items() if what.startswith("programs")]
    if lost:
        raise RuntimeError(f"course.sim_triton.programs is off with this Triton: {lost[0]}")
    previous, _select = _select, select
    try:
        yield
    finally:
        _select = previous


def last_programs(count: int = 1):
    """A `programs` selector: the last `count` programs along axis 0 (all of axes 1 and 2)."""
    def select(grid):
        return [(x, y, z) for x in range(max(0, grid[0] - count), grid[0])
                for y in range(grid[1]) for z in range(grid[2])]
    return select


_PATCHED = None
LOST: dict[str, str] = {}  # correction -> why it is off here (a private name this Triton lacks)

# Triton's private interpreter names the corrections wrap (`triton.runtime.interpreter`): they
# change between releases (3.9's create_masked_load takes `cache_policy` where 3.6's took
# `cache_modifier, eviction_policy`), so each wrapper forwards whatever arguments it is given and
# reads only the pointer and mask, by name, found once at install in the method's signature.
# tests/test_sim_triton.py pins every name below on the installed Triton.
MEMORY_HOOKS = (  # InterpreterBuilder method, the access it makes, its pointer and mask parameters
    ("create_masked_load", "load", ("ptrs", "ptr"), "mask"),
    ("create_masked_store", "store", ("ptrs", "ptr"), "mask"),
    ("create_atomic_rmw", "atomic", ("ptr", "ptrs"), "mask"),
    ("create_atomic_cas", "atomic compare-and-swap", ("ptr", "ptrs"), None),
)
BUILDER_NAMES = ("set_grid_idx", "create_fma", "create_get_program_id", "create_get_num_programs")
EXECUTOR_NAMES = ("_init_args_hst", "__call__", "grid", "arg_names", "fn")
MODULE_NAMES = ("InterpreterBuilder", "GridExecutor", "TensorHandle", "tl")


def _argument_reader(method, names):
    """A function (args, kwargs) -> the argument `method` takes under the first of `names`
    (its position counted after `self`), or None when the method has no such parameter."""
    import inspect

    try:
        parameters = list(inspect.signature(method).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    for name in names:
        for index, parameter in enumerate(parameters):
            if parameter.name == name and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
                positional = parameter.kind == parameter.POSITIONAL_OR_KEYWORD

                def read(args, kwargs, index=index, name=name, positional=positional):
                    return args[index] if positional and index < len(args) else kwargs.get(name)
                return read
    return None


def _wrap_memory_hooks(builder) -> dict[str, str]:
    """Bounds-check every load, store and atomic of `builder` (InterpreterBuilder); returns the
    hooks left unchecked, each with the reason (absent, or no pointer parameter by a known name)."""
    lost = {}
    for method_name, kind, pointer_names, mask_name in MEMORY_HOOKS:
        original = getattr(builder, method_name, None)
        pointer = _argument_reader(original, pointer_names) if original is not None else None
        mask = _argument_reader(original, (mask_name,)) if original is not None and mask_name else None
        if pointer is None or (mask_name and mask is None):
            lost[method_name] = ("absent" if original is None else
                                 f"no parameter named {' or '.join(pointer_names)}"
                                 f"{' and ' + mask_name if mask_name else ''}")
            continue

        def checked(self, *args, _original=original, _kind=kind, _pointer=pointer, _mask=mask, **kwargs):
            lanes = _mask(args, kwargs) if _mask is not None else None
            if getattr(getattr(lanes, "data", None), "dtype", np.bool_) != np.bool_:
                # Triton 3.9's interpreter can carry a bool mask as int32 data (`mask & (row > first)`,
                # a block and a scalar comparison) and then refuses it: "mask has unsupported dtype".
                # The language already checked that the mask is a bool; a GPU takes it.
                lanes.data = lanes.data.astype(bool)
            _check(_kind, _pointer(args, kwargs), lanes)
            return _original(self, *args, **kwargs)

        functools.update_wrapper(checked, original)  # __wrapped__: inspect.signature shows Triton's
        setattr(builder, method_name, checked)
    return lost


def _missing(interpreter) -> list[str]:
    """The private names of `interpreter` the corrections use and this Triton lacks."""
    missing = [f"triton.runtime.interpreter.{name}" for name in MODULE_NAMES if not hasattr(interpreter, name)]
    builder, executor = getattr(interpreter, "InterpreterBuilder", None), getattr(interpreter, "GridExecutor", None)
    if builder is not None:
        missing += [f"InterpreterBuilder.{name}" for name in BUILDER_NAMES if not hasattr(builder, name)]
    if executor is not None:
        import inspect

        # grid, arg_names and fn are set by the constructor: its parameters of those names
        init = inspect.signature(executor.__init__).parameters
        missing += [f"GridExecutor.{name}" for name in EXECUTOR_NAMES
                    if not hasattr(executor, name) and name not in init]
    return missing


def _warn_lost(lost: dict[str, str]) -> None:
    import warnings
    from importlib import metadata

    if lost:
        warnings.warn(
            f"course.sim_triton: Triton {metadata.version('triton')}'s interpreter lacks private names the "
            f"course's corrections wrap, so these are OFF in simulation: "
            + "; ".join(f"{what} ({why})" for what, why in lost.items())
            + ". Kernels still run; `python -m course versions` says whether this Triton is in the supported range.",
            RuntimeWarning, stacklevel=3)


def _patch(interpreter) -> None:
    global _PATCHED
    missing = _missing(interpreter)
    lost = {}
    needs = {  # correction -> the private names it uses
        "bounds check (an out-of-bounds load/store would not be caught: it may corrupt memory or abort Python)":
            ("InterpreterBuilder", "GridExecutor", "InterpreterBuilder.set_grid_idx",
             "GridExecutor._init_args_hst", "GridExecutor.__call__", "GridExecutor.arg_names", "GridExecutor.fn"),
        "one-rounding tl.fma (tl.fma rounds twice, as x * y + z)":
            ("InterpreterBuilder", "InterpreterBuilder.create_fma", "TensorHandle"),
        "programs(select) (course.sim_triton.programs raises)":
            ("InterpreterBuilder", "GridExecutor", "InterpreterBuilder.create_get_program_id",
             "InterpreterBuilder.create_get_num_programs", "GridExecutor.__call__", "GridExecutor.grid", "TensorHandle",
             "tl"),
    }
    short = {name.removeprefix("triton.runtime.interpreter.") for name in missing}
    for what, names in needs.items():
        absent = [name for name in names if name in short]
        if absent:
            lost[what] = "missing " + ", ".join(absent)
    bounds, fma_on, programs_on = (not any(key.startswith(k) for key in lost)
                                   for k in ("bounds", "one-rounding", "programs"))
    from course import sim_bf16  # first: the bounds check then records the float32 copies it hands kernels

    lost.update(sim_bf16.patch(interpreter))
    if bounds and os.environ.get(BOUNDS_ENV, "1") != "0":
        builder = interpreter.InterpreterBuilder
        unchecked = _wrap_memory_hooks(builder)
        if unchecked:
            lost["bounds check of " + ", ".join(unchecked)] = "; ".join(
                f"InterpreterBuilder.{name}: {why}" for name, why in unchecked.items())
        set_grid_idx, init_args = builder.set_grid_idx, interpreter.GridExecutor._init_args_hst

        def grid_idx(self, x, y, z):
            if _launches:
                full = getattr(self, "grid_dim", None) or (1, 1, 1)  # set by each launch (set_grid_dim)
                pid, grid = _override if _override is not None else ((x, y, z), full)
                _launches[-1]["program"] = pid if tuple(grid[1:]) != (1, 1) else pid[0]
            return set_grid_idx(self, x, y, z)

        def _init_args_hst(self, args_dev, kwargs):
            args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
            found: list = []
            for name, value in zip(self.arg_names, args_hst):
                _tensor_args(name, value, found)
            for name, value in kwargs_hst.items():
                _tensor_args(name, value, found)
            _launches.append({"kernel": getattr(self.fn, "__name__", "?"), "args": found, "program": None})
            return args_hst, kwargs_hst

        builder.set_grid_idx = grid_idx
        interpreter.GridExecutor._init_args_hst = _init_args_hst
    if fma_on:
        _patch_fma(interpreter)
    if "GridExecutor.__call__" not in missing:
        _patch_call(interpreter, programs_on)
    interpreter._course_patched = True
    _PATCHED = interpreter
    LOST.clear()
    LOST.update(lost)
    _warn_lost(lost)


def _patch_fma(interpreter) -> None:
    builder = interpreter.InterpreterBuilder
    fma = builder.create_fma

    def create_fma(self, x, y, z):
        if np.result_type(x.data, y.data, z.data) in (np.float16, np.float32):
            return interpreter.TensorHandle(fma_round_once(x.data, y.data, z.data), z.dtype.scalar)
        return fma(self, x, y, z)

    builder.create_fma = create_fma


def _patch_call(interpreter, programs_on: bool) -> None:
    """Each launch forgets its bounds-check record when it ends; with `programs_on`, it also runs
    only the programs `programs(select)` picks."""
    builder, executor = interpreter.InterpreterBuilder, interpreter.GridExecutor
    call = executor.__call__
    program_id = getattr(builder, "create_get_program_id", None)
    num_programs = getattr(builder, "create_get_num_programs", None)

    def get_program_id(self, axis):
        if _override is None:
            return program_id(self, axis)
        return interpreter.TensorHandle(np.array([_override[0][axis]], dtype=np.int32), interpreter.tl.int32)

    def get_num_programs(self, axis):
        if _override is None:
            return num_programs(self, axis)
        return interpreter.TensorHandle(np.array([_override[1][axis]], dtype=np.int32), interpreter.tl.int32)

    def __call__(self, *args, **kwargs):
        depth = len(_launches)
        try:
            if _select is None:
                return call(self, *args, **kwargs)
            return _call_selected(self, args, kwargs)
        finally:
            del _launches[depth:]

    def _call_selected(self, args, kwargs):
        """One interpreted launch per selected program, each on a grid of one program whose
        tl.program_id / tl.num_programs answer as in the full grid."""
        global _override
        full_grid, queue = self.grid, None

        def one_program(meta):
            global _override
            nonlocal queue
            if queue is None:
                grid = tuple(full_grid(meta) if callable(full_grid) else full_grid)
                grid = grid + (1,) * (3 - len(grid))
                queue = [(tuple(pid), grid) for pid in _select(grid)]
            if not queue:
                return (0, 1, 1)
            _override = queue.pop(0)
            return (1, 1, 1)

        self.grid = one_program
        try:
            while True:
                call(self, *args, **kwargs)
                if not queue:
                    return None
        finally:
            self.grid, _override = full_grid, None

    executor.__call__ = __call__
    if programs_on:
        builder.create_get_program_id, builder.create_get_num_programs = get_program_id, get_num_programs


class _AfterImport:
    """A meta-path hook: patch `triton.runtime.interpreter` as soon as it is imported."""

    TARGET = "triton.runtime.interpreter"

    def find_spec(self, fullname, path, target=None):
        if fullname != self.TARGET:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def install() -> None:
    """Patch the interpreter now if it is loaded, else as soon as triton loads it."""
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    module = sys.modules.get(_AfterImport.TARGET)
    if module is not None:
        if not getattr(module, "_course_patched", False):
            _patch(module)
    else:
        sys.meta_path.insert(0, _AfterImport())
