"""One time module: every instant inside kvplan is an aware UTC ``datetime``.

DuckDB ``TIMESTAMP`` columns hold UTC without a zone; ``naive_utc`` converts at that border
and ``aware_utc`` reads back. User input with an offset is converted, never relabelled; input
without a zone is UTC.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta

from .errors import KvplanError

UTC = UTC
DAY = timedelta(days=1)


def aware_utc(ts: datetime) -> datetime:
    """The same instant as an aware UTC time (a naive time is taken as UTC)."""
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def naive_utc(ts: datetime) -> datetime:
    """The same instant as naive UTC, for DuckDB ``TIMESTAMP`` columns."""
    return aware_utc(ts).replace(tzinfo=None)


def utcnow() -> datetime:
    return datetime.now(UTC)


def from_epoch_s(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def from_epoch_ms(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def parse_time(value: str, what: str) -> datetime:
    """ISO 8601 (``Z`` or an offset; no zone means UTC) as aware UTC. ``what`` names the input."""
    try:
        ts = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise KvplanError(f"{value!r} is not an ISO 8601 time (e.g. 2026-11-30T10:00:00Z)", source=what) from None
    return aware_utc(ts)


def floor_day(ts: datetime) -> datetime:
    """Midnight UTC at or before ``ts`` (aware)."""
    ts = aware_utc(ts)
    return ts.replace(hour=0, minute=0, second=0, microsecond=0)


def ceil_day(ts: datetime) -> datetime:
    """Midnight UTC at or after ``ts`` (aware)."""
    f = floor_day(ts)
    return f if f == aware_utc(ts) else f + DAY


def day_start(d: date) -> datetime:
    """Midnight UTC that starts the UTC day ``d`` (aware)."""
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def month_start(month: str, what: str = "month") -> datetime:
    """``YYYY-MM`` as the aware UTC instant that starts it."""
    try:
        m = datetime.strptime(month, "%Y-%m")
    except ValueError:
        raise KvplanError(f"{month!r} is not a month like 2026-11", source=what) from None
    if not 2000 <= m.year <= 2100:  # 9999-12 has no next month a datetime can hold
        raise KvplanError(f"{month!r} is not a month from 2000-01 to 2100-12", source=what)
    return m.replace(tzinfo=UTC)


def next_month(m: datetime) -> datetime:
    """The first instant of the month after the one ``m`` starts."""
    return m.replace(year=m.year + (m.month == 12), month=m.month % 12 + 1, day=1)


def duration(seconds: float) -> str:
    """A length in seconds, rounded DOWN so it never reads as meeting a bound it misses: "51 s"
    (under 2 min), "30.5 min" (tenths, under 2 h), "2.3 h" (tenths)."""
    if seconds < 120:
        return f"{math.floor(seconds):.0f} s"
    if seconds < 7200:
        return f"{math.floor(seconds / 6) / 10:g} min"
    return f"{math.floor(seconds / 360) / 10:g} h"
