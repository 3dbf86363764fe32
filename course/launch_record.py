"""Every Triton launch of a simulation run, written down for the compile matrix.

`COURSE_RECORD_LAUNCHES=FILE pytest ...` (simulation) appends one JSON line per distinct
specialization a test launches: the kernel (module and name), each argument's Triton type
(`*fp16`, `i32`, `tensordesc<...>`: what Triton would compile the kernel for), the constexpr
values and the launch options (num_warps, num_stages). `python -m course compile-matrix` compiles
each of them for every GPU class (classroom/compile_matrix.py), with the configs the launcher would
choose there. Lines are appended whole (one write of a short line), so the two processes of
`pytest -n 2` may share the file.

Installed by course.runtime in simulation when the variable is set: it wraps the interpreter's
launch (`InterpretedFunction.run`), which every launch passes through, autotuned ones included.

What the launcher asked before the launch is recorded with it ("needs"): each
`runtime.require_capability(minimum, what, instead)` (a refusal on an older GPU, with its message)
and each `runtime.has_capability(minimum, instead=...)` that said yes (a route another GPU would not
take; `instead` names the rung that runs there), made
by a function still on the call stack of the launch, i.e. by the launcher on its way to this launch.
On a GPU class below `minimum` the matrix reports the launch as refused there, with that message.

bfloat16: most bf16 test cases run on a GPU only (course.check.dtype_params), so a simulation run
launches few bf16 kernels (those it launches are recorded as such; the matrix keeps one spec per
code path, twin or launched). Two more questions are recorded to derive the others
(`bf16_twins`): `validate.tensor(x, dtypes=...)` given a float16 tensor where the dtypes also allow
bfloat16 (the public op takes bf16 too: {"accepts": "bfloat16"}), and each
`runtime.require_bf16_tensor_cores` (a refusal of bf16 below sm_80, which applies to the bf16
launch only: {"dtype": "bfloat16", ...}). Each float16 launch of such an op gets a bf16 twin, its
float16 pointers and dtype constexprs made bfloat16, with the refusal the bf16 launch would meet.
"""
from __future__ import annotations

import functools
import inspect
import json
import os
import sys

RECORD_ENV = "COURSE_RECORD_LAUNCHES"
_seen: set[str] = set()
# Parameters of a launch that are options of the compiler, not the kernel's arguments.
OPTION_NAMES = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion")


