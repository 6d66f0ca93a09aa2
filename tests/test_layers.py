"""The structure, checked from the code's own imports (every import counts, including those
inside functions):

* one import package: the folders app/, collectors/, models/, sql/, deploy/ are installed as
  ``kvplan.app``, ``kvplan.collectors``, ... and nothing imports them by their bare folder
  names (``import models`` would load whatever else is called ``models``);
* layers, imports pointing down only: app -> collectors -> sql -> models. ``deploy/local`` is
  development tooling (the local stack, recorders, the A/B harness): the product packages never
  import it, except the thin ``kvplan stack``/``kvplan demo`` entry point. Nothing but tests
  imports ``tests``;
* models/ is grouped by idea, on floors: a subpackage imports only from the floors below it
  (``core`` imports nothing else from models); and it is pure: no I/O, no DuckDB, no Streamlit,
  no network, no ``open()``.

The file lists come from the tree, so a new file is checked the day it is added.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "collectors", "models", "sql", "deploy")
FORBIDDEN = {
    "models": {"app", "collectors", "sql", "deploy", "tests"},
    "sql": {"app", "collectors", "deploy", "tests"},
    "collectors": {"app", "deploy", "tests"},
    "app": {"tests"},
    "bench": {"tests"},
    "deploy": {"tests"},
}
ALLOWED = {("app/cli/demo.py", "deploy")}
"""(file, layer) exceptions, each a documented entry point."""

FLOORS = ("core", "inputs", "metrics", "prompts", "prefill", "cache", "capacity", "decision")
"""models/ subpackages from the ground up, in pipeline order."""

PURE_IMPORTS = {"__future__", "bisect", "collections", "copy", "dataclasses", "datetime", "enum", "functools",
                "hashlib", "heapq", "ipaddress", "itertools", "json", "math", "numpy", "pathlib", "pydantic", "random",
                "re", "statistics", "threading", "typing", "unicodedata", "urllib"}
"""What models/ may import besides itself: computation only (``urllib`` is for ``urllib.parse``;
``hashlib`` for prefix-cache block keys (models/prompts); ``pydantic`` for the settings
declarations: validation only, no I/O; ``pathlib`` for their path-valued fields, never read;
``ipaddress`` to spell a target's host one way; ``threading`` for the redaction registry's lock;
``unicodedata`` for the name check; ``random`` for seeded, deterministic draws)."""


def module_of(path: Path) -> list[str]:
    """The dotted name of a file of the tree once installed (``models/core/errors.py`` ->
    kvplan.models.core.errors; tests and bench keep their folder names)."""
    parts = list(path.resolve().relative_to(ROOT).with_suffix("").parts)
    return (["kvplan"] if parts[0] in PACKAGES else []) + parts


def imported_modules(path: Path, source: str | None = None) -> set[str]:
    """Every module an import statement of ``path`` names (``from a.b import c`` -> a.b), relative
    imports resolved against the file's package (``from ..core import x`` in models/prefill/fit.py
    -> kvplan.models.core)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            pkg = module_of(path)[:-1]  # a module's package; an __init__.py's is its own folder
            base = pkg[:len(pkg) - (node.level - 1)]
            out.add(".".join(base + ([node.module] if node.module else [])))
    return out


def layer_of(module: str) -> str | None:
    """``kvplan.app.cli`` -> ``app``; ``tests.recorded`` -> ``tests``; anything else -> None."""
    parts = module.split(".")
    if parts[0] == "kvplan" and len(parts) > 1:
        return parts[1]
    return "tests" if parts[0] == "tests" else None


def files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def rel(f: Path) -> str:
    return str(f.relative_to(ROOT))


def test_nothing_imports_the_bare_folder_names():
    bad = [f"{rel(f)} imports {m}" for folder in (*PACKAGES, "tests", "bench") for f in files(folder)
           for m in imported_modules(f) if m.split(".")[0] in PACKAGES]
    assert bad == []


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_layer_imports_a_higher_one(layer):
    bad = [f"{rel(f)} imports {m}" for f in files(layer) for m in imported_modules(f)
           if layer_of(m) in FORBIDDEN[layer] and (rel(f), layer_of(m)) not in ALLOWED]
    assert bad == []


VIEW_HELPERS = {("app/views/whatif.py", "kvplan.app.views.whatif_topology")}
"""(view, module) pairs where a view may import another module of app/views: the what-if's two
halves (one page's view, in two files). Everything a second page needs (the plan of a window,
chart rows, sweep views) lives in app/data/."""


def test_a_view_never_imports_another_pages_view():
    """No module of app/views imports another app/views module (the package itself included),
    except the pairs named in ``VIEW_HELPERS``."""
    bad = [f"{rel(f)} imports {m}" for f in files("app/views") for m in imported_modules(f)
           if m.startswith("kvplan.app.views") and m != ".".join(module_of(f)) and (rel(f), m) not in VIEW_HELPERS]
    assert bad == []


def test_the_view_check_sees_an_import_of_another_view():
    seen = imported_modules(ROOT / "app" / "views" / "cost.py", "from .overview import overview\n")
    assert "kvplan.app.views.overview" in seen


def floor_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["kvplan", "models"] and len(parts) > 2 else None


