"""What the CLI and the pages call: read a window from DuckDB, hand it to ``models``.

Each function opens the database read-only for as long as its queries take, so the
collector can write in between (see ``sql.db``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    """The headline numbers of one deployment over [t_from, t_to], with notes on what was
    left out and why a figure is missing."""
    check_model(db, deployment, model)
    rows = window_increases(db, deployment, t_from, t_to, model)
    st = window_stats(rows)
    st.notes += data_notes(db, deployment, t_from, t_to, model)
    if not rows:
        st.notes += why_empty(db, deployment, t_from, t_to, model)
    return st


def check_model(db: Database, deployment: str, model: str | None) -> None:
    """A ``--model`` the deployment's data does not have is an error naming the ones it has."""
    if model is None:
        return
    from models.errors import KvplanError

    known = [r["model_name"] for r in db.fetch("models", deployment=deployment)]
    if model not in known:
        raise KvplanError(f"no model {model!r} in deployment {deployment!r} (known: "
                          f"{', '.join(map(repr, known)) or 'none: no model_name label'})", source="--model")


def why_empty(db: Database, deployment: str, t_from: datetime, t_to: datetime, model: str | None = None) -> list[str]:
    """Why a window gave no increase at all, so every figure is null: no data in the window,
    one scrape per target, or a model not in the data."""
    from models.metrics import null_reasons

    per_target = db.fetch("scrape_count_in_window", deployment=deployment, t_from=utc_naive(t_from),
                          t_to=utc_naive(t_to))
    span = next((d for d in db.fetch("deployments") if d["deployment"] == deployment), None)
    models = [r["model_name"] for r in db.fetch("models", deployment=deployment)]
    return null_reasons({r["target"]: r["ok"] for r in per_target},
                        (span["first_scrape"], span["last_scrape"]) if span else None, model, models)


def data_notes(db: Database, deployment: str, t_from: datetime, t_to: datetime, model: str | None = None) -> list[str]:
    """Stored rows the analysis left out (bad_samples): reported, never raised."""
    rows = db.fetch("bad_samples", deployment=deployment, t_from=utc_naive(t_from), t_to=utc_naive(t_to), model=model)
    return [f"warning: {r['name']}: {r['n']} stored sample(s) not used ({r['bad_values']} impossible value(s), "
            f"{r['bad_created']} impossible _created time(s))" for r in rows]


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
        from collectors.config import configured_prices

        prices = configured_prices()
        if prices:
            return PriceBook.from_dict(prices), PlanningInputs(), "the config's [prices]"
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


def plan(db: Database, deployment: str, t_from: datetime, t_to: datetime, model: str | None = None, *,
         num_gpus: int | None = None, pricebook=None, planning=None):
    """The buy-vs-reuse plan of a measured window, as the dashboard computes it (rolled-up
    days plus raw edges; ``plan_window``). GPUs default to the vLLM engines seen in the
    window (one GPU each)."""
    check_model(db, deployment, model)
    result, _origin, _gpus = plan_window(db, load_window(db, deployment, t_from, t_to, model),
                                         pricebook=pricebook, planning=planning, num_gpus=num_gpus)
    return result


# == dashboard pages and the capacity report ================================================
# One function per page (``overview``, ``cache_view``, ``latency_view``, ``cost_view``,
# ``runs_view``, ``collection_view``) returning a plain dataclass the page renders; the
# report (``app.report``) reads the same ones. Long windows read whole UTC days from the
# nightly rollups (``daily_rollups``; gauges: ``gauge_rollups``) and only the partial days at
# their edges from raw samples (``load_window``), so a 90-day view costs about what a 2-day
# one does.

import dataclasses as _dc  # noqa: E402
import math as _math  # noqa: E402
from datetime import timedelta as _timedelta, timezone as _timezone  # noqa: E402

from models.metrics import Quantile, histogram_buckets  # noqa: E402

DAY = _timedelta(days=1)
EDGE_LOOKBACK = _timedelta(hours=6)
"""The longest scrape interval for which a rollup-backed window counts exactly the pairs a
raw one does: how far before a rolled-up run's end the raw tail looks for each series'
previous sample, and how far after the window start the run may begin at the earliest."""
DAILY_POINTS_FROM = _timedelta(days=3)
"""Charts over windows at least this long have one point per UTC day (from the rollups)."""

CHART_NAMES = [
    "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
    "vllm:external_prefix_cache_hits_total", "vllm:external_prefix_cache_queries_total",
    "vllm:prompt_tokens_total", "vllm:prompt_tokens_cached_total",
    "vllm:prompt_tokens_by_source_total", "vllm:prompt_tokens_cached_by_source_total",
    "lmcache_mp_lookup_requested_tokens_total", "lmcache_mp_lookup_hit_tokens_total",
    "lmcache_mp_lookup_hit_l1_tokens_total", "lmcache_mp_lookup_hit_l2_tokens_total",
    "lmcache:num_requested_tokens_total", "lmcache:num_hit_tokens_total",
] + [f"vllm:{h}_{s}" for h in ("time_to_first_token_seconds", "request_queue_time_seconds",
                               "request_prefill_time_seconds", "request_decode_time_seconds")
     for s in ("bucket", "count", "sum")]
