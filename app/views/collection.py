"""Collection page (targets, errors, daemon runs, gaps) and the topology of a deployment."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ...models.metrics.serving import ServingTopology, serving_topology
from ...sql.db import Source
from ..data.collection import CollectionRows, collection_rows, topology_rows


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
    return collection_of(collection_rows(source, deployment, t_from, t_to))


def collection_of(r: CollectionRows) -> CollectionView:
    """The Collection page of its rows: no read here."""
    return CollectionView(targets=r.targets, recent_errors=r.recent_errors, failed_scrapes=r.failed_scrapes,
                          scheduler_runs=r.scheduler_runs, gaps=r.gaps, nightly=r.nightly, rolled_days=r.rolled_days)


def topology_view(source: Source, deployment: str, t_from: datetime, t_to: datetime) -> ServingTopology:
    """Servers and engines per node (host of the target URL), shared or private caches."""
    return serving_topology(topology_rows(source, deployment, t_from, t_to))
