"""Every Triton kernel the tests launch, compiled for every GPU class a learner has, without a GPU.

    python -m course compile-matrix                    the committed record (tests/triton_launches.jsonl)
    python -m course compile-matrix --record FILE      a fresh one (COURSE_RECORD_LAUNCHES=FILE pytest ...)
    python -m course compile-matrix --write            also rewrite tests/compile_matrix.json (README's table)

A simulation run records each launch's specialization (course/launch_record.py): kernel, argument
types, constexprs, num_warps, num_stages. The tile a launcher picks in simulation is small (the
interpreter is slow) and is not the one it picks on a GPU, so each specialization is compiled, for
each class of `runtime.GPU_CLASSES`, with every config the launcher can choose among there:

* the one the simulation launched (a tile computed from the shape, a fixed constant);
* each tile table the kernel's module defines at top level (a dict of constexpr values the kernel
  takes, such as `BLOCK` beside `SIM_BLOCK`): a launcher's fixed GPU choice;
* each config of every `triton.autotune` over the kernel in its module, and the module's other
  `triton.Config`s (what its prune rule falls back to). Triton's autotuner skips
  a config that does not fit (it compiles each one and drops those raising OutOfResources), so an
  autotuned launch fits when at least one candidate does;
* not the configs of results/tuned_*.json: they apply only on the GPU that measured them
  (course/tuning.py), where the sweep launched every one of them.

The simulation launches each kernel at many small shapes; one specialization per code path is
compiled (`representatives`: same kernel, argument types, flags, options and capability questions;
the one with the largest integer constexprs), beside the GPU tiles above.

`triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))` gives the shared memory per
block (metadata) and registers per thread (the cubin's EIATTR_REGCOUNT); a config fits its class
when both are within `GpuClass` limits. A kernel a launcher refuses on a class before any launch
(`refusals()`, from the lessons' `COMPILE_REFUSALS`) is not compiled there: its reason and the
fallback are printed instead. Verdicts per kernel and class: `fits`, `refused` (with the reason),
`FAILS` (a config the launcher can choose would not launch). Exit status 1 when any FAILS.

ptxas (PTX to cubin) is four fifths of the compile time (25 code paths for sm_80 on this 2-core
machine: 98 of 122 s), and it decides one thing the earlier stages do not: registers per thread.
A thread holds at most 255 of them on every class, so at w warps a block needs at most
255 x 32 x w registers, which fits the 64 K of every class up to 8 warps. `--ptxas needed` (what
CI runs, for both of its stacks) therefore stops Triton at PTX wherever the register limit cannot
be reached, and runs ptxas only where it can (16 warps and more); shared memory (known after the
LLVM stage) and the bf16 rule are judged the same way in both modes. `--ptxas all` (the default,
and what `--write` requires: the committed tests/compile_matrix.json) runs ptxas on everything,
which also shows that ptxas accepts every PTX the matrix made and records each path's registers.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import json
import math
import os
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tests" / "triton_launches.jsonl"
RESULT = ROOT / "tests" / "compile_matrix.json"
OPTIONS = ("num_warps", "num_stages")
MAX_REGISTERS_PER_THREAD = 255   # every class from sm_75 to sm_90
PTXAS_MODES = ("all", "needed")
# Set by `main` before the worker processes fork (an environment variable reaches them either way).
PTXAS_ENV = "COURSE_MATRIX_PTXAS"


def ptxas_needed(warps: int, gpu) -> bool:
    """Whether the register limit of `gpu` can be reached at `warps` warps: only then does the
    `needed` mode run ptxas."""
    if os.environ.get(PTXAS_ENV, "all") == "all":
        return True
    return MAX_REGISTERS_PER_THREAD * 32 * warps > gpu.registers_per_block


@functools.cache  # one Triton per process: read its source once, not at each of ~2,000 compiles
def stage_hook_supported() -> bool:
    """Whether this Triton's CUDA backend calls `knobs.runtime.add_stages_inspection_hook` with its
    stages (Triton 3.6 does; 3.9 calls the hook differently): without it, ptxas runs as usual."""
    import inspect
    try:
        from triton.backends.nvidia.compiler import CUDABackend
        return "add_stages_inspection_hook(self, stages, options, language" in inspect.getsource(CUDABackend.add_stages)
    except (ImportError, OSError, TypeError, AttributeError):
        return False


@contextlib.contextmanager
def without_ptxas():
    """Triton's pipeline with its last stage (ptxas) replaced by an empty cubin, through Triton's
    own stage hook; the compiled kernels go to a cache of their own, so an empty cubin is never
    found where a launch would look for a real one. Where this Triton has no such hook, nothing
    changes (ptxas runs: slower, same verdicts)."""
    if not stage_hook_supported():
        yield
        return
    from triton import knobs
    hook_before, dir_before = knobs.runtime.add_stages_inspection_hook, knobs.cache.dir

    def hook(*args):
        # Triton 3.9 also calls the hook with no arguments for a (key, hash) pair that enters the cache
        # key: a key of its own keeps these stubs apart from real compiles there too.
        if not args:
            return "course-matrix-without-ptxas", "course-matrix-without-ptxas"
        if hook_before is not None:
            hook_before(*args)
        args[1]["cubin"] = lambda src, metadata: b""

    knobs.runtime.add_stages_inspection_hook = hook
    knobs.cache.dir = os.path.join(knobs.cache.home_dir, ".triton", "course-matrix-without-ptxas")
    try:
        yield
    finally:
        knobs.runtime.add_stages_inspection_hook = hook_before
        knobs.cache.dir = dir_before


# --------------------------------------------------------------------------- the cubin's registers
def cubin_registers(cubin: bytes) -> int:
    """Registers per thread of the kernel in `cubin`: EIATTR_REGCOUNT (attribute 0x2f) of the ELF's
    `.nv.info` section, which ptxas writes for each kernel (the largest, should there be several)."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize) for i in range(count)]
    names_at = sections[names_index][4]
    found = 0
    for name_at, _, _, _, offset, size, *_ in sections:
        end = cubin.index(b"\0", names_at + name_at)
        if cubin[names_at + name_at:end] != b".nv.info":
            continue
        data, i = cubin[offset:offset + size], 0
        while i < size:
            fmt, attr = data[i], data[i + 1]
            if fmt == 4:  # EIFMT_SVAL: a 2-byte length, then the value
                length, = struct.unpack_from("<H", data, i + 2)
                if attr == 0x2F:
                    found = max(found, struct.unpack_from("<I", data, i + 8)[0])
                i += 4 + length
            elif fmt == 3:  # EIFMT_HVAL: a 2-byte value
                i += 4
            else:
                i += 2
    return found


