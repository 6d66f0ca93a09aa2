"""Typed public signatures in app/, collectors/ and deploy/, checked from the source tree.

mypy checks kvplan.models and kvplan.sql strictly (every function typed, private ones
included; pyproject [tool.mypy]). Outside them the rule is narrower, and mypy cannot say it:
every *public* function or method -- a ``def`` at module level or directly in a class, whose
name and class name do not start with ``_`` -- annotates each argument (``self``/``cls``
aside) and its return (``__init__`` aside, whose return is always None). Private helpers and
functions nested in other functions may stay loose. Dunder methods count as public. The file
list comes from the tree, so a new module is checked the day it is added.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_TYPED = ("app", "collectors", "deploy")


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def untyped_public_defs(path: Path, root: Path = ROOT) -> list[str]:
    """``path:line name (what is missing)`` for each public def of ``path`` missing an annotation."""
    tree = ast.parse(path.read_text(), str(path))
    defs: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, bool]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            defs.append((node, False))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            defs += [(n, True) for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    out = []
    for fn, is_method in defs:
        if not _public(fn.name):
            continue
        a = fn.args
        args = a.posonlyargs + a.args
        if is_method and args and not any(
                isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list):
            args = args[1:]  # self / cls
        args = args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x is not None]
        missing = [x.arg for x in args if x.annotation is None]
        if fn.returns is None and fn.name != "__init__":
            missing.append("return")
        if missing:
            out.append(f"{path.relative_to(root)}:{fn.lineno} {fn.name} ({', '.join(missing)})")
    return out


def test_the_walk_finds_an_untyped_public_def(tmp_path):
    """The checker itself: a public function, a public method, a private one, a nested one."""
    src = tmp_path / "m.py"
    src.write_text("def f(a, b: int): pass\n"
                   "def _g(a): pass\n"
                   "def h(a: int) -> None:\n    def inner(x): pass\n"
                   "class C:\n    def __init__(self, x: int): pass\n    def m(self, y) -> int: return 1\n"
                   "    @staticmethod\n    def s(z: int): pass\n"
                   "class _P:\n    def m(self, y): pass\n")
    assert untyped_public_defs(src, tmp_path) == ["m.py:1 f (a, return)", "m.py:7 m (y)", "m.py:9 s (return)"]


@pytest.mark.parametrize("package", PUBLIC_TYPED)
def test_every_public_function_is_typed_at_its_signature(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    bad = [line for f in files for line in untyped_public_defs(f)]
    assert not bad, "public functions missing annotations:\n" + "\n".join(bad)
