"""Everything the capacity report of one deployment and UTC month reads, in one pass.

``load_month`` reads through one source (a ``Snapshot``: every read sees the same data) and
visits each data module once, in this order, so what one module needs from another was read
before it is asked for:

1. ``store``: the data inside the month, the deployment facts and price book, the first data
   point (the growth trend starts there);
2. ``traces`` (and ``collectors.traces``): the month's trace and its requests (``whatif``'s
   choice: the newest with a request in the month), unless there is none;
3. ``window``: the month's increases, its chart buckets and gauge points, the engines and the
   busiest engine's concurrency, the daily requests of the growth trend, and the trace's span;
4. ``sweeps``: the newest load-sweep pair;
5. ``prefill``: the history's prefill intervals (the look-back ending at the month's end, or the
   month when longer), the latest measured A/B, the month's and the trace span's intervals;
6. ``latency`` (with a trace): the history's latency intervals (the TTFT overheads), LMCache's
   L1 sizes and the month's TTFT histogram;
7. ``runs`` and ``collection``: the workload runs, the scrape counts and ingestion ledger, the
   targets and collector runs, the serving topology's rows, the recorded gaps.

It returns a frozen ``Month``: the history fitted once (``History``), the plan's and the
what-if's inputs (``PlanReads``, ``WhatIfInputs``) as ``plan_window`` and ``whatif`` read them
for the same month, and the rows of the other sections. ``kvplan.app.report.data`` computes
every section from it without another read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import cast

from ...collectors.traces.parse import TraceError
from ...models.cache.latency import calibrate
from ...models.core.errors import KvplanError
from ...models.core.timeutil import aware_utc, from_epoch_s, month_start, next_month
from ...models.prefill.fit import fit_prefill_cost
from ...models.prefill.savings import estimate_savings
from ...models.prefill.table import IntervalTable
from ...sql.db import Database, Snapshot
from . import collection, latency, prefill, runs, store, sweeps, traces, window
from .collection import CollectionRows, Provenance
from .history import History
from .plan import PlanReads, window_measurement_of
from .runs import RunsView
from .store import DeploymentSettings
from .whatif import TopologyReads, WhatIfInputs, WhatIfQuery
from .window import TimeBucket, Window


@dataclass(frozen=True)
class Month:
    """What the report of one deployment and month reads (module doc)."""

    deployment: str
    month: str
    model_name: str | None
    t_from: datetime
    t_to: datetime
    """The whole UTC month."""
    data_from: datetime
    data_to: datetime
    """The first and last data point inside it."""
    step_s: int
    """The time charts' bucket width."""
    window: Window
    buckets: list[TimeBucket]
    gauges: list[dict]
    history: History
    plan: PlanReads
    whatif: WhatIfInputs | None
    whatif_query: WhatIfQuery
    no_trace: str | None
    """Why the month has no what-if (no trace with a request in it), else None."""
    runs: RunsView
    provenance: Provenance
    collection: CollectionRows
    topology_rows: list[dict]
    scrape_gaps: list[dict]
    ingest_gaps: list[dict]


