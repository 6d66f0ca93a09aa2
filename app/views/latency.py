"""Latency page: TTFT/queue/prefill/decode/TPOT/ITL p50 and p99 with their buckets, TTFT and
TPOT SLO attainment."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ...models.metrics.slo import Slo, slo_attainment, tpot_slo_attainment
from ...models.metrics.spans import chart_step
from ...models.metrics.window import Quantile, latency_quantiles
from ...sql.db import Source
from ..data.points import latency_points
from ..data.store import load_pricebook
from ..data.window import TimeBucket, Window, load_window, load_window_and_buckets, window_buckets


@dataclass(frozen=True)
class LatencyView:
    window: Window
    slo: Slo
    """TTFT SLO attainment (``ttft_p99_slo_seconds``)."""
    tpot_slo: Slo
    """TPOT SLO attainment (``tpot_p99_slo_seconds``): share of requests at or under it."""
    quantiles: dict[str, Quantile | None]
    """'TTFT p50', 'TTFT p99', 'queue p50', ..., 'TPOT p99', 'ITL p99' over the window."""
    means: dict[str, float | None]
    """Mean seconds per latency (histogram _sum / _count)."""
    points: list[dict]
    """Rows: bucket, metric, quantile, value, lower, upper, in_inf."""
    warnings: list[str]
    """Quantiles whose rank landed in +Inf (no upper bound)."""
    step_s: int


def inf_warnings(qs: dict[str, Quantile | None], points: list[dict]) -> list[str]:
    """Sentences for quantiles (over the window, or in chart buckets) that landed in +Inf."""
    out = [f"{key} over the window lands in the +Inf bucket: it is above {q.lower:g} s with no upper bound "
           "(shown as that bound)." for key, q in qs.items() if q is not None and q.in_inf]
    in_inf: dict[str, list[datetime]] = {}
    for p in points:
        if p["in_inf"]:
            in_inf.setdefault(f"{p['metric']} {p['quantile']}", []).append(p["bucket"])
    out += [f"{key} lands in +Inf in {len(when)} of the chart's time buckets (first {when[0]:%Y-%m-%d %H:%M} UTC)."
            for key, when in in_inf.items()]
    return out


def latency_view(source: Source, deployment: str, t_from: datetime, t_to: datetime, step_s: int,
                 model_name: str | None = None,
                 slo_s: float | None = None, *, tpot_slo_s: float | None = None, prices: dict | None = None,
                 win: Window | None = None, buckets: list[TimeBucket] | None = None) -> LatencyView:
    """SLOs (TTFT ``slo_s``, TPOT ``tpot_slo_s``; None: the deployment's planning inputs)
    snapped to a bucket bound; ``win`` / ``buckets``: already loaded ones (the report shares
    them); ``prices``: the config's default price table."""
    if win is None and buckets is None:  # one scan of the raw edges for both
        win, buckets = load_window_and_buckets(source, deployment, t_from, t_to, step_s, model_name)
    win = win or load_window(source, deployment, t_from, t_to, model_name)
    if slo_s is None or tpot_slo_s is None:
        planning = load_pricebook(source, deployment, prices).planning
        slo_s = planning.ttft_p99_slo_seconds if slo_s is None else slo_s
        tpot_slo_s = planning.tpot_p99_slo_seconds if tpot_slo_s is None else tpot_slo_s
    if buckets is None:
        buckets = window_buckets(source, deployment, t_from, t_to, step_s, model_name)
    return latency_of(win, buckets, slo_s, tpot_slo_s, t_from, t_to, step_s)


def latency_of(win: Window, buckets: list[TimeBucket], slo_s: float, tpot_slo_s: float, t_from: datetime,
               t_to: datetime, step_s: int) -> LatencyView:
    """The Latency page of a loaded window and its buckets at the given SLOs: no read here."""
    qs, means = latency_quantiles(win.rows)
    points = latency_points(buckets)
    return LatencyView(win, slo_attainment(win.rows, slo_s), tpot_slo_attainment(win.rows, tpot_slo_s), qs, means,
                       points, inf_warnings(qs, points), chart_step(t_from, t_to, step_s))
