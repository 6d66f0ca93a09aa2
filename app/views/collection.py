"""Collection page (targets, errors, daemon runs, gaps) and the topology of a deployment."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ...models.core.timeutil import DAY, ceil_day, floor_day
from ...models.metrics.serving import ServingTopology, serving_topology
from ...sql.db import Source


@dataclass(frozen=True)
class CollectionView:
    targets: list[dict]
    """Targets with last scrape, scrape and error counts, last error."""
    recent_errors: list[dict]
    """Latest failed scrapes."""
    failed_scrapes: list[dict]
    """Failed scrapes inside the window (gaps of direct scraping)."""
    scheduler_runs: list[dict]
    """Collector daemon runs."""
    gaps: list[dict]
    """Prometheus ingestion gaps in the window."""
    nightly: list[dict]
    """Nightly runs per day."""
    rolled_days: int
    """Days of the window the nightly rollups cover."""


def collection_view(source: Source, deployment: str, t_from: datetime, t_to: datetime) -> CollectionView:
    days = source.fetch("dashboard_rolled_days", deployment=deployment, d_from=floor_day(t_from),
                        d_to=ceil_day(t_to) + DAY)
    runs = [r for r in source.fetch("collector_runs", limit=200) if r["deployment"] in (deployment, None)][:50]
    return CollectionView(
        targets=source.fetch("targets", deployment=deployment),
        recent_errors=source.fetch("recent_failed_scrapes", deployment=deployment, limit=20),
        failed_scrapes=source.fetch("failed_scrapes_in_window", deployment=deployment, t_from=t_from, t_to=t_to),
        scheduler_runs=runs,
        gaps=source.fetch("ingest_gaps", deployment=deployment, t_from=t_from, t_to=t_to),
        nightly=source.fetch("nightly_days"),
        rolled_days=len(days))


def topology_view(source: Source, deployment: str, t_from: datetime, t_to: datetime) -> ServingTopology:
    """Servers and engines per node (host of the target URL), shared or private caches."""
    return serving_topology(source.fetch("dashboard_topology", deployment=deployment, t_from=t_from, t_to=t_to))
