"""The installed shape: ``pip install kvplan`` writes one top-level package, ``kvplan``, and
works beside another distribution's generic ``app`` package.

The wheel is built from this checkout and installed into a fresh virtual environment that
also holds a dummy package named ``app`` (what another project could have installed). The
dependencies come from this project's venv through a path entry (installing them again would
take minutes and the network); kvplan itself and the dummy come only from the fresh venv.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"kvplan.app": "app", "kvplan.collectors": "collectors", "kvplan.models": "models",
          "kvplan.sql": "sql", "kvplan.deploy": "deploy"}
NOT_SHIPPED = {"kvplan.deploy.local.recorders"}
"""Development tooling no command uses (recorders, the A/B harness)."""


def tree_packages() -> set[str]:
    out = set()
    for pkg, folder in MAPPED.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            out.add(".".join([pkg, *rel.parts]))
    return out - NOT_SHIPPED


def test_the_package_list_is_the_tree():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert conf["package-dir"] == MAPPED
    assert set(conf["packages"]) == tree_packages()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                        "-w", str(out), str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = out.glob("kvplan-*.whl")
    return whl


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package_and_its_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"kvplan"}
    assert "kvplan/deploy/demo/kvplan-demo.jsonl.gz" in names
    assert "kvplan/sql/migrations/001_metrics.sql" in names
    assert "kvplan/app/pages/overview.py" in names and "kvplan/app/streamlit_app.py" in names
    assert "kvplan/deploy/local/stack.py" in names and "kvplan/deploy/local/install_stack.sh" in names
    assert not [n for n in names if "/recorders/" in n or n.startswith("tests/")]


@pytest.mark.slow
def test_installed_beside_a_package_named_app_it_runs(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    (site / "app").mkdir()
    (site / "app" / "__init__.py").write_text("WHO = 'someone else'\n")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    deps = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_relative_to(sys.prefix))
    (site / "zz_kvplan_test_deps.pth").write_text(deps + "\n")  # after the venv's own entries
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    work = tmp_path / "elsewhere"
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), cwd=work, env=env, capture_output=True, text=True, timeout=600)

    where = run(str(py), "-c", "import app, kvplan.app.cli as c; print(app.WHO); print(c.__file__)")
    assert where.returncode == 0, where.stderr[-3000:]
    who, cli_file = where.stdout.splitlines()
    assert who == "someone else"
    assert Path(cli_file).is_relative_to(site), "kvplan comes from the installed wheel, not the checkout"
    assert run(str(env_dir / "bin" / "kvplan"), "--help").returncode == 0
    demo = run(str(env_dir / "bin" / "kvplan"), "demo", "--load-only", "--db", str(work / "demo.duckdb"))
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-3000:]
    assert (work / "demo.duckdb").stat().st_size > 100_000
