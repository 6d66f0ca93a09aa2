"""How a long window is read: whole UTC days from the nightly rollups, the edges raw.

A 90-day view then costs about what a 2-day one does. ``plan_spans`` decides the split; the
reader (``kvplan.app.data.window``) runs the queries. All times are aware UTC (``kvplan.models.core.timeutil``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from ..core.timeutil import DAY, aware_utc, ceil_day, day_start, floor_day

EDGE_LOOKBACK = DAY
"""How far before its day's start a rolled-up day looks for each series' earlier sample (the
nightly rollup, ``kvplan.collectors.schedule.scheduler.rollup_day``, reads with it), and so: how
far after the window start a rolled-up run may begin at the earliest, and how far before the
run's end the raw tail looks. Every pair a rolled day counts then has its earlier point (a
sample, or a series' ``_created`` zero) inside the window, and a rollup-backed window counts
exactly the pairs a raw one does, but for pairs longer than this (a target silent for a day)."""
DAILY_POINTS_FROM = timedelta(days=3)
"""Charts over windows at least this long have one point per UTC day (from the rollups)."""


def as_instant(d: date | datetime) -> datetime:
    """A date (its UTC midnight) or a datetime (naive = UTC, as DuckDB returns it) as aware UTC."""
    return aware_utc(d) if isinstance(d, datetime) else day_start(d)


def longest_run(days: Sequence[date | datetime], lo: datetime, hi: datetime) -> tuple[datetime, datetime] | None:
    """The longest run of consecutive days in [lo, hi) as [start, end), or None."""
    best: tuple[datetime, datetime] | None = None
    prev: datetime | None = None
    start = lo  # set by the first day in range (prev is None then)
    for d in sorted(as_instant(x) for x in days):
        if not lo <= d < hi:
            continue
        if prev is None or d != prev + DAY:
            start = d
        prev = d
        if best is None or (d + DAY - start) > (best[1] - best[0]):
            best = (start, d + DAY)
    return best


@dataclass(frozen=True)
class Spans:
    """How one window is read: ``rolled`` = whole days [start, end) from rollups, ``raw`` =
    (t_lookback, t_after, t_to) spans from raw samples (pairs whose later sample lies in
    (t_after, t_to] and earlier one at or after t_lookback)."""

    rolled: tuple[datetime, datetime] | None
    """Whole UTC days [start, end) read from the nightly rollups; None when the window holds none."""
    raw: tuple[tuple[datetime, datetime, datetime], ...]
    """(t_lookback, t_after, t_to) spans read from raw samples: the edges around the rolled days,
    or the whole window."""

    @property
    def rolled_days(self) -> int:
        return 0 if self.rolled is None else (self.rolled[1] - self.rolled[0]).days


def plan_spans(rolled_days: Sequence[date | datetime], t_from: datetime, t_to: datetime) -> Spans:
    """Split [t_from, t_to] into raw edges and the longest run of rolled-up days.

    A rolled day counts the pairs straddling its start (earlier point up to ``EDGE_LOOKBACK``
    before it: the evening's last scrape, or a series' ``_created`` the day before); the window
    counts only pairs whose both points lie inside it. So the run starts at least
    ``EDGE_LOOKBACK`` after ``t_from``: every straddling pair's earlier point is then inside
    the window."""
    t_from, t_to = aware_utc(t_from), aware_utc(t_to)
    run = longest_run(rolled_days, ceil_day(t_from + EDGE_LOOKBACK), floor_day(t_to))
    if run is None:
        return Spans(None, ((t_from, t_from, t_to),))
    a, b = run
    raw = []
    if a > t_from:
        raw.append((t_from, t_from, a))
    if t_to > b:
        raw.append((max(t_from, b - EDGE_LOOKBACK), b, t_to))
    return Spans(run, tuple(raw))


def chart_step(t_from: datetime, t_to: datetime, step_s: int) -> int:
    """The chart resolution: one point per day over long windows, else ``step_s``."""
    return 86400 if aware_utc(t_to) - aware_utc(t_from) >= DAILY_POINTS_FROM else int(step_s)