# --------------------------------------------------------------------------- what the launcher can choose
def _jit_function(kernel: str):
    module_name, _, name = kernel.partition(":")
    module = importlib.import_module(module_name)
    fn = getattr(module, name, None)
    from triton.runtime.jit import JITFunction
    if not isinstance(fn, JITFunction):
        raise LookupError(f"{kernel} is not a module-level @triton.jit function under COURSE_BACKEND=compile")
    return module, fn


def _autotuners(module, fn) -> list:
    """The module's `triton.autotune`s over `fn` (through `triton.heuristics`, if any)."""
    from triton.runtime.autotuner import Autotuner
    found = []
    for value in vars(module).values():
        if not isinstance(value, Autotuner):
            continue
        inner = value.fn
        for _ in range(4):
            if inner is fn:
                found.append(value)
                break
            inner = getattr(inner, "fn", None)
    return found


def _tile_tables(module, constexpr_names: set) -> list[dict]:
    """Top-level dicts of the module made of the kernel's constexprs (and launch options): its
    fixed GPU tiles. SIM_* tables are the simulation's own."""
    tables = []
    for name, value in vars(module).items():
        if name.startswith(("SIM_", "_")) or not isinstance(value, dict) or not value:
            continue
        keys = set(value) - set(OPTIONS)
        if keys and keys <= constexpr_names and all(isinstance(v, (int, bool)) for v in value.values()):
            tables.append((name, dict(value)))
    return tables