"""Sample names the time charts read (summed per time bucket)."""

LATENCIES = {"TTFT": TTFT, "queue": "vllm:request_queue_time_seconds",
             "prefill": "vllm:request_prefill_time_seconds",
             "decode": "vllm:request_decode_time_seconds"}
"""Latency histograms the Latency page shows, by short name."""

GAUGES = {"lmcache_mp_l1_usage_ratio": "LMCache L1 usage", "vllm:kv_cache_usage_perc": "vLLM KV-cache usage"}
"""Gauges the Cache page charts."""


def _floor_day(ts: datetime) -> datetime:
    return ts.replace(hour=0, minute=0, second=0, microsecond=0)


def _ceil_day(ts: datetime) -> datetime:
    f = _floor_day(ts)
    return f if f == ts else f + DAY


def _as_dt(d) -> datetime:
    return d if isinstance(d, datetime) else datetime(d.year, d.month, d.day)


def _longest_run(days: list, lo: datetime, hi: datetime) -> tuple[datetime, datetime] | None:
    """The longest run of consecutive days in [lo, hi) as [start, end), or None."""
    best, start, prev = None, None, None
    for d in sorted(_as_dt(x) for x in days):
        if not lo <= d < hi:
            continue
        if prev is None or d != prev + DAY:
            start = d
        prev = d
        if best is None or (d + DAY - start) > (best[1] - best[0]):
            best = (start, d + DAY)
    return best


@dataclass(frozen=True)
class Spans:
    """How one window is read: ``rolled`` = whole days [start, end) from rollups, ``raw`` =
    (t_lookback, t_after, t_to) spans from raw samples (pairs whose later sample lies in
    (t_after, t_to] and earlier one at or after t_lookback)."""

    rolled: tuple[datetime, datetime] | None
    raw: tuple[tuple[datetime, datetime, datetime], ...]


def plan_spans(rolled_days: list, t_from: datetime, t_to: datetime) -> Spans:
    """Split [t_from, t_to] (UTC-naive) into raw edges and the longest run of rolled-up days.

    A rolled day counts the pair straddling its start (earlier sample the evening before);
    the window counts only pairs whose both samples lie inside it. So the run starts at least
    ``EDGE_LOOKBACK`` after ``t_from``: the straddling pair's earlier sample is then inside
    the window, for any scrape interval under ``EDGE_LOOKBACK``."""
    run = _longest_run(rolled_days, _ceil_day(t_from + EDGE_LOOKBACK), _floor_day(t_to))
    if run is None:
        return Spans(None, ((t_from, t_from, t_to),))
    a, b = run
    raw = []
    if a > t_from:
        raw.append((t_from, t_from, a))
    if t_to > b:
        raw.append((max(t_from, b - EDGE_LOOKBACK), b, t_to))
    return Spans(run, tuple(raw))


@dataclass(frozen=True)
class Window:
    """The increases of one deployment over [t_from, t_to] and what they say."""

    deployment: str
    model: str | None
    t_from: datetime
    t_to: datetime
    rows: tuple[Increase, ...]
    stats: WindowStats
    spans: Spans

    @property
    def seconds(self) -> float:
        return (self.t_to - self.t_from).total_seconds()

    @property
    def rolled_days(self) -> int:
        r = self.spans.rolled
        return 0 if r is None else (r[1] - r[0]).days

    @property
    def source_note(self) -> str:
        """Where the numbers were read from (shown under the charts and in the report)."""
        if not self.rolled_days:
            return "read from raw samples"
        a, b = self.spans.rolled
        return (f"{self.rolled_days} whole day(s) {a:%Y-%m-%d}..{b - DAY:%Y-%m-%d} from the nightly "
                "rollups, the partial days at the edges from raw samples")


def load_window(db: Database, deployment: str, t_from: datetime, t_to: datetime,
                model: str | None = None) -> Window:
    """Increases over [t_from, t_to]: whole rolled-up days from ``daily_rollups``, the
    edges from raw samples. For regular scrapes this counts exactly the pairs
    ``window_increases`` counts (a pair whose earlier sample lies more than
    ``EDGE_LOOKBACK`` before the last rolled day's end is the only difference)."""
    f, t = utc_naive(t_from), utc_naive(t_to)
    days = [r["day"] for r in db.fetch("dashboard_rolled_days", deployment=deployment,
                                       d_from=_ceil_day(f), d_to=_floor_day(t))]
    spans = plan_spans(days, f, t)
    rows: list[Increase] = []
    for lb, after, end in spans.raw:
        rows += [Increase(**r) for r in db.fetch("span_increases", deployment=deployment, t_lookback=lb,
                                                 t_after=after, t_to=end, model=model)]
    if spans.rolled:
        rows += [Increase(**r) for r in db.fetch("daily_increases", deployment=deployment,
                                                 t_from=spans.rolled[0], t_to=spans.rolled[1], model=model)]
    st = window_stats(rows)
    if not rows:
        st.notes += why_empty(db, deployment, t_from, t_to, model)
    for _lb, after, end in spans.raw:  # rolled-up days were summed by the same guarded macro
        st.notes += data_notes(db, deployment, after, end, model)
    return Window(deployment, model, t_from, t_to, tuple(rows), st, spans)