def test_models_is_grouped_on_the_floors_and_nothing_else():
    top = sorted(p.name for p in (ROOT / "models").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert top == sorted(FLOORS)
    loose = sorted(p.name for p in (ROOT / "models").glob("*.py") if p.name != "__init__.py")
    assert loose == [], "every model module belongs to a group"


@pytest.mark.parametrize("floor", FLOORS)
def test_a_models_group_imports_only_from_the_floors_below(floor):
    allowed = set(FLOORS[:FLOORS.index(floor) + 1])
    bad = [f"{rel(f)} imports {m}" for f in files(f"models/{floor}") for m in imported_modules(f)
           if floor_of(m) is not None and floor_of(m) not in allowed]
    assert bad == []


@pytest.mark.parametrize("path", [rel(f) for f in files("models")])
def test_models_stay_pure(path):
    """No I/O in models/: no DuckDB, Streamlit, network, subprocess or file access."""
    f = ROOT / path
    outside = {m for m in imported_modules(f) if not m.startswith("kvplan.models")}
    assert {m.split(".")[0] for m in outside} <= PURE_IMPORTS, sorted(outside)
    assert not {m for m in outside if m.startswith("urllib") and m != "urllib.parse"}
    opens = [n.lineno for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.Call)
             and getattr(n.func, "id", "") == "open"]
    assert opens == [], f"{path} opens a file"


def test_relative_imports_are_resolved_against_the_file():
    seen = imported_modules(ROOT / "models" / "prefill" / "fit.py",
                            "from ..core.errors import KvplanError\nfrom . import nnls\n")
    assert seen == {"kvplan.models.core.errors", "kvplan.models.prefill"}
    assert imported_modules(ROOT / "models" / "prefill" / "__init__.py", "from .fit import x\n") == \
        {"kvplan.models.prefill.fit"}
    assert floor_of("kvplan.models.core.errors") == "core"


def test_the_checks_see_imports_inside_functions(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("def f():\n    from kvplan.app.cli import main\n    import tests.recorded\n    import models\n")
    assert imported_modules(f) == {"kvplan.app.cli", "tests.recorded", "models"}
    assert {layer_of(m) for m in imported_modules(f)} == {"app", "tests", None}


def test_an_upward_import_between_model_groups_is_seen(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("from kvplan.models.decision.plan import plan\nfrom kvplan.models.core.errors import KvplanError\n")
    assert {floor_of(m) for m in imported_modules(f)} == {"decision", "core"}


PRIVATE_CHECKED = ("app", "collectors", "sql", "models", "deploy", "bench")


def private_imports(path: Path, source: str | None = None) -> list[str]:
    """``file:line imports name`` for every ``from x import _name`` of ``path`` (a dunder such as
    ``__version__`` is public): a name another module uses is public, or the code moves to its user."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    return [f"{path}:{node.lineno} imports {a.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            for a in node.names if a.name.startswith("_") and not (a.name.startswith("__") and a.name.endswith("__"))]


def test_no_module_imports_another_modules_private_names():
    bad = [hit for folder in PRIVATE_CHECKED for f in files(folder) for hit in private_imports(f)]
    assert bad == []


def test_the_private_import_check_sees_a_private_name_but_not_a_dunder_or_an_alias(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("from a import __version__, pub as _pub\ndef g():\n    from .b import ok, _hidden\n")
    assert private_imports(f) == [f"{f}:3 imports _hidden"]


def module_files() -> dict[str, Path]:
    """Every module of the package by dotted name (packages' ``__init__`` files left out: a
    package re-exports, it is not where the code that imports lives)."""
    return {".".join(module_of(f)): f for folder in PACKAGES for f in files(folder) if f.name != "__init__.py"}


def import_edges(path: Path, known: dict[str, Path], source: str | None = None) -> set[str]:
    """The package's modules ``path`` imports, at the top or inside a function: ``from a.b import c``
    names a.b, or a.b.c where c is a module."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                pkg = module_of(path)[:-1]
                base = ".".join(pkg[:len(pkg) - (node.level - 1)] + ([node.module] if node.module else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if m in known}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_no_import_loop_between_modules():
    """Two modules that import each other (even inside a function, to dodge the import-time error)
    are one idea split in two, or a shared piece that belongs in a third module."""
    known = module_files()
    graph = {m: import_edges(f, known) - {m} for m, f in known.items()}
    assert import_cycles(graph) == []


def test_the_loop_check_sees_an_import_inside_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    known = module_files()
    f = ROOT / "collectors" / "traces" / "request_logs.py"
    edges = import_edges(f, known, "def f():\n    from .ingest import import_trace\n")
    assert edges == {"kvplan.collectors.traces.ingest"}


def fetch_calls(path: Path, source: str | None = None) -> list[str]:
    """``file:line`` of every ``x.fetch(...)`` call in ``path`` (a named query run)."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    return [f"{rel(path) if path.is_relative_to(ROOT) else path}:{n.lineno}" for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "fetch"]


def test_the_app_reads_the_database_only_in_app_data():
    """Pages, views, the CLI and the report receive typed data from ``app/data``; none runs a query."""
    bad = [hit for f in files("app") if not f.is_relative_to(ROOT / "app" / "data") for hit in fetch_calls(f)]
    assert bad == []


def test_the_fetch_check_sees_a_call_but_not_a_comment(tmp_path):
    f = tmp_path / "v.py"
    f.write_text("# db.fetch('x') in a comment\ndef g(db):\n    return [r for r in db.fetch('traces')]\n")
    assert fetch_calls(f) == [f"{f}:3"]