def _constexpr_value(value):
    """A constexpr as JSON: ints, floats, bools, strings and None as they are; a tl.dtype by name."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "value"):  # tl.constexpr
        return _constexpr_value(value.value)
    import triton.language as tl
    if isinstance(value, tl.dtype):
        return {"dtype": value.name}
    raise TypeError(f"constexpr of type {type(value).__name__} cannot be recorded")


def specialization(fn, args: tuple, kwargs: dict) -> dict:
    """The recordable specialization of a launch of the Python function `fn` (a kernel's body)."""
    from triton.runtime.jit import mangle_type

    params = inspect.signature(fn).parameters
    options = {k: kwargs[k] for k in OPTION_NAMES if k in kwargs}
    bound = inspect.signature(fn).bind(*args, **{k: v for k, v in kwargs.items() if k not in OPTION_NAMES})
    bound.apply_defaults()
    signature, constexprs = {}, {}
    for name, value in bound.arguments.items():
        annotation = params[name].annotation
        is_constexpr = "constexpr" in (annotation if isinstance(annotation, str) else getattr(annotation, "__name__", ""))
        kind = "constexpr" if is_constexpr else mangle_type(value)
        signature[name] = kind
        if kind == "constexpr":
            constexprs[name] = _constexpr_value(value)
    return {"kernel": f"{fn.__module__}:{fn.__qualname__}", "signature": signature,
            "constexprs": constexprs, "options": options}


_asked: list = []  # [(lesson frames on the stack when asked, need)]


@functools.lru_cache(maxsize=1)
def _lesson_packages() -> tuple[str, ...]:
    """The lesson packages, as the weeks' registries declare them (course/weeks.py)."""
    from course import weeks

    return tuple(week.package for week in weeks.all_weeks())


def _tracing() -> bool:
    import torch

    return torch.compiler.is_compiling()


def _lesson_frames(frame) -> list:
    found = []
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith(_lesson_packages()):
            found.append(frame)
        frame = frame.f_back
    return found


def _note(need: dict, depth: int = 2) -> None:
    if _tracing():  # Dynamo tracing an op (it cannot trace sys._getframe): nothing to note, the
        return  # launch itself happens later, outside the trace
    # The lesson function that asked and its lesson caller (a launcher asking through a helper
    # such as `supported_here()`); not further out, where a model's forward calls many ops.
    # The dtype questions are asked one call deeper (flash attention: check_attention_inputs <-
    # check_inputs <- flash_attention_forward): depth 3, and the matrix drops a bf16 refusal that
    # reached a kernel without a tl.dot from a sibling op (compile_matrix.judge).
    frames = _lesson_frames(sys._getframe(2))[:depth]
    if frames:
        _asked.append((frames, need))


def _needs_on_stack() -> list[dict]:
    """The capability questions asked by lesson functions still on the stack (the launcher, on its
    way to this launch, or a helper it called); the others are forgotten."""
    stack = {id(f) for f in _lesson_frames(sys._getframe(1))}
    _asked[:] = [(frames, need) for frames, need in _asked if any(id(f) in stack for f in frames)]
    found = []
    for _, need in _asked:
        if need not in found:
            found.append(need)
    return found


def _watch_capability_questions(runtime) -> None:
    has, require = runtime.has_capability, runtime.require_capability

    def has_capability(minimum, device=None, *, instead=None):
        answer = has(minimum, device)
        if answer and not _tracing():
            asker = sys._getframe(1)  # the function that asked: its other branch runs below `minimum`
            need = {"minimum": list(minimum), "route": True,
                    "asker": f"{asker.f_globals.get('__name__', '?')}.{asker.f_code.co_name}"}
            if instead:
                need["instead"] = instead  # the rung that runs below `minimum`, as the asker names it
            _note(need)
        return answer

    def require_capability(minimum, what, instead, device=None):
        require(minimum, what, instead, device)  # raises on an older GPU: then nothing launches
        _note({"minimum": list(minimum), "why": f"{what} needs compute capability >= {minimum[0]}.{minimum[1]}: {instead}"})

    runtime.has_capability, runtime.require_capability = has_capability, require_capability

    bf16 = runtime.require_bf16_tensor_cores

    def require_bf16_tensor_cores(dtype, what, device=None):
        bf16(dtype, what, device)
        minimum = runtime.BF16_MINIMUM
        refused, instead = runtime.bf16_refusal(what)
        _note({"minimum": list(minimum), "dtype": "bfloat16",
               "why": f"{refused} needs compute capability >= {minimum[0]}.{minimum[1]}: {instead}"}, depth=3)

    runtime.require_bf16_tensor_cores = require_bf16_tensor_cores


def _watch_dtype_checks() -> None:
    """`validate.tensor` of a float16 tensor where bfloat16 is allowed too: the op takes bf16.

    Patched once course.validate is loaded, at the next launch: not imported from here, since
    validate imports course.runtime, which installs this recorder (a circle). The launch before the
    patch (the process's first, whose launcher loaded validate) goes without these notes."""
    import torch

    validate = sys.modules.get("course.validate")
    if validate is None or getattr(validate.tensor, "_course_recorded", False):
        return
    plain = validate.tensor

    def tensor(x, name, *, dtypes=None, **kwargs):
        checked = plain(x, name, dtypes=dtypes, **kwargs)
        if dtypes is not None and torch.bfloat16 in dtypes and x.dtype == torch.float16:
            _note({"accepts": "bfloat16"}, depth=3)
        return checked

    tensor._course_recorded = True
    validate.tensor = tensor


def bf16_twins(specs: list[dict]) -> list[dict]:
    """`specs` with the bf16 questions resolved: each float16 launch of an op that accepts bfloat16
    followed by its bf16 twin (marked "twin"), which carries the op's bf16 refusal; the refusal is
    dropped from launches that are not bf16 (a T4 runs their float16 as it is)."""
    out = []
    for spec in specs:
        needs = spec.get("needs", [])
        plain = [n for n in needs if "accepts" not in n and "dtype" not in n]
        bf16_needs = [n for n in needs if n.get("dtype") == "bfloat16"]
        types = [str(kind) for kind in spec["signature"].values()]
        is_bf16 = any("bf16" in kind for kind in types)
        base = {k: v for k, v in spec.items() if k != "needs"}
        if plain + (bf16_needs if is_bf16 else []):
            base["needs"] = plain + (bf16_needs if is_bf16 else [])
        out.append(base)
        if is_bf16 or not any(n.get("accepts") == "bfloat16" for n in needs) or not any("fp16" in k for k in types):
            continue
        twin = dict(base, twin="bf16, derived from this float16 launch")
        twin["signature"] = {name: kind.replace("fp16", "bf16") if isinstance(kind, str) and kind != "constexpr"
                             else kind for name, kind in spec["signature"].items()}
        twin["constexprs"] = {name: {"dtype": "bf16"} if value == {"dtype": "fp16"} else value
                              for name, value in spec["constexprs"].items()}
        if plain + bf16_needs:
            twin["needs"] = plain + bf16_needs
        out.append(twin)
    return out


def install(path: str, runtime) -> None:
    """Record to `path`; `runtime`: course.runtime, which calls this (and is not imported here)."""
    from triton.runtime.interpreter import InterpretedFunction

    if getattr(InterpretedFunction.run, "_course_recorded", False):
        return
    plain_run = InterpretedFunction.run
    _watch_capability_questions(runtime)

    def run(self, *args, grid, warmup, **kwargs):
        _watch_dtype_checks()
        if not self.fn.__module__.startswith(_lesson_packages()):
            # A test's toy kernel, or a learner's script in a subprocess (it inherits the variable):
            # not one of the course's kernels, and not importable by the matrix (`__main__`).
            return plain_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        try:
            record = specialization(self.fn, args, kwargs)
            needs = _needs_on_stack()
            if needs:
                record["needs"] = needs
            line = json.dumps(record, sort_keys=True)
        except (TypeError, ValueError) as error:  # recorded as such: the matrix counts it
            line = json.dumps({"kernel": f"{self.fn.__module__}:{self.fn.__qualname__}",
                               "unrecordable": str(error)}, sort_keys=True)
        _write(path, line)
        return plain_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    run._course_recorded = True
    InterpretedFunction.run = run
    # Week 1's Numba launches too, in the same file: course/numba_ptx.py compiles them to PTX.
    from course import numba_ptx
    numba_ptx.install(lambda spec: _write(path, json.dumps(spec, sort_keys=True)),
                      lambda module: module.startswith(_lesson_packages()))


def _write(path: str, line: str) -> None:
    if line not in _seen:
        _seen.add(line)
        with open(path, "a") as out:
            out.write(line + "\n")


def read(path) -> list[dict]:
    """The distinct specializations of a record file, in a stable order."""
    lines = {line.strip() for line in open(path) if line.strip()}
    return [json.loads(line) for line in sorted(lines)]


def recording() -> str | None:
    return os.environ.get(RECORD_ENV) or None