@dataclass(frozen=True)
class TimeBucket:
    """The summed increases of the chart names in one time bucket."""

    start: datetime
    rows: tuple[Increase, ...]

    def stats(self) -> WindowStats:
        return window_stats(list(self.rows))


def chart_step(t_from: datetime, t_to: datetime, step_s: int) -> int:
    """The chart resolution: one point per day over long windows, else ``step_s``."""
    return 86400 if t_to - t_from >= DAILY_POINTS_FROM else int(step_s)


def window_buckets(db: Database, deployment: str, t_from: datetime, t_to: datetime, step_s: int,
                   model: str | None = None, names: list[str] | None = None) -> list[TimeBucket]:
    """The chart names' increases per time bucket (start, start + step]. Windows of
    ``DAILY_POINTS_FROM`` or more get one bucket per UTC day, rolled-up days read from
    ``daily_rollups``; shorter ones are read from raw samples at ``step_s``."""
    f, t = utc_naive(t_from), utc_naive(t_to)
    names = names or CHART_NAMES
    step = chart_step(f, t, step_s)
    raw: list[dict] = []
    if step == 86400:
        days = [r["day"] for r in db.fetch("dashboard_rolled_days", deployment=deployment,
                                           d_from=_ceil_day(f), d_to=_floor_day(t))]
        spans = plan_spans(days, f, t)
        for lb, after, end in spans.raw:
            raw += db.fetch("span_buckets", deployment=deployment, t_lookback=lb, t_after=after, t_to=end,
                            model=model, step_s=step, origin=_floor_day(after), names=names)
        if spans.rolled:
            for r in db.fetch("daily_series", deployment=deployment, t_from=spans.rolled[0],
                              t_to=spans.rolled[1], model=model, names=names):
                r["bucket"] = _as_dt(r["day"])
                raw.append(r)
    else:
        raw = db.fetch("span_buckets", deployment=deployment, t_lookback=f, t_after=f, t_to=t,
                       model=model, step_s=step, origin=f, names=names)
    by: dict[datetime, list[Increase]] = {}
    for r in raw:
        by.setdefault(r["bucket"], []).append(Increase(name=r["name"], increase=r["increase"], le=r["le"],
                                                       labels=r["labels"]))
    return [TimeBucket(b, tuple(by[b])) for b in sorted(by)]


def gauge_points(db: Database, deployment: str, t_from: datetime, t_to: datetime, step_s: int,
                 model: str | None = None, names: list[str] | None = None) -> list[dict]:
    """Gauge mean / max / last per time bucket, target and series (daily from
    ``gauge_rollups`` over long windows, else raw samples)."""
    f, t = utc_naive(t_from), utc_naive(t_to)
    names = names or list(GAUGES)
    step = chart_step(f, t, step_s)
    end = t + _timedelta(microseconds=1)  # the last sample at t_to is inside the window
    if step != 86400:
        return db.fetch("span_gauges", deployment=deployment, t_from=f, t_to=end, model=model,
                        step_s=step, origin=f, names=names)
    days = [r["day"] for r in db.fetch("gauge_rolled_days", deployment=deployment,
                                       d_from=_ceil_day(f), d_to=_floor_day(t))]
    run = _longest_run(days, _ceil_day(f), _floor_day(t))
    parts = [(f, end)] if run is None else [(f, run[0]), (run[1], end)]
    out = []
    for a, b in parts:
        if b > a:
            out += db.fetch("span_gauges", deployment=deployment, t_from=a, t_to=b, model=model,
                            step_s=step, origin=_floor_day(a), names=names)
    if run:
        out += db.fetch("daily_gauges", deployment=deployment, d_from=run[0], d_to=run[1], model=model,
                        names=names)
    return sorted(out, key=lambda r: (r["bucket"], r["target"], r["name"], r["labels"], r["model_name"] or "",
                                      r["engine"] or ""))


def rollup_gauges_day(db: Database, deployment: str, day) -> int:
    """Summarise one UTC day of a deployment's gauges into ``gauge_rollups`` (replacing what
    was there). The nightly job calls it beside ``rollup_day``. Returns rows written."""
    d0 = _as_dt(day)
    with db.write() as con:
        row = Database.run(con, "get_deployment_id", name=deployment).fetchone()
        if row is None:
            raise ValueError(f"no deployment {deployment!r} in {db.path}")
        Database.run(con, "delete_gauge_rollups_day", deployment_id=row[0], day=d0)
        Database.run(con, "rollup_gauges_day", deployment_id=row[0], t_from=d0, t_to=d0 + DAY)
        return con.execute("SELECT count(*) FROM gauge_rollups WHERE deployment_id = ? AND day = ?",
                           [row[0], d0.date()]).fetchone()[0]


# -- deployments and the plan of a window ---------------------------------------------------
def dashboard_deployments(db: Database) -> list[dict]:
    """Deployments with data (direct scrapes or Prometheus chunks) and their data range."""
    return [d for d in db.fetch("dashboard_deployments") if d["last_ts"] is not None]


