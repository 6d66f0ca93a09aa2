"""What the collectors recorded about themselves: targets and their scrapes, failed scrapes and
Prometheus ingestion gaps, the daemon's and the nightly job's runs, the serving topology's rows,
and the per-target scrape counts and ingestion ledger the report's provenance lists."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ...models.core.timeutil import DAY, ceil_day, floor_day
from ...sql.db import Source


@dataclass(frozen=True)
class CollectionRows:
    targets: list[dict]
    """Targets with last scrape, scrape and error counts, last error."""
    recent_errors: list[dict]
    """Latest failed scrapes (20)."""
    failed_scrapes: list[dict]
    """Failed scrapes inside the window (gaps of direct scraping)."""
    scheduler_runs: list[dict]
    """The collector daemon's runs of this deployment or of all (50 newest)."""
    gaps: list[dict]
    """Prometheus ingestion gaps in the window."""
    nightly: list[dict]
    """Nightly runs per day."""
    rolled_days: int
    """Days of the window the nightly rollups cover."""


def collection_rows(source: Source, deployment: str, t_from: datetime, t_to: datetime) -> CollectionRows:
    days = source.fetch("dashboard_rolled_days", deployment=deployment, d_from=floor_day(t_from),
                        d_to=ceil_day(t_to) + DAY)
    runs = [r for r in source.fetch("collector_runs", limit=200) if r["deployment"] in (deployment, None)][:50]
    return CollectionRows(
        targets=source.fetch("targets", deployment=deployment),
        recent_errors=source.fetch("recent_failed_scrapes", deployment=deployment, limit=20),
        failed_scrapes=source.fetch("failed_scrapes_in_window", deployment=deployment, t_from=t_from, t_to=t_to),
        scheduler_runs=runs,
        gaps=ingest_gaps(source, deployment, t_from, t_to),
        nightly=source.fetch("nightly_days"),
        rolled_days=len(days))


def topology_rows(source: Source, deployment: str, t_from: datetime, t_to: datetime) -> list[dict]:
    """One row per target seen in the window: its URL, role and engine labels."""
    return source.fetch("dashboard_topology", deployment=deployment, t_from=t_from, t_to=t_to)


def scrape_gaps(source: Source, deployment: str, t_from: datetime, t_to: datetime) -> list[dict]:
    """Runs of failed scrapes per target (``t_from``, ``t_to``, ``target``, ``failed``, ``error``)."""
    return source.fetch("scrape_gaps", deployment=deployment, t_from=t_from, t_to=t_to)


def ingest_gaps(source: Source, deployment: str, t_from: datetime, t_to: datetime) -> list[dict]:
    """Prometheus ingestion gaps (``t_from``, ``t_to``, ``target``, ``reason``)."""
    return source.fetch("ingest_gaps", deployment=deployment, t_from=t_from, t_to=t_to)


def recent_scrapes(source: Source, deployment: str, limit: int = 50) -> list[dict]:
    """The newest scrapes of the deployment (``target``, ``ok``, ``error``), newest first."""
    return source.fetch("scrape_log", deployment=deployment, limit=limit)


@dataclass(frozen=True)
class Provenance:
    scrape_counts: list[dict]
    """Scrapes per target in the window, ok and failed."""
    ledger: list[dict]
    """The Prometheus ingestion chunks that cover the window."""


def provenance(source: Source, deployment: str, t_from: datetime, t_to: datetime) -> Provenance:
    return Provenance(
        scrape_counts=source.fetch("scrape_count_in_window", deployment=deployment, t_from=t_from, t_to=t_to),
        ledger=source.fetch("ingest_ledger", deployment=deployment, t_from=t_from, t_to=t_to))
