"""Imports point down only: app -> collectors -> sql -> models.

``models`` is pure (no I/O, imports no other layer); ``sql`` owns DuckDB and may use the
models' errors and time helpers; ``collectors`` write into DuckDB; ``app`` (CLI, pages,
report) reads through ``app.data`` and computes through ``models``. ``deploy/local`` is
development tooling (the local stack, recorders, the A/B harness): the product packages never
import it, except the thin ``kvplan stack``/``kvplan demo`` entry point. Nothing but tests
imports ``tests``. Every import counts, including those inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "models": {"app", "collectors", "sql", "deploy", "tests"},
    "sql": {"app", "collectors", "deploy", "tests"},
    "collectors": {"app", "deploy", "tests"},
    "app": {"tests"},
    "bench": {"tests"},
    "deploy": {"tests"},
}
ALLOWED = {("app/cli/demo.py", "deploy")}
"""(file, package) exceptions, each a documented entry point."""


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def files(layer: str) -> list[Path]:
    return sorted((ROOT / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_layer_imports_a_higher_one(layer):
    bad = []
    for f in files(layer):
        rel = str(f.relative_to(ROOT))
        for pkg in imports(f) & FORBIDDEN[layer]:
            if (rel, pkg) not in ALLOWED:
                bad.append(f"{rel} imports {pkg}")
    assert bad == []


def test_the_check_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("def f():\n    from app.cli import main\n    import tests.recorded\n")
    assert imports(f) == {"app", "tests"}