def engines_in_window(db: Database, deployment: str, t_from: datetime, t_to: datetime) -> int:
    """vLLM engines (target x engine) with data in the window, without reading raw samples."""
    return len(db.fetch("dashboard_engines", deployment=deployment, t_from=utc_naive(t_from),
                        t_to=utc_naive(t_to)))


def plan_window(db: Database, win: Window, *, pricebook=None, planning=None, num_gpus: int | None = None):
    """``plan`` for an already loaded window: (PlanResult, price-book origin, GPUs)."""
    from models.decision import PlanInputs
    from models.plan import plan as run_plan
    from models.prefill import measurement_from_stats

    saved_pb, saved_planning, origin = load_pricebook(db, win.deployment)
    pb, pl = pricebook or saved_pb, planning or saved_planning
    extra = [f"price book: {origin if pricebook is None else 'given'}", f"window {win.source_note}"]
    extra += [f"note: {n}" for n in win.stats.notes]
    if num_gpus is not None:
        from models.decision import check_gpus

        num_gpus = check_gpus(num_gpus, "--gpus")
    if num_gpus is None:
        num_gpus = engines_in_window(db, win.deployment, win.t_from, win.t_to)
        extra.append(f"GPUs = vLLM engines seen in the window ({num_gpus}), one GPU per engine")
    m = measurement_from_stats(win.stats, window_seconds=max(win.seconds, 1.0), num_gpus=max(num_gpus, 1))
    result = run_plan(PlanInputs(measurement=m, pricebook=pb, planning=pl),
                      label=f"{win.deployment} {win.t_from:%Y-%m-%d %H:%M}..{win.t_to:%Y-%m-%d %H:%M} UTC",
                      extra_assumptions=tuple(extra))
    return result, origin, num_gpus


# -- SLO attainment ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Slo:
    """Share of requests whose TTFT was at most the SLO, read off the histogram: only exact
    at a bucket bound, so the target is snapped to the nearest finite bound."""

    target_s: float
    """The p99 TTFT target of the planning inputs."""
    bound_s: float | None
    """The bucket bound used (None: no TTFT histogram in the window)."""
    share: float | None
    """Requests with TTFT <= bound_s / all requests (None: no requests)."""
    requests: float

    @property
    def snapped(self) -> bool:
        return self.bound_s is not None and not _math.isclose(self.bound_s, self.target_s)

    @property
    def note(self) -> str:
        if self.bound_s is None:
            return "no TTFT histogram in this window"
        if not self.snapped:
            return f"the {self.target_s:g} s SLO is a bucket bound: exact"
        return (f"SLO {self.target_s:g} s is not a bucket bound of vLLM's TTFT histogram; "
                f"snapped to the nearest bound, {self.bound_s:g} s")


def slo_attainment(rows, target_s: float, family: str = TTFT) -> Slo:
    merged: dict[float, float] = {}
    for le, c in histogram_buckets(rows, family):
        merged[le] = merged.get(le, 0.0) + c
    finite = sorted(le for le in merged if not _math.isinf(le))
    if not finite or _math.inf not in merged:
        return Slo(target_s, None, None, 0.0)
    bound = min(finite, key=lambda le: (abs(le - target_s), le))
    count = merged[_math.inf]
    return Slo(target_s, bound, merged[bound] / count if count > 0 else None, count)


# -- pages ------------------------------------------------------------------------------------
def tier_points(buckets: list[TimeBucket]) -> list[dict]:
    """Long rows (bucket, tier, hit_rate) of every tier reported in each bucket."""
    out = []
    for b in buckets:
        for tier in _tiers(b.stats(), list(b.rows)):
            if tier.hit_rate is not None:
                out.append({"bucket": b.start, "tier": tier.label, "hit_rate": tier.hit_rate})
    return out


def latency_points(buckets: list[TimeBucket]) -> list[dict]:
    """Rows (bucket, metric, quantile, value, lower, upper, in_inf) of every latency
    histogram's p50 and p99 in each bucket."""
    out = []
    for b in buckets:
        for key, q in _latency_quantiles(b.rows)[0].items():
            if q is not None and q.value is not None:
                metric, quant = key.split(" ")
                out.append({"bucket": b.start, "metric": metric, "quantile": quant, "value": q.value,
                            "lower": q.lower, "upper": q.upper, "in_inf": q.in_inf})
    return out


@dataclass(frozen=True)
class Overview:
    window: Window
    plan: object
    """models.plan.PlanResult of the window."""
    pricebook_origin: str
    gpus: int
    slo: Slo
    tier_points: list[dict] = field(default_factory=list)
    latency_points: list[dict] = field(default_factory=list)


def overview(db: Database, deployment: str, t_from: datetime, t_to: datetime,
             model: str | None = None, step_s: int | None = None, *, win: Window | None = None) -> Overview:
    """Overview page: the window's plan (monthly benefit, decision), hit rate, TTFT vs SLO;
    with ``step_s`` also the hit-rate and latency points over time. ``win``: the window,
    if already loaded (the report shares one across its sections)."""
    win = win or load_window(db, deployment, t_from, t_to, model)
    result, origin, gpus = plan_window(db, win)
    buckets = window_buckets(db, deployment, t_from, t_to, step_s, model) if step_s else []
    return Overview(win, result, origin, gpus,
                    slo_attainment(win.rows, result.inputs.planning.ttft_p99_slo_seconds),
                    tier_points(buckets), latency_points(buckets))


