"""What the CLI and the pages call: read a window from DuckDB, hand it to ``models``.

Each function opens the database read-only for as long as its queries take, so the
collector can write in between (see ``sql.db``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from collectors.store import utc_naive
from models.metrics import TTFT, Increase, WindowStats, bucket_quantile, ratio, window_stats
from sql.db import Database


def window_increases(db: Database, deployment: str, t_from: datetime, t_to: datetime,
                     model: str | None = None) -> list[Increase]:
    rows = db.fetch("window_increases", deployment=deployment, t_from=utc_naive(t_from),
                    t_to=utc_naive(t_to), model=model)
    return [Increase(**r) for r in rows]


def stats(db: Database, deployment: str, t_from: datetime, t_to: datetime,
          model: str | None = None) -> WindowStats:
    """The headline numbers of one deployment over [t_from, t_to]."""
    return window_stats(window_increases(db, deployment, t_from, t_to, model))


@dataclass(frozen=True)
class Point:
    """One time bucket of the overview chart."""

    bucket: datetime
    prefix_cache_hit_rate: float | None
    external_prefix_cache_hit_rate: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    ttft_p99_in_inf: bool
    requests: float | None


SERIES_NAMES = [
    "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
    "vllm:external_prefix_cache_hits_total", "vllm:external_prefix_cache_queries_total",
    f"{TTFT}_bucket", f"{TTFT}_count",
]


def timeseries(db: Database, deployment: str, t_from: datetime, t_to: datetime, step_s: int,
               model: str | None = None) -> list[Point]:
    """Hit rate and TTFT quantiles per time bucket of ``step_s`` seconds (each bucket's own
    increases summed, then divided: exact per bucket)."""
    rows = db.fetch("bucketed_increases", deployment=deployment, t_from=utc_naive(t_from),
                    t_to=utc_naive(t_to), model=model, step_s=int(step_s), names=SERIES_NAMES)
    by_bucket: dict[datetime, list[dict]] = {}
    for r in rows:
        by_bucket.setdefault(r["bucket"], []).append(r)
    out = []
    for bucket in sorted(by_bucket):
        rs = by_bucket[bucket]

        def tot(name: str) -> float | None:
            v = [r["increase"] for r in rs if r["name"] == name]
            return sum(v) if v else None

        buckets = [(r["le"], r["increase"]) for r in rs if r["name"] == f"{TTFT}_bucket"]
        p50 = bucket_quantile(0.5, buckets) if buckets else None
        p99 = bucket_quantile(0.99, buckets) if buckets else None
        out.append(Point(
            bucket=bucket,
            prefix_cache_hit_rate=ratio(tot("vllm:prefix_cache_hits_total"), tot("vllm:prefix_cache_queries_total")),
            external_prefix_cache_hit_rate=ratio(tot("vllm:external_prefix_cache_hits_total"),
                                                 tot("vllm:external_prefix_cache_queries_total")),
            ttft_p50_s=p50.value if p50 else None,
            ttft_p99_s=p99.value if p99 else None,
            ttft_p99_in_inf=bool(p99 and p99.in_inf),
            requests=tot(f"{TTFT}_count"),
        ))
    return out


def deployments(db: Database) -> list[dict]:
    return db.fetch("deployments")
