"""What the prefill cost model reads from DuckDB: per-interval increases, the history it is
fitted on, the priced window, and measured A/B pairs.

* ``prefill_intervals`` -- one ``kvplan.models.prefill.fit.Interval`` per target and scrape interval
  (named query ``prefill_intervals``, macro ``interval_increments`` of migration 009);
* ``describe_history`` -- one line saying which history a fit used;
* ``measured_ab`` -- the latest measured A/B pair of a deployment (runs with ``reuse`` off/on
  and ``engine_seconds``), which overrides the model;
* ``plan_measurement`` -- all of it as one ``kvplan.models.prefill.savings.PrefillMeasurement`` for
  ``kvplan.models.decision.plan``: the window as the plan prices it (the span the data covers inside the range
  asked for, by cache tier) and the cost model fitted on every interval of a look-back ending at
  the window's end (the deployment's history, not only the window), saying which.

Each function opens the database read-only for as long as its query takes (``kvplan.sql.db``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ...models.core.timeutil import aware_utc, naive_utc
from ...models.inputs.deployment import DeploymentFacts
from ...models.metrics import catalog as c
from ...models.metrics.spans import plan_spans
from ...models.metrics.spellings import cached_rule
from ...models.prefill.fit import PrefillCostModel, fit_prefill_cost
from ...models.prefill.interval import Interval
from ...models.prefill.measurement import PrefillMeasurement, measurement_from_window
from ...models.prefill.window import MeasuredAB, PricedWindow
from ...sql.db import Source
from .window import rolled_days

DEFAULT_LOOKBACK = timedelta(days=7)
"""History the cost model is fitted on: the week before the priced window's end."""

NAMES = c.PREFILL_NAMES
"""Sample names the prefill cost model reads."""


def _epoch(ts: datetime) -> float:
    return aware_utc(ts).timestamp()


def prefill_intervals(db: Source, deployment: str, t_from: datetime, t_to: datetime,
                      model_name: str | None = None, *,
                      chunk_tokens: int = DeploymentFacts().lmcache_chunk_tokens) -> list[Interval]:
    """One row per target and scrape interval in [t_from, t_to]: vLLM targets with their
    prefill increases, LMCache targets with the tokens they stored (write chunks x
    ``chunk_tokens``). Whole UTC days the nightly job stored (``prefill_rollups``) are read from
    there, the edges from raw samples, split as the dashboard splits a window
    (``spans.plan_spans``: the same intervals as a raw read, for intervals under a day); one
    model's intervals are read raw."""
    rows = _rows(db, deployment, aware_utc(t_from), aware_utc(t_to), model_name)
    out: list[Interval] = []
    for r in rows:
        if r["t_start"] is None:
            continue
        buckets: dict[float, float] = {}
        for b in r["step_buckets"] or []:
            if b["le"] is not None:
                buckets[float(b["le"])] = buckets.get(float(b["le"]), 0.0) + float(b["n"])
        base: dict[str, Any] = dict(t_start=_epoch(r["t_start"]), t_end=_epoch(r["t_end"]),
                                    targets=(r["target"],), reset=bool(r["reset"]))
        if r["requests"] is None:
            chunks = r["lmcache_write_chunks"]
            if chunks is not None:
                out.append(Interval(stored_tokens=float(chunks) * chunk_tokens, **base))
            continue
        ext = r["external_tokens"]
        if ext is None and r["by_source_tokens"] is None and r["external_queries"] is not None:
            ext = 0.0  # a connector-less server exports external_* at 0 without by_source
        if ext is None and r["external_hits"] is None and r["lm_inproc_hits"] is not None:
            ext = r["lm_inproc_hits"]  # LMCache in-process without vLLM's external counters (0.11-style)
        computed, cached = _computed_and_cached(r)
        if computed is None:
            continue  # cached tokens unknown (see _computed_and_cached): such requests cannot be priced
        out.append(Interval(
            requests=float(r["requests"] or 0.0), prefill_seconds=float(r["prefill_seconds"] or 0.0),
            computed_tokens=computed,
            prompt_tokens=None if r["prompt_tokens"] is None else float(r["prompt_tokens"]),
            cached_tokens=cached,
            external_tokens=None if ext is None else float(ext),
            engines=max(int(r["engines"] or 0), 1),
            inference_seconds=None if r["inference_seconds"] is None else float(r["inference_seconds"]),
            lookup_seconds=None if r["lookup_seconds"] is None else float(r["lookup_seconds"]),
            lookups=None if r["lookups"] is None else float(r["lookups"]),
            generation_tokens=None if r["generation_tokens"] is None else float(r["generation_tokens"]),
            step_buckets=tuple(sorted(buckets.items())), **base))
    return out


def _rows(db: Source, deployment: str, t_from: datetime, t_to: datetime,
          model_name: str | None) -> list[dict[str, Any]]:
    days = [] if model_name is not None else rolled_days(db, deployment, t_from, t_to, "prefill_rolled_days")
    spans = plan_spans(days, t_from, t_to)
    rows: list[dict[str, Any]] = []
    for lb, after, end in spans.raw:
        rows += db.fetch("prefill_intervals", deployment=deployment, t_lookback=naive_utc(lb),
                         t_after=naive_utc(after), t_to=naive_utc(end), model_name=model_name, names=NAMES)
    if spans.rolled:
        rows += db.fetch("prefill_rollup_rows", deployment=deployment, d_from=spans.rolled[0],
                         d_to=spans.rolled[1])
        rows.sort(key=lambda r: (r["t_end"], r["target"]))
    return rows