@dataclass(frozen=True)
class Tier:
    """One cache tier's token-weighted hit rate over the window."""

    key: str
    label: str
    hit_rate: float | None
    hits: float | None
    queries: float | None


def _tiers(s: WindowStats, rows) -> list[Tier]:
    from models.metrics import total

    req = total(rows, "lmcache_mp_lookup_requested_tokens_total")
    inproc = req is None and total(rows, "lmcache:num_requested_tokens_total") is not None
    lm = "LMCache (in-process)" if inproc else "LMCache MP"
    return [
        Tier("device", "vLLM prefix cache (device)", s.prefix_cache_hit_rate, s.prefix_cache_hits,
             s.prefix_cache_queries),
        Tier("external", "KV connector (external, e.g. LMCache)", s.external_prefix_cache_hit_rate,
             s.external_prefix_cache_hits, s.external_prefix_cache_queries),
        Tier("lmcache", f"{lm} lookup, L1+L2", s.lmcache_lookup_hit_rate,
             total(rows, "lmcache_mp_lookup_hit_tokens_total" if not inproc else "lmcache:num_hit_tokens_total"),
             req if not inproc else total(rows, "lmcache:num_requested_tokens_total")),
        Tier("l1", "LMCache MP L1 (CPU memory)", s.lmcache_l1_hit_rate,
             total(rows, "lmcache_mp_lookup_hit_l1_tokens_total"), req),
        Tier("l2", "LMCache MP L2 (disk / remote)", s.lmcache_l2_hit_rate,
             total(rows, "lmcache_mp_lookup_hit_l2_tokens_total"), req),
    ]


REQUEST_WEIGHTED_NOTE = (
    "Request-weighted hit rate (the share of requests with at least one cached token) is not in "
    "vLLM's or LMCache's metrics: their counters add tokens, not requests with a hit. The "
    "workload-driver runs record cached tokens per request; their shares are below.")


@dataclass(frozen=True)
class CacheView:
    window: Window
    tiers: list[Tier]
    tier_points: list[dict]
    """Long rows: bucket, tier, hit_rate (token-weighted per bucket)."""
    cached_points: list[dict]
    """Long rows: bucket, source, tokens (vllm:prompt_tokens_cached_by_source_total)."""
    gauge_points: list[dict]
    """Rows: bucket, series, gauge, mean, max (GAUGES)."""
    runs: list[dict]
    """Request-weighted shares of the workload runs."""
    step_s: int


def cache_view(db: Database, deployment: str, t_from: datetime, t_to: datetime, step_s: int,
               model: str | None = None, *, win: Window | None = None,
               buckets: list[TimeBucket] | None = None) -> CacheView:
    """Cache page: hit rate by tier (window and over time), cached tokens by tier, L1 usage.
    ``win`` / ``buckets``: already loaded ones (the report shares them)."""
    win = win or load_window(db, deployment, t_from, t_to, model)
    if buckets is None:
        buckets = window_buckets(db, deployment, t_from, t_to, step_s, model)
    cached_pts = [{"bucket": b.start, "source": src, "tokens": v}
                  for b in buckets for src, v in sorted(b.stats().cached_tokens_by_tier.items())]
    gauges = [{"bucket": g["bucket"], "gauge": GAUGES.get(g["name"], g["name"]),
               "series": _series_label(g), "mean": g["mean"], "max": g["max"], "last": g["last"]}
              for g in gauge_points(db, deployment, t_from, t_to, step_s, model)]
    return CacheView(win, _tiers(win.stats, win.rows), tier_points(buckets), cached_pts, gauges, runs_view(db, deployment).runs,
                     chart_step(utc_naive(t_from), utc_naive(t_to), step_s))


def _series_label(g: dict) -> str:
    import json

    labels = json.loads(g["labels"] or "{}")
    extra = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    eng = f" engine {g['engine']}" if g.get("engine") is not None else ""
    return f"{g['target']}{eng}" + (f" {{{extra}}}" if extra else "")


@dataclass(frozen=True)
class LatencyView:
    window: Window
    slo: Slo
    quantiles: dict[str, Quantile | None]
    """'TTFT p50', 'TTFT p99', 'queue p50', ... over the window."""
    means: dict[str, float | None]
    """Mean seconds per latency (histogram _sum / _count)."""
    points: list[dict]
    """Rows: bucket, metric, quantile, value, lower, upper, in_inf."""
    warnings: list[str]
    """Quantiles whose rank landed in +Inf (no upper bound)."""
    step_s: int


def _latency_quantiles(rows) -> tuple[dict, dict]:
    from models.metrics import total

    qs, means = {}, {}
    for short, fam in LATENCIES.items():
        buckets = histogram_buckets(rows, fam)
        for q in (0.5, 0.99):
            qs[f"{short} p{round(q * 100)}"] = bucket_quantile(q, buckets) if buckets else None
        means[short] = ratio(total(rows, f"{fam}_sum"), total(rows, f"{fam}_count"))
    return qs, means


