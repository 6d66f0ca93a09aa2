"""What the TTFT what-if reads from DuckDB: the per-interval latency histograms a request's
overheads are measured from, the prefill cost model fitted on the deployment's history, and
what the deployment measured over a window (LMCache's hit rate, the TTFT histogram).

* ``latency_intervals`` -- one ``models.cache.latency.LatencyInterval`` per vLLM target and
  scrape interval (named query ``latency_intervals``), each with how often its requests had the
  engine alone (from the prefill intervals' iteration-token histogram);
* the fitted prefill cost and the overheads are the deployment's history
  (``app.data.history.load_history``: read and fitted once per command);
* ``ttft_intervals`` -- today's TTFT histogram per vLLM target and scrape interval (count, sum,
  buckets): what ``models.cache.calibration`` bootstraps the alternatives' calibration over;
* ``measured`` -- the window's LMCache hit rate, TTFT mean / p50 / p99 (histogram, with the
  bucket bounds) and the vLLM engines that served requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ...models.cache.calibration import MeasuredInterval
from ...models.cache.latency import LatencyInterval
from ...models.core.timeutil import aware_utc, naive_utc
from ...models.metrics import catalog as c
from ...models.metrics import window as mw
from ...models.prefill.interval import Interval
from ...sql.db import Source
from .prefill import prefill_intervals
from .window import engines_in_window, load_window

NAMES = [c.count_name(c.TTFT), c.sum_name(c.TTFT), c.sum_name(c.QUEUE_TIME), c.sum_name(c.PREFILL_TIME),
         c.sum_name(c.PROMPT_LENGTH), c.sum_name(c.PREFILL_COMPUTED), c.sum_name(c.DECODE_TIME),
         c.count_name(c.DECODE_TIME), c.total_name(c.GENERATION_TOKENS), c.sum_name(c.LM_LOOKUP_DURATION),
         c.count_name(c.LM_LOOKUP_DURATION)]
"""Sample names the latency calibration reads."""


def _f(v: Any) -> float:
    return float(v) if v is not None else 0.0


def latency_intervals(db: Source, deployment: str, t_from: datetime, t_to: datetime,
                      model_name: str | None = None, *,
                      prefill: Sequence[Interval] | None = None) -> list[LatencyInterval]:
    """One row per vLLM target and scrape interval with TTFT observations (module doc).
    ``prefill``: the prefill intervals of the same span, when already read (the history's)."""
    rows = db.fetch("latency_intervals", deployment=deployment, t_from=naive_utc(t_from), t_to=naive_utc(t_to),
                    model_name=model_name, names=NAMES)
    if prefill is None:
        prefill = prefill_intervals(db, deployment, t_from, t_to, model_name)
    alone = {(iv.targets[0], round(iv.t_end, 3)): iv.alone_share() for iv in prefill if iv.requests > 0}
    out = []
    for r in rows:
        if not r["requests"] or r["reset"] or r["prefill_s"] is None or r["queue_s"] is None:
            continue
        cached = max(0.0, _f(r["prompt_tokens"]) - _f(r["computed_tokens"]))
        key = (r["target"], round(aware_utc(r["t_end"]).timestamp(), 3))
        out.append(LatencyInterval(
            requests=_f(r["requests"]), ttft_s=_f(r["ttft_s"]), queue_s=_f(r["queue_s"]),
            prefill_s=_f(r["prefill_s"]), cached_tokens=cached, decode_s=_f(r["decode_s"]),
            decode_tokens=max(0.0, _f(r["generation_tokens"]) - _f(r["decoded"])),
            generation_tokens=_f(r["generation_tokens"]), lookup_s=_f(r["lookup_s"]), lookups=_f(r["lookups"]),
            alone=alone.get(key, 0.0)))
    return out


def measured(db: Source, deployment: str, t_from: datetime, t_to: datetime,
             model_name: str | None = None) -> dict[str, Any]:
    """What the deployment measured over [t_from, t_to] (module doc)."""
    w = load_window(db, deployment, t_from, t_to, model_name)
    rows = list(w.rows)
    n = mw.total(rows, c.count_name(c.TTFT))
    s = mw.total(rows, c.sum_name(c.TTFT))
    st = w.stats
    buckets = mw.histogram_buckets(rows, c.TTFT)
    return {
        "hit_rate": st.lmcache_lookup_hit_rate, "requests": n,
        "ttft_mean_s": (s / n) if n and s is not None else None,  # no TTFT sum in the window: unknown
        "ttft_p50_s": st.ttft_p50_s, "ttft_p99_s": st.ttft_p99_s,
        "ttft_p99_bucket_s": ([st.ttft_p99.lower, st.ttft_p99.upper] if st.ttft_p99 is not None else None),
        "ttft_bounds": sorted({le for le, _ in buckets}),
        "engines": engines_in_window(db, deployment, naive_utc(t_from), naive_utc(t_to)),
    }


def l1_capacity_bytes(db: Source, deployment: str, t_from: datetime, t_to: datetime) -> dict[str, float]:
    """Each LMCache target's L1 size, bytes, as its own gauges give it (used / share used)."""
    rows = db.fetch("lmcache_l1_capacity", deployment=deployment, t_from=naive_utc(t_from), t_to=naive_utc(t_to))
    return {r["target"]: float(r["capacity_bytes"]) for r in rows if r["capacity_bytes"]}


def ttft_intervals(db: Source, deployment: str, t_from: datetime, t_to: datetime,
                   model_name: str | None = None) -> list[MeasuredInterval]:
    """Today's TTFT histogram per vLLM target and scrape interval over [t_from, t_to]: count, sum
    and cumulative buckets (module doc); an interval with a counter reset is left out, as in
    ``latency_intervals``."""
    names = [c.count_name(c.TTFT), c.sum_name(c.TTFT), c.bucket_name(c.TTFT)]
    rows = db.fetch("ttft_interval_buckets", deployment=deployment, t_from=naive_utc(t_from), t_to=naive_utc(t_to),
                    model_name=model_name, names=names)
    by: dict[tuple[str, Any], dict[str, Any]] = {}
    for r in rows:
        d = by.setdefault((r["target"], r["t_end"]), {"count": 0.0, "sum": 0.0, "buckets": {}, "reset": False})
        d["reset"] = d["reset"] or bool(r["reset"])
        if r["name"] == names[0]:
            d["count"] += _f(r["delta"])
        elif r["name"] == names[1]:
            d["sum"] += _f(r["delta"])
        elif r["le"] is not None:
            d["buckets"][float(r["le"])] = d["buckets"].get(float(r["le"]), 0.0) + _f(r["delta"])
    return [MeasuredInterval(aware_utc(t_end).timestamp(), d["count"], d["sum"], tuple(sorted(d["buckets"].items())))
            for (_, t_end), d in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0]))
            if d["count"] > 0 and not d["reset"]]
