"""Everything the capacity report shows, gathered once from the same ``app.service`` views
the dashboard pages render (so a number reads the same in both)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app import service
from sql.db import Database, queries

QUERIES_USED = ("dashboard_deployments", "dashboard_rolled_days", "span_increases", "daily_increases",
                "span_buckets", "daily_series", "span_gauges", "daily_gauges", "dashboard_engines",
                "dashboard_topology", "get_pricebook", "run_summaries", "run_cache_shares",
                "scrape_count_in_window", "failed_scrapes_in_window", "recent_failed_scrapes", "ingest_ledger",
                "ingest_gaps", "collector_runs", "targets")
"""Named queries (sql/queries/*.sql) the report's numbers come from, listed in its provenance."""


@dataclass(frozen=True)
class ReportData:
    deployment: str
    month: str
    model: str | None
    t_from: datetime
    t_to: datetime
    overview: service.Overview
    cache: service.CacheView
    latency: service.LatencyView
    runs: service.RunsView
    topology: service.Topology
    collection: service.CollectionView
    scrape_counts: list[dict]
    ledger: list[dict]
    measured_on: str | None
    """What served the metrics (hardware, model), as given; None: not recorded."""

    @property
    def cpu_scale(self) -> bool:
        texts = [self.measured_on or ""] + [r["measured_on"] or "" for r in self.runs.runs]
        return any("cpu" in t.lower() for t in texts)

    def queries_used(self) -> list[tuple[str, str, str]]:
        """(name, file, docstring) of every named query the report read."""
        qs = queries()
        return [(n, qs[n].file, qs[n].doc) for n in QUERIES_USED if n in qs]


def measured_on_default(runs: service.RunsView) -> str | None:
    """The runs' ``measured_on`` when they all agree (the pilot ran on the deployment's own
    hardware), else None."""
    values = {r["measured_on"] for r in runs.runs}
    return values.pop() if len(values) == 1 else None


def build(db: Database, deployment: str, month: str, *, model: str | None = None,
          measured_on: str | None = None) -> ReportData:
    """The report's data for one deployment and UTC month ('YYYY-MM'): the window is the
    month clipped to the data inside it. ``ValueError`` when the month holds no data."""
    t_from, t_to = service.month_window(db, deployment, month)
    step = max(600, int((t_to - t_from).total_seconds() // 60))
    win = service.load_window(db, deployment, t_from, t_to, model)
    if not win.rows:
        raise ValueError(f"deployment {deployment!r} has no counter increase in {month}: "
                         + "; ".join(win.stats.notes or ["no data"]) + "; no report written")
    buckets = service.window_buckets(db, deployment, t_from, t_to, step, model)
    ov = service.overview(db, deployment, t_from, t_to, model, win=win)
    runs = service.runs_view(db, deployment)
    ledger = db.fetch("ingest_ledger", deployment=deployment, t_from=service.utc_naive(t_from),
                      t_to=service.utc_naive(t_to)) if "ingest_ledger" in queries() else []
    return ReportData(
        deployment=deployment, month=month, model=model, t_from=t_from, t_to=t_to, overview=ov,
        cache=service.cache_view(db, deployment, t_from, t_to, step, model, win=win, buckets=buckets),
        latency=service.latency_view(db, deployment, t_from, t_to, step, model,
                                     slo_s=ov.plan.inputs.planning.ttft_p99_slo_seconds, win=win, buckets=buckets),
        runs=runs, topology=service.topology(db, deployment, t_from, t_to),
        collection=service.collection_view(db, deployment, t_from, t_to),
        scrape_counts=db.fetch("scrape_count_in_window", deployment=deployment,
                               t_from=service.utc_naive(t_from), t_to=service.utc_naive(t_to)),
        ledger=ledger, measured_on=measured_on or measured_on_default(runs))
