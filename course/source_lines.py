"""Lines of code of the kernels and launchers a benchmark variant runs: the "LoC" column.

A benchmark names them in `sources=` (course/bench.py): a Python function, a Triton or Numba
kernel, or `c_function(path, name)` for a CUDA C function. Counted: every line that holds code,
signature and decorators included; not counted: blank lines, comment-only lines and docstrings.
A rough, qualitative measure of effort; helpers shared by several kernels count only where listed.
"""
from __future__ import annotations

import ast
import inspect
import io
import re
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CFunction:
    """A function in a CUDA C (or C) source file, for `Benchmark.sources`."""
    path: Path
    name: str

    def source(self) -> str:
        """The function's text, from its signature (template line included) to its closing brace."""
        text = Path(self.path).read_text()
        lines = text.splitlines()
        code = _strip_c_comments(text)
        for match in re.finditer(rf"\b{re.escape(self.name)}\s*\(", code):
            after = _skip_parens(code, match.end() - 1)
            if not code[after:].lstrip().startswith("{"):
                continue  # a call or a declaration, not the definition
            start_line = code.count("\n", 0, match.start())
            while start_line > 0 and _continues_signature(code.splitlines()[start_line - 1]):
                start_line -= 1
            open_at = code.index("{", after)
            close_at = _matching_brace(code, open_at)
            end_line = code.count("\n", 0, close_at)
            return "\n".join(lines[start_line:end_line + 1])
        raise ValueError(f"no definition of {self.name!r} in {self.path}")


def c_function(path, name: str) -> CFunction:
    """`sources=` entry for a CUDA C kernel: `c_function(HERE / "kernels/vector_add.cu", "vector_add_f32")`."""
    return CFunction(Path(path), name)


def _strip_c_comments(text: str) -> str:
    """Comments replaced by spaces (newlines kept), so offsets and line numbers still match."""
    def blank(match):
        return re.sub(r"[^\n]", " ", match.group(0))
    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, text, flags=re.S)


def _skip_parens(code: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(code)):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        if depth == 0:
            return i + 1
    raise ValueError("unbalanced parentheses")


def _matching_brace(code: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(code)):
        depth += {"{": 1, "}": -1}.get(code[i], 0)
        if depth == 0:
            return i
    raise ValueError("unbalanced braces")


def _continues_signature(line: str) -> bool:
    """A line just above a function name that belongs to its signature (`template <...>`, a return type)."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#") and stripped[-1] not in ";{}"


def _count_c_lines(source: str) -> int:
    return sum(1 for line in _strip_c_comments(source).splitlines() if line.strip())


def _python_function(obj):
    """The plain Python function behind a Triton JITFunction or Autotuner, a Numba kernel, a partial."""
    for _ in range(10):
        if inspect.isfunction(obj):
            return inspect.unwrap(obj)
        if inspect.ismethod(obj):
            obj = obj.__func__
            continue
        inner = next((getattr(obj, a) for a in ("py_func", "fn", "func", "__wrapped__")
                      if getattr(obj, a, None) is not None), None)
        if inner is None or inner is obj:
            break
        obj = inner
    raise TypeError(f"cannot find Python source for {obj!r}: sources= takes functions, Triton or "
                    "Numba kernels, or c_function(path, name) for CUDA C")


def _count_python_lines(source: str) -> int:
    source = textwrap.dedent(source)
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a lambda cut out of a larger expression: count its non-blank lines
        return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    code = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip:
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - docstrings)


def count_source_lines(spec) -> int:
    """Lines of code in `spec`: a function/kernel, a `c_function(...)`, or a list of them.

    Counted: every line holding code, the `def` line, decorators and a multi-line signature
    included. Not counted: blank lines, comment-only lines, docstrings. Each object counts
    once even if listed twice.
    """
    items = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    total, seen = 0, set()
    for item in items:
        if isinstance(item, CFunction):
            key, lines = (str(item.path), item.name), _count_c_lines(item.source())
        else:
            fn = _python_function(item)
            try:
                source = inspect.getsource(fn)
            except OSError as error:  # defined in a REPL or exec(): no file to read
                raise TypeError(f"no source file for {fn!r} in sources=: {error}") from None
            key, lines = fn, _count_python_lines(source)
        if key not in seen:
            seen.add(key)
            total += lines
    return total