def latency_view(db: Database, deployment: str, t_from: datetime, t_to: datetime, step_s: int,
                 model: str | None = None, slo_s: float | None = None, *, win: Window | None = None,
                 buckets: list[TimeBucket] | None = None) -> LatencyView:
    """Latency page: TTFT/queue/prefill/decode p50 and p99 with their bucket bounds, SLO
    attainment (SLO snapped to a bucket bound), +Inf warnings. ``win`` / ``buckets``:
    already loaded ones (the report shares them)."""
    win = win or load_window(db, deployment, t_from, t_to, model)
    if slo_s is None:
        slo_s = load_pricebook(db, deployment)[1].ttft_p99_slo_seconds
    qs, means = _latency_quantiles(win.rows)
    if buckets is None:
        buckets = window_buckets(db, deployment, t_from, t_to, step_s, model)
    points = latency_points(buckets)
    inf_buckets: dict[str, list[datetime]] = {}
    for p in points:
        if p["in_inf"]:
            inf_buckets.setdefault(f"{p['metric']} {p['quantile']}", []).append(p["bucket"])
    warnings = []
    for key, q in qs.items():
        if q is not None and q.in_inf:
            warnings.append(f"{key} over the window lands in the +Inf bucket: it is above {q.lower:g} s "
                            "with no upper bound (shown as that bound).")
    for key, when in inf_buckets.items():
        warnings.append(f"{key} lands in +Inf in {len(when)} of the chart's time buckets "
                        f"(first {when[0]:%Y-%m-%d %H:%M} UTC).")
    return LatencyView(win, slo_attainment(win.rows, slo_s), qs, means, points, warnings,
                       chart_step(utc_naive(t_from), utc_naive(t_to), step_s))


# -- cost & decision, price-book form -----------------------------------------------------------
@dataclass(frozen=True)
class CostView:
    overview: Overview
    pricebook: object
    """models.pricebook.PriceBook in use."""
    planning: object
    """models.decision.PlanningInputs in use."""
    schedule: list[dict]
    """Capacity projection: month, GPUs needed with and without reuse (None: unreachable)."""


def cost_view(db: Database, deployment: str, t_from: datetime, t_to: datetime,
              model: str | None = None) -> CostView:
    """Cost & decision page: the plan's waterfall, capacity schedule, sensitivity, price book."""
    ov = overview(db, deployment, t_from, t_to, model)
    return CostView(ov, ov.plan.inputs.pricebook, ov.plan.inputs.planning, capacity_schedule(ov.plan))


def capacity_schedule(plan) -> list[dict]:
    """A plan's capacity projection: month, load, GPUs needed with and without reuse."""
    cap = plan.evaluation.capacity
    return [] if cap is None else [
        {"month": r.month, "requests_per_second": r.requests_per_second,
         "with_reuse": r.gpus_needed_with_reuse, "without_reuse": r.gpus_needed_without_reuse}
        for r in cap.schedule]


PLANNING_UNITS = {"ttft_p99_slo_seconds": "s", "growth_rate_per_month": "1/month", "horizon_months": "months",
                  "current_gpus": "GPUs", "prefill_capacity_share": "0-1", "headroom_fill_fraction": "0-1",
                  "min_window_seconds": "s", "min_requests": "requests",
                  "min_benefit_share_of_fleet_cost": "0-1"}


def _attribute_docs(cls) -> dict[str, str]:
    """The docstring under each field of a dataclass (its help text)."""
    import ast
    import inspect
    import textwrap

    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    docs = {}
    for a, b in zip(body, body[1:]):
        if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
            docs[a.target.id] = " ".join(str(b.value.value).split())
    return docs


def planning_fields() -> tuple:
    """PlanningInputs as form fields (models.pricebook.FieldSpec), help from its docstrings."""
    from models.benefit import REALISATIONS
    from models.decision import PlanningInputs
    from models.pricebook import FieldSpec

    docs = _attribute_docs(PlanningInputs)
    out = []
    for f in _dc.fields(PlanningInputs):
        kind = {"float": "float", "int": "int", "str": "choice", "int | None": "optional_int"}[str(f.type)]
        out.append(FieldSpec(f.name, PLANNING_UNITS.get(f.name, ""), docs.get(f.name, ""), kind, f.default,
                             choices=tuple(REALISATIONS) if kind == "choice" else ()))
    return tuple(out)


