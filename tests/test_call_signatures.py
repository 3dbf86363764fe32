"""Every call from one course module to a function of another names only arguments that function has.

Much of the course runs only on a GPU (sweeps, GPU check steps, benchmarks at full size), so the CPU
suite never executes those lines, and a call left behind by a rename fails only when a lent GPU's
minutes are already being spent: `sweep_forward` called `flash.launch_forward(..., rung=...)` after
the dispatch moved out of the launcher, and died on an H100 with a TypeError. Python checks argument
names only when the call runs; this test checks them from the source, for every call it can resolve
statically: `module.function(...)` through an imported course module, or `function(...)` imported by
name from one, against a top-level `def` with no `**kwargs` (and no `*args`, for the positional count).
"""
import ast
from pathlib import Path

from course import weeks

ROOT = weeks.ROOT
SKIP_PARTS = {".git", ".devwheels", "__pycache__", "exercises", "wrong"}


def _course_files() -> dict[str, Path]:
    """module name -> file, for every Python file in the repo's packages and tools."""
    found = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if SKIP_PARTS & set(rel.parts):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            found[".".join(parts)] = path
    return found


def _signatures(tree: ast.Module) -> dict[str, ast.arguments]:
    return {node.name: node.args for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _redefined(tree: ast.Module) -> set[str]:
    """Names a module rebinds at top level other than by `def` (an assignment or a decorator
    wrapping can change what the name accepts): calls through them are not judged."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.decorator_list:
            names.add(node.name)
    return names


def _problems(call: ast.Call, args: ast.arguments) -> list[str]:
    params = [a.arg for a in args.posonlyargs + args.args]
    named = {a.arg for a in args.args + args.kwonlyargs}
    out = []
    if args.kwarg is None:
        unknown = [k.arg for k in call.keywords if k.arg is not None and k.arg not in named]
        out += [f"unknown keyword {name!r}" for name in unknown]
    if args.vararg is None and not any(isinstance(a, ast.Starred) for a in call.args):
        if len(call.args) > len(params):
            out.append(f"{len(call.args)} positional arguments, it takes at most {len(params)}")
    return out


def test_calls_across_course_modules_name_only_arguments_the_callee_has():
    files = _course_files()
    trees = {name: ast.parse(path.read_text()) for name, path in files.items()}
    sigs = {name: _signatures(tree) for name, tree in trees.items()}
    rebound = {name: _redefined(tree) for name, tree in trees.items()}
    bad = []
    for name, tree in trees.items():
        modules, functions = {}, {}  # alias -> module name; alias -> (module, function)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in files:
                        modules[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    local = alias.asname or alias.name
                    if full in files:
                        modules[local] = full
                    elif node.module in sigs and alias.name in sigs[node.module]:
                        functions[local] = (node.module, alias.name)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            target = None
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id in modules:
                target = (modules[node.func.value.id], node.func.attr)
            elif isinstance(node.func, ast.Name) and node.func.id in functions:
                target = functions[node.func.id]
            if target is None or target[1] not in sigs.get(target[0], {}) or target[1] in rebound[target[0]]:
                continue
            for problem in _problems(node, sigs[target[0]][target[1]]):
                bad.append(f"{files[name].relative_to(ROOT)}:{node.lineno}: {target[0]}.{target[1]}(): {problem}")
    assert not bad, "calls that would fail with a TypeError when they run:\n" + "\n".join(bad)
