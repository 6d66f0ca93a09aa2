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


# -- price book and plan ---------------------------------------------------------------

def load_pricebook(db: Database, deployment: str):
    """(PriceBook, PlanningInputs, where they came from): the deployment's saved ones, the
    saved default ('*'), or the documented defaults."""
    import json

    from models.decision import PlanningInputs
    from models.pricebook import PriceBook

    rows = db.fetch("get_pricebook", deployment=deployment)
    if not rows:
        return PriceBook(), PlanningInputs(), "defaults"
    r = rows[0]
    return (PriceBook.from_dict(json.loads(r["pricebook"])), PlanningInputs(**json.loads(r["planning"])),
            f"saved for {r['deployment']!r} at {r['updated_at']:%Y-%m-%d %H:%M} UTC")


def save_pricebook(db: Database, deployment: str, pricebook, planning) -> None:
    import dataclasses
    import json

    with db.write() as con:
        Database.run(con, "put_pricebook", deployment=deployment, pricebook=json.dumps(pricebook.to_dict()),
                     planning=json.dumps(dataclasses.asdict(planning)))


def engine_count(db: Database, deployment: str, t_from: datetime, t_to: datetime) -> int:
    return len(db.fetch("engines", deployment=deployment, t_from=utc_naive(t_from), t_to=utc_naive(t_to)))


def plan(db: Database, deployment: str, t_from: datetime, t_to: datetime, model: str | None = None, *,
         num_gpus: int | None = None, pricebook=None, planning=None, assumptions: dict | None = None):
    """The buy-vs-reuse plan of a measured window (``models.plan.plan`` on this window's
    stats). GPUs default to the vLLM engines seen in the window (one GPU each)."""
    from models.decision import PlanInputs
    from models.plan import plan as run_plan
    from models.prefill import measurement_from_stats

    st = stats(db, deployment, t_from, t_to, model)
    saved_pb, saved_planning, origin = load_pricebook(db, deployment)
    pb = pricebook or saved_pb
    pl = planning or saved_planning
    extra = [f"price book: {origin if pricebook is None else 'given'}"]
    if num_gpus is None:
        num_gpus = engine_count(db, deployment, t_from, t_to)
        extra.append(f"GPUs = vLLM engines seen in the window ({num_gpus}), one GPU per engine")
    m = measurement_from_stats(st, window_seconds=(t_to - t_from).total_seconds(), num_gpus=max(num_gpus, 1),
                               **(assumptions or {}))
    return run_plan(PlanInputs(measurement=m, pricebook=pb, planning=pl),
                    label=f"{deployment} {t_from:%Y-%m-%d %H:%M}..{t_to:%Y-%m-%d %H:%M} UTC",
                    extra_assumptions=tuple(extra))