def parse_planning(values: dict):
    """PlanningInputs from form values; ``ValueError`` naming the field when one is wrong."""
    from models.decision import PlanningInputs

    specs = {f.name: f for f in planning_fields()}
    clean = {}
    for name, v in values.items():
        spec = specs.get(name)
        if spec is None:
            raise ValueError(f"PlanningInputs: unknown field {name!r}")
        if spec.kind in ("int", "optional_int"):
            if v is None and spec.kind == "optional_int":
                clean[name] = None
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or float(v) != int(v):
                raise ValueError(f"PlanningInputs.{name}: expected a whole number, got {v!r}")
            v = int(v)
        elif spec.kind == "float":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not _math.isfinite(v):
                raise ValueError(f"PlanningInputs.{name}: expected a finite number, got {v!r}")
            v = float(v)
        clean[name] = v
    bounds = {"current_gpus": (0, None), "prefill_capacity_share": (0, 1), "headroom_fill_fraction": (0, 1),
              "min_window_seconds": (0, None), "min_requests": (0, None),
              "min_benefit_share_of_fleet_cost": (0, 1)}
    for name, (lo, hi) in bounds.items():
        v = clean.get(name)
        if v is None:
            continue
        low_ok = v > lo if name == "prefill_capacity_share" else v >= lo
        if not low_ok or (hi is not None and v > hi):
            rng = f"({lo}, {hi}]" if name == "prefill_capacity_share" else f"[{lo}, {hi if hi is not None else '∞'}]"
            raise ValueError(f"PlanningInputs.{name}: must be in {rng} {PLANNING_UNITS.get(name, '')}; got {v!r}")
    return PlanningInputs(**clean)


def save_price_form(db: Database, deployment: str, pricebook_values: dict, planning_values: dict):
    """Validate the price-book form (ValueError naming the field) and save it."""
    from models.pricebook import PriceBook

    pb = PriceBook.from_dict(pricebook_values)
    pl = parse_planning(planning_values)
    save_pricebook(db, deployment, pb, pl)
    return pb, pl


# -- runs -----------------------------------------------------------------------------------------
CPU_NOTE = ("CPU-scale: measured on a CPU stack with a tiny model; the milliseconds are not GPU "
            "results, only the ratios between runs carry over as a direction.")


@dataclass(frozen=True)
class RunsView:
    runs: list[dict]
    """run_summaries rows (newest first) plus requests_with_cache_share, cached_token_share,
    cpu_scale."""

    def default_pair(self) -> tuple[dict, dict] | None:
        """(baseline, candidate): the latest unique-sessions run against the latest
        shared-prefix one, else the two latest runs (older as baseline)."""
        if len(self.runs) < 2:
            return None
        uniq = [r for r in self.runs if r["scenario"] == "unique"]
        shared = [r for r in self.runs if r["scenario"] == "shared_prefix"]
        if uniq and shared:
            return uniq[0], shared[0]
        return self.runs[1], self.runs[0]


def runs_view(db: Database, deployment: str) -> RunsView:
    """Runs page: every workload-driver run with its request-weighted cache shares."""
    shares = {r["run_id"]: r for r in db.fetch("run_cache_shares", deployment=deployment)}
    out = []
    for r in db.fetch("run_summaries", deployment=deployment):
        s = shares.get(r["run_id"], {})
        out.append(dict(r, requests_with_cache_share=ratio(s.get("requests_with_cache"), s.get("requests_reporting")),
                        cached_token_share=ratio(s.get("cached_tokens"), s.get("prompt_tokens")),
                        cpu_scale="cpu" in (r["measured_on"] or "").lower()))
    return RunsView(out)


COMPARE = (  # key, label, unit, better: 'lower' (ratio = baseline / candidate) or 'higher'
    ("wall_s", "total time", "s", "lower"),
    ("ttft_p50_s", "TTFT p50", "s", "lower"),
    ("ttft_p99_s", "TTFT p99", "s", "lower"),
    ("tokens_per_s_p50", "tok/s p50 per user", "tok/s", "higher"),
    ("aggregate_tokens_per_s", "aggregate throughput", "tok/s", "higher"),
    ("requests_with_cache_share", "requests with cached tokens", "share", "higher"),
    ("failed", "failed requests", "requests", "lower"),
)


def compare_runs(baseline: dict, candidate: dict) -> list[dict]:
    """The article's side-by-side table: each metric for both runs and the improvement
    factor (baseline / candidate for times, candidate / baseline for rates)."""
    rows = []
    for key, label, unit, better in COMPARE:
        a, b = baseline.get(key), candidate.get(key)
        if better == "lower":
            factor = ratio(a, b) if b else None
        else:
            factor = ratio(b, a) if a else None
        rows.append({"metric": label, "unit": unit, "baseline": a, "candidate": b, "factor": factor,
                     "better": better})
    return rows


# -- collection -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CollectionView:
    targets: list[dict]
    """Targets with last scrape, scrape and error counts, last error."""
    recent_errors: list[dict]
    """Latest failed scrapes."""
    failed_scrapes: list[dict]
    """Failed scrapes inside the window (gaps of direct scraping)."""
    scheduler_runs: list[dict] | None
    """Collector daemon runs (None: the daemon's tables are not installed)."""
    gaps: list[dict] | None
    """Prometheus ingestion gaps in the window (None: not installed)."""
    nightly: list[dict] | None
    """Nightly runs per day (None: not installed)."""
    rolled_days: int
    """Days of the window the nightly rollups cover."""


def collection_available() -> bool:
    """Whether the collector daemon's queries (collector_runs, gaps) are installed."""
    from sql.db import queries

    return all(q in queries() for q in ("collector_runs", "ingest_gaps", "nightly_days"))


