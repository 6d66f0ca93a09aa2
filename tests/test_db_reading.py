"""Database.data_version: the key the dashboard caches its page views under (issue 14)."""

from __future__ import annotations

from sql.db import Database


def test_data_version_changes_with_a_write_not_with_a_read(tmp_path):
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    v0 = db.data_version()
    db.fetch("deployments")
    with db.snapshot() as snap:
        snap.fetch("deployments")
    assert db.data_version() == v0
    with db.write() as con:
        con.execute("INSERT INTO deployments (name) VALUES ('x')")
    assert db.data_version() != v0


def test_data_version_of_a_missing_file(tmp_path):
    assert Database(tmp_path / "none.duckdb").data_version() == (None, None, None, None)