def candidates(spec: dict, module, fn, gpu) -> list[tuple[str, dict, bool]]:
    """(where it comes from, {constexpr/option: value} overrides, autotuned?) for class `gpu`."""
    names = {n for n, kind in spec["signature"].items() if kind == "constexpr"}
    found = [("as launched in simulation", {}, False)]
    if any(str(kind).startswith("tensordesc") for kind in spec["signature"].values()):
        # A descriptor's block shape is part of the signature and is made from the tile by the
        # launcher (or an autotune pre_hook): another tile needs other descriptors, which this
        # record does not say how to make. Only the recorded tile is compiled (a known gap).
        return found
    found += [(f"tile table {name}", table, False) for name, table in _tile_tables(module, names)]
    tuners = _autotuners(module, fn)
    for tuner in tuners:
        found += [(f"autotune {c}", {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}, True)
                  for c in tuner.configs if set(c.kwargs) <= names]
    if tuners:  # the module's other triton.Configs: what its prune rule falls back to (FALLBACK_CONFIGS...)
        import triton
        for name, value in vars(module).items():
            for c in (value if isinstance(value, (list, tuple)) else [value]):
                if isinstance(c, triton.Config) and set(c.kwargs) <= names:
                    found.append((f"{name} {c}", {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}, True))
    # results/tuned_*.json apply only on the GPU that measured them, where the sweep launched each
    # of them: nothing to prove by compiling them here (course/tuning.py).
    unique, seen = [], set()
    for where, overrides, autotuned in found:
        key = (json.dumps(overrides, sort_keys=True), autotuned)
        if key not in seen:
            seen.add(key)
            unique.append((where, overrides, autotuned))
    return unique


def refused_on(spec: dict, gpu) -> tuple[str, str] | None:
    """("refused", why) when the launcher refuses class `gpu` before this launch (a
    `require_capability` it passed in simulation, with its message); ("other", why) when it takes
    another path there (a `has_capability` that said yes); None when it launches this there."""
    below = [need for need in spec.get("needs", []) if "minimum" in need and gpu.capability < tuple(need["minimum"])]
    refusals = [need["why"] for need in below if "why" in need]
    if refusals:
        return "refused", refusals[0]
    if below:
        need = max(below, key=lambda n: tuple(n["minimum"]))
        where = f"below sm_{need['minimum'][0]}{need['minimum'][1]}"
        asker = f"`{need['asker']}()`" if need.get("asker") else "the launcher"
        if need.get("instead"):  # the rung that runs there, as the question named it (has_capability(instead=))
            return "other", f"another path {where}: {need['instead']} ({asker} chooses)"
        return "other", (f"another path {where}: {asker} asks for it and takes its other branch there "
                         "(it names no rung: runtime.has_capability(..., instead=))")
    return None


