"""What the TTFT what-if reads from DuckDB: the per-interval latency histograms a request's
overheads are measured from, the TTFT histogram it is calibrated on, and LMCache's L1 sizes.

* ``latency_intervals`` -- one ``models.cache.latency.LatencyInterval`` per vLLM target and
  scrape interval (named query ``latency_intervals``), each with how often its requests had the
  engine alone (from the prefill intervals' iteration-token histogram);
* the fitted prefill cost and the overheads are the deployment's history
  (``app.data.history.load_history``: read and fitted once per command);
* ``ttft_intervals`` -- today's TTFT histogram per vLLM target and scrape interval (count, sum,
  buckets): what ``models.cache.calibration`` bootstraps the alternatives' calibration over;
* ``l1_capacity_bytes`` -- each LMCache target's L1 size from its own gauges.

What the deployment measured over a window (hit rate, TTFT) is read off its loaded window
(``app.data.whatif.measured_of``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ...models.cache.calibration import MeasuredInterval
from ...models.cache.latency import LatencyInterval
from ...models.core.timeutil import aware_utc, naive_utc
from ...models.metrics import catalog as c
from ...models.prefill.interval import Interval
from ...sql.db import Source

NAMES = [c.count_name(c.TTFT), c.sum_name(c.TTFT), c.sum_name(c.QUEUE_TIME), c.sum_name(c.PREFILL_TIME),
         c.sum_name(c.PROMPT_LENGTH), c.sum_name(c.PREFILL_COMPUTED), c.sum_name(c.DECODE_TIME),
         c.count_name(c.DECODE_TIME), c.total_name(c.GENERATION_TOKENS), c.sum_name(c.LM_LOOKUP_DURATION),
         c.count_name(c.LM_LOOKUP_DURATION)]
"""Sample names the latency calibration reads."""


def _f(v: Any) -> float:
    return float(v) if v is not None else 0.0


def latency_intervals(db: Source, deployment: str, t_from: datetime, t_to: datetime,
                      model_name: str | None = None, *, prefill: Sequence[Interval]) -> list[LatencyInterval]:
    """One row per vLLM target and scrape interval with TTFT observations (module doc).
    ``prefill``: the prefill intervals of the same span, already read (the history's)."""
    rows = db.fetch("latency_intervals", deployment=deployment, t_from=naive_utc(t_from), t_to=naive_utc(t_to),
                    model_name=model_name, names=NAMES)
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
