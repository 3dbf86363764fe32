"""The backend choice is one import line: a lesson, benchmark, capstone or tools module (solutions
and exercise stubs) gets Triton and Numba from `course.gpu`, which imports `course.runtime` first
(it chooses the GPU, the simulation or compile-only before either library reads its switches).
So no module imports triton or numba before course.gpu, and none carries the old ceremony: a
`# noqa: E402` for imports "after course.runtime", or a "runtime before triton" comment."""
import ast
import re

from course import gpu, weeks

# Modules other changes are rewriting this round; each keeps the old ceremony until its change
# lands on main, and the lead removes it here after the merge (with its exercise stub).
GPU_LIBRARIES = ("triton", "numba")
CEREMONY_COMMENT = re.compile(r"noqa: E402.*after course\.runtime|before (triton|numba)\b", re.I)


def _modules():
    """(relative path, path) of every lesson, benchmark, capstone and tools module, stubs included."""
    packages = [w.package for w in weeks.all_weeks()] + ["tools"]
    for package in packages:
        for path in sorted((weeks.ROOT / package).rglob("*.py")):
            yield str(path.relative_to(weeks.ROOT)), path


def _library(node) -> str | None:
    """The GPU library a module-level import statement imports, or None."""
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    if isinstance(node, ast.ImportFrom) and node.level:
        return None
    return next((n.split(".")[0] for n in names if n.split(".")[0] in GPU_LIBRARIES), None)


def _module_level(body):
    """Module-level statements in order, into `if`/`try` blocks (a guarded import is still one)."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody"):
            if isinstance(node, (ast.If, ast.Try)):
                yield from _module_level(getattr(node, field, []))
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                yield from _module_level(handler.body)


def test_gpu_libraries_come_from_course_gpu_after_the_backend_is_chosen():
    early, unknown = [], []
    for rel, path in _modules():
        seen_gpu = False
        for node in _module_level(ast.parse(path.read_text()).body):
            if isinstance(node, ast.ImportFrom) and node.module == "course.gpu":
                seen_gpu = True
                unknown += [f"{rel}:{node.lineno}: {a.name}" for a in node.names if a.name not in gpu.__all__]
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and not seen_gpu and _library(node):
                early.append(f"{rel}:{node.lineno}: imports {_library(node)} before `from course.gpu import ...`")
    assert not early, ("a module's first GPU import is `from course.gpu import triton, tl, DEVICE` (or `cuda, "
                       f"float32, ...` for Numba), which chooses the backend first: {early}")
    assert not unknown, f"names course.gpu does not export: {unknown}"


def test_no_module_carries_the_import_order_ceremony():
    found = []
    for rel, path in _modules():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "#" in line and CEREMONY_COMMENT.search(line[line.index("#"):]):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, ("course.gpu orders the imports: no 'runtime before triton' comment and no "
                       f"`noqa: E402` for imports after course.runtime: {found}")