# --------------------------------------------------------------------------- compile and judge
def compile_one(fn, spec: dict, overrides: dict, gpu) -> dict:
    """Compile `spec` with `overrides` for class `gpu`: {shared, registers, fits, why}."""
    import triton
    from triton.backends.compiler import GPUTarget

    constexprs = dict(spec["constexprs"])
    options = dict(spec.get("options", {}))
    for name, value in overrides.items():
        (options if name in OPTIONS else constexprs)[name] = value
    signature = {}
    for name in fn.arg_names:
        kind = spec["signature"][name]
        signature[name] = tuple(kind) if isinstance(kind, list) else kind
    values = {}
    for name, value in constexprs.items():
        if isinstance(value, dict) and "dtype" in value:
            value = triton.language.dtype(value["dtype"])
        values[name] = value
    options = {k: options[k] for k in OPTIONS if k in options}
    source = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=values)
    target = GPUTarget("cuda", gpu.capability[0] * 10 + gpu.capability[1], 32)
    ptxas = ptxas_needed(int(options.get("num_warps", 4)), gpu)
    with (contextlib.nullcontext() if ptxas else without_ptxas()):
        compiled = triton.compile(source, target=target, options=options)
    shared = int(compiled.metadata.shared)
    warps = int(compiled.metadata.num_warps)
    # Without ptxas the registers are unknown, and at this many warps they cannot pass the limit.
    registers = cubin_registers(compiled.asm["cubin"]) if ptxas else None
    why = []
    if shared > gpu.shared_per_block:
        why.append(f"{shared // 1024} KB shared > {gpu.shared_per_block // 1024} KB")
    if registers is not None and registers * 32 * warps > gpu.registers_per_block:
        why.append(f"{registers} registers x {32 * warps} threads > {gpu.registers_per_block}")
    # A bf16 tl.dot compiles for sm_75 (Triton 3.6: bf16 emulated with integer shifts, the dot as FMAs;
    # course/runtime.py, above require_bf16_tensor_cores): it would launch, on a path nothing has checked.
    # Its launcher must refuse bfloat16 there (then this is never compiled: `refused_on`); one that
    # does not is a FAIL here.
    bf16 = any("bf16" in str(kind) for kind in signature.values())
    if not gpu.bf16_dot and bf16 and "tt.dot" in compiled.asm["ttir"]:
        why.append(f"a bf16 tl.dot on {gpu.arch} (no bf16 tensor cores) and the launcher does not refuse bfloat16 "
                   "there (runtime.require_bf16_tensor_cores)")
    return {"shared": shared, "registers": registers, "num_warps": warps, "fits": not why, "why": "; ".join(why)}


_COMPILED: dict = {}


def _compile_cached(fn, spec, overrides, gpu) -> dict:
    """compile_one, once per distinct (kernel, signature, constexprs, options, class)."""
    key = json.dumps([spec["kernel"], spec["signature"], {**spec["constexprs"], **spec.get("options", {}), **overrides},
                      gpu.arch], sort_keys=True, default=str)
    if key not in _COMPILED:
        _COMPILED[key] = compile_one(fn, spec, overrides, gpu)
    return _COMPILED[key]


_DOTS: dict = {}


def has_dot(fn, spec: dict) -> bool:
    """Whether the kernel, as specialized, does a tl.dot (its TTIR has tt.dot; compiled for sm_90, where every
    dtype a lesson uses exists: an fp8e4nv kernel does not compile for sm_80)."""
    key = json.dumps([spec["kernel"], spec["signature"], spec["constexprs"]], sort_keys=True, default=str)
    if key not in _DOTS:
        import triton
        from triton.backends.compiler import GPUTarget
        values = {k: triton.language.dtype(v["dtype"]) if isinstance(v, dict) and "dtype" in v else v
                  for k, v in spec["constexprs"].items()}
        signature = {n: tuple(k) if isinstance(k, list) else k for n, k in spec["signature"].items()}
        source = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=values)
        with without_ptxas():  # the TTIR is all this asks of the compile
            _DOTS[key] = "tt.dot" in triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ttir"]
    return _DOTS[key]


