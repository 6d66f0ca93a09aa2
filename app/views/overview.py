"""Overview page, and the plan of a window every other view shares."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from ...models.cache.alternatives import TopologyFinding
from ...models.capacity.growth import MIN_TREND_DAYS, measured_growth
from ...models.decision.plan import PlanResult
from ...models.decision.plan import plan as run_plan
from ...models.decision.verdict import PlanInputs
from ...models.inputs.planning import PlanningInputs
from ...models.inputs.pricebook import PriceBook
from ...models.metrics.slo import Slo, slo_attainment
from ...models.metrics.tiers import tiers
from ...models.metrics.window import latency_quantiles
from ...models.prefill.measurement import PrefillMeasurement
from ...sql.db import Source
from ..data.prefill import plan_measurement
from ..data.store import (
    DeploymentSettings,
    Facts,
    Fleet,
    Prices,
    deployments_with_data,
    fleet,
    load_facts,
    load_pricebook,
)
from ..data.sweeps import SweepPair, latest_sweep_pair
from ..data.window import (
    TimeBucket,
    Window,
    daily_requests,
    engines_in_window,
    load_window,
    load_window_and_buckets,
    peak_running_per_engine,
    window_buckets,
)


@dataclass(frozen=True)
class PlannedWindow:
    plan: PlanResult
    prices: Prices
    fleet: Fleet
    facts: Facts
    sweep: SweepPair | None = None
    """The newest load-sweep pair the plan was sized from (None: the queueing fallback)."""


def window_measurement(source: Source, win: Window, cfg: DeploymentSettings = DeploymentSettings(), *,
                       gpus: int | None = None) -> tuple[PrefillMeasurement, Fleet, Facts]:
    """The prefill model's input for a loaded window (``kvplan.app.data.prefill.plan_measurement``: the
    covered span, the cost model fitted on the deployment's history, the latest measured A/B),
    with the deployment facts (``load_facts``) and the fleet by ``kvplan.app.data.store.fleet`` (the
    one GPU-count rule): what the plan and the what-if's dollars both price."""
    facts = load_facts(source, win.deployment, cfg)
    fl = fleet(engines_in_window(source, win.deployment, win.t_from, win.t_to), configured_gpus=cfg.configured_gpus,
               gpus_per_engine=facts.facts.gpus_per_engine, override=gpus, config_key=cfg.config_key)
    m = plan_measurement(source, win.deployment, win.t_from, win.t_to, facts=facts.facts, model_name=win.model_name,
                         stats=win.stats, num_gpus=max(fl.gpus, 1))
    return m, fl, facts


def plan_window(source: Source, win: Window, cfg: DeploymentSettings = DeploymentSettings(), *,
                pricebook: PriceBook | None = None, planning: PlanningInputs | None = None,
                gpus: int | None = None, topology: TopologyFinding | None = None) -> PlannedWindow:
    """The buy-vs-reuse plan of a loaded window: the saved (or config, or default) prices
    unless given, the fleet by ``kvplan.app.data.store.fleet``. CLI, pages and report all call this."""
    prices = load_pricebook(source, win.deployment, cfg.prices)
    pb, pl = pricebook or prices.pricebook, planning or prices.planning
    pl, growth = _growth(source, win, pl)
    m, fl, facts = window_measurement(source, win, cfg, gpus=gpus)
    extra = (f"price book: {prices.origin if pricebook is None else 'given'}", f"window {win.source_note}",
             f"GPUs: {fl.gpus}, {fl.origin}", f"deployment facts: {facts.origin}", f"growth: {growth}",
             *(f"note: {n}" for n in win.stats.notes))
    pair = latest_sweep_pair(source, win.deployment)
    goodput = pair.goodput(pl.ttft_p99_slo_seconds, pl.tpot_p99_slo_seconds).goodput if pair is not None else None
    peak = m.window.peak_hour_requests_per_s if m.window is not None else None
    running = peak_running_per_engine(source, win.deployment, win.t_from, win.t_to, win.model_name)
    result = run_plan(PlanInputs(measurement=m, pricebook=pb, planning=pl, facts=facts.facts,
                                 goodput=goodput, peak_hour_requests_per_s=peak, concurrency_per_replica=running,
                                 topology=topology),
                      label=f"{win.deployment} {win.t_from:%Y-%m-%d %H:%M}..{win.t_to:%Y-%m-%d %H:%M} UTC",
                      extra_assumptions=extra)
    return PlannedWindow(result, prices, fl, facts, pair)


def _growth(source: Source, win: Window, pl: PlanningInputs) -> tuple[PlanningInputs, str]:
    """The planning inputs with the measured growth trend when ``growth_source`` asks for it
    (and the data holds one), and a note saying which growth the plan used."""
    typed = f"{pl.growth_rate_per_month:+.1%}/month from the planning inputs"
    if pl.growth_source != "measured_trend":
        return pl, typed
    first = next((d["first_ts"] for d in deployments_with_data(source) if d["deployment"] == win.deployment), None)
    trend = measured_growth(daily_requests(source, win.deployment, first, win.t_to, win.model_name)) if first else None
    if trend is None:
        return pl, f"{typed} (no measured trend: it needs {MIN_TREND_DAYS} whole days with requests)"
    return replace(pl, growth_rate_per_month=trend.rate_per_month), trend.note


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


@dataclass(frozen=True)
class Overview:
    window: Window
    plan: PlanResult
    pricebook_origin: str
    gpus: int
    gpus_origin: str
    slo: Slo
    facts: Facts | None = None
    """The deployment facts in force and where they came from."""
    sweep: SweepPair | None = None
    """The newest load-sweep pair the plan was sized from."""
    tier_points: list[dict] = field(default_factory=list)
    latency_points: list[dict] = field(default_factory=list)


def overview(source: Source, deployment: str, t_from: datetime, t_to: datetime, model_name: str | None = None,
             step_s: int | None = None, *, cfg: DeploymentSettings = DeploymentSettings(),
             win: Window | None = None) -> Overview:
    """Overview page: the window's plan (monthly benefit, decision), hit rate, TTFT vs SLO;
    with ``step_s`` also the hit-rate and latency points over time. ``win``: the window,
    if already loaded (the report shares one across its sections)."""
    if win is None and step_s:  # one scan of the raw edges for both
        win, buckets = load_window_and_buckets(source, deployment, t_from, t_to, step_s, model_name)
    else:
        win = win or load_window(source, deployment, t_from, t_to, model_name)
        buckets = window_buckets(source, deployment, t_from, t_to, step_s, model_name) if step_s else []
    pw = plan_window(source, win, cfg)
    return Overview(win, pw.plan, pw.prices.origin, pw.fleet.gpus, pw.fleet.origin,
                    slo_attainment(win.rows, pw.plan.inputs.planning.ttft_p99_slo_seconds), pw.facts,
                    pw.sweep, tier_points(buckets), latency_points(buckets))


def plan_range(source: Source, deployment: str, t_from: datetime, t_to: datetime, model_name: str | None = None, *,
               cfg: DeploymentSettings = DeploymentSettings(), gpus: int | None = None,
               topology: TopologyFinding | None = None) -> PlanResult:
    """``kvplan plan``: the plan of [t_from, t_to] read as the pages read it (with the TTFT
    what-if's ``topology`` finding when given)."""
    from ..data.window import check_model

    check_model(source, deployment, model_name)
    return plan_window(source, load_window(source, deployment, t_from, t_to, model_name), cfg, gpus=gpus,
                       topology=topology).plan