def _computed_and_cached(r: dict) -> tuple[float | None, float | None]:
    """(computed prompt tokens, cached prompt tokens) of one interval row. Computed tokens are
    vLLM's ``request_prefill_kv_computed_tokens`` (0.13+); where a release lacks them they are
    prompt - cached, the cached tokens read by the rule ``stats`` uses
    (``models.metrics.spellings.cached_rule``); where neither is known the interval is left out
    (None): never prompt - 0, which made every prompt token "cached" (a hit rate of 1.0)."""
    by_source = None
    if r["by_source_tokens"] is not None:
        by_source = float(r["local_hit_tokens"] or 0.0) + float(r["external_tokens"] or 0.0)
    cached, _ = cached_rule(r["cached_tokens"], by_source, r["prefix_hits"], r["external_hits"],
                            r["lm_inproc_hits"])
    if r["computed_tokens"] is not None:
        return float(r["computed_tokens"]), None if cached is None else float(cached)
    if cached is None or r["prompt_tokens"] is None:
        return None, None
    return max(0.0, float(r["prompt_tokens"]) - float(cached)), float(cached)


def describe_history(deployment: str, intervals: list[Interval], t_from: datetime,
                     t_to: datetime) -> str:
    """One line saying which history a fit used."""
    busy = [r for r in intervals if r.requests > 0]
    req = sum(r.requests for r in busy)
    if not busy:
        return (f"{deployment!r}, {aware_utc(t_from):%Y-%m-%d %H:%M}..{aware_utc(t_to):%Y-%m-%d %H:%M} "
                "UTC: no interval with requests")
    first = min(r.t_start for r in busy)
    last = max(r.t_end for r in busy)
    fmt = "%Y-%m-%d %H:%M"
    return (f"{deployment!r} history {datetime.fromtimestamp(first, aware_utc(t_from).tzinfo):{fmt}}.."
            f"{datetime.fromtimestamp(last, aware_utc(t_from).tzinfo):{fmt}} UTC "
            f"({len(busy)} target-intervals with requests, {req:,.0f} requests; look-back "
            f"{(aware_utc(t_to) - aware_utc(t_from)).total_seconds() / 3600:g} h)")


def measured_ab(db: Source, deployment: str) -> MeasuredAB | None:
    """The latest A/B pair stored for ``deployment``: two runs with the same ``ab_pair``,
    ``reuse`` off and on, both with ``engine_seconds``. Cached tokens of the reuse-on run come
    from the clients' usage reports (``run_requests.cached_tokens``)."""
    rows = db.fetch("measured_ab_pairs", deployment=deployment)
    if not rows:
        return None
    r = rows[0]
    if r["on_cached_tokens"] is None:
        return None
    return MeasuredAB(
        label=(f"A/B pair {r['ab_pair']!r} (runs {r['off_run']} off, {r['on_run']} on, "
               f"{r['measured_on']})"),
        off_engine_seconds=float(r["off_engine_seconds"]), on_engine_seconds=float(r["on_engine_seconds"]),
        on_cached_tokens=float(r["on_cached_tokens"]), engine_seconds_source=r["source"] or "unspecified")


def plan_measurement(db: Source, deployment: str, t_from: datetime, t_to: datetime, *,
                     facts: DeploymentFacts | None = None, model_name: str | None = None,
                     lookback: timedelta = DEFAULT_LOOKBACK, stats: Any = None,
                     num_gpus: int | None = None, use_measured_ab: bool = True) -> PrefillMeasurement:
    """Everything ``kvplan.models.decision.plan`` needs about the prefill of [t_from, t_to]: the priced window
    (covered span), the cost model fitted on the look-back ending at ``t_to``, the deployment
    facts, and the latest measured A/B (which overrides the model). ``stats`` (the window's
    ``WindowStats``) adds vLLM's FLOP counter for estimator B. ``num_gpus`` (the fleet, e.g.
    ``kvplan plan --gpus``) overrides the engines seen: engines = num_gpus / GPUs per engine.
    One window on its own; the commands read the history once (``kvplan.app.data.history``) and
    price every window of the command with ``measurement_of``."""
    facts = facts or DeploymentFacts()
    history_from = min(aware_utc(t_from), aware_utc(t_to) - lookback)
    history = prefill_intervals(db, deployment, history_from, t_to, model_name, chunk_tokens=facts.lmcache_chunk_tokens)
    cost = fit_prefill_cost(history, history=describe_history(deployment, history, history_from, t_to))
    ab = measured_ab(db, deployment) if use_measured_ab else None
    return measurement_of(db, deployment, t_from, t_to, cost, facts=facts, model_name=model_name, stats=stats,
                          num_gpus=num_gpus, measured=ab, history=(history_from, t_to, history))


def measurement_of(db: Source, deployment: str, t_from: datetime, t_to: datetime, cost: PrefillCostModel, *,
                   facts: DeploymentFacts, model_name: str | None = None, stats: Any = None,
                   num_gpus: int | None = None, measured: MeasuredAB | None = None,
                   history: tuple[datetime, datetime, list[Interval]] | None = None) -> PrefillMeasurement:
    """The measurement of [t_from, t_to] priced with an already fitted ``cost`` model: the
    window's intervals are read here, unless ``history`` ((from, to, intervals) already read)
    spans exactly the window."""
    if history is not None and aware_utc(history[0]) == aware_utc(t_from) and aware_utc(history[1]) == aware_utc(t_to):
        ivs = history[2]  # a window as long as the look-back is read once: its intervals are the history's
    else:
        ivs = prefill_intervals(db, deployment, t_from, t_to, model_name, chunk_tokens=facts.lmcache_chunk_tokens)
    window = PricedWindow.from_intervals(ivs, t_from=_epoch(t_from), t_to=_epoch(t_to))
    engines = max(1, num_gpus // facts.gpus_per_engine) if num_gpus else None
    return measurement_from_window(window, cost, facts=facts, stats=stats, measured_ab=measured,
                                   engines=engines)