def judge(spec: dict, gpu) -> dict:
    """The verdict for one recorded specialization on one GPU class."""
    bf16_needs = [n for n in spec.get("needs", []) if n.get("dtype") == "bfloat16"]
    if bf16_needs and any(gpu.capability < tuple(n["minimum"]) for n in bf16_needs) \
            and not has_dot(_jit_function(spec["kernel"])[1], spec):
        # A bf16 refusal that reached a kernel without a tl.dot came from another op its caller ran
        # (the recorder keeps dtype questions three calls deep): it does not refuse this kernel.
        spec = dict(spec, needs=[n for n in spec["needs"] if n not in bf16_needs])
    refused = refused_on(spec, gpu)
    if refused:
        return {"verdict": refused[0], "why": refused[1]}
    module, fn = _jit_function(spec["kernel"])
    plain, tuned = [], []
    found = candidates(spec, module, fn, gpu)
    # Autotune configs smallest tile first: one that fits is enough (the autotuner drops the rest).
    size = lambda c: (sum(v for k, v in c[1].items() if k.startswith("BLOCK") and isinstance(v, int)), c[1].get("num_stages", 0))  # noqa: E731
    for where, overrides, autotuned in [c for c in found if not c[2]] + sorted((c for c in found if c[2]), key=size):
        if autotuned and any(r["fits"] for r in tuned):
            break
        try:
            result = _compile_cached(fn, spec, overrides, gpu)
        except Exception as error:  # a config that does not compile cannot launch either
            result = {"fits": False, "why": f"compile error: {type(error).__name__}: {str(error)[:200]}"}
        result = dict(result, config=where)
        (tuned if autotuned else plain).append(result)
    bad = [r for r in plain if not r["fits"]]
    if tuned and not any(r["fits"] for r in tuned):
        bad.append({"config": "every autotune config", "why": "; ".join(sorted({r["why"] for r in tuned}))})
    worst = max((r.get("shared", 0) for r in plain + tuned if r["fits"]), default=0)
    if bad:
        return {"verdict": "FAILS", "why": "; ".join(f"{r['config']}: {r['why']}" for r in bad),
                "configs": len(plain) + len(tuned)}
    return {"verdict": "fits", "configs": len(plain) + len(tuned), "max_shared": worst}


def code_path(spec: dict) -> str:
    """A specialization's code path: the kernel, its pointer and descriptor types, every constexpr
    that is not an integer (flags, dtypes, precisions), the launch options and what the launcher
    asked of the GPU before launching it."""
    pointers = sorted({str(v) for v in spec["signature"].values() if str(v)[:1] in "*t(["})
    flags = {k: v for k, v in spec["constexprs"].items() if not isinstance(v, int) or isinstance(v, bool)}
    return json.dumps([spec["kernel"], pointers, flags, spec.get("options", {}), spec.get("needs", [])], sort_keys=True)


def representatives(specs: list[dict]) -> list[dict]:
    """One specialization per code path: the one with the largest integer constexprs (tile sizes,
    which the simulation takes from its small shapes; shared memory and registers grow with them).
    The GPU's own tiles are compiled beside it (`candidates`)."""
    best: dict[str, dict] = {}
    weight = lambda s: math.prod(max(1, v) for v in s["constexprs"].values() if type(v) is int)  # noqa: E731
    for spec in specs:
        path = code_path(spec)
        if path not in best or weight(spec) > weight(best[path]):
            best[path] = spec
    return [best[p] for p in sorted(best)]


def _judge_all(spec: dict) -> list[dict]:
    from course import runtime
    return [judge(spec, gpu) for gpu in runtime.GPU_CLASSES]


