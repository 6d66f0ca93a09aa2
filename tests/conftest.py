"""Shared fixtures. Fast layer: `pytest -m "not stack and not browser and not prometheus"`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kvplan.sql.db import Database

if TYPE_CHECKING:
    from tests.hostile import Server

FIXTURES = Path(__file__).parent / "fixtures"
PAYLOADS = FIXTURES / "payloads"

pytest_plugins = ["tests.stack_fixtures"]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """No test sees the developer's KVPLAN_* settings or ./kvplan.toml."""
    for k in list(os.environ):
        if k.startswith("KVPLAN_") and k not in ("KVPLAN_STACK_VENV", "KVPLAN_STACK_HOME"):
            monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def db(tmp_path) -> Database:
    d = Database(tmp_path / "kvplan.duckdb")
    d.migrate()
    return d


@pytest.fixture
def server(request):
    """Make misbehaving loopback servers (tests.hostile.Server); all closed at the end."""
    made = []

    def make(mode: str, limit: float = 0, body: Path | None = None) -> Server:
        from tests.hostile import GOOD, Server

        made.append(Server(mode, limit, body or GOOD))
        return made[-1]

    yield make
    for s in made:
        s.close()
