"""Database.data_version: the key the dashboard caches its page views under."""

from __future__ import annotations

from kvplan.sql.db import Database


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


def _rows(win):
    return sorted((r.name, r.family, r.model_name, r.le, r.labels, round(r.increase, 6), r.pairs, r.resets)
                  for r in win.rows)


def _buckets(buckets):
    return [(b.start, sorted((r.name, r.le, r.labels, round(r.increase, 6)) for r in b.rows)) for b in buckets]


def test_one_pass_reads_the_same_window_and_buckets_as_the_two_reads(tmp_path):
    """load_window_and_buckets (one scan of each raw edge) gives exactly the rows of
    load_window + window_buckets: short windows, a window around rolled-up days with daily
    points, and one whose buckets would read raw what the window reads rolled (fallback)."""
    from datetime import timedelta

    from kvplan.app.data.window import load_window, load_window_and_buckets, window_buckets
    from tests.test_app_fixtures import DEPLOYMENT, hour, rollup, scenario_db

    db = scenario_db(tmp_path)
    for day in (hour(0), hour(24)):  # the nightly rollups of both days
        rollup(db, DEPLOYMENT, day)
    cases = [(hour(0), hour(48), 3600), (hour(24), hour(48), 1800), (hour(3.5), hour(9.25), 600),
             (hour(0), hour(48) + timedelta(days=2), 86400), (hour(1), hour(47), 1800)]
    queries, one_pass = [], []
    real_fetch = db.fetch

    def fetch(name, **kw):
        queries.append(name)
        return real_fetch(name, **kw)

    db.fetch = fetch
    for f, t, step in cases:
        w1, b1 = load_window(db, DEPLOYMENT, f, t), window_buckets(db, DEPLOYMENT, f, t, step)
        queries.clear()
        w2, b2 = load_window_and_buckets(db, DEPLOYMENT, f, t, step)
        assert _rows(w2) == _rows(w1) and w2.spans == w1.spans and w2.stats == w1.stats, (f, t, step)
        assert _buckets(b2) == _buckets(b1), (f, t, step)
        one_pass.append("span_increases_and_buckets" in queries)
        if one_pass[-1]:
            assert "span_increases" not in queries and "span_buckets" not in queries
    assert w1.rows and b1
    assert True in one_pass and False in one_pass, one_pass  # both paths were compared