def kernel_rows(specs: list[dict], gpus, jobs: int = 1) -> tuple[dict, int, int]:
    """({kernel: {class name: counts and reasons}}, code paths compiled, of them bf16 twins): per kernel and class, how
    many code paths fit, go another way, are refused (and why) or FAIL (and why). Kernels defined
    in tests/ are left out (the course launches them nowhere). The bf16 twins of float16 launches
    are added first (`launch_record.bf16_twins`). `jobs` processes compile side by side."""
    from course import launch_record
    specs = [s for s in specs if not s.get("numba")]  # week 1's Numba launches: course/numba_ptx.py
    recorded = [s for s in specs if "unrecordable" not in s and not s["kernel"].startswith("tests.")]
    paths = representatives(launch_record.bf16_twins(recorded))
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            verdicts = []
            for done, verdict in enumerate(pool.map(_judge_all, paths), 1):
                verdicts.append(verdict)
                print(f"compiled {done}/{len(paths)} code paths", file=sys.stderr, flush=True)
    else:
        verdicts = [_judge_all(spec) for spec in paths]
    rows: dict[str, dict] = {}
    empty = lambda: {g.name: {word: 0 for word in WORDS} | {"why": [], "verdict_of": {}} for g in gpus}  # noqa: E731
    for spec, per_gpu in zip(paths, verdicts):
        row = rows.setdefault(spec["kernel"], empty())
        for gpu, verdict in zip(gpus, per_gpu):
            cell = row[gpu.name]
            cell[verdict["verdict"]] += 1
            if verdict["verdict"] != "fits" and verdict["why"] not in cell["why"]:
                cell["why"].append(verdict["why"])
                cell["verdict_of"][verdict["why"]] = verdict["verdict"]
    for spec in specs:
        if "unrecordable" in spec and not spec["kernel"].startswith("tests."):
            for cell in rows.setdefault(spec["kernel"], empty()).values():
                cell["FAILS"] += 1
                cell["why"].append(f"not recorded: {spec['unrecordable']}")
                cell["verdict_of"][cell["why"][-1]] = "FAILS"
    return rows, len(paths), sum("twin" in spec for spec in paths)


WORDS = ("fits", "other", "refused", "FAILS")


def cell_word(cell: dict) -> str:
    """A kernel's word on one class: FAILS if any code path would; else what its paths do there."""
    if cell["FAILS"]:
        return "FAILS"
    return "/".join(word for word in WORDS if cell[word]) or "-"


def main(args) -> int:
    from course import launch_record, numba_ptx, runtime

    if runtime.BACKEND != "compile":
        print(f"compile-matrix needs COURSE_BACKEND=compile (this process chose {runtime.BACKEND!r})")
        return 2
    record = Path(args.record) if args.record else RECORD
    if args.write and args.ptxas != "all":
        print("--write records every path's registers: it needs --ptxas all")
        return 2
    os.environ[PTXAS_ENV] = args.ptxas
    specs = launch_record.read(record)
    gpus = runtime.GPU_CLASSES
    if args.kernels:
        return rejudge(args.kernels, specs, gpus, jobs=args.jobs, write=args.write)
    started = time.time()
    rows, compiled, twins = kernel_rows(specs, gpus, jobs=args.jobs)
    seconds = time.time() - started
    width = max((len(k) for k in rows), default=10)
    print(f"{'kernel':<{width}}  " + "  ".join(f"{g.arch:>14}" for g in gpus))
    totals = {word: 0 for word in WORDS}
    for kernel in sorted(rows):
        print(f"{kernel:<{width}}  " + "  ".join(f"{cell_word(rows[kernel][g.name]):>14}" for g in gpus))
        for g in gpus:
            for word in WORDS:
                totals[word] += rows[kernel][g.name][word]
    for kernel in sorted(rows):
        for g in gpus:
            cell = rows[kernel][g.name]
            for why in cell["why"]:
                print(f"  {cell_word(cell):<14} {g.arch} {kernel}: {why}")
    print(f"\n{len(rows)} kernels, {len(specs)} specializations recorded, {compiled} code paths ({twins} of them the bf16 "
          f"twins of float16 launches) x {len(gpus)} GPU "
          f"classes compiled in {seconds:.0f} s (ptxas: {args.ptxas}): {totals['fits']} fit, {totals['other']} take another path, "
          f"{totals['refused']} refused by the launcher before launch, {totals['FAILS']} FAIL")
    numba = numba_ptx.compile_all(specs, gpus)
    for failure in numba["failures"]:
        print("  FAIL", failure)
    if numba["specializations"]:
        print(numba_ptx.summary(numba))
    if args.write:
        out = {"how": "python -m course compile-matrix --write",
               "record": str(record.relative_to(ROOT)) if record.is_relative_to(ROOT) else str(record),
               "triton": runtime.describe()["triton"], "specializations": len(specs), "code_paths": compiled,
               "bf16_twins": twins,
               "classes": [{"name": g.name, "arch": g.arch, "shared_per_block": g.shared_per_block} for g in gpus],
               "totals": totals, "numba": {k: v for k, v in numba.items() if k != "failures"},
               "kernels": {k: {g.name: rows[k][g.name] for g in gpus} for k in sorted(rows)}}
        RESULT.write_text(json.dumps(out, indent=1) + "\n")
        print("wrote", RESULT.relative_to(ROOT))
    return 1 if totals["FAILS"] or numba["failed"] else 0


