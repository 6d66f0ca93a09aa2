"""A month's first day read from what the nightly job stored of it (migration 015: ``edge_rollups``,
``prefill_edge_rollups``) gives exactly what the raw read of that day gives: the report's data and
notes, the window's rows with their broken and gap counts, the chart buckets, the cached tokens and
the prefill intervals. The history starts the day before the month (pairs straddling its midnight,
a series whose ``_created`` lies the day before), and the first day holds a restart, a gap, a
broken pair, an impossible sample and a failed scrape. A day rolled up before the migration (no
mark in ``edge_rollup_days``) is read raw, with the same result."""

from __future__ import annotations

import dataclasses
import shutil
from datetime import UTC, datetime, timedelta

import pytest

from kvplan.collectors.scrape.store import store_failure
from kvplan.sql.db import Database
from tests.test_app_fixtures import SimEngine, SimLMCache, put_text, rollup, vllm_exposition
from tests.test_db_reading import _exact

D0 = datetime(2026, 10, 31, tzinfo=UTC)  # the day before the month
M0 = datetime(2026, 11, 1, tzinfo=UTC)   # the month's first day
MONTH = "2026-11"
PER_HOUR = 10                            # requests per engine per hour


def at(h: float) -> datetime:
    """Scrapes at 20 past the hour: the pair ending at Nov 1 00:20 began the day before."""
    return D0 + timedelta(hours=h, minutes=20)


def _history(db: Database) -> None:
    """Hourly scrapes Oct 31 00:20 .. Nov 4 01:20 of one vLLM server (engines 0 and 1 from the
    start, engine 2 first seen at Nov 1 00:20 with its _created at Oct 31 23:30) and one LMCache
    server. On Nov 1: engine 0 restarts at 05:10 (scraped at 05:20), the prompt-token counter
    is missing at 10:20 (a gap), engine 1's prefix-cache hits go back at 08:20 (broken), the
    generation tokens are negative at 12:20 (an impossible sample), the vLLM scrape at 14:20
    fails."""
    created = (D0 - timedelta(hours=1)).timestamp()
    e = [SimEngine("m", "0", created), SimEngine("m", "1", created)]
    late = SimEngine("m", "2", (M0 - timedelta(minutes=30)).timestamp())
    cache = SimLMCache("m", "", created)
    for h in range(98):
        if h == 29:  # Nov 1 05:20: engine 0 restarted at 05:10
            e[0] = SimEngine("m", "0", (at(28) + timedelta(minutes=50)).timestamp())
        engines = e + ([late] if h >= 24 else [])
        if h:
            for x in engines:
                x.serve(PER_HOUR, device_hit=500, external_hit=100, ttft=0.05 + 0.01 * (h % 5))
            cache.lookup(PER_HOUR, 1500, 300)
        lines = vllm_exposition(engines).splitlines()
        if h == 34:
            lines = [x for x in lines if not x.startswith("vllm:prompt_tokens_total")]
        if h == 32:
            lines = [x.rsplit(" ", 1)[0] + " 1.0" if x.startswith('vllm:prefix_cache_hits_total{engine="1"')
                     else x for x in lines]
        if h == 38:
            store_failure(db, deployment="d", target="n1-vllm", kind="vllm", ts=at(h),
                          error="http://n1:8000/metrics: connection refused", source="scrape",
                          url="http://n1:8000/metrics")
        else:
            put_text(db, "d", "n1-vllm", at(h), "\n".join(lines) + "\n", url="http://n1:8000/metrics")
        put_text(db, "d", "n1-lmcache", at(h), cache.exposition(), url="http://n1:8090/metrics")
    with db.write() as con:  # what an older kvplan let in (the parser refuses it today)
        con.execute("UPDATE samples SET value = -5.0 WHERE ts = ? AND series_id IN (SELECT series_id FROM series "
                    "WHERE name = 'vllm:generation_tokens_total' AND engine = '0')", [at(36).replace(tzinfo=None)])


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    """(rolled up by today's code, rolled up as before migration 015: no first-day rows)."""
    base = tmp_path_factory.mktemp("edge")
    new = Database(base / "new.duckdb")
    new.migrate()
    _history(new)
    for day in range(4):
        rollup(new, "d", D0 + timedelta(days=day))
    shutil.copy(new.path, base / "old.duckdb")
    old = Database(base / "old.duckdb")
    with old.write() as con:
        for table in ("edge_rollups", "prefill_edge_rollups", "edge_rollup_days"):
            con.execute(f"DELETE FROM {table}")
    return new, old


def same(a: object, b: object, path: str = "") -> None:
    """a == b, but floats to 12 significant digits: DuckDB sums a group's doubles in an order
    of its choosing, so two raw reads of the same pairs can differ in the last bits (seen here)."""
    import math

    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), path
        for f in dataclasses.fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), path
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == b or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b)), \
            (path, a, b)
    else:
        assert a == b, (path, a, b)


def _fetches(db: Database) -> list[tuple[str, dict]]:
    seen: list[tuple[str, dict]] = []
    real = db.fetch

    def fetch(name, **kw):
        seen.append((name, kw))
        return real(name, **kw)

    db.fetch = fetch  # type: ignore[method-assign]
    return seen


