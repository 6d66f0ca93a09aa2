"""Everything the capacity report shows, gathered once from the same ``kvplan.app.views`` the
dashboard pages render (so a number reads the same in both)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ...models.metrics.runs import is_cpu_scale
from ...models.metrics.serving import ServingTopology, serving_topology
from ...models.metrics.spans import chart_step
from ...sql.db import Database, queries
from ..charts import Timeline
from ..data.month import load_month
from ..data.plan import plan_of
from ..data.store import DeploymentSettings
from ..data.sweeps import SweepView, sweep_view_of
from ..gaps import timeline_of
from ..views.cache import CacheView, cache_of
from ..views.collection import CollectionView, collection_of
from ..views.latency import LatencyView, latency_of
from ..views.overview import Overview, overview_of
from ..views.runs import RunsView
from ..views.whatif import WhatIf, whatif_of

QUERIES_USED = ("dashboard_deployments", "dashboard_rolled_days", "span_has_points", "span_increases",
                "span_increases_and_buckets", "edge_day_stored", "edge_rollup_rows", "daily_increases",
                "span_buckets", "daily_series", "span_gauges", "daily_gauges", "dashboard_engines",
                "dashboard_topology", "get_pricebook", "run_summaries", "run_cache_shares", "scrape_count_in_window",
                "failed_scrapes_in_window", "recent_failed_scrapes", "ingest_ledger", "ingest_gaps", "scrape_gaps",
                "collector_runs", "targets", "prefill_intervals", "prefill_edge_rollup_rows", "measured_ab_pairs",
                "get_facts", "latest_sweep_pair", "sweep_points")
"""Named queries (sql/queries/*.sql) the report's numbers come from, listed in its provenance."""


@dataclass(frozen=True)
class ReportData:
    deployment: str
    month: str
    model_name: str | None
    t_from: datetime
    t_to: datetime
    """The whole UTC month (every figure reads it, as ``kvplan stats``/``plan`` over the month do)."""
    overview: Overview
    cache: CacheView
    latency: LatencyView
    runs: RunsView
    topology: ServingTopology
    collection: CollectionView
    scrape_counts: list[dict]
    ledger: list[dict]
    measured_on: str | None
    """What served the metrics (hardware, model), as given; None: not recorded."""
    timeline: Timeline = Timeline()
    """How the report's time charts are drawn (UTC, the bucket width, the recorded gaps)."""
    whatif: WhatIf | None = None
    """Section 8's what-if of the month (``views.whatif.month_whatif``: the page's for the same month);
    None when no trace has a request in the month (``whatif_html`` says why)."""
    whatif_html: str = ""
    prompts_html: str = ""
    """Section 9, a request log's prompts check (``kvplan report --prompts-check FILE``), or empty."""
    sweep: SweepView | None = None
    """The deployment's latest load sweep at the planning SLOs (sizing by goodput), if any."""
    data_from: datetime | None = None
    data_to: datetime | None = None
    """The first and last data point inside the month (the time charts span them); None: the month."""

    @property
    def cpu_scale(self) -> bool:
        return any(is_cpu_scale(t) for t in [self.measured_on] + [r["measured_on"] for r in self.runs.runs])

    def queries_used(self) -> list[tuple[str, str, str]]:
        """(name, file, docstring) of every named query the report read."""
        qs = queries()
        return [(n, qs[n].file, qs[n].doc) for n in QUERIES_USED if n in qs]


def measured_on_default(runs: RunsView) -> str | None:
    """The runs' ``measured_on`` when they all agree (the pilot ran on the deployment's own
    hardware), else None."""
    values = {r["measured_on"] for r in runs.runs}
    return values.pop() if len(values) == 1 else None


def build(db: Database, deployment: str, month: str, *, model_name: str | None = None,
          measured_on: str | None = None, cfg: DeploymentSettings = DeploymentSettings(),
          prompts_check: dict | None = None) -> ReportData:
    """The report's data for one deployment and UTC month ('YYYY-MM'): every figure reads the
    whole UTC month, as ``kvplan stats``/``plan`` and the Overview over that month do (a series
    born inside the month counts what it added since its ``_created``, before the first scrape
    too); the time charts span the data inside it (its first to its last data point). Read once,
    through one connection (``app.data.month.load_month``: every section sees the same data, the
    history read and its cost model fitted once), then every section computed from what was read
    by the same functions the pages call after their own reads. ``KvplanError`` when the month
    holds no data."""
    from .whatif import no_trace_section
    from .whatif import render_section as render_whatif

    prompts_html = ""
    if prompts_check is not None:
        from .prompts import render_section
        prompts_html = render_section(prompts_check)
    with db.snapshot() as src:
        m = load_month(src, deployment, month, model_name=model_name, cfg=cfg)
    ov = overview_of(m.window, plan_of(m.window, m.history, m.plan), [])
    wi: WhatIf | None = None
    if m.whatif is not None:
        wi = whatif_of(deployment, m.whatif_query, m.whatif)
        whatif_html = render_whatif(wi)
    else:
        whatif_html = no_trace_section(m.no_trace or "no trace")
    planning = ov.plan.inputs.planning
    d_from, d_to, step = m.data_from, m.data_to, m.step_s
    return ReportData(
        deployment=deployment, month=month, model_name=model_name, t_from=m.t_from, t_to=m.t_to, overview=ov,
        cache=cache_of(m.window, m.buckets, m.gauges, m.runs.runs, d_from, d_to, step),
        latency=latency_of(m.window, m.buckets, planning.ttft_p99_slo_seconds, planning.tpot_p99_slo_seconds,
                           d_from, d_to, step),
        runs=m.runs, topology=serving_topology(m.topology_rows), collection=collection_of(m.collection),
        scrape_counts=m.provenance.scrape_counts, ledger=m.provenance.ledger,
        measured_on=measured_on or measured_on_default(m.runs), whatif=wi, whatif_html=whatif_html,
        prompts_html=prompts_html,
        sweep=sweep_view_of(ov.sweep, planning.ttft_p99_slo_seconds, planning.tpot_p99_slo_seconds),
        timeline=timeline_of(d_from, d_to, chart_step(d_from, d_to, step), m.scrape_gaps, m.ingest_gaps),
        data_from=d_from, data_to=d_to)