def rejudge(kernels: list[str], specs: list[dict], gpus, *, jobs: int = 1, write: bool = False) -> int:
    """`--kernels`: the rows of these kernels judged again from the record, every other row, the Numba
    part and the counts on top kept from tests/compile_matrix.json: after a change to what a few
    launchers ask (minutes, where the whole matrix takes most of an hour on two cores). Refused when a
    kernel's number of code paths changed: then the whole matrix must be made again."""
    old = json.loads(RESULT.read_text())
    rows, _, _ = kernel_rows([s for s in specs if s.get("kernel") in kernels], gpus, jobs=jobs)
    first = gpus[0].name
    for kernel in kernels:
        before = sum(old["kernels"].get(kernel, {}).get(first, {}).get(w, 0) for w in WORDS)
        after = sum(rows.get(kernel, {}).get(first, {}).get(w, 0) for w in WORDS)
        if not after or before != after:
            print(f"{kernel}: {before} code paths in {RESULT.name}, {after} in the record: run the whole matrix")
            return 2
        for g in gpus:
            print(f"  {g.arch} {kernel}: {cell_word(rows[kernel][g.name])}; " + "; ".join(rows[kernel][g.name]["why"]))
    old["kernels"].update({k: {g.name: rows[k][g.name] for g in gpus} for k in kernels})
    old["totals"] = {w: sum(row[g.name][w] for row in old["kernels"].values() for g in gpus) for w in WORDS}
    if write:
        RESULT.write_text(json.dumps(old, indent=1) + "\n")
        print("wrote", RESULT.relative_to(ROOT), f"({len(kernels)} kernels judged again)")
    return 1 if old["totals"]["FAILS"] else 0


def summary_lines(gpu_name: str | None = None, result: Path = RESULT) -> list[str]:
    """What runs on one GPU class (None: every class, a line each), from tests/compile_matrix.json:
    for `python -m course info`."""
    if not result.exists():
        return [f"(no {result.relative_to(ROOT)}: run `python -m course compile-matrix --write`)"]
    record = json.loads(result.read_text())
    lines = []
    for cls in record["classes"]:
        if gpu_name is not None and cls["name"] != gpu_name:
            continue
        cells = {k: row[cls["name"]] for k, row in record["kernels"].items()}
        counts = {word: sum(1 for c in cells.values() if cell_word(c) == word) for word in WORDS}
        mixed = len(cells) - sum(counts.values())
        lines.append(f"{cls['name']} ({cls['arch']}): of {len(cells)} Triton kernels, {counts['fits']} run as on the H100"
                     f"{f', {mixed} on some paths' if mixed else ''}, {counts['other']} give way to another path, "
                     f"{counts['refused']} are refused before launch, {counts['FAILS']} would fail")
        if gpu_name is not None:
            for kernel, cell in sorted(cells.items()):
                for why in cell["why"]:
                    lines.append(f"  {kernel}: {why}")
    return lines


GPUS_BEGIN = ("<!-- gpus:begin (generated by `python -m course report` from tests/compile_matrix.json; "
              "do not edit) -->")
GPUS_END = "<!-- gpus:end -->"


def _reason_text(why: str, verdict: str) -> str:
    """A refusal "X needs compute capability >= a.b: Y" as a table cell's "refused: X needs sm_ab; Y"."""
    if verdict == "refused" and " needs compute capability >= " in why:
        what, _, rest = why.partition(" needs compute capability >= ")
        version, _, instead = rest.partition(": ")
        return f"refused: {what} needs sm_{version.replace('.', '')}; {instead}"
    return f"{verdict}: {why}" if verdict == "FAILS" else why