def test_the_month_reads_its_first_day_stored_and_gets_the_raw_rows(dbs):
    from kvplan.app.data.prefill import prefill_intervals
    from kvplan.app.data.window import load_window_and_buckets

    new, old = dbs
    t_to = datetime(2026, 12, 1, tzinfo=UTC)
    with new.read() as con:
        assert con.execute("SELECT count(*) FROM edge_rollup_days").fetchone()[0] == 4
    seen = _fetches(new)
    w_new, b_new = load_window_and_buckets(new, "d", M0, t_to, 3600, buckets_from=M0, buckets_to=at(97))
    p_new = prefill_intervals(new, "d", M0, t_to)
    names = [n for n, _ in seen]
    assert "edge_rollup_rows" in names  # (prefill_edge_rollup_rows is read as Arrow, not through fetch)
    assert all(kw.get("t_after") != M0 for n, kw in seen if n in ("span_increases_and_buckets", "prefill_intervals"))
    seen = _fetches(old)
    w_old, b_old = load_window_and_buckets(old, "d", M0, t_to, 3600, buckets_from=M0, buckets_to=at(97))
    p_old = prefill_intervals(old, "d", M0, t_to)
    assert any(n == "span_increases_and_buckets" and kw["t_after"] == M0 for n, kw in seen)  # the fallback: raw
    assert any(n == "prefill_intervals" and kw["t_after"].replace(tzinfo=UTC) == M0 for n, kw in seen)
    assert w_new.spans == w_old.spans and w_new.source_note == w_old.source_note
    assert _exact(w_new.rows) == _exact(w_old.rows)  # (daily_increases orders rows by name, model, bound only)
    same(w_new.stats, w_old.stats)
    assert [(b.start, _exact(b.rows)) for b in b_new] == [(b.start, _exact(b.rows)) for b in b_old]
    same(p_new, p_old)
    def count(name: str, what: str) -> int:  # the first day's raw edge, the rolled days and the tail are rows each
        return sum(getattr(r, what) or 0 for r in w_new.rows if r.name == name)

    # by hand: 73 hourly intervals inside Nov 1 00:20 .. Nov 4 01:20, 10 requests each engine
    # (engine 0's restart counts from its _created at 05:10; the two intervals around the failed
    # 14:20 scrape are one pair of 20; engine 2's first 10, served since a _created the day before,
    # are not inside the month, nor the pairs ending at 00:20 of engines 0 and 1)
    assert sum(r.increase for r in w_new.rows if r.name == "vllm:request_success_total") == 3 * 73 * PER_HOUR
    assert count("vllm:prompt_tokens_total", "gaps") == 3  # each engine's series missed the 10:20 scrape
    assert count("vllm:prefix_cache_hits_total", "broken") >= 1
    assert any(n.startswith("warning: vllm:generation_tokens_total: 1 stored sample(s) not used")
               for n in w_new.stats.notes), w_new.stats.notes
    assert w_new.stats.notes == w_old.stats.notes
    # the day's rollup counts more: the pairs straddling Nov 1 00:00 and engine 2's first 10; the
    # stored first day (23 intervals of each engine) does not
    with new.read() as con:
        day = con.execute("SELECT sum(increase) FROM daily_rollups WHERE day = '2026-11-01' "
                          "AND name = 'vllm:request_success_total'").fetchone()[0]
        inside = con.execute("SELECT sum(increase) FROM edge_rollups WHERE day = '2026-11-01' AND part = 'window' "
                             "AND name = 'vllm:request_success_total'").fetchone()[0]
    assert (day, inside) == (3 * 24 * PER_HOUR, 3 * 23 * PER_HOUR)


def test_the_stored_first_day_is_what_the_month_reads(dbs, tmp_path):
    """Change the stored rows and the month's figures follow (they are read), the day's
    rollup of the same day is not what the month reads."""
    from kvplan.app.data.window import load_window_and_buckets

    new, _ = dbs
    shutil.copy(new.path, tmp_path / "x.duckdb")
    x = Database(tmp_path / "x.duckdb")
    t_to = datetime(2026, 12, 1, tzinfo=UTC)
    before = load_window_and_buckets(x, "d", M0, t_to, 3600)[0].stats.requests
    with x.write() as con:
        con.execute("UPDATE edge_rollups SET increase = increase + 7 WHERE part = 'window' "
                    "AND name = 'vllm:time_to_first_token_seconds_count' AND model_name = 'm'")
    after = load_window_and_buckets(x, "d", M0, t_to, 3600)[0].stats.requests
    assert after == before + 7
    from kvplan.app.data.prefill import prefill_intervals

    before = sum(iv.requests for iv in prefill_intervals(x, "d", M0, t_to))
    with x.write() as con:
        con.execute("UPDATE prefill_edge_rollups SET requests = requests + 1")
        n = con.execute("SELECT count(*) FROM prefill_edge_rollups WHERE day = '2026-11-01'").fetchone()[0]
    assert n > 0 and sum(iv.requests for iv in prefill_intervals(x, "d", M0, t_to)) == before + n


def test_the_report_is_the_same_from_stored_first_days_and_from_raw(dbs):
    from kvplan.app.report.data import build

    new, old = dbs
    a, b = build(new, "d", MONTH), build(old, "d", MONTH)
    assert a.overview.window.stats.requests == 3 * 73 * PER_HOUR
    assert a.overview.window.rolled_days >= 1
    same(a, b)