def collection_view(db: Database, deployment: str, t_from: datetime, t_to: datetime) -> CollectionView:
    """Collection page: targets, last scrape, errors, scheduler runs, gaps."""
    f, t = utc_naive(t_from), utc_naive(t_to)
    errors = db.fetch("recent_failed_scrapes", deployment=deployment, limit=20)
    failed = db.fetch("failed_scrapes_in_window", deployment=deployment, t_from=f, t_to=t)
    days = db.fetch("dashboard_rolled_days", deployment=deployment, d_from=_floor_day(f), d_to=_ceil_day(t) + DAY)
    runs = gaps = nightly = None
    if collection_available():
        runs = [r for r in db.fetch("collector_runs", limit=200) if r["deployment"] in (deployment, None)][:50]
        gaps = db.fetch("ingest_gaps", deployment=deployment, t_from=f, t_to=t)
        nightly = db.fetch("nightly_days")
    return CollectionView(db.fetch("targets", deployment=deployment), errors, failed, runs, gaps, nightly,
                          len(days))


# -- topology ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Topology:
    targets: list[dict]
    nodes: list[dict]
    """Per host: vLLM servers, engines, LMCache MP servers."""
    verdict: str
    """Shared or private caches, in one sentence (evaluation step 3)."""


def topology(db: Database, deployment: str, t_from: datetime, t_to: datetime) -> Topology:
    """Servers and engines per node (host of the target URL), shared or private caches."""
    from urllib.parse import urlsplit

    targets = db.fetch("dashboard_topology", deployment=deployment, t_from=utc_naive(t_from), t_to=utc_naive(t_to))
    nodes: dict[str, dict] = {}
    for r in targets:
        host = (urlsplit(r["url"]).hostname if r["url"] else None) or "unknown (imported payloads)"
        r["host"] = host
        n = nodes.setdefault(host, {"host": host, "vllm_servers": 0, "engines": 0, "lmcache_mp": 0,
                                    "lmcache_inproc": 0, "kv_connector": False})
        if r["kind"] == "vllm":
            n["vllm_servers"] += 1
            n["engines"] += r["engines"]
            n["kv_connector"] |= bool(r["kv_connector"])
        elif r["kind"] in ("lmcache_mp", "lmcache_inproc"):
            n[r["kind"]] += 1
    vllm = [r for r in targets if r["kind"] == "vllm"]
    engines = sum(r["engines"] for r in vllm)
    shared = sum(1 for r in targets if r["kind"] == "lmcache_mp")
    if not vllm:
        verdict = "No vLLM target in this deployment: topology unknown."
    elif shared:
        verdict = (f"Shared cache: {shared} LMCache multi-process server(s) serve {engines} vLLM engine(s) on "
                   f"{len(vllm)} server(s); a prefix computed by one engine can be reused by the others.")
    elif engines > 1:
        verdict = (f"Private caches: {engines} vLLM engine(s) on {len(vllm)} server(s) each keep their own "
                   "prefix cache; a turn routed to another engine recomputes its prefix. This is the "
                   "fragmentation a shared cache (LMCache multi-process) fixes.")
    else:
        verdict = ("One vLLM engine, private prefix cache: a shared cache adds little here beyond "
                   "capacity (more cache memory).")
    return Topology(targets, sorted(nodes.values(), key=lambda n: n["host"]), verdict)


# -- report windows --------------------------------------------------------------------------------
def month_window(db: Database, deployment: str, month: str) -> tuple[datetime, datetime]:
    """[first, last] data point of ``deployment`` inside the UTC month 'YYYY-MM'.
    ``ValueError`` when the month is malformed or holds no data (names what exists)."""
    try:
        start = datetime.strptime(month, "%Y-%m")
    except ValueError:
        raise ValueError(f"month {month!r}: expected YYYY-MM, e.g. 2026-11") from None
    end = _next_month(start)
    deps = {d["deployment"]: d for d in dashboard_deployments(db)}
    d = deps.get(deployment)
    if d is None:
        raise ValueError(f"no deployment {deployment!r} with data in {db.path} "
                         f"(known: {', '.join(sorted(deps)) or 'none'})")
    t_from, t_to = max(start, d["first_ts"]), min(end, d["last_ts"])
    if t_to <= t_from:
        raise ValueError(f"deployment {deployment!r} has no data in {month} (data: "
                         f"{d['first_ts']:%Y-%m-%d %H:%M} .. {d['last_ts']:%Y-%m-%d %H:%M} UTC)")
    return t_from.replace(tzinfo=_timezone.utc), t_to.replace(tzinfo=_timezone.utc)


def data_months(db: Database, deployment: str) -> list[str]:
    """'YYYY-MM' of every month holding data of the deployment, newest first."""
    d = next((x for x in dashboard_deployments(db) if x["deployment"] == deployment), None)
    if d is None:
        return []
    out, m = [], datetime(d["first_ts"].year, d["first_ts"].month, 1)
    while m <= d["last_ts"]:
        out.append(f"{m:%Y-%m}")
        m = _next_month(m)
    return out[::-1]


def _next_month(m: datetime) -> datetime:
    """Midnight of the first day of the month after ``m``'s."""
    return datetime(m.year + m.month // 12, m.month % 12 + 1, 1)
