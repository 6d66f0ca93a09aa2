"""Chart rows of a window's time buckets: each tier's hit rate and each latency histogram's
p50 / p99 per bucket (the Overview, Cache and Latency pages and the report draw them)."""

from __future__ import annotations

from ...models.metrics.tiers import tiers
from ...models.metrics.window import latency_quantiles
from .window import TimeBucket


def tier_points(buckets: list[TimeBucket]) -> list[dict]:
    """Long rows (bucket, tier, key, hit_rate) of every tier reported in each bucket."""
    out = []
    for b in buckets:
        for tier in tiers(b.stats(), list(b.rows)):
            if tier.hit_rate is not None:
                out.append({"bucket": b.start, "tier": tier.label, "key": tier.key, "hit_rate": tier.hit_rate})
    return out


def latency_points(buckets: list[TimeBucket]) -> list[dict]:
    """Rows (bucket, metric, quantile, value, lower, upper, in_inf) of every latency
    histogram's p50 and p99 in each bucket."""
    out = []
    for b in buckets:
        for key, q in latency_quantiles(b.rows)[0].items():
            if q is not None and q.value is not None:
                metric, quant = key.split(" ")
                out.append({"bucket": b.start, "metric": metric, "quantile": quant, "value": q.value,
                            "lower": q.lower, "upper": q.upper, "in_inf": q.in_inf})
    return out
