"""What the what-if reads (``kvplan.app.views.whatif`` computes on it, reading nothing): the
trace and the deployment's side of it, as one frozen ``WhatIfInputs``.

* the trace (``collectors.traces.ingest.load_trace``), in the query's window when its times are
  unix times (a Mooncake trace, whose times start at 0, is replayed whole, with a note);
* the history that prices it (``app.data.history``: the command's, else read for the trace's
  span), with its TTFT overheads when the TTFT half runs;
* the GPU-seconds one cached token saves over the trace's span (``seconds_per_token_from_metrics``:
  the plan's measurement of that span), unless the query gives them or asks for no dollars;
* for the TTFT half (``TopologyReads``): what the deployment measured over the span, each LMCache
  target's L1 size and the TTFT histogram per scrape interval.

``whatif_inputs`` reads them for any query (the page, ``kvplan whatif``, ``plan --topology``);
the report's month loader (``app.data.month``) reads the same for its month in one pass over
the data modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...collectors.traces.ingest import TraceInfo
from ...models.cache.calibration import MeasuredInterval
from ...models.cache.sim import Trace
from ...models.core.errors import KvplanError
from ...models.core.timeutil import from_epoch_s, month_start, next_month
from ...models.core.vocabulary import ROUTINGS, Routing
from ...models.prefill.savings import estimate_savings
from ...sql.db import Database, Snapshot, Source
from .history import History, load_history
from .latency import l1_capacity_bytes, ttft_intervals
from .plan import window_measurement
from .store import DeploymentSettings, Prices, load_pricebook
from .traces import load_trace_window, month_trace, topology_span, trace_span, trace_times, traces_of, unix_span
from .window import engines_in_window, load_window, measured_of

DEFAULT_RANKS = 8
DEFAULT_POINTS = 30
@dataclass(frozen=True)
class WhatIfQuery:
    """What to replay and how: ``kvplan whatif``'s options, the page's form, the report's month.
    Ranges are checked by ``views.whatif.check_options`` before anything runs."""

    trace: str | None = None
    """Trace name (None: the newest)."""
    model_name: str | None = None
    """Only this model_name's requests."""
    t_from: datetime | None = None
    """Window start: the trace's requests and the metrics in it (None: the whole trace)."""
    t_to: datetime | None = None
    """Window end."""
    ranks: int = DEFAULT_RANKS
    """Private caches compared with one shared pool."""
    routings: tuple[Routing, ...] = ROUTINGS
    """Routings of the private caches."""
    seed: int = 0
    """Seed of the random routing."""
    points: int = DEFAULT_POINTS
    """Capacities listed."""
    bytes_per_chunk: int | None = None
    """KV bytes of one chunk (None: the trace's)."""
    configured_gb: float | None = None
    """The cache size run today (None: the price book's ``cache_tier_gb_cpu``)."""
    capacity_gb: float | None = None
    """Total capacity compared shared vs private (None: the configured size)."""
    l2_gb: float | None = None
    """An L2 tier under the configured L1."""
    seconds_per_cached_token: float | None = None
    """GPU-seconds one cached token saves (None: from the deployment's metrics)."""
    tokens_per_month: float | None = None
    """Prompt tokens per month (None: the trace's own rate)."""
    latency: bool = True
    """Add today's topology and the TTFT what-if."""
    dollars: bool = True
    """Price the curve (False: a caller that prices on its own, ``kvplan plan --topology``, which reads
    only the TTFT finding, skips the trace span's prefill read)."""

    @classmethod
    def month(cls, month: str, **kw: Any) -> WhatIfQuery:
        """The query of one UTC month ('YYYY-MM'): the window every surface uses for a month."""
        t_from = month_start(month, "--month")
        return cls(t_from=t_from, t_to=next_month(t_from), **kw)


@dataclass(frozen=True)
class TopologyReads:
    """What the TTFT half reads about the deployment over the trace's span."""

    measured: dict[str, Any]
    """What it measured (``measured_of``)."""
    l1_bytes: dict[str, float]
    """Each LMCache target's L1 size, bytes (``latency.l1_capacity_bytes``)."""
    ttft: list[MeasuredInterval]
    """Today's TTFT histogram per target and scrape interval (``latency.ttft_intervals``); empty
    when no TTFT is predicted (no identified cost model)."""


