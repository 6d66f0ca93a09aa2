"""The recorded gaps of a window, for the time charts (``kvplan.app.charts.Timeline``): runs of
failed scrapes per target and Prometheus ingestion gaps
(``data.collection.scrape_gaps`` / ``ingest_gaps``). Time buckets without data are found by the charts themselves."""

from __future__ import annotations

from datetime import datetime

from ..sql.db import Source
from .charts import Gap, Timeline
from .data.collection import ingest_gaps, scrape_gaps


def recorded_gaps(source: Source, deployment: str, t_from: datetime, t_to: datetime) -> tuple[Gap, ...]:
    """``source``: a ``Database`` or a ``Snapshot``."""
    return gaps_of(scrape_gaps(source, deployment, t_from, t_to), ingest_gaps(source, deployment, t_from, t_to))


def gaps_of(scrapes: list[dict], ingests: list[dict]) -> tuple[Gap, ...]:
    """The gaps of the rows of ``scrape_gaps`` and ``ingest_gaps``, in time order."""
    out = [Gap(r["t_from"], r["t_to"], f"{r['target']}: {r['failed']} failed scrape(s) ({_short(r['error'])})")
           for r in scrapes]
    out += [Gap(r["t_from"], r["t_to"], f"{r['target'] or 'whole deployment'}: {r['reason']}") for r in ingests]
    return tuple(sorted(out, key=lambda g: g.t_from))


def _short(error: str | None, limit: int = 90) -> str:
    e = " ".join((error or "no error recorded").split())
    return e if len(e) <= limit else e[: limit - 1] + "…"


def timeline(source: Source, deployment: str, t_from: datetime, t_to: datetime, step_s: int,
             tz: str = "UTC") -> Timeline:
    """How the time charts of a window are drawn: zone, bucket width, recorded gaps."""
    return timeline_of(t_from, t_to, step_s, scrape_gaps(source, deployment, t_from, t_to),
                       ingest_gaps(source, deployment, t_from, t_to), tz)


def timeline_of(t_from: datetime, t_to: datetime, step_s: int, scrapes: list[dict], ingests: list[dict],
                tz: str = "UTC") -> Timeline:
    """``timeline`` of the gap rows already read."""
    return Timeline(tz=tz, step_s=step_s, t_from=t_from, t_to=t_to, gaps=gaps_of(scrapes, ingests))