def load_month(source: Database | Snapshot, deployment: str, month: str, *, model_name: str | None = None,
               cfg: DeploymentSettings = DeploymentSettings()) -> Month:
    """The month's reads (module doc). ``KvplanError`` when the month holds no counter increase."""
    t_from = month_start(month, "--month")
    t_to = next_month(t_from)
    # 1. store
    d_from, d_to = store.month_window(source, deployment, month)
    facts = store.load_facts(source, deployment, cfg)
    prices = store.load_pricebook(source, deployment, cfg.prices)
    first_ts = next((d["first_ts"] for d in store.deployments_with_data(source) if d["deployment"] == deployment),
                    None)
    # 2. traces: the month's, with its requests in the month (whatif_inputs' reading)
    q = WhatIfQuery.month(month)
    no_trace: str | None = None
    trace = None
    try:
        q = WhatIfQuery(trace=traces.month_trace(traces.traces_of(source, deployment), deployment, month),
                        t_from=q.t_from, t_to=q.t_to)
        tr, info, notes = traces.load_trace_window(source, deployment, q.trace, q.model_name, q.t_from, q.t_to)
        t0, t1 = traces.trace_times(tr) or traces.trace_span(source, info.trace_id)
        span = traces.topology_span(tr, q.t_from, q.t_to)
        trace = (tr, info, notes, t0, t1, traces.unix_span(t0, t1))
    except TraceError as e:
        no_trace = e.message
    # 3. window
    step = max(600, int((d_to - d_from).total_seconds() // 60))
    win, buckets = window.load_window_and_buckets(source, deployment, t_from, t_to, step, model_name,
                                                  buckets_from=d_from, buckets_to=d_to)
    if not win.rows:
        raise KvplanError(f"deployment {deployment!r} has no counter increase in {month}: "
                          + "; ".join(win.stats.notes or ["no data"]) + "; no report written", source="--month")
    gauges = window.gauge_points(source, deployment, d_from, d_to, step, model_name)
    engines = window.engines_in_window(source, deployment, t_from, t_to)
    running = window.peak_running_per_engine(source, deployment, t_from, t_to, model_name)
    daily = None
    if prices.planning.growth_source == "measured_trend" and first_ts is not None:
        daily = window.daily_requests(source, deployment, first_ts, t_to, model_name)
    win_all = win if model_name is None else window.load_window(source, deployment, t_from, t_to)
    dollars_win = None
    measured = window.measured_of(win_all, engines)
    if trace is not None and trace[5]:
        a, b = from_epoch_s(trace[3]), from_epoch_s(trace[4])
        dollars_win = (window.load_window(source, deployment, a, b), window.engines_in_window(source, deployment, a, b))
    # 4. sweeps
    pair = sweeps.latest_sweep_pair(source, deployment)
    # 5. prefill: the history (load_history's reading), the month's and the trace span's intervals
    h_from, h_to = min(aware_utc(t_from), aware_utc(t_to) - prefill.DEFAULT_LOOKBACK), aware_utc(t_to)
    chunk = facts.facts.lmcache_chunk_tokens
    table = prefill.prefill_table(source, deployment, h_from, h_to, model_name, chunk_tokens=chunk)
    cost = fit_prefill_cost(table, history=prefill.describe_history(deployment, table, h_from, h_to))
    ab = prefill.measured_ab(source, deployment)
    history = History(deployment, model_name, h_from, h_to, table, cost, None, prices, facts, ab, cfg)
    month_table = table if (h_from, h_to) == (aware_utc(t_from), aware_utc(t_to)) else prefill.prefill_table(
        source, deployment, t_from, t_to, model_name, chunk_tokens=chunk)
    dollars_table: IntervalTable | None = None
    if dollars_win is not None:
        w = dollars_win[0]
        dollars_table = table if (h_from, h_to) == (aware_utc(w.t_from), aware_utc(w.t_to)) else prefill.prefill_table(
            source, deployment, w.t_from, w.t_to, model_name, chunk_tokens=chunk)
    # 6. latency: the overheads on the history's span, the TTFT half's reads over the month
    wi: WhatIfInputs | None = None
    if trace is not None:
        lat_rows = latency.latency_intervals(source, deployment, h_from, h_to, model_name,
                                             prefill=tuple(table.intervals()))
        history = replace(history, overheads=calibrate(lat_rows))
        span = cast(tuple[datetime, datetime], span)
        ttft = latency.ttft_intervals(source, deployment, *span) if history.latency is not None else []
        reads = TopologyReads(measured, latency.l1_capacity_bytes(source, deployment, *span),
                              ttft)
        spt = None  # whatif.seconds_per_token_from_metrics, from what was read
        if dollars_win is not None and dollars_table is not None:
            try:
                m, _ = window_measurement_of(dollars_win[0], history, dollars_win[1], dollars_table)
                spt = estimate_savings(m).gpu_seconds_per_token
            except (KvplanError, ValueError):  # no metrics for that span: the what-if still runs without dollars
                spt = None
        wi = WhatIfInputs(trace[0], trace[1], tuple(trace[2]), trace[3], trace[4], history, prices, cfg, spt, reads)
    # 7. runs, collection
    run_rows = runs.runs_view(source, deployment)
    prov = collection.provenance(source, deployment, t_from, t_to)
    rows = collection.collection_rows(source, deployment, t_from, t_to)
    topo = collection.topology_rows(source, deployment, t_from, t_to)
    chart_from, chart_to = d_from, d_to
    sg = collection.scrape_gaps(source, deployment, chart_from, chart_to)
    ig = collection.ingest_gaps(source, deployment, chart_from, chart_to)
    return Month(deployment, month, model_name, t_from, t_to, d_from, d_to, step, win, buckets, gauges, history,
                 PlanReads(engines, month_table, pair, running, daily), wi, q, no_trace, run_rows, prov, rows, topo,
                 sg, ig)
