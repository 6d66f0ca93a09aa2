"""One time module: aware UTC inside, offsets converted (never relabelled), DuckDB's zone-less
TIMESTAMP at the border."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from kvplan.models.core.errors import KvplanError
from kvplan.models.core.timeutil import (
    aware_utc,
    ceil_day,
    day_start,
    floor_day,
    month_start,
    naive_utc,
    next_month,
    parse_time,
)
from kvplan.sql.db import Database


@pytest.mark.parametrize("text, want", [
    ("2026-11-01T00:00+02:00", datetime(2026, 10, 31, 22, 0, tzinfo=UTC)),   # the ingest --from bug
    ("2026-11-01T00:00:00Z", datetime(2026, 11, 1, tzinfo=UTC)),
    ("2026-11-01T00:00", datetime(2026, 11, 1, tzinfo=UTC)),                 # no zone: UTC
    ("2026-11-01T05:30-05:00", datetime(2026, 11, 1, 10, 30, tzinfo=UTC)),
    (" 2026-03-29T03:30+02:00 ", datetime(2026, 3, 29, 1, 30, tzinfo=UTC)),  # just after the EU spring-forward
])
def test_parse_time_converts_offsets_to_utc(text, want):
    got = parse_time(text, "--from")
    assert got == want and got.utcoffset() == timedelta(0)


def test_parse_time_names_the_input():
    with pytest.raises(KvplanError, match=r"--at: 'yesterday' is not an ISO 8601 time"):
        parse_time("yesterday", "--at")


def test_dst_edges_convert_by_instant_not_by_wall_clock():
    madrid = ZoneInfo("Europe/Madrid")
    # 2026-10-25 03:00 CEST -> 02:00 CET: the wall-clock 02:30 happens twice, an hour apart
    first = datetime(2026, 10, 25, 2, 30, tzinfo=madrid, fold=0)
    second = datetime(2026, 10, 25, 2, 30, tzinfo=madrid, fold=1)
    assert aware_utc(second) - aware_utc(first) == timedelta(hours=1)
    assert naive_utc(first) == datetime(2026, 10, 25, 0, 30) and naive_utc(second) == datetime(2026, 10, 25, 1, 30)
    # a day in Madrid that has 25 hours is still cut at UTC midnights
    assert floor_day(second) == datetime(2026, 10, 25, tzinfo=UTC)
    assert ceil_day(datetime(2026, 10, 25, 23, 30, tzinfo=madrid)) == datetime(2026, 10, 26, tzinfo=UTC)


def test_day_and_month_helpers():
    assert ceil_day(datetime(2026, 11, 2, tzinfo=UTC)) == datetime(2026, 11, 2, tzinfo=UTC)
    assert day_start(date(2026, 11, 2)) == datetime(2026, 11, 2, tzinfo=UTC)
    assert next_month(month_start("2026-12")) == datetime(2027, 1, 1, tzinfo=UTC)
    with pytest.raises(KvplanError, match="--month: '2026/12' is not a month like 2026-11"):
        month_start("2026/12", "--month")


def test_an_aware_time_with_an_offset_reads_the_same_rows_as_its_utc_instant(tmp_path):
    """kvplan.sql.db converts aware parameters to naive UTC: a gap stored at 22:00 UTC is found by a
    window given as 00:00+02:00 (before, the offset was dropped and the window read 2 h off)."""
    db = Database(tmp_path / "k.duckdb")
    db.migrate()
    with db.write() as con:
        con.execute("INSERT INTO deployments (name) VALUES ('d')")
        con.execute("INSERT INTO gaps (deployment_id, target, t_from, t_to, reason, source) "
                    "VALUES (1, 't', '2026-10-31 22:00', '2026-10-31 22:30', 'down', 'prometheus')")
    t0, t1 = parse_time("2026-11-01T00:00+02:00", "--from"), parse_time("2026-11-01T00:45+02:00", "--to")
    gaps = db.fetch("ingest_gaps", deployment="d", t_from=t0, t_to=t1)
    assert [(g["t_from"], g["reason"]) for g in gaps] == [(datetime(2026, 10, 31, 22, 0), "down")]
    # the same window read as wall-clock UTC (the old bug) finds nothing
    assert db.fetch("ingest_gaps", deployment="d", t_from=t0.replace(tzinfo=None) + timedelta(hours=2),
                    t_to=t1.replace(tzinfo=None) + timedelta(hours=2)) == []