@dataclass(frozen=True)
class WhatIfInputs:
    """Everything the what-if computes on (module doc)."""

    trace: Trace
    info: TraceInfo
    notes: tuple[str, ...]
    """What reading the trace had to say (a Mooncake trace's window)."""
    t0: float
    t1: float
    """The trace's first and last request time (its own unit)."""
    history: History | None
    """The history that prices it (with its overheads when the TTFT half runs); None: no unix span."""
    prices: Prices
    cfg: DeploymentSettings
    seconds_per_token: float | None
    """GPU-seconds one cached token saves over [t0, t1], from the metrics (None: not measurable,
    given by the query, or no dollars asked for)."""
    topology: TopologyReads | None
    """None when the TTFT half is not asked for or the trace's times are not unix times."""


def load_query_trace(source: Database | Snapshot, deployment: str,
                     q: WhatIfQuery) -> tuple[Trace, TraceInfo, list[str]]:
    """``traces.load_trace_window`` of the query's trace and window."""
    return load_trace_window(source, deployment, q.trace, q.model_name, q.t_from, q.t_to)


def month_trace_of(source: Source, deployment: str, month: str) -> str:
    """``traces.month_trace`` of the deployment's stored traces."""
    return month_trace(traces_of(source, deployment), deployment, month)


def seconds_per_token_from_metrics(source: Source, history: History, t0: float, t1: float) -> float | None:
    """``kvplan.models.prefill.savings``'s GPU-seconds per prompt token over [t0, t1] (unix), if measurable,
    from the same measurement the plan prices (``kvplan.app.data.plan.window_measurement``), with the
    history's cost model."""
    if not unix_span(t0, t1):
        return None
    a, b = from_epoch_s(t0), from_epoch_s(t1)
    try:
        m, _ = window_measurement(source, load_window(source, history.deployment, a, b), history)
        return estimate_savings(m).gpu_seconds_per_token
    except (KvplanError, ValueError):  # no metrics for that span: the what-if still runs without dollars
        return None


def topology_reads(source: Source, deployment: str, span: tuple[datetime, datetime],
                   history: History | None) -> TopologyReads:
    """``TopologyReads`` over ``span`` (the TTFT histogram only when a TTFT is predicted)."""
    a, b = span
    ttft = ttft_intervals(source, deployment, a, b) if history is not None and history.latency is not None else []
    win, engines = load_window(source, deployment, a, b), engines_in_window(source, deployment, a, b)
    return TopologyReads(measured_of(win, engines), l1_capacity_bytes(source, deployment, a, b), ttft)


def whatif_inputs(source: Database | Snapshot, deployment: str, q: WhatIfQuery, *,
                  cfg: DeploymentSettings = DeploymentSettings(), history: History | None = None) -> WhatIfInputs:
    """What the what-if of ``q`` reads (module doc). ``history``: the deployment's history the
    command already read (``kvplan plan --topology``); else it is read here, once, for the trace's
    span (its price book, cost model and overheads price both the dollars and the TTFT)."""
    tr, info, notes = load_query_trace(source, deployment, q)
    t0, t1 = trace_times(tr) or trace_span(source, info.trace_id)
    span = topology_span(tr, q.t_from, q.t_to)
    if history is None and span is not None and (q.latency or (q.seconds_per_cached_token is None
                                                               and unix_span(t0, t1))):
        history = load_history(source, deployment, span[1], t_from=span[0], cfg=cfg, overheads=q.latency)
    if history is not None and q.latency and span is not None:
        history = history.with_overheads(source)
    cfg = history.cfg if history is not None else cfg
    prices = history.prices if history is not None else load_pricebook(source, deployment, cfg.prices)
    spt = None
    if q.dollars and q.seconds_per_cached_token is None and history is not None:
        spt = seconds_per_token_from_metrics(source, history, t0, t1)
    reads = topology_reads(source, deployment, span, history) if q.latency and span is not None else None
    return WhatIfInputs(tr, info, tuple(notes), t0, t1, history, prices, cfg, spt, reads)
