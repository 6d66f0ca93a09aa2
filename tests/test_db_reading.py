"""Database.reading: one read connection for a page run's queries; data_version: the key the
dashboard caches its views under."""

from __future__ import annotations

import duckdb
import pytest

from sql import db as dbmod
from sql.db import Database


@pytest.fixture
def db(tmp_path):
    d = Database(tmp_path / "k.duckdb")
    d.migrate()
    return d


def test_a_page_run_opens_the_file_once(db, monkeypatch):
    opened = []
    real = duckdb.connect
    monkeypatch.setattr(dbmod.duckdb, "connect", lambda *a, **k: opened.append(k) or real(*a, **k))
    db.fetch("deployments")
    db.fetch("deployments")
    assert len(opened) == 2  # outside a block: one connection per query
    opened.clear()
    with db.reading():
        for _ in range(10):
            db.fetch("deployments")
        with db.reading():  # nested: the same connection
            db.fetch("deployments")
    assert opened == [{"read_only": True}]
    db.fetch("deployments")  # closed after the block
    assert len(opened) == 2


def test_a_write_inside_a_reading_block_is_refused_not_deadlocked(db):
    with db.reading(), pytest.raises(RuntimeError, match="inside Database.reading"):
        with db.write():
            pass
    with db.write() as con:  # and fine afterwards
        con.execute("SELECT 1")


def test_data_version_changes_with_a_write_not_with_a_read(db):
    v0 = db.data_version()
    db.fetch("deployments")
    with db.reading():
        db.fetch("deployments")
    assert db.data_version() == v0
    with db.write() as con:
        con.execute("INSERT INTO deployments (name) VALUES ('x')")
    assert db.data_version() != v0