def lesson_cell(cells: list[dict]) -> str:
    """One lesson on one GPU class, from its kernels' cells: "same kernels", or what does not run as
    on the H100 there: each refusal with its reason and fallback, each other path with the branch."""
    total = {w: sum(cell[w] for cell in cells) for w in WORDS}
    if not (total["other"] or total["refused"] or total["FAILS"]):
        return "same kernels"
    reasons = []
    for cell in cells:
        for why in cell["why"]:
            text = _reason_text(why, cell.get("verdict_of", {}).get(why, "refused" if cell["refused"] else "other"))
            if text not in reasons:
                reasons.append(text)
    rest = ["the rest: same kernels"] if total["fits"] else []
    return "<br>".join(sorted(reasons, key=lambda r: (not r.startswith("FAILS"), r)) + rest).replace("|", "\\|")


def readme_section(result: Path = RESULT) -> str:
    """README's "What runs on your GPU": lesson x GPU class, with the counts on top; a cell that is
    not "same kernels" says what is refused (why, and the fallback) or which other path runs."""
    if not result.exists():
        return f"(no {result.name} yet: `python -m course compile-matrix --write`)"
    record = json.loads(result.read_text())
    classes = record["classes"]
    t = record["totals"]
    twins = record.get("bf16_twins", 0)
    lines = [f"Every Triton kernel the tests launch ({len(record['kernels'])} kernels, {record['code_paths']} code "
             f"paths, {twins} of them the bfloat16 twins of float16 launches, which the simulation does not run), "
             f"compiled without a GPU for each class by `python -m course compile-matrix` (Triton "
             f"{record['triton']}): of {sum(t.values())} code path x class pairs, {t['fits']} compile and fit, "
             f"{t['other']} give way to another path of the same lesson, {t['refused']} are refused by the "
             f"launcher before any launch (the message names the fallback), {t['FAILS']} would fail."]
    numba = record.get("numba")
    if numba:
        lines += ["", f"Week 1's Numba kernels: {numba['kernels']} kernels, {numba['specializations']} launched "
                      f"specializations, compiled to PTX for {', '.join(numba['targets'])}: {numba['compiled']} "
                      f"compile, {numba['failed']} fail (`numba.cuda.compile_ptx`, {numba['numba_cuda']})."]
    lines += ["", "| lesson | " + " | ".join(f"{c['name']} ({c['arch']})" for c in classes) + " |",
              "|---|" + "---|" * len(classes)]
    lessons: dict[str, dict] = {}
    for kernel, row in record["kernels"].items():
        lesson = kernel.partition(":")[0]
        for c in classes:
            lessons.setdefault(lesson, {}).setdefault(c["name"], []).append(row[c["name"]])
    for lesson in sorted(lessons):
        lines.append(f"| {lesson} | " + " | ".join(lesson_cell(lessons[lesson][c["name"]]) for c in classes) + " |")
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("compile-matrix", help="compile every recorded Triton kernel for each GPU class (no GPU needed)")
    p.add_argument("--record", help=f"launches recorded by COURSE_RECORD_LAUNCHES=FILE (default: {RECORD.relative_to(ROOT)})")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes compiling side by side")
    p.add_argument("--write", action="store_true", help=f"write {RESULT.relative_to(ROOT)}")
    p.add_argument("--ptxas", choices=PTXAS_MODES, default="all",
                   help="all: ptxas on every path (registers recorded); needed: only where the register limit "
                        "can be reached (16 warps and more), four fifths of the time saved (CI)")
    p.add_argument("--kernels", nargs="+", metavar="MODULE:KERNEL",
                   help="judge only these kernels again; keep every other row of the committed matrix")


def prepare() -> None:
    """Choose the compile-only backend before course.runtime is imported (the CLI calls this)."""
    if "course.runtime" in sys.modules:
        return
    os.environ["COURSE_BACKEND"] = "compile"
