"""Cache page: hit rate by tier (window and over time), cached tokens by tier, cache usage."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from ...models.metrics.catalog import GAUGE_LABELS
from ...models.metrics.spans import chart_step
from ...models.metrics.tiers import Tier, tiers
from ...sql.db import Source
from ..data.points import tier_points
from ..data.runs import runs_view
from ..data.window import (
    TimeBucket,
    Window,
    gauge_points,
    load_window,
    load_window_and_buckets,
    window_buckets,
)

REQUEST_WEIGHTED_NOTE = (
    "Request-weighted hit rate (the share of requests with at least one cached token) is not in "
    "vLLM's or LMCache's metrics: their counters add tokens, not requests with a hit. The "
    "workload-driver runs record cached tokens per request; their shares are below.")


@dataclass(frozen=True)
class CacheView:
    window: Window
    tiers: list[Tier]
    tier_points: list[dict]
    """Long rows: bucket, tier, key, hit_rate (token-weighted per bucket)."""
    cached_points: list[dict]
    """Long rows: bucket, source, tokens (vllm:prompt_tokens_cached_by_source_total)."""
    gauge_points: list[dict]
    """Rows: bucket, name (the gauge family), gauge (its label), series, mean, max, last."""
    runs: list[dict]
    """Request-weighted shares of the workload runs."""
    step_s: int


def series_label(g: dict) -> str:
    """A gauge series as people read it: target, engine, other labels."""
    labels = json.loads(g["labels"] or "{}")
    extra = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    eng = f" engine {g['engine']}" if g.get("engine") is not None else ""
    return f"{g['target']}{eng}" + (f" {{{extra}}}" if extra else "")


def cache_view(source: Source, deployment: str, t_from: datetime, t_to: datetime, step_s: int,
               model_name: str | None = None, *,
               win: Window | None = None, buckets: list[TimeBucket] | None = None) -> CacheView:
    """``win`` / ``buckets``: already loaded ones (the report shares them)."""
    if win is None and buckets is None:  # one scan of the raw edges for both
        win, buckets = load_window_and_buckets(source, deployment, t_from, t_to, step_s, model_name)
    win = win or load_window(source, deployment, t_from, t_to, model_name)
    if buckets is None:
        buckets = window_buckets(source, deployment, t_from, t_to, step_s, model_name)
    return cache_of(win, buckets, gauge_points(source, deployment, t_from, t_to, step_s, model_name),
                    runs_view(source, deployment).runs, t_from, t_to, step_s)


def cache_of(win: Window, buckets: list[TimeBucket], gauge_rows: list[dict], runs: list[dict], t_from: datetime,
             t_to: datetime, step_s: int) -> CacheView:
    """The Cache page of what it reads (the window, its buckets, the gauge points over [t_from,
    t_to], the workload runs): no read here."""
    cached_pts = [{"bucket": b.start, "source": src, "tokens": v}
                  for b in buckets for src, v in sorted(b.stats().cached_tokens_by_tier.items())]
    gauges = [{"bucket": g["bucket"], "name": g["name"], "gauge": GAUGE_LABELS.get(g["name"], g["name"]),
               "series": series_label(g), "mean": g["mean"], "max": g["max"], "last": g["last"]}
              for g in gauge_rows]
    return CacheView(win, tiers(win.stats, list(win.rows)), tier_points(buckets), cached_pts, gauges,
                     runs, chart_step(t_from, t_to, step_s))
